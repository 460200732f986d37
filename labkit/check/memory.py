"""Checkers for notebook 01 (memory). Pure arithmetic: no cluster needed."""
import random

from labkit.check.core import report

__all__ = ["mixed_adam_bytes"]

CATEGORIES = ("params", "grads", "master", "momentum", "variance")
# sizes from one parameter up to a trillion: GPT-2 small, TinyGPT, 7B, 70B, GPT-3, 1T, odd ones
SIZES = [1, 7, 1000, 124_439_808, 29_545_472, 7e9, 70e9, 175e9, 1e12] + \
    [random.Random(k).randrange(1, 10 ** 12) for k in range(16)]

_STUB = ("mixed_adam_bytes: not implemented yet (replace the `raise NotImplementedError` line "
         "with your code, then run this cell again)")


def mixed_adam_bytes(fn) -> bool:
    """fn(n_params) must return {'params', 'grads', 'master', 'momentum', 'variance': bytes} for
    mixed-precision Adam on one GPU (no ZeRO), as labkit.memory.model_states computes it."""
    from labkit.memory import model_states
    for n in SIZES:
        want = model_states(n, precision="mixed", optimizer="adam")
        try:
            got = fn(n)
        except NotImplementedError:
            print(_STUB)
            return False
        except Exception as exc:       # noqa: BLE001 - a checker never raises at the learner
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: raised {type(exc).__name__}: {exc}")
        if not isinstance(got, dict):
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: returned {type(got).__name__}; return a dict with keys "
                          + ", ".join(CATEGORIES))
        missing = [c for c in CATEGORIES if c not in got]
        if missing:
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: the dict has no {', '.join(missing)}")
        for c in CATEGORIES:
            w = getattr(want, c)
            try:
                ok = abs(float(got[c]) - w) <= 1e-9 * w
            except (TypeError, ValueError):
                ok = False
            if not ok:
                return report("mixed_adam_bytes", False,
                              f"n_params={n:g}: {c} is {got[c]!r} bytes, expected {w:g} "
                              f"({w / n:g} bytes per parameter)")
    return report("mixed_adam_bytes", True,
                  f"{len(SIZES)} sizes from 1 to {max(SIZES):.0e} parameters, 5 categories each")
