"""The benchmark scripts run end to end at a tiny size and write their JSON reports (figures
are measured by running them, never asserted here)."""

from __future__ import annotations

import importlib
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import pytest
from helpers import ROOT, TINY, write_tiny_run

import games
from azjax import export, model

GAME = games.make("tictactoe")
KEY = jax.random.key(0)


def bench(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "scripts" / "bench.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.fixture
def refused(monkeypatch, capsys):
    """`refused(NAME, *args)`: what `scripts/bench_NAME.py` says as it refuses `args`, run in
    this process (an interpreter of its own costs 1.5 s to start; `bench.py`'s dispatch is run
    whole in test_bench_refuses_bad_arguments)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    monkeypatch.chdir(ROOT)

    def refuse(name: str, *args: str) -> str:
        with pytest.raises(SystemExit) as exit:
            importlib.import_module(f"bench_{name}").main(list(args))
        assert exit.value.code not in (0, None)  # a message (exit status 1) or argparse's 2
        return f"{capsys.readouterr().err}{exit.value.code}"

    return refuse


def test_games_bench_writes_a_row_per_game_size_and_batch(tmp_path):
    out = tmp_path / "games.json"
    args = ["--games", "tictactoe,dots_and_boxes", "--batches", "2,3", "--steps", "2"]
    result = bench("games", *args, "--repeats", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["platform"] == "cpu" and report["batches"] == [2, 3]
    rows = {(r["label"], r["batch"]) for r in report["results"]}
    labels = {"tictactoe", "dots_and_boxes", "dots_and_boxes rows=2 cols=2"}
    assert {label for label, _ in rows} >= labels and len(rows) == 2 * len(labels) + 2
    assert all(r["steps_per_s"] > 0 and "error" not in r for r in report["results"])


def test_selfplay_bench_reports_throughput_and_targets(tmp_path):
    out = tmp_path / "selfplay.json"
    args = ["--games", "tictactoe", "--nets", "0x4", "--batches", "4", "--sims", "2"]
    args += ["--algorithms", "gumbel", "--chunk-moves", "9", "--chunks", "2", "--norms", "none"]
    args += ["--full-prob", "0.5", "--fast-sims", "1"]  # playout cap randomisation
    args += ["--trace", str(tmp_path / "trace")]
    result = bench("selfplay", *args, "--warmup", "0", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["results"]
    assert [(r["algorithm"], r["norm"]) for r in rows] == [("gumbel", "none")]
    for row in rows:
        assert row["positions_per_s"] > 0 and row["network_only_s"] > 0
        assert row["search_only_s"] > 0  # the same chunk with a free evaluator
        # The profiled chunk: its trace, and its time split by kind of kernel.
        profile = row["profile"]
        assert "error" not in profile and (tmp_path / "trace").is_dir()
        assert profile["kernels"] > 0 and profile["device_busy_s"] > 0
        assert sum(profile["seconds_by_kind"].values()) == pytest.approx(profile["device_busy_s"])
        kinds = {"conv/matmul", "scatter", "gather", "reduce", "sort", "copy", "other fusion"}
        assert set(profile["seconds_by_kind"]) <= kinds
        # Moves searched fully (2 simulations) or fast (1), drawn move by move over 18 moves.
        full = row["full_search_fraction"]
        assert 0 < full < 1
        simulations = 2 * full + 1 * (1 - full)  # a move's, on average
        steps = 9 * (simulations + 1)  # a chunk: 9 moves, each the root and its simulations
        assert profile["kernels_per_evaluation_step"] == pytest.approx(profile["kernels"] / steps)
        assert row["simulations_per_s"] == pytest.approx(simulations * row["positions_per_s"])
        evaluations = row["evaluations_per_s"] * row["selfplay_s"]
        assert evaluations == pytest.approx(
            (simulations + 1) * row["positions_per_s"] * row["selfplay_s"]
        )
        assert evaluations == pytest.approx(2 * 4 * 9 * (simulations + 1))  # 2 chunks of B=4
        assert row["ratio"] == pytest.approx(row["selfplay_s"] / row["network_only_s"])
        # A 0x4 net (a stem convolution and the heads) costs a few thousand FLOPs.
        assert 100 < row["network_flops_per_evaluation"] < 20_000
        flops = row["evaluations_per_s"] * row["network_flops_per_evaluation"]
        assert row["achieved_tflops"] == pytest.approx(flops / 1e12)
        # The network alone made as many evaluations, in batches of B, in network_only_s.
        alone = evaluations / row["network_only_s"] * row["network_flops_per_evaluation"]
        assert row["network_only_tflops"] == pytest.approx(alone / 1e12)
        assert row["peak_tflops"] is None and row["fraction_of_peak"] is None  # a CPU
        assert 0 < row["target_fraction"] <= 1  # games of the first chunk end in the second
        assert 0 <= row["plain_wasted_fraction"] < 1
        # The compiled chunk's loop over simulations: its kernels per step, split by kind.
        kernels = row["simulation_step_kernels"]
        assert row["kernels_per_simulation_step"] == kernels["kernels"] > 0
        assert kernels["by_kind"]["conv/matmul"] >= 1  # the network's stem at least
        # ... and by the function that made them: the search's tree, the network, the rules
        made = kernels["by_function"]
        assert sum(made.values()) == kernels["kernels"] == sum(kernels["by_kind"].values())
        for module in ("azjax/tree.py", "azjax/network.py", "games/tictactoe.py"):
            assert any(where.startswith(f"{module}:") for where in made), (module, made)
        assert made.get("?", 0) < kernels["kernels"] / 4  # nearly all put down to a function
        # Memory: a Tic-Tac-Toe State is smaller than its float32 observation, so a position
        # is stored as its State; with observations, each costs the observation's bytes more.
        # A game in flight keeps its pending positions, up to a whole game's worth.
        observation = 4 * math.prod(GAME.observation_shape)
        state = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(GAME.init(KEY)))
        targets = row["bytes_per_buffer_position_observations"] - observation
        assert row["stored"] == "state" and state < observation
        assert row["bytes_per_buffer_position"] == targets + state
        assert row["bytes_per_game_in_flight"] > GAME.max_game_length * state
        saved = row["bytes_per_game_in_flight_observations"] - row["bytes_per_game_in_flight"]
        assert saved == GAME.max_game_length * (observation - state)


def test_selfplay_bench_counts_fewer_kernels_per_simulation_without_normalisation(tmp_path):
    # --kernels-only compiles each point and counts, timing nothing: without the LayerNorms a
    # simulation step launches fewer kernels, and as many convolutions and dots. Run through
    # scripts/compare_selfplay.sh with this checkout as its own baseline: both sides' reports and
    # the table that sets them side by side.
    args = ["--games", "tictactoe", "--nets", "1x4", "--batches", "2", "--sims", "2"]
    args += ["--algorithms", "gumbel", "--chunk-moves", "1", "--norms", "layer", "--kernels-only"]
    script, out = str(ROOT / "scripts" / "compare_selfplay.sh"), tmp_path / "out"
    # A folder on the caller's PYTHONPATH (wheels unpacked on a bare GPU machine) stays on both
    # sides' paths: its sitecustomize notes each interpreter that starts.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nopen({str(tmp_path / 'started')!r}, 'a').write(sys.argv[0] + '\\n')\n"
    )
    # PYTHON given relative to where the script is started: a wrapper in tmp_path/bin.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (tmp_path / "bin" / "python").chmod(0o755)
    env = {**os.environ, "PYTHON": "bin/python", "CURRENT_ARGS": "--norms layer,none"}
    env["PYTHONPATH"] = str(site)
    result = subprocess.run(
        ["bash", script, str(ROOT), str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    base = json.loads((out / "baseline.json").read_text())["results"]
    rows = {r["norm"]: r for r in json.loads((out / "current.json").read_text())["results"]}
    assert set(rows) == {"layer", "none"} and not any("selfplay_s" in r for r in rows.values())
    kinds = {norm: r["simulation_step_kernels"]["by_kind"] for norm, r in rows.items()}
    assert kinds["layer"]["conv/matmul"] == kinds["none"]["conv/matmul"] >= 3  # 3x3s, dense
    layer, none = (rows[n]["kernels_per_simulation_step"] for n in ("layer", "none"))
    assert layer > none and [r["kernels_per_simulation_step"] for r in base] == [layer]
    assert (tmp_path / "started").read_text().count("scripts/bench.py") == 2
    table = (out / "compare.txt").read_text().splitlines()
    assert [line.split()[5:7] for line in table[1:]] == [
        ["base", "layer"],
        ["now", "layer"],
        ["now", "none"],
    ]
    assert [int(line.split()[-1]) for line in table[1:]] == [layer, layer, none]
    # the loops over the tree's levels: their kernels per level, beside the count
    level = {n: rows[n]["simulation_step_kernels"]["data_dependent_loop_kernels"] for n in rows}
    assert [int(line.split()[-2]) for line in table[1:]] == [
        level["layer"],
        level["layer"],
        level["none"],
    ]
    assert 0 < level["layer"] < layer and 0 < level["none"] < none
    # nothing was timed: no evaluations/s, gain, peak or ratio, not zeros
    assert all(line.split()[7:11] == ["-"] * 4 for line in table[1:])
    for baseline in (tmp_path, tmp_path / "missing"):
        command = ["bash", script, str(baseline), str(out)]
        refused = subprocess.run(command, capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert f"must hold a revision's scripts/bench.py, got '{baseline}'" in refused.stderr


def test_kernels_are_sorted_by_kind(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    kind = importlib.import_module("bench_selfplay").kernel_kind
    assert kind("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") == "conv/matmul"
    assert kind("convolution.12") == kind("gemm_fusion_dot_48") == "conv/matmul"
    assert kind("loop_convert_fusion_26") == "other fusion"  # a dtype conversion, no convolution
    assert kind("input_reduce_fusion_20") == "reduce" and kind("input_scatter_fusion") == "scatter"
    assert kind("loop_add_gather_fusion") == "gather" and kind("MemcpyD2D") == "copy"


def tiny_program(trips: int, inner: int = 2) -> str:
    """A compiled program whose loop of `trips` steps holds two dots, a loop of `inner` steps
    and one whose trip count depends on the data; beside it a loop of `trips` steps with no
    dot, around it another loop of `trips` steps."""

    w = jnp.ones((8, 8))

    def step(_, x):
        y = jnp.tanh(x @ w)
        y = jax.lax.fori_loop(0, inner, lambda _, y: jnp.cos(y) * y, y)
        y = jax.lax.while_loop(lambda y: y.sum() < 0, lambda y: y * 2.0 + 1.0, y)
        return jnp.sin(y @ w.T)

    def program(x):
        light = jax.lax.fori_loop(0, trips, lambda i, v: jnp.cos(v) + i, x[0])

        def loop(x):
            return jax.lax.fori_loop(0, trips, step, x)

        return jax.lax.fori_loop(0, trips, lambda _, x: loop(x), x) + light

    return jax.jit(program).lower(jnp.ones((4, 8))).compile().as_text()


def test_loop_kernels_follows_its_rules_on_a_written_program(monkeypatch):
    # tests/data/loop_kernels.hlo: a loop of 5 steps whose body holds a dot, a loop of 3 steps
    # (a fusion behind a bitcast; its test a comparison), a comparison and a conditional with
    # branches of 2 and 1 instructions; its own test a comparison.
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    loop_kernels = importlib.import_module("benchlib").loop_kernels
    counted = loop_kernels((ROOT / "tests" / "data" / "loop_kernels.hlo").read_text(), 5)
    # dot 1 + inner loop 3 bodies and 4 tests + comparison 1 + the larger branch 2 + test 1;
    # parameters, tuples, their elements, constants and bitcasts launch nothing.
    assert counted == {
        "kernels": 12,
        "data_dependent_loop_kernels": 0,
        "by_kind": {"other fusion": 11, "conv/matmul": 1},
        "by_function": {"?": 12},  # a written program: no stack frames to put them down to
        "loops": 1,
    }


def test_loop_kernels_counts_one_step_of_the_innermost_loop_with_the_heavy_work(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    loop_kernels = importlib.import_module("benchlib").loop_kernels
    counted = loop_kernels(tiny_program(3), 3)
    assert counted["loops"] == 1 and counted["by_kind"]["conv/matmul"] == 2  # the two dots
    assert sum(counted["by_kind"].values()) == counted["kernels"]
    # each kernel put down to the function whose line made it: here this file's `step`
    frames = importlib.import_module("benchlib").stack_frames(tiny_program(3), own=("tests",))
    assert "tests/test_bench.py:step" in set(frames.values())
    # The data-dependent loop counts once: its test (a reduction) and its body, one fusion
    # each; their parameters, tuples and constants are free.
    assert counted["data_dependent_loop_kernels"] == 2 < counted["kernels"]
    # Per step: the same for another trip count (not the loop around it, which repeats it).
    assert loop_kernels(tiny_program(4), 4) == counted
    # A nested loop with a known trip count counts each of its steps.
    longer = loop_kernels(tiny_program(3, inner=3), 3)
    assert longer["kernels"] > counted["kernels"]
    assert longer["data_dependent_loop_kernels"] == counted["data_dependent_loop_kernels"]
    assert loop_kernels(tiny_program(3), 5) is None  # no loop runs 5 times


def test_bench_refuses_bad_arguments(refused):
    result = bench("nope")
    assert result.returncode != 0 and "got nope" in result.stderr
    assert "unknown game(s) 'chess'" in refused("games", "--games", "chess")
    assert "expected positive integers, got '0'" in refused("selfplay", "--batches", "0")
    for nets in ("6x", "2x0", "x32", "2x32,64"):
        assert f"BLOCKSxCHANNELS such as 2x32 (channels >= 1), got '{nets}'" in refused(
            "selfplay", "--nets", nets
        )
    said = refused("selfplay", "--norms", "layer,batch")
    assert "--norms: expected comma-separated values of layer, none, got 'layer,batch'" in said
    said = refused("selfplay", "--algorithms", "alphazero")
    assert "expected comma-separated values of gumbel, puct, got 'alphazero'" in said
    bad_override = "configuration error: override 'foo': expected dotted.key=value"
    assert f"bench.py memory: {bad_override}" in refused("memory", "--set", "foo")
    config = str(ROOT / "configs" / "tictactoe.yaml")
    said = refused("learning", "--config", config, "--set", "foo")
    assert f"bench.py learning: {bad_override}" in said
    said = refused("learning", "--config", config, "--every-positions", "0")
    assert "--every-positions must be positive, got 0" in said
    said = refused("learning", "--config", config, "--seeds", "0,one")
    assert "expected comma-separated integers >= 0, got '0,one'" in said
    pons = str(ROOT / "azjax" / "data" / "connect4_pons.json")
    said = refused("learning", "--config", config, "--pons", pons, "--positions", "8")
    assert "bench.py learning: --pons: no Pons groups for tictactoe" in said
    said = refused("learning", "--runs", str(ROOT / "configs"))
    assert "bench.py learning: no checkpoint in" in said


def test_learning_bench_writes_curves_per_seed(tmp_path, refused):
    from azjax import solver

    out, subset = tmp_path / "learning.json", tmp_path / "ttt.json"
    data = json.loads(solver.TICTACTOE.path.read_text())
    solver.TICTACTOE.write({**data, "positions": data["positions"][::50]}, subset)  # 91 of them
    tiny = [
        *TINY,
        "train.batch_size=16",
        "train.steps_per_iteration=2",
        "eval.num_simulations=4",
        "gate.every=1",  # gating counts as training
        "gate.games=2",
    ]
    args = ["--config", str(ROOT / "configs" / "tictactoe.yaml"), "--positions", "150"]
    args += ["--every-positions", "75", "--seeds", "0,1", "--out", str(out)]
    args += ["--cpu-devices", "2", "--solver-set", str(subset)]  # two devices, as on two cores
    result = bench("learning", *args, *(a for o in tiny for a in ("--set", o)))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["machine"]["platform"] == "cpu" and report["budget"]["positions"] == 150
    assert report["machine"]["num_devices"] == 2
    assert [r["seed"] for r in report["runs"]] == [0, 1]
    for run in report["runs"]:
        points = run["points"]
        assert points[0]["positions"] == 0 and points[-1]["positions"] >= 150
        assert len(points) >= 3 and all(0 <= p["search/keeps_result"] <= 1 for p in points)
        assert [p["iteration"] for p in points] == sorted({p["iteration"] for p in points})
        assert 0 <= run["gate_promotions"] <= run["iterations"]
    finals = [r["points"][-1]["search/keeps_result"] for r in report["runs"]]  # its solver set
    assert report["summary"][args[1]]["search/keeps_result"]["min"] == min(finals)
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert "config 'nope.yaml' does not exist" in refused("learning", "--config", "nope.yaml")
    said = refused("learning", *args[:2], "--cpu-devices", "0")
    assert "--cpu-devices: CPU devices must be >= 1, got 0" in said


def test_learning_bench_measures_the_checkpoints_of_a_run(tmp_path, refused):
    workdir, out = tmp_path / "run", tmp_path / "runs.json"
    write_tiny_run(workdir, steps=(1, 3), game="chain_reaction")  # no solver set: the arena
    records = [
        {"iteration": i, "replay/added": 10 * i, "elapsed_minutes": 0.5 * i} for i in (1, 2, 3)
    ]
    records.append({"iteration": 3, "final": True, "elapsed_minutes": 9.0})  # not training
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    args = ["--runs", str(workdir), "--games", "4", "--out", str(out)]
    result = bench("learning", *args, "--set", "eval.opponents=[random]")
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    assert report["budget"] == {"runs": [str(workdir)]} and run["game"] == "chain_reaction"
    assert [(p["iteration"], p["minutes"], p["positions"]) for p in run["points"]] == [
        (1, 0.5, 10),
        (3, 1.5, 60),
    ]
    assert all(0 <= p["vs random/score"] <= 1 for p in run["points"])
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    (workdir / "metrics.jsonl").write_text(json.dumps(records[2]) + "\n")  # not iteration 1
    assert "metrics.jsonl has no record of iteration 1" in refused("learning", *args)


def test_learning_bench_scores_the_solver_set_it_is_given(tmp_path, refused):
    from azjax import pons, solver

    workdir, out, subset = tmp_path / "run", tmp_path / "runs.json", tmp_path / "seven.json"
    write_tiny_run(workdir, steps=(2,), game="connect4")
    record = {"iteration": 2, "replay/added": 5, "elapsed_minutes": 1.0}
    (workdir / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    data = json.loads(solver.CONNECT4.path.read_text())
    solver.CONNECT4.write({**data, "positions": data["positions"][100:107]}, subset)
    pons_set = tmp_path / "pons.json"  # Pons' groups, three positions each
    groups = json.loads(pons.PATH.read_text())["groups"]
    pons_set.write_text(json.dumps({"groups": {g: ps[:3] for g, ps in groups.items()}}))
    args = ["--runs", str(workdir), "--out", str(out)]
    result = bench("learning", *args, "--solver-set", str(subset), "--pons", str(pons_set))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    (point,) = report["runs"][0]["points"]
    assert report["solver_set"] == str(subset) and report["pons"] == str(pons_set)
    shares = ("best_move", "keeps_result")
    scores = [point[f"{who}/{share}"] for who in ("search", "policy") for share in shares]
    # Shares of 7 positions: of the shipped 300, only 0 and 1 are also multiples of 1/7.
    assert all(abs(7 * s - round(7 * s)) < 1e-6 for s in scores), scores
    assert any(0 < s < 1 for s in scores), scores
    rates = [point[f"{who}/mistakes {g}"] for who in ("search", "policy") for g in pons.GROUPS]
    assert all(abs(3 * r - round(3 * r)) < 1e-6 for r in rates), rates  # shares of 3 positions
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    said = refused("learning", *args, "--pons", str(tmp_path / "nope.json"))
    assert "--pons" in said and "no such file" in said
    said = refused("learning", *args, "--solver-set", str(tmp_path / "nope.json"))
    assert "nope.json: no such file" in said
    setless = tmp_path / "chain_reaction"
    write_tiny_run(setless, steps=(2,), game="chain_reaction")
    assert "no metrics.jsonl in" in refused("learning", "--runs", str(setless))
    (setless / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    said = refused("learning", "--runs", str(setless), "--solver-set", str(subset))
    assert "--solver-set: no perfect-play position set" in said


def test_memory_bench_splits_the_replay_buffer_over_devices(tmp_path):
    out = tmp_path / "memory.json"
    result = bench(
        "memory", "--config", "configs/tictactoe.yaml", "--devices", "1,4", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    one, four = (r["bytes_per_device"] for r in json.loads(out.read_text())["results"])
    assert one["params"] == four["params"] > 0  # replicated
    # The buffer's storage splits evenly; only its [shards] positions and sizes stay whole.
    assert one["replay"] - 8 == 4 * (four["replay"] - 32)
    assert one["selfplay_carry"] == 4 * four["selfplay_carry"]


def test_fresh_machine_script_trains_to_the_clock_and_leaves_a_model_and_its_curve(tmp_path):
    """scripts/fresh_machine.sh stops training at its wall clock (as Ctrl-C does: a checkpoint
    at the iteration in hand), then exports the model resumable (what the next piece continues
    from through train.init_from, tests/test_train.py), copies the metrics and draws the curve;
    a bad MINUTES is refused before anything runs. Its run directories (mktemp's, holding the
    replay buffer) are removed as each piece ends."""
    script, out = str(ROOT / "scripts" / "fresh_machine.sh"), tmp_path / "out"
    scratch = tmp_path / "scratch"  # mktemp's folder here
    scratch.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "BENCH": "0", "SOLVER": "0"}
    env["TMPDIR"] = str(scratch)
    overrides = [*TINY, "train.iterations=100000"]  # only the clock stops it
    # The clock leaves room for compilation and the first iteration on a slow shared machine.
    command = ["bash", script, str(ROOT / "configs" / "tictactoe.yaml"), str(out), "0.4"]
    result = subprocess.run(
        [*command, *overrides], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "interrupted at iteration" in result.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records and records[-1]["iteration"] < 100000
    loaded = model.load(str(out / "model.azjax"))
    assert loaded.card["iteration"] == records[-1]["iteration"]
    carried = export.read_continuation(out / "model.azjax")
    assert carried["iteration"] == records[-1]["iteration"]
    assert [r["iteration"] for r in json.loads(carried["records"])] == [
        r["iteration"] for r in records
    ]
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"
    refused = subprocess.run([*command[:4], "0"], capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "MINUTES must be a positive number, got '0'" in (
        refused.stderr
    )
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
    assert records[-1]["iteration"] > carried["iteration"]  # continued, not started afresh
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
