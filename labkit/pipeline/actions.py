"""What a pipeline schedule is made of (layer 1: pure, no torch, no processes): an `Action`
(F, B, I, W or a SEND/RECV step, of one micro-batch and chunk), a `Schedule` (each rank's list
of actions) and the placement of virtual stages on ranks. schedules.py and schedules_v.py build
schedules from these.
"""
from dataclasses import dataclass, field

from labkit.i18n import N_, tr

COMPUTE = ("F", "B", "I", "W")
COMMS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
NAMES = {"F": "forward", "B": "backward", "I": N_("input-gradient backward"), "W": N_("weight-gradient backward"),
         "SEND_F": N_("send of activations"), "RECV_F": N_("receive of activations"),
         "SEND_B": N_("send of gradients"), "RECV_B": N_("receive of gradients")}


LAYOUTS = ("loop", "v", "dual")


def vstage_of(stages: int, rank: int, chunk: int, layout: str = "loop") -> int:
    """The model part a rank runs as one of its chunks. "loop" (Megatron's interleaving): chunk c
    of rank r is part c*p + r, the data loops round the ranks v times. "v" (ZB-V, DualPipeV): chunk 0
    of rank r is part r, chunk 1 is part 2p-1-r, so the data goes down the ranks and back up, and
    rank 0 holds both the first and the last part. "dual" (DualPipe): p stages, each on two ranks;
    chunk 0 carries the micro-batches fed at rank 0 (stage r on rank r), chunk 1 those fed at
    rank p-1 (stage p-1-r on rank r): the number is the stage along that chunk's path."""
    if layout == "v":
        return rank if chunk == 0 else 2 * stages - 1 - rank
    if layout == "dual":
        return rank if chunk == 0 else stages - 1 - rank
    return chunk * stages + rank


@dataclass(frozen=True, order=True)
class Action:
    kind: str          # one of COMPUTE or COMMS
    mb: int            # micro-batch index, 0..m-1
    chunk: int = 0     # model chunk on this rank, 0..v-1 (interleaved schedules)

    def __repr__(self) -> str:
        return f"{self.kind}{self.mb}" + (f"c{self.chunk}" if self.chunk else "")

    __str__ = __repr__

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE

    def describe(self) -> str:
        what = tr(NAMES[self.kind]) if self.kind in NAMES else self.kind
        if self.chunk:
            return tr("{a!r} ({what} of micro-batch {mb}, chunk {chunk})", a=self, what=what,
                      mb=self.mb, chunk=self.chunk)
        return tr("{a!r} ({what} of micro-batch {mb})", a=self, what=what, mb=self.mb)


def F(mb: int, chunk: int = 0) -> Action:
    return Action("F", mb, chunk)


def B(mb: int, chunk: int = 0) -> Action:
    return Action("B", mb, chunk)


def I(mb: int, chunk: int = 0) -> Action:    # noqa: E741,E743 - the zero-bubble paper's letter
    return Action("I", mb, chunk)


def W(mb: int, chunk: int = 0) -> Action:
    return Action("W", mb, chunk)


@dataclass
class Schedule:
    """Per-stage ordered action lists. `actions[r]` is what rank r does, in order."""
    name: str
    stages: int
    microbatches: int
    chunks: int = 1
    actions: list = field(default_factory=list)
    layout: str = "loop"     # "loop": chunk c of rank r is part c*p + r; "v": parts r and 2p-1-r;
    #                          "dual": stages r and p-1-r, one per direction (vstage_of)

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.layout != "loop" and self.chunks != 2:
            raise ValueError(f"the {self.layout} layout puts exactly 2 chunks on each rank, got chunks={self.chunks}")

    @property
    def virtual_stages(self) -> int:
        """Model parts along one micro-batch's path (p for "dual": each direction runs all p stages)."""
        return self.stages if self.layout == "dual" else self.stages * self.chunks

    def vstage(self, rank: int, chunk: int) -> int:
        """The model part (0..p*v-1) that rank `rank` runs as its chunk `chunk`."""
        return vstage_of(self.stages, rank, chunk, self.layout)

    def place(self, vstage: int, chunk: int = 0) -> tuple:
        """(rank, chunk) holding virtual stage `vstage` (on the path of `chunk`: "dual" only)."""
        p = self.stages
        if self.layout == "dual":
            return (vstage, 0) if chunk == 0 else (p - 1 - vstage, 1)
        if self.layout == "v":
            return (vstage, 0) if vstage < p else (2 * p - 1 - vstage, 1)
        return vstage % p, vstage // p

    def __repr__(self) -> str:
        rows = "\n".join(f"  stage {r}: " + " ".join(map(repr, a)) for r, a in enumerate(self.actions))
        return (f"Schedule({self.name!r}, stages={self.stages}, microbatches={self.microbatches}"
                f"{', chunks=%d' % self.chunks if self.chunks > 1 else ''})\n{rows}")


def _args(p, m, v=1):
    for name, value in (("stages", p), ("microbatches", m), ("chunks", v)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
