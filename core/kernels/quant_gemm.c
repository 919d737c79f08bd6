/*
 * The integer GEMM (see quant.h for its algebra) and the four ops built on it:
 * MatMulInteger and QLinearMatMul (A times B, batched), ConvInteger and QLinearConv (the
 * weights times the gathered input patches, per group).
 *
 * Layouts. Packed A: rows rounded up to QGEMM_MR, each of kp bytes (k rounded up to 4,
 * zero-filled), as unsigned A'. Packed B: 16-column panels, their count rounded up to
 * even; panel p holds, for each group of 4 k's, 16 columns of 4 consecutive signed B'
 * bytes (the operand layout of vpdpbusd). Row sums of A' and column sums of B' are taken
 * over the real k only; padding contributes 0 to every product.
 *
 * The output tile's epilogue applies the zero points, then either stores int32 or, for
 * the QLinear ops, adds the int32 bias (per row) and requantizes: the multiplier
 * (row scale * column scale) / y_scale is formed in float32 as the reference forms it,
 * the accumulator times it in double, rounded half to even, plus y_zero_point, saturated.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QGEMM_HAVE_VNNI 1
#endif

#include "ge_hub/internal/simd.h"
#include "nn_common.h"
#include "quant.h"

/* A task covers this many multiply-adds at least, so that small products stay inline. */
#define QGEMM_GRAIN_MACS (1 << 18)
/* The most bytes of gathered patches (packed B) ConvInteger holds at a time. */
#define QCONV_MAX_PATCH_BYTES (1 << 21)

typedef struct {
    int64_t m, n, k, kp, panels;
    const uint8_t *a;          /* [ceil(m / MR) * MR][kp] */
    const int32_t *a_sum;      /* [m] */
    const int32_t *a_zero;     /* [m], shifted like A */
    const int8_t *b;           /* panels * kp * 16 */
    const int32_t *b_sum;      /* [n] */
    const int32_t *b_zero;     /* [n], shifted like B */
    int32_t out_dtype;         /* GE_INT32, GE_UINT8 or GE_INT8 */
    void *y;
    int64_t ldy;               /* elements between output rows */
    const int32_t *bias;       /* [m] or NULL */
    const float *row_scale;    /* [m] (requantizing outputs only) */
    const float *col_scale;    /* [n] */
    float y_scale;
    int32_t y_zero;
    int col_uniform;           /* every column scale is col_scale[0] */
    int half_scales;           /* the scales are float16 (values exact in the floats) */
    /* Fills packed B and its column sums one panel pair (32 columns) at a time, run in
     * parallel before the product; NULL when b and b_sum are ready. */
    void (*pack_pair)(const void *arg, int64_t pair, int8_t *dst, int32_t *sums);
    const void *pack_arg;
} qgemm;

typedef void (*qgemm_tile_fn)(const uint8_t *a, int64_t kp, const int8_t *b0,
                              const int8_t *b1, uint32_t acc[QGEMM_MR][QGEMM_NR]);

/* -- micro-kernels ------------------------------------------------------------------ */

static void qgemm_tile_generic(const uint8_t *a, int64_t kp, const int8_t *b0,
                               const int8_t *b1, uint32_t acc[QGEMM_MR][QGEMM_NR]) {
    memset(acc, 0, sizeof(uint32_t) * QGEMM_MR * QGEMM_NR);
    for (int64_t q = 0; q < kp; q += 4) {
        const int8_t *panel[2] = {b0 + q * QGEMM_PANEL, b1 + q * QGEMM_PANEL};
        for (int i = 0; i < QGEMM_MR; i++) {
            const uint8_t *ar = a + i * kp + q;
            for (int j = 0; j < QGEMM_NR; j++) {
                const int8_t *bc = panel[j / QGEMM_PANEL] + (j % QGEMM_PANEL) * 4;
                int32_t dot = ar[0] * bc[0] + ar[1] * bc[1] + ar[2] * bc[2] + ar[3] * bc[3];
                acc[i][j] += (uint32_t)dot;
            }
        }
    }
}

#ifdef QGEMM_HAVE_VNNI
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void qgemm_tile_vnni(const uint8_t *a, int64_t kp, const int8_t *b0, const int8_t *b1,
                            uint32_t acc[QGEMM_MR][QGEMM_NR]) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00;
    __m512i c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    for (int64_t q = 0; q < kp; q += 4) {
        __m512i v0 = _mm512_loadu_si512((const void *)(b0 + q * QGEMM_PANEL));
        __m512i v1 = _mm512_loadu_si512((const void *)(b1 + q * QGEMM_PANEL));
        int32_t w0, w1, w2, w3;
        memcpy(&w0, a + q, 4);
        memcpy(&w1, a + kp + q, 4);
        memcpy(&w2, a + 2 * kp + q, 4);
        memcpy(&w3, a + 3 * kp + q, 4);
        __m512i a0 = _mm512_set1_epi32(w0), a1 = _mm512_set1_epi32(w1);
        __m512i a2 = _mm512_set1_epi32(w2), a3 = _mm512_set1_epi32(w3);
        c00 = _mm512_dpbusd_epi32(c00, a0, v0);
        c01 = _mm512_dpbusd_epi32(c01, a0, v1);
        c10 = _mm512_dpbusd_epi32(c10, a1, v0);
        c11 = _mm512_dpbusd_epi32(c11, a1, v1);
        c20 = _mm512_dpbusd_epi32(c20, a2, v0);
        c21 = _mm512_dpbusd_epi32(c21, a2, v1);
        c30 = _mm512_dpbusd_epi32(c30, a3, v0);
        c31 = _mm512_dpbusd_epi32(c31, a3, v1);
    }
    _mm512_storeu_si512((void *)&acc[0][0], c00);
    _mm512_storeu_si512((void *)&acc[0][16], c01);
    _mm512_storeu_si512((void *)&acc[1][0], c10);
    _mm512_storeu_si512((void *)&acc[1][16], c11);
    _mm512_storeu_si512((void *)&acc[2][0], c20);
    _mm512_storeu_si512((void *)&acc[2][16], c21);
    _mm512_storeu_si512((void *)&acc[3][0], c30);
    _mm512_storeu_si512((void *)&acc[3][16], c31);
}
#endif

static qgemm_tile_fn qgemm_tile_chosen = qgemm_tile_generic;
static pthread_once_t qgemm_once = PTHREAD_ONCE_INIT;

static void qgemm_choose(void) {
#ifdef QGEMM_HAVE_VNNI
    if (ge_simd_choose("GE_HUB_QGEMM_KERNEL") == GE_SIMD_AVX512
        && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni")) {
        qgemm_tile_chosen = qgemm_tile_vnni;
    }
#endif
}

static qgemm_tile_fn qgemm_tile(void) {
    pthread_once(&qgemm_once, qgemm_choose);
    return qgemm_tile_chosen;
}

/* -- packing ------------------------------------------------------------------------ */

/* Bytes of packed A and B for these sizes (what the packers reserve as scratch). */
static int64_t qgemm_kp(int64_t k) { return (k + 3) / 4 * 4; }
static int64_t qgemm_panels(int64_t n) {
    return (n + QGEMM_NR - 1) / QGEMM_NR * 2;
}

/* Rows [0, m) of A (row r at src + r * ld, `k` bytes, int8 when `is_signed`) into packed
 * A, with their sums. */
static void qgemm_pack_a(const void *src, int64_t ld, int is_signed, int64_t m, int64_t k,
                         int64_t kp, uint8_t *dst, int32_t *sums) {
    int64_t mp = (m + QGEMM_MR - 1) / QGEMM_MR * QGEMM_MR;
    uint8_t flip = is_signed ? 0x80 : 0;
    for (int64_t r = 0; r < mp; r++) {
        uint8_t *out = dst + r * kp;
        if (r >= m) {
            memset(out, 0, (size_t)kp);
            continue;
        }
        const uint8_t *in = (const uint8_t *)src + r * ld;
        uint32_t sum = 0;
        for (int64_t i = 0; i < k; i++) {
            out[i] = in[i] ^ flip;
            sum += out[i];
        }
        memset(out + k, 0, (size_t)(kp - k));
        sums[r] = (int32_t)sum;
    }
}

/* One group of 4 k's of packed B from 4 rows of n bytes (NULL: a row past k, zeros),
 * flipped by `flip`, columns padded with zeros up to panels * 16; adds each column's
 * 4 values to sums[j]. */
static void qgemm_interleave(const uint8_t *const rows[4], uint8_t flip, int64_t n,
                             int64_t panels, int64_t kp, int64_t group, int8_t *dst,
                             int32_t *sums) {
    static const uint8_t zeros[QGEMM_PANEL] = {0};
    for (int64_t p = 0; p < panels; p++) {
        int8_t *out = dst + p * kp * QGEMM_PANEL + group * 64;
        int64_t first = p * QGEMM_PANEL;
        int64_t width = n - first < QGEMM_PANEL ? (n - first > 0 ? n - first : 0) : QGEMM_PANEL;
        const uint8_t *r[4];
        uint8_t f[4];
        for (int t = 0; t < 4; t++) {
            r[t] = rows[t] != NULL && width > 0 ? rows[t] + first : zeros;
            f[t] = rows[t] != NULL ? flip : 0;
        }
        int64_t j = 0;
        for (; j < width; j++) {
            int8_t b0 = (int8_t)(r[0][j] ^ f[0]), b1 = (int8_t)(r[1][j] ^ f[1]);
            int8_t b2 = (int8_t)(r[2][j] ^ f[2]), b3 = (int8_t)(r[3][j] ^ f[3]);
            out[j * 4] = b0;
            out[j * 4 + 1] = b1;
            out[j * 4 + 2] = b2;
            out[j * 4 + 3] = b3;
            sums[first + j] = (int32_t)((uint32_t)sums[first + j]
                                        + (uint32_t)(int32_t)(b0 + b1 + b2 + b3));
        }
        memset(out + j * 4, 0, (size_t)(QGEMM_PANEL - j) * 4);
    }
}

/* Packs columns [32 pair, 32 pair + 32) of B [k][n] (row stride ld bytes). */
typedef struct {
    const uint8_t *b;
    int64_t ld, k, n, kp;
    uint8_t flip;
} qgemm_dense_b;

static void qgemm_pack_dense_pair(const void *arg, int64_t pair, int8_t *dst, int32_t *sums) {
    const qgemm_dense_b *d = (const qgemm_dense_b *)arg;
    int64_t first = pair * QGEMM_NR;
    int64_t width = d->n - first < QGEMM_NR ? d->n - first : QGEMM_NR;
    memset(sums, 0, sizeof(int32_t) * QGEMM_NR);
    for (int64_t g = 0; g < d->kp / 4; g++) {
        const uint8_t *rows[4];
        for (int t = 0; t < 4; t++) {
            int64_t i = g * 4 + t;
            rows[t] = i < d->k ? d->b + i * d->ld + first : NULL;
        }
        qgemm_interleave(rows, d->flip, width, 2, d->kp, g, dst, sums);
    }
}

/* A float16 value (IEEE binary16 bits) as a float, exactly. */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f;
    uint32_t mantissa = h & 0x3ff, bits;
    if (exponent == 0) {  /* zero or subnormal: mantissa * 2**-24 */
        float v = (float)mantissa * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exponent == 31) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A float rounded to the nearest float16 (ties to even), returned as a float: what NumPy
 * does after each float16 operation, which it computes in float32. */
static float round_to_half(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    uint32_t sign = bits & 0x80000000u, magnitude = bits ^ sign;
    uint16_t h;
    if (magnitude >= 0x47800000u) {  /* 2**16 and beyond, inf, NaN */
        h = magnitude > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (magnitude < 0x38800000u) {  /* below 2**-14: a float16 subnormal */
        float f, magic = 0.5f;  /* adding 0.5 rounds at 2**-24, the subnormal step */
        memcpy(&f, &magnitude, sizeof f);
        f += magic;
        uint32_t rounded, magic_bits;
        memcpy(&rounded, &f, sizeof rounded);
        memcpy(&magic_bits, &magic, sizeof magic_bits);
        h = (uint16_t)(rounded - magic_bits);
    } else {
        uint32_t odd = (magnitude >> 13) & 1;
        magnitude += 0xc8000fffu + odd;  /* rebias the exponent, round half to even */
        h = (uint16_t)(magnitude >> 13);
    }
    return half_to_float((uint16_t)(h | (sign >> 16)));
}

/* -- the product -------------------------------------------------------------------- */

/*
 * Requantizes one row of a tile: q = clamp(round_half_even(v * multiplier) + zero).
 * Branch-free so that it vectorizes (NN_VECTORIZED): NaN (inf * 0 in the multiplier)
 * counts as 0, the product is clamped far past any 8-bit result (which changes no
 * result) so that adding and subtracting 1.5 * 2**52 rounds it half to even in the
 * default rounding mode, exactly as nearbyint does.
 */
NN_VECTORIZED static void qgemm_requantize(const int32_t *v, const float *multiplier,
                                           int64_t n, double zero, double lo, double hi,
                                           int32_t *q) {
    const double magic = 6755399441055744.0;
    for (int64_t j = 0; j < n; j++) {
        double r = (double)v[j] * (double)multiplier[j];
        r = r == r ? r : 0.0;
        r = r < -1e9 ? -1e9 : r;
        r = r > 1e9 ? 1e9 : r;
        r = ((r + magic) - magic) + zero;
        r = r < lo ? lo : r;
        r = r > hi ? hi : r;
        q[j] = (int32_t)r;
    }
}

static void qgemm_store(const qgemm *g, int64_t m0, int64_t n0,
                        uint32_t acc[QGEMM_MR][QGEMM_NR]) {
    int64_t rows = g->m - m0 < QGEMM_MR ? g->m - m0 : QGEMM_MR;
    int64_t cols = g->n - n0 < QGEMM_NR ? g->n - n0 : QGEMM_NR;
    uint32_t k = (uint32_t)g->k;
    const uint32_t *b_sum = (const uint32_t *)g->b_sum + n0;
    const uint32_t *b_zero = (const uint32_t *)g->b_zero + n0;
    double lo = g->out_dtype == GE_UINT8 ? 0.0 : -128.0;
    double hi = g->out_dtype == GE_UINT8 ? 255.0 : 127.0;
    for (int64_t i = 0; i < rows; i++) {
        int64_t r = m0 + i;
        uint32_t za = (uint32_t)g->a_zero[r], asum = (uint32_t)g->a_sum[r];
        uint32_t bias = g->bias != NULL ? (uint32_t)g->bias[r] : 0;
        int32_t v[QGEMM_NR];
        for (int64_t j = 0; j < cols; j++) {
            v[j] = (int32_t)(acc[i][j] - b_zero[j] * asum - za * b_sum[j] + k * za * b_zero[j]
                             + bias);
        }
        if (g->out_dtype == GE_INT32) {
            memcpy((int32_t *)g->y + r * g->ldy + n0, v, sizeof(int32_t) * (size_t)cols);
            continue;
        }
        /* the multiplier as the reference forms it: (row scale * column scale) / y_scale */
        float multiplier[QGEMM_NR];
        for (int64_t j = 0; j < cols; j++) {
            multiplier[j] = (g->row_scale[r] * g->col_scale[g->col_uniform ? n0 : n0 + j])
                            / g->y_scale;
        }
        if (g->half_scales) {  /* float16 scales: each operation rounds to float16 */
            for (int64_t j = 0; j < cols; j++) {
                float product = round_to_half(g->row_scale[r]
                                              * g->col_scale[g->col_uniform ? n0 : n0 + j]);
                multiplier[j] = round_to_half(product / g->y_scale);
            }
        }
        int32_t q[QGEMM_NR];
        qgemm_requantize(v, multiplier, cols, (double)g->y_zero, lo, hi, q);
        if (g->out_dtype == GE_UINT8) {
            uint8_t *out = (uint8_t *)g->y + r * g->ldy + n0;
            for (int64_t j = 0; j < cols; j++) {
                out[j] = (uint8_t)q[j];
            }
        } else {
            int8_t *out = (int8_t *)g->y + r * g->ldy + n0;
            for (int64_t j = 0; j < cols; j++) {
                out[j] = (int8_t)q[j];
            }
        }
    }
}

typedef struct {
    const qgemm *g;
    qgemm_tile_fn tile;
    int64_t m_tiles;
} qgemm_job;

static void qgemm_pack_tasks(void *arg, int64_t begin, int64_t end) {
    const qgemm *g = (const qgemm *)arg;
    for (int64_t pair = begin; pair < end; pair++) {
        g->pack_pair(g->pack_arg, pair, (int8_t *)g->b + 2 * pair * g->kp * QGEMM_PANEL,
                     (int32_t *)g->b_sum + pair * QGEMM_NR);
    }
}

static void qgemm_tasks(void *arg, int64_t begin, int64_t end) {
    const qgemm_job *job = (const qgemm_job *)arg;
    const qgemm *g = job->g;
    uint32_t acc[QGEMM_MR][QGEMM_NR];
    for (int64_t t = begin; t < end; t++) {
        int64_t pair = t / job->m_tiles, mt = t % job->m_tiles;
        const int8_t *b0 = g->b + 2 * pair * g->kp * QGEMM_PANEL;
        job->tile(g->a + mt * QGEMM_MR * g->kp, g->kp, b0, b0 + g->kp * QGEMM_PANEL, acc);
        qgemm_store(g, mt * QGEMM_MR, pair * QGEMM_NR, acc);
    }
}

static void qgemm_run(ge_context *ctx, const qgemm *g) {
    qgemm_job job = {g, qgemm_tile(), (g->m + QGEMM_MR - 1) / QGEMM_MR};
    int64_t tasks = job.m_tiles * (g->panels / 2);
    int64_t per_task = QGEMM_MR * QGEMM_NR * (g->kp > 0 ? g->kp : 1);
    int64_t grain = QGEMM_GRAIN_MACS / per_task;
    if (g->pack_pair != NULL && g->panels > 0) {
        int64_t pack_grain = QGEMM_GRAIN_MACS / (QGEMM_NR * 16 * (g->kp > 0 ? g->kp : 1));
        ctx->parallel_for(ctx, g->panels / 2, pack_grain > 0 ? pack_grain : 1,
                          qgemm_pack_tasks, (void *)g);
    }
    if (tasks > 0) {
        ctx->parallel_for(ctx, tasks, grain > 0 ? grain : 1, qgemm_tasks, &job);
    }
}

/* -- shared checks ------------------------------------------------------------------ */

static int is_8bit(int32_t dtype) { return dtype == GE_UINT8 || dtype == GE_INT8; }

/* One 8-bit value as an int32 shifted like its operand (A: to unsigned, B: to signed). */
static int32_t shifted(const ge_tensor *t, int64_t i, int to_unsigned) {
    if (t == NULL || t->data == NULL) {
        return to_unsigned ? 0 : 0;
    }
    int32_t v = t->dtype == GE_UINT8 ? ((const uint8_t *)t->data)[i]
                                     : ((const int8_t *)t->data)[i];
    if (to_unsigned) {
        return t->dtype == GE_INT8 ? v + 128 : v;
    }
    return t->dtype == GE_UINT8 ? v - 128 : v;
}

/* A zero point (or an absent one, shifted 0) checked to match its operand. */
static int zero_ok(const ge_tensor *zero, int32_t operand_dtype, int64_t count) {
    if (zero == NULL || zero->data == NULL) {
        return 1;
    }
    return zero->dtype == operand_dtype && (zero->numel == 1 || zero->numel == count);
}

static int32_t zero_for(const ge_tensor *zero, int32_t operand_dtype, int64_t i,
                        int to_unsigned) {
    if (zero == NULL || zero->data == NULL) {  /* 0 in the operand's own dtype */
        if (to_unsigned) {
            return operand_dtype == GE_INT8 ? 128 : 0;
        }
        return operand_dtype == GE_UINT8 ? -128 : 0;
    }
    return shifted(zero, zero->numel == 1 ? 0 : i, to_unsigned);
}

static float scale_at(const ge_tensor *scale, int64_t i) {
    int64_t at = scale->numel == 1 ? 0 : i;
    if (scale->dtype == GE_FLOAT16) {
        return half_to_float(((const uint16_t *)scale->data)[at]);
    }
    return ((const float *)scale->data)[at];
}

/* Scratch carved in 64-byte pieces. */
static void *carve(char **at, int64_t bytes) {
    void *p = *at;
    *at += (bytes + 63) / 64 * 64;
    return p;
}

/* -- MatMulInteger, QLinearMatMul ---------------------------------------------------- */

typedef struct {
    int64_t nb, batch[GE_MAX_RANK], a_stride[GE_MAX_RANK], b_stride[GE_MAX_RANK];
    int64_t m, n, k, a_rows, b_cols;
} qmatmul_blob;

static int qmatmul_read(const void *attrs, size_t attrs_size, qmatmul_blob *r) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    r->nb = ge_blob_int_in(&blob, 0, GE_MAX_RANK);
    ge_blob_ints_capped(&blob, r->batch, r->nb, GE_MAX_RANK);
    ge_blob_ints_capped(&blob, r->a_stride, r->nb, GE_MAX_RANK);
    ge_blob_ints_capped(&blob, r->b_stride, r->nb, GE_MAX_RANK);
    r->m = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    r->n = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    r->k = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    r->a_rows = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    r->b_cols = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    for (int64_t d = 0; blob.ok && d < r->nb; d++) {
        if (r->batch[d] < 0 || r->a_stride[d] < 0 || r->b_stride[d] < 0) {
            blob.ok = 0;
        }
    }
    return ge_blob_done(&blob) && (r->a_rows == 1 || r->m % r->a_rows == 0);
}

/* The scratch both matmul kernels need (the packer computes the same). */
static int64_t qmatmul_scratch(const qmatmul_blob *r) {
    int64_t kp = qgemm_kp(r->k), panels = qgemm_panels(r->n);
    int64_t mp = (r->m + QGEMM_MR - 1) / QGEMM_MR * QGEMM_MR;
    int64_t bytes = 0;
    int64_t parts[8] = {mp * kp, panels * kp * QGEMM_PANEL, 4 * mp, 4 * mp,
                        4 * panels * QGEMM_PANEL, 4 * r->n, 4 * mp, 4 * r->n};
    for (int i = 0; i < 8; i++) {
        bytes += (parts[i] + 63) / 64 * 64;
    }
    return bytes;
}

static int qmatmul(ge_context *ctx, const char *name, const ge_tensor *a,
                   const ge_tensor *a_zero, const ge_tensor *a_scale, const ge_tensor *b,
                   const ge_tensor *b_zero, const ge_tensor *b_scale, const ge_tensor *y_scale,
                   const ge_tensor *y_zero, const ge_tensor *y, const void *attrs,
                   size_t attrs_size) {
    qmatmul_blob r;
    if (!qmatmul_read(attrs, attrs_size, &r)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", name, attrs_size);
    }
    int64_t batches = 1, a_mats = 1, b_mats = 1;
    for (int64_t d = 0; d < r.nb; d++) {
        batches *= r.batch[d];
        a_mats += (r.batch[d] - 1) * r.a_stride[d];
        b_mats += (r.batch[d] - 1) * r.b_stride[d];
    }
    int requant = y_scale != NULL;
    int32_t out_dtype = requant ? y_zero->dtype : GE_INT32;
    if (!is_8bit(a->dtype) || !is_8bit(b->dtype) || y->dtype != out_dtype
        || (requant && !is_8bit(out_dtype))) {
        return ctx->set_error(ctx, "%s: operands must be uint8 or int8 (got dtypes %d and %d) "
                              "and the output %s", name, (int)a->dtype, (int)b->dtype,
                              requant ? "y_zero_point's dtype" : "int32");
    }
    if (batches == 0 || r.m == 0 || r.n == 0) {
        return 0;
    }
    if (a->numel != a_mats * r.m * r.k || b->numel != b_mats * r.k * r.n
        || y->numel != batches * r.m * r.n) {
        return ctx->set_error(ctx, "%s: tensor sizes (A %lld, B %lld, Y %lld elements) do not "
                              "match the blob", name, (long long)a->numel, (long long)b->numel,
                              (long long)y->numel);
    }
    if (!zero_ok(a_zero, a->dtype, r.a_rows) || !zero_ok(b_zero, b->dtype, r.b_cols)
        || (a_zero != NULL && a_zero->data != NULL && a_zero->numel != 1
            && a_zero->numel != r.a_rows)
        || (requant && ((a_scale->dtype != GE_FLOAT32 && a_scale->dtype != GE_FLOAT16)
                        || b_scale->dtype != a_scale->dtype
                        || y_scale->dtype != a_scale->dtype || y_scale->numel != 1
                        || y_zero->numel != 1
                        || (a_scale->numel != 1 && a_scale->numel != r.a_rows)
                        || (b_scale->numel != 1 && b_scale->numel != r.b_cols)))) {
        return ctx->set_error(ctx, "%s: a zero point or scale has the wrong dtype or size", name);
    }
    if (ctx->scratch_bytes < (size_t)qmatmul_scratch(&r)) {
        return ctx->set_error(ctx, "%s: scratch of %zu bytes, needs %lld", name,
                              ctx->scratch_bytes, (long long)qmatmul_scratch(&r));
    }
    qgemm g;
    memset(&g, 0, sizeof g);
    g.m = r.m;
    g.n = r.n;
    g.k = r.k;
    g.kp = qgemm_kp(r.k);
    g.panels = qgemm_panels(r.n);
    int64_t mp = (r.m + QGEMM_MR - 1) / QGEMM_MR * QGEMM_MR;
    char *at = (char *)ctx->scratch;
    uint8_t *pa = carve(&at, mp * g.kp);
    int8_t *pb = carve(&at, g.panels * g.kp * QGEMM_PANEL);
    int32_t *a_sum = carve(&at, 4 * mp), *za = carve(&at, 4 * mp);
    int32_t *b_sum = carve(&at, 4 * g.panels * QGEMM_PANEL), *zb = carve(&at, 4 * r.n);
    float *rs = carve(&at, 4 * mp), *cs = carve(&at, 4 * r.n);
    for (int64_t i = 0; i < r.m; i++) {
        za[i] = zero_for(a_zero, a->dtype, i % r.a_rows, 1);
        rs[i] = requant ? scale_at(a_scale, i % r.a_rows) : 0.0f;
    }
    for (int64_t j = 0; j < r.n; j++) {
        zb[j] = zero_for(b_zero, b->dtype, j % r.b_cols, 0);
        cs[j] = requant ? scale_at(b_scale, j) : 0.0f;
    }
    g.a = pa;
    g.a_sum = a_sum;
    g.a_zero = za;
    g.b = pb;
    g.b_sum = b_sum;
    g.b_zero = zb;
    g.out_dtype = out_dtype;
    g.ldy = r.n;
    g.row_scale = rs;
    g.col_scale = cs;
    g.col_uniform = !requant || b_scale->numel == 1;
    if (requant) {
        g.y_scale = scale_at(y_scale, 0);
        g.half_scales = y_scale->dtype == GE_FLOAT16;
        g.y_zero = y_zero->dtype == GE_UINT8 ? ((const uint8_t *)y_zero->data)[0]
                                              : ((const int8_t *)y_zero->data)[0];
    }
    int64_t last_a = -1, last_b = -1;
    qgemm_dense_b dense = {NULL, r.n, r.k, r.n, g.kp, b->dtype == GE_INT8 ? 0 : 0x80};
    g.pack_arg = &dense;
    size_t out_size = ge_dtype_itemsize(out_dtype);
    for (int64_t bi = 0; bi < batches; bi++) {
        int64_t rest = bi, ai = 0, bj = 0;
        for (int64_t d = r.nb - 1; d >= 0; d--) {
            int64_t idx = rest % r.batch[d];
            rest /= r.batch[d];
            ai += idx * r.a_stride[d];
            bj += idx * r.b_stride[d];
        }
        if (ai != last_a) {
            qgemm_pack_a((const uint8_t *)a->data + ai * r.m * r.k, r.k, a->dtype == GE_INT8,
                         r.m, r.k, g.kp, pa, a_sum);
            last_a = ai;
        }
        dense.b = (const uint8_t *)b->data + bj * r.k * r.n;
        g.pack_pair = bj != last_b ? qgemm_pack_dense_pair : NULL;  /* else packed already */
        last_b = bj;
        g.y = (char *)y->data + bi * r.m * r.n * (int64_t)out_size;
        qgemm_run(ctx, &g);
    }
    return 0;
}

static const ge_tensor *optional_input(const ge_tensor *inputs, int32_t n, int32_t i) {
    return (i < n && inputs[i].data != NULL) ? &inputs[i] : NULL;
}

GE_KERNEL(ge_matmul_integer) {
    if (n_inputs < 2 || n_inputs > 4 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_matmul_integer: expected 2 to 4 inputs and 1 output, "
                              "got %d and %d", (int)n_inputs, (int)n_outputs);
    }
    return qmatmul(ctx, "ge_matmul_integer", &inputs[0], optional_input(inputs, n_inputs, 2),
                   NULL, &inputs[1], optional_input(inputs, n_inputs, 3), NULL, NULL, NULL,
                   &outputs[0], attrs, attrs_size);
}

GE_KERNEL(ge_qlinear_matmul) {
    if (n_inputs != 8 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_qlinear_matmul: expected 8 inputs and 1 output, got "
                              "%d and %d", (int)n_inputs, (int)n_outputs);
    }
    return qmatmul(ctx, "ge_qlinear_matmul", &inputs[0], &inputs[2], &inputs[1], &inputs[3],
                   &inputs[5], &inputs[4], &inputs[6], &inputs[7], &outputs[0], attrs,
                   attrs_size);
}

/* -- ConvInteger, QLinearConv -------------------------------------------------------- */

typedef struct {
    int64_t n, c, m, group, has_bias, w_per_channel, block;
    nn_window w;
} qconv_blob;

static int qconv_read(const void *attrs, size_t attrs_size, qconv_blob *r) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    r->n = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    r->c = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    r->m = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    r->group = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    r->has_bias = ge_blob_int_in(&blob, 0, 1);
    r->w_per_channel = ge_blob_int_in(&blob, 0, 1);
    r->block = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    nn_blob_window(&blob, &r->w, 0);
    return ge_blob_done(&blob) && r->c % r->group == 0 && r->m % r->group == 0;
}

static int64_t qconv_scratch(const qconv_blob *r) {
    int64_t cg = r->c / r->group, mg = r->m / r->group;
    int64_t k = cg * nn_window_taps(&r->w), kp = qgemm_kp(k);
    int64_t mp = (mg + QGEMM_MR - 1) / QGEMM_MR * QGEMM_MR;
    int64_t panels = qgemm_panels(r->block);
    int64_t parts[8] = {r->group * mp * kp, panels * kp * QGEMM_PANEL, 4 * r->group * mp,
                        4 * r->m, 4 * panels * QGEMM_PANEL, 4 * r->block, 4 * r->m,
                        4 * r->block};
    int64_t bytes = 0;
    for (int i = 0; i < 8; i++) {
        bytes += (parts[i] + 63) / 64 * 64;
    }
    return bytes;
}

/* The patches of output positions [p0, p0 + np) of one image's group (cg channels at
 * `x`): packed B's row (ci, tap), column position; a tap outside the image reads the raw
 * zero point byte `pad`. Packed one panel pair at a time (qgemm's pack_pair). */
typedef struct {
    const uint8_t *x;
    const nn_window *w;
    int64_t cg, k, kp, p0, np;
    uint8_t pad, flip;
} qconv_patches;

/* Taps [*lo, *hi) of a run of `len` outputs along the innermost axis whose input index
 * start + t * stride lands in [0, size). */
static void qconv_run_range(int64_t start, int64_t stride, int64_t size, int64_t len,
                            int64_t *lo, int64_t *hi) {
    int64_t first, last;
    if (stride == 1) {  /* no division: this runs once per row and run of the patches */
        first = start >= 0 ? 0 : -start;
        last = start >= size ? 0 : size - start;
    } else {
        first = start >= 0 ? 0 : (-start + stride - 1) / stride;
        last = start >= size ? 0 : (size - start + stride - 1) / stride;
    }
    *lo = first < len ? first : len;
    *hi = last < len ? last : len;
    *hi = *hi > *lo ? *hi : *lo;
}

static void qconv_pack_pair(const void *arg, int64_t pair, int8_t *dst, int32_t *sums) {
    const qconv_patches *c = (const qconv_patches *)arg;
    const nn_window *w = c->w;
    int64_t first = pair * QGEMM_NR;
    int64_t width = c->np - first < QGEMM_NR ? c->np - first : QGEMM_NR;
    int64_t in_size = nn_window_in_size(w);
    /* The pair's positions as runs along the innermost output axis. */
    int64_t seg_at[QGEMM_NR], seg_len[QGEMM_NR], seg_o0[QGEMM_NR], seg_o1[QGEMM_NR];
    int64_t seg_o2[QGEMM_NR];
    int segs = 0;
    for (int64_t j = 0; j < width; segs++) {
        int64_t p = c->p0 + first + j;
        seg_o2[segs] = p % w->out[2];
        seg_o1[segs] = (p / w->out[2]) % w->out[1];
        seg_o0[segs] = p / (w->out[2] * w->out[1]);
        seg_at[segs] = j;
        seg_len[segs] = w->out[2] - seg_o2[segs] < width - j ? w->out[2] - seg_o2[segs]
                                                             : width - j;
        j += seg_len[segs];
    }
    memset(sums, 0, sizeof(int32_t) * QGEMM_NR);
    uint8_t rows[4][QGEMM_NR];
    int64_t ci = 0, k0 = 0, k1 = 0, k2 = 0;  /* (ci, k0, k1, k2) of the next row */
    for (int64_t g = 0; g < c->kp / 4; g++) {
        const uint8_t *ready[4];
        for (int t = 0; t < 4; t++) {
            if (g * 4 + t >= c->k) {
                ready[t] = NULL;
                continue;
            }
            const uint8_t *plane = c->x + ci * in_size;
            for (int sg = 0; sg < segs; sg++) {
                uint8_t *out = rows[t] + seg_at[sg];
                int64_t len = seg_len[sg];
                int64_t i0 = seg_o0[sg] * w->stride[0] - w->pad[0] + k0 * w->dil[0];
                int64_t i1 = seg_o1[sg] * w->stride[1] - w->pad[1] + k1 * w->dil[1];
                /* Plain loops over at most 32 bytes: memset/memcpy calls would cost more. */
                if (i0 < 0 || i0 >= w->in[0] || i1 < 0 || i1 >= w->in[1]) {
                    for (int64_t u = 0; u < len; u++) {
                        out[u] = c->pad;
                    }
                    continue;
                }
                const uint8_t *line = plane + (i0 * w->in[1] + i1) * w->in[2];
                int64_t start = seg_o2[sg] * w->stride[2] - w->pad[2] + k2 * w->dil[2];
                int64_t lo, hi;
                qconv_run_range(start, w->stride[2], w->in[2], len, &lo, &hi);
                for (int64_t u = 0; u < lo; u++) {
                    out[u] = c->pad;
                }
                if (w->stride[2] == 1) {
                    const uint8_t *from = line + start;
                    for (int64_t u = lo; u < hi; u++) {
                        out[u] = from[u];
                    }
                } else {
                    const int64_t stride = w->stride[2];
                    for (int64_t u = lo; u < hi; u++) {
                        out[u] = line[start + u * stride];
                    }
                }
                for (int64_t u = hi; u < len; u++) {
                    out[u] = c->pad;
                }
            }
            ready[t] = rows[t];
            if (++k2 == w->k[2]) {
                k2 = 0;
                if (++k1 == w->k[1]) {
                    k1 = 0;
                    if (++k0 == w->k[0]) {
                        k0 = 0;
                        ci++;
                    }
                }
            }
        }
        qgemm_interleave(ready, c->flip, width, 2, c->kp, g, dst, sums);
    }
}

static int qconv(ge_context *ctx, const char *name, const ge_tensor *x, const ge_tensor *x_zero,
                 const ge_tensor *x_scale, const ge_tensor *wt, const ge_tensor *w_zero,
                 const ge_tensor *w_scale, const ge_tensor *y_scale, const ge_tensor *y_zero,
                 const ge_tensor *bias, const ge_tensor *y, const void *attrs,
                 size_t attrs_size) {
    qconv_blob r;
    if (!qconv_read(attrs, attrs_size, &r)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", name, attrs_size);
    }
    int requant = y_scale != NULL;
    int32_t out_dtype = requant ? y_zero->dtype : GE_INT32;
    int64_t cg = r.c / r.group, mg = r.m / r.group, taps = nn_window_taps(&r.w);
    int64_t k = cg * taps, in_size = nn_window_in_size(&r.w), out_size = nn_window_out_size(&r.w);
    if (!is_8bit(x->dtype) || !is_8bit(wt->dtype) || y->dtype != out_dtype
        || (requant && !is_8bit(out_dtype))) {
        return ctx->set_error(ctx, "%s: x and w must be uint8 or int8 (got dtypes %d and %d) "
                              "and the output %s", name, (int)x->dtype, (int)wt->dtype,
                              requant ? "y_zero_point's dtype" : "int32");
    }
    if (x->numel != r.n * r.c * in_size || wt->numel != r.m * k
        || y->numel != r.n * r.m * out_size) {
        return ctx->set_error(ctx, "%s: tensor sizes (x %lld, w %lld, y %lld elements) do not "
                              "match the blob", name, (long long)x->numel,
                              (long long)wt->numel, (long long)y->numel);
    }
    if (!zero_ok(x_zero, x->dtype, 1) || !zero_ok(w_zero, wt->dtype, r.m)
        || (r.has_bias && (bias == NULL || bias->dtype != GE_INT32 || bias->numel != r.m))
        || (requant && (x_scale->dtype != GE_FLOAT32 || x_scale->numel != 1
                        || w_scale->dtype != GE_FLOAT32
                        || (w_scale->numel != 1 && w_scale->numel != r.m)
                        || y_scale->dtype != GE_FLOAT32 || y_scale->numel != 1
                        || y_zero->numel != 1))) {
        return ctx->set_error(ctx, "%s: a zero point, scale or bias has the wrong dtype or size",
                              name);
    }
    if (ctx->scratch_bytes < (size_t)qconv_scratch(&r)) {
        return ctx->set_error(ctx, "%s: scratch of %zu bytes, needs %lld", name,
                              ctx->scratch_bytes, (long long)qconv_scratch(&r));
    }
    if (r.n == 0 || out_size == 0) {
        return 0;
    }
    int64_t kp = qgemm_kp(k), mp = (mg + QGEMM_MR - 1) / QGEMM_MR * QGEMM_MR;
    int64_t panels = qgemm_panels(r.block);
    char *at = (char *)ctx->scratch;
    uint8_t *pa = carve(&at, r.group * mp * kp);
    int8_t *pb = carve(&at, panels * kp * QGEMM_PANEL);
    int32_t *a_sum = carve(&at, 4 * r.group * mp), *za = carve(&at, 4 * r.m);
    int32_t *b_sum = carve(&at, 4 * panels * QGEMM_PANEL), *zb = carve(&at, 4 * r.block);
    float *rs = carve(&at, 4 * r.m), *cs = carve(&at, 4 * r.block);
    for (int64_t g = 0; g < r.group; g++) {
        qgemm_pack_a((const uint8_t *)wt->data + g * mg * k, k, wt->dtype == GE_INT8, mg, k, kp,
                     pa + g * mp * kp, a_sum + g * mp);
    }
    for (int64_t i = 0; i < r.m; i++) {
        za[i] = zero_for(w_zero, wt->dtype, i, 1);
        rs[i] = requant ? scale_at(w_scale, i) : 0.0f;
    }
    int32_t x_zero_shifted = zero_for(x_zero, x->dtype, 0, 0);
    /* the zero point's own byte: what a tap outside the image reads */
    uint8_t x_zero_byte = (uint8_t)(x->dtype == GE_UINT8 ? x_zero_shifted + 128
                                                          : x_zero_shifted);
    float x_scale_value = requant ? ((const float *)x_scale->data)[0] : 0.0f;
    for (int64_t j = 0; j < r.block; j++) {
        zb[j] = x_zero_shifted;
        cs[j] = x_scale_value;
    }
    size_t out_item = ge_dtype_itemsize(out_dtype);
    for (int64_t image = 0; image < r.n; image++) {
        for (int64_t g = 0; g < r.group; g++) {
            const uint8_t *xg = (const uint8_t *)x->data + (image * r.c + g * cg) * in_size;
            for (int64_t p0 = 0; p0 < out_size; p0 += r.block) {
                int64_t np = out_size - p0 < r.block ? out_size - p0 : r.block;
                int64_t np_panels = qgemm_panels(np);
                qconv_patches patches = {xg, &r.w, cg, k, kp, p0, np, x_zero_byte,
                                         x->dtype == GE_INT8 ? 0 : 0x80};
                qgemm gm;
                memset(&gm, 0, sizeof gm);
                gm.m = mg;
                gm.n = np;
                gm.k = k;
                gm.kp = kp;
                gm.panels = np_panels;
                gm.a = pa + g * mp * kp;
                gm.a_sum = a_sum + g * mp;
                gm.a_zero = za + g * mg;
                gm.b = pb;
                gm.b_sum = b_sum;
                gm.b_zero = zb;
                gm.out_dtype = out_dtype;
                gm.y = (char *)y->data
                       + ((image * r.m + g * mg) * out_size + p0) * (int64_t)out_item;
                gm.ldy = out_size;
                gm.bias = r.has_bias ? (const int32_t *)bias->data + g * mg : NULL;
                gm.row_scale = rs + g * mg;
                gm.col_scale = cs;
                gm.col_uniform = 1;
                gm.pack_pair = qconv_pack_pair;
                gm.pack_arg = &patches;
                if (requant) {
                    gm.y_scale = ((const float *)y_scale->data)[0];
                    gm.y_zero = y_zero->dtype == GE_UINT8 ? ((const uint8_t *)y_zero->data)[0]
                                                          : ((const int8_t *)y_zero->data)[0];
                }
                qgemm_run(ctx, &gm);
            }
        }
    }
    return 0;
}

GE_KERNEL(ge_conv_integer) {
    if (n_inputs < 2 || n_inputs > 4 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_conv_integer: expected 2 to 4 inputs and 1 output, got "
                              "%d and %d", (int)n_inputs, (int)n_outputs);
    }
    return qconv(ctx, "ge_conv_integer", &inputs[0], optional_input(inputs, n_inputs, 2), NULL,
                 &inputs[1], optional_input(inputs, n_inputs, 3), NULL, NULL, NULL, NULL,
                 &outputs[0], attrs, attrs_size);
}

GE_KERNEL(ge_qlinear_conv) {
    if (n_inputs < 8 || n_inputs > 9 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_qlinear_conv: expected 8 or 9 inputs and 1 output, got "
                              "%d and %d", (int)n_inputs, (int)n_outputs);
    }
    return qconv(ctx, "ge_qlinear_conv", &inputs[0], &inputs[2], &inputs[1], &inputs[3],
                 &inputs[5], &inputs[4], &inputs[6], &inputs[7],
                 optional_input(inputs, n_inputs, 8), &outputs[0], attrs, attrs_size);
}
