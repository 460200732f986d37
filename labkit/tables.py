"""Tables that print as aligned text and render as tables in a notebook (pure: no imports).

    t = Table(["op", "rank", "sent/S"], [["ring", 0, 1.5]], align="lrr", title="...", notes=[...])
    print(t)          # aligned plain text (a terminal, a benchmark's output)
    t                 # as a cell's last expression: a rendered table (IPython's text/markdown)

`Table` is a `str` (its plain text), so code that prints, joins or searches a table keeps working.
Header cells, the title and the notes are shown in the learner's language where the catalog
has them (`labkit.i18n.tr`, whole strings); wide (CJK) characters count two columns in the text.
"""
import unicodedata

from labkit.i18n import tr


def _cell(v) -> str:
    return v if type(v) is str else format(v)      # a labkit.i18n.ShownName formats in the learner's language


class Table(str):
    """Rows under a header; `align` has one letter per column, 'l' or 'r' (default: numbers right).

    `title` goes above and `notes` (strings) below, in both renderings. Cells are shown as given
    (format numbers before passing them, e.g. f"{x:.4f}")."""

    def __new__(cls, header, rows, *, align: str = "", title: str = "", notes=()):
        header = [tr(h) for h in map(str, header)]
        title, notes = tr(title) if title else title, [tr(n) for n in notes]
        rows = [[_cell(v) for v in row] for row in rows]
        for i, row in enumerate(rows):
            if len(row) != len(header):
                raise ValueError(f"row {i} has {len(row)} cells, the header {len(header)}")
        if not align:
            first = rows[0] if rows else header
            align = "".join("r" if _numeric(v) else "l" for v in first)
        if len(align) != len(header) or set(align) - set("lr"):
            raise ValueError(f"align must be one 'l' or 'r' per column ({len(header)}), got {align!r}")
        obj = super().__new__(cls, _text(header, rows, align, title, notes))
        obj.header, obj.rows, obj.align, obj.title, obj.notes = header, rows, align, title, list(notes)
        return obj

    def __reduce__(self):
        return (_rebuild, (self.header, self.rows, self.align, self.title, self.notes))

    def markdown(self) -> str:
        """The table in Markdown (what a notebook renders)."""
        esc = (lambda s: s.replace("|", "\\|"))
        lines = [f"**{self.title}**", ""] if self.title else []
        lines.append("| " + " | ".join(esc(h) for h in self.header) + " |")
        lines.append("|" + "|".join(" ---: " if a == "r" else " --- " for a in self.align) + "|")
        lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in self.rows]
        for note in self.notes:
            lines += ["", note]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def _repr_pretty_(self, p, cycle) -> None:       # text/plain in IPython: the text, unquoted
        p.text(str(self))


def _rebuild(header, rows, align, title, notes):
    return Table(header, rows, align=align, title=title, notes=notes)


def _numeric(v: str) -> bool:
    try:
        float(v.replace(",", "").replace("%", "").replace("x", "").split()[0])
        return True
    except (ValueError, IndexError):
        return False


def _text(header, rows, align, title, notes) -> str:
    widths = [max(_width(c) for c in col) for col in zip(header, *rows)]
    fmt = (lambda row: "  ".join(_pad(c, w, a) for c, w, a in zip(row, widths, align)).rstrip())
    lines = [title] if title else []
    lines += [fmt(header)] + [fmt(r) for r in rows] + list(notes)
    return "\n".join(lines)


def _width(text: str) -> int:
    """Columns the text takes in a terminal: wide (CJK) characters two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, align: str) -> str:
    gap = " " * (width - _width(text))
    return gap + text if align == "r" else text + gap
