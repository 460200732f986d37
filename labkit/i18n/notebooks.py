"""Deprecated: `labkit.i18n.notebooks` is now `labkit.course.translate` (a course-building tool).
This name is the same module, warns once, and goes in the next release."""
import sys
import warnings

from labkit.course import translate

warnings.warn("labkit.i18n.notebooks is now labkit.course.translate; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = translate
