"""Tests of Resize, GridSample and RoiAlign (ge_hub/ops/resize.py): inference on concrete,
symbolic and unknown shapes, the NumPy references against independent direct-loop or
hand-computed results, and clear errors on bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import close, infer, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, dim_mul
from ge_hub.ops import get_schema

N, H, W = Sym("N"), Sym("H"), Sym("W")


# -- Resize ----------------------------------------------------------------------------


def source_coord(mode, x, in_size, scale):
    """The spec's coordinate transforms, one output coordinate at a time; the resized
    length is scale * in_size, fractional when the scale does not divide evenly (as in
    ONNX's reference and its conformance data)."""
    length = scale * in_size
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length > 1 else 0.0
    if mode == "align_corners":
        return 0.0 if length == 1 else x * (in_size - 1) / (length - 1)
    assert mode == "asymmetric"
    return x / scale


def cubic_weight(d, a):
    d = abs(d)
    if d <= 1:
        return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
    if d < 2:
        return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
    return 0.0


def antialias_pairs(coord, scale, mode, a):
    """(index, weight) pairs of the filter stretched by 1/scale: every cell k within the
    kernel's support of coord, weighted by kernel((k - coord) * scale), normalized."""
    support = 1.0 if mode == "linear" else 2.0
    reach = math.ceil(support / scale) + 1
    pairs = []
    for k in range(math.floor(coord) - reach, math.ceil(coord) + reach + 1):
        d = (k - coord) * scale
        weight = max(0.0, 1 - abs(d)) if mode == "linear" else cubic_weight(d, a)
        if weight != 0:
            pairs.append((k, weight))
    total = sum(w for _, w in pairs)
    return [(k, w / total) for k, w in pairs]


def loop_resize_2d(image, out_h, out_w, scale_h, scale_w, mode, transform,
                   nearest_mode="round_prefer_floor", a=-0.75, exclude_outside=0,
                   antialias=0):
    """Resize one H x W image, one output pixel at a time."""
    in_h, in_w = image.shape

    def taps(coord, size, scale):
        """(index, weight) pairs along one axis."""
        if mode == "nearest":
            below, fraction = math.floor(coord), coord - math.floor(coord)
            index = {
                "floor": below,
                "ceil": math.ceil(coord),
                "round_prefer_floor": below if fraction <= 0.5 else below + 1,
                "round_prefer_ceil": below if fraction < 0.5 else below + 1,
            }[nearest_mode]
            return [(min(max(index, 0), size - 1), 1.0)]
        base = math.floor(coord)
        t = coord - base
        if antialias and scale < 1:
            pairs = antialias_pairs(coord, scale, mode, a)
        elif mode == "linear":
            pairs = [(base, 1 - t), (base + 1, t)]
        else:
            pairs = [(base + k, cubic_weight(t - k, a)) for k in (-1, 0, 1, 2)]
        if exclude_outside:
            pairs = [(i, w if 0 <= i < size else 0.0) for i, w in pairs]
            total = sum(w for _, w in pairs)
            pairs = [(i, w / total) for i, w in pairs]
        return [(min(max(i, 0), size - 1), w) for i, w in pairs]

    out = np.zeros((out_h, out_w))
    for i, j in itertools.product(range(out_h), range(out_w)):
        rows = taps(source_coord(transform, i, in_h, scale_h), in_h, scale_h)
        cols = taps(source_coord(transform, j, in_w, scale_w), in_w, scale_w)
        out[i, j] = sum(wr * wc * float(image[r, c]) for r, wr in rows for c, wc in cols)
    return out


def loop_resize(x, out_h, out_w, scale_h, scale_w, **kwargs):
    n, c = x.shape[:2]
    return np.stack([np.stack([loop_resize_2d(x[i, k], out_h, out_w, scale_h, scale_w,
                                              **kwargs) for k in range(c)])
                     for i in range(n)])


RESIZE_SCALES = [(2.0, 3.0), (0.5, 0.5), (1.5, 0.75), (3.0, 1.0)]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("transform", ["half_pixel", "asymmetric", "align_corners",
                                       "pytorch_half_pixel"])
@pytest.mark.parametrize("scales", RESIZE_SCALES)
def test_resize_scales_match_direct_loops(rng, mode, transform, scales):
    x = random_array(rng, (1, 2, 4, 5))
    scale_h, scale_w = scales
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    (y,) = run_op("Resize", [x, None, np.array([1, 1, scale_h, scale_w], np.float32)], attrs)
    out_h, out_w = math.floor(4 * scale_h), math.floor(5 * scale_w)
    close(y, loop_resize(x, out_h, out_w, scale_h, scale_w, mode=mode, transform=transform))


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
def test_resize_nearest_modes(rng, nearest_mode):
    # half_pixel at scale 0.5 samples exactly between two cells: the tie-breaking shows.
    x = random_array(rng, (1, 1, 6, 8))
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode}
    for scales in ((0.5, 0.5), (2.0, 1.5)):
        (y,) = run_op("Resize", [x, None, np.array([1, 1, *scales], np.float32)], attrs)
        expected = loop_resize(x, int(6 * scales[0]), int(8 * scales[1]), *scales,
                               mode="nearest", transform="half_pixel",
                               nearest_mode=nearest_mode)
        np.testing.assert_array_equal(y, expected.astype(np.float32))


ANTIALIAS_SCALES = [(0.6, 0.6), (0.25, 0.5), (0.35, 1.0), (0.5, 2.0)]


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("transform", ["half_pixel", "asymmetric", "align_corners"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("scales", ANTIALIAS_SCALES)
def test_resize_antialias_matches_direct_loops(rng, mode, transform, exclude_outside, scales):
    x = random_array(rng, (1, 2, 8, 9))
    scale_h, scale_w = scales
    attrs = {"mode": mode, "coordinate_transformation_mode": transform, "antialias": 1,
             "exclude_outside": exclude_outside}
    (y,) = run_op("Resize", [x, None, np.array([1, 1, scale_h, scale_w], np.float32)], attrs)
    out_h, out_w = math.floor(8 * scale_h), math.floor(9 * scale_w)
    # The scales as float32, as the op reads them.
    scale_h, scale_w = float(np.float32(scale_h)), float(np.float32(scale_w))
    close(y, loop_resize(x, out_h, out_w, scale_h, scale_w, mode=mode, transform=transform,
                         exclude_outside=exclude_outside, antialias=1))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_antialias_changes_nothing_when_upsampling(rng, mode):
    x = random_array(rng, (1, 2, 3, 4))
    scales = np.array([1, 1, 2.0, 1.5], np.float32)
    (plain,) = run_op("Resize", [x, None, scales], {"mode": mode})
    (smoothed,) = run_op("Resize", [x, None, scales], {"mode": mode, "antialias": 1})
    np.testing.assert_array_equal(smoothed, plain)


@pytest.mark.parametrize("mode, inputs, expected", [
    ("linear", "scales", [[2.875, 4.5], [9.375, 11.0]]),
    ("linear", "sizes", [[2.3636363, 3.590909, 4.818182], [7.2727275, 8.5, 9.727273],
                         [12.181818, 13.409091, 14.636364]]),
    ("cubic", "scales", [[2.5180721, 4.2858863], [9.589329, 11.357142]]),
    ("cubic", "sizes", [[1.7750092, 3.1200073, 4.4650054], [7.1550016, 8.5, 9.844998],
                        [12.534994, 13.8799925, 15.224991]]),
])
def test_resize_antialias_by_hand_from_onnx_spec(mode, inputs, expected):
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    if inputs == "scales":
        args = [x, None, np.array([1, 1, 0.6, 0.6], np.float32)]
    else:
        args = [x, None, None, np.array([1, 1, 3, 3], np.int64)]
    (y,) = run_op("Resize", args, {"mode": mode, "antialias": 1})
    np.testing.assert_allclose(y[0, 0], expected, rtol=1e-6)


def test_resize_by_hand():
    # ONNX's resize examples (scales on all four NCHW axes).
    small = np.array([[[[1, 2], [3, 4]]]], dtype=np.float32)
    wide = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8]]]], dtype=np.float32)

    def resize(x, scales, **attrs):
        return run_op("Resize", [x, None, np.array(scales, np.float32)], attrs)[0][0, 0]

    np.testing.assert_array_equal(resize(small, [1, 1, 2, 3]),
                                  [[1, 1, 1, 2, 2, 2]] * 2 + [[3, 3, 3, 4, 4, 4]] * 2)
    close(resize(small, [1, 1, 2, 2], mode="linear"),
          [[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5],
           [3, 3.25, 3.75, 4]])
    close(resize(wide, [1, 1, 0.6, 0.6], mode="linear"), [[2.6666665, 4.3333331]])
    close(resize(wide, [1, 1, 0.6, 0.6], mode="linear",
                 coordinate_transformation_mode="align_corners"), [[1, 3.142857]])
    np.testing.assert_array_equal(resize(wide, [1, 1, 0.6, 0.6]), [[1, 3]])
    # half_pixel_symmetric keeps the centre fixed when 4 * 0.6 is not whole: the
    # 2 output cells sample 0.667 and 2.333.
    close(resize(wide[:, :, :1], [1, 1, 1, 0.6], mode="linear",
                 coordinate_transformation_mode="half_pixel_symmetric"), [[5 / 3, 10 / 3]])


def test_resize_cubic_by_hand():
    # ONNX's resize_*_cubic examples on a 4x4 ramp.
    ramp = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)

    def resize(scales, **attrs):
        return run_op("Resize", [ramp, None, np.array(scales, np.float32)],
                      {"mode": "cubic", **attrs})[0][0, 0]

    close(resize([1, 1, 2, 2])[0], [0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125,
                                    2.91015625, 3.38671875, 3.68359375])
    close(resize([1, 1, 0.8, 0.8]), [[1.47119141, 2.78125, 4.08251953],
                                     [6.71142578, 8.02148438, 9.32275391],
                                     [11.91650391, 13.2265625, 14.52783203]])
    close(resize([1, 1, 2, 2], coordinate_transformation_mode="align_corners")[0],
          [1, 1.34110787, 1.80029155, 2.32944606, 2.67055394, 3.19970845, 3.65889213, 4])
    close(resize([1, 1, 2, 2], cubic_coeff_a=-0.5, exclude_outside=1)[0],
          [0.55882353, 0.81494204, 1.35698249, 1.89705882, 2.39705882, 2.93713516,
           3.47917561, 3.73529412])


@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_cubic_coefficient_and_exclude_outside(rng, exclude_outside):
    x = random_array(rng, (1, 1, 5, 4))
    attrs = {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": exclude_outside}
    (y,) = run_op("Resize", [x, None, np.array([1, 1, 1.6, 2.0], np.float32)], attrs)
    close(y, loop_resize(x, 8, 8, 1.6, 2.0, mode="cubic", transform="half_pixel", a=-0.5,
                         exclude_outside=exclude_outside))


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_and_aspect_policy(rng, policy):
    x = random_array(rng, (2, 3, 4, 6))
    sizes = np.array([6, 6], dtype=np.int64)
    attrs = {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": policy}
    (y,) = run_op("Resize", [x, None, None, sizes], attrs)
    if policy == "stretch":
        shape, scales = (6, 6), (6 / 4, 6 / 6)
    else:
        scale = min(6 / 4, 6 / 6) if policy == "not_larger" else max(6 / 4, 6 / 6)
        shape, scales = (int(4 * scale + 0.5), int(6 * scale + 0.5)), (scale, scale)
    assert y.shape == (2, 3, *shape)
    close(y, loop_resize(x, *shape, *scales, mode="linear", transform="half_pixel"))


def test_resize_tf_crop_and_resize(rng):
    x = random_array(rng, (1, 1, 5, 5))
    roi = np.array([0.2, -0.5, 0.8, 0.5], dtype=np.float32)  # H: 0.2..0.8, W: -0.5..0.5
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
             "axes": [2, 3], "extrapolation_value": 10.0}
    (y,) = run_op("Resize", [x, roi, None, np.array([3, 3], np.int64)], attrs)
    # H samples rows 0.8, 2.0, 3.2; W samples columns -2, 0, 2 (the first one outside).
    rows = [(0, 1, 0.8), (2, 3, 0.0), (3, 4, 0.2)]
    for i, (r0, r1, t) in enumerate(rows):
        for j, col in enumerate((-2, 0, 2)):
            expected = 10.0 if col < 0 else (1 - t) * x[0, 0, r0, col] + t * x[0, 0, r1, col]
            close(y[0, 0, i, j], expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32", "uint8",
                                   "int64"])
def test_resize_dtypes(rng, dtype):
    x = random_array(rng, (1, 1, 3, 4), dtype, low=-100, high=100)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    (nearest,) = run_op("Resize", [x, None, scales], {"nearest_mode": "floor"})
    (linear,) = run_op("Resize", [x, None, scales], {"mode": "linear"})
    assert nearest.dtype == linear.dtype == x.dtype
    expected = loop_resize(x, 6, 6, 2.0, 1.5, mode="nearest", transform="half_pixel",
                           nearest_mode="floor")
    np.testing.assert_array_equal(nearest, expected.astype(x.dtype))
    expected = loop_resize(x.astype(np.float64), 6, 6, 2.0, 1.5, mode="linear",
                           transform="half_pixel")
    if dtype.startswith(("int", "uint")):
        # Rounded to nearest: within half a unit of the exact value (float32 sample
        # coordinates may tip an exact .5 either way).
        assert np.abs(linear.astype(np.float64) - expected).max() <= 0.5 + 1e-4
    else:
        # Sample coordinates are float32 (as in ONNX Runtime), even for float64 data.
        close(linear, expected, "float32" if dtype == "float64" else dtype)


def test_resize_keeps_large_int64_exact_in_nearest_mode():
    x = np.array([[2**62 + 1, 2**62 + 3]], dtype=np.int64)
    (y,) = run_op("Resize", [x, None, np.array([1, 2], np.float32)])
    np.testing.assert_array_equal(y, [[2**62 + 1] * 2 + [2**62 + 3] * 2])


def test_resize_inference_symbolic_and_unknown():
    x = tt("float32", (N, 3, H, W))
    scales = tt("float32", (4,))
    (y,) = infer("Resize", [x, None, scales], consts=[None, None, np.array([1, 1, 2, 1],
                                                                           np.float32)])
    assert y.shape == (N, 3, dim_mul(H, 2), W)
    (y,) = infer("Resize", [x, None, scales], consts=[None, None, np.array([1, 1, 0.5, 1.5],
                                                                           np.float32)])
    assert y.shape[:2] == (N, 3) and isinstance(y.shape[2], Sym) and y.shape[2] != H
    # Scales not constant: every resized dim is unknown, the others stay.
    (y,) = infer("Resize", [x, None, scales])
    assert y.rank == 4 and not {N, H, W} & set(y.shape) and 3 not in y.shape
    (y,) = infer("Resize", [x, None, tt("float32", (2,))], {"axes": [2, 3]})
    assert y.shape[:2] == (N, 3) and not {H, W} & set(y.shape[2:])
    (y,) = infer("Resize", [x, None, None, tt("int64", (2,))], {"axes": [-2, -1]},
                 consts=[None, None, None, np.array([224, 160])])
    assert y.shape == (N, 3, 224, 160)
    (y,) = infer("Resize", [tt("float32", None), None, scales])
    assert y.shape is None
    # An empty 'scales' next to 'sizes' means "absent" (older exporters write it so).
    (y,) = infer("Resize", [tt("float32", (1, 3, 4, 4)), tt("float32", (0,)),
                            tt("float32", (0,)), tt("int64", (4,))],
                 consts=[None, None, None, np.array([1, 3, 8, 2])])
    assert y.shape == (1, 3, 8, 2)


def test_resize_rejects_bad_input():
    x = tt("float32", (1, 3, 4, 4))
    scales, sizes = tt("float32", (4,)), tt("int64", (4,))
    with pytest.raises(OpError, match=r"exactly one of inputs 'scales' and 'sizes'.*both"):
        infer("Resize", [x, None, scales, sizes])
    with pytest.raises(OpError, match=r"exactly one of inputs 'scales' and 'sizes'.*neither"):
        infer("Resize", [x])
    with pytest.raises(OpError, match=r"attribute 'mode' must be one of .*got 'area'"):
        infer("Resize", [x, None, scales], {"mode": "area"})
    with pytest.raises(OpError, match=r"'coordinate_transformation_mode' must be one of"):
        infer("Resize", [x, None, scales], {"coordinate_transformation_mode": "center"})
    with pytest.raises(OpError, match=r"attribute 'nearest_mode' must be one of"):
        infer("Resize", [x, None, scales], {"nearest_mode": "round"})
    with pytest.raises(OpError, match=r"attribute 'antialias' must be 0 or 1, got 2"):
        infer("Resize", [x, None, scales], {"antialias": 2})
    with pytest.raises(OpError, match=r"input 'scales' must have 2 values .*got float32\[4\]"):
        infer("Resize", [x, None, scales], {"axes": [2, 3]})
    with pytest.raises(OpError, match=r"input 'scales' values must be > 0"):
        infer("Resize", [x, None, scales], consts=[None, None, np.array([1, 1, 0, 2],
                                                                        np.float32)])
    with pytest.raises(OpError, match=r"input 'roi' is required"):
        infer("Resize", [x, None, None, sizes],
              {"coordinate_transformation_mode": "tf_crop_and_resize"})
    with pytest.raises(OpError, match=r"input 'scales' must have dtype in \{float32\}"):
        infer("Resize", [x, None, tt("float64", (4,))])
    with pytest.raises(OpError, match=r"Resize: input 'X' must have dtype in .*got bool"):
        infer("Resize", [tt("bool", (1, 3, 4, 4)), None, scales])


# --- GridSample -------------------------------------------------------------------------

FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
T = Sym("T")
M = Sym("M")


def reflect_scalar(c, low, high):
    """Mirror c at the nearer border until it lies within [low, high] (the spec's words)."""
    if high == low:
        return low
    while c < low or c > high:
        c = 2 * low - c if c < low else 2 * high - c
    return c


def keys_weight(distance, a=-0.75):
    d = abs(distance)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    if d < 2:
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return 0.0


def loop_grid_sample(x, grid, mode, padding_mode, align_corners):
    """GridSample one output point at a time, from the formulas of the ONNX spec."""
    n_batch, channels, *sizes = x.shape
    r = len(sizes)
    out_dims = grid.shape[1:-1]
    y = np.zeros((n_batch, channels, *out_dims))
    wide = x.astype(np.float64)
    for n, *point in itertools.product(range(n_batch), *map(range, out_dims)):
        axis_taps = []
        for axis, size in enumerate(sizes):
            g = float(grid[(n, *point, r - 1 - axis)])  # innermost dim first
            if align_corners:
                low, high, c = 0.0, size - 1.0, (g + 1) / 2 * (size - 1)
            else:
                low, high, c = -0.5, size - 0.5, ((g + 1) * size - 1) / 2
            if mode == "nearest":
                c = float(round(c))  # Python rounds half to even
            if not low <= c <= high:
                if padding_mode == "border":
                    c = min(max(c, 0.0), size - 1.0)
                elif padding_mode == "reflection":
                    c = reflect_scalar(c, low, high)
            if mode == "nearest":
                taps = [(int(c), 1.0)]
            elif mode == "linear":
                f = math.floor(c)
                taps = [(f, 1 - (c - f)), (f + 1, c - f)]
            else:
                f = math.floor(c)
                taps = [(f + k, keys_weight(c - (f + k))) for k in (-1, 0, 1, 2)]
            resolved = []
            for index, weight in taps:
                if padding_mode == "zeros" and not 0 <= index < size:
                    index = None
                elif padding_mode == "border":
                    index = min(max(index, 0), size - 1)
                elif padding_mode == "reflection":
                    index = int(reflect_scalar(float(index), low, high))
                resolved.append((index, weight))
            axis_taps.append(resolved)
        for channel in range(channels):
            total = 0.0
            for combo in itertools.product(*axis_taps):
                if any(index is None for index, _ in combo):
                    continue
                total += math.prod(w for _, w in combo) * wide[(n, channel,
                                                                *(i for i, _ in combo))]
            y[(n, channel, *point)] = total
    return y


GRID_CASES = [((2, 2, 5), (2, 4, 1)), ((2, 2, 3, 4), (2, 3, 2, 2)),
              ((1, 2, 3, 2, 4), (1, 2, 2, 3, 3))]


@pytest.mark.parametrize("shapes", GRID_CASES, ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_matches_loop(rng, shapes, mode, padding_mode, align_corners):
    x_shape, grid_shape = shapes
    x = random_array(rng, x_shape, "float64")
    # Reaching past [-1, 1] exercises the padding, reflecting more than once.
    grid = random_array(rng, grid_shape, "float64", low=-3.2, high=3.2)
    (out,) = run_op("GridSample", [x, grid], {"mode": mode, "padding_mode": padding_mode,
                                              "align_corners": align_corners})
    close(out, loop_grid_sample(x, grid, mode, padding_mode, align_corners), "float64")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_grid_sample_dtypes(rng, dtype):
    x = random_array(rng, (1, 3, 4, 5), dtype)
    grid = random_array(rng, (1, 2, 6, 2), dtype, low=-1.1, high=1.1)
    (out,) = run_op("GridSample", [x, grid])
    close(out, loop_grid_sample(x, grid, "linear", "zeros", 0), dtype)


def test_grid_sample_identity_grids_return_the_input(rng):
    x = random_array(rng, (2, 3, 4, 5), "float64")
    rows, cols = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    corners = np.stack([cols / 4 * 2 - 1, rows / 3 * 2 - 1], axis=-1)  # (x, y) order
    centers = np.stack([(2 * cols + 1) / 5 - 1, (2 * rows + 1) / 4 - 1], axis=-1)
    for mode in ("linear", "nearest", "cubic"):
        for align_corners, grid in ((1, corners), (0, centers)):
            batch_grid = np.broadcast_to(grid, (2, 4, 5, 2)).copy()
            (out,) = run_op("GridSample", [x, batch_grid],
                            {"mode": mode, "align_corners": align_corners})
            close(out, x, "float64")


def test_grid_sample_hand_cases():
    x = np.arange(1.0, 5.0, dtype=np.float32).reshape(1, 1, 2, 2)  # [[1, 2], [3, 4]]
    grid = np.array([[[[-1.0, -1.0], [0.0, 0.0], [1.0, -1.0]]]], dtype=np.float32)
    # align_corners=0: (-1, -1) is the outer corner of pixel (0, 0), a quarter inside X.
    (out,) = run_op("GridSample", [x, grid])
    close(out.ravel(), [0.25, 2.5, 0.5])
    (out,) = run_op("GridSample", [x, grid], {"padding_mode": "border"})
    close(out.ravel(), [1.0, 2.5, 2.0])
    (out,) = run_op("GridSample", [x, grid], {"align_corners": 1})
    close(out.ravel(), [1.0, 2.5, 2.0])
    # The spec's reflection example: -3.5 in units of the [-1, 1] range lands on 0.5.
    line = np.array([[[10.0, 20.0, 30.0]]], dtype=np.float32)
    far = np.array([[[-3.5], [0.5]]], dtype=np.float32)
    (out,) = run_op("GridSample", [line, far],
                    {"padding_mode": "reflection", "align_corners": 1})
    close(out.ravel(), [25.0, 25.0])
    # nearest: a half-way position rounds to the even index.
    half = np.array([[[-0.5], [0.5]]], dtype=np.float32)  # positions 0.5 and 1.5
    (out,) = run_op("GridSample", [line, half], {"mode": "nearest", "align_corners": 1})
    assert out.ravel().tolist() == [10.0, 30.0]


def test_grid_sample_integer_input_is_cast_at_the_end(rng):
    x = random_array(rng, (1, 2, 4, 4), "int32", low=-50, high=50)
    grid = random_array(rng, (1, 3, 3, 2), "float32", low=-1, high=1)
    (nearest,) = run_op("GridSample", [x, grid], {"mode": "nearest"})
    assert nearest.tolist() == loop_grid_sample(x, grid, "nearest", "zeros", 0).tolist()
    (linear,) = run_op("GridSample", [x, grid])
    expected = np.trunc(loop_grid_sample(x, grid, "linear", "zeros", 0))
    assert np.abs(linear - expected).max() <= 1  # float rounding may cross an integer


def test_grid_sample_inference():
    (y,) = infer("GridSample", [tt("float32", (N, 3, 8, 8)), tt("float32", (N, T, M, 2))])
    assert y == tt("float32", (N, 3, T, M))
    (y,) = infer("GridSample", [tt("int8", (2, 3, 8, 8, 8)), tt("float16", (2, 4, 5, 6, 3))],
                 {"mode": "nearest"})
    assert y == tt("int8", (2, 3, 4, 5, 6))
    (y,) = infer("GridSample", [tt("float32", (N, 3, 8, 8)), tt("float32", None)])
    assert y.rank == 4 and y.shape[:2] == (N, 3)


def test_grid_sample_errors():
    x = tt("float32", (2, 3, 8, 8))
    with pytest.raises(OpError, match=r"GridSample.*'grid'.*must end in a dim of 2.*got 3"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 3))])
    with pytest.raises(OpError, match=r"GridSample.*'grid'.*must have the rank of 'X'"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 4, 3))])
    with pytest.raises(OpError, match=r"GridSample.*same batch size, got 1 and 2"):
        infer("GridSample", [x, tt("float32", (1, 4, 4, 2))])
    with pytest.raises(OpError, match=r"GridSample.*'mode' must be one of linear, nearest, "
                                      r"cubic, got 'bilinear'"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 2))], {"mode": "bilinear"})
    with pytest.raises(OpError, match=r"GridSample.*'padding_mode'.*got 'wrap'"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 2))], {"padding_mode": "wrap"})
    with pytest.raises(OpError, match=r"GridSample.*'grid'.*dtype.*int64"):
        infer("GridSample", [x, tt("int64", (2, 4, 4, 2))])
    with pytest.raises(OpError, match=r"GridSample: input 'grid' of shape \(2, 4, 4, 3\)"):
        get_schema("GridSample")(np.ones((2, 3, 8, 8)), np.zeros((2, 4, 4, 3)))


# --- RoiAlign -----------------------------------------------------------------------------

F32 = DType.FLOAT32


def bilinear_corners(image, y, x):
    """The four weighted corner terms of one sample point, 0 beyond one pixel outside."""
    height, width = image.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return [0.0] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= height - 1:
        y0 = y1 = height - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= width - 1:
        x0 = x1 = width - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return [(1 - ly) * (1 - lx) * image[y0, x0], (1 - ly) * lx * image[y0, x1],
            ly * (1 - lx) * image[y1, x0], ly * lx * image[y1, x1]]


def roi_align_by_loops(x, rois, batch_indices, out_h, out_w, ratio, scale, mode, half_pixel):
    out = np.zeros((len(rois), x.shape[1], out_h, out_w))
    for r, roi in enumerate(rois):
        shift = 0.5 if half_pixel else 0.0
        x1, y1, x2, y2 = [float(v) * scale - shift for v in roi]
        roi_h, roi_w = y2 - y1, x2 - x1
        if not half_pixel:
            roi_h, roi_w = max(roi_h, 1.0), max(roi_w, 1.0)
        grid_h = ratio or math.ceil(roi_h / out_h)
        grid_w = ratio or math.ceil(roi_w / out_w)
        for c in range(x.shape[1]):
            image = x[batch_indices[r], c].astype(np.float64)
            for ph in range(out_h):
                for pw in range(out_w):
                    values = []
                    for iy in range(grid_h):
                        for ix in range(grid_w):
                            y = y1 + ph * roi_h / out_h + (iy + 0.5) * roi_h / out_h / grid_h
                            xx = x1 + pw * roi_w / out_w + (ix + 0.5) * roi_w / out_w / grid_w
                            corners = bilinear_corners(image, y, xx)
                            values.append(sum(corners) if mode == "avg" else max(corners))
                    out[r, c, ph, pw] = (sum(values) / len(values) if mode == "avg"
                                         else max(values))
    return out


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio,scale", [(0, 1.0), (2, 0.5), (3, 0.25)])
def test_roi_align_matches_loops(rng, mode, transform, ratio, scale):
    x = random_array(rng, (2, 3, 8, 9))
    rois = (rng.uniform(0, 1, (4, 4)) * [9, 8, 9, 8] / scale).astype(np.float32)
    rois[:, 2:] = np.maximum(rois[:, 2:], rois[:, :2] + 1)  # x2 > x1, y2 > y1
    rois[3] = [-2.0 / scale, -1.0 / scale, 11.0 / scale, 10.0 / scale]  # past every border
    batch = np.array([1, 0, 1, 0], np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": transform, "output_height": 3,
             "output_width": 2, "sampling_ratio": ratio, "spatial_scale": scale}
    (y,) = run_op("RoiAlign", [x, rois, batch], attrs)
    assert y.shape == (4, 3, 3, 2)
    expected = roi_align_by_loops(x, rois, batch, 3, 2, ratio, scale, mode,
                                  transform == "half_pixel")
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_roi_align_float64_and_inference(rng):
    x = random_array(rng, (1, 2, 5, 5), "float64")
    rois = np.array([[0.5, 1.0, 4.0, 3.5]])
    (y,) = run_op("RoiAlign", [x, rois, np.zeros(1, np.int64)])
    assert y.dtype == np.float64 and y.shape == (1, 2, 1, 1)
    close(y, roi_align_by_loops(x, rois, [0], 1, 1, 0, 1.0, "avg", True), "float64")
    r, c = Sym("r"), Sym("c")
    types = [tt(F32, (Sym("n"), c, 7, 7)), tt(F32, (r, 4)), tt(DType.INT64, (r,))]
    assert infer("RoiAlign", types, {"output_height": 2, "output_width": 5}) == \
        [tt(F32, (r, c, 2, 5))]


def test_roi_align_bad_inputs(rng):
    types = [tt(F32, (1, 2, 7, 7)), tt(F32, (3, 4)), tt(DType.INT64, (3,))]
    with pytest.raises(OpError, match="RoiAlign.*'mode' must be one of avg, max, got 'sum'"):
        infer("RoiAlign", types, {"mode": "sum"})
    with pytest.raises(OpError, match="RoiAlign.*'rois' must be \\[num_rois, 4\\]"):
        infer("RoiAlign", [types[0], tt(F32, (3, 5)), types[2]])
    with pytest.raises(OpError, match="RoiAlign.*'batch_indices'.*one entry per roi"):
        infer("RoiAlign", [*types[:2], tt(DType.INT64, (2,))])
    with pytest.raises(OpError, match="RoiAlign.*'output_width' must be >= 1"):
        infer("RoiAlign", types, {"output_width": 0})
    with pytest.raises(OpError, match="RoiAlign.*'X' must have rank 4"):
        infer("RoiAlign", [tt(F32, (2, 7, 7)), *types[1:]])
    with pytest.raises(OpError, match="RoiAlign: input 'batch_indices' must be in \\[0, 1\\)"):
        get_schema("RoiAlign").run_reference(
            [random_array(rng, (1, 2, 4, 4)), np.ones((1, 4), np.float32),
             np.array([1], np.int64)], {})
