"""Multi-host on one machine: two JAX processes (2 fake CPU devices each, 4 in all) join through
jax.distributed on 127.0.0.1 and train Tic-Tac-Toe through `azjax-train` into one workdir, stop
on a SIGTERM after a checkpoint, and a second pair resumes it; the result equals one process
training on 4 devices (FOUR_DEVICES, which also checks that 4 devices train like one and that a
run resumes on any device count). An audit hook in each process records the files it writes.
Beside them, which environments (SSH, SLURM, Open MPI, TPU) join a cluster.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from helpers import ROOT, TINY

from azjax import parallel
from azjax.checkpoint import list_steps, load_for_inference
from azjax.cli import INTERRUPTED
from azjax.runlog import read_metrics

TICTACTOE = ROOT / "configs" / "tictactoe.yaml"
# Two iterations: stopped after the first and resumed, they must equal the two straight.
OVERRIDES = [*TINY, "train.iterations=2", "checkpoint.keep=5"]
TIMEOUT = 300  # seconds per phase; a healthy one takes under a minute on 2 busy cores

# azjax-train, with every file opened for writing, removed or renamed listed in argv[1] as it
# ends; where STOP_AT_ITERATION is set, the process sends itself a SIGTERM saving that iteration.
CHILD = r"""
import faulthandler, json, os, signal, sys

written = set()

def audit(event, args):
    if event == "open" and not isinstance(args[0], int):
        path, mode, flags = args
        if any(c in mode for c in "wax+") if mode else flags & (os.O_WRONLY | os.O_RDWR):
            written.add(os.path.abspath(os.fsdecode(path)))
    elif event in ("os.remove", "os.rename", "os.replace", "shutil.rmtree"):
        written.add(os.path.abspath(os.fsdecode(args[0])))

sys.addaudithook(audit)
from azjax import cli
from azjax.checkpoint import Checkpointer
from azjax.cli import train

save = Checkpointer.save

def stop_while_saving(self, iteration, *args, **kwargs):
    if str(iteration) == os.environ.get("STOP_AT_ITERATION"):
        signal.raise_signal(signal.SIGTERM)
    save(self, iteration, *args, **kwargs)

def finish(code):
    with open(sys.argv[1], "w") as f:
        json.dump(sorted(written), f)
    faulthandler.dump_traceback_later(30)  # a hang at exit shows its threads' stacks
    return code

Checkpointer.save = stop_while_saving
leave = cli.leave  # how a process of a cluster ends, from inside azjax-train's main
cli.leave = lambda code: leave(finish(code))
sys.exit(finish(train.main(sys.argv[2:])))
"""

# One interpreter with 4 devices: the forced device count kept, odd sizes refused, an iteration
# on the mesh, train steps equal on 1 and 4 devices, the sharded buffer, exact resume on 4,
# resume 4 -> 2 -> 4 devices. Its straight run of two iterations (checkpoints and straight.json
# in <workdir>/four) is the one the pair must equal.
FOUR_DEVICES = r"""
import dataclasses, json, pathlib, sys

import jax
import numpy as np
import optax
from jax.sharding import PartitionSpec

from azjax import parallel, resume
from azjax.checkpoint import Checkpointer
from azjax.config import load_config
from azjax.loss import make_train_step
from azjax.replay import make_sampler
from azjax.train import train_and_evaluate
from azjax.trainer import make_trainer

workdir, config = pathlib.Path(sys.argv[1]), load_config(sys.argv[2], sys.argv[3:])
assert parallel.use_cpu_cores(config.split_sizes(), 3) is None  # XLA_FLAGS's count stays
devices = jax.devices()
assert len(devices) == 4
for key in config.split_sizes():  # sizes the 4 devices cannot split are refused, named
    section, field = key.split(".")
    odd = dataclasses.replace(getattr(config, section), **{field: 6})
    try:
        make_trainer(dataclasses.replace(config, **{section: odd}))
        raise AssertionError(f"{key}=6 on 4 devices was accepted")
    except ValueError as err:
        assert f"{key}=6 must be a multiple of the number of devices (4)" in str(err), err

def equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

def positions(buffer):  # the stored positions, sorted
    block, leaves = buffer.capacity // buffer.shards, jax.tree.leaves(buffer.stored)
    slots = [s * block + i for s in range(buffer.shards) for i in range(int(buffer.size[s]))]
    return sorted(tuple(np.asarray(x[i]).tobytes() for x in leaves) for i in slots)

def checkpoint(name, state):  # saved as iteration 1, the way the training loop saves it
    with Checkpointer(workdir / name, 3) as checkpointer:
        checkpointer.save(1, state.params, state.replace(params=None), config)
    (workdir / name / "metrics.jsonl").write_text("")

trainer = make_trainer(config)
straight = trainer.init(jax.random.key(config.train.seed))
games = straight.carry.states.current_player
assert games.sharding.spec == PartitionSpec("data") and len(games.sharding.device_set) == 4
assert straight.params["params"]["Dense_0"]["kernel"].sharding.is_fully_replicated
straight, metrics = trainer.iterate(straight)
assert bool(metrics["train/trained"]), metrics
scalars = [{k: float(v) for k, v in metrics.items()}]

# Two SGD steps on one global batch, on 1 and on 4 devices: the gradient is all-reduced.
optimizer = optax.sgd(1e-2, momentum=0.9, nesterov=True)
step = make_train_step(trainer.network, optimizer, config.optim)
sample = jax.jit(make_sampler(trainer.game, 32))
batch = jax.device_get(sample(straight.buffer, jax.random.key(1)))
params = jax.device_get(straight.params)

def two_steps(params, opt_state, batch):
    params, opt_state, _ = step(params, opt_state, batch)
    return step(params, opt_state, batch)

found = []
for mesh in (parallel.make_mesh(devices[:1]), parallel.make_mesh(devices)):
    rep, data = parallel.replicated(mesh), parallel.data_sharded(mesh)
    jitted = jax.jit(two_steps, in_shardings=(rep, rep, data), out_shardings=rep)
    found.append(jax.device_get(jitted(params, optimizer.init(params), batch)))
(one, _, one_out), (four, _, four_out) = found
np.testing.assert_allclose(one_out["loss"], four_out["loss"], rtol=1e-5)
moved = 0.0
for a, b, c in zip(*map(jax.tree.leaves, (one, four, params)), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    moved = max(moved, float(np.abs(a - c).max()))
assert moved > 1e-4, moved

checkpoint("four", straight)
straight, metrics = trainer.iterate(straight)
scalars.append({k: float(v) for k, v in metrics.items()})
value = straight.buffer.stored.value  # a quarter of the slots on each device
assert value.sharding.spec == PartitionSpec("data") and straight.buffer.shards == 4
assert {s.data.shape for s in value.addressable_shards} == {(value.shape[0] // 4,)}
assert min(straight.buffer.size.tolist()) > 0

# Exact resume on 4 devices: the entry point trains iteration 2 from checkpoint 1.
assert train_and_evaluate(config, workdir / "four", progress=False)["iteration"] == 2
with Checkpointer(workdir / "four", 3) as checkpointer:
    iteration, resumed = resume.from_checkpoint(trainer, checkpointer)
assert iteration == 2
equal(resumed, straight)
(workdir / "four" / "straight.json").write_text(json.dumps(scalars))

# 4 -> 2 devices: the buffer dealt out to 2 shards, nothing lost.
two = make_trainer(config, parallel.make_mesh(devices[:2]))
with Checkpointer(workdir / "four", 3) as checkpointer:
    _, moved = resume.from_checkpoint(two, checkpointer, step=1)
with Checkpointer(workdir / "four", 3) as checkpointer:
    _, halfway = resume.from_checkpoint(trainer, checkpointer, step=1)
assert moved.buffer.shards == 2 and positions(moved.buffer) == positions(halfway.buffer)
shards = moved.buffer.stored.value.addressable_shards
assert {s.data.shape for s in shards} == {(value.shape[0] // 2,)}
equal(moved.params, halfway.params)

# 2 -> 4 devices: the 2-device checkpoint resumes through the entry point.
checkpoint("two", moved)
result = train_and_evaluate(config, workdir / "two", progress=False)
assert result["iteration"] == 2 and np.isfinite(result["train/loss"]), result
print("OK")
"""


def _env(devices: int, **extra: str) -> dict[str, str]:
    """No cluster, `devices` CPU devices, the suite's compilation cache (tests/conftest.py)."""
    cluster = ("JAX_", "SLURM_", "OMPI_", "TPU_", "AZJAX_DISTRIBUTED")
    env = {k: v for k, v in os.environ.items() if not k.startswith(cluster)}
    flags = f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count={devices}"
    cache = {"JAX_COMPILATION_CACHE_DIR": os.environ["AZJAX_JAX_CACHE"]}
    cache["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return {**env, **cache, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", **extra}


def _ours(text: str) -> str:
    """Stdout without the collectives library's notices ("[Gloo] Rank 3 is connected to 3 peer
    ranks"), whose pieces its threads interleave (a rank number can land on a line of its own)."""
    lines = text.splitlines(True)
    gloo = [x.startswith("[Gloo]") or "peer ranks" in x or x.strip().isdigit() for x in lines]
    return "".join(x for x, theirs in zip(lines, gloo, strict=True) if not theirs)


@pytest.fixture
def start(tmp_path):
    """`start(name, script, args, env)`: `python -c SCRIPT ARGS...` in the repository, its output
    in tmp_path/NAME.out and .err ("{files}" in ARGS: tmp_path/NAME); all killed at the end."""
    started = []

    def run(name: str, script: str, args: list[str], env: dict[str, str]) -> tuple:
        base = tmp_path / name
        argv = [sys.executable, "-c", script, *(a.replace("{files}", str(base)) for a in args)]
        with open(f"{base}.out", "w") as out, open(f"{base}.err", "w") as err:
            started.append(
                (subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err), base)
            )
        return started[-1]

    yield run
    for proc, _ in started:
        proc.kill()
        proc.wait()


def finished(*procs: tuple, status: int = 0, timeout: float = TIMEOUT) -> list[dict]:
    """Each process's status, stdout, stderr and the files it wrote (the CHILD script's list),
    once all have ended with `status` within `timeout` seconds; else fails showing them all."""
    deadline, results = time.monotonic() + timeout, []
    for proc, base in procs:
        try:
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        written = pathlib.Path(f"{base}.written.json")
        results.append(
            {
                "status": proc.returncode,
                "stdout": _ours(pathlib.Path(f"{base}.out").read_text()),
                "stderr": pathlib.Path(f"{base}.err").read_text(),
                "written": json.loads(written.read_text()) if written.exists() else None,
            }
        )
    shown = (f"--- {r['status']}\n{r['stdout'][-3000:]}\n{r['stderr'][-6000:]}" for r in results)
    assert all(r["status"] == status for r in results), "\n".join(shown)
    return results


def pair(start, name: str, workdir: pathlib.Path, stop_1_at: int | None = None) -> list[tuple]:
    """Two processes of one run; process 1 sends itself a SIGTERM saving iteration `stop_1_at`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        cluster = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{s.getsockname()[1]}"}
    argv = ["{files}.written.json", "--config", str(TICTACTOE), "--workdir", str(workdir)]
    argv += ["--quiet", *OVERRIDES]
    procs = []
    for i in range(2):
        stop = {"STOP_AT_ITERATION": str(stop_1_at)} if i == 1 and stop_1_at else {}
        env = _env(2, **cluster, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i), **stop)
        procs.append(start(f"{name}{i}", CHILD, argv, env))
    return procs


def in_workdir(paths: list[str], workdir: pathlib.Path) -> set[str]:
    """The paths under `workdir`, relative; TensorBoard's files as "tensorboard/*"."""
    root, rel = workdir.resolve(), set()
    for p in map(pathlib.Path, paths):
        if p.is_relative_to(root):
            r = p.relative_to(root)
            rel.add("tensorboard/*" if r.parts[0] == "tensorboard" else r.as_posix())
    return rel


def test_two_processes_train_resume_and_match_one_process(tmp_path, start):
    # Meanwhile, the reference: one process with 4 devices training the two iterations straight.
    one = start("four", FOUR_DEVICES, [str(tmp_path), str(TICTACTOE), *OVERRIDES], _env(4))
    workdir = tmp_path / "pod"
    workdir.mkdir()

    # A workdir in use: process 0 alone takes its lock, and every process stops with the reason
    # (none waits forever for process 0 at the first collective).
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": "now"}  # alive
    (workdir / "azjax.lock").write_text(json.dumps(holder))
    p0, p1 = finished(*pair(start, "busy", workdir), status=1)
    assert f"is in use by another run (process {os.getpid()}" in p0["stderr"], p0["stderr"]
    assert f"process 0 could not lock workdir {workdir}" in p1["stderr"], p1["stderr"]
    assert json.loads((workdir / "azjax.lock").read_text()) == holder  # left alone
    (workdir / "azjax.lock").unlink()

    # Iteration 1; a SIGTERM reaches process 1 alone as they save it: both stop once it is saved.
    p0, p1 = finished(*pair(start, "first", workdir, stop_1_at=1), status=INTERRUPTED)
    assert "2 process(es)" in p0["stdout"] and "4 cpu device(s)" in p0["stdout"], p0["stdout"]
    assert "interrupted at iteration 1; checkpoint saved" in p0["stdout"], p0["stdout"]
    assert "process(es)" not in p1["stdout"], p1["stdout"]  # the banner: process 0 only
    assert list_steps(workdir) == [1] and not (workdir / "azjax.lock").exists()
    # Only process 0 writes the run's files; process 1 writes its shards of the checkpoint.
    mine = {"azjax.lock", "config.yaml", "metrics.jsonl", "tensorboard/*"}
    assert mine <= in_workdir(p0["written"], workdir), p0["written"]
    others = in_workdir(p1["written"], workdir)
    assert all(p.startswith("checkpoints/") for p in others), p1["written"]
    assert any("process_1" in p for p in others), p1["written"]

    # A new pair resumes from checkpoint 1 and trains iteration 2.
    q0, q1 = finished(*pair(start, "second", workdir))
    assert q0["stdout"].count(f"resuming from iteration 1 in {workdir}") == 1, q0["stdout"]
    assert "done: 1 iterations" in q0["stdout"] and "resumed at iteration 1" in q0["stdout"]
    assert q1["stdout"].strip() == "", q1["stdout"]  # the banner and summary: process 0 only
    assert all(p.startswith("checkpoints/") for p in in_workdir(q1["written"], workdir))
    records = read_metrics(workdir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2], records  # no line twice
    assert [r["train/step"] for r in records] == [4, 8]  # iteration 2 continued the count
    assert len(list((workdir / "tensorboard").iterdir())) == 2  # one event file per phase
    assert (workdir / "config.yaml").read_text().count("iterations: 2") == 1

    # The same run as one process on 4 devices: the same losses and parameters (not bit for
    # bit: the all-reduce across processes may add in another order, ~1e-7 apart).
    assert "OK" in finished(one, timeout=900)[0]["stdout"]
    single = tmp_path / "four"
    expected = json.loads((single / "straight.json").read_text())
    for got, want in zip(records, expected, strict=True):
        for key in ("train/loss", "train/policy_loss", "train/value_loss", "replay/size"):
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
    trees = [load_for_inference(str(run), step=s)[1] for s in (2, 1) for run in (workdir, single)]
    moved = 0.0
    for a, b, c, d in zip(*map(jax.tree.leaves, trees), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(c), np.asarray(d), rtol=1e-5, atol=1e-6)
        moved = max(moved, float(np.abs(np.asarray(b) - np.asarray(d)).max()))
    assert moved > 1e-3, moved  # iteration 2 changed the parameters far beyond the tolerance


JAX_DECIDES = (None, None, None)


@pytest.mark.parametrize(
    ("env", "joins"),
    [
        ("", None),
        ("JAX_COORDINATOR_ADDRESS=h:1 JAX_NUM_PROCESSES=4 JAX_PROCESS_ID=3", ("h:1", 4, 3)),
        ("SLURM_JOB_ID=7 SLURM_NTASKS=2", None),  # salloc's shell
        ("SLURM_JOB_ID=7 SLURM_STEP_NODELIST=n1 SLURM_NTASKS=1", None),
        ("SLURM_JOB_ID=7 SLURM_STEP_NODELIST=n[1-2] SLURM_NTASKS=2", JAX_DECIDES),
        ("OMPI_COMM_WORLD_SIZE=2", JAX_DECIDES),  # mpirun -n 2
        ("TPU_WORKER_HOSTNAMES=t0,t1", JAX_DECIDES),  # a GKE TPU slice
        ("TPU_WORKER_HOSTNAMES=t0", None),  # a TPU VM
        ("AZJAX_DISTRIBUTED=1", JAX_DECIDES),
        ("AZJAX_DISTRIBUTED=0 JAX_COORDINATOR_ADDRESS=h:1", None),
        ("JAX_COORDINATOR_ADDRESS=h:1 JAX_NUM_PROCESSES=two", "'two' must be an integer"),
    ],
)
def test_initialize_distributed_reads_the_environment(env, joins, monkeypatch):
    """Which environments join a cluster, and with what: JAX itself reads only
    JAX_COORDINATOR_ADDRESS, so the process count and id are passed on."""
    for key in list(os.environ):
        if key.startswith(("JAX_", "SLURM_", "OMPI_", "TPU_", "AZJAX_DISTRIBUTED")):
            monkeypatch.delenv(key)
    for key, value in (item.split("=", 1) for item in env.split()):
        monkeypatch.setenv(key, value)
    calls = []

    def initialize(coordinator_address=None, num_processes=None, process_id=None):
        calls.append((coordinator_address, num_processes, process_id))

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    if isinstance(joins, str):
        with pytest.raises(ValueError, match=joins):
            parallel.initialize_distributed()
    else:
        assert parallel.initialize_distributed() == (joins is not None)
        assert calls == ([] if joins is None else [joins])
