"""Trained networks as ONNX: `obs -> (logits, value)`, checked against JAX by onnxruntime.

    export_onnx(config, params, "connect4.onnx")   # written, checked, then moved in place

jax2onnx and onnxruntime come with the `export` extra (docs/models.md#onnx).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from azjax.checks import WriteFailure, write_error
from azjax.config import Config, config_to_dict
from azjax.export import Card, ModelError, PathLike, check_suffix, write_atomically
from azjax.network import make_network

# The largest absolute difference between onnxruntime's outputs and JAX's (float32 logits and
# value on random positions) that an export accepts; the exported networks agree to ~1e-6.
TOLERANCE = 1e-3


class OnnxMismatch(RuntimeError):
    """An ONNX graph whose outputs are not the network's (a conversion fault, not bad input)."""


def _float32_network(config: Config) -> tuple[Any, Any]:
    """(game, network) of `config`, computing in float32 (the parameters are the same)."""
    game = config.game.make()
    return game, make_network(game, dataclasses.replace(config.network, dtype="float32"))


def _onnx_plugins() -> None:
    """Register jax2onnx's plugins for JAX primitives and flax modules only: importing them all
    (jax2onnx 0.17 does before its first conversion) builds equinox examples, ~30 s on a small
    CPU. The flax tree is needed too: its `jnp.shape` patch handles the symbolic batch."""
    import jax2onnx.plugins  # optional (the export extra), and slow to import
    from jax2onnx.plugins import plugin_system  # the same

    if not plugin_system._already_imported_plugins:
        root = pathlib.Path(jax2onnx.plugins.__file__).parent
        for tree in ("jax", "flax"):
            plugin_system._import_tree(root / tree, f"jax2onnx.plugins.{tree}")
        plugin_system._already_imported_plugins = True


def export_onnx(
    config: Config, params: Any, out: PathLike, batch: int | None = None, card: Card | None = None
) -> float:
    """Write the network as ONNX, float32: input `obs` [B, *observation_shape], outputs
    `logits` [B, num_actions] and `value` [B] (B symbolic unless `batch` is given), the config
    and `card` in its metadata. Written beside `out`, checked by `check_onnx`, then moved to
    `out`: a failed, interrupted or mismatched (OnnxMismatch: above TOLERANCE) export leaves
    `out` as it was. Returns the check's largest difference. The network's 3x3 convolution
    (`lax.platform_dependent`, which jax2onnx cannot lower) is traced on the CPU with
    compile-time evaluation, giving ONNX `Conv` nodes."""
    out = pathlib.Path(out)
    check_suffix(out, ".onnx")
    if not out.parent.is_dir():
        raise ModelError(f"cannot write {out}: there is no folder {out.parent}")
    try:
        from jax2onnx import to_onnx  # optional (the export extra), and slow to import
    except ImportError:
        raise ImportError(
            "ONNX export needs jax2onnx and onnxruntime: pip install 'azjax[export]' and then "
            "pip install --no-deps 'jax2onnx>=0.17,<0.18' (see docs/models.md#onnx)"
        ) from None
    if batch is not None and batch < 1:
        raise ModelError(f"ONNX batch size must be >= 1 (or symbolic), got {batch}")
    game, network = _float32_network(config)
    cpu = jax.devices("cpu")[0]
    on_cpu = jax.device_put(jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params), cpu)

    def apply(obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        with jax.ensure_compile_time_eval(), jax.default_device(cpu):
            return network.apply(on_cpu, obs)

    _onnx_plugins()
    logging.getLogger("onnx_ir").setLevel(logging.ERROR)  # notes on untyped shape constants
    shape = ("B" if batch is None else batch, *game.observation_shape)
    names = {"input_names": ["obs"], "output_names": ["logits", "value"]}
    model = to_onnx(apply, [shape], model_name=f"azjax_{game.name}", **names)
    model.metadata_props.add(key="azjax_config", value=json.dumps(config_to_dict(config)))
    if card is not None:
        model.metadata_props.add(key="azjax_card", value=json.dumps(card))
    unchecked = out.with_name(f"{out.name.removesuffix('.onnx')}.unchecked.onnx")
    try:
        write_atomically(unchecked, model.SerializeToString())
        difference = check_onnx(unchecked, config, params)
        if not difference <= TOLERANCE:  # NaN too
            raise OnnxMismatch(
                f"not writing {out}: onnxruntime's outputs differ from JAX's by up to "
                f"{difference:.1e} (the export accepts {TOLERANCE:.0e})"
            )
        os.replace(unchecked, out)
    except WriteFailure:  # writing the unchecked file failed: already named
        raise
    except OSError as err:
        raise write_error(f"cannot write {out}: {err.strerror}", err, ModelError) from None
    finally:
        unchecked.unlink(missing_ok=True)
    return difference


def check_onnx(path: PathLike, config: Config, params: Any, positions: int = 64) -> float:
    """The largest absolute difference between onnxruntime's outputs for the ONNX model at
    `path` and the network's, on `positions` random 0/1 observations (or its fixed batch)."""
    import onnxruntime  # optional (the export extra)

    game, network = _float32_network(config)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    batch = session.get_inputs()[0].shape[0]
    shape = (batch if isinstance(batch, int) else positions, *game.observation_shape)
    obs = np.asarray(jax.random.bernoulli(jax.random.key(0), 0.3, shape), np.float32)
    logits, value = session.run(["logits", "value"], {"obs": obs})
    want_logits, want_value = network.apply(params, obs)
    return float(max(np.abs(logits - want_logits).max(), np.abs(value - want_value).max()))
