"""Game step throughput: `python scripts/bench.py games [options]`.

Measures steps/s of `jit(vmap(step))` for every registered game and size, playing uniformly
random legal actions with auto-reset (a finished game restarts from the start position inside
the jitted function), `--steps` steps per jitted call under `lax.scan`. pgx's `tic_tac_toe`,
`connect_four` and `othello` (optional: `pip install -e .[bench]`) run the same loop on the
same batch in the same process, timed in turn with ours, and the table shows our/pgx ratios.
Each figure is the median of `--repeats` timed calls after a warm-up call.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
from bench import comma_list, device_description, one_of, positive, write_report

import games

# Sizes benchmarked per game (a registered game missing here runs with its defaults).
SIZES: dict[str, list[dict[str, int]]] = {
    "tictactoe": [{}],
    "connect4": [{}],
    "othello": [{}, {"size": 6}],
    "dots_and_boxes": [{}, {"rows": 2, "cols": 2}, {"rows": 5, "cols": 5}],
    "chain_reaction": [{}, {"rows": 8, "cols": 8}],
}
# The pgx environment playing the same game as our default size.
PGX_PEERS = {"tictactoe": "tic_tac_toe", "connect4": "connect_four", "othello": "othello"}


@dataclasses.dataclass(frozen=True)
class Subject:
    """One thing to time: a batched init and step over states with `legal_action_mask`."""

    label: str
    init: Callable[[jax.Array], Any]
    step: Callable[[Any, jax.Array], Any]


def random_legal_action(bits: jax.Array, mask: jax.Array) -> jax.Array:
    """The (bits mod #legal)-th legal action: uniform up to a negligible modulo bias."""
    count = jnp.maximum(mask.sum(dtype=jnp.uint32), 1)
    k = (bits % count).astype(jnp.int32)
    return jnp.argmax(jnp.cumsum(mask, dtype=jnp.int32) > k).astype(jnp.int32)


def make_runner(subject: Subject, batch: int, steps: int) -> Callable:
    """A jitted `run(states, key) -> states` playing `steps` random legal moves per game."""

    def reset_where(done: jax.Array, fresh: Any, states: Any) -> Any:
        def pick(a, b):
            return jnp.where(done.reshape(done.shape + (1,) * (a.ndim - 1)), a, b)

        return jax.tree.map(pick, fresh, states)

    @jax.jit
    def run(states: Any, key: jax.Array) -> Any:
        reset_key, play_key = jax.random.split(key)
        fresh = jax.vmap(subject.init)(jax.random.split(reset_key, batch))

        def body(states, key):
            bits = jax.random.bits(key, (batch,), jnp.uint32)
            actions = jax.vmap(random_legal_action)(bits, states.legal_action_mask)
            states = jax.vmap(subject.step)(states, actions)
            return reset_where(states.terminated, fresh, states), None

        states, _ = jax.lax.scan(body, states, jax.random.split(play_key, steps))
        return states

    return run


def time_group(subjects: list[Subject], batch: int, steps: int, repeats: int) -> list[float]:
    """Median steps/s of each subject, timed in turn so that they share the machine's load."""
    runners, states = [], []
    for subject in subjects:
        run = make_runner(subject, batch, steps)
        key = jax.random.key(0)
        first = jax.vmap(subject.init)(jax.random.split(key, batch))
        states.append(jax.block_until_ready(run(first, key)))  # compile and warm up
        runners.append(run)
    times: list[list[float]] = [[] for _ in subjects]
    for r in range(repeats):
        for i, run in enumerate(runners):
            start = time.perf_counter()
            states[i] = jax.block_until_ready(run(states[i], jax.random.key(r + 1)))
            times[i].append(time.perf_counter() - start)
    return [batch * steps / statistics.median(t) for t in times]


def our_subjects(names: list[str]) -> tuple[list[tuple[str, dict, Subject]], list[str]]:
    """(game name, size kwargs, subject) for each available configuration, and missing ones."""
    found, missing = [], []
    for name in names:
        for kwargs in SIZES.get(name, [{}]):
            label = name + "".join(f" {k}={v}" for k, v in kwargs.items())
            try:
                game = games.make(name, **kwargs)
            except ImportError as err:
                missing.append(f"{label} ({err})")
                continue
            found.append((name, kwargs, Subject(label, game.init, game.step)))
    return found, missing


def pgx_module() -> ModuleType | None:
    """The pgx package, or None when it is not installed."""
    try:
        return importlib.import_module("pgx")
    except ImportError:
        return None


def pgx_subject(pgx: ModuleType, env_id: str) -> Subject:
    env = pgx.make(env_id)
    return Subject(f"pgx {env_id}", env.init, env.step)


def human(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.py games", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--batches",
        type=comma_list(positive, "positive integers"),
        default="1,1024,4096",
        help="comma-separated",
    )
    parser.add_argument(
        "--games",
        type=comma_list(one_of(tuple(games.names())), f"games of {', '.join(games.names())}"),
        default=games.names(),
        help="comma-separated (default: all)",
    )
    parser.add_argument("--steps", type=positive, default=100, help="steps per jitted call")
    parser.add_argument("--repeats", type=positive, default=5, help="timed calls per figure")
    parser.add_argument("--out", default="bench_results/games.json", help="JSON output path")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    found, missing = our_subjects(args.games)
    pgx = pgx_module()
    info = device_description()
    device = info["device"] if info["platform"] != "cpu" else "cpu"
    print(
        f"device: {device} (host {info['cpu']}, {info['cpu_count']} cores) | jax {jax.__version__}"
        f" | {args.steps} steps per call, median of {args.repeats}"
    )
    if pgx is None:
        print("pgx is not installed (pip install -e .[bench]): pgx columns skipped")
    for entry in missing:
        print(f"missing: {entry}")

    results = []
    header = f"{'game':<28}{'batch':>7}{'ours steps/s':>15}{'pgx steps/s':>15}{'ours/pgx':>10}"
    print(header + "\n" + "-" * len(header))
    for name, kwargs, ours in found:
        peer = PGX_PEERS.get(name) if pgx is not None and not kwargs else None
        for batch in args.batches:
            subjects = [ours] + ([pgx_subject(pgx, peer)] if peer else [])
            row: dict[str, Any] = {
                "game": name,
                "config": kwargs,
                "label": ours.label,
                "batch": batch,
            }
            try:
                rates = time_group(subjects, batch, args.steps, args.repeats)
            except Exception as err:  # one broken game must not hide the others' figures
                row["error"] = f"{type(err).__name__}: {err}"
                print(f"{ours.label:<28}{batch:>7}  failed: {row['error'][:200]}")
                results.append(row)
                continue
            row["steps_per_s"] = rates[0]
            if peer:
                row.update(pgx_env=peer, pgx_steps_per_s=rates[1], ratio=rates[0] / rates[1])
            ratio = f"{row['ratio']:.2f}x" if peer else "-"
            pgx_rate = human(rates[1]) if peer else "-"
            print(f"{ours.label:<28}{batch:>7}{human(rates[0]):>15}{pgx_rate:>15}{ratio:>10}")
            results.append(row)

    report = {
        **info,
        "pgx_version": importlib.metadata.version("pgx") if pgx is not None else None,
        "steps_per_call": args.steps,
        "repeats": args.repeats,
        "batches": args.batches,
        "missing": missing,
        "results": results,
    }
    write_report(args.out, report)
