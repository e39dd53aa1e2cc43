"""Run health: dead heads and stalled losses are reported, once per change; the `make train`
recipe keeps its value head alive."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, compile_optimised

import games
from azjax import health
from azjax.config import load_config
from azjax.network import NetworkConfig, init_params, make_network
from azjax.train import _Session
from azjax.trainer import make_trainer


def _record(value_std: float = 0.3, loss: float = 2.0, policy_std: float = 0.5) -> dict:
    return {
        "train/trained": True,
        "train/loss": loss,
        "train/value_std": value_std,
        "train/policy_std": policy_std,
    }


DEAD = "value output is constant (std {} over a batch)"
STALLED = "the loss stopped moving (at {})"


@pytest.mark.parametrize(
    ("records", "problems"),
    [
        ([_record(loss=2.0 - 0.1 * i) for i in range(4)], []),
        ([_record(loss=loss) for loss in (2.0, 1.9995, 1.999)], []),  # slow, still moving
        ([_record()] * 3, [STALLED.format("2.0000")]),
        (
            [_record(loss=loss) for loss in (1000.0, 1000.0001, 1000.0)],
            [STALLED.format("1000.0000")],
        ),
        ([_record(v, 2.0 + v) for v in (0.3, 0.3, 1e-4)], []),  # one calm batch: the mean
        ([_record(v, 2.0 + v) for v in (1e-4, 1e-4, 1e-3)], [DEAD.format("4.0e-04")]),
        # untrained iterations are not judged; nothing before a full window
        ([_record(0.0, 3.0), {"train/trained": False, "train/loss": 9.0}, _record(0.0)], []),
        ([_record(0.0, 3.0), _record(0.0), _record(0.0, 1.0)], [DEAD.format("0.0e+00")]),
        (
            [_record(0.0, 3.0 - i, policy_std=0.0) for i in range(3)],
            [DEAD.format("0.0e+00"), "policy output is the same for every position (std 0.0e+00)"],
        ),
    ],
)
def test_monitor_judges_full_windows_of_trained_iterations(records, problems):
    monitor = health.Monitor(window=3)
    for record in records:
        found = monitor.update(record)
    assert found == problems
    assert records[-1].get("health/ok", 1) == (not problems)


def test_training_reports_the_health_verdict_when_it_changes_only():
    lines: list[str] = []
    session = SimpleNamespace(
        monitor=health.Monitor(window=2),
        problems=[],
        iteration=0,
        bar=SimpleNamespace(write=lines.append),
        elapsed_minutes=lambda: 1.0,
    )
    for value_std in (0.0, 0.0, 0.0, 0.0, 0.3, 0.3, 0.3):
        session.iteration += 1
        record = _record(value_std=value_std, loss=2.0 - 0.1 * session.iteration)
        _Session.watch_health(session, record)
        assert record["elapsed_minutes"] == 1.0
    assert lines == [
        "iteration 2: value output is constant (std 0.0e+00 over a batch)",
        "iteration 5: run health ok again",  # the window's mean is back up
    ]


def test_check_network_judges_the_outputs_on_live_positions():
    game = games.make("tictactoe")
    network = make_network(game, NetworkConfig(blocks=1, channels=8))
    params = init_params(network, game, jax.random.key(0))
    assert health.check_network(network, params, game) == []
    key = jax.random.key(2)
    states, live = health.random_positions(game, key)  # 16 plies: most games end before
    live = np.asarray(live)
    assert 0 < live.sum() < live.size
    logits, value = map(np.asarray, network.apply(params, jax.vmap(game.observe)(states)))
    value_std, policy_std = health.output_spread(network, params, game, key)
    np.testing.assert_allclose(value_std, value[live].std(), rtol=1e-4)
    np.testing.assert_allclose(policy_std, logits[live].std(axis=0).mean(), rtol=1e-4)

    def dead(path, x):  # the stem's and heads' norms at zero: every output is a constant
        return jnp.zeros_like(x) if path[-2].key.startswith("LayerNorm") else x

    problems = health.check_network(network, jax.tree_util.tree_map_with_path(dead, params), game)
    assert any("value output is constant" in p for p in problems)
    assert any("policy is the same" in p for p in problems)


def test_make_train_recipe_keeps_its_value_head_alive_and_learning():
    """`make train`'s config: the value output varies and its loss falls."""
    config = load_config(
        ROOT / "configs" / "chain_reaction.yaml", ["eval.every=0", "eval.final_num_games=0"]
    )
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(0))
    iterate = compile_optimised(trainer.iterate, state)  # real training work: optimised
    losses = []
    for _ in range(5):
        state, metrics = iterate(state)
        if bool(metrics["train/trained"]):
            losses.append(float(metrics["train/value_loss"]))
    assert len(losses) >= 3, f"only {len(losses)} iterations trained"
    value_std, _ = health.output_spread(
        trainer.network, state.params, trainer.game, jax.random.key(0)
    )
    assert value_std > 0.01, f"value output constant (std {value_std:.1e})"
    assert np.mean(losses[-2:]) < losses[0] - 0.01, f"value losses {np.round(losses, 3)}"
