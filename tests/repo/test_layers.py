"""The layers of docs/architecture.md, checked: pure modules import with torch blocked, and
labkit's imports run one way.

Layer 1 (pure maths: formulas, schedules, the planner) must import and work without torch,
the runtime or any process. Each new pure module joins PURE below.
The import graph (every `import` of a labkit module, at a file's top or inside a function, read
from the source) has no circle between files and no loop between folders: the folders stand in
an order where every arrow points down. The runtime imports only itself and the helpers it
prints with (never the package's face, `labkit/__init__.py`).
"""
import ast
import pathlib
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
    "labkit.course",
    "labkit.course.translate",
    "labkit.nd",
    "labkit.nd.layout",
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


# -- the import graph -------------------------------------------------------------------------
PKG = pathlib.Path(__file__).resolve().parents[2] / "labkit"
RUNTIME_MAY_IMPORT = ("labkit.runtime", "labkit.i18n", "labkit.versions")


def _modules() -> dict:
    """{dotted name: path} of every labkit module (a package by its __init__.py)."""
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(mods: dict = None) -> dict:
    """{module: {labkit module it imports: line}}: `import a.b`, `from a import b` (b a module, or
    a name of a), relative imports, at the top of a file or inside a function."""
    mods = mods if mods is not None else _modules()

    def known(name):                      # the module itself, or the module an attribute is of
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name
    graph = {}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        arrows = graph[mod] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[:len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for name in names:
                target = known(name) if name.split(".")[0] == "labkit" else ""
                if target and target != mod:
                    arrows.setdefault(target, node.lineno)
    return graph


def folder(mod: str) -> str:
    """A module's folder in the picture: labkit.<sub> for a subpackage (and its subfolders), the
    module itself for a file at labkit's top, 'labkit' for the package's face."""
    return ".".join(mod.split(".")[:2])


def circles(graph: dict) -> list:
    """Every set of nodes that import each other in a loop (strongly connected, more than one)."""
    order, low, stack, out = {}, {}, [], []

    def visit(v):                         # Tarjan's algorithm
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            comp = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(comp) > 1:
                out.append(sorted(comp))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in order:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def _arrows(graph, inside) -> list:
    return [f"{a} -> {b} (line {line})" for a in sorted(graph) for b, line in sorted(graph[a].items())
            if inside(a, b)]


def test_the_graph_reader_sees_labkits_imports():
    """The checks below read what they should: known arrows are there, so they cannot pass empty."""
    g = import_graph()
    assert len(g) > 250 and sum(map(len, g.values())) > 700, (len(g), sum(map(len, g.values())))
    assert "labkit.runtime.local.source" in g["labkit.runtime.cluster"]           # top-level import
    assert "labkit.runtime.remote.source" in g["labkit.runtime.cluster"]          # inside a function
    assert "labkit.nd.layout" in g["labkit.nd"]                                   # from a package's face


def test_no_import_circle_between_files():
    g = import_graph()
    found = circles(g)
    assert not found, "files that import each other in a loop:\n" + "\n".join(
        ", ".join(c) + ":\n  " + "\n  ".join(_arrows(g, lambda a, b, c=c: a in c and b in c)) for c in found)


def test_no_loop_between_folders():
    """Every arrow between labkit's folders points down: no folder imports, directly or through
    others, a folder that imports it (a loop is an arrow that runs back up, whichever way the
    folders are stacked)."""
    g = import_graph()
    folders = {}
    for a, bs in g.items():
        for b in bs:
            if folder(a) != folder(b):
                folders.setdefault(folder(a), set()).add(folder(b))
    found = circles(folders)
    assert not found, "folders that import each other in a loop:\n" + "\n".join(
        ", ".join(c) + ":\n  " + "\n  ".join(_arrows(g, lambda a, b, c=c: folder(a) != folder(b)
                                                        and folder(a) in c and folder(b) in c)) for c in found)


def test_the_runtime_imports_only_itself_and_its_helpers():
    """labkit/runtime knows nothing above it: not the package's face (labkit/__init__.py, whose
    lazy names lead back into the runtime), not a technique."""
    g = import_graph()
    wrong = _arrows(g, lambda a, b: a.startswith("labkit.runtime") and not b.startswith(RUNTIME_MAY_IMPORT))
    assert not wrong, "the runtime imports from above it:\n  " + "\n  ".join(wrong)
