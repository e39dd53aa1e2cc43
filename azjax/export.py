"""Portable trained models: one file with the parameters, the run's config and a model card.

    card = export_run("runs/connect4", "connect4.azjax")        # the newest checkpoint
    config, params, card = load_model("connect4.azjax")          # no orbax, no run directory
    record_strength("connect4.azjax", json.load(open("match.json")))  # azjax-eval --json figures
    set_simulations("connect4.azjax", 512)                       # its default search
    export_onnx(config, params, "connect4.onnx")                 # obs -> (logits, value)

A model file (`.azjax`) is one msgpack map:

    format   "azjax-model"
    version  1
    config   the resolved run config (JSON text)
    card     the model card (JSON text, below)
    dtype    how the parameters are stored: "float32" or "bfloat16"
    params   the parameters, flax.serialization msgpack bytes (loaded back as float32)

The card is also written beside the model as `NAME.card.json`, for people to read. It holds the
game and its size keywords, the network, the parameter count and storage dtype, the search the
model plays with by default, the training iteration, positions seen (the sum of `replay/added`
in the run's metrics.jsonl), wall-clock minutes (its `elapsed_minutes`), the training command
and device when given, and `strength`: figures filed by `record_strength`, empty at export.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import msgpack
import numpy as np

import azjax
import games
from azjax import checkpoint
from azjax.config import Config, ConfigError, config_from_dict, config_to_dict
from azjax.metrics import read_metrics
from azjax.network import init_params, make_network
from azjax.specs import MODEL_SUFFIX, parse_spec

FORMAT = "azjax-model"
VERSION = 1
SUFFIX = MODEL_SUFFIX
CARD_SUFFIX = ".card.json"
STORAGE_DTYPES = ("float32", "bfloat16")
Params = Any


class ModelError(ValueError):
    """A model file that cannot be read or written, or figures that do not fit its card."""


def card_path(path: str | pathlib.Path) -> pathlib.Path:
    """Where the card of the model at `path` is written for people: `NAME.card.json`."""
    path = pathlib.Path(path)
    return path.with_name(path.name.removesuffix(SUFFIX) + CARD_SUFFIX)


# ----------------------------------------------------------------------------- writing


def _check_suffix(path: pathlib.Path, suffix: str) -> None:
    if not path.name.endswith(suffix) or path.name == suffix:
        raise ModelError(f"model file {path}: expected a name ending in {suffix}")


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
    if not path.parent.is_dir():
        raise ModelError(f"cannot write {path}: there is no folder {path.parent}")
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise ModelError(f"cannot write {path}: {err.strerror}") from None
    except BaseException:  # Ctrl-C
        tmp.unlink(missing_ok=True)
        raise


def _write(path: pathlib.Path, entries: Mapping[str, Any]) -> None:
    """The model file and its card beside it."""
    _write_atomically(path, msgpack.packb(dict(entries), use_bin_type=True))
    write_card(path)


def write_card(path: str | pathlib.Path) -> dict[str, Any]:
    """Write the card of the model at `path` beside it (NAME.card.json); returns the card."""
    card = read_card(path)
    _write_atomically(card_path(path), (json.dumps(card, indent=2) + "\n").encode())
    return card


def save_model(
    path: str | pathlib.Path,
    config: Config,
    params: Params,
    card: Mapping[str, Any],
    dtype: str = "float32",
) -> None:
    """Write a model file (and its card beside it); `dtype` is how the parameters are stored."""
    path = pathlib.Path(path)
    _check_suffix(path, SUFFIX)
    if dtype not in STORAGE_DTYPES:
        raise ModelError(f"storage dtype must be one of {', '.join(STORAGE_DTYPES)}, got {dtype!r}")
    stored = jax.tree.map(lambda x: np.asarray(x, jnp.dtype(dtype)), jax.device_get(params))
    card = {**card, "storage_dtype": dtype}
    _write(
        path,
        {
            "format": FORMAT,
            "version": VERSION,
            "config": json.dumps(config_to_dict(config)),
            "card": json.dumps(card),
            "dtype": dtype,
            "params": flax.serialization.msgpack_serialize(stored),
        },
    )


def _run_figures(workdir: pathlib.Path, step: int) -> dict[str, Any]:
    """Positions seen and wall-clock minutes up to iteration `step`, from metrics.jsonl."""
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return {"positions_seen": None, "wall_clock_minutes": None}
    records = {  # the last record of each iteration, final evaluations aside
        r["iteration"]: r
        for r in read_metrics(path)
        if not r.get("final") and isinstance(r.get("iteration"), int) and r["iteration"] <= step
    }
    positions = sum(int(r.get("replay/added", 0)) for r in records.values())
    minutes = records[step].get("elapsed_minutes") if step in records else None
    return {"positions_seen": positions if records else None, "wall_clock_minutes": minutes}


def make_card(
    config: Config,
    params: Params,
    name: str,
    iteration: int | None = None,
    *,
    positions_seen: int | None = None,
    wall_clock_minutes: float | None = None,
    command: str | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """A model card for `params` trained with `config`, with what is known of the run."""
    return {
        "name": name,
        "game": {"name": config.game.name, "kwargs": dict(config.game.kwargs)},
        "network": config_to_dict(config.network),
        "parameters": int(sum(np.size(x) for x in jax.tree.leaves(params))),
        "search": {
            "algorithm": config.search.algorithm,
            "simulations": config.playing_search().num_simulations,
        },
        "iteration": iteration,
        "positions_seen": positions_seen,
        "wall_clock_minutes": wall_clock_minutes,
        "command": command,
        "device": device,
        "azjax_version": azjax.__version__,
        "strength": {},
    }


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
) -> dict[str, Any]:
    """Write checkpoint `step` of a run (the newest when None) as the model file `out`.

    `command` (how the run was trained) defaults to `azjax-train` on the run's resolved
    `config.yaml` when the run has one; `device` is recorded as given. The model plays with
    `simulations` by default when given, else with the run's evaluation simulations. Returns
    the card.
    """
    workdir, out = pathlib.Path(workdir), pathlib.Path(out)
    _check_suffix(out, SUFFIX)
    if step is None:
        steps = checkpoint.list_steps(workdir)
        step = steps[-1] if steps else None  # None: load_for_inference names the empty run
    config, params = checkpoint.load_for_inference(str(workdir), step)
    if simulations is not None:
        config = _playing(config, simulations)
    if command is None and (workdir / "config.yaml").exists():
        command = f"azjax-train --config {workdir / 'config.yaml'} --workdir {workdir}"
    name = out.name.removesuffix(SUFFIX)
    figures = _run_figures(workdir, step)
    card = make_card(config, params, name, step, command=command, device=device, **figures)
    save_model(out, config, params, card, dtype)
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


def card_game(card: Mapping[str, Any]) -> games.Game:
    """The game (and size) a card's model was trained for, as `games.make` returns it; ValueError
    for a game or size this azjax does not know."""
    return games.make(card["game"]["name"], **card["game"]["kwargs"])


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
    """Make the model at `path` play with `simulations` by default (its config and card), and
    name the old default in the figures filed for it (`zoo:NAME` becomes `zoo:NAME:OLD`), so
    that each figure still names the search that earned it. Returns the card."""
    path = pathlib.Path(path)
    entries, card, config = _read(path), read_card(path), read_config(path)
    config = _playing(config, simulations)
    old = card["search"]["simulations"]
    strength = {}
    for key, figures in card.get("strength", {}).items():
        agent = figures.get("agent", "")
        try:
            spec = parse_spec(agent)
        except ValueError:
            spec = None
        renamed = spec is not None and spec.kind in ("zoo", "search") and spec.number is None
        if renamed and simulations != old:
            key = f"{agent}:{old}" + key.removeprefix(agent)
            figures = {**figures, "agent": f"{agent}:{old}"}
        strength[key] = figures
    card = {**card, "search": {**card["search"], "simulations": simulations}, "strength": strength}
    config_text = json.dumps(config_to_dict(config))
    _write(path, {**entries, "config": config_text, "card": json.dumps(card)})
    return card


def read_config(path: str | pathlib.Path) -> Config:
    """The config of the model file at `path` (its game, network and search)."""
    try:
        return config_from_dict(json.loads(_read(path)["config"]))
    except (json.JSONDecodeError, ConfigError) as err:
        raise ModelError(f"{path} has an unusable config: {err}") from None


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


# ----------------------------------------------------------------------------- the card


def _strength(result: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The card entry for one `azjax-eval --json` result: a match (the model as agent A) or a
    perfect-play accuracy."""
    if isinstance(result.get("match"), Mapping):
        m = result["match"]
        keys = ("games", "wins", "draws", "losses", "score", "ci95")
        opening = m.get("opening_moves", 0)
        key = f"{m['a']} vs {m['b']}" + (f", {opening} random opening plies" if opening else "")
        figures = {"agent": m["a"], "opening_moves": opening, **{k: m[k] for k in keys}}
        return key, figures
    if isinstance(result.get("accuracy"), Mapping):
        a = result["accuracy"]
        keys = ("positions", "best_move", "keeps_result")
        key = f"{result['agent']} on the solver positions"
        return key, {"agent": result["agent"], **{k: a[k] for k in keys}}
    raise ModelError(
        "expected an azjax-eval --json result of a match (--a MODEL --b OPPONENT) or of "
        f"--solver, got one with keys {sorted(result)}"
    )


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
        key, figures = _strength(result)
    except KeyError as err:
        raise ModelError(f"the azjax-eval result lacks {err}") from None
    card["strength"] = {**card.get("strength", {}), key: figures}
    _write(path, {**entries, "card": json.dumps(card)})
    return card


def headline(card: Mapping[str, Any]) -> str:
    """The strength figures of a card in one line ("-" when none were recorded): those of the
    model as it plays by default (`zoo:NAME`) and of its raw policy (`policy-zoo:NAME`), with a
    count of the figures at other settings (other simulations) that the card also holds."""
    figures = card.get("strength", {})
    name = card.get("name")
    default = {f"zoo:{name}": "", f"policy-zoo:{name}": "policy "}
    shown = {k: f for k, f in figures.items() if f.get("agent") in default} or figures
    parts = []
    raw_policy_last = sorted(
        shown.items(), key=lambda kv: kv[1].get("agent") == f"policy-zoo:{name}"
    )
    for key, f in raw_policy_last:
        who = default.get(f.get("agent"), f"{f.get('agent')} ")
        if "score" in f:
            opponent = key.split(" vs ", 1)[-1].split(",", 1)[0]
            plies = f.get("opening_moves", 0)
            opening = f", {plies} opening pl{'y' if plies == 1 else 'ies'}" if plies else ""
            parts.append(f"{who}vs {opponent} {f['score']:.1%} of {f['games']}{opening}")
        elif "best_move" in f:
            kept = f", result kept {f['keeps_result']:.1%}" if "keeps_result" in f else ""
            parts.append(f"{who}solver best move {f['best_move']:.1%}{kept}")
    if len(shown) < len(figures):
        parts.append(f"{len(figures) - len(shown)} more in the card")
    return "; ".join(parts) or "-"


# ----------------------------------------------------------------------------- ONNX


def _float32_network(config: Config) -> tuple[Any, Any]:
    """(game, network) of `config`, computing in float32 (the parameters are the same)."""
    game = config.game.make()
    return game, make_network(game, dataclasses.replace(config.network, dtype="float32"))


def _onnx_plugins() -> None:
    """Register jax2onnx's plugins for JAX primitives and flax modules only.

    jax2onnx 0.17 imports every plugin tree before its first conversion; its equinox tree
    builds example modules at import time, which costs about 30 s of compilation on a small
    CPU. azjax's networks are flax modules over plain JAX primitives, so only those two trees
    are imported (without the flax tree, its `jnp.shape` patch fails on the symbolic batch).
    """
    import jax2onnx.plugins  # optional (the export extra), and slow to import
    from jax2onnx.plugins import plugin_system  # the same

    if not plugin_system._already_imported_plugins:
        root = pathlib.Path(jax2onnx.plugins.__file__).parent
        for tree in ("jax", "flax"):
            plugin_system._import_tree(root / tree, f"jax2onnx.plugins.{tree}")
        plugin_system._already_imported_plugins = True


def export_onnx(
    config: Config,
    params: Params,
    out: str | pathlib.Path,
    batch: int | None = None,
    card: Mapping[str, Any] | None = None,
) -> None:
    """Write the network as ONNX: input `obs` float32 [B, *observation_shape], outputs `logits`
    float32 [B, num_actions] and `value` float32 [B]; B is symbolic unless `batch` is given.

    The graph computes in float32 whatever `network.dtype` the run trained with. The network
    picks its 3x3 convolution with `lax.platform_dependent`, which jax2onnx cannot lower, so the
    network is traced on the CPU with compile-time evaluation: the platform is resolved while
    tracing and the CPU form (the native convolution with im2col's gradients: ONNX `Conv`
    nodes) is exported, over the same parameters. The config, and `card` when given, go into
    the model's metadata.
    """
    try:
        from jax2onnx import to_onnx  # optional (the export extra), and slow to import
    except ImportError:
        raise ImportError(
            "ONNX export needs jax2onnx and onnxruntime: pip install 'azjax[export]' and then "
            "pip install --no-deps 'jax2onnx>=0.17,<0.18' (see the README)"
        ) from None
    out = pathlib.Path(out)
    _check_suffix(out, ".onnx")
    if batch is not None and batch < 1:
        raise ModelError(f"ONNX batch size must be >= 1 (or symbolic), got {batch}")
    if not out.parent.is_dir():
        raise ModelError(f"cannot write {out}: there is no folder {out.parent}")
    game, network = _float32_network(config)
    cpu = jax.devices("cpu")[0]
    params = jax.device_put(jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params), cpu)

    def apply(obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        with jax.ensure_compile_time_eval(), jax.default_device(cpu):
            return network.apply(params, obs)

    _onnx_plugins()
    logging.getLogger("onnx_ir").setLevel(logging.ERROR)  # notes on untyped shape constants
    model = to_onnx(
        apply,
        [("B" if batch is None else batch, *game.observation_shape)],
        model_name=f"azjax_{game.name}",
        input_names=["obs"],
        output_names=["logits", "value"],
    )
    metadata = {"azjax_config": json.dumps(config_to_dict(config))}
    if card is not None:
        metadata["azjax_card"] = json.dumps(card)
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    _write_atomically(out, model.SerializeToString())


def write_checked_onnx(
    config: Config,
    params: Params,
    out: str | pathlib.Path,
    batch: int | None = None,
    card: Mapping[str, Any] | None = None,
) -> float:
    """`export_onnx` into a file beside `out`, checked by onnxruntime (`check_onnx`) and only
    then moved to `out`: a failed or interrupted export leaves `out` as it was. Returns the
    check's largest difference."""
    out = pathlib.Path(out)
    _check_suffix(out, ".onnx")
    if not out.parent.is_dir():
        raise ModelError(f"cannot write {out}: there is no folder {out.parent}")
    unchecked = out.with_name(f"{out.name[: -len('.onnx')]}.unchecked.onnx")
    try:
        export_onnx(config, params, unchecked, batch, card)
        difference = check_onnx(unchecked, config, params)
        os.replace(unchecked, out)
    except OSError as err:
        raise ModelError(f"cannot write {out}: {err.strerror}") from None
    finally:
        unchecked.unlink(missing_ok=True)
    return difference


def check_onnx(
    path: str | pathlib.Path, config: Config, params: Params, positions: int = 64, seed: int = 0
) -> float:
    """The largest absolute difference between onnxruntime's outputs for the ONNX model at
    `path` and the network's, over random 0/1 observations (`positions` of them, or the
    model's fixed batch size)."""
    import onnxruntime  # optional (the export extra)

    game, network = _float32_network(config)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    batch = session.get_inputs()[0].shape[0]
    shape = (batch if isinstance(batch, int) else positions, *game.observation_shape)
    obs = np.asarray(jax.random.bernoulli(jax.random.key(seed), 0.3, shape), np.float32)
    logits, value = session.run(["logits", "value"], {"obs": obs})
    want_logits, want_value = network.apply(params, obs)
    return float(
        max(np.abs(logits - want_logits).max(), np.abs(value - np.asarray(want_value)).max())
    )
