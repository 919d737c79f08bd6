/*
 * Conv 3x3, stride 1, dilation 1 (2-D) by Winograd's F(2x2, 3x3): every 2x2 output tile
 * comes from a 4x4 input tile with 16 multiplications per channel pair instead of 36.
 *
 *   U = G g G^T             each 3x3 kernel -> 4x4, once, at compile time (the packer,
 *                           ge_hub/kernels/conv.py, lays U[xi] out as packed GEMM panels)
 *   V = B^T d B             each 4x4 input tile -> 4x4, written as packed-B panels
 *   M[xi] = U[xi] @ V[xi]   for each of the 16 positions xi, one packed GEMM
 *                           (nn_gemm_packed.h): (out channels x in channels) @
 *                           (in channels x tiles)
 *   Y = A^T M A             each 4x4 -> one 2x2 output tile, plus the bias
 *
 * with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5;
 * 0 0 1] and A^T = [1 1 1 0; 0 1 -1 -1]. Tiles go in blocks of `block` so that V and M
 * stay in cache. With `slots` scratch areas (2 or more, when there are enough blocks),
 * blocks run side by side, each on one thread from start to end; otherwise each stage
 * of a block is split over the pool, with a barrier between stages.
 *
 * With u_bf16 (precision bf16: conv.c's NN_CONV_WINOGRAD_BF16) the products are bf16
 * with fp32 sums: U[xi] was rounded and packed at compile time as nn_gemm_bf16.h's packed
 * A, the input transform writes V as its bf16 pair-row panels (transform_inputs_bf16) and
 * each product runs the bf16 micro-kernel on the calling thread (nn_gemm_bf16_here). It
 * does 16 bf16 multiplications per 2x2 outputs where the direct bf16 product does 36: one
 * thread, Zen 4, ResNet-18's 3x3 layers 1.12-1.19 -> 0.80-0.95 ms (56x56 to 14x14 maps).
 *
 * Both transforms run AVX-512 strips (strip_in_avx512, strip_out_avx512: 16 tiles per
 * vector, even and odd columns split or interleaved by permutes; the output's residual
 * and a Relu or Clip in registers) where the GEMM's variant is AVX-512, and plain loops
 * the compiler vectorizes otherwise (GE_HUB_GEMM_KERNEL=avx2 or generic forces them);
 * both sum in the same order.
 *
 * The transforms only add and subtract, and every output still depends on exactly the
 * input cells of its own 3x3 window, so NaN spreads as in the direct sum. An infinity
 * does not: it enters a tile's transform with both signs and can meet itself as
 * inf - inf. The caller (conv.c) therefore takes this path only for finite data.
 */
#include "conv_winograd.h"

#include <pthread.h>
#include <string.h>

#include "ge_hub/internal/simd.h"
#include "ge_hub/internal/threadpool.h"
#include "nn_gemm_packed.h"
#include "nn_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_WINOGRAD_X86 1
#endif

#define NN_WINOGRAD_GRAIN_WORK 16384

/* -- input transform: V[xi], packed-B panels of (cg x count) -------------------------------- */

/* Tiles are transformed a strip at a time: up to NN_STRIP consecutive tiles of one tile
 * row and one panel, whose four input rows are combined as whole rows so that the loops
 * vectorize. */
#define NN_STRIP NN_PACK_NR
#define NN_STRIP_COLS (2 * NN_STRIP + 2)

typedef struct {
    const float *x;  /* the group's first input channel of one image */
    float *v;        /* 16 planes, each ceil(count / NR) panels of cg x NR */
    int64_t cg, in_h, in_w, pad_h, pad_w, tiles_w, first_tile, count;
} input_job;

/* Input row `y` of plane `x` from column x0 on, `n` values, zeros outside the input. */
static inline __attribute__((always_inline)) void load_row(const float *x, int64_t in_h, int64_t in_w, int64_t y, int64_t x0,
                     int64_t n, float *out) {
    if (y < 0 || y >= in_h) {
        for (int64_t j = 0; j < n; j++) {
            out[j] = 0.0f;
        }
        return;
    }
    const float *row = x + y * in_w;
    int64_t lo = x0 < 0 ? -x0 : 0;
    int64_t hi = in_w - x0 < n ? in_w - x0 : n;
    if (hi < lo) {
        hi = lo;
    }
    for (int64_t j = 0; j < lo; j++) {
        out[j] = 0.0f;
    }
    for (int64_t j = lo; j < hi; j++) {
        out[j] = row[x0 + j];
    }
    for (int64_t j = hi; j < n; j++) {
        out[j] = 0.0f;
    }
}

/*
 * One strip of n <= NN_STRIP tiles of one channel with AVX-512: the strip's four input
 * rows (from row y0, columns x0 on, zero outside the plane) to its 16 values of V per
 * tile (planes xs apart at `v`), 16 tiles per vector: each row's even and odd columns,
 * and the same two steps right, split by permutes from masked loads that read only
 * inside the plane, then the sums of the generic loop in its order (the same bits).
 */
typedef void (*strip_in_fn)(const float *x, int64_t in_h, int64_t in_w, int64_t y0,
                            int64_t x0, int64_t n, float *v, int64_t xs);

#ifdef NN_WINOGRAD_X86
/* lanes of a 16-float load at column c0 of a row that lie inside it, [0, in_w) */
static inline __mmask16 inside_lanes(int64_t c0, int64_t in_w) {
    int64_t lo = -c0, hi = in_w - c0;
    lo = lo < 0 ? 0 : lo > 16 ? 16 : lo;
    hi = hi < 0 ? 0 : hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

__attribute__((target("avx512f"))) static void strip_in_avx512(
    const float *x, int64_t in_h, int64_t in_w, int64_t y0, int64_t x0, int64_t n, float *v,
    int64_t xs) {
    const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                               24, 26, 28, 30);
    const __m512i odd_idx = _mm512_add_epi32(even_idx, _mm512_set1_epi32(1));
    for (int64_t h = 0; 16 * h < n; h++) {
        const int64_t left = n - 16 * h;
        const __mmask16 store = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1u);
        const int64_t c0 = x0 + 32 * h;  /* column of tile 16h's first input */
        const __mmask16 m0 = inside_lanes(c0, in_w), m1 = inside_lanes(c0 + 16, in_w);
        const __mmask16 m2 = inside_lanes(c0 + 2, in_w), m3 = inside_lanes(c0 + 18, in_w);
        /* per input row i: columns 2k, 2k + 1, 2k + 2, 2k + 3 of tiles k = 16h .. */
        __m512 e[4], o[4], e2[4], o3[4];
        for (int i = 0; i < 4; i++) {
            const int64_t y = y0 + i;
            if (y < 0 || y >= in_h) {
                e[i] = o[i] = e2[i] = o3[i] = _mm512_setzero_ps();
                continue;
            }
            /* from a base that may lie before the row: only lanes inside it enabled */
            const float *row = x + y * in_w + c0;
            const __m512 a0 = _mm512_maskz_loadu_ps(m0, row);
            const __m512 a1 = _mm512_maskz_loadu_ps(m1, row + 16);
            const __m512 b0 = _mm512_maskz_loadu_ps(m2, row + 2);
            const __m512 b1 = _mm512_maskz_loadu_ps(m3, row + 18);
            e[i] = _mm512_permutex2var_ps(a0, even_idx, a1);
            o[i] = _mm512_permutex2var_ps(a0, odd_idx, a1);
            e2[i] = _mm512_permutex2var_ps(b0, even_idx, b1);
            o3[i] = _mm512_permutex2var_ps(b0, odd_idx, b1);
        }
        for (int i = 0; i < 4; i++) {  /* B^T d (rows), then (B^T d) B (columns) */
            __m512 re, ro, re2, ro3;
#define BT_ROW(dst, col)                                          \
    switch (i) {                                                  \
    case 0: dst = _mm512_sub_ps(col[0], col[2]); break;           \
    case 1: dst = _mm512_add_ps(col[1], col[2]); break;           \
    case 2: dst = _mm512_sub_ps(col[2], col[1]); break;           \
    default: dst = _mm512_sub_ps(col[1], col[3]); break;          \
    }
            BT_ROW(re, e)
            BT_ROW(ro, o)
            BT_ROW(re2, e2)
            BT_ROW(ro3, o3)
#undef BT_ROW
            float *out = v + (int64_t)(4 * i) * xs + 16 * h;
            _mm512_mask_storeu_ps(out, store, _mm512_sub_ps(re, re2));
            _mm512_mask_storeu_ps(out + xs, store, _mm512_add_ps(ro, re2));
            _mm512_mask_storeu_ps(out + 2 * xs, store, _mm512_sub_ps(re2, ro));
            _mm512_mask_storeu_ps(out + 3 * xs, store, _mm512_sub_ps(ro, ro3));
        }
    }
}
#endif

/*
 * One strip of n <= NN_STRIP tiles of one channel with AVX-512: M's 16 values per tile
 * (`m`, planes xs apart) to the strip's `rows` (1 or 2) output rows of `width` values at
 * `out` (rows out_w apart), bias added, then the residual and a Relu or Clip in registers
 * (`in_registers`), the sums in the generic loop's order, so that both give the same
 * bits. Even and odd output columns are interleaved by two permutes per 16 tiles.
 * Returns 0 where the epilogue is one it leaves to nn_epilogue_run (after the store).
 */
typedef void (*strip_out_fn)(const float *m, int64_t xs, int64_t n, float bias, int rows,
                             float *out, int64_t out_w, int64_t width,
                             const nn_epilogue *in_registers, const float *residual);

/* The SIMD strips of both transforms, or NULL for the generic loops: the GEMM's variant
 * decides (GE_HUB_GEMM_KERNEL forces a lesser one, for tests). */
typedef struct {
    strip_in_fn in;
    strip_out_fn out;
} strip_kernels;

static strip_kernels chosen_strips;
static pthread_once_t strips_once = PTHREAD_ONCE_INIT;

static void choose_strips(void);

static const strip_kernels *strips(void) {
    pthread_once(&strips_once, choose_strips);
    return &chosen_strips;
}

/* One strip of n tiles of one channel plane `x` (tile row ty, from tile column tx) to
 * their 16 values each at `v`, planes xs apart: the SIMD strip, or the generic loop. */
NN_VECTORIZED NN_INLINE_COPIES static void transform_strip(const input_job *job, const float *x,
                                                           int64_t ty, int64_t tx, int64_t n,
                                                           float *v, int64_t xs,
                                                           strip_in_fn strip_in) {
    if (strip_in) {
        strip_in(x, job->in_h, job->in_w, 2 * ty - job->pad_h, 2 * tx - job->pad_w, n, v, xs);
        return;
    }
    float d[4][NN_STRIP_COLS], b[4][NN_STRIP_COLS];
    const int64_t cols = 2 * n + 2;
    for (int i = 0; i < 4; i++) {
        load_row(x, job->in_h, job->in_w, 2 * ty - job->pad_h + i, 2 * tx - job->pad_w,
                 cols, d[i]);
    }
    for (int64_t j = 0; j < cols; j++) {  /* B^T d, a whole row at a time */
        b[0][j] = d[0][j] - d[2][j];
        b[1][j] = d[1][j] + d[2][j];
        b[2][j] = d[2][j] - d[1][j];
        b[3][j] = d[1][j] - d[3][j];
    }
    for (int i = 0; i < 4; i++) {  /* (B^T d) B: tile k reads columns 2k .. 2k + 3 */
        const float *r = b[i];
        float *out = v + (int64_t)(4 * i) * xs;
        for (int64_t k = 0; k < n; k++) {
            out[k] = r[2 * k] - r[2 * k + 2];
            out[xs + k] = r[2 * k + 1] + r[2 * k + 2];
            out[2 * xs + k] = r[2 * k + 2] - r[2 * k + 1];
            out[3 * xs + k] = r[2 * k + 1] - r[2 * k + 3];
        }
    }
}

/* The strip of tiles from t on that ends at the block's end, a tile row's end or a
 * panel's end, whichever comes first: (ty, tx, n). */
static inline int64_t next_strip(const input_job *job, int64_t t, int64_t *ty, int64_t *tx) {
    const int64_t tile = job->first_tile + t;
    *ty = tile / job->tiles_w;
    *tx = tile % job->tiles_w;
    int64_t n = job->tiles_w - *tx;
    n = n < job->count - t ? n : job->count - t;
    return n < NN_STRIP - t % NN_STRIP ? n : NN_STRIP - t % NN_STRIP;  /* one panel */
}

/* Channels [begin, end) of the block's tiles. */
static void transform_inputs(void *arg, int64_t begin, int64_t end) {
    const input_job *job = (const input_job *)arg;
    const int64_t count = job->count, panel = job->cg * NN_PACK_NR;
    const int64_t xs = nn_pack_panels(count, NN_PACK_NR) * panel;  /* between xi planes */
    const strip_in_fn strip_in = strips()->in;
    for (int64_t c = begin; c < end; c++) {
        const float *x = job->x + c * job->in_h * job->in_w;
        for (int64_t t = 0; t < count;) {
            int64_t ty, tx;
            const int64_t n = next_strip(job, t, &ty, &tx);
            float *v = job->v + (t / NN_PACK_NR) * panel + c * NN_PACK_NR + t % NN_PACK_NR;
            transform_strip(job, x, ty, tx, n, v, xs, strip_in);
            t += n;
        }
    }
}

/* bf16 products (nn_winograd_conv.u_bf16): pairs of channels [begin, end) of the block's
 * tiles, into V's bf16 pair-rows (nn_gemm_bf16.h's packed B, one panel of NR tiles at a
 * time): both channels' strips of a panel transformed into L1 buffers, then each of the
 * 16 planes' pair-row converted from them (an odd channel count pairs the last with
 * zeros). The pair-rows past the depth's last pair up to its KB padding are zero. */
static void transform_inputs_bf16(void *arg, int64_t begin, int64_t end) {
    const input_job *job = (const input_job *)arg;
    const int64_t count = job->count, panels = nn_pack_panels(count, NN_PACK_NR);
    const int64_t kp = nn_bf16_depth(job->cg), panel = kp * NN_PACK_NR;
    const int64_t xs = panels * panel;  /* values between xi planes */
    const int64_t pairs = (job->cg + 1) / 2;
    const strip_in_fn strip_in = strips()->in;
    uint16_t *v = (uint16_t *)job->v;
    float rows[2][16 * NN_PACK_NR] __attribute__((aligned(64)));
    for (int64_t pr = begin; pr < end; pr++) {
        if (pr >= pairs) {  /* a zero pair-row of the padding, in every plane and panel */
            for (int64_t xi = 0; xi < 16; xi++) {
                for (int64_t pn = 0; pn < panels; pn++) {
                    memset(v + xi * xs + pn * panel + pr * 2 * NN_PACK_NR, 0,
                           2 * NN_PACK_NR * sizeof(uint16_t));
                }
            }
            continue;
        }
        const int64_t c = 2 * pr, both = c + 1 < job->cg;
        for (int64_t t0 = 0; t0 < count; t0 += NN_PACK_NR) {
            const int64_t width = count - t0 < NN_PACK_NR ? count - t0 : NN_PACK_NR;
            for (int64_t h = 0; h <= both; h++) {
                const float *x = job->x + (c + h) * job->in_h * job->in_w;
                if (width < NN_PACK_NR) {  /* the tiles past the block's end: zeros */
                    memset(rows[h], 0, sizeof rows[h]);
                }
                for (int64_t t = t0; t < t0 + width;) {
                    int64_t ty, tx;
                    const int64_t n = next_strip(job, t, &ty, &tx);
                    transform_strip(job, x, ty, tx, n, rows[h] + (t - t0), NN_PACK_NR,
                                    strip_in);
                    t += n;
                }
            }
            uint16_t *dst = v + (t0 / NN_PACK_NR) * panel + pr * 2 * NN_PACK_NR;
            for (int64_t xi = 0; xi < 16; xi++) {
                nn_bf16_pair_rows(rows[0] + xi * NN_PACK_NR,
                                  both ? rows[1] + xi * NN_PACK_NR : NULL, 1, dst + xi * xs,
                                  panel);
            }
        }
    }
}

/* -- the 16 products ----------------------------------------------------------------------- */

typedef struct {
    const float *u, *v;  /* packed: U[xi] and V[xi] are `u_plane` and `v_plane` apart */
    float *m;
    int64_t mg, cg, count, u_plane, v_plane;
} product_job;

static void products(void *arg, int64_t begin, int64_t end) {
    const product_job *job = (const product_job *)arg;
    for (int64_t xi = begin; xi < end; xi++) {
        nn_gemm_prepacked(job->u + xi * job->u_plane, job->v + xi * job->v_plane, job->mg,
                          job->count, job->cg, job->m + xi * job->mg * job->count, job->count);
    }
}

/* The bf16 products: U[xi] (packed A) @ V[xi] (bf16 pair-row panels) into M[xi], each on
 * the calling thread (the callers split the 16 over the pool, or run whole blocks). */
typedef struct {
    const uint16_t *u, *v;
    float *m;
    int64_t mg, cg, count;
} product_bf16_job;

static void products_bf16(void *arg, int64_t begin, int64_t end) {
    const product_bf16_job *job = (const product_bf16_job *)arg;
    const int64_t u_plane = nn_winograd_bf16_u_values(job->cg, job->mg);
    const int64_t panel = nn_bf16_depth(job->cg) * NN_PACK_NR;
    const int64_t v_plane = nn_pack_panels(job->count, NN_PACK_NR) * panel;
    for (int64_t xi = begin; xi < end; xi++) {
        nn_bf16_gemm g;
        memset(&g, 0, sizeof g);
        g.m = job->mg;
        g.n = job->count;
        g.k = job->cg;
        g.a_packed = job->u + xi * u_plane;
        g.c = job->m + xi * job->mg * job->count;
        g.ldc_row = job->count;
        g.ldc_col = 1;
        g.b_packed = job->v + xi * v_plane;
        g.panel_stride = panel;
        nn_gemm_bf16_here(&g);
    }
}

/* -- output transform: Y = A^T M A + bias ------------------------------------------------- */

typedef struct {
    const float *m;     /* (16, mg, count) */
    const float *bias;  /* the group's first bias, or NULL */
    float *y;           /* the group's first output channel of one image */
    int64_t mg, out_h, out_w, tiles_w, first_tile, count;
    const nn_epilogue *epilogue;  /* NULL: none */
    const float *residual;        /* laid out like y, or NULL */
} output_job;

#ifdef NN_WINOGRAD_X86
__attribute__((target("avx512f"))) static void strip_out_avx512(
    const float *m, int64_t xs, int64_t n, float bias, int rows, float *out, int64_t out_w,
    int64_t width, const nn_epilogue *in_registers, const float *residual) {
    const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22,
                                            7, 23);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
    const __m512 bias_v = _mm512_set1_ps(bias);
    const int act = in_registers ? in_registers->activation : FUSED_ACT_NONE;
    const __m512 low = _mm512_set1_ps(act == FUSED_ACT_CLIP ? (float)in_registers->alpha : 0.0f);
    const __m512 high = _mm512_set1_ps(act == FUSED_ACT_CLIP ? (float)in_registers->beta
                                                             : INFINITY);
    for (int64_t h = 0; 16 * h < n; h++) {
        const int64_t left = n - 16 * h;
        const __mmask16 load = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1u);
        __m512 a[2][4];
        for (int j = 0; j < 4; j++) {  /* A^T M, over 16 tiles */
            const float *s0 = m + (int64_t)j * xs + 16 * h;
            const __m512 v0 = _mm512_maskz_loadu_ps(load, s0);
            const __m512 v1 = _mm512_maskz_loadu_ps(load, s0 + 4 * xs);
            const __m512 v2 = _mm512_maskz_loadu_ps(load, s0 + 8 * xs);
            const __m512 v3 = _mm512_maskz_loadu_ps(load, s0 + 12 * xs);
            a[0][j] = _mm512_add_ps(_mm512_add_ps(v0, v1), v2);
            a[1][j] = _mm512_sub_ps(_mm512_sub_ps(v1, v2), v3);
        }
        for (int i = 0; i < rows; i++) {  /* (A^T M) A, then the epilogue */
            const __m512 even = _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(a[i][0], a[i][1]), a[i][2]), bias_v);
            const __m512 odd = _mm512_add_ps(
                _mm512_sub_ps(_mm512_sub_ps(a[i][1], a[i][2]), a[i][3]), bias_v);
            __m512 part[2] = {_mm512_permutex2var_ps(even, first, odd),
                              _mm512_permutex2var_ps(even, second, odd)};
            for (int q = 0; q < 2; q++) {
                const int64_t col = 32 * h + 16 * q, rest = width - col;
                if (rest <= 0) {
                    break;
                }
                const __mmask16 store = (__mmask16)(rest >= 16 ? 0xFFFF : (1u << rest) - 1u);
                float *at = out + i * out_w + col;
                __m512 v = part[q];
                if (residual) {
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(store, residual + i * out_w + col));
                }
                if (act == FUSED_ACT_RELU || act == FUSED_ACT_CLIP) {
                    /* NaN, the second operand, passes through both, as in Relu and Clip */
                    v = _mm512_min_ps(high, _mm512_max_ps(low, v));
                }
                _mm512_mask_storeu_ps(at, store, v);
            }
        }
    }
}
#endif

static void choose_strips(void) {
    chosen_strips.in = NULL;
    chosen_strips.out = NULL;
#ifdef NN_WINOGRAD_X86
    if (ge_simd_choose("GE_HUB_GEMM_KERNEL") == GE_SIMD_AVX512) {
        chosen_strips.in = strip_in_avx512;
        chosen_strips.out = strip_out_avx512;
    }
#endif
}

/* Output channels [begin, end) of the block's tiles, a strip of one tile row at a time. */
NN_VECTORIZED NN_INLINE_COPIES static void transform_outputs(void *arg, int64_t begin, int64_t end) {
    const output_job *job = (const output_job *)arg;
    const int64_t count = job->count, xs = job->mg * count;
    float a[2][4][NN_STRIP], row[2 * NN_STRIP];
    const strip_out_fn strip_out = strips()->out;
    /* the residual, Relu and Clip fit the SIMD strip's registers; the rest run after */
    const int in_registers = job->epilogue == NULL
                             || job->epilogue->activation == FUSED_ACT_NONE
                             || job->epilogue->activation == FUSED_ACT_RELU
                             || job->epilogue->activation == FUSED_ACT_CLIP;
    for (int64_t ch = begin; ch < end; ch++) {
        const float *m = job->m + ch * count;
        float *y = job->y + ch * job->out_h * job->out_w;
        const float bias = job->bias ? job->bias[ch] : 0.0f;
        for (int64_t t = 0; t < count;) {
            int64_t tile = job->first_tile + t;
            int64_t ty = tile / job->tiles_w, tx = tile % job->tiles_w;
            int64_t n = job->tiles_w - tx;
            n = n < count - t ? n : count - t;
            n = n < NN_STRIP ? n : NN_STRIP;
            if (strip_out) {
                const int64_t ox = 2 * tx;
                const int64_t width = job->out_w - ox < 2 * n ? job->out_w - ox : 2 * n;
                const int rows = 2 * ty + 1 < job->out_h ? 2 : 1;
                float *out = y + 2 * ty * job->out_w + ox;
                const float *res = job->residual ? job->residual + (out - job->y) : NULL;
                strip_out(m + t, xs, n, bias, rows, out, job->out_w, width,
                          in_registers ? job->epilogue : NULL, in_registers ? res : NULL);
                if (!in_registers) {
                    for (int i = 0; i < rows; i++) {
                        nn_epilogue_run(job->epilogue, out + i * job->out_w,
                                        res ? res + i * job->out_w : NULL, width);
                    }
                }
                t += n;
                continue;
            }
            for (int j = 0; j < 4; j++) {  /* A^T M, over the strip's tiles */
                const float *s0 = m + (int64_t)j * xs + t, *s1 = s0 + 4 * xs;
                const float *s2 = s0 + 8 * xs, *s3 = s0 + 12 * xs;
                for (int64_t k = 0; k < n; k++) {
                    a[0][j][k] = s0[k] + s1[k] + s2[k];
                    a[1][j][k] = s1[k] - s2[k] - s3[k];
                }
            }
            const int64_t ox = 2 * tx, width = job->out_w - ox < 2 * n ? job->out_w - ox : 2 * n;
            for (int i = 0; i < 2 && 2 * ty + i < job->out_h; i++) {  /* (A^T M) A */
                for (int64_t k = 0; k < n; k++) {
                    row[2 * k] = a[i][0][k] + a[i][1][k] + a[i][2][k] + bias;
                    row[2 * k + 1] = a[i][1][k] - a[i][2][k] - a[i][3][k] + bias;
                }
                float *out = y + (2 * ty + i) * job->out_w + ox;
                for (int64_t k = 0; k < width; k++) {
                    out[k] = row[k];
                }
                if (job->epilogue) {
                    const int64_t at = out - job->y;
                    nn_epilogue_run(job->epilogue, out,
                                    job->residual ? job->residual + at : NULL, width);
                }
            }
            t += n;
        }
    }
}

/* -- the convolution ----------------------------------------------------------------------- */

/* The three stages of one block of tiles [first, first + count): V in `v`, M in `m`. */
typedef struct {
    input_job in;
    product_job prod;
    product_bf16_job prod_bf16;  /* with u_bf16: V bf16 in `v`, M after it */
    output_job out;
} block_stages;

/* `u`: the group's U, float (packed for nn_gemm_prepacked) or, with conv->u_bf16, bf16. */
static block_stages stages_of(const nn_winograd_conv *conv, const void *u, const float *x,
                              float *y, const float *bias, int64_t first, int64_t count,
                              float *v, float *m) {
    const int64_t tiles_w = (conv->out_w + 1) / 2;
    const nn_epilogue *epilogue = nn_epilogue_empty(conv->epilogue) ? NULL : conv->epilogue;
    /* y's offset in the output tensor gives the residual's */
    const float *residual = conv->residual ? conv->residual + (y - conv->y) : NULL;
    block_stages s = {
        {x, v, conv->cg, conv->in_h, conv->in_w, conv->pad_h, conv->pad_w, tiles_w, first,
         count},
        {(const float *)u, v, m, conv->mg, conv->cg, count,
         nn_winograd_u_plane_floats(conv->cg, conv->mg),
         nn_pack_panels(count, NN_PACK_NR) * conv->cg * NN_PACK_NR},
        {(const uint16_t *)u, (const uint16_t *)v, m, conv->mg, conv->cg, count},
        {m, bias, y, conv->mg, conv->out_h, conv->out_w, tiles_w, first, count, epilogue,
         residual}};
    return s;
}

/* Bytes of one scratch area, and where M starts in it (V first). */
static int64_t area_bytes(const nn_winograd_conv *conv) {
    return conv->u_bf16 ? nn_winograd_bf16_scratch_bytes(conv->cg, conv->mg, conv->block)
                        : nn_winograd_scratch_floats(conv->cg, conv->mg, conv->block)
                              * (int64_t)sizeof(float);
}
static float *m_of(const nn_winograd_conv *conv, float *v) {
    if (conv->u_bf16) {
        return (float *)((uint16_t *)v + nn_winograd_bf16_v_values(conv->cg, conv->block));
    }
    return v + 16 * conv->cg * nn_pack_panels(conv->block, NN_PACK_NR) * NN_PACK_NR;
}

/* One block of tiles, start to end on the calling thread. */
static void winograd_block(const nn_winograd_conv *conv, const void *u, const float *x,
                           float *y, const float *bias, int64_t first, int64_t count,
                           float *v, float *m) {
    block_stages s = stages_of(conv, u, x, y, bias, first, count, v, m);
    if (conv->u_bf16) {
        transform_inputs_bf16(&s.in, 0, nn_bf16_depth(conv->cg) / 2);
        products_bf16(&s.prod_bf16, 0, 16);
    } else {
        transform_inputs(&s.in, 0, conv->cg);
        products(&s.prod, 0, 16);
    }
    transform_outputs(&s.out, 0, conv->mg);
}

typedef struct {
    const nn_winograd_conv *conv;
    const void *u;  /* the group's U (see stages_of) */
    const float *x, *bias;
    float *y;
    int64_t tiles;
} slots_job;

/* Slots [begin, end): slot s takes its share of the blocks, consecutive ones (rows of
 * tiles next to each other, so that a thread reads the input rows that the same thread
 * wrote in the layer before, where that layer cut its loop alike: see threadpool.c's home
 * ranges), with no barrier between a block's three stages. */
static void winograd_slots(void *arg, int64_t begin, int64_t end) {
    const slots_job *job = (const slots_job *)arg;
    const nn_winograd_conv *conv = job->conv;
    const int64_t area = area_bytes(conv);
    /* One area per thread, its own (ge_thread_workspace), for every slot it runs; the
     * plan's area of the slot where that cannot be had. */
    float *own = ge_thread_workspace((size_t)area);
    const int64_t blocks = (job->tiles + conv->block - 1) / conv->block;
    for (int64_t slot = begin; slot < end; slot++) {
        float *v = own != NULL ? own : (float *)((char *)conv->scratch + slot * area);
        float *m = m_of(conv, v);
        const int64_t first_block = slot * blocks / conv->slots;
        const int64_t end_block = (slot + 1) * blocks / conv->slots;
        for (int64_t b = first_block; b < end_block; b++) {
            const int64_t first = b * conv->block;
            int64_t count = job->tiles - first < conv->block ? job->tiles - first : conv->block;
            winograd_block(conv, job->u, job->x, job->y, job->bias, first, count, v, m);
        }
    }
}

void nn_conv_winograd(ge_context *ctx, const nn_winograd_conv *conv) {
    const int64_t mg = conv->mg, cg = conv->cg, block = conv->block;
    const int64_t tiles_h = (conv->out_h + 1) / 2, tiles_w = (conv->out_w + 1) / 2;
    const int64_t tiles = tiles_h * tiles_w;
    const int64_t in_plane = conv->in_h * conv->in_w, out_plane = conv->out_h * conv->out_w;
    const int64_t u_plane = nn_winograd_u_plane_floats(cg, mg);
    const int64_t u_bf16_plane = nn_winograd_bf16_u_values(cg, mg);
    float *v = conv->scratch;
    float *m = m_of(conv, v);
    for (int64_t g = 0; g < conv->group; g++) {
        const void *u = conv->u_bf16 ? (const void *)(conv->u_bf16 + g * 16 * u_bf16_plane)
                                     : (const void *)(conv->u + g * 16 * u_plane);
        const float *bias = conv->bias ? conv->bias + g * mg : NULL;
        for (int64_t image = 0; image < conv->n; image++) {
            const float *x = conv->x + (image * conv->c + g * cg) * in_plane;
            float *y = conv->y + (image * conv->m + g * mg) * out_plane;
            if (conv->slots >= 2) {  /* many blocks: whole blocks side by side */
                slots_job job = {conv, u, x, bias, y, tiles};
                ctx->parallel_for(ctx, conv->slots, 1, winograd_slots, &job);
                continue;
            }
            /* few blocks (large channel counts): each stage split over the pool */
            for (int64_t first = 0; first < tiles; first += block) {
                int64_t count = tiles - first < block ? tiles - first : block;
                block_stages s = stages_of(conv, u, x, y, bias, first, count, v, m);
                if (conv->u_bf16) {
                    ctx->parallel_for(ctx, nn_bf16_depth(cg) / 2,
                                      nn_grain(count * 96, NN_WINOGRAD_GRAIN_WORK),
                                      transform_inputs_bf16, &s.in);
                    ctx->parallel_for(ctx, 16, 1, products_bf16, &s.prod_bf16);
                } else {
                    ctx->parallel_for(ctx, cg, nn_grain(count * 48, NN_WINOGRAD_GRAIN_WORK),
                                      transform_inputs, &s.in);
                    ctx->parallel_for(ctx, 16, 1, products, &s.prod);
                }
                ctx->parallel_for(ctx, mg, nn_grain(count * 40, NN_WINOGRAD_GRAIN_WORK),
                                  transform_outputs, &s.out);
            }
        }
    }
}
