"""Program -> ge-hub Graph.

The converter walks the program's ops in order (PIR and legacy programs are both
topologically ordered) and keeps a map from Paddle value keys to ge-hub values:

- `pd_op.data` ops become graph inputs, their `-1` dims symbols named
  `<input>.<axis>`; `pd_op.fetch` ops (and `builtin.shadow_output`) the graph outputs,
  in their `col` order;
- parameters become constants, read from the `.pdiparams` file;
- `pd_op.full`, `pd_op.full_int_array` and `pd_op.assign_value_` become constants, so
  that operands such as a reshape's shape or a pool's kernel size are known data;
- `builtin.combine` / `builtin.split` / `builtin.slice` only group and ungroup values;
- every other op goes to its converter (`ge_paddle.converters`), which emits core ops.

Output types always come from ge-hub's own op schemas, never from the types the file
declares. An op without a converter fails with `UnsupportedPaddleOpError`, naming the
op, its attributes and where it is in the program.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np
from ge_hub.plugin import (
    AttrKind,
    DType,
    GeHubError,
    Graph,
    OpError,
    Registry,
    Sym,
    TensorType,
    UnknownOpError,
    Value,
    get_registry,
)

from ge_paddle.params import numpy_dtype
from ge_paddle.program import PdOp, Program


class UnsupportedPaddleOpError(UnknownOpError):
    """A Paddle op that ge-paddle cannot convert (yet)."""


class PaddleConversionError(OpError):
    """A Paddle op whose operands or attributes ge-paddle cannot map to core ops."""


class Converter:
    """Builds one ge-hub graph from one Program; converters use `input`, `const`,
    `emit` and `constant`."""

    def __init__(self, program: Program, params: dict[str, np.ndarray],
                 registry: Registry | None = None, input_shapes: dict | None = None):
        from ge_paddle.converters import CONVERTERS

        self.program = program
        self.params = params
        self.registry = registry if registry is not None else get_registry()
        self.input_shapes = dict(input_shapes or {})
        self.converters = CONVERTERS
        self.graph = Graph("paddle")
        self.values: dict[Any, Any] = {}
        self.outputs: list[tuple[int, Value]] = []
        self.op: PdOp | None = None  # the op being converted, for messages
        self._count = 0
        self.yielded: list | None = None  # a control-flow block's cf.yield values

    # -- the kit converters use ---------------------------------------------------------

    def input(self, op: PdOp, index: int, *, optional: bool = False):
        """Operand `index` of `op` as a Value (a list of Values for a combined one)."""
        key = op.inputs[index] if index < len(op.inputs) else None
        if key is None:
            if optional:
                return None
            raise PaddleConversionError(f"{op.describe()}: operand {index} is absent")
        if isinstance(key, np.ndarray):
            return self.constant(key)
        try:
            return self.values[key]
        except KeyError:
            raise PaddleConversionError(f"{op.describe()}: operand {index} reads value {key!r}, "
                                        "which no earlier op produces") from None

    def has_input(self, op: PdOp, index: int) -> bool:
        return index < len(op.inputs) and op.inputs[index] is not None

    def const(self, op: PdOp, index: int, what: str) -> np.ndarray:
        """Operand `index` as known data; an error when it is computed at run time."""
        value = self.input(op, index)
        if isinstance(value, list):
            parts = [v.const for v in value]
            if any(p is None for p in parts):
                raise PaddleConversionError(f"{op.describe()}: its {what} (operand {index}) is "
                                            "computed at run time; ge-paddle needs it constant")
            return np.concatenate([np.reshape(p, -1) for p in parts])
        if value.const is None:
            raise PaddleConversionError(f"{op.describe()}: its {what} (operand {index}) is "
                                        "computed at run time; ge-paddle needs it constant")
        return value.const

    def constant(self, array, hint: str = "const") -> Value:
        return self.graph.add_constant(np.asarray(array), prefix=hint)

    def emit(self, op: str, inputs: Sequence[Value | None], attrs: dict | None = None, *,
             num_outputs: int | None = None) -> list[Value]:
        """Add a core op node typed by ge-hub's inference; returns its outputs."""
        schema = self.registry.get_op(op, "")
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        base = self.op.name.split(".")[-1] if self.op is not None else "node"
        # Paddle's own names look like "conv2d_0.tmp_1": "conv2d.Conv3" never clashes.
        self._count += 1
        name = f"{base}.{op}{self._count}"
        attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
        for key, value in attrs.items():
            spec = schema.attrs.get(key)
            if spec is not None and spec.kind is AttrKind.DTYPE:
                attrs[key] = DType(value) if not isinstance(value, DType) else value
        try:
            types = schema.infer_types(
                [None if v is None else v.type for v in inputs], attrs,
                consts=[None if v is None else v.const for v in inputs],
                num_outputs=num_outputs, node_name=name)
        except GeHubError as exc:
            where = self.op.describe() if self.op is not None else "ge-paddle"
            raise PaddleConversionError(f"{where}: converting to {op} failed: {exc}") from None
        node = self.graph.add_node(op, inputs, types, attrs, name=name)
        return list(node.outputs)

    def one(self, op: str, inputs: Sequence[Value | None], attrs: dict | None = None) -> Value:
        return self.emit(op, inputs, attrs)[0]

    def ints(self, values: Sequence[int]) -> Value:
        return self.constant(np.asarray(values, dtype=np.int64), "ints")

    # -- the walk ---------------------------------------------------------------------

    def run(self) -> Graph:
        for parameter in self.program.parameters:
            if parameter.name not in self.params:
                raise PaddleConversionError(f"{self.program.source}: parameter "
                                            f"{parameter.name!r} is not in the parameter file")
            self.values[parameter.key] = self.graph.add_constant(
                self.params[parameter.name], prefix=parameter.name)
        for op in self.program.ops:
            self.convert(op)
        if not self.outputs:
            raise PaddleConversionError(f"{self.program.source}: the program fetches nothing")
        self.graph.set_outputs([v for _, v in sorted(self.outputs, key=lambda item: item[0])])
        self.graph.verify(schemas=self.registry.get_op)
        return self.graph

    def convert(self, op: PdOp) -> None:
        self.op = op
        handler = _STRUCTURAL.get(op.name)
        if handler is not None:
            handler(self, op)
            return
        converter = self.converters.get(op.name)
        if converter is None:
            raise UnsupportedPaddleOpError(
                f"Paddle op {op.describe()} has no ge-paddle converter ({self.program.format} "
                "program); the ops ge-paddle converts are listed in ge_paddle.converters")
        results = converter(self, op)
        if not isinstance(results, (list, tuple)):
            results = [results]
        for index, key in enumerate(op.outputs):
            if key is None:
                continue
            if index < len(results) and results[index] is not None:
                self.values[key] = results[index]
            else:
                self.values.pop(key, None)  # reading it later names this op's output

    def body(self, ops: list[PdOp], name: str, args=(), leading=()) -> tuple[Graph, list]:
        """A control-flow block as a subgraph that reads this graph's values by scope:
        `leading` (name, TensorType) inputs first (a Loop body's iteration number and
        condition), then one input per block argument; returns it and its yields."""
        child = Converter.__new__(Converter)
        child.__dict__.update(self.__dict__)
        child.graph = Graph(name)
        child.values = collections.ChainMap({}, self.values)
        child.yielded = None
        for input_name, input_type in leading:
            child.graph.add_input(input_name, input_type)
        for index, (key, pd_type) in enumerate(args):
            if pd_type is None or pd_type.shape is None:
                raise PaddleConversionError(f"{self.op.describe()}: block argument {index} "
                                            "has no tensor type")
            dims = [d if d >= 0 else Sym.named(f"{name}.arg{index}.{axis}")
                    for axis, d in enumerate(pd_type.shape)]
            child.values[key] = child.graph.add_input(
                f"{name}.arg{index}", TensorType(DType(_dtype_name(pd_type.dtype, self.op)),
                                                 dims))
        for op in ops:
            child.convert(op)
        if child.yielded is None:
            raise PaddleConversionError(f"{self.op.describe()}: a block ends without cf.yield")
        outputs = []
        for value in child.yielded:
            # A body's outputs are its own nodes' values, not captures or constants.
            outputs.append(child.one("Identity", [value]))
        child.graph.set_outputs(outputs)
        self._count = child._count
        return child.graph, child.yielded

    def result_type(self, op: PdOp, index: int = 0):
        types = op.output_types
        return types[index] if index < len(types) else None


def _data(cv: Converter, op: PdOp) -> None:
    name = str(op.attrs.get("name") or f"input{len(cv.graph.inputs)}")
    declared = op.attrs.get("shape")
    if declared is None and op.output_types and op.output_types[0] is not None:
        declared = op.output_types[0].shape
    dtype = op.attrs.get("dtype") or (op.output_types[0].dtype if op.output_types else None)
    if dtype is None or declared is None:
        raise PaddleConversionError(f"{op.describe()}: input {name!r} has no dtype or shape")
    given = cv.input_shapes.get(name)
    shape = []
    for axis, dim in enumerate(declared):
        if given is not None and axis < len(given) and given[axis] is not None:
            shape.append(int(given[axis]))
        else:
            shape.append(int(dim) if int(dim) >= 0 else Sym.named(f"{name}.{axis}"))
    value = cv.graph.add_input(name, TensorType(DType(_dtype_name(dtype, op)), shape))
    cv.values[op.outputs[0]] = value


def _dtype_name(dtype: str, op: PdOp) -> str:
    try:
        return DType(dtype).value
    except ValueError:
        raise PaddleConversionError(f"{op.describe()}: data type {dtype!r} is not one "
                                    "ge-hub has") from None


def _fetch(cv: Converter, op: PdOp) -> None:
    """A graph output, named as Paddle Inference names it (`fetch_name_0` in PIR
    programs, the fetched variable in legacy ones)."""
    value = cv.input(op, 0)
    column = int(op.attrs.get("col", len(cv.outputs)))
    name = op.attrs.get("name") or op.attrs.get("output_name") or \
        (op.inputs[0] if isinstance(op.inputs[0], str) else None)
    named = None
    if name:
        try:
            named = cv.graph.add_node("Identity", [value], [value.type],
                                      name=f"fetch.{name}", output_names=[str(name)])
        except ValueError:  # the name is taken (a fetched input): keep ge-hub's own
            named = None
    if named is not None:
        value = named.outputs[0]
    elif value.producer is None or any(value is v for _, v in cv.outputs):
        value = cv.one("Identity", [value])  # an output is a node's own value
    cv.outputs.append((column, value))
    if op.outputs:
        cv.values[op.outputs[0]] = value


def _full(cv: Converter, op: PdOp) -> None:
    shape = [int(d) for d in op.attrs.get("shape", [])]
    dtype = numpy_dtype(op.attrs.get("dtype", "float32"))
    cv.values[op.outputs[0]] = cv.constant(np.full(shape, op.attrs.get("value", 0.0),
                                                   dtype=dtype), "full")


def _full_int_array(cv: Converter, op: PdOp) -> None:
    dtype = numpy_dtype(op.attrs.get("dtype", "int64"))
    cv.values[op.outputs[0]] = cv.constant(np.asarray(op.attrs.get("value", []), dtype=dtype),
                                           "int_array")


def _assign_value(cv: Converter, op: PdOp) -> None:
    dtype = numpy_dtype(op.attrs.get("dtype", "float32"))
    shape = [int(d) for d in op.attrs.get("shape", [])]
    values = np.asarray(op.attrs.get("values", []), dtype=dtype).reshape(shape)
    cv.values[op.outputs[0]] = cv.constant(values, "assign_value")


def _combine(cv: Converter, op: PdOp) -> None:
    cv.values[op.outputs[0]] = [cv.input(op, i) for i in range(len(op.inputs))]


def _split(cv: Converter, op: PdOp) -> None:
    parts = cv.input(op, 0)
    if not isinstance(parts, list) or len(parts) < len(op.outputs):
        raise PaddleConversionError(f"{op.describe()}: splits a value that is not a list of "
                                    f"{len(op.outputs)} tensors")
    for key, value in zip(op.outputs, parts):
        cv.values[key] = value


def _slice(cv: Converter, op: PdOp) -> None:
    parts = cv.input(op, 0)
    index = int(op.attrs.get("index", 0))
    if not isinstance(parts, list) or not 0 <= index < len(parts):
        raise PaddleConversionError(f"{op.describe()}: index {index} of a list of "
                                    f"{len(parts) if isinstance(parts, list) else 1}")
    cv.values[op.outputs[0]] = parts[index]


def _yield(cv: Converter, op: PdOp) -> None:
    cv.yielded = [cv.input(op, i) for i in range(len(op.inputs))]


def _scalar_bool(cv: Converter, value: Value) -> Value:
    if value.type.shape != ():
        value = cv.one("Reshape", [value, cv.ints([])])
    if value.type.dtype is not DType.BOOL:
        value = cv.one("Cast", [value], {"to": DType.BOOL})
    return value


def _if(cv: Converter, op: PdOp) -> None:
    """pd_op.if: regions 0 and 1 are the true and false blocks, each ending in a
    cf.yield of the op's results -> If."""
    if len(op.regions) != 2:
        raise PaddleConversionError(f"{op.describe()}: {len(op.regions)} blocks, expected 2")
    outer_op = op
    cond = _scalar_bool(cv, cv.input(op, 0))
    then_graph, _ = cv.body(op.regions[0], f"{op.name.split('.')[-1]}{cv._count}_then")
    cv.op = outer_op
    else_graph, _ = cv.body(op.regions[1], f"{op.name.split('.')[-1]}{cv._count}_else")
    cv.op = outer_op
    outputs = cv.emit("If", [cond], {"then_branch": then_graph, "else_branch": else_graph},
                      num_outputs=len(then_graph.outputs))
    for key, value in zip(op.outputs, outputs):
        cv.values[key] = value


def _while(cv: Converter, op: PdOp) -> None:
    """pd_op.while(cond, carried...): one block whose arguments are the carried values and
    whose cf.yield gives (cond, carried...) -> Loop without a trip count."""
    if len(op.regions) != 1:
        raise PaddleConversionError(f"{op.describe()}: {len(op.regions)} blocks, expected 1")
    outer_op = op
    cond = _scalar_bool(cv, cv.input(op, 0))
    carried = [cv.input(op, i) for i in range(1, len(op.inputs))]
    name = f"while{cv._count}"
    leading = [(f"{name}.iteration", TensorType(DType.INT64, ())),
                (f"{name}.cond", TensorType(DType.BOOL, ()))]
    body, yielded = cv.body(op.regions[0], name, op.region_args[0], leading)
    cv.op = outer_op
    if len(yielded) != len(carried) + 1:
        raise PaddleConversionError(f"{op.describe()}: its block yields {len(yielded)} values "
                                    f"for a condition and {len(carried)} carried values")
    # The body's condition output must be a bool scalar, as the Loop's own.
    cond_out = body.outputs[0]
    if cond_out.type.shape != () or cond_out.type.dtype is not DType.BOOL:
        scalar = body.add_node("Reshape", [cond_out, body.add_constant(
            np.zeros(0, np.int64), prefix="scalar_shape")], [TensorType(DType.BOOL, ())],
            name=f"{name}.cond_scalar")
        body.set_outputs([scalar.outputs[0], *body.outputs[1:]])
    outputs = cv.emit("Loop", [None, cond, *carried], {"body": body},
                      num_outputs=len(carried))
    for key, value in zip(op.outputs, outputs):
        cv.values[key] = value


_STRUCTURAL = {
    "pd_op.if": _if,
    "pd_op.while": _while,
    "cf.yield": _yield,
    "pd_op.data": _data,
    "pd_op.feed": _data,
    "pd_op.fetch": _fetch,
    "builtin.shadow_output": _fetch,
    "pd_op.full": _full,
    "pd_op.full_int_array": _full_int_array,
    "pd_op.assign_value_": _assign_value,
    "pd_op.assign_value": _assign_value,
    "builtin.combine": _combine,
    "builtin.split": _split,
    "builtin.slice": _slice,
}


def convert_program(program: Program, params: dict[str, np.ndarray], *,
                    registry: Registry | None = None, input_shapes: dict | None = None) -> Graph:
    return Converter(program, params, registry, input_shapes).run()
