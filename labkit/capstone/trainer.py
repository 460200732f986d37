"""The capstone's trainer on dp x pp x tp ranks, and the same on one process (layer 3).

    res = cluster.run(train, Config(), dp=2, pp=2, tp=2, steps=3)   # every rank's dict
    ref = reference(Config(), steps=3)

Applied from outside, in torchtitan's order: the pipeline split (labkit.capstone.model.stage_of),
tensor parallelism on the stage's blocks (labkit.tp.TPBlock), then data parallelism (one flat
all-reduce of every gradient over the DP group, averaged). The micro-batches run by a
labkit.pipeline.one_f_one_b schedule: activations forward, gradients backward with isend /
irecv between the ranks `Layout.rank_of` names (a send never waits, so 1F1B's steady state,
where neighbours both send first, cannot deadlock on gloo).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from labkit.capstone.data import global_batch
from labkit.capstone.model import Config, build, stage_of, tp_replicated

__all__ = ["groups", "train", "reference", "WRONG"]

WRONG = ("loss not divided by micro-batches", "clip norm summed over TP", "no DP reduction")
WRONG_SP = ("replicated gradients not summed over TP",)      # with sequence_parallel=True


def groups(dp: int, pp: int, tp: int):
    """(layout, {'dp', 'pp', 'tp': this rank's group}) from one grid, the notes' order
    (labkit.nd.layout.Layout validates it; every rank makes every group)."""
    from labkit.comm.groups import once
    from labkit.nd.layout import Layout, build_groups
    layout = Layout(dp=dp, pp=pp, tp=tp, gpus_per_node=max(8, dp * pp * tp))
    return layout, once(("capstone", dp, pp, tp), lambda: build_groups(layout))


def _ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def _pipeline(stage, s, me, prev, nxt, xs, ys, divide: bool, shape, share: int = 1):
    """One step of schedule `s` on this stage: returns the sum of its micro-batch losses
    (last stage; each loss / m unless divide=False, and / share: sequence parallelism's t ranks
    each hold a mean over s / t positions), gradients accumulated in the stage."""
    m = s.microbatches
    inp, out, pending, loss_sum = {}, {}, [], 0.0
    for a in s.actions[me]:
        mb = a.mb
        if a.kind == "F":
            if stage.first:
                x = xs[mb]
            else:
                x = torch.empty(shape)
                dist.irecv(x, prev, tag=mb).wait()
                x.requires_grad_(True)
            y = stage(x)
            if stage.last:
                y = _ce(y, ys[mb]) / (m if divide else 1) / share
                loss_sum += float(y.detach())
            else:
                y_send = y.detach().contiguous()
                pending.append((dist.isend(y_send, nxt, tag=mb), y_send))
            inp[mb], out[mb] = x, y
        elif a.kind == "B":
            y, x = out.pop(mb), inp.pop(mb)
            if stage.last:
                y.backward()
            else:
                g = torch.empty(shape)
                dist.irecv(g, nxt, tag=m + mb).wait()
                y.backward(g)
            if not stage.first:
                gx = x.grad.contiguous()
                pending.append((dist.isend(gx, prev, tag=m + mb), gx))
        else:
            raise ValueError(f"the capstone's executor runs F and B actions, not {a.kind}")
    for work, _ in pending:
        work.wait()
    return loss_sum


def _zero_step(params, flat, count, cfg, g, dp: int, me: int) -> float:
    """ZeRO-2 over the DP group by hand (the gradient reduce-scattered, each DP rank steps its
    shard of the flat parameters, an all-gather puts them back; SGD has no state to shard, so
    stage 1 alone would change nothing): returns the global gradient norm, whose squares are
    now summed over the DP shards too."""
    from labkit.nd.clipping import global_grad_norm
    from labkit.comm.compat import all_gather_into_tensor
    from labkit.comm.ring import ring_reduce_scatter
    n = flat.numel()
    pad = -n % dp
    k = (n + pad) // dp
    lo = me * k
    shard = ring_reduce_scatter(torch.cat([flat, flat.new_zeros(pad)]), g["dp"]).clone() / dp
    weight = torch.cat([count, count.new_zeros(pad)])[lo:lo + k]
    norm = global_grad_norm(shard, weight, {"dp": g["dp"], "tp": g["tp"], "pp": g["pp"]})
    coef = min(1.0, cfg.max_norm / (float(norm) + 1e-6))                     # torch's clip rule
    with torch.no_grad():
        full = torch.cat([torch.cat([p.reshape(-1) for p in params]), flat.new_zeros(pad)])
        mine = full[lo:lo + k] - cfg.lr * coef * shard
        all_gather_into_tensor(full, mine.contiguous(), group=g["dp"])
        off = 0
        for p in params:
            p.copy_(full[off:off + p.numel()].view_as(p))
            off += p.numel()
    return norm


def flat_grads(params) -> torch.Tensor:
    """Every parameter's gradient in one flat tensor (zeros where a parameter got none)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in params])


def clipped_sgd(params, flat, count, cfg, g) -> torch.Tensor:
    """The global gradient norm (TP-split weights summed over TP, stages over PP; the replicas of
    the other dimensions counted once), torch's clip rule and one SGD step; returns the norm."""
    from labkit.nd.clipping import global_grad_norm
    norm = global_grad_norm(flat, count, {"tp": g["tp"], "pp": g["pp"]})
    coef = min(1.0, cfg.max_norm / (float(norm) + 1e-6))                     # torch's rule
    with torch.no_grad():
        k = 0
        for p in params:
            p -= cfg.lr * coef * flat[k:k + p.numel()].view_as(p)
            k += p.numel()
    return norm


def train(cfg: Config = Config(), dp: int = 2, pp: int = 2, tp: int = 2, steps: int = 3,
          wrong: str = None, zero: bool = False, sequence_parallel: bool = False) -> dict:
    """`steps` SGD steps of the capstone model on this rank's part of dp x pp x tp (call on
    every rank). zero=True: the data-parallel wrapping is ZeRO-2 by hand (`_zero_step`) instead
    of one all-reduce. sequence_parallel=True: TPBlock's sequence parallelism, each TP rank's
    loss the mean of its s / t positions divided by t, the replicated parameters' gradients
    (embeddings, norms, row-parallel biases, head) summed over TP (WRONG_SP leaves that out).
    Returns {"rank", "coords", "losses" (the global batch's mean loss per step,
    the same on every rank), "norms" (the clipped gradient norm per step)}."""
    from labkit.i18n import tr
    from labkit.pipeline import ensure_valid, one_f_one_b
    if wrong is not None and wrong not in WRONG + WRONG_SP:
        raise ValueError(tr("wrong must be None or one of {names}, got {wrong!r}",
                            names=", ".join(WRONG + WRONG_SP), wrong=wrong))
    if dist.get_world_size() != dp * pp * tp:
        raise ValueError(tr("dp({dp}) x pp({pp}) x tp({tp}) = {n} != world size ({w}); start "
                            "labkit.Cluster({n})", dp=dp, pp=pp, tp=tp, n=dp * pp * tp,
                            w=dist.get_world_size()))
    if zero and wrong in ("no DP reduction", "clip norm summed over TP"):
        raise ValueError(tr("wrong={wrong!r} is a variant of the all-reduce route: run it with "
                            "zero=False", wrong=wrong))
    m = cfg.microbatches
    if cfg.batch % (dp * m):
        raise ValueError(tr("batch {b} rows do not split into dp({dp}) x microbatches({m}) = {n}: "
                            "pick a batch that is a multiple of {n}", b=cfg.batch, dp=dp, m=m, n=dp * m))
    layout, g = groups(dp, pp, tp)
    rank = dist.get_rank()
    c = layout.coords(rank)
    sp = sequence_parallel and tp > 1
    stage = stage_of(build(cfg), pp, c.pp, g["tp"] if tp > 1 else None, sequence_parallel=sp)
    params = [p for p in stage.parameters() if p.requires_grad]
    replicated = tp_replicated(stage)
    count = torch.cat([torch.full((p.numel(),), float(c.tp == 0 or not replicated[id(p)]
                                                      or wrong == "clip norm summed over TP"),
                                  dtype=torch.float64) for p in params])
    prev = layout.rank_of(dp=c.dp, pp=c.pp - 1, tp=c.tp) if c.pp > 0 else None
    nxt = layout.rank_of(dp=c.dp, pp=c.pp + 1, tp=c.tp) if c.pp < pp - 1 else None
    s = ensure_valid(one_f_one_b(pp, m))
    rows = cfg.batch // dp
    shape = (rows // m, cfg.seq // (tp if sp else 1), cfg.n_embd)
    losses, norms = [], []
    for step in range(steps):
        x, y = global_batch(step, cfg.batch, cfg.seq)
        x, y = x[c.dp * rows:(c.dp + 1) * rows], y[c.dp * rows:(c.dp + 1) * rows]
        if sp:
            y = y[:, c.tp * shape[1]:(c.tp + 1) * shape[1]]     # this TP rank's positions
        for p in params:
            p.grad = None
        loss = _pipeline(stage, s, c.pp, prev, nxt, x.chunk(m), y.chunk(m),
                         wrong != "loss not divided by micro-batches", shape, tp if sp else 1)
        if sp and wrong != "replicated gradients not summed over TP":
            for p in params:        # each TP rank saw s / t positions: a part of the sum
                if replicated[id(p)] and p.grad is not None:
                    dist.all_reduce(p.grad, group=g["tp"])
        flat = flat_grads(params)
        if zero and dp > 1:
            norm = _zero_step(params, flat, count, cfg, g, dp, c.dp)
        else:
            if dp > 1 and wrong != "no DP reduction":     # data parallelism: the mean over replicas
                dist.all_reduce(flat, group=g["dp"])
                flat /= dp
            norm = clipped_sgd(params, flat, count, cfg, g)                  # DP: replicas
        t = torch.tensor([loss if stage.last else 0.0], dtype=torch.float64)
        dist.all_reduce(t, group=g["pp"])            # the last stage's loss, to every stage
        if sp:
            dist.all_reduce(t, group=g["tp"])        # each TP rank's part of the mean
        dist.all_reduce(t, group=g["dp"])
        losses.append(float(t) / dp)
        norms.append(float(norm))
    return {"rank": rank, "coords": tuple(c), "losses": losses, "norms": norms}


def reference(cfg: Config = Config(), steps: int = 3) -> dict:
    """The same steps on one process, the whole batch: {"losses", "norms" (before clipping),
    "grad_l1" (|grad|_1 per step), "grads" (each step's gradients, before clipping), "params"
    (each step's |parameters| before its update), and the scales the bounds need, read off this run:
    "activation" (largest |output| of any module), "gradient" (largest |grad|), "param"}."""
    model = build(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    biggest = [0.0]

    def hook(_mod, _inp, out):
        if torch.is_tensor(out):
            biggest[0] = max(biggest[0], float(out.detach().abs().max()))
    handles = [mod.register_forward_hook(hook) for mod in model.modules()]
    losses, norms, l1, gmax, pmax, grads, pabs = [], [], [], 0.0, 0.0, [], []
    for step in range(steps):
        x, y = global_batch(step, cfg.batch, cfg.seq)
        model.zero_grad(set_to_none=True)
        loss = _ce(model(x), y)
        loss.backward()
        l1.append(sum(float(p.grad.abs().sum()) for p in params))
        gmax = max(gmax, max(float(p.grad.abs().max()) for p in params))
        grads.append([p.grad.detach().clone() for p in params])
        pabs.append([p.detach().abs() for p in params])
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, cfg.max_norm)))
        with torch.no_grad():
            for p in params:
                p -= cfg.lr * p.grad
        pmax = max(pmax, max(float(p.detach().abs().max()) for p in params))
        losses.append(float(loss.detach()))
    for h in handles:
        h.remove()
    return {"losses": losses, "norms": norms, "grad_l1": l1, "activation": biggest[0],
            "gradient": gmax, "param": pmax, "numel": sum(p.numel() for p in params),
            "grads": grads, "params": pabs}
