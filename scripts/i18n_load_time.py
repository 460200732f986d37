"""How long labkit takes to read its Chinese catalog: from the compiled .mo with the standard
library's gettext (labkit.i18n.mo) against parsing the .po with polib, in one process, alternating
15 times each (a ratio from the same run). Build the .mo first: python -m labkit.i18n mo

    .venv/bin/python scripts/i18n_load_time.py
"""
import statistics, sys, time
t = time.perf_counter()
from labkit.i18n import messages as M
p = M.messages_po("zh")
t = time.perf_counter(); import polib; imp = time.perf_counter() - t
a, b = [], []
for _ in range(15):
    t = time.perf_counter(); c1 = M._load_mo(p.with_suffix(".mo"), p); a.append(time.perf_counter() - t)
    t = time.perf_counter(); polib.pofile(str(p)); b.append(time.perf_counter() - t)
ma, mb = statistics.median(a), statistics.median(b)
print(f"{len(c1)} messages; .mo with gettext {ma*1e3:.1f} ms, .po with polib {mb*1e3:.1f} ms "
      f"(+ import polib {imp*1e3:.0f} ms): {mb/ma:.1f}x, {(mb+imp)/ma:.1f}x with the import")
