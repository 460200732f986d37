"""Process groups made once per process group (inside a rank).

`dist.new_group` must be called by every rank, for every group, in the same order, and each call
costs a rendezvous; a function that runs many times (a checker's case, a parity run) makes its
groups once and keeps them. Kept groups belong to the process group they were made in: when the
cluster rebuilds it (after a failure, `restart()`, a rank that destroyed it), `dist.group.WORLD`
is a new object and every kept group is dropped, so the next call makes them again.
"""

_KEPT = {}


def once(key, make):
    """make() the first time `key` is asked for in this process group, then the same value.
    Every rank must ask for the same keys in the same order (make() calls new_group)."""
    import torch.distributed as dist
    if _KEPT.get("world") is not dist.group.WORLD:          # the process group was rebuilt
        _KEPT.clear()
        _KEPT["world"] = dist.group.WORLD
    if key not in _KEPT:
        _KEPT[key] = make()
    return _KEPT[key]
