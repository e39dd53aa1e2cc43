"""The trainer: the jitted pieces of one run (`make_trainer`).

One iteration is one jitted call, donating the whole training state: a self-play chunk (latest
parameters; the best ones under gating) -> replay buffer -> K gradient steps on uniform,
symmetry-augmented batches (once the buffer holds `replay.min_size` positions). The same code
runs on every device count: the state lies on a one-axis mesh (games, batches and the replay
buffer's shards split over devices, parameters replicated) and the compiler adds the gradient
all-reduce. The host loop, evaluation and gating are azjax.train's; resuming, azjax.resume's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from azjax import parallel
from azjax.config import Config
from azjax.loss import learning_rate_schedule, make_optimizer, make_train_step
from azjax.network import init_params, make_network
from azjax.replay import ReplayBuffer, make_sampler, replay_add, replay_init, stores_states
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
    key: Array  # uint32 data of the next iteration's PRNG key (`jax.random.key_data`)
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


def make_trainer(config: Config, mesh: Mesh | None = None) -> Trainer:
    """The jitted init and iteration functions of `config` on `mesh` (default: all devices)."""
    mesh = parallel.make_mesh() if mesh is None else mesh
    for key, size in config.split_sizes().items():
        parallel.check_divisible(size, key, mesh)
    devices = mesh.devices.size
    game = config.game.make()
    network = make_network(game, config.network)
    evaluate = network_evaluator(network)
    as_states = stores_states(game)  # positions kept as States where those are smaller
    selfplay_init, selfplay_chunk = make_selfplay(
        game, evaluate, config.search, config.selfplay, as_states, groups=devices
    )
    total_steps = config.train.iterations * config.train.steps_per_iteration
    optimizer = make_optimizer(config.optim, total_steps)
    train_step = make_train_step(network, optimizer, config.optim)
    sample = make_sampler(game, config.train.batch_size)
    replicated, data = parallel.replicated(mesh), parallel.data_sharded(mesh)

    def init(key: Array, first: Params | None = None) -> TrainState:
        params_key, play_key, key = jax.random.split(key, 3)
        params = init_params(network, game, params_key) if first is None else first
        return TrainState(
            params=params,
            opt_state=optimizer.init(params),
            buffer=replay_init(game, config.replay.capacity, devices, as_states),
            carry=selfplay_init(play_key),
            key=jax.random.key_data(key),
            step=jnp.int32(0),
            best=jax.tree.map(jnp.copy, params) if config.gate.every else None,
        )

    def iterate(state: TrainState) -> tuple[TrainState, dict]:
        key, play_key, train_key = jax.random.split(jax.random.wrap_key_data(state.key), 3)
        player = state.params if state.best is None else state.best
        carry, examples, play_metrics = selfplay_chunk(player, state.carry, play_key)
        buffer = replay_add(state.buffer, examples)

        def train(params: Params, opt_state: Any):
            def one(carry, key):
                batch = jax.lax.with_sharding_constraint(sample(buffer, key), data)
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
        key = jax.random.key_data(key)
        new = TrainState(params, opt_state, buffer, carry, key, step, state.best)
        return new, metrics

    abstract = jax.eval_shape(init, jax.random.key(0))
    everywhere = jax.tree.map(lambda _: replicated, abstract)
    shardings = everywhere.replace(
        buffer=everywhere.buffer.replace(  # each device keeps its own shard of the positions
            stored=jax.tree.map(lambda _: data, abstract.buffer.stored)
        ),
        carry=parallel.batch_shardings(abstract.carry, config.selfplay.batch_size, mesh),
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
    )
