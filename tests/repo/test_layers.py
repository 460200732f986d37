"""The layers of docs/architecture.md, checked: pure modules import with torch blocked.

Layer 1 (pure maths: formulas, schedules, the planner) must import and work without torch,
the runtime or any process. Each new pure module joins PURE below.
"""
import subprocess
import sys

import pytest

PURE = [
    "labkit",
    "labkit.memory",
    "labkit.memory.formulas",
    "labkit.memory.activations",
    "labkit.memory.breakdown",
    "labkit.comm.formulas",
    "labkit.fsdp",
    "labkit.fsdp.strategies",
    "labkit.paths",
    "labkit.livefig",
    "labkit.comm.busbw",
    "labkit.comm.link", "labkit.comm.latency",
    "labkit.tables",
    "labkit.i18n", "labkit.i18n.cells", "labkit.i18n.lang", "labkit.i18n.messages", "labkit.i18n.po",
    "labkit.i18n.notebooks",
    "labkit.parallel_dims",
    "labkit.plan",
    "labkit.plan.traffic",
    "labkit.plan.flops",
    "labkit.plan.shapes",
    "labkit.plan.planner",
    "labkit.plan.dims",
    "labkit.pipeline",
    "labkit.pipeline.formulas",
    "labkit.pipeline.schedules",
    "labkit.pipeline.validate",
    "labkit.pipeline.simulate",
    "labkit.pipeline.schedules_v",
    "labkit.pipeline.compare",
    "labkit.throughput",
    "labkit.throughput.verdict",
    "labkit.throughput.knobs",
    "labkit.pitfalls",
    "labkit.pitfalls.detectors",
    "labkit.tricks",
    "labkit.tricks.formulas",
    "labkit.moe.formulas",
    "labkit.tricks.quant8_math",
    "labkit.cp",
    "labkit.cp.layout",
    "labkit.cp.formulas",
    "labkit.verdict",
    "labkit.machine",
    "labkit._lazy",
    "labkit.numerics",
    "labkit.versions",
]

# Importing any of these from a pure module is a layering error.
FORBIDDEN = ["torch", "numpy", "matplotlib", "cloudpickle", "labkit.runtime", "socket",
             "subprocess", "multiprocessing"]

_PROBE = r"""
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "numpy", "matplotlib", "cloudpickle"}:
            raise ImportError(f"{name} is blocked: a pure module must not import it")
sys.meta_path.insert(0, Block())
importlib.import_module(sys.argv[1])
loaded = [m for m in sys.argv[2:] if m in sys.modules]
print(",".join(loaded))
"""


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_without_torch_or_the_runtime(module):
    p = subprocess.run([sys.executable, "-c", _PROBE, module, *FORBIDDEN],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"import {module} failed with torch blocked:\n{p.stderr[-2000:]}"
    loaded = [m for m in p.stdout.strip().split(",") if m]
    assert not loaded, f"import {module} loaded {loaded}; pure modules import none of them"


def test_public_names_still_resolve():
    import labkit
    for name in labkit.__all__:
        assert getattr(labkit, name) is not None, name
    from labkit.comm import ring_all_reduce, traffic  # noqa: F401  (lazy names)
    assert {"Cluster", "rank", "check", "memory"} <= set(dir(labkit))
