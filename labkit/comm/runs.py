"""Runs of the course's collectives on a cluster: recorded ring steps, and bytes per rank.

    events = record_ring(cluster, length=12)        # per rank: what the ring did, step by step
    events_table(events)                            # the same, as a table (times from the start)
    rows = traffic_rows(cluster, nbytes=4 << 20)    # bytes each rank sent, per collective
    traffic_table(rows)                             # measured next to the formula

Both run real collectives on the cluster's ranks; nothing here is simulated.
"""
from labkit.comm import formulas
from labkit.i18n import tr

TRAFFIC_OPS = ["ring_all_reduce", "naive_all_reduce", "torch_all_reduce"]


def _record_rank(length, fast):
    import torch
    import labkit
    from labkit import comm
    t = torch.full((length,), float(labkit.rank() + 1), device=labkit.device())
    expected = t.clone()
    import torch.distributed as dist
    dist.all_reduce(expected)
    with comm.record() as rec:
        (comm.ring_all_reduce if fast else comm.ring_all_reduce_simple)(t)
    if not torch.equal(t, expected):
        raise AssertionError(tr("rank {rank}: the recorded ring gave a wrong sum", rank=labkit.rank()))
    return rec.events


def record_ring(cluster, length: int = None, fast: bool = False) -> list:
    """Run one ring all-reduce of `length` float32 elements (default 3 x world size) on every
    rank while recording; returns the events of all ranks, sorted by phase, step and rank."""
    length = 3 * cluster.world_size if length is None else length
    per_rank = cluster.run(_record_rank, length, fast, timeout=60)
    order = {"reduce-scatter": 0, "all-gather": 1}
    return sorted((e for evs in per_rank for e in evs), key=lambda e: (order[e["phase"]], e["step"], e["rank"]))


def _traffic_rank(nbytes, ops, repeats, group_size):
    import time
    import torch
    import torch.distributed as dist
    import labkit
    from labkit import comm
    group = None if group_size == labkit.world_size() else dist.new_group(list(range(group_size)))
    t = torch.ones(nbytes // 4, device=labkit.device())
    run = {"ring_all_reduce": comm.ring_all_reduce, "ring_all_reduce_simple": comm.ring_all_reduce_simple,
           "naive_all_reduce": comm.naive_all_reduce, "torch_all_reduce": dist.all_reduce}
    out = {}
    for op in ops:
        best = None
        for _ in range(repeats):
            dist.barrier()
            time.sleep(0.005)                                # let the barrier's last bytes land
            if labkit.rank() >= group_size:                  # not in the group: idle, like a spare GPU
                continue
            with comm.traffic.measure(sync=True, group=group) as m:   # nobody sends before all look
                run[op](t, group=group)
            t.fill_(1.0)
            got = dict(m.__dict__)
            # a late byte of the barrier before the block can only add: keep each count's minimum
            best = got if best is None else {k: min(v, got[k]) for k, v in best.items()}
        if best is not None:
            out[op] = best
    dist.barrier()
    return out


def traffic_rows(cluster, nbytes: int = 4 << 20, ops=TRAFFIC_OPS, repeats: int = 3,
                 world_size: int = None) -> list:
    """Bytes each rank sent and received in each op (measured by the kernel, and labkit's payload
    counter), next to the formula: 2(N-1)/N x S for the ring, (N-1) x S / S for naive.

    world_size=k < cluster.world_size runs the ops in a process group of ranks 0..k-1 (the
    others wait), so N = 2, 3, 4 can be measured on one cluster of 4."""
    n = cluster.world_size if world_size is None else world_size
    if not 1 <= n <= cluster.world_size:
        raise ValueError(tr("world_size must be between 1 and the cluster's {most}, got {n}",
                            most=cluster.world_size, n=n))
    nbytes = nbytes // 4 * 4
    per_rank = cluster.run(_traffic_rank, nbytes, list(ops), repeats, n, timeout=120)[:n]
    rows = []
    for rank, res in enumerate(per_rank):
        for op, m in res.items():
            if op.startswith("naive"):
                formula = formulas.naive_bytes(nbytes, n, rank)[0]
            else:
                formula = formulas.ring_bytes_exact(nbytes // 4, n, 4, rank)
            rows.append(dict(m, op=op, rank=rank, world_size=n, bytes=nbytes, formula=formula,
                             ratio=m["sent"] / nbytes))
    return rows


def events_table(events: list, first: int = None):
    """Recorded ring events as a table: who sent which chunk to whom at each step, and when
    (milliseconds since the first step began, so no raw clock readings). `first`: only the
    first so many events."""
    from labkit.tables import Table
    t_start = min(e["t0"] for e in events) if events else 0.0
    shown = events if first is None else events[:first]
    rows = [[e["phase"], e["step"] + 1, e["rank"],
             "-" if e["send_to"] is None else f"c{e['send_chunk']} -> rank {e['send_to']}",
             f"c{e['recv_chunk']} <- rank {e['recv_from']}", f"{e['sent']:,}",
             f"{(e['t0'] - t_start) * 1e3:.2f}", f"{(e['t1'] - e['t0']) * 1e3:.2f}"]
            for e in shown]
    notes = [tr("({n} more events not shown)", n=len(events) - len(shown))] \
        if len(shown) < len(events) else []
    return Table(["phase", "step", "rank", "sends", "receives", "bytes sent", "start (ms)",
                  "took (ms)"], rows, align="lrrllrrr", notes=notes)


def traffic_table(rows):
    """Measured bytes next to the formula, with the difference, one row per rank and op
    (a `labkit.tables.Table`: text when printed, a table in a notebook)."""
    from labkit.tables import Table
    out = []
    for r in rows:
        S = r["bytes"]
        msgs = str(r["messages_sent"]) if not r["op"].startswith("torch") else "-"
        out.append([r["world_size"], r["op"], r["rank"], f"{r['sent'] / S:.4f}",
                    f"{r['received'] / S:.4f}", f"{r['formula'] / S:.4f}",
                    f"{r['sent'] - r['formula']:,} B", msgs])
    return Table(["N", "op", "rank", "sent / S", "received / S", "formula / S", "sent - formula",
                  "messages sent"], out, align="rlrrrrrr")


def traffic_verdicts(rows, tolerance: float = 1e-3) -> bool:
    """One `labkit.verdict` line per world size and op of `traffic_rows`: does every rank send
    what the formula says, within `tolerance` x S (gloo adds a 96-byte header per message:
    0.02 % of 4 MB per ring step)? Returns True when every one holds."""
    from labkit.verdict import verdict
    ok = True
    for key in dict.fromkeys((r["world_size"], r["op"]) for r in rows):
        mine = [r for r in rows if (r["world_size"], r["op"]) == key]
        S = mine[0]["bytes"]
        worst = max(mine, key=lambda r: abs(r["sent"] - r["formula"]))
        sent = sorted({f"{r['sent'] / S:.4f}" for r in mine})
        form = sorted({f"{r['formula'] / S:.4f}" for r in mine})
        ok &= verdict(abs(worst["sent"] - worst["formula"]) <= tolerance * S,
                      tr("N={n} {op}: sent / S per rank {sent}, formula {form} (largest gap "
                         "{gap:+,} B on rank {rank}, allowed {allowed:,.0f} B)", n=key[0],
                         op=key[1], sent=", ".join(sent), form=", ".join(form),
                         gap=worst["sent"] - worst["formula"], rank=worst["rank"],
                         allowed=tolerance * S))
    return ok
