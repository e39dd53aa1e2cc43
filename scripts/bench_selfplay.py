"""Self-play throughput: `python scripts/bench.py selfplay [options]`.

For each point of the grid (game x net x batch x simulations x algorithm) it measures:

- self-play (`azjax.selfplay` chunks, auto-reset): simulations/s and positions/s, and the share
  of moves searched fully (`full_search_fraction`; `--full-prob` below 1: the rest fast);
- the network alone for the same number of evaluations (`azjax.selfplay.chunk_evaluations`: the
  root, one per simulation and a chance game's decision steps; batch B),
  and the ratio self-play time / network time (the search and game overhead);
- self-play with a free evaluator (uniform priors, value 0: the search and the game alone);
- network evaluations/s in self-play, the network's FLOPs per evaluation (`network_flops`)
  and the TFLOP/s they make, in self-play and for the network alone, with the fraction of the
  device's dense peak where `PEAK_TFLOPS` knows the device;
- the fraction of searched positions that became training targets (value known, emitted);
- a plain loop that plays B games from the start until all have finished (no auto-reset),
  its useful positions/s and the share of its searches spent on finished games.

Defaults are the full CPU/GPU grid; pick a small one on CPU, e.g.
`--games connect4 --nets 2x32 --batches 64 --sims 16 --chunks 2 --warmup 0`.
Prints a table and writes JSON (`--out`).
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import time
from typing import Any

import jax
import jax.numpy as jnp
from bench import comma_list, device_description, one_of, positive, write_report
from jax.extend import core

import games
from azjax.config import ALGORITHMS, DTYPES, NetworkConfig, SearchConfig, SelfPlayConfig
from azjax.network import init_params, make_network
from azjax.replay import stores_states
from azjax.search import network_evaluator, run_search
from azjax.selfplay import chunk_evaluations, make_selfplay

GAME_KWARGS = {"chain_reaction": {"rows": 5, "cols": 5}, "othello": {"size": 8}}


# Dense peak TFLOP/s per device by the first name found as a word in its device kind (vendor
# data sheets, without sparsity; a plain "H100" is the SXM part; "L4" is not "L40S").
# "tensorfloat32" is the tensor cores' TF32 peak: XLA computes float32 convolutions and matrix
# products in TF32 on these GPUs unless `jax_default_matmul_precision` asks for full float32.
# Devices not listed (CPUs included) have no known peak, so no fraction of it is reported.
PEAK_TFLOPS = {
    "H100 PCIe": {"bfloat16": 756.0, "tensorfloat32": 378.0, "float32": 51.0},
    "H100 NVL": {"bfloat16": 835.0, "tensorfloat32": 417.5, "float32": 60.0},
    "H100": {"bfloat16": 989.0, "tensorfloat32": 494.5, "float32": 67.0},
    "H200": {"bfloat16": 989.0, "tensorfloat32": 494.5, "float32": 67.0},
    "A100": {"bfloat16": 312.0, "tensorfloat32": 156.0, "float32": 19.5},
    "L40S": {"bfloat16": 362.05, "tensorfloat32": 183.0, "float32": 91.6},
    "L4": {"bfloat16": 121.0, "tensorfloat32": 60.0, "float32": 30.3},
    "T4": {"float32": 8.1},  # no bfloat16 or TF32 tensor cores (azjax.parallel.emulation_warning)
    "TPU v4": {"bfloat16": 275.0},
    "TPU v5 lite": {"bfloat16": 197.0},
    "TPU v5p": {"bfloat16": 459.0},
    "TPU v6 lite": {"bfloat16": 918.0},
}
# `jax_default_matmul_precision` values that make XLA compute float32 products in float32.
FULL_PRECISION = ("float32", "highest", "F32_F32_F32")


def peak_tflops(dtype: str, device_kind: str | None = None) -> float | None:
    """The dense peak TFLOP/s of one device of `device_kind` (default: the first device's) for
    a network in `dtype` ("float32", "bfloat16"); None where PEAK_TFLOPS does not know it.

    A float32 network's peak is the TF32 one where the device has TF32, unless
    `jax_default_matmul_precision` is one of FULL_PRECISION."""
    kind = jax.devices()[0].device_kind if device_kind is None else device_kind
    full = str(jax.config.jax_default_matmul_precision) in FULL_PRECISION
    key = "tensorfloat32" if dtype == "float32" and not full else dtype
    for name, peaks in PEAK_TFLOPS.items():
        if re.search(rf"\b{re.escape(name)}\b", kind):
            return peaks.get(key, peaks.get(dtype))
    return None


def network_flops(network: Any, params: Any, observations: Any) -> float:
    """FLOPs of one evaluation of `network` (any module with `apply(params, obs)`): the
    convolutions' and matrix products' multiply-adds (two FLOPs each) for a batch of
    `observations` (arrays or `jax.ShapeDtypeStruct`s) over its size.

    It counts from the traced program's shapes, the same on every backend, with each kernel's
    whole window (the padding's zeros included, as the device multiplies them too). Compilers'
    cost analyses differ by backend: a GPU's can leave out the library calls (cuDNN's
    convolutions) that do nearly all the work. Elementwise work (biases, norms, activations) is
    left out, as the dense peak it is compared with is the tensor cores' alone.
    """
    jaxpr = jax.make_jaxpr(network.apply)(params, observations)
    return _flops(jaxpr.jaxpr) / observations.shape[0]


def _flops(jaxpr: core.Jaxpr) -> float:
    """The multiply-add FLOPs of `jaxpr`'s convolutions and matrix products, sub-programs
    included: a scan's body once per step, a cond's costliest branch."""
    total = 0.0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            summed = math.prod(lhs[d] for d in contracting)
            total += 2 * math.prod(eqn.outvars[0].aval.shape) * summed
        elif eqn.primitive.name == "conv_general_dilated":
            # Each output sums over the kernel's window and its input features (one group's).
            kernel = eqn.invars[1].aval.shape
            spec = eqn.params["dimension_numbers"].rhs_spec  # (out features, in features, window)
            summed = math.prod(kernel[d] for d in spec[1:])
            total += 2 * math.prod(eqn.outvars[0].aval.shape) * summed
        inner = [_flops(sub) for sub in core.jaxprs_in_params(eqn.params)]
        if eqn.primitive.name == "cond":  # one branch runs (e.g. `platform_dependent`'s)
            total += max(inner)
        elif eqn.primitive.name == "scan":
            total += eqn.params["length"] * sum(inner)
        else:
            total += sum(inner)
    return total


def net(text: str) -> tuple[int, int]:
    """BLOCKSxCHANNELS, e.g. "2x32" -> (2, 32), channels >= 1 (ValueError otherwise)."""
    match = re.fullmatch(r"(\d+)x(\d+)", text)
    if not match or int(match[2]) < 1:
        raise ValueError(text)
    return int(match[1]), int(match[2])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py selfplay", description=__doc__.split("\n")[0])
    names = tuple(games.names())
    lists = {
        "--games": (one_of(names), f"games of {', '.join(names)}", "connect4,chain_reaction"),
        "--nets": (net, "BLOCKSxCHANNELS such as 2x32 (channels >= 1)", "2x32,4x64"),
        "--batches": (positive, "positive integers (games in flight)", "256,1024"),
        "--sims": (positive, "positive integers (simulations per search)", "32,128"),
        "--algorithms": (one_of(ALGORITHMS), f"values of {', '.join(ALGORITHMS)}", "gumbel,puct"),
    }
    for flag, (read, expected, default) in lists.items():
        p.add_argument(flag, type=comma_list(read, expected), default=default, help=expected)
    p.add_argument("--chunk-moves", type=positive, default=16, help="moves per self-play chunk")
    p.add_argument("--chunks", type=positive, default=3, help="timed chunks")
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
    p.add_argument("--fast-sims", type=positive, default=8, help="PCR fast-search simulations")
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--no-plain", action="store_true", help="skip the plain-loop comparison")
    p.add_argument("--out", default="bench_results/selfplay.json", help="JSON output path")
    return p.parse_args(argv)


def timed(fn, *args):
    """Seconds of one call of `fn` after a first (compiling) call, and its output."""
    out = jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - start, out


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


def bench_point(game, blocks, channels, batch, sims, algorithm, args) -> dict:
    net = make_network(game, NetworkConfig(blocks=blocks, channels=channels, dtype=args.dtype))
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
    start = time.perf_counter()
    chunk = jax.jit(chunk_fn, donate_argnums=1)
    carry, _, _ = jax.block_until_ready(chunk(params, carry, jax.random.key(1)))
    compile_and_first = time.perf_counter() - start
    warmup = args.warmup
    if warmup is None:
        warmup = -(-game.max_game_length // args.chunk_moves) - 1
    for i in range(warmup):
        carry, _, _ = jax.block_until_ready(chunk(params, carry, jax.random.key(100 + i)))

    emitted = full = evaluations = 0.0
    start = time.perf_counter()
    for i in range(args.chunks):
        carry, _, metrics = chunk(params, carry, jax.random.key(i + 2))
        metrics = jax.device_get(metrics)
        full += float(metrics["full_search_fraction"])
        evaluations += chunk_evaluations(game, search, cfg, float(metrics["full_search_fraction"]))
        emitted += float(metrics["target_fraction"])
    seconds = time.perf_counter() - start
    full /= args.chunks
    positions = args.chunks * batch * args.chunk_moves
    simulations = positions * (full * sims + (1 - full) * cfg.fast_simulations)

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
    start = time.perf_counter()
    for i in range(args.chunks):
        free_carry = free_chunk(params, free_carry, jax.random.key(i + 2))[0]
    jax.block_until_ready(free_carry)
    search_only = time.perf_counter() - start
    tflops = evaluations / seconds * flops / 1e12
    net_tflops = evals * batch / net_seconds * flops / 1e12
    peak = peak_tflops(args.dtype)
    row = {
        "game": game.name,
        "net": f"{blocks}x{channels}",
        "dtype": args.dtype,
        "batch": batch,
        "sims": sims,
        "algorithm": algorithm,
        "full_prob": args.full_prob,
        "chunk_moves": args.chunk_moves,
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
        "target_fraction": emitted / args.chunks,
    }
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
    rows = []
    header = f"{'game':<15}{'net':>6}{'B':>6}{'sims':>6}{'alg':>8}{'sims/s':>11}{'pos/s':>9}"
    header += f"{'evals/s':>10}{'peak':>6}{'net s':>8}{'ratio':>7}{'targets':>8}"
    print(header + ("" if args.no_plain else f"{'plain pos/s':>12}{'wasted':>7}{'gain':>6}"))
    for name in args.games:
        game = games.make(name, **GAME_KWARGS.get(name, {}))
        points = itertools.product(args.nets, args.batches, args.sims, args.algorithms)
        for (blocks, channels), batch, sims, algorithm in points:
            r = bench_point(game, blocks, channels, batch, sims, algorithm, args)
            rows.append(r)
            peak = "-" if r["fraction_of_peak"] is None else f"{r['fraction_of_peak']:.0%}"
            line = f"{name:<15}{r['net']:>6}{batch:>6}{sims:>6}{algorithm:>8}"
            line += f"{r['simulations_per_s']:>11.0f}{r['positions_per_s']:>9.1f}"
            line += f"{r['evaluations_per_s']:>10.0f}{peak:>6}{r['network_only_s']:>8.2f}"
            line += f"{r['ratio']:>7.2f}{r['target_fraction']:>8.3f}"
            if "plain_s" in r:
                line += (
                    f"{r['plain_useful_positions_per_s']:>12.1f}"
                    f"{r['plain_wasted_fraction']:>7.2f}{r['autoreset_gain']:>6.2f}"
                )
            print(line, flush=True)
    write_report(args.out, {**device_description(), "results": rows})
