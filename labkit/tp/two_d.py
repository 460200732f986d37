"""FSDP2 over data parallel x tensor parallel on a 2-D device mesh, against one process.

    cluster.run(two_d_parity, dp=2, tp=2)      # 4 ranks: mesh [[0, 1], [2, 3]], rows = DP

The order is torchtitan's (`parallelize_llama`): tensor parallelism first (DTensor's
`parallelize_module` on the "tp" mesh dimension), then `fully_shard` on the "dp" dimension, so
each parameter is a DTensor sharded two ways (its rows or columns across TP, then dim 0
across DP). Each DP rank trains on its half of the batch; one SGD step must give the weights
one process gets on the whole batch.
"""
import torch
import torch.distributed as dist


def tolerance(b: int = 4, steps: int = 2, lr: float = 0.1) -> float:
    """The most `two_d_parity`'s parameters may differ from one process on any CPU (derived):
    `steps` SGD steps at `lr` on gradients within labkit.tp.parity.tolerance(b=b) of the
    reference's (labkit.numerics.sgd_bound; |p| below labkit.tp.parity.SCALE)."""
    from labkit.numerics import sgd_bound
    from labkit.tp.parity import SCALE, tolerance as gradients
    return sgd_bound(gradients(b=b), lr=lr, steps=steps, param_scale=SCALE)


def two_d_parity(dp: int = 2, tp: int = 2, n_layer: int = 2, n_embd: int = 64, n_head: int = 4,
                 b: int = 4, s: int = 16, steps: int = 2, lr: float = 0.1) -> dict:
    import logging
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from labkit.tp.dtensor_tp import SplitBlock, dtensor_blocks
    from labkit.tp.parity import batch, reference_blocks
    if dist.get_world_size() != dp * tp:
        raise ValueError(f"dp({dp}) x tp({tp}) = {dp * tp} != world size ({dist.get_world_size()})")
    # full_tensor() of a 2-D sharded parameter warns that it gathers in two steps; fine here
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    ref = reference_blocks(n_layer, n_embd, n_head)
    ref_split = torch.nn.Sequential(*(SplitBlock(blk) for blk in ref))   # same weights, q/k/v apart
    model = dtensor_blocks(ref, mesh["tp"])
    for blk in model:
        fully_shard(blk, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    ref_opt = torch.optim.SGD(ref_split.parameters(), lr=lr)
    r_dp = mesh["dp"].get_local_rank()
    per = b // dp
    losses = []
    for step in range(steps):
        x, w = batch(b, s, n_embd, seed=10 + step)
        ref_opt.zero_grad()
        ((ref_split(x) * w).sum() / b).backward()
        ref_opt.step()
        opt.zero_grad()
        xs, ws = x[r_dp * per:(r_dp + 1) * per], w[r_dp * per:(r_dp + 1) * per]
        loss = (model(xs) * ws).sum() / per        # FSDP averages gradients over the DP ranks
        loss.backward()
        opt.step()
        losses.append(loss.item())
    want = dict(ref_split.named_parameters())
    diffs = {n: (p.full_tensor() - want[n]).abs().max().item() for n, p in model.named_parameters()}
    sample = dict(model.named_parameters())["0.attn.q.weight"]
    return {"max diff": max(diffs.values()), "worst": max(diffs, key=diffs.get),
            "placements": str(sample.placements), "local shape": tuple(sample.to_local().shape),
            "full shape": tuple(sample.shape), "mesh": mesh.mesh.tolist(), "losses": losses}
