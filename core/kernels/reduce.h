/*
 * Reduction and scan kernels (reduce.c, reduce_index.c, reduce_scan.c, reduce_einsum.c): their
 * declarations and the helpers they share (blobs are read with ge_hub/blob.h).
 *
 * Every blob is int64 values, native byte order, packed by ge_hub/kernels/reduce.py
 * (Einsum: ge_hub/kernels/reduce_einsum.py), which resolves all shapes at compile time:
 *
 * Reduce*: nk, kept_shape[nk], kept_strides[nk], nr, red_shape[nr], red_strides[nr], inner
 *     The input is read as rows (the kept dims, in output order) times a reduced
 *     multi-index times a contiguous run of `inner` kept elements: output element
 *     (row, i) reduces input[row_offset + reduced_offset + i] over every reduced index.
 *     Size-1 dims are gone and adjacent dims of one kind merged, so when inner == 1 the
 *     last reduced dim has stride 1. keepdims changes no byte and is not in the blob.
 *
 * ArgMax, ArgMin: outer, n, inner, select_last_index
 * CumSum, CumProd: outer, n, inner, exclusive, reverse, runtime_axis
 *     (runtime_axis 1: the axis input is read at run time, the first three are 0)
 * TopK:           outer, n, inner, k, largest
 *     The input is [outer, n, inner] around the axis; the outputs [outer, 1 or k, inner].
 *
 * Einsum: see reduce_einsum.c.
 */
#ifndef GE_HUB_REDUCE_H
#define GE_HUB_REDUCE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels.h"

/*
 * REDUCE_VECTORIZED marks a hot loop to be compiled also for AVX2 and AVX-512, the right
 * version picked once at load time (function multiversioning), as nn_common.h does: the
 * build targets baseline x86-64 (SSE2). Every version computes the same bits: lanes
 * keep their own order, and -std=c11 keeps floating-point contraction off.
 */
#if defined(__x86_64__) && defined(__has_attribute)
/* (not under a sanitizer: its runtime is not ready when the ifunc resolvers run) */
#if __has_attribute(target_clones) && !defined(__SANITIZE_ADDRESS__) \
    && !defined(__SANITIZE_THREAD__)
#define REDUCE_VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef REDUCE_VECTORIZED
#define REDUCE_VECTORIZED
#endif

/* The helpers of a REDUCE_VECTORIZED loop are inlined into every version of it: an
 * out-of-line call would run the baseline (SSE2) code between AVX state switches. */
#if defined(__GNUC__)
#define REDUCE_INLINE static inline __attribute__((always_inline))
#else
#define REDUCE_INLINE static inline
#endif

/*
 * The maximum and minimum of a contiguous float run, NaN if it holds a NaN, -inf or +inf
 * if it is empty. A NaN-propagating select does not vectorize, so with SSE the loop
 * takes maxps/minps, which ignore a NaN element (they keep their second operand when
 * either is NaN), and notes in a separate mask whether any NaN went by.
 */
#if defined(__SSE2__)
#define REDUCE_EXTREME_SSE(PICK, SCALAR_BEATS)                                               \
    if (n >= 16) {                                                                           \
        __m128 m0 = _mm_set1_ps(result), m1 = m0, m2 = m0, m3 = m0;                          \
        __m128 nan = _mm_setzero_ps();                                                       \
        for (; i + 16 <= n; i += 16) {                                                       \
            __m128 v0 = _mm_loadu_ps(p + i), v1 = _mm_loadu_ps(p + i + 4);                   \
            __m128 v2 = _mm_loadu_ps(p + i + 8), v3 = _mm_loadu_ps(p + i + 12);              \
            m0 = PICK(v0, m0);                                                               \
            m1 = PICK(v1, m1);                                                               \
            m2 = PICK(v2, m2);                                                               \
            m3 = PICK(v3, m3);                                                               \
            nan = _mm_or_ps(nan, _mm_or_ps(_mm_or_ps(_mm_cmpunord_ps(v0, v0),                \
                                                     _mm_cmpunord_ps(v1, v1)),               \
                                           _mm_or_ps(_mm_cmpunord_ps(v2, v2),                \
                                                     _mm_cmpunord_ps(v3, v3))));             \
        }                                                                                    \
        if (_mm_movemask_ps(nan)) {                                                          \
            return NAN;                                                                      \
        }                                                                                    \
        float lanes[4];                                                                      \
        _mm_storeu_ps(lanes, PICK(PICK(m0, m1), PICK(m2, m3)));                              \
        for (int l = 0; l < 4; l++) {                                                        \
            result = SCALAR_BEATS(lanes[l], result) ? lanes[l] : result;                     \
        }                                                                                    \
    }
#else
#define REDUCE_EXTREME_SSE(PICK, SCALAR_BEATS)
#endif

#define REDUCE_GREATER(a, b) ((a) > (b))
#define REDUCE_LESS(a, b) ((a) < (b))

REDUCE_INLINE float reduce_max_run_f32(const float *p, int64_t n) {
    float result = -INFINITY;
    int64_t i = 0;
    REDUCE_EXTREME_SSE(_mm_max_ps, REDUCE_GREATER)
    for (; i < n; i++) {
        result = (p[i] > result || p[i] != p[i]) ? p[i] : result;  /* a NaN stays */
    }
    return result;
}

REDUCE_INLINE float reduce_min_run_f32(const float *p, int64_t n) {
    float result = INFINITY;
    int64_t i = 0;
    REDUCE_EXTREME_SSE(_mm_min_ps, REDUCE_LESS)
    for (; i < n; i++) {
        result = (p[i] < result || p[i] != p[i]) ? p[i] : result;
    }
    return result;
}

/* Fixed blobs (ge_hub/blob.h's GE_BLOB_RECORD; the packers in ge_hub/kernels/reduce.py
 * name the same fields): the input is [outer, n, inner] around the axis. */
#define GE_ARG_BLOB(INT, FLOAT) INT(outer) INT(n) INT(inner) INT(select_last_index)
GE_BLOB_RECORD(ge_arg_blob, GE_ARG_BLOB)

#define GE_TOPK_BLOB(INT, FLOAT) INT(outer) INT(n) INT(inner) INT(k) INT(largest)
GE_BLOB_RECORD(ge_topk_blob, GE_TOPK_BLOB)

#define GE_CUMSUM_BLOB(INT, FLOAT) \
    INT(outer) INT(n) INT(inner) INT(exclusive) INT(reverse) INT(runtime_axis)
GE_BLOB_RECORD(ge_cumsum_blob, GE_CUMSUM_BLOB)

/* The reduce family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_REDUCE_KERNELS(X)                           \
    /* reduce.c: Reduce* */                            \
    X(ge_reduce_sum_f32)  /* ReduceSum */              \
    X(ge_reduce_sum_i32)  /* ReduceSum */              \
    X(ge_reduce_sum_i64)  /* ReduceSum */              \
    X(ge_reduce_mean_f32)  /* ReduceMean */            \
    X(ge_reduce_max_f32)  /* ReduceMax */              \
    X(ge_reduce_max_i32)  /* ReduceMax */              \
    X(ge_reduce_max_i64)  /* ReduceMax */              \
    X(ge_reduce_min_f32)  /* ReduceMin */              \
    X(ge_reduce_min_i32)  /* ReduceMin */              \
    X(ge_reduce_min_i64)  /* ReduceMin */              \
    X(ge_reduce_prod_f32)  /* ReduceProd */            \
    X(ge_reduce_prod_i32)  /* ReduceProd */            \
    X(ge_reduce_prod_i64)  /* ReduceProd */            \
    X(ge_reduce_l1_f32)  /* ReduceL1 */                \
    X(ge_reduce_l2_f32)  /* ReduceL2 */                \
    X(ge_reduce_sum_square_f32)  /* ReduceSumSquare */ \
    X(ge_reduce_log_sum_exp_f32)                       \
    /* reduce_index.c: ArgMax, ArgMin, TopK */         \
    X(ge_argmax_f32)                                   \
    X(ge_argmax_i32)                                   \
    X(ge_argmax_i64)                                   \
    X(ge_argmin_f32)                                   \
    X(ge_argmin_i32)                                   \
    X(ge_argmin_i64)                                   \
    X(ge_topk_f32)                                     \
    X(ge_topk_i32)                                     \
    X(ge_topk_i64)                                     \
    /* reduce_scan.c: CumSum, CumProd */               \
    X(ge_cumsum_f32)                                   \
    X(ge_cumsum_f64)                                   \
    X(ge_cumsum_i32)                                   \
    X(ge_cumsum_i64)                                   \
    X(ge_cumprod_f32)                                  \
    X(ge_cumprod_f64)                                  \
    X(ge_cumprod_i32)                                  \
    X(ge_cumprod_i64)                                  \
    /* reduce_einsum.c */                              \
    X(ge_einsum_f32)

GE_REDUCE_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_REDUCE_H */
