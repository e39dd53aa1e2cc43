"""Checkpoints: exact round trip, keep-last-K, inference loading, refusals."""

from __future__ import annotations

import json
import logging
import pathlib
import re
import subprocess
import sys

import jax
import pytest
from helpers import TINY
from test_train import TICTACTOE, assert_trees_equal

from azjax.checkpoint import Checkpointer, CheckpointError, list_steps, load_for_inference
from azjax.config import load_config
from azjax.train import train_and_evaluate
from azjax.trainer import make_trainer

pytestmark = pytest.mark.xdist_group("train")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A workdir with checkpoints 1..3 of a tiny (untrained) Tic-Tac-Toe state."""
    config = load_config(TICTACTOE, [*TINY, "checkpoint.keep=2"])
    trainer = make_trainer(config)
    workdir = tmp_path_factory.mktemp("ckpt")
    checkpointer = Checkpointer(workdir, config.checkpoint.keep)
    states = []
    for i in range(1, 4):
        state = trainer.init(jax.random.key(i))
        checkpointer.save(i, state.params, state.replace(params=None), config)
        states.append(state)
    checkpointer.close()
    return config, trainer, workdir, states


def test_restore_returns_exactly_what_was_saved_of_the_newest_k(saved):
    config, trainer, workdir, states = saved
    assert list_steps(workdir) == [2, 3] and list_steps(workdir / "nothing-here") == []
    checkpointer = Checkpointer(workdir, 2)
    iteration, params, state = checkpointer.restore(
        config, trainer.abstract.params, trainer.abstract.replace(params=None)
    )
    checkpointer.close()
    assert iteration == 3
    assert_trees_equal(state.replace(params=params), states[-1])


def test_load_for_inference(saved, caplog):
    config, _, workdir, states = saved
    with caplog.at_level(logging.INFO):
        loaded_config, params = load_for_inference(str(workdir))
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert loaded_config == config
    assert_trees_equal(params, states[2].params)
    _, params = load_for_inference(str(workdir), step=2)
    assert_trees_equal(params, states[1].params)
    with pytest.raises(CheckpointError, match=r"no checkpoint 1 .*available: 2, 3"):
        load_for_inference(str(workdir), step=1)
    with pytest.raises(ValueError, match="no checkpoint in"):
        load_for_inference(str(workdir / "missing"))


ARRAY = r"\['params'\]\['params'\]\['Dense_0'\]\['kernel'\]: checkpoint float32\[72, 9\]"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        # every shape setting that differs, in the config's order
        (
            ["network={blocks: 1, channels: 16}"],
            re.escape("network.blocks: checkpoint 0, config 1; network.channels: checkpoint 8, "),
        ),
        (["replay.capacity=1024"], "replay.capacity"),
        (["selfplay.batch_size=16"], "selfplay.batch_size"),
        # the heads' width is no shape key: the saved arrays' signature tells the runs apart
        (["network.head_channels=4"], ARRAY + r", config float32\[36, 9\]"),
        (
            ["game.name=connect4", "search.max_num_considered_actions=7"],
            r'game.name: checkpoint "tictactoe", config "connect4"\. Use',
        ),
    ],
)
def test_a_checkpoint_of_another_run_is_refused_naming_what_differs(saved, overrides, named):
    _, _, workdir, _ = saved
    config = load_config(TICTACTOE, [*TINY, *overrides, "train.iterations=9"])
    with pytest.raises(CheckpointError, match=f"different run: {named}"):
        train_and_evaluate(config, workdir, progress=False)
    assert list_steps(workdir) == [2, 3]


def test_damaged_checkpoint_is_reported_not_replaced(saved, tmp_path):
    config, _, _, states = saved
    checkpointer = Checkpointer(tmp_path, 3)
    state = states[0]
    checkpointer.save(1, state.params, state.replace(params=None), config)
    checkpointer.close()
    files = sorted(p for p in (tmp_path / "checkpoints" / "1" / "state").rglob("*") if p.is_file())
    for path in files:  # damage every array file of the state
        if path.stat().st_size > 64:
            path.write_bytes(b"\0" * path.stat().st_size)
    with pytest.raises(CheckpointError, match="damaged: cannot read its state") as error:
        train_and_evaluate(config, tmp_path, progress=False)
    assert list_steps(tmp_path) == [1]
    named = re.search(r"its state \((.+?); ", str(error.value)).group(1)  # the damaged file
    assert pathlib.Path(named).exists() and "/1/state" in named, error.value

    # Damaged array data: TensorStore's error (dozens of lines of spec) is told in one line
    # naming the file, and the reads it leaves in flight make no noise.
    for path in (tmp_path / "checkpoints" / "1" / "params").rglob("d/*"):
        path.write_bytes(b"\0" * path.stat().st_size)
    with pytest.raises(CheckpointError) as error:
        load_for_inference(str(tmp_path))
    message = str(error.value)
    assert "\n" not in message and len(message) < 500 and "tensorstore_spec" not in message
    assert (
        f"checkpoint 1 in {tmp_path / 'checkpoints'} is damaged: cannot read its params" in message
    )
    assert str(tmp_path / "checkpoints" / "1" / "params") in message
    assert message.endswith("Move it away to use the newest one before it.")  # load or resume
    code = "import sys\nfrom azjax.checkpoint import load_for_inference as f\n"
    code += "try: f(sys.argv[1])\nexcept ValueError: pass"
    command = [sys.executable, "-c", code, str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "Event loop is closed" not in run.stderr, run.stderr

    meta = tmp_path / "checkpoints" / "1" / "meta"
    for path in meta.rglob("*"):
        if path.is_file():
            path.write_text("{not json")
    with pytest.raises(CheckpointError, match="damaged"):
        load_for_inference(str(tmp_path))
    (meta / "metadata").write_text("{}")  # JSON, without the iteration and the config
    with pytest.raises(CheckpointError, match="is damaged: cannot read its meta"):
        load_for_inference(str(tmp_path))
    (meta / "metadata").write_text(json.dumps({"iteration": 1, "config": {"game": {"name": "x"}}}))
    with pytest.raises(CheckpointError) as error:  # read, but not a config this azjax runs
        load_for_inference(str(tmp_path))
    assert str(error.value).startswith(f"checkpoint 1 in {tmp_path} has an unusable config: game.")
    assert pathlib.Path(tmp_path / "checkpoints" / "1").is_dir()
