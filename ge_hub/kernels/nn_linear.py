"""`ge_nn_linear_f32`: MatMul, Gemm and ge_hub.FusedMatMul whose weight is a constant 2-D
matrix (the Linear layers of transformers and MLPs), in float32, with the weight laid out
once, at compile time, in the panels the C micro-kernels read
(core/kernels/nn_matmul_packed.c). The BLAS path of ge_nn_matmul_f32 repacks the weight
at every call and applies a FusedMatMul's epilogue in a second pass over Y; this kernel
does neither.

A Gemm's alpha is folded into the packed weight and its beta * C (a constant broadcast
along the rows) becomes the bias; a transposed weight is transposed here. Products the
precision pass marked bf16 go to `ge_nn_linear_bf16` (ge_hub.kernels.nn_bf16) instead.
"""

from __future__ import annotations

import numpy as np

from ge_hub.kernels import consumed, nn_bf16
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.conv import PACK_KC, PACK_NR
from ge_hub.kernels.nn_bf16 import _linear_operands as linear_operands
from ge_hub.kernels.nn_bf16 import linear_epilogue
from ge_hub.kernels.nn_common import F32, all_static
from ge_hub.ops.conv import FUSED_DOMAIN
from ge_hub.registry import KernelSpec

KERNEL = "ge_nn_linear_f32"
SPECS = ("ge_nn_matmul_packed_f32", "ge_nn_gemm_packed_f32", "ge_nn_matmul_fused_packed_f32")
_OPS = (("", "MatMul"), ("", "Gemm"), (FUSED_DOMAIN, "FusedMatMul"))


def pack_weight(w: np.ndarray, source: np.ndarray | None = None) -> np.ndarray:
    """W (k x n; any strides, any float dtype) as nn_matmul_packed.c's packed W: k in
    slices of PACK_KC, each slice the ceil(n / PACK_NR) panels of its rows, each panel
    kc x PACK_NR (zero columns past n). Written into the one array the plan keeps.

    `source` is the constant W reads (W itself, or W transposed: a Gemm's transB); when
    emission lets this packer consume it (ge_hub.kernels.consumed), its rows are released
    as soon as they are packed, so that packing needs little more memory than its result:
    slice by slice where W's rows are the source's, panel by panel where they are its
    columns."""
    k, n = w.shape
    panels, full = -(-n // PACK_NR), n // PACK_NR
    if source is not None and _views(w.T, source) and consumed.is_consumable(source):
        out = consumed.empty_in_small_pages(panels * PACK_NR * k, np.float32)
        _pack_by_panels(w, out, source)
        consumed.to_huge_pages(out)
        return out
    out = np.empty(panels * PACK_NR * k, np.float32)
    rows_of_source = source is not None and _views(w, source)
    for k0 in range(0, k, PACK_KC):
        kc = min(PACK_KC, k - k0)
        dest = out[panels * PACK_NR * k0:panels * PACK_NR * (k0 + kc)].reshape(
            panels, kc, PACK_NR)
        dest[:full] = w[k0:k0 + kc, :full * PACK_NR].reshape(kc, full, PACK_NR) \
            .transpose(1, 0, 2)
        if full < panels:
            dest[full] = 0.0
            dest[full, :, :n - full * PACK_NR] = w[k0:k0 + kc, full * PACK_NR:]
        if rows_of_source:
            consumed.release_rows(source, k0, k0 + kc)
    return out


def _views(w: np.ndarray, source: np.ndarray) -> bool:
    """Whether w is exactly the C-contiguous 2-D `source` (same memory, shape, strides)."""
    return (source.ndim == 2 and source.flags.c_contiguous and w.shape == source.shape
            and w.strides == source.strides and w.ctypes.data == source.ctypes.data)


def _pack_by_panels(w: np.ndarray, out: np.ndarray, source: np.ndarray) -> None:
    """pack_weight's layout, written a group of panels at a time: W's columns of a panel
    are rows of `source` (W transposed), released once the group is packed."""
    k, n = w.shape
    panels = -(-n // PACK_NR)
    slices = [(k0, min(PACK_KC, k - k0)) for k0 in range(0, k, PACK_KC)]
    group = max(1, (4 << 20) // max(1, k * PACK_NR * out.itemsize))  # about 4 MiB of rows
    for p0 in range(0, panels, group):
        p1 = min(panels, p0 + group)
        c0, c1 = p0 * PACK_NR, min(n, p1 * PACK_NR)
        for k0, kc in slices:
            dest = out[panels * PACK_NR * k0:panels * PACK_NR * (k0 + kc)].reshape(
                panels, kc, PACK_NR)[p0:p1]
            block = source[c0:c1, k0:k0 + kc]  # (columns, kc)
            whole = (c1 - c0) // PACK_NR
            dest[:whole] = block[:whole * PACK_NR].reshape(whole, PACK_NR, kc) \
                .transpose(0, 2, 1)
            if whole < p1 - p0:
                dest[whole] = 0.0
                dest[whole, :, :c1 - c0 - whole * PACK_NR] = block[whole * PACK_NR:].T
        consumed.release_rows(source, c0, c1)


def supports_linear(node, input_types, output_types) -> bool:
    if (node.domain, node.op) not in _OPS:
        return False
    if nn_bf16.supports_linear(node, input_types, output_types) \
            or nn_bf16.supports_linear_x3(node, input_types, output_types):
        return False  # the precision pass marked it bf16 or bf16x3: ge_nn_linear_bf16 runs it
    present = [t for t in input_types if t is not None]
    if not all_static(present) or any(t.dtype != F32 for t in present):
        return False
    operands = linear_operands(node, input_types)
    return operands is not None and operands[1] >= 1


# X's rows padded by this many floats when the kernel restrides X (nn_matmul_packed.c,
# LIN_X_PAD; LSHORT is its short-product row count).
X_PAD = 16
LSHORT = 4


def restride_bytes(rows: int, k: int) -> int:
    """The scratch ge_nn_linear_f32 copies X into when X's rows would all fall on the same
    L1 sets (k a multiple of 1024 floats, 4 KB): rows k + X_PAD floats apart; else 0."""
    if rows > LSHORT and k > PACK_KC and k % 1024 == 0:
        return rows * (k + X_PAD) * 4
    return 0


def pack_linear(node, input_types, output_types) -> Packed:
    """Blob: ints rows, n, k, has_bias, activation, has_residual; floats alpha, beta.
    Scratch: X restrided, for a k that would alias X's rows (`restride_bytes`)."""
    rows, k, n, _, bias = linear_operands(node, input_types)
    has_bias, activation, has_residual, alpha, beta = linear_epilogue(node, input_types, bias)
    return Packed(pack_values([rows, n, k, has_bias, activation, has_residual],
                              [alpha, beta]), scratch_bytes=restride_bytes(rows, k))


def prepack_linear(node, input_types, output_types) -> dict[int, np.ndarray]:
    """The weight in panels (input 1); a Gemm's beta * C as the bias (input 2)."""
    _, _, _, weight, bias = linear_operands(node, input_types)
    replaced = {1: pack_weight(weight.T, source=node.inputs[1].const)}
    if bias is not None:
        replaced[2] = bias.astype(np.float32)
    return replaced


KERNELS = [
    # Ahead of ge_nn_matmul_f32, ge_nn_gemm_f32 and ge_nn_matmul_fused_f32 (which remain
    # for products of two computed operands, batched weights and transposed inputs); after
    # the bf16 specs of the same priority (ge_hub.kernels registers nn_bf16 first).
    # The residual Z is read after Y's tiles are stored: no inplace.
    *(KernelSpec(op=op, domain=domain, name=spec, dtypes=(F32, F32), priority=1,
                 impl=CKernel(KERNEL, pack=pack_linear, supports=supports_linear,
                              prepack=prepack_linear))
      for (domain, op), spec in zip(_OPS, SPECS)),
]
