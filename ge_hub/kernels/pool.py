"""The pool family's kernels (float32): MaxPool, AveragePool and the global pools; their C
lives in core/kernels/pool.c. ge_hub.MaxPoolNHWC (channels-last, float32 or bfloat16):
core/kernels/pool_nhwc.c. Window geometry comes from `ge_hub.ops.window`.
"""

from __future__ import annotations

import math

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.bounds import check_window
from ge_hub.kernels.nn_common import (
    F32,
    MAX_SPATIAL,
    c_kernel,
    filled_attrs,
    node_fail,
    numel_of,
    spatial_ok,
    supports_nonempty,
    window_ints,
)
from ge_hub.ops.conv import FUSED_DOMAIN, to_channels_first
from ge_hub.ops.window import layout as _layout
from ge_hub.ops.window import window as _window
from ge_hub.registry import KernelSpec


def _pool_window(node, input_types):
    attrs = filled_attrs(node)
    spatial = len(input_types[0].shape) - 2
    window = _window(attrs, spatial, attrs["kernel_shape"], node_fail(node),
                     bool(attrs["ceil_mode"]))
    out_dims, pads = _layout(window, list(input_types[0].shape[2:]))
    check_window(node, window, list(input_types[0].shape[2:]), out_dims, pads)
    return attrs, window, out_dims, pads


def pack_max_pool(node, input_types, output_types) -> Packed:
    attrs, window, out_dims, pads = _pool_window(node, input_types)
    x = input_types[0].shape
    in_dims = list(x[2:])
    if attrs["storage_order"]:
        # column-major spatial indices: axis a counts in units of the axes before it
        multipliers = [math.prod(in_dims[:a]) for a in range(len(in_dims))]
    else:
        multipliers = [math.prod(in_dims[a + 1:]) for a in range(len(in_dims))]
    multipliers = [0] * (MAX_SPATIAL - len(in_dims)) + multipliers
    ints = [x[0] * x[1], int(len(output_types) > 1)]
    ints += window_ints(in_dims, out_dims, window.kernel, window.strides, window.dilations,
                         [p[0] for p in pads])
    return Packed(pack_values(ints + multipliers))


def pack_average_pool(node, input_types, output_types) -> Packed:
    attrs, window, out_dims, pads = _pool_window(node, input_types)
    x = input_types[0].shape
    in_dims = list(x[2:])
    # count_include_pad counts cells up to the end of the explicit padding
    count_end = [1] * (MAX_SPATIAL - len(in_dims)) + [d + p[1] for d, p in zip(in_dims, pads)]
    ints = [x[0] * x[1], int(attrs["count_include_pad"])]
    ints += window_ints(in_dims, out_dims, window.kernel, window.strides, window.dilations,
                         [p[0] for p in pads])
    return Packed(pack_values(ints + count_end))


def supports_pool(node, input_types, output_types) -> bool:
    return spatial_ok(input_types)


# The C kernel of ge_hub.MaxPoolNHWC.
MAX_POOL_NHWC_KERNEL = "ge_max_pool_nhwc"


def _channels_first(input_types):
    x = input_types[0]
    return [TensorType(x.dtype, to_channels_first(x.shape))]


def pack_max_pool_nhwc(node, input_types, output_types) -> Packed:
    """Blob: ints N, C, then the window of the channels-first MaxPool it is."""
    first = _channels_first(input_types)
    _, window, out_dims, pads = _pool_window(node, first)
    n, c, *in_dims = first[0].shape
    ints = [n, c, *window_ints(in_dims, out_dims, window.kernel, window.strides,
                               window.dilations, [p[0] for p in pads])]
    return Packed(pack_values(ints))


def supports_max_pool_nhwc(node, input_types, output_types) -> bool:
    """2-D windows over float32 or bfloat16 X (and Y)."""
    x = input_types[0]
    return spatial_ok(input_types) and len(x.shape) == 4 \
        and x.dtype in (F32, DType.BFLOAT16) and output_types[0].dtype == x.dtype


def pack_global_pool(node, input_types, output_types) -> Packed:
    x = input_types[0].shape
    return Packed(pack_values([x[0] * x[1], numel_of(x[2:])]))


# -- registrations ----------------------------------------------------------------------

KERNELS = [
    c_kernel("MaxPool", "ge_nn_max_pool_f32", (F32,), pack_max_pool, supports_pool),
    c_kernel("AveragePool", "ge_nn_average_pool_f32", (F32,), pack_average_pool, supports_pool),
    c_kernel("GlobalAveragePool", "ge_nn_global_average_pool_f32", (F32,), pack_global_pool,
            supports_nonempty),
    c_kernel("GlobalMaxPool", "ge_nn_global_max_pool_f32", (F32,), pack_global_pool,
            supports_nonempty),
    KernelSpec(op="MaxPoolNHWC", domain=FUSED_DOMAIN, name=MAX_POOL_NHWC_KERNEL,
               impl=CKernel(MAX_POOL_NHWC_KERNEL, pack=pack_max_pool_nhwc,
                            supports=supports_max_pool_nhwc)),
]
