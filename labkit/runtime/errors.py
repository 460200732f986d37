"""What the notebook raises when ranks fail or hang, written for the learner.

`RankError` names each failing rank with its remote traceback (the learner's own cell lines,
shown as ``Cell In[7], line 3``). `RankTimeout` says where every rank was stuck (stacks.py
reads it from a faulthandler dump, so it works inside a collective's C++ code). `StartError`
says why ranks could not start. Every failure is worded here: raised, hung, died by a signal
(`how_it_ended`), out of memory, node lost, failed to start.
"""
from dataclasses import dataclass
from typing import Optional

from labkit.i18n import N_, tr
from labkit.runtime.stacks import format_frames, is_runtime


@dataclass
class Failure:
    """One rank's failure: the exception's type and message and where it was raised."""
    rank: int
    type: str
    message: str
    traceback: str                     # formatted frames, learner's code included
    exception: Optional[BaseException] = None   # the original, when it could be sent back


class RankError(RuntimeError):
    """One or more ranks failed. ``failures`` maps rank -> Failure; ``stuck`` maps the ranks
    that were still running (and had to be stopped) to where they were."""

    def __init__(self, message: str, failures: dict = None, stuck: dict = None,
                 restarted: bool = False):
        super().__init__(message)
        self.failures = failures or {}
        self.stuck = stuck or {}
        self.restarted = restarted

    @property
    def ranks(self) -> list:
        return sorted(self.failures)

    def __str__(self) -> str:
        return self.args[0]


class RankTimeout(RankError):
    """Ranks did not finish in time; ``stuck`` maps every unfinished rank to its stack."""


class StartError(RuntimeError):
    """The cluster's ranks could not start or join the process group (at `Cluster(...)`, after
    a failure, or at restart). Everything the failed start had built is cleaned up."""


class StartTimeout(StartError, TimeoutError):
    """The ranks did not start or join within the start timeout."""


# -- how a process ended: one wording for ranks, spares and the zygote, local or remote ----------
_SIGNALS = {"SIGKILL": N_("killed (SIGKILL: out of memory, or killed from outside)"),
            "SIGSEGV": N_("crashed with a segmentation fault (SIGSEGV)"),
            "SIGABRT": N_("aborted (SIGABRT: a C++ assertion or abort())"),
            "SIGBUS": N_("crashed with a bus error (SIGBUS)"),
            "SIGFPE": N_("crashed with a floating-point exception (SIGFPE)"),
            "SIGTERM": N_("terminated (SIGTERM)")}


UNKNOWN = "unknown"   # an exit status nobody could read (torchrun reaped the rank first)


def how_it_ended(returncode, what: str = N_("the process"), *, stopped_by: str = None,
                 lost: str = None) -> str:
    """A process's end in words, the same for local and remote ranks, spares and the zygote.
    returncode: None (still running), < 0 (the signal that ended it, as subprocess reports
    it), >= 0, or UNKNOWN. stopped_by: why labkit stopped it, if it did; lost: why the node it
    ran on was lost (a remote rank), if it was."""
    if stopped_by:
        return tr("was stopped: {why}", why=stopped_by)
    if lost:
        return tr("is gone: {why}", why=lost)
    if returncode == UNKNOWN:
        return tr("exited (torchrun collected its exit status before labkit could read it)")
    if returncode is None:
        return tr("closed its connection but is still running")
    if returncode < 0:
        import signal
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return tr("died: {how}", how=tr(_SIGNALS[name]) if name in _SIGNALS else tr("killed by {signal}", signal=name))
    return tr("exited with code {code} (os._exit or a C-level exit; {what} is gone)", code=returncode, what=tr(what))


MAX_ERROR_CHARS = 20_000     # of one rank's error message, per run; the rest is counted


def safe_str(exc: BaseException) -> str:
    """str(exc), or a sentence saying it could not be made (a __str__ that raises)."""
    try:
        return str(exc)
    except BaseException as e:               # noqa: B902 - anything, KeyboardInterrupt too
        return f"<the message of this {type(exc).__name__} could not be shown: its __str__ raised {type(e).__name__}>"


def cap_text(text: str, limit: int = None) -> str:
    """At most `limit` characters: the head and the tail, with how many were left out."""
    limit = MAX_ERROR_CHARS if limit is None else limit
    if not isinstance(text, str) or len(text) <= limit:
        return text
    head, tail = limit * 4 // 5, limit // 5
    return (f"{text[:head]}\n... [{len(text) - head - tail:,} characters not shown: an error "
            f"message is cut at {limit:,} characters] ...\n{text[-tail:]}")


def failure_from_report(rank: int, report: dict) -> Failure:
    exc = None
    if report.get("pickled"):
        try:
            import cloudpickle
            exc = cloudpickle.loads(report["pickled"])
        except Exception:
            exc = None
    return Failure(rank, report["type"], cap_text(report["message"], 2 * MAX_ERROR_CHARS),  # the rank cut it
                   format_frames(report["frames"][-200:]), exc)


def _rank_list(ranks, nodes: dict = None) -> str:
    """'rank 2', 'ranks 0, 1'; with `nodes` (remote ranks: rank -> 'node 1 (host b)'), each
    group of ranks followed by where it runs."""
    ranks = sorted(ranks)
    if nodes:
        by_node = {}
        for r in ranks:
            by_node.setdefault(nodes.get(r, "?"), []).append(r)
        return " and ".join(f"{_rank_list(rs)} on {n}" for n, rs in by_node.items())
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
              "Connection refused", "NCCL communicator was aborted", "remote process exited")


def _lost_a_peer(f: Failure) -> bool:
    return any(s in f.message for s in _PEER_LOST)


def _short(message: str) -> str:
    """A collective library's error, without its boilerplate."""
    return message.split(" This is typically caused")[0].strip()


def _pg_timeout_hint(line: str, f: Failure) -> str:
    """`line`, with what a process group's timeout means when that is what `f` was."""
    text = f.message.lower()
    if "timed out" in text or "monitoredbarrier" in text or "timeout" in f.type.lower():
        return tr("{line} (the process group's timeout: a collective or recv waited for a rank that "
                  "never joined it; Cluster(pg_timeout=...) sets how long)", line=line)
    return line


def failure_message(label: str, world_size: int, failures: dict, stuck: dict,
                    restarted: bool, nodes: dict = None) -> str:
    """The text of a RankError: deaths first, failures with the same traceback grouped (the
    traceback printed once, each distinct message named), then the ranks that only failed
    because a peer died, then the stuck ones with where they were."""
    dead = {r for r, f in failures.items() if f.type == "RankDied"}
    knock_on = {r for r, f in failures.items() if dead and r not in dead and _lost_a_peer(f)}
    groups = {}
    for r, f in sorted(failures.items(), key=lambda kv: (kv[0] not in dead, kv[0])):
        if r not in knock_on:
            key = (f.type, f.message, "") if f.type == "RankDied" or not f.traceback else (f.type, None, f.traceback)
            groups.setdefault(key, []).append(r)
    n = len(failures)
    parts = [tr("{n} of {world_size} ranks failed in {label}:", n=n, world_size=world_size, label=label)
             if world_size > 1 else tr("{n} of {world_size} rank failed in {label}:", n=n, world_size=world_size, label=label)]
    for (typ, msg, tb), ranks in groups.items():
        if typ == "RankDied":
            parts.append(f"--- {_rank_list(ranks, nodes)} {msg}")
            continue
        msgs = {} if msg is not None else {r: failures[r].message for r in ranks}
        if msg is None and len(set(msgs.values())) == 1:
            msg = msgs[ranks[0]]
        if msg is not None:
            parts.append(f"--- {_rank_list(ranks, nodes)}: {typ}: {msg}" if msg else f"--- {_rank_list(ranks, nodes)}: {typ}")
        else:
            parts.append(f"--- {_rank_list(ranks, nodes)}: {typ}")
            parts += [f"rank {r}: {typ}: {m}" for r, m in msgs.items()]
        if tb:
            parts[-1] = _pg_timeout_hint(parts[-1], failures[ranks[0]])
            parts.append(tr("Traceback (on {ranks}, most recent call last):", ranks=_rank_list(ranks, nodes)) + f"\n{tb}")
    if knock_on:
        first = failures[min(knock_on)]
        parts.append("--- " + tr("{ranks} then failed because a rank they were talking to died ({error})",
                                 ranks=_rank_list(knock_on, nodes), error=f"{first.type}: {_short(first.message)}"))
    if stuck:
        parts.append("--- " + tr("{ranks} had not finished (waiting for a failed rank in a "
                                 "collective, probably) and were stopped:", ranks=_rank_list(stuck, nodes)))
        parts += [f"rank {r}: {s}" for r, s in sorted(stuck.items())]
    if restarted:
        parts.append(tr("The cluster starts fresh ranks for the next run; variables made by "
                        "%%ranks cells or cluster.push are gone."))
    return "\n".join(parts)


def timeout_message(label: str, timeout: float, stuck: dict, done: list, restarted: bool,
                    nodes: dict = None) -> str:
    parts = [tr("{label} did not finish within {timeout:g} s on {ranks} "
                "(a deadlock: a collective that not every rank called, a recv without a send, "
                "or simply more work than the timeout allows). Where each rank was:",
                label=label, timeout=timeout, ranks=_rank_list(stuck, nodes))]
    parts += [f"rank {r}: {s}" for r, s in sorted(stuck.items())]
    if done:
        parts.append(tr("{ranks}: finished.", ranks=_rank_list(done, nodes)))
    if restarted:
        parts.append(tr("The stuck ranks were stopped; the cluster starts fresh ranks for the next "
                        "run (variables made by %%ranks cells are gone). Pass timeout=... to "
                        "cluster.run for longer work."))
    return "\n".join(parts)


# -- how IPython shows them ---------------------------------------------------------------
def without_runtime_frames(tb):
    """The traceback minus labkit.runtime's frames: the learner sees their cell, then the
    ranks' own tracebacks in the message, not the wait loop that raised it."""
    import types
    frames = []
    while tb is not None:
        if not is_runtime(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    new = None
    for t in reversed(frames):
        new = types.TracebackType(new, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return new


def _show_rank_error(shell, etype, value, tb, tb_offset=None):
    shell.showtraceback((etype, value, without_runtime_frames(tb)), tb_offset=tb_offset)


def install_traceback_filter(shell=None) -> None:
    """In IPython, show RankError/RankTimeout, and the KeyboardInterrupt of a cell whose ranks
    were stopped, without labkit's internal frames (only if no other custom exception handler is
    installed). An interrupt outside labkit has no runtime frames: it shows as before."""
    if shell is None:
        try:
            from IPython import get_ipython
            shell = get_ipython()
        except ImportError:
            return
    if shell is not None and not shell.custom_exceptions:
        shell.set_custom_exc((RankError, KeyboardInterrupt), _show_rank_error)


__all__ = ["RankError", "RankTimeout", "Failure"]
