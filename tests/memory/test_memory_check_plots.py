"""The mixed_adam_bytes checker's verdicts, and the memory figures rendering headless."""
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")

import labkit.check                                    # noqa: E402
import labkit.memory as M                              # noqa: E402


def _right(n):
    return {"params": 2 * n, "grads": 2 * n, "master": 4 * n, "momentum": 4 * n, "variance": 4 * n}


def test_checker_passes_the_reference(capsys):
    assert labkit.check.mixed_adam_bytes(_right)
    assert capsys.readouterr().out.startswith("mixed_adam_bytes: pass (25 sizes")


def test_checker_names_the_wrong_category(capsys):
    def fp16_master(n):
        return {**_right(n), "master": 2 * n}
    assert not labkit.check.mixed_adam_bytes(fp16_master)
    out = capsys.readouterr().out
    assert "master is 2 bytes (2 per parameter), expected 4 (4 per parameter)" in out
    assert "master copy of the weights is fp32" in out


def test_checker_on_stub_and_wrong_type(capsys):
    def stub(n):
        raise NotImplementedError
    assert not labkit.check.mixed_adam_bytes(stub)
    assert "not implemented yet" in capsys.readouterr().out
    assert not labkit.check.mixed_adam_bytes(lambda n: 16 * n)
    assert "returned int; return a dict" in capsys.readouterr().out
    assert not labkit.check.mixed_adam_bytes(lambda n: {"params": 2 * n})
    assert "the dict has no grads, master, momentum, variance" in capsys.readouterr().out


def _png(fig, tmp_path, name):
    path = tmp_path / name
    fig.savefig(path)
    matplotlib.pyplot.close(fig)
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figures_render(tmp_path):
    f = M.model_states(1e6, precision="fp32", optimizer="adamw", zero_stage=3, world_size=4)
    measured = [replace(f, other=400, label=f"rank {r}") for r in range(4)]
    assert _png(M.plot_ranks(measured, f), tmp_path, "ranks.png")
    assert _png(M.plot_breakdown([M.model_states(7e9, zero_stage=s, world_size=8) for s in range(4)],
                                 gpu_gb=80), tmp_path, "zero.png")
    assert _png(M.explorer_figure(70e9, world_size=64, zero_stage=3, checkpointing="full"),
                tmp_path, "explorer.png")
    stages = [M.model_states(7.5e9, zero_stage=s, world_size=64) for s in range(4)]
    fig = M.plot_breakdown(stages, gpu_gb=80, log=True, per="rank")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "GB per rank (log scale)"
    heights = sorted({round(p.get_height(), 3) for p in ax.patches})
    assert heights[0] == 0.234 and 1.406 in heights          # ZeRO-3's shards, readable as bars
    assert _png(fig, tmp_path, "zero_log.png")


def test_explorer_builds_its_widgets_headless():
    controls = M.explorer(n_params=7e9, gpu_gb=80)
    assert set(controls) == {"n_params", "world_size", "zero_stage", "precision", "optimizer",
                             "checkpointing", "seq", "micro_batch", "gpu_gb", "log"}
    controls["zero_stage"].value = 3                   # redraws through the display handle
    controls["log"].value = True                       # the right panel on a log scale
    matplotlib.pyplot.close("all")


def test_explorer_setting_answers_like_the_formulas():
    from labkit.memory.plots import configuration
    full, fit = configuration(n_params=7e9, world_size=1, zero_stage=0, seq=2048, micro_batch=1, gpu_gb=80)
    layers, hidden, heads = M.gpt_shape(7e9)
    act = M.activations(layers, hidden, heads, 2048, 1)
    assert full.model_state == 112e9 and full.activations == act.peak
    assert not fit.fits and fit.margin == 80e9 - 112e9 - act.peak
    _, fit = configuration(n_params=70e9, world_size=64, zero_stage=3, checkpointing="full", seq=4096, gpu_gb=80)
    assert fit.fits and fit.model_state == 16 * 70e9 / 64
