"""ge_hub.StridedMatMul's kernels: a MatMul whose operands and result are strided views
(what `fold_matmul_views` makes of a MatMul of two activations and the Transposes, Splits
and Reshapes around it), in bf16 (core/kernels/nn_gemm_bf16.c, ge_nn_matmul_strided_bf16)
for nodes the precision pass marked, else in fp32 (core/kernels/nn_matmul.c,
ge_nn_matmul_strided_f32, through the BLAS).

Both read one blob (nn.h, nn_strided_matmul_open): the batch shape, m, k, n and each
view's offset, batch strides, row and column strides; the bf16 one then its block. A's
rows and Y's must be contiguous, and B's rows or columns; the fp32 kernel also wants the
BLAS's leading dims (rows that do not overlap).
"""

from __future__ import annotations

import math

from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.nn_bf16 import (
    BF16,
    BF16_MR,
    BF16_NR,
    LINEAR_MAX_VALUES,
    LINEAR_SPECS,
    MATMUL_ACT_MAX_A,
    depth,
)
from ge_hub.kernels.nn_common import F32, all_static, filled_attrs
from ge_hub.ops.conv import FUSED_DOMAIN
from ge_hub.registry import KernelSpec

BF16_KERNEL = LINEAR_SPECS[4]  # "ge_nn_matmul_strided_bf16": precision_report reads it
F32_KERNEL = "ge_nn_matmul_strided_f32"
# Most batch dims the blob carries (GE_MAX_RANK in core/include/ge_hub/kernel.h).
MAX_BATCH = 8


def contiguous_strides(shape) -> list[int]:
    """The row-major strides (in values) of a contiguous tensor of `shape`."""
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def strided_layout(attrs: dict) -> dict | None:
    """The kernels' view of a StridedMatMul (attrs filled): the batch shape, m, k, n and
    each view's (offset, batch strides, row, col), Y's from out_perm over the contiguous
    output; None where they cannot read it (A's rows or Y's not contiguous, B's neither
    rows nor columns contiguous, too many batch dims). Strides of dims of size 1 are free:
    set to what the kernels want."""
    a_shape, b_shape = list(attrs["a_shape"]), list(attrs["b_shape"])
    rank = max(len(a_shape), len(b_shape))
    views = {}
    for which, shape in (("a", a_shape), ("b", b_shape)):
        strides = [0] * (rank - len(shape)) + list(attrs[f"{which}_strides"])
        shape = [1] * (rank - len(shape)) + shape
        views[which] = (shape, [0 if d == 1 else st for d, st in zip(shape, strides)])
    batch = [max(x, y) for x, y in zip(views["a"][0][:-2], views["b"][0][:-2])]
    if len(batch) > MAX_BATCH:
        return None
    (a_dims, a_strides), (b_dims, b_strides) = views["a"], views["b"]
    m, k, n = a_dims[-2], a_dims[-1], b_dims[-1]
    a_row, a_col = a_strides[-2], 1 if k == 1 else a_strides[-1]
    b_row, b_col = b_strides[-2], b_strides[-1]
    if n == 1:
        b_col = 1
    elif k == 1:
        b_row = 1
    if a_col != 1 or 1 not in (b_row, b_col):
        return None
    out = [*batch, m, n]
    perm = list(attrs["out_perm"]) or list(range(rank))
    contiguous = contiguous_strides([out[p] for p in perm])
    c_strides = [contiguous[perm.index(e)] for e in range(rank)]
    if n > 1 and c_strides[-1] != 1:
        return None
    return {"batch": batch, "m": m, "k": k, "n": n,
            "a": (attrs["a_offset"], a_strides[:-2], a_row, a_col),
            "b": (attrs["b_offset"], b_strides[:-2], b_row, b_col),
            "c": (0, [0 if d == 1 else st for d, st in zip(batch, c_strides[:-2])],
                  c_strides[-2] if m > 1 else 0, 1)}


def _blob_values(layout: dict) -> list[int]:
    values = [len(layout["batch"]), *layout["batch"], layout["m"], layout["k"], layout["n"]]
    for which in ("a", "b", "c"):
        offset, batch_strides, row, col = layout[which]
        values += [offset, *batch_strides, row, col]
    return values


def supports_bf16(node, input_types, output_types) -> bool:
    if node.meta.get("precision") != BF16 or not all_static(input_types[:2]):
        return False
    layout = strided_layout(filled_attrs(node))
    return layout is not None and \
        -(-layout["m"] // BF16_MR) * BF16_MR * depth(layout["k"]) <= MATMUL_ACT_MAX_A


def pack_bf16(node, input_types, output_types) -> Packed:
    """The bf16 kernel's blob and scratch (A's rounded rows, then B's panels, as
    ge_nn_matmul_act_bf16's)."""
    layout = strided_layout(filled_attrs(node))
    m, k, n = layout["m"], layout["k"], layout["n"]
    kp = depth(k)
    block = BF16_NR * min(-(-n // BF16_NR), max(1, LINEAR_MAX_VALUES // (kp * BF16_NR)))
    scratch = (-(-m // BF16_MR) * BF16_MR * kp + block * kp) * 2
    return Packed(pack_values([*_blob_values(layout), block]), scratch_bytes=scratch)


def _blas_layout(node) -> dict | None:
    """The layout where the BLAS takes its leading dims (rows that do not overlap)."""
    layout = strided_layout(filled_attrs(node))
    if layout is None:
        return None
    m, k, n = layout["m"], layout["k"], layout["n"]
    _, _, a_row, _ = layout["a"]
    _, _, b_row, b_col = layout["b"]
    transposed = b_col != 1
    ldb = (b_col if n > 1 else k) if transposed else (b_row if k > 1 else n)
    lda, ldc = a_row if m > 1 else k, layout["c"][2] if m > 1 else n
    if lda < k or ldc < n or ldb < (k if transposed else n):
        return None
    return layout


def supports_f32(node, input_types, output_types) -> bool:
    return node.meta.get("precision") != BF16 and all_static(input_types[:2]) \
        and _blas_layout(node) is not None


def pack_f32(node, input_types, output_types) -> Packed:
    return Packed(pack_values(_blob_values(_blas_layout(node))))


def supports(node, input_types) -> bool:
    """Whether the kernel a StridedMatMul node would get (by its precision mark) takes it:
    what fold_matmul_views asks before it folds."""
    check = supports_bf16 if node.meta.get("precision") == BF16 else supports_f32
    return check(node, input_types, None)


KERNELS = [
    KernelSpec(op="StridedMatMul", domain=FUSED_DOMAIN, name=BF16_KERNEL, dtypes=(F32, F32),
               priority=1, impl=CKernel(BF16_KERNEL, pack=pack_bf16, supports=supports_bf16)),
    KernelSpec(op="StridedMatMul", domain=FUSED_DOMAIN, name=F32_KERNEL, dtypes=(F32, F32),
               impl=CKernel(F32_KERNEL, pack=pack_f32, supports=supports_f32)),
]
