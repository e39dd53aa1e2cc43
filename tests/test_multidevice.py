"""Several devices, one code path: fake CPU devices in subprocesses (XLA_FLAGS must be set
before JAX starts, so each check runs in its own interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import TINY
from test_train import ROOT, TICTACTOE

from azjax import parallel

# One interpreter with 4 devices: an iteration on the mesh, a train step equal on 1 and 4
# devices, the sharded buffer, exact resume on 4, and resume on 2 and from 2.
FOUR_DEVICES = r"""
import dataclasses
import os
import pathlib
import sys

import jax
import numpy as np
import optax
from jax.sharding import PartitionSpec

from azjax import export, parallel
from azjax.checkpoint import Checkpointer
from azjax.config import load_config
from azjax.replay import make_sampler
from azjax.loss import make_train_step
from azjax.train import train_and_evaluate
from azjax.trainer import make_trainer, restore, resume, stopped_run

jax.config.update("jax_compilation_cache_dir", os.environ["AZJAX_JAX_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)  # as tests/conftest.py
devices = jax.devices()
workdir = pathlib.Path(sys.argv[1])
config = load_config(sys.argv[2], sys.argv[3:])

# Sizes the 4 devices cannot split evenly are refused, naming the key.
for key in config.split_sizes():
    section, field = key.split(".")
    odd = dataclasses.replace(getattr(config, section), **{field: 6})
    try:
        make_trainer(dataclasses.replace(config, **{section: odd}))
    except ValueError as err:
        assert f"{key}=6 must be a multiple of the number of devices (4)" in str(err), err
    else:
        raise AssertionError(f"{key}=6 on 4 devices was accepted")

def raw(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)

def leaves_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(raw(x), raw(y))

def positions(buffer):
    # The stored positions as a sorted list of (value, policy, state) rows.
    block = buffer.capacity // buffer.shards
    rows = []
    for s in range(buffer.shards):
        for i in range(int(buffer.size[s])):
            leaves = jax.tree.leaves(jax.tree.map(lambda x: x[s * block + i], buffer.stored))
            rows.append(tuple(np.asarray(x).tobytes() for x in leaves))
    return sorted(rows)

# A whole iteration on the 4-device mesh: games split over devices, parameters replicated.
trainer = make_trainer(config)
straight = trainer.init(jax.random.key(config.train.seed))
games = straight.carry.states.current_player
assert games.sharding.spec == PartitionSpec("data") and len(games.sharding.device_set) == 4
assert straight.params["params"]["Dense_0"]["kernel"].sharding.is_fully_replicated
straight, metrics = trainer.iterate(straight)
assert bool(metrics["train/trained"]), metrics

# Two train steps on the same global batch with 1 and with 4 devices (SGD, so the parameter
# change is proportional to the all-reduced gradient).
optimizer = optax.sgd(1e-2, momentum=0.9, nesterov=True)
step = make_train_step(trainer.network, optimizer, config.optim)
sample = jax.jit(make_sampler(trainer.game, 32))  # one program, not one per operation
batch = jax.device_get(sample(straight.buffer, jax.random.key(1)))
params = jax.device_get(straight.params)

def two_steps(params, opt_state, batch):  # one program (a second call would trace again)
    params, opt_state, _ = step(params, opt_state, batch)
    return step(params, opt_state, batch)

results = []
for mesh in (parallel.make_mesh(devices[:1]), parallel.make_mesh(devices)):
    rep, data = parallel.replicated(mesh), parallel.data_sharded(mesh)
    jitted = jax.jit(two_steps, in_shardings=(rep, rep, data), out_shardings=rep)
    new_params, _, out = jitted(params, optimizer.init(params), batch)
    results.append((jax.device_get(new_params), jax.device_get(out["loss"])))
(one_device, loss1), (four_devices, loss4) = results
np.testing.assert_allclose(loss1, loss4, rtol=1e-5)
for a, b in zip(jax.tree.leaves(one_device), jax.tree.leaves(four_devices), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
pairs = zip(jax.tree.leaves(one_device), jax.tree.leaves(params), strict=True)
moved = max(float(np.abs(a - b).max()) for a, b in pairs)
assert moved > 1e-4, moved

# Iteration 1 saved the way the training loop saves it, for the exact resume below.
with Checkpointer(workdir / "four", 3) as checkpointer:
    checkpointer.save(1, straight.params, straight.replace(params=None), config)
(workdir / "four" / "metrics.jsonl").write_text("")

# The buffer is split over the 4 devices: each holds a quarter of the slots.
straight, _ = trainer.iterate(straight)
value = straight.buffer.stored.value
assert value.sharding.spec == PartitionSpec("data"), value.sharding
assert {s.data.shape for s in value.addressable_shards} == {(value.shape[0] // 4,)}
assert straight.buffer.shards == 4 and min(straight.buffer.size.tolist()) > 0

# Exact resume on 4 devices: the training entry point resumes checkpoint 1 for the second
# iteration, saves it, and that checkpoint restores the straight run's state.
result = train_and_evaluate(config, workdir / "four", progress=False)
assert result["iteration"] == 2, result
with Checkpointer(workdir / "four", 3) as checkpointer:
    iteration, resumed = restore(trainer, checkpointer)
assert iteration == 2
leaves_equal(resumed, straight)

# 4 -> 2 devices: the buffer is dealt out to 2 shards, nothing lost; training goes on.
two = make_trainer(config, parallel.make_mesh(devices[:2]))
with Checkpointer(workdir / "four", 3) as checkpointer:
    iteration, moved = restore(two, checkpointer)
assert moved.buffer.shards == 2 and positions(moved.buffer) == positions(straight.buffer)
assert {s.data.shape for s in moved.buffer.stored.value.addressable_shards} == {
    (value.shape[0] // 2,)
}
leaves_equal(moved.params, straight.params)
moved, metrics = two.iterate(moved)
assert bool(metrics["train/trained"]) and np.isfinite(float(metrics["train/loss"]))

# 2 -> 4 devices through the training entry point: a 2-device checkpoint resumes here (filed
# as iteration 1, so the run is the one above and reuses its compilation).
with Checkpointer(workdir / "two", 3) as checkpointer:
    checkpointer.save(1, moved.params, moved.replace(params=None), config)
(workdir / "two" / "metrics.jsonl").write_text("")
result = train_and_evaluate(config, workdir / "two", progress=False)
assert result["iteration"] == 2 and np.isfinite(result["train/loss"]), result

# A resumable model file of the 2-device checkpoint continues the run on 4 devices: every
# position dealt to the 4 shards, the step and key carried; the entry point trains on from it.
piece = workdir / "piece.azjax"
export.export_run(workdir / "two", piece, 1, continuation=stopped_run(workdir / "two", 1, 10**6))
carried = dataclasses.replace(config, train=dataclasses.replace(config.train, init_from=str(piece)))
continuing = make_trainer(carried)
iteration, went_on = resume(continuing, continuing.init(jax.random.key(9)), continuing.continuation)
assert iteration == 1 and went_on.buffer.shards == 4
assert went_on.buffer.stored.value.sharding.spec == PartitionSpec("data")
assert positions(went_on.buffer) == positions(moved.buffer)
leaves_equal((went_on.step, went_on.key), (moved.step, moved.key))
result = train_and_evaluate(carried, workdir / "three", progress=False)
assert result["iteration"] == 2 and np.isfinite(result["train/loss"]), result
print("OK")
"""


def run(code_or_args: list[str], devices: int) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "XLA_FLAGS": f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
    }
    return subprocess.run(
        [sys.executable, *code_or_args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_four_devices_train_like_one_and_resume_on_any_device_count(tmp_path):
    overrides = [o for o in TINY if not o.startswith("train.iterations")]
    overrides += ["train.iterations=2", "optim.final_lr_fraction=1.0"]
    args = ["-c", FOUR_DEVICES, str(tmp_path), str(TICTACTOE), *overrides]
    result = run(args, devices=4)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr


# azjax-train's default on the CPU: one device per core, as many as divide the batch sizes.
CORES = r"""
import jax
from azjax import parallel

assert parallel.use_cpu_cores({"selfplay.batch_size": 6, "train.batch_size": 4}, 3) == 2
assert len(jax.devices("cpu")) == 2
assert parallel.use_cpu_cores({"selfplay.batch_size": 6}, 3) is None  # JAX has started
print("OK")
"""


def test_cpu_devices_one_per_core_as_many_as_divide_the_batches():
    sizes = {"selfplay.batch_size": 128, "train.batch_size": 256, "replay.capacity": 100_000}
    assert parallel.cpu_device_count(sizes, 2) == 2
    assert parallel.cpu_device_count(sizes, 3) == 2  # 3 divides none of them
    assert parallel.cpu_device_count(sizes, 16) == 16
    assert parallel.cpu_device_count({**sizes, "replay.capacity": 100_001}, 16) == 1
    with pytest.raises(ValueError, match="CPU devices must be >= 1, got 0"):
        parallel.cpu_device_count(sizes, 0)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    result = subprocess.run(
        [sys.executable, "-c", CORES],
        env={**env, "JAX_PLATFORMS": "cpu"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr
