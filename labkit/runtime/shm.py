"""Tensors between the notebook and its ranks through shared memory, not through the socket.

When `wire` pickles a message (a task's arguments, a `push`, a rank's result) every CPU tensor
storage of at least `MIN_BYTES` is copied once into one anonymous shared-memory file of the
sender (`memfd_create`); the pickle carries only (sender pid, fd, offset, length). A receiver
opens the same file through ``/proc/<sender pid>/fd/<fd>`` and maps it:

- arguments and pushed values are mapped copy-on-write (MAP_PRIVATE): every rank reads the
  one copy the notebook wrote, and a rank that writes into its tensor gets private pages, so
  ranks never see each other's changes (as with a pickled copy);
- results and pulled values are mapped shared: the notebook's tensor *is* the rank's copy.

The file has no name: it lives while the sender holds its fd or a receiver maps it, so a
SIGKILL of any process (notebook or rank) can leave nothing behind, in /dev/shm or anywhere.
The sender closes its fd once every receiver has loaded the message (`close`).
This is torch.multiprocessing's "file_descriptor" strategy without passing descriptors: the fd
is reached through /proc. Ranks in a user namespace of their own (a learner who is not root:
local/netns.py) cannot open the notebook's, so the local source then pickles what the notebook
sends them (their results still come this way).
LABKIT_SHM=0 in the environment turns it off (tensors are pickled through the socket), as does
a system without memfd or /proc (macOS) and LABKIT_PORTABLE=1 (portable.py).
"""
import contextlib
import mmap
import os

MIN_BYTES = 1 << 16          # smaller storages are pickled inline: an fd and a map cost more
_PAGE = mmap.PAGESIZE


def _probe() -> bool:
    from labkit.runtime import portable
    if os.environ.get("LABKIT_SHM", "1") == "0" or not portable.MEMFD:
        return False
    try:                                          # can this system reopen an fd through /proc?
        fd = os.memfd_create("labkit-probe", os.MFD_CLOEXEC)
        try:
            os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY))
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


ENABLED = _probe()


class Segment:
    """One anonymous shared-memory file that a sender fills while pickling one message."""

    def __init__(self, private: bool):
        self.private = private                    # receivers map copy-on-write
        self.fd = None
        self.size = 0
        self.pid = os.getpid()
        self._offsets = {}                        # (data_ptr, nbytes) -> offset: shared storages once

    def add(self, storage) -> int:
        """Copy a CPU storage's bytes in; return their offset."""
        import torch
        n = storage.nbytes()
        key = (storage.data_ptr(), n)
        if key in self._offsets:
            return self._offsets[key]
        if self.fd is None:
            self.fd = os.memfd_create("labkit", os.MFD_CLOEXEC)
        off = self.size
        length = -(-n // _PAGE) * _PAGE
        os.ftruncate(self.fd, off + length)
        self.size = off + length
        src = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (n,))
        try:                                      # write(2): the kernel allocates the pages
            view = memoryview(src.numpy())        # without a fault per page (2x a mapped copy)
            done = 0
            while done < n:
                done += os.pwrite(self.fd, view[done:done + (1 << 30)], off + done)
        except (RuntimeError, ImportError):       # no numpy: copy through a mapping
            mm = mmap.mmap(self.fd, length, offset=off)
            dst = torch.frombuffer(mm, dtype=torch.uint8, count=n)
            dst.copy_(src)
            del dst
            mm.close()
        del src
        self._offsets[key] = off
        return off

    def close(self) -> None:
        """The sender lets go; receivers that mapped it keep their pages."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def __reduce__(self):
        return _Mapped, (self.pid, self.fd, self.private)   # size: read when mapped


_maps_made = 0            # segments this process has mapped (or tried to): wire.load_result


def maps_made() -> int:
    return _maps_made


class _Mapped:
    """The receiver's view of a Segment: one mapping, shared by every storage in the message."""

    def __init__(self, pid: int, fd: int, private: bool):
        global _maps_made
        _maps_made += 1
        try:
            f = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY if private else os.O_RDWR)
        except OSError as exc:
            raise RuntimeError(f"labkit could not map the tensors sent by process {pid} "
                               f"({exc}); it has probably exited. Set LABKIT_SHM=0 before "
                               "starting the Cluster to send tensors through the socket.") from None
        try:
            size = os.fstat(f).st_size
            if private:
                self.mm = mmap.mmap(f, size, flags=mmap.MAP_PRIVATE,
                                    prot=mmap.PROT_READ | mmap.PROT_WRITE)
            else:
                self.mm = mmap.mmap(f, size, flags=mmap.MAP_SHARED,
                                    prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(f)
        self._storages = {}

    def storage(self, off: int, nbytes: int):
        """An UntypedStorage over [off, off + nbytes) of the mapping (no copy). The storage
        holds a reference to the mapping, which lives as long as any tensor uses it."""
        import torch
        if (off, nbytes) not in self._storages:
            t = torch.frombuffer(self.mm, dtype=torch.uint8, count=nbytes, offset=off)
            self._storages[(off, nbytes)] = t.untyped_storage()
        return self._storages[(off, nbytes)]


def _rebuild_untyped(mapped: _Mapped, off: int, nbytes: int):
    return mapped.storage(off, nbytes)


def _rebuild_typed(mapped: _Mapped, off: int, nbytes: int, dtype):
    import torch
    return torch.storage.TypedStorage(wrap_storage=mapped.storage(off, nbytes), dtype=dtype,
                                      _internal=True)


def reducers(segment: Segment) -> dict:
    """Pickler dispatch entries that send big CPU storages through `segment`."""
    import torch

    def big(s) -> bool:
        return s.device.type == "cpu" and s.nbytes() >= MIN_BYTES

    def typed(s):
        if not big(s._untyped_storage):
            return s.__reduce__()
        u = s._untyped_storage
        return _rebuild_typed, (segment, segment.add(u), u.nbytes(), s.dtype)

    def untyped(s):
        if not big(s):
            return s.__reduce__()
        return _rebuild_untyped, (segment, segment.add(s), s.nbytes())

    return {torch.storage.TypedStorage: typed, torch.UntypedStorage: untyped}


def close(segments) -> None:
    for s in segments:
        s.close()
    segments.clear()


@contextlib.contextmanager
def outbox(enabled: bool = True):
    """A list for `wire.dumps(..., keep=)`: its segments are closed when the block ends
    (every receiver has loaded the message by then). Not enabled (ranks on other machines):
    None, so tensors are pickled into the message."""
    if not enabled:
        yield None
        return
    keep = []
    try:
        yield keep
    finally:
        close(keep)
