"""Checker for notebook 04 (ZeRO): the learner's stage-1 sharded step.

`zero1_step(fn)` runs fn(params, grads, momentum, lr, beta) on every rank for a few steps on a
vector whose length no world size divides, and compares with labkit's reference step and
with one process on the mean gradient. It names the usual mistakes: shard bounds that do not
cover the vector (equal shards of L // N), the missing all-gather, state for the full
parameter instead of the shard, the gradient not averaged or not reduced, momentum not kept,
an all-reduce where a reduce-scatter suffices (1.5x the bytes at N = 4).
"""
from labkit.check.core import checker

__all__ = ["zero1_step"]

TOL = 1e-5


def _diagnose(results, n) -> tuple:
    L = results[0]["init"].numel()
    bounds = [r["bounds"] for r in results]
    for r, res in enumerate(results):
        lo, hi = res["bounds"]
        sizes = set(res["state"].values())
        if n > 1 and L in sizes:
            return False, (f"rank {r} keeps optimizer state for all {L} elements: ZeRO-1 updates "
                           f"only its own shard [{lo}, {hi}) and keeps momentum for those "
                           f"{hi - lo} elements only (you updated the full parameter)")
        if sizes and sizes != {hi - lo}:
            equal = (f"; equal shards of {L} // {n} = {L // n} leave {L % n} element(s) to no "
                     "rank") if sizes == {L // n} and L % n else ""
            return False, (f"wrong shard bounds: rank {r} keeps state for {sorted(sizes)} elements, "
                           f"its shard is chunk_bounds({L}, {n})[{r}] = [{lo}, {hi}) ({hi - lo} "
                           f"elements: with an uneven size the first {L % n} shard(s) are one "
                           f"longer{equal})")
    init = results[0]["init"]
    for step in range(len(results[0]["after"])):
        one = results[0]["one"][step]
        bad = [(r, (res["after"][step] - one).abs()) for r, res in enumerate(results)]
        bad = [(r, d) for r, d in bad if d.max().item() > TOL]
        if not bad:
            continue
        where = f"after step {step + 1}"
        if step > 0:
            return False, (f"{where}: step 1 matched one process but this one differs "
                           "(momentum not kept between steps? store it in the `momentum` dict)")
        # which elements are right on which rank
        right = [(res["after"][0] - one).abs() <= TOL for res in results]
        if all(right[r][lo:hi].all() and not right[r].all() for r, (lo, hi) in enumerate(bounds)):
            return False, (f"{where}: on each rank only its own shard is up to date (rank 0 holds "
                           f"[{bounds[0][0]}, {bounds[0][1]}) right, the rest stale): all-gather "
                           "the updated shards so every rank has the full parameters")
        stale = [i for i in range(L) if all((res["after"][0][i] - init[i]).abs() <= TOL
                                            for res in results)]
        if len(stale) == L:
            return False, (f"{where}: no element changed on any rank: update params in place "
                           f"(params[lo:hi] -= ...) where lo, hi = chunk_bounds({L}, {n})[rank], "
                           "the shard the all-gather takes from this rank")
        from labkit.zero.exercise import local_grad
        lr = results[0].get("lr", 0.1)
        for r, (res, (lo, hi)) in enumerate(zip(results, bounds)):
            mine = res["after"][0][lo:hi] - init[lo:hi]
            if hi > lo and (mine + lr * local_grad(L, 0, r)[lo:hi]).abs().max() <= TOL:
                return False, (f"{where}: rank {r} updated its shard with its own local gradient: "
                               "reduce the gradients over ranks first (reduce-scatter, then divide "
                               f"by {n})")
        if stale and len(stale) < L:
            return False, (f"{where}: elements {stale[:4]} were updated by no rank: your shards do "
                           f"not cover all {L} elements; use chunk_bounds({L}, {n}) = {bounds} "
                           f"(equal shards of {L} // {n} = {L // n} miss the remainder)")
        upd = results[0]["after"][0] - init
        want = one - init
        ratio = (upd.norm() / want.norm()).item() if want.norm() > 0 else 0
        if abs(ratio - n) < 0.05 * n and n > 1:
            return False, (f"{where}: the update is {n} times too large: divide the summed "
                           f"gradient by the world size ({n}) to get the mean")
        disagree = any((res["after"][0] - results[0]["after"][0]).abs().max() > TOL
                       for res in results)
        r, d = bad[0]
        i = int(d.argmax())
        hint = ("ranks disagree with each other: was the gradient reduced over ranks?"
                if disagree else "reduce-scatter the gradient, update your shard, all-gather")
        return False, f"{where}: rank {r} element {i} differs from one process by {d[i]:.3g} ({hint})"
    sent = max(res.get("sent", 0) for res in results)
    big = results[0].get("big")
    if big and n > 1:
        ideal = 2 * (n - 1) / n * big * 4
        if sent > 1.2 * ideal:
            return False, (f"right values, but each rank sent {sent / (big * 4):.2f}x the vector's "
                           f"bytes where reduce-scatter + all-gather send {ideal / (big * 4):.2f}x: "
                           "an all-reduce where a reduce-scatter suffices?")
    return True, (f"{n} ranks, {len(results[0]['after'])} steps on {L} elements (uneven shards): "
                  "same as labkit's reference and as one process; momentum kept for the own "
                  "shard only; reduce-scatter + all-gather bytes")


@checker("zero1_step")
def zero1_step(fn, cluster, steps: int = 3):
    """fn(params, grads, momentum, lr, beta) on every rank: the ZeRO-1 sharded SGD-momentum step."""
    from labkit.zero.exercise import reference_step, trial
    results = cluster.run(trial, fn, steps=steps, timeout=30)
    ref = cluster.run(trial, reference_step, steps=steps, big=0, timeout=30)
    for r, (a, b) in enumerate(zip(ref, [x["one"] for x in ref])):
        assert all((x - y).abs().max() <= TOL for x, y in zip(a["after"], b)), "reference drifted"
    return _diagnose(results, cluster.world_size)
