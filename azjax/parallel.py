"""Devices: one `jax.sharding.Mesh` over every device, with a single "data" axis.

The same code runs on one CPU, several GPUs, a TPU host and a multi-host pod: self-play games
and training batches are split over the "data" axis, parameters, optimizer state and the
replay buffer are replicated, and the compiler inserts the gradient all-reduce. There is no
per-device Python (no pmap).

Multi-host: call `initialize_distributed()` before touching any device. It runs
`jax.distributed.initialize()` when the environment describes a cluster: `JAX_COORDINATOR_ADDRESS`
(with `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`), a Cloud TPU pod slice, SLURM or Open MPI
(all detected by JAX itself); set `AZJAX_DISTRIBUTED=1` to force it, `AZJAX_DISTRIBUTED=0`
to skip it.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA = "data"

_CLUSTER_ENV = (
    "JAX_COORDINATOR_ADDRESS",
    "TPU_WORKER_HOSTNAMES",  # Cloud TPU pod slices list their hosts here
    "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_SIZE",
)


def initialize_distributed() -> bool:
    """Join a multi-process JAX cluster when the environment describes one; True if joined."""
    flag = os.environ.get("AZJAX_DISTRIBUTED", "")
    if flag == "0":
        return False
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    in_cluster = any(os.environ.get(k) for k in _CLUSTER_ENV if k != "TPU_WORKER_HOSTNAMES")
    in_cluster |= "," in hosts  # a single-host TPU VM lists only itself
    if flag != "1" and not in_cluster:
        return False
    jax.distributed.initialize()
    return True


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
    """Shardings for a pytree of (abstract) arrays: the first axis of size `batch_size` (the
    games) is split over devices; leaves without one (scalars, shared tables) are replicated.
    """

    def pick(leaf: Any) -> NamedSharding:
        if batch_size not in leaf.shape:
            return replicated(mesh)
        axis = leaf.shape.index(batch_size)
        return NamedSharding(mesh, PartitionSpec(*([None] * axis), DATA))

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
    """Fetch replicated (or fully addressable) arrays to numpy, also on multi-host meshes."""

    def fetch(x: Any) -> Any:
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(x.addressable_data(0))
        return np.asarray(x)

    return jax.tree.map(fetch, tree)
