"""ONNX ops that fit no larger family: bitwise logic, Hardmax, LpNormalization,
EyeLike, ReverseSequence, Det, Shrink, MeanVarianceNormalization, LpPool and GridSample.

Each follows the newest ONNX opset. The references are the oracle for kernels and
constant folding: floats are computed in float32 or wider (float64 for float64 data, as
`nn_common.work_dtype` says, and always for Det and GridSample's
interpolation) and rounded once to the output dtype; integers wrap around
like two's-complement C; every output has exactly the dtype inference promised.
"""

from __future__ import annotations

import itertools

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops.inference import (
    broadcast,
    normalize_axes,
    normalize_axis,
    same_as_input,
)
from ge_hub.ops.nn_common import (
    check_choice,
    check_flag,
    dim_or_sym,
    reference_fail,
    work_dtype,
)
from ge_hub.ops.schema import (
    ANY,
    FLOATS,
    INT64,
    INTEGERS,
    NUMERIC,
    REQUIRED,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)
from ge_hub.ops.window import layout, out_spatial, pad_spatial, window_views
from ge_hub.ops.window import window as make_window


def _work(x: np.ndarray) -> np.ndarray:
    """Float data in the dtype its reference computes in (half floats as float32)."""
    return x.astype(work_dtype(x.dtype))


# --- bitwise logic ----------------------------------------------------------------------


@op("BitwiseAnd", inputs=[Input("A", INTEGERS), Input("B", INTEGERS)], outputs=[Output("C")],
    infer=broadcast)
def bitwise_and(a, b):
    """C = A & B, bit by bit, broadcast."""
    return np.bitwise_and(a, b)


@op("BitwiseOr", inputs=[Input("A", INTEGERS), Input("B", INTEGERS)], outputs=[Output("C")],
    infer=broadcast)
def bitwise_or(a, b):
    """C = A | B, bit by bit, broadcast."""
    return np.bitwise_or(a, b)


@op("BitwiseXor", inputs=[Input("A", INTEGERS), Input("B", INTEGERS)], outputs=[Output("C")],
    infer=broadcast)
def bitwise_xor(a, b):
    """C = A ^ B, bit by bit, broadcast."""
    return np.bitwise_xor(a, b)


@op("BitwiseNot", inputs=[Input("X", INTEGERS)], outputs=[Output("Y")], infer=same_as_input)
def bitwise_not(x):
    """Y = ~X: every bit flipped (-x - 1 for signed integers)."""
    return np.invert(x)


# --- Hardmax, LpNormalization -----------------------------------------------------------


def _infer_along_axis(ctx: InferenceContext) -> list[TensorType]:
    """Same type as the input; attribute 'axis' must fit its rank."""
    normalize_axis(ctx, ctx.attrs["axis"], ctx.input(0).rank, "attribute 'axis'")
    if "p" in ctx.attrs and ctx.attrs["p"] not in (1, 2):
        ctx.fail(f"attribute 'p' must be 1 or 2, got {ctx.attrs['p']}")
    return [ctx.input(0)]


@op("Hardmax", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_along_axis, attrs=[Attr("axis", AttrKind.INT, -1)])
def hardmax(x, *, axis):
    """output = 1 at the first maximum along `axis` (a NaN counts as the maximum), 0 elsewhere."""
    if not -x.ndim <= axis < x.ndim:
        raise OpError(f"Hardmax: attribute 'axis' {axis} is out of range for rank {x.ndim}")
    winner = np.expand_dims(np.argmax(_work(x), axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape([-1 if a == axis % x.ndim else 1
                                                  for a in range(x.ndim)])
    return (positions == winner).astype(x.dtype)


@op("LpNormalization", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_along_axis, attrs=[Attr("axis", AttrKind.INT, -1), Attr("p", AttrKind.INT, 2)])
def lp_normalization(x, *, axis, p):
    """output = input / (L1 or L2 norm of input along `axis`); 0 where the norm is 0."""
    if p not in (1, 2):
        raise OpError(f"LpNormalization: attribute 'p' must be 1 or 2, got {p}")
    if not -x.ndim <= axis < x.ndim:
        raise OpError(f"LpNormalization: attribute 'axis' {axis} is out of range for rank "
                      f"{x.ndim}")
    work = _work(x)
    if p == 1:
        norm = np.sum(np.abs(work), axis=axis, keepdims=True)
    else:
        norm = np.sqrt(np.sum(np.square(work), axis=axis, keepdims=True))
    # The spec defines 0/0 as 0 here; dividing by 1 instead keeps NumPy quiet.
    safe = np.where(norm == 0, 1, norm)
    return np.where(norm == 0, 0, work / safe).astype(x.dtype)


# --- EyeLike ----------------------------------------------------------------------------


def _infer_eye_like(ctx: InferenceContext) -> list[TensorType]:
    ctx.require_rank(0, 2)
    x = ctx.input(0)
    dtype = ctx.attrs["dtype"] or x.dtype
    shape = x.shape if x.shape is not None else (ctx.new_sym("rows"), ctx.new_sym("cols"))
    return [TensorType(dtype, shape)]


@op("EyeLike", inputs=[Input("input", ANY)], outputs=[Output("output")],
    infer=_infer_eye_like, attrs=[Attr("dtype", AttrKind.DTYPE, None), Attr("k", AttrKind.INT, 0)])
def eye_like(x, *, dtype, k):
    """A matrix of the input's shape, 1 on diagonal `k` (above the main one when k > 0),
    0 elsewhere; of dtype `dtype`, or of the input's dtype when it is not given."""
    if x.ndim != 2:
        raise OpError(f"EyeLike: input 'input' must have rank 2, got shape {x.shape}")
    target = DType.parse(dtype).numpy if dtype is not None else x.dtype
    return np.eye(x.shape[0], x.shape[1], k, dtype=np.float32).astype(target)


# --- ReverseSequence --------------------------------------------------------------------


def _infer_reverse_sequence(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    rank = ctx.require_rank(0, at_least=2)
    batch_axis, time_axis = ctx.attrs["batch_axis"], ctx.attrs["time_axis"]
    # ONNX allows only axes 0 and 1; other axes would work the same, but exporters
    # never write them, and refusing keeps other backends' results comparable.
    if {batch_axis, time_axis} != {0, 1}:
        ctx.fail(f"attributes 'batch_axis' and 'time_axis' must be 0 and 1 in some order, "
                 f"got batch_axis={batch_axis}, time_axis={time_axis}")
    ctx.require_rank(1, 1)
    lens = ctx.input(1)
    if rank is not None and lens.shape is not None:
        batch, count = x.shape[batch_axis], lens.shape[0]
        if isinstance(batch, int) and isinstance(count, int) and batch != count:
            ctx.fail(f"input 'sequence_lens' {lens} must have one length per batch entry "
                     f"(axis {batch_axis} of 'input' {x}: {batch})")
    return [x]


@op("ReverseSequence", inputs=[Input("input", ANY), Input("sequence_lens", INT64, type_var="L")],
    outputs=[Output("Y")], infer=_infer_reverse_sequence,
    attrs=[Attr("batch_axis", AttrKind.INT, 1), Attr("time_axis", AttrKind.INT, 0)])
def reverse_sequence(x, sequence_lens, *, batch_axis, time_axis):
    """For each batch entry b, reverse its first sequence_lens[b] steps along `time_axis`;
    the steps past them are copied as they are."""
    steps = x.shape[time_axis]
    lens = sequence_lens.reshape(-1)
    if lens.shape[0] != x.shape[batch_axis]:
        raise OpError(f"ReverseSequence: input 'sequence_lens' has {lens.shape[0]} lengths, "
                      f"expected one per batch entry ({x.shape[batch_axis]})")
    if np.any((lens < 0) | (lens > steps)):
        raise OpError(f"ReverseSequence: input 'sequence_lens' values must be in 0..{steps} "
                      f"(the size of time axis {time_axis}), got {lens.tolist()}")
    # source[b, t]: the time step that output step t of batch entry b reads.
    t = np.arange(steps)[None, :]
    source = np.where(t < lens[:, None], lens[:, None] - 1 - t, t)
    # Batch-major, time-second view of the data, so one gather does every entry.
    moved = np.moveaxis(x, (batch_axis, time_axis), (0, 1))
    index = source.reshape(source.shape + (1,) * (x.ndim - 2))
    gathered = np.take_along_axis(moved, index, axis=1)
    return np.moveaxis(gathered, (0, 1), (batch_axis, time_axis))


# --- Det --------------------------------------------------------------------------------


def _infer_det(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=2)
    if x.shape is None:
        return [TensorType(x.dtype, None)]
    rows, cols = x.shape[-2:]
    if isinstance(rows, int) and isinstance(cols, int) and rows != cols:
        ctx.fail(f"input 'X' {x} must hold square matrices in its last two dims, "
                 f"got {rows} x {cols}")
    return [TensorType(x.dtype, x.shape[:-2])]


@op("Det", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_det)
def det(x):
    """Y[...] = determinant of the square matrix X[..., :, :]."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise OpError(f"Det: input 'X' must hold square matrices in its last two dims, "
                      f"got shape {x.shape}")
    return np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)


# --- Shrink -----------------------------------------------------------------------------


@op("Shrink", inputs=[Input("input", NUMERIC - {DType.BFLOAT16})], outputs=[Output("output")],
    infer=same_as_input,
    attrs=[Attr("bias", AttrKind.FLOAT, 0.0), Attr("lambd", AttrKind.FLOAT, 0.5)])
def shrink(x, *, bias, lambd):
    """output = x + bias where x < -lambd, x - bias where x > lambd, 0 elsewhere;
    `lambd` and `bias` are first cast to the input's dtype (ints truncate)."""
    lambd_cast = float(np.asarray(lambd).astype(x.dtype))
    bias_cast = np.asarray(bias).astype(x.dtype)
    # Compare as float64 so that -lambd exists for unsigned inputs too.
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):  # integer results wrap, like C
        added, subtracted = x + bias_cast, x - bias_cast
    return np.where(wide < -lambd_cast, added,
                    np.where(wide > lambd_cast, subtracted, 0)).astype(x.dtype)


# --- MeanVarianceNormalization ----------------------------------------------------------

# The ONNX function body adds this to the standard deviation before dividing.
_MVN_EPSILON = 1e-9


def _infer_mvn(ctx: InferenceContext) -> list[TensorType]:
    normalize_axes(ctx, ctx.attrs["axes"], ctx.input(0).rank, "attribute 'axes'")
    return [ctx.input(0)]


@op("MeanVarianceNormalization", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_mvn, attrs=[Attr("axes", AttrKind.INTS, [0, 2, 3])])
def mean_variance_normalization(x, *, axes):
    """Y = (X - mean) / (std + 1e-9), mean and (population) std taken over `axes`."""
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise OpError(f"MeanVarianceNormalization: attribute 'axes' {axes} is out of "
                          f"range for 'X' of rank {x.ndim}")
    work = _work(x)
    axes = tuple(a % x.ndim for a in axes)
    centered = work - np.mean(work, axis=axes, keepdims=True)
    # E[(X - EX)^2] rather than E[X^2] - (EX)^2: the same value, never negative.
    std = np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True))
    return (centered / (std + _MVN_EPSILON)).astype(x.dtype)


# --- LpPool -----------------------------------------------------------------------------


def _infer_lp_pool(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=3)
    kernel = ctx.attrs["kernel_shape"]
    spatial = len(kernel)
    if x.rank is not None and x.rank - 2 != spatial:
        ctx.fail(f"attribute 'kernel_shape' {kernel} has {spatial} values but input 'X' "
                 f"{x} has {x.rank - 2} spatial dims")
    check_flag(ctx, "ceil_mode")
    if ctx.attrs["p"] < 1:
        ctx.fail(f"attribute 'p' must be >= 1, got {ctx.attrs['p']}")
    window = make_window(ctx.attrs, spatial, kernel, ctx.fail, bool(ctx.attrs["ceil_mode"]))
    shape = (dim_or_sym(ctx, x, 0, "N"), dim_or_sym(ctx, x, 1, "C"),
             *out_spatial(ctx, window, x, spatial))
    return [TensorType(x.dtype, shape)]


@op("LpPool", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_lp_pool,
    attrs=[Attr("auto_pad", AttrKind.STRING, "NOTSET"), Attr("ceil_mode", AttrKind.INT, 0),
           Attr("dilations", AttrKind.INTS, None), Attr("kernel_shape", AttrKind.INTS, REQUIRED),
           Attr("p", AttrKind.INT, 2), Attr("pads", AttrKind.INTS, None),
           Attr("strides", AttrKind.INTS, None)])
def lp_pool(x, *, auto_pad, ceil_mode, dilations, kernel_shape, p, pads, strides):
    """Y = (sum of |X|^p over each (dilated) kernel window) ^ (1/p); padding counts as 0."""
    fail = reference_fail("LpPool")
    if p < 1:
        fail(f"attribute 'p' must be >= 1, got {p}")
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides)
    window = make_window(attrs, x.ndim - 2, kernel_shape, fail, bool(ceil_mode))
    out_dims, pads_used = layout(window, x.shape[2:])
    powered = np.abs(_work(x)) ** p
    padded = pad_spatial(powered, [b for b, _, _ in pads_used],
                         [e + over for _, e, over in pads_used], 0)
    total = sum(view for _, view in window_views(padded, window, out_dims))
    return (total ** (1.0 / p)).astype(x.dtype)


# --- GridSample -------------------------------------------------------------------------

GRID_SAMPLE_MODES = ("linear", "nearest", "cubic")
GRID_SAMPLE_PADDINGS = ("zeros", "border", "reflection")
# Keys' cubic convolution parameter, as in PyTorch's bicubic grid_sample.
_CUBIC_A = -0.75


def _infer_grid_sample(ctx: InferenceContext) -> list[TensorType]:
    check_choice(ctx, "mode", GRID_SAMPLE_MODES)
    check_choice(ctx, "padding_mode", GRID_SAMPLE_PADDINGS)
    check_flag(ctx, "align_corners")
    x, grid = ctx.input(0), ctx.input(1)
    x_rank = ctx.require_rank(0, at_least=3)
    grid_rank = ctx.require_rank(1, at_least=3)
    if x_rank is not None and grid_rank is not None and x_rank != grid_rank:
        ctx.fail(f"input 'grid' {grid} must have the rank of 'X' {x} ({x_rank}): "
                 f"(N, *output spatial dims, {x_rank - 2})")
    if grid.shape is None:
        if x_rank is None:
            return [TensorType(x.dtype, None)]
        out = (ctx.new_sym("out") for _ in range(x_rank - 2))
        return [TensorType(x.dtype, (x.shape[0], x.shape[1], *out))]
    spatial = grid.shape[-1]
    if isinstance(spatial, int) and spatial != grid.rank - 2:
        ctx.fail(f"input 'grid' {grid} must end in a dim of {grid.rank - 2} (one coordinate "
                 f"per spatial dim), got {spatial}")
    if x.shape is not None:
        n_x, n_grid = x.shape[0], grid.shape[0]
        if isinstance(n_x, int) and isinstance(n_grid, int) and n_x != n_grid:
            ctx.fail(f"input 'grid' {grid} and 'X' {x} must have the same batch size, "
                     f"got {n_grid} and {n_x}")
    batch = x.shape[0] if x.shape is not None and isinstance(x.shape[0], int) else grid.shape[0]
    return [TensorType(x.dtype, (batch, dim_or_sym(ctx, x, 1, "C"), *grid.shape[1:-1]))]


def _reflect(coord: np.ndarray, low: float, high: float) -> np.ndarray:
    """Fold coordinates outside [low, high] back in, bouncing off both ends as often as
    needed: with low=-1, high=1, -3.5 -> 1.5 -> 0.5."""
    span = high - low
    if span <= 0:
        return np.full_like(coord, low)
    below, above = coord < low, coord > high
    past = np.where(below, low - coord, np.where(above, coord - high, 0.0))
    bounces = np.floor(past / span)
    rest = past - bounces * span
    even = bounces % 2 == 0
    from_below = np.where(even, low + rest, high - rest)
    from_above = np.where(even, high - rest, low + rest)
    return np.where(below, from_below, np.where(above, from_above, coord))


def _cubic_weight(distance: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel at |distance| < 2."""
    d = np.abs(distance)
    near = ((_CUBIC_A + 2) * d - (_CUBIC_A + 3)) * d * d + 1
    far = ((_CUBIC_A * d - 5 * _CUBIC_A) * d + 8 * _CUBIC_A) * d - 4 * _CUBIC_A
    return np.where(d <= 1, near, far)


def _sample_taps(coord: np.ndarray, mode: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(index, weight) of every input cell that one axis of an interpolation reads."""
    if mode == "nearest":
        return [(np.trunc(coord).astype(np.int64), np.ones_like(coord))]
    base = np.floor(coord)
    t = coord - base
    base = base.astype(np.int64)
    if mode == "linear":
        return [(base, 1 - t), (base + 1, t)]
    return [(base + offset, _cubic_weight(t - offset)) for offset in (-1, 0, 1, 2)]


@op("GridSample", inputs=[Input("X", NUMERIC), Input("grid", FLOATS, type_var="T2")],
    outputs=[Output("Y")], infer=_infer_grid_sample,
    attrs=[Attr("align_corners", AttrKind.INT, 0), Attr("mode", AttrKind.STRING, "linear"),
           Attr("padding_mode", AttrKind.STRING, "zeros")])
def grid_sample(x, grid, *, align_corners, mode, padding_mode):
    """Y[n, c, *p] = X[n, c] interpolated (`mode`) at the position grid[n, *p, :], whose
    coordinates run from -1 to 1 over each spatial dim, innermost dim first; positions
    outside X read 0, the border, or X reflected at its border (`padding_mode`)."""
    fail = reference_fail("GridSample")
    if mode not in GRID_SAMPLE_MODES:
        fail(f"attribute 'mode' must be one of {', '.join(GRID_SAMPLE_MODES)}, got {mode!r}")
    if padding_mode not in GRID_SAMPLE_PADDINGS:
        fail(f"attribute 'padding_mode' must be one of {', '.join(GRID_SAMPLE_PADDINGS)}, "
             f"got {padding_mode!r}")
    spatial = x.ndim - 2
    if spatial < 1 or grid.ndim != x.ndim or grid.shape[-1] != spatial \
            or grid.shape[0] != x.shape[0]:
        fail(f"input 'grid' of shape {grid.shape} must be (N, *output dims, {spatial}) "
             f"for 'X' of shape {x.shape}")
    sizes = x.shape[2:]
    # Positions in the grid's own precision, as PyTorch computes them: which side of a
    # half-way point "nearest" lands on depends on it.
    positions = grid.astype(work_dtype(grid.dtype))
    taps_per_axis = []
    for axis, size in enumerate(sizes):
        g = positions[..., spatial - 1 - axis]
        if align_corners:
            coord, low, high = (g + 1) / 2 * (size - 1), 0.0, size - 1.0
        else:
            coord, low, high = ((g + 1) * size - 1) / 2, -0.5, size - 0.5
        coord = coord.astype(np.float64)
        if mode == "nearest":
            coord = np.rint(coord)  # half-way goes to the even index
        if padding_mode == "border":
            coord = np.where((coord < low) | (coord > high), np.clip(coord, 0, size - 1), coord)
        elif padding_mode == "reflection":
            coord = _reflect(coord, low, high)
        resolved = []
        for index, weight in _sample_taps(coord, mode):
            # Interpolation taps past the edge follow the padding mode too.
            if padding_mode == "zeros":
                inside = (index >= 0) & (index < size)
                weight = np.where(inside, weight, 0.0)
            elif padding_mode == "reflection":
                index = np.trunc(_reflect(index.astype(np.float64), low, high)).astype(np.int64)
            resolved.append((np.clip(index, 0, size - 1), weight))
        taps_per_axis.append(resolved)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * spatial)
    values = x.astype(np.float64)
    total = np.zeros((x.shape[0], *grid.shape[1:-1], x.shape[1]))
    for taps in itertools.product(*taps_per_axis):
        weight = np.prod([w for _, w in taps], axis=0)
        # Advanced indices around a slice put the gathered dims first: (N, *out, C).
        gathered = values[(batch, slice(None), *(index for index, _ in taps))]
        total += gathered * weight[..., None]
    result = np.moveaxis(total, -1, 1)
    if DType.from_numpy(x.dtype).is_float:
        return result.astype(x.dtype)
    # Integers: computed as floats and cast at the end (truncating), within range.
    info = np.iinfo(x.dtype)
    return np.trunc(np.clip(result, info.min, info.max)).astype(x.dtype)
