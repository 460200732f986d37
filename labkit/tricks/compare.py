"""Every configuration on the cluster, side by side with the formula (layer 4, in the notebook).

    results = compare.measure(cluster, configs)         # one Result per config
    compare.table(results)                               # peak, time, ratios to the baseline
    compare.priority(results)                            # the notes' order against the measured one
    compare.table(results, columns=("tricks", "peak", "activations"))   # fewer columns (a slide)
    compare.priority(results, english=True, columns=("rank", "notes", "saved", "order"))
"""
from dataclasses import dataclass

from labkit.tables import Table
from labkit.tricks.formulas import NOTES_PRIORITY, NOTES_PRIORITY_EN, WORDS, Config, Shape, predict


@dataclass
class Result:
    """One configuration, measured on every rank (the largest peak and slowest step over ranks)."""
    config: Config
    rows: list               # the per-rank dicts of labkit.tricks.runs.run

    @property
    def code(self) -> str:
        return self.config.code

    @property
    def peak(self):
        return max((r["peak"] for r in self.rows), key=lambda b: b.device)

    @property
    def device(self) -> float:
        return self.peak.device

    @property
    def seconds(self) -> float:
        return max(r["seconds"]["step"] for r in self.rows)

    @property
    def stored(self) -> int:
        return max(r["stored"] for r in self.rows)

    def formula(self, shape: Shape, world_size: int):
        r = self.rows[0]
        return predict(self.config, r["n_params"], shape, r["sizes"], world_size=world_size)


def measure(cluster, configs, shape: Shape = Shape(), timed: int = 2, live: bool = False,
            timeout: float = None) -> list:
    """Run each config on every rank of `cluster` (one run for all); `live` draws the scatter
    as each configuration finishes. `timeout`: seconds for the whole run (the cluster's default
    otherwise: about 2 s per configuration on a busy 2-core machine)."""
    from labkit.tricks.runs import run_many
    configs = list(configs)
    if live:
        from labkit.tricks.plots import LiveScatter
        with LiveScatter(cluster, total=len(configs)):
            per_rank = cluster.run(run_many, configs, shape, timed, timeout=timeout)
    else:
        per_rank = cluster.run(run_many, configs, shape, timed, timeout=timeout)
    return [Result(c, [per_rank[r][i] for r in range(len(per_rank))]) for i, c in enumerate(configs)]


def _mb(v: float) -> str:
    return f"{v / 1e6:,.2f}"


# table()'s columns by key; a ratio column shown without its value column is named for it
COLUMNS = {"code": "code", "tricks": "tricks", "peak": "peak per rank on the device (MB)",
           "peak_ratio": "vs baseline", "activations": "stored activations: measured / formula (MB)",
           "step": "step (ms)", "step_ratio": "vs baseline"}
ALONE = {"peak_ratio": ("peak", "peak vs baseline"), "step_ratio": ("step", "step vs baseline")}


def _pick(names: dict, header: list, rows: list, align: str, columns) -> tuple:
    """header, rows and align restricted to `columns` (keys of `names`, in that order)."""
    if columns is None:
        return header, rows, align
    keys = list(names)
    unknown = [c for c in columns if c not in names]
    if unknown or not columns:
        raise ValueError(f"columns must be some of {keys}, got {list(columns)}")
    at = [keys.index(c) for c in columns]
    head = [ALONE[c][1] if c in ALONE and ALONE[c][0] not in columns else header[i] for c, i in zip(columns, at)]
    return head, [[row[i] for i in at] for row in rows], "".join(align[i] for i in at)


def table(results: list, shape: Shape = Shape(), world_size: int = 2, title: str = "",
          columns=None) -> Table:
    """Peak per rank on the device (MB), stored activations measured against Korthikanti, and
    the step time, each as a ratio to the first result (the baseline). `columns`: some of
    COLUMNS' keys, in the order to show (a slide shows fewer: e.g. ("tricks", "peak", "activations"))."""
    base = results[0]
    rows = []
    for res in results:
        f = res.formula(shape, world_size)
        act = f"{_mb(res.stored)} / {_mb(f.activations)}"
        rows.append([res.code, res.config.describe(), _mb(res.device), f"{res.device / base.device:.2f}x",
                     act, f"{1e3 * res.seconds:.0f}", f"{res.seconds / base.seconds:.2f}x"])
    header, rows, align = _pick(COLUMNS, list(COLUMNS.values()), rows, "llrrrrr", columns)
    return Table(header, rows, align=align,
                 title=title or f"TinyGPT, {world_size} ranks, batch {shape.batch} x {shape.seq} per rank")


def single_savings(results: list) -> dict:
    """{trick: (bytes saved per rank, time ratio)} for the configs with exactly one trick."""
    base = next(r for r in results if r.code == "-")
    out = {}
    for r in results:
        if r.config.n_tricks == 1:
            out[r.code] = (base.device - r.device, r.seconds / base.seconds)
    return out


PRIORITY_COLUMNS = {"rank": "notes' rank", "notes": "the notes", "measured_as": "measured as",
                    "saved": "saved per rank", "order": "measured rank by memory saved"}


def priority(results: list, english: bool = False, columns=None, title: str = None) -> Table:
    """The notes' order (1-5) next to the measured order of the single tricks by memory saved.
    `english`: the notes' words in English (NOTES_PRIORITY_EN) instead of their Chinese;
    `columns`: some of PRIORITY_COLUMNS' keys, in the order to show; `title`: "" for none
    (a slide whose heading says it)."""
    saved = single_savings(results)
    order = sorted(saved, key=lambda c: -saved[c][0])
    key = {"mixed": "M", "checkpointing": "C", "zero": "Z", "accumulate": "A", "adam8bit": "8"}
    rows = []
    for i, (name, words) in enumerate(NOTES_PRIORITY_EN if english else NOTES_PRIORITY, 1):
        c = key[name]
        if c not in saved:
            rows.append([str(i), words, "-", "not measured here", ""])
            continue
        mb, ratio = saved[c]
        rows.append([str(i), words, WORDS[c], f"{mb / 1e6:,.2f} MB", f"{order.index(c) + 1} of {len(order)}, "
                     f"step {ratio:.2f}x"])
    for c in order:
        if c not in key.values():
            rows.append(["-", "(not in the list)", WORDS[c], f"{saved[c][0] / 1e6:,.2f} MB",
                         f"{order.index(c) + 1} of {len(order)}, step {saved[c][1]:.2f}x"])
    header, rows, align = _pick(PRIORITY_COLUMNS, list(PRIORITY_COLUMNS.values()), rows, "llllr", columns)
    return Table(header, rows, align=align,
                 title="the notes' priority list against the measurements" if title is None else title)
