"""Pick, for each node, the best registered kernel for its op, device and dtypes.

Candidates are the registry's kernels for the node's op on the device, whose declared
input dtypes match the node's (None matches any) and whose `supports` check accepts
the node; the highest priority wins. Ops that only reinterpret their input's memory
(Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout) get no kernel: the
memory planner makes their output a view. A node with no C kernel falls back to its
op's NumPy reference, run as a Python kernel, and is counted, never silently.

The choice is recorded on the node: `node.meta["kernel"]` (a KernelSpec, or None for a
view) and `node.meta["view_of"]` (the input index a view aliases).
"""

from __future__ import annotations

from ge_hub.ir.graph import Graph, Node
from ge_hub.kernels.base import CKernel, PyKernel
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext
from ge_hub.plan import FALLBACK_PREFIX
from ge_hub.plugins import get_registry
from ge_hub.registry import KernelSpec, Registry

# Ops whose single output is their first input's bytes under another shape.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


def is_view(node: Node) -> bool:
    return (not node.domain and node.op in VIEW_OPS and len(node.outputs) == 1
            and node.inputs[0] is not None
            and node.inputs[0].type.dtype == node.outputs[0].type.dtype)


def _matches(kernel: KernelSpec, node: Node) -> bool:
    if kernel.dtypes is not None:
        got = tuple(v.type.dtype if v is not None else None for v in node.inputs)
        want = tuple(kernel.dtypes)
        if len(want) < len(got):
            got = got[: len(want)]  # trailing optional inputs beyond the declared ones
        if any(w is not None and g is not None and w != g for w, g in zip(want, got)):
            return False
        if len(got) < len(want) and any(w is not None for w in want[len(got):]):
            return False
    impl = kernel.impl
    if isinstance(impl, CKernel) and impl.supports is not None:
        in_types = [None if v is None else v.type for v in node.inputs]
        out_types = [v.type for v in node.outputs]
        return bool(impl.supports(node, in_types, out_types))
    return True


def choose_kernel(node: Node, device: str = "cpu", registry: Registry | None = None) -> KernelSpec:
    registry = registry if registry is not None else get_registry()
    for kernel in registry.kernels(node.op, node.domain):
        if kernel.device == device and _matches(kernel, node):
            return kernel
    schema = registry.get_op(node.op, node.domain)
    return KernelSpec(op=node.op, domain=node.domain, device=device,
                      impl=PyKernel(schema.reference), priority=-1,
                      name=FALLBACK_PREFIX + schema.qualified_name)


def is_fallback(kernel: KernelSpec | None) -> bool:
    return kernel is not None and kernel.name.startswith(FALLBACK_PREFIX)


def select_kernels(graph: Graph, device: str = "cpu", ctx: PassContext | None = None) -> PassResult:
    """Choose every node's kernel from the context's registry (the global one without)."""
    registry = ctx.registry if ctx is not None else None
    if ctx is not None:
        device = ctx.device
    for node in graph.nodes:
        if is_view(node):
            node.meta["kernel"] = None
            node.meta["view_of"] = 0
        else:
            node.meta["kernel"] = choose_kernel(node, device, registry)
            node.meta.pop("view_of", None)
    return PassResult(graph, False)
