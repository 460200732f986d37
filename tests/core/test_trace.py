"""labkit/trace.py, the measuring seam: nothing kept without a recorder, spans and counts with
one, saved_bytes as autograd saves (each view once, the excluded tensors not counted)."""
import torch

from labkit import trace


def test_nothing_is_kept_without_a_recorder():
    assert trace.active() is None and trace.stamp() is None
    assert trace.span("compute") is trace.span("wait")        # one shared empty context
    trace.add("transfer", None)
    trace.count("sent", 4)


def test_spans_and_counts_land_in_the_active_recorder():
    rec = trace.Recorder()
    with trace.recording(rec):
        with trace.span("compute", step=0):
            t0 = trace.stamp()
        trace.add("transfer", t0, step=0)
        trace.count("sent", 3)
        trace.count("sent", 4)
    assert [(n, tags) for n, _, _, tags in rec.spans] == [("compute", {"step": 0}), ("transfer", {"step": 0})]
    assert all(a <= b for _, a, b, _ in rec.spans) and rec.bytes == {"sent": 7}
    assert trace.active() is None


def test_saved_bytes_counts_what_backward_keeps():
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(8, 4, requires_grad=True)                # matmul then saves w too
    with trace.saved_bytes(exclude=[w]) as saved:
        (x @ w).relu().sum()
    assert saved.bytes == 2 * 8 * 4 * 4                      # x and relu's output; w excluded


def test_saved_bytes_per_view_storage_or_save():
    """The three ways the notebooks count (cp/activations, tp/parity: per storage; the pipeline:
    per view; cp/parity: every save), on one graph whose numbers differ each way: x is saved
    by two ops (mul, then matmul), a half-batch view of b by one, w is a parameter."""
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(8, 4, requires_grad=True)
    b = torch.randn(16, 4, requires_grad=True)
    half = b[:8]                                              # a view: its storage is all of b

    def forward():
        return ((x * x) @ w + x @ w + half * half).sum()
    counts = {}
    for per in trace.PER:
        with trace.saved_bytes(exclude=[w], per=per) as saved:
            forward()
        counts[per] = (saved.bytes, saved.tensors, saved.by_dtype)
    x_b, half_b, b_b, sq_b = 8 * 4 * 4, 8 * 4 * 4, 16 * 4 * 4, 8 * 4 * 4     # sq: x * x, saved by matmul
    assert counts["view"][:2] == (x_b + sq_b + half_b, 3)
    assert counts["storage"][:2] == (x_b + sq_b + b_b, 3)                    # the view's whole storage
    saves = counts["save"][1]
    assert saves > 3 and counts["save"][0] == x_b * 3 + sq_b + half_b * 2    # x by mul (twice) and matmul
    assert {k: v[2] for k, v in counts.items()} == {k: {"float32": v[0]} for k, v in counts.items()}


def test_saved_bytes_by_dtype_and_a_wrong_per():
    x = torch.randn(8, 4, requires_grad=True)
    with trace.saved_bytes(per="storage") as saved:
        a = x.to(torch.bfloat16)
        (a * a).float().exp().sum()                           # mul keeps a (once), exp its fp32 output
    assert saved.by_dtype == {"bfloat16": 8 * 4 * 2, "float32": 8 * 4 * 4} and saved.bytes == 8 * 4 * 6
    try:
        with trace.saved_bytes(per="storages"):
            pass
    except ValueError as e:
        assert "per=" in str(e) and "storages" in str(e)
    else:
        raise AssertionError("per='storages' was accepted")


def test_a_recorder_for_some_names_inside_another():
    """cp/block_stats inside cp/runs' ring timeline: each span goes to the innermost recorder that
    keeps its name, the rest to the one outside."""
    outer, inner = trace.Recorder(), trace.Recorder(names={"block"})
    with trace.recording(outer), trace.recording(inner):
        with trace.span("compute", step=0):
            trace.add("block", trace.stamp("block"), entries=4)
        trace.count("sent", 8)
        assert trace.active() is inner and trace.active("compute") is outer
    assert [n for n, *_ in outer.spans] == ["compute"] and outer.bytes == {"sent": 8}
    assert [(n, tags) for n, _, _, tags in inner.spans] == [("block", {"entries": 4})] and inner.bytes == {}


def test_cp_block_stats_read_from_outside():
    from labkit.cp import blocks as B
    from labkit.cp.block_stats import block_stats
    q = k = v = torch.randn(1, 2, 6, 4)
    pos = torch.arange(6)
    B.attend(q, k, v, pos, pos, causal=True)                 # no recorder on: nothing kept anywhere
    with block_stats() as stats:
        B.attend(q, k[:, :, :3], v[:, :, :3], pos, pos[:3], causal=True)
        B.attend(q, k, v, pos, pos, causal=True)
    assert {k: v for k, v in stats.items() if k != "compute seconds"} == \
        {"score entries": 6 * 3 + 6 * 6, "blocks": 2, "largest block": 36}
    assert stats["compute seconds"] > 0
