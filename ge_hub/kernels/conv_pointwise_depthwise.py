"""The kernel of ge_hub.PointwiseDepthwise (a bf16 pointwise Conv and the depthwise Conv
reading it, one step; core/kernels/conv_pointwise_depthwise.c): its blob, its scratch and
its bands, and the pointwise weights packed once as the bf16 product's A.

The kernel computes the pointwise output a band of rows at a time, for blocks of
BLOCK_CHANNELS channels, into a buffer the depthwise window then reads; bands overlap by
the window's halo, which is computed once per band. A band is as tall as MID_BYTES allows
for that buffer (so that it stays in L2 beside the band's packed input), then the bands
are evened out; where an image has fewer bands than MIN_TASKS the channel blocks are
split into groups too, so that the pool has work for every thread.
"""

from __future__ import annotations

import math

import numpy as np

from ge_hub.errors import OpError
from ge_hub.kernels import nn_bf16
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.bounds import check_window
from ge_hub.kernels.conv import DEPTHWISE_MAX_K, DEPTHWISE_MAX_SPAN, DEPTHWISE_MAX_STRIDE
from ge_hub.kernels.nn_common import (
    F32,
    FLOAT_BYTES,
    all_static,
    filled_attrs,
    node_fail,
    window_ints,
)
from ge_hub.ops.conv import CONV_ACTIVATIONS, FUSED_DOMAIN
from ge_hub.ops.window import layout as _layout
from ge_hub.ops.window import window as _window
from ge_hub.registry import KernelSpec

KERNEL = "ge_conv_pointwise_depthwise_f32"
# Channels per pointwise block (2 * NN_BF16_MR, PD_CHANNELS in the C kernel).
BLOCK_CHANNELS = 2 * nn_bf16.BF16_MR
# The pointwise rows of a block of channels one band computes, at most (fp32 bytes).
MID_BYTES = 256 << 10
# Tasks (image, band, group of channel blocks) wanted at least; and slots (scratch areas,
# each one thread's at a time), as Winograd's (conv.WINOGRAD_SLOTS).
MIN_TASKS = 4
SLOTS = 4


def _refuse(message: str):
    raise OpError(message)


def depthwise_geometry(attrs: dict, in_dims, kernel) -> tuple | None:
    """(window, out_dims, begin pads) of a 2-D depthwise window over `in_dims` that the
    fused kernel takes, else None: the windows of the direct depthwise kernel
    (nn_conv_depthwise_fits; ge_hub.kernels.conv's DEPTHWISE_*): kernel at most
    DEPTHWISE_MAX_K a side, strides up to
    DEPTHWISE_MAX_STRIDE, spans up to DEPTHWISE_MAX_SPAN, and every output row reading at
    least one input row (a band of rows of only padding has nothing to compute from)."""
    if len(in_dims) != 2 or len(kernel) != 2:
        return None
    try:
        window = _window(attrs, 2, kernel, _refuse)
    except OpError:
        return None
    out_dims, pads = _layout(window, list(in_dims))
    if pads is None or any(d < 1 for d in out_dims):
        return None
    begins = [p[0] for p in pads]
    fits = (all(k <= DEPTHWISE_MAX_K for k in window.kernel)
            and all(1 <= s <= DEPTHWISE_MAX_STRIDE for s in window.strides)
            and all((k - 1) * d + 1 <= DEPTHWISE_MAX_SPAN
                    for k, d in zip(window.kernel, window.dilations)))
    kh, stride, dil = window.kernel[0], window.strides[0], window.dilations[0]
    reads = (0 <= begins[0] <= (kh - 1) * dil
             and (out_dims[0] - 1) * stride - begins[0] <= in_dims[0] - 1)
    return (window, out_dims, begins) if fits and reads else None


def _geometry(node, input_types):
    x, w2 = input_types[0].shape, input_types[3].shape
    attrs = filled_attrs(node)
    kernel = attrs["kernel_shape"] or list(w2[2:])
    window = _window(attrs, 2, kernel, node_fail(node))
    in_dims = list(x[2:])
    out_dims, pads = _layout(window, in_dims)
    check_window(node, window, in_dims, out_dims, pads)
    return window, out_dims, [p[0] for p in pads]


def bands(window, in_dims, out_dims) -> int:
    """Output rows per band: as many as MID_BYTES allows the block's rows they read, at
    least one, then evened out over the bands."""
    kh, stride, dil = window.kernel[0], window.strides[0], window.dilations[0]
    rows = max(1, MID_BYTES // (BLOCK_CHANNELS * in_dims[1] * FLOAT_BYTES))
    band = max(1, (rows - (kh - 1) * dil - 1) // stride + 1)
    count = -(-out_dims[0] // min(band, out_dims[0]))
    return -(-out_dims[0] // count)


def _plan(node, input_types):
    """(n, c, e, band, groups, slots, window ints, scratch bytes)."""
    window, out_dims, begins = _geometry(node, input_types)
    n, c, h, w = input_types[0].shape
    e = input_types[1].shape[0]
    band = bands(window, (h, w), out_dims)
    tasks = n * -(-out_dims[0] // band)
    blocks = -(-e // BLOCK_CHANNELS)
    per_group = -(-blocks // max(1, min(blocks, -(-MIN_TASKS // max(1, tasks)))))
    groups = -(-blocks // per_group)
    slots = max(1, min(SLOTS, tasks * groups))
    rows = min(h, (band - 1) * window.strides[0] + (window.kernel[0] - 1) * window.dilations[0]
               + 1)
    panels = -(-(-(-rows * w // nn_bf16.BF16_NR) * nn_bf16.depth(c) * nn_bf16.BF16_NR * 2)
               // 64) * 64
    mid = -(-BLOCK_CHANNELS * rows * w * FLOAT_BYTES // 64) * 64
    ints = window_ints([h, w], out_dims, window.kernel, window.strides, window.dilations,
                       begins)
    return n, c, e, band, groups, slots, ints, slots * (panels + mid)


def pack_pointwise_depthwise(node, input_types, output_types) -> Packed:
    """Ints N, C, E, band, groups, slots, the two activations (positions in
    CONV_ACTIVATIONS), the depthwise window; floats the activations' alpha and beta."""
    n, c, e, band, groups, slots, ints, scratch = _plan(node, input_types)
    attrs = filled_attrs(node)
    head = [n, c, e, band, groups, slots,
            CONV_ACTIVATIONS.index(attrs["pointwise_activation"]),
            CONV_ACTIVATIONS.index(attrs["activation"])]
    floats = [attrs["pointwise_alpha"], attrs["pointwise_beta"], attrs["alpha"], attrs["beta"]]
    return Packed(pack_values(head + ints, floats), scratch_bytes=scratch)


def prepack_pointwise_depthwise(node, input_types, output_types) -> dict[int, np.ndarray]:
    """W1 (E, C, 1, 1) as nn_gemm_bf16.h's packed A, rounded to bf16 once."""
    w1 = np.asarray(node.inputs[1].const, dtype=np.float32)
    return {1: nn_bf16.pack_a(w1.reshape(1, w1.shape[0], -1)).reshape(-1)}


def supports_pointwise_depthwise(node, input_types, output_types) -> bool:
    """A node the pass made (its pointwise product marked bf16), static float32 shapes,
    a constant W1 deep enough for the bf16 product, and a window the kernel takes."""
    if node.meta.get("precision") != nn_bf16.BF16 or not all_static(input_types):
        return False
    if node.inputs[1] is None or node.inputs[1].const is None:
        return False
    x, w1 = input_types[0].shape, input_types[1].shape
    if len(x) != 4 or x[1] < nn_bf16.BF16_MIN_K or math.prod(output_types[0].shape) == 0:
        return False
    attrs = filled_attrs(node)
    kernel = attrs["kernel_shape"] or list(input_types[3].shape[2:])
    return w1[0] == attrs["group"] and depthwise_geometry(attrs, x[2:], kernel) is not None


KERNELS = [
    KernelSpec(op="PointwiseDepthwise", domain=FUSED_DOMAIN, name=KERNEL, dtypes=(F32, F32),
               impl=CKernel(KERNEL, pack=pack_pointwise_depthwise,
                            supports=supports_pointwise_depthwise,
                            prepack=prepack_pointwise_depthwise)),
]
