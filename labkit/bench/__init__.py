"""Benchmarks, one module per subject: ``python -m labkit.bench NAME [options]``.

Each module has ``main(argv) -> int`` and prints a table; comparisons are measured in the
same run (ratios), never against a remembered absolute time.
"""
