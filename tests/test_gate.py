"""Arena gating: self-play plays the best parameters; the latest replace them only by winning."""

from __future__ import annotations

import contextlib
import dataclasses
import io

import jax
import jax.numpy as jnp
import pytest
from helpers import TINY, stop_after_first_iteration
from test_train import TICTACTOE, assert_trees_equal

from azjax import arena
from azjax.checkpoint import Checkpointer
from azjax.config import load_config
from azjax.resume import from_checkpoint
from azjax.train import gate, train_and_evaluate
from azjax.trainer import make_trainer

pytestmark = pytest.mark.xdist_group("train")
GATED = [*TINY, "gate.every=1", "gate.games=2"]


@pytest.fixture(scope="module")
def trainer():
    return make_trainer(load_config(TICTACTOE, GATED))


def test_selfplay_plays_the_best_parameters_not_the_latest(trainer):
    state = trainer.init(jax.random.key(0))
    assert_trees_equal(state.best, state.params)
    # States differing only in their latest parameters play the same self-play games.
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


@pytest.mark.parametrize(("wins", "threshold", "promoted"), [(2, 0.5, 1), (2, 0.55, 0)])
def test_the_latest_replace_the_best_when_they_score_the_threshold(
    trainer, monkeypatch, wins, threshold, promoted
):
    """The gate plays the latest parameters (agent A) against the best, promoting them at
    `gate.threshold`."""
    state = trainer.init(jax.random.key(3))
    state = state.replace(params=jax.tree.map(lambda x: x + 1.0, state.params))
    played = {}

    def match(game, a, b, num_games, key, opening_moves=0):
        played.update(a=a.params, b=b.params, games=num_games, openings=opening_moves)
        return arena.MatchResult(wins, 0, 4 - wins, (wins, 0, 0), (0, 0, 0))

    monkeypatch.setattr(arena, "match", match)
    config = dataclasses.replace(
        trainer.config, gate=dataclasses.replace(trainer.config.gate, threshold=threshold)
    )
    after, record = gate(dataclasses.replace(trainer, config=config), state, jax.random.key(4))
    assert record == {"gate/score": 0.5, "gate/promoted": promoted}
    assert_trees_equal(played["a"], state.params)
    assert_trees_equal(played["b"], state.best)
    assert (played["games"], played["openings"]) == (2, config.gate.opening_moves)
    assert_trees_equal(after.best, state.params if promoted else state.best)


def test_gated_run_logs_the_gate_and_resumes(trainer, tmp_path):
    config = trainer.config  # two iterations, a checkpoint after each
    with contextlib.redirect_stderr(io.StringIO()) as bars:
        out = train_and_evaluate(config, tmp_path, progress=True)
    assert out["iteration"] == 2 and "gate/score" in out and out["gate/promoted"] in (0, 1)
    assert f"gate: {config.gate.games} games against the best]" in bars.getvalue()  # the wait
    # Stopped after iteration 1, it resumes to the same state, the best parameters included.
    with Checkpointer(tmp_path, 3) as checkpointer:
        _, straight = from_checkpoint(trainer, checkpointer)
    stop_after_first_iteration(tmp_path)
    out = train_and_evaluate(config, tmp_path, progress=False)
    assert out["iteration"] == 2 and out["start_iteration"] == 1 and "gate/score" in out
    with Checkpointer(tmp_path, 3) as checkpointer:
        _, resumed = from_checkpoint(trainer, checkpointer)
    assert_trees_equal(resumed, straight)
