"""Model files (azjax.export, `azjax-export`): round trips, bfloat16 storage, refusals, and ONNX
through jax2onnx checked against JAX with onnxruntime."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import pathlib
import re
import sys

import jax
import msgpack
import numpy as np
import pytest
from helpers import write_tiny_run

from azjax import checkpoint, export, onnx_export, zoo
from azjax.cli.export import main
from azjax.config import Config, GameConfig, config_to_dict
from azjax.export import card_path, run_figures
from azjax.network import NetworkConfig, init_params, make_network

METRICS = [
    {"iteration": 1, "replay/added": 100, "elapsed_minutes": 0.5},
    {"iteration": 2, "replay/added": 50, "elapsed_minutes": 1.25},
    {"iteration": 2, "final": True, "elapsed_minutes": 1.5},  # the final evaluation
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny Tic-Tac-Toe run (checkpoints 1 and 2) with its metrics.jsonl."""
    workdir = tmp_path_factory.mktemp("export") / "run"
    write_tiny_run(workdir)
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in METRICS))
    return workdir


def test_model_file_round_trip_and_card(run, tmp_path, capsys):
    out = tmp_path / "ttt.azjax"
    assert main([str(run), "--out", str(out), "--device", "2 CPU cores"]) == 0
    assert "iteration 2" in capsys.readouterr().out
    config, params, card = export.load_model(out)
    want_config, want_params = checkpoint.load_for_inference(str(run), 2)
    assert config_to_dict(config) == config_to_dict(want_config)
    jax.tree.map(np.testing.assert_array_equal, params, want_params)
    network = {"blocks": 0, "channels": 4, "head_channels": 8, "dtype": "float32"}
    assert card == {
        **{"name": "ttt", "game": {"name": "tictactoe", "kwargs": {}}, "network": network},
        "parameters": sum(x.size for x in jax.tree.leaves(params)),
        "search": {"algorithm": "gumbel", "simulations": 4},
        **{"iteration": 2, "positions_seen": 150, "wall_clock_minutes": 1.25, "command": None},
        **{"device": "2 CPU cores", "azjax_version": card["azjax_version"]},
        **{"storage_dtype": "float32", "strength": {}},
    }
    assert json.loads((tmp_path / "ttt.card.json").read_text()) == card

    assert main([str(run), "--step", "1", "--out", str(tmp_path / "one.azjax")]) == 0
    _, params_1, card_1 = export.load_model(tmp_path / "one.azjax")
    assert card_1["iteration"] == 1 and card_1["positions_seen"] == 100
    jax.tree.map(np.testing.assert_array_equal, params_1, checkpoint.load_for_inference(run, 1)[1])
    unknown = {"positions_seen": None, "wall_clock_minutes": None}  # before any logged iteration
    assert run_figures(run, 0) == unknown == run_figures(tmp_path, 2)  # or no metrics.jsonl


def test_bfloat16_storage_loads_back_as_float32(run, tmp_path):
    full, half = tmp_path / "full.azjax", tmp_path / "half.azjax"
    assert main([str(run), "--out", str(full)]) == 0
    assert main([str(run), "--out", str(half), "--dtype", "bfloat16"]) == 0
    assert half.stat().st_size < 0.7 * full.stat().st_size
    _, want, _ = export.load_model(full)
    _, params, card = export.load_model(half)
    assert card["storage_dtype"] == "bfloat16"
    for got, exact in zip(jax.tree.leaves(params), jax.tree.leaves(want), strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, exact, rtol=2**-8, atol=0)


def test_unreadable_model_files_are_named(run, tmp_path):
    good = tmp_path / "good.azjax"
    export.export_run(run, good)
    entries = msgpack.unpackb(good.read_bytes())
    config = json.loads(entries["config"])
    config["network"]["channels"] = 8
    wider = re.escape(  # the first parameter that differs
        "parameter ['params']['Dense_1']['kernel'] has shape (4, 8), but the network in its "
        "config needs (8, 8)"
    )
    bad = tmp_path / "bad.azjax"
    for data, message in [
        (b"hello", "not an azjax model file"),
        ({"format": "something"}, "expected format 'azjax-model'"),
        ({**entries, "version": 2}, "format version 2; this azjax reads 1"),
        ({**entries, "config": json.dumps(config)}, wider),
        ({k: v for k, v in entries.items() if k not in ("params", "card")}, "is damaged: no card"),
        ({**entries, "card": "{"}, "has a damaged card"),
        ({**entries, "params": b"\x00\x01garbage"}, "has damaged parameters"),
    ]:
        bad.write_bytes(data if isinstance(data, bytes) else msgpack.packb(data))
        with pytest.raises(export.ModelError, match=f"{bad}.*{message}"):
            export.load_model(bad)
    with pytest.raises(export.ModelError, match="cannot read model"):
        export.load_model(tmp_path / "missing.azjax")
    bad.write_bytes(msgpack.packb({**entries, "continuation": b"not zlib"}))
    with pytest.raises(export.ModelError, match=rf"{bad} has a damaged run snapshot \(error\)"):
        export.read_snapshot(bad)


REFUSALS = [
    (["RUN"], "--out is needed"),
    (["RUN", "--out", "model.bin"], "expected a name ending in .azjax"),
    (["RUN", "--step", "7", "--out", "m.azjax"], "no checkpoint 7"),
    (["EMPTY", "--out", "m.azjax"], "no checkpoint in"),
    (["RUN", "--out", "nowhere/m.azjax"], "there is no folder"),
    (["RUN", "--out", "m.azjax", "--strength", "x.json"], "--strength needs --card-only"),
    (["MODEL", "--out", "again.azjax"], "is already a model file"),
    (["MODEL", "--format", "onnx", "--step", "1", "--out", "m.onnx"], "--step is for a run"),
    (["MODEL", "--card-only", "--out", "copy.azjax"], "--out does not apply to --card-only"),
    (["MODEL", "--card-only", "--step", "1"], "--step does not apply to --card-only"),
    (["MODEL", "--card-only", "--dtype", "bfloat16"], "--dtype does not apply to --card-only"),
    (["MODEL", "--card-only", "--batch", "4"], "--batch does not apply to --card-only"),
    (["RUN", "--out", "m.azjax", "--resumable", "-1"], "count of positions >= 0, got -1"),
    (["MODEL", "--card-only", "--resumable", "10"], "--resumable is for a model file"),
    (["MODEL", "--format", "onnx", "--out", "m.onnx", "--resumable", "10"], "--resumable is"),
    (["MODEL", "--card-only", "--strength", "EMPTY"], "--strength EMPTY: not a readable JSON"),
    (
        ["zoo:m0", "--card-only", "--device", "1 GPU"],
        "would rewrite the card of the installed zoo model zoo:m0",
    ),
    (["RUN", "--out", "m.azjax", "--batch", "4"], "--batch is for --format onnx"),
    (["MODEL", "--format", "onnx", "--out", "m.onnx", "--dtype", "bfloat16"], "--dtype is for"),
    (["MODEL", "--format", "onnx", "--out", "m.onnx", "--batch", "0"], "must be >= 1"),
    (
        ["MODEL", "--format", "onnx", "--out", "m.onnx", "--simulations", "8"],
        "--simulations is for a model file: ONNX holds the network alone",
    ),
    (["MODEL", "--format", "onnx", "--out", "no/m.onnx"], "no/m.onnx: there is no folder"),
]


def test_command_line_refusals(run, tmp_path, capsys, monkeypatch):
    """Each refused command line: exit 2, one line naming what is wrong, nothing written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(zoo.ENV, str(tmp_path))  # zoo:m0 is MODEL
    (tmp_path / "EMPTY").mkdir()
    export.export_run(run, tmp_path / "m0.azjax")
    card = card_path(tmp_path / "m0.azjax").read_text()
    names = {"RUN": str(run), "MODEL": "m0.azjax"}
    for args, message in REFUSALS:
        assert main([names.get(a, a) for a in args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("azjax-export: ") and message in err, (args, err)
        assert err.count("\n") == 1 and "None" not in err, (args, err)
        assert card_path(tmp_path / "m0.azjax").read_text() == card
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["EMPTY", "m0.azjax", "m0.card.json"]


def test_the_library_refuses_what_the_command_line_cannot_pass(run, tmp_path):
    """export_run's own checks: a bare suffix, a storage dtype and a simulation count."""
    for kwargs, message in [
        ({"out": tmp_path / ".azjax"}, "expected a name ending in .azjax"),
        ({"dtype": "float16"}, "storage dtype must be one of float32, bfloat16, got 'float16'"),
        ({"simulations": True}, "simulations must be an integer >= 1, got True"),
    ]:
        with pytest.raises(export.ModelError, match=re.escape(message)):
            export.export_run(run, **{"out": tmp_path / "m.azjax", **kwargs})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error", [OSError(errno.EIO, "I/O error"), KeyboardInterrupt()])
def test_a_write_cut_short_leaves_nothing_behind(tmp_path, monkeypatch, error):
    """A rename that fails, or Ctrl-C during it: neither the file nor its temporary one stays."""

    def cut(source, target):
        raise error

    monkeypatch.setattr(os, "replace", cut)
    with pytest.raises((type(error), export.ModelError)):
        export.write_atomically(tmp_path / "m.azjax", b"model")
    assert list(tmp_path.iterdir()) == []


def test_default_simulations(run, tmp_path, capsys):
    """--simulations sets what zoo:NAME plays with; a new default renames the old figures."""
    model = tmp_path / "ttt.azjax"
    assert main([str(run), "--out", str(model), "--simulations", "9"]) == 0
    figures = {"games": 4, "distinct_games": 4, "wins": 4, "draws": 0, "losses": 0}
    match = {"a": "zoo:ttt", "b": "random", "score": 1.0, "ci95": [0.4, 1.0], **figures}
    export.record_strength(model, {"game": "tictactoe", "match": match})
    assert main(["--card-only", str(model), "--simulations", "16"]) == 0
    config, _, card = export.load_model(model)
    assert card["search"]["simulations"] == config.eval.num_simulations == 16
    assert [entry["agent"] for entry in card["strength"].values()] == ["zoo:ttt:9"]
    assert json.loads(card_path(model).read_text()) == card
    capsys.readouterr()
    assert main(["--card-only", str(model), "--simulations", "0"]) == 2
    assert "--simulations must be in [1, 100000] simulations, got 0" in capsys.readouterr().err


def _onnx_available() -> None:
    missing = [m for m in ("jax2onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (make test installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)


def test_onnx_outputs_match_jax(run, tmp_path, capsys):
    _onnx_available()
    import onnx

    # A residual block, bfloat16 compute in JAX: the ONNX graph computes in float32.
    config = Config(
        game=GameConfig("tictactoe"), network=NetworkConfig(blocks=1, channels=4, dtype="bfloat16")
    )
    game = config.game.make()
    params = init_params(make_network(game, config.network), game, jax.random.key(3))
    out = tmp_path / "net.onnx"
    onnx_export.export_onnx(config, params, out, card={"name": "net"})
    assert onnx_export.check_onnx(out, config, params, positions=32) < 1e-5
    # The check compares both outputs: a network whose value alone differs is told apart.
    value_bias = ("params", "Dense_4", "bias")  # the value head's last layer, its one bias
    shifted = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 2.0 if tuple(k.key for k in path) == value_bias else x, params
    )
    assert onnx_export.check_onnx(out, config, shifted) > 0.1
    model = onnx.load(out)
    assert model.graph.name == "azjax_tictactoe"
    assert [i.name for i in model.graph.input] == ["obs"]
    assert [o.name for o in model.graph.output] == ["logits", "value"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "B"
    metadata = {p.key: p.value for p in model.metadata_props}
    assert json.loads(metadata["azjax_card"]) == {"name": "net"}
    assert json.loads(metadata["azjax_config"])["network"]["blocks"] == 1

    # From a model file, through the command line, with a fixed batch.
    model_file = tmp_path / "ttt.azjax"
    export.export_run(run, model_file)
    capsys.readouterr()
    fixed = tmp_path / "fixed.onnx"
    assert main([str(model_file), "--format", "onnx", "--batch", "3", "--out", str(fixed)]) == 0
    assert "onnxruntime matches JAX" in capsys.readouterr().out
    assert onnx.load(fixed).graph.input[0].type.tensor_type.shape.dim[0].dim_value == 3
    config, params, _ = export.load_model(model_file)
    assert onnx_export.check_onnx(fixed, config, params) < 1e-5


def test_an_onnx_graph_unlike_the_network_is_not_written(run, tmp_path, capsys, monkeypatch):
    """A converter fault (a NaN difference): exit 1 in one line, the file at --out kept."""
    _onnx_available()
    monkeypatch.setattr(onnx_export, "check_onnx", lambda *args, **kwargs: float("nan"))
    out = tmp_path / "net.onnx"
    out.write_text("before")
    assert main([str(run), "--format", "onnx", "--out", str(out), "--force"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"not writing {out}" in err, err
    assert out.read_text() == "before" and sorted(tmp_path.iterdir()) == [out]


def test_a_full_disk_is_a_failure_in_one_line(run, tmp_path, capsys, monkeypatch):
    """A full disk: exit 1 in one line naming the file, and nothing left behind."""

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    out = tmp_path / "m.azjax"
    assert main([str(run), "--out", str(out)]) == 1
    assert (
        capsys.readouterr().err
        == f"azjax-export: cannot write {out}: {os.strerror(errno.ENOSPC)}\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_reexport_refuses_to_overwrite_a_model_without_force(run, tmp_path, capsys):
    model = tmp_path / "ttt.azjax"
    assert main([str(run), "--out", str(model)]) == 0
    accuracy = {"positions": 10, "best_move": 0.5, "keeps_result": 0.6}
    export.record_strength(model, {"game": "tictactoe", "agent": "zoo:ttt", "accuracy": accuracy})
    card = export.read_card(model)
    capsys.readouterr()
    assert main([str(run), "--out", str(model)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(model) in err and "--force" in err, err
    assert export.read_card(model) == card  # the filed figures survive
    assert main([str(run), "--out", str(model), "--force"]) == 0
    assert not export.read_card(model)["strength"]  # forced: a fresh card


def test_onnx_without_its_extra_says_where_the_steps_are(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "jax2onnx", None)  # `import jax2onnx` raises ImportError
    with pytest.raises(ImportError, match=r"see docs/models\.md#onnx\)$"):
        onnx_export.export_onnx(Config(), None, tmp_path / "m.onnx")
