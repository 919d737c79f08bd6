"""The nn family's kernels (float32): MatMul, Gemm, Softmax, LogSoftmax,
ge_hub.Attention and ge_hub.FusedMatMul; their C lives in core/kernels/nn_matmul.c,
nn_gemm_packed.c, nn_softmax.c, nn_attention.c and nn_matmul_fused.c.

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
from ge_hub.ops.conv import CONV_ACTIVATIONS
from ge_hub.ops.nn import FUSED_DOMAIN
from ge_hub.registry import KernelSpec

# Softmax over a middle axis splits its work into at most this many scratch slots.
SOFTMAX_MAX_SLOTS = 16
# The fixed blobs, field for field as core/kernels/nn.h declares them.
GEMM_BLOB = BlobRecord("GE_GEMM_BLOB", ("m", "n", "k", "trans_a", "trans_b", "has_c",
                                        "c_row_stride", "c_col_stride"), ("alpha", "beta"))
SOFTMAX_BLOB = BlobRecord("GE_SOFTMAX_BLOB", ("outer", "length", "inner", "slots"))
SOFTMAX_SLOT_WORK = 16384
ATTENTION_BLOB = BlobRecord(
    "GE_ATTENTION_BLOB",
    ("b0", "b1", "s", "sk", "d", "dv", "qs0", "qs1", "qs_row", "qs_col", "ks0", "ks1",
     "ks_key", "ks_dim", "vs0", "vs1", "vs_key", "vs_col", "ys0", "ys1", "ys_row", "ys_col",
     "scale_divides", "has_mask", "ms0", "ms1", "ms_row", "ms_col", "slots"), ("scale",))

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


def pack_fused_matmul(node, input_types, output_types) -> Packed:
    """ge_hub.FusedMatMul: the MatMul blob, then ints activation (its position in
    ge_hub.ops.conv.CONV_ACTIVATIONS), has_bias, has_residual, then floats alpha, beta
    (core/kernels/nn_matmul_fused.c)."""
    matmul = pack_matmul(node, input_types[:2], output_types)
    attrs = filled_attrs(node)

    def present(i):
        return int(len(input_types) > i and input_types[i] is not None)

    extra = pack_values([CONV_ACTIVATIONS.index(attrs["activation"]), present(2), present(3)],
                        [attrs["alpha"], attrs["beta"]])
    return Packed(matmul.attrs + extra)


def supports_fused_matmul(node, input_types, output_types) -> bool:
    # trans_b (a Gemm's constant weight as stored) is for the constant-weight kernels,
    # ge_nn_linear_f32 and _bf16, which lay B out in their panels from either orientation.
    return (supports_matmul(node, input_types, output_types) and len(input_types[1].shape) >= 2
            and not int(filled_attrs(node)["trans_b"]))


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
ATTENTION_ROWS = 64
ATTENTION_KEYS = 128
ATTENTION_MAX_SLOTS = 16


def _strides(shape) -> list[int]:
    strides, step = [0] * len(shape), 1
    for axis in range(len(shape) - 1, -1, -1):
        strides[axis] = step
        step *= shape[axis]
    return strides


def _read_strides(shape, perm) -> list[int]:
    """Element strides of transpose(x, perm) read in place from a contiguous x."""
    base = _strides(shape)
    return list(base) if not perm else [base[p] for p in perm]


def _batch4(strides) -> list[int]:
    """The two batch strides of a rank-3 or rank-4 operand (b0 = 1 for rank 3)."""
    return [0, *strides[:-2]] if len(strides) == 3 else list(strides[:-2])


def _attention_layout(node, input_types, output_types) -> dict:
    """Dims and the element strides the kernel reads Q, K, V and the mask at and writes Y
    at, the perm attributes (the folded Transposes) applied."""
    attrs = filled_attrs(node)
    q_in, k_in, v_in = (t.shape for t in input_types[:3])
    q = _read_strides(q_in, attrs["q_perm"])
    k = _read_strides(k_in, attrs["k_perm"])
    v = _read_strides(v_in, attrs["v_perm"])
    q_shape = [q_in[p] for p in attrs["q_perm"]] if attrs["q_perm"] else list(q_in)
    v_shape = [v_in[p] for p in attrs["v_perm"]] if attrs["v_perm"] else list(v_in)
    key, dim = (k[-2], k[-1]) if attrs["k_transposed"] else (k[-1], k[-2])
    out_perm = list(attrs["out_perm"]) or list(range(len(q_in)))
    out = _strides(output_types[0].shape)
    y = [out[out_perm.index(axis)] for axis in range(len(out_perm))]
    batch = q_shape[:-2]
    s, d, sk, dv = q_shape[-2], q_shape[-1], v_shape[-2], v_shape[-1]
    b0, b1 = (1, batch[0]) if len(batch) == 1 else (batch[0], batch[1])
    qb, kb, vb, yb = (_batch4(x) for x in (q, k, v, y))
    return dict(b0=b0, b1=b1, s=s, sk=sk, d=d, dv=dv,
                qs0=qb[0], qs1=qb[1], qs_row=q[-2], qs_col=q[-1],
                ks0=kb[0], ks1=kb[1], ks_key=key, ks_dim=dim,
                vs0=vb[0], vs1=vb[1], vs_key=v[-2], vs_col=v[-1],
                ys0=yb[0], ys1=yb[1], ys_row=y[-2], ys_col=y[-1])


def _mask_strides(mask_shape, scores_shape) -> list[int]:
    """The mask's element strides along the 4-D scores [b0, b1, s, sk] (0 where it
    broadcasts)."""
    shape = [1] * (len(scores_shape) - len(mask_shape)) + list(mask_shape)
    strides = [0 if n == 1 else st for n, st in zip(shape, _strides(shape))]
    return [0] * (4 - len(strides)) + strides


def pack_attention(node, input_types, output_types) -> Packed:
    """Blob: the record ATTENTION_BLOB; scratch: `slots` regions (nn_attention.c)."""
    attrs = filled_attrs(node)
    layout = _attention_layout(node, input_types, output_types)
    batch = [layout["b1"]] if len(input_types[0].shape) == 3 else [layout["b0"], layout["b1"]]
    has_mask = len(input_types) > 3 and input_types[3] is not None
    strides = (_mask_strides(input_types[3].shape, [*batch, layout["s"], layout["sk"]])
               if has_mask else [0] * 4)
    tasks = layout["b0"] * layout["b1"] * -(-layout["s"] // ATTENTION_ROWS)
    slots = max(1, min(tasks, ATTENTION_MAX_SLOTS))
    slot_floats = (ATTENTION_ROWS * ATTENTION_KEYS + layout["d"] * ATTENTION_KEYS
                   + 2 * ATTENTION_ROWS)
    blob = ATTENTION_BLOB.pack(
        **layout, scale_divides=attrs["scale_divides"], has_mask=int(has_mask),
        ms0=strides[0], ms1=strides[1], ms_row=strides[2], ms_col=strides[3], slots=slots,
        scale=float(attrs["scale"]))
    return Packed(blob, scratch_bytes=slots * slot_floats * FLOAT_BYTES)


def supports_attention(node, input_types, output_types) -> bool:
    if not all_static(input_types) or len(input_types[0].shape) not in (3, 4):
        return False
    if numel_of(input_types[0].shape) == 0 or numel_of(input_types[2].shape) == 0 or \
            numel_of(input_types[1].shape) == 0:
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
    # Z is read after each block of Y is written: no inplace.
    KernelSpec(op="FusedMatMul", domain=FUSED_DOMAIN, name="ge_nn_matmul_fused_f32",
               dtypes=(F32, F32),
               impl=CKernel("ge_nn_matmul_fused_f32", pack=pack_fused_matmul,
                            supports=supports_fused_matmul)),
    # Y is accumulated in place while Q, K and V are still read: no inplace.
    KernelSpec(op="Attention", domain=FUSED_DOMAIN, name="ge_nn_attention_f32",
               dtypes=(F32, F32, F32),
               impl=CKernel("ge_nn_attention_f32", pack=pack_attention,
                            supports=supports_attention)),
]
