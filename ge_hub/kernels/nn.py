"""The nn family's kernels (float32): MatMul, Gemm, Softmax and LogSoftmax; their C lives
in core/kernels/nn_matmul.c, nn_gemm_packed.c and nn_softmax.c.

Each packer resolves at compile time everything the C would otherwise work out per run:
GEMM shapes, broadcast strides, the softmax axis split. Blob layouts are documented at the
top of each C file, next to the code reading them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ge_hub.kernels.base import BlobRecord, Packed, pack_values
from ge_hub.kernels.nn_common import (
    F32,
    FLOAT_BYTES,
    SAME_AS_INPUT,
    all_static,
    c_kernel,
    filled_attrs,
    numel_of,
    supports_static,
)

# Softmax over a middle axis splits its work into at most this many scratch slots.
SOFTMAX_MAX_SLOTS = 16
# The fixed blobs, field for field as core/kernels/nn.h declares them.
GEMM_BLOB = BlobRecord("GE_GEMM_BLOB", ("m", "n", "k", "trans_a", "trans_b", "has_c",
                                        "c_row_stride", "c_col_stride"), ("alpha", "beta"))
SOFTMAX_BLOB = BlobRecord("GE_SOFTMAX_BLOB", ("outer", "length", "inner", "slots"))
SOFTMAX_SLOT_WORK = 16384

# -- MatMul and Gemm --------------------------------------------------------------------


def _contiguous_strides(shape: Sequence[int], unit: int) -> list[int]:
    strides, step = [], unit
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return strides[::-1]


def _batch_strides(batch: Sequence[int], own: Sequence[int], unit: int) -> list[int]:
    """Offsets (in elements) between consecutive matrices of an operand whose batch dims
    `own` broadcast to `batch`: contiguous strides, 0 along broadcast dims."""
    own = [1] * (len(batch) - len(own)) + list(own)
    strides = _contiguous_strides(own, unit)
    return [0 if d == 1 else s for d, s in zip(own, strides)]


def _collapse(shape: list[int], *strides: list[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every operand walks contiguously."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    shape = [shape[i] for i in keep]
    strides = [[s[i] for i in keep] for s in strides]
    i = len(shape) - 2
    while i >= 0:
        if all(s[i] == s[i + 1] * shape[i + 1] for s in strides):
            shape[i:i + 2] = [shape[i] * shape[i + 1]]
            for s in strides:
                s[i:i + 2] = [s[i + 1]]
        i -= 1
    return shape, strides


def pack_matmul(node, input_types, output_types) -> Packed:
    a, b = input_types[0].shape, input_types[1].shape
    a = (1, *a) if len(a) == 1 else tuple(a)
    b = (*b, 1) if len(b) == 1 else tuple(b)
    m, k, n = a[-2], a[-1], b[-1]
    batch = list(np.broadcast_shapes(a[:-2], b[:-2]))
    shape, (a_strides, b_strides) = _collapse(
        batch, _batch_strides(batch, a[:-2], m * k), _batch_strides(batch, b[:-2], k * n))
    if len(shape) == 1 and b_strides[0] == 0 and a_strides[0] == m * k:
        # B is shared by every batch and A's matrices are back to back: one tall GEMM.
        m, shape, a_strides, b_strides = m * shape[0], [], [], []
    return Packed(pack_values([m, n, k, len(shape), *shape, *a_strides, *b_strides]))


def pack_gemm(node, input_types, output_types) -> Packed:
    attrs = filled_attrs(node)
    a, b = input_types[0].shape, input_types[1].shape
    trans_a, trans_b = int(attrs["transA"]), int(attrs["transB"])
    m, k = (a[1], a[0]) if trans_a else (a[0], a[1])
    n = b[0] if trans_b else b[1]
    has_c = len(input_types) > 2 and input_types[2] is not None
    row_stride = col_stride = 0
    if has_c:
        c = (1,) * (2 - len(input_types[2].shape)) + tuple(input_types[2].shape)
        row_stride = c[1] if c[0] != 1 else 0
        col_stride = 1 if c[1] != 1 else 0
    return Packed(GEMM_BLOB.pack(m=m, n=n, k=k, trans_a=trans_a, trans_b=trans_b,
                                 has_c=int(has_c), c_row_stride=row_stride,
                                 c_col_stride=col_stride, alpha=attrs["alpha"],
                                 beta=attrs["beta"]))


def supports_matmul(node, input_types, output_types) -> bool:
    # The C walks at most GE_MAX_RANK (8) batch dims.
    return all_static(input_types) and len(output_types[0].shape) <= 2 + 8


# -- Softmax ----------------------------------------------------------------------------


def pack_softmax(node, input_types, output_types) -> Packed:
    x = input_types[0].shape
    axis = filled_attrs(node)["axis"] % len(x)
    outer, length, inner = numel_of(x[:axis]), x[axis], numel_of(x[axis + 1:])
    if inner == 1:
        return Packed(SOFTMAX_BLOB.pack(outer=outer, length=length, inner=inner, slots=1))
    slots = max(1, min(outer, SOFTMAX_MAX_SLOTS, numel_of(x) // SOFTMAX_SLOT_WORK))
    return Packed(SOFTMAX_BLOB.pack(outer=outer, length=length, inner=inner, slots=slots),
                  scratch_bytes=slots * 2 * inner * FLOAT_BYTES)


def supports_softmax(node, input_types, output_types) -> bool:
    x = input_types[0]
    return all_static(input_types) and len(x.shape) > 0 and numel_of(x.shape) > 0


# -- registrations ----------------------------------------------------------------------

KERNELS = [
    c_kernel("MatMul", "ge_nn_matmul_f32", (F32, F32), pack_matmul, supports_matmul),
    c_kernel("Gemm", "ge_nn_gemm_f32", (F32, F32), pack_gemm, supports_static),
    c_kernel("Softmax", "ge_nn_softmax_f32", (F32,), pack_softmax, supports_softmax,
            SAME_AS_INPUT),
    c_kernel("LogSoftmax", "ge_nn_log_softmax_f32", (F32,), pack_softmax, supports_softmax,
            SAME_AS_INPUT),
]
