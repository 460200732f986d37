"""labkit.memory.live without a cluster: the meter's categories, and the figure as a PNG."""
import io

import matplotlib
import torch

matplotlib.use("Agg")

from labkit.memory import live  # noqa: E402
from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss  # noqa: E402


def test_meter_counts_saved_activations_and_their_release():
    torch.manual_seed(0)
    model = AwkwardNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    meter = live.Meter(model, opt)
    x, y = awkward_batch(8)
    with meter.forward():
        loss = lm_loss(model(x), y)
    held = meter.snapshot()
    assert held["activations"] > 0 and held["grads"] == 0 and held["gathered"] == 0
    assert held["params"] == sum(p.numel() * 4 for p in {id(p): p for p in model.parameters()}.values())
    loss.backward()
    opt.step()
    del loss
    after = meter.snapshot()
    assert after["activations"] < held["activations"] / 10     # the graph is gone
    assert after["moments"] == 2 * held["params"] - 2 * 13 * 4      # m, v for trainable (frozen: 13)


def test_figure_renders_headless_as_png():
    bars = {r: [(f"0:{ph}", {"params": 1e6, "grads": 5e5 * i, "moments": 2e6 * (i == 2),
                             "gathered": 3e5 * (i == 1), "activations": 4e6 * (i == 0)})
                for i, ph in enumerate(("after forward", "during backward", "after step"))]
            for r in range(4)}
    fig = live.figure(bars, "test")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["params", "grads", "moments", "gathered", "activations"]
    assert len(fig.axes) == 4
