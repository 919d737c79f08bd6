/*
 * The bf16 product of nn_gemm_bf16.h: blocking, threads, the B converter and the three
 * micro-kernels, picked once at run time (ge_simd_choose_bf16, core/src/simd.c):
 *
 *   amx         a 32 x 32 block of C in four 16 x 16 fp32 tiles: per 32 values of k, two
 *               A tiles and two B tiles loaded, four tdpbf16ps;
 *   avx512bf16  a 16 x 32 block as two 8 x 32 halves in 16 zmm accumulators: per pair of k,
 *               two B loads, eight broadcast pairs of A, sixteen vdpbf16ps (a last panel
 *               of at most 16 columns: its 16 rows in one pass, 16 x 16);
 *   generic     plain C over the same layouts (bf16 widened to fp32, fp32 sums).
 *
 * AMX and the generic kernel also read B in place (nn_bf16_in_place: a Conv's padded grid
 * of channel pairs, no panels packed), AMX because its tile loads take any row stride, the
 * generic one so that the grid's walk is tested on every CPU; AVX512-BF16 packs.
 *
 * All accumulate in fp32 over the whole depth before storing (no k slices: C is written
 * once, with its bias and FusedConv's epilogue). The SIMD units flush bf16 subnormal
 * inputs to zero, as OpenVINO's and oneDNN's bf16 paths do; the sums' order differs
 * between the variants, so they agree to fp32 rounding, not bit for bit.
 */
#include "nn_gemm_bf16.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ge_hub/internal/simd.h"
#include "activation_math.h" /* nn_gelu_fast_f32 */
#include "ge_hub/internal/threadpool.h"
#include "nn.h"
#include "nn_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_BF16_X86 1
#include "math_avx512.h"
#endif

#define MR NN_BF16_MR
#define NR NN_BF16_NR
#define KB NN_BF16_KB

_Static_assert(NN_BF16_NR == NN_PACK_NR, "a Conv's columns are packed in the fp32 panel width");

/* Products smaller than this (in flops) run on the calling thread. */
#define NN_BF16_MIN_PARALLEL_FLOPS (1 << 20)

/* fp32 -> bf16, rounding to nearest even; NaN stays NaN (quiet). */
static inline uint16_t to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
        return (uint16_t)((bits >> 16) | 0x40u);
    }
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* Where the micro-kernels find A (nn_bf16_gemm's a_row, a_tile, a_kstep): row r of a
 * block of 2 * MR rows and depth block kb at a + (r / MR) * tile + (r % MR) * row
 * + (kb / KB) * kstep. */
typedef struct {
    int64_t row, tile, kstep;
} a_walk;

/* Where a micro-kernel that can (bf16_kernel.direct) stores its block straight into C
 * (ldc_col == 1), adding the bias and the residual and applying an activation that fits in
 * registers (none, Relu, Clip, Gelu) on the way, in the order store_block and the epilogue do
 * (so the values are the same; Gelu by gelu_bf16's formula): no block buffer, no epilogue
 * pass over stored runs. */
typedef struct {
    float *c;               /* the block's first value in C */
    int64_t ldc;            /* C's row stride */
    const float *bias;      /* from the block's first row (per row) or column (per column) */
    int bias_per_col;
    const float *residual;  /* laid out like C, at the block's first value; NULL: none */
    int64_t width;          /* columns stored, at most NR */
    int activation;         /* FUSED_ACT_NONE, _RELU, _CLIP or _GELU */
    float low, high;        /* Clip's bounds */
    /* Non-NULL: C and the residual in bf16 instead (channels-last products only) */
    uint16_t *c16;
    const uint16_t *residual16;
    int cvt;  /* round C with AVX512-BF16's vcvtne2ps2bf16 (nn_bf16_cvt) */
} direct_store;

/* A block of C computed by a micro-kernel: rows (at most 2 * MR) x NR values, NR apart in
 * `out`, or stored through `store` (non-NULL only for a kernel with `direct`); kp the
 * layout's depth, k the real one (the layout holds zeros from k to kp).
 * pf (NULL: none): cache lines (32 values each) to prefetch into L2 meanwhile, pf_lines
 * of them per block of depth, from pf on (a share of the next panel of B). */
typedef void (*block_fn)(const uint16_t *a, const a_walk *w, int64_t rows, const uint16_t *b,
                         int64_t kp, int64_t k, float *out, const direct_store *store,
                         const uint16_t *pf, int64_t pf_lines);

/* -- generic ------------------------------------------------------------------------------ */

static void block_generic(const uint16_t *a, const a_walk *w, int64_t rows, const uint16_t *b,
                          int64_t kp, int64_t k, float *out, const direct_store *store,
                          const uint16_t *pf, int64_t pf_lines) {
    (void)k;
    (void)store;
    (void)pf;
    (void)pf_lines;
    for (int64_t r0 = 0; r0 < rows; r0 += MR) {
        const uint16_t *tile = a + (r0 / MR) * w->tile;
        const int64_t height = rows - r0 < MR ? rows - r0 : MR;
        float acc[MR][NR];
        memset(acc, 0, sizeof acc);
        for (int64_t kb = 0; kb < kp; kb += KB) {
            for (int64_t pp = 0; pp < KB / 2; pp++) {
                const uint16_t *b_pair = b + (kb / 2 + pp) * 2 * NR;
                for (int64_t r = 0; r < height; r++) {
                    const uint16_t *a_pair = tile + r * w->row + (kb / KB) * w->kstep + 2 * pp;
                    const float a0 = nn_bf16_value(a_pair[0]), a1 = nn_bf16_value(a_pair[1]);
                    for (int j = 0; j < NR; j++) {
                        acc[r][j] += a0 * nn_bf16_value(b_pair[2 * j])
                                     + a1 * nn_bf16_value(b_pair[2 * j + 1]);
                    }
                }
            }
        }
        memcpy(out + r0 * NR, acc, (size_t)height * NR * sizeof(float));
    }
}

static inline float gelu_bf16(float x);

/* An in-place block's run of one output row (block_amx_in_place, block_generic_in_place):
 * `count` values of each row r from vals + r * NR, stored at C column `col` with the bias,
 * residual and activation, in store_row's order. */
static void store_run_generic(const direct_store *s, int64_t rows, const float *vals,
                              int64_t col, int64_t count, int channels_last) {
    /* C[r][col + j] at s->c + r * s->ldc + col + j, or channels-last (out_channels_last,
     * s->ldc the positions' stride) at s->c + (col + j) * s->ldc + r */
    const int64_t row_step = channels_last ? 1 : s->ldc, col_step = channels_last ? s->ldc : 1;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < count; j++) {
            const int64_t at = r * row_step + (col + j) * col_step;
            float v = vals[r * NR + j] + (s->bias ? s->bias[r] : 0.0f);
            v = s->residual ? v + s->residual[at] : v;
            v = s->residual16 ? v + nn_bf16_value(s->residual16[at]) : v;
            if (s->activation == FUSED_ACT_RELU) {
                v = v < 0.0f ? 0.0f : v;
            } else if (s->activation == FUSED_ACT_CLIP) {
                v = v < s->low ? s->low : v;
                v = v > s->high ? s->high : v;
            } else if (s->activation == FUSED_ACT_GELU) {
                v = gelu_bf16(v);
            }
            if (s->c16) {
                s->c16[at] = to_bf16(v);
            } else {
                s->c[at] = v;
            }
        }
    }
}

/* The runs of one output row among an in-place block's columns [q, min(q + NR, n)): for
 * each, RUN(skip, col, count): its first column's place in the block, its first value's
 * column in C, its length. */
#define NN_IN_PLACE_RUNS(ip, q, n, RUN)                                                   \
    for (int64_t at = (q), end_ = (q) + NR < (n) ? (q) + NR : (n); at < end_;) {          \
        const int64_t oy_ = at / (ip)->pitch, ox_ = at % (ip)->pitch;                      \
        const int64_t row_end_ = (oy_ + 1) * (ip)->pitch < end_ ? (oy_ + 1) * (ip)->pitch \
                                                                : end_;                    \
        const int64_t left_ = ox_ < (ip)->width ? (ip)->width - ox_ : 0;                  \
        const int64_t count_ = row_end_ - at < left_ ? row_end_ - at : left_;             \
        if (count_ > 0) {                                                                  \
            RUN(at - (q), oy_ * (ip)->width + ox_, count_)                                 \
        }                                                                                  \
        at = row_end_;                                                                     \
    }

/* block_amx_in_place in plain C, so that the grid's offsets and runs are tested on every
 * CPU (the generic variant reads in place too). */
static void block_generic_in_place(const uint16_t *a, const a_walk *w, int64_t rows,
                                   const nn_bf16_in_place *ip, int64_t q, int64_t n, int64_t kp,
                                   const direct_store *store) {
    float acc[2 * MR][NR];
    memset(acc, 0, sizeof acc);
    const uint16_t *b = ip->b + 2 * q;
    for (int64_t kb = 0; kb < kp; kb += KB) {
        const uint16_t *bk = b + ip->block_offsets[kb / KB];
        for (int64_t pp = 0; pp < KB / 2; pp++) {
            const uint16_t *b_pair = bk + pp * ip->row_stride;
            for (int64_t r = 0; r < rows; r++) {
                const uint16_t *a_pair = a + (r / MR) * w->tile + (r % MR) * w->row
                                         + (kb / KB) * w->kstep + 2 * pp;
                const float a0 = nn_bf16_value(a_pair[0]), a1 = nn_bf16_value(a_pair[1]);
                for (int j = 0; j < NR; j++) {
                    acc[r][j] += a0 * nn_bf16_value(b_pair[2 * j]) + a1 * nn_bf16_value(b_pair[2 * j + 1]);
                }
            }
        }
    }
#define RUN(skip, col, count) store_run_generic(store, rows, &acc[0][0] + (skip), col, count, 0);
    NN_IN_PLACE_RUNS(ip, q, n, RUN)
#undef RUN
}

/* A block read from a channels-last grid (nn_bf16_in_place with `channels`) in plain C:
 * the weight's packed-B panel `a` gives the block's rows of C, the grid's positions its
 * columns. For the variants without AMX (a plan made for AMX run where Linux refused the
 * tile state) and so that the layout is tested on every CPU. */
static void block_generic_cl(const uint16_t *a, const a_walk *w, int64_t rows,
                             const nn_bf16_in_place *ip, int64_t q, int64_t n, int64_t kp,
                             const direct_store *store) {
    (void)w;
    float acc[2 * MR][NR];
    memset(acc, 0, sizeof acc);
    for (int64_t kb = 0; kb < kp; kb += KB) {
        const uint16_t *grid = ip->b + q * ip->channels + ip->block_offsets[kb / KB];
        for (int64_t pp = 0; pp < KB / 2; pp++) {
            const uint16_t *w_pair = a + kb * NR + pp * 2 * NR;
            for (int64_t r = 0; r < rows; r++) {
                const float w0 = nn_bf16_value(w_pair[2 * r]), w1 = nn_bf16_value(w_pair[2 * r + 1]);
                for (int j = 0; j < NR; j++) {
                    const uint16_t *x_pair = grid + j * ip->channels + 2 * pp;
                    acc[r][j] += nn_bf16_value(x_pair[0]) * w0 + nn_bf16_value(x_pair[1]) * w1;
                }
            }
        }
    }
#define RUN(skip, col, count)                                                              \
    store_run_generic(store, rows, &acc[0][0] + (skip), col, count, ip->out_channels_last);
    NN_IN_PLACE_RUNS(ip, q, n, RUN)
#undef RUN
}

#ifdef NN_BF16_X86

/* -- AVX512-BF16 -------------------------------------------------------------------------- */

#define NN_ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

/* Per pair of k, two B loads and eight A pairs, each broadcast from memory straight into
 * its two vdpbf16ps (16 accumulators). */
/* Floats ahead of a stored run that its row of the residual is prefetched from: the next
 * panel but one. A block stores a row's run in each of its rows, a residual read as one
 * short run per row, which the hardware prefetchers do not follow: ResNet-50's 64 -> 256
 * 1x1 Conv at 56x56 with its residual Add and Relu, one thread, 0.668 -> 0.643 ms and
 * 0.712 -> 0.682 ms (alternating processes, two runs). */
#define RESIDUAL_AHEAD (2 * NR)
/* Rows (positions) ahead of a channels-last store that its run of the bf16 residual is
 * prefetched from: the next tile's. A row's run is one line of a position whose channels
 * span several, and a block of positions reads them channel block by channel block, which
 * the prefetchers do not follow either: light ResNet-50's 64 -> 256 1x1 Conv at 56x56
 * with its residual, one thread, 0.231-0.242 -> 0.216-0.223 ms (alternating processes,
 * three runs; the same row 2 blocks of channels ahead, or 32 rows: no better than none). */
#define RESIDUAL16_AHEAD 16

/* The mask of half `half` (0: values 0-15, 1: 16-31) of a run of 32 values of which the
 * first `width` are stored or loaded. */
static inline __mmask16 half_mask(int64_t width, int half) {
    const int64_t n = width - 16 * half;
    return (__mmask16)(n >= 16 ? 0xFFFFu : n > 0 ? (1u << n) - 1u : 0u);
}

/* The store's activation on a row's two halves (the second only where m1 stores any).
 * max(bound, v) and min(bound, v) return v where v is NaN, as Relu and Clip keep it. */
__attribute__((target("avx512f"), always_inline)) static inline void activate(
    const direct_store *s, __m512 *v0, __m512 *v1, __mmask16 m1) {
    if (s->activation == FUSED_ACT_RELU) {
        *v0 = _mm512_max_ps(_mm512_setzero_ps(), *v0);
        *v1 = _mm512_max_ps(_mm512_setzero_ps(), *v1);
    } else if (s->activation == FUSED_ACT_CLIP) {
        const __m512 low = _mm512_set1_ps(s->low), high = _mm512_set1_ps(s->high);
        *v0 = _mm512_min_ps(high, _mm512_max_ps(low, *v0));
        *v1 = _mm512_min_ps(high, _mm512_max_ps(low, *v1));
    } else if (s->activation == FUSED_ACT_GELU) {
        *v0 = gelu512_fast(*v0);
        *v1 = m1 ? gelu512_fast(*v1) : *v1;
    }
}

/* Row r of a block (bias, residual, activation) into C through the masks of its width. */
__attribute__((target("avx512f"))) static inline void store_row(const direct_store *s,
                                                                 int64_t r, __m512 v0,
                                                                 __m512 v1, __mmask16 m0,
                                                                 __mmask16 m1) {
    if (s->bias && s->bias_per_col) {
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, s->bias));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, s->bias + 16));
    } else if (s->bias) {
        const __m512 bias = _mm512_set1_ps(s->bias[r]);
        v0 = _mm512_add_ps(v0, bias);
        v1 = _mm512_add_ps(v1, bias);
    }
    if (s->residual) {
        const float *res = s->residual + r * s->ldc;
        _mm_prefetch((const char *)(res + RESIDUAL_AHEAD), _MM_HINT_T0);
        _mm_prefetch((const char *)(res + RESIDUAL_AHEAD + 16), _MM_HINT_T0);
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, res));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, res + 16));
    }
    activate(s, &v0, &v1, m1);
    float *dst = s->c + r * s->ldc;
    _mm512_mask_storeu_ps(dst, m0, v0);
    _mm512_mask_storeu_ps(dst + 16, m1, v1);
}

/* v0 and v1 rounded to 32 bf16 in order (words 0-15 from v0) with vcvtne2ps2bf16: the
 * rounding round_high does (nearest even, NaN quiet), fp32 subnormals read as zero. */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline __m512i cvt32(
    __m512 v0, __m512 v1) {
    return (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
}

/* The high halves of a's 16 lanes then b's, as 32 words in order: the bf16 values that
 * round_high left in the high halves (the packers' rounding without AVX512-BF16). */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i high_words(__m512i a,
                                                                            __m512i b) {
    static const uint16_t odd_words[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                           23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                           45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
    return _mm512_permutex2var_epi16(a, _mm512_loadu_si512(odd_words), b);
}

/* store_row into bf16 C with a bf16 residual (direct_store's c16 and residual16): the
 * same sums in fp32, then rounded as the packers round, 32 words at once (with AVX512-BF16,
 * one instruction: the 1x1 64 -> 256 layers of light ResNet-50 with their residual,
 * 0.32 -> 0.26 ms in the model, one thread). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline void store_row16(
    const direct_store *s, int64_t r, __m512 v0, __m512 v1, __mmask16 m0, __mmask16 m1) {
    const __mmask32 mask = (__mmask32)m0 | (__mmask32)m1 << 16;
    if (s->bias) {  /* per column: channels-last C's channels */
        v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, s->bias));
        v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, s->bias + 16));
    }
    if (s->residual16) {
        _mm_prefetch((const char *)(s->residual16 + (r + RESIDUAL16_AHEAD) * s->ldc),
                     _MM_HINT_T0);
        const __m512i res = _mm512_maskz_loadu_epi16(mask, s->residual16 + r * s->ldc);
        const __m512i lo = _mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm512_castsi512_si256(res)), 16);
        const __m512i hi = _mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(res, 1)), 16);
        v0 = _mm512_add_ps(v0, _mm512_castsi512_ps(lo));
        v1 = _mm512_add_ps(v1, _mm512_castsi512_ps(hi));
    }
    activate(s, &v0, &v1, m1);
    if (s->cvt) {  /* one instruction for the 32 roundings */
        _mm512_mask_storeu_epi16(s->c16 + r * s->ldc, mask, cvt32(v0, v1));
        return;
    }
    _mm512_mask_storeu_epi16(s->c16 + r * s->ldc, mask,
                             high_words(round_high(v0), round_high(v1)));
}

/* A packed at compile time (a Conv's weight, rows KB apart): its eight rows of the block
 * WEIGHT_AHEAD depth blocks ahead, one line each at constant offsets. A weight's first
 * pass comes from memory in a pattern (half of each block) the hardware prefetchers
 * follow badly; prefetches past the end do not fault. ResNet-18's 512x4608 weight, cold:
 * 2.0 -> 1.36 ms for the layer's product (two blocks ahead). Two blocks are some 300
 * cycles of products, less than a load from memory takes: eight ahead, light ResNet-50's
 * 512-channel stride-2 3x3 layer went 1683 -> 1461 us and its 2048 -> 512 1x1 ones up to
 * 695 -> 595 us in the model (one thread, Zen 4); whole models, p20 of 4 interleaved
 * processes: MobileNetV2 4.63 -> 4.53 ms, light ResNet-50 39.6 -> 38.8, ResNet-18 the same
 * (14.98 -> 14.93; two threads 7.95 -> 8.00, within the noise). (A MatMul's A is its
 * input, in cache: eight row addresses there cost registers the loop needs.) */
#define WEIGHT_AHEAD 8
__attribute__((always_inline)) static inline void prefetch_weight_rows(const uint16_t *a_block,
                                                                       const a_walk *w) {
    if (w->row == KB) {
        const char *ahead = (const char *)(a_block + WEIGHT_AHEAD * w->kstep);
        for (int r = 0; r < 8; r++) {
            _mm_prefetch(ahead + r * KB * 2, _MM_HINT_T0);
        }
    }
}

/* Rows [r0, r0 + 8) of the tile of rows p0.. of the block (those past `height` are
 * computed and not stored), into `out` or through `store`, over the first `pairs` pairs of
 * the depth only (the layout's zeros past the real depth are skipped: MobileNetV2's depth-16
 * and depth-24 products padded to 32 did up to twice their work). `wide` 0: only the
 * panel's first 16 columns (the block stores at most 16: a last narrow panel costs half). */
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) static inline void
rows8_body(const uint16_t *tile, const a_walk *w, int64_t p0, int64_t r0, int64_t height,
           const uint16_t *b, int64_t pairs, float *out, const direct_store *store,
           const int wide) {
#define DECLARE(r) __m512 c##r##_0 = _mm512_setzero_ps(), c##r##_1 = _mm512_setzero_ps();
    NN_ROWS8(DECLARE)
#undef DECLARE
    const int64_t row = w->row;
    /* whole blocks of the depth with a constant count of pairs, then the last, partial one */
    for (int64_t kb = 0; kb / 2 < pairs; kb += KB) {
        const uint16_t *a_block = tile + r0 * row + (kb / KB) * w->kstep;
        const uint16_t *b_block = b + kb * NR;
        const int full = pairs - kb / 2 >= KB / 2;
        const int64_t steps = full ? KB / 2 : pairs - kb / 2;
        prefetch_weight_rows(a_block, w);
#define STEP(r)                                                                          \
    {                                                                                    \
        int32_t pair;                                                                    \
        memcpy(&pair, a_block + (r) * row + 2 * pp, 4);                                 \
        const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);                           \
        c##r##_0 = _mm512_dpbf16_ps(c##r##_0, av, b0);                                   \
        if (wide) {                                                                      \
            c##r##_1 = _mm512_dpbf16_ps(c##r##_1, av, b1);                               \
        }                                                                                \
    }
#define PAIRS(count)                                                                     \
    for (int64_t pp = 0; pp < (count); pp++) {                                           \
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b_block + pp * 2 * NR);         \
        const __m512bh b1 = wide ? (__m512bh)_mm512_loadu_si512(b_block + pp * 2 * NR + NR) \
                                 : (__m512bh)_mm512_setzero_si512();                     \
        NN_ROWS8(STEP)                                                                   \
    }
        if (full) {
            PAIRS(KB / 2)
        } else {
            PAIRS(steps)
        }
#undef PAIRS
#undef STEP
    }
    if (store) {
        const __mmask16 m0 = half_mask(store->width, 0), m1 = half_mask(store->width, 1);
#define STORE(r)                                                                   \
    if (r0 + (r) < height) {                                                       \
        store_row(store, p0 + r0 + (r), c##r##_0, c##r##_1, m0, m1);               \
    }
        NN_ROWS8(STORE)
#undef STORE
        return;
    }
#define STORE(r)                                                        \
    if (r0 + (r) < height) {                                            \
        _mm512_storeu_ps(out + (r0 + (r)) * NR, c##r##_0);              \
        _mm512_storeu_ps(out + (r0 + (r)) * NR + 16, c##r##_1);         \
    }
    NN_ROWS8(STORE)
#undef STORE
}

/* rows8_body for a panel's last block when it stores at most 24 columns (`lead` 1: 16 in zmm
 * and 8 in ymm) or at most 8 (`lead` 0: 8 in ymm): on AMD Zen 4 a ymm vdpbf16ps costs half a
 * zmm one, so a 7x7 map's 49 positions (32 + 17) cost 56 columns, not 64, and a 14x14 map's
 * last 4 cost 8, not 16. Through `store` only (the blocks that store directly). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) static inline void
rows8_body_ymm(const uint16_t *tile, const a_walk *w, int64_t p0, int64_t r0, int64_t height,
               const uint16_t *b, int64_t pairs, const direct_store *store, const int lead) {
#define DECLARE(r) __m512 z##r = _mm512_setzero_ps(); __m256 y##r = _mm256_setzero_ps();
    NN_ROWS8(DECLARE)
#undef DECLARE
    const int64_t row = w->row;
    for (int64_t kb = 0; kb / 2 < pairs; kb += KB) {
        const uint16_t *a_block = tile + r0 * row + (kb / KB) * w->kstep;
        const uint16_t *b_block = b + kb * NR + (lead ? 2 * 16 : 0);  /* the ymm's columns */
        const int64_t steps = pairs - kb / 2 >= KB / 2 ? KB / 2 : pairs - kb / 2;
        prefetch_weight_rows(a_block, w);
#define STEP(r)                                                                          \
    {                                                                                    \
        int32_t pair;                                                                    \
        memcpy(&pair, a_block + (r) * row + 2 * pp, 4);                                 \
        const __m512i av = _mm512_set1_epi32(pair);                                      \
        if (lead) {                                                                      \
            z##r = _mm512_dpbf16_ps(z##r, (__m512bh)av, bz);                             \
        }                                                                                \
        y##r = _mm256_dpbf16_ps(y##r, (__m256bh)_mm512_castsi512_si256(av), by);         \
    }
        for (int64_t pp = 0; pp < steps; pp++) {
            const __m512bh bz = lead ? (__m512bh)_mm512_loadu_si512(b + kb * NR + pp * 2 * NR)
                                     : (__m512bh)_mm512_setzero_si512();
            const __m256bh by = (__m256bh)_mm256_loadu_si256(
                (const __m256i *)(b_block + pp * 2 * NR));
            NN_ROWS8(STEP)
        }
#undef STEP
    }
    const int64_t width = store->width;
    const int64_t first = lead ? 16 : 0;  /* the ymm's first column */
    const __mmask16 my = (__mmask16)(width - first >= 8 ? 0xFFu : (1u << (width - first)) - 1u);
#define STORE(r)                                                                         \
    if (r0 + (r) < height) {                                                             \
        if (lead) {                                                                      \
            store_row(store, p0 + r0 + (r), z##r, _mm512_zextps256_ps512(y##r), 0xFFFFu, my); \
        } else {                                                                         \
            store_row(store, p0 + r0 + (r), _mm512_zextps256_ps512(y##r),                \
                      _mm512_setzero_ps(), my, 0);                                       \
        }                                                                                \
    }
    NN_ROWS8(STORE)
#undef STORE
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void rows8_w24_avx512bf16(
    const uint16_t *tile, const a_walk *w, int64_t p0, int64_t r0, int64_t height,
    const uint16_t *b, int64_t pairs, float *out, const direct_store *store) {
    (void)out;
    rows8_body_ymm(tile, w, p0, r0, height, b, pairs, store, 1);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void rows8_w8_avx512bf16(
    const uint16_t *tile, const a_walk *w, int64_t p0, int64_t r0, int64_t height,
    const uint16_t *b, int64_t pairs, float *out, const direct_store *store) {
    (void)out;
    rows8_body_ymm(tile, w, p0, r0, height, b, pairs, store, 0);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void rows8_avx512bf16(
    const uint16_t *tile, const a_walk *w, int64_t p0, int64_t r0, int64_t height,
    const uint16_t *b, int64_t pairs, float *out, const direct_store *store) {
    rows8_body(tile, w, p0, r0, height, b, pairs, out, store, 1);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void rows8_narrow_avx512bf16(
    const uint16_t *tile, const a_walk *w, int64_t p0, int64_t r0, int64_t height,
    const uint16_t *b, int64_t pairs, float *out, const direct_store *store) {
    rows8_body(tile, w, p0, r0, height, b, pairs, out, store, 0);
}
#undef NN_ROWS8

/* A panel's last block of at most 16 columns over a whole tile of 16 rows: the 16 rows in
 * one pass (16 accumulators), per pair of k one B load and sixteen broadcast pairs of A.
 * Two passes of eight rows (rows8_narrow) read B twice and each walk half of every block
 * of A's tile, a pattern the prefetchers follow badly where A comes from memory: bf16
 * Winograd's products on a 7x7 map (16 tiles, 512 channels: 8.4 MB of U per call). */
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) static inline void
rows16_narrow_body(const uint16_t *tile, const a_walk *w, const int64_t row, int64_t p0,
                   const uint16_t *b, int64_t pairs, const direct_store *store) {
#define NN_ROWS16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) \
    X(13) X(14) X(15)
#define DECLARE(r) __m512 c##r = _mm512_setzero_ps();
    NN_ROWS16(DECLARE)
#undef DECLARE
    for (int64_t kb = 0; kb / 2 < pairs; kb += KB) {
        const uint16_t *a_block = tile + (kb / KB) * w->kstep;
        const uint16_t *b_block = b + kb * NR;
        const int64_t steps = pairs - kb / 2 >= KB / 2 ? KB / 2 : pairs - kb / 2;
        prefetch_weight_rows(a_block, w);
        prefetch_weight_rows(a_block + 8 * row, w);
#define STEP(r)                                                                          \
    {                                                                                    \
        int32_t pair;                                                                    \
        memcpy(&pair, a_block + (r) * row + 2 * pp, 4);                                 \
        c##r = _mm512_dpbf16_ps(c##r, (__m512bh)_mm512_set1_epi32(pair), b0);            \
    }
        for (int64_t pp = 0; pp < steps; pp++) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b_block + pp * 2 * NR);
            NN_ROWS16(STEP)
        }
#undef STEP
    }
    const __mmask16 m0 = half_mask(store->width, 0);
#define STORE(r) store_row(store, p0 + (r), c##r, _mm512_setzero_ps(), m0, 0);
    NN_ROWS16(STORE)
#undef STORE
#undef NN_ROWS16
}

/* rows16_narrow_body with A's rows KB apart as a constant where they are (a Conv's packed
 * weight, the case that takes it): the sixteen rows' loads then take fixed offsets from
 * one address, where with the row step a variable their sixteen addresses took as many
 * registers and the compiler moved them in and out of vector registers inside the loop.
 * ResNet-18's 512-channel 7x7 Winograd layer (one layer, one thread, Zen 4) 887 -> 850 us;
 * ResNet-18, p20 of 4-5 interleaved processes, 15.04 -> 14.74 ms. (The same for the
 * eight-row kernels made ResNet-18 3.5% slower: their eight addresses fit in registers.) */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void rows16_narrow_avx512bf16(
    const uint16_t *tile, const a_walk *w, int64_t p0, const uint16_t *b, int64_t pairs,
    const direct_store *store) {
    if (w->row == KB) {
        rows16_narrow_body(tile, w, KB, p0, b, pairs, store);
    } else {
        rows16_narrow_body(tile, w, w->row, p0, b, pairs, store);
    }
}

/* One row of A (a MatMul or Gemm of one row, as a classifier at batch 1): eight rows'
 * work for one is the cost otherwise. Its 32 columns' sums over four interleaved quarters
 * of the depth's pairs in eight accumulators, so that the multiply-adds do not wait on each
 * other (one pair of sums would chain every vdpbf16ps on the one before), added up at the
 * end; per pair of k, two B loads, one broadcast, two vdpbf16ps. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void row1_avx512bf16(
    const uint16_t *tile, const a_walk *w, int64_t p0, const uint16_t *b, int64_t pairs,
    const direct_store *store) {
    __m512 c0[4], c1[4];
    for (int q = 0; q < 4; q++) {
        c0[q] = _mm512_setzero_ps();
        c1[q] = _mm512_setzero_ps();
    }
    for (int64_t kb = 0; kb / 2 < pairs; kb += KB) {
        const uint16_t *a_block = tile + (kb / KB) * w->kstep;
        const uint16_t *b_block = b + kb * NR;
        const int64_t steps = pairs - kb / 2 >= KB / 2 ? KB / 2 : pairs - kb / 2;
        int64_t pp = 0;
        for (; pp + 4 <= steps; pp += 4) {
            for (int q = 0; q < 4; q++) {
                int32_t pair;
                memcpy(&pair, a_block + 2 * (pp + q), 4);
                const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
                const uint16_t *bq = b_block + (pp + q) * 2 * NR;
                c0[q] = _mm512_dpbf16_ps(c0[q], av, (__m512bh)_mm512_loadu_si512(bq));
                c1[q] = _mm512_dpbf16_ps(c1[q], av, (__m512bh)_mm512_loadu_si512(bq + NR));
            }
        }
        for (; pp < steps; pp++) {
            int32_t pair;
            memcpy(&pair, a_block + 2 * pp, 4);
            const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            const uint16_t *bq = b_block + pp * 2 * NR;
            c0[0] = _mm512_dpbf16_ps(c0[0], av, (__m512bh)_mm512_loadu_si512(bq));
            c1[0] = _mm512_dpbf16_ps(c1[0], av, (__m512bh)_mm512_loadu_si512(bq + NR));
        }
    }
    const __m512 v0 = _mm512_add_ps(_mm512_add_ps(c0[0], c0[1]), _mm512_add_ps(c0[2], c0[3]));
    const __m512 v1 = _mm512_add_ps(_mm512_add_ps(c1[0], c1[1]), _mm512_add_ps(c1[2], c1[3]));
    const __mmask16 m0 = half_mask(store->width, 0), m1 = half_mask(store->width, 1);
    store_row(store, p0, v0, v1, m0, m1);
}

static void block_avx512bf16(const uint16_t *a, const a_walk *w, int64_t rows,
                             const uint16_t *b, int64_t kp, int64_t k, float *out,
                             const direct_store *store, const uint16_t *pf, int64_t pf_lines) {
    (void)kp;
    (void)pf;
    (void)pf_lines;
    /* a block that stores directly computes only the columns it stores, in steps of 8 */
    const int64_t width = store ? store->width : NR;
    typedef void (*rows8_fn)(const uint16_t *, const a_walk *, int64_t, int64_t, int64_t,
                             const uint16_t *, int64_t, float *, const direct_store *);
    const rows8_fn rows8 = width <= 8    ? rows8_w8_avx512bf16
                           : width <= 16 ? rows8_narrow_avx512bf16
                           : width <= 24 ? rows8_w24_avx512bf16
                                         : rows8_avx512bf16;
    for (int64_t p0 = 0; p0 < rows; p0 += MR) {
        const int64_t height = rows - p0 < MR ? rows - p0 : MR;
        if (store && height == 1) {
            row1_avx512bf16(a + (p0 / MR) * w->tile, w, p0, b, (k + 1) / 2, store);
            continue;
        }
        if (store && width > 8 && width <= 16 && height == MR) {
            rows16_narrow_avx512bf16(a + (p0 / MR) * w->tile, w, p0, b, (k + 1) / 2, store);
            continue;
        }
        for (int64_t r0 = 0; r0 < height; r0 += 8) {
            rows8(a + (p0 / MR) * w->tile, w, p0, r0, height, b, (k + 1) / 2, out + p0 * NR,
                  store);
        }
    }
}

/* -- AMX ---------------------------------------------------------------------------------- */

/* LDTILECFG's 64-byte operand: palette 1, eight tiles of 16 rows x 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* A constant, not a local filled before the load: GCC 12's _tile_loadconfig tells the
 * compiler it reads only 8 bytes, so the stores to a local config were dropped as dead. */
static const amx_config amx_tiles = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

/* The tiles are configured once per thread and left so: a task only reads the current
 * configuration back (STTILECFG, cheap) and loads ours where another user of the tiles in
 * this thread (another library) left a different one, or none. */
__attribute__((target("amx-tile"))) static void amx_begin(void) {
    amx_config now;
    memset(&now, 0, sizeof now);
    _tile_storeconfig(&now);
    __asm__ volatile("" : : "m"(now) : "memory");
    if (memcmp(&now, &amx_tiles, sizeof now) != 0) {
        _tile_loadconfig(&amx_tiles);
    }
}

/* Tiles: C 0..3 (rows 0-15 x cols 0-15, 0-15 x 16-31, 16-31 x 0-15, 16-31 x 16-31),
 * A 4 and 5 (the block's two tiles of rows), B 6 and 7 (the panel's two halves of 16
 * columns). It stores directly (bf16_kernel.direct): the tiles go to a block on the stack,
 * from which store_row adds the bias and residual and applies the activation row by row in
 * registers. With AMX the products are cheap enough that the stores are much of a block's
 * time; storing through store_block and its per-row epilogue calls instead, one thread on
 * an AMX Xeon, interleaved: ResNet-50's 1x1 64 -> 256 at 56x56 with residual 0.79 -> 0.62
 * ms, 128 -> 512 at 28x28 0.40 -> 0.25 ms; whole models 6-25% (ResNet-18 10.5 -> 9.8 ms,
 * the transformer 2.62 -> 2.09, BERT-base 41.2 -> 36.1). */
/* The tiles' products of a block into `out` (2 * MR rows of NR values): per depth block kb,
 * B's two tiles at b + kb * NR (packed panels, pair-rows 2 * NR values apart: b_offsets
 * NULL) or at b + b_offsets[kb / KB] (read in place, pair-rows b_stride bytes apart). */
__attribute__((target("amx-tile,amx-bf16,avx512f"), always_inline)) static inline void amx_products(
    const uint16_t *a, const a_walk *w, int64_t rows, const uint16_t *b,
    const int64_t *b_offsets, int64_t b_stride, int64_t kp, float *out, const uint16_t *pf,
    int64_t pf_lines) {
    const int64_t a_stride = w->row * 2, kstep = w->kstep;
    if (pf == NULL) {
        pf_lines = 0;
    }
    _tile_zero(0);
    _tile_zero(1);
    if (rows > MR) {
        _tile_zero(2);
        _tile_zero(3);
        const uint16_t *a1 = a + w->tile;
        for (int64_t kb = 0, ka = 0; kb < kp; kb += KB, ka += kstep) {
            for (int64_t j = 0; j < pf_lines; j++, pf += 32) {
                _mm_prefetch((const char *)pf, _MM_HINT_T1);
            }
            const uint16_t *bk = b_offsets ? b + b_offsets[kb / KB] : b + kb * NR;
            _tile_loadd(4, a + ka, a_stride);
            _tile_loadd(6, bk, b_stride);
            _tile_loadd(7, bk + 32, b_stride);
            _tile_loadd(5, a1 + ka, a_stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(2, out + 16 * NR, NR * 4);
        _tile_stored(3, out + 16 * NR + 16, NR * 4);
    } else {
        for (int64_t kb = 0, ka = 0; kb < kp; kb += KB, ka += kstep) {
            for (int64_t j = 0; j < pf_lines; j++, pf += 32) {
                _mm_prefetch((const char *)pf, _MM_HINT_T1);
            }
            const uint16_t *bk = b_offsets ? b + b_offsets[kb / KB] : b + kb * NR;
            _tile_loadd(4, a + ka, a_stride);
            _tile_loadd(6, bk, b_stride);
            _tile_loadd(7, bk + 32, b_stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
    }
    _tile_stored(0, out, NR * 4);
    _tile_stored(1, out + 16, NR * 4);
}

/* Tiles: C 0..3 (rows 0-15 x cols 0-15, 0-15 x 16-31, 16-31 x 0-15, 16-31 x 16-31),
 * A 4 and 5 (the block's two tiles of rows), B 6 and 7 (the panel's two halves of 16
 * columns). It stores directly (bf16_kernel.direct): the tiles go to a block on the stack,
 * from which store_row adds the bias and residual and applies the activation row by row in
 * registers. With AMX the products are cheap enough that the stores are much of a block's
 * time; storing through store_block and its per-row epilogue calls instead, one thread on
 * an AMX Xeon, interleaved: ResNet-50's 1x1 64 -> 256 at 56x56 with residual 0.79 -> 0.62
 * ms, 128 -> 512 at 28x28 0.40 -> 0.25 ms; whole models 6-25% (ResNet-18 10.5 -> 9.8 ms,
 * the transformer 2.62 -> 2.09, BERT-base 41.2 -> 36.1). */
__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void block_amx(
    const uint16_t *a, const a_walk *w, int64_t rows, const uint16_t *b, int64_t kp,
    int64_t k, float *out, const direct_store *store, const uint16_t *pf, int64_t pf_lines) {
    (void)k;
    float tiles[2 * MR * NR] __attribute__((aligned(64)));
    amx_products(a, w, rows, b, NULL, NR * 4, kp, store ? tiles : out, pf, pf_lines);
    if (store) {
        const __mmask16 m0 = half_mask(store->width, 0), m1 = half_mask(store->width, 1);
        for (int64_t r = 0; r < rows; r++) {
            store_row(store, r, _mm512_load_ps(tiles + r * NR),
                      _mm512_load_ps(tiles + r * NR + 16), m0, m1);
        }
    }
}

/* One run of an in-place block's output row (NN_IN_PLACE_RUNS): `count` values of each of
 * its rows from tiles + r * NR + skip (rows NR apart), stored at C's column `col` through
 * store_row (`store` at the block's first row and C's column 0). */
__attribute__((target("avx512f"), always_inline)) static inline void store_tile_run(
    const float *tiles, const direct_store *store, int64_t rows, int64_t skip, int64_t col,
    int64_t count) {
    direct_store run = *store;
    run.c += col;
    run.residual = run.residual ? run.residual + col : NULL;
    const __mmask16 m0 = half_mask(count, 0), m1 = half_mask(count, 1);
    for (int64_t r = 0; r < rows; r++) {
        const float *v = tiles + r * NR + skip;
        store_row(&run, r, _mm512_maskz_loadu_ps(m0, v), _mm512_maskz_loadu_ps(m1, v + 16), m0,
                  m1);
    }
}

/* A block whose B is read in place (nn_bf16_in_place): the tiles load their 32 columns'
 * pair-rows straight from the padded grid, so no panel is packed; the block's columns are
 * grid positions [q, q + NR), stored run by run of one output row through store_row
 * (`store` at the block's first row and C's column 0, its width unused). */
__attribute__((target("amx-tile,amx-bf16,avx512f"))) static void block_amx_in_place(
    const uint16_t *a, const a_walk *w, int64_t rows, const nn_bf16_in_place *ip, int64_t q,
    int64_t n, int64_t kp, const direct_store *store) {
    float tiles[2 * MR * NR + 32] __attribute__((aligned(64)));
    amx_products(a, w, rows, ip->b + 2 * q, ip->block_offsets, ip->row_stride * 2, kp, tiles,
                 NULL, 0);
#define RUN(skip, col, count) store_tile_run(tiles, store, rows, skip, col, count);
    NN_IN_PLACE_RUNS(ip, q, n, RUN)
#undef RUN
}

/* A block read from a channels-last grid (nn_bf16_in_place with `channels`): A's two
 * tiles are 16 grid positions each by the 32 values of depth block kb (rows `channels`
 * values apart), B's two tiles the weight's packed-B panel `a` (32 rows of C), so the
 * tiles hold the block transposed: positions x rows of C. 16 x 16 transposes in registers
 * turn it back into rows of C by positions, stored run by run as block_amx_in_place does. */
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16"))) static void block_amx_cl(
    const uint16_t *a, const a_walk *w, int64_t rows, const nn_bf16_in_place *ip, int64_t q,
    int64_t n, int64_t kp, const direct_store *store) {
    (void)w;
    float t[2 * MR * NR] __attribute__((aligned(64)));           /* positions x rows */
    float tiles[2 * MR * NR + 32] __attribute__((aligned(64)));  /* rows x positions */
    const int64_t stride = ip->channels * 2;
    const uint16_t *x0 = ip->b + q * ip->channels, *x1 = x0 + MR * ip->channels;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    /* Software-pipelined: each tile is loaded for the next depth block as soon as the last
     * product reading it has been issued, so that the loads overlap the products (loads
     * first, then the four products, kept the tile unit waiting on every load: ResNet-18
     * bf16, one thread, 4.47-4.64 -> 4.07-4.34 ms, alternating processes). */
    _tile_loadd(4, x0 + ip->block_offsets[0], stride);
    _tile_loadd(6, a, NR * 4);
    _tile_loadd(7, a + 32, NR * 4);
    _tile_loadd(5, x1 + ip->block_offsets[0], stride);
    for (int64_t kb = 0; kb < kp; kb += KB) {
        const int more = kb + KB < kp;
        const int64_t at = more ? ip->block_offsets[kb / KB + 1] : 0;
        const uint16_t *wk = a + (kb + KB) * NR;
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (more) {
            _tile_loadd(4, x0 + at, stride);
        }
        _tile_dpbf16ps(2, 5, 6);
        if (more) {
            _tile_loadd(6, wk, NR * 4);
        }
        _tile_dpbf16ps(3, 5, 7);
        if (more) {
            _tile_loadd(7, wk + 32, NR * 4);
            _tile_loadd(5, x1 + at, stride);
        }
    }
    _tile_stored(0, t, NR * 4);
    _tile_stored(1, t + 16, NR * 4);
    _tile_stored(2, t + 16 * NR, NR * 4);
    _tile_stored(3, t + 16 * NR + 16, NR * 4);
    if (ip->out_channels_last) {
        /* a position's channels are a row of the tiles already: stored through store_row,
         * `store` at the block's first channel with positions ldc apart (its bias per
         * column: per channel) */
        const __mmask16 m0 = half_mask(rows, 0), m1 = half_mask(rows, 1);
#define RUN(skip, col, count)                                                                \
    for (int64_t i = 0; i < (count); i++) {                                                  \
        const float *v = t + ((skip) + i) * NR;                                              \
        if (store->c16) {                                                                    \
            store_row16(store, (col) + i, _mm512_load_ps(v), _mm512_load_ps(v + 16), m0, m1); \
        } else {                                                                             \
            store_row(store, (col) + i, _mm512_load_ps(v), _mm512_load_ps(v + 16), m0, m1);  \
        }                                                                                    \
    }
        NN_IN_PLACE_RUNS(ip, q, n, RUN)
#undef RUN
        return;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        for (int64_t p0 = 0; p0 < NR; p0 += 16) {
            __m512 v[16];
            for (int i = 0; i < 16; i++) {
                v[i] = _mm512_load_ps(t + (p0 + i) * NR + r0);
            }
            transpose16(v);
            for (int i = 0; i < 16; i++) {
                _mm512_store_ps(tiles + (r0 + i) * NR + p0, v[i]);
            }
        }
    }
#define RUN(skip, col, count) store_tile_run(tiles, store, rows, skip, col, count);
    NN_IN_PLACE_RUNS(ip, q, n, RUN)
#undef RUN
}

#endif /* NN_BF16_X86 */

/* -- picking the micro-kernel ------------------------------------------------------------- */

/* A block whose B is read in place (nn_bf16_in_place): columns [q, q + NR) of n, stored
 * through `store` (at the block's first row, C's column 0). */
typedef void (*in_place_fn)(const uint16_t *a, const a_walk *w, int64_t rows,
                            const nn_bf16_in_place *ip, int64_t q, int64_t n, int64_t kp,
                            const direct_store *store);

typedef struct {
    const char *name;
    block_fn fn;
    int amx;               /* tasks configure the tiles first and release them after */
    int direct;            /* fn stores through a direct_store */
    in_place_fn in_place;  /* NULL: B is always packed */
    in_place_fn channels_last;  /* a channels-last grid (nn_bf16_in_place.channels) */
} bf16_kernel;

static bf16_kernel chosen;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose(void) {
    chosen = (bf16_kernel){"generic", block_generic, 0, 0, block_generic_in_place,
                            block_generic_cl};
#ifdef NN_BF16_X86
    switch (ge_simd_choose_bf16("GE_HUB_BF16_KERNEL")) {
    case GE_BF16_AMX:
        chosen = (bf16_kernel){"amx", block_amx, 1, 1, block_amx_in_place, block_amx_cl};
        break;
    case GE_BF16_AVX512:
        chosen = (bf16_kernel){"avx512bf16", block_avx512bf16, 0, 1, NULL, block_generic_cl};
        break;
    case GE_BF16_GENERIC:
        break;
    }
#endif
}

static const bf16_kernel *kernel(void) {
    pthread_once(&chosen_once, choose);
    return &chosen;
}

const char *nn_gemm_bf16_kernel_name(void) {
    return kernel()->name;
}

int nn_gemm_bf16_reads_in_place(const nn_epilogue *epilogue) {
    const int activation = epilogue ? epilogue->activation : FUSED_ACT_NONE;
    return kernel()->in_place != NULL
           && (activation == FUSED_ACT_NONE || activation == FUSED_ACT_RELU
               || activation == FUSED_ACT_CLIP || activation == FUSED_ACT_GELU);
}

/* For ge_hub.kernels.bf16 (through ctypes): the variant this process runs. */
__attribute__((visibility("default"))) const char *ge_hub_bf16_kernel_name(void) {
    return nn_gemm_bf16_kernel_name();
}

/* -- packing B ---------------------------------------------------------------------------- */

/* One pair-row of each of `panels` panels from fp32 rows of NR values: panel i's even row
 * at even + i * step, its odd row at odd + i * step (NULL: zeros, as past the depth), its
 * pair-row at dst + i * panel_stride. */
static void pair_rows_generic(const float *even, const float *odd, int64_t step,
                              int64_t panels, uint16_t *dst, int64_t panel_stride) {
    for (int64_t i = 0; i < panels; i++) {
        for (int j = 0; j < NR; j++) {
            dst[i * panel_stride + 2 * j] = to_bf16(even ? even[i * step + j] : 0.0f);
            dst[i * panel_stride + 2 * j + 1] = to_bf16(odd ? odd[i * step + j] : 0.0f);
        }
    }
}

#ifdef NN_BF16_X86
/* 16 columns of a pair-row: lane j holds (even[j], odd[j]) as the low and high bf16. */
__attribute__((target("avx512f"))) static inline __m512i pair16(__m512 even, __m512 odd) {
    return _mm512_or_si512(_mm512_srli_epi32(round_high(even), 16),
                           _mm512_and_si512(round_high(odd), _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* The pair-row of 32 columns from their even and odd values with vcvtne2ps2bf16 (rounding
 * to nearest even as to_bf16 does; fp32 subnormals read as zero, which the products
 * would flush anyway) and two word permutes: lo gets columns 0-15, hi columns 16-31. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline void pair32_cvt(
    __m512 e0, __m512 e1, __m512 o0, __m512 o1, __m512i *lo, __m512i *hi) {
    static const uint16_t low_words[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                           37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                           11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i even = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);  /* e0 in words 0-15 */
    const __m512i odd = (__m512i)_mm512_cvtne2ps_pbh(o1, o0);
    const __m512i pick_lo = _mm512_loadu_si512(low_words);
    const __m512i pick_hi = _mm512_add_epi16(pick_lo, _mm512_set1_epi16(16));
    *lo = _mm512_permutex2var_epi16(even, pick_lo, odd);
    *hi = _mm512_permutex2var_epi16(even, pick_hi, odd);
}

/* pair_rows_avx512 on CPUs with AVX512-BF16 conversions. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void pair_rows_cvt(
    const float *even, const float *odd, int64_t step, int64_t panels, uint16_t *dst,
    int64_t panel_stride) {
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < panels; i++) {
        const __m512 e0 = even ? _mm512_loadu_ps(even + i * step) : zero;
        const __m512 e1 = even ? _mm512_loadu_ps(even + i * step + 16) : zero;
        const __m512 o0 = odd ? _mm512_loadu_ps(odd + i * step) : zero;
        const __m512 o1 = odd ? _mm512_loadu_ps(odd + i * step + 16) : zero;
        __m512i lo, hi;
        pair32_cvt(e0, e1, o0, o1, &lo, &hi);
        _mm512_storeu_si512(dst + i * panel_stride, lo);
        _mm512_storeu_si512(dst + i * panel_stride + NR, hi);
    }
}

/* pair_rows_generic with AVX-512: per panel, four loads and two stores. */
__attribute__((target("avx512f"))) static void pair_rows_avx512(
    const float *even, const float *odd, int64_t step, int64_t panels, uint16_t *dst,
    int64_t panel_stride) {
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t i = 0; i < panels; i++) {
        const __m512 e0 = even ? _mm512_loadu_ps(even + i * step) : zero;
        const __m512 e1 = even ? _mm512_loadu_ps(even + i * step + 16) : zero;
        const __m512 o0 = odd ? _mm512_loadu_ps(odd + i * step) : zero;
        const __m512 o1 = odd ? _mm512_loadu_ps(odd + i * step + 16) : zero;
        _mm512_storeu_si512(dst + i * panel_stride, pair16(e0, o0));
        _mm512_storeu_si512(dst + i * panel_stride + NR, pair16(e1, o1));
    }
}

/* matrix_pair_rows_avx512 (below) on CPUs with AVX512-BF16 conversions. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void matrix_pair_rows_cvt(
    const float *even, const float *odd, int64_t cols, uint16_t *dst, int64_t panel_stride) {
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += NR, dst += panel_stride) {
        const int64_t left = cols - c;
        const __mmask16 m0 = half_mask(left, 0), m1 = half_mask(left, 1);
        __m512i lo, hi;
        pair32_cvt(even ? _mm512_maskz_loadu_ps(m0, even + c) : zero,
                   even ? _mm512_maskz_loadu_ps(m1, even + c + 16) : zero,
                   odd ? _mm512_maskz_loadu_ps(m0, odd + c) : zero,
                   odd ? _mm512_maskz_loadu_ps(m1, odd + c + 16) : zero, &lo, &hi);
        _mm512_storeu_si512(dst, lo);
        _mm512_storeu_si512(dst + NR, hi);
    }
}

/* Rows of a row-major fp32 matrix straight into pair-rows: columns [0, cols) of rows
 * `even` and `odd` (NULL: zeros), the last panel's missing columns read as zeros through
 * masked loads. */
__attribute__((target("avx512f"))) static void matrix_pair_rows_avx512(
    const float *even, const float *odd, int64_t cols, uint16_t *dst, int64_t panel_stride) {
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += NR, dst += panel_stride) {
        const int64_t left = cols - c;
        const __mmask16 m0 = half_mask(left, 0), m1 = half_mask(left, 1);
        const __m512 e0 = even ? _mm512_maskz_loadu_ps(m0, even + c) : zero;
        const __m512 e1 = even ? _mm512_maskz_loadu_ps(m1, even + c + 16) : zero;
        const __m512 o0 = odd ? _mm512_maskz_loadu_ps(m0, odd + c) : zero;
        const __m512 o1 = odd ? _mm512_maskz_loadu_ps(m1, odd + c + 16) : zero;
        _mm512_storeu_si512(dst, pair16(e0, o0));
        _mm512_storeu_si512(dst + NR, pair16(e1, o1));
    }
}
#endif

/* The AVX-512 converters run with AMX and AVX512-BF16 (which imply AVX-512), the plain ones
 * with the generic micro-kernel, so that each variant is tested whole. */
static int use_avx512(void) {
#ifdef NN_BF16_X86
    return kernel()->fn != block_generic;
#else
    return 0;
#endif
}

/* 1 where the CPU converts fp32 to bf16 itself (AVX512-BF16; AMX alone does not imply it). */
static int cvt_bf16;
static pthread_once_t cvt_once = PTHREAD_ONCE_INIT;
static void detect_cvt(void) {
#ifdef NN_BF16_X86
    cvt_bf16 = use_avx512() && __builtin_cpu_supports("avx512bf16");
#endif
}

void nn_bf16_pair_rows(const float *even, const float *odd, int64_t panels, uint16_t *dst,
                       int64_t panel_stride) {
    pthread_once(&cvt_once, detect_cvt);
#ifdef NN_BF16_X86
    if (cvt_bf16) {
        pair_rows_cvt(even, odd, NR, panels, dst, panel_stride);
        return;
    }
    if (use_avx512()) {
        pair_rows_avx512(even, odd, NR, panels, dst, panel_stride);
        return;
    }
#endif
    pair_rows_generic(even, odd, NR, panels, dst, panel_stride);
}

#ifdef NN_BF16_X86
/* nn_bf16_interleave by 32 values: vcvtne2ps2bf16 where the CPU has it, else the integer
 * rounding; the last values under masks. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void interleave_cvt(
    const float *even, const float *odd, int64_t n, uint32_t *dst) {
    for (int64_t i = 0; i < n; i += 32) {
        const int64_t left = n - i;
        const __mmask16 m0 = half_mask(left, 0), m1 = half_mask(left, 1);
        __m512i lo, hi;
        pair32_cvt(_mm512_maskz_loadu_ps(m0, even + i), _mm512_maskz_loadu_ps(m1, even + i + 16),
                   _mm512_maskz_loadu_ps(m0, odd + i), _mm512_maskz_loadu_ps(m1, odd + i + 16),
                   &lo, &hi);
        _mm512_mask_storeu_epi32(dst + i, m0, lo);
        _mm512_mask_storeu_epi32(dst + i + 16, m1, hi);
    }
}

__attribute__((target("avx512f"))) static void interleave_avx512(const float *even,
                                                                  const float *odd, int64_t n,
                                                                  uint32_t *dst) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = half_mask(n - i, 0);
        _mm512_mask_storeu_epi32(dst + i, m, pair16(_mm512_maskz_loadu_ps(m, even + i),
                                                    _mm512_maskz_loadu_ps(m, odd + i)));
    }
}
#endif

void nn_bf16_interleave(const float *even, const float *odd, int64_t n, uint32_t *dst) {
    pthread_once(&cvt_once, detect_cvt);
#ifdef NN_BF16_X86
    if (cvt_bf16) {
        interleave_cvt(even, odd, n, dst);
        return;
    }
    if (use_avx512()) {
        interleave_avx512(even, odd, n, dst);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        dst[i] = (uint32_t)to_bf16(even[i]) | (uint32_t)to_bf16(odd[i]) << 16;
    }
}

int nn_bf16_simd(void) {
    return use_avx512();
}

int nn_bf16_cvt(void) {
    pthread_once(&cvt_once, detect_cvt);
    return cvt_bf16;
}

void nn_bf16_pack_matrix(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                         int64_t panel_stride, int64_t k) {
    const nn_bf16_matrix *b = (const nn_bf16_matrix *)arg;
    const int64_t kp = nn_bf16_depth(k);
    const int avx512 = use_avx512();
    pthread_once(&cvt_once, detect_cvt);
    for (int64_t p = 0; p < kp / 2; p++) {
        const float *even = 2 * p < k ? b->data + 2 * p * b->ld + col0 : NULL;
        const float *odd = 2 * p + 1 < k ? b->data + (2 * p + 1) * b->ld + col0 : NULL;
        uint16_t *dst = panels + p * 2 * NR;
#ifdef NN_BF16_X86
        if (cvt_bf16) {
            matrix_pair_rows_cvt(even, odd, cols, dst, panel_stride);
            continue;
        }
        if (avx512) {
            matrix_pair_rows_avx512(even, odd, cols, dst, panel_stride);
            continue;
        }
#endif
        (void)avx512;
        for (int64_t c = 0; c < cols; c += NR, dst += panel_stride) {
            float e[NR], o[NR];
            for (int j = 0; j < NR; j++) {
                e[j] = even && c + j < cols ? even[c + j] : 0.0f;
                o[j] = odd && c + j < cols ? odd[c + j] : 0.0f;
            }
            pair_rows_generic(even ? e : NULL, odd ? o : NULL, NR, 1, dst, panel_stride);
        }
    }
}

#ifdef NN_BF16_X86
/* nn_bf16_pack_matrix_t with AVX512-BF16's conversion: per 16 columns and 16 pairs, each
 * column's 32 values (consecutive in its row of the source) converted into its 16 pair
 * words, then the 16 x 16 words transposed into 16 pair-rows of 16 columns. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void pack_transposed_cvt(
    const nn_bf16_matrix *b, int64_t col0, int64_t cols, uint16_t *panels,
    int64_t panel_stride, int64_t k) {
    const int64_t kp = nn_bf16_depth(k), padded = nn_pack_panels(cols, NR) * NR;
    for (int64_t c = 0; c < padded; c += 16) {
        const int64_t width = cols - c;
        uint32_t *words = (uint32_t *)(panels + (c / NR) * panel_stride) + c % NR;
        for (int64_t q0 = 0; q0 < kp / 2; q0 += 16) {
            const int64_t left = k - 2 * q0;
            const __mmask16 m0 = half_mask(left, 0), m1 = half_mask(left, 1);
            __m512 r[16];
            for (int64_t j = 0; j < 16; j++) {
                if (j < width) {
                    const float *row = b->data + (col0 + c + j) * b->ld + 2 * q0;
                    r[j] = (__m512)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, row + 16),
                                                       _mm512_maskz_loadu_ps(m0, row));
                } else {
                    r[j] = _mm512_setzero_ps();
                }
            }
            transpose16(r);
            for (int64_t i = 0; i < 16; i++) {
                _mm512_storeu_ps((float *)(words + (q0 + i) * NR), r[i]);
            }
        }
    }
}
#endif

void nn_bf16_pack_matrix_t(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                           int64_t panel_stride, int64_t k) {
    const nn_bf16_matrix *b = (const nn_bf16_matrix *)arg;
    pthread_once(&cvt_once, detect_cvt);
#ifdef NN_BF16_X86
    if (cvt_bf16) {
        pack_transposed_cvt(b, col0, cols, panels, panel_stride, k);
        return;
    }
#endif
    const int64_t kp = nn_bf16_depth(k), padded = nn_pack_panels(cols, NR) * NR;
    for (int64_t c = 0; c < padded; c++) {
        const float *row = c < cols ? b->data + (col0 + c) * b->ld : NULL;
        uint16_t *dst = panels + (c / NR) * panel_stride + 2 * (c % NR);
        for (int64_t kk = 0; kk < kp; kk++) {
            dst[(kk / 2) * 2 * NR + kk % 2] = row && kk < k ? to_bf16(row[kk]) : 0;
        }
    }
}

/* -- the product -------------------------------------------------------------------------- */

/* The bf16 products' Gelu: gelu512_fast's formula in scalar form (activation_math.h), so
 * that the variants store the same values to a few ulp (the AVX-512 form multiplies by a
 * refined reciprocal where this divides); its precision (2e-7 |x|) is four orders of
 * magnitude below bf16's rounding. */
static inline float gelu_bf16(float x) {
    return nn_gelu_fast_f32(x);
}

/* FusedConv's and FusedMatMul's epilogue over a stored run, Gelu by gelu_bf16. */
NN_VECTORIZED static void epilogue_run(const nn_epilogue *e, float *y, const float *residual,
                                       int64_t n) {
    if (e->activation != FUSED_ACT_GELU) {
        nn_epilogue_run(e, y, residual, n);
        return;
    }
    if (residual) {
        for (int64_t i = 0; i < n; i++) {
            y[i] += residual[i];
        }
    }
    for (int64_t i = 0; i < n; i++) {
        y[i] = gelu_bf16(y[i]);
    }
}

/* A block of C (rows x cols, from `out`, NR apart) stored at (row, col) with the bias, then
 * the epilogue over each stored run. */
NN_VECTORIZED static void store_block(const nn_bf16_gemm *g, const float *out, int64_t row,
                                      int64_t rows, int64_t col, int64_t cols) {
    if (g->ldc_col != 1) {  /* C transposed in memory */
        for (int64_t j = 0; j < cols; j++) {
            const int64_t at = row * g->ldc_row + (col + j) * g->ldc_col;
            float *dst = g->c + at;
            for (int64_t r = 0; r < rows; r++) {
                dst[r * g->ldc_row] = out[r * NR + j] + (g->bias ? g->bias[row + r] : 0.0f);
            }
            if (g->epilogue) {  /* ldc_row == 1 here: a run of one row of Y */
                epilogue_run(g->epilogue, dst, g->residual ? g->residual + at : NULL, rows);
            }
        }
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        float *dst = g->c + (row + r) * g->ldc_row + col;
        if (g->bias && g->bias_per_col) {
            const float *bias = g->bias + col;
            for (int64_t j = 0; j < cols; j++) {
                dst[j] = out[r * NR + j] + bias[j];
            }
        } else {
            const float bias = g->bias ? g->bias[row + r] : 0.0f;
            for (int64_t j = 0; j < cols; j++) {
                dst[j] = out[r * NR + j] + bias;
            }
        }
        if (g->epilogue) {
            epilogue_run(g->epilogue, dst,
                            g->residual ? g->residual + (row + r) * g->ldc_row + col : NULL,
                            cols);
        }
    }
}

typedef struct {
    const nn_bf16_gemm *g;
    const bf16_kernel *kern;
    a_walk walk;
    const uint16_t *panels;      /* B's panels: packed beforehand, or into the scratch */
    int64_t col0, cols, kp;
    int64_t m_blocks, n_panels;  /* blocks of 2 * MR rows; panels of NR columns */
    int64_t split_n;             /* tasks own whole panels (and pack them) */
    int64_t split_m;             /* tasks own whole blocks of rows (A outweighs B) */
} bf16_job;

/* One block of C: rows of block mb by the columns of panel np. B packed beforehand (a
 * MatMul's weight) comes from memory, a panel read by the first block of rows and kept
 * in cache for the others: with `prefetch`, each block of rows fetches its share of the
 * next panel into L2 meanwhile (BERT-base's 170 MB of weights: hot 640-670 GF/s on
 * [128, 768] x [768, 3072] and back, cold 480-520). */
static void compute_block(const bf16_job *job, int64_t mb, int64_t np, float *out,
                          int prefetch) {
    const nn_bf16_gemm *g = job->g;
    const int64_t col = np * NR, row = mb * 2 * MR;
    const int64_t width = job->cols - col < NR ? job->cols - col : NR;
    const int64_t rows = g->m - row < 2 * MR ? g->m - row : 2 * MR;
    const uint16_t *pf = NULL;
    int64_t pf_lines = 0;
    if (prefetch && g->b_packed && np + 1 < job->n_panels) {
        pf_lines = (KB + job->m_blocks - 1) / job->m_blocks;
        pf = job->panels + (np + 1) * g->panel_stride + mb * (job->kp / KB) * pf_lines * 32;
    }
    const uint16_t *a = g->a_packed + 2 * mb * job->walk.tile;
    const int activation = g->epilogue ? g->epilogue->activation : FUSED_ACT_NONE;
    /* the block stored directly: at its first row and column of C, or with B read in place
     * (C's columns are grid positions, stored run by run) at its first row and C's
     * column 0 */
    const int64_t first_col = g->in_place ? 0 : job->col0 + col;
    const int64_t at = row * g->ldc_row + first_col;
    if (g->in_place && g->in_place->out_channels_last) {
        /* C channels-last: store_row's rows are positions (ldc_col apart), its columns
         * the block's channels, whose bias is per column */
        const direct_store store = {
            g->c_bf16 ? NULL : g->c + row, g->ldc_col, g->bias ? g->bias + row : NULL, 1,
            g->epilogue && g->residual ? g->residual + row : NULL, rows, activation,
            g->epilogue ? (float)g->epilogue->alpha : 0.0f,
            g->epilogue ? (float)g->epilogue->beta : 0.0f,
            g->c_bf16 ? g->c_bf16 + row : NULL,
            g->residual_bf16 ? g->residual_bf16 + row : NULL, nn_bf16_cvt()};
        job->kern->channels_last(a, &job->walk, rows, g->in_place, job->col0 + col, g->n,
                                 job->kp, &store);
        return;
    }
    const direct_store store = {
        g->c + at, g->ldc_row, g->bias ? g->bias + (g->bias_per_col ? first_col : row) : NULL,
        g->bias_per_col, g->epilogue && g->residual ? g->residual + at : NULL,
        g->in_place ? NR : width, activation,
        g->epilogue ? (float)g->epilogue->alpha : 0.0f,
        g->epilogue ? (float)g->epilogue->beta : 0.0f};
    if (g->in_place) {
        const in_place_fn fn = g->in_place->channels ? job->kern->channels_last
                                                      : job->kern->in_place;
        fn(a, &job->walk, rows, g->in_place, job->col0 + col, g->n, job->kp, &store);
        return;
    }
    const uint16_t *b = job->panels + np * g->panel_stride;
    if (job->kern->direct && g->ldc_col == 1
        && (activation == FUSED_ACT_NONE || activation == FUSED_ACT_RELU
            || activation == FUSED_ACT_CLIP || activation == FUSED_ACT_GELU)) {
        job->kern->fn(a, &job->walk, rows, b, job->kp, g->k, NULL, &store, pf, pf_lines);
        return;
    }
    job->kern->fn(a, &job->walk, rows, b, job->kp, g->k, out, NULL, pf, pf_lines);
    store_block(g, out, row, rows, job->col0 + col, width);
}

/* Blocks of rows [mb0, mb1) by panels [n0, n1) of the job's columns. B packed beforehand
 * (a MatMul's weight) comes from memory: the operand with more bytes is walked in the outer
 * loop, so that each of its blocks is read from memory once while the other one's stay in
 * cache. B packed by this call (a Conv's columns, an activation) is in cache either way:
 * blocks of rows go outer, so that C (and the residual) is written in runs along 2 * MR
 * rows rather than a column of blocks down all of C's rows at a time. One thread on an AMX
 * Xeon, interleaved: ResNet-50's 1x1 64 -> 256 at 56x56 with residual 0.62 -> 0.45 ms,
 * light ResNet-50 19.5 -> 17.7 ms, 3x3 layers 1-9% (no change with AVX512-BF16 on Zen 4,
 * where the products, not the stores, bound a block). BERT-base's weights walked so took
 * 36 -> 54 ms: they stay under the first rule. */
/* C stored channels-last (out_channels_last) is walked by positions, every channel of a
 * block of them at a time, so that the output and the residual are written and read in
 * whole runs of positions: walked by channels, each pass strode 4 * M bytes between
 * positions, a pattern the prefetchers did not follow (light ResNet-50's 1x1 64 -> 256
 * layers at 56x56 with residual, one thread: 1.2 ms). Not where the weight is past half
 * a core's L2: walked by positions, every block of positions reads all of it again
 * (ResNet's 512-channel 3x3 layers: 4.7 MB for each of their two blocks), which costs
 * most where other processes keep the caches busy. */
#define POSITIONS_FIRST_MAX_WEIGHT (1 << 20)
static void compute(const bf16_job *job, int64_t mb0, int64_t mb1, int64_t n0, int64_t n1) {
    float out[2 * MR * NR] __attribute__((aligned(64)));
    const nn_bf16_in_place *ip = job->g->in_place;
    const int by_positions = ip && ip->out_channels_last
                             && job->g->m * job->kp * 2 <= POSITIONS_FIRST_MAX_WEIGHT;
    if (!by_positions && (job->g->b_packed == NULL || (mb1 - mb0) * 2 * MR > (n1 - n0) * NR)) {
        for (int64_t mb = mb0; mb < mb1; mb++) {
            for (int64_t np = n0; np < n1; np++) {
                compute_block(job, mb, np, out, 0);
            }
        }
        return;
    }
    for (int64_t np = n0; np < n1; np++) {
        for (int64_t mb = mb0; mb < mb1; mb++) {
            compute_block(job, mb, np, out, 1);
        }
    }
}

static void pack_panels(void *arg, int64_t begin, int64_t end) {
    const bf16_job *job = (const bf16_job *)arg;
    const nn_bf16_gemm *g = job->g;
    const int64_t col = begin * NR, last = end * NR < job->cols ? end * NR : job->cols;
    g->pack_b(g->pack_arg, job->col0 + col, last - col, g->scratch + begin * g->panel_stride,
              g->panel_stride, g->k);
}

/* split_m: tasks are runs of blocks of rows, over every panel (packed before); split_n:
 * tasks are runs of panels (packed here by the core that reads them, unless B came
 * packed); else tasks are (panel, block of rows) pairs, panel-major, over panels packed
 * before. */
static void compute_tasks(void *arg, int64_t begin, int64_t end) {
    const bf16_job *job = (const bf16_job *)arg;
#ifdef NN_BF16_X86
    if (job->kern->amx) {
        amx_begin();
    }
#endif
    if (job->split_m) {
        compute(job, begin, end, 0, job->n_panels);
    } else if (job->split_n) {
        if (job->g->b_packed == NULL && job->g->in_place == NULL) {
            pack_panels(arg, begin, end);
        }
        compute(job, 0, job->m_blocks, begin, end);
    } else {
        for (int64_t task = begin; task < end; task++) {
            const int64_t np = task / job->m_blocks, mb = task % job->m_blocks;
            compute(job, mb, mb + 1, np, np + 1);
        }
    }
}

/* Where the micro-kernels find A: the product's own walk, or the packed-A layout's. */
static a_walk walk_of(const nn_bf16_gemm *g, int64_t kp) {
    return g->a_row ? (a_walk){g->a_row, g->a_tile, g->a_kstep}
                    : (a_walk){KB, kp * MR, KB * MR};
}

void nn_gemm_bf16(ge_context *ctx, const nn_bf16_gemm *g) {
    if (g->m <= 0 || g->n <= 0) {
        return;
    }
    const bf16_kernel *kern = kernel();
    const int64_t kp = nn_bf16_depth(g->k);
    const a_walk walk = walk_of(g, kp);
    const int64_t m_blocks = (g->m + 2 * MR - 1) / (2 * MR);
    const int64_t threads = (int64_t)ge_threadpool_size();
    const int64_t block = g->b_packed || g->in_place ? nn_pack_panels(g->n, NR) * NR : g->block;
    for (int64_t col0 = 0; col0 < g->n; col0 += block) {
        const int64_t cols = g->n - col0 < block ? g->n - col0 : block;
        bf16_job job = {g, kern, walk,
                        g->b_packed ? g->b_packed + (col0 / NR) * g->panel_stride : g->scratch,
                        col0, cols, kp, m_blocks, nn_pack_panels(cols, NR), 0, 0};
        const int64_t flops = 2 * g->m * cols * kp;
        const int serial = flops < NN_BF16_MIN_PARALLEL_FLOPS || threads <= 1;
        job.split_n = serial || job.n_panels >= 2 * threads;
        /* Where A (a Conv's weight) outweighs the B this call reads (columns packed here,
         * or a channels-last grid's positions), tasks own blocks of rows, so that each
         * thread reads its share of the weight rather than all of it (a split by panels
         * gives every thread all blocks of rows). Two threads on the AMX Xeon, alternating
         * processes: ResNet-18 bf16 3.30 -> 2.99 ms, light ResNet-50 10.29 -> 8.71,
         * MobileNetV2 2.09 -> 1.89; 512 channels 3x3 at 7x7 0.205 -> 0.151 ms. */
        const nn_bf16_in_place *ip = g->in_place;
        const int64_t b_values = ip ? (ip->channels ? cols * ip->channels : -1) : cols * kp;
        job.split_m = !serial && g->b_packed == NULL && b_values >= 0
                      && job.m_blocks >= 2 * threads && m_blocks * 2 * MR * kp > b_values;
        if (job.split_m) {
            if (ip == NULL) {
                ctx->parallel_for(ctx, job.n_panels, 1, pack_panels, &job);
            }
            ctx->parallel_for(ctx, job.m_blocks, 1, compute_tasks, &job);
        } else if (job.split_n) {
            ctx->parallel_for(ctx, job.n_panels, serial ? job.n_panels : 1, compute_tasks,
                              &job);
        } else {
            if (g->b_packed == NULL && g->in_place == NULL) {
                ctx->parallel_for(ctx, job.n_panels, 1, pack_panels, &job);
            }
            ctx->parallel_for(ctx, job.m_blocks * job.n_panels, 1, compute_tasks, &job);
        }
    }
}

void nn_gemm_bf16_here(const nn_bf16_gemm *g) {
    if (g->m <= 0 || g->n <= 0) {
        return;
    }
    const int64_t kp = nn_bf16_depth(g->k);
    const bf16_job job = {g, kernel(), walk_of(g, kp), g->b_packed, 0, g->n, kp,
                          (g->m + 2 * MR - 1) / (2 * MR), nn_pack_panels(g->n, NR), 1, 0};
    compute_tasks((void *)&job, 0, job.n_panels);
}

/* -- ge_nn_linear_bf16: MatMul and Gemm with a constant weight ------------------------------ */

/* Blob (ge_hub/kernels/nn_bf16.py, pack_linear): ints rows, n, k, has_bias, block,
 * activation, has_residual, split; floats alpha, beta. Inputs X (rows x k, fp32), W (packed
 * at compile time as B panels, nn_gemm_bf16.h: ceil(n / NR) panels of depth(k) / 2
 * pair-rows, bf16 as uint16; bf16x3 (split_rows, `split` non-zero): those of
 * [hi(W); fin(W); lo(W)], a depth of 3 * depth(k), run as one product
 * (LINEAR_SPLIT_ONE_PASS) or three (LINEAR_SPLIT_THREE_PASSES, linear_split)), bias (n
 * fp32, may be omitted), Z (rows x n fp32,
 * the residual of a ge_hub.FusedMatMul, may be omitted); output Y (rows x n, fp32) =
 * activation(X @ W + bias + Z). Per `block` rows of X (a multiple of 2 * MR), X is rounded
 * once into the scratch as a row-major bf16 matrix (depth(k) values a row, zero past k and
 * past the rows up to a multiple of MR; bf16x3: the runs [hi(X) | lo(X) | fin(X)] a
 * row), read by the tiles in place as A; Y's rows are stored whole, with the epilogue on
 * each run. */
#define LINEAR_SPLIT_ONE_PASS 1
#define LINEAR_SPLIT_THREE_PASSES 2

typedef struct {
    const float *x;
    uint16_t *xb;
    int64_t rows, k, kp;  /* rows: those of X in this block (the rest up to MR zero) */
    int64_t ld;           /* values from one row of X to the next (k where X is packed) */
    int64_t runs;         /* 1, or bf16x3's 3 ([hi | lo | fin]) a row */
} linear_rows;

/* Rows [begin, end) of X, in runs of 32 values: fp32 rounded to bf16 in order. */
static void round_rows_generic(const linear_rows *lr, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
        for (int64_t kk = 0; kk < lr->kp; kk++) {
            lr->xb[r * lr->kp + kk] = r < lr->rows && kk < lr->k ? to_bf16(lr->x[r * lr->ld + kk])
                                                                : 0;
        }
    }
}

#ifdef NN_BF16_X86
/* 32 fp32 values at `src` (those past `left` read as zero) as 32 bf16, in order, through
 * the integer rounding (round_high): the high halves of both registers' lanes picked. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i round32(const float *src,
                                                                           int64_t left) {
    const __mmask16 lo = half_mask(left, 0), hi = half_mask(left, 1);
    return high_words(round_high(_mm512_maskz_loadu_ps(lo, src)),
                      round_high(_mm512_maskz_loadu_ps(hi, src + 16)));
}

__attribute__((target("avx512f,avx512bw"))) static void round_rows_avx512(
    const linear_rows *lr, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
        uint16_t *dst = lr->xb + r * lr->kp;
        const int64_t k = r < lr->rows ? lr->k : 0;
        for (int64_t k0 = 0; k0 < lr->kp; k0 += 32) {
            _mm512_storeu_si512(dst + k0, round32(lr->x + r * lr->ld + k0, k - k0));
        }
    }
}

/* The same with AVX512-BF16's conversion (one instruction per 32 values). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void round_rows_cvt(
    const linear_rows *lr, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
        uint16_t *dst = lr->xb + r * lr->kp;
        const float *src = lr->x + r * lr->ld;
        const int64_t k = r < lr->rows ? lr->k : 0;
        for (int64_t k0 = 0; k0 < lr->kp; k0 += 32) {
            const int64_t left = k - k0;
            const __mmask16 lo = half_mask(left, 0), hi = half_mask(left, 1);
            const __m512 a = _mm512_maskz_loadu_ps(lo, src + k0);
            const __m512 b = _mm512_maskz_loadu_ps(hi, src + k0 + 16);
            _mm512_storeu_si512(dst + k0, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        }
    }
}
#endif

/* bf16x3 (the `bf16x3` precision): an fp32 value x is hi + lo, hi = bf16(x) and lo =
 * bf16(x - hi) (x - hi is exact in fp32), so x is kept to about 16 bits of mantissa
 * instead of 8; with W split alike (ge_hub/kernels/nn_bf16.py), X W = hi(X) hi(W) +
 * lo(X) fin(W) + fin(X) lo(W) up to lo lo's 2^-16 relative: three bf16 products, one of
 * depth 3 * kp over rows [hi(x) | lo(x) | fin(x)] against [hi(W); fin(W); lo(W)], or
 * three passes (linear_split). fin is hi where hi is finite, else 0, and lo is then 0
 * too: an inf or NaN enters through hi hi alone, so that x inf is +-inf as in fp32
 * (not inf 0 or inf - inf: NaN). Row r's runs start at xb + r * 3 * kp. */
static inline uint16_t split_low(float value, uint16_t high) {
    const float h = nn_bf16_value(high);
    return isfinite(h) ? to_bf16(value - h) : 0;
}

static inline uint16_t split_finite(uint16_t high) {
    return isfinite(nn_bf16_value(high)) ? high : 0;
}

static void split_rows_generic(const linear_rows *lr, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
        uint16_t *dst = lr->xb + r * 3 * lr->kp;
        for (int64_t kk = 0; kk < lr->kp; kk++) {
            const float value = r < lr->rows && kk < lr->k ? lr->x[r * lr->ld + kk] : 0.0f;
            const uint16_t high = to_bf16(value);
            dst[kk] = high;
            dst[lr->kp + kk] = split_low(value, high);
            dst[2 * lr->kp + kk] = split_finite(high);
        }
    }
}

#ifdef NN_BF16_X86
/* 16 values' high parts (round_high's lanes), low parts and finite high parts, each in
 * the high half of its lane (the last two 0 where the high part is inf or NaN). */
__attribute__((target("avx512f"))) static inline void split16(__m512 v, __m512i *high,
                                                             __m512i *low, __m512i *fin) {
    const __m512i mask = _mm512_set1_epi32((int)0xFFFF0000u);
    *high = _mm512_and_si512(round_high(v), mask);
    const __m512 h = _mm512_castsi512_ps(*high);
    const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(h),
                                                 _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
    *low = _mm512_maskz_and_epi32(finite, round_high(_mm512_sub_ps(v, h)), mask);
    *fin = _mm512_maskz_mov_epi32(finite, *high);
}

__attribute__((target("avx512f,avx512bw"))) static void split_rows_avx512(
    const linear_rows *lr, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r++) {
        uint16_t *dst = lr->xb + r * 3 * lr->kp;
        const float *src = lr->x + r * lr->ld;
        const int64_t k = r < lr->rows ? lr->k : 0;
        for (int64_t k0 = 0; k0 < lr->kp; k0 += 32) {
            const int64_t left = k - k0;
            __m512i h0, l0, f0, h1, l1, f1;
            split16(_mm512_maskz_loadu_ps(half_mask(left, 0), src + k0), &h0, &l0, &f0);
            split16(_mm512_maskz_loadu_ps(half_mask(left, 1), src + k0 + 16), &h1, &l1, &f1);
            _mm512_storeu_si512(dst + k0, high_words(h0, h1));
            _mm512_storeu_si512(dst + lr->kp + k0, high_words(l0, l1));
            _mm512_storeu_si512(dst + 2 * lr->kp + k0, high_words(f0, f1));
        }
    }
}
#endif

static void round_rows(void *arg, int64_t begin, int64_t end) {
    const linear_rows *lr = (const linear_rows *)arg;
    pthread_once(&cvt_once, detect_cvt);
    if (lr->runs > 1) {
#ifdef NN_BF16_X86
        if (use_avx512()) {
            split_rows_avx512(lr, begin, end);
            return;
        }
#endif
        split_rows_generic(lr, begin, end);
        return;
    }
#ifdef NN_BF16_X86
    if (cvt_bf16) {
        round_rows_cvt(lr, begin, end);
        return;
    }
    if (use_avx512()) {
        round_rows_avx512(lr, begin, end);
        return;
    }
#endif
    round_rows_generic(lr, begin, end);
}

uint16_t nn_bf16_of(float value) {
    return to_bf16(value);
}

void nn_bf16_round_run(const float *src, int64_t n, uint16_t *dst) {
    const linear_rows run = {src, dst, 1, n, n, n, 1};
    round_rows((void *)&run, 0, 1);
}

/* bf16x3's three products, one pass each, `g` set up for the whole one (of depth 3 * kp,
 * rows [hi(X) | lo(X) | fin(X)] and panels [hi(W); fin(W); lo(W)], g's epilogue and
 * residual the step's; `sum` rows x n floats of scratch): Y = hi(X) hi(W) + Z, then
 * sum = lo(X) fin(W) + Y, then Y = activation(fin(X) lo(W) + bias + sum), the sum carried
 * through the residual (never read where it is written: the plain store adds the
 * residual after storing). For an X whose rows are past one block in one product, where
 * each block of rows would read all of W again: BERT-base's [128, 3072] x [3072, 768],
 * one thread on the AMX Xeon, 3.3 ms in one product, 1.8 in three passes, against fp32's
 * 4.3 and bf16's 0.63; [128, 768] x [768, 768] 0.39 in one, 0.49 in three. */
static void linear_split(ge_context *ctx, const nn_bf16_gemm *g, int64_t kp, float *sum) {
    const nn_epilogue add = {FUSED_ACT_NONE, 0.0, 0.0, NULL};
    nn_bf16_gemm pass = *g;
    pass.k = kp;
    pass.bias = NULL;
    pass.epilogue = g->residual ? &add : NULL;
    nn_gemm_bf16(ctx, &pass);
    pass.a_packed = g->a_packed + kp;
    pass.b_packed = g->b_packed + kp * NR;
    pass.epilogue = &add;
    pass.residual = g->c;
    pass.c = sum;
    nn_gemm_bf16(ctx, &pass);
    pass.a_packed = g->a_packed + 2 * kp;
    pass.b_packed = g->b_packed + 2 * kp * NR;
    pass.bias = g->bias;
    pass.epilogue = g->epilogue ? g->epilogue : &add;
    pass.residual = sum;
    pass.c = g->c;
    nn_gemm_bf16(ctx, &pass);
}

int ge_nn_linear_bf16(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                      const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                      size_t attrs_size) {
    static const char *name = "ge_nn_linear_bf16";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[8] = {0};
    double f[2] = {0.0, 0.0};
    /* 7 ints: a blob written before bf16x3 (an offline file's), split 0 */
    const int ints = ge_blob_left(&blob) == 10 ? 8 : 7;
    if (!ge_blob_ints(&blob, v, ints) || !ge_blob_floats(&blob, f, 2) || !ge_blob_done(&blob)
        || v[0] < 0 || v[1] < 0 || v[2] < 0 || (v[3] != 0 && v[3] != 1) || v[4] < NR
        || v[4] % (2 * MR) || v[5] < FUSED_ACT_NONE || v[5] >= FUSED_ACT_COUNT
        || (v[6] != 0 && v[6] != 1) || v[7] < 0 || v[7] > LINEAR_SPLIT_THREE_PASSES) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t rows = v[0], n = v[1], k = v[2], has_bias = v[3], block = v[4];
    const int split = (int)v[7];
    nn_epilogue epilogue = {(int)v[5], f[0], f[1], NULL};
    if (v[6]) {
        if (n_inputs < 4 || nn_check_f32(ctx, name, "input Z", &inputs[3], rows * n)) {
            return n_inputs < 4 ? ctx->set_error(ctx, "%s: expected input Z (the residual)",
                                                 name)
                                : -1;
        }
        epilogue.residual = (const float *)inputs[3].data;
    }
    if (n_inputs < 2 + (int)has_bias || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs X, W%s and 1 output, got %d and %d",
                              name, has_bias ? ", B" : "", (int)n_inputs, (int)n_outputs);
    }
    const int64_t kp = nn_bf16_depth(k);
    const int64_t runs = split ? 3 : 1;
    const int64_t row_values = runs * kp;  /* W's depth too */
    const int64_t w_values = nn_pack_panels(n, NR) * NR * row_values;
    if (inputs[1].dtype != GE_UINT16 || inputs[1].numel != w_values) {
        return ctx->set_error(ctx, "%s: input W must be the bf16 weights packed at compile "
                              "time (%lld uint16 values), got dtype code %d with %lld",
                              name, (long long)w_values, (int)inputs[1].dtype,
                              (long long)inputs[1].numel);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], rows * k)
        || (has_bias && nn_check_f32(ctx, name, "input B", &inputs[2], n))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], rows * n)) {
        return -1;
    }
    /* the rounded rows, then with `split` the sum (block x n floats, 64-byte aligned) */
    const size_t rows_bytes = ((size_t)(block * row_values) * sizeof(uint16_t) + 63) / 64 * 64;
    const size_t needed = rows_bytes + (split == LINEAR_SPLIT_THREE_PASSES
                                        ? (size_t)(block * n) * sizeof(float) : 0);
    if (rows > 0 && n > 0 && (ctx->scratch_bytes < needed || ctx->scratch == NULL)) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    float *y = (float *)outputs[0].data;
    if (k == 0) {  /* an empty sum: Y is the bias */
        for (int64_t i = 0; i < rows * n; i++) {
            y[i] = has_bias ? ((const float *)inputs[2].data)[i % n] : 0.0f;
        }
        for (int64_t i = 0; i < rows && !nn_epilogue_empty(&epilogue); i++) {
            nn_epilogue_run(&epilogue, y + i * n,
                            epilogue.residual ? epilogue.residual + i * n : NULL, n);
        }
        return 0;
    }
    const float *x = (const float *)inputs[0].data;
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
        const int64_t count = rows - r0 < block ? rows - r0 : block;
        const int64_t padded = (count + MR - 1) / MR * MR;
        linear_rows lr = {x + r0 * k, (uint16_t *)ctx->scratch, count, k, kp, k, runs};
        ctx->parallel_for(ctx, padded, count * k < (1 << 16) ? padded : MR, round_rows, &lr);
        const float *residual = epilogue.residual ? epilogue.residual + r0 * n : NULL;
        /* depth: k, or bf16x3's 3 * kp */
        const int64_t depth = split ? row_values : k;
        nn_bf16_gemm gemm = {count, n, depth, lr.xb,
                             has_bias ? (const float *)inputs[2].data : NULL,
                             y + r0 * n, n, 1, NULL, NULL, 0, NULL, nn_bf16_depth(depth) * NR,
                             nn_epilogue_empty(&epilogue) ? NULL : &epilogue, residual,
                             row_values, MR * row_values, KB, (const uint16_t *)inputs[1].data,
                             1};
        if (split == LINEAR_SPLIT_THREE_PASSES) {
            linear_split(ctx, &gemm, kp, (float *)((char *)ctx->scratch + rows_bytes));
        } else {
            nn_gemm_bf16(ctx, &gemm);
        }
    }
    return 0;
}

/* -- ge_nn_matmul_act_bf16: MatMul of two run-time inputs ------------------------------------ */

/* One product of two activations: A's m rows (`a_row` values apart) rounded into xb
 * (unless `rounded`: xb holds them from the matrix before, A being one matrix for the
 * batch), B's columns (rows `b_ld` apart, or with `b_columns` its columns) packed into the
 * panels after xb as the product needs them, Y's rows `c_row` apart. */
typedef struct {
    int64_t m, k, n, kp, padded, block;
    int64_t a_row, b_ld, c_row;
    int b_columns;
    int a_shared;  /* A is one matrix for the whole batch */
} act_product;

static void act_product_run(ge_context *ctx, const act_product *s, const float *a,
                            const float *b, float *y, uint16_t *xb, int rounded) {
    if (!rounded) {
        linear_rows lr = {a, xb, s->m, s->k, s->kp, s->a_row};
        round_rows(&lr, 0, s->padded);
    }
    nn_bf16_matrix columns = {b, s->b_ld};
    nn_bf16_gemm gemm = {s->m, s->n, s->k, xb, NULL, y, s->c_row, 1,
                         s->b_columns ? nn_bf16_pack_matrix_t : nn_bf16_pack_matrix,
                         &columns, s->block, xb + s->padded * s->kp, s->kp * NR, NULL, NULL,
                         s->kp, MR * s->kp, KB, NULL, 0};
    nn_gemm_bf16(ctx, &gemm);
}

/* Where matrix i of a batch lies in A, B and Y (values). */
typedef void (*act_locate_fn)(const void *where, int64_t i, int64_t *at_a, int64_t *at_b,
                              int64_t *at_c);

typedef struct {
    ge_context *ctx;
    const act_product *s;
    const float *a, *b;
    float *y;
    act_locate_fn locate;
    const void *where;
    size_t bytes;   /* xb and the panels */
    int failed;     /* a thread found no work area: the caller runs the batch itself */
} act_batches;

/* Matrices [begin, end) of the batch, each whole on this thread in its own work area (the
 * product's own parallel loops run inline here: the pool is busy with this one). */
static void act_batch_range(void *arg, int64_t begin, int64_t end) {
    act_batches *job = (act_batches *)arg;
    uint16_t *xb = (uint16_t *)ge_thread_workspace(job->bytes);
    if (xb == NULL) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int64_t at_a, at_b, at_c;
        job->locate(job->where, i, &at_a, &at_b, &at_c);
        act_product_run(job->ctx, job->s, job->a + at_a, job->b + at_b, job->y + at_c, xb,
                        i > begin && job->s->a_shared);
    }
}

/* A batch of products of two activations (attention's heads). With a matrix or more per
 * thread, each is computed whole by one thread; else one after another, each split over
 * the pool (with a barrier or two per matrix, which BERT-base's 128 x 64 x 128 heads
 * cannot pay for: its 24 such steps took 1.8 ms on one thread and 3.2 ms on two, split
 * so, on the AMX Xeon). `scratch` (xb then the panels: `bytes`) serves the second way;
 * each thread's work area is as large. */
static void act_products(ge_context *ctx, const act_product *s, int64_t batch, const float *a,
                         const float *b, float *y, act_locate_fn locate, const void *where,
                         uint16_t *scratch, size_t bytes) {
    const int64_t threads = (int64_t)ge_threadpool_size();
    if (threads > 1 && batch >= threads) {
        act_batches job = {ctx, s, a, b, y, locate, where, bytes, 0};
        ctx->parallel_for(ctx, batch, 1, act_batch_range, &job);
        if (!__atomic_load_n(&job.failed, __ATOMIC_RELAXED)) {
            return;
        }
    }
    for (int64_t i = 0; i < batch; i++) {
        int64_t at_a, at_b, at_c;
        locate(where, i, &at_a, &at_b, &at_c);
        act_product_run(ctx, s, a + at_a, b + at_b, y + at_c, scratch, i > 0 && s->a_shared);
    }
}

/* ge_nn_matmul_act_bf16's matrices: steps of A and B (0: broadcast), Y's m * n. */
typedef struct {
    int64_t a_step, b_step, c_step;
} act_steps;

static void act_locate_steps(const void *where, int64_t i, int64_t *at_a, int64_t *at_b,
                             int64_t *at_c) {
    const act_steps *st = (const act_steps *)where;
    *at_a = i * st->a_step;
    *at_b = i * st->b_step;
    *at_c = i * st->c_step;
}

/* Attention's Q K^T and P V: both operands are activations, so each is rounded per call, A's
 * rows into a row-major bf16 matrix (as ge_nn_linear_bf16's X) and B's columns into
 * pair-row panels (nn_bf16_pack_matrix); the batch's matrices as act_products runs them.
 * Blob (ge_hub/kernels/nn_bf16.py, pack_matmul_act): ints batch, m, k, n, a_step, b_step
 * (values between the batch's matrices of A and of B; 0: one matrix broadcast), block
 * (B's columns packed at a time, a multiple of NR). Inputs A (m x k per matrix, fp32), B
 * (k x n); output Y (batch x m x n, fp32). Scratch: A's rows (m padded to MR, depth(k)
 * values each), then ceil(block / NR) panels of depth(k) * NR values. */
int ge_nn_matmul_act_bf16(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                          const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                          size_t attrs_size) {
    static const char *name = "ge_nn_matmul_act_bf16";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[7] = {0};
    if (!ge_blob_ints(&blob, v, 7) || !ge_blob_done(&blob) || v[0] < 0 || v[1] < 1
        || v[2] < 1 || v[3] < 1 || v[4] < 0 || v[5] < 0 || v[6] < NR || v[6] % NR) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t batch = v[0], m = v[1], k = v[2], n = v[3], a_step = v[4], b_step = v[5];
    const int64_t block = v[6];
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs A, B and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    const int64_t a_matrices = a_step ? batch : 1, b_matrices = b_step ? batch : 1;
    if (nn_check_f32(ctx, name, "input A", &inputs[0], a_matrices * m * k)
        || nn_check_f32(ctx, name, "input B", &inputs[1], b_matrices * k * n)
        || nn_check_f32(ctx, name, "output Y", &outputs[0], batch * m * n)) {
        return -1;
    }
    if ((a_step && a_step != m * k) || (b_step && b_step != k * n)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t kp = nn_bf16_depth(k), padded = (m + MR - 1) / MR * MR;
    const size_t needed = (size_t)(padded * kp + nn_pack_panels(block, NR) * kp * NR)
                          * sizeof(uint16_t);
    if (batch > 0 && (ctx->scratch_bytes < needed || ctx->scratch == NULL)) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    const act_product shape = {m, k, n, kp, padded, block, k, n, n, 0, a_step == 0};
    const act_steps steps = {a_step, b_step, m * n};
    act_products(ctx, &shape, batch, (const float *)inputs[0].data,
                 (const float *)inputs[1].data, (float *)outputs[0].data, act_locate_steps,
                 &steps, (uint16_t *)ctx->scratch, needed);
    return 0;
}

/* -- ge_nn_matmul_strided_bf16: the same through strided views ------------------------------ */

/* ge_hub.StridedMatMul in bf16: ge_nn_matmul_act_bf16 with A, B and Y read and written
 * through strided views, so that the Transposes, Splits and Reshapes an exporter puts
 * around attention's products (the heads' split of a fused QKV projection, K^T, the heads'
 * merge) run no step of their own (ge_hub/passes/fold_matmul_views.py). A's rows are
 * contiguous (col 1) and so are Y's; B has contiguous rows (nn_bf16_pack_matrix) or
 * columns (row 1: K^T, nn_bf16_pack_matrix_t). Blob: nn_strided_matmul_open's (nn.h), then
 * block (B's columns packed at a time, a multiple of NR; ge_hub/kernels/nn_strided.py,
 * pack_bf16). Scratch as ge_nn_matmul_act_bf16's. */
/* Matrix i of a strided product: its index over the batch dims (last fastest), through
 * each view's batch strides. */
static void strided_locate(const void *where, int64_t i, int64_t *at_a, int64_t *at_b,
                           int64_t *at_c) {
    const nn_strided_matmul *s = (const nn_strided_matmul *)where;
    *at_a = s->a.offset;
    *at_b = s->b.offset;
    *at_c = s->c.offset;
    for (int64_t d = s->nb - 1; d >= 0; d--) {
        const int64_t index = i % s->shape[d];
        i /= s->shape[d];
        *at_a += index * s->a.batch[d];
        *at_b += index * s->b.batch[d];
        *at_c += index * s->c.batch[d];
    }
}

int ge_nn_matmul_strided_bf16(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                              const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                              size_t attrs_size) {
    static const char *name = "ge_nn_matmul_strided_bf16";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    nn_strided_matmul s;
    int64_t block = 0;
    if (nn_strided_matmul_open(ctx, name, inputs, n_inputs, outputs, n_outputs, &blob, &s)) {
        return -1;
    }
    if (!ge_blob_ints(&blob, &block, 1) || !ge_blob_done(&blob) || block < NR || block % NR) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t m = s.m, k = s.k, n = s.n, batch = s.batches;
    const nn_strided_view va = s.a, vb = s.b, vc = s.c;
    const int64_t kp = nn_bf16_depth(k), padded = (m + MR - 1) / MR * MR;
    const size_t needed = (size_t)(padded * kp + nn_pack_panels(block, NR) * kp * NR)
                          * sizeof(uint16_t);
    if (ctx->scratch_bytes < needed || ctx->scratch == NULL) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    /* contiguous rows of B: its pair-rows are two of them; else (row 1) its columns are
     * contiguous, each pair two neighbouring values of one */
    const act_product product = {m, k, n, kp, padded, block, va.row,
                                 vb.col == 1 ? vb.row : vb.col, vc.row, vb.col != 1, 0};
    act_products(ctx, &product, batch, (const float *)inputs[0].data,
                 (const float *)inputs[1].data, (float *)outputs[0].data, strided_locate, &s,
                 (uint16_t *)ctx->scratch, needed);
    return 0;
}
