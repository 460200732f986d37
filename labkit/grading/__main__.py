"""python -m labkit.grading init COURSE_DIR [--notebooks DIR] [--course-id ID] [--lang en --lang zh]"""
import argparse
import sys

from labkit.grading import init


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.grading")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init", help="write an nbgrader course: nbgrader_config.py and source/")
    i.add_argument("course_dir")
    i.add_argument("--notebooks", help="the course's notebooks (default: the checkout's notebooks/)")
    i.add_argument("--course-id", default="labkit")
    i.add_argument("--lang", action="append", choices=["en", "zh"],
                   help="the languages (repeatable; default both)")
    args = p.parse_args(argv)
    made = init(args.course_dir, args.notebooks, args.course_id, tuple(args.lang or ("en", "zh")))
    print(f"wrote {len(made)} assignments to {args.course_dir}/source: {' '.join(made)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
