"""Where a Cluster's ranks come from: the one interface both sources implement.

    Cluster(4)                                   # local/source.LocalRanks: this machine
    Cluster.remote("0.0.0.0:29500", 2, 4)        # remote/source.RemoteRanks: torchrun elsewhere

The Cluster (cluster.py) has one `_promote` and one run loop for both: it asks its source for
`world_size` ranks (`take`), tells each how to meet the others (`init_options`), and hands the
source back the ranks it has stopped (`forget`). Each rank it gets is a handle.RankHandle.
Neither source knows the Cluster; neither is derived from the other. `RankSource` below is the
contract (a typing.Protocol: documentation and a check for type checkers, nothing to inherit).
"""
from typing import Protocol


class RankSource(Protocol):
    local: bool              # ranks share this machine's memory (tensors travel through shm)
    join_at_start: bool      # the constructor waits for the first ranks (else the first run does)
    join_grace: float        # seconds past the promote deadline that joining may take
    public: tuple            # names of the source that read as the Cluster's (cluster.commands)
    backend: str             # "gloo" / "nccl", or "?" until the ranks have said what they have
    threads_per_rank: int    # torch threads on each rank, once known
    start_timeout: float     # how long the first promote waits for ranks
    restart_timeout: float   # how long a later promote (after a failure) waits

    def start(self, world_size: int, backend: str, env: dict, start_timeout: float) -> None:
        """Get ready to hand out ranks (listen, start spares, host the rendezvous store). What
        it has built is freed by close(), which the Cluster calls whatever happens."""

    def take(self, n: int, deadline: float) -> list:
        """n ready ranks, by rank; raises errors.StartError / StartTimeout, in words."""

    def backend_for(self, ranks: list) -> str:
        """The backend these ranks will use."""

    def init_options(self, w, rank: int, gen: int) -> dict:
        """How rank `rank` (handle `w`) meets the others for the `gen`-th process group: the
        store's host and port, the key prefix, its torch threads (protocol.Init)."""

    def forget(self, w) -> None:
        """The Cluster has stopped this rank for good."""

    def top_up(self) -> None:
        """Make replacements ready in the background (local spares; remote: torchrun does it)."""

    def wait_for_spares(self, timeout: float) -> bool:
        """Block until the replacements are ready."""

    def spare_count(self) -> int: ...

    def process_count(self) -> int: ...

    def dump_stacks(self, ranks: list, which: list) -> dict:
        """Where each rank in `which` is (collect.Host.dump_stacks)."""

    def describe(self) -> str:
        """A few words for the Cluster's repr ('' for none)."""

    def close(self) -> None:
        """Stop every process and free every socket, store, file and folder (safe twice)."""
