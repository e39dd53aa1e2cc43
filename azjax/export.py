"""Portable trained models: one file with the parameters, the run's config and a model card.

    card = export_run("runs/connect4", "connect4.azjax")        # the newest checkpoint
    config, params, card = load_model("connect4.azjax")          # no orbax, no run directory
    record_strength("connect4.azjax", json.load(open("match.json")))  # azjax-eval --json figures
    set_simulations("connect4.azjax", 512)                       # its default search

A model file (`.azjax`) is one msgpack map:

    format   "azjax-model"
    version  1
    config   the resolved run config (JSON text)
    card     the model card (JSON text, below)
    dtype    how the parameters are stored: "float32" or "bfloat16"
    params   the parameters, flax.serialization msgpack bytes (loaded back as float32)
    continuation  optional (`azjax-export --resumable`): where the run stopped, for
             `train.init_from` to continue it on another machine; zlib-compressed
             flax.serialization msgpack bytes of a run's snapshot (azjax.resume)

The card (azjax.card) is also written beside the model as `NAME.card.json`, for people to read;
`record_strength` files figures in it. ONNX: azjax.onnx_export.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import zlib
from collections.abc import Mapping
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import msgpack
import numpy as np

from azjax import checkpoint
from azjax.card import (
    ModelError,
    card_path,
    make_card,
    run_figures,
    strength_entry,
    with_simulations,
)
from azjax.checks import write_error
from azjax.config import Config, ConfigError, config_from_dict, config_to_dict
from azjax.network import init_params, make_network
from azjax.specs import MODEL_SUFFIX

FORMAT = "azjax-model"
VERSION = 1
SUFFIX = MODEL_SUFFIX
STORAGE_DTYPES = ("float32", "bfloat16")
Params = Any


# ----------------------------------------------------------------------------- writing


def check_suffix(path: pathlib.Path, suffix: str) -> None:
    """ModelError unless `path` names a file ending in `suffix`."""
    if not path.name.endswith(suffix) or path.name == suffix:
        raise ModelError(f"model file {path}: expected a name ending in {suffix}")


def write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (a file beside it, then renamed)."""
    if not path.parent.is_dir():
        raise ModelError(f"cannot write {path}: there is no folder {path.parent}")
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(f"cannot write {path}: {err.strerror}", err, ModelError) from None
    except BaseException:  # Ctrl-C
        tmp.unlink(missing_ok=True)
        raise


def _write(path: pathlib.Path, entries: Mapping[str, Any]) -> None:
    """The model file and its card beside it."""
    write_atomically(path, msgpack.packb(dict(entries), use_bin_type=True))
    write_card(path)


def write_card(path: str | pathlib.Path) -> dict[str, Any]:
    """Write the card of the model at `path` beside it (NAME.card.json); returns the card."""
    card = read_card(path)
    write_atomically(card_path(path), (json.dumps(card, indent=2) + "\n").encode())
    return card


def save_model(
    path: str | pathlib.Path,
    config: Config,
    params: Params,
    card: Mapping[str, Any],
    dtype: str = "float32",
    snapshot: Mapping[str, Any] | None = None,
) -> None:
    """Write a model file (and its card beside it); `dtype` is how the parameters are stored.
    A `snapshot` (azjax.resume) lets `train.init_from` continue the run."""
    path = pathlib.Path(path)
    check_suffix(path, SUFFIX)
    if dtype not in STORAGE_DTYPES:
        raise ModelError(f"storage dtype must be one of {', '.join(STORAGE_DTYPES)}, got {dtype!r}")
    stored = jax.tree.map(lambda x: np.asarray(x, jnp.dtype(dtype)), jax.device_get(params))
    card = {**card, "storage_dtype": dtype}
    entries = {
        "format": FORMAT,
        "version": VERSION,
        "config": json.dumps(config_to_dict(config)),
        "card": json.dumps(card),
        "dtype": dtype,
        "params": flax.serialization.msgpack_serialize(stored),
    }
    if snapshot is not None:
        packed = flax.serialization.msgpack_serialize(dict(snapshot))
        entries["continuation"] = zlib.compress(packed, 1)
    _write(path, entries)


def _playing(config: Config, simulations: int) -> Config:
    """`config` with the model playing `simulations` simulations by default."""
    if isinstance(simulations, bool) or not isinstance(simulations, int) or simulations < 1:
        raise ModelError(f"simulations must be an integer >= 1, got {simulations!r}")
    return dataclasses.replace(
        config, eval=dataclasses.replace(config.eval, num_simulations=simulations)
    )


def export_run(
    workdir: str | pathlib.Path,
    out: str | pathlib.Path,
    step: int | None = None,
    dtype: str = "float32",
    command: str | None = None,
    device: str | None = None,
    simulations: int | None = None,
    snapshot: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write checkpoint `step` of a run (the newest when None) as the model file `out`, with
    the checkpoint's `snapshot` (azjax.resume.run_snapshot) when given.

    `command` (how the run was trained) defaults to `azjax-train` on the run's resolved
    `config.yaml` when the run has one; `device` is recorded as given. The model plays with
    `simulations` by default when given, else with the run's evaluation simulations. Returns
    the card.
    """
    workdir, out = pathlib.Path(workdir), pathlib.Path(out)
    check_suffix(out, SUFFIX)
    if step is None:
        steps = checkpoint.list_steps(workdir)
        step = steps[-1] if steps else None  # None: load_for_inference names the empty run
    config, params = checkpoint.load_for_inference(str(workdir), step)
    if simulations is not None:
        config = _playing(config, simulations)
    if command is None and (workdir / "config.yaml").exists():
        command = f"azjax-train --config {workdir / 'config.yaml'} --workdir {workdir}"
    name = out.name.removesuffix(SUFFIX)
    figures = run_figures(workdir, step)
    card = make_card(config, params, name, step, command=command, device=device, **figures)
    save_model(out, config, params, card, dtype, snapshot)
    return {**card, "storage_dtype": dtype}


# ----------------------------------------------------------------------------- reading


def _read(path: str | pathlib.Path) -> dict[str, Any]:
    """The checked msgpack map of a model file."""
    path = pathlib.Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ModelError(f"cannot read model {path}: {err.strerror}") from None
    try:
        entries = msgpack.unpackb(data, raw=False)
    except (ValueError, msgpack.UnpackException) as err:
        raise ModelError(f"{path} is not an azjax model file ({type(err).__name__})") from None
    if not isinstance(entries, dict) or entries.get("format") != FORMAT:
        raise ModelError(f"{path} is not an azjax model file (expected format {FORMAT!r})")
    version = entries.get("version")
    if version != VERSION:
        raise ModelError(f"{path} has format version {version!r}; this azjax reads {VERSION}")
    missing = sorted({"config", "card", "dtype", "params"} - entries.keys())
    if missing:
        raise ModelError(f"{path} is damaged: no {', '.join(missing)}")
    return entries


def read_card(path: str | pathlib.Path) -> dict[str, Any]:
    """The card of the model file at `path`."""
    try:
        return json.loads(_read(path)["card"])
    except json.JSONDecodeError as err:
        raise ModelError(f"{path} has a damaged card: {err}") from None


def set_provenance(
    path: str | pathlib.Path, command: str | None = None, device: str | None = None
) -> dict[str, Any]:
    """Set the training `command` and `device` (those given) in the card of the model at `path`
    (rewriting the model file and its card beside it); returns the card."""
    path = pathlib.Path(path)
    entries, card = _read(path), read_card(path)
    card.update({k: v for k, v in (("command", command), ("device", device)) if v is not None})
    _write(path, {**entries, "card": json.dumps(card)})
    return card


def set_simulations(path: str | pathlib.Path, simulations: int) -> dict[str, Any]:
    """Make the model at `path` play with `simulations` by default (its config and card, see
    `card.with_simulations`). Returns the card."""
    path = pathlib.Path(path)
    entries, config = _read(path), _playing(read_config(path), simulations)
    card = with_simulations(read_card(path), simulations)
    config_text = json.dumps(config_to_dict(config))
    _write(path, {**entries, "config": config_text, "card": json.dumps(card)})
    return card


def read_config(path: str | pathlib.Path) -> Config:
    """The config of the model file at `path` (its game, network and search)."""
    try:
        return config_from_dict(json.loads(_read(path)["config"]))
    except (json.JSONDecodeError, ConfigError) as err:
        raise ModelError(f"{path} has an unusable config: {err}") from None


def read_snapshot(path: str | pathlib.Path) -> dict[str, Any] | None:
    """The run snapshot in the model file at `path` (azjax.resume); None when it has none."""
    packed = _read(path).get("continuation")
    if packed is None:
        return None
    try:
        return flax.serialization.msgpack_restore(zlib.decompress(packed))
    except Exception as err:  # zlib and flax raise several kinds for bad bytes
        raise ModelError(f"{path} has a damaged run snapshot ({type(err).__name__})") from None


def load_model(path: str | pathlib.Path) -> tuple[Config, Params, dict[str, Any]]:
    """(config, float32 params, card) of a model file; ModelError naming what is wrong."""
    config, card = read_config(path), read_card(path)
    game = config.game.make()
    network = make_network(game, config.network)
    expected = jax.eval_shape(lambda k: init_params(network, game, k), jax.random.key(0))
    try:
        stored = flax.serialization.msgpack_restore(_read(path)["params"])
    except Exception as err:  # flax raises several kinds for bad bytes
        raise ModelError(f"{path} has damaged parameters ({type(err).__name__})") from None
    want = {jax.tree_util.keystr(p): x.shape for p, x in _leaves(expected)}
    have = {jax.tree_util.keystr(p): np.shape(x) for p, x in _leaves(stored)}
    if want != have:
        bad = min(k for k in want.keys() | have.keys() if want.get(k) != have.get(k))
        raise ModelError(
            f"{path}: parameter {bad} has shape {have.get(bad)}, but the network in its "
            f"config needs {want.get(bad)}"
        )
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), stored)
    return config, params, card


def _leaves(tree: Any) -> list:
    return jax.tree_util.tree_flatten_with_path(tree)[0]


def record_strength(path: str | pathlib.Path, result: Mapping[str, Any]) -> dict[str, Any]:
    """File the figures of an `azjax-eval --json` result in the card of the model at `path`
    (rewriting the model file and its card beside it); returns the card."""
    path = pathlib.Path(path)
    entries = _read(path)
    card = read_card(path)
    if result.get("game") != card["game"]["name"]:
        raise ModelError(
            f"the figures are for {result.get('game')!r}, but {path} plays {card['game']['name']}"
        )
    try:
        key, figures = strength_entry(result)
    except KeyError as err:
        raise ModelError(f"the azjax-eval result lacks {err}") from None
    card["strength"] = {**card.get("strength", {}), key: figures}
    _write(path, {**entries, "card": json.dumps(card)})
    return card
