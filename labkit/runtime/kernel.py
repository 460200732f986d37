"""The clusters open in this kernel (the notebook's process): the newest one, which `%%ranks`
and the checkers use, and all of them, which `labkit.close_all()` closes. A new cluster says in
one line how many others are still open and how many processes they hold.
"""
import sys
import weakref

_current = None        # weakref to the newest open Cluster, for %%ranks
_open = weakref.WeakSet()   # every open Cluster of this process, for close_all()


def current():
    """The newest open Cluster, or None."""
    c = _current() if _current is not None else None
    return c if c is not None and not c.closed else None


def close_all() -> int:
    """Close every open Cluster of this process (e.g. ones only IPython's Out[] still holds)."""
    clusters = list(_open)
    for c in clusters:
        c.close()
    return len(clusters)


def opened(cluster) -> None:
    """`cluster` has started: it is the newest; say so if others are still open."""
    global _current
    _current = weakref.ref(cluster)
    others = [c for c in _open if not c.closed]
    if others:
        procs_held = sum(c.source.process_count() for c in others)
        print(f"labkit: {len(others)} other cluster(s) still open in this kernel, holding "
              f"{procs_held} processes; close them with .close() or labkit.close_all() if "
              "you no longer need them.", file=sys.stderr)
    _open.add(cluster)
