"""The benchmark scripts run end to end at a tiny size and write their JSON reports (figures
are measured by running them, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys

from test_train import ROOT


def bench(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "scripts" / "bench.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)


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
    args += ["--algorithms", "gumbel,puct", "--chunk-moves", "9", "--chunks", "1"]
    result = bench("selfplay", *args, "--warmup", "0", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["results"]
    assert [r["algorithm"] for r in rows] == ["gumbel", "puct"]
    for row in rows:
        assert row["positions_per_s"] > 0 and row["network_only_s"] > 0
        assert row["simulations_per_s"] == 2 * row["positions_per_s"]  # no PCR: 2 sims a move
        assert 0 < row["target_fraction"] <= 1  # games of the first chunk end in the second
        assert 0 <= row["plain_wasted_fraction"] < 1


def test_bench_refuses_bad_arguments():
    result = bench("nope")
    assert result.returncode != 0 and "got nope" in result.stderr
    result = bench("games", "--games", "chess")
    assert result.returncode != 0 and "unknown game(s) 'chess'" in result.stderr
    result = bench("selfplay", "--batches", "0")
    assert result.returncode != 0 and "expected positive integers, got '0'" in result.stderr
