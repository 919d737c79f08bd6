"""mind_ir.ModelProto -> ge-hub Graph.

A MINDIR model is a main function graph plus function graphs (`functions`) that it
calls. Nodes are in topological order; an op node's `op_type` is `REF::<primitive>`,
naming an entry of the model's `primitives` (the op's type and, for legacy ops, its
attributes; primitive-function ops take their attributes as constant inputs instead), or
`REF::<function graph>` / `REF::<value>`, a call of a function graph or of a closure.
`Constant` nodes hold scalars, tuples, tensors, `None` and monads; their names are
global to the model, so a function graph may read a constant its caller defined.

The importer evaluates the graphs symbolically, in node order, over "MindSpore values":
ge-hub `Value`s for tensors, Python values for constants (an op's converter decides
whether a constant becomes an attribute or a constant tensor), tuples, closures:

- side-effect plumbing disappears: `Load(x, u)` and `Depend(x, ...)` are `x`,
  `MakeTuple`/`TupleGetItem` build and index Python tuples, `UpdateState` yields a
  monad that remembers which tensors in-place ops had replaced when it was made;
- an in-place op (`InplaceAddExt`, `InplaceMuls`, `Assign`, ...) becomes its pure op,
  whose result replaces the updated tensor for every later reader: readers that take a
  monad see the tensors as of that monad, so the `UpdateState` chain fixes the order;
- calls of function graphs are inlined; `Switch(cond, Partial(f, ...), Partial(g, ...))`
  called is an `If` when `cond` is not a constant (branches as subgraphs that read the
  enclosing graph's values), and a while loop (a header graph that calls itself through
  its body) becomes a `Loop`;
- primitives are converted by `ge_mindspore.converters`; one without a converter raises
  `UnsupportedPrimitiveError` naming it, its attributes and the node.

Graph inputs with `-1` dims get symbols named `<input>.<axis>`; parameters (inline or
external data) become constants.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from ge_hub.plugin import (
    AttrKind,
    DType,
    Graph,
    OpError,
    Registry,
    SerializationError,
    Sym,
    TensorType,
    Value,
    get_registry,
)

from ge_mindspore.tensors import Monad, attribute_value, numpy_dtype, tensor_to_array

# How deep calls of function graphs may nest before the importer calls it recursion
# (each level costs several Python frames, under the interpreter's limit of 1000).
MAX_CALL_DEPTH = 64


class UnsupportedPrimitiveError(OpError):
    """A MINDIR primitive that ge-mindspore cannot convert."""


@dataclasses.dataclass(frozen=True)
class FuncRef:
    """A function graph named as a value (the first input of Partial, or called)."""

    name: str


@dataclasses.dataclass(frozen=True)
class Closure:
    """Partial(f, *args): f with its first arguments bound."""

    graph: str
    args: tuple


@dataclasses.dataclass(frozen=True)
class Switched:
    """Switch(cond, a, b): a closure chosen at run time."""

    cond: Any
    then: Any
    orelse: Any


@dataclasses.dataclass
class MonadState(Monad):
    """An UpdateState result: the tensors in-place ops had replaced by then."""

    replaced: dict


@dataclasses.dataclass(frozen=True)
class TailCall:
    """A while body's call back into its loop header: the next loop-carried values."""

    args: tuple


@dataclasses.dataclass
class Primitive:
    name: str
    op_type: str
    attrs: dict
    function: bool  # a primitive-function op: attributes come as constant inputs


def short(name: str) -> str:
    """A MINDIR name without its graph prefix ("graph:x" -> "x")."""
    return name.rsplit(":", 1)[-1] if ":" in name and not name.endswith(":") else name


def value_name(name: str) -> str:
    """A readable ge-hub name for a MINDIR value ("g:CNode_18:1" -> "CNode_18")."""
    parts = name.split(":")
    if len(parts) >= 3 and parts[-1].isdigit():
        return parts[-2]
    return parts[-1] or name


def import_model(model, *, base_dir: str = "", registry: Registry | None = None) -> Graph:
    """Convert a MINDIR ModelProto to a verified ge-hub Graph."""
    context = ModelContext(model, base_dir, registry)
    graph = context.convert_main()
    graph.verify(schemas=context.registry.get_op)
    return graph


class ModelContext:
    """What all graphs of one model share: primitives, function graphs, constants."""

    def __init__(self, model, base_dir: str, registry: Registry | None):
        self.model = model
        self.base_dir = base_dir
        self.registry = registry if registry is not None else get_registry()
        self.primitives: dict[str, Primitive] = {}
        for proto in model.primitives:
            where = f"primitive {proto.name!r}"
            attrs = {a.name: attribute_value(a, where, base_dir) for a in proto.attribute
                     if a.name not in ("input_names", "output_names")}
            self.primitives[proto.name] = Primitive(
                proto.name, proto.op_type, attrs, proto.prim_type == 2)
        self.functions = {g.name: g for g in model.functions}
        self.functions[model.graph.name] = model.graph
        # Constant nodes, from every graph: their names are global to the model.
        self.constant_nodes: dict[str, Any] = {}
        for graph in (model.graph, *model.functions):
            for node in graph.node:
                if node.op_type == "Constant":
                    for output in node.output:
                        self.constant_nodes[output] = node
        self.constants: dict[str, Any] = {}
        self.loop_headers: list[str] = []
        self.names: dict[int, set[str]] = {}  # id(graph) -> the names given out in it
        # MINDIR name -> the tensor an in-place op replaced it with, so far.
        self.replaced: dict[str, Any] = {}
        self.depth = 0

    def constant(self, name: str) -> Any:
        if name not in self.constants:
            node = self.constant_nodes[name]
            value = None
            for attr in node.attribute:
                if attr.name == "value":
                    value = attribute_value(attr, f"constant {name!r}", self.base_dir)
            self.constants[name] = value
        return self.constants[name]

    def convert_main(self) -> Graph:
        proto = self.model.graph
        builder = Builder(self, Graph(_graph_name(proto.name)), collections.ChainMap())
        args = []
        for info in proto.input:
            args.append(builder.graph_input(info))
        for tensor in proto.parameter:
            where = f"parameter {tensor.name!r}"
            data = tensor_to_array(tensor, where, self.base_dir)
            name = tensor.ref_key or short(tensor.name)
            builder.env[tensor.name] = builder.graph.add_constant(data, name=builder.fresh(name))
        outputs = builder.run_graph(proto, args, bind_inputs=False)
        builder.graph.set_outputs(builder.outputs_of(outputs, f"graph {proto.name!r}"))
        return builder.graph


def _graph_name(name: str) -> str:
    return name.encode("ascii", "replace").decode() or "main"


class Builder:
    """Builds one ge-hub graph (the main graph or a body); converters use `emit`,
    `tensor` and `const`."""

    def __init__(self, context: ModelContext, graph: Graph, env: collections.ChainMap):
        self.context = context
        self.graph = graph
        self.env = env.new_child()
        self.node = ""  # the MINDIR node being converted, for error messages
        self.current_op = ""  # its primitive's op type

    # -- the kit for converters --------------------------------------------------------

    def emit(self, op: str, inputs: Sequence[Value | None], attrs: dict | None = None, *,
             num_outputs: int | None = None, name: str | None = None) -> list[Value]:
        """Add a node of a registered op, typed by the op's own inference."""
        schema = self.context.registry.get_op(op)
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
        for key, value in attrs.items():
            spec = schema.attrs.get(key)
            if spec is not None and spec.kind is AttrKind.DTYPE and not isinstance(value, DType):
                attrs[key] = DType.from_numpy(np.dtype(value))
        node_name = self.fresh(name or value_name(self.node) or op.lower())
        types = schema.infer_types([None if v is None else v.type for v in inputs], attrs,
                                   consts=[None if v is None else v.const for v in inputs],
                                   num_outputs=num_outputs, node_name=node_name)
        outputs = [node_name if len(types) == 1 else f"{node_name}_out{k}"
                   for k in range(len(types))]
        outputs = [outputs[0] if len(types) == 1 else self.fresh(n) for n in outputs]
        node = self.graph.add_node(op, inputs, types, attrs, name=self.fresh(node_name),
                                   output_names=outputs)
        return node.outputs

    def fresh(self, prefix: str) -> str:
        """A name not yet given out in this builder's graph."""
        used = self.context.names.setdefault(id(self.graph), set())
        name, counter = prefix, 0
        while name in used:
            counter += 1
            name = f"{prefix}_{counter}"
        used.add(name)
        return name

    def one(self, op: str, inputs: Sequence[Value | None], attrs: dict | None = None) -> Value:
        return self.emit(op, inputs, attrs)[0]

    def const(self, array, hint: str = "const") -> Value:
        return self.graph.add_constant(np.asarray(array), name=self.fresh(hint))

    def tensor(self, value: Any, like: Value | None = None, dtype=None) -> Value:
        """A tensor Value for a MindSpore value: a Value as is, a Python scalar as a
        0-d constant of `dtype` (default: `like`'s dtype, else its own), an array or
        tuple as a constant."""
        if isinstance(value, Value):
            return value
        if value is None or isinstance(value, (Monad, Closure, FuncRef, Switched)):
            raise OpError(f"{self.where()}: expected a tensor, got {value!r}")
        array = np.asarray(value)
        if dtype is not None:
            array = array.astype(dtype)
        elif like is not None and (_is_python_scalar(value) or array.ndim == 0):
            array = array.astype(like.type.dtype.numpy)
        elif _is_python_scalar(value) and array.dtype == np.float64:
            array = array.astype(np.float32)
        return self.const(array)

    def where(self) -> str:
        return f"node {self.node!r}"

    # -- graphs ------------------------------------------------------------------------

    def graph_input(self, info) -> Value:
        name = short(info.name)
        if len(info.tensor) != 1:
            raise SerializationError(f"graph input {info.name!r} is not one tensor")
        tensor = info.tensor[0]
        dtype = DType.from_numpy(numpy_dtype(tensor.data_type, f"graph input {info.name!r}"))
        # Sym.named: a symbol whatever characters the name holds (never parsed).
        make = getattr(Sym, "named", Sym)
        dims = [make(f"{name}.{axis}") if d < 0 else int(d) for axis, d in enumerate(tensor.dims)]
        return self.graph.add_input(self.fresh(name), TensorType(dtype, dims))

    def run_graph(self, proto, args: Sequence[Any], *, bind_inputs: bool = True,
                  stop_at_output_call: bool = False) -> Any:
        """Convert a function graph's nodes with its inputs bound to `args`; return its
        output (a MindSpore value). `stop_at_output_call`: do not convert the node that
        computes the output when it is a call, and return the called value instead (a
        while header's Switch)."""
        if len(args) != len(proto.input):
            raise OpError(f"function graph {proto.name!r} takes {len(proto.input)} "
                          f"arguments, the call gives {len(args)}")
        for info, arg in zip(proto.input, args):
            self.env[info.name] = arg
        if len(proto.output) != 1:
            raise SerializationError(f"function graph {proto.name!r} has "
                                     f"{len(proto.output)} outputs, expected 1")
        output = proto.output[0].name
        for node in proto.node:
            if node.op_type == "Constant":
                continue
            if stop_at_output_call and output in node.output:
                if not node.op_type.startswith("REF::") or node.input:
                    break
                return self.lookup(node.op_type[5:], node.name)
            self.convert_node(node)
        if stop_at_output_call:
            raise OpError(f"function graph {proto.name!r} (a while loop's header) does not "
                          "end in a call of a Switch")
        return self.lookup(output, f"graph {proto.name!r} output")

    def outputs_of(self, value: Any, where: str) -> list[Value]:
        """A graph's outputs: its result, nested tuples flattened in order, constants as
        constant tensors."""
        if isinstance(value, tuple):
            return [v for item in value for v in self.outputs_of(item, where)]
        if value is None or isinstance(value, (Monad, Closure, FuncRef, Switched, TailCall)):
            raise OpError(f"{where} gives {value!r}, which is not a tensor")
        return [self.tensor(value)]

    # -- names -------------------------------------------------------------------------

    def lookup(self, name: str, reader: str) -> Any:
        if name in self.env:
            return self.env[name]
        if name in self.context.constant_nodes:
            return self.context.constant(name)
        if name in self.context.functions:
            return FuncRef(name)
        raise OpError(f"{reader} reads {name!r}, which no input, parameter, constant or "
                      "earlier node defines")

    # -- nodes -------------------------------------------------------------------------

    def convert_node(self, node) -> None:
        self.node = node.name or (node.output[0] if node.output else node.op_type)
        if not node.op_type.startswith("REF::"):
            raise UnsupportedPrimitiveError(
                f"node {self.node!r}: op type {node.op_type!r} is not a MINDIR reference "
                "(REF::...); ge-mindspore reads MINDIR from mindspore.export")
        target = node.op_type[5:]
        inputs = [self.lookup(name, f"node {self.node!r}") for name in node.input]
        primitive = self.context.primitives.get(target)
        if primitive is not None:
            result = self.apply_primitive(primitive, node, inputs)
        else:
            callee = (FuncRef(target) if target in self.context.functions
                      else self.lookup(target, f"node {self.node!r}"))
            result = self.call(callee, inputs)
        if len(node.output) == 1:
            self.env[node.output[0]] = result
        else:
            for index, name in enumerate(node.output):
                self.env[name] = result[index]

    def apply_primitive(self, primitive: Primitive, node, inputs: list[Any]) -> Any:
        from ge_mindspore import converters

        op = self.current_op = primitive.op_type
        monad = next((v for v in inputs if isinstance(v, MonadState)), None)
        if monad is not None:
            # A reader that takes a monad sees each tensor as of that monad: the result
            # of the last in-place op on it that the UpdateState chain put before.
            inputs = [monad.replaced.get(name, value) for name, value in zip(node.input, inputs)]
        plumbing = PLUMBING.get(op)
        if plumbing is not None:
            return plumbing(self, inputs)
        in_place = converters.in_place_target(op)
        data = [v for v in inputs if not isinstance(v, Monad)]
        converter = converters.lookup(op)
        if converter is None:
            raise UnsupportedPrimitiveError(
                f"node {self.node!r}: MindSpore primitive {op!r} is not supported by "
                f"ge-mindspore (attributes {_describe_attrs(primitive.attrs)}; inputs "
                f"{_describe_inputs(data)}); `ge-hub plugins` lists what is installed")
        try:
            result = converter(self, data, primitive.attrs)
        except UnsupportedPrimitiveError:
            raise
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise UnsupportedPrimitiveError(
                f"node {self.node!r}: MindSpore primitive {op!r} with attributes "
                f"{_describe_attrs(primitive.attrs)} and inputs {_describe_inputs(data)} "
                f"cannot be converted: {type(exc).__name__}: {exc}") from None
        if in_place is not None and len(node.input) > in_place:
            self.context.replaced[node.input[in_place]] = result
        return result

    # -- calls and control flow --------------------------------------------------------

    def call(self, callee: Any, args: list[Any]) -> Any:
        args = [a for a in args if not isinstance(a, Monad)]
        if isinstance(callee, FuncRef):
            return self.call_graph(callee.name, args)
        if isinstance(callee, Closure):
            return self.call_graph(callee.graph, [*callee.args, *args])
        if isinstance(callee, Switched):
            cond = callee.cond
            if not isinstance(cond, Value):
                return self.call(callee.then if bool(np.asarray(cond)) else callee.orelse, args)
            if cond.const is not None and cond.const.size == 1:
                taken = bool(cond.const.reshape(-1)[0])
                return self.call(callee.then if taken else callee.orelse, args)
            return self.emit_if(cond, callee.then, callee.orelse, args)
        raise OpError(f"node {self.node!r} calls {callee!r}, which is not a function")

    def call_graph(self, name: str, args: list[Any]) -> Any:
        context = self.context
        if name in context.loop_headers:
            return TailCall(tuple(args))
        proto = context.functions[name]
        if _is_while_header(proto):
            return self.emit_loop(proto, args)
        if context.depth >= MAX_CALL_DEPTH:
            raise OpError(f"node {self.node!r}: function graph {name!r} calls nest deeper "
                          f"than {MAX_CALL_DEPTH} (recursion other than a while loop is not "
                          "supported)")
        context.depth += 1
        try:
            inner = Builder(context, self.graph, self.env)
            return inner.run_graph(proto, args)
        finally:
            context.depth -= 1

    def body(self, name: str) -> Builder:
        """A builder for a subgraph (a branch, a loop body) that reads this one's values."""
        return Builder(self.context, Graph(self.fresh(name)), self.env)

    def emit_if(self, cond: Value, then: Any, orelse: Any, args: list[Any]) -> Any:
        branches = []
        for label, closure in (("then", then), ("else", orelse)):
            body = self.body(f"{value_name(self.node)}_{label}")
            result = body.call(closure, args)
            body.graph.set_outputs(body.outputs_of(result, f"{label} branch"))
            branches.append(body.graph)
        count = len(branches[0].outputs)
        if len(branches[1].outputs) != count:
            raise OpError(f"node {self.node!r}: the branches of a Switch give "
                          f"{count} and {len(branches[1].outputs)} values")
        cond = self._scalar_bool(cond)
        outputs = self.emit("If", [cond], {"then_branch": branches[0],
                                           "else_branch": branches[1]}, num_outputs=count)
        return outputs[0] if count == 1 else tuple(outputs)

    def _scalar_bool(self, cond: Value) -> Value:
        if cond.type.dtype is not DType.BOOL:
            cond = self.one("Cast", [cond], {"to": DType.BOOL})
        if cond.type.shape != ():
            cond = self.one("Reshape", [cond, self.const(np.array([], np.int64))])
        return cond

    def emit_loop(self, header, args: list[Any]) -> Any:
        """A while loop: `header(*v)` computes the condition and calls
        Switch(cond, Partial(body, ...), Partial(after, ...)); the body ends by calling
        the header with the next values. Loop(cond0, *v) runs body-then-condition while
        the condition holds; `after` runs once on the final values."""
        context = self.context
        initial = [self.tensor(a) for a in args]
        context.loop_headers.append(header.name)
        try:
            first = Builder(context, self.graph, self.env).run_graph(
                header, initial, stop_at_output_call=True)
            cond0 = self._loop_cond(first, header)
            loop_body = self.body(f"{_graph_name(short(header.name))}_loop")
            for name, dtype in (("iteration", DType.INT64), ("cond", DType.BOOL)):
                loop_body.graph.add_input(loop_body.fresh(name), TensorType(dtype, []))
            carried = [loop_body.graph.add_input(loop_body.fresh(f"v{k}"), v.type)
                       for k, v in enumerate(initial)]
            switched = Builder(context, loop_body.graph, loop_body.env).run_graph(
                header, carried, stop_at_output_call=True)
            step = loop_body.call(switched.then, [])
            if not isinstance(step, TailCall):
                raise OpError(f"node {self.node!r}: the body of while loop {header.name!r} "
                              "does not end by calling the loop header again")
            nxt = [loop_body.tensor(v) for v in step.args]
            again = Builder(context, loop_body.graph, loop_body.env).run_graph(
                header, nxt, stop_at_output_call=True)
            cond_out = loop_body._scalar_bool(self._loop_cond(again, header, loop_body))
            loop_body.graph.set_outputs([cond_out, *nxt])
        finally:
            context.loop_headers.pop()
        final = self.emit("Loop", [None, self._scalar_bool(cond0), *initial],
                          {"body": loop_body.graph}, num_outputs=len(initial))
        last = Builder(context, self.graph, self.env).run_graph(
            header, final, stop_at_output_call=True)
        return self.call(last.orelse, [])

    def _loop_cond(self, switched: Any, header, builder: Builder | None = None) -> Value:
        if not isinstance(switched, Switched):
            raise OpError(f"while loop header {header.name!r} ends in {switched!r}, not a "
                          "Switch")
        return (builder or self).tensor(switched.cond)


def _is_while_header(proto) -> bool:
    return any(a.name == "is_while_header" and (a.i or list(a.ints)[:1] == [1])
               for a in proto.attribute)


def _is_python_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) and not isinstance(value, np.ndarray)


def _describe_attrs(attrs: dict) -> str:
    if not attrs:
        return "{}"
    return "{" + ", ".join(f"{k}={_short_repr(v)}" for k, v in sorted(attrs.items())) + "}"


def _describe_inputs(inputs: list[Any]) -> str:
    return "[" + ", ".join(_short_repr(v) for v in inputs) + "]"


def _short_repr(value: Any) -> str:
    if isinstance(value, Value):
        return f"{value.name}: {value.type}"
    if isinstance(value, np.ndarray):
        text = f"array({value.dtype}, {list(value.shape)})" if value.size > 8 else repr(value)
        return text
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- side-effect plumbing -------------------------------------------------------------

def _load(builder: Builder, inputs: list[Any]) -> Any:
    return inputs[0]


def _update_state(builder: Builder, inputs: list[Any]) -> MonadState:
    return MonadState(dict(builder.context.replaced))


def _make_tuple(builder: Builder, inputs: list[Any]) -> tuple:
    return tuple(inputs)


def _tuple_get_item(builder: Builder, inputs: list[Any]) -> Any:
    sequence, index = inputs[0], inputs[1]
    if not isinstance(sequence, tuple):
        raise OpError(f"node {builder.node!r}: TupleGetItem of {sequence!r}, not a tuple")
    return sequence[int(index)]


def _partial(builder: Builder, inputs: list[Any]) -> Closure:
    function = inputs[0]
    if not isinstance(function, FuncRef):
        raise OpError(f"node {builder.node!r}: Partial of {function!r}, not a function graph")
    return Closure(function.name, tuple(a for a in inputs[1:] if not isinstance(a, Monad)))


def _switch(builder: Builder, inputs: list[Any]) -> Any:
    cond, then, orelse = inputs[:3]
    then = Closure(then.name, ()) if isinstance(then, FuncRef) else then
    orelse = Closure(orelse.name, ()) if isinstance(orelse, FuncRef) else orelse
    if not isinstance(cond, Value):
        return then if bool(np.asarray(cond)) else orelse
    if isinstance(then, Closure) and isinstance(orelse, Closure):
        return Switched(cond, then, orelse)
    return builder.one("Where", [builder._scalar_bool(cond), builder.tensor(then),
                                 builder.tensor(orelse)])


PLUMBING = {
    "Load": _load,
    "Depend": _load,
    "UpdateState": _update_state,
    "MakeTuple": _make_tuple,
    "make_tuple": _make_tuple,
    "MakeList": _make_tuple,
    "TupleGetItem": _tuple_get_item,
    "ListGetItem": _tuple_get_item,
    "tuple_getitem": _tuple_get_item,
    "Partial": _partial,
    "Switch": _switch,
}


def load_file(path: str, registry: Registry | None = None) -> Graph:
    from ge_mindspore.proto import read_model_file

    model = read_model_file(path)
    return import_model(model, base_dir=os.path.dirname(os.path.abspath(path)),
                        registry=registry)
