"""Deprecated: `labkit.parallel_dims` is now `labkit.nd.layout` (the parallel grid). This name is
the same module, warns once, and goes in the next release."""
import sys
import warnings

from labkit.nd import layout

warnings.warn("labkit.parallel_dims is now labkit.nd.layout; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = layout
