"""What of the notebook's interpreter each task carries to the ranks: the working folder,
sys.path, and which of the learner's own modules changed on disk.

    snap = learner.snapshot()     # notebook, every task: a few hundred bytes
    learner.apply(snap)           # rank, before the task is unpickled

- ``os.chdir`` in the notebook: the rank changes to the same folder (open("data.txt") works).
- ``sys.path`` additions in the notebook: the rank imports from the same places.
- the learner's modules (a ``helpers.py`` next to the notebook; not the standard library,
  not site-packages, not labkit): each task names them with their file's (mtime, size).
  A rank that loaded an older version reloads it, so ``importlib.reload(helpers)`` in the
  notebook (or any edit on disk) reaches the ranks, as functions pickled by reference
  (``helpers.f``) are looked up in the rank's own copy of the module.
"""
import importlib
import os
import sys
import sysconfig

_LABKIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_kind = {}               # module name -> (file, learner's?) cache for the notebook side
_applied = (None, None)  # rank side: the (cwd, path) applied last
_stamps = {}             # rank side: module name -> stamp of the version this rank runs


def _system_dirs() -> tuple:
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, _LABKIT_DIR}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(sysconfig.get_paths()[key])
        except KeyError:
            pass
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


_SYSTEM = _system_dirs()


def _learner_file(module):
    """The .py file of a learner's module, or None for anything installed or built in."""
    name = module.__name__
    file = getattr(module, "__file__", None)
    cached = _kind.get(name)
    if cached is not None and cached[0] == file:
        return cached[1]
    result = None
    if (isinstance(file, str) and file.endswith(".py") and os.path.isabs(file)
            and name != "__main__" and os.path.isfile(file)):
        real = os.path.realpath(file)
        if (not real.startswith(_SYSTEM) and "site-packages" not in real
                and "dist-packages" not in real):
            result = real
    _kind[name] = (file, result)
    return result


def _stamp(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


_found = (None, [])       # (len(sys.modules), [(name, module)] of learner modules): rescanned on change


def _learner_modules() -> list:
    global _found
    if _found[0] != len(sys.modules):
        mods = [(name, m) for name, m in list(sys.modules.items())
                if m is not None and _learner_file(m) is not None]
        _found = (len(sys.modules), mods)
    return _found[1]


def snapshot() -> dict:
    """The notebook's folder, sys.path and learner modules with the stamps of their files."""
    modules = {}
    for name, m in _learner_modules():
        if sys.modules.get(name) is m:            # importlib.reload keeps the module object
            path = _learner_file(m)
            modules[name] = (path, _stamp(path))
    return {"cwd": os.getcwd(), "path": list(sys.path), "modules": modules}


def apply(snap: dict) -> None:
    """On a rank: the notebook's folder and sys.path, and the learner's modules as they are now."""
    global _applied
    if not snap:
        return
    changed = False
    if snap["cwd"] != _applied[0] or snap["path"] != _applied[1]:
        try:
            if os.getcwd() != snap["cwd"]:
                os.chdir(snap["cwd"])
        except OSError:
            pass                                  # the folder is gone: stay where we are
        base = [p for p in sys.path if p not in snap["path"] and (p == _LABKIT_ROOT or
                                                                      p.startswith(_SYSTEM))]
        sys.path[:] = list(snap["path"]) + base
        _applied = (snap["cwd"], list(snap["path"]))
        changed = True
    stale = []
    for name, (path, stamp) in snap["modules"].items():
        m = sys.modules.get(name)
        if m is None:
            _stamps.pop(name, None)
            continue
        if _stamps.get(name) != stamp:         # edited, or loaded before we looked: reload
            stale.append(name)
    if stale or changed:
        importlib.invalidate_caches()
    for name in sorted(stale, key=lambda n: n.count(".")):   # packages before their modules
        try:
            importlib.reload(sys.modules[name])
        except Exception as exc:                  # noqa: BLE001 - the task reports what breaks
            print(f"labkit: could not reload {name} on this rank: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
        _stamps[name] = snap["modules"][name][1]


def note_imports() -> None:
    """On a rank, after a task: remember the file stamps of learner modules it imported."""
    for name, m in _learner_modules():
        if name not in _stamps:
            _stamps[name] = _stamp(_learner_file(m))


_LABKIT_ROOT = os.path.dirname(_LABKIT_DIR)
