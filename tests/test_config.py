"""Configs: every YAML loads; overrides; bad keys, types and values are named in one line."""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys

import pytest
from helpers import ROOT

from azjax import export
from azjax.config import (
    Config,
    ConfigError,
    EvalConfig,
    SearchConfig,
    config_from_dict,
    config_to_dict,
    differences,
    load_config,
)

CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
TICTACTOE = ROOT / "configs" / "tictactoe.yaml"
BENCH_CONFIGS = sorted(ROOT.glob("docs/bench/configs/*.yaml"))


@pytest.mark.parametrize("path", CONFIGS + BENCH_CONFIGS, ids=lambda p: p.stem)
def test_every_config_loads_and_round_trips(path):
    config = load_config(path)
    assert config_from_dict(config_to_dict(config)) == config
    if path in CONFIGS and path.stem != "small_game":  # a base for a new game
        assert config.game.name.replace(":", "_") in path.stem  # pgx:hex in pgx_hex.yaml


def test_the_promised_configs_exist_and_variants_inherit_from_their_base(tmp_path):
    expected = {"tictactoe", "connect4", "connect4_gpu", "connect4_tpu", "othello", "othello6"}
    expected |= {"dots_and_boxes", "chain_reaction", "chain_reaction_gpu"}
    assert expected <= {p.stem for p in CONFIGS}
    base, gpu = (load_config(ROOT / "configs" / f"{n}.yaml") for n in ("connect4", "connect4_gpu"))
    assert gpu.game == base.game and gpu.network.channels > base.network.channels
    # A variant's game kwargs replace its base's whole (size keywords belong to one game).
    (tmp_path / "base.yaml").write_text("game:\n  name: chain_reaction\n  kwargs: {rows: 4}\n")
    (tmp_path / "variant.yaml").write_text("base: base.yaml\ngame:\n  kwargs: {cols: 5}\n")
    assert load_config(tmp_path / "variant.yaml").game.kwargs == {"cols": 5}


def _recipe(command: str):
    """The config file and overrides of the last training step of a card's command line
    (`azjax-train --config X ... KEY=VALUE`, or `make train [CONFIG=X] [ARGS="KEY=VALUE ..."]`)."""
    steps = [s.split() for s in command.split("#")[0].split("&&")]
    words = shlex.split(" ".join(next(s for s in reversed(steps) if "export" not in s[0])))
    if words[:2] == ["make", "train"]:
        named = dict(w.split("=", 1) for w in words[2:])
        config = named.get("CONFIG", "configs/chain_reaction.yaml")  # the Makefile's default
        return ROOT / config, named.get("ARGS", "").split()
    assert words[0] == "azjax-train", command
    overrides = [w for w in words if "=" in w and not w.startswith("-")]
    return ROOT / words[words.index("--config") + 1], overrides


@pytest.mark.parametrize(
    "model", sorted((ROOT / "azjax/zoo").glob("*.azjax")), ids=lambda p: p.stem
)
def test_every_zoo_recipe_still_trains_its_models_config(model):
    """A zoo card's command, run today, trains with the model's config."""
    path, overrides = _recipe(export.read_card(model)["command"])
    ours = config_to_dict(load_config(path, overrides))
    theirs = config_to_dict(export.read_config(model))
    for section in ("eval", "checkpoint"):  # neither changes the parameters trained
        del ours[section], theirs[section]
    assert ours == theirs


def test_dotted_overrides_set_typed_values_in_any_section(tmp_path):
    overrides = ["search.num_simulations=64", " optim.learning_rate = 1e-2"]
    overrides += ["eval.opponents=[random, alphabeta:2]", "network.dtype=bfloat16"]
    config = load_config(TICTACTOE, overrides)
    assert config.search.num_simulations == 64 and config.network.dtype == "bfloat16"
    assert config.optim.learning_rate == 0.01 and isinstance(config.optim.learning_rate, float)
    assert config.eval.opponents == ("random", "alphabeta:2")
    chain = load_config(ROOT / "configs" / "chain_reaction.yaml", ["game.kwargs.rows=6"])
    assert chain.game.make().num_actions == 6 * chain.game.kwargs["cols"]
    (tmp_path / "bare.yaml").write_text("game:\n  name: tictactoe\n")
    assert load_config(tmp_path / "bare.yaml", ["train.iterations=3"]).train.iterations == 3
    # A buffer of one batch, training once it is full: the bounds themselves load.
    bounds = ["train.batch_size=64", "replay.capacity=64", "replay.min_size=64"]
    assert load_config(TICTACTOE, bounds).replay.min_size == 64


def test_a_trained_net_plays_the_evaluation_simulations_unless_told_otherwise():
    search = SearchConfig(algorithm="puct", num_simulations=16, pb_c_init=2.0)
    config = Config(search=search, eval=EvalConfig(num_simulations=128))
    assert config.playing_search() == dataclasses.replace(search, num_simulations=128)
    assert config.playing_search(512).num_simulations == 512
    assert Config(search=search).playing_search() == search


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("search.num_simulation=64", "search.num_simulation"),  # typo
        ("serch.num_simulations=64", "serch"),
        ("replay.capacity.x=1", "replay.capacity"),
        ("search.num_simulations=many", "search.num_simulations"),
        ("train.iterations=1.5", "train.iterations"),
        ("optim.learning_rate=true", "optim.learning_rate"),  # no boolean is a number
        ("game.name=@chess", "game.name"),  # not YAML: the text itself, then refused as a game
        ("eval.opponents=random", "eval.opponents: expected tuple, got 'random'"),
        ("search.algorithm=alphazero", "search.algorithm"),
        ("replay.min_size=1000000", "replay.min_size"),
        ("eval.opponents=[random, gredy]", "eval.opponents[1]"),
        ("game.name=chess", "game.name"),
        ("game.kwargs.size=4", "game.kwargs"),
        ("optim.learning_rate=.inf", "optim.learning_rate"),
        ("optim.l2=nan", "optim.l2"),
        ("eval.opponents=[random, mcts:abc]", "eval.opponents[1]"),
        ("optim=3", "optim: expected a mapping, got 3"),
        ("replay.capacity=8", "replay.capacity=8: must be >= train.batch_size"),
        ("gate.games=5", r"gate.games must be even and >= 2 (equal colours), got 5"),
        ("search.num_simulations", "override 'search.num_simulations': expected dotted.key="),
    ],
)
def test_bad_configs_stop_naming_the_key(override, named):
    with pytest.raises(ConfigError, match=re.escape(named)) as refused:
        load_config(TICTACTOE, [override])
    assert "\n" not in str(refused.value)  # the command lines' one line


def test_unreadable_and_malformed_files(tmp_path):
    bad, loop = tmp_path / "bad.yaml", tmp_path / "loop.yaml"
    loop.write_text("base: other.yaml\n")
    (tmp_path / "other.yaml").write_text("base: loop.yaml\n")
    for text, message in [
        (None, "cannot read"),
        ("game: [unclosed\n", "not valid YAML"),
        ("game:\n  name: a: b\n", r"not allowed here at line 2, column 10$"),
        ("- a list\n", r"bad\.yaml: expected a mapping at the top level"),
        ("base: loop.yaml\n", r"loop\.yaml: circular `base`"),
    ]:
        if text is not None:
            bad.write_text(text)
        with pytest.raises(ConfigError, match=message) as refused:
            load_config(bad if text else tmp_path / "missing.yaml")
        assert "\n" not in str(refused.value)
    # A config (or a model file's or run's stored one) holding a key azjax no longer has.
    data = config_to_dict(Config())
    data["network"]["global_pool"] = False
    with pytest.raises(ConfigError, match=r"^unknown key network\.global_pool; known keys of "):
        config_from_dict(data)


def _bounds(monkeypatch) -> list[tuple[type, str, str, str]]:
    """(class, section, field, what is expected) of every numeric check the config dataclasses
    make, recorded from `check_fields` while each section is built with its defaults."""
    import azjax.config

    real, seen, found = azjax.config.check_fields, [], []

    def record(section, config, checks):
        seen.extend((section, name, expected) for name, (_, expected) in checks.items())
        real(section, config, checks)

    callers = [m for n, m in sys.modules.items() if n.startswith("azjax.")]
    for module in [m for m in callers if getattr(m, "check_fields", None) is real]:
        monkeypatch.setattr(module, "check_fields", record)
    for cls in [type(getattr(Config(), f.name)) for f in dataclasses.fields(Config)]:
        seen.clear()
        default = cls()
        for section, name, expected in seen:
            if isinstance(getattr(default, name, None), int | float):
                found.append((cls, section, name, expected))
    return found


def test_every_numeric_bound_accepts_and_refuses_what_its_message_says(monkeypatch):
    """At each bound a message states (`> 0`, `>= 1`, `in [0, 1]`, `in (0, 1]`), the value on
    the bound and the nearest ones beside it are accepted or refused as the message says."""
    checked = 0
    for cls, section, name, expected in _bounds(monkeypatch):
        integer = isinstance(getattr(cls(), name), int)
        tiny, number = (1 if integer else 1e-6), r"(-?\d+(?:\.\d+)?)"
        if match := re.fullmatch(rf"(>=?) {number}", expected):
            bound = float(match[2])
            cases = {bound: match[1] == ">=", bound - tiny: False, bound + tiny: True}
        elif match := re.fullmatch(rf"in ([\[(]){number}, {number}\]", expected):
            low, high = float(match[2]), float(match[3])
            cases = {low: match[1] == "[", low - tiny: False, high: True, high + tiny: False}
        elif expected == "even and >= 2 (equal colours)":
            cases = {2: True, 4: True, 0: False, 1: False, 3: False}
        else:
            continue
        for value, accepted in cases.items():
            value = int(value) if integer else value
            try:
                cls(**{name: value})
            except ValueError as err:
                assert not accepted, f"{section}.{name}={value!r} refused: {err}"
                assert f"{section}.{name} must be {expected}" in str(err)
            else:
                assert accepted, f"{section}.{name}={value!r} accepted, but must be {expected}"
        checked += 1
    assert checked >= 35


def test_differences_name_each_setting_by_its_dotted_key_in_the_configs_order():
    before = {"game": {"name": "othello", "kwargs": {}}, "train": {"seed": 0, "iterations": 4}}
    after = {"game": {"name": "othello", "kwargs": {"size": 6}}, "train": {"seed": 1}}
    assert differences(before, after) == [
        ("train.seed", 0, 1),
        ("train.iterations", 4, None),  # only before has it
        ("game.kwargs.size", None, 6),  # only after has it: after before's keys
    ]
