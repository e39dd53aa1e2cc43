"""Learning speed: strength per minute of training, measured by referees that are not the net.

    python scripts/bench.py learning --config configs/connect4.yaml --minutes 60 --every 5
    python scripts/bench.py learning --compare configs/a.yaml configs/b.yaml --seeds 0,1

Each config trains from scratch (same seeds, same budget) in this process, one after another,
on as many CPU devices as `azjax-train` would use (one per core, as many as divide every compared
config's batch sizes; `--cpu-devices`), so its minutes are `azjax-train`'s.
The budget is training wall time: self-play, gradient steps and arena gating (`gate.every`);
compilation and evaluation are excluded (both are reported). At the start and every `--every`
minutes (or `--every-positions` self-play positions, with `--positions`) the network is
measured:

- games with a perfect-play position set (Connect4, Dots and Boxes 3x3, Tic-Tac-Toe;
  `azjax.referees`): the share of positions where the net with search (the config's evaluation
  simulations) and the raw policy pick a best move, and keep the game-theoretic result;
- Connect4 with `--pons`: besides, both agents' mistake rates in Pascal Pons' six test groups
  (`azjax.referees`), drawn as six curves per agent;
- every other game: arena scores of net + search against the config's `eval.opponents`.

`--runs WORKDIR ...` measures the checkpoints of runs trained before (`azjax-train`) instead:
each checkpoint is a point, at the run's wall clock when it was written (`elapsed_minutes` in
metrics.jsonl, evaluations included) and the positions it had added to its buffer.

Writes JSON (`--out`, rewritten after each run: an interrupted bench keeps the runs it finished)
and a PNG of the curves (`--png`, mean over seeds with the min-max band).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from bench import device_description, write_report

from azjax import agents, arena, parallel, referees, resume
from azjax.checkpoint import list_steps, load_for_inference
from azjax.config import (
    Config,
    ConfigError,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config,
)
from azjax.export import run_figures
from azjax.network import make_network
from azjax.train import gate
from azjax.trainer import make_trainer

MISTAKES = "mistakes"  # a point's Pons keys: "<agent>/mistakes <group>"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py learning", description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--config", nargs="+", metavar="YAML", help="one or more configs")
    which.add_argument("--compare", nargs=2, metavar="YAML", help="two configs side by side")
    which.add_argument("--runs", nargs="+", metavar="WORKDIR", help="measure runs' checkpoints")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, help="training wall time per run (default 20)")
    budget.add_argument("--positions", type=int, help="self-play positions per run instead")
    p.add_argument("--every", type=float, default=5.0, help="minutes between evaluations")
    p.add_argument(
        "--every-positions", type=int, help="positions between evaluations (with --positions)"
    )
    p.add_argument("--seeds", type=seed_list, default=[0], help="comma-separated seeds")
    p.add_argument("--games", type=int, default=64, help="arena games per opponent")
    p.add_argument(
        "--solver-set",
        metavar="FILE",
        help="perfect-play positions to score (default: the game's shipped set; a larger set, e.g. "
        "`scripts/make_connect4_positions.py --count 3000`, narrows each figure's interval)",
    )
    p.add_argument(
        "--pons",
        nargs="?",
        const=str(referees.PONS_PATH),
        metavar="FILE",
        help="Connect4: also the mistake rates in Pascal Pons' six test groups (default: the "
        "shipped groups; FILE: another set of them)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a dotted override applied to every config (repeatable)",
    )
    p.add_argument(
        "--cpu-devices",
        type=int,
        metavar="N",
        help="JAX CPU devices for training, as azjax-train's option (default: one per core, as "
        "many as divide every config's batch sizes)",
    )
    p.add_argument("--out", help="JSON path (default bench_results/learning_GAME.json)")
    p.add_argument("--png", help="PNG path (default: the JSON path with .png)")
    args = p.parse_args(argv)
    if args.minutes is None and args.positions is None:
        args.minutes = 20.0
    if args.solver_set is not None and not pathlib.Path(args.solver_set).is_file():
        p.error(f"--solver-set {args.solver_set}: no such file")
    if args.pons is not None and not pathlib.Path(args.pons).is_file():
        p.error(f"--pons {args.pons}: no such file")
    for name in ("minutes", "every", "positions", "every_positions"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    return args


def seed_list(text: str) -> list[int]:
    """An argparse type: "0,1,2" -> [0, 1, 2], every seed an integer >= 0."""
    parts = [x.strip() for x in text.split(",") if x.strip()]
    if not parts or not all(x.isdigit() for x in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 0, got {text!r}")
    return [int(x) for x in parts]


@dataclasses.dataclass
class Referee:
    """Measures parameters of one run: perfect-play accuracy where a set exists, else arena."""

    config: Config
    games: int
    solver_set: str | None = None  # a position file; None: the game's shipped set
    pons_set: str | None = None  # a file of Pons' test groups; None: no mistake rates

    def __post_init__(self) -> None:
        self.game = self.config.game.make()
        self.groups: dict[str, tuple[referees.Position, ...]] = {}
        try:
            self.positions = referees.referee_for(self.game).load(self.solver_set)
        except ValueError as err:
            if self.solver_set is not None:
                raise SystemExit(f"bench.py learning: --solver-set: {err}") from None
            self.positions = None
            self.opponents = [agents.make(s, self.game) for s in self.config.eval.opponents]
        if self.pons_set is not None:
            if self.positions is None or referees.referee_for(self.game).groups_file is None:
                raise SystemExit(f"bench.py learning: --pons: no Pons groups for {self.game.name}")
            try:
                self.groups = referees.load_groups(self.pons_set)
            except ValueError as err:
                raise SystemExit(f"bench.py learning: --pons: {err}") from None

    def __call__(self, network: Any, params: Any, key: jax.Array) -> dict[str, float]:
        player = agents.search_agent(self.game, network, params, self.config.playing_search())
        if self.positions is not None:
            policy = agents.policy_agent(self.game, network, params)
            out = {}
            for name, agent in (("search", player), ("policy", policy)):
                acc = referees.accuracy(self.game, agent, key, self.positions)
                out[f"{name}/best_move"] = acc.best_move
                out[f"{name}/keeps_result"] = acc.keeps_result
                if self.groups:
                    rates = referees.mistake_rates(
                        self.game, agent, jax.random.fold_in(key, 1), self.groups
                    )
                    out |= {f"{name}/{MISTAKES} {g}": rates.rate(g) for g in rates.counts}
            return out
        out = {}
        for i, (spec, opponent) in enumerate(
            zip(self.config.eval.opponents, self.opponents, strict=True)
        ):
            result = arena.match(
                self.game,
                player,
                opponent,
                self.games,
                jax.random.fold_in(key, i),
                opening_moves=self.config.eval.opening_moves,
            )
            out[f"vs {spec}/score"] = float(result.score)
        return out


def runs(path: str, config: Config, args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """Train `config` (read from `path`) once per seed (one compilation), each for the budget."""
    referee = Referee(config, args.games, args.solver_set, args.pons)
    first = resume.start(config).params  # `train.init_from`'s (None: random parameters)
    trainer = make_trainer(config)
    start = time.perf_counter()
    iterate = trainer.iterate.lower(trainer.init(jax.random.key(0))).compile()
    compile_seconds = time.perf_counter() - start
    for seed in args.seeds:
        seeded = dataclasses.replace(config, train=dataclasses.replace(config.train, seed=seed))
        record = run(path, seeded, trainer, first, iterate, referee, args)
        yield {**record, "compile_seconds": compile_seconds}


def run(
    path: str,
    config: Config,
    trainer: Any,
    first: Any,
    iterate: Any,
    referee: Referee,
    args: Any,
) -> dict[str, Any]:
    """Train from `config.train.seed` (and the parameters `first`, when given) for the budget;
    the evaluation points."""
    seed = config.train.seed
    state = trainer.init(jax.random.key(seed), first)
    eval_key = jax.random.key(seed + 1)
    gate_key = jax.random.key(seed + 2)

    train_seconds = eval_seconds = 0.0
    positions = iteration = promotions = 0
    points: list[dict[str, Any]] = []

    def measure() -> None:
        nonlocal eval_seconds
        begin = time.perf_counter()
        params = jax.device_get(state.params)
        scores = referee(trainer.network, params, jax.random.fold_in(eval_key, iteration))
        eval_seconds += time.perf_counter() - begin
        point = {
            "minutes": train_seconds / 60,
            "positions": positions,
            "iteration": iteration,
            **scores,
        }
        points.append(point)
        shown = ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
        print(
            f"  {pathlib.Path(path).stem} seed {seed}: {point['minutes']:6.2f} min, "
            f"{positions:9d} positions, iteration {iteration:5d}: {shown}",
            flush=True,
        )

    def progress() -> float:  # 0..1 of the budget
        if args.positions is not None:
            return positions / args.positions
        return train_seconds / (60 * args.minutes)

    every = (
        (args.every_positions or args.positions / 4) / args.positions
        if args.positions is not None
        else min(args.every / args.minutes, 1.0)
    )
    measure()
    next_point = every
    while progress() < 1.0:
        begin = time.perf_counter()
        state, metrics = iterate(state)
        added = int(metrics["replay/added"])  # waits for the device
        train_seconds += time.perf_counter() - begin
        positions += added
        iteration += 1
        if config.gate.every and iteration % config.gate.every == 0:
            begin = time.perf_counter()
            state, gated = gate(trainer, state, jax.random.fold_in(gate_key, iteration))
            promotions += gated["gate/promoted"]
            train_seconds += time.perf_counter() - begin
        if progress() >= next_point - 1e-9 or progress() >= 1.0:
            measure()
            next_point += every
    return {
        "config": path,
        "seed": seed,
        "game": config.game.name,
        "game_kwargs": dict(config.game.kwargs),
        "eval_seconds": eval_seconds,
        "train_minutes": train_seconds / 60,
        "positions": positions,
        "iterations": iteration,
        **({"gate_promotions": promotions} if config.gate.every else {}),
        "points": points,
    }


def measured(workdir: str, args: argparse.Namespace) -> dict[str, Any]:
    """The checkpoints of a finished (or stopped) run, measured as `run` measures its points."""
    steps = list_steps(workdir)
    if not steps:
        raise SystemExit(f"bench.py learning: no checkpoint in {workdir!r}")
    if not (pathlib.Path(workdir) / "metrics.jsonl").is_file():
        raise SystemExit(
            f"bench.py learning: no metrics.jsonl in {workdir!r} (azjax-train writes it)"
        )
    saved, _ = load_for_inference(workdir, steps[-1])
    config = config_from_dict(apply_overrides(config_to_dict(saved), args.set))
    referee = Referee(config, args.games, args.solver_set, args.pons)
    network = make_network(referee.game, config.network)
    eval_key = jax.random.key(config.train.seed + 1)
    points = []
    for step in steps:
        _, params = load_for_inference(workdir, step)
        figures = run_figures(pathlib.Path(workdir), step)  # as the model card counts them
        if figures["wall_clock_minutes"] is None:
            raise SystemExit(
                f"bench.py learning: {workdir}/metrics.jsonl has no record of iteration {step}"
            )
        scores = referee(network, params, jax.random.fold_in(eval_key, step))
        points.append(
            {
                "minutes": figures["wall_clock_minutes"],
                "positions": figures["positions_seen"],
                "iteration": step,
                **scores,
            }
        )
        shown = ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
        print(f"  {workdir} @{step}: {points[-1]['minutes']:6.2f} min: {shown}", flush=True)
    return {
        "config": workdir,
        "seed": config.train.seed,
        "game": config.game.name,
        "game_kwargs": dict(config.game.kwargs),
        "train_minutes": points[-1]["minutes"],
        "positions": points[-1]["positions"],
        "iterations": steps[-1],
        "points": points,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per config: each final score's mean, min and max over seeds."""
    out: dict[str, dict[str, Any]] = {}
    for path in dict.fromkeys(r["config"] for r in runs):
        finals = [r["points"][-1] for r in runs if r["config"] == path]
        keys = [k for k in finals[0] if "/" in k]
        out[path] = {
            k: {
                "mean": float(np.mean([f[k] for f in finals])),
                "min": float(np.min([f[k] for f in finals])),
                "max": float(np.max([f[k] for f in finals])),
            }
            for k in keys
        }
    return out


def _panels(keys: list[str]) -> dict[str, list[str]]:
    """The plot's panels, title -> the keys drawn in it: one per score, except an agent's Pons
    mistake rates, which share one panel (a curve per group)."""
    panels: dict[str, list[str]] = {}
    for key in keys:
        agent, name = key.split("/", 1)
        if name.startswith(f"{MISTAKES} "):
            panels.setdefault(f"{agent}: Pons mistake rate", []).append(key)
        else:
            panels[key.replace("/", ": ").replace("_", " ")] = [key]
    return panels


def plot(report: dict[str, Any], path: str) -> None:
    """Curves of every score against training minutes (or positions): seed mean, min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    x_key = "positions" if report["budget"].get("positions") else "minutes"
    panels = _panels([k for k in runs[0]["points"][0] if "/" in k])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    configs = list(dict.fromkeys(r["config"] for r in runs))
    for ax, (title, keys) in zip(axes[0], panels.items(), strict=True):
        grouped = len(keys) > 1  # a Pons panel: a curve per group, a line style per config
        for (c, config), (k, key) in itertools.product(enumerate(configs), enumerate(keys)):
            mine = [r["points"] for r in runs if r["config"] == config]
            n = min(len(p) for p in mine)
            x = np.mean([[p[i][x_key] for i in range(n)] for p in mine], axis=0)
            y = np.array([[p[i][key] for i in range(n)] for p in mine])
            label = pathlib.Path(config).stem
            style: dict[str, Any] = {}
            if grouped:
                group = key.split(f"{MISTAKES} ")[1]
                label = f"{group} ({label})" if len(configs) > 1 else group
                style = {"color": f"C{k}", "ls": ("-", "--", ":", "-.")[c % 4]}
            (line,) = ax.plot(x, y.mean(0), marker="o", ms=3, label=label, **style)
            if len(mine) > 1:
                ax.fill_between(x, y.min(0), y.max(0), color=line.get_color(), alpha=0.2)
        ax.set_title(title)
        ax.set_xlabel("training minutes" if x_key == "minutes" else "self-play positions")
        ax.set_ylabel("share of positions" if "score" not in title else "score (win=1, draw=0.5)")
        ax.set_ylim(0, None if grouped else 1)  # mistake rates are small: their own scale
        ax.grid(alpha=0.3)
        if grouped:
            ax.legend(fontsize=7)
    axes[0][0].legend(fontsize=8)
    machine = report["machine"]
    cores = machine["cpu_count"]
    fig.suptitle(f"{runs[0]['game']}: {machine['device']} ({cores} CPU core{'s' * (cores != 1)})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    configs = args.compare or args.config or []
    for path in configs:
        if not pathlib.Path(path).is_file():
            raise SystemExit(f"bench.py learning: config {path!r} does not exist")
    try:
        loaded = [(path, load_config(path, args.set)) for path in configs]
    except ConfigError as err:
        raise SystemExit(f"bench.py learning: configuration error: {err}") from None
    if loaded:  # every compared config trains on the same devices, asked for before JAX starts
        sizes = {
            f"{path}: {key}": size
            for path, config in loaded
            for key, size in config.split_sizes().items()
        }
        try:
            parallel.use_cpu_cores(sizes, args.cpu_devices)
        except ValueError as err:
            raise SystemExit(f"bench.py learning: --cpu-devices: {err}") from None
    if args.runs:
        records = (measured(workdir, args) for workdir in args.runs)
    else:
        records = (record for path, config in loaded for record in runs(path, config, args))
    results: list[dict[str, Any]] = []
    for record in records:  # the report is rewritten after each run: an interruption keeps them
        results.append(record)
        out = args.out or f"bench_results/learning_{results[0]['game']}.json"
        report = {
            "benchmark": "learning",
            "machine": device_description(),
            "budget": (
                {"runs": args.runs}
                if args.runs
                else {"minutes": args.minutes, "positions": args.positions, "every": args.every}
            ),
            "seeds": args.seeds,
            "overrides": args.set,
            "solver_set": args.solver_set,
            "pons": args.pons,
            "runs": results,
            "summary": summary(results),
        }
        write_report(out, report)
    plot(report, args.png or str(pathlib.Path(out).with_suffix(".png")))
