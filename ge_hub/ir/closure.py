"""Closing subgraphs: the outer values a body captures, made explicit graph inputs.

A body (an If branch, a Loop or Scan body) reads values of the graphs around it by
scope. Something that must stand on its own, such as a serialized body in a plan or a
body compiled by itself, needs those reads as inputs instead:

    closed, captured = close_subgraph(body)   # closed.inputs = body.inputs + one per capture
    frame, reads = frame_node(node)           # the node alone in a graph of its own

Neither changes the graph it starts from; both copy (`ge_hub.ir.serialize.clone`).
"""

from __future__ import annotations

from ge_hub.ir.graph import Graph, Node, Value, node_reads, outer_values
from ge_hub.ir.serialize import clone


def close_subgraph(body: Graph) -> tuple[Graph, list[Value]]:
    """A copy of `body` that reads no enclosing value: each captured outer value is an
    extra input, after the body's own. Returns the copy and the captured values, in the
    order of the extra inputs."""
    captured = outer_values(body)
    names = _taken_names(body)
    stand_ins = {value: Value(_fresh(value.name, names), value.type) for value in captured}
    closed = clone(body, outer=stand_ins)
    for value in captured:
        closed.inputs.append(stand_ins[value])
        closed.unique_name(stand_ins[value].name)  # reserves the name in the copy
    return closed, captured


def frame_node(node: Node) -> tuple[Graph, list[Value]]:
    """A graph holding a copy of `node` alone: its inputs are the distinct values the
    node reads (its own inputs, then the outer values its subgraphs capture), its
    outputs the node's outputs. Returns the frame and the values its inputs stand for."""
    frame = Graph(f"{node.name}.frame")
    reads = list({id(v): v for v in node_reads(node)}.values())
    names: set[str] = {node.name}
    stand_ins = {value: frame.add_input(_fresh(value.name, names), value.type)
                 for value in reads}
    attrs = {key: _clone_attr(value, stand_ins) for key, value in node.attrs.items()}
    copy = frame.add_node(node.op, [None if v is None else stand_ins[v] for v in node.inputs],
                          [v.type for v in node.outputs], attrs, domain=node.domain,
                          name=node.name,
                          output_names=[_fresh(v.name, names) for v in node.outputs])
    frame.set_outputs(copy.outputs)
    return frame, reads


def _clone_attr(value, outer: dict[Value, Value]):
    if isinstance(value, Graph):
        return clone(value, outer=outer)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Graph) for v in value):
        return [clone(v, outer=outer) if isinstance(v, Graph) else v for v in value]
    return value


def _taken_names(graph: Graph) -> set[str]:
    return {v.name for v in graph.values()} | {n.name for n in graph.nodes}


def _fresh(wanted: str, taken: set[str]) -> str:
    """`wanted`, or `wanted_1`, `wanted_2`, ... whichever is free; then taken."""
    name, counter = wanted, 0
    while name in taken:
        counter += 1
        name = f"{wanted}_{counter}"
    taken.add(name)
    return name
