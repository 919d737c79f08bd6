"""Turn every node that has subgraphs (If, Loop, Scan) into a Closure.

A plan carries no Graph objects, and a step reads only its own inputs; a body reads
values of the graph around it by scope. The node is rewritten in place into a
`Closure` (`ge_hub.ops.closure`): the node and its bodies are copied into a frame graph
that is serialized into the `graph` attribute, and every value they read, the bodies'
captured outer values included, becomes an input of the node. Passes after this one,
liveness and memory planning among them, then see the captured values as read by the
node, and the executor hands them to its step. Output values (names, types, readers)
stay as they were.

Output shapes must be known when the plan is made. Where a control-flow node's shapes
depend on data (a Loop whose trip count comes from an input or from its body, a carried
value that grows), `specialize_shapes` raises `ValueDependentShapeError` naming what
decides them (M and cond first, else everything the node reads), `CompiledModel`
specializes the plan on the values of the graph inputs those come from, and the node,
now reading only constants, is evaluated while the plan is made. So results are exact,
at the price of one plan per distinct value of those inputs (the plan cache holds
`max_cached_plans`); a loop whose shapes follow from input shapes alone (M constant,
stable carried shapes, any Scan) is planned once and runs as a Closure step.
"""

from __future__ import annotations

from ge_hub.ir.closure import frame_node
from ge_hub.ir.graph import Graph, detach_captures
from ge_hub.ops.closure import encode_frame
from ge_hub.passes import PassResult


def lower_control_flow(graph: Graph) -> PassResult:
    changed = False
    for node in graph.nodes:
        if not any(node.subgraphs()):
            continue
        frame, reads = frame_node(node)
        detach_captures(node)
        for index in range(len(node.inputs)):
            node.set_input(index, None)
        node.inputs = []
        for value in reads:
            node.inputs.append(None)
            node.set_input(len(node.inputs) - 1, value)
        node.op, node.domain = "Closure", ""
        node.attrs = {"graph": encode_frame(frame)}
        changed = True
    return PassResult(graph, changed)
