"""One task on a rank: running a call, a %%ranks cell, a push or a pull in the rank's namespace;
its result on the CPU; a failure as the notebook reads it (text capped); whether the process
group survived it. Used by worker.py's task loop, for local and remote ranks alike."""
import ast
import os
import sys
import traceback


def pg_suspect(exc) -> bool:
    """After this task, is the process group unusable? (destroyed by the learner, or an error
    raised inside a collective: a timeout or a mismatch leaves the ranks out of step)."""
    import torch.distributed as dist
    if not dist.is_initialized():
        return True
    if exc is None:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f"torch{os.sep}distributed{os.sep}" in f.filename for f in frames)


def namespace() -> dict:
    import torch
    import torch.distributed as dist
    from labkit.runtime import context
    # the cell's `labkit` is the package this module belongs to, loaded before it: handed on, not
    # imported (the runtime imports nothing from the package's face)
    return {"rank": context.rank(), "world_size": context.world_size(),
            "device": context.device(), "torch": torch, "dist": dist, "labkit": sys.modules["labkit"],
            "__name__": "__ranks__", "__builtins__": __builtins__}


def exec_cell(ns: dict, source: str, filename: str):
    """Run a %%ranks cell; return the value of a final expression, like IPython does."""
    tree = ast.parse(source, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), ns)
    if last is not None:
        return eval(compile(last, filename, "eval"), ns)
    return None


def to_cpu(obj):
    """Results cross to the notebook on CPU: the kernel never has to initialise CUDA."""
    import torch
    if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
        return obj.cpu()
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(to_cpu(o) for o in obj)
    if type(obj) is dict:
        return {k: to_cpu(v) for k, v in obj.items()}
    return obj


def failure_report(exc: BaseException) -> dict:
    """What the notebook needs of an exception, its text capped (errors.cap_text): a 50 MB
    message must not travel, nor the exception object that carries it."""
    import cloudpickle
    from labkit.runtime import errors
    frames = [(f.filename, f.lineno, f.name, f.line) for f in traceback.extract_tb(exc.__traceback__)]
    message = errors.safe_str(exc)
    try:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except BaseException:                     # noqa: B902 - a __str__ that fails, even oddly
        text = f"{type(exc).__name__}: {message}"
    pickled = None
    if len(message) <= errors.MAX_ERROR_CHARS:
        try:
            pickled = cloudpickle.dumps(exc)
        except BaseException:                 # noqa: B902
            pickled = None
        if pickled is not None and len(pickled) > 4 * errors.MAX_ERROR_CHARS:
            pickled = None                    # a huge payload on the exception: text only
    return {"type": type(exc).__name__, "message": errors.cap_text(message),
            "frames": frames[-200:], "text": errors.cap_text(text), "pickled": pickled}


def run(kind: str, payload, ns: dict):
    import cloudpickle
    if kind == "call":
        fn, args, kwargs = cloudpickle.loads(payload)
        return fn(*args, **kwargs)
    if kind == "exec":
        source, filename = payload
        return exec_cell(ns, source, filename)
    if kind == "push":
        ns.update(cloudpickle.loads(payload))
        return None
    if kind == "pull":
        if payload not in ns:
            raise NameError(f"rank {ns['rank']} has no variable {payload!r} "
                            "(define it in a %%ranks cell or with cluster.push)")
        return ns[payload]
    raise ValueError(f"unknown task kind {kind!r}")
