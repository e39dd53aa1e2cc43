"""Arena gating: self-play plays the best parameters; the latest replace them only by winning."""

from __future__ import annotations

import contextlib
import dataclasses
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TINY, stop_after_first_iteration
from test_train import TICTACTOE, assert_trees_equal

from azjax import arena
from azjax.checkpoint import Checkpointer
from azjax.config import ConfigError, load_config
from azjax.train import train_and_evaluate
from azjax.trainer import gate, make_trainer, restore

pytestmark = pytest.mark.xdist_group("train")
GATED = [*TINY, "gate.every=1", "gate.games=4"]


@pytest.fixture(scope="module")
def trainer():
    return make_trainer(load_config(TICTACTOE, GATED))


def test_selfplay_plays_the_best_parameters_not_the_latest(trainer):
    state = trainer.init(jax.random.key(0))
    assert_trees_equal(state.best, state.params)
    # Two states that differ only in their latest parameters play the same self-play games.
    other = state.replace(
        params=jax.tree.map(lambda x: x + 1.0, state.params),
        best=jax.tree.map(jnp.copy, state.best),
    )
    state = jax.tree.map(jnp.copy, state)
    a, _ = trainer.iterate(state)
    b, _ = trainer.iterate(other)
    assert_trees_equal(a.buffer, b.buffer)
    assert_trees_equal(a.carry, b.carry)
    # Training moved the latest parameters; the best stay until a gate promotes them.
    assert_trees_equal(a.best, b.best)
    moved = jax.tree.map(lambda x, y: float(jnp.abs(x - y).max()), a.params, a.best)
    assert max(jax.tree.leaves(moved)) > 0


def test_gate_promotes_only_a_candidate_that_scores_the_threshold(trainer):
    state, _ = trainer.iterate(trainer.init(jax.random.key(1)))
    best = jax.tree.map(np.asarray, state.best)

    def with_threshold(threshold: float):
        config = trainer.config
        gated = dataclasses.replace(config.gate, threshold=threshold)
        return dataclasses.replace(trainer, config=dataclasses.replace(config, gate=gated))

    kept, record = gate(with_threshold(1.0), state, jax.random.key(2))
    if record["gate/score"] < 1.0:  # identical searchers rarely sweep; then nothing changes
        assert record["gate/promoted"] == 0
        assert_trees_equal(kept.best, best)
    promoted, record = gate(with_threshold(0.0), state, jax.random.key(2))
    assert record["gate/promoted"] == 1 and 0.0 <= record["gate/score"] <= 1.0
    assert_trees_equal(promoted.best, promoted.params)


def test_the_gate_plays_the_latest_parameters_against_the_best(trainer, monkeypatch):
    state = trainer.init(jax.random.key(3))
    state = state.replace(params=jax.tree.map(lambda x: x + 1.0, state.params))
    played = {}

    def match(game, a, b, num_games, key, opening_moves=0):
        played.update(a=a.params, b=b.params)
        return arena.MatchResult(num_games, 0, 0, (num_games // 2, 0, 0), (num_games // 2, 0, 0))

    monkeypatch.setattr(arena, "match", match)
    promoted, record = gate(trainer, state, jax.random.key(4))
    assert record == {"gate/score": 1.0, "gate/promoted": 1}
    assert_trees_equal(played["a"], state.params)  # the candidate: the latest
    assert_trees_equal(played["b"], state.best)
    assert_trees_equal(promoted.best, state.params)


def test_gated_run_logs_the_gate_and_resumes(trainer, tmp_path):
    config = trainer.config  # two iterations, a checkpoint after each
    with contextlib.redirect_stderr(io.StringIO()) as bars:
        out = train_and_evaluate(config, tmp_path, progress=True)
    assert out["iteration"] == 2 and "gate/score" in out and out["gate/promoted"] in (0, 1)
    assert f"gate: {config.gate.games} games against the best]" in bars.getvalue()  # the wait
    # As if stopped after iteration 1: the run resumes there and reaches the same state, the
    # best parameters included.
    with Checkpointer(tmp_path, 3) as checkpointer:
        _, straight = restore(trainer, checkpointer)
    stop_after_first_iteration(tmp_path)
    out = train_and_evaluate(config, tmp_path, progress=False)
    assert out["iteration"] == 2 and out["start_iteration"] == 1 and "gate/score" in out
    with Checkpointer(tmp_path, 3) as checkpointer:
        _, resumed = restore(trainer, checkpointer)
    assert_trees_equal(resumed, straight)


def test_gate_config_refuses_bad_values():
    with pytest.raises(ConfigError, match=r"gate.threshold must be in \[0, 1\], got 1.5"):
        load_config(TICTACTOE, ["gate.threshold=1.5"])
    with pytest.raises(ConfigError, match=r"gate\.games must be even and >= 2 .*, got 1"):
        load_config(TICTACTOE, ["gate.games=1"])


def test_gate_games_must_be_even_so_both_play_each_colour_equally():
    with pytest.raises(
        ConfigError, match=r"gate\.games must be even and >= 2 \(equal colours\), got 5"
    ):
        load_config(TICTACTOE, ["gate.games=5"])
