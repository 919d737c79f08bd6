"""Dense and NN kernels (float32): MatMul, Gemm, Conv, ConvTranspose, the pools, the
normalizations, Softmax, LogSoftmax and Resize; their C lives in core/kernels/nn_*.c.

Each packer resolves at compile time everything the C would otherwise work out per run:
output sizes, the padding really used, GEMM shapes, broadcast strides, Resize's source
taps and weights. Window geometry comes from `ge_hub.ops.window` and `ge_hub.ops.resize`,
the same helpers the ops' shape inference and NumPy references use, so kernel, inference
and reference cannot disagree about where a window lands.

Window ops are passed to C as 3-D: 1-D and 2-D windows get leading axes of size 1.
Blob layouts are documented at the top of each C file, next to the code reading them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.bounds import check_window
from ge_hub.ops import get_schema
from ge_hub.ops.resize import nearest_index as _nearest_index
from ge_hub.ops.resize import resize_plan as _resize_plan
from ge_hub.ops.resize import source_coords as _source_coords
from ge_hub.ops.window import conv_transpose_layout as _conv_transpose_layout
from ge_hub.ops.window import layout as _layout
from ge_hub.ops.window import window as _window
from ge_hub.registry import KernelSpec

F32 = DType.FLOAT32
FLOAT_BYTES = 4
MAX_SPATIAL = 3  # window ops run as 3-D in C

# Conv paths (NN_CONV_* in nn_conv.c).
CONV_POINTWISE, CONV_IM2COL, CONV_DEPTHWISE, CONV_WINOGRAD, CONV_PACKED = 0, 1, 2, 3, 4
# The packed GEMM's panel sizes (NN_PACK_MR, NN_PACK_NR in core/kernels/nn_gemm_packed.h):
# constant Conv weights are laid out here as its packed A.
PACK_MR, PACK_NR, PACK_KC = 12, 32, 256
# The packed path gathers the input patches of at most this many floats at a time.
PACKED_MAX_FLOATS = 1 << 18
# The im2col buffer holds at most this many floats; larger convolutions are done in
# blocks of output positions, which also keeps each block's columns in cache.
IM2COL_MAX_FLOATS = 1 << 18
# Winograd F(2x2, 3x3) pays off once its 16 products are real GEMMs: enough channels
# on both sides and enough 2x2 output tiles. Measured against the packed path on
# ResNet-18's 3x3 layers, it wins down to the 7x7 maps of 512 channels (16 tiles: one
# narrow panel), whose direct product wastes a third of a second 32-wide panel. Its
# transformed tiles are processed in blocks whose buffers (16 * (Cg + Mg) floats per
# tile) stay within this many floats (half a core's L2).
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_TILES = 16
WINOGRAD_MAX_FLOATS = 1 << 17
# With enough blocks, Winograd runs up to this many of them side by side, each in its own
# scratch area on one thread, instead of splitting every stage of a block over the pool
# (three barriers a block, which small channel counts cannot pay for).
WINOGRAD_SLOTS = 4
# Softmax over a middle axis splits its work into at most this many scratch slots.
SOFTMAX_MAX_SLOTS = 16
SOFTMAX_SLOT_WORK = 16384


def _attrs(node: Node) -> dict:
    """The node's attributes with the op's defaults filled in."""
    return get_schema(node.op, node.domain).fill_attrs(dict(node.attrs), node.name)


def _fail(node: Node):
    def fail(message: str):
        raise OpError(f"{node.op} node {node.name!r}: {message}")

    return fail


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def _static(types: Sequence[TensorType | None]) -> bool:
    return all(t is None or (t.shape is not None and t.is_static) for t in types)


# -- MatMul and Gemm --------------------------------------------------------------------


def _contiguous_strides(shape: Sequence[int], unit: int) -> list[int]:
    strides, step = [], unit
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def _batch_strides(batch: Sequence[int], own: Sequence[int], unit: int) -> list[int]:
    """Offsets (in elements) between consecutive matrices of an operand whose batch dims
    `own` broadcast to `batch`: contiguous strides, 0 along broadcast dims."""
    own = [1] * (len(batch) - len(own)) + list(own)
    strides = _contiguous_strides(own, unit)
    return [0 if d == 1 else s for d, s in zip(own, strides)]


def _collapse(shape: list[int], *strides: list[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every operand walks contiguously."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    shape = [shape[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    i = len(shape) - 2
    while i >= 0:
        if all(s[i] == s[i + 1] * shape[i + 1] for s in strides):
            shape[i:i + 2] = [shape[i] * shape[i + 1]]
            for s in strides:
                s[i:i + 2] = [s[i + 1]]
        i -= 1
    return shape, strides


def pack_matmul(node, input_types, output_types) -> Packed:
    a, b = input_types[0].shape, input_types[1].shape
    a = (1, *a) if len(a) == 1 else tuple(a)
    b = (*b, 1) if len(b) == 1 else tuple(b)
    m, k, n = a[-2], a[-1], b[-1]
    batch = list(np.broadcast_shapes(a[:-2], b[:-2]))
    shape, (a_strides, b_strides) = _collapse(
        batch, _batch_strides(batch, a[:-2], m * k), _batch_strides(batch, b[:-2], k * n))
    if len(shape) == 1 and b_strides[0] == 0 and a_strides[0] == m * k:
        # B is shared by every batch and A's matrices are back to back: one tall GEMM.
        m, shape, a_strides, b_strides = m * shape[0], [], [], []
    return Packed(pack_values([m, n, k, len(shape), *shape, *a_strides, *b_strides]))


def pack_gemm(node, input_types, output_types) -> Packed:
    attrs = _attrs(node)
    a, b = input_types[0].shape, input_types[1].shape
    trans_a, trans_b = int(attrs["transA"]), int(attrs["transB"])
    m, k = (a[1], a[0]) if trans_a else (a[0], a[1])
    n = b[0] if trans_b else b[1]
    has_c = len(input_types) > 2 and input_types[2] is not None
    row_stride = col_stride = 0
    if has_c:
        c = (1,) * (2 - len(input_types[2].shape)) + tuple(input_types[2].shape)
        row_stride = c[1] if c[0] != 1 else 0
        col_stride = 1 if c[1] != 1 else 0
    return Packed(pack_values([m, n, k, trans_a, trans_b, int(has_c), row_stride, col_stride],
                              [attrs["alpha"], attrs["beta"]]))


def supports_matmul(node, input_types, output_types) -> bool:
    # The C walks at most GE_MAX_RANK (8) batch dims.
    return _static(input_types) and len(output_types[0].shape) <= 2 + 8


def supports_static(node, input_types, output_types) -> bool:
    return _static(input_types)


def supports_nonempty(node, input_types, output_types) -> bool:
    return _static(input_types) and _numel(input_types[0].shape) > 0


# -- sliding windows --------------------------------------------------------------------


def _window_ints(in_dims, out_dims, kernel, strides, dilations, pads) -> list[int]:
    """The 18 window ints of nn_common.h, padded in front to 3 spatial axes."""
    lead = MAX_SPATIAL - len(in_dims)
    ints: list[int] = []
    for values, filler in ((in_dims, 1), (out_dims, 1), (kernel, 1), (strides, 1),
                           (dilations, 1), (pads, 0)):
        ints += [filler] * lead + [int(v) for v in values]
    return ints


def _spatial_ok(input_types) -> bool:
    x = input_types[0]
    return _static(input_types) and 3 <= len(x.shape) <= 2 + MAX_SPATIAL and _numel(x.shape) > 0


def _conv_window(node, input_types):
    attrs = _attrs(node)
    x, w = input_types[0].shape, input_types[1].shape
    kernel = attrs["kernel_shape"] or w[2:]
    return attrs, _window(attrs, len(x) - 2, kernel, _fail(node))


@dataclasses.dataclass(frozen=True)
class ConvPlan:
    """How one Conv node runs: the path, and the sizes its blob and scratch carry."""

    path: int
    n: int
    c: int
    m: int
    group: int
    has_bias: int
    block: int
    winograd_block: int
    winograd_slots: int
    scratch: int
    window_ints: list


def _conv_plan(node, input_types) -> ConvPlan:
    attrs, window = _conv_window(node, input_types)
    x, w = input_types[0].shape, input_types[1].shape
    n, c, m, group = x[0], x[1], w[0], attrs["group"]
    in_dims = list(x[2:])
    out_dims, pads = _layout(window, in_dims)
    check_window(node, window, in_dims, out_dims, pads)
    begins = [p[0] for p in pads]
    has_bias = int(len(input_types) > 2 and input_types[2] is not None)
    taps = _numel(window.kernel)
    out_size = _numel(out_dims)
    cg, mg = c // group, m // group
    rows = cg * taps
    winograd_block = winograd_slots = 0
    weights_known = len(node.inputs) > 1 and node.inputs[1] is not None \
        and node.inputs[1].const is not None
    # Whole panels of output positions, as many as fit the budget (at least one).
    packed_block = PACK_NR * min(max(1, PACKED_MAX_FLOATS // (rows * PACK_NR)),
                                 -(-out_size // PACK_NR))
    if group == c == m:
        path, block, scratch = CONV_DEPTHWISE, 1, 0
    elif weights_known and _winograd_fits(window, cg, mg, out_dims) \
            and np.isfinite(node.inputs[1].const).all():
        tiles = math.prod((d + 1) // 2 for d in out_dims)
        # about equal blocks, as large as the budget allows, in whole panels of tiles
        blocks = -(-tiles // max(1, WINOGRAD_MAX_FLOATS // (16 * (cg + mg))))
        winograd_block = min(tiles, -(-tiles // (blocks * PACK_NR)) * PACK_NR)
        winograd_slots = min(WINOGRAD_SLOTS, -(-tiles // winograd_block))
        area = 16 * (cg * -(-winograd_block // PACK_NR) * PACK_NR + mg * winograd_block)
        # the packed path is the fallback for data holding inf or NaN
        path, block = CONV_WINOGRAD, packed_block
        scratch = max(rows * block, winograd_slots * area) * FLOAT_BYTES
    elif weights_known:
        path, block, scratch = CONV_PACKED, packed_block, rows * packed_block * FLOAT_BYTES
    elif taps == 1 and list(out_dims) == in_dims and all(s == 1 for s in window.strides) \
            and not any(begins):
        path, block, scratch = CONV_POINTWISE, 1, 0
    else:
        block = max(1, min(out_size, IM2COL_MAX_FLOATS // rows))
        path, scratch = CONV_IM2COL, rows * block * FLOAT_BYTES
    return ConvPlan(path, n, c, m, group, has_bias, block, winograd_block, winograd_slots,
                    scratch, _window_ints(in_dims, out_dims, window.kernel, window.strides,
                                          window.dilations, begins))


def pack_conv(node, input_types, output_types) -> Packed:
    plan = _conv_plan(node, input_types)
    ints = [plan.path, plan.n, plan.c, plan.m, plan.group, plan.has_bias, plan.block,
            plan.winograd_block, plan.winograd_slots, *plan.window_ints]
    return Packed(pack_values(ints), scratch_bytes=plan.scratch)


def prepack_conv(node, input_types, output_types) -> dict[int, np.ndarray]:
    """The weights of the packed and Winograd paths, laid out for their GEMMs (see
    core/kernels/nn_conv.c): the packed path's as the packed A of every group, (groups,
    floats); Winograd's
    as its transformed kernels U, then the packed path's weights (its fallback)."""
    plan = _conv_plan(node, input_types)
    if plan.path not in (CONV_PACKED, CONV_WINOGRAD):
        return {}
    mg = plan.m // plan.group
    weights = np.asarray(node.inputs[1].const, dtype=np.float32).reshape(plan.group, mg, -1)
    packed = _pack_panels(weights)
    if plan.path == CONV_PACKED:
        return {1: packed}
    transformed = _winograd_kernels(weights.reshape(plan.group, mg, -1, 3, 3))
    return {1: np.concatenate([transformed.reshape(-1), packed.reshape(-1)])}


def _pack_panels(a: np.ndarray) -> np.ndarray:
    """(groups, rows, k) matrices as the packed GEMM's A (core/kernels/nn_gemm_packed.h),
    one flat run per group: k in slices of PACK_KC, each slice holding every panel of
    PACK_MR rows (zero rows past the end) for its values of k, one panel after another."""
    groups, rows, k = a.shape
    panels = -(-rows // PACK_MR)
    padded = np.zeros((groups, panels * PACK_MR, k), np.float32)
    padded[:, :rows] = a
    by_panel = padded.reshape(groups, panels, PACK_MR, k).transpose(0, 1, 3, 2)
    slices = [by_panel[:, :, k0:k0 + PACK_KC].reshape(groups, -1)
              for k0 in range(0, k, PACK_KC)]
    return np.ascontiguousarray(np.concatenate(slices, axis=1) if slices
                                else np.zeros((groups, 0), np.float32))


# Winograd F(2x2, 3x3)'s kernel transform: U = G g G^T (core/kernels/nn_winograd.c).
_WINOGRAD_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def _winograd_kernels(weights: np.ndarray) -> np.ndarray:
    """(groups, mg, cg, 3, 3) kernels -> for each group and each of the 16 positions xi of
    the 4x4 transform, U[xi] (mg x cg) as the packed GEMM's A: (groups, 16, floats).
    Computed in float64 and rounded once."""
    groups, mg, cg = weights.shape[:3]
    u = np.einsum("ik,gmckl,jl->gijmc", _WINOGRAD_G, weights.astype(np.float64), _WINOGRAD_G)
    u = u.astype(np.float32).reshape(groups * 16, mg, cg)
    return _pack_panels(u).reshape(groups, 16, -1)


def _winograd_fits(window, cg: int, mg: int, out_dims) -> bool:
    """A 2-D 3x3 convolution with stride 1 and dilation 1, large enough to gain."""
    tiles = math.prod((d + 1) // 2 for d in out_dims)
    return (window.kernel == (3, 3) and window.strides == (1, 1) and window.dilations == (1, 1)
            and min(cg, mg) >= WINOGRAD_MIN_CHANNELS and tiles >= WINOGRAD_MIN_TILES)


def pack_conv_transpose(node, input_types, output_types) -> Packed:
    attrs, window = _conv_window(node, input_types)
    x, w = input_types[0].shape, input_types[1].shape
    n, c, group = x[0], x[1], attrs["group"]
    mg = w[1]
    in_dims = list(x[2:])
    out_dims, pads = _conv_transpose_layout(window, attrs, in_dims)
    check_window(node, window, in_dims, out_dims, pads)
    has_bias = int(len(input_types) > 2 and input_types[2] is not None)
    ints = [n, c, mg * group, group, has_bias]
    ints += _window_ints(in_dims, out_dims, window.kernel, window.strides, window.dilations,
                         [p[0] for p in pads])
    scratch = mg * _numel(window.kernel) * _numel(in_dims) * FLOAT_BYTES
    return Packed(pack_values(ints), scratch_bytes=scratch)


def supports_conv(node, input_types, output_types) -> bool:
    return _spatial_ok(input_types) and _numel(output_types[0].shape) > 0


def supports_conv_transpose(node, input_types, output_types) -> bool:
    if not supports_conv(node, input_types, output_types):
        return False
    attrs, window = _conv_window(node, input_types)
    out_dims, pads = _conv_transpose_layout(window, attrs, list(input_types[0].shape[2:]))
    # pads is None only for symbolic dims, which specialization has already removed.
    return pads is not None and list(out_dims) == list(output_types[0].shape[2:])


def _pool_window(node, input_types):
    attrs = _attrs(node)
    spatial = len(input_types[0].shape) - 2
    window = _window(attrs, spatial, attrs["kernel_shape"], _fail(node),
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
    ints += _window_ints(in_dims, out_dims, window.kernel, window.strides, window.dilations,
                         [p[0] for p in pads])
    return Packed(pack_values(ints + multipliers))


def pack_average_pool(node, input_types, output_types) -> Packed:
    attrs, window, out_dims, pads = _pool_window(node, input_types)
    x = input_types[0].shape
    in_dims = list(x[2:])
    # count_include_pad counts cells up to the end of the explicit padding
    count_end = [1] * (MAX_SPATIAL - len(in_dims)) + [d + p[1] for d, p in zip(in_dims, pads)]
    ints = [x[0] * x[1], int(attrs["count_include_pad"])]
    ints += _window_ints(in_dims, out_dims, window.kernel, window.strides, window.dilations,
                         [p[0] for p in pads])
    return Packed(pack_values(ints + count_end))


def supports_pool(node, input_types, output_types) -> bool:
    return _spatial_ok(input_types)


def pack_global_pool(node, input_types, output_types) -> Packed:
    x = input_types[0].shape
    return Packed(pack_values([x[0] * x[1], _numel(x[2:])]))


# -- normalization ----------------------------------------------------------------------


def pack_batch_norm(node, input_types, output_types) -> Packed:
    epsilon = float(_attrs(node)["epsilon"])
    x = input_types[0].shape
    inner = _numel(x[2:])
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
    return not _attrs(node)["training_mode"] and supports_nonempty(node, input_types,
                                                                   output_types)


def _period(param: TensorType, row_shape: Sequence[int]) -> int | None:
    """How many elements a LayerNormalization Scale or B repeats over along a row: its
    shape without leading 1s must be the row's trailing dims (None if it is not)."""
    shape = list(param.shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    if shape and list(row_shape[len(row_shape) - len(shape):]) != shape:
        return None
    return _numel(shape)


def _layer_norm_axis(node, x: TensorType) -> int:
    return _attrs(node)["axis"] % len(x.shape)


def pack_layer_norm(node, input_types, output_types) -> Packed:
    x = input_types[0]
    axis = _layer_norm_axis(node, x)
    row = x.shape[axis:]
    has_bias = len(input_types) > 2 and input_types[2] is not None
    bias_period = _period(input_types[2], row) if has_bias else 0
    ints = [_numel(x.shape[:axis]), _numel(row), _period(input_types[1], row), bias_period,
            len(output_types)]
    return Packed(pack_values(ints, [float(_attrs(node)["epsilon"])]))


def supports_layer_norm(node, input_types, output_types) -> bool:
    x = input_types[0]
    if not _static(input_types) or len(x.shape) == 0 or _attrs(node)["stash_type"] != 1:
        return False
    if any(t.dtype != F32 for t in output_types):
        return False
    row = x.shape[_layer_norm_axis(node, x):]
    params = [t for t in input_types[1:3] if t is not None]
    return _numel(row) > 0 and all(_period(t, row) is not None for t in params)


def pack_instance_norm(node, input_types, output_types) -> Packed:
    x = input_types[0].shape
    return Packed(pack_values([x[0], x[1], _numel(x[2:])], [float(_attrs(node)["epsilon"])]))


# -- Softmax ----------------------------------------------------------------------------


def pack_softmax(node, input_types, output_types) -> Packed:
    x = input_types[0].shape
    axis = _attrs(node)["axis"] % len(x)
    outer, length, inner = _numel(x[:axis]), x[axis], _numel(x[axis + 1:])
    if inner == 1:
        return Packed(pack_values([outer, length, inner, 1]))
    slots = max(1, min(outer, SOFTMAX_MAX_SLOTS, _numel(x) // SOFTMAX_SLOT_WORK))
    return Packed(pack_values([outer, length, inner, slots]),
                  scratch_bytes=slots * 2 * inner * FLOAT_BYTES)


def supports_softmax(node, input_types, output_types) -> bool:
    x = input_types[0]
    return _static(input_types) and len(x.shape) > 0 and _numel(x.shape) > 0


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
    return value is not None and _numel(value.type.shape or (0,)) > 0


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
    attrs = _attrs(node)
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
    attrs = _attrs(node)
    x = input_types[0]
    if not _static(input_types) or len(x.shape) != 4 or _numel(x.shape) == 0 \
            or _numel(output_types[0].shape) == 0:
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

SAME_AS_INPUT = ((0, 0),)  # (output, input) pairs that may share memory


def _kernel(op: str, symbol: str, dtypes, pack, supports=None, inplace=()) -> KernelSpec:
    return KernelSpec(op=op, name=symbol, dtypes=dtypes,
                      impl=CKernel(symbol, pack=pack, supports=supports, inplace=inplace))


KERNELS = [
    _kernel("MatMul", "ge_nn_matmul_f32", (F32, F32), pack_matmul, supports_matmul),
    _kernel("Gemm", "ge_nn_gemm_f32", (F32, F32), pack_gemm, supports_static),
    KernelSpec(op="Conv", name="ge_nn_conv_f32", dtypes=(F32, F32),
               impl=CKernel("ge_nn_conv_f32", pack=pack_conv, supports=supports_conv,
                            prepack=prepack_conv)),
    _kernel("ConvTranspose", "ge_nn_conv_transpose_f32", (F32, F32), pack_conv_transpose,
            supports_conv_transpose),
    _kernel("MaxPool", "ge_nn_max_pool_f32", (F32,), pack_max_pool, supports_pool),
    _kernel("AveragePool", "ge_nn_average_pool_f32", (F32,), pack_average_pool, supports_pool),
    _kernel("GlobalAveragePool", "ge_nn_global_average_pool_f32", (F32,), pack_global_pool,
            supports_nonempty),
    _kernel("GlobalMaxPool", "ge_nn_global_max_pool_f32", (F32,), pack_global_pool,
            supports_nonempty),
    _kernel("BatchNormalization", "ge_nn_batch_norm_f32", (F32,) * 5, pack_batch_norm,
            supports_batch_norm, SAME_AS_INPUT),
    _kernel("LayerNormalization", "ge_nn_layer_norm_f32", (F32, F32), pack_layer_norm,
            supports_layer_norm, SAME_AS_INPUT),
    _kernel("InstanceNormalization", "ge_nn_instance_norm_f32", (F32,) * 3,
            pack_instance_norm, supports_nonempty, SAME_AS_INPUT),
    _kernel("Softmax", "ge_nn_softmax_f32", (F32,), pack_softmax, supports_softmax,
            SAME_AS_INPUT),
    _kernel("LogSoftmax", "ge_nn_log_softmax_f32", (F32,), pack_softmax, supports_softmax,
            SAME_AS_INPUT),
    _kernel("Resize", "ge_nn_resize_f32", (F32,), pack_resize, supports_resize),
]
