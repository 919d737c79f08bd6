"""The schema half of graph verification: each node checked against its op's schema.

`Graph.verify()` (`ge_hub.ir.verifier`) walks the graph and checks its structure; the
IR knows nothing of ops, so for each node it calls the check this module defines, which
`ge_hub.ops` installs there when it is imported.
"""

from __future__ import annotations

from collections.abc import Callable

from ge_hub import registry as _registry
from ge_hub.errors import GraphError, OpError
from ge_hub.ir.graph import Node
from ge_hub.ir.verifier import node_label, types_compatible
from ge_hub.ops.schema import OpSchema


def _registered(name: str, domain: str) -> OpSchema:
    return _registry.get_registry().get_op(name, domain)


def check_node(node: Node, where: str,
               schemas: Callable[[str, str], OpSchema] | None = None) -> None:
    """Check `node` against its op's schema: the op is registered (in `schemas(op,
    domain)`, default: the loaded plugins' registry), its attributes and input types fit,
    and its recorded output types agree with what the schema infers. Raise `GraphError`
    naming `where` (the graph) and the node."""
    if schemas is None:
        schemas = _registered
    label = node_label(node)
    try:
        schema = schemas(node.op, node.domain)
    except OpError as exc:
        raise GraphError(f"{where}: {label}: {exc}") from exc
    input_types = [None if v is None else v.type for v in node.inputs]
    consts = [None if v is None else v.const for v in node.inputs]
    try:
        inferred = schema.infer_types(input_types, dict(node.attrs), consts=consts,
                                      num_outputs=len(node.outputs), node_name=node.name)
    except OpError as exc:
        # Schema errors usually name the node already ("Relu (node 'r'): ...").
        text = str(exc)
        named = schema.describe(node.name) in text
        raise GraphError(f"{where}: {text}" if named else f"{where}: {label}: {text}") \
            from exc
    except Exception as exc:  # a bug in the op's inference still names the node
        raise GraphError(f"{where}: {label}: type inference of {schema.qualified_name} "
                         f"failed: {type(exc).__name__}: {exc}") from exc
    if len(node.outputs) > len(inferred):
        raise GraphError(f"{where}: {label} has {len(node.outputs)} outputs, but op "
                         f"{schema.qualified_name} gives {len(inferred)}")
    for index in range(len(node.outputs), len(inferred)):
        formal = schema.outputs[min(index, len(schema.outputs) - 1)] \
            if schema.outputs else None
        if formal is not None and not (formal.optional or formal.variadic):
            raise GraphError(f"{where}: {label} has {len(node.outputs)} outputs, but op "
                             f"{schema.qualified_name} requires output {index} "
                             f"({formal.name!r})")
    for index, (out, want) in enumerate(zip(node.outputs, inferred)):
        if not types_compatible(out.type, want):
            raise GraphError(f"{where}: {label} output {index} {out.name!r} is recorded "
                             f"as {out.type}, but op {schema.qualified_name} infers {want}")
