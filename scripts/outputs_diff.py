"""Compare what two runs of the same notebooks printed, cell by cell: lines equal byte for byte,
lines equal once numbers are masked (measurements, timings), lines that differ in words. Used to
show that a change leaves the English output as it was:

    .venv/bin/python scripts/english_left.py notebooks --only 00 12 --save /tmp/before   # on the old commit
    .venv/bin/python scripts/english_left.py notebooks --only 00 12 --save /tmp/after
    .venv/bin/python scripts/outputs_diff.py /tmp/before /tmp/after
"""
import re, sys, pathlib, nbformat, difflib
a_dir, b_dir = map(pathlib.Path, sys.argv[1:3])
NUM = re.compile(r"[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?")
def text(c):
    out = []
    for o in c.get("outputs", []):
        if o.output_type == "stream": out.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            d = o.get("data", {})
            for k in ("text/markdown", "text/plain"):
                if k in d and "image/png" not in d: out.append(d[k]); break
        elif o.output_type == "error": out.append(o.ename + ": " + o.evalue)
    return "".join(out).splitlines()
for pa in sorted(a_dir.glob("*.ipynb")):
    pb = b_dir / pa.name
    if not pb.exists(): continue
    A, B = nbformat.read(pa, 4), nbformat.read(pb, 4)
    same = masked = words = 0
    for ca, cb in zip(A.cells, B.cells):
        la, lb = text(ca), text(cb)
        for x, y in zip(la, lb):
            if x == y: same += 1
            elif NUM.sub("#", x) == NUM.sub("#", y): masked += 1
            else:
                words += 1; print(f"  {pa.stem} {ca.id}: - {x[:150]}\n  {' ' * len(pa.stem)} {' ' * len(ca.id)}  + {y[:150]}")
        if len(la) != len(lb):
            words += 1; print(f"  {pa.stem} {ca.id}: {len(la)} lines vs {len(lb)}")
    print(f"{pa.stem}: {same} lines identical, {masked} differ only in numbers, {words} differ in words")
