"""ZeRO-3's forward, recorded by its hooks on every rank: each layer is gathered, computed and
freed in turn (gather, compute, free; never two layers at once besides the root), and nothing
is left gathered when forward returns; backward gathers each layer again and frees it after its
reduce-scatter."""


def _one_step():
    import torch
    import torch.distributed as dist
    from labkit.toy_models import lm_loss
    from labkit import trace
    from labkit.zero import wrap
    from labkit.zero.stage3 import Events
    from labkit.zero.runs import tiny_gpt
    torch.manual_seed(0)
    net, batch_fn = tiny_gpt(n_layer=3, n_embd=32, vocab=64, seq=8)
    model, opt = wrap(net, torch.optim.Adam, stage=3, lr=1e-3)
    x, y = batch_fn(2, dist.get_rank())
    with trace.recording(Events(model)) as rec:
        out = model(x)
        after_forward = model.gathered_bytes()
        lm_loss(out.float(), y).backward()
        after_backward = model.gathered_bytes()
        opt.step()
    return {"events": [(e["unit"], e["kind"], e["phase"], e["gathered"]) for e in rec.events],
            "after_forward": after_forward, "after_backward": after_backward,
            "unit_bytes": {u.name: sum(g.nbytes for g in u.groups) for u in model.units}}


def test_stage3_gathers_computes_frees_layer_by_layer(cluster):
    results = cluster.run(_one_step)
    first = [e[:3] for e in results[0]["events"]]
    for r in results:
        assert [e[:3] for e in r["events"]] == first          # every rank, the same order
        assert r["after_forward"] == 0 and r["after_backward"] == 0, r
        size = r["unit_bytes"]
        root = size["root"]
        fwd = [e for e in r["events"] if e[2] == "forward"]
        assert fwd[0] == ("root", "all-gather", "forward", root)
        assert fwd[-2:] == [("root", "compute", "forward", root), ("root", "free", "forward", 0)]
        layers = [u for u in size if u != "root"]
        assert layers == ["pos", "blocks.0", "blocks.1", "blocks.2", "ln_f"]
        middle = fwd[1:-2]
        assert len(middle) == 3 * len(layers)
        for i, unit in enumerate(layers):                    # gather, compute, free; one at a time
            assert middle[3 * i:3 * i + 3] == [(unit, "all-gather", "forward", root + size[unit]),
                                               (unit, "compute", "forward", root + size[unit]),
                                               (unit, "free", "forward", root)], (unit, middle)
        bwd = [e for e in r["events"] if e[2] == "backward"]
        for unit in layers:
            kinds = [e[1] for e in bwd if e[0] == unit]
            assert kinds == ["all-gather", "reduce-scatter", "free"], (unit, kinds)
        assert max(e[3] for e in bwd) == root + max(size[u] for u in layers)
