"""Shape ops: reshape, flatten, transpose, concat, split, squeeze, slice, gather, expand,
tile, stack, shape, reductions, argmax, arange.

Paddle passes shapes, axes and sizes as operands (`full_int_array` constants in saved
programs, or a `builtin.combine` of scalars computed at run time). Known data is read
with `cv.const`; run-time shapes are assembled into a 1-D int64 tensor.
"""

from __future__ import annotations

import numpy as np

from ge_paddle.converters.table import converts


def _error(op, message):
    from ge_paddle.convert import PaddleConversionError

    return PaddleConversionError(f"{op.describe()}: {message}")


def _int_vector(cv, op, index, what):
    """Operand `index` (a tensor or a combined list of scalars) as a 1-D int64 Value."""
    value = cv.input(op, index)
    if isinstance(value, list):
        if all(v.const is not None for v in value):
            return cv.ints(np.concatenate([np.reshape(v.const, -1) for v in value]))
        parts = [cv.one("Reshape", [_int64(cv, v), cv.ints([1])]) for v in value]
        return cv.one("Concat", parts, {"axis": 0})
    if value.const is not None:
        return cv.ints(np.reshape(value.const, -1))
    return cv.one("Reshape", [_int64(cv, value), cv.ints([-1])])


def _int64(cv, value):
    if value.type.dtype.value == "int64":
        return value
    return cv.one("Cast", [value], {"to": "int64"})


def _axes(cv, op, index, attr="axis"):
    if cv.has_input(op, index):
        return [int(a) for a in np.reshape(cv.const(op, index, attr), -1)]
    value = op.attrs.get(attr, op.attrs.get("axes", op.attrs.get("dim", [])))
    return [int(a) for a in (value if isinstance(value, list) else [value])]


@converts("reshape", "reshape2")
def reshape(cv, op):
    x = cv.input(op, 0)
    return [cv.one("Reshape", [x, _int_vector(cv, op, 1, "shape")]), None]


@converts("flatten", "flatten_contiguous_range")
def flatten(cv, op):
    x = cv.input(op, 0)
    rank = x.type.rank
    if rank == 0:
        return [cv.one("Reshape", [x, cv.ints([1])]), None]
    start = int(op.attrs.get("start_axis", 1)) % rank
    stop = int(op.attrs.get("stop_axis", -1)) % rank
    after = list(x.type.shape[stop + 1:])
    if all(isinstance(d, int) for d in after):
        shape = cv.ints([0] * start + [-1] + after)
    else:
        shape = cv.one("Concat", [cv.ints([0] * start + [-1]),
                                  cv.one("Slice", [cv.one("Shape", [x]), cv.ints([stop + 1]),
                                                   cv.ints([rank])])], {"axis": 0})
    return [cv.one("Reshape", [x, shape]), None]


@converts("transpose", "transpose2")
def transpose(cv, op):
    perm = [int(p) for p in op.attrs.get("perm", op.attrs.get("axis", []))]
    return [cv.one("Transpose", [cv.input(op, 0)], {"perm": perm}), None]


@converts("concat")
def concat(cv, op):
    parts = cv.input(op, 0)
    parts = parts if isinstance(parts, list) else [parts]
    (axis,) = _axes(cv, op, 1)
    return cv.one("Concat", parts, {"axis": axis})


@converts("stack")
def stack(cv, op):
    parts = cv.input(op, 0)
    parts = parts if isinstance(parts, list) else [parts]
    axis = int(op.attrs.get("axis", 0))
    return cv.one("Concat", [cv.one("Unsqueeze", [p, cv.ints([axis])]) for p in parts],
                  {"axis": axis})


@converts("split")
def split(cv, op):
    x = cv.input(op, 0)
    sections = [int(s) for s in np.reshape(cv.const(op, 1, "sections"), -1)]
    (axis,) = _axes(cv, op, 2)
    dim = x.type.shape[axis]
    if -1 in sections:
        if not isinstance(dim, int):
            raise _error(op, f"a section of -1 over dim {dim}, which is not static")
        sections[sections.index(-1)] = dim - sum(s for s in sections if s != -1)
    parts = cv.emit("Split", [x, cv.ints(sections)], {"axis": axis},
                    num_outputs=len(sections))
    return [parts]


@converts("split_with_num")
def split_with_num(cv, op):
    x = cv.input(op, 0)
    (axis,) = _axes(cv, op, 1)
    num = int(op.attrs["num"])
    parts = cv.emit("Split", [x], {"axis": axis, "num_outputs": num}, num_outputs=num)
    return [parts]


@converts("squeeze", "squeeze2")
def squeeze(cv, op):
    x = cv.input(op, 0)
    axes = _axes(cv, op, 1, "axes")
    rank = x.type.rank
    if not axes:
        axes = [i for i, d in enumerate(x.type.shape) if d == 1]
    # Paddle leaves a dim that is not 1 in place; ONNX refuses it.
    axes = [a % rank for a in axes if x.type.shape[a % rank] == 1]
    if not axes:
        return [cv.one("Identity", [x]), None]
    return [cv.one("Squeeze", [x, cv.ints(axes)]), None]


@converts("unsqueeze", "unsqueeze2")
def unsqueeze(cv, op):
    x = cv.input(op, 0)
    axes = _axes(cv, op, 1, "axes")
    # Paddle inserts one axis at a time, each index counted in the growing tensor.
    rank = x.type.rank
    result = x
    for axis in axes:
        rank += 1
        result = cv.one("Unsqueeze", [result, cv.ints([axis % rank])])
    return [result, None]


@converts("shape", "shape64")
def shape(cv, op):
    value = cv.one("Shape", [cv.input(op, 0)])
    declared = cv.result_type(op)
    dtype = getattr(declared, "dtype", "int64")
    if dtype != "int64":
        value = cv.one("Cast", [value], {"to": dtype})
    return value


@converts("slice")
def slice_(cv, op):
    x = cv.input(op, 0)
    axes = [int(a) for a in op.attrs.get("axes", [])]
    starts = _int_vector(cv, op, 1, "starts")
    ends = _int_vector(cv, op, 2, "ends")
    y = cv.one("Slice", [x, starts, ends, cv.ints(axes)])
    decrease = [int(a) for a in op.attrs.get("decrease_axis", [])]
    if decrease:
        y = cv.one("Squeeze", [y, cv.ints(decrease)])
    return y


@converts("strided_slice")
def strided_slice(cv, op):
    x = cv.input(op, 0)
    axes = [int(a) for a in op.attrs.get("axes", [])]
    return cv.one("Slice", [x, _int_vector(cv, op, 1, "starts"), _int_vector(cv, op, 2, "ends"),
                            cv.ints(axes), _int_vector(cv, op, 3, "strides")])


@converts("gather")
def gather(cv, op):
    x, index = cv.input(op, 0), cv.input(op, 1)
    (axis,) = _axes(cv, op, 2) or [0]
    return cv.one("Gather", [x, index], {"axis": axis})


@converts("index_select")
def index_select(cv, op):
    return cv.one("Gather", [cv.input(op, 0), cv.input(op, 1)],
                  {"axis": int(op.attrs.get("axis", 0))})


@converts("gather_nd")
def gather_nd(cv, op):
    return cv.one("GatherND", [cv.input(op, 0), _int64(cv, cv.input(op, 1))])


@converts("expand", "expand_v2")
def expand(cv, op):
    x = cv.input(op, 0)
    target = _int_vector(cv, op, 1, "shape")
    if target.const is not None:
        # Paddle's -1 keeps the dim; a 1 does the same under ONNX's broadcasting.
        target = cv.ints(np.where(target.const == -1, 1, target.const))
    return cv.one("Expand", [x, target])


@converts("expand_as")
def expand_as(cv, op):
    x, other = cv.input(op, 0), cv.input(op, 1)
    return cv.one("Expand", [x, cv.one("Shape", [other])])


@converts("tile")
def tile(cv, op):
    x = cv.input(op, 0)
    repeats = _int_vector(cv, op, 1, "repeat_times")
    count = repeats.type.shape[0]
    if isinstance(count, int) and x.type.rank is not None and count > x.type.rank:
        x = cv.one("Unsqueeze", [x, cv.ints(range(count - x.type.rank))])
    elif isinstance(count, int) and x.type.rank is not None and count < x.type.rank:
        repeats = cv.one("Concat", [cv.ints([1] * (x.type.rank - count)), repeats], {"axis": 0})
    return cv.one("Tile", [x, repeats])


def _reduce(core):
    def convert(cv, op):
        x = cv.input(op, 0)
        axes = _axes(cv, op, 1)
        keep = int(bool(op.attrs.get("keepdim", op.attrs.get("keep_dim", False))))
        if op.attrs.get("reduce_all") or not axes:
            axes = list(range(x.type.rank))
        y = cv.one(core, [x, cv.ints(axes)], {"keepdims": keep})
        dtype = op.attrs.get("dtype")
        if isinstance(dtype, str) and dtype and not dtype.lower().startswith("undefined") \
                and dtype != y.type.dtype.value:
            y = cv.one("Cast", [y], {"to": dtype})
        return y
    return convert


for _name, _core in {"mean": "ReduceMean", "sum": "ReduceSum", "max": "ReduceMax",
                     "min": "ReduceMin", "prod": "ReduceProd", "reduce_mean": "ReduceMean",
                     "reduce_sum": "ReduceSum", "reduce_max": "ReduceMax",
                     "reduce_min": "ReduceMin", "reduce_prod": "ReduceProd",
                     "logsumexp": "ReduceLogSumExp"}.items():
    converts(_name)(_reduce(_core))


def _arg(core):
    def convert(cv, op):
        x = cv.input(op, 0)
        if op.attrs.get("flatten"):
            x = cv.one("Reshape", [x, cv.ints([-1])])
            axis = 0
        else:
            (axis,) = _axes(cv, op, 1)
        y = cv.one(core, [x], {"axis": axis, "keepdims": int(bool(op.attrs.get("keepdims")))})
        dtype = op.attrs.get("dtype", "int64")
        if isinstance(dtype, str) and dtype != "int64":
            y = cv.one("Cast", [y], {"to": dtype})
        return y
    return convert


converts("argmax", "arg_max")(_arg("ArgMax"))
converts("argmin", "arg_min")(_arg("ArgMin"))


@converts("arange", "range")
def arange(cv, op):
    dtype = str(op.attrs.get("dtype", "int64"))
    bounds = []
    for index in range(3):
        value = cv.input(op, index)
        if value.type.rank:
            value = cv.one("Reshape", [value, cv.ints([])])
        if value.type.dtype.value != dtype:
            value = cv.one("Cast", [value], {"to": dtype})
        bounds.append(value)
    return cv.one("Range", bounds)


@converts("full_like")
def full_like(cv, op):
    x = cv.input(op, 0)
    fill = cv.input(op, 1)
    dtype = str(op.attrs.get("dtype", x.type.dtype.value))
    if dtype in ("", "undefined"):
        dtype = x.type.dtype.value
    if fill.const is None:
        raise _error(op, "its fill value is computed at run time")
    value = np.asarray(np.reshape(fill.const, -1)[:1], dtype=np.dtype(dtype))
    return cv.one("ConstantOfShape", [cv.one("Shape", [x])], {"value": value})


@converts("topk")
def topk(cv, op):
    x = cv.input(op, 0)
    k = _int_vector(cv, op, 1, "k")
    axis = int(op.attrs.get("axis", -1))
    largest = int(bool(op.attrs.get("largest", True)))
    values, indices = cv.emit("TopK", [x, k], {"axis": axis, "largest": largest,
                                              "sorted": int(bool(op.attrs.get("sorted", True)))})
    return [values, indices]


@converts("cumsum")
def cumsum(cv, op):
    x = cv.input(op, 0)
    axis = cv.input(op, 1, optional=True)
    if op.attrs.get("flatten"):
        x = cv.one("Reshape", [x, cv.ints([-1])])
        axis = cv.ints(0)
    if axis is None:
        axis = cv.ints(int(op.attrs.get("axis", -1)))
    return cv.one("CumSum", [x, axis], {"exclusive": int(bool(op.attrs.get("exclusive"))),
                                        "reverse": int(bool(op.attrs.get("reverse")))})


@converts("one_hot")
def one_hot(cv, op):
    x = cv.input(op, 0)
    depth = _int_vector(cv, op, 1, "num_classes")
    values = cv.constant(np.asarray([0.0, 1.0], np.float32))
    return cv.one("OneHot", [x, depth, values], {"axis": -1})
