"""Resize: resampling along chosen axes to `sizes` or by `scales`, with nearest,
linear or cubic interpolation (optionally antialiased when downsampling), separably per
axis.

The coordinate helpers (`resize_plan`, `source_coords`, `nearest_index`) are shared
with Resize's C-kernel packer (`ge_hub.kernels.nn`), so the kernel samples exactly
where the reference does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_mul
from ge_hub.ops.inference import normalize_axes
from ge_hub.ops.nn_common import check_choice, check_flag, is_float, work_dtype
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
