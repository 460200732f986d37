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
    kv_heads: int = None    # key/value heads (grouped-query attention); None: as many as heads
    experts: int = 0        # experts per MoE layer (0: a dense model)
    top_k: int = 0          # experts each token goes to
    expert_params: float = 0.0   # parameters in the experts, all layers (of params)
    active_params: float = None  # parameters one token uses (FLOPs); None: all of them

    @property
    def tokens_per_step(self) -> int:
        return self.seq * self.global_batch

    @property
    def active(self) -> float:
        return self.params if self.active_params is None else self.active_params

    def with_(self, **kw) -> "Model":
        return replace(self, **kw)


# Published shapes. Llama 2: Touvron et al. 2023 (arXiv 2307.09288), table 1 and section 2.2
# (4M-token batches, 4096 context); GPT-3: Brown et al. 2020 (arXiv 2005.14165), table 2.1
# (3.2M-token batches, 2048 context); 1B: GPT-3 XL's shape with 1M-token batches scaled to a
# single GPU's 64 x 2048; Llama 3 405B: Llama Team 2024 (arXiv 2407.21783), table 3 (shape,
# 8 K/V heads) and table 4 (batch 16M tokens; 128K context in long-context training).
# Mixtral 8x7B: Jiang et al. 2024 (arXiv 2401.04088), table 1 (h 4096, 32 layers, 32 heads, 8 K/V
# heads, FFN 14336, 8 experts, top-2) and section 2 (46.7B parameters, 12.9B active); its
# training batch is not published: 4M tokens of 4096, as Llama 2. Expert parameters:
# 32 layers x 8 experts x 3 x 4096 x 14336 (SwiGLU) = 45.1B.
# DeepSeek-V3: DeepSeek-AI 2024 (arXiv 2412.19437), section 4.2 (61 layers, h 7168, 128 heads,
# 1 shared + 256 routed experts of FFN 2048, top-8, the first 3 layers dense; 671B parameters,
# 37B active; sequence 4096, batch 15,360 sequences). Expert parameters:
# 58 layers x 257 experts x 3 x 7168 x 2048 = 656.4B. MLA's compressed K/V is modelled as
# 128 heads (it is never split by CP in DeepSeek's layout).
MODELS = {
    "1B": Model("1B (GPT-3 XL shape)", 1.3e9, 24, 2048, 16, 2048, 64, 50257),
    "7B": Model("Llama 2 7B", 6.74e9, 32, 4096, 32, 4096, 1024),
    "70B": Model("Llama 2 70B", 68.98e9, 80, 8192, 64, 4096, 1024),
    "175B": Model("GPT-3 175B", 174.6e9, 96, 12288, 96, 2048, 1536, 50257),
    "405B": Model("Llama 3 405B", 405e9, 126, 16384, 128, 8192, 2048, 128256, kv_heads=8),
    "405B-128K": Model("Llama 3 405B, 128K context", 405e9, 126, 16384, 128, 131072, 128, 128256,
                       kv_heads=8),
    "Mixtral-8x7B": Model("Mixtral 8x7B", 46.7e9, 32, 4096, 32, 4096, 1024, 32000, kv_heads=8,
                          experts=8, top_k=2, expert_params=32 * 8 * 3 * 4096 * 14336,
                          active_params=12.9e9),
    "DeepSeek-V3": Model("DeepSeek-V3", 671e9, 61, 7168, 128, 4096, 15360, 129280, experts=256,
                         top_k=8, expert_params=58 * 257 * 3 * 7168 * 2048, active_params=37e9),
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
