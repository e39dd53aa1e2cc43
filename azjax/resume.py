"""Continuing a run: from its checkpoint, on any number of devices (`from_checkpoint`), or on
another machine from a model file carrying a snapshot of where it stopped (`snapshot`,
`run_snapshot`; `azjax-export --resumable`, then `train.init_from`: `start`, `from_snapshot`).
"""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from azjax import export, model, parallel
from azjax.checkpoint import Checkpointer, list_steps, read_config, saved_shape
from azjax.config import Config, ConfigError
from azjax.replay import replay_add, replay_examples, replay_newest, replay_reshard
from azjax.runlog import merged_records
from azjax.trainer import Trainer, TrainState, make_trainer

Params = Any


class Start(NamedTuple):
    """Where a first start begins: `train.init_from`'s model, or random parameters (all None)."""

    params: Params | None = None  # float32 numpy arrays for `Trainer.init`
    snapshot: dict[str, Any] | None = None  # its model file's snapshot, for `from_snapshot`
    config: Config | None = None  # the config the model was trained with


def start(config: Config) -> Start:
    """The `Start` of `train.init_from` (any model source, see azjax.model), for a fresh run only
    (a resumed run's starting model may be gone). ConfigError naming the value when the model
    cannot be read or was trained for another game or network shape."""
    if not (source := config.train.init_from):
        return Start()
    try:
        loaded = model.load(source, config=config)
        file = model.model_file(source)
        snapshot = None if file is None else export.read_snapshot(file)
    except (ValueError, OSError) as err:
        raise ConfigError(f"train.init_from={source!r}: {err}") from None
    if snapshot is not None and snapshot["iteration"] >= config.train.iterations:
        raise ConfigError(
            f"train.init_from={source!r} continues a run stopped at iteration "
            f"{snapshot['iteration']}: set train.iterations above it (now "
            f"{config.train.iterations})"
        )
    params = jax.tree.map(lambda x: np.asarray(x, np.float32), loaded.params)
    return Start(params, snapshot, loaded.config)


def from_checkpoint(
    trainer: Trainer, checkpointer: Checkpointer, step: int | None = None
) -> tuple[int, TrainState]:
    """(iteration, state) of checkpoint `step` (the newest when None) on the trainer's mesh. A
    checkpoint from another device count has its replay buffer dealt out to this mesh's shards
    (`replay_reshard`); nothing else depends on the device count."""
    abstract = trainer.abstract.replace(params=None)
    step = checkpointer.latest_step() if step is None else step
    saved = saved_shape(checkpointer.workdir, step, "['state'].buffer.size")  # one per shard
    moved = saved is not None and saved != abstract.buffer.size.shape
    if moved:  # restore the buffer as saved, then deal it out
        rows = jax.ShapeDtypeStruct(saved, jnp.int32, sharding=trainer.shardings.key)
        abstract = abstract.replace(buffer=abstract.buffer.replace(position=rows, size=rows))
    iteration, params, state = checkpointer.restore(
        trainer.config, trainer.abstract.params, abstract, step
    )
    if moved:
        reshard = jax.jit(
            functools.partial(replay_reshard, shards=trainer.mesh.devices.size),
            out_shardings=trainer.shardings.buffer,
        )
        state = state.replace(buffer=reshard(state.buffer))
    return iteration, state.replace(params=params)


def snapshot(state: TrainState, iteration: int, positions: int) -> dict[str, Any]:
    """Where a run stopped, small enough for a model file: the iteration, gradient steps, PRNG
    key, optimizer state (Adam's moments in bfloat16) and the newest `positions` of the replay
    buffer, as host numpy arrays. Games in flight are not kept: the next machine starts new
    ones (and, under arena gating, its best parameters are the carried ones)."""
    return {
        "iteration": iteration,
        "step": int(parallel.to_host(state.step)),
        "key": np.asarray(parallel.to_host(state.key)),
        "opt_state": [
            # bfloat16: half the bytes, at no measurable cost to the continued run (docs/results.md)
            x.astype(jnp.bfloat16) if np.issubdtype(x.dtype, np.floating) else x
            for x in map(np.asarray, jax.tree.leaves(parallel.to_host(state.opt_state)))
        ],
        "replay": jax.tree.leaves(replay_newest(state.buffer, positions)),
    }


def run_snapshot(workdir: str | pathlib.Path, step: int | None, positions: int) -> dict[str, Any]:
    """The `snapshot` of checkpoint `step` (the newest when None) of the run in `workdir`,
    with its metrics records up to that iteration (JSON text under "records")."""
    config = read_config(workdir, step)
    trainer = make_trainer(config)
    with Checkpointer(workdir, config.checkpoint.keep, owner=False) as checkpointer:
        iteration, state = from_checkpoint(trainer, checkpointer, step)
        saved = [r for s in list_steps(workdir) if s <= iteration for r in checkpointer.records(s)]
    records = merged_records(pathlib.Path(workdir) / "metrics.jsonl", iteration, saved)
    kept = [r for r in records if not r.get("final")]
    return {**snapshot(state, iteration, positions), "records": json.dumps(kept)}


def from_snapshot(
    trainer: Trainer, state: TrainState, carried: dict[str, Any]
) -> tuple[int, TrainState]:
    """(iteration, state): `state` (from `init` with the carried parameters) continuing the run
    of `carried` (a `snapshot`). ConfigError when this config's optimizer state or positions
    do not fit the carried run's."""
    abstract, shardings = trainer.abstract, trainer.shardings
    source = trainer.config.train.init_from

    def rebuild(name: str, leaves: list, like: Any, rows: int) -> Any:
        want = jax.tree.leaves(like)
        have = [tuple(np.shape(x))[rows:] for x in leaves]
        if have != [tuple(x.shape)[rows:] for x in want]:
            raise ConfigError(
                f"train.init_from={source!r}: its run's {name} does not fit this config's "
                "(continue it with the config it was trained with)"
            )
        arrays = [np.asarray(x, w.dtype) for x, w in zip(leaves, want, strict=True)]
        return jax.tree.unflatten(jax.tree.structure(like), arrays)

    opt_state = rebuild("optimizer state", carried["opt_state"], abstract.opt_state, rows=0)
    positions = rebuild("replay positions", carried["replay"], abstract.buffer.stored, rows=1)
    examples = replay_examples(positions, state.buffer.shards)
    fill = jax.jit(replay_add, out_shardings=shardings.buffer, donate_argnums=0)
    state = state.replace(
        opt_state=jax.device_put(opt_state, shardings.opt_state),
        buffer=fill(state.buffer, examples),
        key=jax.device_put(np.asarray(carried["key"], np.uint32), shardings.key),
        step=jax.device_put(jnp.int32(carried["step"]), shardings.step),
    )
    return int(carried["iteration"]), state
