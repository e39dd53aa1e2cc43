"""Memory per device: `python scripts/bench.py memory [--config YAML] [--devices 1,4,8]`.

For each device count it builds the trainer of the config on that many (fake, on the CPU)
devices, in a subprocess, and reports the bytes each device holds of the training state by
part: parameters, optimizer state, replay buffer, self-play carry (games in flight and their
pending positions). Nothing is allocated or compiled: the figures come from the abstract
state's shapes and shardings. The replay buffer is split over the devices, so its bytes per
device fall as 1/devices: at a fixed memory per device, the capacity grows with the devices.
Prints a table and writes JSON (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchlib import int_list, write_report

from azjax.config import ConfigError, load_config

CHILD = r"""
import json, math, sys
import jax
from azjax.config import load_config
from azjax.replay import stores_states
from azjax.trainer import make_trainer

config = load_config(sys.argv[1], sys.argv[2:])
trainer = make_trainer(config)

def per_device(tree):
    leaves = jax.tree.leaves(tree)
    return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in leaves)

state = trainer.abstract
print(json.dumps({
    "devices": jax.device_count(),
    "game": trainer.game.name,
    "stored": "state" if stores_states(trainer.game) else "observation",
    "replay_capacity": config.replay.capacity,
    "bytes_per_device": {
        "params": per_device(state.params),
        "opt_state": per_device(state.opt_state),
        "replay": per_device(state.buffer),
        "selfplay_carry": per_device(state.carry),
        "total": per_device(state),
    },
}))
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py memory", description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/connect4_gpu.yaml", help="training config")
    p.add_argument("--devices", type=int_list, default="1,4,8", help="device counts")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a dotted override"
    )
    p.add_argument("--out", default="bench_results/memory.json", help="JSON output path")
    return p.parse_args(argv)


def measure(config: str, overrides: list[str], devices: int) -> dict:
    """One device count, in a fresh interpreter (XLA reads its flags once)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    result = subprocess.run(
        [sys.executable, "-c", CHILD, config, *overrides],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        sys.exit(f"bench.py memory: {devices} devices failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    try:  # checked here, in one line, before any child starts
        load_config(args.config, args.set)
    except ConfigError as err:
        raise SystemExit(f"bench.py memory: configuration error: {err}") from None
    rows = [measure(args.config, args.set, n) for n in args.devices]
    one = rows[0]["bytes_per_device"]["replay"] * rows[0]["devices"]
    print(f"{'devices':>8}{'params':>12}{'opt':>12}{'replay':>14}{'carry':>14}{'total':>14}")
    for row in rows:
        b = row["bytes_per_device"]
        row["replay_capacity_per_device"] = row["replay_capacity"] // row["devices"]
        row["replay_bytes_x_devices_over_one"] = b["replay"] * row["devices"] / one
        print(
            f"{row['devices']:>8}{b['params']:>12,}{b['opt_state']:>12,}{b['replay']:>14,}"
            f"{b['selfplay_carry']:>14,}{b['total']:>14,}"
        )
    write_report(args.out, {"config": args.config, "overrides": args.set, "results": rows})
