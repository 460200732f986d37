"""The third bottleneck, data: slow items, DataLoader workers, a stream sharded correctly.

    SlowDataset(n, width, wait_s=0.01)            # each item "reads a file": it waits wait_s
    loader_throughput(workers=(0, 1, 2, 4))      # items per second for each worker count
    ShardedStream(n)                             # IterableDataset: rank x worker sharding
    stream_items(n, num_workers=2)               # on each rank: the items it saw

Reading and decoding files mostly waits (disk, network, decompression in C with the GIL
released), so an item's cost here is `time.sleep`: with 2 CPU cores a CPU-bound item could
not show several workers helping, while waiting items overlap in any number of workers.
"""
import time

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from labkit.i18n import tr


class SlowDataset(Dataset):
    """n items (x, y); each takes `wait_s` seconds to produce, as a file read would.
    x is `width` floats, or, with `ids`, `width` token ids below `ids`; y is a class of 10.
    With rows > 0 an item is a sequence: x is (rows, width) and y holds a class per row."""

    def __init__(self, n: int = 256, width: int = 32, wait_s: float = 0.01, ids: int = 0, seed: int = 0,
                 rows: int = 0):
        self.n, self.wait_s = n, wait_s
        g = torch.Generator().manual_seed(seed)       # the "files' contents", made once
        shape = (n, rows, width) if rows else (n, width)
        self.x = torch.randint(0, ids, shape, generator=g) if ids else torch.randn(shape, generator=g)
        self.y = torch.randint(0, 10, (n, rows) if rows else (n,), generator=g)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.wait_s:
            time.sleep(self.wait_s)                   # the read: waiting, not computing
        return self.x[i], self.y[i]


def loader_throughput(workers=(0, 1, 2, 4), n: int = 64, batch: int = 8, wait_s: float = 0.01,
                      prefetch_factor: int = 2, pin_memory: bool = False) -> dict:
    """{num_workers: (items per second, seconds of the first pass)} for a DataLoader over
    SlowDataset. With workers, two passes run over the same persistent workers: the first
    starts them (its seconds are the second number), the second is timed for the rate, so
    the rate is the steady state. Workers fork from this process: call it on a rank (whose
    torch uses one thread), not in a notebook that has run threaded torch ops.
    pin_memory only matters with a GPU (page-locked buffers make host-to-device copies
    asynchronous); on CPU it does nothing useful and is left off."""
    import warnings
    data = SlowDataset(n=n, wait_s=wait_s)
    out = {}
    for w in workers:
        kw = dict(num_workers=w, prefetch_factor=prefetch_factor, persistent_workers=True) if w else {}
        with warnings.catch_warnings():       # "more workers than cores": ours wait, not compute
            warnings.simplefilter("ignore", UserWarning)
            loader = DataLoader(data, batch_size=batch, pin_memory=pin_memory, **kw)
            passes = []
            for _ in range(2 if w else 1):
                t0 = time.perf_counter()
                seen = sum(len(x) for x, _ in loader)
                passes.append(time.perf_counter() - t0)
        out[w] = (seen / passes[-1], passes[0])
        del loader                            # stops the persistent workers
    return out


class ShardedStream(IterableDataset):
    """A stream of items 0..n-1 (say, lines of files read in order), split so that every item
    reaches exactly one (rank, worker) pair: shard k of world_size x num_workers takes items
    k, k + S, k + 2S, ... with S = world_size x num_workers and k = rank x num_workers + worker.

    by="rank" shards by rank only, the common mistake: each DataLoader worker gets a copy of the
    dataset object and replays the rank's whole shard, so with 2 workers every item comes twice."""

    def __init__(self, n: int, rank: int, world_size: int, by: str = "rank_and_worker"):
        if by not in ("rank_and_worker", "rank"):
            raise ValueError(tr("by must be 'rank_and_worker' or 'rank', got {by!r}", by=by))
        self.n, self.rank, self.world_size, self.by = n, rank, world_size, by

    def __iter__(self):
        info = get_worker_info()                      # None in the main process (num_workers=0)
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        if self.by == "rank":
            workers, worker = 1, 0
        shards = self.world_size * workers
        k = self.rank * workers + worker
        for i in range(k, self.n, shards):
            yield i


def stream_items(n: int = 50, num_workers: int = 2, by: str = "rank_and_worker") -> list:
    """On every rank: the item numbers this rank's DataLoader delivers from a ShardedStream."""
    import torch.distributed as dist
    ds = ShardedStream(n, dist.get_rank(), dist.get_world_size(), by=by)
    kw = dict(num_workers=num_workers, prefetch_factor=2) if num_workers else {}
    return [int(i) for batch in DataLoader(ds, batch_size=4, **kw) for i in batch]


class SlowStream(IterableDataset):
    """SlowDataset's items as a stream: read one after another, each waiting `wait_s`, split
    over DataLoader workers (worker k takes items k, k + W, ...), as `ShardedStream` does."""

    def __init__(self, data: SlowDataset):
        self.data = data

    def __iter__(self):
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        for i in range(worker, len(self.data), workers):
            yield self.data[i]


def stream_vs_preload(n: int = 96, batch: int = 8, wait_s: float = 0.02, num_workers: int = 4,
                      width: int = 32) -> dict:
    """The notes' 流式读取 against reading the whole data set first, on one process (call it on
    a rank). Both train the same small model for one pass over a SlowDataset; "preload" reads
    every item into memory before the first step, "stream" reads them through `num_workers`
    DataLoader workers while training runs (their start, about 0.1 s each here, is included).
    Returns, for each, seconds to the first step and to the end of the pass."""
    import warnings
    from torch import nn
    data = SlowDataset(n=n, width=width, wait_s=wait_s)
    model = nn.Sequential(nn.Linear(width, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(batches, t0):
        first = None
        for x, y in batches:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            first = first or time.perf_counter() - t0
        return first, time.perf_counter() - t0

    t0 = time.perf_counter()
    items = [data[i] for i in range(n)]                      # read it all, then train
    xs, ys = torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])
    pre = train(zip(xs.split(batch), ys.split(batch)), t0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loader = DataLoader(SlowStream(data), batch_size=batch, num_workers=num_workers,
                            **(dict(prefetch_factor=2) if num_workers else {}))
        t0 = time.perf_counter()
        stream = train(loader, t0)
    return {"preload": {"first step s": pre[0], "pass s": pre[1]},
            "stream": {"first step s": stream[0], "pass s": stream[1]},
            "items": n, "batch": batch, "workers": num_workers, "wait_s": wait_s}


def stream_verdict(res, first: float = 4.0, total: float = 1.3) -> bool:
    """Without workers: ok when the stream's first step comes at least `first` x sooner than
    after preloading (ideal: items / batch; the reads are sleeps, so load does not change it;
    the pass is not shorter: reading and training take turns either way). With workers: ok
    when the whole pass is at least `total` x shorter (ideal: the number of workers; their
    start, which load slows, is included, so their first step is not asserted)."""
    from labkit.verdict import verdict
    p, s, w = res["preload"], res["stream"], res["workers"]
    a, b = p["first step s"] / s["first step s"], p["pass s"] / s["pass s"]
    ok = b >= total if w else a >= first
    return verdict(ok, tr(
        "streaming with {w} workers: first step {a:.1f}x sooner (bar {fa}, ideal {ia:g}x), whole pass "
        "{b:.2f}x shorter (bar {fb}, ideal {ib:g}x) than reading all {n} items first",
        w=w, a=a, fa="-" if w else f"{first:g}x", ia=res["items"] / res["batch"], b=b,
        fb=f"{total:g}x" if w else "-", ib=max(1, w), n=res["items"]))
