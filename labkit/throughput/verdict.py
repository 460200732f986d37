"""The notes' diagnosis order for slow training, as plain arithmetic on measured step times.

    吞吐诊断顺序 (the notes):
    1. GPU utilisation low  -> data loading or communication is the bottleneck
    2. communication share > 30 %  -> cut communication (sharding strategy, overlap)
    3. memory peak near the limit  -> checkpointing or a smaller batch
    4. DataLoader workers saturated -> more workers, streaming reads

`diagnose(ranks, peak_bytes=..., budget_bytes=...)` takes each rank's seconds per phase
(data wait, forward, backward, waiting for the other ranks, communication, optimizer) and
returns the four checks in that order; `bottleneck(findings)` names the first one that fires:
"data", "communication", "imbalance" (ranks idle waiting for a slower one), "memory" or "none". No torch, no processes: the
timers that fill `Phases` live in `labkit.throughput.steps`.

"Utilisation" here is the compute share: the part of the step spent computing (forward +
backward + optimizer), from timers around each phase. It is not what `nvidia-smi` (or
`nvidia-smi dmon`, its "sm" column) reports: NVML's utilisation is the share of time in which one
or more kernels run on the GPU, and NCCL's collectives are kernels too, so a rank spinning inside
an all-reduce while it waits for a straggler counts as 100 % busy. Only a profiler's compute share
(or timers like these) separates computing from communicating. Waiting for a slower rank would
count as communication in a profiler (the wait happens inside the collective); the timers
separate it with a barrier just before the all-reduce, so that communication means moving bytes.
"""
from dataclasses import dataclass, fields

from labkit.i18n import N_, tr

BUSY_LOW = 0.60        # compute share below this: the device idles (step 1; the notes give no number)
COMM_SHARE = 0.30      # the notes' 30 % (step 2)
MEMORY_NEAR = 0.90     # peak above 90 % of the budget is "near the limit" (step 3)
DATA_WAIT = 0.10       # waiting > 10 % of the step for the next batch: loader starved (step 4)
PHASES = ("data", "forward", "backward", "wait", "comm", "optimizer")
# the header of `breakdown_table`'s rows (Table shows it in the learner's language)
BREAKDOWN_HEADER = ["rank", *(N_("data ms"), N_("forward ms"), N_("backward ms"), N_("wait ms"), N_("comm ms"),
                              N_("optimizer ms")), N_("step ms"), N_("comm share")]


@dataclass(frozen=True)
class Phases:
    """Mean seconds per training step in each phase, on one rank."""
    data: float = 0.0        # waiting for the next batch from the DataLoader
    forward: float = 0.0
    backward: float = 0.0
    wait: float = 0.0        # waiting for the slowest rank to reach the all-reduce (imbalance)
    comm: float = 0.0        # the gradient all-reduce itself
    optimizer: float = 0.0

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or v < 0:
                raise ValueError(tr("Phases.{name} must be seconds >= 0, got {v!r}", name=f.name, v=v))

    @property
    def total(self) -> float:
        return sum(getattr(self, p) for p in PHASES)

    def share(self, phase: str) -> float:
        """Fraction of the step spent in `phase` ("compute" = forward + backward + optimizer)."""
        if phase == "compute":
            return (self.forward + self.backward + self.optimizer) / self.total if self.total else 0.0
        return getattr(self, phase) / self.total if self.total else 0.0


@dataclass(frozen=True)
class Finding:
    """One check of the diagnosis order, with the number behind it."""
    step: int            # 1..4, the notes' order
    check: str
    value: float         # the measured share or fraction
    threshold: float
    flagged: bool
    cause: str           # "data", "communication", "memory" or "" when not flagged
    detail: str

    def __str__(self) -> str:
        mark = "!!" if self.flagged else "ok"
        return f"{self.step}. [{mark}] " + tr("{check}: {detail}", check=self.check, detail=self.detail)


def _as_phases(r) -> Phases:
    return r if isinstance(r, Phases) else Phases(**r)


def diagnose(ranks, peak_bytes: float = None, budget_bytes: float = None) -> list:
    """The notes' four checks, in order, for one run.

    ranks: one `Phases` (or dict of phase -> seconds) per rank. Shares are averaged over the
    ranks, as a dashboard of every GPU's utilisation would show them (the per-rank numbers are
    in `breakdown_table`). peak_bytes / budget_bytes: the highest peak over the ranks and the
    device's memory; without both, check 3 reports "not measured" and never fires.
    """
    ranks = [_as_phases(r) for r in ranks]
    if not ranks:
        raise ValueError(tr("diagnose needs the phase times of at least one rank"))
    def mean(phase):
        return sum(r.share(phase) for r in ranks) / len(ranks)
    busy, comm, data, wait = mean("compute"), mean("comm"), mean("data"), mean("wait")
    idle_cause = max([("data", data), ("communication", comm), ("imbalance", wait)], key=lambda kv: kv[1])[0]
    words = {"data": tr("waiting for data"), "communication": tr("communication"),
             "imbalance": tr("waiting for a slower rank")}
    out = [Finding(1, tr("utilisation (compute share of the step)"), busy, BUSY_LOW, busy < BUSY_LOW,
                   idle_cause if busy < BUSY_LOW else "",
                   tr("{busy:.0%} computing (low means below {low:.0%}); the rest is mostly {cause} (data "
                      "{data:.0%}, waiting for other ranks {wait:.0%}, communication {comm:.0%})",
                      busy=busy, low=BUSY_LOW, cause=words[idle_cause], data=data, wait=wait, comm=comm)
                   if busy < BUSY_LOW else
                   tr("{busy:.0%} computing (low means below {low:.0%})", busy=busy, low=BUSY_LOW))]
    out.append(Finding(2, tr("communication share"), comm, COMM_SHARE, comm > COMM_SHARE,
                       "communication" if comm > COMM_SHARE else "",
                       tr("{comm:.0%} of the step (notes: above {line:.0%}, cut communication: "
                          "sharding strategy, overlap, bigger buckets, accumulation)",
                          comm=comm, line=COMM_SHARE)))
    if peak_bytes is None or not budget_bytes:
        out.append(Finding(3, tr("memory peak against the budget"), 0.0, MEMORY_NEAR, False, "",
                           tr("not measured (give peak_bytes and budget_bytes)")))
    else:
        frac = peak_bytes / budget_bytes
        out.append(Finding(3, tr("memory peak against the budget"), frac, MEMORY_NEAR, frac > MEMORY_NEAR,
                           "memory" if frac > MEMORY_NEAR else "",
                           tr("peak {peak:.1f} MiB of {budget:.1f} MiB = {frac:.0%} (near the limit "
                              "above {near:.0%}: checkpointing, smaller micro-batch)",
                              peak=peak_bytes / 2**20, budget=budget_bytes / 2**20, frac=frac,
                              near=MEMORY_NEAR)))
    out.append(Finding(4, tr("data loader keeps up"), data, DATA_WAIT, data > DATA_WAIT,
                       "data" if data > DATA_WAIT else "",
                       tr("waiting for the next batch {data:.0%} of the step (starved above "
                          "{line:.0%}: the workers are saturated, add workers or prefetch)",
                          data=data, line=DATA_WAIT)))
    return out


CAUSES = {c: c for c in (N_("data"), N_("communication"), N_("imbalance"), N_("memory"), N_("none"))}


def bottleneck(findings) -> str:
    """The first flagged check's cause in the notes' order ("data", "communication",
    "imbalance", "memory"), or "none" when nothing fires."""
    for f in sorted(findings, key=lambda f: f.step):
        if f.flagged:
            return f.cause
    return "none"


def report(findings, title: str = "") -> str:
    """The verdict list as text, the bottleneck last."""
    lines = ([title] if title else []) + [str(f) for f in findings]
    return "\n".join(lines + [tr("bottleneck: {cause}", cause=tr(CAUSES[bottleneck(findings)]))])


def breakdown_table(ranks) -> list:
    """Rows [rank, ms per phase..., total ms, comm share] for a table (header: BREAKDOWN_HEADER)."""
    rows = []
    for i, r in enumerate(_as_phases(r) for r in ranks):
        rows.append([i] + [round(1e3 * getattr(r, p), 1) for p in PHASES] +
                    [round(1e3 * r.total, 1), f"{r.share('comm'):.0%}"])
    return rows
