"""labkit.zero against one process on the global batch: every stage, both precisions,
1 to 4 ranks, AwkwardNet (tied weights, a frozen parameter, sizes no world size divides)."""
import pytest
import torch

import labkit
from labkit.zero.parity import MIXED_LR, MIXED_OPTIMIZER, mixed_failures, parity, sgd_momentum_bound

LR, STEPS = 1e-2, 3


def _all_configs(micro_batches=1, ranks=None):
    """Every stage and precision; on the first `ranks` ranks only, through a sub-group
    (1 and 3 ranks run inside the 4-rank cluster: no extra cluster to start)."""
    import torch.distributed as dist
    n = dist.get_world_size()
    group = dist.new_group(list(range(ranks))) if ranks not in (None, n) else None
    if ranks is not None and dist.get_rank() >= ranks:
        return {}
    out = {}
    for stage in (0, 1, 2, 3):
        for mixed in (False, True):
            # mixed precision with SGD: its update is linear in the gradient (see reference.py);
            # fp32 Adam for one step: its bound holds for the first step only (reference.py)
            kw = dict(optimizer=MIXED_OPTIMIZER, lr=MIXED_LR, steps=STEPS) if mixed else dict(lr=LR, steps=1)
            out[(stage, mixed)] = parity(stage, mixed, group=group,
                                         micro_batches=micro_batches, **kw)
        # fp32 over several steps: SGD with momentum, whose bound is derived (reference.py)
        sgd = parity(stage, False, steps=STEPS, group=group, micro_batches=micro_batches,
                     optimizer=torch.optim.SGD, lr=0.1, momentum=0.9)
        sgd["bound"] = sgd_momentum_bound(dist.get_world_size(group), micro_batches, 2, STEPS, 0.1, 0.9)
        out[(stage, "sgd")] = sgd
    return out


def _check(results, label):
    for (stage, mixed), r in results.items():
        if mixed == "sgd":                                   # derived: reference.sgd_momentum_bound
            assert max(r["params"]) <= r["bound"] and max(r["masters"]) <= r["bound"], (label, stage, r)
        elif mixed:
            assert not mixed_failures(r), (label, stage, mixed_failures(r), r)
        else:
            # derived: Adam's first step, per element (numerics.one_step_over_bound); its later
            # steps have no bound, the several-step runs are the SGD ones above
            assert len(r["params"]) == 1 and r["over_bound"] <= 1, (label, stage, r)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_stage_matches_one_process(n, cluster4):
    results = cluster4.run(_all_configs, 1, n)
    assert [bool(r) for r in results] == [r < n for r in range(4)]
    for r in results[:n]:
        _check(r, f"N={n}")


def test_gradient_accumulation_matches_one_process(cluster2):
    for r in cluster2.run(_all_configs, 3):
        _check(r, "3 micro-batches")


def _other_optimizers():
    from labkit.zero.parity import parity as p
    # AdamW judged after its first step (per element, reference.py); the multi-step runs, with
    # and without prefetch, use SGD with momentum, whose bound holds for every step
    return {("sgd-momentum", 3): p(3, optimizer=torch.optim.SGD, steps=STEPS, lr=0.1, momentum=0.9),
            ("adamw", 1): p(1, optimizer=torch.optim.AdamW, steps=1, lr=LR),
            ("sgd-momentum prefetch", 3): p(3, optimizer=torch.optim.SGD, steps=STEPS, lr=0.1,
                                            momentum=0.9, prefetch=True)}


def test_other_optimizers_and_prefetch(cluster2):
    bound = sgd_momentum_bound(2, 1, 2, STEPS, 0.1, 0.9)     # parity's batch 2 per rank, 2 ranks
    for r in cluster2.run(_other_optimizers):
        for key, v in r.items():
            if key[0] == "adamw":
                assert len(v["params"]) == 1 and v["over_bound"] <= 1, (key, v)
            else:
                assert max(v["params"]) <= bound and max(v["masters"]) <= bound, (key, v, bound)


def _plain_torch_optimizer_on_shards():
    """Stage 3's parameters() are shards: a torch optimizer built on them trains the model."""
    import torch.distributed as dist
    from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss
    from labkit.zero.stage3 import Stage3
    torch.manual_seed(0)
    model = Stage3(AwkwardNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = awkward_batch(4, seed=dist.get_rank())
    losses = []
    for _ in range(5):
        loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    full = sum(t.numel() for t in model.full_parameters().values())
    return losses, full, sum(p.numel() for p in model.parameters())


def test_stage3_parameters_are_shards(cluster2):
    for losses, full, local in cluster2.run(_plain_torch_optimizer_on_shards):
        assert losses[-1] < losses[0]
        assert local < full          # this rank holds about half of the parameters
        assert local <= full // 2 + 20


def _prefetch_order():
    from labkit.toy_models import awkward_batch, lm_loss
    from labkit.zero.runs import tiny_gpt
    model, _ = tiny_gpt(n_layer=3, n_embd=32, vocab=64, seq=8)
    wrapped, opt = labkit.zero.wrap(model, torch.optim.Adam, stage=3, prefetch=True, lr=1e-3)
    from labkit.toy_models import token_batch
    x, y = token_batch(2, 8, 64)
    from labkit import trace
    from labkit.zero.stage3 import Events
    lm_loss(wrapped(x), y).backward()           # first step records the forward order
    with trace.recording(Events(wrapped)) as rec:
        lm_loss(wrapped(x), y).backward()
    return [(e["unit"], e["kind"], e["phase"]) for e in rec.events]


def test_prefetch_gathers_the_next_layer_before_it_runs(cluster2):
    ev = cluster2.run(_prefetch_order)[0]
    fwd = [e for e in ev if e[2] == "forward"]
    i = fwd.index(("blocks.1", "prefetch", "forward"))
    assert fwd.index(("blocks.0", "compute", "forward")) > i       # issued while blocks.0 runs
    assert fwd.index(("blocks.1", "compute", "forward")) > i
    assert any(e[1] == "reduce-scatter" for e in ev)


def _errors():
    from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss
    out = {}
    for name, call in {
        "stage": lambda: labkit.zero.wrap(AwkwardNet(), torch.optim.Adam, stage=4),
        "class": lambda: labkit.zero.wrap(AwkwardNet(), "adam", stage=1),
        "instance": lambda: labkit.zero.wrap(AwkwardNet(), torch.optim.Adam(
            AwkwardNet().parameters()), stage=1),
    }.items():
        try:
            call()
        except (ValueError, TypeError) as e:
            out[name] = str(e)
    for stage in (1, 3):
        m, opt = labkit.zero.wrap(AwkwardNet(), torch.optim.Adam, stage=stage, lr=1e-3)
        try:
            labkit.zero.wrap(m, torch.optim.Adam, stage=2)
        except RuntimeError as e:
            out[f"again{stage}"] = str(e)
        try:
            opt.step()
        except RuntimeError as e:
            out[f"step{stage}"] = str(e)
        x, y = awkward_batch(2)
        lm_loss(m(x), y).backward()
        opt.step()                           # after backward it works
    return out


def test_errors_say_what_to_do(cluster2):
    out = cluster2.run(_errors)[1]
    assert "stage must be 0, 1, 2 or 3, got 4" in out["stage"]
    assert "torch optimizer class" in out["class"] and "'adam'" in out["class"]
    assert "pass the class, not an instance" in out["instance"]
    for s in (1, 3):
        assert "already wrapped" in out[f"again{s}"]
        assert out[f"step{s}"].startswith("rank 1: optimizer.step() was called before any loss.backward()")


def test_reference_names_a_parameter_without_gradient():
    """A trainable parameter that forward never uses has no gradient: the one-process reference
    names it instead of failing on None."""
    from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss
    from labkit.zero.parity import OneProcess
    model = AwkwardNet()
    model.register_parameter("unused_bias", torch.nn.Parameter(torch.zeros(3)))
    ref = OneProcess(model, torch.optim.SGD, mixed_precision=True, lr=0.1)
    x, y = awkward_batch(2)
    lm_loss(model(x).float(), y).backward()
    with pytest.raises(RuntimeError, match=r"\['unused_bias'\] require a gradient but got none"):
        ref.step()
