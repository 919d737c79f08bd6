"""Einsum's C kernel (core/kernels/reduce_einsum.c): the equation lowered at compile time.

Every operand becomes a set of labels with element strides (a label repeated in one
operand, a diagonal, adds its strides; a broadcast size-1 dim has stride 0), and the
equation becomes one of two programs, both plain ints in the blob:

- GEMM: two operands whose labels are batch (both operands and the output), M (the
  first and the output), N (the second and the output) or K (both, summed) become one
  batched `ge_sgemm`. An operand or the output whose group of labels cannot be walked as
  a matrix with a leading dimension gets a strided copy into scratch, in the canonical
  [batch, M, K] / [batch, K, N] / [batch, M, N] order; an output whose M dim is the
  contiguous one is computed transposed (C^T = B^T A^T) rather than copied.
- generic: any other equation (one or three operands, diagonals, labels summed out of a
  single operand, tiny products) runs a contraction loop: for every output element, the
  sum over the summed labels of the operands' product, accumulated in double.

Adjacent dims that every operand walks alike are merged in both programs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.reduce import contiguous_strides
from ge_hub.ops.reduce import parse_einsum
from ge_hub.registry import KernelSpec

# EINSUM_MAX_DIMS and EINSUM_MAX_OPERANDS in core/kernels/reduce_einsum.c.
MAX_DIMS = 16
MAX_OPERANDS = 8
# Products smaller than this (m * n * k per batch) run in the generic loop: a BLAS call
# costs more than it saves.
MIN_GEMM_WORK = 2048
# Scratch regions start on 64-byte boundaries (16 floats).
_ALIGN = 16

GENERIC, GEMM = 0, 1
# Buffers a GEMM program names: the two operands, the step's scratch, the output.
INPUT_A, INPUT_B, SCRATCH, OUTPUT = 0, 1, 2, 3


class EinsumLoweringError(ValueError):
    """The equation does not fit the C kernel's limits; the node falls back."""


def _fail(message: str):
    raise EinsumLoweringError(message)


def label_strides(equation: str, shapes: Sequence[Sequence[int]]):
    """Per operand {label: stride}, the size of every label, and the output labels.

    The '...' dims become labels '...0', '...1' (aligned at the right, like NumPy).
    Dims of size 1 are left out: they walk nowhere.
    """
    parsed = parse_einsum(equation, _fail)
    ellipsis_rank = max((len(shape) - len(term) + 1 for term, shape
                         in zip(parsed.operands, shapes) if "..." in term), default=0)

    def expand(term: Sequence[str], rank: int) -> list[str]:
        if "..." not in term:
            return list(term)
        at = term.index("...")
        count = rank - (len(term) - 1)
        dots = [f"...{ellipsis_rank - count + i}" for i in range(count)]
        return [*term[:at], *dots, *term[at + 1:]]

    sizes: dict[str, int] = {}
    operands: list[dict[str, int]] = []
    for term, shape in zip(parsed.operands, shapes):
        strides: dict[str, int] = {}
        for label, dim, stride in zip(expand(term, len(shape)), shape,
                                      contiguous_strides(shape)):
            sizes.setdefault(label, 1)
            if dim != 1:
                sizes[label] = dim
                strides[label] = strides.get(label, 0) + stride
        operands.append(strides)
    output = expand(parsed.output, ellipsis_rank + len(parsed.output) - 1
                    if "..." in parsed.output else len(parsed.output))
    return operands, sizes, output


def _merge(shape: list[int], stride_sets: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dims that every stride set walks as one dim."""
    merged_shape: list[int] = []
    merged = [[] for _ in stride_sets]
    for d, size in enumerate(shape):
        if merged_shape and all(m[-1] == s[d] * size for s, m in zip(stride_sets, merged)):
            merged_shape[-1] *= size
            for s, m in zip(stride_sets, merged):
                m[-1] = s[d]
            continue
        merged_shape.append(size)
        for s, m in zip(stride_sets, merged):
            m.append(s[d])
    return merged_shape, merged


def _check_dims(count: int, what: str) -> None:
    if count > MAX_DIMS:
        _fail(f"{what} has {count} dims, more than the C kernel's {MAX_DIMS}")


# --- the generic contraction -----------------------------------------------------------


def generic_ints(operands, sizes, output) -> list[int]:
    # Size-0 labels stay: they empty the output or the sum.
    out_labels = [label for label in output if sizes.get(label, 1) != 1]
    out_strides = contiguous_strides([sizes[label] for label in out_labels])
    summed = [label for label in sizes if sizes[label] != 1 and label not in output]
    out_shape, merged_out = _merge([sizes[label] for label in out_labels],
                                   [out_strides] + [[op.get(label, 0) for label in out_labels]
                                                    for op in operands])
    sum_shape, merged_sum = _merge([sizes[label] for label in summed],
                                   [[op.get(label, 0) for label in summed] for op in operands])
    _check_dims(len(out_shape), "the output")
    _check_dims(len(sum_shape), "the summed labels")
    ints = [GENERIC, len(operands), len(out_shape), *out_shape, len(sum_shape), *sum_shape]
    for i in range(len(operands)):
        ints += merged_out[i + 1] + merged_sum[i]
    return ints


# --- the GEMM program ------------------------------------------------------------------


def _group_stride(labels: Sequence[str], sizes, strides) -> int | None:
    """The stride of a group of labels walked as one dim, or None when it cannot be."""
    for outer, inner in zip(labels, labels[1:]):
        if strides.get(outer, 0) != strides.get(inner, 0) * sizes[inner]:
            return None
    return strides.get(labels[-1], 0) if labels else 0


def matrix_layout(rows: int, row_stride: int | None, cols: int, col_stride: int | None):
    """(transposed, leading dim) of a rows x cols matrix whose element (i, j) sits at
    i * row_stride + j * col_stride, as BLAS takes it; None if BLAS cannot walk it.
    A stride of a size-1 side does not matter (None there is fine)."""
    if cols == 1 or col_stride == 1:
        ld = row_stride if rows > 1 else max(cols, 1)
        if ld is not None and ld >= max(cols, 1):
            return 0, ld
    if rows == 1 or row_stride == 1:
        ld = col_stride if cols > 1 else max(rows, 1)
        if ld is not None and ld >= max(rows, 1):
            return 1, ld
    return None


class _Scratch:
    """Float offsets of scratch regions, each 64-byte aligned."""

    def __init__(self) -> None:
        self.floats = 0

    def take(self, count: int) -> int:
        offset = self.floats
        self.floats += -(-count // _ALIGN) * _ALIGN
        return offset


def _copy_ints(src: int, src_offset: int, dst: int, dst_offset: int, shape: list[int],
               src_strides: list[int], dst_strides: list[int]) -> list[int]:
    shape, (src_strides, dst_strides) = _merge(shape, [src_strides, dst_strides])
    _check_dims(len(shape), "a copy")
    return [src, src_offset, dst, dst_offset, len(shape), *shape, *src_strides, *dst_strides]


def _operand(buffer: int, strides: dict[str, int], batch: list[str], rows: list[str],
             cols: list[str], sizes, scratch: _Scratch, pre: list[list[int]]):
    """(buffer, offset, transposed, ld, batch strides) of a GEMM operand whose matrix is
    rows x cols; copies it into scratch first when BLAS cannot walk it in place."""
    m = math.prod(sizes[label] for label in rows)
    n = math.prod(sizes[label] for label in cols)
    layout = matrix_layout(m, _group_stride(rows, sizes, strides), n,
                           _group_stride(cols, sizes, strides))
    if layout is not None:
        return buffer, 0, *layout, [strides.get(label, 0) for label in batch]
    # The canonical copy: [batch dims the operand varies along, rows, cols], contiguous.
    own_batch = [label for label in batch if strides.get(label, 0) != 0]
    labels = own_batch + list(rows) + list(cols)
    shape = [sizes[label] for label in labels]
    canonical = dict(zip(labels, contiguous_strides(shape)))
    offset = scratch.take(math.prod(shape))
    pre.append(_copy_ints(buffer, 0, SCRATCH, offset, shape,
                          [strides.get(label, 0) for label in labels],
                          [canonical[label] for label in labels]))
    return SCRATCH, offset, 0, max(n, 1), [canonical.get(label, 0) for label in batch]


def gemm_ints(operands, sizes, output) -> tuple[list[int], int] | None:
    """The GEMM program and its scratch floats, or None when the equation is no GEMM."""
    if len(operands) != 2 or any(size == 0 for size in sizes.values()):
        return None
    a, b = operands
    live = [label for label in sizes if sizes[label] > 1]
    batch = [label for label in output if label in a and label in b and sizes[label] > 1]
    rows = [label for label in output if label in a and label not in b and sizes[label] > 1]
    cols = [label for label in output if label in b and label not in a and sizes[label] > 1]
    inner = [label for label in a if label in b and label not in output]
    if len(batch) + len(rows) + len(cols) + len(inner) != len(live):
        return None  # a label summed out of one operand only
    m, n, k = (math.prod(sizes[label] for label in group) for group in (rows, cols, inner))
    if m * n * k < MIN_GEMM_WORK:
        return None
    _check_dims(len(batch), "the batch")
    scratch, pre, post = _Scratch(), [], []
    x = _operand(INPUT_A, a, batch, rows, inner, sizes, scratch, pre)
    y = _operand(INPUT_B, b, batch, inner, cols, sizes, scratch, pre)

    out_labels = [label for label in output if sizes.get(label, 1) > 1]
    out = dict(zip(out_labels, contiguous_strides([sizes[label] for label in out_labels])))
    layout = matrix_layout(m, _group_stride(rows, sizes, out), n, _group_stride(cols, sizes, out))
    if layout is None:
        labels = batch + rows + cols
        shape = [sizes[label] for label in labels]
        canonical = dict(zip(labels, contiguous_strides(shape)))
        offset = scratch.take(math.prod(shape))
        c = (SCRATCH, offset, max(n, 1), [canonical[label] for label in batch])
        post.append(_copy_ints(SCRATCH, offset, OUTPUT, 0, shape,
                               [canonical[label] for label in labels],
                               [out[label] for label in labels]))
        swap = False
    else:
        swap, ldc = layout
        c = (OUTPUT, 0, ldc, [out[label] for label in batch])
    if swap:
        # C^T = op(B)^T op(A)^T: the operands trade places, each transposed once more.
        (x, y), (m, n) = (y, x), (n, m)
        x = (x[0], x[1], 1 - x[2], *x[3:])
        y = (y[0], y[1], 1 - y[2], *y[3:])

    batch_shape, merged = _merge([sizes[label] for label in batch], [x[4], y[4], c[3]])
    ints = [GEMM, len(pre)]
    for copy in pre:
        ints += copy
    ints += [len(batch_shape), *batch_shape, m, n, k]
    for buffer, offset, transposed, ld, _ in (x, y):
        ints += [buffer, offset, transposed, ld]
    ints += [c[0], c[1], c[2], *merged[0], *merged[1], *merged[2], len(post)]
    for copy in post:
        ints += copy
    return ints, scratch.floats


# --- the registration ------------------------------------------------------------------


def lower_einsum(node: Node, input_types, output_types) -> Packed:
    """Blob: the GEMM program if the equation is one, else the generic contraction."""
    if len(input_types) > MAX_OPERANDS:
        _fail(f"{len(input_types)} operands, more than the C kernel's {MAX_OPERANDS}")
    operands, sizes, output = label_strides(node.attrs["equation"],
                                            [t.shape for t in input_types])
    gemm = gemm_ints(operands, sizes, output)
    if gemm is not None:
        ints, scratch_floats = gemm
        return Packed(pack_values(ints), scratch_bytes=4 * scratch_floats)
    return Packed(pack_values(generic_ints(operands, sizes, output)))


def supports_einsum(node: Node, input_types, output_types) -> bool:
    """Static shapes within the kernel's dim and operand limits."""
    if not all(t is not None and t.is_static for t in [*input_types, *output_types]):
        return False
    try:
        lower_einsum(node, input_types, output_types)
    except EinsumLoweringError:
        return False
    return True


KERNELS = [
    KernelSpec(op="Einsum", name="einsum_f32", dtypes=(DType.FLOAT32,),
               impl=CKernel("ge_einsum_f32", pack=lower_einsum, supports=supports_einsum)),
]
