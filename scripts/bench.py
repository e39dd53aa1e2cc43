"""Benchmarks: `python scripts/bench.py NAME [options]` runs `scripts/bench_NAME.py`.

Each benchmark prints a readable table and writes JSON (see its `--help`).
"""

from __future__ import annotations

import importlib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    available = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    if len(sys.argv) < 2 or sys.argv[1] not in available:
        given = sys.argv[1] if len(sys.argv) > 1 else "nothing"
        sys.exit(f"usage: bench.py {{{','.join(available)}}} [options]; got {given}")
    sys.path.insert(0, str(HERE))
    importlib.import_module(f"bench_{sys.argv[1]}").main(sys.argv[2:])


if __name__ == "__main__":
    main()
