"""What a run reports of its device: evaluations/s and the other rates of each iteration, and a
warning where the device would only emulate the network's dtype."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers import ROOT, TINY

from azjax import parallel, train
from azjax.config import load_config
from azjax.runlog import postfix, read_metrics
from azjax.train import train_and_evaluate

TICTACTOE = ROOT / "configs" / "tictactoe.yaml"


def test_bfloat16_on_a_gpu_without_bfloat16_arithmetic_is_warned_of(tmp_path, monkeypatch, capsys):
    def gpu(kind: str, capability: str) -> SimpleNamespace:
        return SimpleNamespace(platform="gpu", device_kind=kind, compute_capability=capability)

    t4 = gpu("Tesla T4", "7.5")
    warn = parallel.emulation_warning
    warning = warn("bfloat16", t4)
    assert "Tesla T4" in warning and "7.5" in warning and "network.dtype=float32" in warning
    assert warn("float32", t4) is None
    assert warn("bfloat16", gpu("NVIDIA A100-SXM4-40GB", "8.0")) is None
    assert warn("bfloat16", gpu("NVIDIA H200", "9.0")) is None
    assert warn("bfloat16", gpu("NVIDIA B200", "10.0")) is None  # not "1" < "8"
    assert warn("bfloat16", gpu("AMD Instinct MI300X", "gfx942")) is None
    assert warn("bfloat16") is None  # this machine: a CPU
    # azjax-train says so at the start of a run (stopped there: nothing else is at stake).
    monkeypatch.setattr(parallel, "emulation_warning", lambda dtype: warn(dtype, t4))

    def started(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "RunLog", started)
    config = load_config(TICTACTOE, [*TINY, "network.dtype=bfloat16"])
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(config, tmp_path, progress=False)
    assert f"warning: {warning}" in capsys.readouterr().err


def test_records_log_evaluations_per_second(tmp_path):
    overrides = ["train.iterations=1", "replay.min_size=100", "search.num_simulations=3"]
    fast = ["selfplay.full_search_prob=0.5", "selfplay.fast_simulations=1"]
    config = load_config(TICTACTOE, [*TINY, *overrides, *fast])
    train_and_evaluate(config, tmp_path, progress=False)
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    moves, batch = config.selfplay.chunk_moves, config.selfplay.batch_size
    assert record["moves_per_second"] * record["seconds"] == pytest.approx(moves * batch)
    assert record["positions_per_second"] * record["seconds"] == pytest.approx(
        record["replay/added"]
    )
    # Each step searches every slot fully (the root and a leaf per simulation) or fast.
    full = round(record["selfplay/full_search_fraction"] * moves)
    assert 0 < full < moves
    evaluations = batch * (full * (1 + 3) + (moves - full) * (1 + 1))
    assert record["evaluations_per_second"] * record["seconds"] == pytest.approx(evaluations)
    bar = postfix(record)
    assert bar["eval/s"] == f"{record['evaluations_per_second']:.0f}" or bar["eval/s"][-1] in "kMG"
    # The run's health, where the record judges it.
    assert "health" not in bar
    assert [postfix({**record, "health/ok": ok})["health"] for ok in (True, False)] == ["ok", "BAD"]
