/*
 * The packed GEMM of nn_gemm_packed.h: blocking, threads, and the micro-kernels.
 *
 * Blocking. B is packed `block` columns at a time. C is computed in tasks, each a
 * rectangle of MR x NR tiles. Where tasks cut the columns, each packs its own columns
 * first (the core that computes a panel also writes it, and no barrier separates the
 * two); where they cut the rows, every task reads every column, so the columns are
 * packed first, split over the pool by rows. A task walks k in slices of NN_PACK_KC;
 * within a slice, the operand with more rows of panels (B's columns, usually; A's rows
 * on the small maps of deep layers) is the outer loop, so that each of its micro-panel
 * slices (KC x NR or KC x MR floats) is read once and meets every panel of the other
 * while it sits in L1. The micro-kernels prefetch A well ahead: it comes from memory
 * when the weights outgrow the caches. A tile's first slice starts from the bias, later ones add to what C holds. A FusedConv
 * epilogue (residual add, activation) runs on each tile right after its last slice is
 * stored, while the tile is still in L1: no second pass over C.
 *
 * A 1x1 conv's B is its input as it is (rows of k, one plane each): the tasks read it in
 * place, rows ldb apart, instead of packing it (b_direct), unless their tiles would walk
 * A's panels outermost and so read each B panel once per A panel.
 *
 * Micro-kernels, picked once from what the CPU supports:
 *   avx512   a 12 x 32 tile in 24 zmm accumulators: per k, two loads of B, 12 broadcasts
 *            of A, 24 fused multiply-adds (a tile at most 16 wide: half of that; a last
 *            panel of at most 4 or 8 rows: copies with only those rows, from
 *            nn_gemm_packed_tile.h, so that 64 channels cost 64 rows, not 72); a
 *            product's last few columns (NN_TAIL_MAX_COLS) go to a column tail that
 *            holds 12 rows of one column per accumulator (nn_gemm_packed_tail.h), so
 *            that a 7x7 map's 49 columns cost about 49, not 64;
 *   avx2     the same tile as four 12 x 8 strips (12 ymm accumulators each);
 *   generic  plain C over the tile, for other CPUs.
 * Every k is added in ascending order in all three; the SIMD ones use fused
 * multiply-add, so their results may differ from the generic one in the last bit, as
 * any two BLAS builds do.
 */
#include "nn_gemm_packed.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ge_hub/internal/simd.h"
#include "ge_hub/internal/threadpool.h"
#include "nn_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_GEMM_X86 1
#endif

#define MR NN_PACK_MR
#define NR NN_PACK_NR
/* Products smaller than this (in flops) run on the calling thread. */
#define NN_PACK_MIN_PARALLEL_FLOPS (1 << 20)
/* The most floats of B a task reads in place when its tiles walk A outermost, reading
 * them again for every panel of A (more: B is packed). Measured in place against packed
 * on one thread: faster in MobileNetV2 (96 -> 576 channels at 14x14, 19K floats; 960 ->
 * 160 at 7x7, 47K), slower for SqueezeNet's last conv (512 -> 1000 at 13x13, 87K
 * floats: 2.2 against 1.8 ms). */
#define NN_PACK_IN_PLACE_MAX 65536
/* A product's last columns, at most this many (a last panel of at most this many
 * columns, or the columns past the first 16 of a last panel), go to the kernel's column
 * tail where it has one (nn_gemm_packed_tail.h): up to 8, a row tile would fill at most
 * half of its lanes with useful columns, the column tail fills 12/16. */
#define NN_TAIL_MAX_COLS 8
/* Elements of packing work per parallel chunk. */
#define NN_PACK_GRAIN_WORK 32768

/* What a tile does to its values as it stores them after its last k slice (FusedConv's
 * epilogue, the part that fits in registers): add the residual (laid out like C, at the
 * tile's position; NULL: none), then clamp to [lo, hi] (Relu: [0, inf], Clip) when
 * `clamp`. NaN passes through both, as in the unfused Add, Relu and Clip. */
typedef struct {
    const float *residual;
    float lo, hi;
    int clamp;
} store_epilogue;

/* One tile of C (rows x cols, at most MR x NR) over one k slice. `accumulate`: add to C;
 * otherwise start from bias (NULL: zero). `store`: NULL, or the epilogue of the last slice. */
typedef void (*tile_fn)(const float *a, const float *b, int64_t ldb, int64_t kc, float *c,
                        int64_t ldc, int rows, int cols, const float *bias, int accumulate,
                        const store_epilogue *store);

/* The last `cols` columns of a product (at most NN_TAIL_MAX_COLS) against A's panels
 * [0, panels) of one k slice at `a`, into C's rows [row0, m) (c, bias and the residual
 * point at row0): see nn_gemm_packed_tail.h. */
typedef void (*tail_fn)(const float *a, int64_t panels, int64_t row0, int64_t m,
                        const float *b, int64_t ldb, int64_t kc, float *c, int64_t ldc,
                        int cols, const float *bias, int accumulate,
                        const store_epilogue *store);

static void tile_generic(const float *a, const float *b, int64_t ldb, int64_t kc, float *c,
                         int64_t ldc, int rows, int cols, const float *bias, int accumulate,
                         const store_epilogue *store) {
    float acc[MR][NR];
    for (int r = 0; r < MR; r++) {
        for (int j = 0; j < NR; j++) {
            if (r >= rows || j >= cols) {
                acc[r][j] = 0.0f;
            } else {
                acc[r][j] = accumulate ? c[r * ldc + j] : (bias ? bias[r] : 0.0f);
            }
        }
    }
    for (int64_t kk = 0; kk < kc; kk++) {
        const float *a_k = a + kk * MR, *b_k = b + kk * ldb;
        for (int r = 0; r < MR; r++) {
            const float av = a_k[r];
            for (int j = 0; j < cols; j++) {
                acc[r][j] += av * b_k[j];
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        for (int j = 0; j < cols; j++) {
            float v = acc[r][j];
            if (store) {
                v += store->residual ? store->residual[r * ldc + j] : 0.0f;
                if (store->clamp) {
                    v = v < store->lo ? store->lo : v;
                    v = v > store->hi ? store->hi : v;
                }
            }
            c[r * ldc + j] = v;
        }
    }
}

#ifdef NN_GEMM_X86

/* A streams through the kernel once per tile, from memory where the weights outgrow the
 * caches (deep layers at batch 1: Winograd's U of a 512-channel 3x3 layer is 16 MiB).
 * Each k step asks for the A values this many floats ahead (64 steps, 3 KiB, which may
 * lie in the next panel, read next): far enough to cover a DRAM miss. Measured on
 * ResNet-18 at 1 thread, per-layer minimum: the 7x7x512 Winograd layers 3.0 ms without,
 * 2.3 ms 16 steps ahead, 1.7-1.9 ms 64 to 256 steps ahead. */
#ifndef NN_PREFETCH_A
#define NN_PREFETCH_A (64 * MR)
#endif


/* The 12 rows are spelled out (macros) so that every accumulator is its own register. */
#define NN_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

#define NN_TILE_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define NN_TILE_NAME(base) base##_12
#include "nn_gemm_packed_tile.h"
#undef NN_TILE_ROWS
#undef NN_TILE_NAME
#define NN_TILE_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define NN_TILE_NAME(base) base##_8
#include "nn_gemm_packed_tile.h"
#undef NN_TILE_ROWS
#undef NN_TILE_NAME
#define NN_TILE_ROWS(X) X(0) X(1) X(2) X(3)
#define NN_TILE_NAME(base) base##_4
#include "nn_gemm_packed_tile.h"
#undef NN_TILE_ROWS
#undef NN_TILE_NAME
#include "nn_gemm_packed_tail.h"

/* The copy for the tile's rows: a last panel of 1-4 or 5-8 rows runs 8 or 16
 * accumulators instead of 24. */
static void tile_avx512(const float *a, const float *b, int64_t ldb, int64_t kc, float *c,
                        int64_t ldc, int rows, int cols, const float *bias, int accumulate,
                        const store_epilogue *store) {
    if (rows <= 4) {
        tile_avx512_4(a, b, ldb, kc, c, ldc, rows, cols, bias, accumulate, store);
    } else if (rows <= 8) {
        tile_avx512_8(a, b, ldb, kc, c, ldc, rows, cols, bias, accumulate, store);
    } else {
        tile_avx512_12(a, b, ldb, kc, c, ldc, rows, cols, bias, accumulate, store);
    }
}

/* One 12 x 8 strip (columns [j0, j0 + 8) of the tile) for AVX2: 12 accumulators. */
__attribute__((target("avx2,fma"))) static void strip_avx2(
    const float *a, const float *b, int64_t ldb, int64_t kc, float *c, int64_t ldc, int rows,
    int width, const float *bias, int accumulate, const store_epilogue *store) {
    float edge[MR][8];  /* a strip narrower than 8 goes through here */
    /* B's loads cover the strip's columns only (nothing past an in-place input's end) */
    const __m256i b_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(width),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#define DECLARE(r) __m256 c##r;
    NN_ROWS(DECLARE)
#undef DECLARE
#define INIT(r)                                                         \
    if (r >= rows) {                                                    \
        c##r = _mm256_setzero_ps();                                     \
    } else if (accumulate) {                                            \
        if (width == 8) {                                               \
            c##r = _mm256_loadu_ps(c + (int64_t)r * ldc);               \
        } else {                                                        \
            memset(edge[r], 0, sizeof edge[r]);                         \
            memcpy(edge[r], c + (int64_t)r * ldc, (size_t)width * 4);   \
            c##r = _mm256_loadu_ps(edge[r]);                            \
        }                                                               \
    } else {                                                            \
        c##r = _mm256_set1_ps(bias ? bias[r] : 0.0f);                   \
    }
    NN_ROWS(INIT)
#undef INIT
    for (int64_t kk = 0; kk < kc; kk++) {
        _mm_prefetch((const char *)(a + NN_PREFETCH_A), _MM_HINT_T0);
        const __m256 bv = width == 8 ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, b_mask);
#define STEP(r) c##r = _mm256_fmadd_ps(_mm256_set1_ps(a[r]), bv, c##r);
        NN_ROWS(STEP)
#undef STEP
        a += MR;
        b += ldb;
    }
    if (store) {
        const __m256 low = _mm256_set1_ps(store->lo), high = _mm256_set1_ps(store->hi);
        const float *res = store->residual;
#define FINISH(r)                                                                  \
    if (r < rows) {                                                                \
        if (res && width == 8) {                                                   \
            c##r = _mm256_add_ps(c##r, _mm256_loadu_ps(res + (int64_t)r * ldc));    \
        } else if (res) {                                                          \
            float part[8] = {0};                                                   \
            memcpy(part, res + (int64_t)r * ldc, (size_t)width * 4);               \
            c##r = _mm256_add_ps(c##r, _mm256_loadu_ps(part));                     \
        }                                                                          \
        if (store->clamp) {                                                        \
            c##r = _mm256_min_ps(high, _mm256_max_ps(low, c##r));                  \
        }                                                                          \
    }
        NN_ROWS(FINISH)
#undef FINISH
    }
#define STORE(r)                                                    \
    if (r < rows) {                                                 \
        if (width == 8) {                                           \
            _mm256_storeu_ps(c + (int64_t)r * ldc, c##r);           \
        } else {                                                    \
            _mm256_storeu_ps(edge[r], c##r);                        \
            memcpy(c + (int64_t)r * ldc, edge[r], (size_t)width * 4); \
        }                                                           \
    }
    NN_ROWS(STORE)
#undef STORE
}

static void tile_avx2(const float *a, const float *b, int64_t ldb, int64_t kc, float *c,
                      int64_t ldc, int rows, int cols, const float *bias, int accumulate,
                      const store_epilogue *store) {
    for (int j0 = 0; j0 < cols; j0 += 8) {
        int width = cols - j0 < 8 ? cols - j0 : 8;
        store_epilogue shifted;
        if (store) {
            shifted = *store;
            shifted.residual = store->residual ? store->residual + j0 : NULL;
        }
        strip_avx2(a, b + j0, ldb, kc, c + j0, ldc, rows, width, bias, accumulate,
                   store ? &shifted : NULL);
    }
}

#undef NN_ROWS
#endif /* NN_GEMM_X86 */

/* -- picking the micro-kernel ------------------------------------------------------------ */

typedef struct {
    const char *name;
    tile_fn fn;
    tail_fn tail;  /* NULL: the row tiles compute the last columns too */
} tile_kernel;

static tile_kernel pick_kernel(void) {
    static const tile_kernel generic = {"generic", tile_generic, NULL};
#ifdef NN_GEMM_X86
    static const tile_kernel avx512 = {"avx512", tile_avx512, tail_avx512};
    static const tile_kernel avx2 = {"avx2", tile_avx2, NULL};
    switch (ge_simd_choose("GE_HUB_GEMM_KERNEL")) {
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

static tile_kernel chosen_kernel;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose_kernel(void) {
    chosen_kernel = pick_kernel();
}

static const tile_kernel *kernel(void) {
    pthread_once(&chosen_once, choose_kernel);
    return &chosen_kernel;
}

const char *nn_gemm_packed_kernel_name(void) {
    return kernel()->name;
}

/* -- the product ---------------------------------------------------------------------------- */

typedef struct {
    const nn_packed_gemm *g;
    int64_t col0, cols;
} pack_job;

static void pack_rows(void *arg, int64_t begin, int64_t end) {
    const pack_job *job = (const pack_job *)arg;
    job->g->pack_b(job->g->pack_arg, begin, end, job->col0, job->cols, job->g->scratch,
                   job->g->k);
}

typedef struct {
    const nn_packed_gemm *g;
    const tile_kernel *kern;
    int64_t col0, cols;
    int64_t m_panels, n_panels;
    int64_t split_n;   /* tasks cut the n panels (1) or the m panels (0) */
    int64_t per_task;  /* panels of the cut dimension per task */
    int direct;        /* B read in place (g->b_direct), not packed */
} compute_job;

/* C's tiles of m panels [m0, m1) by n panels [n0, n1), the n panels being the packed B at
 * `b` (panel np at b + np * k * NR, holding columns col0 + np * NR on), or when `ldb` > 0,
 * B itself in place (row kk at b + kk * ldb, panel np its columns np * NR on). `epilogue`
 * (NULL: none) runs on each tile after its last k slice, with `residual` laid out like C. */
static void compute_tiles(const tile_kernel *kern, const float *a_packed, const float *b, int64_t ldb,
                          int64_t m, int64_t k, int64_t cols, const float *bias, float *c,
                          int64_t ldc,
                          int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                          const nn_epilogue *epilogue, const float *residual) {
    const int64_t m_panels = nn_pack_panels(m, MR);
    if (nn_epilogue_empty(epilogue)) {
        epilogue = NULL;
    }
    /* The residual and a Relu or Clip happen in the tile's registers; other activations
     * run over the tile right after it is stored, while it is in L1. */
    store_epilogue in_registers = {NULL, 0.0f, 0.0f, 0};
    int after_store = 0;
    if (epilogue) {
        const int act = epilogue->activation;
        in_registers.clamp = act == FUSED_ACT_RELU || act == FUSED_ACT_CLIP;
        in_registers.lo = act == FUSED_ACT_CLIP ? (float)epilogue->alpha : 0.0f;
        in_registers.hi = act == FUSED_ACT_CLIP ? (float)epilogue->beta : INFINITY;
        after_store = !in_registers.clamp && act != FUSED_ACT_NONE;
    }
    nn_epilogue activation_only = {epilogue ? epilogue->activation : 0,
                                   epilogue ? epilogue->alpha : 0.0, epilogue ? epilogue->beta : 0.0,
                                   NULL};
    /* The last panel's columns past its first 16 (or all of them, when it has at most
     * NN_TAIL_MAX_COLS) go to the kernel's column tail, where it has one. */
    const int64_t last_panel = nn_pack_panels(cols, NR) - 1;
    const int last_width = (int)(cols - last_panel * NR);
    int tail_cols = 0;
    if (kern->tail && last_panel >= n0 && last_panel < n1) {
        if (last_width <= NN_TAIL_MAX_COLS) {
            tail_cols = last_width;
        } else if (last_width > 16 && last_width - 16 <= NN_TAIL_MAX_COLS) {
            tail_cols = last_width - 16;
        }
    }
    for (int64_t k0 = 0; k0 < k; k0 += NN_PACK_KC) {
        const int64_t kc = k - k0 < NN_PACK_KC ? k - k0 : NN_PACK_KC;
        const int last = k0 + kc >= k;
        const float *a_slice = a_packed + k0 * m_panels * MR;  /* nn_gemm_packed.h */
        /* Whichever operand's slice is larger is walked once, each of its panels
         * meeting every panel of the other while it is in L1. */
        const int64_t a_outer = (m1 - m0) * MR > (n1 - n0) * NR;
        const int64_t outer = a_outer ? m1 - m0 : n1 - n0, inner = a_outer ? n1 - n0 : m1 - m0;
        for (int64_t i = 0; i < outer * inner; i++) {
            const int64_t np = n0 + (a_outer ? i % inner : i / inner);
            const int64_t mp = m0 + (a_outer ? i / inner : i % inner);
            const float *b_slice = ldb > 0 ? b + k0 * ldb + np * NR : b + (np * k + k0) * NR;
            const int64_t col = np * NR;
            int width = (int)(cols - col < NR ? cols - col : NR);
            if (np == last_panel) {
                width -= tail_cols;
                if (width == 0) {
                    continue;
                }
            }
            const int64_t row = mp * MR;
            const int rows = (int)(m - row < MR ? m - row : MR);
            const store_epilogue *store = NULL;
            store_epilogue here = in_registers;
            if (last && epilogue) {
                here.residual = residual ? residual + row * ldc + col : NULL;
                store = &here;
            }
            kern->fn(a_slice + mp * kc * MR, b_slice, ldb > 0 ? ldb : NR, kc,
                     c + row * ldc + col, ldc, rows, width, bias ? bias + row : NULL, k0 > 0,
                     store);
            if (store && after_store) {
                for (int r = 0; r < rows; r++) {
                    nn_epilogue_run(&activation_only, c + (row + r) * ldc + col, NULL, width);
                }
            }
        }
        if (tail_cols > 0) {
            const int64_t col = cols - tail_cols, row = m0 * MR;
            const float *b_slice = ldb > 0 ? b + k0 * ldb + col
                                           : b + (last_panel * k + k0) * NR + (col - last_panel * NR);
            const store_epilogue *store = NULL;
            store_epilogue here = in_registers;
            if (last && epilogue) {
                here.residual = residual ? residual + row * ldc + col : NULL;
                store = &here;
            }
            kern->tail(a_slice + m0 * kc * MR, m1 - m0, row, m, b_slice, ldb > 0 ? ldb : NR, kc,
                       c + row * ldc + col, ldc, tail_cols, bias ? bias + row : NULL, k0 > 0,
                       store);
            if (store && after_store) {
                const int64_t row_end = m1 * MR < m ? m1 * MR : m;
                for (int64_t r = row; r < row_end; r++) {
                    nn_epilogue_run(&activation_only, c + r * ldc + col, NULL, tail_cols);
                }
            }
        }
    }
}

/* Tasks [begin, end): each a run of `per_task` panels of the cut dimension by every panel
 * of the other. */
static void compute_tasks(void *arg, int64_t begin, int64_t end) {
    const compute_job *job = (const compute_job *)arg;
    const nn_packed_gemm *g = job->g;
    for (int64_t task = begin; task < end; task++) {
        int64_t first = task * job->per_task;
        int64_t m0 = 0, m1 = job->m_panels, n0 = 0, n1 = job->n_panels;
        if (job->split_n) {
            n0 = first;
            n1 = first + job->per_task < n1 ? first + job->per_task : n1;
        } else {
            m0 = first;
            m1 = first + job->per_task < m1 ? first + job->per_task : m1;
        }
        if (job->direct) {  /* B read in place: nothing to pack */
            compute_tiles(job->kern, g->a_packed, g->b_direct + job->col0, g->ldb, g->m, g->k,
                          job->cols, g->bias, g->c + job->col0, g->ldc, m0, m1, n0, n1,
                          g->epilogue, g->residual ? g->residual + job->col0 : NULL);
            continue;
        }
        if (job->split_n) {  /* this task's columns: packed here, by the core using them */
            const int64_t col = n0 * NR, last = n1 * NR < job->cols ? n1 * NR : job->cols;
            g->pack_b(g->pack_arg, 0, g->k, job->col0 + col, last - col,
                      g->scratch + n0 * g->k * NR, g->k);
        }
        compute_tiles(job->kern, g->a_packed, g->scratch, 0, g->m, g->k, job->cols, g->bias,
                      g->c + job->col0, g->ldc, m0, m1, n0, n1, g->epilogue,
                      g->residual ? g->residual + job->col0 : NULL);
    }
}

void nn_gemm_prepacked(const float *a_packed, const float *b_packed, int64_t m, int64_t n,
                       int64_t k, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0 || k <= 0) {
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++) {
                c[i * ldc + j] = 0.0f;
            }
        }
        return;
    }
    compute_tiles(kernel(), a_packed, b_packed, 0, m, k, n, NULL, c, ldc, 0,
                  nn_pack_panels(m, MR), 0, nn_pack_panels(n, NR), NULL, NULL);
}

void nn_gemm_packed(ge_context *ctx, const nn_packed_gemm *g) {
    if (g->m <= 0 || g->n <= 0) {
        return;
    }
    if (g->k <= 0) {  /* an empty sum: C is the bias */
        for (int64_t i = 0; i < g->m; i++) {
            for (int64_t j = 0; j < g->n; j++) {
                g->c[i * g->ldc + j] = g->bias ? g->bias[i] : 0.0f;
            }
            if (!nn_epilogue_empty(g->epilogue)) {
                nn_epilogue_run(g->epilogue, g->c + i * g->ldc,
                                g->residual ? g->residual + i * g->ldc : NULL, g->n);
            }
        }
        return;
    }
    const tile_kernel *kern = kernel();
    const int64_t m_panels = nn_pack_panels(g->m, MR);
    /* Two tasks per thread, so that a thread slowed by the machine's other work hands
     * some of its share to the others. */
    const int64_t tasks_wanted = 2 * (int64_t)ge_threadpool_size();
    int direct = g->b_direct != NULL;
    if (direct) {
        /* Where the tasks' tiles would walk A's panels outermost (compute_tiles), each
         * B panel is read again for every A panel: from packed panels a contiguous
         * stream, in place k strided rows, which is slower once a task's columns are
         * large (NN_PACK_IN_PLACE_MAX). Such products pack B as usual. */
        const int64_t n_panels = nn_pack_panels(g->n, NR);
        const int split_n = n_panels >= m_panels;
        const int64_t cut = split_n ? n_panels : m_panels;
        const int64_t tasks = cut < tasks_wanted ? cut : tasks_wanted;
        const int64_t per_task = (cut + tasks - 1) / tasks;
        const int64_t task_m = split_n ? m_panels : per_task;
        const int64_t task_n = split_n ? per_task : n_panels;
        const int64_t task_cols = task_n * NR < g->n ? task_n * NR : g->n;
        direct = task_m * MR <= task_n * NR || g->k * task_cols <= NN_PACK_IN_PLACE_MAX;
    }
    /* B read in place needs no scratch: all of its columns make one block */
    const int64_t block = direct ? g->n : g->block;
    for (int64_t col0 = 0; col0 < g->n; col0 += block) {
        const int64_t cols = g->n - col0 < block ? g->n - col0 : block;
        compute_job job = {g, kern, col0, cols, m_panels, nn_pack_panels(cols, NR), 0, 0,
                           direct};
        job.split_n = job.n_panels >= job.m_panels;
        if (!job.split_n && !job.direct) {  /* every task reads every column: pack them all first */
            pack_job pack = {g, col0, cols};
            ctx->parallel_for(ctx, g->k, nn_grain(cols, NN_PACK_GRAIN_WORK), pack_rows, &pack);
        }
        const int64_t cut = job.split_n ? job.n_panels : job.m_panels;
        const int64_t tasks = cut < tasks_wanted ? cut : tasks_wanted;
        job.per_task = (cut + tasks - 1) / tasks;
        const int64_t flops = 2 * g->m * cols * g->k;
        ctx->parallel_for(ctx, (cut + job.per_task - 1) / job.per_task,
                          flops < NN_PACK_MIN_PARALLEL_FLOPS ? tasks : 1, compute_tasks, &job);
    }
}
