"""ge-hub Graph -> ONNX ModelProto, for Netron, for onnxruntime, for round-trip tests.

Core ops are ONNX ops already, in the form of the newest opset, so a node becomes a
NodeProto of the same name and attributes; each attribute is written with the kind the
op's schema declares (a DType as an ONNX element type number, a subgraph as a
GraphProto). Constants become initializers of the main graph and Constant nodes inside
subgraphs; symbolic dims become dim_params; the types ge-hub inferred for intermediate
values go into value_info.

ONNX names values across all scopes at once, while ge-hub names them per graph; the
exporter gives every Value one model-wide unique name, keeping its own where it can.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from ge_hub.plugin import AttrKind, DType, Graph, Node, OpError, Value, get_schema

from ge_onnx.tensors import array_to_tensor, dtype_to_onnx, value_info_from_type
from ge_onnx.versions import NEWEST_OPSET, OLDEST_OPSET

PRODUCER = "ge-hub"


def export(graph: Graph, *, opset: int = NEWEST_OPSET, value_info: bool = True,
           producer_version: str | None = None) -> onnx.ModelProto:
    """Write `graph` as an ONNX model that `onnx.checker.check_model(full_check=True)`
    accepts.

    `opset` is the ONNX opset the model imports (the newest by default, the form ge-hub's
    op set follows); `value_info=False` leaves out the types of intermediate values. A
    graph input or output whose rank ge-hub does not know has no shape in ONNX, which
    the checker refuses; for outputs, ONNX's shape inference is asked for one.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"export expects a ge_hub Graph, got {type(graph).__name__}")
    if not OLDEST_OPSET <= opset <= NEWEST_OPSET:
        raise ValueError(f"opset {opset} is outside what ge-onnx writes "
                         f"({OLDEST_OPSET} to {NEWEST_OPSET})")
    graph.verify()
    writer = _Writer(opset, value_info)
    graph_proto = writer.graph(graph, is_main=True)
    opsets = [onnx.helper.make_opsetid("", opset)]
    opsets += [onnx.helper.make_opsetid(domain, 1) for domain in sorted(writer.domains)]
    if producer_version is None:
        from ge_hub import __version__ as producer_version
    model = onnx.helper.make_model(graph_proto, opset_imports=opsets, producer_name=PRODUCER,
                                   producer_version=producer_version)
    # The oldest IR version that carries these opsets, so older runtimes can read it.
    model.ir_version = onnx.helper.find_min_ir_version_for(list(model.opset_import),
                                                           ignore_unknown=True)
    if any(v.type.shape is None for v in graph.outputs):
        model = _ranks_from_onnx_inference(model)
    return model


def _ranks_from_onnx_inference(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give graph outputs of unknown rank the shape ONNX's own inference finds.

    ONNX's checker wants a shape on every graph output, and ge-hub's inference leaves a
    rank unknown where it depends on data (a Reshape to a computed shape) that ONNX's
    inference, which propagates small shape computations, may still find.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except onnx.shape_inference.InferenceError:
        return model
    for ours, theirs in zip(model.graph.output, inferred.graph.output):
        if not ours.type.tensor_type.HasField("shape") and \
                theirs.type.tensor_type.HasField("shape"):
            ours.type.tensor_type.shape.CopyFrom(theirs.type.tensor_type.shape)
    return model


class _Writer:
    def __init__(self, opset: int, value_info: bool):
        self.opset = opset
        self.with_value_info = value_info
        self.domains: set[str] = set()
        self.names: dict[int, str] = {}  # id(Value) -> its model-wide name
        self.taken: set[str] = set()
        self.node_names: set[str] = set()

    # -- names -----------------------------------------------------------------------

    def _unique(self, wanted: str, taken: set[str]) -> str:
        name, counter = wanted, 0
        while name in taken:
            counter += 1
            name = f"{wanted}__{counter}"
        taken.add(name)
        return name

    def define(self, value: Value) -> str:
        self.names[id(value)] = self._unique(value.name, self.taken)
        return self.names[id(value)]

    def ref(self, value: Value | None) -> str:
        return "" if value is None else self.names[id(value)]

    # -- graphs ------------------------------------------------------------------------

    def graph(self, graph: Graph, *, is_main: bool = False) -> onnx.GraphProto:
        inputs = [value_info_from_type(self.define(v), v.type) for v in graph.inputs]
        nodes: list[onnx.NodeProto] = []
        initializers = []
        for constant in graph.constants:
            name = self.define(constant)
            if is_main:
                initializers.append(array_to_tensor(constant.const, name))
            else:  # subgraph initializers are not read by every runtime; a node is
                nodes.append(onnx.helper.make_node(
                    "Constant", [], [name], name=self._unique(name, self.node_names),
                    value=array_to_tensor(constant.const, name)))
        value_infos = []
        for node in graph.nodes:
            nodes.append(self.node(node))
            if self.with_value_info:
                # A value of unknown rank says nothing worth writing (and the checker
                # wants a shape in every value_info).
                value_infos += [value_info_from_type(self.ref(v), v.type) for v in node.outputs
                                if v.type.shape is not None]
        outputs = []
        seen: set[int] = set()
        for value in graph.outputs:
            name = self.ref(value)
            if id(value) in seen or value.producer is None:
                # ONNX wants distinct output names, each produced in this graph: repeat
                # an output, or pass out an input or a constant, through an Identity.
                copy = self._unique(f"{name}_out", self.taken)
                nodes.append(onnx.helper.make_node(
                    "Identity", [name], [copy], name=self._unique(copy, self.node_names)))
                name = copy
            seen.add(id(value))
            outputs.append(value_info_from_type(name, value.type))
        return onnx.helper.make_graph(nodes, graph.name, inputs, outputs, initializers,
                                      value_info=value_infos)

    def node(self, node: Node) -> onnx.NodeProto:
        if node.domain:
            self.domains.add(node.domain)
        elif not onnx.defs.has(node.op, ""):
            raise OpError(f"cannot export node {node.name!r}: op {node.op!r} is a ge-hub core "
                          "op that ONNX does not define")
        inputs = [self.ref(v) for v in node.inputs]
        while inputs and inputs[-1] == "":
            inputs.pop()
        outputs = [self.define(v) for v in node.outputs]
        proto = onnx.helper.make_node(node.op, inputs, outputs,
                                      name=self._unique(node.name, self.node_names),
                                      domain=node.domain or None)
        schema = get_schema(node.op, node.domain)
        for key, value in node.attrs.items():
            spec = schema.attrs.get(key)
            attr = self.attribute(key, value, spec.kind if spec else None, node)
            if attr is not None:
                proto.attribute.append(attr)
        if not node.domain:
            proto.attribute.extend(self._function_defaults(node.op, proto))
        return proto

    def _function_defaults(self, op: str, proto: onnx.NodeProto) -> list:
        """Attribute defaults written out for ops ONNX defines by a function body.

        ONNX's checker expands such a body with the node's own attributes and does not
        fill in the schema's defaults (MeanVarianceNormalization's `axes` reaches the
        body's Constant as nothing), so the defaults are made explicit.
        """
        try:
            onnx_schema = onnx.defs.get_schema(op, self.opset, "")
        except onnx.defs.SchemaError:
            return []
        if not onnx_schema.has_function:
            return []
        given = {a.name for a in proto.attribute}
        # Not float defaults: written as float32 they would round ge-hub's float64
        # default (LeakyRelu's alpha), and a body reads those fine when absent.
        return [attr.default_value for name, attr in onnx_schema.attributes.items()
                if name not in given and attr.default_value.name
                and attr.default_value.type != onnx.AttributeProto.FLOAT]

    def attribute(self, key: str, value: Any, kind: AttrKind | None,
                  node: Node) -> onnx.AttributeProto | None:
        if value is None:
            return None  # an optional attribute left at its "absent" default
        A = onnx.AttributeProto
        if kind is AttrKind.DTYPE or isinstance(value, DType):
            return onnx.helper.make_attribute(key, dtype_to_onnx(DType.parse(value)))
        if kind is AttrKind.TENSOR or isinstance(value, np.ndarray):
            return onnx.helper.make_attribute(key, array_to_tensor(np.asarray(value), ""))
        if kind is AttrKind.GRAPH or isinstance(value, Graph):
            return onnx.helper.make_attribute(key, self.graph(value))
        list_kinds = {AttrKind.INTS: A.INTS, AttrKind.FLOATS: A.FLOATS,
                      AttrKind.STRINGS: A.STRINGS}
        if kind in list_kinds:
            return onnx.helper.make_attribute(key, list(value), attr_type=list_kinds[kind])
        if kind is AttrKind.FLOAT:
            return onnx.helper.make_attribute(key, float(value))
        if kind is AttrKind.INT:
            return onnx.helper.make_attribute(key, int(value))
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, Graph)
                                                              for v in value):
            return onnx.helper.make_attribute(key, [self.graph(v) for v in value])
        try:
            return onnx.helper.make_attribute(key, value)
        except (TypeError, ValueError) as exc:
            raise OpError(f"cannot export attribute {key!r} of node {node.name!r} "
                          f"({node.qualified_op}): {exc}") from exc
