"""The one line a checker prints, as the checker tests read it (tests of labkit.check).

A checker prints one verdict line that starts with its name (``ring_all_reduce: pass (...)`` or
``...: FAIL (...)``) and returns True or False; the learner reads that line, not a traceback.
"""
import time

import labkit.check


def checker_line(capsys, name: str, *answer, **kw):
    """Run ``labkit.check.<name>(*answer, **kw)`` as a learner's cell does and return
    ``(ok, line, seconds)``: what it returned, the one line it printed that starts with
    ``"<name>:"`` (the test fails when there is none or more than one) and the seconds it took."""
    t0 = time.perf_counter()
    ok = getattr(labkit.check, name)(*answer, **kw)
    took = time.perf_counter() - t0
    out = capsys.readouterr().out.strip().splitlines()
    lines = [ln for ln in out if ln.startswith(f"{name}:")]
    assert len(lines) == 1, out
    return ok, lines[0], took
