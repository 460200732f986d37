"""Checking what a Cluster is asked for, before any process starts."""
import math
from labkit.i18n import N_


def check_world_size(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number of ranks >= 1, got {world_size!r}")
    return world_size


def decide_backend(backend: str, world_size: int, env: dict = None):
    """The backend of local ranks (`gpus.Choice`: the backend and a line for the learner), from
    the GPUs the ranks will see: the notebook's own (``torch.cuda.device_count()`` honours the
    ``CUDA_VISIBLE_DEVICES`` a spawner set), or those named by ``env={"CUDA_VISIBLE_DEVICES": ...}``."""
    import os
    from labkit.runtime import gpus
    gpus.check_backend(backend)
    import torch
    mine = os.environ.get(gpus.VAR)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cvd = (env or {}).get(gpus.VAR, mine)
    if torch.version.cuda is None:                 # a CPU build of torch: no GPU whatever is set
        visible = 0
    elif env and gpus.VAR in env:                  # the ranks get their own list
        visible = len(gpus.visible_devices(cvd, count if mine is None else None))
    else:
        visible = count
    return gpus.choose_backend(backend, world_size, visible, cvd)


def seconds(value, name: str, none_ok: bool = True):
    """A positive, finite number of seconds (or None where allowed), else a clear ValueError."""
    if value is None and none_ok:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        allowed = "a positive number of seconds" + (" or None" if none_ok else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def count(value, name: str, minimum: int = 0, none_ok: bool = False, what: str = "a whole number",
          none_means: str = "no limit"):
    """A whole number >= `minimum` (or None where allowed), else a ValueError naming `name`."""
    from labkit.i18n.messages import tr
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = tr("{what} >= {minimum}", what=tr(what), minimum=minimum)
        if none_ok:
            allowed = tr("{allowed} or None ({means})", allowed=allowed, means=tr(none_means))
        raise ValueError(tr("{name} must be {allowed}, got {value!r}", name=name, allowed=allowed,
                            value=value))
    return value


def check_env(env) -> dict:
    """A dict of names to strings that the OS accepts as an environment (no '=' in a name, no
    NUL anywhere, no empty name), checked before anything starts."""
    from labkit.i18n.messages import tr
    example = "env={'TORCH_DISTRIBUTED_DEBUG': 'DETAIL'}"
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise TypeError(tr("env= must be a dict of names to strings, like {example}; got {value!r}",
                           example=example, value=env))
    env = dict(env)
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(tr("env= maps names to strings, like {example}; got {key!r}: {value!r}",
                               example=example, key=k, value=v))
        if not k or "=" in k or "\0" in k:
            raise ValueError(tr("env= has a name the system refuses: {key!r} (a name must not be "
                                "empty or contain '=' or a NUL character), like {example}",
                                key=k, example=example))
        if "\0" in v:
            raise ValueError(tr("env= has a value the system refuses: {key}={value!r} (a value "
                                "must not contain a NUL character)", key=k, value=v))
    return env


class Count:
    """An attribute of whole numbers checked whenever it is set (`count`). Only setting goes
    through here: the value is kept in the instance under the same name, so reading it is a
    plain attribute read (a descriptor without __get__ leaves reads to the instance)."""

    def __init__(self, minimum: int = 0, none_ok: bool = False, what: str = "a whole number"):
        self.minimum, self.none_ok, self.what = minimum, none_ok, what

    def __set_name__(self, owner, name):
        self.name = name

    def __set__(self, obj, value):
        obj.__dict__[self.name] = count(value, self.name, self.minimum, self.none_ok, self.what)


def check_cluster(world_size, backend, timeout, spares, start_timeout, env, pg_timeout) -> tuple:
    """`Cluster`'s arguments, checked before anything starts: (world_size, timeout,
    start_timeout, pg_timeout, env), pg_timeout's default filled in."""
    from labkit.runtime.gpus import check_backend
    world_size = check_world_size(world_size)
    timeout = seconds(timeout, "timeout", none_ok=False)
    start_timeout = seconds(start_timeout, "start_timeout", none_ok=False)
    pg_timeout = seconds(pg_timeout, "pg_timeout") or max(600.0, 2 * timeout)
    env = check_env(env)
    count(spares, "spares", none_ok=True, what=N_("a whole number of standby workers"),
          none_means="as many as world_size")
    check_backend(backend)
    return world_size, timeout, start_timeout, pg_timeout, env


def check_remote(*, listen, nnodes, nproc_per_node, advertise, rdzv_endpoint, join_file, tls,
                 max_restarts, heartbeat_timeout, start_timeout, restart_timeout, rest=()) -> None:
    """`Cluster.remote`'s own arguments, checked before it listens or writes anything; `rest`:
    the names it passes on to `Cluster`."""
    from labkit.i18n.messages import tr
    if "source" in rest or "world_size" in rest:
        raise TypeError(tr("Cluster.remote takes its world size from nnodes x nproc_per_node "
                           "and its ranks from torchrun: no world_size= or source="))
    if not isinstance(listen, str):
        raise ValueError(tr("listen= takes 'HOST:PORT' (e.g. '0.0.0.0:29500'), got {value!r}",
                            value=listen))
    count(nnodes, "nnodes", 1, what=N_("a whole number of machines"))
    count(nproc_per_node, "nproc_per_node", 1, what=N_("a whole number of ranks per machine"))
    count(max_restarts, "max_restarts", 0, what=N_("a whole number of restarts"))
    for name, value in (("advertise", advertise), ("rdzv_endpoint", rdzv_endpoint),
                        ("join_file", join_file)):
        if value is not None and not isinstance(value, str):
            raise ValueError(tr("{name} must be a string or None, got {value!r}", name=name,
                                value=value))
    if not isinstance(tls, bool):
        raise ValueError(tr("tls must be True or False, got {value!r}", value=tls))
    for name, value in (("heartbeat_timeout", heartbeat_timeout), ("start_timeout", start_timeout),
                        ("restart_timeout", restart_timeout)):
        seconds(value, name, none_ok=False)
