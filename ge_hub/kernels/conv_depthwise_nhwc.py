"""The depthwise kernel of ge_hub.FusedConvNHWC (core/kernels/conv_depthwise_nhwc.c): a
Conv with one kernel per channel (group = channels = output channels) on bfloat16
channels-last X and Y, the depthwise layers of a `channels_last` chain (MobileNetV2's).
Its blob, its bands of rows, and its weights laid out tap by tap, so that a tap's run of
channels is one load beside the run of X it multiplies.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.bounds import check_window
from ge_hub.kernels.nn_common import F32, all_static, filled_attrs, node_fail, window_ints
from ge_hub.ops.conv import CONV_ACTIVATIONS, FUSED_DOMAIN, to_channels_first
from ge_hub.ops.window import layout as _layout
from ge_hub.ops.window import window as _window
from ge_hub.registry import KernelSpec

KERNEL = "ge_conv_depthwise_nhwc_bf16"
# The channels the kernel takes are a multiple of this (the chains pad them to it).
BLOCK = 32
# The most rows a window may span, (kh - 1) * dilation + 1 (DW_NHWC_MAX_SPAN: the ring of
# widened rows holds that many).
MAX_SPAN = 16
# Tasks (images x blocks of channels x bands of rows) wanted at least, so that the pool's
# chunks of them balance over its threads.
MIN_TASKS = 16


def _geometry(node, input_types):
    """(channels, window, in_dims, out_dims, begin pads) of the node's channels-first
    Conv."""
    n, c, *in_dims = to_channels_first(input_types[0].shape)
    attrs = filled_attrs(node)
    kernel = attrs["kernel_shape"] or list(input_types[1].shape[2:])
    window = _window(attrs, 2, kernel, node_fail(node))
    out_dims, pads = _layout(window, in_dims)
    return c, window, in_dims, out_dims, pads


def is_depthwise_nhwc(node, input_types) -> bool:
    """Whether a FusedConvNHWC's window is depthwise: W (C, 1, kh, kw) over X's C
    channels in C groups."""
    x, w = input_types[0].shape, input_types[1].shape
    return len(x) == 4 and len(w) == 4 and w[0] == x[3] and w[1] == 1 \
        and filled_attrs(node)["group"] == x[3]


def bands(n: int, blocks: int, out_h: int) -> int:
    """Output rows per task: the image's rows in as few bands as give MIN_TASKS tasks
    (images x blocks of channels x bands), at most one band per row."""
    count = min(out_h, max(1, -(-MIN_TASKS // max(1, n * blocks))))
    return -(-out_h // count)


def pack_depthwise_nhwc(node, input_types, output_types) -> Packed:
    """Ints N, C, the activation (its position in CONV_ACTIVATIONS), the band, the window;
    floats the activation's alpha and beta."""
    c, window, in_dims, out_dims, pads = _geometry(node, input_types)
    check_window(node, window, in_dims, out_dims, pads)
    attrs = filled_attrs(node)
    n = input_types[0].shape[0]
    ints = [n, c, CONV_ACTIVATIONS.index(attrs["activation"]), bands(n, c // BLOCK, out_dims[0]),
            *window_ints(in_dims, out_dims, window.kernel, window.strides, window.dilations,
                         [p[0] for p in pads])]
    return Packed(pack_values(ints, [attrs["alpha"], attrs["beta"]]))


def prepack_depthwise_nhwc(node, input_types, output_types) -> dict[int, np.ndarray]:
    """W (C, 1, kh, kw) as (kh * kw, C): tap by tap, each tap's channels together as X's
    are."""
    w = np.asarray(node.inputs[1].const, dtype=np.float32)
    return {1: np.ascontiguousarray(w.reshape(w.shape[0], -1).T)}


def fits_depthwise_nhwc(node, input_types, output_types) -> bool:
    """Static bfloat16 X and Y, constant float32 W (C, 1, kh, kw) and B, C groups, a 2-D
    window spanning at most MAX_SPAN rows whose leading pads are no wider than its reach,
    no residual: what the kernel takes but for its channels (the `channels_last` pass pads
    them)."""
    if not all_static(input_types) or len(input_types) < 3 or input_types[2] is None \
            or node.inputs[2] is None or node.inputs[2].const is None:
        return False
    x, w, b = input_types[:3]
    if x.dtype != DType.BFLOAT16 or output_types[0].dtype != DType.BFLOAT16 \
            or w.dtype != F32 or b.dtype != F32 or not is_depthwise_nhwc(node, input_types):
        return False
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        return False
    if node.inputs[1] is None or node.inputs[1].const is None:
        return False
    c, window, in_dims, out_dims, pads = _geometry(node, input_types)
    return pads is not None and all(d > 0 for d in out_dims) \
        and all(0 <= p[0] <= (k - 1) * d for p, k, d in zip(pads, window.kernel,
                                                              window.dilations)) \
        and (window.kernel[0] - 1) * window.dilations[0] + 1 <= MAX_SPAN \
        and tuple(output_types[0].shape) == (x.shape[0], *out_dims, c)


def supports_depthwise_nhwc(node, input_types, output_types) -> bool:
    """fits_depthwise_nhwc, with a multiple of BLOCK channels."""
    return input_types[0].shape[-1] % BLOCK == 0 \
        and fits_depthwise_nhwc(node, input_types, output_types)


KERNELS = [
    # Ahead of conv.py's FusedConvNHWC kernel, whose path takes one group only.
    KernelSpec(op="FusedConvNHWC", domain=FUSED_DOMAIN, name=KERNEL, priority=1,
               impl=CKernel(KERNEL, pack=pack_depthwise_nhwc, supports=supports_depthwise_nhwc,
                            prepack=prepack_depthwise_nhwc)),
]
