"""Resampling ops. Resize: along chosen axes to `sizes` or by `scales`, with nearest,
linear or cubic interpolation (optionally antialiased when downsampling), separably per
axis. GridSample: at the positions a grid gives (interpolated in float64). RoiAlign:
bilinear samples pooled over regions of interest.

The coordinate helpers (`resize_plan`, `source_coords`, `nearest_index`) are shared
with Resize's C-kernel packer (`ge_hub.kernels.resize`), so the kernel samples exactly
where the reference does.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_mul
from ge_hub.ops.inference import normalize_axes
from ge_hub.ops.nn_common import (
    check_choice,
    check_flag,
    dim_or_sym,
    is_float,
    reference_fail,
    work_dtype,
)
from ge_hub.ops.schema import (
    FLOATS,
    INT64,
    NUMERIC,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)

RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _given(ctx: InferenceContext, index: int) -> bool:
    """An optional Resize input counts as given unless absent or empty (older exporters
    pass an empty tensor for 'absent')."""
    if not ctx.has_input(index):
        return False
    shape = ctx.input(index).shape
    return not (shape is not None and 0 in shape)


def _scaled_dim(ctx: InferenceContext, dim: Dim, scale: float) -> Dim:
    if isinstance(dim, int):
        return int(np.floor(dim * np.float64(scale)))
    if float(scale).is_integer():
        return dim_mul(dim, int(scale))
    return ctx.new_sym("resize")


def _round_half_up(value: float) -> int:
    return int(np.floor(value + 0.5))


def _aspect_scale(policy: str, ratios: Sequence[float]) -> float:
    return min(ratios) if policy == "not_larger" else max(ratios)


def _infer_resize(ctx: InferenceContext) -> list[TensorType]:
    x, attrs = ctx.input(0), ctx.attrs
    check_choice(ctx, "mode", RESIZE_MODES)
    check_choice(ctx, "coordinate_transformation_mode", COORDINATE_MODES)
    check_choice(ctx, "nearest_mode", NEAREST_MODES)
    check_choice(ctx, "keep_aspect_ratio_policy", ASPECT_POLICIES)
    check_flag(ctx, "exclude_outside")
    check_flag(ctx, "antialias")
    with_scales, with_sizes = _given(ctx, 2), _given(ctx, 3)
    if with_scales == with_sizes:
        ctx.fail("exactly one of inputs 'scales' and 'sizes' must be given, got "
                 + ("both" if with_scales else "neither"))
    index = 2 if with_scales else 3
    ctx.require_rank(index, 1)
    if x.rank is None:
        return [TensorType(x.dtype, None)]
    axes = normalize_axes(ctx, attrs["axes"] if attrs["axes"] is not None else range(x.rank),
                          x.rank, "attribute 'axes'")
    t = ctx.input(index)
    name = ctx.schema.input_name(index)
    if t.shape is not None and isinstance(t.shape[0], int) and t.shape[0] != len(axes):
        ctx.fail(f"input {name!r} must have {len(axes)} values (one per resized axis), "
                 f"got {t}")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and \
            not _given(ctx, 1):
        ctx.fail("input 'roi' is required when coordinate_transformation_mode is "
                 "'tf_crop_and_resize'")
    shape = list(x.shape)
    values = ctx.const(index)
    if values is None:
        for a in axes:
            shape[a] = ctx.new_sym("resize")
        return [TensorType(x.dtype, shape)]
    values = values.reshape(-1).tolist()
    if any(v <= 0 if with_scales else v < 0 for v in values):
        ctx.fail(f"input {name!r} values must be {'> 0' if with_scales else '>= 0'}, "
                 f"got {values}")
    policy = attrs["keep_aspect_ratio_policy"]
    if with_scales:
        for a, s in zip(axes, values):
            shape[a] = _scaled_dim(ctx, shape[a], s)
    elif policy == "stretch":
        for a, s in zip(axes, values):
            shape[a] = int(s)
    elif all(isinstance(shape[a], int) and shape[a] > 0 for a in axes):
        scale = _aspect_scale(policy, [s / shape[a] for a, s in zip(axes, values)])
        for a in axes:
            shape[a] = _round_half_up(scale * shape[a])
    else:
        for a in axes:
            shape[a] = ctx.new_sym("resize")
    return [TensorType(x.dtype, shape)]


def _cubic_kernel(distance: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient `a`, at |distance| < 2."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0))


@dataclasses.dataclass(frozen=True)
class AxisResize:
    """How Resize maps one axis: `out` cells, at `scale`, over a resized `length` that
    is scale * input size (fractional when it comes from a scale, as ONNX's reference
    and conformance data have it) or exactly `out` for stretched `sizes`."""

    out: int
    scale: np.float32
    length: np.float32


def source_coords(mode: str, plan: AxisResize, size: int, roi: tuple) -> np.ndarray:
    """Where each output cell along one axis samples the input (float32, like ONNX
    Runtime, so that nearest-neighbour ties round the same way)."""
    f32 = np.float32
    x = np.arange(plan.out, dtype=f32)
    scale, length = plan.scale, plan.length
    if mode == "half_pixel":
        return (x + f32(0.5)) / scale - f32(0.5)
    if mode == "half_pixel_symmetric":
        adjustment = f32(plan.out) / length
        offset = f32(size) / f32(2) * (f32(1) - adjustment)
        return offset + (x + f32(0.5)) / scale - f32(0.5)
    if mode == "pytorch_half_pixel":
        return (x + f32(0.5)) / scale - f32(0.5) if length > 1 else np.zeros(plan.out, f32)
    if mode == "align_corners":
        return x * f32(size - 1) / (length - f32(1)) if length != 1 else np.zeros(plan.out, f32)
    if mode == "asymmetric":
        return x / scale
    start, end = f32(roi[0]), f32(roi[1])
    if length > 1:
        return start * f32(size - 1) + x * (end - start) * f32(size - 1) / (length - f32(1))
    return np.full(plan.out, f32(0.5) * (start + end) * f32(size - 1), dtype=f32)


def nearest_index(coords: np.ndarray, mode: str) -> np.ndarray:
    """The input index each source coordinate rounds to under `nearest_mode`."""
    if mode == "round_prefer_floor":
        return np.ceil(coords - np.float32(0.5))
    if mode == "round_prefer_ceil":
        return np.floor(coords + np.float32(0.5))
    return np.floor(coords) if mode == "floor" else np.ceil(coords)


def _antialias_taps(coords: np.ndarray, scale: float, attrs: dict):
    """Offsets and weights of the antialiasing filter for downsampling by `scale` < 1:
    the linear (triangle) or cubic kernel stretched by 1/scale, so that every input cell
    under an output cell contributes, normalized to sum 1.

    As in ONNX's reference, the window is counted from p = ceil(x) - 1 (the cell left of
    x, even when x is a whole number), at distances (i - (x - p)) * scale for offsets i
    in [start, 1 - start], where start = floor(-support / scale) + 1."""
    support = 1.0 if attrs["mode"] == "linear" else 2.0
    start = int(np.floor(-support / scale)) + 1
    offsets = np.arange(start, 2 - start)
    base = np.ceil(coords.astype(np.float64)) - 1
    ratio = coords.astype(np.float64) - base  # in (0, 1]
    distance = (offsets[:, None] - ratio[None, :]) * scale
    if attrs["mode"] == "linear":
        weights = np.clip(1 - np.abs(distance), 0, 1)
    else:
        weights = _cubic_kernel(distance, attrs["cubic_coeff_a"])
    return base, offsets, weights / weights.sum(axis=0, keepdims=True)


def _resize_axis(data: np.ndarray, axis: int, coords: np.ndarray, scale: float,
                 attrs: dict) -> np.ndarray:
    """Interpolate `data` along one axis at source coordinates `coords`; neighbours
    past the edges repeat the edge cell."""
    size = data.shape[axis]
    if attrs["mode"] == "nearest":
        index = np.clip(nearest_index(coords, attrs["nearest_mode"]), 0, size - 1)
        return np.take(data, index.astype(np.int64), axis=axis)
    if attrs["antialias"] and scale < 1:
        base, offsets, weights = _antialias_taps(coords, scale, attrs)
    else:
        base = np.floor(coords)
        t = (coords - base).astype(np.float64)
        if attrs["mode"] == "linear":
            offsets = np.array([0, 1])
            weights = np.stack([1 - t, t])
        else:
            offsets = np.array([-1, 0, 1, 2])
            weights = _cubic_kernel(offsets[:, None] - t[None, :], attrs["cubic_coeff_a"])
    taps = base.astype(np.int64)[None, :] + offsets[:, None]  # (taps, out)
    if attrs["exclude_outside"]:
        weights = np.where((taps >= 0) & (taps < size), weights, 0.0)
        weights = weights / weights.sum(axis=0, keepdims=True)
    taps = np.clip(taps, 0, size - 1)
    shape = [1] * data.ndim
    shape[axis] = len(coords)
    return sum(np.take(data, taps[j], axis=axis) * weights[j].reshape(shape)
               for j in range(len(offsets)))


def resize_plan(shape, axes, scales, sizes, policy) -> list[AxisResize]:
    """How each resized axis maps, as the ONNX spec derives it from scales or sizes."""
    f32 = np.float32
    if policy == "stretch" and scales is None:
        return [AxisResize(int(n), f32(n) / f32(shape[a]), f32(n)) for a, n in zip(axes, sizes)]
    if scales is None:
        scale = _aspect_scale(policy, [n / shape[a] for a, n in zip(axes, sizes)])
        scales = [scale] * len(axes)
        outs = [_round_half_up(scale * shape[a]) for a in axes]
    else:
        outs = [int(np.floor(shape[a] * np.float64(s))) for a, s in zip(axes, scales)]
    return [AxisResize(out, f32(s), f32(s) * f32(shape[a]))
            for a, s, out in zip(axes, scales, outs)]


@op("Resize",
    inputs=[Input("X", NUMERIC, "T1"),
            Input("roi", FLOATS, "T2", optional=True, decides_shape=True),
            Input("scales", frozenset({DType.FLOAT32}), "S", optional=True,
                  decides_shape=True),
            Input("sizes", INT64, "I", optional=True, decides_shape=True)],
    outputs=[Output("Y")], infer=_infer_resize,
    attrs=[Attr("antialias", AttrKind.INT, 0), Attr("axes", AttrKind.INTS, None),
           Attr("coordinate_transformation_mode", AttrKind.STRING, "half_pixel"),
           Attr("cubic_coeff_a", AttrKind.FLOAT, -0.75),
           Attr("exclude_outside", AttrKind.INT, 0),
           Attr("extrapolation_value", AttrKind.FLOAT, 0.0),
           Attr("keep_aspect_ratio_policy", AttrKind.STRING, "stretch"),
           Attr("mode", AttrKind.STRING, "nearest"),
           Attr("nearest_mode", AttrKind.STRING, "round_prefer_floor")])
def resize(x, roi=None, scales=None, sizes=None, **attrs):
    """Y = X resampled along `axes` to `sizes` or by `scales` (nearest, linear or cubic,
    separably per axis); integer data is rounded to nearest after interpolation.
    antialias=1 stretches the linear or cubic filter by 1/scale on downsampled axes."""
    if attrs["antialias"] not in (0, 1):
        raise OpError(f"Resize: attribute 'antialias' must be 0 or 1, got {attrs['antialias']}")
    rank = x.ndim
    axes = [a % rank for a in attrs["axes"]] if attrs["axes"] is not None else list(range(rank))
    scales = None if scales is None or scales.size == 0 else scales.reshape(-1).tolist()
    sizes = None if sizes is None or sizes.size == 0 else sizes.reshape(-1).tolist()
    plan = resize_plan(x.shape, axes, scales, sizes, attrs["keep_aspect_ratio_policy"])
    transform = attrs["coordinate_transformation_mode"]
    roi = None if roi is None or roi.size == 0 else roi.reshape(-1).tolist()
    # Nearest only gathers, so it keeps the data as it is (int64 stays exact).
    interpolating = attrs["mode"] != "nearest"
    work = work_dtype(x.dtype) if is_float(x.dtype) else np.dtype(np.float64)
    data = x.astype(work) if interpolating else x
    outside = np.zeros((1,) * rank, dtype=bool)
    for i, (a, axis_plan) in enumerate(zip(axes, plan)):
        box = (0.0, 1.0) if roi is None else (roi[i], roi[i + len(axes)])
        coords = source_coords(transform, axis_plan, x.shape[a], box)
        out = axis_plan.out
        if out == x.shape[a] and np.array_equal(coords, np.arange(out)):
            continue  # the identity map: leave the axis untouched
        data = _resize_axis(data, a, coords, float(axis_plan.scale), attrs)
        if transform == "tf_crop_and_resize":
            # TF CropAndResize: samples outside the input take extrapolation_value.
            shape = [1] * rank
            shape[a] = out
            outside = outside | ((coords < 0) | (coords > x.shape[a] - 1)).reshape(shape)
    if transform == "tf_crop_and_resize":
        data = np.where(outside, np.asarray(attrs["extrapolation_value"], dtype=work), data)
    if not is_float(x.dtype) and data.dtype != x.dtype:
        info = np.iinfo(x.dtype)
        data = np.clip(np.rint(data), info.min, info.max)
    return data.astype(x.dtype)


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


# --- RoiAlign -------------------------------------------------------------------------


def _infer_roi_align(ctx: InferenceContext) -> list[TensorType]:
    check_choice(ctx, "mode", ("avg", "max"))
    check_choice(ctx, "coordinate_transformation_mode", ("half_pixel", "output_half_pixel"))
    for name in ("output_height", "output_width"):
        if ctx.attrs[name] < 1:
            ctx.fail(f"attribute {name!r} must be >= 1, got {ctx.attrs[name]}")
    if ctx.attrs["sampling_ratio"] < 0:
        ctx.fail(f"attribute 'sampling_ratio' must be >= 0, got {ctx.attrs['sampling_ratio']}")
    x, rois, indices = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_rank(0, 4)
    ctx.require_rank(1, 2)
    ctx.require_rank(2, 1)
    if rois.shape is not None and isinstance(rois.shape[1], int) and rois.shape[1] != 4:
        ctx.fail(f"input 'rois' must be [num_rois, 4] (x1, y1, x2, y2), got {rois}")
    count = rois.shape[0] if rois.shape is not None else None
    if indices.shape is not None:
        other = indices.shape[0]
        if isinstance(count, int) and isinstance(other, int) and count != other:
            ctx.fail(f"input 'batch_indices' {indices} must have one entry per roi "
                     f"({count} in 'rois' {rois})")
        count = other if count is None or isinstance(other, int) else count
    if count is None:
        count = ctx.new_sym("rois")
    channels = x.shape[1] if x.shape is not None else ctx.new_sym("channels")
    return [TensorType(x.dtype, (count, channels, ctx.attrs["output_height"],
                                 ctx.attrs["output_width"]))]


def _bilinear_taps(coords: np.ndarray, size: int):
    """For sample coordinates along one axis: whether each is inside [-1, size], its
    low and high neighbours and their weights, as RoiAlign clamps them at the border."""
    inside = (coords >= -1.0) & (coords <= size)
    c = np.maximum(coords, 0.0)
    low = np.floor(c).astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    frac = np.where(at_edge, 0.0, c - low)
    return inside, low, high, 1.0 - frac, frac


@op("RoiAlign", inputs=[Input("X", FLOATS), Input("rois", FLOATS),
                        Input("batch_indices", INT64, type_var="I")],
    outputs=[Output("Y")], infer=_infer_roi_align,
    attrs=[Attr("coordinate_transformation_mode", AttrKind.STRING, "half_pixel"),
           Attr("mode", AttrKind.STRING, "avg"), Attr("output_height", AttrKind.INT, 1),
           Attr("output_width", AttrKind.INT, 1), Attr("sampling_ratio", AttrKind.INT, 0),
           Attr("spatial_scale", AttrKind.FLOAT, 1.0)])
def roi_align(x, rois, batch_indices, *, coordinate_transformation_mode, mode, output_height,
              output_width, sampling_ratio, spatial_scale):
    """Pool each region of interest of X [N, C, H, W] to [C, output_height, output_width].

    A roi (x1, y1, x2, y2) is scaled by spatial_scale (and shifted by -0.5 in half_pixel
    mode; in output_half_pixel mode it is at least 1 x 1). Each output bin samples a
    grid of sampling_ratio points per axis (ceil(roi size / output size) when 0) by
    bilinear interpolation, points beyond one pixel outside the map counting 0. 'avg'
    averages the samples; 'max' takes, as ONNX and ONNX Runtime define it, the largest
    of the four weighted corner terms over all samples. Y: [num_rois, C, h, w]."""
    fail = reference_fail("RoiAlign")
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.shape != (
            rois.shape[0],):
        fail(f"expected X [N, C, H, W], rois [R, 4] and batch_indices [R], got shapes "
             f"{x.shape}, {rois.shape}, {batch_indices.shape}")
    if batch_indices.size and not (0 <= batch_indices.min() and batch_indices.max() < x.shape[0]):
        fail(f"input 'batch_indices' must be in [0, {x.shape[0]}), got {batch_indices.tolist()}")
    work = work_dtype(x.dtype)
    data = x.astype(work)
    height, width = x.shape[2:]
    half_pixel = coordinate_transformation_mode == "half_pixel"
    shift = 0.5 if half_pixel else 0.0
    out = np.zeros((rois.shape[0], x.shape[1], output_height, output_width), work)
    for r, (roi, batch) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        x1, y1, x2, y2 = roi * spatial_scale - shift
        roi_h, roi_w = y2 - y1, x2 - x1
        if not half_pixel:
            roi_h, roi_w = max(roi_h, 1.0), max(roi_w, 1.0)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        grid_h = sampling_ratio or int(np.ceil(bin_h))
        grid_w = sampling_ratio or int(np.ceil(bin_w))
        if grid_h <= 0 or grid_w <= 0:
            continue  # an empty roi samples nothing; its bins stay 0
        ys = (y1 + np.arange(output_height)[:, None] * bin_h
              + (np.arange(grid_h)[None, :] + 0.5) * bin_h / grid_h).reshape(-1)
        xs = (x1 + np.arange(output_width)[:, None] * bin_w
              + (np.arange(grid_w)[None, :] + 0.5) * bin_w / grid_w).reshape(-1)
        in_y, y_lo, y_hi, wy_lo, wy_hi = _bilinear_taps(ys, height)
        in_x, x_lo, x_hi, wx_lo, wx_hi = _bilinear_taps(xs, width)
        inside = (in_y[:, None] & in_x[None, :]).astype(work)
        image = data[batch]
        terms = np.stack([
            (wy * wx * inside).astype(work) * image[:, yi[:, None], xi[None, :]]
            for wy, yi in ((wy_lo[:, None], y_lo), (wy_hi[:, None], y_hi))
            for wx, xi in ((wx_lo[None, :], x_lo), (wx_hi[None, :], x_hi))])
        if mode == "avg":
            samples = terms.sum(axis=0)
        else:
            samples = terms.max(axis=0)
        samples = samples.reshape(x.shape[1], output_height, grid_h, output_width, grid_w)
        if mode == "avg":
            out[r] = samples.sum(axis=(2, 4)) / (grid_h * grid_w)
        else:
            out[r] = samples.max(axis=(2, 4))
    return out.astype(x.dtype)
