/*
 * Resize on float32 over the last two axes of an (N, C, H, W) tensor: nearest and
 * linear, for every coordinate transformation the packer resolves.
 *
 * Blob (ge_hub/kernels/resize.py, pack_resize): ints
 *   planes, in_h, in_w, out_h, out_w, taps_h, taps_w, slots,
 *   rows[taps_h * out_h], cols[taps_w * out_w]
 * then floats row_weights[taps_h * out_h], col_weights[taps_w * out_w].
 * Tap t of output row r reads input row rows[t * out_h + r] with weight
 * row_weights[t * out_h + r] (likewise for columns). Nearest mode, and an axis the
 * reference leaves untouched, have one tap of weight 1; linear has two. Everything
 * about coordinates (transformation mode, rounding, clamping at the edges) was decided
 * by the packer, so the kernel only gathers and blends.
 *
 * Like the reference, rows are blended first, then columns, in double: each output row
 * first blends its input rows into a whole row (a vector loop), then gathers its
 * columns from that. Scratch: the column taps and weights as aligned arrays
 * (taps_w * out_w int64 and double), then one blended row of in_w doubles per slot;
 * the output rows are split into `slots` parallel chunks.
 */
#include "resize.h"
#include "nn_common.h"

typedef struct {
    int64_t planes, in_h, in_w, out_h, out_w, taps_h, taps_w, slots;
    const unsigned char *rows, *row_weights;  /* in the blob */
    const int64_t *cols;                      /* in scratch */
    const double *col_weights;                /* in scratch */
    double *blended;                          /* in scratch: slots * in_w */
    const float *x;
    float *y;
} resize_job;

NN_VECTORIZED static void resize_slots(void *arg, int64_t begin, int64_t end) {
    const resize_job *job = (const resize_job *)arg;
    const int64_t in_plane = job->in_h * job->in_w, total = job->planes * job->out_h;
    const int64_t in_w = job->in_w, out_w = job->out_w;
    for (int64_t slot = begin; slot < end; slot++) {
        double *blended = job->blended + slot * in_w;
        for (int64_t index = slot * total / job->slots; index < (slot + 1) * total / job->slots;
             index++) {
            const int64_t plane = index / job->out_h, r = index % job->out_h;
            const float *x = job->x + plane * in_plane;
            float *y = job->y + index * out_w;
            const float *row0 = x + ge_blob_load_int(job->rows, r) * in_w;
            if (job->taps_h == 1 && job->taps_w == 1) {
                /* one tap of weight 1 on both axes: a plain gather */
                for (int64_t c = 0; c < out_w; c++) {
                    y[c] = row0[job->cols[c]];
                }
                continue;
            }
            const double w0 = ge_blob_load_float(job->row_weights, r);
            if (job->taps_h == 1) {
                for (int64_t c = 0; c < in_w; c++) {
                    blended[c] = (double)row0[c] * w0;
                }
            } else {
                const float *row1 = x + ge_blob_load_int(job->rows, job->out_h + r) * in_w;
                const double w1 = ge_blob_load_float(job->row_weights, job->out_h + r);
                for (int64_t c = 0; c < in_w; c++) {
                    blended[c] = (double)row0[c] * w0 + (double)row1[c] * w1;
                }
            }
            if (job->taps_w == 1) {
                for (int64_t c = 0; c < out_w; c++) {
                    y[c] = (float)(blended[job->cols[c]] * job->col_weights[c]);
                }
            } else {
                const int64_t *cols1 = job->cols + out_w;
                const double *weights1 = job->col_weights + out_w;
                for (int64_t c = 0; c < out_w; c++) {
                    y[c] = (float)(blended[job->cols[c]] * job->col_weights[c]
                                   + blended[cols1[c]] * weights1[c]);
                }
            }
        }
    }
}

int ge_nn_resize_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                     const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                     size_t attrs_size) {
    static const char *name = "ge_nn_resize_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[8] = {0};
    if (!ge_blob_ints(&blob, v, 8)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    resize_job job = {.planes = v[0], .in_h = v[1], .in_w = v[2], .out_h = v[3],
                      .out_w = v[4], .taps_h = v[5], .taps_w = v[6], .slots = v[7]};
    if (job.planes < 0 || job.in_h < 1 || job.in_w < 1 || job.out_h < 0 || job.out_w < 0
        || job.taps_h < 1 || job.taps_h > 2 || job.taps_w < 1 || job.taps_w > 2
        || job.slots < 1
        /* the sizes below fit (a file's blob must not wrap them around) */
        || nn_numel3(job.planes, job.in_h, job.in_w) < 0
        || nn_numel3(job.planes, job.out_h, job.out_w) < 0
        || nn_numel3(job.slots, job.in_w, 1) < 0) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    job.rows = ge_blob_take(&blob, job.taps_h * job.out_h);
    const unsigned char *cols = ge_blob_take(&blob, job.taps_w * job.out_w);
    job.row_weights = ge_blob_take(&blob, job.taps_h * job.out_h);
    const unsigned char *col_weights = ge_blob_take(&blob, job.taps_w * job.out_w);
    if (!ge_blob_done(&blob)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    /* Every index must land in the input: checked once here, not per element. */
    for (int64_t i = 0; i < job.taps_h * job.out_h; i++) {
        int64_t row = ge_blob_load_int(job.rows, i);
        if (row < 0 || row >= job.in_h) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
    }
    for (int64_t i = 0; i < job.taps_w * job.out_w; i++) {
        int64_t col = ge_blob_load_int(cols, i);
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
    const size_t taps = (size_t)(job.taps_w * job.out_w);
    const size_t needed = taps * (sizeof(int64_t) + sizeof(double))
                          + (size_t)(job.slots * job.in_w) * sizeof(double);
    if (ctx->scratch == NULL || ctx->scratch_bytes < needed) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    /* The arena is 64-byte aligned and the packer's scratch starts aligned. */
    int64_t *col_table = (int64_t *)ctx->scratch;
    double *weight_table = (double *)(col_table + taps);
    memcpy(col_table, cols, taps * sizeof(int64_t));
    memcpy(weight_table, col_weights, taps * sizeof(double));
    job.cols = col_table;
    job.col_weights = weight_table;
    job.blended = weight_table + taps;
    job.x = (const float *)inputs[0].data;
    job.y = (float *)outputs[0].data;
    ctx->parallel_for(ctx, job.slots, 1, resize_slots, &job);
    return 0;
}
