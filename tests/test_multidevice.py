"""Several devices, one code path: how many CPU devices `azjax-train` asks for, batches the
devices cannot split, and training waiting for every shard of the replay buffer (in a subprocess:
the CPU device count is set before JAX starts). Training on 4 fake devices, split as it should,
equal to one and resumed on any count: tests/test_multihost.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
from helpers import ROOT

from azjax import parallel
from azjax.config import load_config

# azjax-train's CPU devices: none asked for in a cluster (its processes must agree on theirs),
# else one per core, as many as divide the batch sizes, before JAX starts (none once started).
# Then, on those 2 devices, training waits until no shard of the buffer is empty (each device
# samples its share of a batch from its own shard), not only for replay.min_size in all.
TWO_CORES = r"""
import os, sys
import jax, jax.numpy as jnp

sys.path.insert(0, "tests")
from helpers import TINY
from azjax import parallel
from azjax.config import load_config
from azjax.trainer import make_trainer

os.environ["AZJAX_DISTRIBUTED"] = "1"
assert parallel.use_cpu_cores({"selfplay.batch_size": 6}, 3) is None
assert jax.config.jax_num_cpu_devices == -1  # JAX's own
del os.environ["AZJAX_DISTRIBUTED"]
assert parallel.use_cpu_cores({"selfplay.batch_size": 6, "train.batch_size": 4}, 3) == 2
assert len(jax.devices("cpu")) == 2
assert parallel.use_cpu_cores({"selfplay.batch_size": 6}, 3) is None  # JAX has started

# One move per iteration from fresh games: no game finishes, so nothing is added.
overrides = ["selfplay.chunk_moves=1", "selfplay.opening_moves=0", "replay.min_size=16"]
trainer = make_trainer(load_config("configs/tictactoe.yaml", [*TINY, *overrides]))
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


CACHE = {  # the suite's (tests/conftest.py)
    "JAX_COMPILATION_CACHE_DIR": os.environ["AZJAX_JAX_CACHE"],
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
}


def test_cpu_devices_and_training_on_two():
    sizes = {"selfplay.batch_size": 128, "train.batch_size": 256, "replay.capacity": 100_000}
    assert parallel.cpu_device_count(sizes, 2) == 2
    assert parallel.cpu_device_count(sizes, 3) == 2  # 3 divides none of them
    assert parallel.cpu_device_count(sizes, 16) == 16
    assert parallel.cpu_device_count({**sizes, "replay.capacity": 100_001}, 16) == 1
    config = load_config(ROOT / "configs" / "connect4.yaml", ["replay.capacity=100008"])
    assert parallel.cpu_device_count(config.split_sizes(), 16) == 8  # the buffer's shards too
    with pytest.raises(ValueError, match="CPU devices must be >= 1, got 0"):
        parallel.cpu_device_count(sizes, 0)
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ["XLA_FLAGS"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "AZJAX_DISTRIB"))}
    result = subprocess.run(
        [sys.executable, "-c", TWO_CORES],
        env={**env, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", **CACHE},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout + result.stderr


def test_a_batch_the_devices_cannot_split_is_refused_naming_one_they_can():
    four = types.SimpleNamespace(devices=np.zeros(4))  # a mesh's device array, as read
    parallel.check_divisible(8, "train.batch_size", four)
    for value, suggested in ((2, 4), (10, 8)):
        refused = rf"train.batch_size={value} must be a multiple of the number of devices \(4\)"
        with pytest.raises(ValueError, match=rf"^{refused}; try train.batch_size={suggested}$"):
            parallel.check_divisible(value, "train.batch_size", four)
