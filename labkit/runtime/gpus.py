"""Which GPUs a local cluster may use, and the backend that follows (pure: no torch here).

On a node shared by a class, the spawner gives each learner some GPUs by setting
``CUDA_VISIBLE_DEVICES`` (``"2,3"``: physical GPUs 2 and 3, seen by CUDA as cuda:0 and cuda:1).
The ranks inherit it, so rank r's ``cuda:r`` is the r-th GPU *given*, never another learner's.
Here, as plain functions of the count of visible devices (an input, so tests need no GPU):

- `visible_devices(cvd, physical)`: the entries CUDA keeps of a ``CUDA_VISIBLE_DEVICES`` value
  (CUDA's rules: up to the first invalid entry; a repeated one hides every device);
- `choose_backend(requested, world_size, visible, cvd)`: "nccl" or "gloo", and the one line that
  tells the learner what was chosen and why when the GPUs they were given are fewer than ranks;
- `rank_gpus(world_size, cvd, physical)`: which GPU each rank computes on, as the learner
  would name it (the ids in ``CUDA_VISIBLE_DEVICES``, else the index).
"""
from __future__ import annotations

import dataclasses

VAR = "CUDA_VISIBLE_DEVICES"
_UUID_PREFIXES = ("GPU-", "MIG-")


def visible_devices(cvd: str | None, physical: int | None) -> list:
    """The devices CUDA shows a process whose ``CUDA_VISIBLE_DEVICES`` is `cvd`, in order.

    `physical`: how many GPUs the machine has (None: unknown, indices are then taken as valid).
    Unset (None) shows every physical GPU. Entries are indices or ``GPU-``/``MIG-`` UUIDs;
    parsing stops at the first invalid one (``"0,-1,2"`` shows GPU 0 only, ``""`` none), and a
    repeated entry makes CUDA show none."""
    if cvd is None:
        return list(range(physical or 0))
    seen = []
    for raw in cvd.split(","):
        entry = raw.strip()
        if entry.startswith(_UUID_PREFIXES):
            item = entry
        elif entry.isdigit() and (physical is None or int(entry) < physical):
            item = int(entry)
        else:
            break                                  # CUDA ignores this entry and every later one
        if item in seen:
            return []
        seen.append(item)
    return seen


@dataclasses.dataclass(frozen=True)
class Choice:
    backend: str                                   # "nccl" or "gloo"
    note: str = ""                                 # one line for the learner ("" when nothing to say)


def _given(cvd: str | None) -> str:
    return f" ({VAR}={cvd or repr(cvd)})" if cvd is not None else ""


def check_backend(backend) -> str:
    """'auto', 'gloo' or 'nccl', else ValueError (before anything starts)."""
    if backend not in ("auto", "nccl", "gloo"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    return backend


def choose_backend(requested: str, world_size: int, visible: int, cvd: str | None = None) -> Choice:
    """The backend of `world_size` ranks on this node, where `visible` GPUs are visible to them
    (`cvd`: the ``CUDA_VISIBLE_DEVICES`` they inherit, None if unset; only worded in messages).

    "auto" is NCCL with one GPU per rank when there are enough, else gloo on the CPU. When some
    GPUs were given but fewer than ranks, or a spawner hid them all, the note says so; a machine
    without GPUs (a laptop) gets no note. "nccl" with too few GPUs raises ValueError, saying
    what to change."""
    check_backend(requested)
    enough = visible >= world_size
    if requested == "nccl" and not enough:
        raise ValueError(
            f"backend='nccl' needs one GPU per rank: world_size={world_size} but {visible} GPU(s) "
            f"are visible here{_given(cvd)}. Use backend='gloo' (CPU)"
            + (f" or world_size<={visible}" if visible else "")
            + (f"; {VAR} is how this notebook's GPUs were given (ask whoever runs the server "
               f"for more)." if cvd is not None else "."))
    if requested == "gloo":
        return Choice("gloo")
    if requested == "nccl" or enough:
        return Choice("nccl")
    if visible == 0 and cvd is None:
        return Choice("gloo")                      # no GPU at all: the usual CPU course
    if visible == 0:
        return Choice("gloo", f"labkit: backend='auto' chose gloo on the CPU: no GPU is visible to "
                              f"this notebook{_given(cvd)}, so the {world_size} ranks compute on the CPU.")
    return Choice("gloo", f"labkit: backend='auto' chose gloo on the CPU: {world_size} ranks but only "
                          f"{visible} GPU(s) visible to this notebook{_given(cvd)}, and NCCL needs one "
                          f"GPU per rank. labkit.Cluster({visible}) would run NCCL on them.")


def rank_gpus(world_size: int, cvd: str | None, physical: int | None) -> list:
    """The GPU rank r computes on (cuda:r inside the rank), as named in ``CUDA_VISIBLE_DEVICES``
    (its r-th entry) or, unset, the physical index r. ValueError if there are too few."""
    shown = visible_devices(cvd, physical)
    if world_size > len(shown):
        raise ValueError(f"{world_size} ranks but {len(shown)} GPU(s) visible{_given(cvd)}")
    return shown[:world_size]
