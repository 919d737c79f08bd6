"""Unary elementwise ops: math functions, activations, Cast, Identity."""

from __future__ import annotations

import numpy as np

from ge_hub.ops.inference import same_as_input
from ge_hub.ops.schema import FLOATS, SIGNED, Input, Output, op


@op("Relu", inputs=[Input("X", SIGNED)], outputs=[Output("Y")], infer=same_as_input)
def relu(x):
    """Y = max(X, 0)."""
    return np.maximum(x, x.dtype.type(0))


@op("Sigmoid", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def sigmoid(x):
    """Y = 1 / (1 + exp(-X))."""
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)
