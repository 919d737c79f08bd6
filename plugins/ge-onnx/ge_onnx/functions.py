"""Expanding ONNX functions: an op ge-hub lacks, written as a body of ops it has.

Many ONNX ops are defined as functions of simpler ops (Shrink, MeanVarianceNormalization,
GroupNormalization, ...), some with a body that depends on the node's attributes and
input types; models may also carry their own local functions. When ge-hub's op set lacks
an op, the importer expands it into its function body, just as a runtime would: the
body's formal inputs become the node's actual inputs, references to the caller's
attributes (`ref_attr_name`) take the caller's values or the schema defaults, every
intermediate value gets a fresh name, and the body's outputs take the names the caller
gave its outputs. Each body node then goes through the importer like any other node,
so a body may itself use ops that need adapters or further expansion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import onnx
from ge_hub.plugin import Sym, Value

from ge_onnx.tensors import dtype_to_onnx
from ge_onnx.versions import OpVersion, normalize_domain

if TYPE_CHECKING:
    from ge_onnx.importer import GraphBuilder


def schema_function(origin: OpVersion, proto: onnx.NodeProto,
                    inputs: Sequence[Value | None]) -> onnx.FunctionProto | None:
    """ONNX's function body for the node's op version, or None when ONNX has none.

    A body is written against some opset of its own (it imports it); any body of the
    op version is a faithful expansion, and the newest needs the fewest adapters.
    """
    schema = origin.schema
    if schema is None:
        return None
    body = b""
    if schema.has_function:
        body = schema.get_function_with_opset_version(max(schema.function_opset_versions))
    if not body and schema.has_context_dependent_function:
        input_types = [_type_proto(v).SerializeToString() for v in inputs]
        body = schema.get_context_dependent_function_with_opset_version(
            max(schema.context_dependent_function_opset_versions), proto.SerializeToString(),
            input_types)
    if not body:
        return None
    function = onnx.FunctionProto()
    function.ParseFromString(body)
    return function


def expand(b: GraphBuilder, proto: onnx.NodeProto, name: str, inputs: Sequence[Value | None],
           function: onnx.FunctionProto, schema: onnx.defs.OpSchema | None = None) -> None:
    """Add the nodes of `function`'s body in place of the node `proto` (named `name`, its
    inputs resolved to `inputs`) to builder `b`'s graph."""
    caller_attrs = {a.name: a for a in proto.attribute}
    defaults = {a.name: a for a in function.attribute_proto}
    if schema is not None:
        for attr_name, spec in schema.attributes.items():
            if spec.default_value.type != onnx.AttributeProto.UNDEFINED:
                defaults.setdefault(attr_name, spec.default_value)

    renamed: dict[str, str] = {}  # body name -> name in the builder's scope
    for index, formal in enumerate(function.input):
        value = inputs[index] if index < len(inputs) else None
        if value is None:
            renamed[formal] = ""
        else:
            renamed[formal] = b.fresh_name(f"{name}/{formal}")
            b.bind(renamed[formal], value)
    caller_outputs = dict(zip(function.output, proto.output))

    opsets = dict(b.opsets)
    opsets.update({normalize_domain(o.domain): o.version for o in function.opset_import})
    for position, body_node in enumerate(function.node):
        call = onnx.NodeProto()
        call.CopyFrom(body_node)
        call.name = f"{name}/{body_node.name or body_node.op_type.lower() + str(position)}"
        del call.input[:]
        call.input.extend(renamed.get(n, n) if n else "" for n in body_node.input)
        del call.output[:]
        for out in body_node.output:
            if out and caller_outputs.get(out):
                renamed[out] = caller_outputs[out]
            elif out:
                renamed[out] = b.fresh_name(f"{name}/{out}")
            call.output.append(renamed.get(out, ""))
        del call.attribute[:]
        for attr in body_node.attribute:
            if attr.ref_attr_name:
                given = caller_attrs.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                if given is None:
                    continue  # the caller left it out and it has no default: absent
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(given)
                resolved.name = attr.name
                attr = resolved
            else:
                attr = _with_captures_renamed(attr, renamed)
            call.attribute.append(attr)
        b.convert_node(call, opsets)

    # A body may hand an input (or an intermediate bound under another name) straight
    # out as an output; make the caller's name point at it.
    for formal, actual in caller_outputs.items():
        inner = renamed.get(formal)
        if actual and inner and inner != actual:
            b.bind(actual, b.scope[inner])


def _with_captures_renamed(attr: onnx.AttributeProto,
                           renamed: dict[str, str]) -> onnx.AttributeProto:
    """A subgraph attribute of a body node, reading the renamed body values it captures."""
    graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
    if not graphs:
        return attr
    copy = onnx.AttributeProto()
    copy.CopyFrom(attr)
    for graph in [copy.g] if attr.type == onnx.AttributeProto.GRAPH else copy.graphs:
        _rename_captures(graph, renamed)
    return copy


def _rename_captures(graph: onnx.GraphProto, renamed: dict[str, str]) -> None:
    local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    local.update(out for node in graph.node for out in node.output)
    outer = {k: v for k, v in renamed.items() if k not in local}
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in outer:
                node.input[index] = outer[name]
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                _rename_captures(sub, outer)
    for output in graph.output:
        if output.name in outer:
            output.name = outer[output.name]
def _type_proto(value: Value | None) -> onnx.TypeProto:
    """The ONNX type of a value, which a context-dependent function body may depend on."""
    if value is None:
        return onnx.TypeProto()
    shape = None
    if value.type.shape is not None:
        shape = [str(d) if isinstance(d, Sym) else d for d in value.type.shape]
    return onnx.helper.make_tensor_type_proto(dtype_to_onnx(value.type.dtype), shape)
