/*
 * Vector math on 16 float lanes for the AVX-512 kernels (nn_softmax.c's rows, the GEMM
 * epilogues of nn_matmul_packed.c's fp32 tiles and nn_gemm_bf16.c's bf16 direct store): the
 * exponential of non-positive values, Gelu's one-exponential erf form and the bf16
 * products' rational one; the packers' bf16 rounding in integer steps; and a 16 x 16
 * transpose of 32-bit lanes (the bf16 packers and the channels-last store). Include only
 * inside an x86 build, after <immintrin.h>.
 */
#ifndef GE_HUB_MATH_AVX512_H
#define GE_HUB_MATH_AVX512_H

#include <immintrin.h>
#include <math.h>

#include "activation_math.h" /* GE_GELU_* */

/* exp(x) on 16 lanes for x <= 0 (x - the row's maximum), NaN-free: x = n ln2 + r with
 * |r| <= ln2 / 2, exp(r) by the same Cephes polynomial as nn_expf (in fused multiply-adds),
 * times 2^n by vscalefps; x below -87.3 (exp subnormal or 0, -inf included) gives 0. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 exp512_nonpositive(
    __m512 x) {
    const __m512 min_arg = _mm512_set1_ps(-87.3365447505531f);
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, min_arg, _CMP_LT_OQ);
    const __m512 clamped = _mm512_max_ps(x, min_arg);
    const __m512 n = _mm512_roundscale_ps(
        _mm512_mul_ps(clamped, _mm512_set1_ps(1.44269504088896341f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), clamped);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_scalef_ps(p, n));
}

/* Gelu's erf form on 16 lanes: x Phi(x) = x erfc(-x / sqrt 2) / 2, with erfc(a) for a >= 0
 * by Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7; for x < 0 the small erfc
 * itself, so no cancellation) and 2 - erfc(a) for x >= 0: one exponential (of -a^2 <= 0)
 * and a degree-5 polynomial, for the fp32 packed tiles (nn_matmul_packed.c; the bf16
 * products take gelu512_fast below). The standalone Gelu's
 * formula (activation_math.h: two exponentials and a degree-9 polynomial, a few ulp) cost
 * 0.3 ms over the transformer's [128, 1024] FFN activations at 1 thread, most of the
 * product itself; this one agrees with it to 1e-7 |x|. NaN stays NaN, +inf gives +inf and
 * -inf NaN (-inf * 0), as in the reference. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 gelu512(__m512 x) {
    /* a clamped at 10 (erfc(10) = 2e-45, below every float): 1 / (1 + 0.33 a) stays
     * finite for the reciprocal's refinement; min(10, NaN) is NaN, so NaN stays NaN */
    const __m512 a = _mm512_min_ps(
        _mm512_set1_ps(10.0f),
        _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f)));
    const __m512 d = _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, _mm512_set1_ps(1.0f));
    /* 1 / d by the 14-bit estimate and one Newton step (about 2^-27 relative): a division
     * took a third of this function's time */
    const __m512 r = _mm512_rcp14_ps(d);
    const __m512 t = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.0f)), r);
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    const __m512 erfc_a = _mm512_mul_ps(_mm512_mul_ps(p, t),
                                        exp512_nonpositive(_mm512_fnmadd_ps(a, a, _mm512_setzero_ps())));
    const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 phi2 = _mm512_mask_blend_ps(positive, erfc_a,
                                             _mm512_sub_ps(_mm512_set1_ps(2.0f), erfc_a));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), phi2);
}


/* The bf16 products' Gelu on 16 lanes (activation_math.h, GE_GELU_*: nn_gelu_fast_f32 is
 * its scalar form, for their generic variant): x Phi(x) = x (1 + erf(z)) / 2 with z = x / sqrt 2 clamped to [-4, 4]
 * (erf(4) is 1 to float precision), erf(z) = z P(z^2) / Q(z^2), a rational fit of
 * degrees 6 and 4 (absolute error 2e-7 in float32), clamped to [-1, 1]: 11 multiply-adds
 * and one reciprocal, where gelu512 above (kept for the fp32 products, whose results
 * stay as they were) takes an exponential besides: on BERT-base's [128, 768] x [768, 3072]
 * FusedMatMul in bf16 (one thread, AMX Xeon) gelu512's Gelu took 0.22 ms of 0.86, a
 * quarter; this one 0.13 ms. Within 2e-7 |x| of the exact Gelu (for x < -3, where Phi
 * is below 1.5e-3, only absolutely so). NaN stays NaN, +inf gives +inf and -inf NaN
 * (-inf * 0), as in the reference. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 gelu512_fast(__m512 x) {
    /* max(-4, NaN) and min(4, NaN) are NaN: the second operand wins, so NaN stays */
    const __m512 z = _mm512_min_ps(
        _mm512_set1_ps(4.0f),
        _mm512_max_ps(_mm512_set1_ps(-4.0f),
                      _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f))));
    const __m512 t = _mm512_mul_ps(z, z);
    __m512 p = _mm512_set1_ps(GE_GELU_P6);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(GE_GELU_P5));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(GE_GELU_P4));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(GE_GELU_P3));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(GE_GELU_P2));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(GE_GELU_P1));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(GE_GELU_P0));
    __m512 q = _mm512_set1_ps(GE_GELU_Q4);
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(GE_GELU_Q3));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(GE_GELU_Q2));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(GE_GELU_Q1));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.0f));
    /* 1 / q by the 14-bit estimate and one Newton step (q is in [1, 8e3]) */
    const __m512 r0 = _mm512_rcp14_ps(q);
    const __m512 r = _mm512_fmadd_ps(r0, _mm512_fnmadd_ps(q, r0, _mm512_set1_ps(1.0f)), r0);
    const __m512 erf = _mm512_min_ps(
        _mm512_set1_ps(1.0f),
        _mm512_max_ps(_mm512_set1_ps(-1.0f), _mm512_mul_ps(_mm512_mul_ps(z, p), r)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                         _mm512_add_ps(_mm512_set1_ps(1.0f), erf));
}

/* 16 fp32 values rounded to bf16 as the packers round (nearest even, NaN kept quiet), each
 * in the high half of its 32-bit lane: integer steps, for CPUs without AVX512-BF16 too. */
__attribute__((target("avx512f"))) static inline __m512i round_high(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x400000));
}

/* r[i] lane j <- r[j] lane i: a 16 x 16 transpose of 32-bit lanes in four rounds of
 * shuffles (pairs, quads, 128-bit halves, then whole halves). */
__attribute__((target("avx512f"))) static inline void transpose16(__m512 *r) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xdd);
        t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
    }
}

#endif /* GE_HUB_MATH_AVX512_H */
