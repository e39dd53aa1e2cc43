"""Training curves: `python scripts/plot.py WORKDIR [--out FILE.png] [--x FIELD]`.

Reads `WORKDIR/metrics.jsonl` (one JSON object per iteration) and draws its numeric fields
against the iteration (or `--x elapsed_minutes`, the run's wall clock), one panel per quantity
with its unit on the y axis: losses, strength against the evaluation opponents, throughput,
learning rate, and so on (`PANELS`); a field no panel knows gets a panel of its own. Counters
that serve as x axes and the evaluation's win/draw/loss counts (summed up by its win rate and
score) are not drawn. A closing record marked `"final": true` is drawn as stars. Writes
`WORKDIR/metrics.png` unless `--out` says otherwise.
"""

from __future__ import annotations

import argparse
import math
import pathlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

from azjax.runlog import read_metrics


class Panel(NamedTuple):
    """One quantity: a title, the unit on its y axis, the fields it claims (by full name)."""

    title: str
    unit: str
    claims: Callable[[str], bool]
    log: bool = False  # a log y axis when every value is positive
    ylim: tuple[float, float] | None = None  # a fixed y range (fractions, flags)


def _leaf(name: str) -> str:
    return name.rsplit("/", 1)[-1]


PANELS: tuple[Panel, ...] = (
    Panel(
        "Losses",
        "per position: nats (policy, KL), squared error (value)",
        lambda k: _leaf(k).endswith("loss") or _leaf(k) == "policy_kl",
        log=True,
    ),
    Panel(
        "Strength vs opponents",
        "fraction of games (score: draws count half)",
        lambda k: k.startswith("eval/") and _leaf(k) in ("win_rate", "score"),
        ylim=(-0.02, 1.02),
    ),
    Panel("Elo", "Elo (random = 0)", lambda k: _leaf(k).startswith("elo") or k.endswith("elo")),
    Panel("Throughput", "per second (positions, moves, evaluations)", lambda k: "per_s" in k),
    Panel("Time per iteration", "seconds", lambda k: k == "seconds"),
    Panel("Learning rate", "step size", lambda k: _leaf(k) == "learning_rate", log=True),
    Panel("Gradient norm", "global L2 norm (before clipping)", lambda k: _leaf(k) == "grad_norm"),
    Panel("Weights", "sum of squared weights", lambda k: k == "train/l2"),
    Panel(
        "Value head",
        "value units (values lie in -1..1); explained: fraction",
        lambda k: k.startswith("train/value_") and k != "train/value_loss",
    ),
    Panel("Policy head", "logits: spread over a batch", lambda k: k == "train/policy_std"),
    Panel(
        "Self-play games", "games finished per iteration", lambda k: _leaf(k) == "games_finished"
    ),
    Panel("Game length", "moves per game", lambda k: _leaf(k) == "mean_game_length"),
    Panel(
        "Positions",
        "positions (replay buffer, added, waiting, dropped)",
        lambda k: k.startswith("replay/") or _leaf(k).endswith("_positions"),
    ),
    Panel(
        "Search and targets",
        "fraction of positions",
        lambda k: _leaf(k).endswith("_fraction"),
        ylim=(-0.02, 1.02),
    ),
)


def _skipped(name: str) -> bool:
    """Not drawn: counters that serve as x axes, and what other panels sum up."""
    if name in ("iteration", "train/step", "elapsed_minutes"):
        return True
    return name.startswith("eval/") and _leaf(name) in ("wins", "draws", "losses")


def numeric_series(
    rows: list[dict], x_key: str | None = None
) -> tuple[str, list[float], dict[str, list[float]]]:
    """(x name, x values, {field: values with NaN where missing}) over every numeric field.

    The x axis is `x_key` (every row must have it), else the iteration where rows have one,
    else the row's number."""
    if x_key is not None:
        missing = next((i for i, r in enumerate(rows) if x_key not in r), None)
        if missing is not None:
            raise ValueError(f"--x {x_key}: row {missing + 1} has no such field")
    else:
        x_key = "iteration" if any("iteration" in r for r in rows) else None
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
    for key in series:  # no game finished: no game length (0 is what the trainer logs then)
        finished = series.get(key.replace("mean_game_length", "games_finished"))
        if _leaf(key) == "mean_game_length" and finished is not None:
            pairs = zip(series[key], finished, strict=True)
            series[key] = [math.nan if f == 0 else v for v, f in pairs]
    return x_key or "row", xs, series


def panels(series: dict[str, list[float]]) -> list[tuple[str, list[str]]]:
    """(title, fields) of each panel drawn, in PANELS order; a field no panel claims gets a
    panel of its own, titled with its name."""
    named: dict[str, list[str]] = {p.title: [] for p in PANELS}
    own: list[tuple[str, list[str]]] = []
    for name in series:
        if _skipped(name):
            continue
        panel = next((p for p in PANELS if p.claims(name)), None)
        if panel is None:
            own.append((name, [name]))
        else:
            named[panel.title].append(name)
    return [(title, names) for title, names in named.items() if names] + own


def figure(workdir: str, x: str | None = None):
    """The matplotlib figure of the curves of `workdir` (against field `x`, default the
    iteration)."""
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
    units = {p.title: p for p in PANELS}
    ends = [*xs, *(float(r[x_key]) for r in finals if x_key in r)]  # the final stars too
    pad = max((max(ends) - min(ends)) * 0.03, 0.5)
    span = (min(ends) - pad, max(ends) + pad)  # one x range for every panel
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
        panel = units.get(title)
        ax.set_xlim(*span)
        ax.set_title(title)
        ax.set_xlabel(x_key)
        ax.set_ylabel(panel.unit if panel else title)
        ax.grid(alpha=0.3)
        if panel and panel.log and all(v > 0 for n in names for v in series[n] if v == v):
            ax.set_yscale("log")
        if panel and panel.ylim:
            ax.set_ylim(*panel.ylim)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(groups) :]:
        ax.axis("off")
    fig.suptitle(f"{pathlib.Path(workdir).resolve().name}: {len(rows)} iterations")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def plot(workdir: str, out: str | None = None, x: str | None = None) -> pathlib.Path:
    """Draw the curves of `workdir` into a PNG (against field `x`, default the iteration);
    returns its path."""
    import matplotlib.pyplot as plt

    fig = figure(workdir, x)
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
