/*
 * ge_nn_linear_f32: MatMul, Gemm and ge_hub.FusedMatMul whose weight is a constant 2-D
 * matrix (every Linear layer of a transformer or an MLP), in float32, with the weight laid
 * out once, at compile time, for the micro-kernels (ge_hub/kernels/nn.py, prepack_linear):
 *
 *     Y = activation(X @ W + bias + Z)
 *
 * X is rows x k (a MatMul's leading dims folded into rows), W k x n, bias n values (a
 * FusedMatMul's Bias, a Gemm's beta * C), Z rows x n (a FusedMatMul's residual). The bias,
 * the residual and a Relu or Clip are applied to each tile of Y in registers as it is
 * stored after its last k slice; the other activations over the tile's rows right after,
 * while they are in L1: no pass over Y of its own.
 *
 * Packed W (the layout the Python prepacker writes): k in slices of NN_PACK_KC (the last
 * shorter), each slice holding the ceil(n / NN_PACK_NR) panels of its kc rows of W one
 * after another, each panel kc x NN_PACK_NR (columns past n zero):
 *   slice at k0: w + k0 * panels * NR, its panel p at + p * kc * NR,
 *   panel[kk * NR + j] = W[k0 + kk][p * NR + j].
 * X is read in place (rows lda = k apart): a micro-kernel broadcasts X's values of up to
 * LMR rows and multiplies them by a slice of one or more panels, which stays in L1 while
 * every row block of the task streams past it.
 *
 * Blob (pack_linear): ints rows, n, k, has_bias, activation, has_residual; floats alpha,
 * beta (the activation's). Inputs: X, W (packed), Bias (n, may be omitted), Z (may be
 * omitted); output Y.
 *
 * Micro-kernels, picked once from the CPU (GE_HUB_GEMM_KERNEL=avx2|generic forces a lesser
 * one, as for the packed GEMM of nn_gemm_packed.c):
 *   avx512   up to 12 rows x 32 columns in 24 zmm accumulators (per k: two loads of W, one
 *            broadcast of X per row, two FMAs per row); 1 to 4 rows x 128 columns (four
 *            panels) for the short products of batch-1 layers, GEMV-like;
 *   avx2     each panel as two 16-column halves of up to 6 rows (12 ymm accumulators);
 *   generic  plain C over the same tiles.
 * Every k is added in ascending order, fused multiply-adds in the SIMD ones: results may
 * differ from the generic one and from the BLAS in the last bits. The avx512 tiles also
 * apply Gelu (erf form) in registers, by a cheaper formula than the standalone Gelu's
 * (gelu512: within 1e-7 |x| of it); the others run the standalone one over the stored
 * tile.
 *
 * W is cold in a whole model (BERT-base's 340 MB of weights stream from memory), so while a
 * block of W (one slice of a panel group) is in use, its row blocks prefetch the next one
 * into L2, each its own share of the lines spread over its k steps: a burst of prefetches
 * from one tile fills the line fill buffers and stalls the tile's own loads.
 *
 * X's rows k floats apart put every row of a tile at the same L1 set when k is a multiple
 * of 1024 (4 KB): BERT's down projection (k = 3072) ran at 89 GF/s where k = 3080 runs at
 * 99. Such an X (of more than LSHORT rows, deeper than a slice) is first copied into the
 * step's scratch, LIN_X_PAD floats more apart, when the packer gave it that scratch
 * (ge_hub/kernels/nn_linear.py: restride_bytes; a file planned without it runs X in place).
 *
 * Threads: the panels are cut into chunks, one or two per pool thread, when there are
 * enough of them; otherwise the rows are cut (in blocks of LMR). A task computes its
 * rectangle of Y slice by slice of k.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "conv_epilogue.h"
#include "ge_hub/internal/simd.h"
#include "nn.h"
#include "nn_common.h"
#include "nn_gemm_packed.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LIN_X86 1
#include "math_avx512.h"
#endif

#define NR NN_PACK_NR
#define KC NN_PACK_KC
#define LMR 12        /* the most rows a micro-kernel call covers */
#define LSHORT 4      /* products of at most this many rows take the wide, short tiles */
#define LWIDE 4       /* panels per short tile */
/* Products below this many multiply-adds run on the calling thread: waking the pool
 * costs microseconds, as much as a small product's whole time... */
#define LIN_MIN_PARALLEL (1 << 20)
/* ...except a product of at most LSHORT rows (a matrix-vector product: weight-bound)
 * whose weight is at least this many floats (256 KB): split over the pool whatever its
 * size, one task per thread, so that each core reads only its share of W and, as the
 * caller takes the first task and the worker the next, the same share at every call,
 * which then stays in that core's L2. The MLP bench model (784-256-256-10, batch 1; 1.07
 * MB of weights, more than one core's 1 MB L2 on Zen 4) at 2 threads: 19-22 us on one
 * core against 11-12 split (processes of their own, 20 x 200 calls each). */
#define LIN_SPLIT_WEIGHT (1 << 16)
/* How many blocks of W ahead a tile prefetches (lin_ahead). In BERT-base (weights cold,
 * from memory) prefetching one block ahead, spread over the row blocks, took the run from
 * 0.94 to 0.90 of ONNX Runtime's thread time; two or three ahead measured the same. */
#define LIN_AHEAD 1

/* One call of a micro-kernel: `rows` rows of X (from `a`, lda apart, at the slice's first
 * k) times `panels` panels of W's slice (from `b`, `pstride` apart), into Y at `c`. The
 * last panel holds `cols` valid columns (1..NR), earlier ones NR. */
typedef struct {
    const float *a;
    int64_t lda;
    const float *b;
    int64_t pstride, kc;
    float *c;
    int64_t ldc;
    int rows, panels, cols;
    int accumulate;      /* add to Y (a later k slice); otherwise start from zero */
    int last;            /* the last k slice: apply bias, residual and clamp on store */
    const float *bias;   /* at the tile's first column, or NULL */
    const float *z;      /* the residual at the tile, or NULL (ldc apart) */
    int clamp;
    float lo, hi;
    int gelu;            /* Gelu (erf form) on store: the avx512 tiles only */
    const char *next;    /* this tile's share of W's next block, to bring into L2, or NULL */
    int next_lines;      /* how many 64-byte lines of it */
    int next_gap;        /* k steps between two prefetches (0: two lines every k step) */
} lin_tile;

typedef void (*lin_tile_fn)(const lin_tile *t);

/* -- generic ------------------------------------------------------------------------------ */

static void tile_generic(const lin_tile *t) {
    for (int q = 0; q < t->panels; q++) {
        const int width = q == t->panels - 1 ? t->cols : NR;
        const float *b = t->b + q * t->pstride;
        for (int r = 0; r < t->rows; r++) {
            float acc[NR];
            float *c = t->c + r * t->ldc + q * NR;
            for (int j = 0; j < NR; j++) {
                acc[j] = t->accumulate && j < width ? c[j] : 0.0f;
            }
            const float *a = t->a + r * t->lda;
            for (int64_t kk = 0; kk < t->kc; kk++) {
                const float av = a[kk];
                const float *bk = b + kk * NR;
                for (int j = 0; j < NR; j++) {
                    acc[j] += av * bk[j];
                }
            }
            for (int j = 0; j < width; j++) {
                float v = acc[j];
                if (t->last) {
                    v += t->bias ? t->bias[q * NR + j] : 0.0f;
                    v += t->z ? t->z[r * t->ldc + q * NR + j] : 0.0f;
                    if (t->clamp) {
                        v = v < t->lo ? t->lo : v;
                        v = v > t->hi ? t->hi : v;
                    }
                }
                c[j] = v;
            }
        }
    }
}

#ifdef LIN_X86

/* -- avx512 -------------------------------------------------------------------------------- */

/* R rows x P panels: 2 * R * P accumulators, the loops unrolled (R, P constants). */
#define LIN512_BODY(R, P)                                                                     \
    __m512 acc[R][2 * P];                                                                     \
    __mmask16 mask[2 * P];                                                                    \
    for (int h = 0; h < 2 * P; h++) {                                                         \
        const int left = (h / 2 == P - 1 ? t->cols : NR) - (h % 2) * 16;                     \
        mask[h] = (__mmask16)(left >= 16 ? 0xFFFF : left > 0 ? (1u << left) - 1u : 0);       \
    }                                                                                         \
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {                                    \
        _Pragma("GCC unroll 8") for (int h = 0; h < 2 * P; h++) {                             \
            acc[r][h] = t->accumulate                                                         \
                            ? _mm512_maskz_loadu_ps(mask[h], t->c + r * t->ldc + h * 16)      \
                            : _mm512_setzero_ps();                                            \
        }                                                                                     \
    }                                                                                         \
    const float *a = t->a;                                                                    \
    const float *b = t->b;                                                                    \
    const char *next = t->next;                                                               \
    const char *next_end = next ? next + (int64_t)t->next_lines * 64 : NULL;                  \
    int countdown = 0;                                                                        \
    const int64_t lda = t->lda, ps = t->pstride;                                              \
    for (int64_t kk = 0; kk < t->kc; kk++) {                                                  \
        __m512 bv[2 * P];                                                                     \
        _Pragma("GCC unroll 8") for (int h = 0; h < 2 * P; h++) {                             \
            bv[h] = _mm512_loadu_ps(b + (h / 2) * ps + (h % 2) * 16);                         \
        }                                                                                     \
        _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {                                \
            const __m512 av = _mm512_set1_ps(a[r * lda]);                                     \
            _Pragma("GCC unroll 8") for (int h = 0; h < 2 * P; h++) {                         \
                acc[r][h] = _mm512_fmadd_ps(av, bv[h], acc[r][h]);                            \
            }                                                                                 \
        }                                                                                     \
        /* W streams from memory (a layer's weights are cold): the next block, spread over \
         * the row blocks and their k steps so that the line fill buffers never fill up */     \
        if (next < next_end && --countdown <= 0) {                                            \
            _mm_prefetch(next, _MM_HINT_T1);                                                  \
            if (t->next_gap == 0) {                                                           \
                _mm_prefetch(next + 64, _MM_HINT_T1);                                         \
                next += 64;                                                                   \
            }                                                                                 \
            next += 64;                                                                       \
            countdown = t->next_gap;                                                          \
        }                                                                                     \
        a += 1;                                                                               \
        b += NR;                                                                              \
    }                                                                                         \
    if (t->last) {                                                                            \
        _Pragma("GCC unroll 8") for (int h = 0; h < 2 * P; h++) {                             \
            const int64_t col = (h / 2) * NR + (h % 2) * 16;                                  \
            const __m512 bias = t->bias ? _mm512_maskz_loadu_ps(mask[h], t->bias + col)       \
                                        : _mm512_setzero_ps();                                \
            _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {                            \
                if (t->bias) {                                                                \
                    acc[r][h] = _mm512_add_ps(acc[r][h], bias);                               \
                }                                                                             \
                if (t->z) {                                                                   \
                    acc[r][h] = _mm512_add_ps(                                                \
                        acc[r][h], _mm512_maskz_loadu_ps(mask[h], t->z + r * t->ldc + col));  \
                }                                                                             \
                if (t->clamp) { /* NaN, the second operand, passes through both */           \
                    acc[r][h] = _mm512_min_ps(_mm512_set1_ps(t->hi),                          \
                                              _mm512_max_ps(_mm512_set1_ps(t->lo), acc[r][h])); \
                }                                                                             \
                if (t->gelu) {                                                                \
                    acc[r][h] = gelu512(acc[r][h]);                                           \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {                                    \
        _Pragma("GCC unroll 8") for (int h = 0; h < 2 * P; h++) {                             \
            _mm512_mask_storeu_ps(t->c + r * t->ldc + h * 16, mask[h], acc[r][h]);            \
        }                                                                                     \
    }

#define LIN512_FN(R, P)                                                                       \
    __attribute__((target("avx512f"))) static void tile512_##R##_##P(const lin_tile *t) {     \
        LIN512_BODY(R, P)                                                                     \
    }
LIN512_FN(1, 1) LIN512_FN(2, 1) LIN512_FN(3, 1) LIN512_FN(4, 1) LIN512_FN(5, 1)
LIN512_FN(6, 1) LIN512_FN(7, 1) LIN512_FN(8, 1) LIN512_FN(9, 1) LIN512_FN(10, 1)
LIN512_FN(11, 1) LIN512_FN(12, 1)
LIN512_FN(1, 4) LIN512_FN(2, 4) LIN512_FN(3, 4) LIN512_FN(4, 4)

static void tile_avx512(const lin_tile *t) {
    static const lin_tile_fn one[LMR] = {tile512_1_1, tile512_2_1, tile512_3_1, tile512_4_1,
                                         tile512_5_1, tile512_6_1, tile512_7_1, tile512_8_1,
                                         tile512_9_1, tile512_10_1, tile512_11_1,
                                         tile512_12_1};
    static const lin_tile_fn wide[LSHORT] = {tile512_1_4, tile512_2_4, tile512_3_4,
                                             tile512_4_4};
    if (t->panels == LWIDE && t->rows <= LSHORT) {
        wide[t->rows - 1](t);
        return;
    }
    lin_tile one_panel = *t;
    for (int q = 0; q < t->panels; q++) {
        one_panel.panels = 1;
        one_panel.cols = q == t->panels - 1 ? t->cols : NR;
        one_panel.b = t->b + q * t->pstride;
        one_panel.c = t->c + q * NR;
        one_panel.bias = t->bias ? t->bias + q * NR : NULL;
        one_panel.z = t->z ? t->z + q * NR : NULL;
        one[t->rows - 1](&one_panel);
    }
}

/* -- avx2 ---------------------------------------------------------------------------------- */

/* R rows (at most 6) x one 16-column half of a panel (`width` valid columns, 1..16): 2 * R
 * ymm accumulators. A half narrower than 16 goes through a stack copy. */
#define LIN256_BODY(R)                                                                        \
    float edge[R][16];                                                                        \
    float *c = t->c;                                                                          \
    int64_t ldc = t->ldc;                                                                     \
    if (width < 16) {                                                                         \
        for (int r = 0; r < R; r++) {                                                         \
            memset(edge[r], 0, sizeof edge[r]);                                               \
            if (t->accumulate) {                                                              \
                memcpy(edge[r], t->c + r * t->ldc, (size_t)width * sizeof(float));            \
            }                                                                                 \
        }                                                                                     \
        c = edge[0];                                                                          \
        ldc = 16;                                                                             \
    }                                                                                         \
    __m256 acc[R][2];                                                                         \
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                     \
        acc[r][0] = t->accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();       \
        acc[r][1] = t->accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();   \
    }                                                                                         \
    const float *a = t->a;                                                                    \
    const float *b = t->b;                                                                    \
    const int64_t lda = t->lda;                                                               \
    for (int64_t kk = 0; kk < t->kc; kk++) {                                                  \
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);                    \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                 \
            const __m256 av = _mm256_broadcast_ss(a + r * lda);                               \
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);                                   \
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);                                   \
        }                                                                                     \
        a += 1;                                                                               \
        b += NR;                                                                              \
    }                                                                                         \
    if (t->last) {                                                                            \
        float part[2][16];                                                                    \
        if (t->bias) {                                                                        \
            memset(part[0], 0, sizeof part[0]);                                               \
            memcpy(part[0], t->bias, (size_t)width * sizeof(float));                          \
        }                                                                                     \
        const __m256 bias0 = t->bias ? _mm256_loadu_ps(part[0]) : _mm256_setzero_ps();        \
        const __m256 bias1 = t->bias ? _mm256_loadu_ps(part[0] + 8) : _mm256_setzero_ps();    \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                 \
            acc[r][0] = _mm256_add_ps(acc[r][0], bias0);                                      \
            acc[r][1] = _mm256_add_ps(acc[r][1], bias1);                                      \
            if (t->z) {                                                                       \
                memset(part[1], 0, sizeof part[1]);                                           \
                memcpy(part[1], t->z + r * t->ldc, (size_t)width * sizeof(float));            \
                acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(part[1]));               \
                acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(part[1] + 8));           \
            }                                                                                 \
            if (t->clamp) {                                                                   \
                const __m256 lo = _mm256_set1_ps(t->lo), hi = _mm256_set1_ps(t->hi);          \
                acc[r][0] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[r][0]));                  \
                acc[r][1] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[r][1]));                  \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                     \
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);                                             \
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);                                         \
    }                                                                                         \
    if (width < 16) {                                                                         \
        for (int r = 0; r < R; r++) {                                                         \
            memcpy(t->c + r * t->ldc, edge[r], (size_t)width * sizeof(float));                \
        }                                                                                     \
    }

#define LIN256_FN(R)                                                                          \
    __attribute__((target("avx2,fma"))) static void half256_##R(const lin_tile *t,             \
                                                                 int width) {                  \
        LIN256_BODY(R)                                                                        \
    }
LIN256_FN(1) LIN256_FN(2) LIN256_FN(3) LIN256_FN(4) LIN256_FN(5) LIN256_FN(6)

static void tile_avx2(const lin_tile *t) {
    typedef void (*half_fn)(const lin_tile *, int);
    static const half_fn halves[6] = {half256_1, half256_2, half256_3, half256_4, half256_5,
                                      half256_6};
    for (int q = 0; q < t->panels; q++) {
        const int cols = q == t->panels - 1 ? t->cols : NR;
        for (int h = 0; h * 16 < cols; h++) {
            const int width = cols - h * 16 < 16 ? cols - h * 16 : 16;
            for (int r0 = 0; r0 < t->rows; r0 += 6) {
                lin_tile part = *t;
                const int64_t col = q * NR + h * 16;
                part.rows = t->rows - r0 < 6 ? t->rows - r0 : 6;
                part.a = t->a + r0 * t->lda;
                part.b = t->b + q * t->pstride + h * 16;
                part.c = t->c + r0 * t->ldc + col;
                part.bias = t->bias ? t->bias + col : NULL;
                part.z = t->z ? t->z + r0 * t->ldc + col : NULL;
                halves[part.rows - 1](&part, width);
            }
        }
    }
}

#endif /* LIN_X86 */

/* -- picking the micro-kernel -------------------------------------------------------------- */

static lin_tile_fn lin_chosen;
static pthread_once_t lin_once = PTHREAD_ONCE_INIT;

static void lin_choose(void) {
    lin_chosen = tile_generic;
#ifdef LIN_X86
    switch (ge_simd_choose("GE_HUB_GEMM_KERNEL")) {
    case GE_SIMD_AVX512:
        lin_chosen = tile_avx512;
        break;
    case GE_SIMD_AVX2:
        lin_chosen = tile_avx2;
        break;
    case GE_SIMD_GENERIC:
        break;
    }
#endif
}

/* -- the product --------------------------------------------------------------------------- */

typedef struct {
    const float *x, *w, *bias, *z;
    float *y;
    int64_t rows, n, k, panels;
    int64_t lda;            /* floats between X's rows: k, or k + LIN_X_PAD restrided */
    nn_epilogue act;        /* the activation (residual unused: it is applied in tiles) */
    int clamp, after_store; /* Relu/Clip in registers; another activation after the store */
    int gelu;               /* Gelu in the avx512 tiles' registers */
    float lo, hi;
    int split_rows;         /* tasks cut the rows (1) or the panels (0) */
    int64_t per_task;       /* rows (a multiple of LMR) or panels per task */
    lin_tile_fn tile;
} lin_job;

/* W's block LIN_AHEAD blocks after the one of panel group p and slice k0, in the order
 * lin_rect reads them (a group's slices, then the next group's), and its size in 64-byte
 * lines; NULL past the last. Far enough ahead that it is in L2 when its turn comes, near
 * enough that it is not evicted before. */
static const float *lin_ahead(const lin_job *job, int wide, int64_t p1, int64_t p, int64_t k0,
                              int64_t *lines) {
    const int64_t k = job->k;
    for (int i = 0; i < LIN_AHEAD; i++) {
        const int64_t step = wide && p1 - p >= LWIDE ? LWIDE : 1;
        k0 += KC;
        if (k0 >= k) {
            k0 = 0;
            p += step;
            if (p >= p1) {
                *lines = 0;
                return NULL;
            }
        }
    }
    const int64_t step = wide && p1 - p >= LWIDE ? LWIDE : 1;
    const int64_t kc = k - k0 < KC ? k - k0 : KC;
    *lines = kc * step * NR * (int64_t)sizeof(float) / 64;
    return job->w + k0 * job->panels * NR + p * kc * NR;
}

/* Y's rows [m0, m1) by panels [p0, p1): a group of panels (one, or LWIDE for a short
 * product) at a time, its k slices in order, every row block of the slice past the
 * slice's panels while they are in L1. Panels outermost: a group's block of Y stays in
 * cache over its slices, and each panel of W is read once. */
static void lin_rect(const lin_job *job, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
    const int64_t k = job->k, n = job->n;
    const int wide = m1 - m0 <= LSHORT;
    for (int64_t p = p0; p < p1;) {
        const int64_t step = wide && p1 - p >= LWIDE ? LWIDE : 1;
        const int64_t col = p * NR;
        const int64_t end = (p + step) * NR < n ? (p + step) * NR : n;
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            const int64_t kc = k - k0 < KC ? k - k0 : KC;
            const int last = k0 + kc >= k;
            const float *slice = job->w + k0 * job->panels * NR;
            /* a block ahead of this one (lin_ahead), its lines shared out among the row
             * blocks of this one */
            int64_t next_lines = 0;
            const float *next = lin_ahead(job, wide, p1, p, k0, &next_lines);
            const int64_t blocks = nn_pack_panels(m1 - m0, LMR);
            const int64_t share = nn_pack_panels(next_lines, blocks);
            for (int64_t r0 = m0; r0 < m1; r0 += LMR) {
                lin_tile t;
                t.rows = (int)(m1 - r0 < LMR ? m1 - r0 : LMR);
                t.a = job->x + r0 * job->lda + k0;
                t.lda = job->lda;
                t.b = slice + p * kc * NR;
                t.pstride = kc * NR;
                t.kc = kc;
                t.c = job->y + r0 * n + col;
                t.ldc = n;
                t.panels = (int)step;
                t.cols = (int)(end - (p + step - 1) * NR);
                t.accumulate = k0 > 0;
                t.last = last;
                t.bias = job->bias ? job->bias + col : NULL;
                t.z = job->z ? job->z + r0 * n + col : NULL;
                t.clamp = job->clamp;
                t.lo = job->lo;
                t.hi = job->hi;
                t.gelu = job->gelu;
                /* each row block brings in its share of the next block of W: one line
                 * every next_gap k steps (or two every step when its share is larger) */
                const int64_t first = (r0 - m0) / LMR * share;
                const int64_t lines = first >= next_lines ? 0
                                      : next_lines - first < share ? next_lines - first : share;
                t.next = lines > 0 ? (const char *)next + first * 64 : NULL;
                t.next_lines = (int)lines;
                t.next_gap = lines > kc ? 0 : lines > 0 ? (int)(kc / lines) : 0;
                job->tile(&t);
                if (last && job->after_store) {
                    for (int r = 0; r < t.rows; r++) {
                        nn_epilogue_run(&job->act, t.c + r * n, NULL, end - col);
                    }
                }
            }
        }
        p += step;
    }
}

static void lin_tasks(void *arg, int64_t begin, int64_t end) {
    const lin_job *job = (const lin_job *)arg;
    for (int64_t task = begin; task < end; task++) {
        const int64_t first = task * job->per_task;
        if (job->split_rows) {
            const int64_t last = first + job->per_task < job->rows ? first + job->per_task
                                                                   : job->rows;
            lin_rect(job, first, last, 0, job->panels);
        } else {
            const int64_t last = first + job->per_task < job->panels ? first + job->per_task
                                                                     : job->panels;
            lin_rect(job, 0, job->rows, first, last);
        }
    }
}

/* Restriding X (see the top): the rows padded by 64 bytes, so that consecutive rows of a
 * tile start one L1 set apart. */
#define LIN_X_PAD 16

static int lin_restrides(int64_t rows, int64_t k) {
    return rows > LSHORT && k > KC && k % 1024 == 0;
}

typedef struct {
    const float *from;
    float *to;
    int64_t k, lda;
} lin_copy_job;

static void lin_copy_rows(void *arg, int64_t begin, int64_t end) {
    const lin_copy_job *job = (const lin_copy_job *)arg;
    for (int64_t r = begin; r < end; r++) {
        memcpy(job->to + r * job->lda, job->from + r * job->k, (size_t)job->k * sizeof(float));
    }
}

static int64_t nn_linear_packed_floats(int64_t n, int64_t k) {
    return nn_pack_panels(n, NR) * NR * k;
}

int ge_nn_linear_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                     const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                     size_t attrs_size) {
    static const char *name = "ge_nn_linear_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[6] = {0};
    double f[2] = {0.0, 0.0};
    if (!ge_blob_ints(&blob, v, 6) || !ge_blob_floats(&blob, f, 2) || !ge_blob_done(&blob)
        || v[0] < 0 || v[1] < 0 || v[2] < 0 || (v[3] != 0 && v[3] != 1)
        || v[4] < FUSED_ACT_NONE || v[4] >= FUSED_ACT_COUNT || (v[5] != 0 && v[5] != 1)
        /* the sizes below fit (a file's blob must not wrap them around) */
        || nn_numel3(v[0], v[2], 1) < 0 || nn_numel3(v[0], v[1], 1) < 0
        || nn_numel3(v[1] + NR, v[2], 1) < 0) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t rows = v[0], n = v[1], k = v[2], has_bias = v[3], has_residual = v[5];
    if (n_inputs < (has_residual ? 4 : 2 + (int)has_bias) || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs X, W%s%s and 1 output, got %d and %d",
                              name, has_bias ? ", Bias" : "", has_residual ? ", Z" : "",
                              (int)n_inputs, (int)n_outputs);
    }
    if (inputs[1].dtype != GE_FLOAT32 || inputs[1].numel != nn_linear_packed_floats(n, k)) {
        return ctx->set_error(ctx, "%s: input W must be the weights packed at compile time "
                              "(%lld float32 values), got dtype code %d with %lld", name,
                              (long long)nn_linear_packed_floats(n, k), (int)inputs[1].dtype,
                              (long long)inputs[1].numel);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], rows * k)
        || (has_bias && nn_check_f32(ctx, name, "input Bias", &inputs[2], n))
        || (has_residual && nn_check_f32(ctx, name, "input Z", &inputs[3], rows * n))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], rows * n)) {
        return -1;
    }
    if (rows == 0 || n == 0) {
        return 0;
    }
    lin_job job;
    memset(&job, 0, sizeof job);
    job.x = (const float *)inputs[0].data;
    job.w = (const float *)inputs[1].data;
    job.bias = has_bias ? (const float *)inputs[2].data : NULL;
    job.z = has_residual ? (const float *)inputs[3].data : NULL;
    job.y = (float *)outputs[0].data;
    job.rows = rows;
    job.n = n;
    job.k = k;
    job.panels = nn_pack_panels(n, NR);
    job.lda = k;
    const int act = (int)v[4];
    job.act = (nn_epilogue){act, f[0], f[1], NULL};
    job.clamp = act == FUSED_ACT_RELU || act == FUSED_ACT_CLIP;
    job.lo = act == FUSED_ACT_CLIP ? (float)f[0] : 0.0f;
    job.hi = act == FUSED_ACT_CLIP ? (float)f[1] : INFINITY;
    job.after_store = !job.clamp && act != FUSED_ACT_NONE;
    if (k == 0) {  /* an empty sum: Y is the bias, then the epilogue */
        for (int64_t i = 0; i < rows; i++) {
            float *y = job.y + i * n;
            for (int64_t j = 0; j < n; j++) {
                y[j] = job.bias ? job.bias[j] : 0.0f;
            }
            const nn_epilogue e = {act, f[0], f[1], job.z};
            if (!nn_epilogue_empty(&e)) {
                nn_epilogue_run(&e, y, job.z ? job.z + i * n : NULL, n);
            }
        }
        return 0;
    }
    pthread_once(&lin_once, lin_choose);
    job.tile = lin_chosen;
#ifdef LIN_X86
    if (act == FUSED_ACT_GELU && job.tile == tile_avx512) {
        job.gelu = 1;
        job.after_store = 0;
    }
#endif
    if (lin_restrides(rows, k) && ctx->scratch != NULL
        && ctx->scratch_bytes / sizeof(float) >= (size_t)(rows * (k + LIN_X_PAD))) {
        lin_copy_job copy = {job.x, (float *)ctx->scratch, k, k + LIN_X_PAD};
        ctx->parallel_for(ctx, rows, 16, lin_copy_rows, &copy);
        job.x = copy.to;
        job.lda = copy.lda;
    }
    const int64_t threads = ge_threadpool_size();
    const int64_t row_blocks = nn_pack_panels(rows, LMR);
    const int split_weight = rows <= LSHORT && n * k >= LIN_SPLIT_WEIGHT;
    if ((rows * n * k < LIN_MIN_PARALLEL && !split_weight) || threads <= 1
        || (job.panels < threads && row_blocks < threads)) {
        job.split_rows = 0;
        job.per_task = job.panels;
        lin_tasks(&job, 0, 1);
        return 0;
    }
    /* Cut the panels when each thread gets at least one (two tasks per thread where there
     * are enough, so that a thread slowed by the machine's other work hands some of its
     * share to the others; one per thread for a split weight, so that its shares stay
     * put); otherwise the rows. */
    int64_t tasks;
    if (job.panels >= threads) {
        tasks = job.panels >= 4 * threads && !split_weight ? 2 * threads : threads;
        job.per_task = nn_pack_panels(job.panels, tasks);
        tasks = nn_pack_panels(job.panels, job.per_task);
    } else {
        job.split_rows = 1;
        tasks = row_blocks >= 4 * threads ? 2 * threads : threads;
        job.per_task = nn_pack_panels(row_blocks, tasks) * LMR;
        tasks = nn_pack_panels(rows, job.per_task);
    }
    ctx->parallel_for(ctx, tasks, 1, lin_tasks, &job);
    return 0;
}
