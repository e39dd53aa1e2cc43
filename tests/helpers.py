"""Test helpers shared by the test modules: the repository's root and its scripts as modules, a
tiny training run, random trajectories, perft, OpenSpiel replay, an agent that looks its moves
up."""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import shutil
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np

from azjax.agents import Agent
from azjax.referees import replay
from games.core import Game

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_script(name: str) -> types.ModuleType:
    """scripts/NAME.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


# A training run small enough for the shared CPU, as overrides for any config (later ones win):
# every iteration plays 8 whole games of Tic-Tac-Toe and trains.
TINY = [
    "network.blocks=0",
    "network.channels=8",
    "search.num_simulations=4",
    "search.max_num_considered_actions=4",
    "selfplay.batch_size=8",
    "selfplay.chunk_moves=9",
    "selfplay.full_search_prob=1.0",
    "replay.capacity=512",
    "replay.min_size=16",
    "train.batch_size=32",
    "train.steps_per_iteration=4",
    "train.iterations=2",
    "optim.learning_rate=0.01",
    "optim.warmup_steps=0",
    "eval.every=0",
    "eval.num_games=4",
    "eval.final_num_games=0",
    "eval.opponents=[random]",
    "checkpoint.every=1",
]


def compile_optimised(fn, *args):
    """`fn` (jitted, or jitted here) compiled for `args` at XLA's optimisation level 2, for
    tests whose programs run long: the suite compiles at level 0 (tests/conftest.py), whose
    programs run several times slower than the compile time it saves."""
    lowered = (fn if hasattr(fn, "lower") else jax.jit(fn)).lower(*args)
    return lowered.compile(compiler_options={"xla_backend_optimization_level": 2})


def uniform_evaluator(params, states, key):
    """Uniform prior, value 0: the search alone must find the tactics."""
    del params, key
    batch, num_actions = states.legal_action_mask.shape
    return jnp.zeros((batch, num_actions)), jnp.zeros(batch)


def random_legal_action(key: jax.Array, mask: jax.Array) -> jax.Array:
    """A uniformly random legal action (0 when none is legal)."""
    logits = jnp.where(mask, 0.0, -jnp.inf)
    return jnp.where(mask.any(), jax.random.categorical(key, logits), 0).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def random_trajectories(game: Game, key: jax.Array, batch: int, length: int):
    """`batch` random games of `length` moves (finished games stay finished).

    Returns (actions [T, B], states with leading [T + 1, B]).
    """

    def one_step(states, key):
        keys = jax.random.split(key, batch)
        actions = jax.vmap(random_legal_action)(keys, states.legal_action_mask)
        nxt = jax.vmap(game.step)(states, actions)
        return nxt, (actions, nxt)

    init_key, play_key = jax.random.split(key)
    first = jax.vmap(game.init)(jax.random.split(init_key, batch))
    _, (actions, states) = jax.lax.scan(one_step, first, jax.random.split(play_key, length))
    states = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, states)
    return actions, states


def live_positions(game: Game, key: jax.Array, batch: int, length: int):
    """The live (not terminated) States along `batch` random games of `length` moves, as one
    flat batch [N]."""
    _, states = random_trajectories(game, key, batch, length)
    flat = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:]), states)
    return index(flat, np.flatnonzero(~flat.terminated))


def heuristics(game: Game, states) -> np.ndarray:
    """float [N, 2]: `game.heuristic` of a flat batch of States from each player's view."""
    of = jax.jit(jax.vmap(jax.vmap(game.heuristic, in_axes=(None, 0)), in_axes=(0, None)))
    return np.asarray(of(states, jnp.arange(2, dtype=jnp.int32)))


def index(tree, *idx):
    """Index every leaf of a pytree."""
    return jax.tree.map(lambda x: x[idx], tree)


def perft(game: Game, depth: int, chunk: int = 1 << 15) -> list[int]:
    """Leaf counts of the move tree for depths 1..depth (finished games are not expanded)."""

    @jax.jit
    def expand(states):
        n = states.current_player.shape[0]
        actions = jnp.tile(jnp.arange(game.num_actions, dtype=jnp.int32), n)
        parents = jax.tree.map(lambda x: jnp.repeat(x, game.num_actions, axis=0), states)
        keep = parents.legal_action_mask[jnp.arange(actions.shape[0]), actions]
        keep &= ~parents.terminated
        return jax.vmap(game.step)(parents, actions), keep

    frontier = jax.tree.map(lambda x: np.asarray(x)[None], game.init(jax.random.key(0)))
    counts = []
    for _ in range(depth):
        children = []
        total = frontier.current_player.shape[0]
        for start in range(0, total, chunk):
            part = jax.tree.map(lambda x, s=start: x[s : s + chunk], frontier)
            n = part.current_player.shape[0]
            padded = jax.tree.map(
                lambda x, n=n: np.concatenate([x, np.repeat(x[:1], chunk - n, 0)]), part
            )
            kids, keep = expand(padded)
            keep = np.asarray(keep)[: n * game.num_actions]
            children.append(jax.tree.map(lambda x, k=keep: np.asarray(x)[: len(k)][k], kids))
        frontier = jax.tree.map(lambda *xs: np.concatenate(xs), *children)
        counts.append(int(frontier.current_player.shape[0]))
    return counts


def openspiel_perft(spiel_game, depth: int) -> list[int]:
    """The same leaf counts from OpenSpiel, by plain recursion."""
    counts = [0] * depth

    def walk(state, d):
        if d == depth or state.is_terminal():
            return
        for action in state.legal_actions():
            counts[d] += 1
            walk(state.child(action), d + 1)

    walk(spiel_game.new_initial_state(), 0)
    return counts


def compare_with_openspiel(game: Game, spiel_game, batch: int, length: int, seed: int = 0) -> int:
    """Replay `batch` random games of ours in OpenSpiel and compare every step.

    Compares legal masks, player to move, termination and (at the end) returns. Returns the
    number of transitions compared.
    """
    actions, states = random_trajectories(game, jax.random.key(seed), batch, length)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    compared = 0
    for b in range(batch):
        ref = spiel_game.new_initial_state()
        returns = np.zeros(2)
        for t in range(length + 1):
            ours = index(states, t, b)
            where = f"game {b}, ply {t}, history {ref.history()}"
            returns += ours.rewards
            assert bool(ours.terminated) == ref.is_terminal(), where
            if ref.is_terminal():
                np.testing.assert_allclose(returns, ref.returns(), err_msg=where)
                break
            assert int(ours.current_player) == ref.current_player(), where
            mask = np.zeros(game.num_actions, bool)
            mask[ref.legal_actions()] = True
            np.testing.assert_array_equal(ours.legal_action_mask, mask, err_msg=where)
            assert t < length, f"game {b} did not finish in {length} plies"
            ref.apply_action(int(actions[t, b]))
            compared += 1
    return compared


def write_tiny_run(workdir, steps=(1, 2), game: str = "tictactoe") -> None:
    """A tiny run of `game` (Tic-Tac-Toe by default) in `workdir`: one checkpoint per step, for
    agent and server tests."""
    from azjax.checkpoint import Checkpointer
    from azjax.config import Config, GameConfig
    from azjax.network import NetworkConfig, init_params, make_network
    from azjax.search import SearchConfig

    config = Config(
        game=GameConfig(game),
        network=NetworkConfig(blocks=0, channels=4),
        search=SearchConfig(num_simulations=4, max_num_considered_actions=4),
    )
    game = config.game.make()
    network = make_network(game, config.network)
    saver = Checkpointer(workdir, keep=3)
    for step in steps:
        params = init_params(network, game, jax.random.key(step))
        saver.save(step, params, {"step": jnp.int32(step)}, config)
    saver.close()


@functools.cache
def stop_after_first_iteration(workdir: pathlib.Path) -> None:
    """Leave a finished run of two iterations as if it had stopped after the first: checkpoint 2
    and its record gone."""
    shutil.rmtree(workdir / "checkpoints" / "2")
    metrics = workdir / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines(True)[0])


def _oracle_fn(game, table_obs: bytes, shape: tuple, picks: tuple):
    table = jnp.asarray(np.frombuffer(table_obs, np.float32).reshape(shape))
    picks = jnp.asarray(picks, jnp.int32)

    def fn(params, state, key):
        del params, key
        same = jnp.all(table == game.observe(state), axis=(1, 2, 3))
        return picks[jnp.argmax(same)]

    return fn


def lookup_agent(game, positions, choose) -> Agent:
    """An agent that recognises each position of the set and plays `choose(position)`."""
    obs = np.asarray(jax.vmap(game.observe)(replay(game, positions)), np.float32)
    picks = tuple(choose(p) for p in positions)
    return Agent(fn=_oracle_fn(game, obs.tobytes(), obs.shape, picks), name="lookup")
