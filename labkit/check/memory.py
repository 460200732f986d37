"""Checkers for notebook 01 (memory). Pure arithmetic: no cluster needed."""
import random

from labkit.check.core import not_implemented, report
from labkit.i18n import N_, tr

__all__ = ["mixed_adam_bytes"]

CATEGORIES = (N_("params"), N_("grads"), N_("master"), N_("momentum"), N_("variance"))
# sizes from one parameter up to a trillion: GPT-2 small, TinyGPT, 7B, 70B, GPT-3, 1T, odd ones
SIZES = [1, 7, 1000, 124_439_808, 29_545_472, 7e9, 70e9, 175e9, 1e12] + \
    [random.Random(k).randrange(1, 10 ** 12) for k in range(16)]



# bytes per parameter of each category in mixed precision (bf16/fp16 working copy, fp32 rest)
_WHY = {"params": N_("the working copy of the weights is fp16/bf16 in mixed precision: 2 bytes"),
        "grads": N_("gradients are computed in fp16/bf16, like the weights they belong to: 2 bytes"),
        "master": N_("the optimizer's master copy of the weights is fp32: 4 bytes"),
        "momentum": N_("Adam's first moment is kept in fp32: 4 bytes"),
        "variance": N_("Adam's second moment is kept in fp32: 4 bytes")}


def _wrong(c, value, want, n) -> str:
    """Why category c is `value` bytes instead of `want`, as a sentence."""
    v = float(value)
    per, unit = v / n, want / n
    if v and any(abs(v - want / unit_) <= 1e-6 * want / unit_ for unit_ in (1e9, 2 ** 30)):
        return tr("{c} is {value!r}, which is {want:g} bytes in GB (or GiB): return bytes",
                  c=c, value=value, want=want)
    if abs(v - 8 * want) <= 1e-9 * want:
        return tr("{c} is {value!r}, 8 x {want:g}: that counts bits; return bytes", c=c, value=value, want=want)
    if abs(v - unit) <= 1e-9 * unit and n != 1:
        return tr("{c} is {value!r}, the bytes of one parameter: multiply by n_params "
                  "({unit:g} x n_params = {want:g})", c=c, value=value, unit=unit, want=want)
    return tr("{c} is {value!r} bytes ({per:g} per parameter), expected {want:g} "
              "({unit:g} per parameter): {why}", c=c, value=value, per=per, want=want, unit=unit,
              why=tr(_WHY[c]))


def mixed_adam_bytes(fn) -> bool:
    """fn(n_params) must return {'params', 'grads', 'master', 'momentum', 'variance': bytes} for
    mixed-precision Adam on one GPU (no ZeRO), as labkit.memory.model_states computes it."""
    from labkit.memory import model_states
    for n in SIZES:
        want = model_states(n, precision="mixed", optimizer="adam")
        try:
            got = fn(n)
        except NotImplementedError:
            return not_implemented("mixed_adam_bytes")
        except Exception as exc:       # noqa: BLE001 - a checker never raises at the learner
            error = f"{type(exc).__name__}: {exc}"
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: " + (tr("raised {error} (n_params may be a float such as 7e9: "
                                                    "use it in arithmetic, not in range() or as an index)",
                                                    error=error)
                                                 if isinstance(n, float) and isinstance(exc, TypeError)
                                                 else tr("raised {error}", error=error)))
        if not isinstance(got, dict):
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: " + tr("returned {type}; return a dict with keys {keys}",
                                                   type=type(got).__name__, keys=", ".join(CATEGORIES)))
        missing = [c for c in CATEGORIES if c not in got]
        if missing:
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: " + tr("the dict has no {missing} (keys: {keys})",
                                                   missing=", ".join(missing), keys=", ".join(CATEGORIES)))
        wrong = []
        for c in CATEGORIES:
            w = getattr(want, c)
            try:
                ok = abs(float(got[c]) - w) <= 1e-9 * w
            except (TypeError, ValueError):
                return report("mixed_adam_bytes", False,
                              f"n_params={n:g}: " + tr("{c} is {value!r}, not a number of bytes", c=c, value=got[c]))
            if not ok:
                wrong.append(c)
        if {"params", "master"} <= set(wrong) and \
                abs(float(got["params"]) - want.master) <= 1e-9 * want.master and \
                abs(float(got["master"]) - want.params) <= 1e-9 * want.params:
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: " + tr("params and master are swapped: the working weights "
                                                   "are fp16/bf16 (2 bytes), the master copy fp32 (4 bytes)"))
        if wrong:
            c = wrong[0]
            return report("mixed_adam_bytes", False,
                          f"n_params={n:g}: " + _wrong(c, got[c], getattr(want, c), n))
    return report("mixed_adam_bytes", True,
                  tr("{n} sizes from 1 to {biggest:.0e} parameters, 5 categories each",
                     n=len(SIZES), biggest=max(SIZES)))
