"""Ready for a GPU: every tensor labkit's strategies make says where it lives.

On a GPU each rank works on `labkit.device()`; a tensor made without ``device=`` lands on the
CPU, where NCCL refuses it (a collective on a CPU tensor) or a kernel fails (CPU and CUDA mixed).
On gloo/CPU nothing shows. This test reads the strategy packages with `ast` and fails on a
tensor factory call (torch.zeros, ones, empty, full, arange, randn, rand, randint, tensor, ...)
that passes no ``device=``, is not moved at once (``torch.randn(..., generator=g).to(dev)``) and is
not one of the justified EXCEPTIONS. Offenders in files other engineers own are listed in
TODO_OTHERS, which the lead empties after merging; an entry that no longer offends fails the
test, so neither list goes stale.
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "labkit"
PACKAGES = ["comm", "ddp", "zero", "fsdp", "tp", "pipeline", "tricks", "cp", "moe"]
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "randn", "rand", "randint", "randperm",
             "tensor", "as_tensor", "linspace", "logspace", "eye", "empty_strided", "normal"}

# "package/file.py:function": why a CPU tensor is right there
EXCEPTIONS = {}

# Offenders in files this branch does not own (issue 20, section 5); the lead empties the set.
TODO_OTHERS = set()


def _is_factory(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr in FACTORIES and isinstance(f.value, ast.Name)
            and f.value.id == "torch")


def _placed(call: ast.Call, parent) -> bool:
    """device= given (or **kwargs passed on), or moved at once: torch.zeros(...).to(dev)."""
    if any(k.arg in ("device", None) for k in call.keywords):
        return True
    return (isinstance(parent, ast.Attribute) and parent.value is call
            and parent.attr in ("to", "cuda"))


def offenders(source: str, where: str) -> dict:
    """{"where:function": [line, ...]} of the factory calls in `source` that say no device."""
    found = {}

    def walk(node, scope, parent):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, scope + [child.name], child)
                continue
            if isinstance(child, ast.Call) and _is_factory(child) and not _placed(child, node):
                found.setdefault(f"{where}:{'.'.join(scope) or '<module>'}", []).append(child.lineno)
            walk(child, scope, child)
    walk(ast.parse(source), [], None)
    return found


def _scan() -> dict:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).glob("**/*.py")):
            found.update(offenders(path.read_text(), str(path.relative_to(ROOT))))
    return found


def test_the_scanner_sees_what_it_must():
    src = ("import torch\n"
           "def f(x, dev):\n"
           "    a = torch.zeros(3)\n"                                  # offends
           "    b = torch.ones(3, device=dev)\n"
           "    c = torch.randn(3, generator=g).to(dev)\n"
           "    d = torch.tensor([1.0], **kw)\n"
           "    e = torch.zeros_like(x)\n"                             # inherits x's device
           "    return torch.tensor([a.sum()]).sum()\n"                # offends (moved is not .sum)
           "class K:\n"
           "    def __init__(self):\n"
           "        self.buf = torch.empty(4, dtype=torch.float16)\n")  # offends
    assert offenders(src, "m.py") == {"m.py:f": [3, 8], "m.py:K.__init__": [11]}


def test_strategy_packages_put_every_new_tensor_on_a_device():
    found = _scan()
    new = {k: v for k, v in found.items() if k not in EXCEPTIONS and k not in TODO_OTHERS}
    assert not new, ("tensor factory calls without device= (pass device=labkit.device(), or the "
                     f"device of the tensors it works with): {new}")
    stale = sorted((set(EXCEPTIONS) | TODO_OTHERS) - set(found))
    assert not stale, f"these no longer offend: take them out of EXCEPTIONS / TODO_OTHERS: {stale}"
