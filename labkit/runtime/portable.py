"""Which Linux-only pieces the runtime uses here, and one switch that turns them all off.

Each piece has a fallback chosen by what the system offers, so a Mac (gloo on CPU) runs the
course; ``LABKIT_PORTABLE=1`` in the environment makes Linux take every fallback at once, which
is how the fallbacks are tested (CI runs the cluster tests a second time with it).

piece             used on Linux for                           fallback (macOS, LABKIT_PORTABLE=1)
memfd + /proc     tensors through anonymous shared memory     pickled through the control
                  (shm.py)                                    socket
/proc/<pid>/stat  a rank's state: stopped? (stacks.py)        ``ps -o stat= -p <pid>``
prctl             PR_SET_PDEATHSIG: a rank dies with the      one watchdog process per notebook
                  notebook even when stopped or stuck in C    (local/watchdog.py) SIGKILLs the
                                                              ranks when the notebook is gone
pidfd, fork       the zygote forks ready workers in ~0.1 s    workers spawned as fresh
                  (local/zygote.py)                           interpreters (about 2 s each)
prctl             PR_SET_CHILD_SUBREAPER on the zygote: a     none: such a process outlives its
                  rank's descendant in a session of its own   rank; labkit says so once, when
                  (setsid) ends with the rank and the cluster its first ranks are spawned
sched_getaffinity the cores this process may use              os.cpu_count()
TCP_INFO via      bytes on the wire per rank                  none: `comm.traffic.measure`
/proc/self/fd     (comm/traffic.py)                           says it cannot measure here
unshare, setns    the ranks' own network namespace: no other  none: Cluster() says in one
                  local user reaches their gloo ports         line that other local users
                  (local/netns.py)                            can reach the ranks' gloo ports
pidfd, /proc,     the node agent of Cluster.remote (ranks     none: the node side of
SO_PEERCRED,      under torchrun on other machines)           Cluster.remote needs Linux (the
abstract sockets                                              notebook's side does not)

Pure: reads the environment and what `os`/`socket` offer; no torch, no processes.
"""
import os
import socket
import sys

PORTABLE = os.environ.get("LABKIT_PORTABLE", "0") == "1"
LINUX = sys.platform.startswith("linux") and not PORTABLE

PROC = LINUX and os.path.isdir("/proc/self/fd")
MEMFD = PROC and hasattr(os, "memfd_create")
PRCTL = LINUX
PIDFD = LINUX and hasattr(os, "pidfd_open")
FORK_ZYGOTE = PIDFD and PRCTL and hasattr(os, "fork") and hasattr(socket, "send_fds")
AFFINITY = LINUX and hasattr(os, "sched_getaffinity")
TCP_COUNTERS = PROC and hasattr(socket, "TCP_INFO")
NODE_AGENT = PIDFD and PROC and hasattr(socket, "SO_PEERCRED")
NETNS = LINUX and os.path.exists("/proc/self/ns/net")


def pieces() -> dict:
    """{piece: used here?} for the table above."""
    return {"memfd": MEMFD, "/proc": PROC, "prctl": PRCTL, "pidfd": PIDFD,
            "zygote (fork)": FORK_ZYGOTE, "sched_getaffinity": AFFINITY,
            "TCP counters": TCP_COUNTERS, "node agent": NODE_AGENT, "network namespace": NETNS}


def why_not(piece: str) -> str:
    """Why a Linux-only piece is off here, in words for an error message."""
    if PORTABLE:
        return f"{piece} is off: LABKIT_PORTABLE=1 is set (every Linux-only piece is off)"
    return f"{piece} is Linux-only and this system is {sys.platform}"
