"""labkit.memory.measure is exact: expected bytes computed by hand from shapes and dtypes."""
import pytest
import torch
import torch.nn as nn

import labkit.memory as M
from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss

# AwkwardNet(vocab 37, dim 13, hidden 19): embed 37x13 (tied with head), fc1 19x13 + 19,
# fc2 13x19 + 13, frozen 13; buffer `steps` is one int64.
TRAINABLE = [37 * 13, 19 * 13, 19, 13 * 19, 13]        # numel per trainable tensor
FROZEN = 13
N_PARAMS = sum(TRAINABLE) + FROZEN                      # 481 + 247 + 19 + 247 + 13 + 13 = 1020


def _trained(opt_cls=torch.optim.Adam, steps=1, **kw):
    torch.manual_seed(0)
    m = AwkwardNet()
    opt = opt_cls(m.parameters(), lr=1e-3, **kw)
    x, y = awkward_batch(4)
    for _ in range(steps):
        lm_loss(m(x), y).backward()
        opt.step()
    return m, opt


def test_tied_weights_frozen_params_and_buffers():
    m = AwkwardNet()
    assert m.head.weight is m.embed.weight
    assert N_PARAMS == 1020 and M.count_params(m) == N_PARAMS
    b = M.measure(m)
    assert b.params == 4 * N_PARAMS                      # tied weight once, frozen included
    assert b.buffers == 8                                # one int64
    assert b.grads == 0 and b.optimizer == 0
    assert b.total == 4 * 1020 + 8


def test_views_of_one_storage_count_once():
    flat = torch.zeros(100)
    m = nn.Module()
    m.a = nn.Parameter(flat[:60].view(6, 10))
    m.b = nn.Parameter(flat[60:])
    assert M.measure(m).params == 400                    # one storage of 100 fp32


def test_optimizer_before_and_after_its_first_step():
    torch.manual_seed(0)
    m = AwkwardNet()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x, y = awkward_batch(4)
    lm_loss(m(x), y).backward()
    before = M.measure(m, opt)
    assert before.grads == 4 * sum(TRAINABLE)            # frozen has no grad
    assert before.optimizer == 0                         # Adam allocates state lazily
    opt.step()
    after = M.measure(m, opt)
    assert after.momentum == after.variance == 4 * sum(TRAINABLE)
    assert after.other == 4 * len(TRAINABLE)             # one fp32 `step` scalar per tensor
    assert after.master == 0
    formula = M.model_states(sum(TRAINABLE), precision="fp32", optimizer="adam")
    assert after.momentum + after.variance + after.grads == formula.grads + formula.optimizer
    opt.zero_grad(set_to_none=True)
    assert M.measure(m, opt).grads == 0


def test_sgd_momentum_buffer():
    m, opt = _trained(torch.optim.SGD, momentum=0.9)
    b = M.measure(m, opt)
    assert b.momentum == 4 * sum(TRAINABLE) and b.variance == 0 and b.other == 0
    m, opt = _trained(torch.optim.SGD)
    assert M.measure(m, opt).optimizer == 0              # plain SGD keeps nothing


def test_mixed_precision_master_weights_match_the_formula_to_the_byte():
    torch.manual_seed(0)
    m = AwkwardNet().to(torch.bfloat16)
    params = [p for p in m.parameters() if p.requires_grad]
    masters = [p.detach().float().requires_grad_() for p in params]
    opt = torch.optim.AdamW(masters, lr=1e-3)
    x, y = awkward_batch(4)
    lm_loss(m(x).float(), y).backward()
    for p, w in zip(params, masters):
        w.grad = p.grad.float()
    opt.step()
    for w in masters:
        w.grad = None                                     # fp32 grads were only a staging copy
    b = M.measure(m, opt)
    psi = sum(TRAINABLE)
    f = M.model_states(psi, precision="mixed", optimizer="adamw")
    assert b.params == 2 * N_PARAMS                      # frozen bf16 param included
    assert (b.grads, b.master, b.momentum, b.variance) == (f.grads, f.master, f.momentum, f.variance)
    assert b.other == 4 * len(TRAINABLE)


def _shard_and_step(with_step: bool = True):
    """On each rank: shard AwkwardNet row-wise (DTensor Shard(0)), give it gradients, take an
    Adam step, and return (measured Breakdown, local numel per unique parameter)."""
    import torch
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    import labkit
    import labkit.memory as M
    from labkit.toy_models import AwkwardNet
    torch.manual_seed(0)
    m = AwkwardNet()
    mesh = init_device_mesh("cpu", (labkit.world_size(),))
    new = {}
    for mod in m.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None:
                if id(p) not in new:
                    new[id(p)] = nn.Parameter(distribute_tensor(p.data, mesh, [Shard(0)]),
                                              requires_grad=p.requires_grad)
                mod._parameters[name] = new[id(p)]
    assert m.head.weight is m.embed.weight
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    for p in m.parameters():
        if p.requires_grad:
            p.grad = torch.ones_like(p)
    if with_step:
        opt.step()
    return M.measure(m, opt), M.count_params(m, local=True)


def _rows(n, r, rows):
    """Rows of a dim-0 length `rows` on rank r of n (torch.chunk: ceil-sized, last ones short)."""
    per = -(-rows // n)
    return max(0, min(per, rows - r * per))


def test_dtensor_shards_count_their_local_part(cluster):
    n = cluster.world_size
    results = M.per_rank(cluster, lambda: _shard_and_step()[0])
    # (dim 0, elements per row) of every unique parameter; trainable ones last
    shapes = {"frozen": (13, 1), "embed": (37, 13), "fc1.w": (19, 13), "fc1.b": (19, 1),
              "fc2.w": (13, 19), "fc2.b": (13, 1)}
    for r, b in enumerate(results):
        local = {k: _rows(n, r, d0) * width for k, (d0, width) in shapes.items()}
        trainable = sum(v for k, v in local.items() if k != "frozen")
        # distribute_tensor scatters into buffers padded to ceil(rows / n): a shorter last
        # shard is a view into a full-size buffer, and that padding is held, so counted
        padded = {k: -(-d0 // n) * width for k, (d0, width) in shapes.items()}
        assert b.params == 4 * sum(padded.values()), f"rank {r}"
        # gradients and Adam's m, v are allocated at the shard's own size: no padding
        assert b.grads == b.momentum == b.variance == 4 * trainable, f"rank {r}"
        assert b.other == 4 * 5 and b.buffers == 8       # step counters and the buffer: replicated
        assert b.label == f"rank {r}"
    assert sum(b.grads for b in results) == 4 * sum(TRAINABLE)   # the shards add up to the model
    assert sum(cluster.run(lambda: _shard_and_step(False)[1])) == N_PARAMS
    text = M.table(results, formula=M.model_states(N_PARAMS / n, precision="fp32", optimizer="adam"))
    assert text.count("rank") == n and "formula" in text


def test_peak_over_a_step_on_cpu_includes_activations():
    torch.manual_seed(0)
    m = AwkwardNet()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x, y = awkward_batch(64, seq=32)

    def step():
        lm_loss(m(x), y).backward()
        opt.step()

    p = M.peak(step, m, opt, x, y)
    assert p.how == "MemTracker (CPU)"
    assert p.at_peak.params == 4 * N_PARAMS
    assert p.forward.total > p.before and p.backward.total > p.before
    # the logits alone (64 x 32 x 37 fp32) are saved for the loss's backward
    assert p.forward.activations >= 64 * 32 * 37 * 4
    assert p.forward.params == 4 * N_PARAMS and p.forward.optimizer == 0    # first step: no state yet
    assert p.total >= max(p.forward.total, p.backward.total)
    assert p.after.momentum == 4 * sum(TRAINABLE)


def test_gather_inside_the_ranks(cluster2):
    def fn():
        import torch

        import labkit
        import labkit.memory as M
        m = torch.nn.Linear(3 + labkit.rank(), 2)           # a different size on each rank
        return M.gather(M.measure(m))
    out = cluster2.run(fn)
    assert out[0] == out[1]
    assert [b.params for b in out[0]] == [4 * (3 * 2 + 2), 4 * (4 * 2 + 2)]


def test_per_rank_says_what_to_return(cluster2):
    with pytest.raises(TypeError, match="return labkit.memory.measure"):
        M.per_rank(cluster2, lambda: 3)
