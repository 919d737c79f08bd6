/*
 * The AVX-512 micro-kernels of nn_gemm_packed.c, included there once per row count: the
 * includer defines NN_TILE_ROWS(X) (X applied to each row index of the tile, 12 or fewer)
 * and NN_TILE_NAME(base) (the functions' names for that count). A tile whose last panel
 * holds fewer than 12 rows of A runs a copy with only those rows' accumulators, instead
 * of multiplying the panel's zero rows (64 channels are 5 panels and 4 rows).
 * Not a header of its own: it needs nn_gemm_packed.c's definitions (MR, NR,
 * store_epilogue, NN_PREFETCH_A).
 */
/* B's row kk of the tile is at b + kk * ldb: NR apart in packed panels, the input's
 * plane size apart when a 1x1 conv reads its input in place. Loads are masked to the
 * tile's columns, so that nothing past the input's last column is read. */
/* A tile at most 16 columns wide (the last panel of a row of panels, often): half the
 * work of the full tile, one accumulator per row. */
__attribute__((target("avx512f"))) static void NN_TILE_NAME(tile_avx512_narrow)(
    const float *a, const float *b, int64_t ldb, int64_t kc, float *c, int64_t ldc, int rows,
    int cols, const float *bias, int accumulate, const store_epilogue *store) {
    const __mmask16 lo = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1u);
#define DECLARE(r) __m512 c##r;
    NN_TILE_ROWS(DECLARE)
#undef DECLARE
#define INIT(r)                                                          \
    if (r >= rows) {                                                     \
        c##r = _mm512_setzero_ps();                                      \
    } else if (accumulate) {                                             \
        c##r = _mm512_maskz_loadu_ps(lo, c + (int64_t)r * ldc);          \
    } else {                                                             \
        c##r = _mm512_set1_ps(bias ? bias[r] : 0.0f);                    \
    }
    NN_TILE_ROWS(INIT)
#undef INIT
    for (int64_t kk = 0; kk < kc; kk++) {
        _mm_prefetch((const char *)(a + NN_PREFETCH_A), _MM_HINT_T0);
        const __m512 b0 = _mm512_maskz_loadu_ps(lo, b);
#define STEP(r) c##r = _mm512_fmadd_ps(_mm512_set1_ps(a[r]), b0, c##r);
        NN_TILE_ROWS(STEP)
#undef STEP
        a += MR;
        b += ldb;
    }
    if (store) {
        const __m512 low = _mm512_set1_ps(store->lo), high = _mm512_set1_ps(store->hi);
        const float *res = store->residual;
#define FINISH(r)                                                                        \
    if (r < rows) {                                                                      \
        if (res) {                                                                       \
            c##r = _mm512_add_ps(c##r, _mm512_maskz_loadu_ps(lo, res + (int64_t)r * ldc)); \
        }                                                                                \
        if (store->clamp) { /* NaN, the second operand, passes through both */         \
            c##r = _mm512_min_ps(high, _mm512_max_ps(low, c##r));                        \
        }                                                                                \
    }
        NN_TILE_ROWS(FINISH)
#undef FINISH
    }
#define STORE(r)                                                \
    if (r < rows) {                                             \
        _mm512_mask_storeu_ps(c + (int64_t)r * ldc, lo, c##r);   \
    }
    NN_TILE_ROWS(STORE)
#undef STORE
}

__attribute__((target("avx512f"))) static void NN_TILE_NAME(tile_avx512)(
    const float *a, const float *b, int64_t ldb, int64_t kc, float *c, int64_t ldc, int rows,
    int cols, const float *bias, int accumulate, const store_epilogue *store) {
    if (cols <= 16) {
        NN_TILE_NAME(tile_avx512_narrow)(a, b, ldb, kc, c, ldc, rows, cols, bias,
                                         accumulate, store);
        return;
    }
    const __mmask16 hi = (__mmask16)(cols >= 32 ? 0xFFFF : (1u << (cols - 16)) - 1u);
#define DECLARE(r) __m512 c##r##_0, c##r##_1;
    NN_TILE_ROWS(DECLARE)
#undef DECLARE
#define INIT(r)                                                                  \
    if (r >= rows) {                                                             \
        c##r##_0 = c##r##_1 = _mm512_setzero_ps();                               \
    } else if (accumulate) {                                                     \
        c##r##_0 = _mm512_loadu_ps(c + (int64_t)r * ldc);                        \
        c##r##_1 = _mm512_maskz_loadu_ps(hi, c + (int64_t)r * ldc + 16);         \
    } else {                                                                     \
        c##r##_0 = c##r##_1 = _mm512_set1_ps(bias ? bias[r] : 0.0f);             \
    }
    NN_TILE_ROWS(INIT)
#undef INIT
    for (int64_t kk = 0; kk < kc; kk++) {
        _mm_prefetch((const char *)(a + NN_PREFETCH_A), _MM_HINT_T0);
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_maskz_loadu_ps(hi, b + 16);
#define STEP(r)                                           \
    {                                                     \
        const __m512 av = _mm512_set1_ps(a[r]);           \
        c##r##_0 = _mm512_fmadd_ps(av, b0, c##r##_0);     \
        c##r##_1 = _mm512_fmadd_ps(av, b1, c##r##_1);     \
    }
        NN_TILE_ROWS(STEP)
#undef STEP
        a += MR;
        b += ldb;
    }
    if (store) {
        const __m512 low = _mm512_set1_ps(store->lo), high = _mm512_set1_ps(store->hi);
        const float *res = store->residual;
#define FINISH(r)                                                                           \
    if (r < rows) {                                                                         \
        if (res) {                                                                          \
            c##r##_0 = _mm512_add_ps(c##r##_0, _mm512_loadu_ps(res + (int64_t)r * ldc));     \
            c##r##_1 = _mm512_add_ps(c##r##_1,                                              \
                                     _mm512_maskz_loadu_ps(hi, res + (int64_t)r * ldc + 16)); \
        }                                                                                   \
        if (store->clamp) {                                                                 \
            c##r##_0 = _mm512_min_ps(high, _mm512_max_ps(low, c##r##_0));                   \
            c##r##_1 = _mm512_min_ps(high, _mm512_max_ps(low, c##r##_1));                   \
        }                                                                                   \
    }
        NN_TILE_ROWS(FINISH)
#undef FINISH
    }
#define STORE(r)                                                       \
    if (r < rows) {                                                    \
        _mm512_storeu_ps(c + (int64_t)r * ldc, c##r##_0);               \
        _mm512_mask_storeu_ps(c + (int64_t)r * ldc + 16, hi, c##r##_1); \
    }
    NN_TILE_ROWS(STORE)
#undef STORE
}
