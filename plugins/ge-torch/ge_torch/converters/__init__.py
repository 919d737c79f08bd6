"""The converter table: one small function per ATen op overload.

    @converter(aten.relu.default)
    def relu(cx, node, x):
        return cx.op("Relu", x)

A converter is called with the `ConvertContext`, the FX node, and the node's positional
and keyword arguments, FX nodes already replaced by what they became (see
`ge_torch.context`). It returns the ge-hub value of the node's output, or a tuple for a
multi-output op. It raises `Unsupported` when ge-hub cannot reproduce this particular
call exactly; the node then runs in PyTorch. An optional `check(node)` answers the same
question before any conversion starts, from the node alone, so that the partitioner can
keep such nodes out of ge-hub's partitions in the first place.

The families live in the modules of this package; `load_all` imports them, which fills
the table. Adding an op is adding one decorated function to the right module.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

FAMILIES = (
    "ge_torch.converters.elementwise",
    "ge_torch.converters.activation",
    "ge_torch.converters.shape",
    "ge_torch.converters.linalg",
    "ge_torch.converters.nn",
    "ge_torch.converters.reduce",
    "ge_torch.converters.index",
    "ge_torch.converters.factory",
    "ge_torch.converters.fused",
    "ge_torch.converters.rnn",
)


@dataclasses.dataclass(frozen=True)
class Converter:
    target: Any  # a torch OpOverload
    convert: Callable[..., Any]
    check: Callable[[Any], str | None] | None = None

    def unsupported_reason(self, node) -> str | None:
        return None if self.check is None else self.check(node)


CONVERTERS: dict[Any, Converter] = {}
_loaded = False


def converter(*targets, check: Callable[[Any], str | None] | None = None):
    """Register the decorated function as the converter of each ATen overload given."""

    def wrap(fn):
        for target in targets:
            if target in CONVERTERS:
                raise ValueError(f"{target} has two converters: "
                                 f"{CONVERTERS[target].convert.__qualname__} and "
                                 f"{fn.__qualname__}")
            CONVERTERS[target] = Converter(target, fn, check)
        return fn

    return wrap


def load_all() -> dict[Any, Converter]:
    """Import every converter family (once) and return the table."""
    global _loaded
    if not _loaded:
        for module in FAMILIES:
            importlib.import_module(module)
        _loaded = True
    return CONVERTERS


def lookup(target) -> Converter | None:
    return load_all().get(target)
