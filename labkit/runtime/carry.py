"""Values that pickle cannot carry as they are, or would carry through the socket once per rank.

- tensors of the dtypes torch cannot pickle (uint16/32/64, float8, complex32: found by trying
  each once) travel as their bytes, a uint8 view of the storage, with dtype, shape, strides and
  offset;
- numpy arrays and bytes of at least shm.MIN_BYTES travel as a uint8 tensor, so through the
  message's shared memory (shm.py), written once for every rank.

`wire` asks these while it pickles a message; the rebuild functions run where it is loaded.
"""
import pickle
import sys

from labkit.runtime import shm

_bytes_dtypes = None       # dtypes torch's own pickling cannot carry, once found




def dtypes_sent_as_bytes() -> frozenset:
    """The dtypes whose tensors torch cannot pickle (found by trying each once): they travel as
    their bytes (a uint8 view of the storage, through shared memory when big) plus dtype,
    shape and strides."""
    global _bytes_dtypes
    if _bytes_dtypes is None:
        import torch
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # "ComplexHalf support is experimental"
            bad = _unpicklable(torch)
        _bytes_dtypes = frozenset(bad)
    return _bytes_dtypes


def _unpicklable(torch) -> set:
    bad = set()
    for dt in {d for d in vars(torch).values() if isinstance(d, torch.dtype)}:
        if dt.is_floating_point or dt.is_complex or dt in (torch.uint16, torch.uint32, torch.uint64):
            try:
                pickle.loads(pickle.dumps(torch.zeros(1, dtype=dt)))
            except Exception:                     # noqa: BLE001 - any failure: send bytes
                bad.add(dt)
    return bad


def _rebuild_from_bytes(data, dtype, size, stride, offset, requires_grad, parameter):
    import torch
    t = torch.empty(0, dtype=dtype).set_(data.untyped_storage(), offset, size, stride)
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def reduce_as_bytes(t):
    import torch
    data = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    return _rebuild_from_bytes, (data, t.dtype, tuple(t.size()), tuple(t.stride()),
                                 t.storage_offset(), t.requires_grad,
                                 isinstance(t, torch.nn.Parameter))


def _rebuild_numpy(data, dtype, shape):
    """A numpy array from the uint8 tensor its bytes came in (no copy: shared memory)."""
    return data.numpy().view(dtype).reshape(shape)


def _rebuild_bytes(data, kind):
    return kind(data.numpy().tobytes()) if kind is bytearray else data.numpy().tobytes()


class _Bytes:
    """A big bytes or bytearray object on its way (pickle never asks a reducer about them)."""
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        import torch
        kind = type(self.data)
        buf = self.data if kind is bytearray else bytearray(self.data)   # frombuffer: writable
        return _rebuild_bytes, (torch.frombuffer(buf, dtype=torch.uint8), kind)


def wrap_bytes(x, depth: int = 2):
    """`x` with every big bytes object (at the top, or in lists, tuples and dicts up to `depth`
    deep) wrapped in _Bytes, so it takes the shared-memory path too."""
    if type(x) in (bytes, bytearray):
        return _Bytes(x) if len(x) >= shm.MIN_BYTES else x
    if depth and type(x) in (list, tuple):
        return type(x)(wrap_bytes(v, depth - 1) for v in x)
    if depth and type(x) is dict:
        return {k: wrap_bytes(v, depth - 1) for k, v in x.items()}
    return x


def reduce_numpy(obj):
    """A numpy array of at least shm.MIN_BYTES travels as a uint8 tensor, so through the
    message's shared memory (once for every rank), not pickled into the socket once per rank;
    None for the others (object or structured dtypes, small arrays)."""
    import torch
    np = sys.modules.get("numpy")
    if np is not None and type(obj) is np.ndarray and obj.nbytes >= shm.MIN_BYTES \
            and not obj.dtype.hasobject and obj.dtype.fields is None:
        flat = np.ascontiguousarray(obj).reshape(-1).view(np.uint8)
        return _rebuild_numpy, (torch.from_numpy(flat), obj.dtype.str, obj.shape)
    return None
