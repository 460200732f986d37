"""The fake process group both fake runs stand on: start it, count a (D)Tensor's bytes, create
Adam's state without its arithmetic (layer 3; fake_scale.py for dense models, fake_moe.py for MoE)."""
import torch.distributed as dist


def _init(world_size: int, rank: int = 0) -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _nbytes(t) -> int:
    t = _local(t)
    return t.numel() * t.element_size()


def _state_only_step(opt) -> None:
    """opt.step() as far as creating Adam's state (torch's own _init_group: step, exp_avg,
    exp_avg_sq like each parameter), without the update's arithmetic, which on hundreds of
    meta DTensors costs seconds and changes no byte."""
    import torch.optim.adam as adam_module
    update = adam_module.adam
    adam_module.adam = lambda *args, **kwargs: None
    try:
        opt.step()
    finally:
        adam_module.adam = update
