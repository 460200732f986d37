"""Module 09's library: 8-bit Adam against fp32 Adam, the block scales counted to the byte,
checkpointing saving what Korthikanti's formula says, accumulation equal to the big batch, and
the per-config runs on 2 and 4 ranks against one process."""
import math

import pytest
import torch

from labkit.tricks import Config, Shape, predict, quant8_math as Q
from labkit.tricks.formulas import combinations

SHAPE = Shape(n_layer=2, n_embd=64, n_head=4, vocab_size=256, seq=64, batch=4)


# -- pure ------------------------------------------------------------------------------------
def test_dynamic_map_has_256_sorted_values_in_range():
    for signed in (True, False):
        m = Q.dynamic_map(signed)
        assert len(m) == 256 and m == sorted(m) and m[-1] == 1.0
        assert min(m) == (-1.0 if signed else 0.0) or (signed and min(m) > -1.0)
        assert len(set(m)) == (255 if signed else 256) or len(set(m)) >= 254


def test_block_scale_bytes_exact():
    assert Q.moment_bytes(4096, 256) == {"codes": 4096, "scales": 64, "fp32": 0}
    assert Q.moment_bytes(4097, 256)["scales"] == 4 * 17                 # a short last block has a scale too
    assert Q.moment_bytes(100)["fp32"] == 400                            # below min_size: fp32
    assert Q.adam8bit_state_bytes([65536, 10]) == {"momentum": 65536 + 40, "variance": 65536 + 40, "other": 2 * 4 * 256}
    assert math.isclose(Q.bytes_per_param(256), 6.03125) and math.isclose(Q.bytes_per_param(256, master=False), 2.03125)


def test_configs_and_prediction():
    assert len(combinations()) == 32 and len({c.code for c in combinations()}) == 32
    with pytest.raises(ValueError, match="precision"):
        Config(precision="fp8")
    b = predict(Config(precision="mixed"), 1000, SHAPE)
    assert (b.params, b.grads, b.master, b.momentum, b.variance) == (2000, 2000, 4000, 4000, 4000)
    off = predict(Config(offload=True), 1000, SHAPE)
    assert off.host == 12000 and off.master == 4000
    full = predict(Config(checkpointing="full"), 1000, SHAPE).activations
    none = predict(Config(), 1000, SHAPE).activations
    assert full < predict(Config(checkpointing="selective"), 1000, SHAPE).activations < none


# -- 8-bit Adam ------------------------------------------------------------------------------
def quantization_error(x: torch.Tensor, signed: bool = True, block: int = Q.BLOCK) -> float:
    """Largest |x - dequantize(quantize(x))| relative to the block's scale."""
    from labkit.tricks.quant8 import _codebook, dequantize, quantize
    code, mids = _codebook(signed)
    q, s = quantize(x, code, mids, block)
    back = dequantize(q, s, code, block)
    nb = s.numel()
    err = torch.nn.functional.pad((back - x).abs().reshape(-1), (0, nb * block - x.numel())).view(nb, block)
    return float((err.amax(dim=1) / s.clamp_min(1e-30)).max()) if not math.isnan(float(err.sum())) else math.nan


def test_adam8bit_tracks_fp32_adam_and_counts_its_bytes():
    from labkit.tricks.quant8 import Adam8bit
    torch.manual_seed(0)
    w = torch.randn(300, 70)                   # 21,000 values: 83 blocks, the last one short
    small = torch.randn(50)                    # below 4096 values: fp32 moments
    p, q = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    ps, qs = torch.nn.Parameter(small.clone()), torch.nn.Parameter(small.clone())
    opt = Adam8bit([p, ps], lr=1e-3)
    ref = torch.optim.AdamW([q, qs], lr=1e-3, weight_decay=0.0)
    for _ in range(10):
        g, gs = torch.randn_like(w), torch.randn_like(small)
        p.grad, q.grad, ps.grad, qs.grad = g.clone(), g.clone(), gs.clone(), gs.clone()
        opt.step()
        ref.step()
    moved = (q - w).abs().max().item()
    assert (p - q).abs().max().item() < 0.05 * moved            # 10 steps: within 5 % of the update
    assert torch.allclose(ps, qs, atol=1e-6)                    # the small tensor is plain fp32 Adam
    assert opt.state_bytes() == Q.adam8bit_state_bytes([w.numel(), small.numel()])
    assert quantization_error(torch.randn(5000)) < 0.01          # half the largest gap of the code book
    assert quantization_error(torch.rand(5000) ** 4, signed=False) < 0.01


# -- on ranks --------------------------------------------------------------------------------
def test_checkpointing_saves_what_the_formula_says(cluster2):
    from labkit.tricks import runs
    rows = cluster2.run(runs.run_many, [Config(), Config(checkpointing="selective"), Config(checkpointing="full")],
                        SHAPE, 1)
    for rank_rows in rows:
        base = rank_rows[0]
        n = base["n_params"]
        for row in rank_rows:
            want = predict(row["config"], n, SHAPE).activations
            assert abs(row["stored"] - want) <= 0.02 * want, (row["config"].code, row["stored"], want)   # 2 %
        saved = base["stored"] - rank_rows[2]["stored"]
        f_saved = predict(Config(), n, SHAPE).activations - predict(Config(checkpointing="full"), n, SHAPE).activations
        assert abs(saved - f_saved) <= 0.02 * f_saved


def test_accumulation_equals_the_big_batch(cluster):
    from labkit.tricks import accumulation
    tol = accumulation.tolerance(cluster.world_size, micro=4, seq=16)     # derived (accumulation.py)
    for row in cluster.run(accumulation.parity, micro=4, seq=16):
        assert row["max_diff"] <= tol, (row, tol)


def test_accumulations_scale_holds_on_one_process():
    import torch
    from labkit.toy_models import GPTConfig, TinyGPT, lm_loss, token_batch
    from labkit.tricks import accumulation
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=256, block_size=32))
    X, Y = token_batch(8, 32, 256, seed=1)                  # parity's global batch on 1 rank
    outputs = []
    for m in model.modules():
        m.register_forward_hook(lambda m, i, o: outputs.append(o) if torch.is_tensor(o) else None)
    logits = model(X)
    lm_loss(logits, Y).backward()
    values = outputs + [logits] + [p.grad for p in model.parameters()]
    assert max(v.abs().max().item() for v in values) <= accumulation.SCALE


def test_every_trick_trains_like_one_process(cluster):
    """The data-parallel run of each exact trick (fp32, accumulation, offload, checkpointing)
    ends with the weights of one process trained on the global batch; every config's held bytes
    match the formula; the exact tricks' losses equal the baseline's."""
    from labkit.tricks import runs
    configs = [Config(), Config(micro=2), Config(precision="mixed"), Config(optimizer="adam8bit"),
               Config(offload=True), Config(checkpointing="full")]
    rows = cluster.run(runs.run_many, configs, SHAPE, 1)
    for i, c in enumerate(configs):
        per = [r[i] for r in rows]
        losses = [r["losses"] for r in per]
        assert all(len(ls) == 2 and all(math.isfinite(v) for v in ls) for ls in losses)
        held = per[0]["held"]
        want = predict(c, per[0]["n_params"], SHAPE, per[0]["sizes"])
        for cat in ("params", "master", "momentum", "variance"):
            assert getattr(held, cat) == getattr(want, cat), (c.code, cat)
        if c.offload:
            assert held.on_host and per[0]["moved"]["to_host"] > 0
    from labkit.tricks.runs import one_process
    for i in (0, 1, 4, 5):                     # fp32, accumulation, offload, checkpointing: exact
        want = one_process(configs[i], SHAPE, len(rows), rows[0][i]["steps"])
        for r in rows:
            assert abs(r[i]["checksum"] - want) <= 1e-5 * abs(want), (configs[i].code, r[i]["checksum"], want)
    base = [r[0]["losses"] for r in rows]
    for i in (1, 4, 5):                        # exact tricks: same losses as the baseline
        for r, b in zip(rows, base):
            assert all(abs(x - y) < 1e-4 for x, y in zip(r[i]["losses"], b)), configs[i].code
    _tables_of(configs, rows)


def _tables_of(configs, rows):
    """compare's tables of these measured rows: full, and with the fewer columns a slide shows
    (in the asked order, ratio columns named for what they compare), the notes in English."""
    import re
    from labkit.tricks import compare
    results = [compare.Result(c, [r[i] for r in rows]) for i, c in enumerate(configs)]
    full = compare.table(results, SHAPE, world_size=len(rows))
    assert len(full.header) == 7 and [r[0] for r in full.rows] == [c.code for c in configs]
    few = compare.table(results, SHAPE, world_size=len(rows), columns=("tricks", "activations", "step_ratio"))
    assert few.header == ["tricks", full.header[4], "step vs baseline"] and few.align == "lrr"
    assert [r[1:] for r in few.rows] == [[r[4], r[6]] for r in full.rows] and few.rows[0][2] == "1.00x"
    with pytest.raises(ValueError, match="columns must be some of"):
        compare.table(results, SHAPE, columns=("tricks", "peak per rank"))
    zh, en = compare.priority(results), compare.priority(results, english=True, columns=("rank", "notes", "saved"))
    cjk = re.compile(r"[\u3000-\u9fff]")
    assert cjk.search(str(zh)) and not cjk.search(str(en))
    assert len(en.rows) == len(zh.rows) and en.header == ["notes' rank", "the notes", "saved per rank"]
    assert [r[2] for r in en.rows] == [r[3] for r in zh.rows]


def test_figures_on_slides_are_legible_and_in_a_notebook_unchanged():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from labkit import slides
    from labkit.tricks import plots
    pts = [("-", 20e6, 0.2), ("M", 15e6, 0.18), ("C", 13e6, 0.3), ("MCA8O", 9e6, 0.6)]
    makers = [lambda: plots.scatter(pts), lambda: plots.loss_figure({"a": [3, 2, 1], "b": [3, 2.1, 1]})]
    for make in makers:
        with matplotlib.rc_context():
            slides.style()
            fig = make()
            fig.canvas.draw()
            sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]
            assert min(sizes) >= slides.MIN_FONT_PT and fig.get_size_inches()[0] <= slides.FIGSIZE[0] + 1e-6
            plt.close(fig)
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        fig = plots.scatter(pts)
        assert tuple(fig.get_size_inches()) == (10, 6)
        plt.close(fig)
