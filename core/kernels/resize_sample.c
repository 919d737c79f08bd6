/*
 * GridSample and RoiAlign (float32): sampling a feature map at computed positions, as the
 * NumPy references in ge_hub/ops/resize.py define it. The packer is
 * ge_hub/kernels/resize_sample.py; both blobs are int64 values (ge_hub/blob.h).
 *
 * GridSample: n, channels, in[3], out_size, spatial, mode, padding, align_corners
 *     X is [n, channels, *in] and the grid [n, out_size, spatial], 1 to 3 spatial axes
 *     padded in front to 3 with size-1 axes that read index 0 with weight 1. mode: 0
 *     linear, 1 nearest, 2 cubic; padding: 0 zeros, 1 border, 2 reflection. Positions
 *     are computed in float32 from the grid (the reference's precision, which decides
 *     which side of a half-way point "nearest" lands on), then in double: each axis gives
 *     up to 4 (index, weight) taps, and the output is the double sum over their
 *     product, tap weights multiplied from the outer axis in, rounded once to float32.
 *
 * RoiAlign: n, channels, height, width, rois, output_height, output_width, sampling_ratio,
 *     mode (0 avg, 1 max), half_pixel, then the float spatial_scale
 *     Roi geometry and bilinear weights in double; each sample's four corner terms are
 *     float32 products of the weight (rounded to float32) and the pixel, summed (avg) or
 *     maxed (max) in float32, as the reference computes them.
 */
#include <math.h>
#include <stdint.h>

#include "nn_common.h"
#include "resize.h"

#define SAMPLE_GRAIN 64
/* The most bilinear samples one roi may take over all its bins and channels. */
#define ROI_MAX_SAMPLES 1e10

/* -- GridSample --------------------------------------------------------------------- */

typedef struct {
    int64_t n, channels, in[3], out_size, spatial, mode, padding, align_corners;
    const float *x, *grid;
    float *y;
} grid_plan;

/* The reference's _reflect: folds c into [low, high], bouncing off both ends. */
static double grid_reflect(double c, double low, double high) {
    double span = high - low;
    if (span <= 0) {
        return low;
    }
    if (c >= low && c <= high) {
        return c;
    }
    int below = c < low;
    double past = below ? low - c : c - high;
    double bounces = floor(past / span);
    double rest = past - bounces * span;
    int even = fmod(bounces, 2.0) == 0.0;
    if (below) {
        return even ? low + rest : high - rest;
    }
    return even ? high - rest : low + rest;
}

static double cubic_weight(double distance) {
    const double a = -0.75;
    double d = fabs(distance);
    if (d <= 1) {
        return ((a + 2) * d - (a + 3)) * d * d + 1;
    }
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
}

/* The taps of one axis for grid value g: returns their count. */
static int grid_axis_taps(const grid_plan *p, int64_t size, float g, int64_t *index,
                          double *weight) {
    float fc;
    double low, high;
    if (p->align_corners) {
        fc = (g + 1.0f) / 2.0f * (float)(size - 1);
        low = 0.0;
        high = (double)size - 1.0;
    } else {
        fc = ((g + 1.0f) * (float)size - 1.0f) / 2.0f;
        low = -0.5;
        high = (double)size - 0.5;
    }
    double c = (double)fc;
    /* Far outside any map (or NaN): kept finite so that the index casts stay defined. */
    c = c == c ? c : -1e15;
    c = c < -1e15 ? -1e15 : (c > 1e15 ? 1e15 : c);
    if (p->mode == 1) {
        c = nearbyint(c);
    }
    if (p->padding == 1 && (c < low || c > high)) {
        c = c < 0 ? 0 : (c > (double)(size - 1) ? (double)(size - 1) : c);
    } else if (p->padding == 2) {
        c = grid_reflect(c, low, high);
    }
    int count;
    if (p->mode == 1) {
        index[0] = (int64_t)trunc(c);
        weight[0] = 1.0;
        count = 1;
    } else {
        double base = floor(c), t = c - base;
        int64_t b = (int64_t)base;
        if (p->mode == 0) {
            index[0] = b;
            weight[0] = 1 - t;
            index[1] = b + 1;
            weight[1] = t;
            count = 2;
        } else {
            for (int o = 0; o < 4; o++) {
                index[o] = b + o - 1;
                weight[o] = cubic_weight(t - (o - 1));
            }
            count = 4;
        }
    }
    for (int i = 0; i < count; i++) {
        if (p->padding == 0) {
            if (index[i] < 0 || index[i] >= size) {
                weight[i] = 0.0;
            }
        } else if (p->padding == 2) {
            index[i] = (int64_t)trunc(grid_reflect((double)index[i], low, high));
        }
        index[i] = index[i] < 0 ? 0 : (index[i] >= size ? size - 1 : index[i]);
    }
    return count;
}

static void grid_positions(void *arg, int64_t begin, int64_t end) {
    const grid_plan *p = (const grid_plan *)arg;
    int64_t in_size = p->in[0] * p->in[1] * p->in[2];
    for (int64_t item = begin; item < end; item++) {
        int64_t b = item / p->out_size, pos = item % p->out_size;
        const float *g = p->grid + item * p->spatial;
        int64_t index[3][4];
        double weight[3][4];
        int count[3];
        for (int a = 0; a < 3; a++) {
            int axis = a - (3 - (int)p->spatial);  /* the grid's axis order, -1: padding */
            if (axis < 0) {
                index[a][0] = 0;
                weight[a][0] = 1.0;
                count[a] = 1;
            } else {
                /* grid[..., spatial - 1 - axis] holds the coordinate of spatial axis `axis` */
                count[a] = grid_axis_taps(p, p->in[a], g[p->spatial - 1 - axis], index[a],
                                          weight[a]);
            }
        }
        int64_t offsets[64];
        double weights[64];
        int taps = 0;
        for (int i = 0; i < count[0]; i++) {
            for (int j = 0; j < count[1]; j++) {
                for (int k = 0; k < count[2]; k++) {
                    offsets[taps] = (index[0][i] * p->in[1] + index[1][j]) * p->in[2]
                                    + index[2][k];
                    weights[taps] = weight[0][i] * weight[1][j] * weight[2][k];
                    taps++;
                }
            }
        }
        for (int64_t c = 0; c < p->channels; c++) {
            const float *plane = p->x + (b * p->channels + c) * in_size;
            double total = 0.0;
            for (int t = 0; t < taps; t++) {
                total += (double)plane[offsets[t]] * weights[t];
            }
            p->y[(b * p->channels + c) * p->out_size + pos] = (float)total;
        }
    }
}

GE_KERNEL(ge_grid_sample_f32) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    grid_plan p;
    p.n = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    p.channels = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    for (int a = 0; a < 3; a++) {
        p.in[a] = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    }
    p.out_size = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    p.spatial = ge_blob_int_in(&blob, 1, 3);
    p.mode = ge_blob_int_in(&blob, 0, 2);
    p.padding = ge_blob_int_in(&blob, 0, 2);
    p.align_corners = ge_blob_int_in(&blob, 0, 1);
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "ge_grid_sample_f32: malformed attribute blob (%zu bytes)",
                              attrs_size);
    }
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_grid_sample_f32: expected 2 inputs and 1 output");
    }
    const ge_tensor *x = &inputs[0], *grid = &inputs[1], *y = &outputs[0];
    int64_t in_size = p.in[0] * p.in[1] * p.in[2];
    if (x->dtype != GE_FLOAT32 || grid->dtype != GE_FLOAT32 || y->dtype != GE_FLOAT32
        || x->numel != p.n * p.channels * in_size || grid->numel != p.n * p.out_size * p.spatial
        || y->numel != p.n * p.channels * p.out_size) {
        return ctx->set_error(ctx, "ge_grid_sample_f32: 'X' (%lld elements), 'grid' (%lld) and "
                              "'Y' (%lld) must be float32 of the blob's sizes",
                              (long long)x->numel, (long long)grid->numel, (long long)y->numel);
    }
    p.x = (const float *)x->data;
    p.grid = (const float *)grid->data;
    p.y = (float *)y->data;
    int64_t grain = SAMPLE_GRAIN * 16 / (p.channels > 0 ? p.channels : 1);
    ctx->parallel_for(ctx, p.n * p.out_size, grain > 0 ? grain : 1, grid_positions, &p);
    return 0;
}

/* -- RoiAlign ----------------------------------------------------------------------- */

typedef struct {
    int64_t n, channels, height, width, rois, out_h, out_w, sampling_ratio, mode, half_pixel;
    double spatial_scale;
    const float *x, *boxes;
    const int64_t *batch;
    float *y;
} roi_plan;

/* The reference's _bilinear_taps for one coordinate: 0 when outside [-1, size]. */
static int roi_taps(double c, int64_t size, int64_t *lo, int64_t *hi, double *w_lo,
                    double *w_hi) {
    int inside = c >= -1.0 && c <= (double)size;
    c = c > 0.0 ? c : 0.0;
    int64_t low = (int64_t)floor(c);
    if (low >= size - 1) {
        *lo = *hi = size - 1;
        *w_lo = 1.0;
        *w_hi = 0.0;
    } else {
        *lo = low;
        *hi = low + 1;
        *w_hi = c - (double)low;
        *w_lo = 1.0 - *w_hi;
    }
    return inside;
}

/* A roi's geometry, as the reference computes it. */
typedef struct {
    double x1, y1, bin_h, bin_w;
    double grid_h, grid_w;  /* samples per bin along each axis (may be <= 0: none) */
} roi_geometry;

static roi_geometry roi_geometry_of(const roi_plan *p, int64_t r) {
    const float *roi = p->boxes + r * 4;
    double shift = p->half_pixel ? 0.5 : 0.0;
    roi_geometry g;
    g.x1 = (double)roi[0] * p->spatial_scale - shift;
    g.y1 = (double)roi[1] * p->spatial_scale - shift;
    double x2 = (double)roi[2] * p->spatial_scale - shift;
    double y2 = (double)roi[3] * p->spatial_scale - shift;
    double roi_h = y2 - g.y1, roi_w = x2 - g.x1;
    if (!p->half_pixel) {
        roi_h = roi_h > 1.0 ? roi_h : 1.0;
        roi_w = roi_w > 1.0 ? roi_w : 1.0;
    }
    g.bin_h = roi_h / (double)p->out_h;
    g.bin_w = roi_w / (double)p->out_w;
    g.grid_h = p->sampling_ratio ? (double)p->sampling_ratio : ceil(g.bin_h);
    g.grid_w = p->sampling_ratio ? (double)p->sampling_ratio : ceil(g.bin_w);
    return g;
}

static void roi_items(void *arg, int64_t begin, int64_t end) {
    const roi_plan *p = (const roi_plan *)arg;
    for (int64_t item = begin; item < end; item++) {
        int64_t r = item / p->channels, c = item % p->channels;
        float *out = p->y + item * p->out_h * p->out_w;
        roi_geometry geo = roi_geometry_of(p, r);
        double x1 = geo.x1, y1 = geo.y1, bin_h = geo.bin_h, bin_w = geo.bin_w;
        int64_t grid_h = geo.grid_h > 0 ? (int64_t)geo.grid_h : 0;
        int64_t grid_w = geo.grid_w > 0 ? (int64_t)geo.grid_w : 0;
        if (grid_h <= 0 || grid_w <= 0) {
            for (int64_t i = 0; i < p->out_h * p->out_w; i++) {
                out[i] = 0.0f;
            }
            continue;
        }
        const float *image = p->x + (p->batch[r] * p->channels + c) * p->height * p->width;
        float count = (float)(grid_h * grid_w);
        for (int64_t ph = 0; ph < p->out_h; ph++) {
            for (int64_t pw = 0; pw < p->out_w; pw++) {
                float acc = p->mode ? -INFINITY : 0.0f;
                for (int64_t iy = 0; iy < grid_h; iy++) {
                    double yy = y1 + (double)ph * bin_h
                                + ((double)iy + 0.5) * bin_h / (double)grid_h;
                    int64_t y_lo, y_hi;
                    double wy_lo, wy_hi;
                    int in_y = roi_taps(yy, p->height, &y_lo, &y_hi, &wy_lo, &wy_hi);
                    for (int64_t ix = 0; ix < grid_w; ix++) {
                        double xx = x1 + (double)pw * bin_w
                                    + ((double)ix + 0.5) * bin_w / (double)grid_w;
                        int64_t x_lo, x_hi;
                        double wx_lo, wx_hi;
                        int in = roi_taps(xx, p->width, &x_lo, &x_hi, &wx_lo, &wx_hi) && in_y;
                        double inside = in ? 1.0 : 0.0;
                        float t0 = (float)(wy_lo * wx_lo * inside) * image[y_lo * p->width + x_lo];
                        float t1 = (float)(wy_lo * wx_hi * inside) * image[y_lo * p->width + x_hi];
                        float t2 = (float)(wy_hi * wx_lo * inside) * image[y_hi * p->width + x_lo];
                        float t3 = (float)(wy_hi * wx_hi * inside) * image[y_hi * p->width + x_hi];
                        if (p->mode) {
                            float m01 = t0 > t1 ? t0 : t1, m23 = t2 > t3 ? t2 : t3;
                            float m = m01 > m23 ? m01 : m23;
                            acc = m > acc ? m : acc;
                        } else {
                            acc += ((t0 + t1) + t2) + t3;
                        }
                    }
                }
                out[ph * p->out_w + pw] = p->mode ? acc : acc / count;
            }
        }
    }
}

GE_KERNEL(ge_roi_align_f32) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    roi_plan p;
    p.n = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    p.channels = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    p.height = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    p.width = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    p.rois = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    p.out_h = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    p.out_w = ge_blob_int_in(&blob, 1, NN_MAX_COORDINATE);
    p.sampling_ratio = ge_blob_int_in(&blob, 0, NN_MAX_COORDINATE);
    p.mode = ge_blob_int_in(&blob, 0, 1);
    p.half_pixel = ge_blob_int_in(&blob, 0, 1);
    p.spatial_scale = ge_blob_float(&blob);
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "ge_roi_align_f32: malformed attribute blob (%zu bytes)",
                              attrs_size);
    }
    if (n_inputs != 3 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_roi_align_f32: expected 3 inputs and 1 output");
    }
    const ge_tensor *x = &inputs[0], *rois = &inputs[1], *batch = &inputs[2], *y = &outputs[0];
    if (x->dtype != GE_FLOAT32 || rois->dtype != GE_FLOAT32 || batch->dtype != GE_INT64
        || y->dtype != GE_FLOAT32 || x->numel != p.n * p.channels * p.height * p.width
        || rois->numel != p.rois * 4 || batch->numel != p.rois
        || y->numel != p.rois * p.channels * p.out_h * p.out_w) {
        return ctx->set_error(ctx, "ge_roi_align_f32: 'X', 'rois', 'batch_indices' and 'Y' "
                              "do not match the blob's sizes and dtypes");
    }
    p.x = (const float *)x->data;
    p.boxes = (const float *)rois->data;
    p.batch = (const int64_t *)batch->data;
    p.y = (float *)y->data;
    for (int64_t r = 0; r < p.rois; r++) {
        if (p.batch[r] < 0 || p.batch[r] >= p.n) {
            return ctx->set_error(ctx, "RoiAlign: input 'batch_indices' must be in [0, %lld), "
                                  "got %lld at roi %lld", (long long)p.n,
                                  (long long)p.batch[r], (long long)r);
        }
        for (int i = 0; i < 4; i++) {
            if (!isfinite(p.boxes[r * 4 + i])) {
                return ctx->set_error(ctx, "RoiAlign: input 'rois' must be finite, got a "
                                      "non-finite coordinate in roi %lld", (long long)r);
            }
        }
        /* With sampling_ratio 0 a roi's size sets its sample count: refuse one that would
         * run for hours instead of hanging the run. */
        roi_geometry geo = roi_geometry_of(&p, r);
        double samples = (geo.grid_h > 0 ? geo.grid_h : 0) * (geo.grid_w > 0 ? geo.grid_w : 0)
                         * (double)p.out_h * (double)p.out_w * (double)p.channels;
        if (!(samples <= ROI_MAX_SAMPLES)) {
            return ctx->set_error(ctx, "RoiAlign: roi %lld of input 'rois' needs %.3g samples "
                                  "(more than %.3g: a huge roi with sampling_ratio 0)",
                                  (long long)r, samples, ROI_MAX_SAMPLES);
        }
    }
    ctx->parallel_for(ctx, p.rois * p.channels, 1, roi_items, &p);
    return 0;
}
