"""What notebook 09's checker (labkit.check.tricks) watches on the rank while the learner's
gradient-accumulation loop runs, and the second world it runs that loop in.

`Watch` sees the loop from inside: every forward (the rows of the local batch it got), every
backward through a forward's output, every dist.all_reduce (its tensor, and how many forwards
had run), and the bytes autograd saved for backward alive at once. `split_world` and `AsWorld`
give the same loop another world size: the ranks cut into two groups, each group taken as the
whole world for the call, so an answer written for 2 ranks fails there.
"""
from labkit.i18n import tr


class Watch:
    """What the learner's loop does with the model, seen from inside (rank side): each forward
    (the rows the embedding received), each backward through a forward's output, each
    dist.all_reduce (its tensor, and how many forwards had run), and the bytes autograd saved for
    backward that are alive at once (parameters not counted: they live anyway)."""

    def __init__(self, model, x):
        self.model, self.x = model, x
        self.forwards, self.events, self.reduces = [], [], []
        self.alive = self.peak = 0
        self.params = {p.data_ptr() for p in model.parameters()}

    def __enter__(self):
        import torch
        import torch.distributed as dist
        self.handles = [self.model.embed.register_forward_pre_hook(self._forward),
                        self.model.head.register_forward_hook(self._output)]
        self.saving = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda box: box.t)
        self.saving.__enter__()
        self.real = dist.all_reduce
        dist.all_reduce = self._all_reduce
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist
        dist.all_reduce = self.real
        self.saving.__exit__(*exc)
        for h in self.handles:
            h.remove()
        return False

    def _forward(self, module, args):
        tokens = args[0]
        self.forwards.append(tokens.detach().clone())
        self.events.append(("F", len(self.forwards) - 1))

    def _output(self, module, args, out):
        k = len(self.forwards) - 1
        if out.requires_grad:
            out.register_hook(lambda g, k=k: self.events.append(("B", k)))

    def _pack(self, t):
        import weakref
        if t.data_ptr() in self.params:
            return Box(t)
        size = t.numel() * t.element_size()
        self.alive += size
        self.peak = max(self.peak, self.alive)
        box = Box(t)
        weakref.finalize(box, self._free, size)
        return box

    def _free(self, size):
        self.alive -= size

    def _all_reduce(self, tensor, *args, **kwargs):
        if hasattr(tensor, "data_ptr"):
            self.reduces.append((tensor.data_ptr(), tensor.numel(), len(self.forwards)))
        return self.real(tensor, *args, **kwargs)

    def rows(self):
        """For each forward, the indices of the local batch's rows it saw (-1: a row not in it)."""
        index = {tuple(row.tolist()): i for i, row in enumerate(self.x)}
        return [[index.get(tuple(row.tolist()), -1) for row in f.reshape(-1, self.x.shape[1])]
                for f in self.forwards]


class Box:
    """A saved tensor, held by autograd; its finalizer counts the bytes freed."""
    __slots__ = ("t", "__weakref__")

    def __init__(self, t):
        self.t = t


def split_world(n):
    """This rank's group for the second case, another world size (n - 1 ranks and 1 rank, or 1
    and 1 on two ranks): made once per process, every rank creating every group in order."""
    import torch.distributed as dist
    from labkit.comm.groups import once
    cut = n - 1 if n > 2 else 1
    parts = [list(range(cut)), list(range(cut, n))]
    made = once(("check.tricks", n), lambda: [dist.new_group(ranks) for ranks in parts])
    mine = 0 if dist.get_rank() < cut else 1
    return made[mine], parts[mine]


class AsWorld:
    """Inside the block the learner's code sees `group` as the whole world: dist.all_reduce,
    get_world_size, get_rank and every call without a group use it (torch's default group,
    swapped for the block, put back after). A send or receive to a rank outside it raises here
    (gloo would crash the process)."""

    P2P = ("send", "recv", "isend", "irecv")

    def __init__(self, group):
        self.group = group

    def __enter__(self):
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
        self.world = c10d._world.default_pg
        self.real = {name: getattr(dist, name) for name in self.P2P}
        size = self.group.size()
        for name in self.P2P:
            setattr(dist, name, self._checked(self.real[name], size, "dst" if "send" in name else "src"))
        c10d._world.default_pg = self.group
        return self

    @staticmethod
    def _checked(real, size, key):
        def call(tensor, *args, **kwargs):
            peer = args[0] if args else kwargs.get(key)
            if kwargs.get("group") is None and peer is not None and not 0 <= int(peer) < size:
                raise ValueError(tr("rank {peer} does not exist in a world of size {k} (ranks 0 to {last})",
                                    peer=peer, k=size, last=size - 1))
            return real(tensor, *args, **kwargs)
        return call

    def __exit__(self, *exc):
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
        c10d._world.default_pg = self.world
        for name, fn in self.real.items():
            setattr(dist, name, fn)
        return False
