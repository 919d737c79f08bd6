"""Reductions over axes: the Reduce* family, ArgMax/ArgMin, CumSum/CumProd, TopK, Einsum.

The Reduce* ops follow ONNX opset 18 and later: `axes` is an optional int64 input, and an
empty (or omitted) `axes` reduces every axis unless `noop_with_empty_axes` is set, in which
case the reduction runs over the empty set of axes: its elementwise step still applies
(ReduceSumSquare squares, ReduceL1 takes the absolute value), the summation does not.

The references are the oracle for kernels and constant folding:

- the output has exactly the dtype inference promised; floats are accumulated in
  float64 and rounded once at the end;
- integers wrap around on overflow, like two's-complement C; an integer ReduceMean
  truncates toward zero;
- a reduction over an empty set of values gives the ONNX identity: 0 for sums, 1 for
  ReduceProd, -inf (or the dtype's minimum) for ReduceMax and ReduceLogSumExp, +inf (or
  its maximum) for ReduceMin; NaN propagates through every float reduction;
- ArgMax and ArgMin pick the first NaN when there is one (as NumPy does); TopK sees NaN
  as greater than every number; all break ties by the lower index (ArgMax/ArgMin by the
  higher one with `select_last_index`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, Sym, TensorType
from ge_hub.ops.inference import (
    broadcast_shapes,
    const_ints,
    normalize_axes,
    normalize_axis,
)
from ge_hub.ops.schema import (
    BOOL,
    FLOATS,
    INDICES,
    INT64,
    NUMERIC,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    OpSchema,
    Output,
    op,
)

# Type constraints of ONNX's Reduce* ops, restricted to the dtypes ge-hub has.
_REDUCE_TYPES = FLOATS | INDICES | {DType.UINT32, DType.UINT64}
_REDUCE_MINMAX_TYPES = _REDUCE_TYPES | BOOL | {DType.INT8, DType.UINT8}
# ONNX Einsum takes every number type (bfloat16 since opset 12 of its type list).
_EINSUM_TYPES = NUMERIC

_HALF_FLOATS = (DType.FLOAT16.numpy, DType.BFLOAT16.numpy)


def _flag(ctx: InferenceContext, name: str) -> bool:
    """A 0/1 attribute; other values are a mistake worth reporting, not 'true'."""
    value = ctx.attrs[name]
    if value not in (0, 1):
        ctx.fail(f"attribute {name!r} must be 0 or 1, got {value}")
    return bool(value)


def _exact_compare(x: np.ndarray) -> np.ndarray:
    """Half-precision floats as float32: exact, and every NumPy sort and compare works."""
    return x.astype(np.float32) if x.dtype in _HALF_FLOATS else x


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f" or x.dtype in _HALF_FLOATS  # bfloat16's kind is "V"


def _accumulate(x: np.ndarray) -> np.ndarray:
    """Floats as float64, so a long sum is rounded once to the output dtype."""
    return x.astype(np.float64) if _is_float(x) else x


# --- Reduce* ------------------------------------------------------------------------


def _infer_reduce(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    keepdims = _flag(ctx, "keepdims")
    noop = _flag(ctx, "noop_with_empty_axes")
    rank = data.rank
    axes: list[int] | None = None  # None: the axes are data-dependent
    if not ctx.has_input(1):
        axes = []
    else:
        ctx.require_rank(1, 1)
        axes = const_ints(ctx, 1)
        axes_shape = ctx.input(1).shape
        if axes is None and axes_shape is not None and axes_shape[0] == 0:
            axes = []
    if axes == []:
        if noop:
            return [data]
        if rank is None:
            return [TensorType(data.dtype, None if keepdims else ())]
        return [TensorType(data.dtype, (1,) * rank if keepdims else ())]
    if axes is not None:
        if rank is None:
            return [TensorType(data.dtype, None)]
        reduced = set(normalize_axes(ctx, axes, rank, "input 'axes'"))
        if keepdims:
            shape = tuple(1 if i in reduced else d for i, d in enumerate(data.shape))
        else:
            shape = tuple(d for i, d in enumerate(data.shape) if i not in reduced)
        return [TensorType(data.dtype, shape)]
    # Axes known only at run time: keepdims keeps the rank, and a static axes length
    # tells how many dims go; which ones is unknown.
    if rank is None:
        return [TensorType(data.dtype, None)]
    if keepdims:
        return [TensorType(data.dtype, tuple(d if d == 1 else ctx.new_sym("reduced")
                                             for d in data.shape))]
    axes_shape = ctx.input(1).shape
    count = None if axes_shape is None else axes_shape[0]  # axes of unknown rank: unknown
    if not isinstance(count, int):
        return [TensorType(data.dtype, None)]
    if count > rank:
        ctx.fail(f"input 'axes' has {count} entries, more than the rank {rank} of 'data'")
    return [TensorType(data.dtype, tuple(ctx.new_sym("reduced") for _ in range(rank - count)))]


def _reduce_axes(name: str, data: np.ndarray, axes, noop_with_empty_axes: int):
    """The axes a Reduce* reference runs over, normalized; () for the elementwise step only."""
    if axes is None or axes.size == 0:
        return () if noop_with_empty_axes else tuple(range(data.ndim))
    result = []
    for a in axes.reshape(-1).tolist():
        if not -data.ndim <= a < data.ndim:
            raise OpError(f"{name}: input 'axes' value {a} is out of range for 'data' of "
                          f"rank {data.ndim}")
        result.append(a % data.ndim)
    if len(set(result)) != len(result):
        raise OpError(f"{name}: input 'axes' {axes.tolist()} repeats an axis")
    return tuple(result)


def reduction(name: str, types: frozenset[DType]) -> Callable[[Callable], OpSchema]:
    """Declare a Reduce* op from its kernel `kernel(x, axes, keepdims)`.

    The kernel sees floats as float64 and axes already resolved (a tuple, possibly
    empty); its result is cast back to the input dtype here.
    """

    def wrap(kernel):
        def reference(data, axes=None, *, keepdims, noop_with_empty_axes):
            resolved = _reduce_axes(name, data, axes, noop_with_empty_axes)
            with np.errstate(all="ignore"):  # inf, nan and wraparound are defined results
                result = kernel(_accumulate(data), resolved, bool(keepdims))
                return np.asarray(result).astype(data.dtype, copy=False)

        reference.__doc__ = kernel.__doc__
        reference.__name__ = kernel.__name__
        return op(
            name,
            inputs=[Input("data", types), Input("axes", INT64, type_var="Taxes", optional=True,
                                                 decides_shape=True)],
            outputs=[Output("reduced")],
            infer=_infer_reduce,
            attrs=[Attr("keepdims", AttrKind.INT, 1),
                   Attr("noop_with_empty_axes", AttrKind.INT, 0)],
        )(reference)

    return wrap


def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


@reduction("ReduceSum", _REDUCE_TYPES)
def reduce_sum(x, axes, keepdims):
    """Sum of the elements over `axes`; 0 over an empty set."""
    return np.sum(x, axis=axes, keepdims=keepdims)


@reduction("ReduceMean", _REDUCE_TYPES)
def reduce_mean(x, axes, keepdims):
    """Mean of the elements over `axes` (integers truncate toward zero); NaN over an empty set."""
    count = math.prod(x.shape[a] for a in axes)
    total = np.sum(x, axis=axes, keepdims=keepdims)
    if x.dtype.kind == "f":
        return total / np.float64(count)
    if count == 0:
        return np.zeros_like(total)  # undefined in ONNX; 0 rather than a division by zero
    return np.sign(total) * (np.abs(total) // count)


@reduction("ReduceMax", _REDUCE_MINMAX_TYPES)
def reduce_max(x, axes, keepdims):
    """Maximum over `axes`, NaN propagating; -inf (or the dtype's minimum) over an empty set."""
    return np.max(x, axis=axes, keepdims=keepdims, initial=_lowest(x.dtype))


@reduction("ReduceMin", _REDUCE_MINMAX_TYPES)
def reduce_min(x, axes, keepdims):
    """Minimum over `axes`, NaN propagating; +inf (or the dtype's maximum) over an empty set."""
    return np.min(x, axis=axes, keepdims=keepdims, initial=_highest(x.dtype))


@reduction("ReduceProd", _REDUCE_TYPES)
def reduce_prod(x, axes, keepdims):
    """Product of the elements over `axes`; 1 over an empty set."""
    return np.prod(x, axis=axes, keepdims=keepdims)


@reduction("ReduceL1", _REDUCE_TYPES)
def reduce_l1(x, axes, keepdims):
    """Sum of absolute values over `axes`."""
    return np.sum(np.abs(x), axis=axes, keepdims=keepdims)


@reduction("ReduceL2", _REDUCE_TYPES)
def reduce_l2(x, axes, keepdims):
    """Square root of the sum of squares over `axes` (integers: truncated)."""
    return np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=axes, keepdims=keepdims))


@reduction("ReduceSumSquare", _REDUCE_TYPES)
def reduce_sum_square(x, axes, keepdims):
    """Sum of squares over `axes`."""
    return np.sum(np.square(x), axis=axes, keepdims=keepdims)


@reduction("ReduceLogSumExp", _REDUCE_TYPES)
def reduce_log_sum_exp(x, axes, keepdims):
    """log(sum(exp(x))) over `axes`, without overflow; -inf over an empty set."""
    x = x.astype(np.float64)
    peak = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    # Shifting by the maximum keeps exp from overflowing; an infinite maximum cannot be
    # subtracted (inf - inf), and needs no shift.
    shift = np.where(np.isfinite(peak), peak, 0.0)
    result = np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True)) + shift
    return result if keepdims else np.squeeze(result, axis=axes)


# --- ArgMax, ArgMin -------------------------------------------------------------------


def _infer_arg(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    keepdims = _flag(ctx, "keepdims")
    _flag(ctx, "select_last_index")
    if data.rank is None:
        return [TensorType(DType.INT64, None)]
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.rank, "attribute 'axis'")
    if data.shape[axis] == 0:
        ctx.fail(f"input 'data' {data} is empty along axis {axis}; there is no index to return")
    shape = list(data.shape)
    if keepdims:
        shape[axis] = 1
    else:
        del shape[axis]
    return [TensorType(DType.INT64, tuple(shape))]


def _arg_reference(find, data, axis, keepdims, select_last_index):
    x = _exact_compare(data)
    axis = axis % data.ndim
    if select_last_index:
        flipped = np.flip(x, axis)
        index = data.shape[axis] - 1 - find(flipped, axis=axis)
    else:
        index = find(x, axis=axis)
    index = index.astype(np.int64)
    return np.expand_dims(index, axis) if keepdims else index


_ARG_ATTRS = [Attr("axis", AttrKind.INT, 0), Attr("keepdims", AttrKind.INT, 1),
              Attr("select_last_index", AttrKind.INT, 0)]


@op("ArgMax", inputs=[Input("data", NUMERIC)], outputs=[Output("reduced")], infer=_infer_arg,
    attrs=_ARG_ATTRS)
def arg_max(data, *, axis, keepdims, select_last_index):
    """Index (int64) of the largest element along `axis`; the first unless select_last_index."""
    return _arg_reference(np.argmax, data, axis, keepdims, select_last_index)


@op("ArgMin", inputs=[Input("data", NUMERIC)], outputs=[Output("reduced")], infer=_infer_arg,
    attrs=_ARG_ATTRS)
def arg_min(data, *, axis, keepdims, select_last_index):
    """Index (int64) of the smallest element along `axis`; the first unless select_last_index."""
    return _arg_reference(np.argmin, data, axis, keepdims, select_last_index)


# --- CumSum, CumProd -------------------------------------------------------------------


def _infer_scan(ctx: InferenceContext) -> list[TensorType]:
    _flag(ctx, "exclusive")
    _flag(ctx, "reverse")
    axis_type = ctx.input(1)
    # ONNX says 0-D; a one-element 1-D axis is what many exporters write, and means the same.
    if axis_type.rank is not None and not (axis_type.rank == 0 or axis_type.shape == (1,)):
        ctx.fail(f"input 'axis' must be a scalar (or hold one element), got {axis_type}")
    axis = const_ints(ctx, 1)
    if axis is not None:
        normalize_axis(ctx, axis[0], ctx.input(0).rank, "input 'axis'")
    return [ctx.input(0)]


def _scan(op_name: str, x, axis, exclusive: int, reverse: int, identity: int,
          running: Callable[..., np.ndarray]) -> np.ndarray:
    """A running `running` (np.cumsum, np.cumprod) along `axis`: floats in float64,
    rounded once; integers wrap in their own width."""
    a = int(np.asarray(axis).reshape(-1)[0])
    if not -x.ndim <= a < x.ndim:
        raise OpError(f"{op_name}: input 'axis' value {a} is out of range for 'x' of rank "
                      f"{x.ndim}")
    a %= x.ndim
    values = _accumulate(x)
    if reverse:
        values = np.flip(values, a)
    if exclusive:
        # Shift by one along the axis instead of undoing the current element from the
        # inclusive result, which would turn inf into nan (sum) or fail on zeros (product).
        head = np.full_like(np.take(values, [0], axis=a), identity)
        values = np.concatenate([head, np.take(values, range(x.shape[a] - 1), axis=a)], axis=a)
    with np.errstate(all="ignore"):
        result = running(values, axis=a, dtype=values.dtype)
    if reverse:
        result = np.flip(result, a)
    return result.astype(x.dtype)


_SCAN_ATTRS = [Attr("exclusive", AttrKind.INT, 0), Attr("reverse", AttrKind.INT, 0)]


@op("CumSum", inputs=[Input("x", _REDUCE_TYPES), Input("axis", INDICES, type_var="T2")],
    outputs=[Output("y")], infer=_infer_scan, attrs=_SCAN_ATTRS)
def cum_sum(x, axis, *, exclusive, reverse):
    """Running sum along `axis`; `exclusive` skips the current element, `reverse` runs backward."""
    return _scan("CumSum", x, axis, exclusive, reverse, 0, np.cumsum)


@op("CumProd", inputs=[Input("x", FLOATS | INDICES), Input("axis", INDICES, type_var="T2")],
    outputs=[Output("y")], infer=_infer_scan, attrs=_SCAN_ATTRS)
def cum_prod(x, axis, *, exclusive, reverse):
    """Running product along `axis`; `exclusive` skips the current element (the first
    output is 1), `reverse` runs from the end."""
    return _scan("CumProd", x, axis, exclusive, reverse, 1, np.cumprod)


# --- TopK -----------------------------------------------------------------------------


def _infer_topk(ctx: InferenceContext) -> list[TensorType]:
    _flag(ctx, "largest")
    _flag(ctx, "sorted")
    data = ctx.input(0)
    k_type = ctx.input(1)
    ctx.require_rank(1, 1)
    if k_type.shape is not None and isinstance(k_type.shape[0], int) and k_type.shape[0] != 1:
        ctx.fail(f"input 'K' must hold exactly one element, got {k_type}")
    k_values = const_ints(ctx, 1)
    if data.rank is None:
        return [TensorType(data.dtype, None), TensorType(DType.INT64, None)]
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.rank, "attribute 'axis'")
    size = data.shape[axis]
    if k_values is None:
        k: Dim = ctx.new_sym("k")
    else:
        k = k_values[0]
        if k < 0:
            ctx.fail(f"input 'K' must be >= 0, got {k}")
        if isinstance(size, int) and k > size:
            ctx.fail(f"input 'K' ({k}) is larger than axis {axis} of 'X' {data} ({size})")
    shape = data.shape[:axis] + (k,) + data.shape[axis + 1:]
    return [TensorType(data.dtype, shape), TensorType(DType.INT64, shape)]


@op("TopK", inputs=[Input("X", NUMERIC), Input("K", INT64, type_var="Tk", decides_shape=True)],
    outputs=[Output("Values"), Output("Indices")], infer=_infer_topk,
    attrs=[Attr("axis", AttrKind.INT, -1), Attr("largest", AttrKind.INT, 1),
           Attr("sorted", AttrKind.INT, 1)])
def top_k(x, k, *, axis, largest, sorted):
    """The k largest (or smallest) values along `axis`, best first, ties by index; int64 indices."""
    del sorted  # unsorted output may come in any order; sorted order is one of them
    count = int(np.asarray(k).reshape(-1)[0])
    axis %= x.ndim
    size = x.shape[axis]
    if not 0 <= count <= size:
        raise OpError(f"TopK: input 'K' ({count}) must be in [0, {size}], the size of axis "
                      f"{axis} of 'X' {x.shape}")
    keys = _exact_compare(x)
    if largest:
        # A stable ascending sort of the reversed axis puts equal values in descending index
        # order; reversing that gives descending values with equal ones in index order.
        order = np.flip(np.argsort(np.flip(keys, axis), axis=axis, kind="stable"), axis)
        order = size - 1 - order
    else:
        order = np.argsort(keys, axis=axis, kind="stable")
    order = np.take(order, range(count), axis=axis).astype(np.int64)
    return np.take_along_axis(x, order, axis=axis), order


# --- Einsum ---------------------------------------------------------------------------

_ELLIPSIS = "..."


@dataclasses.dataclass(frozen=True)
class EinsumEquation:
    """A parsed equation: one list of labels per operand and the output labels.

    A label is a letter or "..." (the broadcast dims); the output is always explicit
    (the implicit form gets its ONNX output: labels seen once, in ASCII order, after the
    ellipsis).
    """

    operands: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]

    def __str__(self) -> str:
        return ",".join("".join(t) for t in self.operands) + "->" + "".join(self.output)


def _parse_term(text: str, where: str, fail) -> tuple[str, ...]:
    labels: list[str] = []
    rest = text
    while rest:
        if rest.startswith(_ELLIPSIS):
            if _ELLIPSIS in labels:
                fail(f"{where} {text!r} has more than one ellipsis")
            labels.append(_ELLIPSIS)
            rest = rest[3:]
        elif rest[0].isascii() and rest[0].isalpha():
            labels.append(rest[0])
            rest = rest[1:]
        else:
            fail(f"{where} {text!r} has {rest[0]!r}; expected letters and at most one '...'")
    return tuple(labels)


def parse_einsum(equation: str, fail) -> EinsumEquation:
    """Parse an Einsum equation; `fail(message)` reports a malformed one."""
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        fail(f"attribute 'equation' {equation!r} has more than one '->'")
    lhs, arrow, rhs = text.partition("->")
    operands = tuple(_parse_term(t, "attribute 'equation' term", fail) for t in lhs.split(","))
    if arrow:
        output = _parse_term(rhs, "attribute 'equation' output", fail)
        seen = {label for term in operands for label in term}
        for label in output:
            if label != _ELLIPSIS and label not in seen:
                fail(f"attribute 'equation' {equation!r}: output label {label!r} is in no input")
            if output.count(label) > 1:
                fail(f"attribute 'equation' {equation!r}: output label {label!r} repeats")
    else:
        letters = [label for term in operands for label in term if label != _ELLIPSIS]
        once = sorted(label for label in set(letters) if letters.count(label) == 1)
        has_ellipsis = any(_ELLIPSIS in term for term in operands)
        output = ((_ELLIPSIS,) if has_ellipsis else ()) + tuple(once)
    return EinsumEquation(operands, output)


def _ellipsis_rank(term: tuple[str, ...], rank: int) -> int:
    return rank - (len(term) - 1) if _ELLIPSIS in term else 0


def _infer_einsum(ctx: InferenceContext) -> list[TensorType]:
    equation = parse_einsum(ctx.attrs["equation"], ctx.fail)
    types = ctx.input_types
    if len(equation.operands) != len(types):
        ctx.fail(f"attribute 'equation' {ctx.attrs['equation']!r} has "
                 f"{len(equation.operands)} input terms, but the node has {len(types)} inputs")
    letter_dims: dict[str, list[Dim]] = {}
    ellipsis_shapes: list[tuple[Dim, ...]] = []
    ellipsis_unknown = False
    for index, (term, t) in enumerate(zip(equation.operands, types)):
        name = ctx.schema.input_name(index)
        letters = [label for label in term if label != _ELLIPSIS]
        if t.shape is None:
            ellipsis_unknown |= _ELLIPSIS in term
            continue
        if _ELLIPSIS not in term and t.rank != len(letters):
            ctx.fail(f"input {name!r} {t} has rank {t.rank}, but its term "
                     f"{''.join(term)!r} has {len(letters)} labels")
        if _ELLIPSIS in term and t.rank < len(letters):
            ctx.fail(f"input {name!r} {t} has rank {t.rank}, but its term "
                     f"{''.join(term)!r} needs at least {len(letters)}")
        skip = _ellipsis_rank(term, t.rank)
        dims = list(t.shape)
        if _ELLIPSIS in term:
            at = term.index(_ELLIPSIS)
            ellipsis_shapes.append(tuple(dims[at:at + skip]))
            del dims[at:at + skip]
        own: dict[str, Dim] = {}
        for label, dim in zip(letters, dims):
            # A label repeated in one term takes a diagonal: its dims must agree exactly.
            if label in own and isinstance(own[label], int) and isinstance(dim, int) \
                    and own[label] != dim:
                ctx.fail(f"input {name!r} {t}: label {label!r} repeats with sizes "
                         f"{own[label]} and {dim}")
            own[label] = dim
            letter_dims.setdefault(label, []).append(dim)
    ranks = {len(s) for s in ellipsis_shapes}
    if len(ranks) > 1:
        ctx.fail(f"attribute 'equation' {ctx.attrs['equation']!r}: every '...' must stand for "
                 f"the same number of dims, got {sorted(ranks)}")
    ellipsis_shape = broadcast_shapes(ctx, ellipsis_shapes) if ellipsis_shapes else ()
    if _ELLIPSIS not in equation.output and ellipsis_shape:
        ctx.fail(f"attribute 'equation' {ctx.attrs['equation']!r}: the output has no '...', "
                 f"but the inputs' '...' stands for dims {ellipsis_shape}")
    sizes = {label: _einsum_label_size(ctx, label, dims) for label, dims in letter_dims.items()}
    if _ELLIPSIS in equation.output and ellipsis_unknown:
        return [TensorType(types[0].dtype, None)]
    shape: list[Dim] = []
    for label in equation.output:
        if label == _ELLIPSIS:
            shape.extend(ellipsis_shape)
        else:
            shape.append(sizes[label] if label in sizes else ctx.new_sym(label))
    return [TensorType(types[0].dtype, tuple(shape))]


def _einsum_label_size(ctx: InferenceContext, label: str, dims: Sequence[Dim]) -> Dim:
    """The size of a label seen with these dims; 1 broadcasts, like NumPy's einsum."""
    concrete = {d for d in dims if isinstance(d, int) and d != 1}
    if len(concrete) > 1:
        ctx.fail(f"attribute 'equation' {ctx.attrs['equation']!r}: label {label!r} has "
                 f"incompatible sizes {sorted(concrete)}")
    if concrete:
        return concrete.pop()
    symbols = [d for d in dims if isinstance(d, Sym)]
    if symbols:
        return symbols[0] if len(set(symbols)) == 1 else ctx.new_sym(label)
    return 1


def _reference_fail(message: str):
    raise OpError(f"Einsum: {message}")


@op("Einsum", inputs=[Input("Inputs", _EINSUM_TYPES, variadic=True)], outputs=[Output("Output")],
    infer=_infer_einsum, attrs=[Attr("equation", AttrKind.STRING)])
def einsum(*inputs, equation):
    """Einstein summation: the operands' products, summed over the labels not in the output."""
    parsed = parse_einsum(equation, _reference_fail)
    if len(parsed.operands) != len(inputs):
        _reference_fail(f"attribute 'equation' {equation!r} has {len(parsed.operands)} input "
                        f"terms, but {len(inputs)} inputs were given")
    # Integers are summed in int64 (wrapping, like C, once cast back) and floats in float64.
    widened = [_accumulate(x) if _is_float(x) else x.astype(np.int64) for x in inputs]
    with np.errstate(all="ignore"):
        result = np.einsum(str(parsed), *widened)
    return np.asarray(result).astype(inputs[0].dtype)

