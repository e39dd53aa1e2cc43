"""Configs: every YAML in configs/ loads; overrides; bad keys, types and values are named."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex
import sys

import pytest
from helpers import ROOT

from azjax import export
from azjax.cli.train import main as train_main
from azjax.config import (
    Config,
    ConfigError,
    EvalConfig,
    SearchConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    differences,
    load_config,
)

CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
TICTACTOE = next(p for p in CONFIGS if p.stem == "tictactoe")


def test_the_promised_configs_exist():
    names = {p.stem for p in CONFIGS}
    expected = {"tictactoe", "connect4", "connect4_gpu", "connect4_tpu", "othello", "othello6"}
    expected |= {"dots_and_boxes", "chain_reaction", "chain_reaction_gpu"}
    assert expected <= names


def _recipe(command: str) -> tuple[pathlib.Path, list[str]]:
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
    """A zoo card's command, run today, trains with the model's config: a config (or the base
    it inherits from) changed after the model was made must keep that model's values."""
    path, overrides = _recipe(export.read_card(model)["command"])
    ours, theirs = (
        config_to_dict(load_config(path, overrides)),
        config_to_dict(export.read_config(model)),
    )
    for section in ("eval", "checkpoint"):  # neither changes the parameters trained
        del ours[section], theirs[section]
    assert ours == theirs


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_config_loads_and_round_trips(path):
    config = load_config(path)
    assert isinstance(config, Config)
    assert config_from_dict(config_to_dict(config)) == config
    if path.stem != "small_game":  # a base for the user's own game
        assert config.game.name.replace(":", "_") in path.stem  # pgx:hex in pgx_hex.yaml


def test_variants_inherit_from_their_base():
    base = load_config(CONFIGS[0].parent / "connect4.yaml")
    gpu = load_config(CONFIGS[0].parent / "connect4_gpu.yaml")
    assert gpu.game == base.game
    assert gpu.network.channels > base.network.channels
    assert gpu.selfplay.batch_size > base.selfplay.batch_size


def test_overrides_reach_sections_a_file_leaves_out_and_ignore_spaces(tmp_path):
    bare = tmp_path / "bare.yaml"
    bare.write_text("game:\n  name: tictactoe\n")
    config = load_config(bare, ["search.num_simulations=8", " train.iterations = 3"])
    assert (config.search.num_simulations, config.train.iterations) == (8, 3)


def test_a_variant_replaces_its_bases_game_kwargs_whole(tmp_path):
    """Size keywords belong to one game: a variant's kwargs are not merged into its base's."""
    base = tmp_path / "base.yaml"
    base.write_text("game:\n  name: chain_reaction\n  kwargs: {rows: 4, cols: 6}\n")
    variant = tmp_path / "variant.yaml"
    variant.write_text("base: base.yaml\ngame:\n  kwargs: {rows: 5}\n")
    assert load_config(variant).game.kwargs == {"rows": 5}
    assert load_config(base).game.kwargs == {"rows": 4, "cols": 6}


def test_dotted_overrides_set_typed_values():
    config = load_config(
        TICTACTOE,
        [
            "search.num_simulations=64",
            "optim.learning_rate=1e-2",
            "eval.opponents=[random, alphabeta:2]",
            "network.dtype=bfloat16",
            "train.seed=7",
        ],
    )
    assert config.search.num_simulations == 64
    assert config.optim.learning_rate == 0.01 and isinstance(config.optim.learning_rate, float)
    assert config.eval.opponents == ("random", "alphabeta:2")
    assert config.network.dtype == "bfloat16"
    assert config.train.seed == 7
    chain = load_config(CONFIGS[0].parent / "chain_reaction.yaml", ["game.kwargs.rows=6"])
    assert chain.game.kwargs["rows"] == 6
    assert chain.game.make().num_actions == 6 * chain.game.kwargs["cols"]


def test_a_trained_net_plays_the_evaluation_simulations_unless_told_otherwise():
    search = SearchConfig(algorithm="puct", num_simulations=16, pb_c_init=2.0)
    config = Config(search=search, eval=EvalConfig(num_simulations=128))
    assert config.playing_search() == SearchConfig(
        algorithm="puct", num_simulations=128, pb_c_init=2.0
    )
    assert config.playing_search(512).num_simulations == 512
    assert Config(search=search).playing_search() == search  # no evaluation simulations set


def test_overrides_do_not_mutate_their_input():
    data = {"search": {"num_simulations": 8}}
    out = apply_overrides(data, ["search.num_simulations=9"])
    assert data == {"search": {"num_simulations": 8}} and out["search"]["num_simulations"] == 9


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("search.num_simulation=64", "search.num_simulation"),  # typo
        ("serch.num_simulations=64", "serch"),
        ("replay.capacity.x=1", "replay.capacity"),
        ("search.num_simulations=many", "search.num_simulations"),
        ("train.iterations=1.5", "train.iterations"),
        ("train.iterations=true", "train.iterations"),
        ("optim.learning_rate=true", "optim.learning_rate"),  # no boolean is a number
        ("game.name=@chess", "game.name"),  # not YAML: the text itself, then refused as a game
        ("eval.opponents=random", "eval.opponents: expected tuple, got 'random'"),
        ("network.channels=0", "network.channels"),
        ("search.algorithm=alphazero", "search.algorithm"),
        ("selfplay.full_search_prob=1.5", "selfplay.full_search_prob"),
        ("replay.min_size=1000000", "replay.min_size"),
        ("optim.learning_rate=-1", "optim.learning_rate"),
        ("eval.opponents=[random, gredy]", "eval.opponents[1]"),
        ("game.name=chess", "game.name"),
        ("game.kwargs.size=4", "game.kwargs"),
        ("checkpoint.keep=0", "checkpoint.keep"),
        ("eval.opening_moves=-2", "eval.opening_moves"),
        ("optim.learning_rate=.inf", "optim.learning_rate"),
        ("optim.l2=nan", "optim.l2"),
        ("search.pb_c_init=1e999", "search.pb_c_init"),
        ("eval.opponents=[alphabeta:-1]", "eval.opponents[0]"),
        ("eval.opponents=[random, mcts:abc]", "eval.opponents[1]"),
        ("eval.opponents=['policy:']", "eval.opponents[0]"),
        ("optim=3", "optim: expected a mapping, got 3"),
        ("optim.learning_rate=fast", "optim.learning_rate"),
        ("replay.capacity=8", "replay.capacity=8: must be >= train.batch_size"),
        ("gate.games=5", r"gate.games must be even and >= 2 (equal colours), got 5"),
    ],
)
def test_bad_configs_stop_naming_the_key(override, named):
    with pytest.raises(ConfigError, match=re.escape(named)) as refused:
        load_config(TICTACTOE, [override])
    assert "\n" not in str(refused.value)  # the command lines' one line


def test_the_replay_may_hold_one_batch_and_start_full():
    """The bounds themselves load: a buffer of one batch, training once it is full."""
    overrides = ["train.batch_size=64", "replay.capacity=64", "replay.min_size=64"]
    assert load_config(TICTACTOE, overrides).replay.min_size == 64


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("game: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML") as refused:
        load_config(bad)
    assert "\n" not in str(refused.value)  # the CLI's one line on stderr
    bad.write_text("game:\n  name: a: b\n")
    with pytest.raises(ConfigError, match=r"not allowed here at line 2, column 10$"):
        load_config(bad)
    for override in ("search.num_simulations", "=8"):
        with pytest.raises(ConfigError, match=rf"override '{override}': expected dotted\.key="):
            load_config(TICTACTOE, [override])
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: expected a mapping at the top level"):
        load_config(bad)
    loop = tmp_path / "loop.yaml"
    loop.write_text("base: other.yaml\n")
    (tmp_path / "other.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(ConfigError, match=r"loop\.yaml: circular `base`"):
        load_config(loop)


def test_cli_refuses_a_bad_config_before_training(tmp_path, capsys):
    code = train_main(
        ["--config", str(TICTACTOE), "--workdir", str(tmp_path / "run"), "optim.lr=0.1"]
    )
    assert code == 2
    assert "optim.lr" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


BENCH_CONFIGS = sorted(CONFIGS[0].parent.parent.glob("docs/bench/configs/*.yaml"))


@pytest.mark.parametrize("path", BENCH_CONFIGS, ids=lambda p: p.stem)
def test_every_bench_config_loads(path):
    assert load_config(path) == config_from_dict(config_to_dict(load_config(path)))


def test_a_removed_key_is_refused_in_one_line_naming_it():
    """A config (or a model file's or run's stored one) holding a key azjax no longer has."""
    data = config_to_dict(Config())
    data["network"]["global_pool"] = False
    with pytest.raises(
        ConfigError, match=r"^unknown key network\.global_pool; known keys of "
    ) as refused:
        config_from_dict(data)
    assert "\n" not in str(refused.value)


# Every section's class, read from Config (a new section is covered when added).
CONFIG_CLASSES = [type(getattr(Config(), f.name)) for f in dataclasses.fields(Config)]


def _bounds(monkeypatch) -> list[tuple[type, str, str, str]]:
    """(class, section, field, what is expected) of every numeric check the config dataclasses
    make, recorded from `check_fields` while each is built with its defaults, in every azjax
    module that calls it (a new module is covered when it imports it)."""
    import azjax.config

    seen = []

    def record(section, config, checks):
        seen.extend((section, name, expected) for name, (_, expected) in checks.items())
        real(section, config, checks)

    real = azjax.config.check_fields
    callers = [m for n, m in sys.modules.items() if n.startswith("azjax.")]
    callers = [m for m in callers if getattr(m, "check_fields", None) is real]
    assert callers, callers
    for module in callers:
        monkeypatch.setattr(module, "check_fields", record)
    found = []
    for cls in CONFIG_CLASSES:
        seen.clear()
        default = cls()
        for section, name, expected in seen:
            if hasattr(default, name) and isinstance(getattr(default, name), int | float):
                found.append((cls, section, name, expected))
    return found


def test_every_numeric_bound_accepts_and_refuses_what_its_message_says(monkeypatch):
    """At each bound a message states (`> 0`, `>= 1`, `in [0, 1]`, `in (0, 1]`), the value on
    the bound and the nearest ones beside it are accepted or refused as the message says."""
    bounds = _bounds(monkeypatch)
    checked = 0
    for cls, section, name, expected in bounds:
        integer = isinstance(getattr(cls(), name), int)
        tiny = 1 if integer else 1e-6
        number = r"(-?\d+(?:\.\d+)?)"
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
    assert checked >= 35, bounds


def test_differences_name_each_setting_by_its_dotted_key_in_the_configs_order():
    before = {"game": {"name": "othello", "kwargs": {}}, "train": {"seed": 0, "iterations": 4}}
    after = {"game": {"name": "othello", "kwargs": {"size": 6}}, "train": {"seed": 1}}
    assert differences(before, after) == [
        ("train.seed", 0, 1),
        ("train.iterations", 4, None),  # only before has it
        ("game.kwargs.size", None, 6),  # only after has it: after before's keys
    ]
    assert differences(after, after) == []
