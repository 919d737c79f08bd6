"""The resize family's kernel (float32): Resize; its C lives in core/kernels/resize.c.

The packer tabulates Resize's source taps and weights at compile time from
`ge_hub.ops.resize`, the helpers the op's shape inference and NumPy reference use, so the
kernel samples exactly where the reference does.
"""

from __future__ import annotations

import numpy as np

from ge_hub.kernels.base import Packed, pack_values
from ge_hub.kernels.nn_common import (
    F32,
    all_static,
    c_kernel,
    filled_attrs,
    numel_of,
)
from ge_hub.ops.resize import nearest_index as _nearest_index
from ge_hub.ops.resize import resize_plan as _resize_plan
from ge_hub.ops.resize import source_coords as _source_coords

# -- Resize -----------------------------------------------------------------------------

RESIZE_MODES = ("nearest", "linear")
# The packer tabulates source taps per cell of every axis (and the blob carries those of H
# and W): past this many cells along any axis, Resize runs its reference instead of
# spending memory on tables as long as the declared dims.
RESIZE_MAX_AXIS = 1 << 20
RESIZE_MAX_SLOTS = 16
RESIZE_SLOT_WORK = 16384


def _resize_inputs(node):
    """(scales, sizes) as lists from the node's constant inputs (None when absent)."""

    def const(index):
        if index >= len(node.inputs) or node.inputs[index] is None:
            return None
        data = node.inputs[index].const
        return None if data is None or data.size == 0 else data.reshape(-1).tolist()

    return const(2), const(3)


def _given(node, index: int) -> bool:
    value = node.inputs[index] if index < len(node.inputs) else None
    return value is not None and numel_of(value.type.shape or (0,)) > 0


def _resize_axes(node, attrs, input_types):
    """Per axis of X: (output size, source taps (taps x out), weights (taps x out)), as
    the reference samples it; an axis the reference leaves untouched has one tap."""
    x = list(input_types[0].shape)
    rank = len(x)
    axes = [a % rank for a in attrs["axes"]] if attrs["axes"] is not None else list(range(rank))
    scales, sizes = _resize_inputs(node)
    plan = _resize_plan(x, axes, scales, sizes, attrs["keep_aspect_ratio_policy"])
    transform = attrs["coordinate_transformation_mode"]
    result = {a: (x[a], np.arange(x[a])[None, :], np.ones((1, x[a]))) for a in range(rank)}
    for a, axis_plan in zip(axes, plan):
        size, out = x[a], axis_plan.out
        coords = _source_coords(transform, axis_plan, size, (0.0, 1.0))
        if out == size and np.array_equal(coords, np.arange(out)):
            continue  # the reference's identity map
        if attrs["mode"] == "nearest":
            index = np.clip(_nearest_index(coords, attrs["nearest_mode"]), 0, size - 1)
            result[a] = (out, index.astype(np.int64)[None, :], np.ones((1, out)))
            continue
        base = np.floor(coords)
        t = (coords - base).astype(np.float64)
        weights = np.stack([1 - t, t])
        taps = base.astype(np.int64)[None, :] + np.array([0, 1])[:, None]
        if attrs["exclude_outside"]:
            weights = np.where((taps >= 0) & (taps < size), weights, 0.0)
            weights = weights / weights.sum(axis=0, keepdims=True)
        result[a] = (out, np.clip(taps, 0, size - 1), weights)
    return result


def pack_resize(node, input_types, output_types) -> Packed:
    attrs = filled_attrs(node)
    x = input_types[0].shape
    axes = _resize_axes(node, attrs, input_types)
    (out_h, rows, row_weights), (out_w, cols, col_weights) = axes[2], axes[3]
    planes, in_w = x[0] * x[1], x[3]
    slots = max(1, min(planes * out_h, RESIZE_MAX_SLOTS,
                       planes * out_h * out_w // RESIZE_SLOT_WORK))
    ints = [planes, x[2], in_w, out_h, out_w, len(rows), len(cols), slots,
            *rows.reshape(-1).tolist(), *cols.reshape(-1).tolist()]
    # scratch: the column taps (int64) and weights (float64), one blended row per slot
    scratch = cols.size * 16 + slots * in_w * 8
    return Packed(pack_values(ints, [*row_weights.reshape(-1).tolist(),
                                     *col_weights.reshape(-1).tolist()]), scratch_bytes=scratch)


def supports_resize(node, input_types, output_types) -> bool:
    attrs = filled_attrs(node)
    x = input_types[0]
    if not all_static(input_types) or len(x.shape) != 4 or numel_of(x.shape) == 0 \
            or numel_of(output_types[0].shape) == 0:
        return False
    if max(*x.shape, *output_types[0].shape) > RESIZE_MAX_AXIS:
        return False
    if attrs["mode"] not in RESIZE_MODES or attrs["antialias"] \
            or attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        return False
    scales, sizes = _resize_inputs(node)
    for index, values in ((2, scales), (3, sizes)):
        if _given(node, index) and values is None:
            return False  # scales or sizes computed at run time
    axes = _resize_axes(node, attrs, input_types)
    # Only the last two axes (H, W) may move; N and C must map to themselves.
    return all(axes[a][0] == x.shape[a] and np.array_equal(axes[a][1], [np.arange(x.shape[a])])
               for a in (0, 1)) and [axes[a][0] for a in range(4)] == list(output_types[0].shape)


# -- registrations ----------------------------------------------------------------------

KERNELS = [
    c_kernel("Resize", "ge_nn_resize_f32", (F32,), pack_resize, supports_resize),
]
