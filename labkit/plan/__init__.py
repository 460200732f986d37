"""Choosing a layout: traffic per dimension, the notes' decision tree with numbers, full-scale checks.

    from labkit.plan import plan, MODELS, Hardware
    p = plan(MODELS["70B"], Hardware(gpus_per_node=8, nodes=4))
    print(p)                    # TP / PP / DP with a reason for each, memory, traffic, bubble, MFU

Pure arithmetic (no torch): traffic.py, flops.py, shapes.py (the LLMs and hardware as numbers), planner.py. `fake_scale` and
`llama` (torch's fake process group, the real model on meta), `plots` and `form` (matplotlib,
ipywidgets) import on first use.
"""
from labkit._lazy import lazy
from labkit.plan.traffic import Traffic, link_times, ranking_sentence, step_traffic

_LAZY = {"plan": "planner", "evaluate": "planner", "Model": "shapes", "Hardware": "shapes",
         "MODELS": "shapes", "render": "form", "draw_layout": "plots"}
_SUBMODULES = {"form", "fake_scale"}       # labkit.plan.form is the module (form.form() the widget)

__all__ = ["Traffic", "step_traffic", "link_times", "ranking_sentence", *_LAZY, *sorted(_SUBMODULES)]

__getattr__, __dir__ = lazy(__name__, _LAZY, _SUBMODULES)
