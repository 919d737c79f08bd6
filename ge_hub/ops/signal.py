"""Signal- and image-processing ONNX ops: DFT, STFT, MelWeightMatrix, Col2Im, RoiAlign,
MaxUnpool, BitCast, TensorScatter and DeformConv.

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
from ge_hub.ops.inference import const_ints, normalize_axis
from ge_hub.ops.nn_common import (
    check_choice,
    check_flag,
    check_vector,
    reference_fail,
    work_dtype,
)
from ge_hub.ops.schema import (
    ANY,
    FLOATS,
    INDICES,
    INT64,
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


# --- Col2Im ---------------------------------------------------------------------------


def _spatial_attr(fail, attrs, name: str, count: int, default: int) -> list[int]:
    """Attribute `name` with `count` entries (default: all `default`), each checked."""
    values = attrs[name] or [default] * count
    if len(values) != count:
        fail(f"attribute {name!r} must have {count} values, got {values}")
    if any(v < (0 if default == 0 else 1) for v in values):
        fail(f"attribute {name!r} must be {'>= 0' if default == 0 else '>= 1'}, got {values}")
    return values


def _block_positions(fail, image, block, dilations, pads, strides) -> list[int]:
    """How many positions a block takes along each axis of the padded image."""
    rank = len(image)
    counts = []
    for d in range(rank):
        padded = image[d] + pads[d] + pads[d + rank]
        extent = dilations[d] * (block[d] - 1) + 1
        if padded < extent:
            fail(f"block dim {d} spans {extent} (dilated) but the padded image has {padded}")
        counts.append((padded - extent) // strides[d] + 1)
    return counts


def _infer_col2im(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, 3)
    ctx.require_rank(1, 1)
    ctx.require_rank(2, 1)
    image, block = const_ints(ctx, 1), const_ints(ctx, 2)
    rank = next((len(v) for v in (image, block) if v is not None), None)
    if rank is None:
        shape = ctx.input(1).shape
        rank = shape[0] if shape is not None and isinstance(shape[0], int) else None
    if image is not None and block is not None and len(image) != len(block):
        ctx.fail(f"inputs 'image_shape' {image} and 'block_shape' {block} must have the same "
                 f"length (one entry per spatial dim)")
    for name, values in (("image_shape", image), ("block_shape", block)):
        if values is not None and any(v < 1 for v in values):
            ctx.fail(f"input {name!r} must be all >= 1, got {values}")
    if rank is None:
        return [TensorType(x.dtype, None)]
    dilations = _spatial_attr(ctx.fail, ctx.attrs, "dilations", rank, 1)
    strides = _spatial_attr(ctx.fail, ctx.attrs, "strides", rank, 1)
    pads = _spatial_attr(ctx.fail, ctx.attrs, "pads", 2 * rank, 0)
    batch = x.shape[0] if x.shape is not None else ctx.new_sym("batch")
    columns = x.shape[1] if x.shape is not None else ctx.new_sym("columns")
    if block is None:
        channels: Dim = ctx.new_sym("channels")
    else:
        size = int(np.prod(block))
        if isinstance(columns, int) and columns % size:
            ctx.fail(f"input 'input' {x} dim 1 must be a multiple of the block size {size} "
                     f"(block_shape {block})")
        channels = dim_floordiv(columns, size)
    if image is not None and block is not None and x.shape is not None \
            and isinstance(x.shape[2], int):
        count = int(np.prod(_block_positions(ctx.fail, image, block, dilations, pads, strides)))
        if x.shape[2] != count:
            ctx.fail(f"input 'input' {x} dim 2 must be {count}, the number of block positions "
                     f"in image {image} (block {block}, dilations {dilations}, pads {pads}, "
                     f"strides {strides})")
    spatial = tuple(image) if image is not None else \
        ctx.new_syms(rank, "image")
    return [TensorType(x.dtype, (batch, channels) + spatial)]


@op("Col2Im", inputs=[Input("input", NUMERIC),
                      Input("image_shape", INT64, type_var="I", decides_shape=True),
                      Input("block_shape", INT64, type_var="I", decides_shape=True)],
    outputs=[Output("output")], infer=_infer_col2im,
    attrs=[Attr("dilations", AttrKind.INTS, None), Attr("pads", AttrKind.INTS, None),
           Attr("strides", AttrKind.INTS, None)])
def col2im(x, image_shape, block_shape, *, dilations, pads, strides):
    """Sum column blocks back into an image (PyTorch's fold), batched.

    input [N, C * prod(block), L]: column l holds, for each offset k inside the block,
    the value of channel c at image position p * stride - pad_begin + k * dilation, p
    being block position l (both k and l in C order). Overlapping values add up;
    positions falling in the padding are dropped. Output [N, C, *image_shape]."""
    fail = reference_fail("Col2Im")
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    rank = len(image)
    if len(block) != rank or x.ndim != 3:
        fail(f"expected input of rank 3 and image_shape, block_shape of one length, got "
             f"input shape {x.shape}, image_shape {image}, block_shape {block}")
    attrs = {"dilations": dilations, "pads": pads, "strides": strides}
    dilations = _spatial_attr(fail, attrs, "dilations", rank, 1)
    strides = _spatial_attr(fail, attrs, "strides", rank, 1)
    pads = _spatial_attr(fail, attrs, "pads", 2 * rank, 0)
    positions = _block_positions(fail, image, block, dilations, pads, strides)
    size = int(np.prod(block))
    if x.shape[1] % size or x.shape[2] != int(np.prod(positions)):
        fail(f"input shape {x.shape} must be [N, C * {size}, {int(np.prod(positions))}] for "
             f"block {block} over image {image}")
    batch, channels = x.shape[0], x.shape[1] // size
    blocks = x.reshape(batch, channels, *block, *positions)
    padded = np.zeros((batch, channels) + tuple(image[d] + pads[d] + pads[d + rank]
                                                 for d in range(rank)), x.dtype)
    # For one offset inside the block the positions it lands on are distinct, so a
    # strided slice per offset can add without np.add.at.
    for offset in np.ndindex(*block):
        where = tuple(slice(offset[d] * dilations[d],
                            offset[d] * dilations[d] + (positions[d] - 1) * strides[d] + 1,
                            strides[d]) for d in range(rank))
        padded[(slice(None), slice(None)) + where] += blocks[(slice(None), slice(None)) + offset]
    crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(rank))
    return padded[(slice(None), slice(None)) + crop]


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


# --- MaxUnpool ------------------------------------------------------------------------


def _unpooled_size(size: Dim, kernel: int, stride: int, pad_total: int) -> Dim:
    """(size - 1) * stride + kernel - pads: the extent MaxPool's window grid covered."""
    grown = dim_mul(dim_sub(size, 1), stride)
    amount = kernel - pad_total
    return dim_add(grown, amount) if amount >= 0 else dim_sub(grown, -amount)


def _infer_max_unpool(ctx: InferenceContext) -> list[TensorType]:
    x, indices = ctx.input(0), ctx.input(1)
    kernel = ctx.attrs["kernel_shape"]
    ctx.require_rank(0, len(kernel) + 2)
    ctx.require_rank(1, len(kernel) + 2)
    if x.shape is not None and indices.shape is not None and any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(x.shape, indices.shape)):
        ctx.fail(f"input 'I' {indices} must have the shape of 'X' {x}")
    spatial = len(kernel)
    if any(k < 1 for k in kernel):
        ctx.fail(f"attribute 'kernel_shape' must be all >= 1, got {kernel}")
    strides = _spatial_attr(ctx.fail, ctx.attrs, "strides", spatial, 1)
    pads = _spatial_attr(ctx.fail, ctx.attrs, "pads", 2 * spatial, 0)
    rank = spatial + 2
    if ctx.has_input(2):
        ctx.require_rank(2, 1)
        given = const_ints(ctx, 2)
        if given is None:
            return [TensorType(x.dtype, ctx.new_syms(rank, "unpooled"))]
        if len(given) != rank:
            ctx.fail(f"input 'output_shape' {given} must have {rank} entries (the rank of 'X')")
        if x.shape is not None:
            for d in range(2):  # batch and channels are never resized
                if isinstance(x.shape[d], int) and given[d] != x.shape[d]:
                    ctx.fail(f"input 'output_shape' {given} must keep dim {d} of 'X' {x}")
            for d in range(spatial):
                least = _unpooled_size(x.shape[d + 2], kernel[d], strides[d],
                                       pads[d] + pads[d + spatial])
                if isinstance(least, int) and given[d + 2] < least:
                    ctx.fail(f"input 'output_shape' {given} cannot hold the unpooled tensor: "
                             f"dim {d + 2} must be at least {least}")
        return [TensorType(x.dtype, tuple(given))]
    if x.shape is None:
        return [TensorType(x.dtype, ctx.new_syms(rank, "unpooled"))]
    shape = tuple(x.shape[:2]) + tuple(
        _unpooled_size(x.shape[d + 2], kernel[d], strides[d], pads[d] + pads[d + spatial])
        for d in range(spatial))
    return [TensorType(x.dtype, shape)]


@op("MaxUnpool", inputs=[Input("X", FLOATS), Input("I", INT64, type_var="I"),
                         Input("output_shape", INT64, type_var="I", optional=True,
                               decides_shape=True)],
    outputs=[Output("output")], infer=_infer_max_unpool,
    attrs=[Attr("kernel_shape", AttrKind.INTS), Attr("pads", AttrKind.INTS, None),
           Attr("strides", AttrKind.INTS, None)])
def max_unpool(x, indices, output_shape=None, *, kernel_shape, pads, strides):
    """The partial inverse of MaxPool: zeros, with each X value put back where I says.

    I holds MaxPool's flat indices into the tensor MaxPool read, of spatial size
    (in - 1) * stride + kernel - pads per axis. When output_shape is given and larger,
    that tensor sits in its leading corner and the rest is zero (as the ONNX reference
    and its conformance tests place it)."""
    fail = reference_fail("MaxUnpool")
    spatial = len(kernel_shape)
    if x.ndim != spatial + 2 or indices.shape != x.shape:
        fail(f"expected X and I of one shape of rank {spatial + 2} (kernel_shape "
             f"{kernel_shape}), got {x.shape} and {indices.shape}")
    attrs = {"pads": pads, "strides": strides}
    strides = _spatial_attr(fail, attrs, "strides", spatial, 1)
    pads = _spatial_attr(fail, attrs, "pads", 2 * spatial, 0)
    shape = x.shape[:2] + tuple(
        _unpooled_size(x.shape[d + 2], kernel_shape[d], strides[d], pads[d] + pads[d + spatial])
        for d in range(spatial))
    total = int(np.prod(shape))
    flat_indices = indices.reshape(-1)
    if flat_indices.size and (flat_indices.min() < 0 or flat_indices.max() >= total):
        fail(f"input 'I' must index into the {total} elements of the unpooled tensor {shape}, "
             f"got indices from {flat_indices.min()} to {flat_indices.max()}")
    unpooled = np.zeros(total, x.dtype)
    unpooled[flat_indices] = x.reshape(-1)
    unpooled = unpooled.reshape(shape)
    if output_shape is None:
        return unpooled
    target = tuple(int(v) for v in np.asarray(output_shape).reshape(-1))
    if len(target) != x.ndim or target[:2] != shape[:2] or any(
            t < s for t, s in zip(target[2:], shape[2:])):
        fail(f"input 'output_shape' {list(target)} cannot hold the unpooled tensor {shape}")
    out = np.zeros(target, x.dtype)
    out[tuple(slice(0, s) for s in shape)] = unpooled
    return out


# --- BitCast --------------------------------------------------------------------------


def _infer_bit_cast(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    to = DType.parse(ctx.attrs["to"])
    if to.itemsize != x.dtype.itemsize:
        ctx.fail(f"attribute 'to' ({to}, {8 * to.itemsize} bits) must have the bit width of "
                 f"input 'input' ({x.dtype}, {8 * x.dtype.itemsize} bits)")
    return [TensorType(to, x.shape)]


@op("BitCast", inputs=[Input("input", ANY)], outputs=[Output("output")], infer=_infer_bit_cast,
    attrs=[Attr("to", AttrKind.DTYPE)])
def bit_cast(x, *, to):
    """The bytes of `input` (little endian) read as dtype `to` of the same width; the
    shape stays. A byte read as bool is true when it is not zero (NumPy would keep the
    byte, so that two true values could compare unequal)."""
    target = DType.parse(to)
    if target.itemsize != x.dtype.itemsize:
        raise OpError(f"BitCast: attribute 'to' ({target}) must have the bit width of input "
                      f"'input' ({x.dtype})")
    # np.array, not np.ascontiguousarray, which would make a scalar 1-D.
    data = np.array(x, dtype=x.dtype.newbyteorder("<"), order="C")
    if target is DType.BOOL:
        return data.view(np.uint8) != 0
    return data.view(target.numpy.newbyteorder("<")).astype(target.numpy)


# --- TensorScatter --------------------------------------------------------------------


def _infer_tensor_scatter(ctx: InferenceContext) -> list[TensorType]:
    check_choice(ctx, "mode", ("linear", "circular"))
    past, update = ctx.input(0), ctx.input(1)
    if past.shape is None or update.shape is None:
        return [past]
    rank = len(past.shape)
    if rank < 2:
        ctx.fail(f"input 'past_cache' {past} must have rank >= 2 (batch and sequence dims)")
    axis = normalize_axis(ctx, ctx.attrs["axis"], rank)
    if axis == 0:
        ctx.fail("attribute 'axis' must not be the batch axis 0")
    ctx.require_rank(1, rank)
    for d, (have, want) in enumerate(zip(update.shape, past.shape)):
        if isinstance(have, int) and isinstance(want, int) and (
                have > want if d == axis else have != want):
            ctx.fail(f"input 'update' {update} must match 'past_cache' {past} except along "
                     f"axis {axis}, where it may be shorter (dim {d}: {have} vs {want})")
    if ctx.has_input(2):
        ctx.require_rank(2, 1)
        indices = ctx.input(2)
        if indices.shape is not None and isinstance(indices.shape[0], int) \
                and isinstance(past.shape[0], int) and indices.shape[0] != past.shape[0]:
            ctx.fail(f"input 'write_indices' {indices} must have one index per batch entry "
                     f"({past.shape[0]})")
    return [past]


@op("TensorScatter", inputs=[Input("past_cache", ANY), Input("update", ANY),
                             Input("write_indices", INT64, type_var="I", optional=True)],
    outputs=[Output("present_cache")], infer=_infer_tensor_scatter,
    attrs=[Attr("axis", AttrKind.INT, -2), Attr("mode", AttrKind.STRING, "linear")])
def tensor_scatter(past_cache, update, write_indices=None, *, axis, mode):
    """A copy of past_cache with `update` written along `axis` (the sequence axis) at
    write_indices[b] (0 when omitted) for each batch entry b. In 'circular' mode the
    positions wrap around the cache length; in 'linear' mode they must fit in it."""
    fail = reference_fail("TensorScatter")
    if not 1 <= axis % max(past_cache.ndim, 1) < past_cache.ndim \
            or not -past_cache.ndim <= axis < past_cache.ndim:
        fail(f"attribute 'axis' {axis} must name a non-batch axis of 'past_cache' "
             f"{past_cache.shape}")
    axis %= past_cache.ndim
    capacity, length = past_cache.shape[axis], update.shape[axis]
    batch = past_cache.shape[0]
    starts = np.zeros(batch, np.int64) if write_indices is None \
        else np.asarray(write_indices).reshape(-1)
    if starts.shape != (batch,):
        fail(f"input 'write_indices' must have {batch} entries, got {starts.shape}")
    present = past_cache.copy()
    for b, start in enumerate(starts):
        positions = int(start) + np.arange(length)
        if mode == "circular":
            positions %= capacity
        elif start < 0 or length and positions[-1] >= capacity:
            fail(f"batch entry {b} writes positions {int(start)}..{int(start) + length - 1} "
                 f"beyond the cache length {capacity} (mode 'linear')")
        target = np.moveaxis(present[b], axis - 1, 0)  # a view: writes reach `present`
        target[positions] = np.moveaxis(update[b], axis - 1, 0)
    return present


# --- DeformConv -----------------------------------------------------------------------


def _deform_geometry(fail, rank: int, kernel_shape, dilations, pads, strides, weight_kernel):
    """The spatial attributes of a DeformConv with `rank` spatial dims, defaults filled."""
    kernel = list(kernel_shape or weight_kernel)
    if len(kernel) != rank or any(k < 1 for k in kernel if isinstance(k, int)):
        fail(f"attribute 'kernel_shape' must have {rank} values >= 1, got {kernel}")
    attrs = {"dilations": dilations, "pads": pads, "strides": strides}
    return (kernel, _spatial_attr(fail, attrs, "dilations", rank, 1),
            _spatial_attr(fail, attrs, "pads", 2 * rank, 0),
            _spatial_attr(fail, attrs, "strides", rank, 1))


def _conv_out_dim(size: Dim, kernel: int, dilation: int, pad_total: int, stride: int) -> Dim:
    """floor((size + pads - dilated kernel) / stride) + 1."""
    amount = pad_total - (dilation * (kernel - 1) + 1)
    shifted = dim_add(size, amount) if amount >= 0 else dim_sub(size, -amount)
    return dim_add(dim_floordiv(shifted, stride), 1)


def _known(*dims: Dim) -> bool:
    return all(isinstance(d, int) for d in dims)


def _infer_deform_conv(ctx: InferenceContext) -> list[TensorType]:
    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = ctx.require_rank(0, at_least=3)
    if rank is None:
        rank = w.rank if w.rank is not None else offset.rank
    if rank is None:
        return [TensorType(x.dtype, None)]
    for index in (1, 2):
        ctx.require_rank(index, rank)
    spatial = rank - 2
    weight_kernel = w.shape[2:] if w.shape is not None else None
    if not ctx.attrs["kernel_shape"] and (weight_kernel is None or not all(
            isinstance(k, int) for k in weight_kernel)):
        ctx.fail(f"needs attribute 'kernel_shape' or a weight 'W' of known kernel dims, got {w}")
    kernel, dilations, pads, strides = _deform_geometry(
        ctx.fail, spatial, ctx.attrs["kernel_shape"], ctx.attrs["dilations"],
        ctx.attrs["pads"], ctx.attrs["strides"], weight_kernel)
    group, offset_group = ctx.attrs["group"], ctx.attrs["offset_group"]
    if group < 1 or offset_group < 1:
        ctx.fail(f"attributes 'group' and 'offset_group' must be >= 1, got {group} and "
                 f"{offset_group}")
    if x.shape is not None and w.shape is not None:
        channels, out_channels = x.shape[1], w.shape[0]
        if _known(channels, w.shape[1]) and channels != w.shape[1] * group:
            ctx.fail(f"input 'X' {x} has {channels} channels; 'W' {w} with group {group} "
                     f"expects {w.shape[1] * group}")
        if _known(out_channels) and out_channels % group:
            ctx.fail(f"'W' {w} has {out_channels} output channels, not a multiple of group "
                     f"{group}")
        if _known(channels) and channels % offset_group:
            ctx.fail(f"input 'X' {x} has {channels} channels, not a multiple of offset_group "
                     f"{offset_group}")
        if _known(*w.shape[2:]) and list(w.shape[2:]) != kernel:
            ctx.fail(f"'W' {w} has kernel dims {list(w.shape[2:])}, attribute 'kernel_shape' "
                     f"says {kernel}")
    taps = int(np.prod(kernel))
    if offset.shape is not None and _known(offset.shape[1]) \
            and offset.shape[1] != offset_group * taps * spatial:
        ctx.fail(f"input 'offset' {offset} must have {offset_group * taps * spatial} channels "
                 f"(offset_group {offset_group} x {taps} kernel taps x {spatial} coordinates)")
    batch = x.shape[0] if x.shape is not None else ctx.new_sym("batch")
    out_channels = w.shape[0] if w.shape is not None else ctx.new_sym("channels")
    if x.shape is not None:
        out = tuple(_conv_out_dim(x.shape[d + 2], kernel[d], dilations[d],
                                  pads[d] + pads[d + spatial], strides[d])
                    for d in range(spatial))
    elif offset.shape is not None:
        out = tuple(offset.shape[2:])
    else:
        out = tuple(ctx.new_sym("out") for _ in range(spatial))
    if offset.shape is not None and any(_known(a, b) and a != b
                                        for a, b in zip(offset.shape[2:], out)):
        ctx.fail(f"input 'offset' {offset} must have the output's spatial dims {list(out)}")
    if ctx.has_input(3):
        check_vector(ctx, 3, out_channels, "one bias per output channel")
    if ctx.has_input(4):
        mask = ctx.input(4)
        ctx.require_rank(4, rank)
        if mask.shape is not None and _known(mask.shape[1]) \
                and mask.shape[1] != offset_group * taps:
            ctx.fail(f"input 'mask' {mask} must have {offset_group * taps} channels "
                     f"(offset_group {offset_group} x {taps} kernel taps)")
    return [TensorType(x.dtype, (batch, out_channels) + out)]


@op("DeformConv", inputs=[Input("X", FLOATS), Input("W", FLOATS), Input("offset", FLOATS),
                          Input("B", FLOATS, optional=True), Input("mask", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_deform_conv,
    attrs=[Attr("dilations", AttrKind.INTS, None), Attr("group", AttrKind.INT, 1),
           Attr("kernel_shape", AttrKind.INTS, None), Attr("offset_group", AttrKind.INT, 1),
           Attr("pads", AttrKind.INTS, None), Attr("strides", AttrKind.INTS, None)])
def deform_conv(x, w, offset, b=None, mask=None, *, dilations, group, kernel_shape,
                offset_group, pads, strides):
    """A convolution whose kernel taps move: tap k of output position o reads X at
    o * stride - pad_begin + k * dilation + offset[n, g, k, :, o] by (multi)linear
    interpolation, corners outside X counting 0, scaled by mask[n, g, k, o] (1 when
    omitted). g is the offset group of the input channel; offset is [N, offset_group *
    taps * spatial dims, *out] and mask [N, offset_group * taps, *out]. Groups, bias and
    output shape are as in Conv."""
    fail = reference_fail("DeformConv")
    spatial = x.ndim - 2
    kernel, dilations, pads, strides = _deform_geometry(
        fail, spatial, kernel_shape, dilations, pads, strides, w.shape[2:])
    batch, channels, in_dims = x.shape[0], x.shape[1], x.shape[2:]
    taps = int(np.prod(kernel))
    out_dims = tuple((in_dims[d] + pads[d] + pads[d + spatial] - dilations[d] * (kernel[d] - 1)
                      - 1) // strides[d] + 1 for d in range(spatial))
    if channels != w.shape[1] * group or w.shape[0] % group or channels % offset_group \
            or offset.shape != (batch, offset_group * taps * spatial) + out_dims \
            or (mask is not None and mask.shape != (batch, offset_group * taps) + out_dims):
        fail(f"inconsistent shapes: X {x.shape}, W {w.shape}, offset {offset.shape}, mask "
             f"{None if mask is None else mask.shape} for group {group}, offset_group "
             f"{offset_group}, kernel {kernel} and output dims {out_dims}")
    work = work_dtype(x.dtype)
    per_group = channels // offset_group
    image = x.astype(work).reshape(batch, offset_group, per_group, -1)
    shifts = offset.astype(np.float64).reshape(batch, offset_group, taps, spatial, *out_dims)
    scales = np.ones((batch, offset_group, taps) + out_dims) if mask is None else \
        mask.astype(np.float64).reshape(batch, offset_group, taps, *out_dims)
    grid = np.meshgrid(*[np.arange(n) for n in out_dims], indexing="ij")
    n_index = np.arange(batch).reshape((batch, 1) + (1,) * spatial)
    g_index = np.arange(offset_group).reshape((1, offset_group) + (1,) * spatial)
    columns = np.zeros((batch, offset_group, taps) + out_dims + (per_group,), work)
    for t, tap in enumerate(np.ndindex(*kernel)):
        where = [grid[d] * strides[d] - pads[d] + tap[d] * dilations[d] + shifts[:, :, t, d]
                 for d in range(spatial)]
        floors = [np.floor(p).astype(np.int64) for p in where]
        for corner in np.ndindex(*([2] * spatial)):
            weight = scales[:, :, t].copy()
            inside = np.ones(weight.shape, bool)
            flat = np.zeros(weight.shape, np.int64)
            for d in range(spatial):
                at = floors[d] + corner[d]
                weight *= 1.0 - np.abs(where[d] - at)
                inside &= (at >= 0) & (at < in_dims[d])
                flat = flat * in_dims[d] + np.clip(at, 0, in_dims[d] - 1)
            values = image[n_index, g_index, :, flat]  # [N, G, *out, per_group]
            columns[:, :, t] += (weight * inside)[..., None].astype(work) * values
    # [N, G, taps, *out, per_group] -> [N, channels, taps, *out]: channel = g * per_group + c
    columns = np.moveaxis(columns, -1, 2).reshape(batch, channels, taps, -1)
    out_channels = w.shape[0]
    columns = columns.reshape(batch, group, channels // group, taps, -1)
    weights = w.astype(work).reshape(group, out_channels // group, channels // group, taps)
    y = np.einsum("ngckp,gock->ngop", columns, weights).reshape(batch, out_channels, *out_dims)
    if b is not None:
        y = y + b.astype(work).reshape((1, -1) + (1,) * spatial)
    return y.astype(x.dtype)
