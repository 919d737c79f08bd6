"""Reading the legacy `.pdmodel` program (framework.proto's ProgramDesc) without Paddle.

The file is a protobuf ProgramDesc; `ge_paddle.wire` decodes it by field number (the
numbers below are framework.proto's). Only block 0 is read: inference programs keep
their ops there, and control-flow sub-blocks are refused by name.

Each legacy op is rewritten into the PIR spelling the converters read (`LEGACY_OPS`):
its named input slots put in PIR's operand order, renamed attributes renamed, and
attributes that PIR passes as operands (a reshape's `shape`, a slice's `starts`) turned
into literal operands. Persistable variables other than feed/fetch are the parameters
stored in `.pdiparams`.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

import numpy as np
from ge_hub.plugin import SerializationError

from ge_paddle import wire
from ge_paddle.params import DTYPE_BY_ENUM
from ge_paddle.program import Parameter, PdOp, PdType, Program

# VarType.Type numbers of the variables that are not tensors of the program.
_DENSE_TENSOR, _FEED_MINIBATCH, _FETCH_LIST = 7, 9, 10

# OpDesc.Attr: the field that holds the value, by AttrType.
_ATTR_FIELDS = {0: 3, 1: 4, 2: 5, 3: 6, 4: 7, 5: 8, 6: 10, 7: 11, 8: 12, 9: 13, 10: 14,
                11: 15, 12: 16, 13: 17, 14: 18, 15: 19}


def looks_like_pdmodel(head: bytes) -> bool:
    """A ProgramDesc starts with field 1 (blocks), length-delimited: byte 0x0A."""
    return head[:1] == b"\x0a"


def read_program(path: str) -> Program:
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        raise SerializationError(f"cannot read Paddle program {path!r}: {exc}") from None
    program = wire.decode(data, path)
    blocks = program.get(1, [])
    if not blocks:
        raise SerializationError(f"{path!r} is not a Paddle program (no blocks)")
    block = wire.decode(blocks[0], f"{path}: block 0")
    variables = {}
    for raw in block.get(3, []):
        var = _variable(raw, path)
        variables[var.name] = var
    parameters = [Parameter(v.name, v.name, v.type) for v in variables.values()
                  if v.persistable and v.kind == _DENSE_TENSOR]
    ops = []
    for index, raw in enumerate(block.get(4, [])):
        where = f"{path}: block 0, op {index}"
        ops += _normalize(_op(raw, where), variables, where)
    return Program(ops=ops, parameters=parameters, source=path, format="legacy")


@dataclasses.dataclass
class _Variable:
    name: str
    kind: int
    type: PdType | None
    persistable: bool


def _variable(raw: bytes, path: str) -> _Variable:
    fields = wire.decode(raw, f"{path}: variable")
    name = wire.text(wire.first(fields, 1, b""), f"{path}: variable name")
    var_type = wire.decode(wire.first(fields, 2, b""), f"{path}: variable {name!r}")
    kind = wire.first(var_type, 1, -1)
    tensor_type = None
    dense = wire.first(var_type, 3)
    if dense is not None:
        tensor = wire.decode(wire.first(wire.decode(dense, name), 1, b""), name)
        dtype = DTYPE_BY_ENUM.get(wire.first(tensor, 1, 5), "unknown")
        tensor_type = PdType(dtype, tuple(wire.signed(d) for d in wire.ints(tensor, 2)))
    return _Variable(name, kind, tensor_type, bool(wire.first(fields, 3, 0)))


@dataclasses.dataclass
class _LegacyOp:
    type: str
    inputs: dict[str, list[str]]
    outputs: dict[str, list[str]]
    attrs: dict
    where: str


def _op(raw: bytes, where: str) -> _LegacyOp:
    fields = wire.decode(raw, where)
    op_type = wire.text(wire.first(fields, 3, b""), where)
    where = f"{where} ({op_type})"
    return _LegacyOp(op_type, _slots(fields.get(1, []), where), _slots(fields.get(2, []), where),
                     dict(_attr(raw_attr, where) for raw_attr in fields.get(4, [])), where)


def _slots(raws: list[bytes], where: str) -> dict[str, list[str]]:
    slots = {}
    for raw in raws:
        fields = wire.decode(raw, where)
        name = wire.text(wire.first(fields, 1, b""), where)
        slots[name] = [wire.text(a, where) for a in fields.get(2, [])]
    return slots


def _attr(raw: bytes, where: str):
    fields = wire.decode(raw, where)
    name = wire.text(wire.first(fields, 1, b""), where)
    kind = wire.first(fields, 2, 0)
    number = _ATTR_FIELDS.get(kind)
    if kind == 0:
        return name, _int32(wire.first(fields, 3, 0))
    if kind == 9:
        return name, wire.signed(wire.first(fields, 13, 0))
    if kind == 1:
        return name, struct.unpack("<f", wire.first(fields, 4, b"\0\0\0\0"))[0]
    if kind == 15:
        return name, struct.unpack("<d", wire.first(fields, 19, b"\0" * 8))[0]
    if kind in (2, 13):
        return name, wire.text(wire.first(fields, number, b""), where)
    if kind == 3:
        return name, [_int32(v) for v in wire.ints(fields, 6)]
    if kind == 11:
        return name, [wire.signed(v) for v in wire.ints(fields, 15)]
    if kind == 4:
        return name, wire.floats(fields, 7)
    if kind == 12:
        return name, wire.floats(fields, 16, double=True)
    if kind in (5, 14):
        return name, [wire.text(s, where) for s in fields.get(number, [])]
    if kind == 6:
        return name, bool(wire.first(fields, 10, 0))
    if kind == 7:
        return name, [bool(v) for v in wire.ints(fields, 11)]
    if kind == 8:
        return name, ("block", wire.first(fields, 12, 0))
    if kind == 10:
        return name, ("blocks", wire.ints(fields, 14))
    if kind in (16, 17):
        return name, _scalars(fields.get(20 if kind == 16 else 21, []), kind == 16, where)
    raise SerializationError(f"{where}: attribute {name!r} of unknown type {kind}")


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _scalars(raws, single, where):
    values = []
    for raw in raws:
        fields = wire.decode(raw, where)
        kind = wire.first(fields, 1, 0)  # Scalar.Type: BOOLEAN=1, LONG=2, FLOAT64=3
        if kind == 1:
            values.append(bool(wire.first(fields, 2, 0)))
        elif kind == 2:
            values.append(wire.signed(wire.first(fields, 3, 0)))
        else:
            values.append(struct.unpack("<d", wire.first(fields, 4, b"\0" * 8))[0])
    return values[0] if single and values else values


# -- legacy op -> PIR-spelled PdOp ----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Rule:
    """How one legacy op type reads as its PIR op: operands from slots (a slot name, or a
    function of the op giving an operand), results from slots, renamed attributes."""

    name: str
    inputs: tuple = ("X",)
    outputs: tuple = ("Out",)
    renames: tuple = ()


def _slot_or_attr(slot_tensor: str, slot_list: str, attr: str, dtype=np.int64):
    """An operand PIR takes as a tensor: the legacy slot when it is used, else the
    attribute as a literal."""
    def operand(op: _LegacyOp):
        if op.inputs.get(slot_tensor):
            return op.inputs[slot_tensor][0]
        if slot_list and op.inputs.get(slot_list):
            return ("combine", op.inputs[slot_list])
        value = op.attrs.get(attr)
        if value is None:
            return None
        return np.asarray(value, dtype=dtype)
    return operand


def _attr_operand(attr: str, dtype):
    def operand(op: _LegacyOp):
        value = op.attrs.get(attr)
        return None if value is None else np.asarray(value, dtype=dtype)
    return operand


_BINARY = {"elementwise_add": "add", "elementwise_sub": "subtract",
           "elementwise_mul": "multiply", "elementwise_div": "divide",
           "elementwise_max": "maximum", "elementwise_min": "minimum",
           "elementwise_pow": "elementwise_pow", "elementwise_mod": "remainder",
           "elementwise_floordiv": "floor_divide", "equal": "equal",
           "not_equal": "not_equal", "greater_than": "greater_than", "less_than": "less_than",
           "greater_equal": "greater_equal", "less_equal": "less_equal",
           "logical_and": "logical_and", "logical_or": "logical_or",
           "logical_xor": "logical_xor"}

LEGACY_OPS: dict[str, Rule] = {
    **{legacy: Rule(pir, ("X", "Y")) for legacy, pir in _BINARY.items()},
    "conv2d": Rule("conv2d", ("Input", "Filter"), ("Output",)),
    "depthwise_conv2d": Rule("depthwise_conv2d", ("Input", "Filter"), ("Output",)),
    "conv3d": Rule("conv3d", ("Input", "Filter"), ("Output",)),
    "conv2d_transpose": Rule("conv2d_transpose", ("Input", "Filter"), ("Output",)),
    "depthwise_conv2d_transpose": Rule("depthwise_conv2d_transpose", ("Input", "Filter"),
                                       ("Output",)),
    "batch_norm": Rule("batch_norm_", ("X", "Mean", "Variance", "Scale", "Bias"), ("Y",)),
    "layer_norm": Rule("layer_norm", ("X", "Scale", "Bias"), ("Y",)),
    "instance_norm": Rule("instance_norm", ("X", "Scale", "Bias"), ("Y",)),
    "group_norm": Rule("group_norm", ("X", "Scale", "Bias"), ("Y",)),
    "pool2d": Rule("pool2d"),
    "matmul_v2": Rule("matmul", ("X", "Y"), renames=(("trans_x", "transpose_x"),
                                                    ("trans_y", "transpose_y"))),
    "matmul": Rule("legacy_matmul", ("X", "Y")),
    "mul": Rule("legacy_mul", ("X", "Y")),
    "leaky_relu": Rule("leaky_relu", renames=(("alpha", "negative_slope"),)),
    "hard_sigmoid": Rule("hardsigmoid"),
    "hard_swish": Rule("hard_swish"),
    "reshape2": Rule("reshape", ("X", _slot_or_attr("Shape", "ShapeTensor", "shape"))),
    "reshape": Rule("reshape", ("X", _slot_or_attr("Shape", "ShapeTensor", "shape"))),
    "flatten_contiguous_range": Rule("flatten"),
    "transpose2": Rule("transpose", renames=(("axis", "perm"),)),
    "transpose": Rule("transpose", renames=(("axis", "perm"),)),
    "concat": Rule("concat", (("list", "X"), _slot_or_attr("AxisTensor", "", "axis"))),
    "stack": Rule("stack", (("list", "X"),), ("Y",)),
    "squeeze2": Rule("squeeze", ("X", _attr_operand("axes", np.int64))),
    "unsqueeze2": Rule("unsqueeze", ("X", _slot_or_attr("AxesTensor", "AxesTensorList",
                                                         "axes"))),
    "dropout": Rule("dropout"),
    "scale": Rule("scale", ("X", _slot_or_attr("ScaleTensor", "", "scale", np.float32))),
    "softmax": Rule("softmax"),
    "log_softmax": Rule("log_softmax"),
    "slice": Rule("slice", ("Input", _slot_or_attr("StartsTensor", "StartsTensorList",
                                                    "starts"),
                            _slot_or_attr("EndsTensor", "EndsTensorList", "ends"))),
    "strided_slice": Rule("strided_slice", (
        "Input", _slot_or_attr("StartsTensor", "StartsTensorList", "starts"),
        _slot_or_attr("EndsTensor", "EndsTensorList", "ends"),
        _slot_or_attr("StridesTensor", "StridesTensorList", "strides"))),
    "gather": Rule("gather", ("X", "Index", _slot_or_attr("Axis", "", "axis"))),
    "gather_nd": Rule("gather_nd", ("X", "Index")),
    "shape": Rule("shape", ("Input",)),
    "expand_v2": Rule("expand", ("X", _slot_or_attr("Shape", "expand_shapes_tensor",
                                                     "shape"))),
    "tile": Rule("tile", ("X", _slot_or_attr("RepeatTimes", "repeat_times_tensor",
                                              "repeat_times"))),
    "clip": Rule("clip", ("X", "Min", "Max")),
    "where": Rule("where", ("Condition", "X", "Y")),
    "pad3d": Rule("pad3d", ("X", "Paddings")),
    "bilinear_interp_v2": Rule("bilinear_interp", ("X", "OutSize", "SizeTensor", "Scale")),
    "nearest_interp_v2": Rule("nearest_interp", ("X", "OutSize", "SizeTensor", "Scale")),
    "arg_max": Rule("argmax", ("X", _attr_operand("axis", np.int64))),
    "arg_min": Rule("argmin", ("X", _attr_operand("axis", np.int64))),
    "split": Rule("legacy_split"),
    "prelu": Rule("prelu", ("X", "Alpha")),
    "top_k_v2": Rule("topk", ("X", _slot_or_attr("K", "", "k")), ("Out", "Indices")),
    "cumsum": Rule("cumsum"),
    "range": Rule("arange", ("Start", "End", "Step")),
}
for _reduce in ("reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
    LEGACY_OPS[_reduce] = Rule(_reduce, ("X", _attr_operand("dim", np.int64)))
for _unary in ("relu", "relu6", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs",
               "erf", "floor", "ceil", "sin", "cos", "swish", "silu", "gelu", "elu",
               "softplus", "mish", "square", "reciprocal", "logical_not", "sign", "assign",
               "pow", "selu", "celu", "softsign", "round"):
    LEGACY_OPS.setdefault(_unary, Rule(_unary))

# Attributes whose legacy value is a VarType.Type number where PIR has a dtype name.
_DTYPE_ATTRS = {"dtype", "out_dtype", "in_dtype"}


def _normalize(op: _LegacyOp, variables: dict, where: str) -> list[PdOp]:
    attrs = dict(op.attrs)
    for key in _DTYPE_ATTRS & attrs.keys():
        if isinstance(attrs[key], int):
            attrs[key] = DTYPE_BY_ENUM.get(attrs[key], attrs[key])
    special = _SPECIAL.get(op.type)
    if special is not None:
        return special(op, attrs, variables, where)
    blocks = [k for k, v in attrs.items() if isinstance(v, tuple) and v[:1] in (("block",),
                                                                                  ("blocks",))]
    rule = LEGACY_OPS.get(op.type)
    if rule is None or blocks:
        # Left for the converter to refuse, with the op's attributes and location.
        return [PdOp(f"legacy.{op.type}", attrs, [], [], [], where)]
    for old, new in rule.renames:
        if old in attrs:
            attrs[new] = attrs.pop(old)
    ops: list[PdOp] = []
    inputs = []
    for slot in rule.inputs:
        inputs.append(_operand(op, slot, ops, where))
    outputs = [(op.outputs.get(slot) or [None])[0] for slot in rule.outputs]
    types = [variables[o].type if o in variables else None for o in outputs]
    ops.append(PdOp(f"pd_op.{rule.name}", attrs, inputs, outputs, types, where))
    return ops


def _operand(op: _LegacyOp, slot, ops: list[PdOp], where: str):
    if callable(slot):
        slot = slot(op)
        if isinstance(slot, tuple) and slot[0] == "combine":
            return _combine(slot[1], ops, where)
        return slot
    if isinstance(slot, tuple) and slot[0] == "list":
        return _combine(op.inputs.get(slot[1], []), ops, where)
    names = op.inputs.get(slot) or []
    return names[0] if names else None


def _combine(names: list[str], ops: list[PdOp], where: str):
    key = f"{where}#combine{len(ops)}"
    ops.append(PdOp("builtin.combine", {}, list(names), [key], [None], where))
    return key


def _feed(op, attrs, variables, where):
    (name,) = op.outputs["Out"]
    var = variables.get(name)
    if var is None or var.type is None:
        raise SerializationError(f"{where}: feeds {name!r}, which has no tensor type")
    return [PdOp("pd_op.data", {"name": name, "shape": list(var.type.shape),
                                "dtype": var.type.dtype}, [], [name], [var.type], where)]


def _fetch(op, attrs, variables, where):
    (name,) = op.inputs["X"]
    return [PdOp("pd_op.fetch", {"col": attrs.get("col", 0)}, [name], [], [], where)]


def _fill_constant(op, attrs, variables, where):
    (name,) = op.outputs["Out"]
    value = attrs.get("value", 0.0)
    if attrs.get("str_value"):
        value = float(attrs["str_value"])
    if op.inputs.get("ShapeTensor") or op.inputs.get("ShapeTensorList") or \
            op.inputs.get("ValueTensor"):
        return [PdOp("legacy.fill_constant", attrs, [], [name], [], where)]
    return [PdOp("pd_op.full", {"shape": attrs.get("shape", []), "value": value,
                                "dtype": attrs.get("dtype", "float32")}, [], [name], [], where)]


def _assign_value(op, attrs, variables, where):
    (name,) = op.outputs["Out"]
    values = next((attrs[k] for k in ("fp32_values", "int32_values", "int64_values",
                                      "bool_values", "fp64_values", "values")
                   if attrs.get(k)), [])
    return [PdOp("pd_op.assign_value_", {"shape": attrs.get("shape", []), "values": values,
                                         "dtype": attrs.get("dtype", "float32")},
                 [], [name], [], where)]


def _split(op, attrs, variables, where):
    (x,) = op.inputs["X"]
    names = op.outputs["Out"]
    key = f"{where}#split"
    if op.inputs.get("AxisTensor") or op.inputs.get("SectionsTensorList"):
        return [PdOp("legacy.split", attrs, [], [], [], where)]
    axis = np.asarray(attrs.get("axis", 0), np.int64)
    if attrs.get("num", 0) > 0:
        first = PdOp("pd_op.split_with_num", {"num": attrs["num"]}, [x, axis], [key], [None],
                     where)
    else:
        first = PdOp("pd_op.split", {}, [x, np.asarray(attrs["sections"], np.int64), axis],
                     [key], [None], where)
    return [first, PdOp("builtin.split", {}, [key], list(names), [None] * len(names), where)]


def _cast(op, attrs, variables, where):
    return [PdOp("pd_op.cast", {"dtype": attrs.get("out_dtype")}, [op.inputs["X"][0]],
                 [op.outputs["Out"][0]], [None], where)]


_SPECIAL: dict[str, Callable] = {
    "feed": _feed, "fetch": _fetch, "fill_constant": _fill_constant,
    "assign_value": _assign_value, "split": _split, "cast": _cast,
}
