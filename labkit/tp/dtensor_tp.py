"""The same blocks made tensor parallel by PyTorch's DTensor (`parallelize_module`).

    blocks = dtensor_blocks(reference_blocks(), mesh)          # ColwiseParallel / RowwiseParallel
    dtensor_blocks(..., sequence_parallel=True)                # + SequenceParallel on the norms

DTensor shards a Linear by rows (Colwise) or columns (Rowwise) of its weight, like
labkit.tp.layers, and inserts the same collectives. A fused QKV weight would be split in the
wrong place (rank 0 would get all of q), so the block is first rebuilt with separate q, k, v
(`SplitBlock`, same weights), as torchtitan's Llama does (wq, wk, wv).
The plan follows torchtitan's `apply_tp` (torchtitan/models/llama3/infra/parallelize.py),
including its `PrepareModuleInput` on the attention and MLP modules: the module's input becomes
one replicated DTensor that q, k and v all read, so their three input gradients are summed
locally and all-reduced once (4 all-reduces per layer, as Megatron's fused QKV). Without it
(`prepare_inputs=False`) each ColwiseParallel projection receives a plain tensor, makes its own
DTensor of it, and all-reduces its own input gradient in backward: 3 for attention, 6 per layer.

    dtensor_comm_counts(prepare_inputs=False)["collectives"]   # {"all_reduce": 6.0} per layer
"""
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.comm import traffic


class _Attn(nn.Module):
    def __init__(self, block):
        super().__init__()
        c = block.qkv.in_features
        self.head_dim = c // block.n_head
        self.q, self.k, self.v = (nn.Linear(c, c) for _ in range(3))
        for i, lin in enumerate((self.q, self.k, self.v)):
            lin.weight.data.copy_(block.qkv.weight.data[i * c:(i + 1) * c])
            lin.bias.data.copy_(block.qkv.bias.data[i * c:(i + 1) * c])
        self.proj = nn.Linear(c, c)
        self.proj.load_state_dict(block.proj.state_dict())

    def forward(self, x):
        b, s = x.shape[:2]
        q, k, v = (m(x).view(b, s, -1, self.head_dim).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # -1: this rank's heads
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class _MLP(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.fc, self.fc_out = (nn.Linear(m.in_features, m.out_features) for m in (block.fc, block.fc_out))
        self.fc.load_state_dict(block.fc.state_dict())
        self.fc_out.load_state_dict(block.fc_out.state_dict())

    def forward(self, x):
        return self.fc_out(F.gelu(self.fc(x)))


class SplitBlock(nn.Module):
    """labkit.toy_models.Block with separate q, k, v Linears (same weights, same output)."""

    def __init__(self, block):
        super().__init__()
        import copy
        self.ln1, self.ln2 = copy.deepcopy(block.ln1), copy.deepcopy(block.ln2)
        self.attn, self.mlp = _Attn(block), _MLP(block)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def tp_plan(sequence_parallel: bool = False, prepare_inputs: bool = True) -> dict:
    """torchtitan's plan for one block. prepare_inputs=False leaves out the PrepareModuleInput
    on attn and mlp (without sequence parallelism): same output, two more all-reduces."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    out_layout = Shard(1) if sequence_parallel else Replicate()
    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(output_layouts=out_layout),
            "mlp.fc": ColwiseParallel(), "mlp.fc_out": RowwiseParallel(output_layouts=out_layout)}
    if sequence_parallel or prepare_inputs:     # SP: the input arrives as sequence shards
        src = Shard(1) if sequence_parallel else Replicate()
        for name in ("attn", "mlp"):
            plan[name] = PrepareModuleInput(input_layouts=(src,), desired_input_layouts=(Replicate(),))
    if sequence_parallel:
        plan.update({"ln1": SequenceParallel(), "ln2": SequenceParallel()})
    return plan


def dtensor_blocks(blocks, mesh=None, sequence_parallel: bool = False,
                   prepare_inputs: bool = True) -> nn.Sequential:
    """SplitBlocks parallelized over a 1-D `mesh` (default: every rank) with DTensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    mesh = mesh or init_device_mesh("cpu", (dist.get_world_size(),))
    out = nn.Sequential(*(SplitBlock(b) for b in blocks))
    for b in out:
        parallelize_module(b, mesh, tp_plan(sequence_parallel, prepare_inputs))
    return out


def dtensor_comm_counts(n_layer=2, n_embd=64, n_head=4, b=2, s=16, sequence_parallel=False,
                        prepare_inputs: bool = True) -> dict:
    """Collectives per layer in one forward + backward, counted by torch's CommDebugMode
    ({"all_reduce": 4.0}: names without "c10d_functional."), and the largest difference of the
    output and the input's gradient from the same blocks on one device ("max diff")."""
    from torch.distributed.tensor.debug import CommDebugMode
    from labkit.tp.parity import _local_seq, batch, reference_blocks
    ref = reference_blocks(n_layer, n_embd, n_head)
    tp = dtensor_blocks(ref, sequence_parallel=sequence_parallel, prepare_inputs=prepare_inputs)
    x, w = batch(b, s, n_embd)
    cut = (lambda z: _local_seq(z, None)) if sequence_parallel else (lambda z: z)
    xin, xr = cut(x).clone().requires_grad_(), x.clone().requires_grad_()
    with CommDebugMode() as cm:
        y = tp(xin)
        (y * cut(w)).sum().backward()
    yr = ref(xr)
    (yr * w).sum().backward()
    diff = max((y - cut(yr)).abs().max().item(), (xin.grad - cut(xr.grad)).abs().max().item())
    return {"collectives": {str(k).split(".")[-1]: v / n_layer for k, v in cm.get_comm_counts().items()},
            "max diff": diff}


def dtensor_parity(n_layer=2, n_embd=64, n_head=4, b=2, s=16, sequence_parallel=False) -> dict:
    """Max |diff| of output, input grad and every parameter grad against one device."""
    from labkit.tp.parity import _local_seq, batch, reference_blocks
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, w = batch(b, s, n_embd)
    tp = dtensor_blocks(ref, sequence_parallel=sequence_parallel)
    xr = x.clone().requires_grad_()
    yr = ref(xr)
    (yr * w).sum().backward()
    cut = (lambda z: _local_seq(z, None)) if sequence_parallel else (lambda z: z)
    xin = cut(x).clone().requires_grad_()
    y = tp(xin)
    y = y.full_tensor() if hasattr(y, "full_tensor") else y
    (y * cut(w)).sum().backward()
    out = {"output": (y - cut(yr)).abs().max().item(),
           "input grad": (xin.grad - cut(xr.grad)).abs().max().item()}
    c = n_embd
    for i, (blk, rb) in enumerate(zip(tp, ref)):
        want = {"ln1.weight": rb.ln1.weight.grad, "ln1.bias": rb.ln1.bias.grad,
                "ln2.weight": rb.ln2.weight.grad, "ln2.bias": rb.ln2.bias.grad,
                "attn.proj.weight": rb.proj.weight.grad, "attn.proj.bias": rb.proj.bias.grad,
                "mlp.fc.weight": rb.fc.weight.grad, "mlp.fc.bias": rb.fc.bias.grad,
                "mlp.fc_out.weight": rb.fc_out.weight.grad, "mlp.fc_out.bias": rb.fc_out.bias.grad}
        for j, n in enumerate("qkv"):
            want[f"attn.{n}.weight"] = rb.qkv.weight.grad[j * c:(j + 1) * c]
            want[f"attn.{n}.bias"] = rb.qkv.bias.grad[j * c:(j + 1) * c]
        for name, p in blk.named_parameters():
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            out[f"{i}.{name}"] = (g - want[name]).abs().max().item()
    return out


def dtensor_sp_traffic(n_embd=256, n_head=4, b=4, s=64) -> dict:
    """Bytes this rank sends in one forward + backward of one block: DTensor TP, DTensor TP+SP
    (torchtitan's plan)."""
    from labkit.tp.parity import _local_seq, batch, reference_blocks
    out = {}
    x, w = batch(b, s, n_embd)
    for sp in (False, True):
        tp = dtensor_blocks(reference_blocks(1, n_embd, n_head), sequence_parallel=sp)
        xin = (_local_seq(x, None) if sp else x).clone().requires_grad_()
        tp(xin)                                                  # warm-up
        with traffic.measure(sync=True) as m:
            y = tp(xin)
            (y * (_local_seq(w, None) if sp else w)).sum().backward()
        out["DTensor TP+SP" if sp else "DTensor TP"] = m.sent
    out["activation bytes"] = b * s * n_embd * 4
    return out
