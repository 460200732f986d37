"""torch 2.13 renamed two collectives; the one place that picks the name this torch has.

    from labkit.comm.compat import reduce_scatter_tensor, all_gather_into_tensor
    reduce_scatter_tensor(out, full, group=group)      # dist.reduce_scatter_single on 2.13+
    all_gather_into_tensor(full, part, group=group)    # dist.all_gather_single on 2.13+

`dist.reduce_scatter_tensor` and `dist.all_gather_into_tensor` became `reduce_scatter_single` and
`all_gather_single` in torch 2.13; older releases have only
the old names (kept for them, untested: CI runs torch 2.13.0 only). The name is looked up at each call, so a wrapper put on `torch.distributed`
(a test's counter, a log of every collective) sees the call.
"""
import torch.distributed as dist


def _pick(new: str, old: str):
    return getattr(dist, new, None) or getattr(dist, old)


def reduce_scatter_tensor(output, input, *args, **kwargs):
    """Reduce `input` over the group and keep this rank's 1/N of it in `output`."""
    return _pick("reduce_scatter_single", "reduce_scatter_tensor")(output, input, *args, **kwargs)


def all_gather_into_tensor(output, input, *args, **kwargs):
    """Every rank's `input`, concatenated in rank order, into `output`."""
    return _pick("all_gather_single", "all_gather_into_tensor")(output, input, *args, **kwargs)
