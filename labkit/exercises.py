"""`python -m labkit.exercises build ...`: the command that writes the learner copies (scripts/lab,
scripts/test, the hub's start script and docs/teaching.md name it, and nbgrader_config.py its
STUB). The code is labkit.course.exercises; imported, this module is that module itself."""
import sys

from labkit.course import exercises as _exercises

if __name__ == "__main__":
    sys.exit(_exercises.main())
sys.modules[__name__] = _exercises
