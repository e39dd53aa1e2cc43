"""The run log: TensorBoard's copy of each record, and the records' one-line forms."""

from __future__ import annotations

import pathlib
import struct
import time
from types import SimpleNamespace

import jax.numpy as jnp
import pytest
from tensorboardX import event_file_writer
from tensorboardX.proto.event_pb2 import Event

from azjax.runlog import FLUSH_SECONDS, RunLog, eval_line, postfix, read_metrics, scalars


def events(path: pathlib.Path) -> list[Event]:
    """The events of one TensorBoard event file (records: a length, its checksum, the data, the
    data's checksum)."""
    data, out, at = path.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at : at + 8])
        out.append(Event.FromString(data[at + 12 : at + 12 + length]))
        at += 12 + length + 4
    return out


def logged(path: pathlib.Path) -> list[tuple[str, int, float]]:
    return [(v.tag, e.step, v.simple_value) for e in events(path) for v in e.summary.value]


def test_tensorboard_gets_each_number_at_its_iteration_and_a_resume_purges_what_follows(tmp_path):
    log = RunLog(tmp_path, resume_iteration=0)
    log.write({"iteration": 1, "train/loss": 0.5, "health/ok": True, "note": "x", "sizes": [1]})
    log.write({"iteration": 2, "train/loss": 0.25})
    (first,) = (tmp_path / "tensorboard").iterdir()
    # On disk within seconds of the record, while the run goes on; numbers only.
    expected = [("train/loss", 1, 0.5), ("health/ok", 1, 1.0), ("train/loss", 2, 0.25)]
    deadline = time.monotonic() + 4 * FLUSH_SECONDS
    while logged(first) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert logged(first) == expected
    log.close()
    resumed = RunLog(tmp_path, resume_iteration=1)
    resumed.write({"iteration": 2, "train/loss": 0.125})
    resumed.close()
    # A file of its own that starts by telling TensorBoard to drop the older files' iteration
    # 2 on.
    (second,) = set((tmp_path / "tensorboard").iterdir()) - {first}
    assert logged(first)[-1] == ("train/loss", 2, 0.25)
    start = [e for e in events(second) if e.HasField("session_log")]
    assert [(e.step, e.session_log.status) for e in start] == [(2, 1)]  # 1: START
    assert logged(second) == [("train/loss", 2, 0.125)]


def test_a_resume_within_the_same_second_keeps_the_file_before_it(tmp_path, monkeypatch):
    # TensorBoard's files are named by the second they were opened in.
    monkeypatch.setattr(event_file_writer, "time", SimpleNamespace(time=lambda: 1.7e9))
    for iteration in (0, 1):
        log = RunLog(tmp_path, resume_iteration=iteration)
        log.write({"iteration": iteration + 1, "train/loss": 0.5})
        log.close()
    files = sorted((tmp_path / "tensorboard").iterdir())
    assert [logged(f) for f in files] == [[("train/loss", 1, 0.5)], [("train/loss", 2, 0.5)]]


def test_scalars_are_python_numbers_and_lists():
    record = scalars({"loss": jnp.float32(0.5), "steps": jnp.int32(3), "lengths": jnp.arange(2)})
    assert record == {"loss": 0.5, "steps": 3, "lengths": [0, 1]}
    assert {k: type(v) for k, v in record.items()} == {"loss": float, "steps": int, "lengths": list}


def test_the_bar_shows_the_loss_rates_in_three_figures_and_each_opponents_score():
    record = {"train/trained": True, "train/loss": 1.23456, "train/value_std": 0.456}
    record |= {"positions_per_second": 99.6, "evaluations_per_second": 20.0}
    record |= {"eval/random/win_rate": 0.875, "eval/random/score": 0.9, "eval/mcts/score": 0.5}
    assert postfix(record) == {
        **{"loss": "1.235", "v_std": "0.46", "pos/s": "100", "eval/s": "20"},
        **{"random": "90%", "mcts": "50%"},
    }
    rates = [812.4, 999.0, 1e3, 12345.6, 1e6, 2.5e9]
    shown = [postfix({**record, "evaluations_per_second": r})["eval/s"] for r in rates]
    assert shown == ["812", "999", "1k", "12.3k", "1M", "2.5G"]


def test_the_evaluation_line_names_each_opponent_as_given_and_scores_draws_as_half():
    """The user's spec (`alphabeta:9`, not the metrics' `alphabeta_9`), and the score: all
    draws against perfect play read 50%, not "0% won"."""
    record = {"eval/random/score": 0.8, "eval/random/wins": 6, "eval/random/draws": 1}
    record |= {"eval/random/losses": 1, "eval/alphabeta_9/score": 0.5}
    record |= {"eval/alphabeta_9/wins": 0, "eval/alphabeta_9/draws": 64}
    record |= {"eval/alphabeta_9/losses": 0}
    assert eval_line(7, record, ["random", "alphabeta:9"]) == (
        "iteration 7: vs random: scored 80% (6W 1D 1L), vs alphabeta:9: scored 50% (0W 64D 0L)"
    )


def test_the_records_skip_blank_lines_and_a_last_line_cut_short(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1}\n\n{"iteration": 2}\n{"iteration": 3, "train/lo')
    assert read_metrics(path) == [{"iteration": 1}, {"iteration": 2}]
    path.write_text('{"iteration": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: expected a JSON object, got list"):
        read_metrics(path)
