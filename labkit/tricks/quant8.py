"""Adam with block-wise 8-bit moments (layer 3), after Dettmers et al. (arXiv 2110.02861).

    opt = labkit.tricks.quant8.Adam8bit(model.parameters(), lr=1e-3)   # like torch.optim.AdamW

Each moment of a tensor of at least `min_size` values is stored as uint8 codes (`state1` = m,
`state2` = v, bitsandbytes' names, so `labkit.memory.measure` files them as momentum and
variance) and one fp32 scale per block of `block` values (`absmax1`, `absmax2`: category
'other'). A step dequantises one tensor's moments to fp32, takes the AdamW update in fp32 and
quantises them again: the fp32 copies are temporaries of one tensor at a time. m uses the
signed dynamic code book, v the unsigned one (both shared by all tensors: 2 KB in all).

Why bitsandbytes is not used: it runs on CPU (0.50.2 steps there), but installs 125 MB of
CUDA libraries; torchao's AdamW8bit compiles each step with torch.compile (about 30 s per
tensor shape on a 2-core CPU). This file is the same algorithm in plain torch.
"""

import torch

from labkit.tricks import quant8_math as Q
from labkit.i18n import N_


def _codebook(signed: bool) -> tuple:
    # built once per optimizer on the CPU (2 KB); quantize/dequantize move it to the moments' device
    code = torch.tensor(Q.dynamic_map(signed), dtype=torch.float32, device="cpu")
    return code, (code[1:] + code[:-1]) / 2          # values, and the midpoints between them


def quantize(x: torch.Tensor, code: torch.Tensor, mids: torch.Tensor, block: int = Q.BLOCK):
    """(uint8 codes shaped like x, fp32 scales of ceil(numel / block) blocks)."""
    flat = x.detach().reshape(-1).float()
    n = flat.numel()
    pad = Q.n_blocks(n, block) * block - n
    blocks = torch.nn.functional.pad(flat, (0, pad)).view(-1, block)
    scale = blocks.abs().amax(dim=1)
    normed = blocks / scale.clamp_min(1e-30).unsqueeze(1)
    idx = torch.bucketize(normed, mids.to(normed.device))      # nearest code value
    return idx.to(torch.uint8).view(-1)[:n].clone().view_as(x), scale   # no padding kept


def dequantize(codes: torch.Tensor, scale: torch.Tensor, code: torch.Tensor, block: int = Q.BLOCK):
    n = codes.numel()
    vals = code.to(codes.device)[codes.reshape(-1).long()]
    pad = scale.numel() * block - n
    vals = torch.nn.functional.pad(vals, (0, pad)).view(-1, block) * scale.unsqueeze(1)
    return vals.view(-1)[:n].view_as(codes)


class Adam8bit(torch.optim.Optimizer):
    """AdamW with 8-bit block-wise moments (fp32 moments for tensors below `min_size` values)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, block: int = Q.BLOCK, min_size: int = Q.MIN_8BIT_SIZE):
        if lr <= 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError(f"need lr > 0 and betas in [0, 1), got lr={lr}, betas={betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.block, self.min_size = block, min_size
        self.maps = {True: _codebook(True), False: _codebook(False)}

    def _init(self, p, state):
        state["step"] = 0                                    # a Python int: no tensor to count
        if p.numel() < self.min_size:
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
            return
        nb = Q.n_blocks(p.numel(), self.block)
        for i in (1, 2):
            state[f"state{i}"] = torch.zeros(p.shape, dtype=torch.uint8, device=p.device)
            state[f"absmax{i}"] = torch.zeros(nb, dtype=torch.float32, device=p.device)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    self._init(p, state)
                state["step"] += 1
                t = state["step"]
                g = p.grad.float()
                eight = "state1" in state
                if eight:
                    m = dequantize(state["state1"], state["absmax1"], self.maps[True][0], self.block)
                    v = dequantize(state["state2"], state["absmax2"], self.maps[False][0], self.block)
                else:
                    m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v / (1 - b2 ** t)).sqrt_().add_(group["eps"])
                update = (m / (1 - b1 ** t)).div_(denom)
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-group["lr"])
                if eight:
                    state["state1"], state["absmax1"] = quantize(m, *self.maps[True], self.block)
                    state["state2"], state["absmax2"] = quantize(v, *self.maps[False], self.block)
        return loss

    def state_bytes(self) -> dict:
        """Bytes held now by category (momentum, variance, other = scales), from the tensors."""
        out = {"momentum": 0, "variance": 0, "other": 0}
        for state in self.state.values():
            for key, t in state.items():
                if isinstance(t, torch.Tensor):
                    cat = {"state1": N_("momentum"), "exp_avg": N_("momentum"), "state2": N_("variance"),
                           "exp_avg_sq": N_("variance")}.get(key, "other")
                    out[cat] += t.untyped_storage().nbytes()
        return out
