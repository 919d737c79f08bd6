/*
 * The separable pools' row kernels (pool_rows.c), picked once from the CPU: the two loops
 * of the separable 2-D MaxPool and AveragePool in pool.c, over one padded row buffer.
 */
#ifndef GE_HUB_POOL_ROWS_H
#define GE_HUB_POOL_ROWS_H

#include <stdint.h>

/* Lanes past the last output a row kernel may read: a buffer holds this many readable
 * floats past (round_up(out_w, 16) * stride + (k - 1) * dil). */
#define NN_POOL_ROW_SLACK 48

/* One plane's geometry for max_plane. */
typedef struct nn_pool_plane {
    int64_t in_h, in_w, out_h, out_w;
    int64_t k_h, stride_h, pad_h;
    int64_t k_w, stride_w, pad_w;
} nn_pool_plane;

typedef struct {
    const char *name; /* "avx512", "avx2" or "generic" */
    /* dst[i] = max(dst[i], src[i]) for i < n, a NaN in either kept. */
    void (*vmax)(float *dst, const float *src, int64_t n);
    /* y[ox] = max over kx < k of buf[ox * stride + kx * dil] for ox < out_w, a NaN kept. */
    void (*hmax)(const float *buf, float *y, int64_t out_w, int64_t stride, int64_t k,
                 int64_t dil);
    /* dst[i] += src[i] for i < n. */
    void (*vsum)(float *dst, const float *src, int64_t n);
    /* y[ox] = sum over kx < k (in that order) of buf[ox * stride + kx * dil]. */
    void (*hsum)(const float *buf, float *y, int64_t out_w, int64_t stride, int64_t k,
                 int64_t dil);
    /* A 2-D MaxPool over one plane read where it lies, no buffer: y[oy][ox] = max over
     * the window's cells inside the plane, rows oy * g->stride_h - g->pad_h + ky (ky <
     * g->k_h) and columns ox * g->stride_w - g->pad_w + kx (kx < g->k_w), a NaN kept; an
     * output whose window holds no cell is -inf. Stride 1 or 2 along rows,
     * 1 to NN_POOL_DIRECT_MAX_K columns, no dilation. NULL: no such kernel. */
    void (*max_plane)(const float *x, float *y, const struct nn_pool_plane *g);
} nn_pool_rows;

/* max_plane's limits: window columns, and window rows. */
#define NN_POOL_DIRECT_MAX_K 3
#define NN_POOL_DIRECT_MAX_ROWS 16

/* The variant this CPU runs, lowered by GE_HUB_POOL_KERNEL=avx2|generic (tests force each). */
const nn_pool_rows *nn_pool_rows_kernel(void);

#endif /* GE_HUB_POOL_ROWS_H */
