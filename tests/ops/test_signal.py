"""Signal-processing ops: each reference against the ONNX spec's formulas written as loops,
inference on concrete and symbolic dims, dtypes, and bad inputs."""

from __future__ import annotations

import math

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
