"""Training curves: `python scripts/plot.py WORKDIR [--out FILE.png] [--x FIELD]`.

Reads `WORKDIR/metrics.jsonl` (one JSON object per iteration) and draws every numeric field
against the iteration (or `--x elapsed_minutes`, the run's wall clock), grouped into panels:
losses, win rates and scores, Elo, throughput, and the rest; a closing record marked
`"final": true` is drawn as stars. Writes `WORKDIR/metrics.png` unless `--out` says otherwise.
"""

from __future__ import annotations

import argparse
import math
import pathlib
from collections.abc import Callable, Sequence

from azjax.metrics import read_metrics

# Panel title -> a test on the last part of a field name ("eval/random/win_rate" -> "win_rate").
PANELS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("Losses", lambda k: k.endswith("loss")),
    ("Win rates and scores", lambda k: k.startswith("win_rate") or k == "score"),
    ("Elo", lambda k: k.startswith("elo") or k.endswith("elo")),
    ("Throughput", lambda k: "per_s" in k or k.endswith("throughput")),
)
X_KEYS = ("iteration", "step")


def numeric_series(
    rows: list[dict], x_key: str | None = None
) -> tuple[str, list[float], dict[str, list[float]]]:
    """(x name, x values, {field: values with NaN where missing}) over every numeric field.

    The x axis is `x_key` (every row must have it), else the first of X_KEYS present."""
    if x_key is not None:
        missing = next((i for i, r in enumerate(rows) if x_key not in r), None)
        if missing is not None:
            raise ValueError(f"--x {x_key}: row {missing + 1} has no such field")
    else:
        x_key = next((k for k in X_KEYS if any(k in r for r in rows)), None)
    xs = [float(r.get(x_key, i)) if x_key else float(i) for i, r in enumerate(rows)]
    fields: list[str] = []
    for row in rows:
        for key, value in row.items():
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            if numeric and key != x_key and key not in fields:
                fields.append(key)
    series = {
        k: [
            float(r[k])
            if isinstance(r.get(k), int | float) and not isinstance(r.get(k), bool)
            else math.nan
            for r in rows
        ]
        for k in fields
    }
    return x_key or "row", xs, series


def panels(series: dict[str, list[float]]) -> list[tuple[str, list[str]]]:
    """Fields grouped into titled panels. Fields no named panel claims share a panel with the
    fields of the same prefix ("replay/...") whose peaks lie within the same two decades."""
    named: dict[str, list[str]] = {title: [] for title, _ in PANELS}
    rest: dict[tuple[str, int], list[str]] = {}
    for name, values in series.items():
        leaf = name.lower().rsplit("/", 1)[-1]
        title = next((t for t, claims in PANELS if claims(leaf)), None)
        if title is not None:
            named[title].append(name)
            continue
        prefix = name.rsplit("/", 1)[0] if "/" in name else "other"
        peak = max((abs(v) for v in values if v == v), default=0.0)
        bucket = math.floor(math.log10(peak) / 2) if peak > 0 else 0
        rest.setdefault((prefix, bucket), []).append(name)
    out = [(t, names) for t, names in named.items() if names]
    for (prefix, bucket), names in sorted(rest.items()):
        split = sum(p == prefix for p, _ in rest) > 1
        out.append((f"{prefix} (~1e{2 * bucket}+)" if split else prefix, names))
    return out


def plot(workdir: str, out: str | None = None, x: str | None = None) -> pathlib.Path:
    """Draw the curves of `workdir` into a PNG (against field `x`, default the iteration);
    returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = pathlib.Path(workdir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no metrics.jsonl in {workdir} (expected {path})")
    rows = read_metrics(path)
    finals = [r for r in rows if r.get("final") is True]  # a run's closing evaluation
    rows = [r for r in rows if r.get("final") is not True]
    if not rows:
        raise ValueError(f"{path} holds no metrics yet")
    x_key, xs, series = numeric_series(rows, x)
    groups = panels(series)
    if not groups:
        raise ValueError(f"{path} has no numeric fields to plot")
    cols = min(len(groups), 3)
    nrows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 3.6 * nrows), squeeze=False)
    pad = max((max(xs) - min(xs)) * 0.03, 0.5)
    span = (min(xs) - pad, max(xs) + pad)  # one x range for every panel
    for ax, (title, names) in zip(axes.flat, groups, strict=False):
        for name in names:  # points where the field was written, joined across gaps
            points = [(x, y) for x, y in zip(xs, series[name], strict=True) if y == y]
            px, py = zip(*points, strict=True) if points else ((), ())
            marker = "o" if len(points) < 30 else None
            line = ax.plot(px, py, marker=marker, ms=3, label=name)[0]
            done = [(r.get(x_key, xs[-1]), r[name]) for r in finals if name in r]
            if done:
                ax.plot(
                    *zip(*done, strict=True),
                    "*",
                    ms=11,
                    color=line.get_color(),
                    label=f"{name} (final)",
                )
        ax.set_xlim(*span)
        ax.set_title(title)
        ax.set_xlabel(x_key)
        ax.grid(alpha=0.3)
        if title == "Losses" and all(v > 0 for n in names for v in series[n] if v == v):
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(groups) :]:
        ax.axis("off")
    fig.suptitle(f"{pathlib.Path(workdir).resolve().name}: {len(rows)} iterations")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    target = pathlib.Path(out) if out else pathlib.Path(workdir) / "metrics.png"
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", help="a run folder holding metrics.jsonl")
    parser.add_argument("--out", help="the PNG to write (WORKDIR/metrics.png)")
    parser.add_argument(
        "--x", help="the field on the x axis, e.g. elapsed_minutes or train/step (iteration)"
    )
    args = parser.parse_args(argv)
    try:
        print(plot(args.workdir, args.out, args.x))
    except (OSError, ValueError) as err:
        parser.error(str(err))


if __name__ == "__main__":
    main()
