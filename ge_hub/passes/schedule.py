"""Order the nodes for execution and assign streams.

Today: a topological order (the graph's own, repaired if a pass left it out of order)
on stream 0. Branch-parallel streams will assign independent branches to other streams
here; the memory planner's liveness follows whatever order this pass leaves.
"""

from __future__ import annotations

from ge_hub.ir.graph import Graph
from ge_hub.passes import PassResult


def schedule(graph: Graph) -> PassResult:
    before = list(graph.nodes)
    graph.topological_sort()
    for node in graph.nodes:
        node.meta["stream"] = 0
    return PassResult(graph, graph.nodes != before)
