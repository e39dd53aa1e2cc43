"""Model files: a run's parameters, resolved config and model card in one portable file.

    card = export_run("runs/connect4", "connect4.azjax")             # the newest checkpoint
    config, params, card = load_model("connect4.azjax")               # no orbax, no run directory
    record_strength("connect4.azjax", json.load(open("match.json")))  # azjax-eval --json figures

A model file (`.azjax`) is one msgpack map: `format` "azjax-model", `version` 1, `config` and
`card` (JSON text), `dtype` (how `params`, flax msgpack bytes, are stored: float32 or bfloat16)
and, from `azjax-export --resumable`, `continuation`: a run snapshot (azjax.resume) as zlib'd
flax msgpack bytes. The card is also written beside it as `NAME.card.json`, for people.
"""

from __future__ import annotations

import contextlib
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

import azjax
import games
from azjax import checkpoint
from azjax.checks import write_error
from azjax.config import Config, ConfigError, config_from_dict, config_to_dict
from azjax.runlog import read_metrics
from azjax.specs import MODEL_SUFFIX, parse_spec

FORMAT = "azjax-model"
VERSION = 1
SUFFIX = MODEL_SUFFIX
STORAGE_DTYPES = ("float32", "bfloat16")
Params = Any
Card = dict[str, Any]
PathLike = str | pathlib.Path


class ModelError(ValueError):
    """A model file that cannot be read or written, or figures that do not fit its card."""


def card_path(path: PathLike) -> pathlib.Path:
    """Where the card of the model at `path` is written for people: `NAME.card.json`."""
    path = pathlib.Path(path)
    return path.with_name(path.name.removesuffix(SUFFIX) + ".card.json")


def card_game(card: Mapping[str, Any]) -> games.Game:
    """The game (and size) a card's model was trained for; ValueError for one not known here."""
    return games.make(card["game"]["name"], **card["game"]["kwargs"])


def shapes(params: Params) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape by its path, e.g. "['params']['Dense_0']['kernel']"."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(p): tuple(np.shape(x)) for p, x in leaves}


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
        raise write_error(f"cannot write {path}: {err.strerror}", err, ModelError) from None
    finally:  # what a failure or Ctrl-C left (nothing once renamed)
        tmp.unlink(missing_ok=True)


def write_card(path: PathLike, card: Mapping[str, Any] | None = None) -> Card:
    """Write the card of the model at `path` (or `card`) beside it as NAME.card.json; returns it."""
    card = read_card(path) if card is None else dict(card)
    write_atomically(card_path(path), (json.dumps(card, indent=2) + "\n").encode())
    return card


def _write(path: PathLike, entries: dict, card: Card) -> Card:
    """Write the model file `entries` with `card`, and the card beside it."""
    entries = {**entries, "card": json.dumps(card)}
    write_atomically(pathlib.Path(path), msgpack.packb(entries, use_bin_type=True))
    return write_card(path, card)


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
) -> Card:
    """A model card for `params` trained with `config`, with what is known of the run."""
    search = config.playing_search()
    return {
        "name": name,
        "game": {"name": config.game.name, "kwargs": dict(config.game.kwargs)},
        "network": config_to_dict(config.network),
        "parameters": int(sum(np.size(x) for x in jax.tree.leaves(params))),
        "search": {"algorithm": search.algorithm, "simulations": search.num_simulations},
        "iteration": iteration,
        "positions_seen": positions_seen,
        "wall_clock_minutes": wall_clock_minutes,
        "command": command,
        "device": device,
        "azjax_version": azjax.__version__,
        "strength": {},
    }


def run_figures(workdir: pathlib.Path, step: int) -> dict[str, Any]:
    """Positions seen and wall-clock minutes up to iteration `step`, from metrics.jsonl."""
    path = workdir / "metrics.jsonl"
    records = {  # the last record of each iteration, final evaluations aside
        r["iteration"]: r
        for r in (read_metrics(path) if path.exists() else [])
        if not r.get("final") and isinstance(r.get("iteration"), int) and r["iteration"] <= step
    }
    positions = sum(int(r.get("replay/added", 0)) for r in records.values())
    minutes = records[step].get("elapsed_minutes") if step in records else None
    return {"positions_seen": positions if records else None, "wall_clock_minutes": minutes}


def save_model(
    path: PathLike,
    config: Config,
    params: Params,
    card: Mapping[str, Any],
    dtype: str = "float32",
    snapshot: Mapping[str, Any] | None = None,
) -> Card:
    """Write a model file and its card, the parameters stored as `dtype`; a run `snapshot`
    (azjax.resume) lets `train.init_from` continue the run. Returns the card."""
    path = pathlib.Path(path)
    check_suffix(path, SUFFIX)
    if dtype not in STORAGE_DTYPES:
        raise ModelError(f"storage dtype must be one of {', '.join(STORAGE_DTYPES)}, got {dtype!r}")
    stored = jax.tree.map(lambda x: np.asarray(x, jnp.dtype(dtype)), jax.device_get(params))
    entries = dict(format=FORMAT, version=VERSION, config=json.dumps(config_to_dict(config)))
    entries.update(card=None, dtype=dtype, params=flax.serialization.msgpack_serialize(stored))
    if snapshot is not None:
        packed = flax.serialization.msgpack_serialize(dict(snapshot))
        entries["continuation"] = zlib.compress(packed, 1)
    return _write(path, entries, {**card, "storage_dtype": dtype})


def _playing(config: Config, simulations: int) -> Config:
    """`config` with the model playing `simulations` simulations by default."""
    if isinstance(simulations, bool) or not isinstance(simulations, int) or simulations < 1:
        raise ModelError(f"simulations must be an integer >= 1, got {simulations!r}")
    eval_config = dataclasses.replace(config.eval, num_simulations=simulations)
    return dataclasses.replace(config, eval=eval_config)


def export_run(
    workdir: PathLike,
    out: PathLike,
    step: int | None = None,
    dtype: str = "float32",
    command: str | None = None,
    device: str | None = None,
    simulations: int | None = None,
    snapshot: Mapping[str, Any] | None = None,
) -> Card:
    """Write checkpoint `step` of a run (None: the newest) as model file `out`, with `snapshot`
    (azjax.resume.run_snapshot) if given; returns the card. `command` defaults to `azjax-train` on
    the run's config.yaml; the model plays `simulations` (default: the run's evaluation ones)."""
    workdir, out = pathlib.Path(workdir), pathlib.Path(out)
    check_suffix(out, SUFFIX)
    step = checkpoint.pick_step(workdir, step)
    config, params = checkpoint.load_for_inference(str(workdir), step)
    if simulations is not None:
        config = _playing(config, simulations)
    if command is None and (workdir / "config.yaml").exists():
        command = f"azjax-train --config {workdir / 'config.yaml'} --workdir {workdir}"
    name, figures = out.name.removesuffix(SUFFIX), run_figures(workdir, step)
    card = make_card(config, params, name, step, command=command, device=device, **figures)
    return save_model(out, config, params, card, dtype, snapshot)


def _read(path: PathLike) -> dict[str, Any]:
    """The checked msgpack map of a model file."""
    path = pathlib.Path(path)
    try:
        entries = msgpack.unpackb(path.read_bytes(), raw=False)
    except OSError as err:
        raise ModelError(f"cannot read model {path}: {err.strerror}") from None
    except (ValueError, msgpack.UnpackException) as err:
        raise ModelError(f"{path} is not an azjax model file ({type(err).__name__})") from None
    if not isinstance(entries, dict) or entries.get("format") != FORMAT:
        raise ModelError(f"{path} is not an azjax model file (expected format {FORMAT!r})")
    if (version := entries.get("version")) != VERSION:
        raise ModelError(f"{path} has format version {version!r}; this azjax reads {VERSION}")
    if missing := sorted({"config", "card", "dtype", "params"} - entries.keys()):
        raise ModelError(f"{path} is damaged: no {', '.join(missing)}")
    return entries


def read_card(path: PathLike) -> Card:
    """The card of the model file at `path`."""
    try:
        return json.loads(_read(path)["card"])
    except json.JSONDecodeError as err:
        raise ModelError(f"{path} has a damaged card: {err}") from None


def read_config(path: PathLike) -> Config:
    """The config of the model file at `path` (its game, network and search)."""
    try:
        return config_from_dict(json.loads(_read(path)["config"]))
    except (json.JSONDecodeError, ConfigError) as err:
        raise ModelError(f"{path} has an unusable config: {err}") from None


def read_snapshot(path: PathLike) -> dict[str, Any] | None:
    """The run snapshot in the model file at `path` (azjax.resume); None when it has none."""
    if (packed := _read(path).get("continuation")) is None:
        return None
    try:
        return flax.serialization.msgpack_restore(zlib.decompress(packed))
    except Exception as err:  # zlib and flax raise several kinds for bad bytes
        raise ModelError(f"{path} has a damaged run snapshot ({type(err).__name__})") from None


def load_model(path: PathLike) -> tuple[Config, Params, Card]:
    """(config, float32 params, card) of a model file; ModelError naming what is wrong."""
    config, card = read_config(path), read_card(path)
    want = shapes(checkpoint.abstract_params(config))
    try:
        stored = flax.serialization.msgpack_restore(_read(path)["params"])
    except Exception as err:  # flax raises several kinds for bad bytes
        raise ModelError(f"{path} has damaged parameters ({type(err).__name__})") from None
    if want != (have := shapes(stored)):
        bad = min(k for k in want.keys() | have.keys() if want.get(k) != have.get(k))
        need = f"but the network in its config needs {want.get(bad)}"
        raise ModelError(f"{path}: parameter {bad} has shape {have.get(bad)}, {need}")
    return config, jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), stored), card


def set_provenance(path: PathLike, command: str | None = None, device: str | None = None) -> Card:
    """Set the training `command` and `device` (those given) in the card of the model at `path`
    (rewriting the model file and its card beside it); returns the card."""
    card = read_card(path)
    card.update({k: v for k, v in (("command", command), ("device", device)) if v is not None})
    return _write(path, _read(path), card)


def set_simulations(path: PathLike, simulations: int) -> Card:
    """Make the model at `path` play with `simulations` by default (in its config and card);
    figures filed for its old default (`zoo:NAME`) are renamed to name it (`zoo:NAME:OLD`), so
    that each figure still names the search that earned it. Returns the card."""
    config, card = _playing(read_config(path), simulations), read_card(path)
    old, strength = card["search"]["simulations"], {}
    for key, figures in card.get("strength", {}).items():
        agent = figures.get("agent", "")
        with contextlib.suppress(ValueError):  # an agent spec not parsed is left as it is
            spec = parse_spec(agent)
            if spec.kind in ("zoo", "search") and spec.number is None and simulations != old:
                key = f"{agent}:{old}" + key.removeprefix(agent)
                figures = {**figures, "agent": f"{agent}:{old}"}
        strength[key] = figures
    card = {**card, "search": {**card["search"], "simulations": simulations}, "strength": strength}
    return _write(path, {**_read(path), "config": json.dumps(config_to_dict(config))}, card)


def _strength_entry(result: Mapping[str, Any]) -> tuple[str, Card]:
    """The card entry for one `azjax-eval --json` result: a match (the model as agent A) or a
    perfect-play accuracy, with the mistake rates in the Pons groups where it has them."""
    if isinstance(m := result.get("match"), Mapping):
        keys = ("games", "distinct_games", "wins", "draws", "losses", "score", "ci95")
        opening = m.get("opening_moves", 0)
        key = f"{m['a']} vs {m['b']}" + (f", {opening} random opening plies" if opening else "")
        return key, {"agent": m["a"], "opening_moves": opening, **{k: m[k] for k in keys}}
    if isinstance(a := result.get("accuracy"), Mapping):
        if result.get("interrupted"):  # the set's first positions: not a sample of it
            raise ModelError(
                f"the --solver result was interrupted after {result.get('positions')} of "
                f"{result.get('planned_positions')} positions; file a finished one"
            )
        keys = ("positions", "best_move", "keeps_result")
        figures = {"agent": result["agent"], **{k: a[k] for k in keys}}
        if "pons" in result:  # Connect4's six groups
            figures["pons"] = result["pons"]
        return f"{result['agent']} on the solver positions", figures
    raise ModelError(
        "expected an azjax-eval --json result of a match (--a MODEL --b OPPONENT) or of "
        f"--solver, got one with keys {sorted(result)}"
    )


def record_strength(path: PathLike, result: Mapping[str, Any]) -> Card:
    """File the figures of an `azjax-eval --json` result in the card of the model at `path`
    (rewriting the model file and its card beside it); returns the card."""
    entries, card = _read(path), read_card(path)
    if result.get("game") != (game := card["game"]["name"]):
        raise ModelError(f"the figures are for {result.get('game')!r}, but {path} plays {game}")
    try:
        key, figures = _strength_entry(result)
    except KeyError as err:
        raise ModelError(f"the azjax-eval result lacks {err}") from None
    card["strength"] = {**card.get("strength", {}), key: figures}
    return _write(path, entries, card)


def headline(card: Mapping[str, Any]) -> str:
    """The strength figures of a card in one line ("-" when none were recorded): those of the
    model as it plays by default (`zoo:NAME`), then of its raw policy (`policy-zoo:NAME`), and
    a count of the others (other simulations); of the Pons groups, the one with most mistakes."""
    figures, name = card.get("strength", {}), card.get("name")
    default = {f"zoo:{name}": "", f"policy-zoo:{name}": "policy "}
    shown = {k: f for k, f in figures.items() if f.get("agent") in default} or figures
    parts = []
    for key, f in sorted(shown.items(), key=lambda kv: kv[1].get("agent") == f"policy-zoo:{name}"):
        who = default.get(f.get("agent"), f"{f.get('agent')} ")
        if "score" in f:
            opponent = key.split(" vs ", 1)[-1].split(",", 1)[0]
            plies = f.get("opening_moves", 0)
            opening = f", {plies} opening pl{'y' if plies == 1 else 'ies'}" if plies else ""
            parts.append(f"{who}vs {opponent} {f['score']:.1%} of {f['games']}{opening}")
        elif "best_move" in f:
            kept = f", result kept {f['keeps_result']:.1%}" if "keeps_result" in f else ""
            groups = f.get("pons", {}).items()
            worst = max(groups, key=lambda kv: kv[1]["mistake_rate"], default=None)
            pons = f", Pons {worst[0]} {worst[1]['mistake_rate']:.1%} mistakes" if worst else ""
            parts.append(f"{who}solver best move {f['best_move']:.1%}{kept}{pons}")
    if len(shown) < len(figures):
        parts.append(f"{len(figures) - len(shown)} more in the card")
    return "; ".join(parts) or "-"
