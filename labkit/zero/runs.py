"""Measure a ZeRO step on this rank: bytes held, bytes sent, time (layer 5, inside a rank).

    r = step_report(stage=2, mixed=True)     # in cluster.run: measured vs expected
    r["memory"], r["expected"], r["sent"], r["expected_sent"], r["seconds"]
"""
import time

import torch
import torch.distributed as dist

import labkit
from labkit.comm import traffic
from labkit.comm.compat import all_gather_into_tensor, reduce_scatter_tensor
from labkit.memory.accounting import measure
from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss


def awkward():
    """(model, batch function) for the awkward model: tied, frozen, uneven sizes."""
    return AwkwardNet(), lambda b, seed: awkward_batch(b, seed=seed)


def tiny_gpt(n_layer=2, n_embd=128, vocab=1024, seq=32, freeze=()):
    """(TinyGPT, batch function); `freeze` names parameters to freeze (e.g. "pos.weight")."""
    from labkit.toy_models import GPTConfig, TinyGPT, token_batch
    cfg = GPTConfig(vocab_size=vocab, block_size=seq, n_layer=n_layer, n_head=4, n_embd=n_embd)
    model = TinyGPT(cfg)
    for name, p in model.named_parameters():
        if name in freeze:
            p.requires_grad_(False)
    return model, lambda b, seed: token_batch(b, seq, vocab, seed=seed)


def step_report(stage: int, mixed: bool = False, model: str = "awkward", steps: int = 2,
                micro_batches: int = 1, batch: int = 2, optimizer=torch.optim.Adam,
                reduce_dtype=None, lr: float = 1e-3, ranks: int = None, **model_kwargs) -> dict:
    """Train `steps` steps with ZeRO `stage`; measure the last one (memory after the step,
    before zero_grad; bytes sent over the whole step; seconds). ranks=k: only the first k
    ranks train, in a sub-group (the others return None)."""
    from labkit.zero import wrap
    group = None
    if ranks is not None and ranks != dist.get_world_size():
        group = dist.new_group(list(range(ranks)))
        if dist.get_rank() >= ranks:
            return None
    from labkit.zero.accounting import expected_memory, expected_traffic
    torch.manual_seed(0)
    net, batch_fn = (awkward if model == "awkward" else tiny_gpt)(**model_kwargs)
    wrapped, opt = wrap(net, optimizer, stage=stage, mixed_precision=mixed, lr=lr,
                        reduce_dtype=reduce_dtype, group=group)
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    for step in range(steps):
        xs = [batch_fn(batch, 100 * step + 10 * rank + k) for k in range(micro_batches)]
        last = step == steps - 1
        if last:
            dist.barrier(group)
            ctx = traffic.measure(sync=True, group=group)
            m = ctx.__enter__()
            t0 = time.perf_counter()
        for x, y in xs:
            (lm_loss(wrapped(x).float(), y) / micro_batches).backward()
        opt.step()
        if last:
            seconds = time.perf_counter() - t0
            ctx.__exit__(None, None, None)
            held = measure(wrapped, opt, label=f"ZeRO-{stage}")
        opt.zero_grad()
    exp = expected_memory(opt)
    sent = expected_traffic(opt, micro_batches)
    return dict(stage=stage, mixed=mixed, world=n, memory=held, expected=exp,
                sent=m.sent, received=m.received, expected_sent=sum(sent.values()),
                by_collective=sent, seconds=seconds,
                param_bytes=exp.formula.params * (n if stage == 3 else 1))


def _rs(out, inp):
    return reduce_scatter_tensor(out, inp)


def _ag(out, inp):
    return all_gather_into_tensor(out, inp)


def reduce_scatter_bytes(numel: int = 1 << 18) -> dict:
    """Bytes this rank sends for one reduce-scatter and one all-gather of `numel` fp32:
    labkit's ring, torch's reduce_scatter_tensor (on gloo: a full reduction), torch's
    all_gather_into_tensor. Also the tensor's bytes, for the ratios."""
    from labkit.comm import ring_reduce_scatter
    n = dist.get_world_size()
    numel = -(-numel // n) * n
    out = {"tensor bytes": numel * 4}
    x = torch.ones(numel, device=labkit.device())
    for name, fn in (("labkit ring reduce-scatter", lambda: ring_reduce_scatter(x.clone())),
                     ("torch reduce_scatter_tensor", lambda: _rs(x.new_empty(numel // n), x.clone())),
                     ("torch all_gather_into_tensor", lambda: _ag(x.new_empty(numel),
                                                                  x[:numel // n].clone()))):
        dist.barrier()
        with traffic.measure(sync=True) as m:
            fn()
        out[name] = m.sent
    return out


def zero_redundancy_bytes(model: str = "awkward", **model_kwargs) -> dict:
    """Bytes this rank sends in one step of torch's DDP + ZeroRedundancyOptimizer (Adam):
    DDP's all-reduce of the gradients, then each shard broadcast by its owner."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    net, batch_fn = (awkward if model == "awkward" else tiny_gpt)(**model_kwargs)
    ddp = DDP(net)
    opt = ZeroRedundancyOptimizer([p for p in net.parameters() if p.requires_grad],
                                  torch.optim.Adam, lr=1e-3)
    x, y = batch_fn(2, dist.get_rank())
    lm_loss(ddp(x), y).backward()
    opt.step()
    opt.zero_grad()
    dist.barrier()
    with traffic.measure(sync=True) as m:
        lm_loss(ddp(x), y).backward()
        opt.step()
    psi = sum(p.numel() for p in net.parameters() if p.requires_grad)
    return {"sent": m.sent, "param_bytes": 4 * psi}


def interleaved(rounds: int = 4, mixed: bool = False, batch: int = 2, torch_zero: bool = True,
                **model_kwargs) -> dict:
    """DDP (stage 0), stages 1-3 (and torch's DDP + ZeroRedundancyOptimizer) on one model,
    stepped in turn, round after round, so a change of load hits all alike. Per variant:
    step seconds of the slowest rank per round, bytes sent per step (last round), model-state
    bytes measured and by formula (with the named extras) on this rank."""
    from labkit.zero import wrap
    from labkit.zero.accounting import expected_memory
    rank = dist.get_rank()
    variants = {}
    for stage in range(4):
        torch.manual_seed(0)
        net, batch_fn = tiny_gpt(**model_kwargs)
        variants[f"ZeRO-{stage}" + (" (DDP)" if stage == 0 else "")] = \
            wrap(net, torch.optim.Adam, stage=stage, mixed_precision=mixed, lr=1e-3)
    if torch_zero and not mixed:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        net, batch_fn = tiny_gpt(**model_kwargs)
        variants["torch DDP + ZeroRedundancyOptimizer"] = (
            DDP(net), ZeroRedundancyOptimizer(list(net.parameters()), torch.optim.Adam, lr=1e-3))
    out = {k: {"times": []} for k in variants}
    names = list(variants)
    for rnd in range(rounds + 1):                      # round 0 warms up
        x, y = batch_fn(batch, 1000 * rnd + rank)
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            model, opt = variants[name]
            dist.barrier()
            with traffic.measure(sync=True) as m:
                t0 = time.perf_counter()
                lm_loss(model(x).float(), y).backward()
                opt.step()
                dt = torch.tensor([time.perf_counter() - t0], device=y.device)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if rnd:
                out[name]["times"].append(dt.item())
                out[name]["sent"] = m.sent
            if rnd == rounds:
                out[name]["memory"] = measure(model, getattr(opt, "optim", opt)).model_state
                out[name]["expected"] = (expected_memory(opt) if hasattr(opt, "stage") else None)
            opt.zero_grad()
    psi = sum(p.numel() for p in tiny_gpt(**model_kwargs)[0].parameters())
    for name, r in out.items():
        r["median"] = sorted(r["times"])[len(r["times"]) // 2]
        e = r.pop("expected")
        r["formula"] = e.formula.model_state if e is not None else None
        r["extras"] = (e.total.model_state - e.formula.model_state) if e is not None else None
    return {"variants": out, "psi": psi, "param_bytes": psi * (2 if mixed else 4),
            "world": dist.get_world_size(), "mixed": mixed}
