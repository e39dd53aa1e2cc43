"""Self-play throughput: `python scripts/bench.py selfplay [options]`.

For each point of the grid (game x net x batch x simulations x algorithm) it measures:

- self-play (`azjax.selfplay` chunks, auto-reset): simulations/s and positions/s, and the share
  of moves searched fully (`full_search_fraction`; `--full-prob` below 1: the rest fast);
- the network alone for the same number of evaluations (`azjax.selfplay.chunk_evaluations`: the
  root, one per simulation and a chance game's decision steps; batch B),
  and the ratio self-play time / network time (the search and game overhead);
- self-play with a free evaluator (uniform priors, value 0: the search and the game alone);
- with `--trace DIR`, one more chunk under `jax.profiler` (a Perfetto trace in DIR) and the
  device time it spent per kind of kernel (convolutions and matmuls, gathers, scatters, ...),
  the device's busy time (under the profiler, whose own cost stretches the wall time) and
  the kernels launched per batched evaluation step (the root or one simulation);
- the kernels per simulation step, from the compiled chunk (every backend, no profiler): the
  instructions XLA launches per iteration of the search's loop over simulations
  (`benchlib.loop_kernels`: fusions, convolutions and dots, library calls, copies, scatters
  and gathers; nested loops with a known trip count as often as they run, the tree walks'
  once: their share is `data_dependent_loop_kernels`, the table's `k/level`, the kernels
  each level of the tree costs), by kind and by the function that made them (`by_function`:
  the search's walks, the network, the rules). The count is the backend's own: a CPU fuses
  otherwise than a GPU, and Gumbel walks down level by level everywhere but on a GPU
  (`kept_actions`: `azjax.search.keeps_actions`). `--kernels-only` compiles and counts, times
  nothing;
- network evaluations/s in self-play, the network's FLOPs per evaluation (`network_flops`)
  and the TFLOP/s they make, in self-play and for the network alone, with the fraction of the
  device's dense peak where `azjax.throughput.PEAK_TFLOPS` knows the device;
- the fraction of searched positions that became training targets (value known, emitted);
- a plain loop that plays B games from the start until all have finished (no auto-reset),
  its useful positions/s and the share of its searches spent on finished games;
- memory: bytes per game in flight (the self-play carry, pending positions included, over B)
  and per replay-buffer position, as the trainer stores them (`stored`: the game State when it
  is smaller than the float32 observation, else the observation) and, for comparison, with
  float32 observations (`*_observations`). `bench.py memory` gives the bytes per device.

Defaults are the full CPU/GPU grid of the issue; pick a small one on CPU, e.g.
`--games connect4 --nets 2x32 --batches 64 --sims 16 --chunks 2 --warmup 0`.
Prints a table and writes JSON (`--out`).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import itertools
import json
import pathlib
import time

import jax
import jax.numpy as jnp
from benchlib import (
    choice_list,
    device_description,
    game_list,
    int_list,
    kernel_kind,
    loop_kernels,
    net_list,
    write_report,
)

import games
from azjax.network import NORMS, NetworkConfig, init_params, make_network
from azjax.replay import replay_init, stores_states, tree_bytes
from azjax.search import ALGORITHMS, SearchConfig, keeps_actions, network_evaluator, run_search
from azjax.selfplay import SelfPlayConfig, chunk_evaluations, make_selfplay
from azjax.throughput import network_flops, peak_tflops

GAME_KWARGS = {"chain_reaction": {"rows": 5, "cols": 5}, "othello": {"size": 8}}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py selfplay", description=__doc__.split("\n")[0])
    p.add_argument(
        "--games", type=game_list, default="connect4,chain_reaction", help="comma-separated"
    )
    p.add_argument(
        "--nets", type=net_list, default="2x32,4x64", help="BLOCKSxCHANNELS, comma-separated"
    )
    p.add_argument(
        "--batches", type=int_list, default="256,1024", help="games in flight, comma-separated"
    )
    p.add_argument(
        "--sims", type=int_list, default="32,128", help="simulations per search, comma-separated"
    )
    p.add_argument("--algorithms", type=choice_list(ALGORITHMS), default="gumbel,puct")
    p.add_argument("--chunk-moves", type=int, default=16, help="moves per self-play chunk")
    p.add_argument("--chunks", type=int, default=3, help="timed chunks")
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed chunks first (default: enough moves for a longest game, so the pending "
        "buffer of unfinished games is in its steady state)",
    )
    p.add_argument(
        "--full-prob", type=float, default=1.0, help="PCR full-search probability (1: off)"
    )
    p.add_argument("--fast-sims", type=int, default=8, help="PCR fast-search simulations")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument(
        "--norms",
        type=choice_list(NORMS),
        default="layer",
        help="tower normalisations (network.norm), comma-separated",
    )
    p.add_argument(
        "--clock",
        default="wall",
        choices=["wall", "process"],
        help="wall time, or this process's CPU time (steadier on a shared CPU machine)",
    )
    p.add_argument("--no-plain", action="store_true", help="skip the plain-loop comparison")
    p.add_argument(
        "--kernels-only",
        action="store_true",
        help="compile each point's chunk and count its kernels per simulation step; time nothing",
    )
    p.add_argument("--trace", help="profile one more chunk per point; the trace goes here")
    p.add_argument("--out", default="bench_results/selfplay.json", help="JSON output path")
    return p.parse_args(argv)


CLOCK = {"wall": time.perf_counter, "process": time.process_time}
clock = time.perf_counter


def timed(fn, *args):
    """Seconds of one call of `fn` after a first (compiling) call, and its output."""
    out = jax.block_until_ready(fn(*args))
    start = clock()
    out = jax.block_until_ready(fn(*args))
    return clock() - start, out


def network_only(net, params, obs: jax.Array, calls: int):
    """Seconds for `calls` sequential network applications on the batch `obs`."""

    @jax.jit
    def run(params, obs):
        def body(_, acc):
            logits, value = net.apply(params, obs + 1e-9 * acc[:, None, None, None])
            return acc + value + 1e-9 * logits[:, 0]

        return jax.lax.fori_loop(0, calls, body, jnp.zeros(obs.shape[0]))

    return timed(run, params, obs)[0]


def free_evaluator(game):
    """An evaluator that costs nothing: uniform priors and value 0 (the search and game alone)."""

    def evaluate(params, states, key):
        del params, key
        batch = states.current_player.shape[0]
        return jnp.zeros((batch, game.num_actions), jnp.float32), jnp.zeros(batch, jnp.float32)

    return evaluate


def trace_summary(folder: str, wall_s: float, steps: float) -> dict:
    """Device time per kernel kind in the newest Perfetto trace under `folder`, of a chunk that
    took `wall_s` under the profiler and made `steps` batched evaluations (root and leaves)."""
    traces = pathlib.Path(folder).rglob("perfetto_trace.json.gz")
    path = max(traces, key=lambda p: p.stat().st_mtime)
    trace = json.loads(gzip.decompress(path.read_bytes()))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {
        e["pid"]: e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    device = {pid for pid, name in names.items() if "/device:" in name}
    if not device:  # a CPU run: XLA's ops run on host threads, whose events nest: a rough split
        device = set(names)
    # A GPU's plane has one line per stream (the kernels) beside summary lines (modules, ops).
    streams = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "M"
        and e.get("name") == "thread_name"
        and e.get("pid") in device
        and "stream" in e.get("args", {}).get("name", "").lower()
    }
    kinds: collections.Counter = collections.Counter()
    kernels: collections.Counter = collections.Counter()
    count = 0
    for e in events:
        line = (e.get("pid"), e.get("tid"))
        if e.get("ph") == "X" and line[0] in device and (not streams or line in streams):
            kinds[kernel_kind(e["name"])] += e.get("dur", 0.0) / 1e6
            kernels[e["name"]] += e.get("dur", 0.0) / 1e6
            count += 1
    busy = sum(kinds.values())
    return {
        "trace": str(path),
        "wall_s": wall_s,
        "device_busy_s": busy,
        "device_busy_fraction": busy / wall_s,
        "kernels": count,
        "kernels_per_evaluation_step": count / steps,
        "seconds_by_kind": dict(kinds.most_common()),
        "top_kernels_s": dict(kernels.most_common(25)),
    }


def plain_loop(game, evaluate, params, search: SearchConfig, batch: int):
    """Play `batch` games from the start until all finish, searching every slot each move
    (finished games included, as a plain batched loop does). Returns (seconds, game lengths
    summed, moves searched per slot)."""

    def search_one(params, state, key):
        one = jax.tree.map(lambda x: x[None], state)
        return run_search(game, evaluate, params, one, key, search).action[0]

    @jax.jit
    def run(params, key):
        def cond(carry):
            states, _, _, _ = carry
            return ~states.terminated.all()

        def body(carry):
            states, key, steps, played = carry
            key, sub = jax.random.split(key)
            keys = jax.random.split(sub, batch)
            actions = jax.vmap(search_one, in_axes=(None, 0, 0))(params, states, keys)
            played = played + (~states.terminated).sum()
            return jax.vmap(game.step)(states, actions), key, steps + 1, played

        states = jax.vmap(game.init)(jax.random.split(key, batch))
        _, _, steps, played = jax.lax.while_loop(cond, body, (states, key, 0, 0))
        return steps, played

    seconds, (steps, played) = timed(run, params, jax.random.key(0))
    return seconds, int(played), int(steps)


def carry_bytes(game, evaluate, search, cfg, as_states: bool) -> int:
    """Bytes of the self-play carry (games in flight and their pending positions)."""
    init_fn, _ = make_selfplay(game, evaluate, search, cfg, as_states)
    return tree_bytes(jax.eval_shape(init_fn, jax.random.key(0)))


def position_bytes(game, as_states: bool) -> float:
    """Bytes per replay-buffer position (a 1024-slot buffer's storage over 1024)."""
    buffer = jax.eval_shape(lambda: replay_init(game, 1024, as_states=as_states))
    return tree_bytes(buffer.stored) / 1024


def bench_point(game, blocks, channels, norm, batch, sims, algorithm, args) -> dict:
    config = NetworkConfig(blocks=blocks, channels=channels, norm=norm, dtype=args.dtype)
    net = make_network(game, config)
    params = init_params(net, game, jax.random.key(0))
    evaluate = network_evaluator(net)
    search = SearchConfig(algorithm=algorithm, num_simulations=sims)
    cfg = SelfPlayConfig(
        batch_size=batch,
        chunk_moves=args.chunk_moves,
        full_search_prob=args.full_prob,
        fast_simulations=min(args.fast_sims, sims),
    )
    as_states = stores_states(game)  # what the trainer stores, as it decides
    init_fn, chunk_fn = make_selfplay(game, evaluate, search, cfg, as_states)
    carry = init_fn(jax.random.key(0))
    start = clock()
    chunk = jax.jit(chunk_fn, donate_argnums=1).lower(params, carry, jax.random.key(1)).compile()
    step_kernels = loop_kernels(chunk.as_text(), sims)  # the loop over simulations
    row = {
        "game": game.name,
        "net": f"{blocks}x{channels}",
        "norm": norm,
        "dtype": args.dtype,
        "batch": batch,
        "sims": sims,
        "algorithm": algorithm,
        "kept_actions": algorithm == "gumbel" and keeps_actions(),  # no walk level by level
        "full_prob": args.full_prob,
        "chunk_moves": args.chunk_moves,
        "kernels_per_simulation_step": step_kernels and step_kernels["kernels"],
        "simulation_step_kernels": step_kernels,
    }
    if args.kernels_only:
        return row
    carry, _, _ = jax.block_until_ready(chunk(params, carry, jax.random.key(1)))
    compile_and_first = clock() - start
    warmup = args.warmup
    if warmup is None:
        warmup = -(-game.max_game_length // args.chunk_moves) - 1
    for i in range(warmup):
        carry, _, _ = jax.block_until_ready(chunk(params, carry, jax.random.key(100 + i)))

    emitted = searched = full = evaluations = 0.0
    start = clock()
    for i in range(args.chunks):
        carry, _, metrics = chunk(params, carry, jax.random.key(i + 2))
        metrics = jax.device_get(metrics)
        full += float(metrics["full_search_fraction"])
        evaluations += chunk_evaluations(game, search, cfg, float(metrics["full_search_fraction"]))
        emitted += float(metrics["target_fraction"]) * batch * args.chunk_moves
        searched += batch * args.chunk_moves
    seconds = clock() - start
    full /= args.chunks
    sims_per_move = full * sims + (1 - full) * cfg.fast_simulations
    positions = searched
    simulations = positions * sims_per_move

    # The network alone: as many evaluations as self-play made, in batches of B.
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), batch))
    obs = jax.vmap(game.observe)(states)
    evals = round(evaluations / batch)
    net_seconds = network_only(net, params, obs, evals)
    flops = network_flops(net, params, obs)

    # The search and the game alone: the same chunks with a free evaluator.
    _, free_chunk_fn = make_selfplay(game, free_evaluator(game), search, cfg, as_states)
    free_chunk = jax.jit(free_chunk_fn, donate_argnums=1)
    free_carry = init_fn(jax.random.key(0))
    free_carry = jax.block_until_ready(free_chunk(params, free_carry, jax.random.key(1)))[0]
    start = clock()
    for i in range(args.chunks):
        free_carry = free_chunk(params, free_carry, jax.random.key(i + 2))[0]
    jax.block_until_ready(free_carry)
    search_only = clock() - start
    tflops = evaluations / seconds * flops / 1e12
    net_tflops = evals * batch / net_seconds * flops / 1e12
    peak = peak_tflops(args.dtype)

    row |= {
        "chunks": args.chunks,
        "full_search_fraction": full,
        "warmup_chunks": warmup + 1,
        "compile_and_first_chunk_s": compile_and_first,
        "selfplay_s": seconds,
        "simulations_per_s": simulations / seconds,
        "positions_per_s": positions / seconds,
        "network_only_s": net_seconds,
        "ratio": seconds / net_seconds,
        "search_only_s": search_only,
        "evaluations_per_s": evaluations / seconds,
        "network_flops_per_evaluation": flops,
        "achieved_tflops": tflops,
        "network_only_tflops": net_tflops,
        "peak_tflops": peak,
        "fraction_of_peak": None if peak is None else tflops / peak,
        "network_only_fraction_of_peak": None if peak is None else net_tflops / peak,
        "target_fraction": emitted / searched,
        "clock": args.clock,
        "stored": "state" if as_states else "observation",
        "bytes_per_game_in_flight": carry_bytes(game, evaluate, search, cfg, as_states) / batch,
        "bytes_per_game_in_flight_observations": carry_bytes(game, evaluate, search, cfg, False)
        / batch,
        "bytes_per_buffer_position": position_bytes(game, as_states),
        "bytes_per_buffer_position_observations": position_bytes(game, False),
    }
    if args.trace:
        start = clock()
        try:
            with jax.profiler.trace(args.trace, create_perfetto_trace=True):
                carry = jax.block_until_ready(chunk(params, carry, jax.random.key(99))[0])
            traced = clock() - start
            evaluation_steps = args.chunk_moves * (sims_per_move + 1)  # batched, in one chunk
            row["profile"] = trace_summary(args.trace, traced, evaluation_steps)
        except (RuntimeError, OSError, ValueError) as error:  # the figures above still count
            row["profile"] = {"error": repr(error)}
    if not args.no_plain:
        plain_s, played, steps = plain_loop(game, evaluate, params, search, batch)
        row.update(
            plain_s=plain_s,
            plain_useful_positions_per_s=played / plain_s,
            plain_wasted_fraction=1.0 - played / (steps * batch),
            autoreset_gain=(positions / seconds) / (played / plain_s),
        )
    return row


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    global clock
    clock = CLOCK[args.clock]
    rows = []
    header = f"{'game':<15}{'net':>6}{'norm':>6}{'B':>6}{'sims':>6}{'alg':>8}{'k/level':>8}"
    header += f"{'kern/sim':>9}"
    if not args.kernels_only:
        header += f"{'sims/s':>11}{'pos/s':>9}{'net s':>8}{'ratio':>7}{'targets':>8}"
        header += "" if args.no_plain else f"{'plain pos/s':>12}{'wasted':>7}{'gain':>6}"
    print(header)
    for name in args.games:
        game = games.make(name, **GAME_KWARGS.get(name, {}))
        points = itertools.product(
            args.nets,
            args.norms,
            args.batches,
            args.sims,
            args.algorithms,
        )
        for (blocks, channels), norm, batch, sims, algorithm in points:
            net = f"{blocks}x{channels}"
            r = bench_point(game, blocks, channels, norm, batch, sims, algorithm, args)
            rows.append(r)
            kernels, split = r["kernels_per_simulation_step"], r["simulation_step_kernels"]
            line = f"{name:<15}{net:>6}{norm:>6}{batch:>6}{sims:>6}{algorithm:>8}"
            line += f"{'-' if split is None else split['data_dependent_loop_kernels']:>8}"
            line += f"{'-' if kernels is None else kernels:>9}"
            if "selfplay_s" in r:
                line += (
                    f"{r['simulations_per_s']:>11.0f}{r['positions_per_s']:>9.1f}"
                    f"{r['network_only_s']:>8.2f}{r['ratio']:>7.2f}{r['target_fraction']:>8.3f}"
                )
            if "plain_s" in r:
                line += (
                    f"{r['plain_useful_positions_per_s']:>12.1f}"
                    f"{r['plain_wasted_fraction']:>7.2f}{r['autoreset_gain']:>6.2f}"
                )
            print(line, flush=True)
    write_report(args.out, {**device_description(), "results": rows})
