/*
 * The separable pools' row kernels (pool_rows.h). MaxPool: a NaN-keeping elementwise
 * maximum of two rows (the window's rows reduced to one) and a horizontal maximum of k
 * columns per output over a row buffer that already holds -inf where the window reaches
 * past the input (padding and ceil_mode's extra cells), so no output needs an edge case.
 * AveragePool: the same two loops with + in place of the maximum, over a buffer padded
 * with zeros (padding adds nothing to a sum).
 *
 * Variants, picked once from the CPU (GE_HUB_POOL_KERNEL=avx2|generic forces a lesser one):
 *   avx512   16 outputs per vector, the last few under a mask; stride 2 deinterleaves
 *            two loads with vpermt2ps, so each pair of kernel columns costs two loads;
 *   avx2     8 outputs per vector (shuffle + permute for stride 2), tails under vmaskmov;
 *   generic  C loops the compiler vectorizes (NN_VECTORIZED), for other CPUs and for
 *            strides above 2 or dilated columns.
 * The AVX-512 variant also has max_plane, a MaxPool plane read straight from X (stride 1 or
 * 2, windows up to 3 wide): the window's rows are reduced 16 columns at a time in
 * registers (masked loads: cells outside the row read as -inf and are never touched), a
 * stride-2 pair of such vectors split into its even and odd columns by two permutes, and
 * the third column taken from the next chunk by a lane shift. No row is copied into a
 * buffer and nothing is stored but the outputs: SqueezeNet's 3x3 stride-2 pools ran
 * 2-4x slower than ONNX Runtime's through the buffers.
 * The maximum is exact, so every variant gives the same bits (up to which NaN wins); the
 * sums add the same values in the same order in every variant (rows first, then columns
 * left to right).
 *
 * Each loop is written once, as an always-inlined body taking `sum` (0: maximum, 1: sum)
 * as a constant, so each variant's max and sum kernels are that body specialized.
 */
#include "pool_rows.h"

#include "ge_hub/internal/simd.h"
#include "nn_common.h" /* NN_VECTORIZED */

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_POOL_X86 1
#endif


NN_VECTORIZED static void vmax_generic(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dst[i] = nn_max_keep_nan(dst[i], src[i]);
    }
}

NN_VECTORIZED static void vsum_generic(float *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dst[i] += src[i];
    }
}

/* A column of the kernel at a time over the whole output row, so the compiler's clones
 * (NN_VECTORIZED) vectorize the loop over outputs. */
NN_VECTORIZED static void hmax_generic(const float *buf, float *y, int64_t out_w,
                                       int64_t stride, int64_t k, int64_t dil) {
    for (int64_t ox = 0; ox < out_w; ox++) {
        y[ox] = buf[ox * stride];
    }
    for (int64_t kx = 1; kx < k; kx++) {
        const float *p = buf + kx * dil;
        for (int64_t ox = 0; ox < out_w; ox++) {
            y[ox] = nn_max_keep_nan(y[ox], p[ox * stride]);
        }
    }
}

NN_VECTORIZED static void hsum_generic(const float *buf, float *y, int64_t out_w,
                                       int64_t stride, int64_t k, int64_t dil) {
    for (int64_t ox = 0; ox < out_w; ox++) {
        y[ox] = buf[ox * stride];
    }
    for (int64_t kx = 1; kx < k; kx++) {
        const float *p = buf + kx * dil;
        for (int64_t ox = 0; ox < out_w; ox++) {
            y[ox] += p[ox * stride];
        }
    }
}

#ifdef NN_POOL_X86
#define NN_POOL_INLINE static inline __attribute__((always_inline))

/* max(acc, v) with a NaN in either kept: vmaxps returns its second operand when either
 * is NaN, which keeps acc's; v's NaN lanes are put back by a mask. */
__attribute__((target("avx512f"))) NN_POOL_INLINE __m512 max512(__m512 acc, __m512 v) {
    return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

/* acc + v (sum) or the NaN-keeping maximum. */
__attribute__((target("avx512f"))) NN_POOL_INLINE __m512 join512(__m512 acc, __m512 v,
                                                                 int sum) {
    return sum ? _mm512_add_ps(acc, v) : max512(acc, v);
}

__attribute__((target("avx512f"))) NN_POOL_INLINE void v512(float *dst, const float *src,
                                                            int64_t n, int sum) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(dst + i,
                         join512(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(src + i), sum));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 a = _mm512_maskz_loadu_ps(m, dst + i), b = _mm512_maskz_loadu_ps(m, src + i);
        _mm512_mask_storeu_ps(dst + i, m, join512(a, b, sum));
    }
}

__attribute__((target("avx512f"))) NN_POOL_INLINE void h512(const float *buf, float *y,
                                                            int64_t out_w, int64_t stride,
                                                            int64_t k, int sum) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,
                                          29, 31);
    for (int64_t ox = 0; ox < out_w; ox += 16) {
        const int64_t left = out_w - ox;
        const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
        __m512 acc;
        if (stride == 1) {
            acc = _mm512_loadu_ps(buf + ox);
            for (int64_t kx = 1; kx < k; kx++) {
                acc = join512(acc, _mm512_loadu_ps(buf + ox + kx), sum);
            }
        } else {
            /* Columns kx and kx + 1 of 16 outputs are the even and odd lanes of the 32
             * floats from 2 * ox + kx. */
            const float *p = buf + 2 * ox;
            __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
            acc = _mm512_permutex2var_ps(a, even, b);
            if (k > 1) {
                acc = join512(acc, _mm512_permutex2var_ps(a, odd, b), sum);
            }
            for (int64_t kx = 2; kx < k; kx += 2) {
                a = _mm512_loadu_ps(p + kx);
                b = _mm512_loadu_ps(p + kx + 16);
                acc = join512(acc, _mm512_permutex2var_ps(a, even, b), sum);
                if (kx + 1 < k) {
                    acc = join512(acc, _mm512_permutex2var_ps(a, odd, b), sum);
                }
            }
        }
        _mm512_mask_storeu_ps(y + ox, m, acc);
    }
}

/* The window's rows reduced over the 16 columns from c: masked loads, -inf outside
 * [0, in_w) (lanes there are never read). */
__attribute__((target("avx512f"))) NN_POOL_INLINE __m512 column_max512(
    const float *const *rows, int64_t n_rows, int64_t c, int64_t in_w) {
    int64_t first = -c, end = in_w - c;
    first = first < 0 ? 0 : first > 16 ? 16 : first;
    end = end < 0 ? 0 : end > 16 ? 16 : end;
    const __mmask16 inside = (__mmask16)(((1u << end) - 1u) & ~((1u << first) - 1u));
    const __m512 none = _mm512_set1_ps(-INFINITY);
    __m512 acc = _mm512_mask_loadu_ps(none, inside, rows[0] + c);
    for (int64_t i = 1; i < n_rows; i++) {
        acc = max512(acc, _mm512_mask_loadu_ps(none, inside, rows[i] + c));
    }
    return acc;
}

/* Lanes `shift` (1 or 2) to 15 of `here`, then the first `shift` lanes of `next`: the
 * columns `shift` further on. */
__attribute__((target("avx512f"))) NN_POOL_INLINE __m512 shift_in512(__m512 here, __m512 next,
                                                                     int shift) {
    const __m512i h = _mm512_castps_si512(here), n = _mm512_castps_si512(next);
    return _mm512_castsi512_ps(shift == 1 ? _mm512_alignr_epi32(n, h, 1)
                                          : _mm512_alignr_epi32(n, h, 2));
}

/* The first min(left, 16) lanes of v into y. */
__attribute__((target("avx512f"))) NN_POOL_INLINE void store_lanes512(float *y, int64_t left,
                                                                      __m512 v) {
    _mm512_mask_storeu_ps(y, left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u), v);
}

/* One output row: y[ox] = max over the n_rows rows and kx < k of rows[i][ox * stride +
 * kx - pad], cells outside [0, in_w) taking no part. */
__attribute__((target("avx512f"))) NN_POOL_INLINE void max_row512(
    const float *const *rows, int64_t n_rows, int64_t in_w, int64_t pad, float *y,
    int64_t out_w, int64_t stride, int64_t k) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    if (stride == 1) {
        /* taps kx of 16 outputs: the 16 columns from ox - pad + kx, this chunk's vector
         * shifted by kx lanes into the next one's */
        __m512 here = column_max512(rows, n_rows, -pad, in_w);
        for (int64_t ox = 0; ox < out_w; ox += 16) {
            const __m512 next = (k > 1 || ox + 16 < out_w) && ox + 16 - pad < in_w
                ? column_max512(rows, n_rows, ox + 16 - pad, in_w) : _mm512_set1_ps(-INFINITY);
            __m512 acc = here;
            if (k > 1) {
                acc = max512(acc, shift_in512(here, next, 1));
            }
            if (k > 2) {
                acc = max512(acc, shift_in512(here, next, 2));
            }
            store_lanes512(y + ox, out_w - ox, acc);
            here = next;
        }
        return;
    }
    /* stride 2: output ox's taps are columns 2 ox - pad + kx, the even (kx 0), odd (kx 1)
     * and next even (kx 2) columns of the 32 from 2 ox0 - pad */
    __m512 lo = column_max512(rows, n_rows, -pad, in_w);
    __m512 hi = column_max512(rows, n_rows, 16 - pad, in_w);
    __m512 evens = _mm512_permutex2var_ps(lo, even, hi);
    __m512 odds = _mm512_permutex2var_ps(lo, odd, hi);
    for (int64_t ox = 0; ox < out_w; ox += 16) {
        __m512 acc = evens;
        if (k > 1) {
            acc = max512(acc, odds);
        }
        /* the next chunk's columns: -inf past the row (the last chunk of a row, often) */
        __m512 next_evens = _mm512_set1_ps(-INFINITY), next_odds = next_evens;
        const int64_t c = 2 * (ox + 16) - pad;
        if ((ox + 16 < out_w || k > 2) && c < in_w) {
            lo = column_max512(rows, n_rows, c, in_w);
            hi = column_max512(rows, n_rows, c + 16, in_w);
            next_evens = _mm512_permutex2var_ps(lo, even, hi);
            next_odds = _mm512_permutex2var_ps(lo, odd, hi);
        }
        if (k > 2) {
            acc = max512(acc, shift_in512(evens, next_evens, 1));
        }
        store_lanes512(y + ox, out_w - ox, acc);
        evens = next_evens;
        odds = next_odds;
    }
}

__attribute__((target("avx512f"))) static void max_plane_avx512(const float *x, float *y,
                                                                const nn_pool_plane *g) {
    const float *rows[NN_POOL_DIRECT_MAX_ROWS];
    for (int64_t oy = 0; oy < g->out_h; oy++, y += g->out_w) {
        const int64_t y0 = oy * g->stride_h - g->pad_h;
        int64_t n_rows = 0;
        for (int64_t ky = 0; ky < g->k_h; ky++) {
            if (y0 + ky >= 0 && y0 + ky < g->in_h) {
                rows[n_rows++] = x + (y0 + ky) * g->in_w;
            }
        }
        if (n_rows == 0) {  /* no input row inside the window */
            for (int64_t ox = 0; ox < g->out_w; ox++) {
                y[ox] = -INFINITY;
            }
            continue;
        }
        /* the common windows as constants, so their loops unroll */
        if (g->stride_w == 2 && g->k_w == 3 && n_rows == 3) {
            max_row512(rows, 3, g->in_w, g->pad_w, y, g->out_w, 2, 3);
        } else {
            max_row512(rows, n_rows, g->in_w, g->pad_w, y, g->out_w, g->stride_w, g->k_w);
        }
    }
}

__attribute__((target("avx512f"))) static void vmax_avx512(float *dst, const float *src,
                                                           int64_t n) {
    v512(dst, src, n, 0);
}

__attribute__((target("avx512f"))) static void vsum_avx512(float *dst, const float *src,
                                                           int64_t n) {
    v512(dst, src, n, 1);
}

__attribute__((target("avx512f"))) static void hmax_avx512(const float *buf, float *y,
                                                           int64_t out_w, int64_t stride,
                                                           int64_t k, int64_t dil) {
    if (dil != 1 || stride > 2) {
        hmax_generic(buf, y, out_w, stride, k, dil);
        return;
    }
    h512(buf, y, out_w, stride, k, 0);
}

__attribute__((target("avx512f"))) static void hsum_avx512(const float *buf, float *y,
                                                           int64_t out_w, int64_t stride,
                                                           int64_t k, int64_t dil) {
    if (dil != 1 || stride > 2) {
        hsum_generic(buf, y, out_w, stride, k, dil);
        return;
    }
    h512(buf, y, out_w, stride, k, 1);
}

__attribute__((target("avx2"))) NN_POOL_INLINE __m256 max256(__m256 acc, __m256 v) {
    return _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

__attribute__((target("avx2"))) NN_POOL_INLINE __m256 join256(__m256 acc, __m256 v, int sum) {
    return sum ? _mm256_add_ps(acc, v) : max256(acc, v);
}

__attribute__((target("avx2"))) NN_POOL_INLINE void v256(float *dst, const float *src,
                                                         int64_t n, int sum) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i,
                         join256(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i), sum));
    }
    if (i < n) {
        /* lanes below n - i on: vmaskmov reads and writes nothing past the row */
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 a = _mm256_maskload_ps(dst + i, m), b = _mm256_maskload_ps(src + i, m);
        _mm256_maskstore_ps(dst + i, m, join256(a, b, sum));
    }
}

/* The even (odd) lanes of the 16 floats a, b: shufps picks them per 128-bit half, then
 * a 64-bit permute puts the halves in order. */
__attribute__((target("avx2"))) NN_POOL_INLINE __m256 even256(__m256 a, __m256 b) {
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

__attribute__((target("avx2"))) NN_POOL_INLINE __m256 odd256(__m256 a, __m256 b) {
    __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

__attribute__((target("avx2"))) NN_POOL_INLINE void h256(const float *buf, float *y,
                                                         int64_t out_w, int64_t stride,
                                                         int64_t k, int sum) {
    for (int64_t ox = 0; ox < out_w; ox += 8) {
        __m256 acc;
        if (stride == 1) {
            acc = _mm256_loadu_ps(buf + ox);
            for (int64_t kx = 1; kx < k; kx++) {
                acc = join256(acc, _mm256_loadu_ps(buf + ox + kx), sum);
            }
        } else {
            const float *p = buf + 2 * ox;
            __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
            acc = even256(a, b);
            if (k > 1) {
                acc = join256(acc, odd256(a, b), sum);
            }
            for (int64_t kx = 2; kx < k; kx += 2) {
                a = _mm256_loadu_ps(p + kx);
                b = _mm256_loadu_ps(p + kx + 8);
                acc = join256(acc, even256(a, b), sum);
                if (kx + 1 < k) {
                    acc = join256(acc, odd256(a, b), sum);
                }
            }
        }
        /* the last few outputs under a mask (their loads stay inside the buffer's slack) */
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(out_w - ox)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(y + ox, m, acc);
    }
}

__attribute__((target("avx2"))) static void vmax_avx2(float *dst, const float *src, int64_t n) {
    v256(dst, src, n, 0);
}

__attribute__((target("avx2"))) static void vsum_avx2(float *dst, const float *src, int64_t n) {
    v256(dst, src, n, 1);
}

__attribute__((target("avx2"))) static void hmax_avx2(const float *buf, float *y,
                                                      int64_t out_w, int64_t stride, int64_t k,
                                                      int64_t dil) {
    if (dil != 1 || stride > 2) {
        hmax_generic(buf, y, out_w, stride, k, dil);
        return;
    }
    h256(buf, y, out_w, stride, k, 0);
}

__attribute__((target("avx2"))) static void hsum_avx2(const float *buf, float *y,
                                                      int64_t out_w, int64_t stride, int64_t k,
                                                      int64_t dil) {
    if (dil != 1 || stride > 2) {
        hsum_generic(buf, y, out_w, stride, k, dil);
        return;
    }
    h256(buf, y, out_w, stride, k, 1);
}
#endif

static nn_pool_rows pick_kernel(void) {
    static const nn_pool_rows generic = {"generic", vmax_generic, hmax_generic, vsum_generic,
                                         hsum_generic, NULL};
#ifdef NN_POOL_X86
    static const nn_pool_rows avx512 = {"avx512", vmax_avx512, hmax_avx512, vsum_avx512,
                                        hsum_avx512, max_plane_avx512};
    static const nn_pool_rows avx2 = {"avx2", vmax_avx2, hmax_avx2, vsum_avx2, hsum_avx2,
                                      NULL};
    switch (ge_simd_choose("GE_HUB_POOL_KERNEL")) {
    case GE_SIMD_AVX512:
        return avx512;
    case GE_SIMD_AVX2:
        return avx2;
    case GE_SIMD_GENERIC:
        break;
    }
#endif
    return generic;
}

static nn_pool_rows chosen_kernel;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose_kernel(void) {
    chosen_kernel = pick_kernel();
}

const nn_pool_rows *nn_pool_rows_kernel(void) {
    pthread_once(&chosen_once, choose_kernel);
    return &chosen_kernel;
}
