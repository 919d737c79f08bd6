/*
 * Direct depthwise convolution for 2-D (and 1-D) windows up to 7x7, any stride and
 * dilation, any padding (nn_conv_depthwise_fits says which): the 3x3 and 5x5 depthwise
 * layers of MobileNet, ShuffleNet and EfficientNet, stride 1 and 2, wide planes (112x112)
 * and narrow ones (7x7) alike.
 *
 * Each plane (one channel of one image) is first copied into a zero-padded buffer split
 * into sy * sx phases (phase (py, px) holds the padded rows py, py + sy, ... and columns
 * px, px + sx, ...; one phase when both strides are 1), each phase a grid of hq rows of
 * wq floats. In a phase every tap's inputs for consecutive outputs are contiguous, and
 * consecutive output rows are exactly wq floats apart, so every tap is one fixed offset:
 *     out[oy * wq + ox] = bias + sum over taps t of w[t] * phase_t[oy * wq + ox + off_t]
 * with phase_t = ((ky*dy) % sy, (kx*dx) % sx), off_t = (ky*dy / sy) * wq + kx*dx / sx.
 * A span kernel computes a run of these flat outputs, vectors in registers across all
 * taps (taps in ascending order, from the bias), Relu or Clip applied in the registers:
 *   wide planes (out_w >= NN_DW_FLAT_WIDTH) one output row per span, stored straight
 *   into Y (the wq - out_w columns past a row are never computed);
 *   narrow planes (14x14, 7x7) the whole plane as one span into a small buffer (the
 *   wq - out_w columns per row are computed and dropped as the rows are copied into Y),
 *   so that the vectors stay full instead of running 7 outputs in a 16-lane register.
 * The other epilogues (a residual, the sigmoids, HardSwish, ...; conv_epilogue.h) run on
 * each finished plane while it is in cache. With horizontal stride 2 the AVX-512 kernel
 * fills both column phases of a row at once (fill_pairs: two loads and two permutes per
 * 16 columns of each phase): MobileNetV2's 112x112 stride-2 layer runs in about 3/4 of
 * the time it took with fill_phase's strided loop (one thread, Zen 4).
 *
 * The AVX-512 kernel skips the padded copy where it can: with stride 1 and rows that keep
 * their width (3x3 with pad 1, 5x5 with pad 2: out_w == in_w), output o's tap t reads
 * x[o + off_t] where the plane lies, and the reads that would fall in the padding (or on
 * the row before or after, at a row's ends) are masked off lane by lane (direct_avx512;
 * the masks are built once per call). No copy in, no rows copied out and no wasted
 * columns: MobileNetV2's 7x7 layers take half the time they took through the copy, its
 * 14x14 ones 0.6-0.7 of it and its 56x56 one 0.8 (one thread, Zen 4).
 *
 * Its 3x3 stride-1 windows (pad 1 left and right) read each input row once per 16 outputs
 * and shift it in registers for the three taps of the row (direct3_avx512): three loads
 * per vector instead of nine.
 *
 * The AVX-512 kernel reads 3x3 stride-2 windows in place too (direct_s2_avx512): each
 * output row's three input rows are loaded 32 columns at a time under masks and split
 * into even and odd columns by permutes, in registers, instead of being written out as
 * four phase planes and read back. Same taps in the same order from the bias: the same
 * results. MobileNetV2's 112x112 stride-2 layer went from 2.1x ONNX Runtime's time to
 * 1.4x in the model (one thread, Zen 4).
 *
 * Span kernels, picked once from the CPU (GE_HUB_DEPTHWISE_KERNEL forces one it supports):
 *   avx512   64 outputs per step in four zmm accumulators, the last few under masks (and
 *            the direct kernel, the same way, its masks four at a time: AVX512BW);
 *   avx512f  the same without AVX512BW (the direct kernel's masks one at a time);
 *   avx2     32 outputs per step in four ymm accumulators, the last few under masks;
 *   generic  plain C, for other CPUs.
 * The SIMD ones use fused multiply-add, so they may differ from the generic one in the
 * last bit. Loads past a span's last output are masked (vmaskmov on AVX2), so they never
 * leave the buffer; each phase still carries a few zero floats past its last row.
 */
#include "conv_depthwise.h"

#include "ge_hub/internal/simd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_DW_X86 1
#endif

/* Planes narrower than this run as one flat span (see above). */
#define NN_DW_FLAT_WIDTH 32
/* Elements of work per parallel chunk: small convolutions run inline. */
#define NN_DW_GRAIN_WORK 32768
#define NN_DW_MAX_TAPS (NN_DEPTHWISE_MAX_K * NN_DEPTHWISE_MAX_K)
/* Phase rows of up to 16 times this many columns take fill_pairs (horizontal stride 2). */
#define NN_DW_PAIR_CHUNKS 16
/* Planes of at most this many outputs may take the masked direct kernel (see
 * direct_avx512): its masks, a 16-bit word per tap and 16 outputs (at most 392 KiB), are
 * built per call. */
#define NN_DW_DIRECT_MAX (1 << 16)
/* Rows of up to 16 times this many outputs take direct_s2_avx512 (its table of load masks
 * is on the stack); wider ones, the phases. */
#define NN_DW_S2_MAX_VECTORS 64
/* Rows of at most this many outputs take direct_s2_avx512 two to a vector: an output row
 * reads 2 out_w + 1 columns, which one 16-float load then holds. */
#define NN_DW_S2_PAIR_WIDTH 7

/* What the span kernel applies in registers: nothing, max(0, v), or min(max(v, lo), hi),
 * in the NaN-keeping forms of conv_epilogue.c (a NaN sum stays NaN). */
enum { DW_ACT_NONE = 0, DW_ACT_RELU = 1, DW_ACT_CLIP = 2 };

typedef struct {
    int kind;
    float lo, hi;
} dw_act;

/* Lanes [first, end) of 16, clamped, as bits: the lanes of a 16-value load whose lane 0
 * is element `at` of a row that holds elements [lo, hi). */
static inline uint16_t bits_between(int64_t at, int64_t lo, int64_t hi) {
    int64_t first = lo - at, end = hi - at;
    first = first < 0 ? 0 : first > 16 ? 16 : first;
    end = end < 0 ? 0 : end > 16 ? 16 : end;
    return (uint16_t)(((1u << end) - 1u) & ~((1u << first) - 1u));
}

/* What direct3_avx512 reads a plane by (see there). */
typedef struct {
    int64_t in_w, in_n, out_n;  /* a row's width; the input's and output's floats */
    int64_t first;              /* tap (0, 0)'s offset from its output */
    const uint16_t *columns;    /* per 16 outputs: the lanes not at column 0, then those not
                                 * at the last column */
    const uint16_t *loads;      /* [ky * (chunks + 1) + j]: the lanes of the load at 16 j +
                                 * first + ky * in_w that lie in the plane */
} dw_direct3_plan;

typedef void (*dw_span_fn)(const float *base, const int64_t *offsets, const float *weights,
                           int ntaps, float bias, const dw_act *act, float *out, int64_t n);

static inline float act_scalar(const dw_act *act, float v) {
    if (act->kind == DW_ACT_RELU) {
        return v < 0.0f ? 0.0f : v;
    }
    if (act->kind == DW_ACT_CLIP) {
        v = v < act->lo ? act->lo : v;
        return v > act->hi ? act->hi : v;
    }
    return v;
}

NN_VECTORIZED static void span_generic(const float *base, const int64_t *offsets,
                                       const float *weights, int ntaps, float bias,
                                       const dw_act *act, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        out[i] = bias;
    }
    for (int t = 0; t < ntaps; t++) {
        const float *src = base + offsets[t];
        const float weight = weights[t];
        for (int64_t i = 0; i < n; i++) {
            out[i] += weight * src[i];
        }
    }
    if (act->kind != DW_ACT_NONE) {
        for (int64_t i = 0; i < n; i++) {
            out[i] = act_scalar(act, out[i]);
        }
    }
}

#ifdef NN_DW_X86
/* max(lo, v) and min(hi, v) return v when v is NaN (the second operand wins an unordered
 * compare), as `v < lo ? lo : v` does. */
__attribute__((target("avx512f"))) static inline __m512 act512(const dw_act *act, __m512 v) {
    if (act->kind == DW_ACT_RELU) {
        return _mm512_max_ps(_mm512_setzero_ps(), v);
    }
    if (act->kind == DW_ACT_CLIP) {
        return _mm512_min_ps(_mm512_set1_ps(act->hi), _mm512_max_ps(_mm512_set1_ps(act->lo), v));
    }
    return v;
}

__attribute__((target("avx512f"))) static void span_avx512(
    const float *base, const int64_t *offsets, const float *weights, int ntaps, float bias,
    const dw_act *act, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
        const float *at = base + i;
        for (int t = 0; t < ntaps; t++) {
            const float *src = at + offsets[t];
            const __m512 wv = _mm512_set1_ps(weights[t]);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(src), wv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(src + 16), wv, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(src + 32), wv, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(src + 48), wv, a3);
        }
        _mm512_storeu_ps(out + i, act512(act, a0));
        _mm512_storeu_ps(out + i + 16, act512(act, a1));
        _mm512_storeu_ps(out + i + 32, act512(act, a2));
        _mm512_storeu_ps(out + i + 48, act512(act, a3));
    }
    if (i < n) {  /* the last 1 to 63 outputs: four accumulators under masks */
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            const int64_t left = n - i - 16 * v;
            m[v] = (__mmask16)(left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1u);
        }
        __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
        const float *at = base + i;
        for (int t = 0; t < ntaps; t++) {
            const float *src = at + offsets[t];
            const __m512 wv = _mm512_set1_ps(weights[t]);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[0], src), wv, a0);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[1], src + 16), wv, a1);
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[2], src + 32), wv, a2);
            a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[3], src + 48), wv, a3);
        }
        _mm512_mask_storeu_ps(out + i, m[0], act512(act, a0));
        _mm512_mask_storeu_ps(out + i + 16, m[1], act512(act, a1));
        _mm512_mask_storeu_ps(out + i + 32, m[2], act512(act, a2));
        _mm512_mask_storeu_ps(out + i + 48, m[3], act512(act, a3));
    }
}

__attribute__((target("avx2,fma"))) static inline __m256 act256(const dw_act *act, __m256 v) {
    if (act->kind == DW_ACT_RELU) {
        return _mm256_max_ps(_mm256_setzero_ps(), v);
    }
    if (act->kind == DW_ACT_CLIP) {
        return _mm256_min_ps(_mm256_set1_ps(act->hi), _mm256_max_ps(_mm256_set1_ps(act->lo), v));
    }
    return v;
}

__attribute__((target("avx2,fma"))) static void span_avx2(
    const float *base, const int64_t *offsets, const float *weights, int ntaps, float bias,
    const dw_act *act, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a0 = _mm256_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
        const float *at = base + i;
        for (int t = 0; t < ntaps; t++) {
            const float *src = at + offsets[t];
            const __m256 wv = _mm256_set1_ps(weights[t]);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(src), wv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(src + 8), wv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(src + 16), wv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(src + 24), wv, a3);
        }
        _mm256_storeu_ps(out + i, act256(act, a0));
        _mm256_storeu_ps(out + i + 8, act256(act, a1));
        _mm256_storeu_ps(out + i + 16, act256(act, a2));
        _mm256_storeu_ps(out + i + 24, act256(act, a3));
    }
    if (i < n) {  /* the last 1 to 31 outputs: four accumulators under masks */
        __m256i m[4];
        for (int v = 0; v < 4; v++) {
            const int64_t left = n - i - 8 * v;
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            m[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 0 ? 0 : left > 8 ? 8 : left)),
                                      lane);
        }
        __m256 a0 = _mm256_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
        const float *at = base + i;
        for (int t = 0; t < ntaps; t++) {
            const float *src = at + offsets[t];
            const __m256 wv = _mm256_set1_ps(weights[t]);
            a0 = _mm256_fmadd_ps(_mm256_maskload_ps(src, m[0]), wv, a0);
            a1 = _mm256_fmadd_ps(_mm256_maskload_ps(src + 8, m[1]), wv, a1);
            a2 = _mm256_fmadd_ps(_mm256_maskload_ps(src + 16, m[2]), wv, a2);
            a3 = _mm256_fmadd_ps(_mm256_maskload_ps(src + 24, m[3]), wv, a3);
        }
        _mm256_maskstore_ps(out + i, m[0], act256(act, a0));
        _mm256_maskstore_ps(out + i + 8, m[1], act256(act, a1));
        _mm256_maskstore_ps(out + i + 16, m[2], act256(act, a2));
        _mm256_maskstore_ps(out + i + 24, m[3], act256(act, a3));
    }
}

/* Lanes [first, end) of 16, clamped: the mask of a load whose lane 0 is element `at` of a
 * row that holds elements [lo, hi). */
static inline __mmask16 lanes_between(int64_t at, int64_t lo, int64_t hi) {
    int64_t first = lo - at, end = hi - at;
    first = first < 0 ? 0 : first > 16 ? 16 : first;
    end = end < 0 ? 0 : end > 16 ? 16 : end;
    return (__mmask16)(((1u << end) - 1u) & ~((1u << first) - 1u));
}

/* Horizontal stride 2 on rows of up to 16 * NN_DW_PAIR_CHUNKS phase columns: both column
 * phases of phase row r of vertical phase py from one input row, 16 phase columns at a
 * time: 32 padded columns gathered in two masked loads (masked-off lanes are never read,
 * so nothing outside the row is touched), split into their even and odd columns by two
 * permutes, each phase row stored whole (its zeros included) under a mask of the lanes
 * left. The masks are the same for every row. `chunks` is a constant for the short rows
 * of small planes (1 or 2), so that their loop unrolls with its masks in registers. */
__attribute__((target("avx512f"), always_inline)) static inline void pairs_rows(
    const nn_window *w, int64_t hq, int64_t wq, int64_t py, const float *x, float *dst0,
    float *dst1, int interior_only, const int64_t chunks) {
    const int64_t sy = w->stride[1];
    const int64_t in_h = w->in[1], in_w = w->in[2], pad_w = w->pad[2];
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                           26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    /* lane c of chunk v's loads is padded column 32 v + c, which holds x[iy][32 v + c -
     * pad_w] for the columns [pad_w, pad_w + in_w) */
    __mmask16 load[2 * NN_DW_PAIR_CHUNKS], store[NN_DW_PAIR_CHUNKS];
    for (int64_t v = 0; v < chunks; v++) {
        load[2 * v] = lanes_between(32 * v, pad_w, pad_w + in_w);
        load[2 * v + 1] = lanes_between(32 * v + 16, pad_w, pad_w + in_w);
        const int64_t left = wq - 16 * v;
        store[v] = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1u);
    }
    for (int64_t r = 0; r < hq; r++, dst0 += wq, dst1 += wq) {
        const int64_t iy = r * sy + py - w->pad[1];
        if (iy < 0 || iy >= in_h) {
            if (!interior_only) {
                for (int64_t v = 0; v < chunks; v++) {
                    _mm512_mask_storeu_ps(dst0 + 16 * v, store[v], _mm512_setzero_ps());
                    _mm512_mask_storeu_ps(dst1 + 16 * v, store[v], _mm512_setzero_ps());
                }
            }
            continue;
        }
        /* from a base that may lie before the row: only lanes inside it are enabled */
        const float *base = x + iy * in_w - pad_w;
        for (int64_t v = 0; v < chunks; v++) {
            const __m512 lo = _mm512_maskz_loadu_ps(load[2 * v], base + 32 * v);
            const __m512 hi = _mm512_maskz_loadu_ps(load[2 * v + 1], base + 32 * v + 16);
            _mm512_mask_storeu_ps(dst0 + 16 * v, store[v], _mm512_permutex2var_ps(lo, even, hi));
            _mm512_mask_storeu_ps(dst1 + 16 * v, store[v], _mm512_permutex2var_ps(lo, odd, hi));
        }
    }
}

__attribute__((target("avx512f"))) static void fill_pairs_avx512(
    const nn_window *w, int64_t hq, int64_t wq, int64_t py, const float *x, float *dst0,
    float *dst1, int interior_only) {
    const int64_t chunks = (wq + 15) / 16;
    if (chunks == 1) {
        pairs_rows(w, hq, wq, py, x, dst0, dst1, interior_only, 1);
    } else if (chunks == 2) {
        pairs_rows(w, hq, wq, py, x, dst0, dst1, interior_only, 2);
    } else {
        pairs_rows(w, hq, wq, py, x, dst0, dst1, interior_only, chunks);
    }
}

/* Planes of at least this many outputs take the direct kernel's 3x3 instance, its nine
 * weights broadcast once and its offsets kept in registers across the plane's steps,
 * instead of a broadcast and an offset load per tap and step. One-layer models, one
 * thread, Zen 4, alternating processes: 144 channels at 56x56 182-186 -> 165-171 us, 192
 * at 28x28 66 -> 63-68 us; on 14x14 planes (13 chunks) setting them up cost more than it
 * saved (39 -> 41 us), hence the bound. With direct_s2_avx512's masks made once per
 * plane: MobileNetV2 4.98-5.05 -> 4.64-4.88 ms in bf16, 7.65-7.66 -> 7.25-7.46 ms in fp32
 * (p20 of 300-400 runs, three alternating rounds). */
#define NN_DW_HOIST_MIN 256

/* A direct kernel's call: its 3x3 instance (weights and offsets held) on a plane of at
 * least NN_DW_HOIST_MIN outputs, else its general loop. */
#define NN_DW_DIRECT_INSTANCE(BODY)                                                        \
    if (ntaps == 9 && n >= NN_DW_HOIST_MIN) {                                              \
        BODY(x, offsets, masks, weights, 9, bias, act, y, n, 1);                           \
    } else {                                                                               \
        BODY(x, offsets, masks, weights, ntaps, bias, act, y, n, 0);                       \
    }

/* The loop of direct_avx512 and direct_avx512bw, given how a tap's masks for four chunks
 * (m0..m3, from its row of the table at m) are fetched; `hoist` (a constant, ntaps 9):
 * the 3x3 instance. */
#define NN_DW_DIRECT_BODY(FOUR_MASKS)                                                      \
    const int64_t chunks = (n + 15) / 16;                                                  \
    const __mmask16 last = (__mmask16)(n % 16 ? (1u << (n % 16)) - 1u : 0xFFFF);           \
    __m512 w9[9]; /* hoist (ntaps 9): the weights broadcast once, the offsets kept */     \
    int64_t off9[9];                                                                       \
    for (int t = 0; t < 9 && hoist; t++) {                                                 \
        w9[t] = _mm512_set1_ps(weights[t]);                                                \
        off9[t] = offsets[t];                                                              \
    }                                                                                      \
    int64_t c = 0;                                                                         \
    for (; c + 4 <= chunks; c += 4) { /* four chunks a step: independent accumulators */  \
        __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;                       \
        const float *at = x + 16 * c;                                                      \
        for (int t = 0; t < ntaps; t++) {                                                  \
            const float *src = at + (hoist ? off9[t] : offsets[t]);                        \
            const uint16_t *m = masks + t * chunks + c;                                    \
            __mmask16 m0, m1, m2, m3;                                                      \
            FOUR_MASKS                                                                     \
            const __m512 wv = hoist ? w9[t] : _mm512_set1_ps(weights[t]);                  \
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, src), wv, a0);                  \
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, src + 16), wv, a1);             \
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m2, src + 32), wv, a2);             \
            a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m3, src + 48), wv, a3);             \
        }                                                                                  \
        float *out = y + 16 * c;                                                           \
        _mm512_storeu_ps(out, act512(act, a0));                                            \
        _mm512_storeu_ps(out + 16, act512(act, a1));                                       \
        _mm512_storeu_ps(out + 32, act512(act, a2));                                       \
        _mm512_mask_storeu_ps(out + 48, c + 4 == chunks ? last : 0xFFFF, act512(act, a3)); \
    }                                                                                      \
    for (; c < chunks; c++) {                                                              \
        __m512 a = _mm512_set1_ps(bias);                                                   \
        for (int t = 0; t < ntaps; t++) {                                                  \
            a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(masks[t * chunks + c],               \
                                                      x + 16 * c + offsets[t]),            \
                                _mm512_set1_ps(weights[t]), a);                            \
        }                                                                                  \
        _mm512_mask_storeu_ps(y + 16 * c, c + 1 == chunks ? last : 0xFFFF, act512(act, a));\
    }

/* The narrow stride-1 planes whose rows keep their width (out_w == in_w: 3x3 with pad 1,
 * 5x5 with pad 2, ...) read the input where it lies: output o and its tap t read
 * x[o + off_t], off_t = (ky*dy - pad_h) * in_w + kx*dx - pad_w, in 16-output chunks whose
 * lanes outside the plane (the padding, and the row before or after at a row's edges) are
 * masked off; masked-off lanes are never read. No padded copy is filled and no row is
 * copied out, which on 7x7 and 14x14 planes cost more than the products. `masks` holds
 * chunk c's mask for tap t at [t * chunks + c]. */
__attribute__((target("avx512f"), always_inline)) static inline void direct_avx512_body(
    const float *x, const int64_t *offsets, const uint16_t *masks, const float *weights,
    const int ntaps, float bias, const dw_act *act, float *y, int64_t n, const int hoist) {
    NN_DW_DIRECT_BODY(m0 = m[0]; m1 = m[1]; m2 = m[2]; m3 = m[3];)
}

__attribute__((target("avx512f"))) static void direct_avx512(
    const float *x, const int64_t *offsets, const uint16_t *masks, const float *weights,
    int ntaps, float bias, const dw_act *act, float *y, int64_t n) {
    NN_DW_DIRECT_INSTANCE(direct_avx512_body)
}

/* direct_avx512 with each tap's four masks taken in one 64-bit load into a mask register
 * and shifted there (AVX512BW), instead of four 16-bit loads each moved into its own mask
 * register from a general one: the same loads under the same masks, the same results.
 * One thread, Zen 4, alternating processes (each time with the run's call overhead):
 * depthwise 3x3 layers of 192 channels at 28x28 0.075 -> 0.065 ms, 384 at 14x14 0.044 ->
 * 0.041, 960 at 7x7 0.038 -> 0.036; MobileNetV2 5.19 -> 5.07 ms in bf16, 7.85 -> 7.73 in
 * fp32. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
direct_avx512bw_body(const float *x, const int64_t *offsets, const uint16_t *masks,
                     const float *weights, const int ntaps, float bias, const dw_act *act,
                     float *y, int64_t n, const int hoist) {
    NN_DW_DIRECT_BODY({
        uint64_t bits;
        memcpy(&bits, m, sizeof bits);
        const __mmask64 k = _cvtu64_mask64(bits);
        m0 = (__mmask16)k;
        m1 = (__mmask16)_kshiftri_mask64(k, 16);
        m2 = (__mmask16)_kshiftri_mask64(k, 32);
        m3 = (__mmask16)_kshiftri_mask64(k, 48);
    })
}

__attribute__((target("avx512f,avx512bw"))) static void direct_avx512bw(
    const float *x, const int64_t *offsets, const uint16_t *masks, const float *weights,
    int ntaps, float bias, const dw_act *act, float *y, int64_t n) {
    NN_DW_DIRECT_INSTANCE(direct_avx512bw_body)
}
#undef NN_DW_DIRECT_BODY
#undef NN_DW_DIRECT_INSTANCE

/* act512 with the activation a constant of the caller's instance and its bounds in
 * registers: the stride-2 kernels' rows. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 act512_as(
    const int kind, __m512 low, __m512 high, __m512 v) {
    if (kind == DW_ACT_RELU) {
        return _mm512_max_ps(_mm512_setzero_ps(), v);
    }
    if (kind == DW_ACT_CLIP) {
        return _mm512_min_ps(high, _mm512_max_ps(low, v));
    }
    return v;
}

/* 3x3 windows of stride 2 (no dilation, any padding) read the input where it lies, an
 * output row at a time: the 32 input columns from 2 ox0 - pad_w of each of the window's
 * three rows are loaded under masks (lanes outside the row are never read and count as
 * the padding's zeros), split by two permutes into the even columns (tap kx = 0) and the
 * odd ones (kx = 1); kx = 2 is the even columns shifted by one lane into the next 16
 * outputs' evens, which the loop carries over. Rows outside the plane contribute zeros,
 * as in the padded copy, and the taps are added in the same order from the bias, so the
 * results are those of the phased path bit for bit, without writing four phase planes
 * and reading them back (MobileNetV2's 112x112 stride-2 layer).
 *
 * The loads' column masks are the same on every row: they are made once per plane, a row
 * outside the plane clears its row's masks, and the loads past the row's end are skipped
 * (the last vector's, mostly), so the loop branches only on that; the activation is a
 * constant of each instance (`kind`). Before, each load computed its mask and each
 * vector tested its rows and its activation: one-layer models of MobileNetV2's stride-2
 * layers, one thread, Zen 4, alternating processes (each call's binding and copying
 * included): 144 channels from 56x56 86-90 -> 62-64 us, 192 from 28x28 34 -> 30 us, 576
 * from 14x14 50 -> 44 us. */
__attribute__((target("avx512f"), always_inline)) static inline void direct_s2_body(
    const float *x, const nn_window *w, const float *weights, float bias, const dw_act *act,
    float *y, const int kind) {
    const int64_t in_h = w->in[1], in_w = w->in[2], out_h = w->out[1], out_w = w->out[2];
    const int64_t pad_h = w->pad[1], pad_w = w->pad[2];
    const int64_t vectors = (out_w + 15) / 16;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                           26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512 wv[9];
    for (int t = 0; t < 9; t++) {
        wv[t] = _mm512_set1_ps(weights[t]);
    }
    const __m512 low = _mm512_set1_ps(act->lo), high = _mm512_set1_ps(act->hi);
    /* vector v's two loads start at column 32 v - pad_w and 16 further; v = vectors is the
     * one the last vector's kx = 2 reads from */
    __mmask16 lo_mask[NN_DW_S2_MAX_VECTORS + 1], hi_mask[NN_DW_S2_MAX_VECTORS + 1];
    for (int64_t v = 0; v <= vectors; v++) {
        lo_mask[v] = lanes_between(32 * v - pad_w, 0, in_w);
        hi_mask[v] = lanes_between(32 * v + 16 - pad_w, 0, in_w);
    }
    const int64_t tail = out_w - 16 * (vectors - 1);
    const __mmask16 last_store = (__mmask16)(tail >= 16 ? 0xFFFFu : (1u << tail) - 1u);
    for (int64_t oy = 0; oy < out_h; oy++, y += out_w) {
        const float *rows[3];
        __mmask16 row_on[3];
        for (int ky = 0; ky < 3; ky++) {
            const int64_t iy = 2 * oy - pad_h + ky;
            const int inside = iy >= 0 && iy < in_h;
            row_on[ky] = inside ? (__mmask16)0xFFFF : (__mmask16)0;
            rows[ky] = x + (inside ? iy : 0) * in_w - pad_w;
        }
        __m512 ev[3], od[3];
        for (int ky = 0; ky < 3; ky++) {
            const __m512 lo = _mm512_maskz_loadu_ps(lo_mask[0] & row_on[ky], rows[ky]);
            const __m512 hi = _mm512_maskz_loadu_ps(hi_mask[0] & row_on[ky], rows[ky] + 16);
            ev[ky] = _mm512_permutex2var_ps(lo, even, hi);
            od[ky] = _mm512_permutex2var_ps(lo, odd, hi);
        }
        for (int64_t v = 0; v < vectors; v++) {
            /* past the row's end (the last vector, mostly): no loads, no permutes */
            const int more = lo_mask[v + 1] != 0;
            __m512 acc = _mm512_set1_ps(bias);
            for (int ky = 0; ky < 3; ky++) {
                __m512 next_ev = _mm512_setzero_ps(), next_od = next_ev;
                if (more) {
                    const float *next = rows[ky] + 32 * (v + 1);
                    const __m512 lo = _mm512_maskz_loadu_ps(lo_mask[v + 1] & row_on[ky], next);
                    const __m512 hi = _mm512_maskz_loadu_ps(hi_mask[v + 1] & row_on[ky],
                                                            next + 16);
                    next_ev = _mm512_permutex2var_ps(lo, even, hi);
                    next_od = _mm512_permutex2var_ps(lo, odd, hi);
                }
                const __m512 shifted = _mm512_castsi512_ps(_mm512_alignr_epi32(
                    _mm512_castps_si512(next_ev), _mm512_castps_si512(ev[ky]), 1));
                acc = _mm512_fmadd_ps(ev[ky], wv[3 * ky], acc);
                acc = _mm512_fmadd_ps(od[ky], wv[3 * ky + 1], acc);
                acc = _mm512_fmadd_ps(shifted, wv[3 * ky + 2], acc);
                ev[ky] = next_ev;
                od[ky] = next_od;
            }
            _mm512_mask_storeu_ps(y + 16 * v, v + 1 < vectors ? (__mmask16)0xFFFF : last_store,
                                  act512_as(kind, low, high, acc));
        }
    }
}

/* direct_s2_body for rows of at most NN_DW_S2_PAIR_WIDTH outputs (a 14x14 plane's 7x7
 * output): two output rows to a vector, row oy in lanes [0, out_w) and row oy + 1 in
 * [out_w, 2 out_w), as they lie in Y. Each of the window's rows is one masked load of 16
 * columns from -pad_w for each output row (the 2 out_w + 1 columns it reads fit), and each
 * tap kx one permute of the two loads (lane j < out_w: column 2 j + kx of the first,
 * lane out_w + j: of the second): with one row a vector, 7 of 16 lanes did the work, with
 * two permutes and a shift per tap row. Same taps in the same order from the bias: the
 * same results. One-layer models, one thread, Zen 4, alternating processes: 576 channels
 * from 14x14 44 -> 35 us, 160 from 14x14 15.3 -> 12.4 us (MobileNetV2 as a whole: within
 * its noise, one such layer). */
__attribute__((target("avx512f"), always_inline)) static inline void direct_s2_pairs_body(
    const float *x, const nn_window *w, const float *weights, float bias, const dw_act *act,
    float *y, const int kind) {
    const int64_t in_h = w->in[1], in_w = w->in[2], out_h = w->out[1], out_w = w->out[2];
    const int64_t pad_h = w->pad[1], pad_w = w->pad[2];
    int32_t lanes[3][16];
    for (int kx = 0; kx < 3; kx++) {
        for (int j = 0; j < 16; j++) {
            lanes[kx][j] = j < out_w ? (int32_t)(2 * j + kx)
                           : j < 2 * out_w ? (int32_t)(16 + 2 * (j - out_w) + kx) : 0;
        }
    }
    const __m512i tap0 = _mm512_loadu_si512(lanes[0]), tap1 = _mm512_loadu_si512(lanes[1]);
    const __m512i tap2 = _mm512_loadu_si512(lanes[2]);
    __m512 wv[9];
    for (int t = 0; t < 9; t++) {
        wv[t] = _mm512_set1_ps(weights[t]);
    }
    const __m512 low = _mm512_set1_ps(act->lo), high = _mm512_set1_ps(act->hi);
    const __mmask16 columns = lanes_between(-pad_w, 0, in_w);
    for (int64_t oy = 0; oy < out_h; oy += 2) {
        const int pair = oy + 1 < out_h;
        __m512 acc = _mm512_set1_ps(bias);
        for (int ky = 0; ky < 3; ky++) {
            const int64_t iy0 = 2 * oy - pad_h + ky, iy1 = iy0 + 2;
            const int in0 = iy0 >= 0 && iy0 < in_h, in1 = pair && iy1 >= 0 && iy1 < in_h;
            const __m512 first = _mm512_maskz_loadu_ps(in0 ? columns : 0,
                                                       x + (in0 ? iy0 : 0) * in_w - pad_w);
            const __m512 second = _mm512_maskz_loadu_ps(in1 ? columns : 0,
                                                        x + (in1 ? iy1 : 0) * in_w - pad_w);
            acc = _mm512_fmadd_ps(_mm512_permutex2var_ps(first, tap0, second), wv[3 * ky], acc);
            acc = _mm512_fmadd_ps(_mm512_permutex2var_ps(first, tap1, second), wv[3 * ky + 1],
                                  acc);
            acc = _mm512_fmadd_ps(_mm512_permutex2var_ps(first, tap2, second), wv[3 * ky + 2],
                                  acc);
        }
        const int64_t outputs = (pair ? 2 : 1) * out_w;
        _mm512_mask_storeu_ps(y + oy * out_w, (__mmask16)((1u << outputs) - 1u),
                              act512_as(kind, low, high, acc));
    }
}

/* One instance of the stride-2 kernel per activation: two rows to a vector on narrow
 * rows, else one. */
__attribute__((target("avx512f"), always_inline)) static inline void direct_s2_instance(
    const float *x, const nn_window *w, const float *weights, float bias, const dw_act *act,
    float *y, const int kind) {
    if (w->out[2] <= NN_DW_S2_PAIR_WIDTH) {
        direct_s2_pairs_body(x, w, weights, bias, act, y, kind);
    } else {
        direct_s2_body(x, w, weights, bias, act, y, kind);
    }
}

__attribute__((target("avx512f"))) static void direct_s2_avx512(
    const float *x, const nn_window *w, const float *weights, float bias, const dw_act *act,
    float *y) {
    if (act->kind == DW_ACT_RELU) {
        direct_s2_instance(x, w, weights, bias, act, y, DW_ACT_RELU);
    } else if (act->kind == DW_ACT_CLIP) {
        direct_s2_instance(x, w, weights, bias, act, y, DW_ACT_CLIP);
    } else {
        direct_s2_instance(x, w, weights, bias, act, y, DW_ACT_NONE);
    }
}

/* The 3x3 windows of stride 1 whose rows keep their width (pad 1 left and right; any
 * rows): MobileNet's and EfficientNet's stride-1 depthwise layers. Output p's taps in row
 * ky read x[p + first + ky * in_w + kx] (first = -pad_h * in_w - 1), so for each ky one
 * load of 16 values at p + first + ky * in_w serves kx = 0 as it is, and kx = 1 and 2
 * shifted by one and two lanes into the next 16 (valignd, with the load that starts 16
 * later, which the next vector takes as its own): per vector three loads instead of
 * direct_avx512's nine, each of which split a cache line.
 *
 * A tap that would read the row above or below the plane reads outside [0, in_h * in_w)
 * and is zero (the loads of the plane's first and last vectors are masked to the plane,
 * dw_direct3_plan's `loads`); one that would read across a row's end (kx = 0 at column 0,
 * kx = 2 at the last) is left out by the column masks (`columns`). The taps are added in
 * direct_avx512's order from the bias, so the results are the same; a plane whose kernel
 * holds an inf or NaN takes direct_avx512, where the padding's zeros meet it (0 * inf is
 * NaN there, as in the reference).
 *
 * One-layer models (Clip), one thread, Zen 4, alternating in one process: 32 channels at
 * 112x112 164 -> 154 us, 144 at 56x56 171 -> 139, 192 at 28x28 62 -> 51, 384 at 14x14 39
 * -> 35, 960 at 7x7 33 -> 32; MobileNetV2 4.46 -> 4.36 ms in bf16, 6.97 -> 6.87 ms in fp32
 * (p20 of 400 runs, four alternating processes each). */

/* Four vectors of outputs from 16 c: each ky's five loads (masked to the plane when
 * `edge`), then its three taps on each vector. */
#define NN_DW3_LOAD(at, mask, edge)                                                        \
    ((edge) ? _mm512_maskz_loadu_ps((mask), (at)) : _mm512_loadu_ps(at))
#define NN_DW3_SHIFT(next, here, lanes)                                                    \
    _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(next),                     \
                                            _mm512_castps_si512(here), lanes))
#define NN_DW3_FOUR(edge)                                                                  \
    do {                                                                                   \
        __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;                       \
        const uint16_t *col = plan->columns + 2 * c;                                       \
        const __mmask16 l0 = col[0], r0 = col[1], l1 = col[2], r1 = col[3];                \
        const __mmask16 l2 = col[4], r2 = col[5], l3 = col[6], r3 = col[7];                \
        for (int ky = 0; ky < 3; ky++) {                                                   \
            const float *q = x + 16 * c + plan->first + ky * plan->in_w;                   \
            const uint16_t *m = plan->loads + ky * (chunks + 1) + c;                       \
            const __m512 v0 = NN_DW3_LOAD(q, m[0], edge);                                  \
            const __m512 v1 = NN_DW3_LOAD(q + 16, m[1], edge);                             \
            const __m512 v2 = NN_DW3_LOAD(q + 32, m[2], edge);                             \
            const __m512 v3 = NN_DW3_LOAD(q + 48, m[3], edge);                             \
            const __m512 v4 = NN_DW3_LOAD(q + 64, m[4], edge);                             \
            const __m512 w0 = wv[3 * ky], w1 = wv[3 * ky + 1], w2 = wv[3 * ky + 2];        \
            a0 = _mm512_mask3_fmadd_ps(v0, w0, a0, l0);                                    \
            a1 = _mm512_mask3_fmadd_ps(v1, w0, a1, l1);                                    \
            a2 = _mm512_mask3_fmadd_ps(v2, w0, a2, l2);                                    \
            a3 = _mm512_mask3_fmadd_ps(v3, w0, a3, l3);                                    \
            a0 = _mm512_fmadd_ps(NN_DW3_SHIFT(v1, v0, 1), w1, a0);                         \
            a1 = _mm512_fmadd_ps(NN_DW3_SHIFT(v2, v1, 1), w1, a1);                         \
            a2 = _mm512_fmadd_ps(NN_DW3_SHIFT(v3, v2, 1), w1, a2);                         \
            a3 = _mm512_fmadd_ps(NN_DW3_SHIFT(v4, v3, 1), w1, a3);                         \
            a0 = _mm512_mask3_fmadd_ps(NN_DW3_SHIFT(v1, v0, 2), w2, a0, r0);               \
            a1 = _mm512_mask3_fmadd_ps(NN_DW3_SHIFT(v2, v1, 2), w2, a1, r1);               \
            a2 = _mm512_mask3_fmadd_ps(NN_DW3_SHIFT(v3, v2, 2), w2, a2, r2);               \
            a3 = _mm512_mask3_fmadd_ps(NN_DW3_SHIFT(v4, v3, 2), w2, a3, r3);               \
        }                                                                                  \
        float *out = y + 16 * c;                                                           \
        _mm512_storeu_ps(out, act512_as(kind, low, high, a0));                             \
        _mm512_storeu_ps(out + 16, act512_as(kind, low, high, a1));                        \
        _mm512_storeu_ps(out + 32, act512_as(kind, low, high, a2));                        \
        _mm512_mask_storeu_ps(out + 48, c + 4 == chunks ? last : 0xFFFF,                   \
                              act512_as(kind, low, high, a3));                             \
    } while (0)

__attribute__((target("avx512f"), always_inline)) static inline void direct3_body(
    const float *x, const dw_direct3_plan *plan, const float *weights, float bias,
    const dw_act *act, float *y, const int kind) {
    const int64_t chunks = (plan->out_n + 15) / 16;
    const __mmask16 last = (__mmask16)(plan->out_n % 16 ? (1u << (plan->out_n % 16)) - 1u
                                                        : 0xFFFFu);
    __m512 wv[9];
    for (int t = 0; t < 9; t++) {
        wv[t] = _mm512_set1_ps(weights[t]);
    }
    const __m512 low = _mm512_set1_ps(act->lo), high = _mm512_set1_ps(act->hi);
    /* four vectors read [16 c + first, 16 c + first + 2 in_w + 80) */
    const int64_t reach = 2 * plan->in_w + 80;
    int64_t c = 0;
    for (; c + 4 <= chunks; c += 4) {
        const int64_t from = 16 * c + plan->first;
        if (from >= 0 && from + reach <= plan->in_n) {
            NN_DW3_FOUR(0);
        } else {
            NN_DW3_FOUR(1);
        }
    }
    for (; c < chunks; c++) { /* the last 1 to 3 vectors, one at a time */
        __m512 a = _mm512_set1_ps(bias);
        const __mmask16 left = plan->columns[2 * c], right = plan->columns[2 * c + 1];
        for (int ky = 0; ky < 3; ky++) {
            const float *q = x + 16 * c + plan->first + ky * plan->in_w;
            const uint16_t *m = plan->loads + ky * (chunks + 1) + c;
            const __m512 v0 = NN_DW3_LOAD(q, m[0], 1), v1 = NN_DW3_LOAD(q + 16, m[1], 1);
            a = _mm512_mask3_fmadd_ps(v0, wv[3 * ky], a, left);
            a = _mm512_fmadd_ps(NN_DW3_SHIFT(v1, v0, 1), wv[3 * ky + 1], a);
            a = _mm512_mask3_fmadd_ps(NN_DW3_SHIFT(v1, v0, 2), wv[3 * ky + 2], a, right);
        }
        _mm512_mask_storeu_ps(y + 16 * c, c + 1 == chunks ? last : 0xFFFF,
                              act512_as(kind, low, high, a));
    }
}
#undef NN_DW3_FOUR
#undef NN_DW3_SHIFT
#undef NN_DW3_LOAD

__attribute__((target("avx512f"))) static void direct3_avx512(
    const float *x, const dw_direct3_plan *plan, const float *weights, float bias,
    const dw_act *act, float *y) {
    if (act->kind == DW_ACT_RELU) {
        direct3_body(x, plan, weights, bias, act, y, DW_ACT_RELU);
    } else if (act->kind == DW_ACT_CLIP) {
        direct3_body(x, plan, weights, bias, act, y, DW_ACT_CLIP);
    } else {
        direct3_body(x, plan, weights, bias, act, y, DW_ACT_NONE);
    }
}

/* Four output planes at once over the same inputs (few_channels): out[q][i] = bias[q] +
 * sum over taps t of weights[q * ntaps + t] * base[i + offsets[t]], q = 0..3. Each input
 * vector feeds four accumulators, so that a span of many taps (27 for a 3x3 stem) is
 * bound by its multiply-adds, not its loads: 4 x 64 outputs per step in 16 zmm
 * accumulators, the last few under masks. */
__attribute__((target("avx512f"))) static void span4_avx512(
    const float *base, const int64_t *offsets, const float *weights, int ntaps,
    const float *bias, const dw_act *act, float *const out[4], int64_t n) {
    for (int64_t i = 0; i < n; i += 64) {
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            const int64_t left = n - i - 16 * v;
            m[v] = (__mmask16)(left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1u);
        }
        __m512 acc[4][4];
        for (int q = 0; q < 4; q++) {
            acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = _mm512_set1_ps(bias[q]);
        }
        const float *at = base + i;
        for (int t = 0; t < ntaps; t++) {
            const float *src = at + offsets[t];
            const __m512 x0 = _mm512_maskz_loadu_ps(m[0], src);
            const __m512 x1 = _mm512_maskz_loadu_ps(m[1], src + 16);
            const __m512 x2 = _mm512_maskz_loadu_ps(m[2], src + 32);
            const __m512 x3 = _mm512_maskz_loadu_ps(m[3], src + 48);
            for (int q = 0; q < 4; q++) {
                const __m512 wv = _mm512_set1_ps(weights[q * ntaps + t]);
                acc[q][0] = _mm512_fmadd_ps(x0, wv, acc[q][0]);
                acc[q][1] = _mm512_fmadd_ps(x1, wv, acc[q][1]);
                acc[q][2] = _mm512_fmadd_ps(x2, wv, acc[q][2]);
                acc[q][3] = _mm512_fmadd_ps(x3, wv, acc[q][3]);
            }
        }
        for (int q = 0; q < 4; q++) {
            for (int v = 0; v < 4; v++) {
                _mm512_mask_storeu_ps(out[q] + i + 16 * v, m[v], act512(act, acc[q][v]));
            }
        }
    }
}
#endif /* NN_DW_X86 */

typedef void (*dw_fill_pairs_fn)(const nn_window *w, int64_t hq, int64_t wq, int64_t py,
                                 const float *x, float *dst0, float *dst1, int interior_only);

/* The masked direct kernel (see direct_avx512); `masks` as there. */
typedef void (*dw_direct_fn)(const float *x, const int64_t *offsets, const uint16_t *masks,
                             const float *weights, int ntaps, float bias, const dw_act *act,
                             float *y, int64_t n);

/* span4_avx512's form. */
typedef void (*dw_span4_fn)(const float *base, const int64_t *offsets, const float *weights,
                            int ntaps, const float *bias, const dw_act *act,
                            float *const out[4], int64_t n);

/* direct3_avx512's form: one plane. */
typedef void (*dw_direct3_fn)(const float *x, const dw_direct3_plan *plan,
                              const float *weights, float bias, const dw_act *act, float *y);

/* direct_s2_avx512's form: one plane. */
typedef void (*dw_direct_s2_fn)(const float *x, const nn_window *w, const float *weights,
                                float bias, const dw_act *act, float *y);

typedef struct {
    const char *name;
    dw_span_fn fn;
    dw_fill_pairs_fn fill_pairs;  /* NULL: fill_phase's loops for every stride */
    dw_span4_fn span4;            /* NULL: few_channels one plane at a time */
    dw_direct_fn direct;          /* NULL: every plane through a padded copy */
    dw_direct_s2_fn direct_s2;    /* NULL: 3x3 stride 2 through the phases too */
    dw_direct3_fn direct3;        /* NULL: 3x3 stride 1 through `direct` too */
} dw_kernel;

static dw_kernel pick_kernel(void) {
    static const dw_kernel generic = {"generic", span_generic, NULL, NULL, NULL, NULL, NULL};
#ifdef NN_DW_X86
    static const dw_kernel avx2 = {"avx2", span_avx2, NULL, NULL, NULL, NULL, NULL};
    static const dw_kernel avx512bw = {"avx512", span_avx512, fill_pairs_avx512, span4_avx512,
                                       direct_avx512bw, direct_s2_avx512, direct3_avx512};
    static const dw_kernel avx512f = {"avx512f", span_avx512, fill_pairs_avx512, span4_avx512,
                                      direct_avx512, direct_s2_avx512, direct3_avx512};
    const char *wanted = getenv("GE_HUB_DEPTHWISE_KERNEL");
    switch (ge_simd_choose("GE_HUB_DEPTHWISE_KERNEL")) {
    case GE_SIMD_AVX512:
        /* the masked direct kernel takes its masks four at a time where AVX512BW is there
         * (or "avx512f" asks for the form without it) */
        if (__builtin_cpu_supports("avx512bw")
            && !(wanted != NULL && strcmp(wanted, "avx512f") == 0)) {
            return avx512bw;
        }
        return avx512f;
    case GE_SIMD_AVX2:
        return avx2;
    case GE_SIMD_GENERIC:
        break;
    }
#endif
    return generic;
}

static dw_kernel chosen_kernel;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose_kernel(void) {
    chosen_kernel = pick_kernel();
}

static const dw_kernel *kernel(void) {
    pthread_once(&chosen_once, choose_kernel);
    return &chosen_kernel;
}

const char *nn_conv_depthwise_kernel_name(void) {
    return kernel()->name;
}

/* For tests (through ctypes): the span kernel this process runs. */
__attribute__((visibility("default"))) const char *ge_hub_depthwise_kernel_name(void) {
    return nn_conv_depthwise_kernel_name();
}

int nn_conv_depthwise_fits(const nn_window *w) {
    return w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1
           && w->k[1] >= 1 && w->k[1] <= NN_DEPTHWISE_MAX_K
           && w->k[2] >= 1 && w->k[2] <= NN_DEPTHWISE_MAX_K
           && w->stride[1] >= 1 && w->stride[1] <= NN_DEPTHWISE_MAX_STRIDE
           && w->stride[2] >= 1 && w->stride[2] <= NN_DEPTHWISE_MAX_STRIDE
           && w->dil[1] >= 1 && w->dil[2] >= 1 && w->out[1] >= 1 && w->out[2] >= 1
           && (w->k[1] - 1) * w->dil[1] + 1 <= NN_DEPTHWISE_MAX_SPAN
           && (w->k[2] - 1) * w->dil[2] + 1 <= NN_DEPTHWISE_MAX_SPAN;
}

/* The phased plane's geometry (see the top of the file). */
typedef struct {
    int64_t sy, sx, hq, wq, slack;
    int64_t phase;                  /* floats from one phase to the next */
    int flat;                       /* the whole plane as one span into `flat_out` */
} dw_layout;

static dw_layout layout_of(const nn_window *w) {
    dw_layout l;
    l.sy = w->stride[1];
    l.sx = w->stride[2];
    l.hq = w->out[1] + (w->k[1] - 1) * w->dil[1] / l.sy;
    l.wq = w->out[2] + (w->k[2] - 1) * w->dil[2] / l.sx;
    l.slack = l.wq - w->out[2] + 16;  /* a flat span reads wq - out_w past the grid */
    l.phase = l.hq * l.wq + l.slack;
    l.flat = w->out[2] < NN_DW_FLAT_WIDTH;
    return l;
}

/* Where tap (ky, kx) of output (0, 0) reads in a phased plane (see the top of the file),
 * plus `base`, at offsets[ky * kw + kx]. */
static void tap_offsets(const nn_window *w, const dw_layout *l, int64_t base,
                        int64_t *offsets) {
    for (int64_t ky = 0; ky < w->k[1]; ky++) {
        for (int64_t kx = 0; kx < w->k[2]; kx++) {
            const int64_t dy = ky * w->dil[1], dx = kx * w->dil[2];
            const int64_t phase = (dy % l->sy) * l->sx + dx % l->sx;
            offsets[ky * w->k[2] + kx] = base + phase * l->phase + (dy / l->sy) * l->wq
                                         + dx / l->sx;
        }
    }
}

/* dst[0, n) = src[0, n) for the short rows of small planes (7, 14, 28 floats): a few
 * fixed-size, possibly overlapping block copies, which compile to vector moves, instead
 * of a loop the vectorizer leaves scalar below its vector width or a call per row. */
static inline __attribute__((always_inline)) void copy_short(float *dst, const float *src,
                                                             int64_t n) {
    if (n >= 16) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            memcpy(dst + i, src + i, 16 * sizeof(float));
        }
        if (i < n) {
            memcpy(dst + n - 16, src + n - 16, 16 * sizeof(float));
        }
    } else if (n >= 8) {
        memcpy(dst, src, 8 * sizeof(float));
        memcpy(dst + n - 8, src + n - 8, 8 * sizeof(float));
    } else if (n >= 4) {
        memcpy(dst, src, 4 * sizeof(float));
        memcpy(dst + n - 4, src + n - 4, 4 * sizeof(float));
    } else {
        for (int64_t i = 0; i < n; i++) {
            dst[i] = src[i];
        }
    }
}

/* Row r of phase (py, px), column j, holds x[r*sy + py - pad_h][j*sx + px - pad_w], zero
 * outside the plane. The zeros are the same for every plane: `interior_only` leaves them
 * as an earlier call wrote them and copies the plane's values only. */
NN_VECTORIZED NN_INLINE_COPIES static void fill_phase(const nn_window *w, const dw_layout *l,
                                                      int64_t py, int64_t px, const float *x,
                                                      float *dst, int interior_only) {
    const int64_t sx = l->sx, in_h = w->in[1], in_w = w->in[2], width = l->wq;
    /* columns j with 0 <= j * sx + px - pad_w < in_w: [lo, hi) */
    const int64_t first = w->pad[2] - px;
    int64_t lo = first <= 0 ? 0 : (first + sx - 1) / sx;
    int64_t hi = in_w - 1 + first >= 0 ? (in_w - 1 + first) / sx + 1 : 0;
    hi = hi < width ? hi : width;
    lo = lo < hi ? lo : hi;
    for (int64_t r = 0; r < l->hq; r++, dst += width) {
        const int64_t iy = r * l->sy + py - w->pad[1];
        if (iy < 0 || iy >= in_h) {
            if (!interior_only) {
                for (int64_t j = 0; j < width; j++) {
                    dst[j] = 0.0f;
                }
            }
            continue;
        }
        const float *src = x + iy * in_w + px - w->pad[2];  /* src[j * sx] is column j */
        if (!interior_only) {
            for (int64_t j = 0; j < lo; j++) {
                dst[j] = 0.0f;
            }
            for (int64_t j = hi; j < width; j++) {
                dst[j] = 0.0f;
            }
        }
        if (sx == 1) {
            if (hi - lo >= 128) {
                memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
            } else {
                copy_short(dst + lo, src + lo, hi - lo);
            }
        } else if (sx == 2) {  /* a constant stride: the compiler vectorizes it with shuffles */
            for (int64_t j = lo; j < hi; j++) {
                dst[j] = src[2 * j];
            }
        } else {
            for (int64_t j = lo; j < hi; j++) {
                dst[j] = src[j * sx];
            }
        }
    }
}

static void fill_padded(const nn_window *w, const dw_layout *l, const float *x, float *buf,
                        dw_fill_pairs_fn fill_pairs, int interior_only) {
    if (fill_pairs && l->sx == 2 && l->wq <= 16 * NN_DW_PAIR_CHUNKS) {
        for (int64_t py = 0; py < l->sy; py++) {
            float *dst0 = buf + py * 2 * l->phase, *dst1 = dst0 + l->phase;
            fill_pairs(w, l->hq, l->wq, py, x, dst0, dst1, interior_only);
            if (!interior_only) {
                memset(dst0 + l->hq * l->wq, 0, (size_t)l->slack * sizeof(float));
                memset(dst1 + l->hq * l->wq, 0, (size_t)l->slack * sizeof(float));
            }
        }
        return;
    }
    for (int64_t py = 0; py < l->sy; py++) {
        for (int64_t px = 0; px < l->sx; px++) {
            float *dst = buf + (py * l->sx + px) * l->phase;
            fill_phase(w, l, py, px, x, dst, interior_only);
            if (!interior_only) {
                memset(dst + l->hq * l->wq, 0, (size_t)l->slack * sizeof(float));
            }
        }
    }
}

/* Output rows of a flat span (wq apart) into the plane (out_w apart). */
NN_VECTORIZED NN_INLINE_COPIES static void copy_rows(const float *flat, int64_t wq, float *y,
                                                     int64_t rows, int64_t out_w) {
    for (int64_t oy = 0; oy < rows; oy++) {
        copy_short(y + oy * out_w, flat + oy * wq, out_w);
    }
}

/* What the masked direct kernel reads for each tap: its offset from the output, and its
 * 16-lane masks, chunk by chunk (see direct_avx512). */
typedef struct {
    int64_t offsets[NN_DW_MAX_TAPS];
    uint16_t *masks;  /* taps x chunks, then for direct3 its column masks (2 x chunks) */
    dw_direct3_plan three;
} dw_direct_plan;

typedef struct {
    ge_context *ctx;
    int *failed;
    const nn_window *w;
    int64_t channels;
    const float *x, *weights, *bias;
    float *y;
    int64_t x_stride, y_stride;   /* floats from one plane to the next in x and in y */
    const nn_epilogue *epilogue;
    dw_span_fn span;
    dw_fill_pairs_fn fill_pairs;
    dw_direct_fn direct;          /* NULL: every plane through a padded copy */
    const dw_direct_plan *plan;   /* for `direct` */
    dw_direct_s2_fn direct_s2;    /* NULL: not a 3x3 stride-2 window this CPU reads in place */
    dw_direct3_fn direct3;        /* NULL: not a window direct3_avx512 takes */
    int finite;                   /* every kernel's weights are finite (else direct3 takes
                                   * only the planes whose kernel is, and `direct` the rest) */
} dw_job;

/* Whether the planes can be read where they lie: stride 1 and rows that keep their
 * width, so that output o's tap reads x[o + a constant]; at most NN_DW_DIRECT_MAX
 * outputs. */
static int direct_fits(const nn_window *w) {
    return w->stride[1] == 1 && w->stride[2] == 1 && w->in[2] == w->out[2]
           && w->out[1] * w->out[2] <= NN_DW_DIRECT_MAX;
}

/* A 3x3 window of stride 1 without dilation whose rows keep their width (pad 1 left and
 * right), whatever the rows' padding: direct3_avx512 (with direct_fits' bound). */
static int direct3_fits(const nn_window *w) {
    return direct_fits(w) && w->k[1] == 3 && w->k[2] == 3 && w->dil[1] == 1 && w->dil[2] == 1
           && w->pad[2] == 1;
}

/* A 3x3 window of stride 2 without dilation (direct_s2_avx512), whatever the padding, on
 * rows of at most NN_DW_S2_MAX_VECTORS vectors of outputs (its masks' table). */
static int direct_s2_fits(const nn_window *w) {
    return w->k[1] == 3 && w->k[2] == 3 && w->stride[1] == 2 && w->stride[2] == 2
           && w->dil[1] == 1 && w->dil[2] == 1 && w->out[2] <= 16 * NN_DW_S2_MAX_VECTORS;
}

/* Bits [start, end) of a mask table, 16 to a word. */
static void set_bits(uint16_t *words, int64_t start, int64_t end) {
    while (start < end) {
        const int64_t bit = start % 16, take = end - start < 16 - bit ? end - start : 16 - bit;
        words[start / 16] |= (uint16_t)(((1u << take) - 1u) << bit);
        start += take;
    }
}

/* Tap t = (ky, kx) of output (oy, ox) reads input (oy + ky*dy - pad_h, ox + kx*dx -
 * pad_w): lane j of chunk c (output 16 c + j) is on when that lies inside the plane, a
 * run of columns [ox_lo, ox_hi) on each of the rows [oy_lo, oy_hi). */
static void plan_direct(const nn_window *w, dw_direct_plan *plan) {
    const int64_t kh = w->k[1], kw = w->k[2], in_h = w->in[1], in_w = w->in[2];
    const int64_t out_h = w->out[1], out_w = w->out[2];
    const int64_t chunks = (out_h * out_w + 15) / 16;
    for (int64_t ky = 0; ky < kh; ky++) {
        const int64_t dy = ky * w->dil[1] - w->pad[1];
        const int64_t oy_lo = dy < 0 ? -dy : 0, oy_hi = in_h - dy < out_h ? in_h - dy : out_h;
        for (int64_t kx = 0; kx < kw; kx++) {
            const int64_t t = ky * kw + kx, dx = kx * w->dil[2] - w->pad[2];
            const int64_t ox_lo = dx < 0 ? -dx : 0;
            const int64_t ox_hi = in_w - dx < out_w ? in_w - dx : out_w;
            uint16_t *masks = plan->masks + t * chunks;
            plan->offsets[t] = dy * in_w + dx;
            memset(masks, 0, (size_t)chunks * sizeof *masks);
            for (int64_t oy = oy_lo; oy < oy_hi && ox_lo < ox_hi; oy++) {
                set_bits(masks, oy * out_w + ox_lo, oy * out_w + ox_hi);
            }
        }
    }
}

/* Words of direct3_avx512's masks for `chunks` vectors of outputs (and room to make the
 * column masks in). */
#define NN_DW3_MASK_WORDS(chunks) (4 * (chunks) + 3 * ((chunks) + 1))

/* direct3_avx512's geometry and its masks, into `words` (NN_DW3_MASK_WORDS). */
static void plan_direct3(const nn_window *w, uint16_t *words, dw_direct3_plan *three) {
    const int64_t in_w = w->in[2], in_n = w->in[1] * in_w, out_n = w->out[1] * w->out[2];
    const int64_t chunks = (out_n + 15) / 16, first = -w->pad[1] * in_w - 1;
    uint16_t *columns = words, *loads = words + 2 * chunks;
    uint16_t *left = loads + 3 * (chunks + 1), *right = left + chunks;
    memset(left, 0, (size_t)(2 * chunks) * sizeof *left);
    for (int64_t row = 0; row < out_n; row += in_w) {
        set_bits(left, row + 1, row + in_w);
        set_bits(right, row, row + in_w - 1);
    }
    for (int64_t c = 0; c < chunks; c++) { /* interleaved: a vector's two masks together */
        columns[2 * c] = left[c];
        columns[2 * c + 1] = right[c];
    }
    for (int64_t ky = 0; ky < 3; ky++) {
        for (int64_t j = 0; j <= chunks; j++) {
            loads[ky * (chunks + 1) + j] = bits_between(16 * j + first + ky * in_w, 0, in_n);
        }
    }
    *three = (dw_direct3_plan){in_w, in_n, out_n, first, columns, loads};
}

/* 1 when the n weights are all finite: no exponent of all ones, or-ed over the whole
 * array without a branch, so that it vectorizes (MobileNetV2's 43K depthwise weights took
 * about 30 us a run through a compare and branch per weight). */
NN_VECTORIZED static int all_finite(const float *weights, int64_t n) {
    uint32_t infinite = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, weights + i, sizeof bits);
        infinite |= (uint32_t)((bits & 0x7F800000u) == 0x7F800000u);
    }
    return !infinite;
}

/* Relu and Clip without a residual go in the span's registers (act); anything else runs
 * over the finished plane: returns whether it does. */
static int register_act(const nn_epilogue *e, dw_act *act) {
    act->kind = DW_ACT_NONE;
    act->lo = act->hi = 0.0f;
    if (nn_epilogue_empty(e)) {
        return 0;
    }
    if (e->residual == NULL && e->activation == FUSED_ACT_RELU) {
        act->kind = DW_ACT_RELU;
        return 0;
    }
    if (e->residual == NULL && e->activation == FUSED_ACT_CLIP) {
        act->kind = DW_ACT_CLIP;
        act->lo = (float)e->alpha;
        act->hi = (float)e->beta;
        return 0;
    }
    return 1;
}

/* Planes [begin, end), one padded buffer per chunk. */
static void dw_planes(void *arg, int64_t begin, int64_t end) {
    const dw_job *job = (const dw_job *)arg;
    const nn_window *w = job->w;
    const dw_layout l = layout_of(w);
    const int64_t kh = w->k[1], kw = w->k[2], out_h = w->out[1], out_w = w->out[2];
    const int64_t out_size = out_h * out_w;
    const int ntaps = (int)(kh * kw);
    const nn_epilogue *e = job->epilogue;
    dw_act act;
    const int after = register_act(e, &act);
    if (job->direct != NULL) {  /* no padded copy: each plane read where it lies */
        for (int64_t plane = begin; plane < end; plane++) {
            const int64_t channel = plane % job->channels;
            const float *kernel = job->weights + channel * ntaps;
            const float bias = job->bias ? job->bias[channel] : 0.0f;
            float *y = job->y + plane * job->y_stride;
            if (job->direct3 != NULL && (job->finite || all_finite(kernel, 9))) {
                job->direct3(job->x + plane * job->x_stride, &job->plan->three, kernel, bias,
                             &act, y);
            } else {
                job->direct(job->x + plane * job->x_stride, job->plan->offsets,
                            job->plan->masks, kernel, ntaps, bias, &act, y, out_size);
            }
            if (after) {
                const float *res = e->residual;
                nn_epilogue_run(e, y, res ? res + plane * out_size : NULL, out_size);
            }
        }
        return;
    }
    if (job->direct_s2 != NULL) {
        for (int64_t plane = begin; plane < end; plane++) {
            const int64_t channel = plane % job->channels;
            float *y = job->y + plane * job->y_stride;
            job->direct_s2(job->x + plane * job->x_stride, w, job->weights + channel * ntaps,
                           job->bias ? job->bias[channel] : 0.0f, &act, y);
            if (after) {
                const float *res = e->residual;
                nn_epilogue_run(e, y, res ? res + plane * out_size : NULL, out_size);
            }
        }
        return;
    }
    const int64_t phases = l.sy * l.sx;
    const int64_t flat_floats = l.flat ? out_h * l.wq : 0;
    float *buf = (float *)malloc((size_t)(phases * l.phase + flat_floats) * sizeof(float));
    if (buf == NULL) {
        job->ctx->set_error(job->ctx, "ge_conv: no memory for a depthwise plane of %lld floats",
                            (long long)(phases * l.phase + flat_floats));
        __atomic_store_n(job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *flat_out = buf + phases * l.phase;
    int64_t offsets[NN_DW_MAX_TAPS];
    tap_offsets(w, &l, 0, offsets);
    for (int64_t plane = begin; plane < end; plane++) {
        const int64_t channel = plane % job->channels;
        const float *kernel = job->weights + channel * ntaps;
        const float bias = job->bias ? job->bias[channel] : 0.0f;
        float *y = job->y + plane * job->y_stride;
        fill_padded(w, &l, job->x + plane * job->x_stride, buf, job->fill_pairs, plane > begin);
        if (l.flat) {
            job->span(buf, offsets, kernel, ntaps, bias, &act, flat_out, out_h * l.wq);
            copy_rows(flat_out, l.wq, y, out_h, out_w);
        } else {
            for (int64_t oy = 0; oy < out_h; oy++) {
                job->span(buf + oy * l.wq, offsets, kernel, ntaps, bias, &act, y + oy * out_w,
                          out_w);
            }
        }
        if (after) {  /* the plane just written, still in L1 or L2 */
            const float *res = e->residual;
            nn_epilogue_run(e, y, res ? res + plane * out_size : NULL, out_size);
        }
    }
    free(buf);
}

/* The job of `planes` planes, with the direct kernel's masks when it takes the window
 * (plan->masks, freed by the caller; without them the padded copies run, as on other
 * CPUs). */
static dw_job depthwise_job(ge_context *ctx, int *failed, const nn_window *w, int64_t channels,
                            const float *x, int64_t x_stride, const float *weights,
                            const float *bias, float *y, int64_t y_stride,
                            const nn_epilogue *epilogue, dw_direct_plan *plan) {
    dw_job job = {ctx,      failed,   w,        channels,     x,
                  weights,  bias,     y,        x_stride,     y_stride,
                  epilogue, kernel()->fn, kernel()->fill_pairs, NULL, plan, NULL, NULL, 0};
    plan->masks = NULL;
    if (direct_s2_fits(w)) {
        job.direct_s2 = kernel()->direct_s2;
    }
    if (kernel()->direct != NULL && direct_fits(w)) {
        const int64_t chunks = (w->out[1] * w->out[2] + 15) / 16;
        const int three = kernel()->direct3 != NULL && direct3_fits(w);
        /* direct_avx512's masks (a tap's bits row by row: 20-30 us a run of MobileNetV2)
         * only where a plane may take it */
        job.finite = three && all_finite(weights, 9 * channels);
        const int masks = !job.finite;
        const int64_t words = (masks ? w->k[1] * w->k[2] * chunks : 0)
                              + (three ? NN_DW3_MASK_WORDS(chunks) : 0);
        plan->masks = (uint16_t *)malloc((size_t)words * sizeof(uint16_t));
        if (plan->masks != NULL) {
            job.direct = kernel()->direct;
            if (masks) {
                plan_direct(w, plan);
            }
            if (three) {
                plan_direct3(w, plan->masks + (masks ? w->k[1] * w->k[2] * chunks : 0),
                             &plan->three);
                job.direct3 = kernel()->direct3;
            }
        }
    }
    return job;
}

int nn_conv_depthwise(ge_context *ctx, const nn_window *w, int64_t planes, int64_t channels,
                      const float *x, const float *weights, const float *bias, float *y,
                      const nn_epilogue *epilogue) {
    int failed = 0;
    dw_direct_plan plan;
    dw_job job = depthwise_job(ctx, &failed, w, channels, x, w->in[1] * w->in[2], weights,
                               bias, y, w->out[1] * w->out[2], epilogue, &plan);
    const int64_t work = w->out[1] * w->out[2] * w->k[1] * w->k[2];
    ctx->parallel_for(ctx, planes, nn_grain(work, NN_DW_GRAIN_WORK), dw_planes, &job);
    free(plan.masks);
    return failed ? -1 : 0;
}

int nn_conv_depthwise_here(ge_context *ctx, const nn_window *w, int64_t planes,
                           const float *x, int64_t x_stride, const float *weights,
                           const float *bias, float *y, int64_t y_stride,
                           const nn_epilogue *epilogue) {
    int failed = 0;
    dw_direct_plan plan;
    dw_job job = depthwise_job(ctx, &failed, w, planes, x, x_stride, weights, bias, y,
                               y_stride, epilogue, &plan);
    dw_planes(&job, 0, planes);
    free(plan.masks);
    return failed ? -1 : 0;
}

/* -- few input channels per group (stems) ------------------------------------------------- */

int nn_conv_few_channels_fits(const nn_window *w, int64_t cg) {
    return cg >= 1 && cg <= NN_FEW_MAX_CHANNELS && nn_conv_depthwise_fits(w)
           && cg * w->k[1] * w->k[2] <= NN_DW_MAX_TAPS;
}

typedef struct {
    ge_context *ctx;
    int *failed;
    const nn_window *w;
    const float *x;         /* the image's input planes */
    float *phased;          /* their phases, plane_floats apart */
    int64_t plane_floats;
    int64_t cg, mg, image, m;
    const int64_t *offsets; /* cg * taps: tap t of input channel ci at [ci * taps + t] */
    const float *weights, *bias;
    float *y;               /* the image's output planes */
    const nn_epilogue *epilogue;
    const dw_kernel *kernel;
} few_job;

/* Input planes [begin, end) of the image into their phases (zeros included). */
static void few_fill(void *arg, int64_t begin, int64_t end) {
    const few_job *job = (const few_job *)arg;
    const dw_layout l = layout_of(job->w);
    const int64_t in_size = job->w->in[1] * job->w->in[2];
    for (int64_t ci = begin; ci < end; ci++) {
        fill_padded(job->w, &l, job->x + ci * in_size, job->phased + ci * job->plane_floats,
                    job->kernel->fill_pairs, 0);
    }
}

/* Output planes [begin, end) of the image, each a span over its group's cg phased input
 * planes (cg * taps taps); four planes of one group at a time where the kernel has
 * span4, into `flat` (4 spans of flat_floats) for narrow planes. */
static void few_planes(void *arg, int64_t begin, int64_t end) {
    const few_job *job = (const few_job *)arg;
    const nn_window *w = job->w;
    const dw_layout l = layout_of(w);
    const int64_t out_h = w->out[1], out_w = w->out[2], out_size = out_h * out_w;
    const int64_t flat_floats = out_h * l.wq;
    const int ntaps = (int)(job->cg * w->k[1] * w->k[2]);
    const nn_epilogue *e = job->epilogue;
    dw_act act;
    const int after = register_act(e, &act);
    float *flat = NULL;
    if (l.flat) {
        flat = (float *)malloc((size_t)(4 * flat_floats) * sizeof(float));
        if (flat == NULL) {
            job->ctx->set_error(job->ctx, "ge_conv: no memory for planes of %lld floats",
                                (long long)(4 * flat_floats));
            __atomic_store_n(job->failed, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    for (int64_t mo = begin; mo < end;) {
        const int64_t group = mo / job->mg;
        const float *base = job->phased + group * job->cg * job->plane_floats;
        const int quad = job->kernel->span4 != NULL && mo + 4 <= end
                         && (mo + 3) / job->mg == group;
        const int count = quad ? 4 : 1;
        const float *kernel = job->weights + mo * ntaps;
        float bias[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float *y[4], *dst[4];
        for (int q = 0; q < count; q++) {
            bias[q] = job->bias ? job->bias[mo + q] : 0.0f;
            y[q] = job->y + (mo + q) * out_size;
            dst[q] = l.flat ? flat + q * flat_floats : y[q];
        }
        for (int64_t oy = 0; oy < (l.flat ? 1 : out_h); oy++) {
            const float *at = base + oy * l.wq;
            const int64_t n = l.flat ? flat_floats : out_w;
            if (quad) {
                float *const row[4] = {dst[0] + oy * out_w, dst[1] + oy * out_w,
                                       dst[2] + oy * out_w, dst[3] + oy * out_w};
                job->kernel->span4(at, job->offsets, kernel, ntaps, bias, &act, row, n);
            } else {
                job->kernel->fn(at, job->offsets, kernel, ntaps, bias[0], &act,
                                dst[0] + oy * out_w, n);
            }
        }
        for (int q = 0; q < count; q++) {
            if (l.flat) {
                copy_rows(dst[q], l.wq, y[q], out_h, out_w);
            }
            if (after) {
                const float *res = e->residual;
                const int64_t plane = job->image * job->m + mo + q;
                nn_epilogue_run(e, y[q], res ? res + plane * out_size : NULL, out_size);
            }
        }
        mo += count;
    }
    free(flat);
}

int nn_conv_few_channels(ge_context *ctx, const nn_window *w, int64_t n, int64_t c,
                         int64_t m, int64_t group, const float *x, const float *weights,
                         const float *bias, float *y, const nn_epilogue *epilogue) {
    const dw_layout l = layout_of(w);
    const int64_t plane_floats = l.sy * l.sx * l.phase, cg = c / group;
    const int64_t kh = w->k[1], kw = w->k[2], taps = kh * kw;
    const int64_t in_size = w->in[1] * w->in[2], out_size = w->out[1] * w->out[2];
    int64_t offsets[NN_DW_MAX_TAPS];
    for (int64_t ci = 0; ci < cg; ci++) {  /* channel ci's taps read its own phases */
        tap_offsets(w, &l, ci * plane_floats, offsets + ci * taps);
    }
    float *phased = (float *)malloc((size_t)(c * plane_floats) * sizeof(float));
    if (phased == NULL) {
        return ctx->set_error(ctx, "ge_conv: no memory for %lld phased input floats",
                              (long long)(c * plane_floats));
    }
    int failed = 0;
    few_job job = {ctx, &failed, w, NULL, phased, plane_floats, cg, m / group, 0, m,
                   offsets, weights, bias, NULL, epilogue, kernel()};
    /* whole quads per chunk (an odd chunk end would cut one) */
    const int64_t grain = (nn_grain(out_size * cg * taps, NN_DW_GRAIN_WORK) + 3) / 4 * 4;
    for (int64_t image = 0; image < n && !failed; image++) {
        job.image = image;
        job.x = x + image * c * in_size;
        job.y = y + image * m * out_size;
        ctx->parallel_for(ctx, c, nn_grain(in_size, NN_DW_GRAIN_WORK), few_fill, &job);
        ctx->parallel_for(ctx, m, grain, few_planes, &job);
    }
    free(phased);
    return failed ? -1 : 0;
}
