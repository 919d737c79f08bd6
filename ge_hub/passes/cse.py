"""Common-subexpression elimination: equal constants become one, then nodes computing
the same op with the same attributes from the same inputs become one.

Nodes with subgraphs and ops whose result is random are left alone; a graph output is
never merged into another value (it keeps its name). Each merged node counts as one
firing of `eliminate_common_subexpressions` in the pass context.
"""

from __future__ import annotations

import collections
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


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """The array's bytes as a flat uint8 (or, when they divide, uint64) view; a copy
    only for a non-contiguous array or a dtype without a buffer format."""
    try:
        data = np.frombuffer(memoryview(array).cast("B"), np.uint8)
    except (TypeError, ValueError, NotImplementedError):
        data = np.frombuffer(array.tobytes(), np.uint8)
    return data.view(np.uint64) if data.size % 8 == 0 else data


def _sample(data: np.ndarray) -> bytes:
    """A cheap key for equal bytes: the length and up to 64 evenly spaced words (equal
    arrays have equal samples; a shared sample is then checked in full)."""
    step = max(1, data.size // 64)
    return data.size.to_bytes(8, "little") + data[::step][:64].tobytes()


def eliminate_common_subexpressions(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    outputs = {id(v) for v in graph.outputs}
    merged = 0
    # Constants can only be equal within one type: only those that share it with another
    # are fingerprinted (hashing every weight of a model costs more than the rest of
    # the pass).
    by_type: dict[tuple, list[Value]] = collections.defaultdict(list)
    for const in graph.constants:
        if id(const) not in outputs:
            by_type[(const.type, const.const.dtype.str)].append(const)
    for group in by_type.values():
        candidates: dict[bytes, list[tuple[Value, np.ndarray]]] = collections.defaultdict(list)
        for const in group if len(group) > 1 else ():
            data = _bytes_of(const.const)
            same = candidates[_sample(data)]
            # Bytes, not values: -0.0 and 0.0 stay apart, equal NaNs merge.
            first = next((v for v, d in same if np.array_equal(d, data)), None)
            if first is None:
                same.append((const, data))
            elif const.uses:
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
