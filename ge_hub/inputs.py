"""Checking the arrays given for a graph's inputs against the graph's declared types.

Shared by the reference evaluator and CompiledModel, so both accept the same inputs
(a dict by name or a list in order) and reject the same mistakes with the same words:
a missing or unexpected input, a wrong count, dtype, rank or static dim, and one
symbol given two sizes. Each error is a ValueError naming the input, what the graph
expects and what was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ge_hub.ir.graph import Graph, Value
from ge_hub.ir.types import Sym


def bind_inputs(graph: Graph, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
    """The arrays for `graph.inputs`, in order, checked against their types."""
    formals = graph.inputs
    if isinstance(inputs, Mapping):
        missing = [v.name for v in formals if v.name not in inputs]
        if missing:
            raise ValueError(f"graph {graph.name!r}: missing input(s) "
                             f"{', '.join(map(repr, missing))}; expected {_listing(graph)}")
        known = {v.name for v in formals}
        extra = [name for name in inputs if name not in known]
        if extra:
            raise ValueError(f"graph {graph.name!r}: unexpected input(s) "
                             f"{', '.join(map(repr, extra))}; expected {_listing(graph)}")
        given = [inputs[v.name] for v in formals]
    elif isinstance(inputs, (list, tuple)):
        if len(inputs) != len(formals):
            raise ValueError(f"graph {graph.name!r}: expected {len(formals)} inputs "
                             f"({_listing(graph)}), got {len(inputs)}")
        given = list(inputs)
    else:
        raise TypeError(f"graph {graph.name!r}: inputs must be a dict by name or a list "
                        f"in input order, got {type(inputs).__name__}")
    symbols: dict[Sym, tuple[int, str]] = {}
    return [check_input(graph, value, data, symbols) for value, data in zip(formals, given)]


def _listing(graph: Graph) -> str:
    return ", ".join(f"{v.name}: {v.type}" for v in graph.inputs) or "none"


def check_input(graph: Graph, value: Value, data: Any,
                symbols: dict[Sym, tuple[int, str]]) -> np.ndarray:
    """`data` as the array of graph input `value`, or a ValueError saying what is wrong.

    `symbols` maps each symbolic dim seen so far to its size and where it was set (an
    expression dim such as N*C at an input is bound as a whole, like a symbol).
    """
    expected = value.type
    where = f"graph {graph.name!r}: input {value.name!r}"
    array = data if isinstance(data, np.ndarray) else np.asarray(data)
    if array.dtype != expected.dtype.numpy:
        raise ValueError(f"{where} must have dtype {expected.dtype} ({expected}), got "
                         f"{array.dtype}")
    if expected.shape is None:
        return array
    if array.ndim != len(expected.shape):
        raise ValueError(f"{where} must have rank {len(expected.shape)} ({expected}), got "
                         f"shape {array.shape} (rank {array.ndim})")
    for axis, (dim, size) in enumerate(zip(expected.shape, array.shape)):
        if isinstance(dim, int):
            if dim != size:
                raise ValueError(f"{where} dim {axis} must be {dim} ({expected}), got shape "
                                 f"{array.shape}")
        elif isinstance(dim, Sym):
            bound = symbols.setdefault(dim, (size, f"input {value.name!r} dim {axis}"))
            if bound[0] != size:
                raise ValueError(f"{where} dim {axis} is symbol {dim.name!r}, which "
                                 f"{bound[1]} sets to {bound[0]}; got {size} (shape "
                                 f"{array.shape})")
    return array
