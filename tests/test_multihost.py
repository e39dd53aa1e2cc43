"""Multi-host on one machine: two JAX processes (2 fake CPU devices each, 4 in all) train
Tic-Tac-Toe through `azjax-train` into one shared workdir, stop after a checkpoint, and a second
pair resumes it; the result equals a single process training on 4 devices. That process is
FOUR_DEVICES, which checks in one interpreter that training on 4 devices equals training on one
and resumes on any device count.

Each process joins the cluster the way a pod host does: `azjax.parallel.initialize_distributed`
reads JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID. An audit hook in every
process records the files it writes, so the test can tell which process wrote what. Beside
it, which environments (SSH, SLURM, Open MPI, TPU) make `initialize_distributed` join a cluster.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import warnings

import jax
import numpy as np
import pytest
from helpers import ROOT, TINY
from test_train import TICTACTOE

from azjax import parallel
from azjax.checkpoint import list_steps, load_for_inference
from azjax.cli import INTERRUPTED
from azjax.metrics import read_metrics

# The audit hook records every file opened for writing, removed or renamed; the list goes to
# argv[1] (outside the workdir) when the run ends. Then the real entry point: azjax-train (where
# STOP_AT_ITERATION is set, the process sends itself a SIGTERM as it saves that iteration).
CHILD = r"""
import faulthandler
import json
import os
import sys
import time

written = set()


def audit(event, args):
    if event == "open" and not isinstance(args[0], int):
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if mode else flags & (os.O_WRONLY | os.O_RDWR)
        if writes:
            written.add(os.path.abspath(os.fsdecode(path)))
    elif event in ("os.remove", "os.rename", "os.replace", "shutil.rmtree"):
        written.add(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(audit)
if "STOP_AT_ITERATION" in os.environ:  # this process alone gets a SIGTERM while saving it
    import signal

    from azjax.checkpoint import Checkpointer

    save = Checkpointer.save

    def stop_while_saving(self, iteration, *args, **kwargs):
        if iteration == int(os.environ["STOP_AT_ITERATION"]):
            signal.raise_signal(signal.SIGTERM)
        save(self, iteration, *args, **kwargs)

    Checkpointer.save = stop_while_saving
from azjax.cli import train


def finish(code):
    with open(sys.argv[1], "w") as f:
        json.dump(sorted(written), f)
    print(f"main returned at {time.time():.1f}", file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(30)  # a hang at exit shows its threads' stacks (stderr)
    return code


leave = train.leave  # how a process of a cluster ends, from inside azjax-train's main
train.leave = lambda code: leave(finish(code))
sys.exit(finish(train.main(sys.argv[2:])))
"""

# Two iterations: a run stopped after iteration 1 and resumed must equal one that trains both
# straight.
OVERRIDES = [o for o in TINY if not o.startswith("train.iterations")]
OVERRIDES += ["train.iterations=2", "checkpoint.keep=5"]
TIMEOUT = 240  # seconds per phase; a healthy one takes under a minute on 2 busy cores
SLOW_EXIT = 20  # seconds from `main` returning to the process exiting, before a warning


# One interpreter with 4 devices: an iteration on the mesh, a train step equal on 1 and 4
# devices, the sharded buffer, exact resume on 4, and resume on 2 and from 2. Its straight run
# of two iterations (checkpoints 1 and 2 and straight.json in <workdir>/four) is the one
# process that the two must equal.
FOUR_DEVICES = r"""
import dataclasses
import json
import os
import pathlib
import sys

import jax
import numpy as np
import optax
from jax.sharding import PartitionSpec

from azjax import export, parallel
from azjax.checkpoint import Checkpointer
from azjax.config import load_config
from azjax.replay import make_sampler
from azjax.loss import make_train_step
from azjax.train import train_and_evaluate
from azjax.trainer import make_trainer, restore, resume, starting_point, stopped_run

jax.config.update("jax_compilation_cache_dir", os.environ["AZJAX_JAX_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # as tests/conftest.py
devices = jax.devices()
workdir = pathlib.Path(sys.argv[1])
config = load_config(sys.argv[2], sys.argv[3:])

# Sizes the 4 devices cannot split evenly are refused, naming the key.
for key in config.split_sizes():
    section, field = key.split(".")
    odd = dataclasses.replace(getattr(config, section), **{field: 6})
    try:
        make_trainer(dataclasses.replace(config, **{section: odd}))
    except ValueError as err:
        assert f"{key}=6 must be a multiple of the number of devices (4)" in str(err), err
    else:
        raise AssertionError(f"{key}=6 on 4 devices was accepted")

def raw(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)

def leaves_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(raw(x), raw(y))

def positions(buffer):
    # The stored positions as a sorted list of (value, policy, state) rows.
    block = buffer.capacity // buffer.shards
    rows = []
    for s in range(buffer.shards):
        for i in range(int(buffer.size[s])):
            leaves = jax.tree.leaves(jax.tree.map(lambda x: x[s * block + i], buffer.stored))
            rows.append(tuple(np.asarray(x).tobytes() for x in leaves))
    return sorted(rows)

# A whole iteration on the 4-device mesh: games split over devices, parameters replicated.
trainer = make_trainer(config)
straight = trainer.init(jax.random.key(config.train.seed))
games = straight.carry.states.current_player
assert games.sharding.spec == PartitionSpec("data") and len(games.sharding.device_set) == 4
assert straight.params["params"]["Dense_0"]["kernel"].sharding.is_fully_replicated
straight, metrics = trainer.iterate(straight)
assert bool(metrics["train/trained"]), metrics
straight_metrics = [metrics]

# Two train steps on the same global batch with 1 and with 4 devices (SGD, so the parameter
# change is proportional to the all-reduced gradient).
optimizer = optax.sgd(1e-2, momentum=0.9, nesterov=True)
step = make_train_step(trainer.network, optimizer, config.optim)
sample = jax.jit(make_sampler(trainer.game, 32))  # one program, not one per operation
batch = jax.device_get(sample(straight.buffer, jax.random.key(1)))
params = jax.device_get(straight.params)

def two_steps(params, opt_state, batch):  # one program (a second call would trace again)
    params, opt_state, _ = step(params, opt_state, batch)
    return step(params, opt_state, batch)

results = []
for mesh in (parallel.make_mesh(devices[:1]), parallel.make_mesh(devices)):
    rep, data = parallel.replicated(mesh), parallel.data_sharded(mesh)
    jitted = jax.jit(two_steps, in_shardings=(rep, rep, data), out_shardings=rep)
    new_params, _, out = jitted(params, optimizer.init(params), batch)
    results.append((jax.device_get(new_params), jax.device_get(out["loss"])))
(one_device, loss1), (four_devices, loss4) = results
np.testing.assert_allclose(loss1, loss4, rtol=1e-5)
for a, b in zip(jax.tree.leaves(one_device), jax.tree.leaves(four_devices), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
pairs = zip(jax.tree.leaves(one_device), jax.tree.leaves(params), strict=True)
moved = max(float(np.abs(a - b).max()) for a, b in pairs)
assert moved > 1e-4, moved

# Iteration 1 saved the way the training loop saves it, for the exact resume below.
with Checkpointer(workdir / "four", 3) as checkpointer:
    checkpointer.save(1, straight.params, straight.replace(params=None), config)
(workdir / "four" / "metrics.jsonl").write_text("")

# The buffer is split over the 4 devices: each holds a quarter of the slots.
straight, metrics = trainer.iterate(straight)
straight_metrics.append(metrics)
value = straight.buffer.stored.value
assert value.sharding.spec == PartitionSpec("data"), value.sharding
assert {s.data.shape for s in value.addressable_shards} == {(value.shape[0] // 4,)}
assert straight.buffer.shards == 4 and min(straight.buffer.size.tolist()) > 0

# Exact resume on 4 devices: the training entry point resumes checkpoint 1 for the second
# iteration, saves it, and that checkpoint restores the straight run's state.
result = train_and_evaluate(config, workdir / "four", progress=False)
assert result["iteration"] == 2, result
with Checkpointer(workdir / "four", 3) as checkpointer:
    iteration, resumed = restore(trainer, checkpointer)
assert iteration == 2
leaves_equal(resumed, straight)
# The straight run (checkpoints 1 and 2 in "four") for tests/test_multihost.py: its metrics.
scalars = [{k: float(v) for k, v in m.items()} for m in straight_metrics]
(workdir / "four" / "straight.json").write_text(json.dumps(scalars))

# 4 -> 2 devices: the buffer is dealt out to 2 shards, nothing lost; training goes on.
two = make_trainer(config, parallel.make_mesh(devices[:2]))
with Checkpointer(workdir / "four", 3) as checkpointer:
    iteration, moved = restore(two, checkpointer)
assert moved.buffer.shards == 2 and positions(moved.buffer) == positions(straight.buffer)
assert {s.data.shape for s in moved.buffer.stored.value.addressable_shards} == {
    (value.shape[0] // 2,)
}
leaves_equal(moved.params, straight.params)
moved, metrics = two.iterate(moved)
assert bool(metrics["train/trained"]) and np.isfinite(float(metrics["train/loss"]))

# 2 -> 4 devices through the training entry point: a 2-device checkpoint resumes here (filed
# as iteration 1, so the run is the one above and reuses its compilation).
with Checkpointer(workdir / "two", 3) as checkpointer:
    checkpointer.save(1, moved.params, moved.replace(params=None), config)
(workdir / "two" / "metrics.jsonl").write_text("")
result = train_and_evaluate(config, workdir / "two", progress=False)
assert result["iteration"] == 2 and np.isfinite(result["train/loss"]), result

# A resumable model file of the 2-device checkpoint continues the run on 4 devices: every
# position dealt to the 4 shards, the step and key carried; the entry point trains on from it.
piece = workdir / "piece.azjax"
export.export_run(workdir / "two", piece, 1, continuation=stopped_run(workdir / "two", 1, 10**6))
carried = dataclasses.replace(config, train=dataclasses.replace(config.train, init_from=str(piece)))
start, continuation, _ = starting_point(carried)
continuing = make_trainer(carried)
iteration, went_on = resume(continuing, continuing.init(jax.random.key(9), start), continuation)
assert iteration == 1 and went_on.buffer.shards == 4
assert went_on.buffer.stored.value.sharding.spec == PartitionSpec("data")
assert positions(went_on.buffer) == positions(moved.buffer)
leaves_equal((went_on.step, went_on.key), (moved.step, moved.key))
result = train_and_evaluate(carried, workdir / "three", progress=False)
assert result["iteration"] == 2 and np.isfinite(result["train/loss"]), result
print("OK")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAX_", "SLURM_", "OMPI_", "TPU_", "AZJAX_DISTRIBUTED"))
    }
    cache = os.environ.get("AZJAX_JAX_CACHE", str(ROOT / ".jax_cache"))
    env.update(
        XLA_FLAGS=f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        AZJAX_JAX_CACHE=cache,
        **extra,
    )
    return env


def _ours(stdout: str) -> str:
    """Stdout without the collectives library's connection notices ("[Gloo] Rank 3 is connected
    to 3 peer ranks. ..."). Its threads write the pieces of a notice apart, so they interleave:
    a rank number can land on a line of its own (seen once: "3"). azjax prints no bare number."""
    lines = stdout.splitlines(True)
    return "".join(
        line
        for line in lines
        if not line.startswith("[Gloo]") and "peer ranks" not in line and not line.strip().isdigit()
    )


class Processes:
    """Child processes started together, each `python -c SCRIPT ARGS...` in the repository with
    its stdout and stderr in files under `tmp`; `wait(status)` checks they all exit with it."""

    def __init__(self, name: str, tmp: pathlib.Path, timeout: float = TIMEOUT) -> None:
        self.name, self.tmp, self.timeout, self.procs = name, tmp, timeout, []

    def start(self, script: str, args: list[str], env: dict[str, str]) -> None:
        """One more process; "{files}" in `args` stands for the prefix of its files."""
        base = self.tmp / f"{self.name}-{len(self.procs)}"
        argv = [a.replace("{files}", str(base)) for a in args]
        with open(f"{base}.out", "w") as out, open(f"{base}.err", "w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-c", script, *argv], cwd=ROOT, env=env, stdout=out, stderr=err
            )
        self.procs.append((proc, base))

    def wait(self, status: int = 0) -> list[dict]:
        """[{returncode, stdout, stderr, written}] of each process (written: the list CHILD
        leaves in {files}.written.json); fails naming every process's output unless all exit
        with `status` within `timeout` seconds."""
        deadline, exited = time.monotonic() + self.timeout, {}
        while len(exited) < len(self.procs) and time.monotonic() < deadline:
            for i, (proc, _) in enumerate(self.procs):
                if i not in exited and proc.poll() is not None:
                    exited[i] = time.time()
            time.sleep(0.05)
        failed = any(proc.poll() != status for proc, _ in self.procs)
        self.kill()
        results = []
        for proc, base in self.procs:
            written = pathlib.Path(f"{base}.written.json")
            results.append(
                {
                    "returncode": proc.returncode,
                    "stdout": _ours(pathlib.Path(f"{base}.out").read_text()),
                    "stderr": pathlib.Path(f"{base}.err").read_text(),
                    "written": json.loads(written.read_text()) if written.exists() else None,
                }
            )
        assert not failed, self.report(results)
        _warn_slow_exits(self.name, results, exited)
        return results

    def kill(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def report(self, results: list[dict]) -> str:
        parts = [f"{self.name} failed (timeout {self.timeout} s):"]
        for i, r in enumerate(results):
            parts.append(f"--- process {i}: exit {r['returncode']}\nstdout:\n{r['stdout'][-3000:]}")
            parts.append(f"stderr:\n{r['stderr'][-6000:]}")
        return "\n".join(parts)


def _warn_slow_exits(name: str, results: list[dict], exited: dict[int, float]) -> None:
    """Warn (in the CI log) when a process exited long after its `main` returned: a hang at
    interpreter exit (once seen: 150 s) that no failure would otherwise show."""
    for i, r in enumerate(results):
        returned = re.search(r"main returned at ([0-9.]+)", r["stderr"])
        if returned and exited[i] - float(returned.group(1)) > SLOW_EXIT:
            warnings.warn(
                f"{name}: process {i} exited {exited[i] - float(returned.group(1)):.0f} s after "
                f"its main returned; stderr tail:\n{r['stderr'][-8000:]}",
                stacklevel=2,
            )


def start_pair(phase: Processes, workdir: pathlib.Path, stop_1_at: int | None = None) -> None:
    """Two processes of one run; process 1 sends itself a SIGTERM saving iteration `stop_1_at`."""
    address = f"127.0.0.1:{_free_port()}"
    argv = ["--config", str(TICTACTOE), "--workdir", str(workdir), "--quiet", *OVERRIDES]
    for i in range(2):
        env = _env(2, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i))
        if i == 1 and stop_1_at is not None:
            env["STOP_AT_ITERATION"] = str(stop_1_at)
        phase.start(CHILD, ["{files}.written.json", *argv], env)


def in_workdir(paths: list[str], workdir: pathlib.Path) -> set[str]:
    """The paths under `workdir`, relative, with run-specific file names reduced to their kind."""
    root, out = workdir.resolve(), set()
    for p in map(pathlib.Path, paths):
        if p.is_relative_to(root):
            rel = p.relative_to(root)
            out.add("tensorboard/*" if rel.parts[0] == "tensorboard" else rel.as_posix())
    return out


CLUSTER_ENV = {
    "plain": ({}, None),
    "ssh": (
        {
            "JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234",
            "JAX_NUM_PROCESSES": "4",
            "JAX_PROCESS_ID": "3",
        },
        ("10.0.0.1:1234", 4, 3),
    ),
    "salloc shell": ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}, None),
    "srun, 1 task": ({"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n1", "SLURM_NTASKS": "1"}, None),
    "srun, 2 tasks": (
        {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NTASKS": "2"},
        (None, None, None),
    ),
    "mpirun -n 2": ({"OMPI_COMM_WORLD_SIZE": "2"}, (None, None, None)),
    "gke tpu slice": ({"TPU_WORKER_HOSTNAMES": "t0,t1"}, (None, None, None)),
    "tpu vm": ({"TPU_WORKER_HOSTNAMES": "t0"}, None),
    "forced": ({"AZJAX_DISTRIBUTED": "1"}, (None, None, None)),
    "skipped": ({"AZJAX_DISTRIBUTED": "0", "JAX_COORDINATOR_ADDRESS": "h:1"}, None),
}


@pytest.mark.parametrize("case", CLUSTER_ENV)
def test_initialize_distributed_reads_the_environment(case, monkeypatch):
    """Which environments join a cluster, and with what: JAX itself reads only
    JAX_COORDINATOR_ADDRESS, so the process count and id must be passed on."""
    env, expected = CLUSTER_ENV[case]
    for key in list(os.environ):
        if key.startswith(("JAX_", "SLURM_", "OMPI_", "TPU_", "AZJAX_DISTRIBUTED")):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    calls = []

    def initialize(coordinator_address=None, num_processes=None, process_id=None):
        calls.append((coordinator_address, num_processes, process_id))

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    assert parallel.initialize_distributed() == (expected is not None)
    assert calls == ([] if expected is None else [expected])


def test_initialize_distributed_names_a_bad_variable(monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "h:1")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
    monkeypatch.delenv("AZJAX_DISTRIBUTED", raising=False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: None)
    with pytest.raises(ValueError, match="JAX_NUM_PROCESSES='two' must be an integer"):
        parallel.initialize_distributed()


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """FOUR_DEVICES, started once for the module (beside the pairs of processes); calling this
    waits for its checks and gives the workdir of its straight run."""
    tmp = tmp_path_factory.mktemp("one_process")
    process = Processes("four_devices", tmp, timeout=900)
    process.start(FOUR_DEVICES, [str(tmp), str(TICTACTOE), *OVERRIDES], _env(4))

    def wait() -> pathlib.Path:
        (result,) = process.wait()
        assert "OK" in result["stdout"], process.report([result])
        return tmp / "four"

    yield wait
    process.kill()


@pytest.fixture
def phases(tmp_path):
    """`phases(name)` makes the Processes of a phase; those still running at the end are killed."""
    made = []

    def make(name: str) -> Processes:
        made.append(Processes(name, tmp_path))
        return made[-1]

    yield make
    for phase in made:
        phase.kill()


@pytest.mark.xdist_group("multihost")  # one FOUR_DEVICES run serves both tests
def test_two_processes_train_resume_and_match_one_process(tmp_path, phases, one_process):
    workdir = tmp_path / "pod"

    # Phase 1: two processes train iteration 1; a SIGTERM reaches process 1 alone as they save
    # it, and both stop once it is saved. Meanwhile one process with 4 devices trains both
    # iterations straight (the reference, `one_process`).
    first = phases("first")
    start_pair(first, workdir, stop_1_at=1)
    p0, p1 = first.wait(INTERRUPTED)
    assert "2 process(es)" in p0["stdout"] and "4 cpu device(s)" in p0["stdout"], p0["stdout"]
    assert "interrupted at iteration 1; checkpoint saved" in p0["stdout"], p0["stdout"]
    assert "process(es)" not in p1["stdout"], p1["stdout"]  # the banner: process 0 only
    assert list_steps(workdir) == [1]
    assert [r["iteration"] for r in read_metrics(workdir / "metrics.jsonl")] == [1]

    # Only process 0 writes the run's files: the lock, config.yaml, metrics.jsonl, TensorBoard.
    # Process 1 writes nothing in the workdir outside the checkpoint (its shards of the games
    # in flight and of the replay buffer go there).
    mine = {"azjax.lock", "config.yaml", "metrics.jsonl", "tensorboard/*"}
    assert mine <= in_workdir(p0["written"], workdir), p0["written"]
    others = {p for p in in_workdir(p1["written"], workdir) if not p.startswith("checkpoints/")}
    assert not others, p1["written"]
    assert any("process_1" in p for p in in_workdir(p1["written"], workdir)), p1["written"]
    assert not (workdir / "azjax.lock").exists()  # released at the end

    # Phase 2: a new pair resumes from checkpoint 1 and trains iteration 2.
    second = phases("second")
    start_pair(second, workdir)
    q0, q1 = second.wait()
    assert q0["stdout"].count(f"resuming from iteration 1 in {workdir}") == 1, q0["stdout"]
    assert "done: 1 iterations" in q0["stdout"] and "resumed at iteration 1" in q0["stdout"]
    assert q1["stdout"].strip() == "", q1["stdout"]  # the banner and summary: process 0 only
    others = {p for p in in_workdir(q1["written"], workdir) if not p.startswith("checkpoints/")}
    assert not others, q1["written"]
    assert mine <= in_workdir(q0["written"], workdir), q0["written"]
    assert list_steps(workdir) == [1, 2]
    records = read_metrics(workdir / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2], records  # no line twice
    assert [r["train/step"] for r in records] == [4, 8]  # iteration 2 continued the count
    assert len(list((workdir / "tensorboard").iterdir())) == 2  # one event file per phase
    assert (workdir / "config.yaml").read_text().count("iterations: 2") == 1

    # The same run as one process on 4 devices: the same losses and parameters.
    single = one_process()
    expected = json.loads((single / "straight.json").read_text())
    for got, want in zip(records, expected, strict=True):
        for key in ("train/loss", "train/policy_loss", "train/value_loss", "replay/size"):
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
    # Not bit-identical: the cross-process all-reduce may add in another order (~1e-7 apart).
    _, pod_params = load_for_inference(str(workdir))
    _, single_params = load_for_inference(str(single))
    _, pod_halfway = load_for_inference(str(workdir), step=1)
    _, halfway = load_for_inference(str(single), step=1)
    assert jax.tree.structure(pod_params) == jax.tree.structure(single_params)
    trees = (pod_params, single_params, pod_halfway, halfway)
    moved = 0.0
    for a, b, c, d in zip(*map(jax.tree.leaves, trees), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(c), np.asarray(d), rtol=1e-5, atol=1e-6)
        moved = max(moved, float(np.abs(np.asarray(b) - np.asarray(d)).max()))
    assert moved > 1e-3, moved  # iteration 2 changed the parameters far beyond the tolerance


@pytest.mark.xdist_group("multihost")
def test_four_devices_train_like_one_and_resume_on_any_device_count(one_process):
    one_process()  # FOUR_DEVICES's own checks


def test_a_busy_workdir_stops_every_process(tmp_path, phases):
    """Process 0 alone takes the workdir lock; when another run holds it, every process stops
    with the reason (none waits forever for process 0 at the first collective)."""
    workdir = tmp_path / "busy"
    workdir.mkdir()
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": "now"}  # alive
    (workdir / "azjax.lock").write_text(json.dumps(holder))
    busy = phases("busy")
    start_pair(busy, workdir)
    p0, p1 = busy.wait(1)
    assert f"is in use by another run (process {os.getpid()}" in p0["stderr"], p0["stderr"]
    assert f"process 0 could not lock workdir {workdir}" in p1["stderr"], p1["stderr"]
    assert json.loads((workdir / "azjax.lock").read_text()) == holder  # left alone
