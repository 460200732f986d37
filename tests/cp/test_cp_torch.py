"""PyTorch's own context parallelism as notebook 12 section 10 reads it (one process, no ranks)."""


def test_torch_cp_handles_the_cuda_kernels_only_and_gathers_by_default():
    """Notebook 12 section 10's reading of torch's source, pinned: if a torch release registers
    the CPU kernel or changes the defaults, this fails and the section must be rerun."""
    from labkit.cp.torch_cp import torch_cp_facts
    f = torch_cp_facts()
    assert not f["cpu kernel handled"] and f["handlers call the ring by name"], f
    assert {"aten._scaled_dot_product_flash_attention.default",
            "aten._scaled_dot_product_efficient_attention.default",
            "aten._scaled_dot_product_cudnn_attention.default"} <= set(f["handled ops"]), f
    assert (f["rotate method"], f["gradients in fp32"], f["load balancing"]) == ("ALL_GATHER", True, True), f
