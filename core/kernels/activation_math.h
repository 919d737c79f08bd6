/*
 * Activation formulas shared by the standalone activation kernels (activation.c) and the
 * fused epilogues (conv_epilogue.c: FusedConv, FusedMatMul), so that a fused graph and
 * the unfused one compute the same values.
 */
#ifndef GE_HUB_ACTIVATION_MATH_H
#define GE_HUB_ACTIVATION_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nn_common.h" /* nn_expf */

/* The fused products' Gelu (gelu512 in math_avx512.h, and its scalar form below, for the
 * bf16 products' generic variant): x (1 + erf(z)) / 2, z = x / sqrt 2 clamped to [-4, 4],
 * erf(z) = z P(z^2) / Q(z^2) clamped to [-1, 1]; P and Q a rational least-squares fit of
 * erf on [0, 4] (float64, Chebyshev-spaced points, linearized and reweighted by 1/Q),
 * absolute error 2e-7 evaluated in float32. Within 2e-7 |x| of the exact Gelu (for
 * x < -3 only absolutely so: 1 + erf cancels there, where nn_gelu_erf_f32 below keeps
 * the tail's relative precision). */
#define GE_GELU_P0 1.1283788768654353f
#define GE_GELU_P1 0.20513482417996767f
#define GE_GELU_P2 0.051255202780989786f
#define GE_GELU_P3 0.003922791811870682f
#define GE_GELU_P4 0.0001471031921695555f
#define GE_GELU_P5 (-1.9717978533801916e-06f)
#define GE_GELU_P6 1.9667834972726993e-08f
#define GE_GELU_Q1 0.5151256211366894f
#define GE_GELU_Q2 0.11714712790263532f
#define GE_GELU_Q3 0.014795768550054154f
#define GE_GELU_Q4 0.0010097520087162858f

static inline float nn_gelu_fast_f32(float x) {
    /* written so that NaN stays NaN: each comparison is false for it */
    float z = x * 0.70710678118654752f;
    z = z < -4.0f ? -4.0f : z > 4.0f ? 4.0f : z;
    const float t = z * z;
    float p = GE_GELU_P6;
    p = p * t + GE_GELU_P5;
    p = p * t + GE_GELU_P4;
    p = p * t + GE_GELU_P3;
    p = p * t + GE_GELU_P2;
    p = p * t + GE_GELU_P1;
    p = p * t + GE_GELU_P0;
    float q = GE_GELU_Q4;
    q = q * t + GE_GELU_Q3;
    q = q * t + GE_GELU_Q2;
    q = q * t + GE_GELU_Q1;
    q = q * t + 1.0f;
    float erf = z * p / q;
    erf = erf < -1.0f ? -1.0f : erf > 1.0f ? 1.0f : erf;
    return 0.5f * x * (1.0f + erf);
}

/* x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2, which unlike 1 + erf(x / sqrt 2)
 * keeps its precision for negative x. erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + |z| / 2),
 * P the degree-9 Chebyshev fit of Numerical Recipes' erfcc (relative error below 1.2e-7
 * for every z), and 2 - erfc(|z|) for z < 0. The tail of erfc is steep: z^2 = x^2 / 2 is
 * split as xh^2 / 2 (xh: |x| to 12 bits, so xh^2 is exact in float) plus the small rest,
 * and the two exponentials multiplied, so that no rounding of a large exponent reaches
 * the result.
 * All in float and branch-free, so that the loops calling it vectorize (NN_VECTORIZED:
 * AVX-512, AVX2, SSE2); within 6 float ulp of the exact value (1 typically; measured on
 * [-12, 12]), where libm's scalar double erfc cost about 20 ns an element. |z| > 10 (a
 * result below 1e-44 or exactly 2) takes the limit, which also keeps inf - inf out of
 * the split. */
static inline float nn_gelu_erf_f32(float x) {
    const float z = -x * 0.70710678118654752440f;
    const float a = fabsf(z);
    const float t = 1.0f / (1.0f + 0.5f * a);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    /* z^2 = x^2 / 2 from x itself (z's own rounding would be multiplied by z^2) */
    const float w = a < 10.0f ? fabsf(x) : 0.0f;
    uint32_t bits;
    memcpy(&bits, &w, sizeof bits);
    bits &= 0xFFFFF000u;
    float high;
    memcpy(&high, &bits, sizeof high);
    const float low = w - high;
    const float tail_small =
        t * nn_expf(-0.5f * (high * high)) * nn_expf(p - 0.5f * (low * (w + high)));
    const float tail = a < 10.0f ? tail_small : 0.0f;
    const float erfc_z = z >= 0.0f ? tail : 2.0f - tail;
    return 0.5f * x * erfc_z;
}

#endif /* GE_HUB_ACTIVATION_MATH_H */
