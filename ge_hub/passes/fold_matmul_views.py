"""Fold the data movement around a MatMul of two activations into how it reads and
writes (the `fold_matmul_views` pass):

    MatMul(chain_a(X), chain_b(Z))  ->  StridedMatMul(X, Z, a view, b view)
    Transpose(MatMul(...))          ->  StridedMatMul(..., out_perm)

where a chain is Transposes, Splits and Reshapes (Squeeze, Unsqueeze, Flatten, Identity)
back from the operand to the step that computed it. That is how exporters write attention
around its two products: a fused QKV projection reshaped to [B, S, 3, H, D], transposed to
[3, B, H, S, D] and split into Q, K and V; K transposed again into K^T; the context
transposed back to [B, S, H, D] for the output projection. Each of those runs as a step
that copies the tensor (on the bench's 4-layer encoder, 2.8% of a bf16 run at one thread
and 8% at two, where each copy also moves data between the cores). The fused node reads
Q, K and V where the projection wrote them, and writes the context where the merge wants
it (ge_hub.kernels.nn_strided: in bf16 where the precision pass marked the MatMul, else
in fp32 through the BLAS; either gives the bits of the steps it replaces).

A chain folds as far back as its ops compose into one strided view of their first input:
each op is applied to the view's (offset, shape, strides), a Reshape where NumPy would
reshape without a copy. A's rows must come out contiguous, and B's rows or columns (K^T
is K's rows); a MatMul folds only where its kernel takes the views, so the pass runs
after `assign_precision`, whose mark picks the kernel. A bf16 MatMul whose batch dims
broadcast only in part becomes a StridedMatMul even without a chain: its broadcast dims
are strides of 0 there, and the plain bf16 kernel does not take it. The node keeps its name, its
precision mark and (without an output Transpose) its output; chain steps left without
readers are removed.
"""

from __future__ import annotations

from types import SimpleNamespace

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.kernels import nn_strided
from ge_hub.kernels.nn_bf16 import BF16, supports_matmul_act
from ge_hub.kernels.nn_common import filled_attrs
from ge_hub.kernels.nn_strided import contiguous_strides
from ge_hub.ops.nn import FUSED_DOMAIN
from ge_hub.passes import PassResult

NAME = "fold_matmul_views"
# Ops that only reshape: the view takes the output's shape.
RESHAPES = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
CHAIN_OPS = RESHAPES | {"Transpose", "Split"}


def reshaped(shape, strides, new_shape) -> list[int] | None:
    """The strides of `new_shape` over the same values as (shape, strides) in row-major
    order, or None where no strides can (NumPy's reshape without a copy): the old dims
    merged into each new one must be contiguous with each other."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new = list(new_shape)
    result = [0] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        old_size, new_size = old[oi][0], new[ni]
        while old_size != new_size:
            if new_size < old_size:
                new_size *= new[nj]
                nj += 1
            else:
                old_size *= old[oj][0]
                oj += 1
        for o in range(oi, oj - 1):
            if old[o][1] != old[o + 1][1] * old[o + 1][0]:
                return None
        result[nj - 1] = old[oj - 1][1]
        for d in range(nj - 1, ni, -1):
            result[d - 1] = result[d] * new[d]
        oi, ni = oj, nj
    return result


def _static_float(value) -> bool:
    t = value.type
    return t is not None and t.dtype is DType.FLOAT32 and t.shape is not None and t.is_static


def _apply(view, node, out_index: int):
    """The view after `node` (one of CHAIN_OPS) has been applied to it, or None."""
    offset, shape, strides = view
    out_shape = list(node.outputs[out_index].type.shape)
    if node.op in RESHAPES:
        new = reshaped(shape, strides, out_shape)
        return None if new is None else (offset, out_shape, new)
    attrs = filled_attrs(node)
    if node.op == "Transpose":
        perm = list(attrs.get("perm") or range(len(shape) - 1, -1, -1))
        return offset, [shape[p] for p in perm], [strides[p] for p in perm]
    axis = attrs["axis"] % len(shape)  # Split: output i starts after the ones before it
    start = sum(out.type.shape[axis] for out in node.outputs[:out_index])
    return offset + start * strides[axis], out_shape, list(strides)


def _chain(value):
    """(base, [(node, output index), ...] from the base to `value`): the longest chain of
    CHAIN_OPS producing `value` over static float32 tensors."""
    steps = []
    while value.producer is not None and value.producer.op in CHAIN_OPS \
            and value.producer.domain == "" and _static_float(value.producer.inputs[0]):
        steps.append((value.producer, value.index))
        value = value.producer.inputs[0]
    return value, steps[::-1]


def _fold(value, operand: str):
    """(base, (offset, shape, strides)) for an operand: the farthest base whose chain
    composes into a view the kernel reads (A: contiguous rows; B: contiguous rows or
    columns), else the operand itself, contiguous."""
    base, steps = _chain(value)
    for skip in range(len(steps) + 1):
        start = steps[skip - 1][0].outputs[steps[skip - 1][1]] if skip else base
        shape = list(start.type.shape)
        view = (0, shape, contiguous_strides(shape))
        for node, index in steps[skip:]:
            view = _apply(view, node, index)
            if view is None:
                break
        if view is None:
            continue
        _, dims, strides = view
        rows_ok = dims[-1] == 1 or strides[-1] == 1
        if rows_ok or (operand == "b" and (dims[-2] == 1 or strides[-2] == 1)):
            return start, view
    return value, None


def _moves_data(value, base) -> bool:
    """Whether the chain from `base` to `value` holds a step that copies (not a reshape)."""
    while value is not base:
        if value.producer.op not in RESHAPES:
            return True
        value = value.producer.inputs[0]
    return False


def _needs_views(node, a, b) -> bool:
    """A bf16 MatMul whose batch dims broadcast only in part, which the plain bf16 kernel
    (ge_nn_matmul_act_bf16: each operand's batch all or nothing) leaves to fp32: as a
    StridedMatMul each broadcast dim is a stride of 0 and it runs in bf16."""
    return node.meta.get("precision") == BF16 and \
        not supports_matmul_act(node, [a.type, b.type], None)


def _output_transpose(node):
    """The Transpose that alone reads `node`'s output, keeping the last axis last and not
    giving a graph output (whose name is the model's), or None."""
    out = node.outputs[0]
    if len(out.uses) != 1 or out in node.graph.outputs:
        return None
    reader = out.uses[0][0]
    if reader.op != "Transpose" or reader.domain != "" or reader.outputs[0] in node.graph.outputs:
        return None
    perm = list(filled_attrs(reader).get("perm") or [])
    if len(perm) < 2 or perm[-1] != len(perm) - 1:
        return None
    return reader


def _remove_unread(graph, nodes) -> None:
    """Remove the chain steps nothing reads any more (readers first)."""
    live = {id(v) for v in graph.outputs}
    changed = True
    while changed:
        changed = False
        for node in list(nodes):
            if node.graph is graph and not any(o.uses or id(o) in live for o in node.outputs):
                graph.remove_node(node)
                nodes.remove(node)
                changed = True


def _fold_one(graph, node) -> bool:
    """Make `node` (a MatMul marked bf16) a StridedMatMul in place (its name and output
    kept) where that moves no data any more; returns whether it did."""
    a, b = node.inputs
    if a is None or b is None or not (_static_float(a) and _static_float(b)):
        return False
    if a.type.rank < 2 or b.type.rank < 2 or a.is_constant or b.is_constant:
        return False
    a_base, a_view = _fold(a, "a")
    b_base, b_view = _fold(b, "b")
    transpose = _output_transpose(node)
    if not (transpose is not None or (a_view and _moves_data(a, a_base))
            or (b_view and _moves_data(b, b_base)) or _needs_views(node, a, b)):
        return False
    attrs = {}
    for which, value, view in (("a", a, a_view), ("b", b, b_view)):
        if view is None:
            shape = list(value.type.shape)
            view = (0, shape, contiguous_strides(shape))
        attrs.update({f"{which}_offset": view[0], f"{which}_shape": view[1],
                      f"{which}_strides": view[2]})
    if transpose is not None:
        attrs["out_perm"] = list(filled_attrs(transpose)["perm"])
    fused = SimpleNamespace(op="StridedMatMul", domain=FUSED_DOMAIN, attrs=attrs,
                            meta=dict(node.meta), name=node.name)
    out = (transpose or node).outputs[0]
    if not nn_strided.supports(fused, [a_base.type, b_base.type]):
        return False
    node.op, node.domain, node.attrs = fused.op, fused.domain, attrs
    node.set_input(0, a_base)
    node.set_input(1, b_base)
    if transpose is not None:
        node.outputs[0].type = TensorType(out.type.dtype, out.type.shape)
        graph.replace_all_uses(out, node.outputs[0])
        graph.remove_node(transpose)
        # the value now holds the Transpose's output, so it takes that name: `ge-hub
        # compare` matches values by name, and under the product's name it flagged the
        # heads' merge of attention as a shape mismatch
        node.outputs[0].name = out.name
    pending, chain = [], [v.producer for v in (a, b) if v.producer is not None]
    while chain:
        step = chain.pop()
        if step.op in CHAIN_OPS and step.domain == "" and step not in pending:
            pending.append(step)
            chain.extend(v.producer for v in step.inputs[:1]
                         if v is not None and v.producer is not None)
    _remove_unread(graph, pending)
    return True


def fold_matmul_views(graph, ctx=None) -> PassResult:
    changed = False
    for node in list(graph.nodes):
        if node.graph is graph and node.op == "MatMul" and node.domain == "" \
                and len(node.inputs) == 2:
            changed |= _fold_one(graph, node)
    return PassResult(graph, changed)
