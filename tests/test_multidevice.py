"""Several devices, one code path: fake CPU devices in subprocesses (XLA_FLAGS must be set
before JAX starts, so each check runs in its own interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys

from test_train import ROOT, TICTACTOE, TINY

SAME_STEP = r"""
import dataclasses
import sys

import jax
import numpy as np
from jax.sharding import PartitionSpec

from azjax import parallel
from azjax.config import load_config
from azjax.replay import make_sampler
from azjax.train import make_optimizer, make_train_step, make_trainer

devices = jax.devices()
assert len(devices) == 4, devices
config = load_config(sys.argv[1], sys.argv[2:])

# A whole iteration on the 4-device mesh: games split over devices, parameters replicated.
trainer = make_trainer(config)
state = trainer.init(jax.random.key(0))
games = state.carry.states.current_player
assert games.sharding.spec == PartitionSpec("data") and len(games.sharding.device_set) == 4
assert state.params["params"]["Dense_0"]["kernel"].sharding.is_fully_replicated
state, metrics = trainer.iterate(state)
assert bool(metrics["train/trained"]), metrics

# Two train steps on the same global batch with 1 and with 4 devices (SGD, so the parameter
# change is proportional to the all-reduced gradient).
optimizer = make_optimizer(dataclasses.replace(config.optim, optimizer="sgd"), 100)
step = make_train_step(trainer.network, optimizer, config.optim)
batch = jax.device_get(make_sampler(trainer.game, 32)(state.buffer, jax.random.key(1)))
params = jax.device_get(state.params)
results = []
for mesh in (parallel.make_mesh(devices[:1]), parallel.make_mesh(devices)):
    rep, data = parallel.replicated(mesh), parallel.data_sharded(mesh)
    jitted = jax.jit(step, in_shardings=(rep, rep, data), out_shardings=rep)
    new_params, opt_state, out = jitted(params, optimizer.init(params), batch)
    new_params, _, out = jitted(new_params, opt_state, batch)
    results.append((jax.device_get(new_params), jax.device_get(out["loss"])))
(one, loss1), (four, loss4) = results
np.testing.assert_allclose(loss1, loss4, rtol=1e-5)
for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(four), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
pairs = zip(jax.tree.leaves(one), jax.tree.leaves(params), strict=True)
moved = max(float(np.abs(a - b).max()) for a, b in pairs)
assert moved > 1e-4, moved
print("OK")
"""


def run(code_or_args: list[str], devices: int) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
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


def test_four_devices_train_like_one():
    overrides = [o for o in TINY if not o.startswith("train.iterations")]
    result = run(["-c", SAME_STEP, str(TICTACTOE), *overrides], devices=4)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr
