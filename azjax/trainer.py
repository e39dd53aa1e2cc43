"""The trainer: the jitted pieces of one run (`make_trainer`) and its evaluation on the host.

One iteration is one jitted call, donating the whole training state:

    self-play chunk (latest parameters; the best ones under gating) -> replay buffer -> K
    gradient steps on uniform, symmetry-augmented batches (once the buffer holds
    `replay.min_size` positions)

The same code runs on every device count: the state is placed on a one-axis mesh (games,
batches and the replay buffer's shards split over devices, parameters replicated) and the
compiler adds the gradient all-reduce. A run resumes on another device count: its buffer is
dealt out to the new shards (`restore`). A run also continues on another machine from a model
file that carries its `continuation` (`stopped_run`, then `train.init_from`). `evaluate` and
`gate` play the arena's matches.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from azjax import agents, arena, export, model, parallel
from azjax.checkpoint import Checkpointer, list_steps, read_config, saved_shape
from azjax.config import Config, ConfigError
from azjax.loss import learning_rate_schedule, make_optimizer, make_train_step
from azjax.network import init_params, make_network
from azjax.reanalyse import make_reanalyse
from azjax.replay import (
    ReplayBuffer,
    make_sampler,
    replay_add,
    replay_examples,
    replay_init,
    replay_newest,
    replay_reshard,
    stores_states,
)
from azjax.runlog import merged_records
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


@dataclasses.dataclass(frozen=True)
class Trainer:
    """The compiled pieces of one run (built by `make_trainer`)."""

    game: Game
    network: Any
    config: Config
    mesh: Mesh
    init: Callable[[Array, Params | None], TrainState]  # jitted, placed on the mesh
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


class Start(NamedTuple):
    """Where a first start begins: `train.init_from`'s model, or random parameters (all None)."""

    params: Params | None = None  # float32 numpy arrays for `Trainer.init`
    continuation: dict[str, Any] | None = None  # its model file's continuation, for `resume`
    config: Config | None = None  # the config the model was trained with


def starting_point(config: Config) -> Start:
    """The `Start` of `train.init_from` (any model source, see azjax.model). ConfigError naming
    the value when the model cannot be read or was trained for another game or network shape.
    `make_trainer` reads no model: a fresh run calls this first, a resumed one never (its
    starting model may be gone)."""
    source = config.train.init_from
    if not source:
        return Start()
    try:
        loaded = model.load(source, config=config)
        file = model.model_file(source)
        continuation = None if file is None else export.read_continuation(file)
    except (ValueError, OSError) as err:
        raise ConfigError(f"train.init_from={source!r}: {err}") from None
    if continuation is not None and continuation["iteration"] >= config.train.iterations:
        raise ConfigError(
            f"train.init_from={source!r} continues a run stopped at iteration "
            f"{continuation['iteration']}: set train.iterations above it (now "
            f"{config.train.iterations})"
        )
    params = jax.tree.map(lambda x: np.asarray(x, np.float32), loaded.params)
    return Start(params, continuation, loaded.config)


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


def evaluate(
    trainer: Trainer,
    params: Params,
    key: Array,
    num_games: int,
    progress: Callable[[int], Any] | None = None,
) -> dict[str, float]:
    """Net + search (no exploration) against each `eval.opponents` agent, via the arena;
    `progress(n)` after each batch of `n` games (`arena.match`'s)."""
    config = trainer.config.eval
    search = trainer.config.playing_search()
    player = agents.search_agent(trainer.game, trainer.network, parallel.to_host(params), search)
    out: dict[str, float] = {}
    for i, (spec, opponent) in enumerate(zip(config.opponents, trainer.opponents, strict=True)):
        key_i = jax.random.fold_in(key, i)
        result = arena.match(
            trainer.game,
            player,
            opponent,
            num_games,
            key_i,
            opening_moves=config.opening_moves,
            progress=progress,
        )
        name = spec.replace(":", "_").replace("/", "_")
        out[f"eval/{name}/score"] = float(result.score)
        out[f"eval/{name}/win_rate"] = result.wins / result.games
        out[f"eval/{name}/wins"] = int(result.wins)
        out[f"eval/{name}/draws"] = int(result.draws)
        out[f"eval/{name}/losses"] = int(result.losses)
    return out


def restore(
    trainer: Trainer, checkpointer: Checkpointer, step: int | None = None
) -> tuple[int, TrainState]:
    """(iteration, state) of checkpoint `step` (the newest when None), placed on the trainer's
    mesh. A checkpoint written on another number of devices has its replay buffer dealt out to
    this mesh's shards (`replay_reshard`); everything else has the same shape on every device
    count."""
    abstract = trainer.abstract.replace(params=None)
    step = checkpointer.latest_step() if step is None else step
    saved = saved_shape(checkpointer.workdir, step, "['state'].buffer.size")  # one per shard
    moved = saved is not None and saved != abstract.buffer.size.shape
    if moved:  # restore the buffer as saved, then deal it out
        rows = jax.ShapeDtypeStruct(saved, jnp.int32, sharding=trainer.shardings.key)
        abstract = abstract.replace(buffer=abstract.buffer.replace(position=rows, size=rows))
    iteration, params, state = checkpointer.restore(
        trainer.config, trainer.abstract.params, abstract, step
    )
    if moved:
        reshard = jax.jit(
            functools.partial(replay_reshard, shards=trainer.mesh.devices.size),
            out_shardings=trainer.shardings.buffer,
        )
        state = state.replace(buffer=reshard(state.buffer))
    return iteration, state.replace(params=params)


# ----------------------------------------------------------------------------- continuation


def continuation(state: TrainState, iteration: int, positions: int) -> dict[str, Any]:
    """Where a run stopped, small enough to carry to another machine in a model file: the
    iteration, the gradient steps, the PRNG key, the optimizer's state (Adam's moments, in
    bfloat16, and the learning-rate schedule's position) and the newest `positions` of the
    replay buffer, as host numpy arrays. The games in flight are not kept: the next machine
    starts new ones (and, under arena gating, its best parameters are the carried ones)."""
    return {
        "iteration": iteration,
        "step": int(parallel.to_host(state.step)),
        "key": np.asarray(parallel.to_host(jax.random.key_data(state.key))),
        "opt_state": [_compact(x) for x in jax.tree.leaves(parallel.to_host(state.opt_state))],
        "replay": jax.tree.leaves(replay_newest(state.buffer, positions)),
    }


def _compact(x: np.ndarray) -> np.ndarray:
    """Floating-point optimizer state in bfloat16: half the bytes, and even fresh moments cost
    a continued run nothing measurable (docs/learning.md#a-run-in-pieces)."""
    x = np.asarray(x)
    return x.astype(jnp.bfloat16) if np.issubdtype(x.dtype, np.floating) else x


def stopped_run(workdir: str | pathlib.Path, step: int | None, positions: int) -> dict[str, Any]:
    """The `continuation` of checkpoint `step` (the newest when None) of the run in `workdir`,
    with its metrics records up to that iteration (JSON text under "records")."""
    config = read_config(workdir, step)  # without opponents: a continuation plays none
    config = dataclasses.replace(config, eval=dataclasses.replace(config.eval, opponents=()))
    trainer = make_trainer(config)
    with Checkpointer(workdir, config.checkpoint.keep, owner=False) as checkpointer:
        iteration, state = restore(trainer, checkpointer, step)
        saved = [r for s in list_steps(workdir) if s <= iteration for r in checkpointer.records(s)]
    records = merged_records(pathlib.Path(workdir) / "metrics.jsonl", iteration, saved)
    kept = [r for r in records if not r.get("final")]
    return {**continuation(state, iteration, positions), "records": json.dumps(kept)}


def resume(trainer: Trainer, state: TrainState, carried: dict[str, Any]) -> tuple[int, TrainState]:
    """(iteration, state): `state` (from `init`, with the carried run's parameters) continuing
    the run of `carried` (a `continuation`): its iteration, gradient steps, key, optimizer state
    and replay positions. ConfigError when the config's optimizer or positions differ from the
    carried run's."""
    abstract, shardings = trainer.abstract, trainer.shardings
    source = trainer.config.train.init_from

    def rebuild(name: str, leaves: list, like: Any, rows: int) -> Any:
        want = jax.tree.leaves(like)
        have = [tuple(np.shape(x))[rows:] for x in leaves]
        if have != [tuple(x.shape)[rows:] for x in want]:
            raise ConfigError(
                f"train.init_from={source!r}: its run's {name} does not fit this config's "
                "(continue it with the config it was trained with)"
            )
        arrays = [np.asarray(x, w.dtype) for x, w in zip(leaves, want, strict=True)]
        return jax.tree.unflatten(jax.tree.structure(like), arrays)

    opt_state = rebuild("optimizer state", carried["opt_state"], abstract.opt_state, rows=0)
    positions = rebuild("replay positions", carried["replay"], abstract.buffer.stored, rows=1)
    examples = replay_examples(positions, state.buffer.shards)
    fill = jax.jit(replay_add, out_shardings=shardings.buffer, donate_argnums=0)
    key = jax.random.wrap_key_data(np.asarray(carried["key"], np.uint32))
    state = state.replace(
        opt_state=jax.device_put(opt_state, shardings.opt_state),
        buffer=fill(state.buffer, examples),
        key=jax.device_put(key, shardings.key),
        step=jax.device_put(jnp.int32(carried["step"]), shardings.step),
    )
    return int(carried["iteration"]), state
