"""Checkpoints with orbax: the whole training state, atomically, keeping the newest K.

Layout: `WORKDIR/checkpoints/<iteration>/` with three items:

- `params`: the network parameters (all `load_for_inference` reads besides `meta`);
- `state`: optimizer state, replay buffer, self-play carry (games in flight), PRNG key, step;
- `meta`: JSON with the iteration, the full config and the shape of every saved array.

Orbax writes each checkpoint into a temporary directory and renames it when complete, so a
run killed at any moment leaves the previous checkpoints intact. A checkpoint written for
another game or network shape is refused with `CheckpointError` naming what differs; one that
cannot be read is reported as damaged, never silently replaced.
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from absl import logging as absl_logging

from azjax.config import Config, ConfigError, config_from_dict, config_to_dict

CHECKPOINT_DIR = "checkpoints"
absl_logging.set_verbosity(absl_logging.WARNING)


class _ReadOnlyNotice(logging.Filter):
    """Drops orbax's warnings that a manager is read-only: azjax reads checkpoints that way on
    purpose (a reader never touches a directory a training run may be writing)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "read only" not in message and "read_only=True" not in message


logging.getLogger("absl").addFilter(_ReadOnlyNotice())


class CheckpointError(ValueError):
    """A checkpoint that is missing, damaged or incompatible with the requested run."""


def _directory(workdir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(workdir).resolve() / CHECKPOINT_DIR


def _manager(workdir: str | pathlib.Path, keep: int | None = None) -> ocp.CheckpointManager:
    """A writer (given `keep`, cleaning up unfinished saves) or a read-only reader, which
    never touches the directory, so it is safe beside a running training."""
    writer = keep is not None
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        create=writer,
        read_only=not writer,
        cleanup_tmp_directories=writer,
        enable_async_checkpointing=False,
    )
    return ocp.CheckpointManager(_directory(workdir), options=options)


def list_steps(workdir: str | pathlib.Path) -> list[int]:
    """The iterations with a complete checkpoint in `workdir`, oldest first."""
    if not _directory(workdir).is_dir():
        return []
    with _manager(workdir) as manager:
        return sorted(manager.all_steps())


# ----------------------------------------------------------------------------- key handling


def _unkey(tree: Any) -> Any:
    """Typed PRNG keys as their raw uint32 data (portable through any checkpoint format)."""

    def raw(x: Any) -> Any:
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(x)
        return x

    return jax.tree.map(raw, tree)


def _abstract_unkey(tree: Any) -> Any:
    """The ShapeDtypeStructs (shardings kept) of what `_unkey` makes of `tree`."""

    def raw(x: Any) -> Any:
        sharding = getattr(x, "sharding", None)
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.eval_shape(jax.random.key_data, x)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    return jax.tree.map(raw, tree)


def _rekey(tree: Any, template: Any) -> Any:
    """Wrap raw key data back into typed keys where `template` holds keys."""

    def wrap(x: Any, t: Any) -> Any:
        if jnp.issubdtype(t.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(x)  # the default implementation, as when saved
        return x

    return jax.tree.map(wrap, tree, template)


def signature(tree: Any) -> dict[str, str]:
    """`path -> "dtype[shape]"` for every array leaf: what a compatible checkpoint must match."""
    leaves = jax.tree_util.tree_flatten_with_path(_abstract_unkey(tree))[0]
    return {jax.tree_util.keystr(p): f"{x.dtype}{list(x.shape)}" for p, x in leaves}


def read_meta(workdir: str | pathlib.Path, step: int) -> dict:
    """The JSON metadata of one checkpoint; CheckpointError when unreadable."""
    path = _directory(workdir) / str(step) / "meta"
    try:
        with _manager(workdir) as manager:
            meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = dict(meta["meta"])
        if not {"iteration", "config"} <= meta.keys():
            raise KeyError("iteration/config missing")
        return meta
    except Exception as err:  # orbax raises many kinds; all mean the same to the user
        raise CheckpointError(
            f"checkpoint {step} in {_directory(workdir)} is damaged ({path} unreadable: "
            f"{type(err).__name__}: {err}). Move it away to resume from an older one."
        ) from None


def _pick_step(workdir: str | pathlib.Path, step: int | None) -> int:
    steps = list_steps(workdir)
    if not steps:
        raise CheckpointError(
            f"no checkpoint in {pathlib.Path(workdir)} (expected {CHECKPOINT_DIR}/<step>/)"
        )
    if step is None:
        return steps[-1]
    if step not in steps:
        raise CheckpointError(
            f"no checkpoint {step} in {workdir}; available: {', '.join(map(str, steps))}"
        )
    return step


def load_for_inference(workdir: str, step: int | None = None) -> tuple[Config, Any]:
    """The config and network parameters saved in `workdir` (the newest when `step` is None)."""
    from azjax.network import init_params, make_network

    step = _pick_step(workdir, step)
    meta = read_meta(workdir, step)
    try:
        config = config_from_dict(meta["config"])
    except ConfigError as err:
        message = f"checkpoint {step} in {workdir} has an unusable config: {err}"
        raise CheckpointError(message) from None
    game = config.game.make()
    network = make_network(game, config.network)
    abstract = jax.eval_shape(lambda k: init_params(network, game, k), jax.random.key(0))
    here = jax.sharding.SingleDeviceSharding(jax.devices()[0])  # whatever devices trained it
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here), abstract
    )
    try:
        with _manager(workdir) as manager:
            restored = manager.restore(
                step, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract))
            )
    except Exception as err:
        raise CheckpointError(
            f"checkpoint {step} in {_directory(workdir)} is damaged: cannot read its parameters "
            f"({type(err).__name__}: {err})"
        ) from None
    return config, restored["params"]


# ----------------------------------------------------------------------------- training


# Config keys that change the shape of saved arrays; named in the refusal message.
_SHAPE_KEYS = (
    "game",
    "network.blocks",
    "network.channels",
    "replay.capacity",
    "selfplay.batch_size",
    "optim.optimizer",
)


def _differences(saved: dict, wanted: dict) -> list[str]:
    out = []
    for key in _SHAPE_KEYS:
        a, b = saved, wanted
        for part in key.split("."):
            a, b = a.get(part), b.get(part)
        if a != b:
            out.append(f"{key}: checkpoint {json.dumps(a)}, config {json.dumps(b)}")
    return out


class Checkpointer:
    """Saves and restores the training state of one workdir."""

    def __init__(self, workdir: str | pathlib.Path, keep: int) -> None:
        self.workdir = pathlib.Path(workdir)
        self._manager = _manager(workdir, keep)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, iteration: int, params: Any, state: Any, config: Config) -> None:
        """Write checkpoint `iteration` (blocking; atomic)."""
        meta = {
            "iteration": iteration,
            "config": config_to_dict(config),
            "signature": signature({"params": params, "state": state}),
        }
        self._manager.save(
            iteration,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                state=ocp.args.StandardSave(_unkey(state)),
                meta=ocp.args.JsonSave(meta),
            ),
            force=True,
        )
        self._manager.wait_until_finished()

    def restore(self, config: Config, abstract_params: Any, abstract_state: Any) -> tuple:
        """(iteration, params, state) of the newest checkpoint, placed with the shardings of
        the abstract arrays; CheckpointError when incompatible with `config` or damaged."""
        step = self._manager.latest_step()
        meta = read_meta(self.workdir, step)
        expected = signature({"params": abstract_params, "state": abstract_state})
        differences = _differences(meta["config"], config_to_dict(config))
        if differences or meta.get("signature") != expected:
            if not differences:
                saved = meta.get("signature", {})
                bad = sorted(
                    k for k in expected.keys() | saved.keys() if saved.get(k) != expected.get(k)
                )
                differences = [
                    f"{bad[0]}: checkpoint {saved.get(bad[0])}, config {expected.get(bad[0])}"
                ]
            raise CheckpointError(
                f"{_directory(self.workdir)} holds a checkpoint (iteration {step}) of a different "
                f"run: {'; '.join(differences)}. Use another --workdir, or set these keys back."
            )
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    params=ocp.args.StandardRestore(_abstract_unkey(abstract_params)),
                    state=ocp.args.StandardRestore(_abstract_unkey(abstract_state)),
                ),
            )
        except Exception as err:
            raise CheckpointError(
                f"checkpoint {step} in {_directory(self.workdir)} is damaged "
                f"({type(err).__name__}: {err}). Move it away to resume from an older one."
            ) from None
        state = _rekey(restored["state"], abstract_state)
        return int(meta["iteration"]), restored["params"], state

    def close(self) -> None:
        self._manager.close()
