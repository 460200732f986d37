"""Pickling for the notebook and its ranks: the learner's function and arguments by value,
results back (serialization only: what goes over which connection is group.py's and channel.py's).

cloudpickle pickles functions defined in a notebook cell or a script's __main__ by value,
with the globals and closures they use, so workers never import the learner's __main__.
When something cannot be pickled the error names it: which argument, or which global or
closure variable of the function.
"""
import io
import pickle
import sys
import types
from collections import ChainMap

import cloudpickle

from labkit.runtime import carry, shm


def _code_reduce(code):
    """cloudpickle's code reducer, but keeping co_filename (it writes "<dynamic-code>"), so
    a rank's traceback can point at the learner's cell and line."""
    ctor, args = cloudpickle.cloudpickle._code_reduce(code)
    i = next(i for i, a in enumerate(args) if isinstance(a, str) and a == "<dynamic-code>")
    return ctor, args[:i] + (code.co_filename,) + args[i + 1:]


_submodule_index = (None, {})      # (len(sys.modules) when built, {package: {child: [names]}})


def _find_imported_submodules(code, top_level_dependencies):
    """Same answer as cloudpickle's, without scanning all of sys.modules per call.

    cloudpickle looks for submodules a function reaches as attributes (``torch.distributed``)
    by scanning every loaded module name for each module global: 1.4 ms per call once torch is
    imported, most of a cluster.run round trip. Here loaded modules are indexed by package and
    first child name; the index is rebuilt when sys.modules changes size.
    """
    global _submodule_index
    n = len(sys.modules)
    if _submodule_index[0] != n:
        index = {}
        for name in list(sys.modules):
            if name is not None:
                parts = name.split(".")
                for i in range(1, len(parts)):
                    index.setdefault(".".join(parts[:i]), {}).setdefault(parts[i], []).append(name)
        _submodule_index = (n, index)
    names = set(code.co_names)
    found = []
    for x in top_level_dependencies:
        if isinstance(x, types.ModuleType) and getattr(x, "__package__", None):
            children = _submodule_index[1].get(x.__name__, {})
            prefix = len(x.__name__) + 1
            for child in names.intersection(children):
                for name in children[child]:
                    if name in sys.modules and not set(name[prefix:].split(".")) - names:
                        found.append(sys.modules[name])
    return found


if hasattr(cloudpickle.cloudpickle, "_find_imported_submodules"):
    cloudpickle.cloudpickle._find_imported_submodules = _find_imported_submodules


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({types.CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table)
    shm_reducers = {}

    def reducer_override(self, obj):
        if type(obj).__name__ in ("Tensor", "Parameter") and "torch" in sys.modules:
            import torch
            if (isinstance(obj, torch.Tensor) and obj.dtype in carry.dtypes_sent_as_bytes()
                    and obj.layout == torch.strided and obj.device.type == "cpu"):
                return carry.reduce_as_bytes(obj.detach())
        if self.shm_reducers and type(obj).__name__ == "ndarray":
            rv = carry.reduce_numpy(obj)
            if rv is not None:
                return rv
        reduce = self.shm_reducers.get(type(obj))
        if reduce is not None:
            return reduce(obj)
        return super().reducer_override(obj)


def dumps(obj, keep: list = None, private: bool = True) -> bytes:
    """Pickle `obj`. With `keep` (a list), big CPU tensor storages go through one shared-memory
    segment (see shm.py), appended to `keep`: the caller closes it (shm.close) once every
    receiver has loaded the message. private: receivers map it copy-on-write."""
    buf = io.BytesIO()
    p = _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    segment = None
    if keep is not None and shm.ENABLED:           # the Cluster has imported torch already
        obj = carry.wrap_bytes(obj)
        segment = shm.Segment(private)
        p.shm_reducers = shm.reducers(segment)
    try:
        p.dump(obj)
    except BaseException:
        if segment is not None:
            segment.close()
        raise
    if segment is not None:
        if segment.fd is None:
            segment.close()
        else:
            keep.append(segment)
    return buf.getvalue()


def _why(obj) -> str:
    try:
        dumps(obj)
    except Exception as exc:                      # noqa: BLE001 - any pickling error
        return f"{type(exc).__name__}: {exc}"
    return ""


def _culprits(fn) -> list:
    """Names of the globals and closure variables of `fn` that cannot be pickled."""
    found = []
    code = getattr(fn, "__code__", None)
    if code is None:
        return found
    glb = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in glb and _why(glb[name]):
            found.append(f"global {name!r} ({type(glb[name]).__name__})")
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if _why(value):
            found.append(f"closure variable {name!r} ({type(value).__name__})")
    return found


def dumps_call(fn, args: tuple, kwargs: dict, keep: list = None) -> bytes:
    """Pickle (fn, args, kwargs) once for every rank; say exactly what cannot be sent.
    keep: see `dumps` (tensors through shared memory)."""
    if not callable(fn):
        raise TypeError(f"cluster.run needs a function to run on every rank, got "
                        f"{type(fn).__name__}: {fn!r}")
    try:
        return dumps((fn, args, kwargs), keep)
    except Exception:                             # noqa: BLE001 - find the culprit below
        pass
    name = getattr(fn, "__name__", repr(fn))
    for i, a in enumerate(args):
        why = _why(a)
        if why:
            raise TypeError(f"argument {i} of {name}() ({type(a).__name__}) cannot be sent to "
                            f"the ranks ({why}). Create it inside the function instead, or pass "
                            "something picklable (numbers, tensors, lists, dicts).")
    for k, a in kwargs.items():
        why = _why(a)
        if why:
            raise TypeError(f"argument {k}= of {name}() ({type(a).__name__}) cannot be sent to "
                            f"the ranks ({why}). Create it inside the function instead, or pass "
                            "something picklable (numbers, tensors, lists, dicts).")
    culprits = _culprits(fn)
    detail = "; it uses " + ", ".join(culprits) if culprits else ""
    raise TypeError(f"function {name}() cannot be sent to the ranks ({_why(fn)}){detail}. "
                    "Create such objects inside the function, where each rank makes its own.")


def dumps_values(values: dict, keep: list = None) -> bytes:
    try:
        return dumps(values, keep)
    except Exception:                             # noqa: BLE001 - find the culprit below
        pass
    for k, v in values.items():
        why = _why(v)
        if why:
            raise TypeError(f"{k}= ({type(v).__name__}) cannot be sent to the ranks ({why}).")
    return dumps(values, keep)


def loads(data: bytes):
    return cloudpickle.loads(data)


def loads_result(data: bytes) -> tuple:
    """(value, mapped): a rank's result, and whether it maps the rank's shared memory (the rank
    then holds its segment until the notebook says it has loaded the result: Release)."""
    before = shm.maps_made()
    value = loads(data)
    return value, shm.maps_made() != before
