"""Ring attention, the core (Liu et al. 2023, arXiv 2310.01889) on the ranks of a process group.

Each rank keeps its queries. At step t = 0..N-1 it holds the K/V block of rank r - t: it posts
the send of that block to rank r + 1 and the receive of the next one from rank r - 1 *before*
computing attention on the block it holds, so the transfer runs while it computes; the partial
results merge with the online-softmax rule (`blocks.merge`). After N steps every query has seen
every key, and no rank ever held more than two K/V blocks or one block of scores.

Backward travels the ring again: the K/V blocks go round once more, and with each block goes
its dK/dV accumulator; every rank adds the gradient its queries give that block and passes it
on. After N steps each accumulator is back with the rank that owns the block. dQ stays put.
A chunk pair that the causal mask hides entirely is skipped: that is what zigzag balances.
The spans ("compute", "wait", "transfer") are kept only while a labkit.trace recorder is on
(ring.py's, turned on by cp/runs.py's traced_step).
"""
import torch
import torch.distributed as dist

from labkit import trace
from labkit.comm import traffic
from labkit.cp import blocks as B
from labkit.cp import layout as L
from labkit.cp.shard import group_info

KV_TAG, GRAD_TAG = 7, 8


class _Posted(list):
    """The requests of one transfer, and when they were posted (None: nothing records)."""
    posted = None


def _post(send, recv_shape, like, nxt, prv, group, tag):
    recv = like.new_empty(recv_shape)
    reqs = _Posted()
    reqs.posted = trace.stamp()
    reqs += [dist.irecv(recv, prv, group=group, tag=tag), dist.isend(send, nxt, group=group, tag=tag)]
    traffic.count(send.numel() * send.element_size(), recv.numel() * recv.element_size(), 1, 1)
    return recv, reqs


def _wait(reqs, phase, step):
    t0 = trace.stamp()
    for q in reqs:
        q.wait()
    t1 = trace.stamp()
    trace.add("wait", t0, t1, phase=phase, step=step)
    trace.add("transfer", reqs.posted, t1, phase=phase, step=step)


def _chunks(seq, n, rank, layout, device):
    """[(local slice, global positions)] of the chunks rank `rank` holds."""
    out, off = [], 0
    for a, b in L.ranges(seq, n, rank, layout):
        out.append((slice(off, off + b - a), (a, b), torch.arange(a, b, device=device)))
        off += b - a
    return out


def _kv_shape(k, seq, n, src, layout):
    return (2, k.shape[0], k.shape[1], L.local_len(seq, n, src, layout), k.shape[3])


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, causal, layout, seq, merge_fn):
        r, n, nxt, prv = group_info(group)
        mine = _chunks(seq, n, r, layout, q.device)
        kv = torch.stack([k, v]).contiguous()
        acc = [None] * len(mine)
        for t in range(n):
            src = (r - t) % n
            if t < n - 1:                         # the next block: from r - 1, ours to r + 1
                nxt_kv, reqs = _post(kv, _kv_shape(k, seq, n, (src - 1) % n, layout), kv, nxt, prv, group, KV_TAG)
            with trace.span("compute", phase="forward", step=t):
                for ks, krange, kpos in _chunks(seq, n, src, layout, q.device):
                    for i, (qs, qrange, qpos) in enumerate(mine):
                        if L.pair_kind(qrange, krange, causal) != "skip":
                            o, lse = B.attend(q[:, :, qs], kv[0][:, :, ks], kv[1][:, :, ks], qpos, kpos, causal)
                            acc[i] = B.merge_into(acc[i], o, lse, merge_fn)
            if t < n - 1:
                _wait(reqs, "forward", t)
                kv = nxt_kv
        out = torch.cat([a[0] for a in acc], dim=2)
        lse = torch.cat([a[1] for a in acc], dim=2)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.opts = (group, causal, layout, seq)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        group, causal, layout, seq = ctx.opts
        r, n, nxt, prv = group_info(group)
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)
        mine = _chunks(seq, n, r, layout, q.device)
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v]).contiguous()
        dkv = torch.zeros_like(kv)               # the accumulator of the block this rank holds
        grad_reqs = None
        for t in range(n):
            src = (r - t) % n
            if t < n - 1:                         # the next block: from r - 1, ours to r + 1
                nxt_kv, reqs = _post(kv, _kv_shape(k, seq, n, (src - 1) % n, layout), kv, nxt, prv, group, KV_TAG)
            with trace.span("compute", phase="backward", step=t):
                mine_dkv = torch.zeros_like(kv)
                for ks, krange, kpos in _chunks(seq, n, src, layout, q.device):
                    for qs, qrange, qpos in mine:
                        if L.pair_kind(qrange, krange, causal) != "skip":
                            gq, gk, gv = B.attend_backward(q[:, :, qs], kv[0][:, :, ks], kv[1][:, :, ks],
                                                           dout[:, :, qs], lse[:, :, qs], delta[:, :, qs],
                                                           qpos, kpos, causal)
                            dq[:, :, qs] += gq
                            mine_dkv[0][:, :, ks] += gk
                            mine_dkv[1][:, :, ks] += gv
            if grad_reqs is not None:             # the accumulator for this block, from r - 1
                _wait(grad_reqs, "backward", t)
                dkv = nxt_dkv
            dkv = (dkv + mine_dkv).contiguous()
            if n > 1:                             # pass it on: to r + 1, which holds this block next
                nxt_dkv, grad_reqs = _post(dkv, _kv_shape(k, seq, n, (src - 1) % n, layout), dkv,
                                           nxt, prv, group, GRAD_TAG)
            if t < n - 1:
                _wait(reqs, "backward", t)
                kv = nxt_kv
        if grad_reqs is not None:                 # this rank's own block, home after N steps
            _wait(grad_reqs, "backward", n)
            dkv = nxt_dkv
        return dq, dkv[0], dkv[1], None, None, None, None, None
