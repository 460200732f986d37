"""labkit.tables.Table: text when printed, a Markdown table in a notebook, still a str."""
import pickle

import pytest

from labkit.tables import Table


def test_table_prints_aligned_and_renders_markdown():
    t = Table(["op", "rank", "sent / S"], [["ring", 0, "1.5000"], ["naive|root", 12, "3.0000"]],
              title="bytes", notes=["one note"])
    assert isinstance(t, str) and t.splitlines()[0] == "bytes"
    assert t.splitlines()[1:4] == ["op          rank  sent / S",
                                   "ring           0    1.5000",
                                   "naive|root    12    3.0000"]
    md = t._repr_markdown_()
    assert "| op | rank | sent / S |" in md and "| --- | ---: | ---: |" in md
    assert "naive\\|root" in md and md.endswith("one note")
    assert pickle.loads(pickle.dumps(t)).markdown() == md


def test_table_rejects_ragged_rows_and_bad_alignment():
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        Table(["a", "b"], [["x"]])
    with pytest.raises(ValueError, match="align"):
        Table(["a", "b"], [["x", "y"]], align="lc")
