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
