"""The benchmark commands run at a tiny size and write their JSON reports (figures are measured
by running them, never asserted here), and scripts/fresh_machine.sh keeps its promises."""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, TINY, write_tiny_run

from azjax import model

SHARES = ("best_move", "keeps_result")  # of positions, perfect play's


@pytest.fixture
def bench(monkeypatch, capsys):
    """`bench(NAME, *args)`: runs `scripts/bench_NAME.py` in this process (an interpreter of its
    own costs seconds); (exit status, what it said on stderr)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    monkeypatch.chdir(ROOT)

    def run(name: str, *args: str) -> tuple[int, str]:
        try:
            importlib.import_module(f"bench_{name}").main(list(args))
            status = 0
        except SystemExit as exit:
            status = exit.code if isinstance(exit.code, int) else 1
            print(exit.code, file=sys.stderr)
        return status, capsys.readouterr().err

    return run


def test_bench_command_runs_a_benchmark_and_writes_its_report(tmp_path):
    out = tmp_path / "games.json"
    args = ["games", "--games", "tictactoe,dots_and_boxes", "--batches", "2", "--steps", "2"]
    command = [sys.executable, str(ROOT / "scripts" / "bench.py"), *args]
    result = subprocess.run(
        [*command, "--repeats", "1", "--out", str(out)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["platform"] == "cpu" and report["batches"] == [2]
    labels = {r["label"] for r in report["results"]}
    assert labels >= {"tictactoe", "dots_and_boxes", "dots_and_boxes rows=2 cols=2"}
    assert all(r["steps_per_s"] > 0 and "error" not in r for r in report["results"])
    unknown = subprocess.run([*command[:2], "nope"], capture_output=True, text=True)
    assert unknown.returncode == 1 and "learning,selfplay" in unknown.stderr
    assert "got nope" in unknown.stderr


def test_selfplay_bench_reports_throughput_and_targets(tmp_path, bench):
    out = tmp_path / "selfplay.json"
    args = ["--games", "tictactoe", "--nets", "0x4", "--batches", "4", "--sims", "2"]
    args += ["--algorithms", "gumbel", "--chunk-moves", "9", "--chunks", "2", "--warmup", "0"]
    args += ["--full-prob", "0.5", "--fast-sims", "1", "--dtype", "float32"]  # PCR
    assert bench("selfplay", *args, "--out", str(out))[0] == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["positions_per_s"] > 0 and row["network_only_s"] > 0 and row["search_only_s"] > 0
    # moves searched fully (2 simulations) or fast (1), drawn move by move
    full = row["full_search_fraction"]
    simulations = 2 * full + 1 * (1 - full)  # a move's, on average
    assert row["simulations_per_s"] == pytest.approx(simulations * row["positions_per_s"])
    evaluations = row["evaluations_per_s"] * row["selfplay_s"]
    assert evaluations == pytest.approx(2 * 4 * 9 * (simulations + 1))  # 2 chunks of B=4
    assert row["peak_tflops"] is None and row["fraction_of_peak"] is None  # a CPU
    assert 0 < row["target_fraction"] <= 1 and 0 <= row["plain_wasted_fraction"] < 1


def test_bench_refuses_bad_arguments(bench):
    def said(name: str, *args: str) -> str:
        status, err = bench(name, *args)
        assert status not in (0, None), err  # a message (exit status 1) or argparse's 2
        return err

    assert "expected comma-separated games of" in said("games", "--games", "chess")
    assert "expected comma-separated positive integers" in said("selfplay", "--batches", "0")
    for nets in ("6x", "2x0", "x32"):
        assert f"BLOCKSxCHANNELS such as 2x32 (channels >= 1), got '{nets}'" in said(
            "selfplay", "--nets", nets
        )
    assert "values of gumbel, puct, got 'alphazero'" in said(
        "selfplay", "--algorithms", "alphazero"
    )
    config = str(ROOT / "configs" / "tictactoe.yaml")
    assert "config 'nope.yaml' does not exist" in said("learning", "--config", "nope.yaml")
    bad_override = "configuration error: override 'foo': expected dotted.key=value"
    assert bad_override in said("learning", "--config", config, "--set", "foo")
    assert "--every-positions must be positive" in said(
        "learning", "--config", config, "--every-positions", "0"
    )
    pons = str(ROOT / "azjax" / "data" / "connect4_pons.json")
    assert "--pons: no Pons groups for tictactoe" in said(
        "learning", "--config", config, "--pons", pons, "--positions", "8"
    )
    assert "no checkpoint in" in said("learning", "--runs", str(ROOT / "configs"))


def test_learning_bench_writes_curves_per_seed(tmp_path, bench):
    from azjax import referees

    out, subset = tmp_path / "learning.json", tmp_path / "ttt.json"
    data = json.loads(referees.TICTACTOE.path.read_text())
    referees.TICTACTOE.write({**data, "positions": data["positions"][::200]}, subset)
    tiny = [*TINY, "train.batch_size=16", "train.steps_per_iteration=2", "eval.num_simulations=4"]
    config = str(ROOT / "configs" / "tictactoe.yaml")
    args = ["--config", config, "--positions", "100", "--every-positions", "50"]
    args += ["--seeds", "0,1", "--out", str(out), "--solver-set", str(subset)]
    assert bench("learning", *args, *(a for o in tiny for a in ("--set", o)))[0] == 0
    report = json.loads(out.read_text())
    assert report["budget"]["positions"] == 100 and [r["seed"] for r in report["runs"]] == [0, 1]
    for run in report["runs"]:
        points = run["points"]
        assert points[0]["positions"] == 0 and points[-1]["positions"] >= 100
        assert len(points) >= 3 and all(0 <= p["search/keeps_result"] <= 1 for p in points)
    finals = [r["points"][-1]["search/keeps_result"] for r in report["runs"]]
    assert report["summary"][config]["search/keeps_result"]["min"] == min(finals)
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_learning_bench_measures_the_checkpoints_of_runs(tmp_path, bench):
    from azjax import referees

    arena_run, out = tmp_path / "chain_reaction", tmp_path / "runs.json"
    write_tiny_run(arena_run, steps=(1, 3), game="chain_reaction")  # no solver set: the arena
    records = [{"iteration": i, "replay/added": 10 * i, "elapsed_minutes": 0.5 * i} for i in (1, 3)]
    (arena_run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    args = ["--runs", str(arena_run), "--games", "2", "--out", str(out)]
    assert bench("learning", *args, "--set", "eval.opponents=[random]")[0] == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert [(p["iteration"], p["minutes"], p["positions"]) for p in run["points"]] == [
        (1, 0.5, 10),
        (3, 1.5, 40),
    ]
    assert all(0 <= p["vs random/score"] <= 1 for p in run["points"])
    # Connect4: perfect play and Pascal Pons' groups, three positions each
    solved_run, pons_set, subset = tmp_path / "connect4", tmp_path / "pons.json", tmp_path / "7"
    data = json.loads(referees.CONNECT4.path.read_text())
    referees.CONNECT4.write({**data, "positions": data["positions"][100:107]}, subset)
    write_tiny_run(solved_run, steps=(2,), game="connect4")
    (solved_run / "metrics.jsonl").write_text(json.dumps({**records[0], "iteration": 2}) + "\n")
    groups = json.loads(referees.PONS_PATH.read_text())["groups"]
    pons_set.write_text(json.dumps({"groups": {g: ps[:3] for g, ps in groups.items()}}))
    args = ["--runs", str(solved_run), "--out", str(out), "--pons", str(pons_set)]
    assert bench("learning", *args, "--solver-set", str(subset))[0] == 0
    (point,) = json.loads(out.read_text())["runs"][0]["points"]
    shares = [point[f"{who}/{share}"] for who in ("search", "policy") for share in SHARES]
    assert all(abs(7 * s - round(7 * s)) < 1e-6 for s in shares), shares  # of 7 positions
    rates = [point[f"{who}/mistakes {g}"] for who in ("search", "policy") for g in referees.GROUPS]
    assert all(abs(3 * r - round(3 * r)) < 1e-6 for r in rates), rates  # shares of 3 positions
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_fresh_machine_script_trains_to_the_clock_and_leaves_a_model_and_its_curve(tmp_path):
    """scripts/fresh_machine.sh stops training at its wall clock (as Ctrl-C does: a checkpoint
    at the iteration in hand), then exports the model resumable, copies the metrics and draws
    the curve; a bad MINUTES is refused before anything runs. Its run directories (mktemp's,
    holding the replay buffer) are removed as each piece ends. (Its bench step runs
    `bench.py selfplay` with the options test_selfplay_bench_reports_throughput_and_targets
    gives it.)"""
    script, out = str(ROOT / "scripts" / "fresh_machine.sh"), tmp_path / "out"
    scratch = tmp_path / "scratch"  # mktemp's folder here
    scratch.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "BENCH": "0", "SOLVER": "0"}
    env["TMPDIR"] = str(scratch)
    overrides = [*TINY, "train.iterations=100000"]  # only the clock stops it
    # The clock leaves room for compilation and the first iteration on a slow shared machine.
    command = ["bash", script, str(ROOT / "configs" / "tictactoe.yaml"), str(out), "0.25"]
    result = subprocess.run(
        [*command, *overrides], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "interrupted at iteration" in result.stdout
    # Its run directory is gone at the end: the way on is the exported model, not a rerun.
    assert "rerun the same command" not in result.stdout + result.stderr
    assert "the next piece continues from the exported model" in result.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records and records[-1]["iteration"] < 100000
    carried = model.load(str(out / "model.azjax")).card["iteration"]
    assert carried == records[-1]["iteration"]
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"
    refused = subprocess.run([*command[:4], "0"], capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "MINUTES must be a positive number, got '0'" in (
        refused.stderr
    )
    # An interpreter without azjax's dependencies (python3 outside .venv) is named in one line.
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    refused = subprocess.run(
        command, capture_output=True, text=True, env={**env, "PYTHON": str(bare)}
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "No module named" in refused.stderr and "make train" in refused.stderr
    # A clock too short for the first checkpoint (0.6 s: not even the imports) is named.
    short = subprocess.run(
        [*command[:3], str(tmp_path / "short"), "0.01", *overrides],
        capture_output=True,
        text=True,
        env=env,
    )
    assert short.returncode == 1 and "ran out before training's first checkpoint" in (short.stderr)
    assert not (tmp_path / "short" / "model.azjax").exists()

    # The next piece continues the run from the model, and a Ctrl-C at the terminal (SIGINT to
    # the script's process group, which training's own group is not) stops training long
    # before its clock: what it trained is still exported, the solver skipped, the status 130.
    # The piece starts as a terminal's job does: a process group of its own, and SIGINT not
    # ignored, even where the suite itself runs with it ignored (a shell's background job),
    # as a shell cannot trap a signal ignored when it started.
    def terminal_job(args: list[str], log: pathlib.Path) -> subprocess.Popen:
        default = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        default += "os.execvp(sys.argv[1], sys.argv[1:])"
        with log.open("w") as output:
            return subprocess.Popen(
                [sys.executable, "-c", default, *args],
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**env, "SOLVER": "1"},
                start_new_session=True,
            )

    later, log = tmp_path / "later", tmp_path / "later.log"
    continued = [*command[:3], str(later), "2", *overrides, f"train.init_from={out}/model.azjax"]
    piece = terminal_job(continued, log)
    try:
        trained = False
        deadline = time.monotonic() + 100  # the clock (2 minutes) must not stop it first
        while not trained and time.monotonic() < deadline and piece.poll() is None:
            time.sleep(0.5)
            found = re.search(r"workdir (\S+)", log.read_text())
            run = pathlib.Path(found.group(1)) if found else tmp_path / "none"
            trained = any((run / "checkpoints").glob("[0-9]*"))
        assert trained and piece.poll() is None, log.read_text()
        os.killpg(piece.pid, signal.SIGINT)
        status = piece.wait(timeout=240)  # a Ctrl-C unheeded: the clock ends it, status 0
    finally:
        if piece.poll() is None:
            os.killpg(piece.pid, signal.SIGKILL)
    said = log.read_text()
    assert status == 130, said
    assert "solver: skipped (interrupted)" in said and "solver.json" not in said
    records = [json.loads(line) for line in (later / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] > carried  # continued, not started afresh
    assert records[0]["iteration"] == 1  # with the earlier piece's records
    assert model.load(str(later / "model.azjax")).card["iteration"] == records[-1]["iteration"]
    # A Ctrl-C before training's first checkpoint (while it loads): nothing to export.
    early, log = tmp_path / "early", tmp_path / "early.log"
    piece = terminal_job([*command[:3], str(early), "2", *overrides], log)
    while piece.poll() is None and "train: " not in log.read_text():
        time.sleep(0.1)  # the trap is set as training starts, after that step's line
    time.sleep(0.5)
    os.killpg(piece.pid, signal.SIGINT)
    assert piece.wait(timeout=120) == 130, log.read_text()
    assert "interrupted before training's first checkpoint" in log.read_text()
    assert not (early / "model.azjax").exists()
    assert not list(scratch.glob("tmp.*"))  # every piece's run directory removed
