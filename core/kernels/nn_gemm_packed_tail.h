/*
 * The AVX-512 column-tail micro-kernel of nn_gemm_packed.c, included there once.
 *
 * Why. A product whose column count is not a multiple of 16 leaves a last panel of a few
 * columns (a 7x7 map: 49 = 32 + 16 + 1; 14x14: 196 = 6 x 32 + 4). The row tiles hold
 * one output row per accumulator, 16 columns wide, so they compute a 1-column tail as 16
 * columns: ResNet-50's 7x7 layers spent a quarter of their products on zero columns.
 * This kernel turns the tile around for those columns: one accumulator holds a column of
 * one A panel (its 12 rows in 12 lanes), so each useful product costs 12/16 of a lane
 * instead of 1/16. It walks several A panels at once, so that enough accumulators are in
 * flight to hide the multiply-add latency.
 *
 * Every value is the same fused multiply-add chain as in the row tiles (start from the
 * bias or from C, add a[k] * b[k] in ascending k), so the results are bit-identical to
 * theirs: which kernel computed a column is invisible.
 *
 * Not a header of its own: it needs nn_gemm_packed.c's definitions (MR, store_epilogue).
 */

/* P panels of A (`panel_step` floats apart, `rows` valid rows in all, the last panel
 * possibly short) by T columns of B (row kk at b + kk * ldb), over kc values of k. C's
 * block starts at c (rows ldc apart); the first row's bias is bias[0]. P and T are
 * constants in every caller, so the accumulators are registers. */
__attribute__((always_inline, target("avx512f"))) static inline void tail_block_avx512(
    const float *a, int64_t panel_step, const float *b, int64_t ldb, int64_t kc, float *c,
    int64_t ldc, int64_t rows, const float *bias, int accumulate,
    const store_epilogue *store, const int P, const int T) {
    __m512 acc[8][4];
    float lanes[16];
    for (int p = 0; p < P; p++) {
        const int64_t left = rows - (int64_t)p * MR;
        const int valid = (int)(left < MR ? left : MR);
        const __mmask16 live = (__mmask16)((1u << valid) - 1u);
        for (int j = 0; j < T; j++) {
            if (accumulate) {
                for (int r = 0; r < 16; r++) {
                    lanes[r] = r < valid ? c[((int64_t)p * MR + r) * ldc + j] : 0.0f;
                }
                acc[p][j] = _mm512_loadu_ps(lanes);
            } else {
                acc[p][j] = bias ? _mm512_maskz_loadu_ps(live, bias + (int64_t)p * MR)
                                 : _mm512_setzero_ps();
            }
        }
    }
    const __mmask16 panel_rows = (__mmask16)((1u << MR) - 1u);
    for (int64_t kk = 0; kk < kc; kk++) {
        __m512 bv[4];
        for (int j = 0; j < T; j++) {
            bv[j] = _mm512_set1_ps(b[kk * ldb + j]);
        }
        for (int p = 0; p < P; p++) {
            const __m512 av = _mm512_maskz_loadu_ps(panel_rows, a + p * panel_step + kk * MR);
            for (int j = 0; j < T; j++) {
                acc[p][j] = _mm512_fmadd_ps(av, bv[j], acc[p][j]);
            }
        }
    }
    for (int p = 0; p < P; p++) {
        const int64_t left = rows - (int64_t)p * MR;
        const int valid = (int)(left < MR ? left : MR);
        for (int j = 0; j < T; j++) {
            _mm512_storeu_ps(lanes, acc[p][j]);
            for (int r = 0; r < valid; r++) {
                const int64_t at = ((int64_t)p * MR + r) * ldc + j;
                float v = lanes[r];
                if (store) {  /* as the row tiles: residual, then clamp; NaN passes */
                    v += store->residual ? store->residual[at] : 0.0f;
                    if (store->clamp) {
                        v = store->lo > v ? store->lo : v;
                        v = store->hi < v ? store->hi : v;
                    }
                }
                c[at] = v;
            }
        }
    }
}

/* The panel counts each column count runs at once: enough accumulators to cover the
 * multiply-add latency on two ports (8 or more), few enough to stay in registers. */
#define NN_TAIL_PANELS(T) ((T) <= 2 ? 8 : 6)

#define NN_TAIL_CASE(P, T)                                                               \
    case (P) * 8 + (T):                                                                  \
        tail_block_avx512(a, panel_step, b, ldb, kc, c, ldc, rows, bias, accumulate,     \
                          store, P, T);                                                  \
        return;

/* One block of `panels` (1-8) panels by `cols` (1-4) columns, with a copy per shape. */
__attribute__((target("avx512f"))) static void tail_avx512_block(
    const float *a, int64_t panel_step, int panels, const float *b, int64_t ldb, int64_t kc,
    float *c, int64_t ldc, int64_t rows, int cols, const float *bias, int accumulate,
    const store_epilogue *store) {
    switch (panels * 8 + cols) {
#define NN_TAIL_CASES(P) NN_TAIL_CASE(P, 1) NN_TAIL_CASE(P, 2) NN_TAIL_CASE(P, 3) \
    NN_TAIL_CASE(P, 4)
        NN_TAIL_CASES(1)
        NN_TAIL_CASES(2)
        NN_TAIL_CASES(3)
        NN_TAIL_CASES(4)
        NN_TAIL_CASES(5)
        NN_TAIL_CASES(6)
        NN_TAIL_CASE(7, 1)
        NN_TAIL_CASE(7, 2)
        NN_TAIL_CASE(8, 1)
        NN_TAIL_CASE(8, 2)
#undef NN_TAIL_CASES
    default:
        break;
    }
}
#undef NN_TAIL_CASE

/* Columns [0, cols) (at most NN_TAIL_MAX_COLS) of B's slice, against A's panels
 * [0, panels) of the slice at `a` (panel p at a + p * kc * MR), into C's rows
 * [row0, m): the tail_fn of nn_gemm_packed.c. */
static void tail_avx512(const float *a, int64_t panels, int64_t row0, int64_t m,
                        const float *b, int64_t ldb, int64_t kc, float *c, int64_t ldc,
                        int cols, const float *bias, int accumulate,
                        const store_epilogue *store) {
    const int64_t panel_step = kc * MR;
    for (int j0 = 0; j0 < cols; j0 += 4) {
        const int width = cols - j0 < 4 ? cols - j0 : 4;
        const int64_t group = NN_TAIL_PANELS(width);
        for (int64_t p0 = 0; p0 < panels; p0 += group) {
            const int count = (int)(panels - p0 < group ? panels - p0 : group);
            const int64_t row = row0 + p0 * MR;
            store_epilogue here;
            if (store) {
                here = *store;
                here.residual = store->residual ? store->residual + p0 * MR * ldc + j0 : NULL;
            }
            tail_avx512_block(a + p0 * panel_step, panel_step, count, b + j0, ldb, kc,
                              c + p0 * MR * ldc + j0, ldc, m - row, width,
                              bias ? bias + p0 * MR : NULL, accumulate, store ? &here : NULL);
        }
    }
}
