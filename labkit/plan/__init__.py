"""Choosing a layout: traffic per dimension, the notes' decision tree with numbers, full-scale checks.

    from labkit.plan import plan, Model, Cluster
    p = plan(Model.llama(70e9), Hardware(gpus_per_node=8, nodes=4))
    print(p)                    # TP / PP / DP with a reason for each, memory, traffic, bubble, MFU

Pure arithmetic (no torch): traffic.py, planner.py, flops.py. `fake_scale` (torch's fake
process group) and `draw`/`form` (matplotlib, ipywidgets) import on first use.
"""
from labkit.plan.traffic import Traffic, link_times, ranking_sentence, step_traffic

__all__ = ["Traffic", "step_traffic", "link_times", "ranking_sentence"]
