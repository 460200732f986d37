"""python -m labkit.bench NAME [options]   (NAME: a module of labkit.bench, e.g. cluster)"""
import importlib
import pkgutil
import sys

import labkit.bench as _pkg


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = sorted(m.name for m in pkgutil.iter_modules(_pkg.__path__) if not m.name.startswith("_"))
    if not argv or argv[0] not in names:
        print(f"usage: python -m labkit.bench {{{','.join(names)}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(f"labkit.bench.{argv[0]}").main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
