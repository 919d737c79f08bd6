"""What ran in which precision: the `precision` part of `summary()` and the bf16
micro-kernel this process uses.

It reads a compiled plan (which kernel each product step got, and for a convolution the
path in its attribute blob) and asks the C core which bf16 micro-kernel it chose, so it
sits above the kernels, the passes and the executor, beside the runtime that reports it.
"""

from __future__ import annotations

import ctypes
import functools
import struct

from ge_hub.ir.dtypes import DType
from ge_hub.kernels.conv import BF16_PATHS, CONV_NHWC_KERNEL, CONV_TRANSPOSE_BF16
from ge_hub.kernels.conv_depthwise_nhwc import KERNEL as DEPTHWISE_NHWC
from ge_hub.kernels.conv_pointwise_depthwise import KERNEL as POINTWISE_DEPTHWISE
from ge_hub.kernels.nn_bf16 import BF16, BF16X3, FP32, LINEAR_SPECS, LINEAR_X3_SPECS
from ge_hub.passes.precision import PRODUCT_OPS

CONV_KERNELS = ("ge_nn_conv_f32", "ge_conv_fused_f32", CONV_NHWC_KERNEL)


def step_precision(step) -> str:
    """"bf16" when a plan step runs a bf16 product, "bf16x3" three bf16 products for an
    fp32 one (ge_hub/passes/precision.py), else "fp32"."""
    if step.kernel in LINEAR_X3_SPECS:
        return BF16X3
    if step.kernel in LINEAR_SPECS or step.kernel in (CONV_TRANSPOSE_BF16, POINTWISE_DEPTHWISE):
        return BF16
    if step.kernel in CONV_KERNELS and len(step.attrs) >= 8:
        return BF16 if struct.unpack_from("=q", step.attrs)[0] in BF16_PATHS else FP32
    return FP32


def precision_summary(plan, mode: str) -> dict:
    """What `summary()` says about precision: the mode asked for, the bf16 micro-kernel,
    each product step's precision (steps of other ops always compute in fp32), and how many
    product steps write bf16 activations (a channels-last chain's Convs)."""
    products = {s.node: step_precision(s) for s in plan.steps
                if s.op.rpartition(".")[2] in PRODUCT_OPS}
    bf16 = [name for name, p in products.items() if p == BF16]
    split = [name for name, p in products.items() if p == BF16X3]
    # the channels-last chains' Convs (ge_hub/passes/channels_last.py): bf16 activations
    activations = sum(1 for s in plan.steps if s.kernel in (CONV_NHWC_KERNEL, DEPTHWISE_NHWC)
                      and plan.tensors[s.outputs[0]].dtype == DType.BFLOAT16)
    return {"mode": mode, "bf16_kernel": kernel_name() if bf16 or split else None,
            "bf16_steps": len(bf16), "bf16x3_steps": len(split),
            "bf16_activation_steps": activations,
            "fp32_products": [name for name, p in products.items() if p == FP32],
            "bf16x3_products": split, "products": products}


@functools.cache
def kernel_name() -> str:
    """The bf16 micro-kernel of this process ("amx", "avx512bf16" or "generic"), as the C
    core chose it (GE_HUB_BF16_KERNEL, GE_HUB_AMX_DENY; core/src/simd.c)."""
    from ge_hub import _core

    lib = ctypes.CDLL(_core.__file__)
    lib.ge_hub_bf16_kernel_name.restype = ctypes.c_char_p
    return lib.ge_hub_bf16_kernel_name().decode()
