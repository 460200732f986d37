"""Model shapes and clusters the planner reasons about (layer 1: plain dataclasses)."""
from dataclasses import dataclass, replace

from labkit.plan.flops import GPUS


@dataclass(frozen=True)
class Model:
    """A GPT-style decoder, as the planner sees it."""
    name: str
    params: float           # parameters N (embeddings included)
    layers: int             # transformer blocks L
    hidden: int             # hidden size h
    heads: int              # attention heads a
    seq: int                # training sequence length s, tokens
    global_batch: int       # sequences per optimizer step (all data-parallel replicas together)
    vocab: int = 32000

    @property
    def tokens_per_step(self) -> int:
        return self.seq * self.global_batch

    def with_(self, **kw) -> "Model":
        return replace(self, **kw)


# Published shapes. Llama 2: Touvron et al. 2023 (arXiv 2307.09288), table 1 and section 2.2
# (4M-token batches, 4096 context); GPT-3: Brown et al. 2020 (arXiv 2005.14165), table 2.1
# (3.2M-token batches, 2048 context); 1B: GPT-3 XL's shape with 1M-token batches scaled to a
# single GPU's 64 x 2048; Llama 3 405B: Llama Team 2024 (arXiv 2407.21783), table 3.
MODELS = {
    "1B": Model("1B (GPT-3 XL shape)", 1.3e9, 24, 2048, 16, 2048, 64, 50257),
    "7B": Model("Llama 2 7B", 6.74e9, 32, 4096, 32, 4096, 1024),
    "70B": Model("Llama 2 70B", 68.98e9, 80, 8192, 64, 4096, 1024),
    "175B": Model("GPT-3 175B", 174.6e9, 96, 12288, 96, 2048, 1536, 50257),
    "405B": Model("Llama 3 405B", 405e9, 126, 16384, 128, 8192, 2048, 128256),
}


@dataclass(frozen=True)
class Hardware:
    """GPUs and the links between them."""
    gpu: str = "H100-80GB"
    gpus_per_node: int = 8
    nodes: int = 1
    gpu_gb: float = None        # memory per GPU, GB (default: the GPU's)
    peak_tflops: float = None   # dense bf16 peak, TFLOP/s (default: the GPU's)
    intra_gbps: float = None    # NVLink per GPU per direction, GB/s (default: the GPU's)
    inter_gbps: float = None    # network per GPU per direction, GB/s (default: the GPU's)

    def __post_init__(self):
        if self.gpu not in GPUS:
            raise ValueError(f"unknown GPU {self.gpu!r}; known: {sorted(GPUS)} (or give gpu_gb, "
                             "peak_tflops, intra_gbps, inter_gbps with one of them)")
        mem, peak, intra, inter = GPUS[self.gpu]
        for k, v in (("gpu_gb", mem), ("peak_tflops", peak), ("intra_gbps", intra), ("inter_gbps", inter)):
            if getattr(self, k) is None:
                object.__setattr__(self, k, v)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes
