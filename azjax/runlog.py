"""The run log: `metrics.jsonl` and TensorBoard event files, and the records' one-line forms.

One record per iteration (`iteration`, `train/*`, `selfplay/*`, `replay/*`, `eval/*`, `gate/*`,
timings) and a `final` record after the final evaluation; `read_metrics` reads them.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import jax
from tensorboardX import SummaryWriter

from azjax import parallel

FLUSH_SECONDS = 5


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


class RunLog:
    """metrics.jsonl plus TensorBoard event files; only process 0 writes."""

    def __init__(
        self, workdir: pathlib.Path, resume_iteration: int, saved: Sequence[dict] = ()
    ) -> None:
        """Resumes the log at `resume_iteration`: newer records go, and those `saved` with its
        checkpoint fill in any that metrics.jsonl lost."""
        self.enabled = jax.process_index() == 0
        self.path = workdir / "metrics.jsonl"
        self.writer = None
        self.minutes_before = 0.0  # wall-clock minutes of the run before this resume
        if not self.enabled:
            return
        if self.path.exists() or saved:
            kept = merged_records(self.path, resume_iteration, saved)
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
            self.minutes_before = max((r.get("elapsed_minutes", 0.0) for r in kept), default=0.0)
        # TensorBoard hides the older files' steps from the purge step on; the suffix keeps a
        # resume within the same second from overwriting the file before it (named by seconds).
        # The writer's thread writes each record to disk within FLUSH_SECONDS.
        self.writer = SummaryWriter(
            str(workdir / "tensorboard"),
            purge_step=resume_iteration + 1,
            flush_secs=FLUSH_SECONDS,
            filename_suffix=f".{resume_iteration}",
        )

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        for key, value in record.items():
            if key != "iteration" and isinstance(value, int | float):
                self.writer.add_scalar(key, value, record["iteration"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def merged_records(path: pathlib.Path, iteration: int, saved: Sequence[dict]) -> list[dict]:
    """The records of metrics.jsonl at `path` up to `iteration`, with the records `saved` in
    checkpoints filling in the iterations the file lost, in order."""
    logged = read_metrics(path) if path.exists() else []
    kept = [r for r in logged if r.get("iteration", 0) <= iteration]
    have = {r.get("iteration") for r in kept if not r.get("final")}
    kept += [r for r in saved if r["iteration"] <= iteration and r["iteration"] not in have]
    return sorted(kept, key=lambda r: (r.get("iteration", 0), bool(r.get("final"))))


def scalars(metrics: dict) -> dict[str, float]:
    """Device metrics as Python numbers."""
    return {k: v.tolist() for k, v in parallel.to_host(metrics).items()}


def postfix(record: dict) -> dict[str, str]:
    out = {}
    if record.get("train/trained"):
        out["loss"] = f"{record['train/loss']:.3f}"
        out["v_std"] = f"{record['train/value_std']:.2f}"
    out["pos/s"] = f"{record['positions_per_second']:.0f}"
    out["eval/s"] = _short(record["evaluations_per_second"])
    for key, value in record.items():
        if key.startswith("eval/") and key.endswith("/score"):
            out[key.split("/")[1]] = f"{value:.0%}"
    return out


def _short(value: float) -> str:
    """12345.6 -> "12.3k", 2.5e6 -> "2.5M", 812.4 -> "812"."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.0f}"


def metrics_name(spec: str) -> str:
    """An agent spec as its metrics name it: `eval/alphabeta_9/score` for `alphabeta:9`."""
    return spec.replace(":", "_").replace("/", "_")


def results(record: dict, specs: Sequence[str]) -> list[str]:
    """`vs SPEC: scored S% (wW dD lL)` for each opponent spec with results in `record`. A draw
    scores half a win, so all draws against perfect play read 50%, not 0% won."""
    out = []
    for spec in specs:
        name = metrics_name(spec)
        if f"eval/{name}/score" in record:
            w, d, lo = (record[f"eval/{name}/{k}"] for k in ("wins", "draws", "losses"))
            out.append(f"vs {spec}: scored {record[f'eval/{name}/score']:.0%} ({w}W {d}D {lo}L)")
    return out


def eval_line(iteration: int, record: dict, specs: Sequence[str]) -> str:
    return f"iteration {iteration}: " + ", ".join(results(record, specs))
