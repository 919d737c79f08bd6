"""The core op set: ONNX names and semantics, one schema + inference + reference each.

Ops are grouped by family in the modules listed in `CORE_MODULES`; every `OpSchema`
defined at module level there is part of the core set. They reach the op registry
through the built-in plugin (`ge_hub.builtin`), the same hook an outside plugin uses.
Look ops up with `get_schema`: it reads the process-wide registry (`ge_hub.registry`),
whose plugins load on first use; the plugin manager itself sits above this layer.
"""

from __future__ import annotations

import importlib

# The module, not its `get_registry`: importing ge_hub.registry first imports this package
# on its way to ge_hub.ops.schema, while the registry module is still half made.
from ge_hub import registry as _registry
from ge_hub.ir import verifier as _verifier
from ge_hub.ops.schema import (
    REQUIRED,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    OpSchema,
    Output,
    op,
)
from ge_hub.ops.verify import check_node as _check_node

# Graph.verify's schema check is this layer's; the IR calls it on every node it walks.
_verifier.install_node_check(_check_node)

CORE_MODULES = (
    "ge_hub.ops.elementwise",
    "ge_hub.ops.elementwise_fused",
    "ge_hub.ops.activation",
    "ge_hub.ops.nn",
    "ge_hub.ops.conv",
    "ge_hub.ops.pool",
    "ge_hub.ops.norm",
    "ge_hub.ops.resize",
    "ge_hub.ops.reduce",
    "ge_hub.ops.shape",
    "ge_hub.ops.index",
    "ge_hub.ops.select",
    "ge_hub.ops.select_bounded",
    "ge_hub.ops.quant",
    "ge_hub.ops.rnn",
    "ge_hub.ops.signal",
    "ge_hub.ops.control",
    "ge_hub.ops.closure",
)


def core_schemas() -> list[OpSchema]:
    """Every schema of the core op set, in module then definition order."""
    schemas: list[OpSchema] = []
    for module_name in CORE_MODULES:
        module = importlib.import_module(module_name)
        schemas.extend(v for v in vars(module).values() if isinstance(v, OpSchema))
    return schemas


def get_schema(name: str, domain: str = "") -> OpSchema:
    """The registered schema of op `name` in `domain` ('' is the core set)."""
    return _registry.get_registry().get_op(name, domain)


__all__ = [
    "REQUIRED", "Attr", "AttrKind", "InferenceContext", "Input", "OpSchema", "Output",
    "op", "core_schemas", "get_schema", "CORE_MODULES",
]
