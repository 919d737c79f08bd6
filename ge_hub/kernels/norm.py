"""The norm family's kernels (float32): BatchNormalization, LayerNormalization and
InstanceNormalization (C in core/kernels/norm.c), LRN (core/kernels/norm_lrn.c), and
ge_hub.SkipLayerNormalization (core/kernels/norm_fused.c).

LRN's packer flattens the spatial dims into one `inner` extent and divides alpha by size
in double, once, as the op's NumPy reference does. The LRN kernel needs static shapes and
reads channels other than the one it writes, so its output never shares the input's
memory.
"""


from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import BlobRecord, CKernel, Packed, pack_values
from ge_hub.kernels.nn_common import (
    F32,
    SAME_AS_INPUT,
    all_static,
    c_kernel,
    filled_attrs,
    numel_of,
    supports_nonempty,
)
from ge_hub.ops.norm import FUSED_DOMAIN
from ge_hub.registry import KernelSpec

# The fixed blobs, field for field as core/kernels/norm.h declares them.
INSTANCE_NORM_BLOB = BlobRecord("GE_INSTANCE_NORM_BLOB", ("n", "channels", "inner"),
                                ("epsilon",))
SKIP_LAYER_NORM_BLOB = BlobRecord("GE_SKIP_LAYER_NORM_BLOB",
                                  ("outer", "inner", "scale_period", "b_period",
                                   "bias_period"), ("epsilon",))
LRN_BLOB = BlobRecord("GE_LRN_BLOB", ("n", "channels", "inner", "size"),
                      ("alpha_over_size", "beta", "bias"))

def pack_batch_norm(node, input_types, output_types) -> Packed:
    epsilon = float(filled_attrs(node)["epsilon"])
    x = input_types[0].shape
    inner = numel_of(x[2:])
    consts = [v.const for v in node.inputs[1:5]]
    if all(c is not None for c in consts):
        # Constant statistics fold into one multiply-add per element.
        scale, bias, mean, var = (np.asarray(c, dtype=np.float64).reshape(-1) for c in consts)
        a = scale / np.sqrt(var + epsilon)
        b = bias - mean * a
        return Packed(pack_values([x[0], x[1], inner, 1], [epsilon, *a.tolist(), *b.tolist()]))
    return Packed(pack_values([x[0], x[1], inner, 0], [epsilon]))


def supports_batch_norm(node, input_types, output_types) -> bool:
    # The kernel normalizes with the given statistics; training mode (batch statistics,
    # running-statistics outputs) runs the reference.
    return not filled_attrs(node)["training_mode"] and supports_nonempty(node, input_types,
                                                                   output_types)


def _period(param: TensorType, row_shape: Sequence[int]) -> int | None:
    """How many elements a LayerNormalization Scale or B repeats over along a row: its
    shape without leading 1s must be the row's trailing dims (None if it is not)."""
    shape = list(param.shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    if shape and list(row_shape[len(row_shape) - len(shape):]) != shape:
        return None
    return numel_of(shape)


def _layer_norm_axis(node, x: TensorType) -> int:
    return filled_attrs(node)["axis"] % len(x.shape)


def pack_layer_norm(node, input_types, output_types) -> Packed:
    x = input_types[0]
    axis = _layer_norm_axis(node, x)
    row = x.shape[axis:]
    has_bias = len(input_types) > 2 and input_types[2] is not None
    bias_period = _period(input_types[2], row) if has_bias else 0
    ints = [numel_of(x.shape[:axis]), numel_of(row), _period(input_types[1], row), bias_period,
            len(output_types)]
    return Packed(pack_values(ints, [float(filled_attrs(node)["epsilon"])]))


def supports_layer_norm(node, input_types, output_types) -> bool:
    x = input_types[0]
    if not all_static(input_types) or len(x.shape) == 0 or filled_attrs(node)["stash_type"] != 1:
        return False
    if any(t.dtype != F32 for t in output_types):
        return False
    row = x.shape[_layer_norm_axis(node, x):]
    params = [t for t in input_types[1:3] if t is not None]
    return numel_of(row) > 0 and all(_period(t, row) is not None for t in params)


def _optional_period(input_types, index: int, row) -> int | None:
    """The period of optional input `index` along a row; 0 when it is absent."""
    if len(input_types) <= index or input_types[index] is None:
        return 0
    return _period(input_types[index], row)


def pack_skip_layer_norm(node, input_types, output_types) -> Packed:
    """Blob: the record SKIP_LAYER_NORM_BLOB (Scale, B and Bias periods along a row)."""
    x = input_types[0]
    axis = _layer_norm_axis(node, x)
    row = x.shape[axis:]
    return Packed(SKIP_LAYER_NORM_BLOB.pack(
        outer=numel_of(x.shape[:axis]), inner=numel_of(row),
        scale_period=_period(input_types[2], row),
        b_period=_optional_period(input_types, 3, row),
        bias_period=_optional_period(input_types, 4, row),
        epsilon=float(filled_attrs(node)["epsilon"])))


def supports_skip_layer_norm(node, input_types, output_types) -> bool:
    x, skip = input_types[0], input_types[1]
    if not all_static(input_types) or len(x.shape) == 0 or tuple(x.shape) != tuple(skip.shape):
        return False
    row = x.shape[_layer_norm_axis(node, x):]
    return numel_of(row) > 0 and _period(input_types[2], row) is not None and all(
        _optional_period(input_types, i, row) is not None for i in (3, 4))


def pack_instance_norm(node, input_types, output_types) -> Packed:
    x = input_types[0].shape
    return Packed(INSTANCE_NORM_BLOB.pack(n=x[0], channels=x[1], inner=numel_of(x[2:]),
                                          epsilon=filled_attrs(node)["epsilon"]))


# -- LRN ----------------------------------------------------------------------------------


def pack_lrn(node, input_types, output_types) -> Packed:
    """Blob: the record LRN_BLOB."""
    shape = input_types[0].shape
    attrs = filled_attrs(node)
    size = int(attrs["size"])
    return Packed(LRN_BLOB.pack(n=shape[0], channels=shape[1], inner=math.prod(shape[2:]),
                                size=size, alpha_over_size=float(attrs["alpha"]) / size,
                                beta=attrs["beta"], bias=attrs["bias"]))


def supports_lrn(node, input_types, output_types) -> bool:
    x = input_types[0]
    return x.shape is not None and x.is_static


# -- registrations ----------------------------------------------------------------------

KERNELS = [
    c_kernel("BatchNormalization", "ge_nn_batch_norm_f32", (F32,) * 5, pack_batch_norm,
            supports_batch_norm, SAME_AS_INPUT),
    c_kernel("LayerNormalization", "ge_nn_layer_norm_f32", (F32, F32), pack_layer_norm,
            supports_layer_norm, SAME_AS_INPUT),
    c_kernel("InstanceNormalization", "ge_nn_instance_norm_f32", (F32,) * 3,
            pack_instance_norm, supports_nonempty, SAME_AS_INPUT),
    KernelSpec(op="LRN", name="ge_lrn_f32", dtypes=(F32,),
               impl=CKernel("ge_lrn_f32", pack=pack_lrn, supports=supports_lrn)),
    KernelSpec(op="SkipLayerNormalization", domain=FUSED_DOMAIN,
               name="ge_nn_skip_layer_norm_f32", dtypes=(F32, F32, F32),
               impl=CKernel("ge_nn_skip_layer_norm_f32", pack=pack_skip_layer_norm,
                            supports=supports_skip_layer_norm, inplace=((0, 0), (0, 1)))),
]
