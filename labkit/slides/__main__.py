"""python -m labkit.slides build [--execute] [--reuse] [--only 00 --only 03] [--lang zh] slides build/slides"""
import argparse
import pathlib
import sys

from labkit.course.decks import build


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.slides")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write one self-contained reveal.js HTML file per deck")
    b.add_argument("--execute", action="store_true", help="run every cell first, in a fresh kernel (starts ranks)")
    b.add_argument("--reuse", action="store_true", help="skip decks whose earlier build is up to date")
    b.add_argument("--only", action="append", help="build only decks whose name starts with this (repeatable)")
    b.add_argument("--timeout", type=int, default=180, help="seconds a cell may run (default 180)")
    b.add_argument("--lang", default="en", choices=("en", "zh"),
                   help="build the decks in this language (default en; a deck not translated yet "
                        "stays English, with a line on stderr)")
    b.add_argument("src", type=pathlib.Path)
    b.add_argument("dst", type=pathlib.Path)
    args = p.parse_args(argv)
    failed = 0
    for built in build(args.src, args.dst, args.execute, args.timeout, args.reuse, args.only, args.lang):
        ran = f", ran in {built.seconds:.0f} s" if built.executed else ""
        print(f"wrote {built.html} ({built.html.stat().st_size / 1e6:.1f} MB{ran})")
        for error in built.errors:
            print(f"  error: {error}")
        failed += bool(built.errors)
    if failed:
        print(f"{failed} deck(s) had errors outside cells tagged raises-exception")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
