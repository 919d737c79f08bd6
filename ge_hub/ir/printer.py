"""The text form of a graph: what `print(graph)` shows.

    graph mlp(%x: float32[N,784]) -> (%y: float32[N,10]) {
      %w1 = const float32[784,256]
      %b = const float32[2] [0.5, -1]
      %h = MatMul(%x, %w1)                     : float32[N,256]
      %a, %c = Split(%h) {axis=1}              : float32[N,128], float32[N,128]
      %y = acme.Fused(%a, _) {alpha=0.2}       : float32[N,10]  # node 'fused1'
      return %y
    }

Values are `%name`; an omitted optional input is `_`. Constants of at most
`SMALL_CONSTANT` elements show their data. A node's name is shown as a trailing comment
only when its first output's name does not already start with it. Subgraph attributes
are written `@name` in the attribute list and printed in full, indented, below the node.

The printer never raises on a malformed graph: it is what one looks at when the
verifier complains.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.ir.types import TensorType

SMALL_CONSTANT = 8  # constants and tensor attributes up to this many elements show data
TYPE_COLUMN = 56  # node lines are padded to this width (at most) so types line up
INDENT = "  "


def format_graph(graph: Graph) -> str:
    """The readable text form of `graph`, subgraphs included."""
    return "\n".join(_graph_lines(graph, ""))


def _graph_lines(graph: Graph, indent: str, label: str = "") -> list[str]:
    params = ", ".join(_typed(v) for v in graph.inputs)
    results = ", ".join(_typed(v) for v in graph.outputs)
    lines = [f"{indent}{label}graph {graph.name}({params}) -> ({results}) {{"]
    body = indent + INDENT
    if graph.attrs:
        lines.append(f"{body}attrs {_attr_dict(graph.attrs)}")
        lines.extend(_subgraph_lines(graph.attrs, body + INDENT))
    for const in graph.constants:
        lines.append(f"{body}{_ref(const)} = const {_constant_text(const.const, const.type)}")
    heads = [_node_head(node) for node in graph.nodes]
    # Overlong lines are left unpadded rather than pushing every type far right.
    width = max((len(h) for h in heads if len(h) <= TYPE_COLUMN), default=0)
    for node, head in zip(graph.nodes, heads):
        types = ", ".join(str(out.type) for out in node.outputs)
        line = f"{body}{head.ljust(width)} : {types}" if types else f"{body}{head}"
        if not _name_is_evident(node):
            line += f"  # node {node.name!r}"
        lines.append(line)
        lines.extend(_subgraph_lines(node.attrs, body + INDENT))
    returned = ", ".join(_ref(v) for v in graph.outputs)
    lines.append(f"{body}return {returned}".rstrip())
    lines.append(f"{indent}}}")
    return lines


def _node_head(node: Node) -> str:
    """`%a, %b = domain.Op(%x, _) {attrs}`: the node line up to its types."""
    call = f"{node.qualified_op}({', '.join(_ref(v) for v in node.inputs)})"
    if node.attrs:
        call += f" {_attr_dict(node.attrs)}"
    if not node.outputs:
        return call
    return f"{', '.join(_ref(v) for v in node.outputs)} = {call}"


def _name_is_evident(node: Node) -> bool:
    # Default names make the node's name a prefix of its outputs' ("split" -> "split_out0").
    first = node.outputs[0].name if node.outputs and node.outputs[0] is not None else None
    return isinstance(first, str) and isinstance(node.name, str) and first.startswith(node.name)


def _subgraph_lines(attrs: dict[str, Any], indent: str) -> list[str]:
    lines: list[str] = []
    for key, value in attrs.items():
        if isinstance(value, Graph):
            lines.extend(_graph_lines(value, indent, f"{key}: "))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, Graph):
                    lines.extend(_graph_lines(item, indent, f"{key}[{i}]: "))
    return lines


def _ref(value: Value | None) -> str:
    if value is None:
        return "_"
    return f"%{getattr(value, 'name', '?')}"


def _typed(value: Value | None) -> str:
    return _ref(value) if value is None else f"{_ref(value)}: {value.type}"


def _attr_dict(attrs: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{key}={_attr_text(value)}" for key, value in attrs.items()) + "}"


def _attr_text(value: Any) -> str:
    if isinstance(value, Graph):
        return f"@{value.name}"
    if isinstance(value, str):
        # A DType is a str too, but it reads better bare: `to=float16`.
        return str(value) if isinstance(value, DType) else json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_attr_text(v) for v in value) + "]"
    if isinstance(value, tuple):
        items = ", ".join(_attr_text(v) for v in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, dict):
        return _attr_dict(value)
    if isinstance(value, np.ndarray):
        return f"tensor {_constant_text(value, None)}"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _constant_text(array: Any, declared_type) -> str:
    """`float32[2] [1, 2]` for small data, `float32[784,256]` for large."""
    if not isinstance(array, np.ndarray):
        return f"{declared_type} <no data>" if declared_type is not None else "<no data>"
    type_text = _array_type_text(array) if declared_type is None else str(declared_type)
    if array.size > SMALL_CONSTANT:
        return type_text
    return f"{type_text} {_nested_text(array)}"


def _array_type_text(array: np.ndarray) -> str:
    try:
        return str(TensorType.of(array))
    except (TypeError, ValueError):
        return f"{array.dtype}{list(array.shape)}"


def _nested_text(array: np.ndarray) -> str:
    if array.ndim == 0:
        return str(array[()])
    return "[" + ", ".join(_nested_text(array[i]) for i in range(array.shape[0])) + "]"
