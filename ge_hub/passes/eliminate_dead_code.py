"""Remove nodes whose outputs nothing reads, and constants nothing uses."""

from __future__ import annotations

from ge_hub.ir.graph import Graph
from ge_hub.passes import PassResult


def eliminate_dead_code(graph: Graph) -> PassResult:
    live = {id(v) for v in graph.outputs}
    removed = False
    for node in reversed(list(graph.nodes)):
        if any(out.uses or id(out) in live for out in node.outputs):
            continue
        graph.remove_node(node)
        removed = True
    before = len(graph.constants)
    graph.remove_unused_constants()
    return PassResult(graph, removed or len(graph.constants) != before)
