"""Devices: one `jax.sharding.Mesh` over every device, with a single "data" axis.

The same code runs on one CPU, several GPUs, a TPU host and a multi-host pod: self-play games,
training batches and the replay buffer (one shard per device) split over the "data" axis,
parameters and optimizer state are replicated, and the compiler inserts the gradient all-reduce.

Multi-host: `initialize_distributed()`, before any device is touched, joins the cluster that the
environment describes (`JAX_COORDINATOR_ADDRESS` with `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`,
several `TPU_WORKER_HOSTNAMES`, `srun` with several SLURM tasks, or several Open MPI ranks);
`AZJAX_DISTRIBUTED=1` forces it (a Cloud TPU VM pod slice), `AZJAX_DISTRIBUTED=0` skips it.
XLA runs one CPU device's small operations on one thread, so `use_cpu_cores` makes one CPU
device per core to keep every core busy.
"""

from __future__ import annotations

import os
import re
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA = "data"


def _count(name: str, default: int | None = None) -> int | None:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be an integer") from None


def _joins_cluster() -> bool:
    """AZJAX_DISTRIBUTED=1 or 0, else whether the environment describes a cluster of several
    processes that JAX can join."""
    env = os.environ.get
    if env("AZJAX_DISTRIBUTED", "") in ("0", "1"):
        return env("AZJAX_DISTRIBUTED") == "1"
    return bool(
        env("JAX_COORDINATOR_ADDRESS")
        or "," in env("TPU_WORKER_HOSTNAMES", "")  # a single-host TPU VM lists itself
        # SLURM: inside `srun` with several tasks (not a batch script's or salloc's own shell)
        or (env("SLURM_STEP_NODELIST") and _count("SLURM_NTASKS", 1) > 1)
        or _count("OMPI_COMM_WORLD_SIZE", 1) > 1
    )


def initialize_distributed() -> bool:
    """Join a multi-process JAX cluster when the environment describes one; True if joined."""
    if not _joins_cluster():
        return False
    # JAX reads JAX_COORDINATOR_ADDRESS itself, but not the process count and id
    jax.distributed.initialize(
        os.environ.get("JAX_COORDINATOR_ADDRESS") or None,
        num_processes=_count("JAX_NUM_PROCESSES"),
        process_id=_count("JAX_PROCESS_ID"),
    )
    return True


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_device_count(sizes: dict[str, int], cores: int) -> int:
    """The most CPU devices, at most `cores`, that divide every one of `sizes`."""
    if cores < 1:
        raise ValueError(f"CPU devices must be >= 1, got {cores}")
    return max(n for n in range(1, cores + 1) if all(v % n == 0 for v in sizes.values()))


def use_cpu_cores(sizes: dict[str, int], cores: int | None = None) -> int | None:
    """Ask JAX, before it starts, for one CPU device per core (`cores`, default all available),
    as many as divide every one of `sizes` (the config's global batch sizes, by key); the CPU
    platform only (an accelerator still computes). Returns the count asked for, or None where
    JAX's own stays: a multi-process cluster, `--xla_force_host_platform_device_count` in
    XLA_FLAGS, or JAX already started."""
    count = cpu_device_count(sizes, cpu_cores() if cores is None else cores)
    forced = "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    if forced or _joins_cluster():
        return None
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backends already started (a caller used JAX before)
        return None
    return count


def any_process(flag: bool) -> bool:
    """Whether `flag` is true in any process of the cluster (a host collective: every process
    must call it at the same point); `flag` itself on a single process."""
    if jax.process_count() == 1:
        return bool(flag)
    return bool(np.any(multihost_utils.process_allgather(np.int32(flag))))


def make_mesh(devices: list | None = None) -> Mesh:
    """A one-axis ("data") mesh over `devices` (default: every device of every process)."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (DATA,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def data_sharded(mesh: Mesh) -> NamedSharding:
    """Split the leading dimension over the "data" axis."""
    return NamedSharding(mesh, PartitionSpec(DATA))


def batch_shardings(tree: Any, batch_size: int, mesh: Mesh) -> Any:
    """Shardings for a pytree of (abstract) arrays: a leading axis of size `batch_size` (the
    games) is split over devices; other leaves (scalars, shared tables) are replicated."""

    def pick(leaf: Any) -> NamedSharding:
        return data_sharded(mesh) if leaf.shape[:1] == (batch_size,) else replicated(mesh)

    return jax.tree.map(pick, tree)


def check_divisible(value: int, key: str, mesh: Mesh) -> None:
    """Refuse a batch size that the devices cannot split evenly, naming the config key."""
    devices = mesh.devices.size
    if value % devices:
        raise ValueError(
            f"{key}={value} must be a multiple of the number of devices ({devices}); "
            f"try {key}={max(devices, value // devices * devices)}"
        )


def to_host(tree: Any) -> Any:
    """Fetch replicated (or fully addressable) arrays to numpy; on a multi-host mesh each
    process reads its own copy of a replicated array."""
    return jax.tree.map(np.asarray, tree)


def emulation_warning(dtype: str, device: Any = None) -> str | None:
    """A warning when a network in `dtype` would run on `device` (default: the first) without
    arithmetic of its own: bfloat16 on an NVIDIA GPU older than compute capability 8.0 (a T4,
    Colab's free GPU), which XLA computes through float32; None otherwise."""
    device = jax.devices()[0] if device is None else device
    capability = re.fullmatch(r"(\d+)\.(\d+)", str(getattr(device, "compute_capability", "")))
    if dtype != "bfloat16" or device.platform != "gpu" or capability is None:
        return None
    if tuple(map(int, capability.groups())) >= (8, 0):  # Ampere on
        return None
    return (
        f"network.dtype=bfloat16 on a {device.device_kind} (compute capability "
        f"{device.compute_capability}): GPUs before 8.0 have no bfloat16 arithmetic, so XLA "
        "emulates it through float32; use network.dtype=float32 on this GPU"
    )
