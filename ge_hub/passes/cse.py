"""Common-subexpression elimination: equal constants become one, then nodes computing
the same op with the same attributes from the same inputs become one.

Nodes with subgraphs and ops whose result is random are left alone; a graph output is
never merged into another value (it keeps its name). Each merged node counts as one
firing of `eliminate_common_subexpressions` in the pass context.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ge_hub.ir.graph import Graph, Value
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext

NAME = "eliminate_common_subexpressions"
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                        "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})


def _freeze(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_freeze(v) for v in value))
    if isinstance(value, float) and value != value:
        return ("nan",)
    return (type(value).__name__, value if isinstance(value, (int, float, str, bool,
                                                              type(None))) else repr(value))


def _digest(array: np.ndarray) -> bytes:
    """A short fingerprint of a constant's bytes (weights are not copied to be keys)."""
    try:
        data = memoryview(array).cast("B")
    except (TypeError, ValueError, NotImplementedError):  # dtypes without a buffer format
        data = array.tobytes()
    return hashlib.blake2b(data, digest_size=16).digest()


def eliminate_common_subexpressions(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    outputs = {id(v) for v in graph.outputs}
    merged = 0
    canonical: dict[tuple, Value] = {}
    for const in list(graph.constants):
        if id(const) in outputs:
            continue
        key = (const.type, const.const.dtype.str, _digest(const.const))
        first = canonical.setdefault(key, const)
        # Bytes, not values: -0.0 and 0.0 stay apart, equal NaNs merge.
        if (first is not const and const.uses
                and first.const.tobytes() == const.const.tobytes()):
            graph.replace_all_uses(const, first)
            merged += 1
    seen: dict[tuple, Any] = {}
    for node in list(graph.nodes):
        if node.op in RANDOM_OPS or any(True for _ in node.subgraphs()):
            continue
        try:
            attrs = tuple(sorted((k, _freeze(v)) for k, v in node.attrs.items()))
            key = (node.op, node.domain, tuple(id(v) if v is not None else None
                                               for v in node.inputs),
                   attrs, len(node.outputs))
            hash(key)
        except TypeError:
            continue
        first = seen.setdefault(key, node)
        if first is node or any(id(v) in outputs for v in node.outputs):
            continue
        for old, new in zip(node.outputs, first.outputs):
            graph.replace_all_uses(old, new)
        graph.remove_node(node)
        merged += 1
        if ctx is not None:
            ctx.record(NAME, "fired", (node.name, first.name))
    if merged:
        graph.remove_unused_constants()
    return PassResult(graph, merged > 0)
