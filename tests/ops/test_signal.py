"""Signal-processing ops: each reference against the ONNX spec's formulas written as loops,
inference on concrete and symbolic dims, dtypes, and bad inputs."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from conftest import close, infer, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, dim_add, dim_floordiv, dim_mul, dim_sub
from ge_hub.ops import get_schema

F32 = DType.FLOAT32


def i64(value):
    return np.array(value, dtype=np.int64)


# --- DFT --------------------------------------------------------------------------------


def dft_by_sum(signal, length, inverse):
    """The spec's sum over one 1-D complex signal, zero-padded or cut to `length`."""
    x = np.zeros(length, complex)
    count = min(length, len(signal))
    x[:count] = signal[:count]
    sign = 1 if inverse else -1
    out = np.array([sum(x[n] * np.exp(sign * 2j * math.pi * k * n / length)
                        for n in range(length)) for k in range(length)])
    return out / length if inverse else out


def to_complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(complex)


def pairs(z):
    """Complex `z` as an ONNX complex tensor, so both parts are compared."""
    return np.stack([z.real, z.imag], axis=-1)


def apply_1d(fn, z, axis):
    """fn on every 1-D line of complex array `z` along `axis`."""
    return np.apply_along_axis(fn, axis, z)


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("axis", [1, 2, -2, -3])
def test_dft_forward_matches_sum(rng, parts, axis):
    x = random_array(rng, (2, 5, 6, parts), "float64")
    (y,) = run_op("DFT", [x, None, i64(axis)])
    n = x.shape[axis % 4]
    expected = apply_1d(lambda line: dft_by_sum(line, n, False), to_complex(x), axis % 4)
    assert y.shape[-1] == 2
    close(y, pairs(expected), "float64")


def test_dft_default_axis_is_minus_two(rng):
    x = random_array(rng, (3, 7, 2))
    (y,) = run_op("DFT", [x])
    close(y, pairs(apply_1d(lambda line: dft_by_sum(line, 7, False), to_complex(x), 1)))


@pytest.mark.parametrize("length", [4, 9])
def test_dft_length_pads_or_cuts(rng, length):
    x = random_array(rng, (2, 6, 1))
    (y,) = run_op("DFT", [x, i64(length), i64(1)])
    assert y.shape == (2, length, 2)
    close(y, pairs(apply_1d(lambda line: dft_by_sum(line, length, False),
                            to_complex(x), 1)), "float32")


def test_dft_inverse_undoes_forward(rng):
    x = random_array(rng, (4, 8, 2), "float64")
    (y,) = run_op("DFT", [x, None, i64(1)], {"inverse": 1})
    close(y, pairs(apply_1d(lambda line: dft_by_sum(line, 8, True), to_complex(x), 1)),
          "float64")
    (back,) = run_op("DFT", [y, None, i64(1)])
    close(back, x, "float64")


@pytest.mark.parametrize("n", [7, 8])
def test_dft_onesided_keeps_first_half(rng, n):
    x = random_array(rng, (3, n, 1), "float64")
    (y,) = run_op("DFT", [x, None, i64(1)], {"onesided": 1})
    assert y.shape == (3, n // 2 + 1, 2)
    full = apply_1d(lambda line: dft_by_sum(line, n, False), to_complex(x), 1)
    close(y, pairs(full[:, : n // 2 + 1]), "float64")


@pytest.mark.parametrize("n", [6, 7])
def test_dft_inverse_onesided_rebuilds_real_signal(rng, n):
    signal = random_array(rng, (2, n, 1), "float64")
    (half,) = run_op("DFT", [signal, None, i64(1)], {"onesided": 1})
    # An even default length: only the length given recovers an odd signal.
    length = [i64(n)] if n % 2 else [None]
    (y,) = run_op("DFT", [half, *length, i64(1)], {"inverse": 1, "onesided": 1})
    assert y.shape == (2, n, 1)
    close(y, signal, "float64")


def test_dft_inverse_onesided_hermitian_sum(rng):
    bins = random_array(rng, (5, 2), "float64")
    bins[0, 1] = 0.0  # a real spectrum's DC and Nyquist bins are real
    bins[-1, 1] = 0.0
    (y,) = run_op("DFT", [bins[None], None, i64(1)], {"inverse": 1, "onesided": 1})
    half = to_complex(bins)
    full = np.concatenate([half, np.conj(half[1:-1][::-1])])  # X[N - k] = conj(X[k])
    close(y[0, :, 0], dft_by_sum(full, 8, True).real, "float64")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
def test_dft_keeps_dtype(rng, dtype):
    x = random_array(rng, (2, 4, 1), dtype)
    (y,) = run_op("DFT", [x])
    assert y.dtype == x.dtype


def test_dft_inference_symbolic():
    n, b = Sym("n"), Sym("b")
    x = tt(F32, (b, n, 1))
    assert infer("DFT", [x]) == [tt(F32, (b, n, 2))]
    half = dim_add(dim_floordiv(n, 2), 1)
    assert infer("DFT", [x], {"onesided": 1}) == [tt(F32, (b, half, 2))]
    two_n_minus_2 = dim_mul(dim_sub(n, 1), 2)
    assert infer("DFT", [tt(F32, (b, n, 2))], {"inverse": 1, "onesided": 1}) == \
        [tt(F32, (b, two_n_minus_2, 1))]
    # dft_length and axis given at run time: the dims they decide become fresh symbols.
    (out,) = infer("DFT", [x, tt(DType.INT64, ()), tt(DType.INT64, ())])
    assert out.shape[-1] == 2 and all(isinstance(d, Sym) for d in out.shape[:-1])
    (out,) = infer("DFT", [tt(F32, (3, 4, 2)), tt(DType.INT64, ())], consts=[None, None])
    assert out.shape[0] == 3 and isinstance(out.shape[1], Sym)
    assert infer("DFT", [tt(F32, None)]) == [tt(F32, None)]


@pytest.mark.parametrize("axis", [2, -1, 3, -4])
def test_dft_rejects_complex_axis_and_out_of_range(axis):
    x = tt(F32, (2, 5, 1))
    with pytest.raises(OpError, match="DFT.*axis"):
        infer("DFT", [x, None, tt(DType.INT64, ())], consts=[None, None, i64(axis)])


def test_dft_bad_inputs(rng):
    with pytest.raises(OpError, match="DFT.*'input'.*1 \\(real\\) or 2"):
        infer("DFT", [tt(F32, (4, 3))])
    with pytest.raises(OpError, match="DFT.*'input'.*rank >= 2"):
        infer("DFT", [tt(F32, (4,))])
    with pytest.raises(OpError, match="DFT.*'dft_length' must be >= 1, got 0"):
        infer("DFT", [tt(F32, (4, 1)), tt(DType.INT64, ())], consts=[None, i64(0)])
    with pytest.raises(OpError, match="DFT.*'inverse' must be 0 or 1"):
        infer("DFT", [tt(F32, (4, 1))], {"inverse": 2})
    with pytest.raises(OpError, match="DFT.*'input'.*dtype"):
        infer("DFT", [tt(DType.INT32, (4, 1))])
    with pytest.raises(OpError, match="DFT: input 'input' must end"):
        get_schema("DFT").run_reference([random_array(rng, (4, 3))], {})


# --- STFT -------------------------------------------------------------------------------


def stft_by_loops(signal, step, window, length, onesided):
    z = to_complex(signal)
    frames = (z.shape[1] - length) // step + 1
    bins = length // 2 + 1 if onesided else length
    out = np.zeros((z.shape[0], frames, bins), complex)
    for b in range(z.shape[0]):
        for f in range(frames):
            frame = z[b, f * step: f * step + length] * window
            out[b, f] = dft_by_sum(frame, length, False)[:bins]
    return out


@pytest.mark.parametrize("parts,onesided", [(1, 1), (1, 0), (2, 0)])
def test_stft_with_window_matches_loops(rng, parts, onesided):
    signal = random_array(rng, (2, 20, parts), "float64")
    window = random_array(rng, (6,), "float64")
    (y,) = run_op("STFT", [signal, i64(3), window], {"onesided": onesided})
    expected = stft_by_loops(signal, 3, window, 6, onesided)
    assert y.shape == expected.shape + (2,)
    close(y, pairs(expected), "float64")


def test_stft_frame_length_without_window(rng):
    signal = random_array(rng, (1, 17, 1))
    (y,) = run_op("STFT", [signal, i64(4), None, i64(8)])
    assert y.shape == (1, 3, 5, 2)
    close(y, pairs(stft_by_loops(signal, 4, np.ones(8), 8, True)), "float32")


def test_stft_whole_signal_is_one_frame(rng):
    signal = random_array(rng, (3, 10, 1))
    (y,) = run_op("STFT", [signal, i64(2)], {"onesided": 0})
    assert y.shape == (3, 1, 10, 2)
    close(y, pairs(stft_by_loops(signal, 2, np.ones(10), 10, False)), "float32")


def test_stft_inference_symbolic():
    b, n = Sym("b"), Sym("n")
    signal = tt(F32, (b, n, 1))
    frames = dim_add(dim_floordiv(dim_sub(n, 16), 4), 1)
    consts = [None, i64(4), None, i64(16)]
    types = [signal, tt(DType.INT64, ()), None, tt(DType.INT64, ())]
    assert infer("STFT", types, consts=consts) == [tt(F32, (b, frames, 9, 2))]
    types = [signal, tt(DType.INT64, ()), tt(F32, (Sym("w"),))]
    (out,) = infer("STFT", types, consts=[None, i64(4), None], attrs={"onesided": 0})
    assert out.shape[:1] == (b,) and out.shape[2] == Sym("w")
    (out,) = infer("STFT", [signal, tt(DType.INT64, ()), tt(F32, (8,))])
    assert isinstance(out.shape[1], Sym) and out.shape[2:] == (5, 2)


def test_stft_bad_inputs(rng):
    step = tt(DType.INT64, ())
    with pytest.raises(OpError, match="STFT.*'signal'.*rank 3"):
        infer("STFT", [tt(F32, (10, 1)), step], consts=[None, i64(2)])
    with pytest.raises(OpError, match="STFT.*'window' has 8 values but 'frame_length' is 6"):
        infer("STFT", [tt(F32, (1, 10, 1)), step, tt(F32, (8,)), step],
              consts=[None, i64(2), None, i64(6)])
    with pytest.raises(OpError, match="STFT.*frame length 12 is longer than the signal"):
        infer("STFT", [tt(F32, (1, 10, 1)), step, tt(F32, (12,))], consts=[None, i64(2), None])
    with pytest.raises(OpError, match="STFT.*'frame_step' must be >= 1, got 0"):
        infer("STFT", [tt(F32, (1, 10, 1)), step], consts=[None, i64(0)])
    with pytest.raises(OpError, match="STFT: input 'window' must have shape \\(6,\\)"):
        get_schema("STFT").run_reference(
            [random_array(rng, (1, 10, 1)), i64(2), random_array(rng, (5,)), i64(6)], {})


# --- MelWeightMatrix ----------------------------------------------------------------------


def mel_by_loops(mel_bins, length, rate, low_hz, high_hz):
    """The triangles of the ONNX spec, one entry at a time."""
    def mel(f):
        return 2595 * math.log10(1 + f / 700)

    step = (mel(high_hz) - mel(low_hz)) / (mel_bins + 2)
    edges = [math.floor((length + 1) * 700 * (10 ** ((mel(low_hz) + i * step) / 2595) - 1)
                        / rate) for i in range(mel_bins + 2)]
    out = np.zeros((length // 2 + 1, mel_bins))
    for i in range(mel_bins):
        left, center, right = edges[i:i + 3]
        for j in range(out.shape[0]):
            if left <= j <= center:
                out[j, i] = 1.0 if center == left else (j - left) / (center - left)
            elif center < j < right:
                out[j, i] = (right - j) / (right - center)
    return out


@pytest.mark.parametrize("mel_bins,length,rate,low,high", [
    (8, 16, 8192, 0.0, 4096.0), (5, 64, 16000, 300.0, 7000.0), (3, 33, 22050, 20.0, 11000.0)])
def test_mel_weight_matrix_matches_loops(mel_bins, length, rate, low, high):
    inputs = [np.int32(mel_bins), np.int32(length), np.int32(rate), np.float32(low),
              np.float32(high)]
    (y,) = run_op("MelWeightMatrix", inputs)
    assert y.dtype == np.float32
    close(y, mel_by_loops(mel_bins, length, rate, low, high))
    assert y.max(axis=0).tolist() == [1.0] * mel_bins  # every triangle peaks at 1


def test_mel_weight_matrix_output_datatype_and_inference():
    inputs = [i64(4), i64(32), i64(8000), np.float64(0.0), np.float64(4000.0)]
    (y,) = run_op("MelWeightMatrix", inputs, {"output_datatype": "float64"})
    assert y.dtype == np.float64 and y.shape == (17, 4)
    types = [tt(DType.INT64, ())] * 3 + [tt(F32, ())] * 2
    (out,) = infer("MelWeightMatrix", types)
    assert out.dtype == F32 and all(isinstance(d, Sym) for d in out.shape)
    (out,) = infer("MelWeightMatrix", types, consts=[i64(4), None, None, None, None])
    assert out.shape[1] == 4 and isinstance(out.shape[0], Sym)


def test_mel_weight_matrix_bad_inputs():
    types = [tt(DType.INT64, ())] * 3 + [tt(F32, ())] * 2
    with pytest.raises(OpError, match="MelWeightMatrix.*'num_mel_bins' must be >= 1, got 0"):
        infer("MelWeightMatrix", types, consts=[i64(0), None, None, None, None])
    with pytest.raises(OpError, match="MelWeightMatrix.*'dft_length' must be a scalar"):
        infer("MelWeightMatrix", [types[0], tt(DType.INT64, (2, 2)), *types[2:]])
    with pytest.raises(OpError, match="MelWeightMatrix.*'output_datatype'.*numeric.*bool"):
        infer("MelWeightMatrix", types, {"output_datatype": "bool"})
    with pytest.raises(OpError, match="MelWeightMatrix.*band.*outside 0..8"):
        get_schema("MelWeightMatrix").run_reference(
            [i64(4), i64(16), i64(8000), np.float32(0), np.float32(7000)], {})


# --- Col2Im -------------------------------------------------------------------------------


def col2im_by_loops(x, image, block, dilations, pads, strides):
    """Every (column, block offset) adds its value at the image position it lands on."""
    rank = len(image)
    positions = [(image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1)
                 // strides[d] + 1 for d in range(rank)]
    size = int(np.prod(block))
    channels = x.shape[1] // size
    out = np.zeros((x.shape[0], channels, *image))
    for n in range(x.shape[0]):
        for c in range(channels):
            for k, offset in enumerate(np.ndindex(*block)):
                for col, where in enumerate(np.ndindex(*positions)):
                    pos = [where[d] * strides[d] - pads[d] + offset[d] * dilations[d]
                           for d in range(rank)]
                    if all(0 <= pos[d] < image[d] for d in range(rank)):
                        out[(n, c, *pos)] += x[n, c * size + k, col]
    return out


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [1, 5], {}),
    ([5, 6], [2, 3], {"strides": [2, 1], "pads": [1, 0, 1, 2]}),
    ([6, 7], [2, 2], {"dilations": [1, 3], "strides": [1, 2]}),
    ([4, 3, 5], [2, 1, 2], {"pads": [1, 1, 0, 0, 2, 1], "strides": [1, 1, 2]}),
    ([9], [3], {"dilations": [2], "strides": [2], "pads": [1, 2]}),
])
def test_col2im_matches_loops(rng, image, block, attrs):
    rank = len(image)
    full = {"dilations": [1] * rank, "pads": [0] * 2 * rank, "strides": [1] * rank, **attrs}
    positions = [(image[d] + full["pads"][d] + full["pads"][d + rank]
                  - full["dilations"][d] * (block[d] - 1) - 1) // full["strides"][d] + 1
                 for d in range(rank)]
    x = random_array(rng, (2, 3 * int(np.prod(block)), int(np.prod(positions))))
    (y,) = run_op("Col2Im", [x, i64(image), i64(block)], attrs)
    assert y.shape == (2, 3, *image)
    close(y, col2im_by_loops(x, image, block, **full))


def test_col2im_integer_data(rng):
    x = random_array(rng, (1, 4, 16), "int32")
    (y,) = run_op("Col2Im", [x, i64([5, 5]), i64([2, 2])])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, col2im_by_loops(x, [5, 5], [2, 2], [1, 1], [0] * 4,
                                                     [1, 1]))


def test_col2im_inference_symbolic():
    n, cols, length = Sym("n"), Sym("cols"), Sym("l")
    types = [tt(F32, (n, cols, length)), tt(DType.INT64, (2,)), tt(DType.INT64, (2,))]
    (out,) = infer("Col2Im", types, consts=[None, i64([7, 8]), i64([2, 3])])
    assert out == tt(F32, (n, dim_floordiv(cols, 6), 7, 8))
    (out,) = infer("Col2Im", types)
    assert out.shape[0] == n and len(out.shape) == 4 and all(
        isinstance(d, Sym) for d in out.shape[1:])


def test_col2im_bad_inputs():
    types = [tt(F32, (1, 6, 12)), tt(DType.INT64, (2,)), tt(DType.INT64, (2,))]
    with pytest.raises(OpError, match="Col2Im.*dim 1 must be a multiple of the block size 4"):
        infer("Col2Im", types, consts=[None, i64([4, 5]), i64([2, 2])])
    with pytest.raises(OpError, match="Col2Im.*dim 2 must be 16, the number of block"):
        infer("Col2Im", [tt(F32, (1, 8, 12)), *types[1:]], consts=[None, i64([5, 5]),
                                                                   i64([2, 2])])
    with pytest.raises(OpError, match="Col2Im.*'strides' must have 2 values"):
        infer("Col2Im", types, {"strides": [1]}, consts=[None, i64([4, 5]), i64([2, 3])])
    with pytest.raises(OpError, match="Col2Im.*same length"):
        infer("Col2Im", types, consts=[None, i64([4, 5]), i64([6])])
    with pytest.raises(OpError, match="Col2Im.*'input'.*rank 3"):
        infer("Col2Im", [tt(F32, (6, 12)), *types[1:]])


# --- RoiAlign -----------------------------------------------------------------------------


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


# --- MaxUnpool ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape,attrs", [
    ((2, 3, 8, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 9, 7), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ((2, 2, 9), {"kernel_shape": [3], "strides": [3]}),
])
def test_max_unpool_inverts_max_pool(rng, shape, attrs):
    # Positive data: a zero left by unpooling must not beat a negative maximum.
    x = random_array(rng, shape, low=0.1)
    pooled, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    (y,) = run_op("MaxUnpool", [pooled, indices], attrs)
    kernel, strides = attrs["kernel_shape"], attrs["strides"]
    pads = attrs.get("pads", [0] * 2 * len(kernel))
    spatial = [(pooled.shape[d + 2] - 1) * strides[d] + kernel[d] - pads[d]
               - pads[d + len(kernel)] for d in range(len(kernel))]
    assert y.shape == pooled.shape[:2] + tuple(spatial)
    expected = np.zeros(y.size, np.float32)
    for value, index in zip(pooled.reshape(-1), indices.reshape(-1)):
        expected[index] = value  # every max goes back where MaxPool found it
    np.testing.assert_array_equal(y.reshape(-1), expected)
    # "Pooling the result of an unpooling operation gives back the input to unpooling."
    if y.shape == x.shape:
        np.testing.assert_array_equal(run_op("MaxPool", [y], attrs)[0], pooled)


def test_max_unpool_spec_case_and_output_shape():
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    indices = np.array([[[[5, 7], [13, 15]]]], np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    (y,) = run_op("MaxUnpool", [x, indices], attrs)
    np.testing.assert_array_equal(y, [[[[0, 0, 0, 0], [0, 5, 0, 6], [0, 0, 0, 0],
                                        [0, 7, 0, 8]]]])
    (bigger,) = run_op("MaxUnpool", [x, indices, i64([1, 1, 5, 6])], attrs)
    assert bigger.shape == (1, 1, 5, 6)
    np.testing.assert_array_equal(bigger[..., :4, :4], y)
    assert not bigger[..., 4:, :].any() and not bigger[..., 4:].any()


def test_max_unpool_inference():
    n, h = Sym("n"), Sym("h")
    types = [tt(F32, (n, 3, h, 5)), tt(DType.INT64, (n, 3, h, 5))]
    attrs = {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 1, 0]}
    (out,) = infer("MaxUnpool", types, attrs)
    assert out == tt(F32, (n, 3, dim_add(dim_mul(dim_sub(h, 1), 2), 1), 10))
    (out,) = infer("MaxUnpool", [*types, tt(DType.INT64, (4,))], attrs)
    assert len(out.shape) == 4 and all(isinstance(d, Sym) for d in out.shape)
    (out,) = infer("MaxUnpool", [*types, tt(DType.INT64, (4,))], attrs,
                   consts=[None, None, i64([2, 3, 7, 11])])
    assert out == tt(F32, (2, 3, 7, 11))


def test_max_unpool_bad_inputs(rng):
    types = [tt(F32, (1, 1, 2, 2)), tt(DType.INT64, (1, 1, 2, 2))]
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    with pytest.raises(OpError, match="MaxUnpool.*'I'.*must have the shape of 'X'"):
        infer("MaxUnpool", [types[0], tt(DType.INT64, (1, 1, 2, 3))], attrs)
    with pytest.raises(OpError, match="MaxUnpool.*'X' must have rank 4"):
        infer("MaxUnpool", [tt(F32, (1, 2, 2)), types[1]], attrs)
    with pytest.raises(OpError, match="MaxUnpool.*dim 3 must be at least 4"):
        infer("MaxUnpool", [*types, tt(DType.INT64, (4,))], attrs,
              consts=[None, None, i64([1, 1, 4, 3])])
    with pytest.raises(OpError, match="MaxUnpool.*'kernel_shape'.*required"):
        infer("MaxUnpool", types)
    with pytest.raises(OpError, match="MaxUnpool: input 'I' must index into the 16 elements"):
        get_schema("MaxUnpool").run_reference(
            [random_array(rng, (1, 1, 2, 2)), np.full((1, 1, 2, 2), 16, np.int64)], attrs)


# --- BitCast ------------------------------------------------------------------------------


@pytest.mark.parametrize("source,target,pack,unpack", [
    ("float32", "int32", "<f", "<i"), ("int32", "float32", "<i", "<f"),
    ("float64", "int64", "<d", "<q"), ("int64", "float64", "<q", "<d"),
    ("float16", "int16", "<e", "<h"), ("int8", "uint8", "<b", "<B"),
])
def test_bit_cast_matches_struct(rng, source, target, pack, unpack):
    x = random_array(rng, (3, 4), source)
    (y,) = run_op("BitCast", [x], {"to": target})
    assert y.dtype == np.dtype(target) and y.shape == x.shape
    expected = [struct.unpack(unpack, struct.pack(pack, v))[0] for v in x.reshape(-1).tolist()]
    np.testing.assert_array_equal(y.reshape(-1), np.array(expected, dtype=target))


def test_bit_cast_bfloat16_is_the_top_half_of_float32(rng):
    x = random_array(rng, (5,), "bfloat16")
    (y,) = run_op("BitCast", [x], {"to": "int16"})
    top_halves = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16
                  for v in x.astype(np.float32).tolist()]
    np.testing.assert_array_equal(y.view(np.uint16), np.array(top_halves, np.uint16))
    (back,) = run_op("BitCast", [y], {"to": "bfloat16"})
    np.testing.assert_array_equal(back.view(np.uint16), x.view(np.uint16))


def test_bit_cast_bool_and_scalar():
    (y,) = run_op("BitCast", [np.array([True, False, True])], {"to": "uint8"})
    np.testing.assert_array_equal(y, [1, 0, 1])
    (flags,) = run_op("BitCast", [np.array([0, 7, 1], np.int8)], {"to": "bool"})
    np.testing.assert_array_equal(flags, [False, True, True])
    (y,) = run_op("BitCast", [np.float32(-2.5)], {"to": "int32"})
    assert y.shape == () and int(y) == struct.unpack("<i", struct.pack("<f", -2.5))[0]


def test_bit_cast_inference_and_bad_width():
    n = Sym("n")
    assert infer("BitCast", [tt(DType.FLOAT16, (n, 2))], {"to": "bfloat16"}) == \
        [tt(DType.BFLOAT16, (n, 2))]
    with pytest.raises(OpError, match="BitCast.*'to' \\(int64, 64 bits\\).*float32, 32 bits"):
        infer("BitCast", [tt(F32, (2,))], {"to": "int64"})
    with pytest.raises(OpError, match="BitCast.*'to'.*required"):
        infer("BitCast", [tt(F32, (2,))])


# --- TensorScatter ------------------------------------------------------------------------


def tensor_scatter_by_loops(past, update, write_indices, axis, mode):
    """The pseudocode of the ONNX spec."""
    present = past.copy()
    capacity, length = past.shape[axis], update.shape[axis]
    for prefix in np.ndindex(*past.shape[:axis]):
        for s in range(length):
            position = write_indices[prefix[0]] + s
            if mode == "circular":
                position %= capacity
            present[(*prefix, position)] = update[(*prefix, s)]
    return present


@pytest.mark.parametrize("axis,mode", [(-2, "linear"), (1, "linear"), (2, "circular"),
                                       (-1, "circular")])
def test_tensor_scatter_matches_spec_loops(rng, axis, mode):
    past = random_array(rng, (3, 4, 6, 5))
    shape = list(past.shape)
    shape[axis] = 3
    update = random_array(rng, shape)
    capacity = past.shape[axis]
    starts = np.array([0, capacity - 3, 1] if mode == "linear" else [2, capacity - 1, 5],
                      np.int64)
    (y,) = run_op("TensorScatter", [past, update, starts], {"axis": axis, "mode": mode})
    np.testing.assert_array_equal(y, tensor_scatter_by_loops(past, update, starts,
                                                             axis % 4, mode))


def test_tensor_scatter_without_indices_writes_at_zero(rng):
    past = random_array(rng, (2, 7, 3), "int64")
    update = random_array(rng, (2, 2, 3), "int64")
    (y,) = run_op("TensorScatter", [past, update], {"axis": 1})
    np.testing.assert_array_equal(y, tensor_scatter_by_loops(past, update, [0, 0], 1,
                                                             "linear"))


def test_tensor_scatter_inference_and_bad_inputs(rng):
    b, s = Sym("b"), Sym("s")
    past = tt(F32, (b, 4, 16, 8))
    assert infer("TensorScatter", [past, tt(F32, (b, 4, s, 8))]) == [past]
    with pytest.raises(OpError, match="TensorScatter.*'update'.*dim 3: 9 vs 8"):
        infer("TensorScatter", [past, tt(F32, (b, 4, 2, 9))])
    with pytest.raises(OpError, match="TensorScatter.*'update'.*dim 2: 17 vs 16"):
        infer("TensorScatter", [past, tt(F32, (b, 4, 17, 8))])
    with pytest.raises(OpError, match="TensorScatter.*'axis' must not be the batch axis"):
        infer("TensorScatter", [past, past], {"axis": 0})
    with pytest.raises(OpError, match="TensorScatter.*'write_indices'.*one index per batch"):
        infer("TensorScatter", [tt(F32, (2, 5, 3)), tt(F32, (2, 1, 3)),
                                tt(DType.INT64, (3,))])
    with pytest.raises(OpError, match="TensorScatter.*'mode' must be one of"):
        infer("TensorScatter", [past, past], {"mode": "ring"})
    with pytest.raises(OpError, match="TensorScatter: batch entry 1 writes positions 4..5 "
                                      "beyond the cache length 5"):
        get_schema("TensorScatter").run_reference(
            [random_array(rng, (2, 5, 3)), random_array(rng, (2, 2, 3)),
             np.array([0, 4], np.int64)], {"axis": 1})


# --- DeformConv ---------------------------------------------------------------------------


def sample_2d(image, y, x):
    """Bilinear interpolation at (y, x), corners outside the image counting 0."""
    total = 0.0
    y0, x0 = math.floor(y), math.floor(x)
    for yy in (y0, y0 + 1):
        for xx in (x0, x0 + 1):
            if 0 <= yy < image.shape[0] and 0 <= xx < image.shape[1]:
                total += (1 - abs(y - yy)) * (1 - abs(x - xx)) * image[yy, xx]
    return total


def deform_conv_2d_by_loops(x, w, offset, b, mask, group, offset_group, pads, strides,
                            dilations):
    n, channels = x.shape[:2]
    out_channels, per_group, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    offset = offset.reshape(n, offset_group, kh, kw, 2, oh, ow)
    mask = np.ones((n, offset_group, kh, kw, oh, ow)) if mask is None \
        else mask.reshape(n, offset_group, kh, kw, oh, ow)
    y = np.zeros((n, out_channels, oh, ow))
    for bi in range(n):
        for oc in range(out_channels):
            g = oc // (out_channels // group)
            for i in range(oh):
                for j in range(ow):
                    total = 0.0 if b is None else float(b[oc])
                    for c in range(per_group):
                        ic = g * per_group + c
                        og = ic // (channels // offset_group)
                        for ki in range(kh):
                            for kj in range(kw):
                                py = i * strides[0] - pads[0] + ki * dilations[0] \
                                    + offset[bi, og, ki, kj, 0, i, j]
                                px = j * strides[1] - pads[1] + kj * dilations[1] \
                                    + offset[bi, og, ki, kj, 1, i, j]
                                total += w[oc, c, ki, kj] * mask[bi, og, ki, kj, i, j] \
                                    * sample_2d(x[bi, ic], py, px)
                    y[bi, oc, i, j] = total
    return y


@pytest.mark.parametrize("group,offset_group,pads,strides,dilations,with_mask", [
    (1, 1, [0, 0, 0, 0], [1, 1], [1, 1], False),
    (2, 2, [1, 0, 1, 2], [2, 1], [1, 2], True),
    (1, 4, [1, 1, 1, 1], [1, 2], [2, 1], True),
])
def test_deform_conv_2d_matches_loops(rng, group, offset_group, pads, strides, dilations,
                                      with_mask):
    x = random_array(rng, (2, 4, 6, 7), "float64")
    w = random_array(rng, (4, 4 // group, 2, 3), "float64")
    oh = (6 + pads[0] + pads[2] - dilations[0] * 1 - 1) // strides[0] + 1
    ow = (7 + pads[1] + pads[3] - dilations[1] * 2 - 1) // strides[1] + 1
    offset = random_array(rng, (2, offset_group * 6 * 2, oh, ow), "float64", -2.0, 2.0)
    bias = random_array(rng, (4,), "float64")
    mask = random_array(rng, (2, offset_group * 6, oh, ow), "float64", 0.0, 1.0) \
        if with_mask else None
    attrs = {"group": group, "offset_group": offset_group, "pads": pads, "strides": strides,
             "dilations": dilations, "kernel_shape": [2, 3]}
    (y,) = run_op("DeformConv", [x, w, offset, bias, mask], attrs)
    close(y, deform_conv_2d_by_loops(x, w, offset, bias, mask, group, offset_group, pads,
                                     strides, dilations), "float64")


def test_deform_conv_with_zero_offsets_is_conv(rng):
    x = random_array(rng, (1, 3, 5, 4, 6))
    w = random_array(rng, (2, 3, 2, 2, 3))
    attrs = {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]}
    (expected,) = run_op("Conv", [x, w], attrs)
    offset = np.zeros((1, 12 * 3, *expected.shape[2:]), np.float32)
    (y,) = run_op("DeformConv", [x, w, offset], attrs)
    close(y, expected)
    # An offset of exactly one pixel along the last axis reads the next column.
    shifted = offset.reshape(1, 1, 12, 3, *expected.shape[2:]).copy()
    shifted[:, :, :, 2] = 1.0
    (moved,) = run_op("DeformConv", [x, w, shifted.reshape(offset.shape)], attrs)
    # ... which is Conv with one column less padding before and one more after.
    (conv_moved,) = run_op("Conv", [x, w], {"pads": [1, 0, 0, 0, 1, 2], "strides": [1, 2, 1]})
    close(moved, conv_moved)


def test_deform_conv_inference():
    n, h = Sym("n"), Sym("h")
    types = [tt(F32, (n, 4, h, 9)), tt(F32, (6, 2, 3, 3)), tt(F32, (n, 36, Sym("oh"), 7)),
             tt(F32, (6,)), tt(F32, (n, 18, Sym("oh"), 7))]
    (out,) = infer("DeformConv", types, {"group": 2, "offset_group": 2})
    assert out == tt(F32, (n, 6, dim_add(dim_floordiv(dim_sub(h, 3), 1), 1), 7))


def test_deform_conv_bad_inputs():
    x, w = tt(F32, (1, 4, 6, 6)), tt(F32, (2, 4, 3, 3))
    offset = tt(F32, (1, 18, 4, 4))
    with pytest.raises(OpError, match="DeformConv.*'offset'.*must have 36 channels"):
        infer("DeformConv", [x, w, offset], {"offset_group": 2})
    with pytest.raises(OpError, match="DeformConv.*'X'.*4 channels.*expects 8"):
        infer("DeformConv", [x, w, offset], {"group": 2})
    with pytest.raises(OpError, match="DeformConv.*'offset'.*output's spatial dims \\[4, 4\\]"):
        infer("DeformConv", [x, w, tt(F32, (1, 18, 5, 4))])
    with pytest.raises(OpError, match="DeformConv.*'mask'.*must have 9 channels"):
        infer("DeformConv", [x, w, offset, None, tt(F32, (1, 8, 4, 4))])
    with pytest.raises(OpError, match="DeformConv.*'B' must have 2 values"):
        infer("DeformConv", [x, w, offset, tt(F32, (3,))])
    with pytest.raises(OpError, match="DeformConv.*'W'.*kernel dims \\[3, 3\\].*says \\[2, 2\\]"):
        infer("DeformConv", [x, w, offset], {"kernel_shape": [2, 2]})
