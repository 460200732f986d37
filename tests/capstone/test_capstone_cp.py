"""Module 14's trainer with context parallelism as a fourth dimension (labkit.capstone.cp) and
its checkpoint across layouts (labkit.capstone.checkpoint): every step's loss against one
process within the derived bound, the gradients left unreduced over CP outside it, a
torch.distributed.checkpoint written by dp 2 x pp 2 x tp 2 resumed on dp 4 x pp 2 and on one
rank, and all four dimensions at once on 16 ranks (about 14 s on a 2-core machine: start 10 s,
two steps 3.4 s)."""
import pytest

import labkit

pytestmark = pytest.mark.cluster

STEPS = 3


@pytest.fixture(scope="module")
def cluster8():
    with labkit.Cluster(8, backend="gloo", spares=0, timeout=180) as c:
        yield c


@pytest.fixture(scope="module")
def ref():
    from labkit.capstone.model import Config
    from labkit.capstone.trainer import reference
    return reference(Config(), steps=STEPS)


def _ratios(res, ref, layout):
    from labkit.capstone.bounds import ratios
    from labkit.capstone.cp import loss_bounds
    from labkit.capstone.model import Config
    losses = res[0]["losses"]
    assert all(r["losses"] == losses for r in res), [r["losses"] for r in res]   # every rank agrees
    start = res[0]["start"]
    bounds = loss_bounds(Config(), ref, **layout)[start:]
    return ratios([abs(a - b) for a, b in zip(losses, ref["losses"][start:])], bounds)


def _run(cluster, layout, **kw):
    from labkit.capstone.cp import train
    from labkit.capstone.model import Config
    return cluster.run(train, Config(), steps=kw.pop("steps", STEPS), **layout, **kw)


@pytest.mark.parametrize("layout", [dict(dp=2, pp=2, tp=1, cp=2), dict(dp=1, pp=2, tp=2, cp=2)],
                         ids=["dp2xpp2xcp2", "pp2xtp2xcp2"])
def test_cp_in_place_of_one_dimension_equals_one_process(cluster8, ref, layout):
    r = _ratios(_run(cluster8, layout), ref, layout)
    print(f"\n{layout} observed / bound per step: {[f'{x:.1e}' for x in r]}")
    assert max(r) <= 1, r


def test_tp2_x_cp2_on_4_ranks_equals_one_process(cluster4, ref):
    layout = dict(dp=1, pp=1, tp=2, cp=2)
    r = _ratios(_run(cluster4, layout), ref, layout)
    print(f"\n{layout} observed / bound per step: {[f'{x:.1e}' for x in r]}")
    assert max(r) <= 1, r


@pytest.mark.parametrize("wrong", ["no CP reduction", "no DP reduction"])
def test_gradients_not_reduced_differ_beyond_the_bound(cluster8, ref, wrong):
    layout = dict(dp=2, pp=2, tp=1, cp=2)
    r = _ratios(_run(cluster8, layout, wrong=wrong), ref, layout)
    print(f"\n{wrong}, observed / bound per step: {[f'{x:.1e}' for x in r]}")
    assert max(r) > 1, r


def test_checkpoint_resumes_on_another_layout(cluster8, cluster1, ref, tmp_path):
    """Saved after k = 2 steps under dp 2 x pp 2 x tp 2, resumed under dp 4 x pp 2 and on one
    rank: step k's loss (the first after the resume) equals one process's within the bound."""
    path = str(tmp_path / "step2")
    first = _run(cluster8, dict(dp=2, pp=2, tp=2, cp=1), save_at=2, ckpt=path)
    for cluster, layout in ((cluster8, dict(dp=4, pp=2, tp=1, cp=1)),
                            (cluster1, dict(dp=1, pp=1, tp=1, cp=1))):
        res = _run(cluster, layout, resume=path)
        assert res[0]["start"] == 2
        r = _ratios(res, ref, layout)
        print(f"\nresumed on {layout}: loss {res[0]['losses']} against the 2x2x2 run's "
              f"{first[0]['losses'][2:]}, observed / bound {[f'{x:.1e}' for x in r]}")
        assert max(r) <= 1, r


def test_dp_tp_pp_cp_2x2x2x2_on_16_ranks_equals_one_process(ref):
    layout = dict(dp=2, pp=2, tp=2, cp=2)
    with labkit.Cluster(16, backend="gloo", spares=0, timeout=180) as c:
        r = _ratios(_run(c, layout, steps=2), ref, layout)
    print(f"\n2x2x2x2 observed / bound per step: {[f'{x:.1e}' for x in r]}")
    assert max(r) <= 1, r


def _save_shifted(path, dp, pp, tp):
    """Rank side: the capstone model with every parameter moved off its initial value (so a
    wrongly placed row shows), cut and split for dp x pp x tp, saved by checkpoint.save."""
    import torch
    import torch.distributed as dist
    from labkit.capstone.checkpoint import save
    from labkit.capstone.cp import dp_cp_groups
    from labkit.capstone.model import Config, build, stage_of
    cfg = Config()
    layout, g = dp_cp_groups(dp, pp, tp, 1)
    c = layout.coords(dist.get_rank())
    model = build(cfg)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(torch.arange(p.numel(), dtype=p.dtype).view_as(p) * 1e-3 + i)
    tp_group = g["tp"] if tp > 1 else None
    save(stage_of(model, pp, c.pp, tp_group), c.pp * (cfg.n_layer // pp), 5, path, tp_group)
    return dict(model.state_dict())


def test_checkpoint_holds_the_one_process_tensors_exactly(cluster8, tmp_path):
    """The files written by dp 2 x pp 2 x tp 2 hold the one-process model's tensors bit for bit
    (fused q/k/v rows, row-parallel columns put back in place), read here without ranks."""
    from labkit.capstone.checkpoint import load
    from labkit.capstone.model import Config, build
    path = str(tmp_path / "shifted")
    want = _run_save(cluster8, path)
    got = build(Config())
    assert load(got, path) == 5
    diffs = {k: (v - want[k]).abs().max().item() for k, v in got.state_dict().items()}
    assert max(diffs.values()) == 0, {k: d for k, d in diffs.items() if d}


def _run_save(cluster, path):
    return cluster.run(_save_shifted, path, 2, 2, 2)[0]


def test_activation_checkpointing_changes_nothing_but_memory(cluster8, ref, tmp_path):
    """Every block recomputed in backward (after TP and CP, torchtitan's order) on 2 x 2 x 2 with
    CP: the same losses within the bound, and its checkpoint holds the same names."""
    from labkit.capstone.checkpoint import load
    from labkit.capstone.model import Config, build
    layout = dict(dp=2, pp=2, tp=1, cp=2)
    path = str(tmp_path / "recompute")
    r = _ratios(_run(cluster8, layout, checkpointing=True, save_at=1, ckpt=path), ref, layout)
    print(f"\n{layout} with activation checkpointing, observed / bound: {[f'{x:.1e}' for x in r]}")
    assert max(r) <= 1, r
    assert load(build(Config()), path) == 1
