"""FLOPs, step time and MFU (layer 1: pure arithmetic).

FLOPs per token for training (forward + backward = 3 x forward), PaLM's accounting
(Chowdhery et al. 2022, arXiv 2204.02311, appendix B): 6 N + 12 L h s, where N is the number
of parameters (the matmuls), L layers, h hidden size, s sequence length (attention's two
s x s products). MFU = model FLOPs per second / (GPUs x peak): recomputation is not counted
as useful work (hardware FLOPs utilisation would count it).
"""
from labkit.pipeline.formulas import bubble_ratio  # noqa: F401  (p-1)/(m+p-1), GPipe's idle over total

GPUS = {  # name -> (memory GB, dense bf16 peak TFLOP/s, NVLink GB/s per direction, network GB/s per GPU)
    "A100-80GB": (80, 312, 300, 25),      # DGX A100: 12 NVLink3 = 600 GB/s both ways; 8 x 200 Gb/s HDR
    "H100-80GB": (80, 989, 450, 50),      # DGX H100: 18 NVLink4 = 900 GB/s both ways; 8 x 400 Gb/s NDR
    "H200-141GB": (141, 989, 450, 50),
    "H800-80GB": (80, 989, 160, 50),      # DeepSeek-V3's cluster (arXiv 2412.19437, sec. 3.2.2): NVLink 160, IB 50
    "RTX4090-24GB": (24, 165, 32, 3),     # PCIe 4.0 x16 between cards, 25 Gb/s Ethernet between hosts
}


def flops_per_token(n_params: float, layers: int, hidden: int, seq: int) -> float:
    """Training FLOPs per token: 6 N + 12 L h s (PaLM, appendix B)."""
    return 6 * n_params + 12 * layers * hidden * seq


def mfu(flops_per_step: float, step_seconds: float, gpus: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: useful FLOPs per second over the GPUs' peak."""
    return flops_per_step / (step_seconds * gpus * peak_flops)
