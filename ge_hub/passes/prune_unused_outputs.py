"""Drop trailing optional outputs that nothing reads (Dropout's mask, MaxPool's Indices).

Exporters often declare optional outputs no one consumes. Left in place they cost a
kernel the work (or keep a node like Dropout from being a free view); a node asks for
as many outputs as it has, so removing unread trailing optional ones asks for less.
"""

from __future__ import annotations

from ge_hub.ir.graph import Graph
from ge_hub.ops import get_schema
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext


def prune_unused_outputs(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    schemas = ctx.registry.get_op if ctx is not None else get_schema
    graph_outputs = {id(v) for v in graph.outputs}
    changed = False
    for node in graph.nodes:
        formals = schemas(node.op, node.domain).outputs
        while len(node.outputs) > 1:
            index = len(node.outputs) - 1
            formal = formals[min(index, len(formals) - 1)]
            last = node.outputs[-1]
            # Variadic outputs (Split's pieces) are never dropped: their count is meaning.
            if not formal.optional or formal.variadic or last.uses or id(last) in graph_outputs:
                break
            node.outputs.pop()
            changed = True
    return PassResult(graph, changed)
