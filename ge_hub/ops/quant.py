"""Linear quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and
the integer products MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

A quantized tensor q stands for the real values (q - zero_point) * scale. Quantizing
divides by the scale, rounds half to even, adds the zero point and saturates to the
range of the quantized dtype (int8, uint8, int16, uint16, int4, uint4, int2 or uint2).
To a float8 or float4 dtype the quotient is converted as Cast converts (round to nearest
even, `saturate` deciding what overflow becomes), and the zero point, which ONNX requires
to be 0, must be 0. The scale and zero point apply per tensor (a scalar), per axis (a 1-D
tensor along `axis`) or per block (`block_size` consecutive elements along `axis` share
one).

The integer products accumulate exactly (int64, or float64 holding integers, which is
exact far beyond any int8 accumulation) and take their shapes from MatMul's and Conv's
inference, run on the two operands (`_operand_context`). The requantization multiplier
of the QLinear ops (a_scale * b_scale / y_scale) is formed in the scales' dtype, as
ONNX's reference does, and applied to the exact accumulator in float64.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np

from ge_hub.ir.dtypes import FLOAT8_TYPES, SMALL_INTEGER_TYPES, DType
from ge_hub.ir.types import Dim, TensorType
from ge_hub.ops import conv as conv_ops  # a module: its Conv schema must not be ours too
from ge_hub.ops import narrow
from ge_hub.ops.activation import cast_array
from ge_hub.ops.conv import CONV_ATTRS, _infer_conv
from ge_hub.ops.inference import normalize_axis
from ge_hub.ops.nn import _infer_matmul
from ge_hub.ops.nn_common import Fail, check_flag, reference_fail
from ge_hub.ops.schema import Attr, AttrKind, InferenceContext, Input, Output, op

EIGHT_BIT = frozenset({DType.INT8, DType.UINT8})
QUANTIZED = (EIGHT_BIT | {DType.INT16, DType.UINT16} | SMALL_INTEGER_TYPES | FLOAT8_TYPES
             | {DType.FLOAT4_E2M1FN})
SCALE_TYPES = frozenset({DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16})
FLOAT32 = frozenset({DType.FLOAT32})
INT32 = frozenset({DType.INT32})


# -- shared: granularity of scale and zero point, rounding with saturation --------------


def _same_shape(ctx: InferenceContext, first: int, second: int) -> None:
    """Scale and zero point come in pairs of the same shape."""
    if not ctx.has_input(second):
        return
    a, b = ctx.input(first), ctx.input(second)
    if a.shape is not None and b.shape is not None and _is_per_tensor(a) \
            and _is_per_tensor(b):
        return  # a scalar and a [1] both apply to the whole tensor (ONNX's float8 tests)
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        if a.rank is not None and b.rank is not None:
            ctx.fail(f"inputs {ctx.schema.input_name(first)!r} {a} and "
                     f"{ctx.schema.input_name(second)!r} {b} must have the same shape")
        return
    for d, e in zip(a.shape, b.shape):
        if isinstance(d, int) and isinstance(e, int) and d != e:
            ctx.fail(f"inputs {ctx.schema.input_name(first)!r} {a} and "
                     f"{ctx.schema.input_name(second)!r} {b} must have the same shape")


def _is_per_tensor(t: TensorType) -> bool:
    return t.rank == 0 or (t.rank == 1 and t.shape[0] == 1)


def _check_granularity(ctx: InferenceContext, scale_index: int, zero_index: int) -> None:
    """Scale (and zero point) of input 0 per tensor, per axis or blocked along `axis`."""
    x, scale = ctx.input(0), ctx.input(scale_index)
    scale_name = ctx.schema.input_name(scale_index)
    axis, block = ctx.attrs["axis"], ctx.attrs["block_size"]
    _same_shape(ctx, scale_index, zero_index)
    if block < 0:
        ctx.fail(f"attribute 'block_size' must be >= 0, got {block}")
    if scale.rank is None or _is_per_tensor(scale):
        return
    if block == 0 and scale.rank != 1:
        ctx.fail(f"input {scale_name!r} {scale} must be a scalar or a 1-D tensor (per axis) "
                 f"unless attribute 'block_size' asks for blocked quantization")
    if x.rank is None:
        return
    axis = normalize_axis(ctx, axis, x.rank)
    if block == 0:
        size, want = scale.shape[0], x.shape[axis]
        if isinstance(size, int) and isinstance(want, int) and size != want:
            ctx.fail(f"input {scale_name!r} {scale} must have one value per index of axis "
                     f"{axis} of input 'x' {x} ({want})")
        return
    if scale.rank != x.rank:
        ctx.fail(f"input {scale_name!r} {scale} must have the rank of input 'x' {x} for "
                 f"blocked quantization (block_size {block})")
    for dim, (d, s) in enumerate(zip(x.shape, scale.shape)):
        if not (isinstance(d, int) and isinstance(s, int)):
            continue
        want = math.ceil(d / block) if dim == axis else d
        if s != want:
            ctx.fail(f"input {scale_name!r} {scale} must have {want} values along axis {dim} "
                     f"for input 'x' {x}, axis {axis} and block_size {block}")


def _expand(param: np.ndarray | None, shape: Sequence[int], axis: int, block: int,
            fail: Fail, what: str) -> np.ndarray | None:
    """A scale or zero point reshaped (and, for blocks, repeated) to broadcast to x."""
    if param is None or param.ndim == 0 or (param.ndim == 1 and param.size == 1):
        return None if param is None else param.reshape(())
    rank = len(shape)
    if not -rank <= axis < rank:
        fail(f"attribute 'axis' {axis} is out of range for input 'x' of rank {rank}")
    axis %= rank
    if not block:
        if param.ndim != 1 or param.size != shape[axis]:
            fail(f"input {what!r} of shape {param.shape} must be a scalar or have one value "
                 f"per index of axis {axis} of input 'x' {tuple(shape)}")
        return param.reshape([-1 if a == axis else 1 for a in range(rank)])
    expected = tuple(math.ceil(d / block) if a == axis else d for a, d in enumerate(shape))
    if param.shape != expected:
        fail(f"input {what!r} of shape {param.shape} must have shape {expected} for input "
             f"'x' {tuple(shape)}, axis {axis} and block_size {block}")
    return np.repeat(param, block, axis=axis).take(range(shape[axis]), axis=axis)


def saturate_round(real: np.ndarray, zero_point, dtype: np.dtype) -> np.ndarray:
    """round_half_to_even(real) + zero_point, saturated to the range of `dtype`.

    NaN (which has no integer) becomes the zero point, as 0 would."""
    info = ml_dtypes.iinfo(dtype)  # NumPy's iinfo does not know int4 and int2
    rounded = np.rint(np.asarray(real, dtype=np.float64))
    rounded = np.where(np.isnan(rounded), 0.0, rounded)
    if zero_point is not None:
        rounded = rounded + np.asarray(zero_point, dtype=np.float64)
    return np.clip(rounded, info.min, info.max).astype(dtype)


# -- QuantizeLinear and DequantizeLinear ----------------------------------------------


def _quantized_dtype(ctx: InferenceContext) -> DType:
    """QuantizeLinear's output dtype: y_zero_point's, else output_dtype, else uint8."""
    requested = ctx.attrs["output_dtype"]
    if requested is not None and requested not in QUANTIZED:
        allowed = ", ".join(sorted(d.value for d in QUANTIZED))
        ctx.fail(f"attribute 'output_dtype' must be one of {allowed}, got {requested}")
    if ctx.has_input(2):
        zero_dtype = ctx.input(2).dtype
        if requested is not None and requested != zero_dtype:
            ctx.fail(f"attribute 'output_dtype' ({requested}) must match the dtype of input "
                     f"'y_zero_point' ({zero_dtype})")
        return zero_dtype
    return requested or DType.UINT8


def _infer_quantize(ctx: InferenceContext) -> list[TensorType]:
    check_flag(ctx, "saturate")
    precision = ctx.attrs["precision"]
    if precision is not None and precision not in SCALE_TYPES:
        allowed = ", ".join(sorted(d.value for d in SCALE_TYPES))
        ctx.fail(f"attribute 'precision' must be one of {allowed}, got {precision}")
    dtype = _quantized_dtype(ctx)
    _check_granularity(ctx, 1, 2)
    return [ctx.input(0).with_dtype(dtype)]


@op("QuantizeLinear",
    inputs=[Input("x", SCALE_TYPES | {DType.INT32}, type_var="T1"),
            Input("y_scale", SCALE_TYPES | {DType.INT32}, type_var="T2"),
            Input("y_zero_point", QUANTIZED, type_var="T3", optional=True)],
    outputs=[Output("y")], infer=_infer_quantize,
    attrs=[Attr("axis", AttrKind.INT, 1), Attr("block_size", AttrKind.INT, 0),
           Attr("output_dtype", AttrKind.DTYPE, None), Attr("precision", AttrKind.DTYPE, None),
           Attr("saturate", AttrKind.INT, 1)])
def quantize_linear(x, y_scale, y_zero_point=None, *, axis, block_size, output_dtype,
                    precision, saturate):
    """y = saturate(round_half_to_even(x / y_scale) + y_zero_point), in the dtype of
    y_zero_point (else output_dtype, else uint8); the division runs in `precision`, else
    in y_scale's dtype (float64 for an int32 scale)."""
    fail = reference_fail("QuantizeLinear")
    if y_zero_point is not None:
        dtype = y_zero_point.dtype
    else:
        dtype = DType.parse(output_dtype).numpy if output_dtype is not None else np.uint8
    if precision is not None:
        work = DType.parse(precision).numpy
    else:
        work = np.float64 if y_scale.dtype == np.int32 else y_scale.dtype
    scale = _expand(y_scale, x.shape, axis, block_size, fail, "y_scale")
    zero = _expand(y_zero_point, x.shape, axis, block_size, fail, "y_zero_point")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        real = x.astype(work) / scale.astype(work)
    target = DType.from_numpy(dtype)
    if target.is_float:
        _require_zero_float_zero_point(zero, fail, "y_zero_point")
        return cast_array(real, target, saturate=bool(saturate))
    return saturate_round(real, zero, np.dtype(dtype))


def _require_zero_float_zero_point(zero: np.ndarray | None, fail: Fail, name: str) -> None:
    # ONNX defines a float8 zero point only as 0 (its encoding is not an offset).
    if zero is not None and np.any(narrow.widen(zero) != 0):
        fail(f"input {name!r} of dtype {zero.dtype} must be 0 (a float zero point is only "
             "a type marker)")


def _infer_dequantize(ctx: InferenceContext) -> list[TensorType]:
    requested = ctx.attrs["output_dtype"]
    if requested is not None and requested not in SCALE_TYPES:
        allowed = ", ".join(sorted(d.value for d in SCALE_TYPES))
        ctx.fail(f"attribute 'output_dtype' must be one of {allowed}, got {requested}")
    _check_granularity(ctx, 1, 2)
    return [ctx.input(0).with_dtype(requested or ctx.input(1).dtype)]


@op("DequantizeLinear",
    inputs=[Input("x", QUANTIZED | {DType.INT32}, type_var="T1"),
            Input("x_scale", SCALE_TYPES, type_var="T2"),
            Input("x_zero_point", QUANTIZED | {DType.INT32}, type_var="T1", optional=True)],
    outputs=[Output("y")], infer=_infer_dequantize,
    attrs=[Attr("axis", AttrKind.INT, 1), Attr("block_size", AttrKind.INT, 0),
           Attr("output_dtype", AttrKind.DTYPE, None)])
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis, block_size, output_dtype):
    """y = (x - x_zero_point) * x_scale, in output_dtype (else x_scale's dtype)."""
    fail = reference_fail("DequantizeLinear")
    to = DType.parse(output_dtype) if output_dtype is not None else DType.from_numpy(
        x_scale.dtype)
    scale = _expand(x_scale, x.shape, axis, block_size, fail, "x_scale")
    zero = _expand(x_zero_point, x.shape, axis, block_size, fail, "x_zero_point")
    if DType.from_numpy(x.dtype).is_float:  # float8: exact in float64, zero point 0
        _require_zero_float_zero_point(zero, fail, "x_zero_point")
        return cast_array(narrow.widen(x).astype(np.float64) * scale.astype(np.float64), to)
    # The difference is exact in int64 and in float64, and so is its product with any
    # float32 (or narrower) scale: the one rounding is the cast to the output dtype.
    shifted = x.astype(np.int64) - (0 if zero is None else zero.astype(np.int64))
    return cast_array(shifted.astype(np.float64) * scale.astype(np.float64), to)


# -- DynamicQuantizeLinear --------------------------------------------------------------


def _infer_dynamic_quantize(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    return [x.with_dtype(DType.UINT8), TensorType(DType.FLOAT32, ()),
            TensorType(DType.UINT8, ())]


@op("DynamicQuantizeLinear", inputs=[Input("x", FLOAT32)],
    outputs=[Output("y"), Output("y_scale"), Output("y_zero_point")],
    infer=_infer_dynamic_quantize)
def dynamic_quantize_linear(x):
    """Quantize x to uint8 over its own range widened to include 0:
    y_scale = (max(0, max x) - min(0, min x)) / 255 (1 when that range is empty),
    y_zero_point = round(saturate(-min(0, min x) / y_scale)), y = QuantizeLinear(x)."""
    high = np.float32(max(0.0, x.max())) if x.size else np.float32(0)
    low = np.float32(min(0.0, x.min())) if x.size else np.float32(0)
    # The spec divides by the range; an all-zero x would then divide by zero. Following
    # ONNX Runtime, such an x gets scale 1 (every y is the zero point, 0).
    scale = np.float32(1) if high == low else (high - low) / np.float32(255)
    zero_point = saturate_round(np.clip(np.float32(0) - low / scale, 0, 255), None, np.uint8)
    y = saturate_round(x / scale, zero_point, np.dtype(np.uint8))
    return y, np.array(scale, dtype=np.float32), np.array(zero_point, dtype=np.uint8)


# -- integer products ------------------------------------------------------------------


def _operand_context(ctx: InferenceContext, indices: Sequence[int],
                     attrs: dict) -> InferenceContext:
    """A context that shows only the operands at `indices` (in that order), so that
    MatMul's or Conv's inference can type them; errors still name this node's op."""
    schema = dataclasses.replace(ctx.schema,
                                 inputs=tuple(ctx.schema.inputs[i] for i in indices))
    return InferenceContext(schema, [ctx.input(i) for i in indices], attrs, None, None,
                            ctx.node_name)


def _check_scalar(ctx: InferenceContext, index: int) -> None:
    if not ctx.has_input(index):
        return
    t = ctx.input(index)
    if t.shape is not None and not _is_per_tensor(t):
        ctx.fail(f"input {ctx.schema.input_name(index)!r} must be a scalar (per tensor), "
                 f"got {t}")


def _check_per_row_or_column(ctx: InferenceContext, index: int, operand: int,
                             column: bool) -> None:
    """A MatMul quantization parameter: a scalar, a vector with one value per row of A
    (per column of B), or A's shape with its last dim 1 (B's with its row dim 1)."""
    if not ctx.has_input(index):
        return
    t, of = ctx.input(index), ctx.input(operand)
    if t.shape is None or of.shape is None or _is_per_tensor(t):
        return
    name, what = ctx.schema.input_name(index), "column" if column else "row"
    if of.rank < 2:
        ctx.fail(f"input {name!r} {t} must be a scalar for input "
                 f"{ctx.schema.input_name(operand)!r} {of} of rank {of.rank}")
    count = of.shape[-1] if column else of.shape[-2]
    if t.rank == 1:
        want: tuple[Dim, ...] = (count,)
    else:
        want = (*of.shape[:-2], 1, count) if column else (*of.shape[:-2], count, 1)
    if len(want) != t.rank or any(isinstance(d, int) and isinstance(w, int) and d != w
                                  for d, w in zip(t.shape, want)):
        ctx.fail(f"input {name!r} {t} must be a scalar or hold one value per {what} of "
                 f"input {ctx.schema.input_name(operand)!r} {of}")


def _per_row(param: np.ndarray | None) -> np.ndarray | None:
    """A per-row vector of A as a column, so that it broadcasts along A's rows."""
    if param is not None and param.ndim == 1 and param.size > 1:
        return param.reshape(-1, 1)
    return param


def _minus(data: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    shifted = data.astype(np.int64)
    return shifted if zero_point is None else shifted - zero_point.astype(np.int64)


def _infer_matmul_integer(ctx: InferenceContext) -> list[TensorType]:
    (shape_type,) = _infer_matmul(_operand_context(ctx, (0, 1), {}))
    _check_per_row_or_column(ctx, 2, 0, column=False)
    _check_per_row_or_column(ctx, 3, 1, column=True)
    return [shape_type.with_dtype(DType.INT32)]


@op("MatMulInteger",
    inputs=[Input("A", EIGHT_BIT, type_var="T1"), Input("B", EIGHT_BIT, type_var="T2"),
            Input("a_zero_point", EIGHT_BIT, type_var="T1", optional=True),
            Input("b_zero_point", EIGHT_BIT, type_var="T2", optional=True)],
    outputs=[Output("Y")], infer=_infer_matmul_integer)
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    """Y = (A - a_zero_point) @ (B - b_zero_point) as int32, NumPy matmul semantics; the
    zero points are scalars, per row of A and per column of B."""
    product = np.matmul(_minus(a, _per_row(a_zero_point)), _minus(b, b_zero_point))
    return product.astype(np.int32)


def _infer_qlinear_matmul(ctx: InferenceContext) -> list[TensorType]:
    (shape_type,) = _infer_matmul(_operand_context(ctx, (0, 3), {}))
    for scale, zero, operand, column in ((1, 2, 0, False), (4, 5, 3, True)):
        _same_shape(ctx, scale, zero)
        _check_per_row_or_column(ctx, scale, operand, column)
    _same_shape(ctx, 6, 7)
    _check_scalar(ctx, 6)
    return [shape_type.with_dtype(ctx.input(7).dtype)]


@op("QLinearMatMul",
    inputs=[Input("a", EIGHT_BIT, type_var="T1"), Input("a_scale", SCALE_TYPES, type_var="TS"),
            Input("a_zero_point", EIGHT_BIT, type_var="T1"),
            Input("b", EIGHT_BIT, type_var="T2"), Input("b_scale", SCALE_TYPES, type_var="TS"),
            Input("b_zero_point", EIGHT_BIT, type_var="T2"),
            Input("y_scale", SCALE_TYPES, type_var="TS"),
            Input("y_zero_point", EIGHT_BIT, type_var="T3")],
    outputs=[Output("y")], infer=_infer_qlinear_matmul)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                   y_zero_point):
    """y = quantize((a - a_zero_point) @ (b - b_zero_point) * a_scale * b_scale, y_scale,
    y_zero_point); a's parameters per tensor or per row, b's per tensor or per column."""
    accumulator = np.matmul(_minus(a, _per_row(a_zero_point)), _minus(b, b_zero_point))
    multiplier = _per_row(a_scale) * b_scale / y_scale
    real = accumulator.astype(np.float64) * multiplier.astype(np.float64)
    return saturate_round(real, y_zero_point, y_zero_point.dtype)


def _conv_geometry(ctx: InferenceContext, x_index: int, w_index: int) -> TensorType:
    """Conv's inference on x and w: the output shape, checks of channels and window."""
    attrs = {name: ctx.attrs[name] for name in ("auto_pad", "dilations", "group",
                                                "kernel_shape", "pads", "strides")}
    (shape_type,) = _infer_conv(_operand_context(ctx, (x_index, w_index), attrs))
    return shape_type


def _check_per_channel(ctx: InferenceContext, index: int, w_index: int) -> None:
    """A weight quantization parameter: a scalar or one value per output channel."""
    if not ctx.has_input(index):
        return
    t, w = ctx.input(index), ctx.input(w_index)
    if t.shape is None or _is_per_tensor(t):
        return
    channels = None if w.shape is None else w.shape[0]
    if t.rank != 1 or (isinstance(channels, int) and isinstance(t.shape[0], int)
                       and t.shape[0] != channels):
        ctx.fail(f"input {ctx.schema.input_name(index)!r} {t} must be a scalar or hold one "
                 f"value per output channel of input {ctx.schema.input_name(w_index)!r} {w}")


def _integer_conv(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    """Conv of already zero-point-shifted int64 data, exact: integer-valued float64 sums
    stay exact up to 2**53, far beyond any int8 accumulation."""
    result = conv_ops.conv(x.astype(np.float64), w.astype(np.float64), **attrs)
    return np.rint(result).astype(np.int64)


def _per_output_channel(param: np.ndarray | None, w_rank: int) -> np.ndarray | None:
    if param is not None and param.ndim == 1 and param.size > 1:
        return param.reshape(-1, *([1] * (w_rank - 1)))
    return param


def _infer_conv_integer(ctx: InferenceContext) -> list[TensorType]:
    shape_type = _conv_geometry(ctx, 0, 1)
    _check_scalar(ctx, 2)
    _check_per_channel(ctx, 3, 1)
    return [shape_type.with_dtype(DType.INT32)]


@op("ConvInteger",
    inputs=[Input("x", EIGHT_BIT, type_var="T1"), Input("w", EIGHT_BIT, type_var="T2"),
            Input("x_zero_point", EIGHT_BIT, type_var="T1", optional=True),
            Input("w_zero_point", EIGHT_BIT, type_var="T2", optional=True)],
    outputs=[Output("y")], infer=_infer_conv_integer, attrs=CONV_ATTRS)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, **geometry):
    """y = Conv(x - x_zero_point, w - w_zero_point) as int32; x_zero_point per tensor,
    w_zero_point per tensor or per output channel. Padding is x_zero_point (a real 0)."""
    shifted_w = _minus(w, _per_output_channel(w_zero_point, w.ndim))
    return _integer_conv(_minus(x, x_zero_point), shifted_w, geometry).astype(np.int32)


def _infer_qlinear_conv(ctx: InferenceContext) -> list[TensorType]:
    shape_type = _conv_geometry(ctx, 0, 3)
    for scale, zero in ((1, 2), (4, 5), (6, 7)):
        _same_shape(ctx, scale, zero)
    for index in (1, 2, 6, 7):
        _check_scalar(ctx, index)
    _check_per_channel(ctx, 4, 3)
    _check_per_channel(ctx, 5, 3)
    if ctx.has_input(8):
        bias = ctx.input(8)
        out_channels = shape_type.shape[1] if shape_type.shape is not None else None
        ctx.require_rank(8, 1)
        if isinstance(out_channels, int) and bias.shape is not None \
                and isinstance(bias.shape[0], int) and bias.shape[0] != out_channels:
            ctx.fail(f"input 'B' {bias} must hold one value per output channel "
                     f"({out_channels})")
    return [shape_type.with_dtype(ctx.input(7).dtype)]


@op("QLinearConv",
    inputs=[Input("x", EIGHT_BIT, type_var="T1"), Input("x_scale", FLOAT32, type_var=None),
            Input("x_zero_point", EIGHT_BIT, type_var="T1"),
            Input("w", EIGHT_BIT, type_var="T2"), Input("w_scale", FLOAT32, type_var=None),
            Input("w_zero_point", EIGHT_BIT, type_var="T2"),
            Input("y_scale", FLOAT32, type_var=None),
            Input("y_zero_point", EIGHT_BIT, type_var="T3"),
            Input("B", INT32, type_var="T4", optional=True)],
    outputs=[Output("y")], infer=_infer_qlinear_conv, attrs=CONV_ATTRS)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 B=None, **geometry):
    """y = quantize(Conv(x - x_zero_point, w - w_zero_point) + B, scale x_scale * w_scale,
    to y_scale, y_zero_point); w's parameters per tensor or per output channel, B int32
    already at scale x_scale * w_scale."""
    shifted_w = _minus(w, _per_output_channel(w_zero_point, w.ndim))
    accumulator = _integer_conv(_minus(x, x_zero_point), shifted_w, geometry)
    spatial = [1] * (x.ndim - 2)
    if B is not None:
        accumulator = accumulator + B.astype(np.int64).reshape(-1, *spatial)
    w_scale = w_scale.reshape(-1, *spatial) if w_scale.size > 1 else w_scale.reshape(())
    multiplier = x_scale.reshape(()) * w_scale / y_scale.reshape(())
    real = accumulator.astype(np.float64) * multiplier.astype(np.float64)
    return saturate_round(real, y_zero_point.reshape(()), y_zero_point.dtype)
