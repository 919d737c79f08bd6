/*
 * The stride-2 column packer of the bf16 packed convolution path (conv_stride2_bf16.h).
 */
#include "conv_stride2_bf16.h"

#include "nn_gemm_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CONV_STRIDE2_X86 1
#endif

#define NR NN_BF16_NR

int conv_stride2_fits(const nn_window *w, int64_t rows) {
#ifdef CONV_STRIDE2_X86
    return w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1 && w->stride[2] == 2
           && w->dil[2] == 1 && w->k[2] <= CONV_STRIDE2_MAX_KX
           && rows <= CONV_STRIDE2_MAX_ROWS && nn_bf16_cvt();
#else
    (void)w;
    (void)rows;
    return 0;
#endif
}

#ifdef CONV_STRIDE2_X86
/* One row of the column matrix: its channel's plane and its tap. */
typedef struct {
    int64_t plane;  /* the channel's first value, from the group's first */
    int64_t row;    /* ky * dilation - top pad: added to oy * stride, the input row */
    int64_t kx;     /* the tap's column (a run's input column: 2 * ox + kx - left pad) */
} column_row;


/* 32 input values from `base` (NULL: a padding row) under two masks (the lanes inside the
 * row; `base` itself may lie outside it), as 32 bf16. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline __m512i bf16_values(
    const float *base, __mmask16 m0, __mmask16 m1) {
    if (base == NULL) {
        return _mm512_setzero_si512();
    }
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, base), v1 = _mm512_maskz_loadu_ps(m1, base + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
}

/* Pair-rows [0, pair_rows) of one run of `len` positions (one output row's, from column
 * ox, row oy) into panel words dst (pair-rows NR words apart). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void pack_run(
    const conv_stride2_columns *job, const column_row *rows, int64_t k, int64_t pair_rows,
    int64_t oy, int64_t ox, int64_t len, uint32_t *dst) {
    const nn_window *w = job->w;
    const int64_t height = w->in[1], width = w->in[2], top = oy * w->stride[1];
    /* word 2i <- the first's value 2i, word 2i + 1 <- the second's value 2i */
    static const uint16_t even_words[32] = {0,  32, 2,  34, 4,  36, 6,  38, 8,  40, 10,
                                            42, 12, 44, 14, 46, 16, 48, 18, 50, 20, 52,
                                            22, 54, 24, 56, 26, 58, 28, 60, 30, 62};
    const __m512i pick = _mm512_loadu_si512(even_words);
    const __mmask16 store0 = nn_bf16_lanes(0, len), store1 = nn_bf16_lanes(-16, len - 16);
    /* per tap column: the run's first input column and the masks of its 64 values */
    int64_t from[CONV_STRIDE2_MAX_KX];
    __mmask16 inside[CONV_STRIDE2_MAX_KX][4];
    for (int64_t kx = 0; kx < w->k[2]; kx++) {
        from[kx] = 2 * ox + kx - w->pad[2];
        for (int h = 0; h < 4; h++) {
            inside[kx][h] = nn_bf16_lanes(-from[kx] - 16 * h, width - from[kx] - 16 * h);
        }
    }
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t q = 0; q < pair_rows; q++, dst += NR) {
        const column_row *even = &rows[2 * q], *odd = &rows[2 * q + 1];
        const int64_t iy = top + even->row, ex = even->kx;
        const float *even_base =
            iy >= 0 && iy < height
                ? (const float *)((uintptr_t)(job->x + even->plane + iy * width)
                                  + (uintptr_t)from[ex] * 4u)
                : NULL;
        __m512i lo, hi = zero;
        if (2 * q + 1 < k && odd->plane == even->plane && odd->row == even->row
            && odd->kx == ex + 1) {
            /* neighbouring taps of one input row: the values in order are the pairs */
            lo = bf16_values(even_base, inside[ex][0], inside[ex][1]);
            if (store1) {
                hi = bf16_values(even_base ? even_base + 32 : NULL, inside[ex][2], inside[ex][3]);
            }
        } else {
            const float *odd_base = NULL;
            int64_t odd_kx = 0;
            if (2 * q + 1 < k) {
                const int64_t odd_iy = top + odd->row;
                odd_kx = odd->kx;
                odd_base = odd_iy >= 0 && odd_iy < height
                               ? (const float *)((uintptr_t)(job->x + odd->plane + odd_iy * width)
                                                 + (uintptr_t)from[odd_kx] * 4u)
                               : NULL;
            }
            const __mmask16 *e = inside[ex], *o = inside[odd_kx];
            lo = _mm512_permutex2var_epi16(bf16_values(even_base, e[0], e[1]), pick,
                                           bf16_values(odd_base, o[0], o[1]));
            if (store1) {
                hi = _mm512_permutex2var_epi16(
                    bf16_values(even_base ? even_base + 32 : NULL, e[2], e[3]), pick,
                    bf16_values(odd_base ? odd_base + 32 : NULL, o[2], o[3]));
            }
        }
        _mm512_mask_storeu_epi32(dst, store0, lo);
        if (store1) {
            _mm512_mask_storeu_epi32(dst + 16, store1, hi);
        }
    }
}
#endif

void conv_stride2_pack(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                       int64_t panel_stride, int64_t k) {
#ifdef CONV_STRIDE2_X86
    const conv_stride2_columns *job = (const conv_stride2_columns *)arg;
    const nn_window *w = job->w;
    const int64_t kp = nn_bf16_depth(k), pair_rows = (k + 1) / 2;
    const int64_t taps = w->k[1] * w->k[2], in_size = nn_window_in_size(w);
    column_row rows[CONV_STRIDE2_MAX_ROWS];
    for (int64_t r = 0; r < k; r++) {
        const int64_t tap = r % taps;
        rows[r] = (column_row){(r / taps) * in_size, (tap / w->k[2]) * w->dil[1] - w->pad[1],
                               tap % w->k[2]};
    }
    const int64_t out_w = w->out[2];
    for (int64_t p0 = 0; p0 < cols; p0 += NR) {
        uint32_t *panel = (uint32_t *)(panels + (p0 / NR) * panel_stride);
        const int64_t count = cols - p0 < NR ? cols - p0 : NR;
        nn_bf16_panel_zeros(panel, count, pair_rows, kp);
        /* the panel's positions, cut at output-row ends */
        for (int64_t at = 0; at < count;) {
            const int64_t position = col0 + p0 + at, ox = position % out_w;
            const int64_t len = count - at < out_w - ox ? count - at : out_w - ox;
            pack_run(job, rows, k, pair_rows, position / out_w, ox, len, panel + at);
            at += len;
        }
    }
#else
    (void)arg, (void)col0, (void)cols, (void)panels, (void)panel_stride, (void)k;
#endif
}
