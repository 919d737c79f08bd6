"""Fuse chains and trees of float32 elementwise ops into one `ge_hub.FusedElementwise`
step (the `fuse_elementwise` pass), whose kernel evaluates the whole expression per tile
of the output (core/kernels/elementwise_fused.c): no intermediate tensor is written.

A group is a maximal connected set of fusable nodes (ge_hub.ops.elementwise_fused.OPS:
Add, Sub, Mul, Div, two-input Max and Min, Neg, Abs, Relu, Sigmoid, Tanh, Exp, Log, Sqrt,
Reciprocal, Erf, Clip with constant single-value bounds, LeakyRelu, HardSigmoid, Pow with
a constant single-value exponent), all float32, in which

  * every intermediate value is read only by nodes of the group and is no graph output
    (only the group's last value leaves it), and has the output's static shape;
  * every value read from outside (graph inputs, constants, other steps' outputs) is
    float32 with a static shape that broadcasts to the output's one way (NumPy rules, no
    dim growing the output): same shape, a single value, per channel, per row...;
  * it has at least two nodes, and fits the kernel (16 inputs, 12 tile buffers);
  * no node's op has a kernel that outranks the built-in one (a plugin's: it keeps
    running the op).

A diamond (two branches reading one intermediate and joining again) is one group: the
program is SSA, so the shared value is computed once per tile. The pass runs last in the
`fuse` stage (ge_hub.compiler.RUN_LAST), after the other fusions, plugins' included, so it
only takes the elementwise ops they left; switch it off with
`disable_passes=["fuse_elementwise"]`.
Integer and float64 ops are left alone (the kernel is float32 only).

First, an inference BatchNormalization with constant statistics next to a fusable node
becomes Mul + Add by per-channel constants (ge_hub.passes.batch_norm_affine, recorded as
the rule `fuse_elementwise.batch_norm`), so it joins that node's group: DenseNet's
BN -> Mul -> Add -> Relu runs as one step.
"""

from __future__ import annotations

import math

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.ir.types import TensorType
from ge_hub.kernels.elementwise_fused import (
    MAX_BUFFERS,
    MAX_INSTRUCTIONS,
    MAX_OPERANDS,
    allocate_buffers,
)
from ge_hub.ops import get_schema
from ge_hub.ops.elementwise_fused import BINARY_OPS, OPS
from ge_hub.ops.norm import FUSED_DOMAIN
from ge_hub.passes import PassResult
from ge_hub.passes.batch_norm_affine import lower_batch_norms
from ge_hub.passes.context import PassContext

NAME = "fuse_elementwise"
BATCH_NORM_RULE = f"{NAME}.batch_norm"


def _single(value: Value | None) -> float | None:
    """The one float32 value of a constant, or None."""
    if value is None or not value.is_constant or value.const.size != 1:
        return None
    if value.const.dtype != np.float32:
        return None
    return float(value.const.reshape(-1)[0])


def _operation(node: Node) -> tuple[list[Value], tuple[float, float]] | None:
    """The data inputs and the two params of a fusable node, or None."""
    if node.domain != "" or node.op not in OPS or len(node.outputs) != 1:
        return None
    out = node.outputs[0].type
    if out.dtype is not DType.FLOAT32 or not out.is_static:
        return None
    inputs = node.inputs
    if node.op in BINARY_OPS:
        if len(inputs) != 2 or any(v is None for v in inputs):
            return None
        data, params = list(inputs), (0.0, 0.0)
    elif node.op == "Clip":
        bounds = [inputs[i] if len(inputs) > i else None for i in (1, 2)]
        values = [_single(b) for b in bounds]
        if any(b is not None and v is None for b, v in zip(bounds, values)):
            return None
        low = -math.inf if values[0] is None else values[0]
        high = math.inf if values[1] is None else values[1]
        data, params = [inputs[0]], (low, high)
    elif node.op == "Pow":
        exponent = _single(inputs[1]) if len(inputs) == 2 else None
        if exponent is None:
            return None
        data, params = [inputs[0]], (exponent, 0.0)
    else:
        if len(inputs) != 1 or inputs[0] is None:
            return None
        attrs = get_schema(node.op).fill_attrs(dict(node.attrs), node.name)
        params = (float(attrs.get("alpha", 0.0)), float(attrs.get("beta", 0.0)))
        data = [inputs[0]]
    if any(v.type.dtype is not DType.FLOAT32 or not v.type.is_static for v in data):
        return None
    return data, params


def _broadcasts_to(shape, out) -> bool:
    if len(shape) > len(out):
        return False
    return all(d == o or d == 1 for d, o in zip(reversed(shape), reversed(out)))


def _grow(root: Node, fusable: dict[int, tuple], taken: set[int], graph_outputs: set[int]):
    """The largest group ending at `root` (in graph order is not promised)."""
    group = {id(root): root}
    shape = root.outputs[0].type.shape
    changed = True
    while changed:
        changed = False
        for node in list(group.values()):
            for value in fusable[id(node)][0]:
                producer = value.producer
                if (producer is None or id(producer) in group or id(producer) in taken
                        or id(producer) not in fusable or id(value) in graph_outputs
                        or value.type.shape != shape
                        or any(id(user) not in group for user in value.users)):
                    continue
                group[id(producer)] = producer
                changed = True
    return group


def _program(members: list[Node], fusable: dict[int, tuple]):
    """(leaf values, ops, program, params) of a group in graph order."""
    leaves: list[Value] = []
    register: dict[int, int] = {}
    inside = {id(n.outputs[0]) for n in members}
    for node in members:
        for value in fusable[id(node)][0]:
            if id(value) not in inside and id(value) not in register:
                register[id(value)] = len(leaves)
                leaves.append(value)
    ops, program, params = [], [], []
    for i, node in enumerate(members):
        data, (p0, p1) = fusable[id(node)]
        reads = [register[id(v)] for v in data] + [-1] * (2 - len(data))
        ops.append(node.op)
        program += reads
        params += [p0, p1]
        register[id(node.outputs[0])] = len(leaves) + i
    return leaves, ops, program, params


def _fits(leaves: list[Value], program: list[int], out_shape) -> str | None:
    if len(leaves) > MAX_OPERANDS:
        return f"{len(leaves)} inputs, the kernel takes {MAX_OPERANDS}"
    if len(program) // 2 > MAX_INSTRUCTIONS:
        return f"{len(program) // 2} ops, the kernel takes {MAX_INSTRUCTIONS}"
    for value in leaves:
        if not _broadcasts_to(value.type.shape, out_shape):
            return f"input {value.name!r} {value.type} does not broadcast to {list(out_shape)}"
    _, used = allocate_buffers(program, len(leaves))
    if used > MAX_BUFFERS:
        return f"{used} live intermediates, the kernel has {MAX_BUFFERS} tile buffers"
    return None


def _overridden(ctx: PassContext | None) -> set[str]:
    """The ops some float32 kernel outranks the built-in one for (a plugin's, or one added
    at run time): they keep that kernel."""
    if ctx is None:
        return set()
    from ge_hub.kernels import builtin_kernels

    own = {k.name for k in builtin_kernels()}
    found = set()
    for op in (*OPS, "BatchNormalization"):
        kernels = [k for k in ctx.registry.kernels(op)
                   if k.dtypes is None or k.dtypes[:1] == (DType.FLOAT32,)]
        builtin = max((k.priority for k in kernels if k.name in own), default=0)
        if any(k.priority > builtin for k in kernels if k.name not in own):
            found.add(op)
    return found


def fuse_elementwise(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    """Replace each fusable group (see the module docstring) by one FusedElementwise."""
    overridden = _overridden(ctx)
    lowered = []
    if "BatchNormalization" not in overridden:
        lowered = lower_batch_norms(
            graph, lambda n: n.op not in overridden and _operation(n) is not None)
        for name in lowered if ctx is not None else ():
            ctx.record(BATCH_NORM_RULE, "fired", (name,))
    fusable = {}
    for node in graph.nodes:
        if node.op in overridden:
            continue
        operation = _operation(node)
        if operation is not None:
            fusable[id(node)] = operation
    graph_outputs = {id(v) for v in graph.outputs}
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    taken: set[int] = set()
    groups = []
    for root in reversed(graph.nodes):  # sinks first: each group is as large as it gets
        if id(root) not in fusable or id(root) in taken:
            continue
        group = _grow(root, fusable, taken, graph_outputs)
        if len(group) < 2:
            continue
        members = sorted(group.values(), key=lambda n: order[id(n)])
        leaves, ops, program, params = _program(members, fusable)
        why = _fits(leaves, program, root.outputs[0].type.shape)
        if why is not None:
            if ctx is not None:
                ctx.record(NAME, "refused", tuple(n.name for n in members), why)
            continue
        taken.update(group)
        groups.append((root, members, leaves, ops, program, params))
    for root, members, leaves, ops, program, params in groups:
        out = root.outputs[0]
        fused = graph.add_node("FusedElementwise", leaves,
                               [TensorType(DType.FLOAT32, out.type.shape)],
                               {"ops": ops, "program": program, "params": params},
                               domain=FUSED_DOMAIN, before=root)
        graph.replace_all_uses(out, fused.outputs[0])
        # The result keeps its name (a graph output's name is its interface).
        name = out.name
        out.name = graph.unique_name(f"{name}_replaced")
        fused.outputs[0].name = name
        for node in reversed(members):
            graph.remove_node(node)
        if ctx is not None:
            ctx.record(NAME, "fired", tuple(n.name for n in members))
    graph.remove_unused_constants()
    return PassResult(graph, bool(groups or lowered))
