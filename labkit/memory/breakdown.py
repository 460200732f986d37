"""The `Breakdown`: bytes by category, the one shape that formulas and measurements share.

A formula (`model_states`) and a measurement (`measure`, `peak`) both return a Breakdown, so
the notebook can put them side by side and subtract them. Bytes are exact integers when
measured and may be fractional when a formula divides by the world size.
"""
from dataclasses import dataclass, replace

from labkit.i18n import N_, tr

GB = 1e9            # bytes; the notes and the ZeRO paper count in decimal GB (70B x 2 B = 140 GB)
GiB = 2 ** 30       # bytes; what nvidia-smi and DeepSpeed's estimator print

# Categories in drawing order (bottom of a stacked bar first).
MODEL_STATE = ("params", "grads", "master", "momentum", "variance", "other")
CATEGORIES = MODEL_STATE + ("buffers", "activations", "temporary")
OPTIMIZER = ("master", "momentum", "variance", "other")

_WHAT = {
    "params": "parameters (the copy used in forward and backward)",
    "grads": "gradients",
    "master": "fp32 master weights (mixed precision)",
    "momentum": "first moment m (Adam) / momentum buffer (SGD)",
    "variance": "second moment v (Adam)",
    "other": "optimizer bookkeeping (step counters, 8-bit scales)",
    "buffers": "buffers (e.g. BatchNorm statistics, counters)",
    "activations": "activations saved for backward",
    "temporary": "temporaries (activation gradients, workspaces)",
}


@dataclass(frozen=True)
class Breakdown:
    """Bytes held on one rank, by category. `on_host` names the categories offloaded to CPU."""
    params: float = 0
    grads: float = 0
    master: float = 0
    momentum: float = 0
    variance: float = 0
    other: float = 0
    buffers: float = 0
    activations: float = 0
    temporary: float = 0
    on_host: tuple = ()      # category names held in host (CPU) memory, not on the device
    label: str = ""          # what this is: "formula: 7B mixed adam ZeRO-0" or "measured rank 2"

    @property
    def optimizer(self) -> float:
        """Optimizer state: master weights + moments + bookkeeping (the ZeRO paper's K Psi)."""
        return sum(getattr(self, c) for c in OPTIMIZER)

    @property
    def model_state(self) -> float:
        """Parameters + gradients + optimizer state (what ZeRO shards; no activations)."""
        return sum(getattr(self, c) for c in MODEL_STATE)

    @property
    def total(self) -> float:
        return sum(getattr(self, c) for c in CATEGORIES)

    @property
    def host(self) -> float:
        """Bytes held in CPU memory because they were offloaded."""
        return sum(getattr(self, c) for c in self.on_host)

    @property
    def device(self) -> float:
        """Bytes that must fit in the accelerator's memory."""
        return self.total - self.host

    def as_dict(self) -> dict:
        return {c: getattr(self, c) for c in CATEGORIES}

    def nonzero(self) -> dict:
        return {c: v for c, v in self.as_dict().items() if v}

    def __add__(self, other: "Breakdown") -> "Breakdown":
        return replace(self, **{c: getattr(self, c) + getattr(other, c) for c in CATEGORIES},
                       on_host=tuple(sorted(set(self.on_host) | set(other.on_host))))

    def __sub__(self, other: "Breakdown") -> "Breakdown":
        """Per-category difference (measured - formula), for 'off by how many bytes'."""
        return replace(self, **{c: getattr(self, c) - getattr(other, c) for c in CATEGORIES},
                       label=f"{self.label} - {other.label}")

    def scaled(self, factor: float) -> "Breakdown":
        return replace(self, **{c: getattr(self, c) * factor for c in CATEGORIES})

    def table(self, unit: float = GB, name: str = "GB") -> "Table":
        """One row per non-zero category with its share of the total (prints as text, renders
        as a table in a notebook)."""
        from labkit.tables import Table
        tot = self.total or 1
        rows = [[c, f"{v / unit:,.3f}", f"{100 * v / tot:.1f} %", "host" if c in self.on_host else ""]
                for c, v in self.nonzero().items()]
        rows.append(["total", f"{self.total / unit:,.3f}", "100.0 %", ""])
        notes = ([tr("on the device {device:,.3f} {name}, on the host {host:,.3f} {name}",
                     device=self.device / unit, host=self.host / unit, name=name)] if self.on_host else [])
        header = [N_("category"), name, N_("share"), N_("held on")] if self.on_host else [N_("category"), name, N_("share")]
        if not self.on_host:
            rows = [r[:3] for r in rows]
        return Table(header, rows, align="lrrl"[:len(header)], title=self.label, notes=notes)

    def __repr__(self) -> str:
        parts = " + ".join(f"{c} {fmt_bytes(v)}" for c, v in self.nonzero().items())
        head = f"Breakdown({self.label}: " if self.label else "Breakdown("
        if self.on_host:                   # the one sentence in it, in the learner's language
            return tr("{head}{parts} = {total}, {host} of it on host)", head=head, parts=parts or "0 B",
                      total=fmt_bytes(self.total), host=fmt_bytes(self.host))
        return f"{head}{parts or '0 B'} = {fmt_bytes(self.total)})"


def category_help() -> dict:
    """What each category holds, in words (for legends and tables)."""
    return dict(_WHAT)


def fmt_bytes(n: float) -> str:
    """Human-readable bytes, decimal units like the notes (1 GB = 1e9 B)."""
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{n:.0f} B"
