"""The loss and the optimizer: what one gradient step of training computes.

    optimizer = make_optimizer(config.optim, total_steps)   # Adam, warm-up then cosine decay
    step = make_train_step(network, optimizer, config.optim)
    params, opt_state, metrics = step(params, opt_state, batch)

The loss (`loss_fn`): policy cross-entropy where a full search gave the target, value squared
error and an L2 penalty on the weights.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from azjax.config import OptimConfig
from azjax.selfplay import Examples

Array = jax.Array
Params = Any


def make_optimizer(config: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    """Adam (optax's AdamW without weight decay: `l2` regularises); linear warm-up then cosine
    decay over `total_steps`."""
    optimizer = optax.adamw(learning_rate_schedule(config, total_steps), weight_decay=0.0)
    if config.max_grad_norm > 0:
        optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optimizer)
    return optimizer


def learning_rate_schedule(config: OptimConfig, total_steps: int) -> optax.Schedule:
    """Linear warm-up from 0, then cosine decay to `final_lr_fraction` of the peak."""
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
    network: Any, params: Params, batch: Examples, config: OptimConfig
) -> tuple[Array, dict[str, Array]]:
    """Policy cross-entropy (only where a full search gave the target) + value MSE + L2."""
    logits, value = network.apply(params, batch.observation)
    log_probs = jax.nn.log_softmax(logits)
    cross_entropy = -jnp.sum(batch.policy * log_probs, axis=-1)
    mask = batch.policy_mask.astype(jnp.float32)
    count = jnp.maximum(jnp.sum(mask), 1.0)
    policy_loss = jnp.sum(cross_entropy * mask) / count
    target_entropy = -jnp.sum(
        batch.policy * jnp.log(jnp.where(batch.policy > 0, batch.policy, 1)), -1
    )
    entropy = jnp.sum(target_entropy * mask) / count
    value_loss = jnp.mean(jnp.square(value - batch.value))
    target_var = jnp.var(batch.value)
    l2 = l2_penalty(params)
    loss = policy_loss + value_loss + config.l2 * l2
    metrics = {
        "loss": loss,
        "policy_loss": policy_loss,
        "policy_kl": policy_loss - entropy,
        "value_loss": value_loss,
        "l2": l2,
        # how much the outputs vary over the batch's positions (a constant one learns nothing)
        "value_std": jnp.std(value),
        "policy_std": jnp.mean(jnp.std(logits, axis=0)),
        "value_target_var": target_var,
        "value_explained": 1.0 - value_loss / jnp.maximum(target_var, 1e-6),
    }
    return loss, metrics


def make_train_step(network: Any, optimizer: optax.GradientTransformation, config: OptimConfig):
    """`step(params, opt_state, batch) -> (params, opt_state, metrics)`, pure."""

    def step(params: Params, opt_state: Any, batch: Examples):
        grads, metrics = jax.grad(lambda p: loss_fn(network, p, batch, config), has_aux=True)(
            params
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
        return params, opt_state, metrics

    return step
