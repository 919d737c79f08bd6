/*
 * Pooling on float32: MaxPool (with its optional Indices), AveragePool, and the global
 * pools. Windows are 3-D (nn_common.h); a plane is one (image, channel) pair.
 *
 * MaxPool blob (ge_hub/kernels/pool.py, pack_max_pool): ints
 *   planes, with_indices, window[18], index_multipliers[3]
 * Indices are plane * in_size + sum(coord[a] * index_multipliers[a]) (row-major or, for
 * storage_order 1, column-major multipliers). Like the reference, a window's result is
 * its first maximum in tap order among the taps inside X, and a NaN beats everything.
 *
 * AveragePool blob (pack_average_pool): ints
 *   planes, count_include_pad, window[18], count_end[3]
 * The divisor counts the taps inside [0, in) per axis, or with count_include_pad the
 * taps inside [-pad, count_end) (the explicit padding, not the cells past it that
 * ceil_mode windows reach).
 *
 * GlobalAveragePool / GlobalMaxPool blob (pack_global_pool): ints planes, plane_size.
 *
 * MaxPool (without Indices) and AveragePool pick one path per call, fastest first: a window
 * that is the whole plane runs the global pools' pass; a 2-D MaxPool window of stride 1
 * or 2 and up to 3 columns is read straight from X a row at a time (max_pool_direct,
 * where the CPU has the row kernel for it); 2-D planes small enough run whole
 * (pool_whole_planes: a few long row-kernel calls per plane); wider 2-D planes a row at a
 * time (the separable paths); anything else (3-D windows, very wide rows) the per-tap
 * loops. MaxPool with Indices always takes the per-tap loop (max_pool_planes).
 */
#include <math.h>
#include <string.h>

#include "pool.h"
#include "nn_common.h"
#include "pool_rows.h"

#define NN_POOL_GRAIN_WORK 32768

/* Helpers of the vectorized (NN_VECTORIZED) loops, inlined into each clone: a call from an
 * AVX-512 clone into code built for the baseline CPU costs more than the call's work. */
#define NN_POOL_INLINE static inline __attribute__((always_inline))

typedef struct {
    nn_window w;
    int64_t planes, flag, extra[3];
    const float *x;
    float *y;
    int64_t *indices;
} pool_job;

static int read_pool(ge_blob *blob, pool_job *job) {
    int64_t head[2];
    if (!ge_blob_ints(blob, head, 2) || !nn_blob_window(blob, &job->w, 0)
        || !ge_blob_ints(blob, job->extra, 3) || !ge_blob_done(blob)) {
        return 0;
    }
    job->planes = head[0];
    job->flag = head[1];
    return job->planes >= 0;
}

static void max_pool_planes(void *arg, int64_t begin, int64_t end) {
    const pool_job *job = (const pool_job *)arg;
    const nn_window *w = &job->w;
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int64_t *mult = job->extra;
    for (int64_t plane = begin; plane < end; plane++) {
        const float *x = job->x + plane * in_size;
        float *y = job->y + plane * out_size;
        int64_t *indices = job->indices ? job->indices + plane * out_size : NULL;
        int64_t out = 0;
        for (int64_t oz = 0; oz < w->out[0]; oz++) {
            int64_t z0 = oz * w->stride[0] - w->pad[0], z_lo, z_hi;
            nn_tap_range(z0, w->in[0], w->k[0], w->dil[0], &z_lo, &z_hi);
            for (int64_t oy = 0; oy < w->out[1]; oy++) {
                int64_t y0 = oy * w->stride[1] - w->pad[1], y_lo, y_hi;
                nn_tap_range(y0, w->in[1], w->k[1], w->dil[1], &y_lo, &y_hi);
                for (int64_t ox = 0; ox < w->out[2]; ox++, out++) {
                    int64_t x0 = ox * w->stride[2] - w->pad[2], x_lo, x_hi;
                    nn_tap_range(x0, w->in[2], w->k[2], w->dil[2], &x_lo, &x_hi);
                    float best = -INFINITY;
                    /* The first tap inside X wins a window of -inf (tap 0 when none is). */
                    int64_t bz = z0, by = y0, bx = x0;
                    if (z_lo < z_hi && y_lo < y_hi && x_lo < x_hi) {
                        bz = z0 + z_lo * w->dil[0];
                        by = y0 + y_lo * w->dil[1];
                        bx = x0 + x_lo * w->dil[2];
                    }
                    for (int64_t kz = z_lo; kz < z_hi; kz++) {
                        int64_t iz = z0 + kz * w->dil[0];
                        for (int64_t ky = y_lo; ky < y_hi; ky++) {
                            int64_t iy = y0 + ky * w->dil[1];
                            const float *row = x + (iz * w->in[1] + iy) * w->in[2];
                            for (int64_t kx = x_lo; kx < x_hi; kx++) {
                                int64_t ix = x0 + kx * w->dil[2];
                                float v = row[ix];
                                if (v > best || (isnan(v) && !isnan(best))) {
                                    best = v;
                                    bz = iz;
                                    by = iy;
                                    bx = ix;
                                }
                            }
                        }
                    }
                    y[out] = best;
                    if (indices) {
                        indices[out] = plane * in_size + bz * mult[0] + by * mult[1] + bx * mult[2];
                    }
                }
            }
        }
    }
}


/* Widest padded input row the separable path keeps on the stack, and its buffer (the row
 * plus what the row kernels may read past the last output, pool_rows.h). */
#define NN_POOL_ROW_MAX 4096
#define NN_POOL_BUF (NN_POOL_ROW_MAX + 256)

/* The last buffer cell (exclusive) the row kernels read for this window. */
static int64_t separable_reach(const nn_window *w) {
    return (w->out[2] + 15) / 16 * 16 * w->stride[2] + (w->k[2] - 1) * w->dil[2]
           + NN_POOL_ROW_SLACK;
}

/* A 2-D (or 1-D) window whose padded rows fit the buffer. */
static int separable_fits(const nn_window *w) {
    return w->k[0] == 1 && w->in[0] == 1 && w->pad[2] + w->in[2] <= NN_POOL_ROW_MAX
           && separable_reach(w) <= NN_POOL_BUF;
}

/* -- global pools --------------------------------------------------------------------- */

typedef struct {
    int64_t size;
    const float *x;
    float *y;
} global_job;

NN_VECTORIZED static void global_average_planes(void *arg, int64_t begin, int64_t end) {
    const global_job *job = (const global_job *)arg;
    for (int64_t plane = begin; plane < end; plane++) {
        job->y[plane] = (float)(nn_sum(job->x + plane * job->size, job->size) / (double)job->size);
    }
}

NN_VECTORIZED static void global_max_planes(void *arg, int64_t begin, int64_t end) {
    const global_job *job = (const global_job *)arg;
    for (int64_t plane = begin; plane < end; plane++) {
        job->y[plane] = nn_max(job->x + plane * job->size, job->size);
    }
}

/* A window that is the whole plane (output 1 x 1, no padding, no dilation): the pool is
 * the global one, one vectorized pass per plane (inception's last 7 x 7 AveragePool). The
 * sum runs in double, so it can only be closer to the exact mean than the tap-order
 * float sum. */
static int covers_plane(const nn_window *w) {
    for (int a = 0; a < 3; a++) {
        if (w->out[a] != 1 || w->k[a] != w->in[a] || w->pad[a] != 0 || w->dil[a] != 1) {
            return 0;
        }
    }
    return nn_window_in_size(w) > 0;
}

/* -- AveragePool's counts ------------------------------------------------------------- */

/* Taps along one axis within [low, high) for a window starting at `start`. */
NN_POOL_INLINE int64_t taps_within(int64_t start, int64_t low, int64_t high, int64_t k,
                                   int64_t dil) {
    int64_t lo, hi;
    nn_tap_range(start - low, high - low, k, dil, &lo, &hi);
    return hi - lo;
}

/* Divides a row of sums by each output's tap count. Along y and z the count is the
 * caller's (count_zy); along x, outputs [full_lo, full_hi) have all k taps counted and
 * the rest count theirs within [low, high). */
NN_POOL_INLINE void divide_row(float *y, const nn_window *w, int64_t count_zy, int64_t low,
                               int64_t high, int64_t full_lo, int64_t full_hi) {
    const float full = (float)(count_zy * w->k[2]);
    for (int64_t ox = 0; ox < full_lo && ox < w->out[2]; ox++) {
        const int64_t x0 = ox * w->stride[2] - w->pad[2];
        y[ox] = y[ox] / (float)(count_zy * taps_within(x0, low, high, w->k[2], w->dil[2]));
    }
    for (int64_t ox = full_lo; ox < full_hi; ox++) {
        y[ox] = y[ox] / full;
    }
    for (int64_t ox = full_hi > full_lo ? full_hi : full_lo; ox < w->out[2]; ox++) {
        const int64_t x0 = ox * w->stride[2] - w->pad[2];
        y[ox] = y[ox] / (float)(count_zy * taps_within(x0, low, high, w->k[2], w->dil[2]));
    }
}

/* The x range whose cells count (count_include_pad: the padded one) and the outputs
 * [full_lo, full_hi) whose every x tap counts: low <= x0 and x0 + (k - 1) * dil < high,
 * where x0 = ox * stride - pad. */
NN_POOL_INLINE void counted_columns(const pool_job *job, int64_t *low, int64_t *high,
                                    int64_t *full_lo, int64_t *full_hi) {
    const nn_window *w = &job->w;
    *low = job->flag ? -w->pad[2] : 0;
    *high = job->flag ? job->extra[2] : w->in[2];
    const int64_t span = (w->k[2] - 1) * w->dil[2];
    nn_position_range(-w->pad[2] - *low, w->stride[2], *high - *low - span, w->out[2], full_lo,
                      full_hi);
}

/* -- whole planes at once ------------------------------------------------------------ */

/* Floats the plane path keeps on the stack (its three buffers, below). */
#define NN_POOL_PLANE_MAX 16384

/* The plane path's layout: the padded plane `rows` x `pitch` (pitch a multiple of the x
 * stride, wide enough for every tap), then the window's rows reduced (`vertical` floats:
 * the rows from the first output row's to the last's, with room for the row kernels'
 * over-reach), then the columns reduced over every y-stride-th of those rows
 * (sy * pitch / stride per output row, of which the first out_w are outputs), then as
 * many divisors (AveragePool). */
typedef struct {
    int64_t pitch, rows, vertical, reduced, n_columns, total;
} plane_layout;

static plane_layout plane_layout_of(const nn_window *w) {
    plane_layout p;
    const int64_t stride = w->stride[2], sy = w->stride[1];
    int64_t pitch = w->pad[2] + w->in[2];
    const int64_t need = (w->out[2] - 1) * stride + (w->k[2] - 1) * w->dil[2] + 1;
    if (pitch < need) {
        pitch = need;
    }
    p.pitch = (pitch + stride - 1) / stride * stride;
    p.rows = (w->out[1] - 1) * sy + (w->k[1] - 1) * w->dil[1] + 1;
    /* rows reduced: every row from the first output's to the last's, so one call per tap
     * row covers them whatever the y stride (the rows between outputs are never read) */
    p.vertical = ((w->out[1] - 1) * sy + 1) * p.pitch;
    p.n_columns = w->out[1] * (sy * p.pitch / stride);
    const int64_t reach = (p.n_columns + 15) / 16 * 16 * stride + (w->k[2] - 1) * w->dil[2]
                          + NN_POOL_ROW_SLACK;
    p.reduced = reach > p.vertical ? reach : p.vertical;
    p.total = p.rows * p.pitch + p.reduced + 2 * p.n_columns;  /* + counts */
    return p;
}

/* A 2-D (or 1-D) window over planes small enough for the plane path: short rows (a
 * 14 x 14 plane) spend more in the row path's per-row calls than in the arithmetic. */
static int plane_fits(const nn_window *w) {
    if (w->k[0] != 1 || w->in[0] != 1 || w->out[0] != 1 || w->pad[0] != 0 || w->out[1] < 1
        || w->out[2] < 1) {
        return 0;
    }
    for (int a = 1; a < 3; a++) {  /* bounded, so the layout's products cannot overflow */
        if (w->in[a] > NN_POOL_PLANE_MAX || w->out[a] > NN_POOL_PLANE_MAX
            || w->k[a] > NN_POOL_PLANE_MAX || w->stride[a] > NN_POOL_PLANE_MAX
            || w->dil[a] > NN_POOL_PLANE_MAX || w->pad[a] > NN_POOL_PLANE_MAX) {
            return 0;
        }
    }
    return plane_layout_of(w).total <= NN_POOL_PLANE_MAX;
}

/* MaxPool (sum = 0) or AveragePool (sum = 1) a whole plane at a time: the plane is copied
 * into a buffer whose padding cells (set once per call: -inf, or 0 for a sum) surround
 * it, the window's rows are reduced over the whole plane in one long row-kernel call per
 * tap row (every row, whatever the y stride), the columns in one call over all output
 * rows together (the cells between them give values no output reads), sums are
 * divided by their counts (the same for every plane, so computed once per call) in one
 * long loop, and each output row is copied out. Same operations in the same order as the
 * row path, so the same results. */
NN_POOL_INLINE void pool_whole_planes(const pool_job *job, int64_t begin, int64_t end,
                                      int sum) {
    const nn_window *w = &job->w;
    const nn_pool_rows *kernel = nn_pool_rows_kernel();
    const plane_layout p = plane_layout_of(w);
    const int64_t in_h = w->in[1], in_w = w->in[2], out_h = w->out[1], out_w = w->out[2];
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int64_t top = w->pad[1], left = w->pad[2], sy = w->stride[1], dy = w->dil[1];
    const int64_t per_row = sy * p.pitch / w->stride[2];
    float buf[NN_POOL_PLANE_MAX];
    float *plane = buf, *rows = buf + p.rows * p.pitch, *columns = rows + p.reduced;
    float *counts = columns + p.n_columns;
    const float fill = sum ? 0.0f : -INFINITY;
    for (int64_t i = 0; i < p.rows * p.pitch; i++) {
        plane[i] = fill;
    }
    for (int64_t i = p.vertical; i < p.reduced; i++) {
        rows[i] = 0.0f;  /* read by the column kernels only for cells no output uses */
    }
    if (sum) {
        /* each output's divisor, as divide_row counts it; 1 between rows */
        for (int64_t i = 0; i < p.n_columns; i++) {
            counts[i] = 1.0f;
        }
        int64_t low, high, full_lo, full_hi;
        counted_columns(job, &low, &high, &full_lo, &full_hi);
        for (int64_t oy = 0; oy < out_h; oy++) {
            const int64_t y0 = oy * sy - top;
            int64_t y_lo, y_hi;
            nn_tap_range(y0, in_h, w->k[1], dy, &y_lo, &y_hi);
            const int64_t count_y = job->flag
                ? taps_within(y0, -top, job->extra[1], w->k[1], dy) : y_hi - y_lo;
            float *row = counts + oy * per_row;
            for (int64_t ox = 0; ox < out_w; ox++) {
                const int64_t x0 = ox * w->stride[2] - left;
                const int64_t count_x = ox >= full_lo && ox < full_hi
                    ? w->k[2] : taps_within(x0, low, high, w->k[2], w->dil[2]);
                row[ox] = (float)(count_y * count_x);
            }
        }
    }
    /* input rows [r_lo, r_hi) land inside the buffer */
    const int64_t r_lo = top > 0 ? 0 : -top;
    const int64_t r_hi = in_h < p.rows - top ? in_h : p.rows - top;
    void (*vertical)(float *, const float *, int64_t) = sum ? kernel->vsum : kernel->vmax;
    void (*horizontal)(const float *, float *, int64_t, int64_t, int64_t, int64_t) =
        sum ? kernel->hsum : kernel->hmax;
    for (int64_t index = begin; index < end; index++) {
        const float *x = job->x + index * in_size;
        float *y = job->y + index * out_size;
        for (int64_t r = r_lo; r < r_hi; r++) {
            memcpy(plane + (r + top) * p.pitch + left, x + r * in_w,
                   (size_t)in_w * sizeof(float));
        }
        memcpy(rows, plane, (size_t)p.vertical * sizeof(float));
        for (int64_t ky = 1; ky < w->k[1]; ky++) {
            vertical(rows, plane + ky * dy * p.pitch, p.vertical);
        }
        /* columns over rows sy * pitch apart: output row oy starts at oy * per_row */
        horizontal(rows, columns, p.n_columns, w->stride[2], w->k[2], w->dil[2]);
        if (sum) {
            for (int64_t i = 0; i < p.n_columns; i++) {
                columns[i] = columns[i] / counts[i];
            }
        }
        for (int64_t oy = 0; oy < out_h; oy++) {
            memcpy(y + oy * out_w, columns + oy * per_row, (size_t)out_w * sizeof(float));
        }
    }
}

NN_VECTORIZED static void max_pool_whole_planes(void *arg, int64_t begin, int64_t end) {
    pool_whole_planes((const pool_job *)arg, begin, end, 0);
}

NN_VECTORIZED static void average_pool_whole_planes(void *arg, int64_t begin, int64_t end) {
    pool_whole_planes((const pool_job *)arg, begin, end, 1);
}

/* MaxPool without Indices over a 2-D window, a whole output row at a time: the window's
 * input rows are reduced to one row (contiguous vector loops), written into a buffer
 * whose cells left of the input (padding) and right of it (padding, ceil_mode's extra
 * cells) hold -inf once per call, so each output then takes the maximum of its k columns
 * in that buffer with no edge case (pool_rows.c, SIMD picked from the CPU). */
static void max_pool_separable(void *arg, int64_t begin, int64_t end) {
    const pool_job *job = (const pool_job *)arg;
    const nn_window *w = &job->w;
    const nn_pool_rows *kernel = nn_pool_rows_kernel();
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int64_t out_w = w->out[2], in_w = w->in[2], pad = w->pad[2];
    const int64_t reach = separable_reach(w);
    float buf[NN_POOL_BUF];
    for (int64_t i = 0; i < pad; i++) {
        buf[i] = -INFINITY;
    }
    for (int64_t i = pad + in_w; i < reach; i++) {
        buf[i] = -INFINITY;
    }
    float *rows_max = buf + pad;
    for (int64_t plane = begin; plane < end; plane++) {
        const float *x = job->x + plane * in_size;
        for (int64_t oy = 0; oy < w->out[0] * w->out[1]; oy++) {
            float *y = job->y + plane * out_size + oy * out_w;
            /* depth: k = 1 over in = 1, so only output depth 0 minus padding reaches X */
            const int64_t oz = oy / w->out[1], row = oy % w->out[1];
            int64_t z_lo, z_hi, y_lo, y_hi;
            nn_tap_range(oz * w->stride[0] - w->pad[0], 1, 1, 1, &z_lo, &z_hi);
            const int64_t y0 = row * w->stride[1] - w->pad[1];
            nn_tap_range(y0, w->in[1], w->k[1], w->dil[1], &y_lo, &y_hi);
            if (z_lo >= z_hi || y_lo >= y_hi) {
                /* no input row inside the window: -inf, as the per-tap path gives */
                for (int64_t ox = 0; ox < out_w; ox++) {
                    y[ox] = -INFINITY;
                }
                continue;
            }
            memcpy(rows_max, x + (y0 + y_lo * w->dil[1]) * in_w, (size_t)in_w * sizeof(float));
            for (int64_t ky = y_lo + 1; ky < y_hi; ky++) {
                kernel->vmax(rows_max, x + (y0 + ky * w->dil[1]) * in_w, in_w);
            }
            kernel->hmax(buf, y, out_w, w->stride[2], w->k[2], w->dil[2]);
        }
    }
}

/* A 2-D (or 1-D) MaxPool window the row kernels' max_plane reads straight from X. */
static int direct_fits(const nn_window *w) {
    return nn_pool_rows_kernel()->max_plane && w->k[0] == 1 && w->in[0] == 1
           && w->out[0] == 1 && w->pad[0] == 0 && w->dil[1] == 1 && w->dil[2] == 1
           && (w->stride[2] == 1 || w->stride[2] == 2) && w->k[2] >= 1
           && w->k[2] <= NN_POOL_DIRECT_MAX_K && w->k[1] >= 1
           && w->k[1] <= NN_POOL_DIRECT_MAX_ROWS;
}

/* MaxPool without Indices, a plane at a time straight from X (direct_fits). */
static void max_pool_direct(void *arg, int64_t begin, int64_t end) {
    const pool_job *job = (const pool_job *)arg;
    const nn_window *w = &job->w;
    const nn_pool_plane g = {w->in[1], w->in[2], w->out[1], w->out[2], w->k[1], w->stride[1],
                             w->pad[1], w->k[2], w->stride[2], w->pad[2]};
    const nn_pool_rows *kernel = nn_pool_rows_kernel();
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    for (int64_t plane = begin; plane < end; plane++) {
        kernel->max_plane(job->x + plane * in_size, job->y + plane * out_size, &g);
    }
}

/* MaxPool without Indices for other windows (3-D, rows too wide for the buffer), a whole
 * output row at a time: each tap takes the maximum with the input cells it reaches, a
 * plain (or strided) vector loop per tap. */
NN_VECTORIZED static void max_pool_rows(void *arg, int64_t begin, int64_t end) {
    const pool_job *job = (const pool_job *)arg;
    const nn_window *w = &job->w;
    nn_columns columns;
    nn_columns_init(&columns, w);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int64_t out_w = w->out[2], stride = w->stride[2], in_w = w->in[2];
    int64_t kx_first, kx_last;
    nn_useful_columns(w, &kx_first, &kx_last);
    for (int64_t plane = begin; plane < end; plane++) {
        const float *x = job->x + plane * in_size;
        for (int64_t oz = 0; oz < w->out[0]; oz++) {
            int64_t z0 = oz * w->stride[0] - w->pad[0], z_lo, z_hi;
            nn_tap_range(z0, w->in[0], w->k[0], w->dil[0], &z_lo, &z_hi);
            for (int64_t oy = 0; oy < w->out[1]; oy++) {
                int64_t y0 = oy * w->stride[1] - w->pad[1], y_lo, y_hi;
                nn_tap_range(y0, w->in[1], w->k[1], w->dil[1], &y_lo, &y_hi);
                float *y = job->y + plane * out_size + (oz * w->out[1] + oy) * out_w;
                for (int64_t ox = 0; ox < out_w; ox++) {
                    y[ox] = -INFINITY;
                }
                for (int64_t kz = z_lo; kz < z_hi; kz++) {
                    for (int64_t ky = y_lo; ky < y_hi; ky++) {
                        const float *row = x + ((z0 + kz * w->dil[0]) * w->in[1] + y0
                                                + ky * w->dil[1]) * in_w;
                        for (int64_t kx = kx_first; kx < kx_last; kx++) {
                            int64_t lo, hi;
                            const int64_t offset = nn_column(&columns, w, kx, &lo, &hi);
                            if (stride == 1) {
                                for (int64_t ox = lo; ox < hi; ox++) {
                                    y[ox] = nn_max_keep_nan(y[ox], row[ox + offset]);
                                }
                            } else {
                                for (int64_t ox = lo; ox < hi; ox++) {
                                    y[ox] = nn_max_keep_nan(y[ox], row[ox * stride + offset]);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

int ge_nn_max_pool_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                       const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                       size_t attrs_size) {
    static const char *name = "ge_nn_max_pool_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    pool_job job;
    if (!read_pool(&blob, &job)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t out_numel = job.planes * nn_window_out_size(&job.w);
    if (n_inputs != 1 || n_outputs != 1 + (job.flag != 0)) {
        return ctx->set_error(ctx, "%s: expected 1 input and %d outputs, got %d and %d", name,
                              1 + (job.flag != 0), (int)n_inputs, (int)n_outputs);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], job.planes * nn_window_in_size(&job.w))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], out_numel)) {
        return -1;
    }
    job.indices = NULL;
    if (job.flag) {
        if (outputs[1].dtype != GE_INT64 || outputs[1].numel != out_numel) {
            return ctx->set_error(ctx, "%s: output Indices must be int64 with %lld elements",
                                  name, (long long)out_numel);
        }
        job.indices = (int64_t *)outputs[1].data;
    }
    job.x = (const float *)inputs[0].data;
    job.y = (float *)outputs[0].data;
    int64_t work = nn_window_out_size(&job.w) * nn_window_taps(&job.w);
    if (!job.indices && covers_plane(&job.w)) {
        global_job whole = {nn_window_in_size(&job.w), job.x, job.y};
        ctx->parallel_for(ctx, job.planes, nn_grain(whole.size, NN_POOL_GRAIN_WORK),
                          global_max_planes, &whole);
        return 0;
    }
    ctx->parallel_for(ctx, job.planes, nn_grain(work, NN_POOL_GRAIN_WORK),
                      job.indices ? max_pool_planes
                      : direct_fits(&job.w) ? max_pool_direct
                      : plane_fits(&job.w) ? max_pool_whole_planes
                      : separable_fits(&job.w) ? max_pool_separable : max_pool_rows, &job);
    return 0;
}

/* A whole output row at a time, as max_pool_rows: each output sums its taps in tap
 * order (as the reference does; padding adds nothing), then divides by its count. */
NN_VECTORIZED static void average_pool_planes(void *arg, int64_t begin, int64_t end) {
    const pool_job *job = (const pool_job *)arg;
    const nn_window *w = &job->w;
    nn_columns columns;
    nn_columns_init(&columns, w);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int64_t out_w = w->out[2], stride = w->stride[2];
    int64_t low, high, full_lo, full_hi;
    counted_columns(job, &low, &high, &full_lo, &full_hi);
    int64_t kx_first, kx_last;
    nn_useful_columns(w, &kx_first, &kx_last);
    for (int64_t plane = begin; plane < end; plane++) {
        const float *x = job->x + plane * in_size;
        for (int64_t oz = 0; oz < w->out[0]; oz++) {
            int64_t z0 = oz * w->stride[0] - w->pad[0], z_lo, z_hi;
            nn_tap_range(z0, w->in[0], w->k[0], w->dil[0], &z_lo, &z_hi);
            int64_t count_z = job->flag
                ? taps_within(z0, -w->pad[0], job->extra[0], w->k[0], w->dil[0]) : z_hi - z_lo;
            for (int64_t oy = 0; oy < w->out[1]; oy++) {
                int64_t y0 = oy * w->stride[1] - w->pad[1], y_lo, y_hi;
                nn_tap_range(y0, w->in[1], w->k[1], w->dil[1], &y_lo, &y_hi);
                int64_t count_y = job->flag
                    ? taps_within(y0, -w->pad[1], job->extra[1], w->k[1], w->dil[1])
                    : y_hi - y_lo;
                float *y = job->y + plane * out_size + (oz * w->out[1] + oy) * out_w;
                for (int64_t ox = 0; ox < out_w; ox++) {
                    y[ox] = 0.0f;
                }
                for (int64_t kz = z_lo; kz < z_hi; kz++) {
                    for (int64_t ky = y_lo; ky < y_hi; ky++) {
                        const float *row = x + ((z0 + kz * w->dil[0]) * w->in[1] + y0
                                                + ky * w->dil[1]) * w->in[2];
                        for (int64_t kx = kx_first; kx < kx_last; kx++) {
                            int64_t lo, hi;
                            const int64_t offset = nn_column(&columns, w, kx, &lo, &hi);
                            if (stride == 1) {
                                for (int64_t ox = lo; ox < hi; ox++) {
                                    y[ox] += row[ox + offset];
                                }
                            } else {
                                for (int64_t ox = lo; ox < hi; ox++) {
                                    y[ox] += row[ox * stride + offset];
                                }
                            }
                        }
                    }
                }
                divide_row(y, w, count_z * count_y, low, high, full_lo, full_hi);
            }
        }
    }
}

/* AveragePool over a 2-D (or 1-D) window, as max_pool_separable: the window's input rows
 * summed into one row of a buffer whose padding cells hold 0 (padding adds nothing), the
 * k columns of each output summed by the row kernels, then each output divided by its
 * count. The sum runs rows first, then columns, where the reference runs in tap order:
 * the results differ by rounding only. */
NN_VECTORIZED static void average_pool_separable(void *arg, int64_t begin, int64_t end) {
    const pool_job *job = (const pool_job *)arg;
    const nn_window *w = &job->w;
    const nn_pool_rows *kernel = nn_pool_rows_kernel();
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int64_t out_w = w->out[2], in_w = w->in[2], pad = w->pad[2];
    const int64_t reach = separable_reach(w);
    int64_t low, high, full_lo, full_hi;
    counted_columns(job, &low, &high, &full_lo, &full_hi);
    float buf[NN_POOL_BUF];
    for (int64_t i = 0; i < pad; i++) {
        buf[i] = 0.0f;
    }
    for (int64_t i = pad + in_w; i < reach; i++) {
        buf[i] = 0.0f;
    }
    float *rows_sum = buf + pad;
    for (int64_t plane = begin; plane < end; plane++) {
        const float *x = job->x + plane * in_size;
        for (int64_t oy = 0; oy < w->out[0] * w->out[1]; oy++) {
            float *y = job->y + plane * out_size + oy * out_w;
            /* depth: k = 1 over in = 1, so only output depth 0 minus padding reaches X */
            const int64_t oz = oy / w->out[1], row = oy % w->out[1];
            const int64_t z0 = oz * w->stride[0] - w->pad[0];
            const int64_t y0 = row * w->stride[1] - w->pad[1];
            int64_t z_lo, z_hi, y_lo, y_hi;
            nn_tap_range(z0, 1, 1, 1, &z_lo, &z_hi);
            nn_tap_range(y0, w->in[1], w->k[1], w->dil[1], &y_lo, &y_hi);
            const int64_t count_z = job->flag
                ? taps_within(z0, -w->pad[0], job->extra[0], 1, 1) : z_hi - z_lo;
            const int64_t count_y = job->flag
                ? taps_within(y0, -w->pad[1], job->extra[1], w->k[1], w->dil[1]) : y_hi - y_lo;
            if (z_lo >= z_hi || y_lo >= y_hi) {
                /* no input row inside the window: a sum of 0 */
                for (int64_t ox = 0; ox < out_w; ox++) {
                    y[ox] = 0.0f;
                }
            } else {
                memcpy(rows_sum, x + (y0 + y_lo * w->dil[1]) * in_w,
                       (size_t)in_w * sizeof(float));
                for (int64_t ky = y_lo + 1; ky < y_hi; ky++) {
                    kernel->vsum(rows_sum, x + (y0 + ky * w->dil[1]) * in_w, in_w);
                }
                kernel->hsum(buf, y, out_w, w->stride[2], w->k[2], w->dil[2]);
            }
            divide_row(y, w, count_z * count_y, low, high, full_lo, full_hi);
        }
    }
}

int ge_nn_average_pool_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                           const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                           size_t attrs_size) {
    static const char *name = "ge_nn_average_pool_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    pool_job job;
    if (!read_pool(&blob, &job)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 input and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], job.planes * nn_window_in_size(&job.w))
        || nn_check_f32(ctx, name, "output Y", &outputs[0],
                        job.planes * nn_window_out_size(&job.w))) {
        return -1;
    }
    job.x = (const float *)inputs[0].data;
    job.y = (float *)outputs[0].data;
    job.indices = NULL;
    int64_t work = nn_window_out_size(&job.w) * nn_window_taps(&job.w);
    if (covers_plane(&job.w)) {  /* count_include_pad or not: no padding, every tap counts */
        global_job whole = {nn_window_in_size(&job.w), job.x, job.y};
        ctx->parallel_for(ctx, job.planes, nn_grain(whole.size, NN_POOL_GRAIN_WORK),
                          global_average_planes, &whole);
        return 0;
    }
    ctx->parallel_for(ctx, job.planes, nn_grain(work, NN_POOL_GRAIN_WORK),
                      plane_fits(&job.w) ? average_pool_whole_planes
                      : separable_fits(&job.w) ? average_pool_separable : average_pool_planes,
                      &job);
    return 0;
}

static int global_pool(ge_context *ctx, const char *name, ge_range_fn fn,
                       const ge_tensor *inputs, int32_t n_inputs, const ge_tensor *outputs,
                       int32_t n_outputs, const void *attrs, size_t attrs_size) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[2] = {0};
    if (!ge_blob_ints(&blob, v, 2) || !ge_blob_done(&blob) || v[0] < 0 || v[1] < 1) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 input and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    global_job job = {v[1], (const float *)inputs[0].data, (float *)outputs[0].data};
    if (nn_check_f32(ctx, name, "input X", &inputs[0], v[0] * v[1])
        || nn_check_f32(ctx, name, "output Y", &outputs[0], v[0])) {
        return -1;
    }
    ctx->parallel_for(ctx, v[0], nn_grain(v[1], NN_POOL_GRAIN_WORK), fn, &job);
    return 0;
}

int ge_nn_global_average_pool_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                                  const ge_tensor *outputs, int32_t n_outputs,
                                  const void *attrs, size_t attrs_size) {
    return global_pool(ctx, "ge_nn_global_average_pool_f32", global_average_planes, inputs,
                       n_inputs, outputs, n_outputs, attrs, attrs_size);
}

int ge_nn_global_max_pool_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                              const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                              size_t attrs_size) {
    return global_pool(ctx, "ge_nn_global_max_pool_f32", global_max_planes, inputs, n_inputs,
                       outputs, n_outputs, attrs, attrs_size);
}
