"""Run configuration: YAML files in `configs/` loaded into a tree of typed dataclasses.

    config = load_config("configs/connect4.yaml", ["search.num_simulations=64"])

A YAML file may name a `base` file (relative to itself) whose values it overrides. Overrides
are dotted keys with YAML values (`eval.opponents=[random,greedy]`). Unknown keys, wrong types
and impossible values raise `ConfigError` naming the key, before anything is compiled.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

import games
from azjax.specs import parse_spec


class ConfigError(ValueError):
    """A configuration that cannot run: the message names the offending key."""


def check_fields(section: str, config: Any, checks: Mapping[str, tuple[bool, str]]) -> None:
    """ValueError `section.field must be EXPECTED, got V` for the first field of `checks`
    ({field: (acceptable, what is expected)}) that fails."""
    for name, (ok, expected) in checks.items():
        if not ok:
            raise ValueError(f"{section}.{name} must be {expected}, got {getattr(config, name)!r}")


def _one_of(value: str, options: tuple[str, ...]) -> tuple[bool, str]:
    return value in options, f"one of {', '.join(options)}"


def _at_least(config: Any, **lows: int) -> dict[str, tuple[bool, str]]:
    """`check_fields` checks that each named field of `config` is >= its bound."""
    return {name: (getattr(config, name) >= low, f">= {low}") for name, low in lows.items()}


DTYPES = ("float32", "bfloat16")
ALGORITHMS = ("gumbel", "puct")
CHANCE_VALUES = ("expected", "sampled")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Size and compute precision of the residual network (azjax.network)."""

    blocks: int = 2  # residual blocks
    channels: int = 32
    head_channels: int = 8  # per-cell channels opening the policy and value heads
    dtype: str = "float32"  # compute dtype ("bfloat16" on accelerators); params stay float32

    def __post_init__(self) -> None:
        checks = _at_least(self, blocks=0, channels=1, head_channels=2)
        check_fields("network", self, checks | {"dtype": _one_of(self.dtype, DTYPES)})


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Search settings (azjax.search)."""

    algorithm: str = "gumbel"  # "gumbel" (Gumbel MuZero) | "puct" (AlphaZero's PUCT)
    num_simulations: int = 32
    max_num_considered_actions: int = 16  # Gumbel: actions sampled at the root
    gumbel_scale: float = 1.0  # Gumbel: scale of the root noise when exploring
    dirichlet_alpha: float = 0.3  # PUCT: root noise concentration
    dirichlet_fraction: float = 0.25  # PUCT: weight of the noise in the root prior
    pb_c_init: float = 1.25  # PUCT: exploration constant
    sample_cutoff: float | None = None  # a sampled move whose Q is more below the best plays greedy
    chance_value: str = "expected"  # a chance node's first value: "expected" over all outcomes
    # (one evaluation each) or "sampled" from one drawn outcome (one evaluation: pure MCTS)

    def __post_init__(self) -> None:
        checks = {"algorithm": _one_of(self.algorithm, ALGORITHMS)}
        checks |= _at_least(self, num_simulations=1, max_num_considered_actions=1, gumbel_scale=0)
        checks |= {
            "dirichlet_alpha": (self.dirichlet_alpha > 0, "> 0"),
            "dirichlet_fraction": (0 <= self.dirichlet_fraction <= 1, "in [0, 1]"),
            "pb_c_init": (self.pb_c_init > 0, "> 0"),
            "sample_cutoff": (self.sample_cutoff is None or self.sample_cutoff >= 0, ">= 0"),
            "chance_value": _one_of(self.chance_value, CHANCE_VALUES),
        }
        check_fields("search", self, checks)


@dataclasses.dataclass(frozen=True)
class SelfPlayConfig:
    """Games in flight, chunk length, playout cap randomization, move sampling (azjax.selfplay)."""

    batch_size: int = 256  # games in flight
    chunk_moves: int = 32  # moves per jitted chunk (lax.scan length)
    full_search_prob: float = 0.25  # playout cap randomization: P(full search)
    fast_simulations: int = 8
    temperature_moves: int | None = 8  # sampled moves opening a game, then argmax; null: all
    opening_moves: int = 0  # each game opens with 0..N uniformly random plies, not recorded

    def __post_init__(self) -> None:
        checks = _at_least(self, batch_size=1, chunk_moves=1, fast_simulations=1, opening_moves=0)
        checks["full_search_prob"] = (0.0 < self.full_search_prob <= 1.0, "in (0, 1]")
        moves = self.temperature_moves
        checks["temperature_moves"] = (moves is None or moves >= 0, ">= 0 or null")
        check_fields("selfplay", self, checks)


@dataclasses.dataclass(frozen=True)
class GameConfig:
    name: str = "tictactoe"
    kwargs: dict = dataclasses.field(default_factory=dict)  # e.g. {rows: 5, cols: 5}

    def make(self) -> games.Game:
        return games.make(self.name, **self.kwargs)


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    capacity: int = 100_000  # positions kept (a circular buffer)
    min_size: int = 1_000  # positions stored before gradient steps start

    def __post_init__(self) -> None:
        check_fields("replay", self, _at_least(self, capacity=1, min_size=1))


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    learning_rate: float = 1e-3  # peak, reached after the warm-up
    warmup_steps: int = 100
    final_lr_fraction: float = 0.1  # cosine decay to this fraction of the peak at the last step
    l2: float = 1e-4  # L2 penalty on weights in the loss
    max_grad_norm: float = 1.0  # global gradient-norm clip (0 disables)

    def __post_init__(self) -> None:
        checks = {"learning_rate": (self.learning_rate > 0, "> 0")}
        checks |= _at_least(self, warmup_steps=0, l2=0, max_grad_norm=0)
        checks["final_lr_fraction"] = (0 <= self.final_lr_fraction <= 1, "in [0, 1]")
        check_fields("optim", self, checks)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    iterations: int = 100  # self-play chunk -> buffer -> steps_per_iteration gradient steps
    steps_per_iteration: int = 16
    batch_size: int = 256  # positions per gradient step (global, over all devices)
    seed: int = 0
    # A model (WORKDIR[@STEP], FILE.azjax, zoo:NAME) whose parameters start the run (the rest
    # starts afresh, unless the file holds a snapshot of `azjax-export --resumable`, which the
    # run continues); ignored by a resumed run. "": random parameters.
    init_from: str = ""

    def __post_init__(self) -> None:
        checks = _at_least(self, iterations=1, steps_per_iteration=1, batch_size=1)
        checks["seed"] = (0 <= self.seed < 2**63 - 1, "in [0, 2**63 - 1) (seed + 1 is used)")
        check_fields("train", self, checks)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    every: int = 10  # iterations between evaluations (0: only the final one)
    num_games: int = 64  # games per opponent (colours alternate)
    final_num_games: int = 200  # games per opponent after the last iteration (0: none)
    opponents: tuple[str, ...] = ("random", "greedy")  # agent specs (azjax.agents.make)
    num_simulations: int = 0  # search simulations when evaluating (0: search.num_simulations)
    opening_moves: int = 0  # random plies opening each pair of games, so games vary

    def __post_init__(self) -> None:
        checks = _at_least(
            self, every=0, num_games=2, final_num_games=0, num_simulations=0, opening_moves=0
        )
        check_fields("eval", self, checks)


@dataclasses.dataclass(frozen=True)
class GateConfig:
    """Arena gating: self-play uses the best parameters so far; every `every` iterations the
    latest (the candidate) plays them `games` games with search and replaces them when it scores
    at least `threshold` (wins 1, draws 1/2)."""

    every: int = 0  # iterations between gating matches (0: off, self-play uses the latest)
    games: int = 64
    threshold: float = 0.55
    opening_moves: int = 2  # random plies opening each pair of games, so the games vary

    def __post_init__(self) -> None:
        checks = _at_least(self, every=0, opening_moves=0)
        checks["games"] = (self.games >= 2 and self.games % 2 == 0, "even and >= 2 (equal colours)")
        checks["threshold"] = (0.0 <= self.threshold <= 1.0, "in [0, 1]")
        check_fields("gate", self, checks)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    every: int = 10  # iterations between checkpoints (the last iteration is always saved)
    keep: int = 3  # newest checkpoints kept

    def __post_init__(self) -> None:
        check_fields("checkpoint", self, _at_least(self, every=1, keep=1))


@dataclasses.dataclass(frozen=True)
class Config:
    game: GameConfig = dataclasses.field(default_factory=GameConfig)
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)
    search: SearchConfig = dataclasses.field(default_factory=SearchConfig)
    selfplay: SelfPlayConfig = dataclasses.field(default_factory=SelfPlayConfig)
    replay: ReplayConfig = dataclasses.field(default_factory=ReplayConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    gate: GateConfig = dataclasses.field(default_factory=GateConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)

    def playing_search(self, simulations: int | None = None) -> SearchConfig:
        """The search a trained net plays with (evaluation, the arena, exported models): the
        self-play search with `simulations` when given, else `eval.num_simulations` when set."""
        simulations = simulations or self.eval.num_simulations or self.search.num_simulations
        return dataclasses.replace(self.search, num_simulations=simulations)

    def split_sizes(self) -> dict[str, int]:
        """The global sizes that the devices split evenly, by key."""
        return {
            "selfplay.batch_size": self.selfplay.batch_size,
            "train.batch_size": self.train.batch_size,
            "replay.capacity": self.replay.capacity,
        }


# ----------------------------------------------------------------------------- dict <-> dataclass


def config_to_dict(config: Any) -> Any:
    """A plain, YAML/JSON-ready dict of a config dataclass (tuples become lists)."""
    if dataclasses.is_dataclass(config):
        return {f.name: config_to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, tuple | list):
        return [config_to_dict(v) for v in config]
    if isinstance(config, Mapping):
        return {str(k): config_to_dict(v) for k, v in config.items()}
    return config


def _flat(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """A config dict as {dotted key: value}; an empty mapping adds no key."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(before: Mapping, after: Mapping) -> list[tuple[str, Any, Any]]:
    """(dotted key, before's value, after's) for each setting on which two config dicts
    (`config_to_dict`) differ, in the config's order; a key one of them lacks has None there."""
    old, new = _flat(before), _flat(after)
    keys = dict.fromkeys([*old, *new])
    return [(key, old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)]


def config_from_dict(data: Mapping[str, Any], check: bool = True) -> Config:
    """The Config of a nested dict (missing keys take defaults), validated with `check`."""
    config = _build(Config, data, "")
    if check:
        validate(config)
    return config


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)  # every field's type, in the fields' order
    where = f"{prefix}." if prefix else ""
    if unknown := sorted(set(data) - set(hints)):
        raise ConfigError(
            f"unknown key {where}{unknown[0]}; known keys{' of ' + prefix if prefix else ''}: "
            f"{', '.join(hints)}"
        )
    values = {name: _convert(hints[name], data[name], where + name) for name in data}
    try:
        return cls(**values)
    except ValueError as err:  # the engine's configs check their own values
        raise ConfigError(str(err)) from None


def _convert(kind: Any, value: Any, key: str) -> Any:
    if dataclasses.is_dataclass(kind):
        return _build(kind, value, key)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, key)
    if kind is float and isinstance(value, int | float | str) and not isinstance(value, bool):
        try:  # YAML 1.1 reads `1e-4` as a string
            number = float(value)
        except (ValueError, OverflowError):
            pass  # refused below
        else:
            if not math.isfinite(number):
                raise ConfigError(f"{key}: expected a finite number, got {value!r}")
            return number
    if kind in (int, str, bool) and type(value) is kind:
        return value
    if (kind is dict or origin is dict) and isinstance(value, Mapping):
        return dict(value)
    if origin is tuple and isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(_convert(args[0], v, f"{key}[{i}]") for i, v in enumerate(value))
    name = getattr(kind, "__name__", str(kind))
    raise ConfigError(f"{key}: expected {name}, got {value!r} ({type(value).__name__})")


# ----------------------------------------------------------------------------- validation


def validate(config: Config) -> None:
    """Raise ConfigError naming the first impossible value (cheap: nothing is compiled)."""
    try:
        game = config.game.make()
    except ValueError as err:
        g = config.game
        raise ConfigError(f"game.name={g.name!r}, game.kwargs={g.kwargs}: {err}") from None
    r, t = config.replay, config.train
    if r.capacity < t.batch_size:
        raise ConfigError(f"replay.capacity={r.capacity!r}: must be >= train.batch_size")
    if r.min_size > r.capacity:
        raise ConfigError(f"replay.min_size={r.min_size!r}: must be <= replay.capacity")
    for i, spec in enumerate(config.eval.opponents):
        try:
            kind = parse_spec(spec).kind
        except ValueError as err:
            raise ConfigError(f"eval.opponents[{i}]: {err}") from None
        if kind == "alphabeta" and game.has_chance:  # it would read the dice to come
            raise ConfigError(
                f"eval.opponents[{i}]={spec!r}: alpha-beta cannot play {game.name}, a game with "
                "chance"
            )


# ----------------------------------------------------------------------------- loading


def _read_yaml(path: pathlib.Path, seen: tuple[pathlib.Path, ...] = ()) -> dict:
    if path in seen:
        raise ConfigError(f"{path}: circular `base`")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror}") from None
    except yaml.YAMLError as err:  # told in one line (PyYAML's own text spans several)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        if mark := getattr(err, "problem_mark", None):
            problem += f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigError(f"{path} is not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    base = data.pop("base", None)
    if base is None:
        return data
    return _merge(_read_yaml((path.parent / base).resolve(), (*seen, path)), data)


def _merge(base: dict, top: Mapping) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key != "kwargs":
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_overrides(data: dict, overrides: Sequence[str]) -> dict:
    """Apply `dotted.key=yaml_value` overrides to a nested dict (a new dict is returned)."""
    data = _merge({}, data)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected dotted.key=value")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        node = data
        parts = key.strip().split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is not None and not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {'.'.join(parts[: i + 1])} is not a section")
            node[part] = dict(child or {})
            node = node[part]
        node[parts[-1]] = value
    return data


def load_config(
    path: str | pathlib.Path, overrides: Sequence[str] = (), check: bool = True
) -> Config:
    """Load a YAML config (following `base`), apply dotted overrides, validate (with `check`:
    making the game, which for a pgx game imports pgx and so starts JAX's backends)."""
    data = apply_overrides(_read_yaml(pathlib.Path(path).resolve()), overrides)
    return config_from_dict(data, check=check)


def dump_config(config: Config) -> str:
    """The config as YAML text."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)
