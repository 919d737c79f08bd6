"""Indexing and index-producing ops: Gather*, Scatter*, TensorScatter (a KV-cache write),
Range, ConstantOfShape, EyeLike, Trilu, OneHot, NonZero.

The references are the oracle for kernels and constant folding:

- index values may be negative (counted from the end) and must lie in [-s, s-1] for an
  axis of size s; one outside that range is an `OpError` naming the op and the input,
  never a wrapped or clipped read (OneHot is the exception: ONNX gives an all-off row);
- ScatterElements and ScatterND apply their updates in index order, so with duplicate
  indices and reduction 'none' the last update wins; 'add' and 'mul' on floats are
  accumulated in float64 and rounded once;
- the output has exactly the dtype inference promised.
"""

from __future__ import annotations

import math

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType
from ge_hub.ops.inference import const_ints, normalize_axis, same_as_input
from ge_hub.ops.nn_common import check_choice, reference_fail
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

_SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
_RANGE_TYPES = FLOATS | {DType.INT16, DType.INT32, DType.INT64}
# ONNX's OneHot takes values of every dtype, but no bfloat16 indices or depth.
_ONE_HOT_NUMBERS = NUMERIC - {DType.BFLOAT16}
_ONE_HOT_VALUES = ANY
# Range's stash_type is an ONNX TensorProto element type: FLOAT (1) or DOUBLE (11).
_STASH_TYPES = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}

_HALF_FLOATS = (DType.FLOAT16.numpy, DType.BFLOAT16.numpy)


def _is_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f" or x.dtype in _HALF_FLOATS  # bfloat16's kind is "V"


def _flag(ctx: InferenceContext, name: str) -> bool:
    value = ctx.attrs[name]
    if value not in (0, 1):
        ctx.fail(f"attribute {name!r} must be 0 or 1, got {value}")
    return bool(value)


def _merge_dim(ctx: InferenceContext, what: str, a: Dim, b: Dim) -> Dim:
    """Two dims that must be equal: fail when both are known and differ; prefer the int."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        ctx.fail(f"{what}: {a} vs {b}")
    return a if isinstance(a, int) else b


def _check_const_indices(ctx: InferenceContext, index: int, sizes, what: str) -> None:
    """With constant indices and a known axis size, report out-of-range values early."""
    data = ctx.const(index)
    if data is None or not isinstance(sizes, int):
        return
    bad = data[(data < -sizes) | (data >= sizes)]
    if bad.size:
        ctx.fail(f"input {ctx.schema.input_name(index)!r} has value {int(bad.reshape(-1)[0])}, "
                 f"out of range [{-sizes}, {sizes - 1}] for {what}")


def _normalize_indices(op_name: str, name: str, indices: np.ndarray, size, what: str):
    """Indices as int64 in [0, size); negative ones count from the end."""
    indices = indices.astype(np.int64)
    size = np.asarray(size, dtype=np.int64)
    bad = (indices < -size) | (indices >= size)
    if np.any(bad):
        value = int(indices[bad].reshape(-1)[0])
        limit = int(np.broadcast_to(size, indices.shape)[bad].reshape(-1)[0])
        raise OpError(f"{op_name}: input {name!r} has value {value}, out of range "
                      f"[{-limit}, {limit - 1}] for {what}")
    return np.where(indices < 0, indices + size, indices)


# --- Gather -------------------------------------------------------------------------


def _infer_gather(ctx: InferenceContext) -> list[TensorType]:
    data, indices = ctx.input(0), ctx.input(1)
    ctx.require_rank(0, at_least=1)
    if data.rank is None:
        return [TensorType(data.dtype, None)]
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.rank, "attribute 'axis'")
    _check_const_indices(ctx, 1, data.shape[axis], f"axis {axis} of 'data' {data}")
    if indices.rank is None:
        return [TensorType(data.dtype, None)]
    return [TensorType(data.dtype, data.shape[:axis] + indices.shape + data.shape[axis + 1:])]


@op("Gather", inputs=[Input("data", ANY), Input("indices", INDICES, type_var="Tind")],
    outputs=[Output("output")], infer=_infer_gather, attrs=[Attr("axis", AttrKind.INT, 0)])
def gather(data, indices, *, axis):
    """Take along `axis`: out[i.., j.., k..] = data[i.., idx[j..], k..]."""
    axis %= data.ndim
    where = f"axis {axis} of 'data' {data.shape}"
    index = _normalize_indices("Gather", "indices", indices, data.shape[axis], where)
    return np.take(data, index, axis=axis)


# --- GatherElements -----------------------------------------------------------------


def _infer_elementwise_indices(ctx: InferenceContext) -> int | None:
    """Shared checks of GatherElements and ScatterElements; returns the axis."""
    data, indices = ctx.input(0), ctx.input(1)
    ctx.require_rank(0, at_least=1)
    if data.rank is not None and indices.rank is not None and data.rank != indices.rank:
        ctx.fail(f"input 'indices' {indices} must have the rank of 'data' {data} ({data.rank})")
    if data.rank is None:
        return None
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.rank, "attribute 'axis'")
    _check_const_indices(ctx, 1, data.shape[axis], f"axis {axis} of 'data' {data}")
    if indices.shape is not None:
        for i, (d, n) in enumerate(zip(data.shape, indices.shape)):
            if i != axis and isinstance(d, int) and isinstance(n, int) and n > d:
                ctx.fail(f"input 'indices' {indices} is larger than 'data' {data} along "
                         f"axis {i}, which is not the gather/scatter axis")
    return axis


def _element_coordinates(op_name, data, indices, axis):
    """Full coordinates into `data` for each entry of `indices` (the index along `axis`)."""
    if indices.ndim != data.ndim:
        raise OpError(f"{op_name}: input 'indices' {indices.shape} must have the rank of "
                      f"'data' {data.shape}")
    where = f"axis {axis} of 'data' {data.shape}"
    index = _normalize_indices(op_name, "indices", indices, data.shape[axis], where)
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = index
    return tuple(grid)


def _infer_gather_elements(ctx: InferenceContext) -> list[TensorType]:
    _infer_elementwise_indices(ctx)
    return [ctx.input(1).with_dtype(ctx.input(0).dtype)]


@op("GatherElements", inputs=[Input("data", ANY), Input("indices", INDICES, type_var="Tind")],
    outputs=[Output("output")], infer=_infer_gather_elements,
    attrs=[Attr("axis", AttrKind.INT, 0)])
def gather_elements(data, indices, *, axis):
    """out[i][j] = data[idx[i][j]][j] for axis 0 (likewise for any axis); shape of indices."""
    axis %= data.ndim
    return data[_element_coordinates("GatherElements", data, indices, axis)]


# --- GatherND -------------------------------------------------------------------------


def _infer_gather_nd(ctx: InferenceContext) -> list[TensorType]:
    data, indices = ctx.input(0), ctx.input(1)
    batch_dims = ctx.attrs["batch_dims"]
    ctx.require_rank(0, at_least=1)
    ctx.require_rank(1, at_least=1)
    if batch_dims < 0:
        ctx.fail(f"attribute 'batch_dims' must be >= 0, got {batch_dims}")
    if data.rank is None or indices.rank is None:
        return [TensorType(data.dtype, None)]
    if batch_dims >= min(data.rank, indices.rank):
        ctx.fail(f"attribute 'batch_dims' ({batch_dims}) must be less than the ranks of "
                 f"'data' {data} and 'indices' {indices}")
    batch = tuple(_merge_dim(ctx, f"'data' {data} and 'indices' {indices} differ in batch "
                                  f"dim {i}", data.shape[i], indices.shape[i])
                  for i in range(batch_dims))
    depth = indices.shape[-1]
    if not isinstance(depth, int):
        return [TensorType(data.dtype, None)]
    if not 1 <= depth <= data.rank - batch_dims:
        ctx.fail(f"the last dim of 'indices' {indices} must be in [1, {data.rank - batch_dims}] "
                 f"(rank of 'data' less batch_dims), got {depth}")
    shape = batch + indices.shape[batch_dims:-1] + data.shape[batch_dims + depth:]
    return [TensorType(data.dtype, shape)]


def _nd_coordinates(op_name: str, data_shape, indices: np.ndarray, batch_dims: int):
    """For index tuples `indices[..., :]`, their normalized coordinates into data flattened
    over its batch dims: (batch number, coordinate per indexed axis), one row per tuple."""
    depth = indices.shape[-1]
    if not 1 <= depth <= len(data_shape) - batch_dims:
        raise OpError(f"{op_name}: the last dim of 'indices' {indices.shape} must be in "
                      f"[1, {len(data_shape) - batch_dims}], got {depth}")
    batch_count = math.prod(data_shape[:batch_dims])
    tuples = indices.reshape(batch_count, -1, depth) if indices.size else \
        np.zeros((batch_count, 0, depth), dtype=np.int64)
    sizes = np.asarray(data_shape[batch_dims:batch_dims + depth], dtype=np.int64)
    normalized = _normalize_indices(op_name, "indices", tuples, sizes,
                                    f"the indexed axes of 'data' {tuple(data_shape)}")
    batch = np.broadcast_to(np.arange(batch_count)[:, None], normalized.shape[:2])
    return (batch,) + tuple(normalized[..., j] for j in range(depth))


@op("GatherND", inputs=[Input("data", ANY), Input("indices", INT64, type_var="Tind")],
    outputs=[Output("output")], infer=_infer_gather_nd,
    attrs=[Attr("batch_dims", AttrKind.INT, 0)])
def gather_nd(data, indices, *, batch_dims):
    """Slices of `data` at index tuples (the last dim of `indices`), per batch."""
    for i in range(batch_dims):
        if data.shape[i] != indices.shape[i]:
            raise OpError(f"GatherND: 'data' {data.shape} and 'indices' {indices.shape} differ "
                          f"in batch dim {i}")
    depth = indices.shape[-1]
    flat = data.reshape((math.prod(data.shape[:batch_dims]),) + data.shape[batch_dims:])
    picked = flat[_nd_coordinates("GatherND", data.shape, indices, batch_dims)]
    return picked.reshape(indices.shape[:-1] + data.shape[batch_dims + depth:])


# --- ScatterElements, ScatterND -------------------------------------------------------


def _check_reduction(ctx: InferenceContext) -> None:
    if ctx.attrs["reduction"] not in _SCATTER_REDUCTIONS:
        ctx.fail(f"attribute 'reduction' must be one of {', '.join(_SCATTER_REDUCTIONS)}, "
                 f"got {ctx.attrs['reduction']!r}")


def _scatter(data: np.ndarray, coordinates, updates: np.ndarray, reduction: str) -> np.ndarray:
    """Copy of `data` with `updates` written (or reduced) at `coordinates`, in index order."""
    exact = reduction in ("add", "mul") and _is_float(data)
    out = data.astype(np.float64) if exact else data.copy()
    updates = updates.astype(out.dtype)
    if reduction == "none":
        # NumPy does not promise an order for duplicate targets of a fancy assignment, so
        # keep only the last update of each target, which is what a loop in index order
        # would leave.
        lead = coordinates[0].shape
        flat = [np.broadcast_to(c, lead).reshape(-1) for c in coordinates]
        targets = np.ravel_multi_index(flat, out.shape[:len(flat)])
        _, last_from_end = np.unique(targets[::-1], return_index=True)
        keep = targets.size - 1 - last_from_end
        values = updates.reshape((-1,) + updates.shape[len(lead):])
        out[tuple(c[keep] for c in flat)] = values[keep]
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
        with np.errstate(all="ignore"):
            ufunc[reduction].at(out, coordinates, updates)
    return out.astype(data.dtype, copy=False)


def _infer_scatter_elements(ctx: InferenceContext) -> list[TensorType]:
    _check_reduction(ctx)
    _infer_elementwise_indices(ctx)
    indices, updates = ctx.input(1), ctx.input(2)
    if indices.shape is not None and updates.shape is not None:
        if indices.rank != updates.rank:
            ctx.fail(f"input 'updates' {updates} must have the shape of 'indices' {indices}")
        for i, (a, b) in enumerate(zip(indices.shape, updates.shape)):
            _merge_dim(ctx, f"input 'updates' {updates} must have the shape of 'indices' "
                            f"{indices} (dim {i})", a, b)
    return [ctx.input(0)]


@op("ScatterElements",
    inputs=[Input("data", ANY), Input("indices", INDICES, type_var="Tind"), Input("updates", ANY)],
    outputs=[Output("output")], infer=_infer_scatter_elements,
    attrs=[Attr("axis", AttrKind.INT, 0), Attr("reduction", AttrKind.STRING, "none")])
def scatter_elements(data, indices, updates, *, axis, reduction):
    """Copy of data with out[idx[i][j]][j] = f(out[idx[i][j]][j], updates[i][j]) (axis 0)."""
    if indices.shape != updates.shape:
        raise OpError(f"ScatterElements: input 'updates' {updates.shape} must have the shape of "
                      f"'indices' {indices.shape}")
    axis %= data.ndim
    coordinates = _element_coordinates("ScatterElements", data, indices, axis)
    coordinates = tuple(np.broadcast_to(c, indices.shape) for c in coordinates)
    return _scatter(data, coordinates, updates, reduction)


def _infer_scatter_nd(ctx: InferenceContext) -> list[TensorType]:
    _check_reduction(ctx)
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_rank(0, at_least=1)
    ctx.require_rank(1, at_least=1)
    if data.shape is None or indices.shape is None or updates.shape is None:
        return [data]
    depth = indices.shape[-1]
    if not isinstance(depth, int):
        return [data]
    if not 1 <= depth <= data.rank:
        ctx.fail(f"the last dim of 'indices' {indices} must be in [1, {data.rank}] (the rank "
                 f"of 'data' {data}), got {depth}")
    expected = indices.shape[:-1] + data.shape[depth:]
    if updates.rank != len(expected):
        ctx.fail(f"input 'updates' {updates} must have shape indices.shape[:-1] + "
                 f"data.shape[{depth}:] = {list(expected)}")
    for i, (want, got) in enumerate(zip(expected, updates.shape)):
        _merge_dim(ctx, f"input 'updates' {updates} must have shape indices.shape[:-1] + "
                        f"data.shape[{depth}:] = {list(expected)} (dim {i})", want, got)
    return [data]


@op("ScatterND",
    inputs=[Input("data", ANY), Input("indices", INT64, type_var="Tind"), Input("updates", ANY)],
    outputs=[Output("output")], infer=_infer_scatter_nd,
    attrs=[Attr("reduction", AttrKind.STRING, "none")])
def scatter_nd(data, indices, updates, *, reduction):
    """Copy of data with out[idx[j..]] = f(out[idx[j..]], updates[j..]) for each index tuple."""
    depth = indices.shape[-1]
    expected = indices.shape[:-1] + data.shape[depth:]
    if updates.shape != expected:
        raise OpError(f"ScatterND: input 'updates' {updates.shape} must have shape "
                      f"indices.shape[:-1] + data.shape[{depth}:] = {expected}")
    batch, *axes = _nd_coordinates("ScatterND", data.shape, indices, 0)
    del batch  # no batch dims: one batch
    flat_updates = updates.reshape((-1,) + data.shape[depth:])
    return _scatter(data, tuple(a[0] for a in axes), flat_updates, reduction)


# --- Range ----------------------------------------------------------------------------


def _range_compute_dtype(dtype: np.dtype, stash_type: int) -> np.dtype:
    if dtype in _HALF_FLOATS:
        return _STASH_TYPES[stash_type]
    return np.dtype(np.float64) if dtype.kind == "f" else np.dtype(np.int64)


def _range_length(start, limit, delta) -> int:
    """max(ceil((limit - start) / delta), 0), exactly for integers."""
    if isinstance(start, int):
        return max(-((start - limit) // delta), 0)
    return max(math.ceil((limit - start) / delta), 0)


def _range_scalars(dtype: np.dtype, stash_type: int, *arrays):
    compute = _range_compute_dtype(dtype, stash_type)
    return [np.asarray(a).astype(compute).item() for a in arrays]


def _infer_range(ctx: InferenceContext) -> list[TensorType]:
    dtype = ctx.input(0).dtype
    if ctx.attrs["stash_type"] not in _STASH_TYPES:
        ctx.fail(f"attribute 'stash_type' must be 1 (float) or 11 (double), "
                 f"got {ctx.attrs['stash_type']}")
    # Scalars, as ONNX says; a one-element [1] tensor is accepted too, as ONNX Runtime
    # does and as ONNX's own function bodies (RMSNormalization, Attention) produce.
    for index, name in enumerate(("start", "limit", "delta")):
        shape = ctx.input(index).shape
        if shape is not None and shape not in ((), (1,)) and not (
                len(shape) == 1 and not isinstance(shape[0], int)):
            ctx.fail(f"input {name!r} must be a scalar (or a [1] tensor), got {ctx.input(index)}")
    consts = [ctx.const(i) for i in range(3)]
    if consts[2] is not None and consts[2] == 0:
        ctx.fail("input 'delta' must not be zero")
    if any(c is None for c in consts):
        return [TensorType(dtype, (ctx.new_sym("range"),))]
    start, limit, delta = _range_scalars(dtype.numpy, ctx.attrs["stash_type"], *consts)
    if not all(math.isfinite(v) for v in (start, limit, delta)):
        ctx.fail(f"inputs 'start', 'limit' and 'delta' must be finite, got "
                 f"{start}, {limit}, {delta}")
    return [TensorType(dtype, (_range_length(start, limit, delta),))]


@op("Range", inputs=[Input("start", _RANGE_TYPES, decides_shape=True),
                     Input("limit", _RANGE_TYPES, decides_shape=True),
                     Input("delta", _RANGE_TYPES, decides_shape=True)],
    outputs=[Output("output")], infer=_infer_range, attrs=[Attr("stash_type", AttrKind.INT, 1)])
def range_(start, limit, delta, *, stash_type):
    """[start, start + delta, ...] up to `limit` (exclusive): ceil((limit-start)/delta) values."""
    dtype = start.dtype
    first, last, step = _range_scalars(dtype, stash_type, start, limit, delta)
    if step == 0:
        raise OpError("Range: input 'delta' must not be zero")
    if not all(math.isfinite(v) for v in (first, last, step)):
        raise OpError(f"Range: inputs 'start', 'limit' and 'delta' must be finite, got "
                      f"{first}, {last}, {step}")
    count = _range_length(first, last, step)
    compute = _range_compute_dtype(dtype, stash_type)
    with np.errstate(over="ignore"):  # integers wrap like C
        values = compute.type(first) + np.arange(count, dtype=compute) * compute.type(step)
    return values.astype(dtype)


# --- ConstantOfShape ------------------------------------------------------------------


def _infer_constant_of_shape(ctx: InferenceContext) -> list[TensorType]:
    value = ctx.attrs["value"]
    if value.size != 1:
        ctx.fail(f"attribute 'value' must hold exactly one element, got shape {value.shape}")
    dtype = DType.from_numpy(value.dtype)
    shape_type = ctx.input(0)
    ctx.require_rank(0, 1)
    dims = const_ints(ctx, 0)
    if dims is not None:
        if any(d < 0 for d in dims):
            ctx.fail(f"input 'input' must hold dims >= 0, got {dims}")
        return [TensorType(dtype, tuple(dims))]
    if shape_type.shape is None or not isinstance(shape_type.shape[0], int):
        return [TensorType(dtype, None)]
    return [TensorType(dtype, ctx.new_syms(shape_type.shape[0], "dim", "input 'input'"))]


@op("ConstantOfShape", inputs=[Input("input", INT64, decides_shape=True)],
    outputs=[Output("output")], infer=_infer_constant_of_shape,
    attrs=[Attr("value", AttrKind.TENSOR, np.zeros(1, dtype=np.float32))])
def constant_of_shape(shape, *, value):
    """A tensor of shape `input` filled with the one element of `value` (default float32 0)."""
    dims = [int(d) for d in shape.reshape(-1)]
    if any(d < 0 for d in dims):
        raise OpError(f"ConstantOfShape: input 'input' must hold dims >= 0, got {dims}")
    return np.full(dims, value.reshape(-1)[0], dtype=value.dtype)


# --- Trilu ----------------------------------------------------------------------------


def _infer_trilu(ctx: InferenceContext) -> list[TensorType]:
    _flag(ctx, "upper")
    ctx.require_rank(0, at_least=2)
    if ctx.has_input(1):
        ctx.require_rank(1, 0)
    return same_as_input(ctx)


@op("Trilu", inputs=[Input("input", ANY), Input("k", INT64, type_var="Tk", optional=True)],
    outputs=[Output("output")], infer=_infer_trilu, attrs=[Attr("upper", AttrKind.INT, 1)])
def trilu(x, k=None, *, upper):
    """Upper (or lower) triangle of the last two dims from diagonal k on; the rest zero."""
    offset = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    rows, cols = x.shape[-2:]
    above = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # column minus row
    keep = above >= offset if upper else above <= offset
    return np.where(keep, x, np.zeros((), dtype=x.dtype))


# --- OneHot ---------------------------------------------------------------------------


def _infer_one_hot(ctx: InferenceContext) -> list[TensorType]:
    indices, depth_type, values = ctx.input(0), ctx.input(1), ctx.input(2)
    if depth_type.rank is not None and depth_type.shape not in ((), (1,)):
        ctx.fail(f"input 'depth' must be a scalar or hold one element, got {depth_type}")
    ctx.require_rank(2, 1)
    if values.shape is not None and isinstance(values.shape[0], int) and values.shape[0] != 2:
        ctx.fail(f"input 'values' must hold two elements [off_value, on_value], got {values}")
    depth_data = ctx.const(1)
    depth: Dim
    if depth_data is None:
        depth = ctx.new_sym("depth")
    else:
        depth = int(np.asarray(depth_data).reshape(-1)[0])
        if depth < 1:
            ctx.fail(f"input 'depth' must be >= 1, got {depth}")
    if indices.rank is None:
        return [TensorType(values.dtype, None)]
    axis = normalize_axis(ctx, ctx.attrs["axis"], indices.rank + 1, "attribute 'axis'")
    return [TensorType(values.dtype, indices.shape[:axis] + (depth,) + indices.shape[axis:])]


@op("OneHot", inputs=[Input("indices", _ONE_HOT_NUMBERS, type_var="T1"),
                      Input("depth", _ONE_HOT_NUMBERS, type_var="T2", decides_shape=True),
                      Input("values", _ONE_HOT_VALUES, type_var="T3")],
    outputs=[Output("output")], infer=_infer_one_hot, attrs=[Attr("axis", AttrKind.INT, -1)])
def one_hot(indices, depth, values, *, axis):
    """on_value where the new axis coordinate equals the index (negatives wrap), else off_value."""
    size = int(np.asarray(depth).reshape(-1)[0])
    if size < 1:
        raise OpError(f"OneHot: input 'depth' must be >= 1, got {size}")
    if values.size != 2:
        raise OpError(f"OneHot: input 'values' must hold two elements, got {values.shape}")
    axis %= indices.ndim + 1
    # Non-integer indices are cast to int64 first, as ONNX says (truncating toward zero).
    index = indices.astype(np.float64).astype(np.int64) if _is_float(indices) \
        else indices.astype(np.int64)
    index = np.where(index < 0, index + size, index)  # out-of-range values match no class
    classes = np.arange(size).reshape((size,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(index, axis) == classes
    off, on = values.reshape(-1)
    return np.where(hot, on, off).astype(values.dtype)


# --- NonZero --------------------------------------------------------------------------


def _infer_non_zero(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    rank: Dim = ctx.new_sym("rank") if x.rank is None else x.rank
    data = ctx.const(0)
    count: Dim = ctx.new_sym("nonzero") if data is None else int(np.count_nonzero(data != 0))
    return [TensorType(DType.INT64, (rank, count))]


# X decides the output's length: a compiled model specializes its plan on X's values (and
# so on the graph inputs X is computed from), one plan per distinct value; see
# `ge_hub.ops.select` for the limits of that.
@op("NonZero", inputs=[Input("X", ANY, decides_shape=True)], outputs=[Output("Y")],
    infer=_infer_non_zero)
def non_zero(x):
    """Coordinates (int64, shape [rank, count]) of the non-zero elements, in row-major order."""
    nonzero = x != 0
    if x.ndim == 0:
        # ONNX: a scalar has no coordinates to list; only the count shows.
        return np.zeros((0, int(nonzero)), dtype=np.int64)
    return np.array(np.nonzero(nonzero), dtype=np.int64).reshape(x.ndim, -1)


# --- EyeLike ----------------------------------------------------------------------------


def _infer_eye_like(ctx: InferenceContext) -> list[TensorType]:
    ctx.require_rank(0, 2)
    x = ctx.input(0)
    dtype = ctx.attrs["dtype"] or x.dtype
    shape = x.shape if x.shape is not None else (ctx.new_sym("rows"), ctx.new_sym("cols"))
    return [TensorType(dtype, shape)]


@op("EyeLike", inputs=[Input("input", ANY)], outputs=[Output("output")],
    infer=_infer_eye_like, attrs=[Attr("dtype", AttrKind.DTYPE, None), Attr("k", AttrKind.INT, 0)])
def eye_like(x, *, dtype, k):
    """A matrix of the input's shape, 1 on diagonal `k` (above the main one when k > 0),
    0 elsewhere; of dtype `dtype`, or of the input's dtype when it is not given."""
    if x.ndim != 2:
        raise OpError(f"EyeLike: input 'input' must have rank 2, got shape {x.shape}")
    target = DType.parse(dtype).numpy if dtype is not None else x.dtype
    return np.eye(x.shape[0], x.shape[1], k, dtype=np.float32).astype(target)


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
