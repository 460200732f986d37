"""labkit.capstone.native: torch's route (DTensor TP, FSDP2, torch.distributed.pipelining) on
8 gloo ranks, every step's loss against one process within labkit.capstone's derived bound."""
import pytest

import labkit

pytestmark = pytest.mark.cluster

STEPS = 3


def test_native_2x2x2_losses_equal_one_process():
    from labkit.capstone import Config, loss_bounds, reference
    from labkit.capstone.bounds import ratios
    from labkit.capstone.native import train_native
    cfg = Config()
    ref = reference(cfg, steps=STEPS)
    with labkit.Cluster(8, backend="gloo", spares=0, timeout=120) as c:
        res = c.run(train_native, cfg, dp=2, pp=2, tp=2, steps=STEPS)
    assert res[0]["mesh"] == res[0]["layout"], (res[0]["mesh"], res[0]["layout"])
    losses = res[0]["losses"]
    assert all(r["losses"] == losses for r in res), [r["losses"] for r in res]
    r = ratios([abs(a - b) for a, b in zip(losses, ref["losses"])],
               loss_bounds(cfg, ref, dp=2, pp=2, tp=2))
    print(f"\nnative 2x2x2 observed / bound per step: {[f'{x:.1e}' for x in r]}")
    assert max(r) <= 1, r
