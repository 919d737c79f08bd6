"""The nn family's kernels (float32): MatMul, Gemm, Softmax, LogSoftmax and
ge_hub.Attention; their C lives in core/kernels/nn_matmul.c, nn_gemm_packed.c,
nn_softmax.c and nn_attention.c.

Each packer resolves at compile time everything the C would otherwise work out per run:
GEMM shapes, broadcast strides, the softmax axis split. Blob layouts are documented at the
top of each C file, next to the code reading them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ge_hub.kernels.base import BlobRecord, CKernel, Packed, pack_values
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
from ge_hub.ops.nn import FUSED_DOMAIN
from ge_hub.registry import KernelSpec

# Softmax over a middle axis splits its work into at most this many scratch slots.
SOFTMAX_MAX_SLOTS = 16
# The fixed blobs, field for field as core/kernels/nn.h declares them.
GEMM_BLOB = BlobRecord("GE_GEMM_BLOB", ("m", "n", "k", "trans_a", "trans_b", "has_c",
                                        "c_row_stride", "c_col_stride"), ("alpha", "beta"))
SOFTMAX_BLOB = BlobRecord("GE_SOFTMAX_BLOB", ("outer", "length", "inner", "slots"))
SOFTMAX_SLOT_WORK = 16384
ATTENTION_BLOB = BlobRecord("GE_ATTENTION_BLOB",
                            ("b0", "b1", "s", "sk", "d", "dv", "k_transposed", "scale_divides",
                             "has_mask", "ms0", "ms1", "ms_row", "ms_col", "slots"), ("scale",))

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


# -- ge_hub.Attention ---------------------------------------------------------------------

# core/kernels/nn_attention.c's tiling: query rows per task, keys per block; each
# parallel slot has its own scratch (scores, one packed key block, row maximum and sum).
ATTENTION_ROWS = 32
ATTENTION_KEYS = 128
ATTENTION_MAX_SLOTS = 16


def _attention_dims(node, input_types):
    q, k, v = (t.shape for t in input_types[:3])
    batch = list(q[:-2])
    k_transposed = filled_attrs(node)["k_transposed"]
    sk = k[-2] if k_transposed else k[-1]
    return batch, q[-2], sk, q[-1], v[-1]


def _mask_strides(mask_shape, scores_shape) -> list[int]:
    """The mask's element strides along the 4-D scores [b0, b1, s, sk] (0 where it
    broadcasts)."""
    shape = [1] * (len(scores_shape) - len(mask_shape)) + list(mask_shape)
    strides, step = [0] * len(shape), 1  # the mask is contiguous
    for axis in range(len(shape) - 1, -1, -1):
        strides[axis] = 0 if shape[axis] == 1 else step
        step *= shape[axis]
    return [0] * (4 - len(strides)) + strides


def pack_attention(node, input_types, output_types) -> Packed:
    """Blob: the record ATTENTION_BLOB; scratch: `slots` regions (nn_attention.c)."""
    attrs = filled_attrs(node)
    batch, s, sk, d, dv = _attention_dims(node, input_types)
    b0, b1 = (1, *batch) if len(batch) == 1 else (numel_of(batch[:-1]), batch[-1])
    has_mask = len(input_types) > 3 and input_types[3] is not None
    strides = _mask_strides(input_types[3].shape, [*batch, s, sk]) if has_mask else [0] * 4
    tasks = b0 * b1 * -(-s // ATTENTION_ROWS)
    slots = max(1, min(tasks, ATTENTION_MAX_SLOTS))
    slot_floats = ATTENTION_ROWS * ATTENTION_KEYS + d * ATTENTION_KEYS + 2 * ATTENTION_ROWS
    blob = ATTENTION_BLOB.pack(
        b0=b0, b1=b1, s=s, sk=sk, d=d, dv=dv, k_transposed=attrs["k_transposed"],
        scale_divides=attrs["scale_divides"], has_mask=int(has_mask), ms0=strides[-4],
        ms1=strides[-3], ms_row=strides[-2], ms_col=strides[-1], slots=slots,
        scale=float(attrs["scale"]))
    return Packed(blob, scratch_bytes=slots * slot_floats * FLOAT_BYTES)


def supports_attention(node, input_types, output_types) -> bool:
    if not all_static(input_types) or len(input_types[0].shape) not in (3, 4):
        return False
    batch, s, sk, d, dv = _attention_dims(node, input_types)
    if min(s, sk, d, dv, *batch) < 1:
        return False
    if len(input_types) > 3 and input_types[3] is not None:
        return input_types[3].dtype == F32 and len(input_types[3].shape) <= 4
    return True


# -- registrations ----------------------------------------------------------------------

KERNELS = [
    c_kernel("MatMul", "ge_nn_matmul_f32", (F32, F32), pack_matmul, supports_matmul),
    c_kernel("Gemm", "ge_nn_gemm_f32", (F32, F32), pack_gemm, supports_static),
    c_kernel("Softmax", "ge_nn_softmax_f32", (F32,), pack_softmax, supports_softmax,
            SAME_AS_INPUT),
    c_kernel("LogSoftmax", "ge_nn_log_softmax_f32", (F32,), pack_softmax, supports_softmax,
            SAME_AS_INPUT),
    # Y is accumulated in place while Q, K and V are still read: no inplace.
    KernelSpec(op="Attention", domain=FUSED_DOMAIN, name="ge_nn_attention_f32",
               dtypes=(F32, F32, F32),
               impl=CKernel("ge_nn_attention_f32", pack=pack_attention,
                            supports=supports_attention)),
]
