"""Deprecated: `labkit.models` is now `labkit.toy_models` (the course's toy nets and their data).
This name is the same module, warns once, and goes in the next release."""
import sys
import warnings

from labkit import toy_models

warnings.warn("labkit.models is now labkit.toy_models; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = toy_models
