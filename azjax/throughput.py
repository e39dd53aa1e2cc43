"""How hard a run drives its device: a network's FLOPs per evaluation and the device's peak.

`network_flops` counts one evaluation's convolutions and matrix products from the traced
program, once per network; `peak_tflops` looks the device's dense peak up in `PEAK_TFLOPS`.
The trainer (evaluations/s, TFLOP/s and the fraction of the peak in metrics.jsonl) and the
self-play benchmark share them.
"""

from __future__ import annotations

import math
import re
from typing import Any

import jax
from jax.extend import core

# Dense peak TFLOP/s per device by the first name found as a word in its device kind (vendor
# data sheets, without sparsity; a plain "H100" is the SXM part; "L4" is not "L40S").
# "tensorfloat32" is the tensor cores' TF32 peak: XLA computes float32 convolutions and matrix
# products in TF32 on these GPUs unless `jax_default_matmul_precision` asks for full float32.
# Devices not listed (CPUs included) have no known peak, so no fraction of it is reported.
PEAK_TFLOPS = {
    "H100 PCIe": {"bfloat16": 756.0, "tensorfloat32": 378.0, "float32": 51.0},
    "H100 NVL": {"bfloat16": 835.0, "tensorfloat32": 417.5, "float32": 60.0},
    "H100": {"bfloat16": 989.0, "tensorfloat32": 494.5, "float32": 67.0},
    "H200": {"bfloat16": 989.0, "tensorfloat32": 494.5, "float32": 67.0},
    "A100": {"bfloat16": 312.0, "tensorfloat32": 156.0, "float32": 19.5},
    "L40S": {"bfloat16": 362.05, "tensorfloat32": 183.0, "float32": 91.6},
    "L4": {"bfloat16": 121.0, "tensorfloat32": 60.0, "float32": 30.3},
    "T4": {"float32": 8.1},  # no bfloat16 or TF32 tensor cores (see `emulation_warning`)
    "TPU v4": {"bfloat16": 275.0},
    "TPU v5 lite": {"bfloat16": 197.0},
    "TPU v5p": {"bfloat16": 459.0},
    "TPU v6 lite": {"bfloat16": 918.0},
}
# `jax_default_matmul_precision` values that make XLA compute float32 products in float32.
FULL_PRECISION = ("float32", "highest", "F32_F32_F32")
# NVIDIA GPUs compute in bfloat16 from compute capability 8.0 (Ampere) on.
BFLOAT16_CAPABILITY = (8, 0)


def peak_tflops(dtype: str, device_kind: str | None = None) -> float | None:
    """The dense peak TFLOP/s of one device of `device_kind` (default: the first device's) for
    a network in `dtype` ("float32", "bfloat16"); None where PEAK_TFLOPS does not know it.

    A float32 network's peak is the TF32 one where the device has TF32, unless
    `jax_default_matmul_precision` is one of FULL_PRECISION."""
    kind = jax.devices()[0].device_kind if device_kind is None else device_kind
    full = str(jax.config.jax_default_matmul_precision) in FULL_PRECISION
    key = "tensorfloat32" if dtype == "float32" and not full else dtype
    for name, peaks in PEAK_TFLOPS.items():
        if re.search(rf"\b{re.escape(name)}\b", kind):
            return peaks.get(key, peaks.get(dtype))
    return None


def emulation_warning(dtype: str, device: Any = None) -> str | None:
    """A warning when a network in `dtype` would run on `device` (default: the first) without
    arithmetic of its own: bfloat16 on an NVIDIA GPU older than compute capability 8.0 (a T4,
    Colab's free GPU), which XLA computes through float32; None otherwise."""
    device = jax.devices()[0] if device is None else device
    capability = re.fullmatch(r"(\d+)\.(\d+)", str(getattr(device, "compute_capability", "")))
    if dtype != "bfloat16" or device.platform != "gpu" or capability is None:
        return None
    if tuple(map(int, capability.groups())) >= BFLOAT16_CAPABILITY:
        return None
    return (
        f"network.dtype=bfloat16 on a {device.device_kind} (compute capability "
        f"{device.compute_capability}): GPUs before 8.0 have no bfloat16 arithmetic, so XLA "
        "emulates it through float32; use network.dtype=float32 on this GPU"
    )


def network_flops(network: Any, params: Any, observations: Any) -> float:
    """FLOPs of one evaluation of `network` (any module with `apply(params, obs)`): the
    convolutions' and matrix products' multiply-adds (two FLOPs each) for a batch of
    `observations` (arrays or `jax.ShapeDtypeStruct`s) over its size.

    It counts from the traced program's shapes, the same on every backend, with each kernel's
    whole window (the padding's zeros included, as the device multiplies them too). Compilers'
    cost analyses differ by backend: a GPU's can leave out the library calls (cuDNN's
    convolutions) that do nearly all the work. Elementwise work (biases, norms, activations) is
    left out, as the dense peak it is compared with is the tensor cores' alone.
    """
    jaxpr = jax.make_jaxpr(network.apply)(params, observations)
    return _flops(jaxpr.jaxpr) / observations.shape[0]


def _flops(jaxpr: core.Jaxpr) -> float:
    """The multiply-add FLOPs of `jaxpr`'s convolutions and matrix products, sub-programs
    included: a scan's body once per step, a cond's costliest branch."""
    total = 0.0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            summed = math.prod(lhs[d] for d in contracting)
            total += 2 * math.prod(eqn.outvars[0].aval.shape) * summed
        elif eqn.primitive.name == "conv_general_dilated":
            # Each output sums over the kernel's window and its input features (one group's).
            kernel = eqn.invars[1].aval.shape
            spec = eqn.params["dimension_numbers"].rhs_spec  # (out features, in features, window)
            summed = math.prod(kernel[d] for d in spec[1:])
            total += 2 * math.prod(eqn.outvars[0].aval.shape) * summed
        inner = [_flops(sub) for sub in core.jaxprs_in_params(eqn.params)]
        if eqn.primitive.name == "cond":  # one branch runs (e.g. `platform_dependent`'s)
            total += max(inner)
        elif eqn.primitive.name == "scan":
            total += eqn.params["length"] * sum(inner)
        else:
            total += sum(inner)
    return total
