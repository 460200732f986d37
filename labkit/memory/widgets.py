"""The memory explorer (layer 4): ipywidgets controls over `explorer_figure`.

The figure is displayed as a static PNG with a display id and replaced on every change, so
an executed notebook (nbconvert, nbval, GitHub) keeps the picture of the starting setting
and a live kernel redraws it as the learner moves the controls.
"""
import matplotlib.pyplot as plt

from labkit.i18n import tr
from labkit.memory.activations import CHECKPOINTING, GPU_SIZES_GB
from labkit.memory.formulas import OPTIMIZERS, PRECISIONS
from labkit.memory.plots import configuration, explorer_figure

WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)


def _controls(start: dict) -> dict:
    import ipywidgets as w
    style = {"description_width": "110px"}
    return {
        "n_params": w.FloatLogSlider(value=start["n_params"], base=10, min=9, max=12, step=0.05,
                                     description=tr("parameters"), readout_format=".3g", style=style),
        "world_size": w.SelectionSlider(options=WORLD_SIZES, value=start["world_size"],
                                        description=tr("world size N"), style=style),
        "zero_stage": w.ToggleButtons(options=[0, 1, 2, 3], value=start["zero_stage"],
                                      description=tr("ZeRO stage"), style=style),
        "precision": w.Dropdown(options=list(PRECISIONS), value=start["precision"],
                                description=tr("precision"), style=style),
        "optimizer": w.Dropdown(options=list(OPTIMIZERS), value=start["optimizer"],
                                description=tr("optimizer"), style=style),
        "checkpointing": w.ToggleButtons(options=list(CHECKPOINTING), value=start["checkpointing"],
                                         description=tr("checkpointing"), style=style),
        "seq": w.SelectionSlider(options=SEQS, value=start["seq"], description=tr("sequence"),
                                 style=style),
        "micro_batch": w.IntSlider(value=start["micro_batch"], min=1, max=32,
                                   description=tr("micro-batch"), style=style),
        "gpu_gb": w.ToggleButtons(options=list(GPU_SIZES_GB), value=start["gpu_gb"],
                                  description=tr("GPU (GB)"), style=style),
        "log": w.Checkbox(value=start["log"], description=tr("log scale (right panel)"), style=style),
    }


def explorer(n_params=7e9, world_size=1, zero_stage=0, precision="mixed", optimizer="adam",
             checkpointing="none", seq=2048, micro_batch=1, gpu_gb=80, log=False):
    """Show the controls and the figure; every change redraws the figure and the verdict.
    `log=True` starts with the right panel on a log scale (small shares readable).

    Returns the dict of widgets (so a cell can set e.g. ``ex["zero_stage"].value = 3``).
    """
    import ipywidgets as w
    from IPython.display import DisplayHandle, display
    start = dict(n_params=n_params, world_size=world_size, zero_stage=zero_stage,
                 precision=precision, optimizer=optimizer, checkpointing=checkpointing,
                 seq=seq, micro_batch=micro_batch, gpu_gb=gpu_gb, log=log)
    controls = _controls(start)
    verdict = w.HTML()

    def draw(settings: dict):
        fig = explorer_figure(**settings)
        plt.close(fig)              # shown through the display handle, not again by inline
        _, fit = configuration(**{k: v for k, v in settings.items() if k != "log"})
        color = "darkgreen" if fit.fits else "crimson"
        verdict.value = f"<b style='color:{color}'>{fit}</b>"
        return fig

    display(w.VBox([w.HBox([w.VBox(list(controls.values())[:5]),
                            w.VBox(list(controls.values())[5:])]), verdict]))
    handle = DisplayHandle()               # a display id: updates replace the picture in place
    handle.display(draw(start))

    def changed(_):
        handle.update(draw({k: c.value for k, c in controls.items()}))
    for c in controls.values():
        c.observe(changed, names="value")
    return controls
