"""The training loop: `train_and_evaluate(config, workdir)`.

One iteration is one jitted call, donating the whole training state:

    self-play chunk (latest parameters) -> replay buffer -> K gradient steps on uniform,
    symmetry-augmented batches (once the buffer holds `replay.min_size` positions)

followed on the host by the periodic evaluation (the arena's `match` against baseline agents)
and the periodic checkpoint. Metrics leave the device once per iteration. The same code runs
on every device count: the state is placed on a one-axis mesh (games, batches and the replay
buffer's shards split over devices, parameters replicated) and the compiler adds the gradient
all-reduce. A run resumes on another device count: its buffer is dealt out to the new shards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import pathlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh
from tqdm.auto import tqdm

from azjax import agents, arena, health, model, parallel
from azjax.checkpoint import (
    Checkpointer,
    CheckpointError,
    WorkdirError,
    WorkdirLock,
    read_config,
    saved_shape,
)
from azjax.config import Config, ConfigError, OptimConfig, dump_config
from azjax.metrics import read_metrics
from azjax.network import init_params, make_network
from azjax.reanalyse import make_reanalyse
from azjax.replay import (
    Batch,
    ReplayBuffer,
    make_sampler,
    replay_add,
    replay_init,
    replay_reshard,
    stores_states,
)
from azjax.search import network_evaluator
from azjax.selfplay import make_selfplay
from games.core import Game

Array = jax.Array
Params = Any


@struct.dataclass
class TrainState:
    """Everything a run needs to continue exactly where it stopped."""

    params: Params
    opt_state: Any
    buffer: ReplayBuffer
    carry: Any  # self-play games in flight
    key: Array  # typed PRNG key of the next iteration
    step: Array  # int32, gradient steps taken
    best: Params = None  # under arena gating (`gate.every`), the parameters self-play uses


# ----------------------------------------------------------------------------- optimization


def make_optimizer(config: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    """Adam (optax's AdamW without weight decay: `l2` regularises); linear warm-up then cosine
    decay over `total_steps`."""
    optimizer = optax.adamw(learning_rate_schedule(config, total_steps), weight_decay=0.0)
    if config.max_grad_norm > 0:
        optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optimizer)
    return optimizer


def learning_rate_schedule(config: OptimConfig, total_steps: int) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.learning_rate,
        warmup_steps=config.warmup_steps,
        decay_steps=max(total_steps, config.warmup_steps + 1),
        end_value=config.learning_rate * config.final_lr_fraction,
    )


def l2_penalty(params: Params) -> Array:
    """Half the sum of squares of the weight matrices and kernels (biases and norms excluded)."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    kernels = [x for path, x in leaves if getattr(path[-1], "key", None) == "kernel"]
    return 0.5 * sum(jnp.sum(jnp.square(x)) for x in kernels)


def loss_fn(
    network: Any, params: Params, batch: Batch, config: OptimConfig
) -> tuple[Array, dict[str, Array]]:
    """Policy cross-entropy (only where a full search gave the target) + value MSE + L2."""
    logits, value = network.apply(params, batch.observation)
    log_probs = jax.nn.log_softmax(logits)
    cross_entropy = -jnp.sum(batch.policy * log_probs, axis=-1)
    mask = batch.policy_mask.astype(jnp.float32)
    policy_loss = jnp.sum(cross_entropy * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    target_entropy = -jnp.sum(
        batch.policy * jnp.log(jnp.where(batch.policy > 0, batch.policy, 1)), -1
    )
    entropy = jnp.sum(target_entropy * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    value_loss = jnp.mean(jnp.square(value - batch.value))
    target_var = jnp.var(batch.value)
    l2 = l2_penalty(params)
    loss = policy_loss + config.value_weight * value_loss + config.l2 * l2
    metrics = {
        "loss": loss,
        "policy_loss": policy_loss,
        "policy_kl": policy_loss - entropy,
        "value_loss": value_loss,
        "l2": l2,
        # run health (azjax.health): how much the outputs vary over the batch's positions
        "value_std": jnp.std(value),
        "policy_std": jnp.mean(jnp.std(logits, axis=0)),
        "value_target_var": target_var,
        "value_explained": 1.0 - value_loss / jnp.maximum(target_var, 1e-6),
    }
    return loss, metrics


def make_train_step(network: Any, optimizer: optax.GradientTransformation, config: OptimConfig):
    """`step(params, opt_state, batch) -> (params, opt_state, metrics)`, pure."""

    def step(params: Params, opt_state: Any, batch: Batch):
        grads, metrics = jax.grad(lambda p: loss_fn(network, p, batch, config), has_aux=True)(
            params
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
        return params, opt_state, metrics

    return step


# ----------------------------------------------------------------------------- the run


@dataclasses.dataclass(frozen=True)
class Trainer:
    """The compiled pieces of one run (built by `make_trainer`)."""

    game: Game
    network: Any
    config: Config
    mesh: Mesh
    init: Callable[[Array, Params | None], TrainState]  # jitted, placed on the mesh
    start: Params | None  # `train.init_from`'s parameters, for `init`
    iterate: Callable[[TrainState], tuple[TrainState, dict]]  # jitted, donates the state
    shardings: TrainState
    abstract: TrainState
    schedule: optax.Schedule
    opponents: tuple[agents.Agent, ...]  # of `eval.opponents`


def make_opponents(config: Config) -> tuple[agents.Agent, ...]:
    """The `eval.opponents` agents; ConfigError naming a spec that cannot be built (say, a
    `search:WORKDIR` without checkpoints)."""
    game, out = config.game.make(), []
    for i, spec in enumerate(config.eval.opponents):
        try:
            out.append(agents.make(spec, game))
        except ValueError as err:
            raise ConfigError(f"eval.opponents[{i}]={spec!r}: {err}") from None
    return tuple(out)


def initial_params(config: Config) -> Params | None:
    """The parameters of `train.init_from` (any model source, see azjax.model), float32 numpy
    arrays; None when it is unset. ConfigError naming the value when the model cannot be read
    or was trained for another game or another network shape."""
    source = config.train.init_from
    if not source:
        return None
    try:
        params = model.load(source, config=config).params
    except (ValueError, OSError) as err:
        raise ConfigError(f"train.init_from={source!r}: {err}") from None
    return jax.tree.map(lambda x: np.asarray(x, np.float32), params)


def make_trainer(config: Config, mesh: Mesh | None = None) -> Trainer:
    """Build the jitted init and iteration functions of `config` on `mesh` (all devices),
    after the evaluation opponents, so that a bad opponent stops the run before any compiling."""
    opponents = make_opponents(config)
    mesh = parallel.make_mesh() if mesh is None else mesh
    for key, size in config.split_sizes().items():
        parallel.check_divisible(size, key, mesh)
    devices = mesh.devices.size
    game = config.game.make()
    network = make_network(game, config.network)
    start = initial_params(config)
    evaluate = network_evaluator(network)
    reanalysed = round(config.train.reanalyse_fraction * config.train.batch_size)
    as_states = reanalysed > 0 or stores_states(game)  # positions kept as States
    selfplay_init, selfplay_chunk = make_selfplay(
        game, evaluate, config.search, config.selfplay, as_states, groups=devices
    )
    total_steps = config.train.iterations * config.train.steps_per_iteration
    optimizer = make_optimizer(config.optim, total_steps)
    train_step = make_train_step(network, optimizer, config.optim)
    sample = make_sampler(game, config.train.batch_size)
    reanalyse = make_reanalyse(game, evaluate, config.search, reanalysed)
    replicated, data = parallel.replicated(mesh), parallel.data_sharded(mesh)

    def init(key: Array, first: Params | None = None) -> TrainState:
        params_key, play_key, key = jax.random.split(key, 3)
        params = init_params(network, game, params_key) if first is None else first
        return TrainState(
            params=params,
            opt_state=optimizer.init(params),
            buffer=replay_init(game, config.replay.capacity, devices, as_states),
            carry=selfplay_init(play_key),
            key=key,
            step=jnp.int32(0),
            best=jax.tree.map(jnp.copy, params) if config.gate.every else None,
        )

    def iterate(state: TrainState) -> tuple[TrainState, dict]:
        key, play_key, train_key = jax.random.split(state.key, 3)
        player = state.params if state.best is None else state.best
        carry, examples, play_metrics = selfplay_chunk(player, state.carry, play_key)
        buffer = replay_add(state.buffer, examples)

        def train(params: Params, opt_state: Any):
            def one(carry, key):
                refresh = None
                if reanalysed:  # reanalyse with the latest parameters
                    key, search_key = jax.random.split(key)
                    refresh = functools.partial(reanalyse, carry[0], key=search_key)
                batch = jax.lax.with_sharding_constraint(sample(buffer, key, refresh), data)
                params, opt_state, metrics = train_step(*carry, batch)
                return (params, opt_state), metrics

            keys = jax.random.split(train_key, config.train.steps_per_iteration)
            (params, opt_state), metrics = jax.lax.scan(one, (params, opt_state), keys)
            return params, opt_state, jax.tree.map(jnp.mean, metrics)

        metrics_shape = jax.eval_shape(train, state.params, state.opt_state)[2]

        def skip(params: Params, opt_state: Any):  # until the buffer holds replay.min_size
            return params, opt_state, jax.tree.map(jnp.zeros_like, metrics_shape)

        ready = (buffer.size.sum() >= config.replay.min_size) & (buffer.size.min() > 0)
        params, opt_state, train_metrics = jax.lax.cond(
            ready, train, skip, state.params, state.opt_state
        )
        step = state.step + jnp.where(ready, config.train.steps_per_iteration, 0)
        metrics = {
            **{f"train/{k}": v for k, v in train_metrics.items()},
            **{f"selfplay/{k}": v for k, v in play_metrics.items()},
            "train/trained": ready,
            "train/step": step,
            "replay/size": buffer.size.sum(),
            "replay/added": jnp.sum(examples.valid, dtype=jnp.int32),
        }
        new = TrainState(params, opt_state, buffer, carry, key, step, state.best)
        return new, metrics

    abstract = jax.eval_shape(init, jax.random.key(0))
    shardings = TrainState(
        params=jax.tree.map(lambda _: replicated, abstract.params),
        opt_state=jax.tree.map(lambda _: replicated, abstract.opt_state),
        buffer=ReplayBuffer(  # each device keeps its own shard of the positions
            stored=jax.tree.map(lambda _: data, abstract.buffer.stored),
            position=replicated,
            size=replicated,
        ),
        carry=parallel.batch_shardings(abstract.carry, config.selfplay.batch_size, mesh),
        key=replicated,
        step=replicated,
        best=jax.tree.map(lambda _: replicated, abstract.best),
    )
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
    )
    return Trainer(
        game=game,
        network=network,
        config=config,
        mesh=mesh,
        init=jax.jit(init, out_shardings=shardings),
        start=start,
        iterate=jax.jit(
            iterate,
            in_shardings=(shardings,),
            out_shardings=(shardings, replicated),
            donate_argnums=0,
        ),
        shardings=shardings,
        abstract=abstract,
        schedule=learning_rate_schedule(config.optim, total_steps),
        opponents=opponents,
    )


# ----------------------------------------------------------------------------- evaluation


def gate(trainer: Trainer, state: TrainState, key: Array) -> tuple[TrainState, dict[str, Any]]:
    """Arena gating: the latest parameters (the candidate) against the best, both with search;
    the candidate becomes the best (self-play's parameters) when it scores >= `gate.threshold`."""
    config, game, network = trainer.config.gate, trainer.game, trainer.network
    search = trainer.config.playing_search()
    candidate = agents.search_agent(game, network, parallel.to_host(state.params), search)
    best = agents.search_agent(game, network, parallel.to_host(state.best), search)
    result = arena.match(
        game, candidate, best, config.games, key, opening_moves=config.opening_moves
    )
    promoted = arena.gate(result, config.threshold)
    if promoted:
        state = state.replace(best=jax.tree.map(jnp.copy, state.params))
    return state, {"gate/score": float(result.score), "gate/promoted": int(promoted)}


def evaluate(trainer: Trainer, params: Params, key: Array, num_games: int) -> dict[str, float]:
    """Net + search (no exploration) against each `eval.opponents` agent, via the arena."""
    config = trainer.config.eval
    search = trainer.config.playing_search()
    player = agents.search_agent(trainer.game, trainer.network, parallel.to_host(params), search)
    out: dict[str, float] = {}
    for i, (spec, opponent) in enumerate(zip(config.opponents, trainer.opponents, strict=True)):
        key_i = jax.random.fold_in(key, i)
        result = arena.match(
            trainer.game, player, opponent, num_games, key_i, opening_moves=config.opening_moves
        )
        name = spec.replace(":", "_").replace("/", "_")
        out[f"eval/{name}/score"] = float(result.score)
        out[f"eval/{name}/win_rate"] = result.wins / result.games
        out[f"eval/{name}/wins"] = int(result.wins)
        out[f"eval/{name}/draws"] = int(result.draws)
        out[f"eval/{name}/losses"] = int(result.losses)
    return out


# ----------------------------------------------------------------------------- logging


class _Log:
    """metrics.jsonl plus TensorBoard event files; only process 0 writes."""

    def __init__(
        self, workdir: pathlib.Path, resume_iteration: int, saved: Sequence[dict] = ()
    ) -> None:
        """Resumes the log at `resume_iteration`: newer records are dropped, and the records
        `saved` with its checkpoint fill in any that metrics.jsonl lost."""
        self.enabled = jax.process_index() == 0
        self.path = workdir / "metrics.jsonl"
        self.writer = None
        self.minutes_before = 0.0  # wall-clock minutes of the run before this resume
        if not self.enabled:
            return
        if self.path.exists() or saved:
            logged = read_metrics(self.path) if self.path.exists() else []
            kept = [r for r in logged if r.get("iteration", 0) <= resume_iteration]
            have = {r.get("iteration") for r in kept if not r.get("final")}
            kept += [r for r in saved if r["iteration"] not in have]
            kept.sort(key=lambda r: (r.get("iteration", 0), bool(r.get("final"))))
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
            self.minutes_before = max((r.get("elapsed_minutes", 0.0) for r in kept), default=0.0)
        from tensorboardX import SummaryWriter  # only process 0 writes events; slow to import

        self.writer = SummaryWriter(str(workdir / "tensorboard"), purge_step=resume_iteration + 1)

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        for key, value in record.items():
            if key != "iteration" and isinstance(value, int | float):
                self.writer.add_scalar(key, value, record["iteration"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _scalars(metrics: dict) -> dict[str, float]:
    host = parallel.to_host(metrics)
    return {k: (v.item() if np.ndim(v) == 0 else v.tolist()) for k, v in host.items()}


def _postfix(record: dict) -> dict[str, str]:
    out = {}
    if record.get("train/trained"):
        out["loss"] = f"{record['train/loss']:.3f}"
        out["v_std"] = f"{record['train/value_std']:.2f}"
    if "health/ok" in record:
        out["health"] = "ok" if record["health/ok"] else "BAD"
    out["pos/s"] = f"{record['positions_per_second']:.0f}"
    for key, value in record.items():
        if key.startswith("eval/") and key.endswith("/win_rate"):
            out[key.split("/")[1]] = f"{value:.0%}"
    return out


# ----------------------------------------------------------------------------- entry point


class TrainingError(RuntimeError):
    """A run that cannot go on (its loss or parameters stopped being finite)."""


def train_and_evaluate(
    config: Config, workdir: str | pathlib.Path, progress: bool = True
) -> dict[str, Any]:
    """Train `config` in `workdir`, resuming from its newest checkpoint; return final metrics.

    A finished run (train.iterations reached, final evaluation logged) is left as it is.
    Raises WorkdirError when the workdir is not a writable directory or another run holds it,
    CheckpointError when it holds a damaged checkpoint or one of another run, ConfigError for
    an `eval.opponents` agent that cannot be built, TrainingError when training diverges.
    """
    with (
        WorkdirLock(workdir) as lock,
        Checkpointer(lock.workdir, config.checkpoint.keep) as checkpointer,
    ):
        iteration = checkpointer.latest_step()
        if iteration is not None and iteration >= config.train.iterations:
            checkpointer.check(config, iteration)  # another run's checkpoint is refused
            if _finished(lock.workdir, config, iteration):
                if jax.process_index() == 0:
                    print(
                        f"the run in {lock.workdir} is finished (iteration {iteration} of "
                        f"train.iterations={config.train.iterations}); raise train.iterations "
                        "to train further",
                        flush=True,
                    )
                return {"iteration": iteration, "finished": True}
        return _train(config, lock.workdir, checkpointer, progress)


def restore(trainer: Trainer, checkpointer: Checkpointer) -> tuple[int, TrainState]:
    """(iteration, state) of the newest checkpoint, placed on the trainer's mesh. A checkpoint
    written on another number of devices has its replay buffer dealt out to this mesh's
    shards (`replay_reshard`); everything else has the same shape on every device count."""
    abstract = trainer.abstract.replace(params=None)
    saved = saved_shape(
        checkpointer.workdir, checkpointer.latest_step(), "['state'].buffer.size"
    )  # (shards,): one size per shard
    moved = saved is not None and saved != abstract.buffer.size.shape
    if moved:  # restore the buffer as saved, then deal it out
        rows = jax.ShapeDtypeStruct(saved, jnp.int32, sharding=trainer.shardings.key)
        abstract = abstract.replace(buffer=abstract.buffer.replace(position=rows, size=rows))
    iteration, params, state = checkpointer.restore(
        trainer.config, trainer.abstract.params, abstract
    )
    if moved:
        reshard = jax.jit(
            functools.partial(replay_reshard, shards=trainer.mesh.devices.size),
            out_shardings=trainer.shardings.buffer,
        )
        state = state.replace(buffer=reshard(state.buffer))
    return iteration, state.replace(params=params)


def _finished(workdir: pathlib.Path, config: Config, iteration: int) -> bool:
    """Whether the final evaluation of `iteration`, if any, is logged."""
    if not config.eval.final_num_games:
        return True
    path = workdir / "metrics.jsonl"
    records = read_metrics(path) if path.exists() else []
    return any(r.get("final") and r.get("iteration") == iteration for r in records)


def _first_init_from(config: Config, checkpointer: Checkpointer) -> Config:
    """`config` with the `train.init_from` its run started from: a resumed run continues from
    its checkpoint, so another `train.init_from` is ignored, with a warning."""
    first = read_config(checkpointer.workdir, checkpointer.latest_step()).train.init_from
    if first == config.train.init_from:
        return config
    if jax.process_index() == 0:
        print(
            f"warning: train.init_from={config.train.init_from!r} is ignored: the run in "
            f"{checkpointer.workdir} resumes from its checkpoint, and keeps "
            f"train.init_from={first!r}",
            file=sys.stderr,
            flush=True,
        )
    return dataclasses.replace(config, train=dataclasses.replace(config.train, init_from=first))


def _train(
    config: Config, workdir: pathlib.Path, checkpointer: Checkpointer, progress: bool
) -> dict[str, Any]:
    if checkpointer.latest_step() is not None:
        config = _first_init_from(config, checkpointer)
    trainer = make_trainer(config)
    iteration, saved = 0, []
    if checkpointer.latest_step() is not None:
        iteration, state = restore(trainer, checkpointer)
        saved = checkpointer.records(iteration)
        if jax.process_index() == 0:
            print(f"resuming from iteration {iteration} in {workdir}", flush=True)
    else:
        state = trainer.init(jax.random.key(config.train.seed), trainer.start)
    if jax.process_index() == 0:
        (workdir / "config.yaml").write_text(dump_config(config))
    log = _Log(workdir, iteration, saved)
    start_iteration, pending = iteration, []  # pending: records since the last checkpoint
    eval_key = jax.random.key(config.train.seed + 1)
    gate_key = jax.random.fold_in(eval_key, 2**31 - 1)  # iterations never reach it
    total, moves = config.train.iterations, config.selfplay.chunk_moves
    record: dict[str, Any] = {}
    bar = tqdm(
        total=total,
        initial=iteration,
        desc=f"{trainer.game.name}",
        unit="it",
        disable=not progress or jax.process_index() != 0,
        dynamic_ncols=True,
    )
    stop = _StopRequest()
    monitor, problems = health.Monitor(), []
    run_start = time.perf_counter()

    def elapsed_minutes() -> float:  # the whole run's wall clock, across resumes
        return log.minutes_before + (time.perf_counter() - run_start) / 60

    stopping = False  # agreed by every process, once per iteration
    try:
        while iteration < total and not stopping:
            start = time.perf_counter()
            state, metrics = trainer.iterate(state)
            record = {"iteration": iteration + 1, **_scalars(metrics)}  # waits for the device
            if not record["train/trained"]:  # the buffer is still filling: no losses to log
                kept = ("train/trained", "train/step")
                record = {
                    k: v for k, v in record.items() if k in kept or not k.startswith("train/")
                }
            iteration += 1
            elapsed = time.perf_counter() - start
            record["seconds"] = elapsed
            record["positions_per_second"] = record["replay/added"] / elapsed  # into the buffer
            record["moves_per_second"] = config.selfplay.batch_size * moves / elapsed
            record["train/learning_rate"] = float(trainer.schedule(record["train/step"]))
            if record["train/trained"]:
                _check_finite(iteration, record, state.params, checkpointer.latest_step())
            if config.eval.every and iteration % config.eval.every == 0 and iteration < total:
                record.update(
                    evaluate(
                        trainer,
                        state.params,
                        jax.random.fold_in(eval_key, iteration),
                        config.eval.num_games,
                    )
                )
                bar.write(_eval_line(iteration, record))
            if config.gate.every and iteration % config.gate.every == 0:
                state, gated = gate(trainer, state, jax.random.fold_in(gate_key, iteration))
                record.update(gated)
                verdict = "becomes the best" if gated["gate/promoted"] else "is not better"
                bar.write(
                    f"iteration {iteration}: gate: the latest scored {gated['gate/score']:.2f} "
                    f"against the best and {verdict}"
                )
            record["elapsed_minutes"] = elapsed_minutes()
            found = monitor.update(record)
            if found != problems and record.get("train/trained"):
                problems = found
                bar.write(f"iteration {iteration}: " + ("; ".join(found) or "run health ok again"))
            log.write(record)
            pending.append(record)
            # Every process decides alike (a signal may reach one host only): save when due or
            # asked to stop, and stop when asked before or while saving.
            due = iteration % config.checkpoint.every == 0 or iteration == total
            for _ in range(2):
                stopping = parallel.any_process(stop.requested)
                if pending and (due or stopping):
                    with stop.saving():
                        checkpointer.save(
                            iteration, state.params, state.replace(params=None), config, pending
                        )
                    pending = []
                if stopping or not due:
                    break
            bar.set_postfix(_postfix(record), refresh=False)
            bar.update(1)
    except BaseException:
        log.close()
        raise
    finally:
        stop.restore()
        bar.close()
    stopping = stopping or parallel.any_process(stop.requested)  # asked during the last one
    final: dict[str, Any] = {"iteration": iteration}
    if stopping:
        print(
            f"interrupted at iteration {iteration}; checkpoint saved; rerun the same command to "
            "resume",
            flush=True,
        )
        log.close()
        return {
            **record,
            **final,
            **_session(start_iteration, elapsed_minutes()),
            "interrupted": True,
        }
    try:
        if config.eval.final_num_games:
            key = jax.random.fold_in(eval_key, 0)
            final.update(evaluate(trainer, state.params, key, config.eval.final_num_games))
            final["final"] = True
            final["elapsed_minutes"] = elapsed_minutes()
            log.write(final)
    finally:
        log.close()
    return {**record, **final, **_session(start_iteration, elapsed_minutes())}


def _session(start_iteration: int, minutes: float) -> dict[str, Any]:
    """Where this session started and the run's wall clock so far (for the closing summary)."""
    return {"start_iteration": start_iteration, "elapsed_minutes": minutes}


@jax.jit
def _all_finite(tree: Any) -> Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def _check_finite(iteration: int, record: dict, params: Params, checkpoint: int | None) -> None:
    """TrainingError when the loss or the parameters stopped being finite (nothing saved)."""
    if math.isfinite(record["train/loss"]) and parallel.to_host(_all_finite(params)):
        return
    kept = f"checkpoint {checkpoint} is kept" if checkpoint else "no checkpoint was saved"
    raise TrainingError(
        f"training diverged at iteration {iteration} (loss {record['train/loss']}): stopped "
        f"without saving it, {kept}. Lower optim.learning_rate "
        f"(now {record['train/learning_rate']:g}) or raise optim.warmup_steps, and run again"
    )


class _StopRequest:
    """Ctrl-C / SIGTERM ask the loop to finish its iteration, checkpoint and stop.

    A second signal interrupts at once (the default behaviour), except while a checkpoint is
    being written: the save finishes first, then the run stops."""

    def __init__(self) -> None:
        self.requested = False
        self._saving = self._told = False
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    @contextlib.contextmanager
    def saving(self):
        """Signals while inside only ask to stop once the checkpoint is written."""
        self._saving, self._told = True, False
        try:
            yield
        finally:
            self._saving = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self._saving:
            self.requested = True
            if not self._told:
                print("\nwriting a checkpoint: stopping once it is saved", flush=True)
            self._told = True
            return
        if self.requested:
            self.restore()
            signal.raise_signal(signum)
            return
        self.requested = True
        print("\nstopping after this iteration (signal again to stop now)", flush=True)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def _eval_line(iteration: int, record: dict) -> str:
    parts = []
    for key, value in record.items():
        if key.startswith("eval/") and key.endswith("/win_rate"):
            name = key.split("/")[1]
            wins, draws, losses = (record[f"eval/{name}/{k}"] for k in ("wins", "draws", "losses"))
            parts.append(f"vs {name}: {value:.0%} won ({wins}W {draws}D {losses}L)")
    return f"iteration {iteration}: " + ", ".join(parts)


__all__ = [
    "CheckpointError",
    "TrainState",
    "Trainer",
    "TrainingError",
    "WorkdirError",
    "evaluate",
    "learning_rate_schedule",
    "loss_fn",
    "make_opponents",
    "make_optimizer",
    "make_train_step",
    "make_trainer",
    "train_and_evaluate",
]
