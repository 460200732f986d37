"""All-gather attention: the context parallelism Llama 3 used (arXiv 2407.21783, section 3.3.2).

Every rank gathers the K/V blocks of all ranks (a ring all-gather on send/recv, N - 1 steps,
so blocks of uneven length travel as they are), then computes attention for its own queries on
the whole gathered K/V, one matmul per query chunk on the keys it can see. No overlap: the
gather finishes before any attention starts; the gathered K/V are kept for backward.

Backward computes dQ (stays) and dK/dV for every position (partial sums: each rank's queries
contribute), then reduce-scatters them on a ring so each rank ends with its own block's sum.
"""
import time

import torch

from labkit.cp import blocks as B
from labkit.cp import layout as L
from labkit.cp.ring import TRACE, _kv_shape, _post, _wait
from labkit.cp.shard import group_info

AG_TAG, RS_TAG = 9, 10


def _visible(seq, n, qrange, causal, layout):
    """[(src, local slice, global range)] of the key chunks query chunk qrange can see."""
    out = []
    for src in range(n):
        off = 0
        for a, b in L.ranges(seq, n, src, layout):
            if L.pair_kind(qrange, (a, b), causal) != "skip":
                out.append((src, slice(off, off + b - a), (a, b)))
            off += b - a
    return out


def _cat(blocks_, vis, which):
    return torch.cat([blocks_[src][which][:, :, s] for src, s, _ in vis], dim=2)


def _pos(vis, device):
    return torch.cat([torch.arange(a, b, device=device) for _, _, (a, b) in vis])


class AllGatherAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, causal, layout, seq, merge_fn):
        r, n, nxt, prv = group_info(group)
        blocks_ = [None] * n
        blocks_[r] = torch.stack([k, v]).contiguous()
        for t in range(n - 1):                       # ring all-gather: send what came last
            src = (r - t) % n
            blocks_[(src - 1) % n], reqs = _post(blocks_[src], _kv_shape(k, seq, n, (src - 1) % n, layout),
                                                 k, nxt, prv, group, AG_TAG)
            _wait(reqs, "forward", t)
        t0 = time.perf_counter()
        outs, lses, off = [], [], 0
        for a, b in L.ranges(seq, n, r, layout):
            vis = _visible(seq, n, (a, b), causal, layout)
            o, lse = B.attend(q[:, :, off:off + b - a], _cat(blocks_, vis, 0), _cat(blocks_, vis, 1),
                              torch.arange(a, b, device=q.device), _pos(vis, q.device), causal)
            outs.append(o)
            lses.append(lse)
            off += b - a
        TRACE.append(("forward", n - 1, "compute", t0, time.perf_counter()))
        out, lse = torch.cat(outs, dim=2), torch.cat(lses, dim=2)
        ctx.save_for_backward(q, out, lse, *blocks_)
        ctx.opts = (group, causal, layout, seq)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, out, lse, *blocks_ = ctx.saved_tensors
        group, causal, layout, seq = ctx.opts
        r, n, nxt, prv = group_info(group)
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)
        dq = torch.zeros_like(q)
        grads = [torch.zeros_like(b) for b in blocks_]        # dK/dV partial sums, every block
        t0, off = time.perf_counter(), 0
        for a, b in L.ranges(seq, n, r, layout):
            vis = _visible(seq, n, (a, b), causal, layout)
            qs = slice(off, off + b - a)
            gq, gk, gv = B.attend_backward(q[:, :, qs], _cat(blocks_, vis, 0), _cat(blocks_, vis, 1),
                                           dout[:, :, qs], lse[:, :, qs], delta[:, :, qs],
                                           torch.arange(a, b, device=q.device), _pos(vis, q.device),
                                           causal)
            dq[:, :, qs] = gq
            pos = 0
            for src, s, (ka, kb) in vis:
                grads[src][0][:, :, s] += gk[:, :, pos:pos + kb - ka]
                grads[src][1][:, :, s] += gv[:, :, pos:pos + kb - ka]
                pos += kb - ka
            off += b - a
        TRACE.append(("backward", 0, "compute", t0, time.perf_counter()))
        for t in range(n - 1):                       # ring reduce-scatter: add, pass on
            send = (r - t - 1) % n
            recv, reqs = _post(grads[send].contiguous(), _kv_shape(blocks_[0][0], seq, n, (send - 1) % n, layout),
                               q, nxt, prv, group, RS_TAG)
            _wait(reqs, "backward", t)
            grads[(send - 1) % n] = grads[(send - 1) % n] + recv
        return dq, grads[r][0], grads[r][1], None, None, None, None, None
