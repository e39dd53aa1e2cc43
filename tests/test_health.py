"""Run health: the `make train` recipe keeps its heads alive, and dead heads are reported."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
from helpers import ROOT, compile_optimised

import games
from azjax import health
from azjax.config import load_config
from azjax.network import NetworkConfig, init_params, make_network
from azjax.train import _Session
from azjax.trainer import make_trainer

MAKE_TRAIN = ROOT / "configs" / "chain_reaction.yaml"  # the Makefile's default CONFIG
# With the heads that went dark (2 units, no LayerNorm), the value output of seed 0 ends constant,
# as did that of seeds 1, 3, 4 and 5 (seed 2 kept its value head alive).
SEED = 0
ITERATIONS = 5  # the buffer reaches replay.min_size after 2; 3 iterations of 32 steps follow


def _healthy(value_std: float = 0.3, loss: float = 2.0) -> dict:
    return {
        "train/trained": True,
        "train/loss": loss,
        "train/value_std": value_std,
        "train/policy_std": 0.5,
    }


def test_monitor_names_dead_heads_and_stalled_losses():
    monitor = health.Monitor(window=3)
    for i in range(3):
        assert monitor.update(_healthy(loss=2.0 - 0.1 * i)) == []
    record = _healthy(loss=1.5)
    assert monitor.update(record) == [] and record["health/ok"] == 1

    dead = health.Monitor(window=3)
    for _ in range(3):
        record = {**_healthy(value_std=3e-9), "train/policy_std": 0.0}
        problems = dead.update(record)
    assert record["health/ok"] == 0
    assert any("value output is constant" in p for p in problems)
    assert any("policy output is the same" in p for p in problems)
    assert "the loss stopped moving" in record["health"]

    frozen = health.Monitor(window=3)
    for _ in range(3):
        problems = frozen.update(_healthy())
    assert problems == ["the loss stopped moving (at 2.0000)"]
    assert health.Monitor(window=3).update({"train/trained": False}) == []


def test_monitor_judges_full_windows_of_trained_iterations_only():
    """An iteration that trained nothing is neither judged nor counted; nothing is judged
    before `window` trained iterations; a slowly falling loss still moves."""
    monitor = health.Monitor(window=3)
    assert monitor.update(_healthy(value_std=0.0, loss=3.0)) == []
    assert monitor.update({"train/trained": False, "train/loss": 9.0}) == []
    assert monitor.update(_healthy(value_std=0.0, loss=2.0)) == []  # two: under the window
    problems = monitor.update(_healthy(value_std=0.0, loss=1.0))
    assert problems == ["value output is constant (std 0.0e+00 over a batch)"]
    for _ in range(3):  # the last window alone is judged: its head alive, its loss frozen
        problems = monitor.update(_healthy(loss=0.5))
    assert problems == ["the loss stopped moving (at 0.5000)"]

    slow = health.Monitor(window=3)
    for loss in (2.0, 1.9995, 1.999):
        record = _healthy(loss=loss)
        assert slow.update(record) == []
    assert record["health/ok"] == 1


def test_monitor_judges_the_window_on_average_at_any_loss_scale():
    """A spread judged over the window's mean (one calm batch among lively ones is no dead
    head), and a loss that stopped moving relative to its size (a loss near 1000 moving by
    1e-4 has stopped; one near 2 moving by 5e-4 has not)."""
    monitor = health.Monitor(window=3)
    for value_std in (0.3, 0.3, 1e-4):
        problems = monitor.update(_healthy(value_std=value_std, loss=2.0 + value_std))
    assert problems == []
    dead = health.Monitor(window=3)
    for value_std in (1e-4, 1e-4, 1e-3):
        problems = dead.update(_healthy(value_std=value_std, loss=2.0 + value_std))
    assert problems == ["value output is constant (std 4.0e-04 over a batch)"]
    large = health.Monitor(window=3)
    for loss in (1000.0, 1000.0001, 1000.0):
        problems = large.update(_healthy(loss=loss))
    assert problems == ["the loss stopped moving (at 1000.0000)"]


def test_training_reports_the_health_verdict_when_it_changes_only():
    """The loop writes a line when the problems found change (and when health comes back),
    not once per iteration."""
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
        record = _healthy(value_std=value_std, loss=2.0 - 0.1 * session.iteration)
        _Session.watch_health(session, record)
        assert record["elapsed_minutes"] == 1.0
    assert lines == [
        "iteration 2: value output is constant (std 0.0e+00 over a batch)",
        "iteration 5: run health ok again",  # the window's mean is back up
    ]


def test_check_network_flags_a_constant_network():
    game = games.make("tictactoe")
    network = make_network(game, NetworkConfig(blocks=1, channels=8))
    params = init_params(network, game, jax.random.key(0))
    assert health.check_network(network, params, game) == []
    value_std, policy_std = health.output_spread(network, params, game, jax.random.key(1))
    assert value_std > health.CONSTANT and policy_std > health.CONSTANT

    def dead(path, x):  # the stem's and heads' norms at zero: every output is a constant
        return jnp.zeros_like(x) if path[-2].key.startswith("LayerNorm") else x

    dead_params = jax.tree_util.tree_map_with_path(dead, params)
    problems = health.check_network(network, dead_params, game)
    assert any("value output is constant" in p for p in problems)
    assert any("policy is the same" in p for p in problems)


def test_output_spread_is_taken_over_the_positions_of_live_games():
    game = games.make("tictactoe")
    network = make_network(game, NetworkConfig(blocks=1, channels=8))
    params = init_params(network, game, jax.random.key(0))
    key = jax.random.key(2)
    states, live = health.random_positions(game, key)  # 16 plies: most games end before
    live = np.asarray(live)
    assert 0 < live.sum() < live.size
    logits, value = map(np.asarray, network.apply(params, jax.vmap(game.observe)(states)))
    value_std, policy_std = health.output_spread(network, params, game, key)
    np.testing.assert_allclose(value_std, value[live].std(), rtol=1e-4)
    np.testing.assert_allclose(policy_std, logits[live].std(axis=0).mean(), rtol=1e-4)


def test_make_train_recipe_keeps_its_value_head_alive_and_learning():
    """The default `make train` config, briefly: the value output varies over the positions and
    the value loss falls below its level at the first trained iteration."""
    config = load_config(MAKE_TRAIN, ["eval.every=0", "eval.final_num_games=0"])
    trainer = make_trainer(config)
    # Real training work: compiled optimised (level 0 runs it twice as slowly; level 2 as fast
    # as level 3, compiled in 12 s instead of 19).
    state = trainer.init(jax.random.key(SEED))
    iterate = compile_optimised(trainer.iterate, state)
    losses = []
    for _ in range(ITERATIONS):
        state, metrics = iterate(state)
        if bool(metrics["train/trained"]):
            losses.append(float(metrics["train/value_loss"]))
    assert len(losses) >= 3, f"only {len(losses)} iterations trained"
    value_std, _ = health.output_spread(
        trainer.network, state.params, trainer.game, jax.random.key(SEED)
    )
    assert value_std > 0.01, f"value output constant (std {value_std:.1e})"
    late = np.mean(losses[-2:])
    assert late < losses[0] - 0.01, f"value losses {np.round(losses, 3)}"
