"""The capstone's one-process reference: the same model, data, clipping and SGD on the whole
global batch of every step, and the magnitudes the derived bounds need (they do not depend on
the CPU, so reading them here does not tune the bound to this machine's rounding)."""
import torch

from labkit.capstone.data import batch
from labkit.capstone.model import CapGPT, Config, lm_loss


def reference(cfg: Config = Config(), resume: str = None) -> dict:
    """{"losses", "norms", "grad_max" (largest |gradient| entry), "grad_l1" (sum of |gradient|),
    "param_max" (largest |parameter|), "numel"}: per step, except numel."""
    model = CapGPT(cfg)
    start = 0
    if resume is not None:
        from labkit.capstone.checkpoint import load_full
        start = load_full(model, resume)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=cfg.lr)
    out = {k: [] for k in ("losses", "norms", "grad_max", "grad_l1", "param_max")}
    for step in range(start, cfg.steps):
        x, y = batch(cfg, step)
        opt.zero_grad()
        loss = lm_loss(model(x), y)
        loss.backward()
        out["param_max"].append(max(p.detach().abs().max().item() for p in params))
        out["grad_max"].append(max(p.grad.abs().max().item() for p in params))
        out["grad_l1"].append(sum(p.grad.abs().sum().item() for p in params))
        if cfg.max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_norm)
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        out["norms"].append(float(norm))
        opt.step()
        out["losses"].append(loss.item())
    out["numel"] = sum(p.numel() for p in params)
    out["start"] = start
    return out
