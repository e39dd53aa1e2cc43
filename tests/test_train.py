"""The training loop end to end on Tic-Tac-Toe with a tiny net: learn, checkpoint, resume."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, TINY, stop_after_first_iteration

from azjax import parallel, train
from azjax.checkpoint import Checkpointer, list_steps, load_for_inference, read_config
from azjax.config import ConfigError, load_config
from azjax.loss import loss_fn
from azjax.replay import make_sampler
from azjax.resume import from_checkpoint, from_snapshot, run_snapshot, start
from azjax.selfplay import Examples
from azjax.train import train_and_evaluate
from azjax.trainer import make_trainer

TICTACTOE = ROOT / "configs" / "tictactoe.yaml"

pytestmark = pytest.mark.xdist_group("train")


def _raw(x):
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x


def assert_trees_equal(a, b):
    a, b = jax.tree.map(_raw, a), jax.tree.map(_raw, b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def run_uninterrupted(config, iterations: int):
    """(initial params, state after `iterations`) computed in this process, without files."""
    trainer = make_trainer(config)
    state = trainer.init(jax.random.key(config.train.seed))
    initial = jax.tree.map(jnp.copy, state.params)  # iterate donates the state
    for _ in range(iterations):
        state, _ = trainer.iterate(state)
    return trainer, initial, state


def restore(trainer, workdir, step=None):
    """(iteration, state) of checkpoint `step` (the newest when None) of the run in `workdir`."""
    with Checkpointer(workdir, 3, owner=False) as checkpointer:
        return from_checkpoint(trainer, checkpointer, step)


def records(workdir):
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def two_iterations(tmp_path_factory):
    """(config, workdir, final result, (stdout, stderr)) of a tiny run of two iterations (half
    the moves searched fast) and a final evaluation, with its progress bars."""
    workdir = tmp_path_factory.mktemp("two_iterations")
    fast = ["selfplay.full_search_prob=0.5", "selfplay.fast_simulations=1"]
    config = load_config(TICTACTOE, [*TINY, *fast, "eval.every=1", "eval.final_num_games=4"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        final = train_and_evaluate(config, workdir, progress=True)
    return config, workdir, final, (out.getvalue(), err.getvalue())


def test_two_iterations_show_what_they_do(two_iterations):
    """The wait before the first iteration, a bar for the loop, one for the final evaluation."""
    config, _, _, (out, err) = two_iterations
    cache = jax.config.jax_compilation_cache_dir
    assert out.startswith("compiling: the first start of a config takes longest"), out
    assert f"JAX's cache in {cache} speeds up" in out or not cache, out
    assert "tictactoe: 100%" in err and " 2/2 [" in err, err
    opponents = ", ".join(config.eval.opponents)  # while the first iteration's evaluation plays
    assert f"evaluating: {config.eval.num_games} games against {opponents}]" in err, err
    games = config.eval.final_num_games * len(config.eval.opponents)
    assert "final evaluation: 100%" in err and f" {games}/{games} [" in err, err


def test_two_iterations_end_to_end(two_iterations):
    config, tmp_path, final, _ = two_iterations
    log = records(tmp_path)
    assert [r["iteration"] for r in log] == [1, 2, 2] and log[-1]["final"]
    # Evaluated every iteration but the last, whose evaluation is the final one.
    assert ["eval/random/score" in r for r in log] == [True, False, True]
    minutes = [r["elapsed_minutes"] for r in log]
    assert 0 < minutes[0] <= minutes[1] <= minutes[2]
    assert log[0]["train/trained"] and log[1]["train/step"] == 8
    # The learning rate of each iteration's step: decaying from the peak (no warm-up here).
    rates = [r["train/learning_rate"] for r in log[:2]]
    assert config.optim.learning_rate > rates[0] > rates[1] > 0
    assert log[1]["replay/size"] == log[0]["replay/added"] + log[1]["replay/added"]
    assert final["eval/random/wins"] + final["eval/random/draws"] + final["eval/random/losses"] == 4
    # The rates: each move searches every slot fully (the root and a leaf per simulation) or fast.
    record, moves, batch = log[0], config.selfplay.chunk_moves, config.selfplay.batch_size
    assert record["moves_per_second"] * record["seconds"] == pytest.approx(moves * batch)
    added = record["positions_per_second"] * record["seconds"]
    assert added == pytest.approx(record["replay/added"])
    full = round(record["selfplay/full_search_fraction"] * moves)
    assert 0 < full < moves
    evaluations = batch * (full * (1 + config.search.num_simulations) + (moves - full) * 2)
    assert record["evaluations_per_second"] * record["seconds"] == pytest.approx(evaluations)
    assert list_steps(tmp_path) == [1, 2]
    assert any((tmp_path / "tensorboard").iterdir())
    assert load_config(tmp_path / "config.yaml") == config

    # The checkpoint holds exactly the state an uninterrupted computation reaches.
    trainer, initial, state = run_uninterrupted(config, 2)
    iteration, restored = restore(trainer, tmp_path)
    assert iteration == 2
    assert_trees_equal(restored, state)
    first = restore(trainer, tmp_path, 1)[1]
    keys = [jax.random.key_data(s.key) for s in (first, state)]
    assert not np.array_equal(*keys)  # each iteration draws from a new key

    # The loss fell: the trained parameters fit a fixed batch of the buffer better.
    batch = jax.jit(make_sampler(trainer.game, 256))(state.buffer, jax.random.key(5))
    loss = jax.jit(lambda params: loss_fn(trainer.network, params, batch, config.optim)[1])
    before, after = loss(initial), loss(state.params)
    assert after["loss"] < before["loss"]
    assert after["policy_loss"] < before["policy_loss"]


def test_a_run_starts_from_a_model_file_given_in_train_init_from(two_iterations, tmp_path, capsys):
    from azjax import export

    model, run = tmp_path / "a.azjax", tmp_path / "b"
    export.export_run(two_iterations[1], model)
    overrides = [*TINY, "replay.min_size=500", f"train.init_from={model}"]
    train_and_evaluate(load_config(TICTACTOE, overrides), run, progress=False)
    # Below replay.min_size: no gradient step, no losses logged, and the checkpoint holds the
    # model's parameters (not random ones).
    for record in records(run):
        assert record["replay/size"] < 500 and record["train/step"] == 0
        logged = {k for k in record if k.startswith("train/")}
        assert logged == {"train/trained", "train/step", "train/learning_rate"}
    _, params, _ = export.load_model(model)
    assert_trees_equal(load_for_inference(str(run))[1], params)
    fresh = make_trainer(load_config(TICTACTOE, TINY)).init(jax.random.key(0))
    assert not np.allclose(*(jax.tree.leaves(p)[0] for p in (fresh.params, params)))
    # Another network shape, another game, or no such model: refused, naming the value.
    for bad, words in (
        (["network.channels=4"], "a 0x8 net of tictactoe"),
        (["network.blocks=1"], "expected a 1x8"),
        ([f"train.init_from={tmp_path / 'none.azjax'}"], "none.azjax"),
        (["train.init_from=zoo:nope"], "no zoo model 'nope'"),
    ):
        config = load_config(TICTACTOE, [*overrides, *bad])
        with pytest.raises(ConfigError, match=f"train.init_from=.*{words}"):
            start(config)
    config = load_config(ROOT / "configs" / "connect4.yaml", [*TINY, f"train.init_from={model}"])
    with pytest.raises(ConfigError, match=r"net of tictactoe; expected a .* net of connect4 "):
        start(config)
    # Resumed with another model (as if stopped after iteration 1): the run goes on from its
    # checkpoint and keeps, in its config.yaml and checkpoints, the model it started from,
    # without reading it (gone meanwhile, as from a fresh machine). A setting changed on the
    # resume is named.
    stop_after_first_iteration(run)
    capsys.readouterr()
    gone = model.rename(tmp_path / "moved.azjax")
    resumed = [*TINY, "replay.min_size=500", "train.init_from=zoo:nope", "checkpoint.keep=4"]
    train_and_evaluate(load_config(TICTACTOE, resumed), run, progress=False)
    gone.rename(model)
    out, err = capsys.readouterr()
    assert f"train.init_from='zoo:nope' is ignored: the run in {run}" in err
    kept = read_config(run, 1).checkpoint.keep
    assert f"resuming from iteration 1 in {run}\n" in out
    assert f"settings changed since then: checkpoint.keep {kept} -> 4\n" in out
    assert load_config(run / "config.yaml").train.init_from == str(model)
    assert read_config(run, 2).train.init_from == str(model)


# Five iterations on a warming-up learning rate: the run `five_iterations` trains straight in
# this process, the one SIGKILLed and resumed, and the one continued from a model file.
FIVE = [*TINY, "train.iterations=5", "optim.warmup_steps=8", "checkpoint.keep=5"]


@pytest.fixture(scope="module")
def five_iterations(tmp_path_factory):
    """The workdir of an uninterrupted run of FIVE."""
    workdir = tmp_path_factory.mktemp("five_iterations")
    train_and_evaluate(load_config(TICTACTOE, FIVE), workdir, progress=False)
    return workdir


def test_a_resumable_model_file_continues_its_run_on_another_machine(
    five_iterations, tmp_path, capsys
):
    from azjax import export
    from azjax.replay import replay_newest

    overrides = FIVE
    shutil.copytree(five_iterations, tmp_path / "a")
    a = records(tmp_path / "a")
    log = tmp_path / "a" / "metrics.jsonl"  # its last lines lost: the checkpoints' records fill in
    final = {"iteration": 2, "final": True, "eval/random/score": 1.0}  # a run that ended at 2
    log.write_text(log.read_text().splitlines(True)[0] + json.dumps(final) + "\n")
    piece = tmp_path / "piece.azjax"
    export.export_run(tmp_path / "a", piece, 2, snapshot=run_snapshot(tmp_path / "a", 2, 50))
    config = load_config(TICTACTOE, [*overrides, f"train.init_from={piece}", "checkpoint.keep=4"])
    first, carried, _ = start(config)
    assert [r["iteration"] for r in json.loads(carried["records"])] == [1, 2]  # no final one
    trainer = make_trainer(config)
    _, at_two = restore(make_trainer(load_config(TICTACTOE, overrides)), tmp_path / "a", 2)
    iteration, state = from_snapshot(trainer, trainer.init(jax.random.key(7), first), carried)
    assert iteration == 2 and int(state.step) == int(at_two.step) > 0
    rounded = jax.tree.map(  # moments in bfloat16, the schedule's place exact
        lambda x: x.astype(jnp.bfloat16).astype(x.dtype) if x.dtype == jnp.float32 else x,
        at_two.opt_state,
    )
    assert_trees_equal(state.opt_state, rounded)
    assert_trees_equal(state.key, at_two.key)
    kept = replay_newest(at_two.buffer, 50)
    assert len(kept.value) == 50 < int(at_two.buffer.size.sum())  # the newest 50 travel
    assert_trees_equal(replay_newest(state.buffer, 10**6), kept)
    _, params, _ = export.load_model(piece)
    assert_trees_equal(state.params, params)

    # The run goes on from iteration 3 on the same learning-rate schedule, its records before.
    train_and_evaluate(config, tmp_path / "b", progress=False)
    out = capsys.readouterr().out
    assert f"continuing the run of {piece} from iteration 2\n" in out
    kept = load_config(TICTACTOE, overrides).checkpoint.keep  # the setting changed, named
    assert f"settings changed since then: checkpoint.keep {kept} -> 4\n" in out
    b = records(tmp_path / "b")
    assert [r["iteration"] for r in b] == [1, 2, 3, 4, 5]
    assert b[:2] == a[:2]
    for key in ("train/step", "train/learning_rate"):
        assert [r[key] for r in b[2:]] == [r[key] for r in a[2:]]

    # Nothing left to train: refused, naming the value.
    with pytest.raises(ConfigError, match=r"stopped at iteration 2: set train\.iterations above"):
        start(
            load_config(TICTACTOE, [*overrides, "train.iterations=2", f"train.init_from={piece}"])
        )


def test_sigkill_then_resume_equals_uninterrupted(five_iterations, tmp_path):
    overrides = FIVE
    command = [sys.executable, "-m", "azjax.cli.train", "--config", str(TICTACTOE)]
    command += ["--workdir", str(tmp_path), "--quiet", "--cpu-devices", "1", *overrides]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # one device, as the run compared with
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while len(list_steps(tmp_path)) < 2 and process.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
        time.sleep(0.05)
    process.kill()  # SIGKILL, somewhere in iteration 3 (or while saving checkpoint 2 or 3)
    output = process.communicate()[0].decode()
    assert process.returncode == -9, output
    killed_at = list_steps(tmp_path)[-1]
    assert killed_at < 5
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 9, "train/lo')  # as if killed while writing a record

    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from iteration {killed_at}" in resumed.stdout, resumed.stdout
    assert list_steps(tmp_path)[-1] == 5
    log = records(tmp_path)
    assert [r["iteration"] for r in log] == [1, 2, 3, 4, 5]

    # The state and records of the run trained straight in this process.
    trainer = make_trainer(load_config(TICTACTOE, overrides))
    _, restored = restore(trainer, tmp_path)
    _, straight = restore(trainer, five_iterations)
    assert_trees_equal(restored, straight)
    for key in ("train/loss", "train/step", "replay/size"):
        assert [r[key] for r in log] == [r[key] for r in records(five_iterations)], key


def test_bfloat16_on_a_gpu_without_bfloat16_arithmetic_is_warned_of(tmp_path, monkeypatch, capsys):
    def gpu(kind: str, capability: str) -> SimpleNamespace:
        return SimpleNamespace(platform="gpu", device_kind=kind, compute_capability=capability)

    t4, warn = gpu("Tesla T4", "7.5"), parallel.emulation_warning
    warning = warn("bfloat16", t4)
    assert "Tesla T4" in warning and "7.5" in warning and "network.dtype=float32" in warning
    assert warn("float32", t4) is None and warn("bfloat16") is None  # this machine: a CPU
    for kind, capability in [("A100", "8.0"), ("B200", "10.0"), ("AMD MI300X", "gfx942")]:
        assert warn("bfloat16", gpu(kind, capability)) is None  # 10.0: not "1" < "8"
    # azjax-train says so at the start of a run (stopped there: nothing else is at stake).
    monkeypatch.setattr(parallel, "emulation_warning", lambda dtype: warn(dtype, t4))
    monkeypatch.setattr(train, "RunLog", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        train_and_evaluate(load_config(TICTACTOE, [*TINY, "network.dtype=bfloat16"]), tmp_path)
    assert f"warning: {warning}" in capsys.readouterr().err


def test_the_policy_loss_is_the_cross_entropy_of_fully_searched_moves():
    """Moves searched fast (mask False) give no policy target; the rest a cross-entropy."""
    config = load_config(TICTACTOE, TINY)
    trainer = make_trainer(config)
    params = trainer.init(jax.random.key(0)).params
    obs = jax.random.bernoulli(jax.random.key(1), 0.3, (4, 3, 3, 2)).astype(jnp.float32)
    good = jax.nn.one_hot(jnp.array([0, 1, 2, 3]), 9)
    mask, value = jnp.array([True, True, False, False]), jnp.array([1.0, -1, 0, 0])
    batch = Examples(obs, good, mask, value, jnp.ones(4, bool))
    noisy = batch.replace(policy=batch.policy.at[2:].set(jnp.full((2, 9), 1 / 9)))
    loss = jax.jit(lambda p, b: loss_fn(trainer.network, p, b, config.optim)[1])
    m1, m2 = loss(params, batch), loss(params, noisy)
    assert float(m1["policy_loss"]) == float(m2["policy_loss"])  # masked rows ignored
    logits, value = jax.jit(trainer.network.apply)(params, obs)
    expected = -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(2), jnp.array([0, 1])])
    np.testing.assert_allclose(m1["policy_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(m1["value_loss"], jnp.mean((value - batch.value) ** 2), rtol=1e-5)
