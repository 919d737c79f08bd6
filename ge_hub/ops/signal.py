"""Signal-processing ONNX ops: DFT, STFT and MelWeightMatrix.

Complex tensors follow ONNX's convention: a trailing dim of 2 holds (real, imaginary),
a trailing dim of 1 holds a real signal. Each op follows the newest ONNX opset. As
`nn_common.work_dtype` says, the transforms compute in complex128 for float64 data and
in complex64 otherwise (NumPy's FFT keeps single precision, as other backends' FFTs do),
and round once to the dtype inference promised; MelWeightMatrix computes in float64.
"""

from __future__ import annotations

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_add, dim_floordiv, dim_mul, dim_sub
from ge_hub.ops.inference import const_ints
from ge_hub.ops.nn_common import check_flag, reference_fail, work_dtype
from ge_hub.ops.schema import (
    FLOATS,
    INDICES,
    NUMERIC,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)


def _scalar_const(ctx: InferenceContext, index: int) -> int | None:
    """The value of scalar int input `index` when it is a known constant, else None."""
    if not ctx.has_input(index):
        return None
    t = ctx.input(index)
    if t.shape is not None and len(t.shape) > 1:
        ctx.fail(f"input {ctx.schema.input_name(index)!r} must be a scalar, got {t}")
    values = const_ints(ctx, index)
    if values is None:
        return None
    if len(values) != 1:
        ctx.fail(f"input {ctx.schema.input_name(index)!r} must hold one value, "
                 f"got {len(values)}")
    return values[0]


def _check_complex_dim(ctx: InferenceContext, index: int) -> None:
    """The last dim of input `index` must be 1 (real) or 2 (real, imaginary)."""
    t = ctx.input(index)
    if t.shape is not None and t.shape and isinstance(t.shape[-1], int) \
            and t.shape[-1] not in (1, 2):
        ctx.fail(f"input {ctx.schema.input_name(index)!r} must end in a dim of 1 (real) or "
                 f"2 (complex), got {t}")


def _as_complex(x: np.ndarray, op_name: str, name: str) -> np.ndarray:
    """The complex signal held by an ONNX real/complex tensor (last dim dropped)."""
    if x.ndim == 0 or x.shape[-1] not in (1, 2):
        raise OpError(f"{op_name}: input {name!r} must end in a dim of 1 (real) or 2 "
                      f"(complex), got shape {x.shape}")
    real = work_dtype(x.dtype)
    complex_dtype = np.result_type(real, np.complex64)
    wide = x.astype(real)
    if x.shape[-1] == 1:
        return wide[..., 0].astype(complex_dtype)
    return (wide[..., 0] + 1j * wide[..., 1]).astype(complex_dtype)


def _as_pairs(z: np.ndarray, dtype) -> np.ndarray:
    """A complex array as an ONNX complex tensor (trailing (real, imaginary) dim)."""
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _half_plus_one(n: Dim) -> Dim:
    """n // 2 + 1: the bins a one-sided transform of n points keeps."""
    return dim_add(dim_floordiv(n, 2), 1)


# --- DFT ------------------------------------------------------------------------------


def _dft_axis(fail, axis: int, rank: int) -> int:
    """ONNX's DFT axis: any dim but the trailing complex one, negative from the back."""
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        fail(f"axis {axis} must be in [{-rank}, -2] or [0, {rank - 2}] for an input of "
             f"rank {rank} (the last dim holds the complex parts)")
    return axis % rank


def _infer_dft(ctx: InferenceContext) -> list[TensorType]:
    check_flag(ctx, "inverse")
    check_flag(ctx, "onesided")
    x = ctx.input(0)
    rank = ctx.require_rank(0, at_least=2)
    _check_complex_dim(ctx, 0)
    irfft = bool(ctx.attrs["inverse"] and ctx.attrs["onesided"])
    parts = 1 if irfft else 2
    length = _scalar_const(ctx, 1)
    if length is not None and length < 1:
        ctx.fail(f"input 'dft_length' must be >= 1, got {length}")
    axis = _scalar_const(ctx, 2) if ctx.has_input(2) else -2
    if rank is None:
        return [TensorType(x.dtype, None)]
    if axis is None:  # the transformed axis is unknown, so is every dim but the last
        return [TensorType(x.dtype, ctx.new_syms(rank - 1, "dft")
                           + (parts,))]
    axis = _dft_axis(ctx.fail, axis, rank)
    n = x.shape[axis]
    if ctx.has_input(1) and length is None:
        out = ctx.new_sym("dft_length")
    elif irfft:
        out = length if length is not None else dim_mul(dim_sub(n, 1), 2)
    elif ctx.attrs["onesided"]:
        out = _half_plus_one(length if length is not None else n)
    else:
        out = length if length is not None else n
    shape = list(x.shape)
    shape[axis] = out
    shape[-1] = parts
    return [TensorType(x.dtype, tuple(shape))]


@op("DFT", inputs=[Input("input", FLOATS),
                   Input("dft_length", INDICES, type_var="I", optional=True, decides_shape=True),
                   Input("axis", frozenset({DType.INT64}), type_var="A", optional=True,
                         decides_shape=True)],
    outputs=[Output("output")], infer=_infer_dft,
    attrs=[Attr("inverse", AttrKind.INT, 0), Attr("onesided", AttrKind.INT, 0)])
def dft(x, dft_length=None, axis=None, *, inverse, onesided):
    """The discrete Fourier transform of `input` along `axis` (default -2).

    y[k] = sum_n x[n] exp(-2 pi j k n / N); the inverse uses exp(+2 pi j k n / N) / N. The
    signal is zero-padded or cut to `dft_length` points. `onesided` keeps the first
    N // 2 + 1 bins of a forward transform; with `inverse` it reads those bins of a
    Hermitian spectrum and returns the real signal (last dim 1) of N points, N being
    `dft_length` or 2 * (bins - 1)."""
    fail = reference_fail("DFT")
    axis = _dft_axis(fail, -2 if axis is None else int(np.asarray(axis).reshape(-1)[0]), x.ndim)
    signal = _as_complex(x, "DFT", "input")
    n = x.shape[axis]
    if dft_length is not None:
        length = int(np.asarray(dft_length).reshape(-1)[0])
        if length < 1:
            fail(f"input 'dft_length' must be >= 1, got {length}")
    else:
        length = 2 * (n - 1) if inverse and onesided else n
    if inverse and onesided:
        return np.fft.irfft(signal, n=length, axis=axis)[..., np.newaxis].astype(x.dtype)
    if inverse:
        return _as_pairs(np.fft.ifft(signal, n=length, axis=axis), x.dtype)
    spectrum = np.fft.fft(signal, n=length, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
    return _as_pairs(spectrum, x.dtype)


# --- STFT -----------------------------------------------------------------------------


def _infer_stft(ctx: InferenceContext) -> list[TensorType]:
    check_flag(ctx, "onesided")
    x = ctx.input(0)
    ctx.require_rank(0, 3)
    _check_complex_dim(ctx, 0)
    step = _scalar_const(ctx, 1)
    if step is not None and step < 1:
        ctx.fail(f"input 'frame_step' must be >= 1, got {step}")
    window_length: Dim | None = None
    if ctx.has_input(2):
        ctx.require_rank(2, 1)
        window = ctx.input(2)
        window_length = window.shape[0] if window.shape is not None else ctx.new_sym("window")
    frame_length: Dim | None = _scalar_const(ctx, 3)
    if ctx.has_input(3) and frame_length is None:
        frame_length = ctx.new_sym("frame_length")
    if isinstance(frame_length, int) and isinstance(window_length, int) \
            and frame_length != window_length:
        ctx.fail(f"input 'window' has {window_length} values but 'frame_length' is "
                 f"{frame_length}; they must agree")
    if frame_length is None:
        frame_length = window_length
    batch = x.shape[0] if x.shape is not None else ctx.new_sym("batch")
    signal_length = x.shape[1] if x.shape is not None else ctx.new_sym("signal")
    if frame_length is None:
        frame_length = signal_length
    if isinstance(frame_length, int) and isinstance(signal_length, int) \
            and frame_length > signal_length:
        ctx.fail(f"frame length {frame_length} is longer than the signal ({signal_length})")
    if step is None:
        frames: Dim = ctx.new_sym("frames")
    else:
        frames = dim_add(dim_floordiv(dim_sub(signal_length, frame_length), step), 1)
    bins = _half_plus_one(frame_length) if ctx.attrs["onesided"] else frame_length
    return [TensorType(x.dtype, (batch, frames, bins, 2))]


@op("STFT", inputs=[Input("signal", FLOATS),
                    Input("frame_step", INDICES, type_var="I", decides_shape=True),
                    Input("window", FLOATS, optional=True),
                    Input("frame_length", INDICES, type_var="I", optional=True,
                          decides_shape=True)],
    outputs=[Output("output")], infer=_infer_stft, attrs=[Attr("onesided", AttrKind.INT, 1)])
def stft(signal, frame_step, window=None, frame_length=None, *, onesided):
    """The short-time Fourier transform of `signal` [batch, length, 1 or 2].

    Frame f covers samples f * frame_step .. f * frame_step + frame_length - 1, is
    multiplied by `window` (all ones when omitted) and transformed by a DFT; there are
    (length - frame_length) // frame_step + 1 frames. The frame length is `frame_length`,
    else the window's length, else the whole signal. `onesided` keeps N // 2 + 1 bins.
    Output: [batch, frames, bins, 2]."""
    fail = reference_fail("STFT")
    if signal.ndim != 3:
        fail(f"input 'signal' must have rank 3 [batch, length, 1 or 2], got shape "
             f"{signal.shape}")
    data = _as_complex(signal, "STFT", "signal")
    step = int(np.asarray(frame_step).reshape(-1)[0])
    if step < 1:
        fail(f"input 'frame_step' must be >= 1, got {step}")
    if frame_length is not None:
        length = int(np.asarray(frame_length).reshape(-1)[0])
        if window is not None and window.shape != (length,):
            fail(f"input 'window' must have shape ({length},) to match 'frame_length', got "
                 f"{window.shape}")
    else:
        length = window.shape[0] if window is not None else signal.shape[1]
    if not 1 <= length <= signal.shape[1]:
        fail(f"frame length {length} must be in [1, {signal.shape[1]}] (the signal length)")
    weights = np.ones(length, data.real.dtype) if window is None \
        else window.astype(data.real.dtype)
    frames = (signal.shape[1] - length) // step + 1
    starts = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = data[:, starts] * weights  # [batch, frames, length]
    spectrum = np.fft.fft(framed, axis=-1)
    if onesided:
        spectrum = spectrum[..., : length // 2 + 1]
    return _as_pairs(spectrum, signal.dtype)


# --- MelWeightMatrix ------------------------------------------------------------------


def _infer_mel_weight_matrix(ctx: InferenceContext) -> list[TensorType]:
    for index in range(5):
        t = ctx.input(index)
        if t.shape is not None and len(t.shape) > 1:
            ctx.fail(f"input {ctx.schema.input_name(index)!r} must be a scalar, got {t}")
    mel_bins = _scalar_const(ctx, 0)
    dft_length = _scalar_const(ctx, 1)
    if mel_bins is not None and mel_bins < 1:
        ctx.fail(f"input 'num_mel_bins' must be >= 1, got {mel_bins}")
    if dft_length is not None and dft_length < 1:
        ctx.fail(f"input 'dft_length' must be >= 1, got {dft_length}")
    rows = dft_length // 2 + 1 if dft_length is not None else ctx.new_sym("spectrogram_bins")
    cols = mel_bins if mel_bins is not None else ctx.new_sym("mel_bins")
    dtype = DType.parse(ctx.attrs["output_datatype"])
    if dtype not in NUMERIC:
        ctx.fail(f"attribute 'output_datatype' must be a numeric dtype, got {dtype}")
    return [TensorType(dtype, (rows, cols))]


def _hertz_to_mel(hertz):
    return 2595.0 * np.log10(1.0 + hertz / 700.0)


def _mel_to_hertz(mel):
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


_INTS = frozenset({DType.INT32, DType.INT64})


@op("MelWeightMatrix",
    inputs=[Input("num_mel_bins", _INTS, type_var="I", decides_shape=True),
            Input("dft_length", _INTS, type_var="I", decides_shape=True),
            Input("sample_rate", _INTS, type_var="I"),
            Input("lower_edge_hertz", FLOATS, type_var="F"),
            Input("upper_edge_hertz", FLOATS, type_var="F")],
    outputs=[Output("output")], infer=_infer_mel_weight_matrix,
    attrs=[Attr("output_datatype", AttrKind.DTYPE, DType.FLOAT32)])
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, *, output_datatype):
    """A [dft_length // 2 + 1, num_mel_bins] matrix of triangular mel filters.

    The band [lower, upper] hertz is cut into num_mel_bins + 2 points equally spaced on
    the mel scale mel(f) = 2595 log10(1 + f / 700), the step being (mel(upper) -
    mel(lower)) / (num_mel_bins + 2) as ONNX defines it; point i falls in spectrogram bin
    b_i = floor((dft_length + 1) * f_i / sample_rate). Filter i rises linearly from 0 at
    b_i to 1 at b_(i+1) and falls back to 0 at b_(i+2)."""
    fail = reference_fail("MelWeightMatrix")
    mel_bins, length = int(num_mel_bins), int(dft_length)
    rate = int(sample_rate)
    if mel_bins < 1 or length < 1 or rate < 1:
        fail(f"inputs 'num_mel_bins', 'dft_length' and 'sample_rate' must be >= 1, got "
             f"{mel_bins}, {length}, {rate}")
    low, high = _hertz_to_mel(float(lower_edge_hertz)), _hertz_to_mel(float(upper_edge_hertz))
    points = low + np.arange(mel_bins + 2) * ((high - low) / (mel_bins + 2))
    bins = np.floor((length + 1) * _mel_to_hertz(points) / rate).astype(np.int64)
    rows = length // 2 + 1
    if bins.min() < 0 or bins.max() >= rows:
        fail(f"the band [{float(lower_edge_hertz)}, {float(upper_edge_hertz)}] Hz reaches "
             f"spectrogram bins {bins.min()}..{bins.max()}, outside 0..{rows - 1} "
             f"(keep it within [0, sample_rate / 2])")
    out = np.zeros((rows, mel_bins))
    for i in range(mel_bins):
        left, center, right = bins[i], bins[i + 1], bins[i + 2]
        if center == left:
            out[center, i] = 1.0
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return out.astype(DType.parse(output_datatype).numpy)
