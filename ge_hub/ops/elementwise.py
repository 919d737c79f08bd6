"""Elementwise ops with two or more inputs: arithmetic, comparison, logic, Where.

All of them broadcast their inputs NumPy-style (ONNX multidirectional broadcasting).
"""

from __future__ import annotations

import numpy as np

from ge_hub.ops.inference import broadcast, broadcast_to_bool
from ge_hub.ops.schema import BOOL, NUMERIC, Input, Output, op


@op("Add", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast)
def add(a, b):
    """C = A + B, broadcast."""
    return np.add(a, b).astype(a.dtype, copy=False)


@op("Equal", inputs=[Input("A", NUMERIC | BOOL), Input("B", NUMERIC | BOOL)],
    outputs=[Output("C")], infer=broadcast_to_bool)
def equal(a, b):
    """C = (A == B), broadcast; bool output."""
    return np.equal(a, b)
