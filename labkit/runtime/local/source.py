"""Ranks on this machine, as a source of ranks for the Cluster (see ../source.py).

The pool keeps spares ready (forked by the zygote in ~0.1 s, else spawned), every one inside the
cluster's own network namespace where Linux allows it (netns.py: no other local user can see or
reach their gloo listeners; elsewhere the cluster says so in one line); the ranks meet in a
FileStore: a file in the cluster's private folder (0700), which no other local user can reach
(a loopback TCP store is open to every local user: procs.rendezvous_store); the backend is decided
at start (NCCL with one GPU per rank among the GPUs visible to the ranks, else gloo, saying why
when GPUs were given but too few: ../gpus.py) and each rank gets a fair share of the cores as
torch threads.
"""
import os
import sys

from labkit.i18n import tr
from labkit.runtime import gpus
from labkit.runtime.local import procs
from labkit.runtime.local.handle import dump_stacks
from labkit.runtime.local.pool import WorkerPool, shutdown
from labkit.runtime.options import decide_backend


def open_ports_warning(why: str) -> str:
    """The one line a Cluster says where its ranks cannot have a network of their own
    (netns.py): gloo's listeners are then open to every local user."""
    return tr("labkit: other users of this machine can connect to the ranks' gloo ports ({why}): "
              "they can hang your collectives or change their data. See the threat model in "
              "docs/teaching.md.", why=why)


class LocalRanks:
    """Ranks forked or spawned on this machine (`Cluster(world_size)`)."""
    local = True                   # ranks share this machine's memory: tensors travel by shm

    def __init__(self, spares: int = None):
        self.spares_wanted = spares
        self.pool = None
        self.store_path = None                     # the rendezvous file, in the pool's folder
        self.backend = "?"
        self.cvd, self.world_size = None, 0
        self.threads_per_rank = None

    def start(self, world_size: int, backend: str, env: dict, start_timeout: float) -> None:
        spares = world_size if self.spares_wanted is None else self.spares_wanted
        procs.check_capacity(world_size, spares)   # before any process starts
        choice = decide_backend(backend, world_size, env)
        self.backend = choice.backend
        if choice.note:                           # fewer GPUs given than ranks: say what and why
            print(choice.note, file=sys.stderr)
        self.cvd = (env or {}).get(gpus.VAR, os.environ.get(gpus.VAR))
        self.world_size = world_size
        self.threads_per_rank = procs.fair_threads(world_size)
        self.pool = WorkerPool(self.threads_per_rank, spares, env)
        self.store_path = procs.rendezvous_store(self.pool.stack_dir, 1)   # the first group's
        self._store_gen = 1
        if self.pool.netns is None:               # no private network here: say so, once per cluster
            print(open_ports_warning(self.pool.netns_why), file=sys.stderr)
        elif "user" in self.pool.netns.kinds:
            # Ranks in a user namespace of their own cannot open /proc/<notebook>/fd (the kernel
            # wants CAP_SYS_PTRACE in the notebook's namespace), so what the notebook sends them is
            # pickled through the socket; their results still come back through shared memory.
            self.local = False

    # -- ranks --------------------------------------------------------------------------------
    def take(self, n: int, deadline: float) -> list:
        return self.pool.take(n, deadline)

    def init_options(self, w, rank: int, gen: int) -> dict:
        """Where rank `rank` (handle `w`) meets the others for the process group `gen`."""
        return {"store_path": self._store(gen), "prefix": f"labkit/{gen}/",
                "threads": self.threads_per_rank}

    def rejoin_options(self, gen: int) -> dict:
        return {"store_path": self._store(gen)}

    def _store(self, gen: int) -> str:
        """The rendezvous file of process group `gen`: a new file for each. torch's FileStore
        appends each key as a length, then its bytes, in separate writes, and reads a file
        through to its end, looping while a read returns nothing: a rank killed half-way
        through a write (a Ctrl-C during wait_for_ranks(), a rank stopped while it joined)
        leaves a record cut short, and every later reader of that file spins forever in its
        FileStore constructor. The ranks of a new group never open a file that a killed rank
        wrote. The old file is unlinked: FileStore opens its file by name for every operation,
        so a rank that leaves the old group on Rejoin (destroy_process_group, whose store
        destructor adds a key) reads a new empty file, not the cut one."""
        if gen != self._store_gen:
            old, self.store_path = self.store_path, procs.rendezvous_store(self.pool.stack_dir, gen)
            self._store_gen = gen
            try:
                os.unlink(old)
            except OSError:
                pass
        return self.store_path

    def forget(self, w) -> None:
        self.pool.forget(w)

    def top_up(self) -> None:
        self.pool.top_up()

    def wait_for_spares(self, timeout: float) -> bool:
        return self.pool.wait_for_spares(timeout)

    def process_count(self) -> int:
        return len(self.pool.workers) if self.pool else 0

    def dump_stacks(self, ranks: list, which: list) -> dict:
        return dump_stacks(ranks, which)

    def describe(self) -> str:
        """The spares; with NCCL under a spawner's CUDA_VISIBLE_DEVICES, which given GPU each
        rank uses."""
        spares = len(self.pool.spares) if self.pool else 0
        if self.backend != "nccl" or self.cvd is None:
            return tr("{n} spares", n=spares)
        shown = gpus.rank_gpus(self.world_size, self.cvd, None)
        return tr("{n} spares; rank r on the r-th GPU of {var}={cvd} ({gpus})", n=spares, var=gpus.VAR,
                  cvd=self.cvd, gpus=", ".join(map(str, shown)))

    def close(self) -> None:
        """Every process of the pool killed, its sockets and folder (with the rendezvous file)
        freed (also at exit)."""
        if self.pool is not None:
            shutdown(self.pool)
