"""Checker for notebook 04 (ZeRO): the learner's stage-1 sharded step.

`zero1_step(fn)` runs fn(params, grads, momentum, lr, beta) on every rank for a few steps on a
vector whose length no world size divides, and compares with labkit's reference step and
with one process on the mean gradient. It names the usual mistakes: shard bounds that do not
cover the vector (equal shards of L // N), the missing all-gather, state for the full
parameter instead of the shard, the gradient not averaged or not reduced, momentum not kept,
an all-reduce where a reduce-scatter suffices (1.5x the bytes at N = 4).
"""
from labkit.check.core import caught_verdict, checker, new_token
from labkit.check.guard import HANG_LIMIT_S   # a right step takes well under a second
from labkit.i18n import tr

__all__ = ["zero1_step"]

from labkit.numerics import reorder_bound, sgd_bound  # noqa: E402 (pure, no torch)

# Derived (labkit.numerics), not tuned: trial's mean gradient is a sum of N <= 8 local gradients
# (+ the division) in another order on the ranks, the local gradients below G = 4 (randn(37) with
# fixed seeds: 2.9 at most over 3 steps and 8 ranks; tests/check/test_zero_check.py checks it); then
# 3 SGD steps with momentum 0.9 at lr 0.1, |p| <= 5 (2.4 at the start, moved at most 0.56 G).
TOL = sgd_bound(reorder_bound(8 + 1, 4.0), lr=0.1, steps=3, param_scale=5.0, momentum=0.9, grad_scale=4.0)


class _Stop(Exception):
    """Some rank's call of the learner's step raised: every rank stops the trial there."""


def _hint(caught) -> str:
    """A sentence for an exception the learner's step raised, when its cause is known."""
    if "worldSize == inputShape" in caught.message or "divisible by" in caught.message:
        return tr("torch's reduce_scatter_tensor and all_gather_into_tensor need a length that the "
                  "world size divides (equal shards); use labkit.comm.ring_reduce_scatter(grads) and "
                  "ring_all_gather(params), which cut the uneven shards of chunk_bounds")
    if "must match the size of tensor" in caught.message:
        return tr("a shard, its gradient and its momentum must all be the length of "
                  "chunk_bounds(numel, n)[rank] (ring_reduce_scatter already returns just your shard)")
    return ""


def _guarded_trial(fn, token, steps):
    """On every rank: labkit.zero.exercise.trial with each call of the learner's step guarded,
    so a step that raises on some ranks is reported at once (guard.settle), not as a hang."""
    import warnings
    from labkit.check import guard
    from labkit.zero.exercise import trial
    calls = [0]

    def step(*args):
        calls[0] += 1
        with warnings.catch_warnings():         # torch 2.13 renames *_tensor to *_single
            warnings.simplefilter("ignore", FutureWarning)
            _, caught = guard.attempt(fn, *args)
        if caught is not None:
            caught.hint = _hint(caught)
        if any(guard.settle(token, str(calls[0]), caught)):
            raise _Stop(caught)
    try:
        return trial(step, steps=steps)
    except _Stop as stop:
        return {"raised": stop.args[0]}


def _torch_chunks(L, n) -> list:
    q = -(-L // n)
    return [max(0, min(q, L - i * q)) for i in range(n)]


def _diagnose(results, n) -> tuple:
    L = results[0]["init"].numel()
    bounds = [r["bounds"] for r in results]
    for r, res in enumerate(results):
        lo, hi = res["bounds"]
        sizes = set(res["state"].values())
        if n > 1 and L in sizes:
            return False, tr("rank {r} keeps optimizer state for all {L} elements: ZeRO-1 updates "
                             "only its own shard [{lo}, {hi}) and keeps momentum for those "
                             "{k} elements only (you updated the full parameter)",
                             r=r, L=L, lo=lo, hi=hi, k=hi - lo)
        if sizes and sizes != {hi - lo}:
            f = dict(r=r, sizes=sorted(sizes), L=L, n=n, lo=lo, hi=hi, k=hi - lo, rem=L % n, q=L // n)
            torch_cut = _torch_chunks(L, n)
            if sizes == {L // n} and L % n:
                return False, tr("wrong shard bounds: rank {r} keeps state for {sizes} elements, its "
                                 "shard is chunk_bounds({L}, {n})[{r}] = [{lo}, {hi}) ({k} elements: with "
                                 "an uneven size the first {rem} shard(s) are one longer; equal shards of "
                                 "{L} // {n} = {q} leave {rem} element(s) to no rank)", **f)
            if sizes == {torch_cut[r]}:
                return False, tr("wrong shard bounds: rank {r} keeps state for {sizes} elements, its "
                                 "shard is chunk_bounds({L}, {n})[{r}] = [{lo}, {hi}) ({k} elements: with "
                                 "an uneven size the first {rem} shard(s) are one longer; params.chunk({n}) "
                                 "cuts {cuts}, not the shards the ring collectives use)",
                                 cuts=", ".join(map(str, torch_cut)), **f)
            return False, tr("wrong shard bounds: rank {r} keeps state for {sizes} elements, its shard "
                             "is chunk_bounds({L}, {n})[{r}] = [{lo}, {hi}) ({k} elements: with an uneven "
                             "size the first {rem} shard(s) are one longer)", **f)
    init = results[0]["init"]
    for step in range(len(results[0]["after"])):
        one = results[0]["one"][step]
        bad = [(r, (res["after"][step] - one).abs()) for r, res in enumerate(results)]
        bad = [(r, d) for r, d in bad if d.max().item() > TOL]
        if not bad:
            continue
        where = {"step": step + 1}            # every message below begins "after step {step}: "
        if step > 0:
            return False, tr("after step {step}: step 1 matched one process but this one differs "
                             "(momentum not kept between steps? store it in the `momentum` dict)", **where)
        # which elements are right on which rank
        right = [(res["after"][0] - one).abs() <= TOL for res in results]
        if all(right[r][lo:hi].all() and not right[r].all() for r, (lo, hi) in enumerate(bounds)):
            return False, tr("after step {step}: on each rank only its own shard is up to date (rank 0 holds "
                             "[{lo}, {hi}) right, the rest stale): after updating your shard, "
                             "all-gather (ring_all_gather(params)) so every rank gets every "
                             "updated shard", lo=bounds[0][0], hi=bounds[0][1], **where)
        stale = [i for i in range(L) if all((res["after"][0][i] - init[i]).abs() <= TOL
                                            for res in results)]
        if len(stale) == L:
            return False, tr("after step {step}: no element changed on any rank: update params in place "
                             "(params[lo:hi] -= ...) where lo, hi = chunk_bounds({L}, {n})[rank], "
                             "the shard the all-gather takes from this rank", L=L, n=n, **where)
        from labkit.zero.exercise import local_grad
        lr = results[0].get("lr", 0.1)
        for r, (res, (lo, hi)) in enumerate(zip(results, bounds)):
            mine = res["after"][0][lo:hi] - init[lo:hi]
            if hi > lo and (mine + lr * local_grad(L, 0, r)[lo:hi]).abs().max() <= TOL:
                return False, tr("after step {step}: rank {r} updated its shard with its own local gradient: "
                                 "reduce the gradients over ranks first (reduce-scatter, then "
                                 "divide by {n})", r=r, n=n, **where)
        if stale and len(stale) < L:
            return False, tr("after step {step}: elements {stale} were updated by no rank: your shards do "
                             "not cover all {L} elements; use chunk_bounds({L}, {n}) = {bounds} "
                             "(equal shards of {L} // {n} = {q} miss the remainder)",
                             stale=stale[:4], L=L, n=n, bounds=bounds, q=L // n, **where)
        upd = results[0]["after"][0] - init
        want = one - init
        ratio = (upd.norm() / want.norm()).item() if want.norm() > 0 else 0
        if abs(ratio - n) < 0.05 * n and n > 1:
            return False, tr("after step {step}: the update is {n} times too large (a factor N = {n}): divide "
                             "the summed gradient by the world size ({n}) to get the mean", n=n, **where)
        if n > 1 and abs(ratio - 1 / n) < 0.05 / n:
            return False, tr("after step {step}: the update is 1/{n} of one process's (a factor 1/N): the "
                             "gradient was divided by {n} twice; ring_reduce_scatter sums, so "
                             "divide once, before or after it", n=n, **where)
        if n > 2 and abs(ratio - (n - 1) / n) < 0.05:
            return False, tr("after step {step}: the update is {m}/{n} of one process's (a factor "
                             "(N-1)/N): one rank's gradient is missing from the sum", m=n - 1, n=n, **where)
        disagree = any((res["after"][0] - results[0]["after"][0]).abs().max() > TOL
                       for res in results)
        r, d = bad[0]
        i = int(d.argmax())
        hint = (tr("ranks disagree with each other: was the gradient reduced over ranks?")
                if disagree else tr("reduce-scatter the gradient, update your shard, all-gather"))
        return False, tr("after step {step}: rank {r} element {i} differs from one process by {d:.3g} ({hint})",
                         r=r, i=i, d=d[i].item(), hint=hint, **where)
    sent = max(res.get("sent", 0) for res in results)
    big = results[0].get("big")
    if big and n > 1:
        ideal = 2 * (n - 1) / n * big * 4
        if sent > 1.2 * ideal:
            factor = sent / ideal
            f = dict(sent=sent / (big * 4), ideal=ideal / (big * 4), factor=factor)
            if abs(factor - 1.5) < 0.1:
                return False, tr("right values, but each rank sent {sent:.2f}x the vector's bytes where "
                                 "reduce-scatter + all-gather send {ideal:.2f}x (3/2 as much: an "
                                 "all-reduce, 2(N-1)/N, plus the all-gather, (N-1)/N, is 3(N-1)/N against "
                                 "2(N-1)/N; the right bytes are 2/3 of yours): an all-reduce where a "
                                 "reduce-scatter suffices?", **f)
            return False, tr("right values, but each rank sent {sent:.2f}x the vector's bytes where "
                             "reduce-scatter + all-gather send {ideal:.2f}x ({factor:.2f} times as "
                             "much): an all-reduce where a reduce-scatter suffices?", **f)
    return True, tr("{n} ranks, {steps} steps on {L} elements (uneven shards): same as labkit's "
                    "reference and as one process; momentum kept for the own shard only; "
                    "reduce-scatter + all-gather bytes", n=n, steps=len(results[0]["after"]), L=L)


@checker("zero1_step")
def zero1_step(fn, cluster, steps: int = 3, timeout: float = HANG_LIMIT_S):
    """fn(params, grads, momentum, lr, beta) on every rank: the ZeRO-1 sharded SGD-momentum step."""
    import labkit
    from labkit.zero.exercise import reference_step, trial
    try:
        results = cluster.run(_guarded_trial, fn, new_token(timeout), steps, timeout=timeout)
    except labkit.RankError as exc:
        dead = sorted(r for r, f in (exc.failures or {}).items() if f.type == "RankDied")
        if not dead:
            raise
        return False, tr("rank {r} crashed inside a collective ({error}): gloo aborts a rank "
                         "when a message does not match the one it waits for. Every rank must make "
                         "the same collective calls, in the same order, with the same sizes (is one "
                         "inside an `if rank == ...`?)", r=dead[0],
                         error=exc.failures[dead[0]].message.splitlines()[0])
    if any("raised" in res for res in results):
        return False, caught_verdict([res.get("raised") for res in results])
    ref = cluster.run(trial, reference_step, steps=steps, big=0, timeout=30)
    for r, (a, b) in enumerate(zip(ref, [x["one"] for x in ref])):
        assert all((x - y).abs().max() <= TOL for x, y in zip(a["after"], b)), "reference drifted"
    return _diagnose(results, cluster.world_size)
