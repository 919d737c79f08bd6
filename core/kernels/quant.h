/*
 * Linear quantization kernels (quant.c, quant_gemm.c): their declarations, blobs and the
 * integer GEMM they share. The Python side is ge_hub/kernels/quant.py; the semantics are
 * those of the NumPy references in ge_hub/ops/quant.py, bit for bit.
 *
 * Every blob is int64 values, native byte order (ge_hub/blob.h):
 *
 * QuantizeLinear, DequantizeLinear: outer, channels, inner, has_zero_point, block
 *     x is [outer, channels, inner] around `axis`; scale and zero point hold `channels`
 *     values (1: per tensor, then outer = 1, inner = numel), or, with block > 0 (blocked
 *     quantization), [outer, ceil(channels / block), inner]. Float32 scales only; 4- and
 *     2-bit integers sit in the low bits of one byte each, as ml_dtypes stores them.
 * DynamicQuantizeLinear: (no blob)
 * MatMulInteger, QLinearMatMul:
 *     nb, out_batch[nb], a_batch_stride[nb], b_batch_stride[nb], m, n, k,
 *     a_param_rows, b_param_cols
 *     Batches are walked over the output's batch dims; an operand's stride (in whole
 *     matrices) is 0 along a dim it broadcasts. `m` may fold A's batch dims into rows
 *     (B 2-D): a per-row parameter (zero point, scale) then repeats every
 *     a_param_rows rows. a_param_rows / b_param_cols: 1 when A's (B's) parameters are
 *     per tensor, else their count (per row of A, per column of B).
 * ConvInteger, QLinearConv: n, c, m, group, has_bias, w_per_channel, block, window[18]
 *     (nn_common.h's window, 1-D and 2-D padded to 3-D); `block` output positions are
 *     gathered at a time (a whole number of 32-column panels, or all of them).
 *
 * The integer GEMM (quant_gemm.c): Y[m, n] = sum_k (A[m,k] - za[m]) (B[k,n] - zb[n]),
 * for any mix of uint8 and int8 operands. Both are mapped to one form, A unsigned and B
 * signed, which the x86 instruction vpdpbusd multiplies: int8 A is shifted by +128 (its
 * zero point with it), uint8 B by -128, which changes no difference (A - za). The
 * product is then sum A'B' - zb' sum_k A' - za' sum_k B' + K za' zb', all in wrapping
 * 32-bit arithmetic: the result is the true sum modulo 2**32, which is what the
 * reference's int64 sum cast to int32 gives. Two micro-kernels compute sum A'B' over
 * one tile of 4 rows x 32 columns: AVX-512 VNNI (vpdpbusd) when the CPU has it, and a
 * plain C loop; which one runs is chosen once per process at run time
 * (GE_HUB_QGEMM_KERNEL=generic forces the plain one).
 */
#ifndef GE_HUB_QUANT_H
#define GE_HUB_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Tile of the integer GEMM: rows of packed A, columns of packed B (two 16-wide panels). */
#define QGEMM_MR 4
#define QGEMM_NR 32
#define QGEMM_PANEL 16

#define GE_QUANTIZE_BLOB(INT, FLOAT) \
    INT(outer) INT(channels) INT(inner) INT(has_zero_point) INT(block)
GE_BLOB_RECORD(ge_quantize_blob, GE_QUANTIZE_BLOB)

/* The quant family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels. */
#define GE_QUANT_KERNELS(X)                                               \
    /* quant.c */                                                         \
    X(ge_quantize_linear)  /* QuantizeLinear: float32 -> (u)int2/4/8/16 */\
    X(ge_dequantize_linear)  /* DequantizeLinear: (u)int2/4/8/16, int32 */\
    X(ge_dynamic_quantize_linear)  /* DynamicQuantizeLinear */            \
    /* quant_gemm.c */                                                    \
    X(ge_matmul_integer)  /* MatMulInteger */                             \
    X(ge_qlinear_matmul)  /* QLinearMatMul */                             \
    X(ge_conv_integer)  /* ConvInteger */                                 \
    X(ge_qlinear_conv)  /* QLinearConv */

GE_QUANT_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_QUANT_H */
