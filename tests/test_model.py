"""The one door to trained models (azjax.model): every kind of source, the one check, the
shipped zoo playing the moves it played before the door, and every command taking a model."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shlex
import shutil
import sys

import jax
import numpy as np
import pytest
from helpers import ROOT, write_tiny_run
from starlette.testclient import TestClient

import games
from azjax import agents, export, model, resume, specs, zoo
from azjax.cli import evaluate, play
from azjax.cli import export as export_cli
from azjax.cli.train import summary
from azjax.config import Config, GameConfig, load_config
from azjax.network import NetworkConfig
from azjax.web.app import create_app

RECORDED = ROOT / "tests" / "data" / "zoo_moves.json"
TTT, C4 = games.make("tictactoe"), games.make("connect4")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny run (checkpoints 1 and 2), its newest checkpoint exported, and a zoo holding it."""
    root = tmp_path_factory.mktemp("door")
    write_tiny_run(root / "runs" / "ttt")
    export.export_run(root / "runs" / "ttt", root / "m.azjax")
    (root / "zoo").mkdir()
    shutil.copy(root / "m.azjax", root / "zoo" / "ttt.azjax")
    return root


@pytest.fixture
def sources(folder, monkeypatch):
    """Every kind of source, by kind; the zoo pointed at the fixture's."""
    monkeypatch.setenv(zoo.ENV, str(folder / "zoo"))
    run = folder / "runs" / "ttt"
    return {"run": str(run), "step": f"{run}@1", "file": str(folder / "m.azjax"), "zoo": "zoo:ttt"}


def _same(a, b) -> bool:
    """Whether two parameter trees hold equal arrays."""
    leaves = [jax.tree.leaves(a), jax.tree.leaves(b)]
    return len(leaves[0]) == len(leaves[1]) and all(
        np.array_equal(x, y) for x, y in zip(*leaves, strict=True)
    )


def test_every_kind_of_source_loads_as_one_model(sources, folder):
    loaded = {kind: model.load(text, TTT) for kind, text in sources.items()}
    run = folder / "runs" / "ttt"
    assert {k: m.name for k, m in loaded.items()} == {
        "run": f"{run}@2",
        "step": f"{run}@1",
        "file": str(folder / "m.azjax"),
        "zoo": "zoo:ttt",
    }
    assert [m.step for m in loaded.values()] == [2, 1, 2, 2]
    assert loaded["run"].card is None and loaded["file"].card["iteration"] == 2
    for kind, found in loaded.items():
        assert found.game is TTT and model.game_of(sources[kind]) is TTT
        assert found.network.apply(found.params, TTT.observe(TTT.init(jax.random.key(0)))[None])
    newest = loaded["run"].params
    assert _same(newest, loaded["file"].params) and _same(newest, loaded["zoo"].params)
    assert not _same(newest, loaded["step"].params)
    assert model.model_file(sources["zoo"]) == folder / "zoo" / "ttt.azjax"
    assert model.model_file(sources["step"]) is None


def test_the_one_check_refuses_another_game_or_shape(sources):
    labels = {"run": "checkpoint .*@2", "step": "checkpoint .*@1", "file": "model .*m.azjax"}
    labels["zoo"] = "zoo model ttt"
    for kind, text in sources.items():
        with pytest.raises(
            ValueError, match=f"{labels[kind]} was trained on tictactoe, not on the connect4 game"
        ):
            model.load(text, C4)
    # a game of another size is named with its sizes, as --size takes them
    with pytest.raises(
        ValueError, match=r"othello\.azjax was trained on othello size=8, not on the othello size=6"
    ):
        model.load(str(ROOT / "azjax" / "zoo" / "othello.azjax"), games.make("othello", size=6))
    wider = Config(game=GameConfig("tictactoe"), network=NetworkConfig(blocks=1, channels=4))
    other = Config(game=GameConfig("connect4"), network=NetworkConfig(blocks=0, channels=4))
    for config, words in ((wider, "expected a 1x4"), (other, "expected a 0x4 .* of connect4")):
        with pytest.raises(ValueError, match=f"is a 0x4 net of tictactoe; {words}"):
            model.load(sources["file"], config=config)
    same = Config(game=GameConfig("tictactoe"), network=NetworkConfig(blocks=0, channels=4))
    assert model.load(sources["zoo"], config=same).game is TTT
    # Parameters of the run's shapes trained for another game are refused all the same.
    loaded = model.load(sources["file"])
    other_game = dataclasses.replace(loaded.config, game=GameConfig("connect4"))
    with pytest.raises(ValueError, match=r"a 0x4 .* of connect4; expected a 0x4 .* of tictactoe"):
        model.check(dataclasses.replace(loaded, config=other_game), config=same)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "bad model source ''"),
        ("runs/x@99999999999", "STEP <= 2147483647, got 99999999999"),
        ("m.azjax@3", "a model file has one step: drop @3"),
        ("zoo:a/b", "zoo needs a model NAME"),
        ("zoo:nope", "no zoo model 'nope'"),
        ("EMPTY", "no checkpoint in"),
        ("EMPTY@4", "no checkpoint in"),
    ],
)
def test_bad_sources_are_named(sources, tmp_path, text, message):
    (tmp_path / "EMPTY").mkdir()
    with pytest.raises(ValueError, match=message):
        model.load(text.replace("EMPTY", str(tmp_path / "EMPTY")))


def test_spec_numbers_are_bounded_where_parsed():
    for spec, message in [
        ("zoo:tictactoe:3000000000", "zoo needs SIMS <= 100000, got 3000000000"),
        ("mcts:100001", "mcts needs SIMS <= 100000"),
        ("search:runs/x:0", "search needs a positive integer SIMS"),
        ("alphabeta:65", "alphabeta needs DEPTH <= 64"),
        ("policy:runs/x@99999999999", "policy needs STEP <= 2147483647"),
        # not integers: named as the STEP or SIMS they stand for, not taken into the path
        ("search:runs/x@abc:8", "search needs an integer >= 0 STEP, got 'abc'"),
        ("zoo:tictactoe:abc", "zoo needs a positive integer SIMS, got 'abc'"),
        # policy and policy-zoo take no SIMS: a trailing :N is refused, not taken into the name
        ("policy-zoo:tictactoe:8", "policy-zoo takes no SIMS, got 8; zoo:tictactoe:8 searches"),
        ("policy:zoo:ttt:8", "policy takes no SIMS, got 8; search:zoo:ttt:8 searches"),
    ]:
        with pytest.raises(ValueError, match=message):
            specs.parse_spec(spec)
    assert specs.parse_spec("mcts:100000").number == specs.MAX_SIMULATIONS
    assert specs.parse_spec("search:runs/a@b:c/x:8") == specs.Spec("search", 8, "runs/a@b:c/x")
    # a zoo SOURCE's colon is not a SIMS one
    assert specs.parse_spec("policy:zoo:ttt").source == "zoo:ttt"
    assert specs.parse_spec("search:zoo:ttt:8") == specs.Spec("search", 8, "zoo:ttt")
    with pytest.raises(ValueError, match="@STEP needs an integer >= 0 STEP, got 'abc'"):
        specs.parse_source("runs/x@abc")


def test_huge_simulation_counts_stop_the_commands_with_one_line(sources, capsys):
    args = ["--game", "tictactoe", "--a", "zoo:ttt:3000000000", "--b", "random", "--games", "2"]
    assert evaluate.main(args) == 2
    err = capsys.readouterr().err
    assert "zoo needs SIMS <= 100000, got 3000000000" in err and "Traceback" not in err


def test_zoo_models_play_the_moves_recorded_before_the_door(monkeypatch):
    """Each shipped model, loaded through the door, plays the moves it played with 8
    simulations and with its policy alone before the door was built (tests/data)."""
    monkeypatch.delenv(zoo.ENV, raising=False)
    recorded = json.loads(RECORDED.read_text())
    assert sorted(recorded) == zoo.names()
    for name, entry in recorded.items():
        game = model.game_of(f"zoo:{name}")
        search = agents.make(f"zoo:{name}:{entry['simulations']}", game)
        policy = agents.make(f"policy-zoo:{name}", game)
        search_fn, policy_fn = jax.jit(search.__call__), jax.jit(policy.__call__)
        step = jax.jit(game.step)  # eager steps compile each operation as its own program
        played = []
        for position in entry["positions"]:
            state = game.init(jax.random.key(position["init_seed"]))
            for action in position["opening"]:
                state = step(state, action)
            key = jax.random.key(position["key"])
            played.append(
                {"search": int(search_fn(state, key)), "policy": int(policy_fn(state, key))}
            )
        want = [{k: p[k] for k in ("search", "policy")} for p in entry["positions"]]
        assert played == want, name


# ----------------------------------------------------------------------------- commands


def test_azjax_eval_and_play_take_every_kind_of_source(sources, tmp_path, monkeypatch, capsys):
    for kind, text in sources.items():
        spec = text.replace("zoo:", "policy-zoo:") if kind == "zoo" else f"policy:{text}"
        out = tmp_path / f"{kind}.json"
        args = ["--a", spec, "--b", "random", "--games", "2", "--quiet", "--json", str(out)]
        assert evaluate.main(args) == 0, kind  # the game comes from the model
        assert json.loads(out.read_text())["game"] == "tictactoe"
        moves = "\n".join(str(c) for c in range(1, 10)) * 2 + "\n"
        monkeypatch.setattr(sys, "stdin", io.StringIO(moves))
        play.main(["--game", "tictactoe", "--opponent", spec])
        assert "Moves: " in capsys.readouterr().out, kind


def test_azjax_serve_offers_runs_and_zoo_models(sources, folder):
    with TestClient(create_app(str(folder / "runs"), analyse=False)) as client:
        offered = client.get("/api/options").json()
        assert [m["name"] for m in offered["zoo"]] == ["ttt"]
        run = folder / "runs" / "ttt"
        for spec in (f"policy:{run}@2", f"search:{run}@2", "zoo:ttt", "policy-zoo:ttt"):
            body = {"game": "tictactoe", "opponent": spec, "human": 1}
            response = client.post("/api/games", json=body)
            assert response.status_code == 201, (spec, response.text)
            assert response.json()["ply"] == 1  # the model opened


def test_azjax_export_takes_every_kind_of_source(sources, tmp_path, capsys):
    out = tmp_path / "zoo.onnx"  # every source reads as model.load reads it (above)
    assert export_cli.main([sources["zoo"], "--format", "onnx", "--out", str(out)]) == 0
    assert "onnxruntime matches JAX" in capsys.readouterr().out
    run = sources["run"]
    twice = [f"{run}@1", "--step", "1", "--format", "onnx", "--out", str(tmp_path / "x.onnx")]
    assert export_cli.main(twice) == 2
    assert "names its step already: drop --step 1" in capsys.readouterr().err
    assert export_cli.main([f"{run}@1", "--out", str(tmp_path / "one.azjax")]) == 0
    assert export.read_card(tmp_path / "one.azjax")["iteration"] == 1
    zoo_file = str(model.model_file("zoo:ttt"))  # how figures are filed in the zoo
    assert export_cli.main(["--card-only", zoo_file, "--device", "2 CPU cores"]) == 0
    assert zoo.card("ttt")["device"] == "2 CPU cores"
    assert export_cli.main(["--card-only", run]) == 2
    assert "--card-only needs a model file, not the run" in capsys.readouterr().err


def test_train_init_from_takes_every_kind_of_source(sources):
    tiny = ["network.blocks=0", "network.channels=4"]
    for kind, text in sources.items():
        overrides = [*tiny, f"train.init_from={text}"]
        config = load_config(ROOT / "configs" / "tictactoe.yaml", overrides)
        assert _same(resume.start(config).params, model.load(text).params), kind


def test_the_trainers_closing_hint_loads_the_run(sources, monkeypatch, capsys):
    run = sources["run"]
    said = summary({"iteration": 2}, 6.0, run)
    hint = re.search(r"load with (agents\.make\(.*\))\)$", said, re.M)
    agent = eval(hint.group(1), {"agents": agents, "game": TTT})  # the line as printed
    assert agent.name == f"search:{run}@2"
    command = shlex.split(re.search(r"play it: (azjax-play .*)$", said, re.M).group(1))
    monkeypatch.setattr(sys, "stdin", io.StringIO("quit\n"))
    play.main(command[1:])  # the game is the run's
    assert capsys.readouterr().out.startswith(f"tictactoe: you are X, search:{run} is O.")
