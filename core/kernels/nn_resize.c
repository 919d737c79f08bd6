/*
 * Resize on float32 over the last two axes of an (N, C, H, W) tensor: nearest and
 * linear, for every coordinate transformation the packer resolves.
 *
 * Blob (ge_hub/kernels/nn.py, pack_resize): ints
 *   planes, in_h, in_w, out_h, out_w, taps_h, taps_w,
 *   rows[taps_h * out_h], cols[taps_w * out_w]
 * then floats row_weights[taps_h * out_h], col_weights[taps_w * out_w].
 * Tap t of output row r reads input row rows[t * out_h + r] with weight
 * row_weights[t * out_h + r] (likewise for columns). Nearest mode, and an axis the
 * reference leaves untouched, have one tap of weight 1; linear has two. Everything
 * about coordinates (transformation mode, rounding, clamping at the edges) was decided
 * by the packer, so the kernel only gathers and blends.
 *
 * Like the reference, rows are blended first, then columns, in double.
 */
#include "nn.h"
#include "nn_common.h"

#define NN_RESIZE_GRAIN_WORK 16384

typedef struct {
    int64_t planes, in_h, in_w, out_h, out_w, taps_h, taps_w;
    const unsigned char *rows, *cols, *row_weights, *col_weights;
    const float *x;
    float *y;
} resize_job;

/* Output rows [begin, end) of all planes together (row index = plane * out_h + r). */
static void resize_rows(void *arg, int64_t begin, int64_t end) {
    const resize_job *job = (const resize_job *)arg;
    const int64_t in_plane = job->in_h * job->in_w;
    for (int64_t index = begin; index < end; index++) {
        int64_t plane = index / job->out_h, r = index % job->out_h;
        const float *x = job->x + plane * in_plane;
        float *y = job->y + index * job->out_w;
        if (job->taps_h == 1 && job->taps_w == 1) {
            /* one tap of weight 1 on both axes: a plain gather */
            const float *src = x + nn_load_int(job->rows, r) * job->in_w;
            for (int64_t c = 0; c < job->out_w; c++) {
                y[c] = src[nn_load_int(job->cols, c)];
            }
            continue;
        }
        for (int64_t c = 0; c < job->out_w; c++) {
            double value = 0.0;
            for (int64_t tc = 0; tc < job->taps_w; tc++) {
                int64_t col = nn_load_int(job->cols, tc * job->out_w + c);
                double blended = 0.0;
                for (int64_t tr = 0; tr < job->taps_h; tr++) {
                    int64_t row = nn_load_int(job->rows, tr * job->out_h + r);
                    blended += (double)x[row * job->in_w + col]
                               * nn_load_float(job->row_weights, tr * job->out_h + r);
                }
                value += blended * nn_load_float(job->col_weights, tc * job->out_w + c);
            }
            y[c] = (float)value;
        }
    }
}

int ge_nn_resize_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                     const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                     size_t attrs_size) {
    static const char *name = "ge_nn_resize_f32";
    nn_blob blob = nn_blob_open(attrs, attrs_size);
    int64_t v[7] = {0};
    if (!nn_blob_ints(&blob, v, 7)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    resize_job job = {v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    if (job.planes < 0 || job.in_h < 1 || job.in_w < 1 || job.out_h < 0 || job.out_w < 0
        || job.taps_h < 1 || job.taps_h > 2 || job.taps_w < 1 || job.taps_w > 2) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    job.rows = nn_blob_take(&blob, job.taps_h * job.out_h);
    job.cols = nn_blob_take(&blob, job.taps_w * job.out_w);
    job.row_weights = nn_blob_take(&blob, job.taps_h * job.out_h);
    job.col_weights = nn_blob_take(&blob, job.taps_w * job.out_w);
    if (!nn_blob_done(&blob)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    /* Every index must land in the input: checked once here, not per element. */
    for (int64_t i = 0; i < job.taps_h * job.out_h; i++) {
        int64_t row = nn_load_int(job.rows, i);
        if (row < 0 || row >= job.in_h) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
    }
    for (int64_t i = 0; i < job.taps_w * job.out_w; i++) {
        int64_t col = nn_load_int(job.cols, i);
        if (col < 0 || col >= job.in_w) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
    }
    if (n_inputs < 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected input X and 1 output, got %d inputs and %d "
                              "outputs", name, (int)n_inputs, (int)n_outputs);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], job.planes * job.in_h * job.in_w)
        || nn_check_f32(ctx, name, "output Y", &outputs[0],
                        job.planes * job.out_h * job.out_w)) {
        return -1;
    }
    job.x = (const float *)inputs[0].data;
    job.y = (float *)outputs[0].data;
    int64_t cost = job.out_w * job.taps_h * job.taps_w;
    ctx->parallel_for(ctx, job.planes * job.out_h, nn_grain(cost, NN_RESIZE_GRAIN_WORK),
                      resize_rows, &job);
    return 0;
}
