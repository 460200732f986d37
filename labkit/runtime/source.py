"""Where a Cluster's ranks come from: the one interface both sources implement.

    Cluster(4)                                   # local/source.LocalRanks: this machine
    Cluster.remote("0.0.0.0:29500", 2, 4)        # remote/source.RemoteRanks: torchrun elsewhere

The Cluster (cluster.py) has one `_promote` and one run loop for both: it asks its source for
`world_size` ranks (`take`, which may wait for them: a remote source waits for torchrun), tells
each how to meet the others (`init_options`), and hands the source back the ranks it has
stopped (`forget`). Each rank it gets is a handle.RankHandle; the ranks it took are one
group.RankGroup. Neither source knows the Cluster; neither is derived from the other.
`RankSource` below is the contract (a typing.Protocol: documentation and a check for type
checkers, nothing to inherit). What only one source has (a remote cluster's `commands`,
`nodes`) is read from it: `cluster.source.commands`.
"""
from typing import Protocol


class RankSource(Protocol):
    local: bool              # ranks share this machine's memory (tensors travel through shm)
    backend: str             # "gloo" / "nccl", or "?" until the ranks have said what they have
    threads_per_rank: int    # torch threads on each rank, once known

    def start(self, world_size: int, backend: str, env: dict, start_timeout: float) -> None:
        """Get ready to hand out ranks (listen, start spares, host the rendezvous store). What
        it has built is freed by close(), which the Cluster calls whatever happens."""

    def take(self, n: int, deadline: float) -> list:
        """n ready ranks, by rank, waiting for them until `deadline` if need be; `backend` and
        `threads_per_rank` are theirs from then on. Raises errors.StartError / StartTimeout,
        in words."""

    def init_options(self, w, rank: int, gen: int) -> dict:
        """How rank `rank` (handle `w`) meets the others for the `gen`-th process group: the
        store's host and port, the key prefix, its torch threads (protocol.Init)."""

    def rejoin_options(self, gen: int) -> dict:
        """What changes in `init_options` when the ranks join the `gen`-th process group
        again (protocol.Rejoin): on this machine a fresh rendezvous file; {} for torchrun's
        store."""
        return {}

    def forget(self, w) -> None:
        """The Cluster has stopped this rank for good."""

    def top_up(self) -> None:
        """Make replacements ready in the background (local spares; remote: torchrun does it)."""

    def wait_for_spares(self, timeout: float) -> bool:
        """Block until the replacements are ready."""

    def process_count(self) -> int:
        """The processes it holds now (a Cluster names them when another one starts)."""

    def dump_stacks(self, ranks: list, which: list) -> dict:
        """Where each rank in `which` is now: innermost frame first, or a sentence when it
        cannot answer (signals here, node agents elsewhere); collect asks, for hangs."""

    def describe(self) -> str:
        """A few words for the Cluster's repr (spares, nodes; '' for none)."""

    def close(self) -> None:
        """Stop every process and free every socket, store, file and folder (safe twice)."""
