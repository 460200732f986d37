"""One seam for measuring a technique from outside its algorithm (layer 3).

    rec = trace.Recorder(clock=trace.clock_for(device))
    with trace.recording(rec):            # a runs.py turns it on around the step it measures
        step()                            # the technique calls trace.span("compute", step=t) at most
    rec.spans                             # [(name, start, end, tags)] in seconds on one clock
    rec.flush()                           # between steps: the records not sent yet -> the notebook

    with trace.saved_bytes(exclude=model.parameters()) as saved:
        loss = model(x)                   # saved.bytes: what autograd keeps for backward
                                          # (per="view", "storage" or "save": see saved_bytes)

Spans are stamped by a clock: `HostClock` (perf_counter, CLOCK_MONOTONIC: one clock for every
process on the machine) on CPU ranks, `CudaClock` (CUDA events on the current stream, placed on
the host's axis after one synchronize) on GPU ranks; see labkit/ddp/clock.py's docstring for
what each measures. With no recorder active `span()` returns one shared empty context: a
technique that calls it costs a function call and nothing is kept. A recorder's `count` adds
bytes under a key (sent, received, gathered...). `flush()` sends the spans to the notebook
(labkit.emit, wall-clock seconds); call it between steps, never from inside autograd.
"""
import contextlib
import time

_NOTHING = contextlib.nullcontext()
_active = []                               # the recorders turned on, innermost last


class HostClock:
    """Stamps are perf_counter seconds."""

    def now(self):
        return time.perf_counter()

    def resolve(self, stamp) -> float:
        return stamp


class CudaClock:
    """Stamps are CUDA events on the current stream; `resolve` turns one into seconds on the
    host's perf_counter axis (call it after the step, it synchronizes once)."""

    def __init__(self):
        import torch
        self._torch = torch
        torch.cuda.synchronize()
        self._origin = torch.cuda.Event(enable_timing=True)
        self._origin.record()
        torch.cuda.synchronize()
        self._origin_host = time.perf_counter()
        self._synced = False

    def now(self):
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()                                   # on the current stream
        self._synced = False
        return ev

    def resolve(self, stamp) -> float:
        if not self._synced:
            self._torch.cuda.synchronize()
            self._synced = True
        return self._origin_host + self._origin.elapsed_time(stamp) / 1e3


def clock_for(device) -> object:
    """The clock that measures the GPU for a CUDA device, the CPU otherwise."""
    return CudaClock() if getattr(device, "type", str(device)) == "cuda" else HostClock()


class Recorder:
    """Spans [(name, start, end, tags)], byte counts {key: bytes}, and what was sent live.
    `names`: the span names and count keys it keeps (None: all); one it does not keep goes to
    the next recorder out that does, so a recorder for one kind of record can be turned on
    inside another's."""

    def __init__(self, clock=None, live: bool = False, names=None):
        self.clock = clock or HostClock()
        self.names = None if names is None else frozenset(names)
        self.spans, self.bytes, self.live, self._sent = [], {}, live, 0
        self._shift = None          # wall clock - perf_counter (wall_shift)

    def keeps(self, name: str) -> bool:
        return self.names is None or name in self.names

    @contextlib.contextmanager
    def span(self, name: str, **tags):
        t0 = self.clock.now()
        try:
            yield
        finally:
            self.add_span(name, t0, self.clock.now(), tags)

    def add_span(self, name: str, t0, t1, tags: dict) -> None:
        """Where every span lands (a technique's recorder may keep them in its own form)."""
        self.spans.append((name, t0, t1, tags))

    def count(self, key: str, nbytes: int) -> None:
        self.bytes[key] = self.bytes.get(key, 0) + nbytes

    def resolved(self) -> list:
        """The spans with their stamps in seconds (a CudaClock synchronizes once here)."""
        at = self.clock.resolve
        return [(name, at(a), at(b), tags) for name, a, b, tags in self.spans]

    def wall_shift(self) -> float:
        """Seconds to add to a resolved stamp for the wall clock, read once (the first call
        after construction or `restart_wall`) so that every span converts alike: two readings
        differ by however long the process was descheduled between time.time() and
        perf_counter() (2 ms was seen on a busy machine)."""
        if self._shift is None:
            self._shift = time.time() - time.perf_counter()
        return self._shift

    def restart_wall(self) -> None:
        """Read the wall clock's offset afresh at the next `wall_shift` (a new step to trace)."""
        self._shift = None

    def flush(self, **extra) -> None:
        """With live set: emit the spans not sent yet to the notebook, on the wall clock."""
        if not self.live or self._sent >= len(self.spans):
            return
        import labkit
        shift = self.wall_shift()
        for name, a, b, tags in self.resolved()[self._sent:]:
            labkit.emit(span=name, start=a + shift, end=b + shift, **tags, **extra)
        self._sent = len(self.spans)


@contextlib.contextmanager
def recording(recorder: Recorder):
    """Turn `recorder` on for the block: span() and count() record into it."""
    _active.append(recorder)
    try:
        yield recorder
    finally:
        _active.remove(recorder)


def active(name: str = None):
    """The innermost recorder turned on (that keeps `name`, if given), or None."""
    for rec in reversed(_active):
        if name is None or rec.keeps(name):
            return rec
    return None


def span(name: str, **tags):
    """A span of the active recorder that keeps `name`; with none, one shared empty context."""
    rec = active(name) if _active else None
    return rec.span(name, **tags) if rec else _NOTHING


def stamp(name: str = None):
    """Now on the clock of the active recorder (that keeps `name`), or None with none on."""
    rec = active(name) if _active else None
    return rec.clock.now() if rec else None


def add(name: str, start, end=None, **tags) -> None:
    """A span from `start` (a stamp() taken earlier; None: nothing) to `end` (default now)."""
    rec = active(name) if _active and start is not None else None
    if rec:
        rec.add_span(name, start, rec.clock.now() if end is None else end, tags)


def count(key: str, nbytes: int) -> None:
    rec = active(key) if _active else None
    if rec:
        rec.count(key, nbytes)


PER = ("view", "storage", "save")


class _Saved:
    """What autograd saved inside one `saved_bytes` block."""

    def __init__(self, exclude, per: str):
        if per not in PER:
            raise ValueError(f"saved_bytes(per=...) is one of {PER}, got {per!r}")
        self.per = per
        self.exclude = {self._where(t) for t in exclude}
        self.bytes, self.tensors, self.by_dtype, self._seen = 0, 0, {}, set()

    def _where(self, t):
        """What identifies t's memory: its storage's address (per storage), else its own."""
        return t.untyped_storage().data_ptr() if self.per == "storage" else t.data_ptr()

    def pack(self, t):
        if self._where(t) in self.exclude:
            return t
        if self.per == "storage":                 # a storage once, all of it
            key, size = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
        else:                                     # a view of a batch: its own elements
            key, size = (t.data_ptr(), t.numel()), t.numel() * t.element_size()
        if self.per != "save":                    # "save": every time autograd saves a tensor
            if key in self._seen:
                return t
            self._seen.add(key)
        self.bytes += size
        self.tensors += 1
        dtype = str(t.dtype).replace("torch.", "")
        self.by_dtype[dtype] = self.by_dtype.get(dtype, 0) + size
        return t


@contextlib.contextmanager
def saved_bytes(exclude=(), per: str = "view"):
    """Count the bytes autograd saves for backward inside the block. Yields an object with
    `.bytes`, `.tensors` and `.by_dtype` ({"float32": bytes, ...}).

    per="view" (default): each (pointer, size) once, its own elements (a micro-batch, a view of
      the batch, counts its share, not the whole batch's storage);
    per="storage": each storage once, all its bytes (what the allocator holds for them);
    per="save": every tensor each time autograd saves it (a tensor saved by two ops, twice).
    Tensors in `exclude` (e.g. the parameters) are not counted: compared by storage for
    per="storage", by pointer otherwise."""
    import torch
    saved = _Saved(exclude, per)
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
        yield saved
