"""How hard a run drives its device: FLOPs per evaluation, the peak table, evaluations/s."""

from __future__ import annotations

from types import SimpleNamespace

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from helpers import TINY
from test_train import TICTACTOE, records

import games
from azjax import throughput, train
from azjax.config import load_config
from azjax.network import NetworkConfig, make_network
from azjax.runlog import postfix
from azjax.train import train_and_evaluate


class _ConvDense(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.Conv(5, (3, 3), padding="VALID")(x)  # [B, 4, 3, 2] -> [B, 2, 1, 5]
        return nn.Dense(7)(y.reshape(x.shape[0], -1))


def test_network_flops_count_one_evaluation_of_a_conv_and_a_dense_layer():
    net, x = _ConvDense(), jnp.zeros((3, 4, 3, 2))
    params = net.init(jax.random.key(0), x)
    conv = 2 * (2 * 1 * 5) * (3 * 3 * 2)  # two FLOPs per multiply-add, for each output
    dense = 2 * 10 * 7  # the biases' adds are not tensor-core work
    assert throughput.network_flops(net, params, x) == conv + dense
    abstract = jax.ShapeDtypeStruct((1, 4, 3, 2), jnp.float32)  # nothing runs
    assert throughput.network_flops(net, params, abstract) == conv + dense


class _GroupedScan(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.Conv(6, (3, 3), feature_group_count=2)(x)  # [B, 4, 3, 4] -> [B, 4, 3, 6]
        y = y.reshape(x.shape[0], -1)  # [B, 72]
        w = self.param("w", nn.initializers.normal(), (5, 72, 72))
        y, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), y, w)
        # A nested jitted program, summing over two axes: [B, 8, 9] x [8, 9, 3] -> [B, 3]
        last = w[0, :, :3].reshape(8, 9, 3)
        return jax.jit(lambda h: jnp.einsum("bij,ijk->bk", h.reshape(-1, 8, 9), last))(y)


def test_network_flops_count_groups_scan_steps_and_nested_programs():
    net, x = _GroupedScan(), jnp.zeros((2, 4, 3, 4))
    params = net.init(jax.random.key(0), x)
    conv = 2 * (4 * 3 * 6) * (3 * 3 * 2)  # each output sums its group's 2 input features
    scan = 5 * 2 * 72 * 72
    assert throughput.network_flops(net, params, x) == conv + scan + 2 * 72 * 3


def test_network_flops_of_the_tower_count_each_convolution_once_at_its_full_window():
    # The tower's convolutions pick their CPU or GPU form by platform (a cond with two
    # branches): one runs. SAME padding's zeros are multiplied too, so each output counts
    # its whole 3x3 window, as for the hand count of a 6x128 Connect Four net below.
    game = games.make("connect4")
    obs = jax.ShapeDtypeStruct((1, *game.observation_shape), jnp.float32)
    cells, channels = 6 * 7, 128
    stem = 2 * cells * channels * (9 * 2)
    tower = 12 * 2 * cells * channels * (9 * channels)
    heads = 2 * (2 * cells * channels * 8) + 2 * (cells * 8) * (7 + channels) + 2 * channels
    for norm, dtype in (("layer", "bfloat16"), ("none", "float32")):
        config = NetworkConfig(blocks=6, channels=channels, norm=norm, dtype=dtype)
        net = make_network(game, config)
        params = jax.eval_shape(net.init, jax.random.key(0), obs)
        assert throughput.network_flops(net, params, obs) == stem + tower + heads


def test_peak_is_known_for_listed_devices_only():
    assert throughput.peak_tflops("bfloat16", "NVIDIA H100 80GB HBM3") == 989.0
    assert throughput.peak_tflops("bfloat16", "NVIDIA H100 PCIe") == 756.0  # not the SXM's
    assert throughput.peak_tflops("bfloat16", "NVIDIA H100 NVL") == 835.0
    assert throughput.peak_tflops("bfloat16", "NVIDIA H200") == 989.0
    assert throughput.peak_tflops("bfloat16", "NVIDIA L4") == 121.0  # Colab's
    assert throughput.peak_tflops("bfloat16", "NVIDIA L40S") == 362.05  # not the L4's
    assert throughput.peak_tflops("bfloat16", "NVIDIA L40") is None  # unlisted, not an L4
    assert throughput.peak_tflops("bfloat16", "TPU v5 lite") == 197.0
    # float32 products run on the tensor cores in TF32 unless full precision is asked for.
    assert throughput.peak_tflops("float32", "NVIDIA A100-SXM4-40GB") == 156.0
    assert throughput.peak_tflops("float32", "NVIDIA H100 PCIe") == 378.0
    for precision in throughput.FULL_PRECISION:
        with jax.default_matmul_precision(precision):
            assert throughput.peak_tflops("float32", "NVIDIA A100-SXM4-40GB") == 19.5
            assert throughput.peak_tflops("bfloat16", "NVIDIA A100-SXM4-40GB") == 312.0
    assert throughput.peak_tflops("float32", "Tesla T4") == 8.1  # no TF32 either
    assert throughput.peak_tflops("bfloat16", "Tesla T4") is None  # emulated
    assert throughput.peak_tflops("float32", "TPU v4") is None  # no float32 figure
    assert throughput.peak_tflops("float32", "cpu") is None
    assert throughput.peak_tflops("float32") is None  # this machine: a CPU


def test_bfloat16_on_a_gpu_without_bfloat16_arithmetic_is_warned_of(tmp_path, monkeypatch, capsys):
    def gpu(kind: str, capability: str) -> SimpleNamespace:
        return SimpleNamespace(platform="gpu", device_kind=kind, compute_capability=capability)

    t4 = gpu("Tesla T4", "7.5")
    warn = throughput.emulation_warning
    warning = warn("bfloat16", t4)
    assert "Tesla T4" in warning and "7.5" in warning and "network.dtype=float32" in warning
    assert warn("float32", t4) is None
    assert warn("bfloat16", gpu("NVIDIA A100-SXM4-40GB", "8.0")) is None
    assert warn("bfloat16", gpu("NVIDIA H200", "9.0")) is None
    assert warn("bfloat16", gpu("NVIDIA B200", "10.0")) is None  # not "1" < "8"
    assert warn("bfloat16", gpu("AMD Instinct MI300X", "gfx942")) is None
    assert warn("bfloat16") is None  # this machine: a CPU
    # azjax-train says so at the start of a run (stopped there: nothing else is at stake).
    monkeypatch.setattr(throughput, "emulation_warning", lambda dtype: warn(dtype, t4))

    def started(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "RunLog", started)
    config = load_config(TICTACTOE, [*TINY, "network.dtype=bfloat16"])
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(config, tmp_path, progress=False)
    assert f"warning: {warning}" in capsys.readouterr().err


def test_records_log_evaluations_per_second_and_the_fraction_of_peak(tmp_path, monkeypatch):
    peak = 2.0  # a device in the table, whatever runs the test
    monkeypatch.setattr(throughput, "peak_tflops", lambda dtype: peak)
    overrides = ["train.iterations=1", "replay.min_size=100", "search.num_simulations=3"]
    fast = ["selfplay.full_search_prob=0.5", "selfplay.fast_simulations=1"]
    config = load_config(TICTACTOE, [*TINY, *overrides, *fast])
    train_and_evaluate(config, tmp_path, progress=False)
    (record,) = records(tmp_path)
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
    # The tiny net's FLOPs per evaluation, from its tflops: the 0x8 net's stem on 9 cells,
    # two 8-channel heads, the policy's 9 logits and the value's 8 hidden units and output.
    flops = record["tflops"] * 1e12 / record["evaluations_per_second"]
    assert flops == pytest.approx(2 * 9 * 8 * 18 + 2 * (2 * 9 * 8 * 8) + 2 * 72 * (9 + 8) + 2 * 8)
    assert record["fraction_of_peak"] == pytest.approx(
        record["tflops"] / (peak * jax.device_count())
    )
    assert bar["peak"] == f"{record['fraction_of_peak']:.1%}"
    # Where no peak is known (a CPU) the bar shows none.
    unknown = {k: v for k, v in record.items() if k not in ("tflops", "fraction_of_peak")}
    assert "peak" not in postfix(unknown)
    # The run's health, where the record judges it.
    assert "health" not in bar
    assert [postfix({**record, "health/ok": ok})["health"] for ok in (True, False)] == ["ok", "BAD"]
