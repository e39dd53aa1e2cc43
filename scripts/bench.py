"""Benchmarks: `python scripts/bench.py NAME [options]` runs `scripts/bench_NAME.py`.

Each benchmark prints a readable table and writes JSON (see its `--help`). What they share
lives here: comma-separated list options, the machine's description and the JSON report.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import platform
import sys
from collections.abc import Callable
from typing import Any, TypeVar

HERE = pathlib.Path(__file__).resolve().parent
T = TypeVar("T")


def comma_list(parse: Callable[[str], T], expected: str) -> Callable[[str], list[T]]:
    """An argparse type: comma-separated values, each read by `parse` (a ValueError refuses
    the option, saying it `expected` ...)."""

    def read(text: str) -> list[T]:
        try:
            values = [parse(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(f"expected comma-separated {expected}, got {text!r}")
        return values

    return read


def positive(text: str) -> int:
    """A positive integer (ValueError otherwise)."""
    if int(text) < 1:
        raise ValueError(text)
    return int(text)


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A reader of one of `choices` (ValueError otherwise)."""

    def read(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return read


def device_description() -> dict[str, Any]:
    """The accelerator (or CPU) the figures come from, and the host."""
    import jax

    info = pathlib.Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    models = [x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")]
    usable = getattr(os, "sched_getaffinity", lambda _: range(os.cpu_count() or 1))(0)
    return {
        "platform": jax.devices()[0].platform,
        "device": jax.devices()[0].device_kind,
        "num_devices": jax.device_count(),
        "cpu": models[0] if models else platform.machine(),
        "cpu_count": len(usable),
        "jax_version": jax.__version__,
    }


def write_report(path: str, report: dict[str, Any]) -> None:
    """Write `report` as JSON to `path`, creating its folder."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


def main() -> None:
    available = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    if len(sys.argv) < 2 or sys.argv[1] not in available:
        given = sys.argv[1] if len(sys.argv) > 1 else "nothing"
        sys.exit(f"usage: bench.py {{{','.join(available)}}} [options]; got {given}")
    sys.path.insert(0, str(HERE))
    importlib.import_module(f"bench_{sys.argv[1]}").main(sys.argv[2:])


if __name__ == "__main__":
    main()
