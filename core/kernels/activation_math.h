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
