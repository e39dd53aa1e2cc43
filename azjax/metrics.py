"""Reading a run's `metrics.jsonl` (one JSON object per iteration, written by the trainer)."""

from __future__ import annotations

import json
import pathlib


def read_metrics(path: str | pathlib.Path) -> list[dict]:
    """The records of a metrics.jsonl file. A last line cut short (a run killed while writing
    it) is dropped; any other bad line is an error naming it."""
    path = pathlib.Path(path)
    lines = path.read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number} is not JSON: {err}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows
