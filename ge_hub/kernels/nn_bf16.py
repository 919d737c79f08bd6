"""bf16 products with fp32 accumulation (the `precision` option, `ge_hub.passes.precision`):
the weight layout of core/kernels/nn_gemm_bf16.h, the MatMul/Gemm kernel
`ge_nn_linear_bf16`, and which precision each step of a plan runs in.

A node the precision pass marked `meta["precision"] = "bf16"` gets its constant weight
rounded to bf16 (nearest even) once, here, at compile time, laid out as nn_gemm_bf16.h's
packed A (a Conv's) or packed B (a MatMul's and Gemm's: the VNNI pair-rows an AMX B tile
loads) and carried as uint16 values; its activations are rounded to bf16 as the kernel
packs them (once per step), and every sum is fp32. Gelu epilogues in bf16 steps use the
bf16 path's own cheaper erf form (within 1e-7 * |x| of the exact one). Conv and FusedConv
take the bf16 variant of their packed path (`ge_hub.kernels.conv`, CONV_PACKED_BF16,
CONV_PAIRS_BF16) or of Winograd (CONV_WINOGRAD_BF16), and ConvTranspose its bf16 kernel
(CONV_TRANSPOSE_BF16);
MatMul and Gemm with a constant weight take `ge_nn_linear_bf16`, and so does a
ge_hub.FusedMatMul (with its bias, residual and activation applied as Y is stored). Other
nodes, and marked nodes whose shapes the bf16 kernels do not handle, stay fp32:
`ge_hub.precision_report` reads from a plan what ran.
"""

from __future__ import annotations

import math

import numpy as np

from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.nn_common import F32, all_static, filled_attrs
from ge_hub.ops.conv import CONV_ACTIVATIONS, FUSED_DOMAIN
from ge_hub.registry import KernelSpec

# The packed layout's geometry (NN_BF16_MR, NN_BF16_NR, NN_BF16_KB in nn_gemm_bf16.h).
BF16_MR, BF16_NR, BF16_KB = 16, 32, 32
# Which operand a MatMul's/Gemm's weight is packed as: 2 since it became the packed B (was
# the packed A of W^T); recorded in offline files (ge_hub.offline.portability), so that a
# file packed the old way is planned again rather than misread.
LINEAR_WEIGHT_LAYOUT = 2
# The least depth a Conv takes the bf16 path at (NN_BF16_MIN_K): shallower ones gain
# nothing from it.
BF16_MIN_K = 16
# ge_nn_linear_bf16 rounds at most this many bf16 values of X at a time (its scratch).
LINEAR_MAX_VALUES = 1 << 19
BF16 = "bf16"
FP32 = "fp32"
# Three bf16 products standing for one fp32 one (`split_bf16`): what `mixed` marks the
# products it keeps accurate.
BF16X3 = "bf16x3"
LINEAR_KERNEL = "ge_nn_linear_bf16"  # the C symbol, registered for MatMul and for Gemm
# The kernel specs that run bf16 products (ge_hub.precision_report reads plans by them).
LINEAR_SPECS = ("ge_nn_matmul_bf16", "ge_nn_gemm_bf16", "ge_nn_matmul_fused_bf16",
                "ge_nn_matmul_act_bf16", "ge_nn_matmul_strided_bf16")
# ... and those that run bf16x3 ones (the same C kernel, its blob's `split` set).
LINEAR_X3_SPECS = ("ge_nn_matmul_bf16x3", "ge_nn_gemm_bf16x3", "ge_nn_matmul_fused_bf16x3")


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (nearest, ties to even; NaN stays NaN), as the
    uint16 bit patterns the C kernels read."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) widened to float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bf16, as float32."""
    return from_bf16(to_bf16(values)).reshape(np.shape(values))


def depth(k: int) -> int:
    return -(-k // BF16_KB) * BF16_KB


def split_bf16(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 values as (high, low), both bf16 values held in float32: high the nearest
    bf16, low the nearest bf16 to what high leaves (exact in fp32), 0 where high is inf or
    NaN. high + low keeps about 16 bits of mantissa, so three bf16 products, hi hi + lo hi
    + hi lo, stand for one fp32 product to about 2^-16 relative (the bf16x3 precision;
    nn_gemm_bf16.c's split_rows does the same to activations)."""
    values = np.asarray(values, np.float32)
    high = round_bf16(values)
    with np.errstate(invalid="ignore", over="ignore"):
        low = np.where(np.isfinite(high), round_bf16(values - high), np.float32(0))
    return high, low.astype(np.float32)


# Packed weights start on a cache line: an AMX tile row is 64 bytes, and from an address
# 32 bytes off every row of every tile load spans two lines (NumPy aligns its arrays to
# 16 bytes). ResNet-18's 64-channel 3x3 layer at 56x56, its product alone, one thread on
# an AMX Xeon: 0.20 -> 0.10 ms.
ALIGN = 64


def _aligned(values: np.ndarray) -> np.ndarray:
    """`values` (C-contiguous) in a copy that starts on an ALIGN-byte boundary, or as it is
    where it does already."""
    if values.ctypes.data % ALIGN == 0:
        return values
    raw = np.empty(values.nbytes + ALIGN, np.uint8)
    skip = -raw.ctypes.data % ALIGN
    out = raw[skip:skip + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def pack_a(a: np.ndarray) -> np.ndarray:
    """(groups, rows, k) matrices as nn_gemm_bf16.h's packed A, one flat uint16 run per
    group: panels of BF16_MR rows, each in blocks of BF16_MR x BF16_KB values."""
    groups, rows, k = a.shape
    panels, kp = -(-rows // BF16_MR), depth(k)
    padded = np.zeros((groups, panels * BF16_MR, kp), np.float32)
    padded[:, :rows, :k] = a
    blocks = padded.reshape(groups, panels, BF16_MR, kp // BF16_KB, BF16_KB)
    return _aligned(np.ascontiguousarray(to_bf16(blocks.transpose(0, 1, 3, 2, 4)))
                    .reshape(groups, -1))


def pack_b(b: np.ndarray) -> np.ndarray:
    """A (k, n) matrix as nn_gemm_bf16.h's packed B, flat: panels of BF16_NR columns, each
    depth(k) / 2 pair-rows of BF16_NR (even, odd) pairs, zero past k and past n."""
    k, n = b.shape
    panels, kp = -(-n // BF16_NR), depth(k)
    padded = np.zeros((kp, panels * BF16_NR), np.float32)
    padded[:k, :n] = b
    pairs = padded.reshape(kp // 2, 2, panels, BF16_NR).transpose(2, 0, 3, 1)
    return _aligned(np.ascontiguousarray(to_bf16(pairs)).reshape(-1))


# -- MatMul and Gemm with a constant weight ------------------------------------------------


def linear_epilogue(node, input_types, bias) -> tuple[int, int, int, float, float]:
    """(has_bias, activation index, has_residual, alpha, beta) of a linear product's blob,
    shared by the bf16 and the fp32 packed-weight kernels: a ge_hub.FusedMatMul's from its
    inputs and attributes; a MatMul's or Gemm's only its bias (`bias`: from the operands)."""
    if node.op != "FusedMatMul":
        return int(bias is not None), 0, 0, 0.0, 0.0
    attrs = filled_attrs(node)
    present = [i < len(input_types) and input_types[i] is not None for i in (2, 3)]
    return (int(present[0]), CONV_ACTIVATIONS.index(attrs["activation"]), int(present[1]),
            attrs["alpha"], attrs["beta"])


def _linear_operands(node, input_types):
    """(rows, k, n, weight as n x k, bias as n float64 or None), or None when the node is
    not a product with a constant 2-D weight that ge_nn_linear_bf16 takes. The weight is a
    view of the constant (float64 only when a Gemm's alpha scales it): kernel selection,
    the packer and the prepacker each call this, and a copy per call of every weight in
    a model is a peak of memory for nothing."""
    if len(node.inputs) < 2 or node.inputs[1] is None or node.inputs[1].const is None:
        return None
    a, b = input_types[0].shape, input_types[1].shape
    if len(b) != 2 or not all_static(input_types[:2]):
        return None
    w = np.asarray(node.inputs[1].const)
    bias = None
    if node.op in ("MatMul", "FusedMatMul"):
        trans_b = node.op == "FusedMatMul" and int(filled_attrs(node)["trans_b"])
        k, n = (b[1], b[0]) if trans_b else (b[0], b[1])
        if len(a) < 1 or a[-1] != k:
            return None
        return math.prod(a[:-1]), k, n, (w if trans_b else w.T), None
    attrs = filled_attrs(node)
    if len(a) != 2 or int(attrs["transA"]):
        return None
    rows, k = a
    weight = w if int(attrs["transB"]) else w.T
    n = weight.shape[0]
    if float(attrs["alpha"]) != 1.0:
        weight = weight.astype(np.float64) * float(attrs["alpha"])
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        c = node.inputs[2].const
        if c is None or np.size(c) not in (1, n) or (np.ndim(c) == 2 and np.shape(c)[0] != 1):
            return None
        bias = np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (n,)) * float(attrs["beta"])
    return rows, k, n, weight, bias


def _linear_supports(precision: str):
    """The `supports` of ge_nn_linear_bf16's specs for nodes marked `precision`."""
    def supports(node, input_types, output_types) -> bool:
        if node.meta.get("precision") != precision:
            return False
        if (node.domain, node.op) not in (("", "MatMul"), ("", "Gemm"),
                                          (FUSED_DOMAIN, "FusedMatMul")):
            return False
        if node.op == "FusedMatMul" and not all_static(input_types):
            return False
        operands = _linear_operands(node, input_types)
        # bf16x3 of fewer rows than a tile's reads 1.5x fp32's weight bytes for no gain in
        # arithmetic (ResNet's [1, 2048] x [2048, 1000]: 0.125 ms against fp32's 0.084)
        few_rows = precision == BF16X3 and operands is not None and operands[0] < BF16_MR
        return operands is not None and operands[1] >= 1 and not few_rows
    return supports


supports_linear = _linear_supports(BF16)
supports_linear_x3 = _linear_supports(BF16X3)


# bf16x3's two forms (the blob's `split`, LINEAR_SPLIT_* in nn_gemm_bf16.c), over the same
# layouts (X's rows [hi | lo | fin], W as [hi; fin; lo]): one product of depth
# 3 * depth(k) where all of X's rows so fit one block, else three passes of depth(k) (each
# block of rows reads all of W, and one product of three times the depth takes three
# times the blocks).
SPLIT_ONE_PASS, SPLIT_THREE_PASSES = 1, 2


def _split_form(node, rows: int, k: int) -> int:
    """The blob's `split`: 0 (bf16), or which form of bf16x3 the node runs."""
    if node.meta.get("precision") != BF16X3:
        return 0
    padded = -(-rows // (2 * BF16_MR)) * 2 * BF16_MR
    return SPLIT_ONE_PASS if padded * 3 * depth(k) <= LINEAR_MAX_VALUES else SPLIT_THREE_PASSES


def _block(rows: int, row_values: int, split: int = 0) -> int:
    """Rows of X rounded to bf16 at a time: whole blocks of 2 * BF16_MR rows. Each block
    reads all of W, and bf16x3's three passes read a third of a row at a time, so they
    take blocks of three times the values."""
    step = 2 * BF16_MR
    most = LINEAR_MAX_VALUES * (3 if split == SPLIT_THREE_PASSES else 1)
    return step * min(max(1, most // (row_values * step)), max(1, -(-rows // step)))


def pack_linear(node, input_types, output_types) -> Packed:
    """The blob of ge_nn_linear_bf16 (core/kernels/nn_gemm_bf16.c): a MatMul's and a Gemm's
    with no epilogue, a ge_hub.FusedMatMul's with its bias, residual and activation; `split`
    for a node marked bf16x3."""
    rows, k, n, _, bias = _linear_operands(node, input_types)
    split = _split_form(node, rows, k)
    row_values = depth(k) * (3 if split else 1)
    block = _block(rows, row_values, split)
    # the rounded rows (64-byte aligned), then the three passes' running sum (block x n)
    scratch = (-(-block * row_values * 2 // 64) * 64
               + (block * n * 4 if split == SPLIT_THREE_PASSES else 0))
    has_bias, activation, has_residual, alpha, beta = linear_epilogue(node, input_types, bias)
    return Packed(pack_values([rows, n, k, has_bias, block, activation, has_residual, split],
                              [alpha, beta]), scratch_bytes=scratch)


def prepack_linear(node, input_types, output_types) -> dict[int, np.ndarray]:
    """The weight W (k x n) as the packed B (bf16x3: that of [hi(W); fin(W); lo(W)],
    each part padded to depth(k), fin hi where it is finite, else 0: nn_gemm_bf16.c's
    split_rows); a Gemm's alpha is folded in before rounding, and its beta * C becomes an
    fp32 bias (input 2)."""
    _, k, n, weight, bias = _linear_operands(node, input_types)
    w = weight.T.astype(np.float32)
    if node.meta.get("precision") == BF16X3:
        high, low = split_bf16(w)
        kp = depth(k)
        stacked = np.zeros((3 * kp, n), np.float32)
        stacked[:k], stacked[2 * kp:2 * kp + k] = high, low
        stacked[kp:kp + k] = np.where(np.isfinite(high), high, np.float32(0))
        w = stacked
    replaced = {1: pack_b(w)}
    if bias is not None:
        replaced[2] = bias.astype(np.float32)
    return replaced


# -- MatMul of two run-time inputs (attention's Q K^T and P V) -------------------------------

MATMUL_ACT_KERNEL = "ge_nn_matmul_act_bf16"
# A's rounded rows take at most this many bf16 values of scratch (else the fp32 kernel runs).
MATMUL_ACT_MAX_A = 1 << 22


def _matmul_act_operands(node, input_types):
    """(batch, m, k, n, a_step, b_step) of a MatMul of two fp32 activations whose batch
    dims each equal the output's or are all 1; None otherwise."""
    if len(node.inputs) != 2 or any(v is None or v.const is not None for v in node.inputs):
        return None
    if not all_static(input_types[:2]):
        return None
    a, b = tuple(input_types[0].shape), tuple(input_types[1].shape)
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    m, k, n = a[-2], a[-1], b[-1]
    rank = max(len(a), len(b))
    a_batch = (1,) * (rank - len(a)) + a[:-2]
    b_batch = (1,) * (rank - len(b)) + b[:-2]
    if any(x != y and 1 not in (x, y) for x, y in zip(a_batch, b_batch)):
        return None
    out = tuple(max(x, y) for x, y in zip(a_batch, b_batch))
    steps = []
    for batch_dims, size in ((a_batch, m * k), (b_batch, k * n)):
        if batch_dims == out:
            steps.append(size)
        elif math.prod(batch_dims) == 1:
            steps.append(0)
        else:  # broadcast along some dims only: not this kernel's layout
            return None
    return math.prod(out), m, k, n, steps[0], steps[1]


def supports_matmul_act(node, input_types, output_types) -> bool:
    if node.meta.get("precision") != BF16 or (node.domain, node.op) != ("", "MatMul"):
        return False
    operands = _matmul_act_operands(node, input_types)
    if operands is None:
        return False
    _, m, k, n, _, _ = operands
    return min(m, k, n) >= 1 and -(-m // BF16_MR) * BF16_MR * depth(k) <= MATMUL_ACT_MAX_A


def pack_matmul_act(node, input_types, output_types) -> Packed:
    """The blob of ge_nn_matmul_act_bf16 (core/kernels/nn_gemm_bf16.c) and its scratch: A's
    rounded rows, then the panels of `block` columns of B."""
    batch, m, k, n, a_step, b_step = _matmul_act_operands(node, input_types)
    kp = depth(k)
    block = BF16_NR * min(-(-n // BF16_NR), max(1, LINEAR_MAX_VALUES // (kp * BF16_NR)))
    scratch = (-(-m // BF16_MR) * BF16_MR * kp + block * kp) * 2
    return Packed(pack_values([batch, m, k, n, a_step, b_step, block]), scratch_bytes=scratch)


KERNELS = [
    # Ahead of ge_nn_matmul_f32 and ge_nn_gemm_f32, for the nodes the precision pass marked.
    KernelSpec(op="MatMul", name=LINEAR_SPECS[0], dtypes=(F32, F32), priority=1,
               impl=CKernel(LINEAR_KERNEL, pack=pack_linear, supports=supports_linear,
                            prepack=prepack_linear)),
    KernelSpec(op="Gemm", name=LINEAR_SPECS[1], dtypes=(F32, F32), priority=1,
               impl=CKernel(LINEAR_KERNEL, pack=pack_linear, supports=supports_linear,
                            prepack=prepack_linear)),
    # The residual Z is read after Y's runs are stored: no inplace.
    # Both inputs activations (attention's products): also ahead of the fp32 kernel.
    KernelSpec(op="MatMul", name=LINEAR_SPECS[3], dtypes=(F32, F32), priority=1,
               impl=CKernel(MATMUL_ACT_KERNEL, pack=pack_matmul_act,
                            supports=supports_matmul_act)),
    KernelSpec(op="FusedMatMul", domain=FUSED_DOMAIN, name=LINEAR_SPECS[2], dtypes=(F32, F32),
               priority=1, impl=CKernel(LINEAR_KERNEL, pack=pack_linear,
                                        supports=supports_linear, prepack=prepack_linear)),
    # bf16x3: the same kernel over the split operands, for the nodes marked so.
    *(KernelSpec(op=op, domain=domain, name=name, dtypes=(F32, F32), priority=1,
                 impl=CKernel(LINEAR_KERNEL, pack=pack_linear,
                              supports=supports_linear_x3, prepack=prepack_linear))
      for (domain, op), name in zip((("", "MatMul"), ("", "Gemm"), (FUSED_DOMAIN, "FusedMatMul")),
                                    LINEAR_X3_SPECS)),
]
