"""Indexing ATen ops: embedding, index_select, gather and advanced indexing (`index`).

`aten.index.Tensor` is NumPy-style advanced indexing with a list of index tensors, one
per leading dim (None for a dim taken whole). A single index tensor is a Gather along
its dim. Several are broadcast together and stacked for a GatherND over the indexed
dims moved to the front; the result's indexed block then moves back to where the first
indexed dim was when the indexed dims are adjacent, which is where PyTorch puts it.
Boolean masks select a data-dependent number of elements and are left to PyTorch.
"""

from __future__ import annotations

import torch
from ge_hub.plugin import DType

from ge_torch import symbolic
from ge_torch.context import ConvertContext, rank
from ge_torch.converters import converter

aten = torch.ops.aten


@converter(aten.embedding.default)
def embedding(cx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False,
              sparse=False):
    # padding_idx only changes the gradient.
    return cx.op("Gather", weight, indices, axis=0)


@converter(aten.index_select.default)
def index_select(cx, node, x, dim, index):
    axis = dim % max(rank(x), 1)
    if rank(x) == 0:
        return cx.op("Reshape", cx.op("Gather", cx.op("Reshape", x, cx.ints([1])), index,
                                      axis=0), cx.ints([]))
    return cx.op("Gather", x, index, axis=axis)


@converter(aten.gather.default)
def gather(cx, node, x, dim, index, *, sparse_grad=False):
    return cx.op("GatherElements", x, index, axis=dim % max(rank(x), 1))


def _no_masks(node) -> str | None:
    for index in node.args[1]:
        val = None if index is None else index.meta.get("val")
        if val is not None and val.dtype in (torch.bool, torch.uint8):
            return "indexing with a boolean mask (its result size depends on the data)"
    return None


@converter(aten.index.Tensor, check=_no_masks)
def index(cx, node, x, indices):
    positions = [i for i, t in enumerate(indices) if t is not None]
    if not positions:
        return cx.op("Identity", x)
    if len(positions) == 1:
        return cx.op("Gather", x, indices[positions[0]], axis=positions[0])
    return _gather_nd(cx, node, x, indices, positions)


def _gather_nd(cx: ConvertContext, node, x, indices, positions: list[int]):
    n = rank(x)
    in_sizes = [symbolic.as_expr(s) for s in cx.meta(node.args[0]).shape]
    rest = [i for i in range(n) if i not in positions]
    front = cx.op("Transpose", x, perm=positions + rest) if positions != list(range(
        len(positions))) else x
    raw = [node.args[1][p] for p in positions]
    common = torch.broadcast_shapes(*(cx.meta(r).shape for r in raw))
    target = cx.shape(list(common))
    columns = []
    for p in positions:
        idx = cx.cast(indices[p], DType.INT64)
        # Negative indices count from the end, which GatherND leaves to the caller.
        size = cx.scalar(in_sizes[p], DType.INT64)
        zero = cx.scalar(0, DType.INT64)
        idx = cx.op("Where", cx.op("Less", idx, zero), cx.op("Add", idx, size), idx)
        idx = cx.op("Expand", idx, target)
        columns.append(cx.op("Unsqueeze", idx, cx.ints([-1])))
    stacked = cx.op("Concat", *columns, axis=-1)
    gathered = cx.op("GatherND", front, stacked)
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    if not adjacent or positions[0] == 0:
        return gathered  # the indexed block leads, as PyTorch puts it
    block = len(common)
    # Move the leading block of broadcast index dims back after the dims before it.
    lead = list(range(block, block + positions[0]))
    perm = lead + list(range(block)) + list(range(block + positions[0], block + len(rest)))
    return cx.op("Transpose", gathered, perm=perm)
