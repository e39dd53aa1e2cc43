"""Several devices, one code path: fake CPU devices in subprocesses (XLA_FLAGS must be set
before JAX starts, so each check runs in its own interpreter). The 4-device training run is
tests/test_multihost.py's: the run that the two processes there must equal."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import jax
import numpy as np
import pytest
from helpers import ROOT
from jax.sharding import PartitionSpec

from azjax import parallel
from azjax.config import load_config


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


# azjax-train's default on the CPU: one device per core, as many as divide the batch sizes.
CORES = r"""
import jax
from azjax import parallel

assert parallel.use_cpu_cores({"selfplay.batch_size": 6, "train.batch_size": 4}, 3) == 2
assert len(jax.devices("cpu")) == 2
assert parallel.use_cpu_cores({"selfplay.batch_size": 6}, 3) is None  # JAX has started
print("OK")
"""


# A process of a cluster keeps JAX's own CPU devices: the processes must agree on theirs.
CLUSTER = r"""
import jax
from azjax import parallel

assert parallel.use_cpu_cores({"selfplay.batch_size": 6}, 3) is None
assert len(jax.devices("cpu")) == 1
print("OK")
"""


# A device count forced in XLA_FLAGS (as the tests force theirs) is left as it is.
FORCED = r"""
import jax
from azjax import parallel

assert parallel.use_cpu_cores({"selfplay.batch_size": 6}, 3) is None
assert len(jax.devices("cpu")) == 2
print("OK")
"""


def test_a_device_count_forced_in_xla_flags_stays():
    result = run(["-c", FORCED], 2)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr


def test_a_batch_the_devices_cannot_split_is_refused_naming_one_they_can():
    four = types.SimpleNamespace(devices=np.zeros(4))  # a mesh's device array, as read
    parallel.check_divisible(8, "train.batch_size", four)
    for value, suggested in ((2, 4), (10, 8)):
        refused = rf"train.batch_size={value} must be a multiple of the number of devices \(4\)"
        with pytest.raises(ValueError, match=rf"^{refused}; try train.batch_size={suggested}$"):
            parallel.check_divisible(value, "train.batch_size", four)


def test_the_leading_games_axis_is_split_and_every_other_leaf_replicated():
    mesh = parallel.make_mesh()
    leaves = {"slots": (6, 6), "plies": (6,), "table": (3, 6), "count": ()}
    tree = {k: jax.ShapeDtypeStruct(shape, np.int32) for k, shape in leaves.items()}
    specs = {k: s.spec for k, s in parallel.batch_shardings(tree, 6, mesh).items()}
    split, whole = PartitionSpec(parallel.DATA), PartitionSpec()
    assert specs == {"slots": split, "plies": split, "table": whole, "count": whole}


def test_cpu_devices_one_per_core_as_many_as_divide_the_batches():
    sizes = {"selfplay.batch_size": 128, "train.batch_size": 256, "replay.capacity": 100_000}
    assert parallel.cpu_device_count(sizes, 2) == 2
    assert parallel.cpu_device_count(sizes, 3) == 2  # 3 divides none of them
    assert parallel.cpu_device_count(sizes, 16) == 16
    assert parallel.cpu_device_count({**sizes, "replay.capacity": 100_001}, 16) == 1
    config = load_config(ROOT / "configs" / "connect4.yaml", ["replay.capacity=100008"])
    assert parallel.cpu_device_count(config.split_sizes(), 16) == 8  # the buffer's shards too
    with pytest.raises(ValueError, match="CPU devices must be >= 1, got 0"):
        parallel.cpu_device_count(sizes, 0)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    for code, joined in ((CORES, {}), (CLUSTER, {"AZJAX_DISTRIBUTED": "1"})):
        result = subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "JAX_PLATFORMS": "cpu", **joined},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr


# Training waits for every device's shard of the buffer to hold a position (each device samples
# its share of a batch from its own shard), not only for replay.min_size in all.
EMPTY_SHARD = r"""
import jax, jax.numpy as jnp
import sys

sys.path.insert(0, "tests")
from helpers import TINY
from test_train import TICTACTOE
from azjax.config import load_config
from azjax.trainer import make_trainer

# One move per iteration from fresh games: no game finishes, so nothing is added.
overrides = ["selfplay.chunk_moves=1", "selfplay.opening_moves=0", "replay.min_size=16"]
config = load_config(TICTACTOE, [*TINY, *overrides])
trainer = make_trainer(config)
assert trainer.mesh.devices.size == 2
trained = {}
for sizes in ([16, 0], [0, 16], [15, 1], [8, 8]):
    state = trainer.init(jax.random.key(0))  # iterate donates it
    size = jax.device_put(jnp.array(sizes, jnp.int32), trainer.shardings.buffer.size)
    _, metrics = trainer.iterate(state.replace(buffer=state.buffer.replace(size=size)))
    assert int(metrics["replay/added"]) == 0
    trained[tuple(sizes)] = bool(metrics["train/trained"])
assert trained == {(16, 0): False, (0, 16): False, (15, 1): True, (8, 8): True}, trained
print("OK")
"""


def test_training_waits_until_no_shard_is_empty():
    result = run(["-c", EMPTY_SHARD], 2)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr
