"""ONNX ModelProto -> ge-hub Graph.

The importer walks the ONNX graph once, in its (topological) node order:

- graph inputs become graph inputs, with named dims (dim_param) as symbols and unknown
  dims as fresh symbols; inputs that are also initializers (the opset < 9 habit) are
  constants, like every initializer and every `Constant` node;
- each node's op version is resolved against the model's opsets (`ge_onnx.versions`),
  its attributes decoded (subgraphs become ge-hub subgraphs that may read the enclosing
  graph's values; a body's untyped inputs take the types its node gives them,
  `ge_onnx.body_types`), then version adapters bring older forms to the core form
  (`ge_onnx.adapters`);
- the node is added with the output types ge-hub's own op schemas infer (constant inputs
  passed as known data), never with ONNX's value_info; an op that ge-hub's op set lacks
  but that ONNX defines as a function of other ops is expanded into that function's body
  (`ge_onnx.functions`);
- the finished graph is verified.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from ge_hub.plugin import (
    AttrKind,
    GeHubError,
    Graph,
    GraphError,
    OpError,
    OpSchema,
    Registry,
    SerializationError,
    Sym,
    TensorType,
    UnknownOpError,
    Value,
    get_registry,
)
from google.protobuf.descriptor import FieldDescriptor

from ge_onnx import functions
from ge_onnx.adapters import PRE_OPSET_7_FORMS, RENAMED, OnnxNode, adapt
from ge_onnx.body_types import body_input_types
from ge_onnx.tensors import (
    UnsupportedTypeError,
    dtype_from_onnx,
    sparse_to_array,
    tensor_to_array,
    type_from_value_info,
)
from ge_onnx.versions import OpVersion, normalize_domain, opsets_of, resolve

_A = onnx.AttributeProto


def import_model(model: onnx.ModelProto, *, base_dir: str = "",
                 registry: Registry | None = None, file_data=None) -> Graph:
    """Convert an ONNX model to a verified ge-hub Graph.

    `base_dir` is where tensors stored as external data are read from when the model
    was not loaded with them (`onnx.load(path)` loads them itself). `registry` is where
    ops are looked up and the graph verified (default: the loaded plugins').
    `file_data` (`ge_onnx.filedata.FileData`): where the main graph's initializers whose
    data the proto was parsed without are in the model file.
    """
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"import_model expects an onnx.ModelProto, got {type(model).__name__}")
    _check_text_fields(model, "model")
    context = ModelContext(model, base_dir, registry)
    builder = GraphBuilder(context, model.graph, scope=collections.ChainMap(),
                           opsets=context.opsets)
    builder.file_data = file_data
    graph = builder.build()
    graph.verify(schemas=context.registry.get_op)
    return graph


class ModelContext:
    """What every graph of one model shares: opsets, local functions, external data dir."""

    def __init__(self, model: onnx.ModelProto, base_dir: str, registry: Registry | None = None):
        self.registry = registry if registry is not None else get_registry()
        self.opsets = opsets_of(model)
        self.base_dir = base_dir
        self.local_functions: dict[tuple[str, str], onnx.FunctionProto] = {
            (normalize_domain(f.domain), f.name): f for f in model.functions}


class GraphBuilder:
    """Builds one ge-hub graph from one ONNX graph; adapters and function expansion use
    its `constant`, `emit` and `fresh_name` to add what they need."""

    def __init__(self, context: ModelContext, proto: onnx.GraphProto,
                 scope: collections.ChainMap, opsets: dict[str, int]):
        self.context = context
        self.proto = proto
        self.graph = Graph(proto.name or "main")
        # ONNX name -> Value, this graph's names first, then the enclosing graphs'.
        self.scope = scope.new_child()
        self.opsets = opsets
        # Names given out in this graph, starting with every value name the ONNX graph
        # will bring, so that a name made up for an adapter's node never takes one.
        self.used: set[str] = set(_onnx_value_names(proto))
        # prefix -> the next counter fresh_name tries for it, so that naming n nodes of
        # one prefix probes about n names in all, not 1 + 2 + ... + n.
        self._next_counter: dict[str, int] = {}
        # The main graph's initializers whose data is read from the file (import_model)
        self.file_data = None

    # -- the building kit for adapters and function expansion -----------------------

    def fresh_name(self, prefix: str) -> str:
        counter = self._next_counter.get(prefix, 0)
        name = prefix if counter == 0 else f"{prefix}_{counter}"
        while name in self.used:
            counter += 1
            name = f"{prefix}_{counter}"
        self._next_counter[prefix] = counter + 1
        self.used.add(name)
        return name

    def constant(self, array, hint: str = "const", onnx_name: str | None = None) -> Value:
        """A constant value; bound in scope under `onnx_name` when the ONNX graph names it."""
        name = onnx_name if onnx_name else self.fresh_name(hint)
        with _unique_names(f"constant {name!r}"):
            value = self.graph.add_constant(np.asarray(array), name=name)
        if onnx_name:
            self.scope[onnx_name] = value
        return value

    def emit(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any] | None = None,
             *, output_names: Sequence[str] | None = None, num_outputs: int | None = None,
             hint: str | None = None, name: str | None = None, domain: str = "") -> list[Value]:
        """Add a node of a registered op, typed by the op's own inference.

        `output_names` are ONNX names ("" for an output nobody asked for) that the outputs
        take and are bound to in scope; `num_outputs` defaults to their number.
        """
        schema = self.context.registry.get_op(op, domain)
        inputs = list(inputs)
        while inputs and inputs[-1] is None:  # trailing omitted optional inputs
            inputs.pop()
        node_name = name or self.fresh_name(hint or op.lower())
        attrs = _coerce_attrs(schema, dict(attrs or {}), node_name)
        if num_outputs is None and output_names is not None:
            num_outputs = len(output_names)
        types = schema.infer_types(
            [None if v is None else v.type for v in inputs], attrs,
            consts=[None if v is None else v.const for v in inputs],
            num_outputs=num_outputs, node_name=node_name)
        if num_outputs is not None and len(types) < num_outputs:
            raise OpError(f"{schema.describe(node_name)}: the node asks for {num_outputs} "
                          f"outputs, the op has {len(types)}")
        names = []
        for index in range(len(types)):
            onnx_name = output_names[index] if output_names and index < len(output_names) else ""
            names.append(onnx_name or self.fresh_name(
                node_name if len(types) == 1 else f"{node_name}_out{index}"))
        with _unique_names(schema.describe(node_name)):
            node = self.graph.add_node(op, inputs, types, attrs, domain=domain,
                                       name=node_name, output_names=names)
        for index, value in enumerate(node.outputs):
            if output_names and index < len(output_names) and output_names[index]:
                self.scope[output_names[index]] = value
        return node.outputs

    def bind(self, onnx_name: str, value: Value) -> None:
        if onnx_name:
            self.scope[onnx_name] = value

    def lookup(self, onnx_name: str, reader: str) -> Value | None:
        if onnx_name == "":
            return None  # an omitted optional input
        try:
            return self.scope[onnx_name]
        except KeyError:
            raise OpError(f"{reader} reads {onnx_name!r}, which no graph input, initializer "
                          "or earlier node defines (ONNX nodes must be in topological "
                          "order)") from None

    # -- the graph -----------------------------------------------------------------------

    def build(self, input_types: Sequence[TensorType | None] = ()) -> Graph:
        """The ge-hub graph; `input_types` type the inputs the ONNX graph leaves untyped
        (a body's, `ge_onnx.body_types`)."""
        proto = self.proto
        initializer_names = {t.name for t in proto.initializer}
        initializer_names.update(t.values.name for t in proto.sparse_initializer)
        for index, info in enumerate(proto.input):
            if info.name in initializer_names:
                continue  # a default value for the input: a constant in ge-hub
            given = input_types[index] if index < len(input_types) else None
            if given is not None and _untyped(info):
                value_type = given
            else:
                value_type = type_from_value_info(
                    info, f"graph input {info.name!r}",
                    lambda axis, name=info.name: Sym.named(f"{name}.{axis}"))
            with _unique_names(f"graph input {info.name!r}"):
                self.scope[info.name] = self.graph.add_input(info.name, value_type)
        file_data = self.file_data
        for index, tensor in enumerate(proto.initializer):
            where = f"initializer {tensor.name!r}"
            if file_data is not None and index in file_data.spans:
                data = file_data.array(index, tensor, where)
            else:
                data = tensor_to_array(tensor, where, self.context.base_dir)
            self.constant(data, onnx_name=tensor.name)
        for sparse in proto.sparse_initializer:
            where = f"sparse initializer {sparse.values.name!r}"
            self.constant(sparse_to_array(sparse, where, self.context.base_dir),
                          onnx_name=sparse.values.name)
        for node_proto in proto.node:
            self.convert_node(node_proto, self.opsets)
        outputs = [self.lookup(info.name, f"graph {self.graph.name!r} output")
                   for info in proto.output]
        self.graph.set_outputs(outputs)
        return self.graph

    def subgraph(self, proto: onnx.GraphProto,
                 input_types: Sequence[TensorType | None] = ()) -> Graph:
        """A subgraph attribute: its own ge-hub graph that may read this one's values."""
        return GraphBuilder(self.context, proto, self.scope, self.opsets).build(input_types)

    # -- one node --------------------------------------------------------------------

    def convert_node(self, proto: onnx.NodeProto, opsets: dict[str, int]) -> None:
        domain = normalize_domain(proto.domain)
        local = self.context.local_functions.get((domain, proto.op_type))
        name = self.fresh_name(proto.name or proto.op_type.lower())
        reader = f"node {name!r} ({proto.op_type})"
        if local is not None:
            inputs = [self.lookup(n, reader) for n in proto.input]
            functions.expand(self, proto, name, inputs, local)
            return
        origin = resolve(proto.op_type, domain, opsets, name, PRE_OPSET_7_FORMS)
        if origin.domain == "" and proto.op_type == "Constant":
            self._convert_constant(proto, origin, name)
            return
        core_op = RENAMED.get(proto.op_type, proto.op_type) if domain == "" else proto.op_type
        if self.context.registry.has_op(core_op, domain):
            node = self._onnx_node(proto, name, origin)
            replaced = adapt(node, self)
            if replaced is not None:
                for onnx_name, value in zip(node.outputs, replaced):
                    self.bind(onnx_name, value)
                return
            self.emit(node.op_type, node.inputs, node.attrs, output_names=node.outputs,
                      name=node.name, domain=domain)
            return
        inputs = [self.lookup(n, reader) for n in proto.input]
        function = functions.schema_function(origin, proto, inputs)
        if function is not None:
            functions.expand(self, proto, name, inputs, function, origin.schema)
            return
        raise UnknownOpError(f"{origin.describe(name)}: ge-hub has no such op (`ge-hub ops` "
                             "lists the ops it has) and ONNX defines no function body for it")

    def _onnx_node(self, proto: onnx.NodeProto, name: str, origin: OpVersion) -> OnnxNode:
        reader = f"node {name!r} ({proto.op_type})"
        inputs = [self.lookup(n, reader) for n in proto.input]
        body_types = body_input_types(proto, origin.version, inputs) if origin.domain == "" \
            else {}
        attrs = {a.name: self.decode_attribute(a, origin, name, body_types.get(a.name, ()))
                 for a in proto.attribute}
        outputs = list(proto.output)
        while outputs and outputs[-1] == "":
            outputs.pop()
        return OnnxNode(proto.op_type, name, inputs, attrs, outputs, origin)

    def decode_attribute(self, attr: onnx.AttributeProto, origin: OpVersion, node_name: str,
                         body_types: Sequence[TensorType | None] = ()):
        """An ONNX attribute as plain Python: numbers, strings, lists, arrays, Graphs
        (`body_types` type a body's untyped inputs)."""
        where = f"attribute {attr.name!r} of {origin.describe(node_name)}"
        kind = attr.type
        if kind == _A.INT:
            return int(attr.i)
        if kind == _A.FLOAT:
            return float(attr.f)
        if kind == _A.STRING:
            return _text(attr.s, where)
        if kind == _A.INTS:
            return [int(v) for v in attr.ints]
        if kind == _A.FLOATS:
            return [float(v) for v in attr.floats]
        if kind == _A.STRINGS:
            return [_text(s, where) for s in attr.strings]
        if kind == _A.TENSOR:
            return tensor_to_array(attr.t, where, self.context.base_dir)
        if kind == _A.TENSORS:
            return [tensor_to_array(t, where, self.context.base_dir) for t in attr.tensors]
        if kind == _A.SPARSE_TENSOR:
            return sparse_to_array(attr.sparse_tensor, where, self.context.base_dir)
        if kind == _A.GRAPH:
            return self.subgraph(attr.g, body_types)
        if kind == _A.GRAPHS:
            return [self.subgraph(g) for g in attr.graphs]
        raise UnsupportedTypeError(f"{where} is of ONNX attribute type "
                                   f"{_A.AttributeType.Name(kind)}, which ge-hub does not "
                                   "support")

    def _convert_constant(self, proto: onnx.NodeProto, origin: OpVersion, name: str) -> None:
        if len(proto.attribute) != 1:
            raise OpError(f"{origin.describe(name)}: a Constant has exactly one value_* "
                          f"attribute, got {[a.name for a in proto.attribute]}")
        if len(proto.output) != 1 or not proto.output[0]:
            raise OpError(f"{origin.describe(name)}: a Constant has exactly one output, got "
                          f"{list(proto.output)}")
        attr = proto.attribute[0]
        where = f"attribute {attr.name!r} of {origin.describe(name)}"
        if attr.name in ("value_string", "value_strings"):
            raise UnsupportedTypeError(f"{where}: string constants are not supported")
        expected = _CONSTANT_ATTRS.get(attr.name)
        if expected is None:
            raise OpError(f"{where}: not a Constant attribute (expected one of "
                          f"{', '.join(_CONSTANT_ATTRS)})")
        if attr.type != expected:
            raise OpError(f"{where} must be of ONNX attribute type "
                          f"{_A.AttributeType.Name(expected)}, got "
                          f"{_A.AttributeType.Name(attr.type)}")
        value = self.decode_attribute(attr, origin, name)
        dtype = {"value_float": np.float32, "value_floats": np.float32,
                 "value_int": np.int64, "value_ints": np.int64}.get(attr.name)
        array = np.asarray(value, dtype=dtype)
        self.constant(array, onnx_name=proto.output[0])


@contextlib.contextmanager
def _unique_names(what: str):
    """Turn the graph's complaint about a name given twice (a plain ValueError) into a
    GraphError naming the ONNX input, initializer or node that reuses it."""
    try:
        yield
    except GeHubError:
        raise
    except ValueError as exc:
        raise GraphError(f"{what}: {exc} (ONNX names each value once)") from None


# Constant's value attributes (the string ones are refused before) and their types.
_CONSTANT_ATTRS = {"value": _A.TENSOR, "sparse_value": _A.SPARSE_TENSOR, "value_float": _A.FLOAT,
                   "value_floats": _A.FLOATS, "value_int": _A.INT, "value_ints": _A.INTS}


def _check_text_fields(message, where: str) -> None:
    """Refuse string fields that are not UTF-8.

    protobuf hands such a field (a node's op_type, a value's name) to Python as bytes,
    not str; everything after would trip over it with a TypeError.
    """
    for field, value in message.ListFields():
        repeated = _repeated(field)
        if field.type == _STRING:
            values = value if repeated else [value]
            for item in values:
                if isinstance(item, bytes):
                    raise SerializationError(f"{where}: field {field.name!r} is not UTF-8 "
                                             f"text ({item[:40]!r})")
        elif field.type == _MESSAGE:
            if field.message_type.GetOptions().map_entry:
                continue
            items = value if repeated else [value]
            for index, item in enumerate(items):
                label = f"{field.name}[{index}]" if repeated else field.name
                _check_text_fields(item, f"{where}.{label}")


_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def _repeated(field: FieldDescriptor) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf 6+; `label` is gone in 7
        return field.is_repeated
    return field.label == FieldDescriptor.LABEL_REPEATED


def _untyped(info: onnx.ValueInfoProto) -> bool:
    """No type at all, or a tensor type without an element type (allowed in bodies)."""
    kind = info.type.WhichOneof("value")
    return kind is None or kind == "tensor_type" and info.type.tensor_type.elem_type == 0


def _onnx_value_names(proto: onnx.GraphProto) -> list[str]:
    names = [v.name for v in proto.input]
    names += [t.name for t in proto.initializer]
    names += [t.values.name for t in proto.sparse_initializer]
    for node in proto.node:
        names += [n for n in node.output if n]
    return names


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsupportedTypeError(f"{where}: string is not UTF-8 ({raw[:40]!r})") from None


def _coerce_attrs(schema: OpSchema, attrs: dict[str, Any], node_name: str) -> dict[str, Any]:
    """ONNX spells a dtype attribute as an element type number; ge-hub as a DType."""
    for key, value in attrs.items():
        spec = schema.attrs.get(key)
        if spec is not None and spec.kind is AttrKind.DTYPE and isinstance(value, int):
            attrs[key] = dtype_from_onnx(
                value, f"attribute {key!r} of {schema.describe(node_name)}")
    return attrs
