"""What the benchmarks share: comma-separated list options, the machine's description, the
JSON report."""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
from typing import Any

import jax

import games
from azjax import parallel


def int_list(text: str) -> list[int]:
    """An argparse type: "1,1024,4096" -> [1, 1024, 4096], every value positive."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def game_list(text: str) -> list[str]:
    """An argparse type: "connect4,othello" -> registered game names."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = sorted(set(names) - set(games.names()))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown game(s) {', '.join(unknown) or text!r}; expected {', '.join(games.names())}"
        )
    return names


def device_description() -> dict[str, Any]:
    """The accelerator (or CPU) the figures come from, and the host."""
    device = jax.devices()[0]
    cpu = platform.processor() or platform.machine()
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "platform": device.platform,
        "device": device.device_kind,
        "num_devices": jax.device_count(),
        "cpu": cpu,
        "cpu_count": parallel.cpu_cores(),
        "jax_version": jax.__version__,
    }


def write_report(path: str, report: dict[str, Any]) -> None:
    """Write `report` as JSON to `path`, creating its folder."""
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
