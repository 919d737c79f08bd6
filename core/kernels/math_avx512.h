/*
 * Vector math on 16 float lanes for the AVX-512 GEMM epilogues (nn_matmul_packed.c's fp32
 * tiles and nn_gemm_bf16.c's bf16 direct store): the exponential and Gelu's one-exponential
 * erf form. Include only inside an x86 build, after <immintrin.h>.
 */
#ifndef GE_HUB_MATH_AVX512_H
#define GE_HUB_MATH_AVX512_H

#include <immintrin.h>
#include <math.h>

/* nn_expf (nn_common.h) on 16 lanes, operation for operation. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 exp512(__m512 x) {
    const __m512 max_arg = _mm512_set1_ps(88.3762626647949f);
    const __m512 min_arg = _mm512_set1_ps(-87.3365447505531f);
    __m512 clamped = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, max_arg, _CMP_GT_OQ), x, max_arg);
    clamped = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(clamped, min_arg, _CMP_LT_OQ), clamped,
                                   min_arg);
    const __m512 finite = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(clamped, clamped, _CMP_EQ_OQ),
                                              clamped);
    const __m512 shifter = _mm512_set1_ps(12582912.0f);
    const __m512 n = _mm512_sub_ps(
        _mm512_add_ps(_mm512_mul_ps(finite, _mm512_set1_ps(1.44269504088896341f)), shifter),
        shifter);
    const __m512 r = _mm512_add_ps(
        _mm512_sub_ps(clamped, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f))),
        _mm512_mul_ps(n, _mm512_set1_ps(2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r),
                      _mm512_set1_ps(1.0f));
    const __m512i bits = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 result = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    result = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, max_arg, _CMP_GT_OQ), result,
                                  _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, min_arg, _CMP_LT_OQ), result,
                                _mm512_setzero_ps());
}

/* Gelu's erf form on 16 lanes: x Phi(x) = x erfc(-x / sqrt 2) / 2, with erfc(a) for a >= 0
 * by Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7; for x < 0 the small erfc
 * itself, so no cancellation) and 2 - erfc(a) for x >= 0: one exponential and a degree-5
 * polynomial (gelu_bf16 in nn_gemm_bf16.c is its scalar form). The standalone Gelu's
 * formula (activation_math.h: two exponentials and a degree-9 polynomial, a few ulp) cost
 * 0.3 ms over the transformer's [128, 1024] FFN activations at 1 thread, most of the
 * product itself; this one agrees with it to 1e-7 |x|. NaN stays NaN, +inf gives +inf and
 * -inf NaN (-inf * 0), as in the reference. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 gelu512(__m512 x) {
    const __m512 a = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, one));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    const __m512 erfc_a = _mm512_mul_ps(_mm512_mul_ps(p, t),
                                        exp512(_mm512_sub_ps(_mm512_setzero_ps(),
                                                             _mm512_mul_ps(a, a))));
    const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 phi2 = _mm512_mask_blend_ps(positive, erfc_a,
                                             _mm512_sub_ps(_mm512_set1_ps(2.0f), erfc_a));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), phi2);
}

#endif /* GE_HUB_MATH_AVX512_H */
