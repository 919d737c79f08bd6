"""Ops that move data without computing on it: reshaping, permuting, cutting, joining.

Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Concat, Split, Slice, Expand, Pad, Tile,
DepthToSpace, SpaceToDepth and ReverseSequence rearrange elements; Shape and Size read a
tensor's shape. All follow the newest ONNX opset: shape-determining arguments (Reshape's
shape, Slice's starts, Pad's pads, ...) are int64 inputs, not attributes.

Inference computes exact output shapes when those inputs are known constants, including
symbolic arithmetic on the input dims ([N,3,4] reshaped to [0,-1] is [N,12]). When they
are not constants, the output gets fresh symbols for the dims that depend on them, with
the right rank whenever the rank is knowable.

The references keep the input dtype exactly (none of them computes in another type);
Shape and Size return int64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import (
    Dim,
    Sym,
    TensorType,
    dim_add,
    dim_floordiv,
    dim_mul,
    dim_prod,
    dim_sub,
)
from ge_hub.ops import limits
from ge_hub.ops.inference import const_ints, normalize_axes, normalize_axis
from ge_hub.ops.schema import (
    ANY,
    INDICES,
    INT64,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)

# Exporters write "to the end" as INT_MAX (int32 or int64) and "past the start" as INT_MIN.
# No real dim reaches 2**31 - 1, so a bound beyond it is taken to mean the sentinel when
# the dim is symbolic and the slice cannot be clamped numerically.
_BIG = 2**31 - 1


# --- shared helpers -----------------------------------------------------------------


def _static_length(ctx: InferenceContext, index: int) -> int | None:
    """The number of elements of 1-D input `index`, when a constant or its type says so."""
    data = ctx.const(index)
    if data is not None:
        return int(data.size)
    shape = ctx.input(index).shape
    if shape is not None and len(shape) == 1 and isinstance(shape[0], int):
        return shape[0]
    return None


def _fresh_dims(ctx: InferenceContext, rank: int, hint: str = "dim",
                source: str = "the inputs") -> tuple[Sym, ...]:
    """Symbols for the `rank` dims of an output; a rank past the limit is refused, naming
    `source` (a shape input declared int64[2**40] must not become 2**40 symbols)."""
    return ctx.new_syms(rank, hint, source)


def _fmt(dims: Sequence) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _require_1d(ctx: InferenceContext, *indices: int) -> None:
    for index in indices:
        if ctx.has_input(index):
            ctx.require_rank(index, 1)


# --- symbolic products, for Reshape's -1 ----------------------------------------------


def _factors(dims: Sequence[Dim]) -> tuple[int, list[Dim]]:
    """The product of `dims` as (integer coefficient, symbolic factors): each dim that is
    one product term (3*N*C) is taken apart into its symbols, so that N*(C*H) divided by
    C is recognized as N*H; a sum (N+1) stays one factor."""
    coefficient, factors = 1, []
    for dim in dims:
        if isinstance(dim, int):
            coefficient *= dim
            continue
        term = dim.term
        if term is None:
            factors.append(dim)
        else:
            coefficient *= term[0]
            factors.extend(term[1])
    return coefficient, factors


def _divide_dims(numerator: Sequence[Dim], denominator: Sequence[Dim]) -> Dim | None:
    """prod(numerator) / prod(denominator) as a dim, cancelling common factors;
    None when both are concrete and the division is inexact."""
    num_coeff, num = _factors(numerator)
    divisor, den = _factors(denominator)
    rest: list[Dim] = []
    for factor in den:
        if factor in num:
            num.remove(factor)
        else:
            rest.append(factor)
    if num_coeff % divisor == 0:
        num_coeff, divisor = num_coeff // divisor, 1
    elif not num and not rest:
        return None
    quotient = dim_mul(num_coeff, dim_prod(num))
    if rest or divisor != 1:
        quotient = dim_floordiv(quotient, dim_mul(dim_prod(rest), divisor))
    return quotient


# --- Reshape ----------------------------------------------------------------------------


def _infer_reshape(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    ctx.require_rank(1, 1)
    allowzero = ctx.attrs["allowzero"]
    if allowzero not in (0, 1):
        ctx.fail(f"attribute 'allowzero' must be 0 or 1, got {allowzero}")
    target = const_ints(ctx, 1)
    if target is None:
        length = _static_length(ctx, 1)
        return [TensorType(data.dtype, None if length is None
                           else _fresh_dims(ctx, length, source="input 'shape'"))]
    if any(d < -1 for d in target):
        ctx.fail(f"input 'shape' {target} may hold dims >= 0 and one -1, got {min(target)}")
    if target.count(-1) > 1:
        ctx.fail(f"input 'shape' {target} has more than one -1")
    if allowzero and 0 in target and -1 in target:
        ctx.fail(f"input 'shape' {target} has both 0 and -1 while allowzero=1")
    in_shape = data.shape
    out: list[Dim | None] = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if in_shape is None:
                out.append(ctx.new_sym("dim"))
            elif i >= len(in_shape):
                ctx.fail(f"input 'shape' {target} copies dim {i} (a 0) but input 'data' "
                         f"{data} has rank {len(in_shape)}")
            else:
                out.append(in_shape[i])
        else:
            out.append(None if d == -1 else d)
    if in_shape is None:
        return [TensorType(data.dtype, [ctx.new_sym("dim") if d is None else d for d in out])]
    known = [d for d in out if d is not None]
    if None in out:
        if dim_prod(known) == 0:
            ctx.fail(f"input 'shape' {target} infers a -1 beside a zero dim: ambiguous")
        inferred = _divide_dims(in_shape, known)
        if inferred is None:
            ctx.fail(f"cannot reshape input 'data' {data} to input 'shape' {target}: "
                     f"{dim_prod(in_shape)} elements are not a multiple of {dim_prod(known)}")
        out[out.index(None)] = inferred
    else:
        total, wanted = dim_prod(in_shape), dim_prod(known)
        if isinstance(total, int) and isinstance(wanted, int) and total != wanted:
            ctx.fail(f"cannot reshape input 'data' {data} ({total} elements) to input 'shape' "
                     f"{target} ({wanted} elements)")
    return [TensorType(data.dtype, out)]


@op("Reshape", inputs=[Input("data", ANY),
                       Input("shape", INT64, type_var=None, decides_shape=True)],
    outputs=[Output("reshaped")], infer=_infer_reshape,
    attrs=[Attr("allowzero", AttrKind.INT, 0)])
def reshape(data, shape, *, allowzero):
    """The elements of data in row-major order, in the given shape; 0 copies the input dim
    (unless allowzero=1, when it is a zero dim) and one -1 is inferred."""
    dims = [int(d) for d in shape.reshape(-1)]
    if not allowzero:
        dims = [data.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return data.reshape(dims)


# --- Transpose, Flatten -----------------------------------------------------------------


def _infer_transpose(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    perm = ctx.attrs["perm"]
    if data.shape is None and perm is None:
        return [TensorType(data.dtype, None)]
    rank = len(perm) if data.shape is None else data.rank
    if perm is None:
        perm = list(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        ctx.fail(f"attribute 'perm' must be a permutation of 0..{rank - 1} for input 'data' "
                 f"{data}, got {perm}")
    if data.shape is None:
        return [TensorType(data.dtype, _fresh_dims(ctx, rank))]
    return [TensorType(data.dtype, [data.shape[p] for p in perm])]


@op("Transpose", inputs=[Input("data", ANY)], outputs=[Output("transposed")],
    infer=_infer_transpose, attrs=[Attr("perm", AttrKind.INTS, None)])
def transpose(data, *, perm):
    """Output dim i is input dim perm[i]; perm defaults to the reversed dims."""
    return np.transpose(data, perm)


def _infer_flatten(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    axis = ctx.attrs["axis"]
    if data.shape is None:
        return [TensorType(data.dtype, _fresh_dims(ctx, 2))]
    rank = data.rank
    if not -rank <= axis <= rank:
        ctx.fail(f"attribute 'axis' must be in [{-rank}, {rank}] for input 'input' {data}, "
                 f"got {axis}")
    axis = axis + rank if axis < 0 else axis
    return [TensorType(data.dtype, [dim_prod(data.shape[:axis]), dim_prod(data.shape[axis:])])]


@op("Flatten", inputs=[Input("input", ANY)], outputs=[Output("output")], infer=_infer_flatten,
    attrs=[Attr("axis", AttrKind.INT, 1)])
def flatten(data, *, axis):
    """A 2-D view: dims before axis multiplied into the first, the rest into the second."""
    axis = axis + data.ndim if axis < 0 else axis
    return data.reshape(math.prod(data.shape[:axis]), math.prod(data.shape[axis:]))


# --- Squeeze, Unsqueeze -----------------------------------------------------------------


def _infer_squeeze(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    _require_1d(ctx, 1)
    if not ctx.has_input(1):
        if data.shape is None or any(isinstance(d, Sym) for d in data.shape):
            # Which symbolic dims are 1 is only known at run time.
            return [TensorType(data.dtype, None)]
        return [TensorType(data.dtype, [d for d in data.shape if d != 1])]
    axes = const_ints(ctx, 1)
    if axes is None:
        length = _static_length(ctx, 1)
        if data.rank is None or length is None:
            return [TensorType(data.dtype, None)]
        return [TensorType(data.dtype, _fresh_dims(ctx, data.rank - length))]
    if data.shape is None:
        return [TensorType(data.dtype, None)]
    axes = normalize_axes(ctx, axes, data.rank, "input 'axes'")
    for axis in axes:
        dim = data.shape[axis]
        if isinstance(dim, int) and dim != 1:
            ctx.fail(f"input 'axes' names dim {axis} of input 'data' {data}, which is {dim}, "
                     f"not 1")
    return [TensorType(data.dtype, [d for i, d in enumerate(data.shape) if i not in axes])]


@op("Squeeze", inputs=[Input("data", ANY), Input("axes", INT64, type_var=None, optional=True,
                                                    decides_shape=True)],
    outputs=[Output("squeezed")], infer=_infer_squeeze)
def squeeze(data, axes=None):
    """data without the size-1 dims listed in axes (all size-1 dims when axes is omitted)."""
    if axes is None:
        return np.squeeze(data)
    return np.squeeze(data, axis=tuple(int(a) for a in axes.reshape(-1)))


def _infer_unsqueeze(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    ctx.require_rank(1, 1)
    axes = const_ints(ctx, 1)
    if data.shape is None:
        return [TensorType(data.dtype, None)]
    if axes is None:
        length = _static_length(ctx, 1)
        if length is None:
            return [TensorType(data.dtype, None)]
        return [TensorType(data.dtype, _fresh_dims(ctx, data.rank + length,
                                                   source="input 'axes'"))]
    out_rank = data.rank + len(axes)
    axes = normalize_axes(ctx, axes, out_rank, "input 'axes'")
    rest = iter(data.shape)
    return [TensorType(data.dtype, [1 if i in axes else next(rest) for i in range(out_rank)])]


@op("Unsqueeze", inputs=[Input("data", ANY),
                         Input("axes", INT64, type_var=None, decides_shape=True)],
    outputs=[Output("expanded")], infer=_infer_unsqueeze)
def unsqueeze(data, axes):
    """data with size-1 dims inserted at axes, which count in the output's rank."""
    return np.expand_dims(data, tuple(int(a) for a in axes.reshape(-1)))


# --- Concat, Split ----------------------------------------------------------------------


def _infer_concat(ctx: InferenceContext) -> list[TensorType]:
    types = ctx.input_types
    dtype = types[0].dtype
    ranked = [(i, t) for i, t in enumerate(types) if t.shape is not None]
    if not ranked:
        return [TensorType(dtype, None)]
    first_index, first = ranked[0]
    rank = first.rank
    if rank == 0:
        ctx.fail(f"input {ctx.schema.input_name(first_index)!r} is a scalar {first}; "
                 f"Concat needs rank >= 1")
    axis = normalize_axis(ctx, ctx.attrs["axis"], rank, "attribute 'axis'")
    out = list(first.shape)
    for index, t in ranked[1:]:
        name = ctx.schema.input_name(index)
        if t.rank != rank:
            ctx.fail(f"input {name!r} {t} must have rank {rank} like input "
                     f"{ctx.schema.input_name(first_index)!r} {first}")
        for i, d in enumerate(t.shape):
            if i == axis:
                continue
            if isinstance(d, int) and isinstance(out[i], int) and d != out[i]:
                ctx.fail(f"input {name!r} {t} differs from the others in dim {i} "
                         f"({d} vs {out[i]}); only dim {axis} (the axis) may differ")
            if isinstance(d, int):
                out[i] = d  # a concrete size pins down what a symbol must be
    if len(ranked) == len(types):
        total: Dim = 0
        for t in types:
            total = dim_add(total, t.shape[axis])
        out[axis] = total
    else:
        out[axis] = ctx.new_sym("concat")
    return [TensorType(dtype, out)]


@op("Concat", inputs=[Input("inputs", ANY, variadic=True)], outputs=[Output("concat_result")],
    infer=_infer_concat, attrs=[Attr("axis", AttrKind.INT)])
def concat(*inputs, axis):
    """The inputs joined along axis; every other dim must match."""
    return np.concatenate(inputs, axis=axis)


def _even_split(dim: int, count: int) -> list[int] | None:
    """ONNX 18's split into `count` parts: ceil(dim / count) each, the last one smaller;
    None when the last part would be negative."""
    chunk = -(-dim // count)
    last = dim - chunk * (count - 1)
    return None if last < 0 else [chunk] * (count - 1) + [last]


def _infer_split(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    _require_1d(ctx, 1)
    num_outputs = ctx.attrs["num_outputs"]
    if num_outputs is not None:
        if ctx.has_input(1):
            ctx.fail("give either input 'split' or attribute 'num_outputs', not both")
        if num_outputs < 1:
            ctx.fail(f"attribute 'num_outputs' must be >= 1, got {num_outputs}")
        if ctx.num_outputs is not None and ctx.num_outputs != num_outputs:
            ctx.fail(f"attribute 'num_outputs' is {num_outputs} but the node has "
                     f"{ctx.num_outputs} outputs")
    sizes = const_ints(ctx, 1) if ctx.has_input(1) else None
    if sizes is not None:
        count = len(sizes)
    elif ctx.has_input(1):
        count = _static_length(ctx, 1) or ctx.num_outputs
    else:
        count = num_outputs or ctx.num_outputs
    if count is None:
        ctx.fail("cannot tell the number of outputs: give input 'split', attribute "
                 "'num_outputs', or the node's output count")
    if ctx.num_outputs is not None and ctx.num_outputs != count:
        ctx.fail(f"the split makes {count} parts but the node has {ctx.num_outputs} outputs")
    if data.shape is None:
        return [TensorType(data.dtype, None) for _ in range(count)]
    if data.rank == 0:
        ctx.fail(f"input 'input' {data} is a scalar; Split needs rank >= 1")
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.rank, "attribute 'axis'")
    dim = data.shape[axis]
    if sizes is not None:
        if any(s < 0 for s in sizes):
            ctx.fail(f"input 'split' {sizes} must hold sizes >= 0")
        if isinstance(dim, int) and sum(sizes) != dim:
            ctx.fail(f"input 'split' {sizes} sums to {sum(sizes)}, but dim {axis} of input "
                     f"'input' {data} is {dim}")
        parts: list[Dim] = list(sizes)
    elif ctx.has_input(1):
        # one size per output (as many as the node has), not one dim per element
        parts = [ctx.new_sym("split") for _ in range(count)]
    elif isinstance(dim, int):
        even = _even_split(dim, count)
        if even is None:
            ctx.fail(f"dim {axis} of input 'input' {data} ({dim}) cannot be split into "
                     f"{count} parts of ceil({dim}/{count}) with a smaller last part")
        parts = list(even)
    elif count == 1:
        parts = [dim]
    else:
        # The first count-1 parts are equal; the last may be smaller.
        chunk = ctx.new_sym("split")
        parts = [chunk] * (count - 1) + [ctx.new_sym("split")]
    shapes = []
    for part in parts:
        shape = list(data.shape)
        shape[axis] = part
        shapes.append(TensorType(data.dtype, shape))
    return shapes


@op("Split", inputs=[Input("input", ANY), Input("split", INT64, type_var=None, optional=True,
                                                    decides_shape=True)],
    outputs=[Output("outputs", variadic=True)], infer=_infer_split,
    attrs=[Attr("axis", AttrKind.INT, 0), Attr("num_outputs", AttrKind.INT, None)])
def split(data, sizes=None, *, axis, num_outputs):
    """input cut along axis into parts of the sizes in split, or into num_outputs parts of
    ceil(dim / num_outputs) with a smaller last part."""
    dim = data.shape[axis]
    if sizes is not None:
        parts = [int(s) for s in sizes.reshape(-1)]
    elif num_outputs is not None:
        parts = _even_split(dim, num_outputs)
        if parts is None:
            raise OpError(f"Split: dim {axis} ({dim}) cannot be split into {num_outputs} parts")
    else:
        # The node's output count never reaches a reference; callers pass it explicitly.
        raise OpError("Split: the reference needs input 'split' or attribute 'num_outputs'")
    bounds = np.cumsum(parts)[:-1]
    return tuple(np.split(data, bounds, axis=axis))


# --- Slice ------------------------------------------------------------------------------


def _clamp_slice(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX's clamping of a slice's start and end to a dim of size `dim`."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _slice_length(dim: int, start: int, end: int, step: int) -> int:
    start, end = _clamp_slice(dim, start, end, step)
    return max(0, -((start - end) // step))  # ceil((end - start) / step)


def _symbolic_slice(ctx: InferenceContext, dim: Sym, start: int, end: int, step: int) -> Dim:
    """The sliced size of a symbolic dim: the dim itself for a whole (or whole reversed)
    slice, else a fresh symbol."""
    if step == 1 and (start == 0 or start <= -_BIG - 1) and end >= _BIG:
        return dim
    if step == -1 and (start == -1 or start >= _BIG) and end <= -_BIG - 1:
        return dim
    return ctx.new_sym("slice")


def _infer_slice(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    _require_1d(ctx, 1, 2, 3, 4)
    names = ["starts", "ends", "axes", "steps"]
    lengths = {names[i - 1]: _static_length(ctx, i) for i in range(1, 5) if ctx.has_input(i)}
    known_lengths = {name: n for name, n in lengths.items() if n is not None}
    if len(set(known_lengths.values())) > 1:
        ctx.fail(f"inputs {', '.join(repr(n) for n in known_lengths)} must have the same "
                 f"length, got {list(known_lengths.values())}")
    if data.shape is None:
        return [TensorType(data.dtype, None)]
    rank = data.rank
    starts, ends = const_ints(ctx, 1), const_ints(ctx, 2)
    axes = const_ints(ctx, 3) if ctx.has_input(3) else None
    steps = const_ints(ctx, 4) if ctx.has_input(4) else None
    count = next(iter(known_lengths.values()), None)
    if steps is not None and 0 in steps:
        ctx.fail(f"input 'steps' {steps} must not contain 0")
    if axes is None and (ctx.has_input(3) or count is None):
        # Any dim may be the one sliced.
        return [TensorType(data.dtype, _fresh_dims(ctx, rank, "slice"))]
    if axes is None:
        axes = list(range(count))
        if count > rank:
            ctx.fail(f"inputs 'starts' and 'ends' have {count} entries but input 'data' "
                     f"{data} has rank {rank}")
    axes = normalize_axes(ctx, axes, rank, "input 'axes'")
    out = list(data.shape)
    for i, axis in enumerate(axes):
        if starts is None or ends is None or (ctx.has_input(4) and steps is None):
            out[axis] = ctx.new_sym("slice")
            continue
        step = steps[i] if steps is not None else 1
        if isinstance(out[axis], int):
            out[axis] = _slice_length(out[axis], starts[i], ends[i], step)
        else:
            out[axis] = _symbolic_slice(ctx, out[axis], starts[i], ends[i], step)
    return [TensorType(data.dtype, out)]


@op("Slice", inputs=[Input("data", ANY),
                     Input("starts", INDICES, type_var="Tind", decides_shape=True),
                     Input("ends", INDICES, type_var="Tind", decides_shape=True),
                     Input("axes", INDICES, type_var="Tind", optional=True, decides_shape=True),
                     Input("steps", INDICES, type_var="Tind", optional=True, decides_shape=True)],
    outputs=[Output("output")], infer=_infer_slice)
def slice_(data, starts, ends, axes=None, steps=None):
    """data[starts:ends:steps] along axes (default 0..len(starts)-1), bounds clamped to each
    dim; negative bounds count from the end, negative steps walk backwards."""
    starts = [int(v) for v in starts.reshape(-1)]
    ends = [int(v) for v in ends.reshape(-1)]
    axes = range(len(starts)) if axes is None else [int(v) for v in axes.reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(v) for v in steps.reshape(-1)]
    index = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps):
        start, end = _clamp_slice(data.shape[axis], start, end, step)
        # A clamped end of -1 means "before index 0", which Python spells None.
        index[axis] = slice(start, None if end < 0 else end, step)
    return data[tuple(index)]


# --- Expand, Tile -----------------------------------------------------------------------


def _infer_expand(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    ctx.require_rank(1, 1)
    target = const_ints(ctx, 1)
    if target is not None and any(d < 0 for d in target):
        ctx.fail(f"input 'shape' {target} must hold dims >= 0")
    if data.shape is None:
        return [TensorType(data.dtype, None)]
    if target is None:
        length = _static_length(ctx, 1)
        if length is None:
            return [TensorType(data.dtype, None)]
        rank = limits.check_rank(max(data.rank, length), ctx.fail_limit, "input 'shape'")
        padded = (1,) * (rank - data.rank) + data.shape
        # A concrete input dim other than 1 survives whatever the shape is (1 or itself).
        return [TensorType(data.dtype, [d if isinstance(d, int) and d != 1
                                        else ctx.new_sym("expand") for d in padded])]
    rank = max(data.rank, len(target))
    padded_in = (1,) * (rank - data.rank) + data.shape
    padded_target = (1,) * (rank - len(target)) + tuple(target)
    out: list[Dim] = []
    for axis, (d, t) in enumerate(zip(padded_in, padded_target)):
        if t == 1:
            out.append(d)
        elif d == 1 or isinstance(d, Sym):
            out.append(t)  # a symbol broadcast against t > 1 must be 1 or t
        elif d == t:
            out.append(d)
        else:
            ctx.fail(f"input 'input' {data} does not broadcast with input 'shape' {target} "
                     f"(output dim {axis}: {d} vs {t})")
    return [TensorType(data.dtype, out)]


@op("Expand", inputs=[Input("input", ANY),
                      Input("shape", INT64, type_var=None, decides_shape=True)],
    outputs=[Output("output")], infer=_infer_expand)
def expand(data, shape):
    """input broadcast with shape in both directions (a 1 in shape keeps the input dim)."""
    target = [int(d) for d in shape.reshape(-1)]
    out_shape = np.broadcast_shapes(data.shape, tuple(target))
    return np.broadcast_to(data, out_shape).copy()


def _infer_tile(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    ctx.require_rank(1, 1)
    repeats = const_ints(ctx, 1)
    length = _static_length(ctx, 1)
    if data.shape is not None and length is not None and length != data.rank:
        ctx.fail(f"input 'repeats' must have one entry per dim of input 'input' {data} "
                 f"({data.rank}), got {length}")
    if repeats is not None and any(r < 0 for r in repeats):
        ctx.fail(f"input 'repeats' {repeats} must hold counts >= 0")
    if data.shape is None:
        return [TensorType(data.dtype, None if length is None
                           else _fresh_dims(ctx, length, source="input 'repeats'"))]
    if repeats is None:
        return [TensorType(data.dtype, [d if d == 0 else ctx.new_sym("tile")
                                        for d in data.shape])]
    return [TensorType(data.dtype, [dim_mul(d, r) for d, r in zip(data.shape, repeats)])]


@op("Tile", inputs=[Input("input", ANY),
                    Input("repeats", INT64, type_var=None, decides_shape=True)],
    outputs=[Output("output")], infer=_infer_tile)
def tile(data, repeats):
    """input repeated repeats[i] times along each dim i."""
    return np.tile(data, [int(r) for r in repeats.reshape(-1)])


# --- Pad --------------------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _infer_pad(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    mode = ctx.attrs["mode"]
    if mode not in _PAD_MODES:
        ctx.fail(f"attribute 'mode' must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    _require_1d(ctx, 1, 3)
    if ctx.has_input(2):
        value = ctx.input(2)
        if value.shape is not None and value.shape not in ((), (1,)):
            ctx.fail(f"input 'constant_value' must be a scalar (or one element), got {value}")
    if data.shape is None:
        return [TensorType(data.dtype, None)]
    rank = data.rank
    pads = const_ints(ctx, 1)
    if ctx.has_input(3):
        axes = const_ints(ctx, 3)
        if axes is None:
            return [TensorType(data.dtype, _fresh_dims(ctx, rank, "pad"))]
        axes = normalize_axes(ctx, axes, rank, "input 'axes'")
    else:
        axes = list(range(rank))
    length = _static_length(ctx, 1)
    if length is not None and length != 2 * len(axes):
        ctx.fail(f"input 'pads' must have 2 entries per padded axis ({2 * len(axes)}), "
                 f"got {length}")
    out = list(data.shape)
    if pads is None:
        for axis in axes:
            out[axis] = ctx.new_sym("pad")
        return [TensorType(data.dtype, out)]
    for i, axis in enumerate(axes):
        begin, end = pads[i], pads[i + len(axes)]
        dim = data.shape[axis]
        size = dim_add(dim, begin + end) if begin + end >= 0 else dim_sub(dim, -(begin + end))
        if isinstance(size, int) and size < 0:
            ctx.fail(f"input 'pads' {pads} removes more than dim {axis} ({dim}) of input "
                     f"'data' {data}")
        if isinstance(dim, int) and dim + min(begin, 0) + min(end, 0) < 0:
            # the reference crops before it pads: there would be nothing left to crop
            ctx.fail(f"input 'pads' {pads} crops more than dim {axis} ({dim}) of input "
                     f"'data' {data}")
        if mode != "constant" and dim == 0 and (begin > 0 or end > 0):
            ctx.fail(f"mode {mode!r} cannot pad dim {axis} of input 'data' {data}: it is empty")
        out[axis] = size
    return [TensorType(data.dtype, out)]


@op("Pad", inputs=[Input("data", ANY), Input("pads", INT64, type_var=None, decides_shape=True),
                   Input("constant_value", ANY, optional=True),
                   Input("axes", INDICES, type_var="Tind", optional=True, decides_shape=True)],
    outputs=[Output("output")], infer=_infer_pad,
    attrs=[Attr("mode", AttrKind.STRING, "constant")])
def pad(data, pads, constant_value=None, axes=None, *, mode):
    """data padded by pads = [begin per axis..., end per axis...] along axes (default all):
    with constant_value (default 0), the reflection without the edge, the edge repeated,
    or wrapped around. Negative pads crop the input before the padding is added."""
    axes = range(data.ndim) if axes is None else [int(a) % data.ndim for a in axes.reshape(-1)]
    pads = [int(p) for p in pads.reshape(-1)]
    crop = [slice(None)] * data.ndim
    widths = [(0, 0)] * data.ndim
    for i, axis in enumerate(axes):
        begin, end = pads[i], pads[i + len(axes)]
        crop[axis] = slice(max(-begin, 0), data.shape[axis] - max(-end, 0))
        widths[axis] = (max(begin, 0), max(end, 0))
    cropped = data[tuple(crop)]
    if mode == "constant":
        fill = 0 if constant_value is None else constant_value.reshape(-1)[0]
        return np.pad(cropped, widths, mode="constant", constant_values=fill)
    return np.pad(cropped, widths, mode=mode)


# --- Shape, Size ------------------------------------------------------------------------


def _infer_shape(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    if data.shape is None:
        return [TensorType(DType.INT64, [ctx.new_sym("rank")])]
    start, end = _shape_range(data.rank, ctx.attrs["start"], ctx.attrs["end"])
    return [TensorType(DType.INT64, [max(0, end - start)])]


def _shape_range(rank: int, start: int, end: int | None) -> tuple[int, int]:
    """Shape's start and end: negative values count from the back, both clamped to [0, rank]."""
    end = rank if end is None else end
    start, end = (start + rank if start < 0 else start), (end + rank if end < 0 else end)
    return min(max(start, 0), rank), min(max(end, 0), rank)


@op("Shape", inputs=[Input("data", ANY)], outputs=[Output("shape")], infer=_infer_shape,
    attrs=[Attr("start", AttrKind.INT, 0), Attr("end", AttrKind.INT, None)])
def shape(data, *, start, end):
    """The dims of data from start to end (Python slice semantics, clamped) as int64."""
    start, end = _shape_range(data.ndim, start, end)
    return np.array(data.shape[start:end], dtype=np.int64)


def _infer_size(ctx: InferenceContext) -> list[TensorType]:
    return [TensorType(DType.INT64, ())]


@op("Size", inputs=[Input("data", ANY)], outputs=[Output("size")], infer=_infer_size)
def size(data):
    """The number of elements of data, as an int64 scalar."""
    return np.array(data.size, dtype=np.int64)


# --- DepthToSpace, SpaceToDepth ---------------------------------------------------------


def _block_checks(ctx: InferenceContext) -> int:
    ctx.require_rank(0, 4)
    blocksize = ctx.attrs["blocksize"]
    if blocksize < 1:
        ctx.fail(f"attribute 'blocksize' must be >= 1, got {blocksize}")
    return blocksize


def _divisible(ctx: InferenceContext, dim: Dim, by: int, what: str) -> Dim:
    if isinstance(dim, int) and dim % by:
        ctx.fail(f"{what} ({dim}) of input 'input' {ctx.input(0)} must be divisible by {by}")
    return dim_floordiv(dim, by)


def _infer_depth_to_space(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    b = _block_checks(ctx)
    mode = ctx.attrs["mode"]
    if mode not in ("DCR", "CRD"):
        ctx.fail(f"attribute 'mode' must be 'DCR' or 'CRD', got {mode!r}")
    if data.shape is None:
        return [TensorType(data.dtype, _fresh_dims(ctx, 4))]
    n, c, h, w = data.shape
    channels = _divisible(ctx, c, b * b, "the channel dim")
    return [TensorType(data.dtype, [n, channels, dim_mul(h, b), dim_mul(w, b)])]


@op("DepthToSpace", inputs=[Input("input", ANY)], outputs=[Output("output")],
    infer=_infer_depth_to_space,
    attrs=[Attr("blocksize", AttrKind.INT), Attr("mode", AttrKind.STRING, "DCR")])
def depth_to_space(data, *, blocksize, mode):
    """[N,C,H,W] -> [N,C/b²,H·b,W·b]: channel blocks become b×b spatial tiles; DCR takes the
    block offset from the outer part of the channel index, CRD from the inner part."""
    n, c, h, w = data.shape
    b = blocksize
    if mode == "DCR":
        tiles = data.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        tiles = data.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return tiles.reshape(n, c // (b * b), h * b, w * b)


def _infer_space_to_depth(ctx: InferenceContext) -> list[TensorType]:
    data = ctx.input(0)
    b = _block_checks(ctx)
    mode = ctx.attrs["mode"]
    if mode not in ("DCR", "CRD"):
        ctx.fail(f"attribute 'mode' must be 'DCR' or 'CRD', got {mode!r}")
    if data.shape is None:
        return [TensorType(data.dtype, _fresh_dims(ctx, 4))]
    n, c, h, w = data.shape
    height = _divisible(ctx, h, b, "the height dim")
    width = _divisible(ctx, w, b, "the width dim")
    return [TensorType(data.dtype, [n, dim_mul(c, b * b), height, width])]


@op("SpaceToDepth", inputs=[Input("input", ANY)], outputs=[Output("output")],
    infer=_infer_space_to_depth,
    attrs=[Attr("blocksize", AttrKind.INT), Attr("mode", AttrKind.STRING, "DCR")])
def space_to_depth(data, *, blocksize, mode):
    """[N,C,H,W] -> [N,C·b²,H/b,W/b]: each b×b spatial tile becomes channels; DCR puts the
    block offset outermost in the channel index, CRD innermost (the inverses of
    DepthToSpace in the same mode)."""
    n, c, h, w = data.shape
    b = blocksize
    grid = data.reshape(n, c, h // b, b, w // b, b)
    tiles = grid.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else grid.transpose(0, 1, 3, 5, 2, 4)
    return tiles.reshape(n, c * b * b, h // b, w // b)


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
