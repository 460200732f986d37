"""The ``%%ranks`` cell magic: run a notebook cell on every rank, in a namespace per rank.

    %load_ext labkit
    %%ranks                      # the newest Cluster; or %%ranks -c name_of_cluster_variable
    x = torch.ones(2) * rank     # rank, world_size, device, torch, dist are predefined
    dist.all_reduce(x)
    x                            # a final expression prints per rank, like Out[] does

Each rank keeps its namespace between cells (until the cluster restarts after a hang or a
crash). `cluster.push(name=value)` and `cluster.pull("name")` move values in and out.
"""
import argparse
import shlex

from labkit.i18n.messages import tr
from labkit.runtime import cluster as _cluster
from labkit.runtime.errors import install_traceback_filter  # noqa: F401 - kept importable from here


def _seconds(text: str) -> float:
    from labkit.runtime.options import seconds
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(text) from None
    return seconds(value, "%%ranks -t")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%ranks", add_help=False)
    p.add_argument("-c", "--cluster", default=None, help="name of the Cluster variable")
    p.add_argument("-t", "--timeout", type=_seconds, default=None, help="seconds before RankTimeout")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print a final expression")
    return p


def ranks(line: str, cell: str, shell=None):
    __tracebackhide__ = True
    try:
        args = _parser().parse_args(shlex.split(line))
    except SystemExit:
        raise ValueError(tr("%%ranks options: -c CLUSTER_VARIABLE, -t TIMEOUT_SECONDS (a positive "
                            "number), -q; got {line!r}", line=line)) from None
    if args.cluster:
        if shell is None or args.cluster not in shell.user_ns:
            raise NameError(f"%%ranks -c {args.cluster}: no variable {args.cluster!r} in the notebook")
        cl = shell.user_ns[args.cluster]
        if not isinstance(cl, _cluster.Cluster):
            raise TypeError(tr("%%ranks -c {name}: {name} is a {type}, not a labkit.Cluster (give "
                               "the name of a variable that holds one, e.g. -c cluster)",
                               name=args.cluster, type=type(cl).__name__))
    else:
        cl = _cluster.current()
        if cl is None:
            raise RuntimeError("%%ranks needs a running cluster: start one first with "
                               "cluster = labkit.Cluster(world_size=4)")
    # Register the cell's source under a name the notebook knows, so tracebacks and stuck
    # stacks show "Cell In[7], line 3" with the source line.
    filename = "<%%ranks cell>"
    if shell is not None:
        try:
            filename = shell.compile.cache(cell, _cell_number(shell))
        except Exception:
            pass
    values = cl.exec_cell(cell, filename, timeout=args.timeout)
    if not args.quiet:
        for r, v in enumerate(values):
            if v is not None:
                print(f"[rank {r}] {v!r}")


def _cell_number(shell) -> int:
    """The number of the cell running now (In[n]). IPython 9 counts the next cell already while
    one runs; the input history, stored before the cell runs, is right in every version."""
    hist = getattr(shell, "history_manager", None)
    if hist is not None and getattr(hist, "input_hist_raw", None):
        return len(hist.input_hist_raw) - 1
    return shell.execution_count


def load_ipython_extension(ip) -> None:
    install_traceback_filter(ip)
    def _magic(line, cell):
        __tracebackhide__ = True
        return ranks(line, cell, ip)
    ip.register_magic_function(_magic, magic_kind="cell", magic_name="ranks")
