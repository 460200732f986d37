"""Every configuration on the cluster, side by side with the formula (layer 4, in the notebook).

    results = compare.measure(cluster, configs)         # one Result per config
    compare.table(results)                               # peak, time, ratios to the baseline
    compare.priority(results)                            # the notes' order against the measured one
    compare.conclusion(results)                          # that comparison as a sentence
    compare.table(results, columns=("tricks", "peak", "activations"))   # fewer columns (a slide)
    compare.priority(results, english=True, columns=("rank", "notes", "saved", "order"))
"""
import functools
from dataclasses import dataclass

from labkit.i18n import N_, lang, tr, tr_join
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
    def times(self) -> list:
        """Seconds of each timed step on the slowest rank (empty when nothing was timed)."""
        return list(self.rows[0].get("slowest_s") or [])

    @property
    def seconds(self) -> float:
        """The median step time on the slowest rank."""
        return spread(self.times)[0]

    @property
    def spread(self) -> tuple:
        """(median, fastest, slowest) step seconds on the slowest rank."""
        return spread(self.times)

    @property
    def stored(self) -> int:
        return max(r["stored"] for r in self.rows)

    def formula(self, shape: Shape, world_size: int):
        r = self.rows[0]
        return predict(self.config, r["n_params"], shape, r["sizes"], world_size=world_size)


def measure(cluster, configs, shape: Shape = Shape(), timed: int = 2, live: bool = False,
            timeout: float = None, known=(), track: bool = True) -> list:
    """Run each config on every rank of `cluster` (one run for all); `timed` steps of each are
    timed after the tracked one; `live` draws the scatter as each configuration finishes.
    `known`: Results measured before on the same shape; a config among them is only timed and
    keeps their memory (peak, stored activations), which repeats to the byte from run to run.
    `track`: False to skip the memory tracker for every config (held bytes only, no peak).
    `timeout`: seconds for the whole run (the cluster's default otherwise)."""
    from labkit.tricks.runs import run_many
    configs = list(configs)
    known = {r.config: r for r in known}
    track = [track and c not in known for c in configs]
    if live:
        from labkit.tricks.plots import LiveScatter
        with LiveScatter(cluster, total=len(configs), known={c.code: r.device for c, r in known.items()}):
            per_rank = cluster.run(run_many, configs, shape, timed, track, timeout=timeout)
    else:
        per_rank = cluster.run(run_many, configs, shape, timed, track, timeout=timeout)
    out = []
    for i, c in enumerate(configs):
        rows = [per_rank[r][i] for r in range(len(per_rank))]
        if c in known:
            rows = [{**row, "peak": k["peak"], "stored": k["stored"]} for row, k in zip(rows, known[c].rows)]
        out.append(Result(c, rows))
    return out


def spread(seconds: list) -> tuple:
    """(median, fastest, slowest) of some step times; zeros for none."""
    from labkit.tricks.runs import spread as _spread
    return _spread(seconds)


def _mb(v: float) -> str:
    return f"{v / 1e6:,.2f}"


# table()'s columns by key; a ratio column shown without its value column is named for it
COLUMNS = {"code": N_("code"), "tricks": N_("tricks"), "peak": N_("peak per rank on the device (MB)"),
           "peak_ratio": N_("vs baseline"), "activations": N_("stored activations: measured / formula (MB)"),
           "step": N_("step (ms): median (fastest-slowest), slowest rank"), "step_ratio": N_("vs baseline")}
ALONE = {"peak_ratio": ("peak", N_("peak vs baseline")), "step_ratio": ("step", N_("step vs baseline"))}


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
    the step time on the slowest rank (median, and fastest to slowest of the timed steps), each
    as a ratio to the first result (the baseline). Without timed steps the time columns are left
    out. `columns`: some of COLUMNS' keys, in the order to show (a slide shows fewer: e.g.
    ("tricks", "peak", "activations"))."""
    base = results[0]
    rows = []
    for res in results:
        f = res.formula(shape, world_size)
        act = f"{_mb(res.stored)} / {_mb(f.activations)}"
        mid, lo, hi = res.spread
        step = "-" if not res.times else (f"{1e3 * mid:.0f}" if len(res.times) == 1 else
                                          f"{1e3 * mid:.0f} ({1e3 * lo:.0f}-{1e3 * hi:.0f})")
        ratio = f"{mid / base.seconds:.2f}x" if res.times and base.times else "-"
        rows.append([res.code, res.config.describe(local=True), _mb(res.device), f"{res.device / base.device:.2f}x",
                     act, step, ratio])
    if columns is None and not any(r.times for r in results):
        columns = ("code", "tricks", "peak", "peak_ratio", "activations")
    header, rows, align = _pick(COLUMNS, list(COLUMNS.values()), rows, "llrrrrr", columns)
    return Table(header, rows, align=align,
                 title=title or tr("TinyGPT, {n} ranks, batch {batch} x {seq} per rank", n=world_size,
                                   batch=shape.batch, seq=shape.seq))


def single_savings(results: list) -> dict:
    """{trick: (bytes saved per rank, median time ratio or None untimed)} for the configs with
    exactly one trick."""
    base = next(r for r in results if r.code == "-")
    out = {}
    for r in results:
        if r.config.n_tricks == 1:
            out[r.code] = (base.device - r.device, r.seconds / base.seconds if r.times and base.times else None)
    return out


def measured_order(results: list) -> list:
    """The single tricks' codes, most memory saved per rank first (memory is exact: the order
    repeats from run to run; a tie keeps the order of `results`)."""
    saved = single_savings(results)
    return sorted(saved, key=lambda c: -saved[c][0])


NOTES_CODES = {"mixed": "M", "checkpointing": "C", "zero": "Z", "accumulate": "A", "adam8bit": "8"}


def conclusion(results: list) -> str:
    """The measured order of the single tricks by memory saved, against the notes' order of the
    same tricks, as a sentence computed from `results`."""
    saved = single_savings(results)
    order = measured_order(results)
    notes = [NOTES_CODES[name] for name, _ in NOTES_PRIORITY if NOTES_CODES[name] in saved]
    word = lambda c: tr(WORDS[c])                                       # noqa: E731
    listed = tr_join(tr("{i}. {trick} ({mb:,.2f} MB)", i=i, trick=word(c), mb=saved[c][0] / 1e6)
                           for i, c in enumerate(order, 1))
    if order == notes:
        return tr("Measured on this model, most memory saved per rank first: {listed}. That is the notes' order.",
                  listed=listed)
    same = [word(c) for c, d in zip(order, notes) if c == d]
    numbers = dict(listed=listed, n=len(notes), order=tr_join(word(c) for c in notes))
    if not same:
        return tr("Measured on this model, most memory saved per rank first: {listed}. The notes' order of these {n} "
                  "is: {order}; no trick keeps its place.", **numbers)
    if len(same) == 1:
        return tr("Measured on this model, most memory saved per rank first: {listed}. The notes' order of these {n} "
                  "is: {order}; {tricks} keeps its place.", tricks=same[0], **numbers)
    tricks = functools.reduce(lambda a, b: tr("{a} and {b}", a=a, b=b), same)
    return tr("Measured on this model, most memory saved per rank first: {listed}. The notes' order of these {n} "
              "is: {order}; {tricks} keep their place.", tricks=tricks, **numbers)


PRIORITY_COLUMNS = {"rank": N_("notes' rank"), "notes": N_("the notes"), "measured_as": N_("measured as"),
                    "saved": N_("saved per rank"), "order": N_("measured rank by memory saved")}


def priority(results: list, english: bool = False, columns=None, title: str = None) -> Table:
    """The notes' order (1-5) next to the measured order of the single tricks by memory saved.
    `english`: the notes' words in English (NOTES_PRIORITY_EN) instead of their Chinese, unless the
    learner reads Chinese (labkit.i18n.lang);
    `columns`: some of PRIORITY_COLUMNS' keys, in the order to show; `title`: "" for none
    (a slide whose heading says it)."""
    saved = single_savings(results)
    order = measured_order(results)
    key = NOTES_CODES
    rows = []
    english = english and lang() != "zh"
    for i, (name, words) in enumerate(NOTES_PRIORITY_EN if english else NOTES_PRIORITY, 1):
        c = key[name]
        if c not in saved:
            rows.append([str(i), words, "-", tr("not measured here"), ""])
            continue
        mb, ratio = saved[c]
        rows.append([str(i), words, tr(WORDS[c]), f"{mb / 1e6:,.2f} MB", _place(order, c, ratio)])
    for c in order:
        if c not in key.values():
            rows.append(["-", tr("(not in the list)"), tr(WORDS[c]), f"{saved[c][0] / 1e6:,.2f} MB",
                         _place(order, c, saved[c][1])])
    header, rows, align = _pick(PRIORITY_COLUMNS, list(PRIORITY_COLUMNS.values()), rows, "llllr", columns)
    return Table(header, rows, align=align,
                 title=tr("the notes' priority list against the measurements") if title is None else title)


def _place(order: list, c: str, ratio) -> str:
    """"2 of 5, step 1.31x": a trick's place by memory saved (and its step time ratio)."""
    k, n = order.index(c) + 1, len(order)
    return tr("{k} of {n}", k=k, n=n) if ratio is None else tr("{k} of {n}, step {ratio:.2f}x", k=k, n=n, ratio=ratio)
