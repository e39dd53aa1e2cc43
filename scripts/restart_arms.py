"""Restart-cost arms (docs/learning.md#a-run-in-pieces): resume a copy of a run's workdir whose
newest checkpoint is iteration 200, with parts of the restored state replaced by fresh ones.

ARM=C: optimizer kept, buffer and games in flight fresh
ARM=F: Adam moments fresh (schedule position kept), buffer kept, games in flight fresh
ARM=G: Adam moments fresh (schedule position kept), buffer and games in flight fresh
usage: ARM=X python scripts/restart_arms.py --config ... --workdir COPY_OF_RUN_AT_200 ...
"""

import os
import sys

import jax
import optax

import azjax.train as train_module
from azjax.cli import train as cli

arm = os.environ["ARM"]
original = train_module.restore


def restore(trainer, checkpointer):
    iteration, state = original(trainer, checkpointer)
    fresh = trainer.init(jax.random.key(12345), jax.device_get(state.params))
    if arm in "CG":
        state = state.replace(buffer=fresh.buffer)
    state = state.replace(carry=fresh.carry)
    if arm in "FG":
        old_leaves = jax.tree_util.tree_flatten_with_path(
            state.opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState)
        )[0]
        new_leaves, treedef = jax.tree_util.tree_flatten(
            fresh.opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState)
        )
        merged = [
            o if isinstance(o, optax.ScaleByScheduleState) else n
            for (_, o), n in zip(old_leaves, new_leaves, strict=True)
        ]
        state = state.replace(opt_state=jax.tree_util.tree_unflatten(treedef, merged))
    print(
        f"arm {arm}: restored iteration {iteration}, buffer size {int(state.buffer.size.sum())}",
        flush=True,
    )
    return iteration, state


train_module.restore = restore
sys.exit(cli.main())
