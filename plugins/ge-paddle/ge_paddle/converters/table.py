"""The converter table and the decorator that fills it."""

from __future__ import annotations

from collections.abc import Callable

CONVERTERS: dict[str, Callable] = {}


def converts(*names: str):
    """Register a converter for Paddle ops `names` (short names: "conv2d" means
    "pd_op.conv2d"; in-place variants such as "relu_" are registered with them)."""
    def register(function: Callable) -> Callable:
        for name in names:
            full = name if "." in name else f"pd_op.{name}"
            CONVERTERS[full] = function
            if not full.endswith("_"):
                CONVERTERS.setdefault(full + "_", function)
        return function
    return register
