"""The runtime's protocol: every message between the notebook, its ranks, the zygote and the
node agents, as one small typed record each. No other module builds or matches a message tag.

Framing: a message is a pickle of one record. On a control connection (notebook <-> rank) and
on a node agent's TLS link it is framed as multiprocessing frames it (a 4-byte big-endian
length, or -1 and an 8-byte length; `frames.Conn` writes a frame in one system call and
`frames.Inbox` reads them without blocking); the zygote's socket is SOCK_SEQPACKET, one
record per packet.

    notebook                                   rank (worker.py, or remote/rank.py under torchrun)
       <-- Hello(pid, main_ident, stack_path, resources) --   once connected (the key checked)
       --- Init(opts) / Rejoin(prefix, store) ------------>   join a (new) process group
       <-- Ready(rank) / InitFailed(report) --------------
       --- Task(task_id, kind, payload, learner, limits) ->   kind: call, exec, push, pull
       <-- Event(task_id, rank, time, data) -------------   labkit.emit, while the task runs
       <-- EventsDropped(task_id, count) ----------------   over the cap per rank per run
       <-- PgLost(task_id) ------------------------------   the process group is unusable
       <-- Result(task_id, ok, data) --------------------   data: a pickle, or a failure report
       --- Release(task_id) ------------------------------>   the notebook has loaded the result (only to a rank whose result came through shared memory)

    notebook (zygote.py)                       zygote (zygote_main.py)
       <-- ZygoteReady(pid) ------------------------------   torch imported, ready to fork
       --- (a pipe descriptor, SCM_RIGHTS) --------------->   fork one worker
       <-- Forked(pid) / Exited(pid, status) -------------   it reaps its children

    notebook (remote/link.Hub)                 node agent (remote/agent.py, agent_ranks.py)
       <-- AgentHello(info) ------------------------------   after TLS and the key's challenge
       <-- RankUp(slot, info) / RankDied(slot, status, crash)
       <-- RankBytes(slot, data) / RankOutput(slot, data)   a rank's control bytes, its output
       --- RankBytes(slot, data) ------------------------->   control bytes for a rank
       --- Kill(slots) / AskStacks(request, slots) ------->
       <-- Stacks(request, answers) / Beat() / Bye(why)
       --- Close() --------------------------------------->   the cluster is closed: leave
"""
from typing import Any, NamedTuple, Optional


# -- notebook <-> rank -----------------------------------------------------------------------
class Hello(NamedTuple):
    """A rank has connected. Local workers send their pid, main thread and stack file; a rank
    under torchrun sends `resources` ({"gpus", "threads"}) (the agent sent the rest)."""
    pid: Any = None
    main_ident: Optional[int] = None
    stack_path: Optional[str] = None
    resources: Optional[dict] = None


class Init(NamedTuple):
    opts: dict                      # rank, world_size, backend, store, prefix, threads, ...


class Rejoin(NamedTuple):
    prefix: str                     # the store prefix of the new process group
    store: Optional[dict] = None    # where the store is now (source.rejoin_options), if it moved


class Ready(NamedTuple):
    rank: int


class InitFailed(NamedTuple):
    report: dict                    # tasks.failure_report(exc)


class Task(NamedTuple):
    task_id: int
    kind: str                       # "call", "exec", "push", "pull"
    payload: Any
    learner: Any = None             # learner.snapshot(): folder, sys.path, edited modules
    event_limits: Optional[tuple] = None   # (events, bytes) per rank for this task


class Release(NamedTuple):
    task_id: int


class Event(NamedTuple):
    task_id: int
    rank: int
    time: float
    data: dict                      # field -> its value pickled on its own (collect unpickles)


class EventsDropped(NamedTuple):
    task_id: int
    count: int


class PgLost(NamedTuple):
    task_id: int


class Result(NamedTuple):
    task_id: int
    ok: bool
    data: Any                       # ok: the pickled value; else a failure report (dict)


# -- notebook <-> zygote ---------------------------------------------------------------------
class ZygoteReady(NamedTuple):
    pid: int


class Forked(NamedTuple):
    pid: int


class Exited(NamedTuple):
    pid: int
    status: int                     # as os.waitpid gives it


# -- notebook <-> node agent -----------------------------------------------------------------
class AgentHello(NamedTuple):
    info: dict                      # host, pid, torchrun (slurm_job, ... under Slurm); or
                                    # {"refused": why, "host"} from a rank whose node cannot start
                                    # (its agent's socket is squatted)


class RankUp(NamedTuple):
    slot: int
    info: dict


class RankDied(NamedTuple):
    slot: int
    status: Optional[int]
    crash: str


class RankBytes(NamedTuple):
    slot: int
    data: bytes


class RankOutput(NamedTuple):
    slot: int
    data: bytes


class Kill(NamedTuple):
    slots: list


class AskStacks(NamedTuple):
    request: int
    slots: list


class Stacks(NamedTuple):
    request: int
    answers: dict


class Beat(NamedTuple):
    pass


class Bye(NamedTuple):
    why: str


class Close(NamedTuple):
    pass
