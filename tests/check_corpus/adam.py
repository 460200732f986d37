"""Answers to notebook 01's exercise: fn(n_params) -> bytes of each model-state category for
mixed-precision Adam on one GPU (no cluster involved)."""


def _states(p=2, g=2, master=4, m=4, v=4):
    return lambda n: {"params": p * n, "grads": g * n, "master": master * n, "momentum": m * n,
                      "variance": v * n}


def right_ints(n):
    return {"params": 2 * n, "grads": 2 * n, "master": 4 * n, "momentum": 4 * n, "variance": 4 * n}


def right_table(n):
    per = {"params": 2, "grads": 2, "master": 4, "momentum": 4, "variance": 4}
    return {k: float(v * n) for k, v in per.items()}


def stub(n):
    raise NotImplementedError("exercise: replace this line with your code")


def total_only(n):
    return 16 * n


def gigabytes(n):
    return {k: v / 1e9 for k, v in right_ints(n).items()}


def bits(n):
    return {k: 8 * v for k, v in right_ints(n).items()}


def per_parameter(n):
    return right_ints(1)


def swapped(n):
    return {**right_ints(n), "params": 4 * n, "master": 2 * n}


def renamed(n):
    return {"weights": 2 * n, "grads": 2 * n, "master": 4 * n, "adam_m": 4 * n, "adam_v": 4 * n}


def uses_range(n):
    return {k: len(range(n)) * v for k, v in right_ints(1).items()}


def strings(n):
    return {k: f"{v / 1e9:.1f} GB" for k, v in right_ints(n).items()}


RIGHT = [("ints", right_ints), ("floats from a table", right_table)]
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("fp32 weights", _states(p=4), "params is 4 bytes (4 per parameter), expected 2", "clean"),
    ("fp32 gradients", _states(g=4), "gradients are computed in fp16/bf16", "clean"),
    ("no master copy", _states(master=0), "the optimizer's master copy of the weights is fp32", "clean"),
    ("fp16 moments", _states(m=2, v=2), "Adam's first moment is kept in fp32", "clean"),
    ("gigabytes", gigabytes, "in GB (or GiB): return bytes", "clean"),
    ("bits", bits, "that counts bits", "clean"),
    ("per parameter", per_parameter, "multiply by n_params", "clean"),
    ("params and master swapped", swapped, "params and master are swapped", "clean"),
    ("one total", total_only, "returned int; return a dict", "clean"),
    ("other key names", renamed, "the dict has no params, momentum, variance", "clean"),
    ("range(n_params)", uses_range, "n_params may be a float", "clean"),
    ("strings", strings, "not a number of bytes", "clean"),
]
