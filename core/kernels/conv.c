/*
 * Conv and ConvTranspose on float32 (1-D, 2-D and 3-D, as 3-D windows; nn_common.h).
 *
 * Conv blob (ge_hub/kernels/conv.py, pack_conv): ints
 *   path, N, C, M, group, has_bias, block, winograd_block, winograd_slots, window[18]
 * with the paths chosen at compile time:
 *   NN_CONV_DEPTHWISE  group == C == M: one small kernel per channel, applied directly;
 *   NN_CONV_FEW_CHANNELS  at most NN_FEW_MAX_CHANNELS input channels per group (the
 *                      3-channel stems): the depthwise kernel's spans over every input
 *                      plane of the group (conv_depthwise.h), W as given;
 *   NN_CONV_PACKED     constant weights, which the packer laid out at compile time as
 *                      the packed A of nn_gemm_packed.h (one per group): the input's
 *                      patches of `block` output positions are gathered straight into
 *                      packed-B panels, and the packed GEMM computes them;
 *   NN_CONV_WINOGRAD   constant finite weights, 3x3, stride 1, dilation 1, 2-D, enough
 *                      channels: Winograd F(2x2, 3x3) over blocks of `winograd_block`
 *                      output tiles (conv_winograd.c). W arrives as the packer's transformed
 *                      kernels U followed by the sign of every weight (int8 -1, 0, +1 in
 *                      M x C/group x 3 x 3 order, padded to whole floats): data holding an
 *                      inf or NaN runs Winograd on a copy with those values zeroed, then
 *                      sets each output whose window read one to what the direct sum
 *                      gives, which the signs decide (winograd_nonfinite). Files written
 *                      before carry the packed path's weights after U instead, which
 *                      such data takes (told apart by W's size);
 *   NN_CONV_PACKED_BF16  nodes the precision pass marked bf16: the packed path in bf16
 *                      (nn_gemm_bf16.h), W packed at compile time as its bf16 A;
 *   NN_CONV_PAIRS_BF16 the same with the depth tap-major over pairs of channels (an even
 *                      number per group, several taps): the input converted once into
 *                      bf16 channel pairs, the columns copied from it (conv_pairs_bf16.h);
 *                      with unit stride, cg a multiple of 32 and a micro-kernel that can
 *                      (AMX), onto a padded grid the product reads in place instead, no
 *                      columns copied (conv_pairs_grid), where the plan's scratch holds it;
 *   NN_CONV_NHWC_BF16  nodes the precision pass marked bf16 where the bf16 micro-kernel is
 *                      AMX: unit stride, one group, cg a multiple of 32 (conv_nhwc_bf16.h);
 *                      the input converted once per call onto a channels-last bf16 grid
 *                      whose positions are the AMX tiles' rows, W packed at compile time
 *                      in the packed-B layout (panels of 32 output channels, the depth
 *                      tap-major as NN_CONV_PAIRS_BF16's), C stored transposed back;
 *                      scratch: the grid, then one offset per depth block;
 *   NN_CONV_NHWC_BF16_CL  the same on channels-last tensors (ge_hub.FusedConvNHWC: X, Z and
 *                      Y are N x H x W x C): the grid converted from X's positions in
 *                      order, C stored as the tiles hold it (nn_bf16_in_place's
 *                      out_channels_last), no transposes either way; 1x1 windows too,
 *                      and stems of 1 to 4 channels, whose grid's depth blocks are the
 *                      window's rows (conv_nhwc_bf16.h, stem_width; W packed so);
 *   NN_CONV_WINOGRAD_BF16  nodes the precision pass marked bf16 that Winograd fits (16 or
 *                      more channels a side): Winograd with bf16 products (conv_winograd.h,
 *                      u_bf16); W is the bf16 U of every group (16 packed A each), then the
 *                      weights' signs as for NN_CONV_WINOGRAD (in whole uint16 values);
 *   NN_CONV_DIRECT     constant weights, few channels on both sides, stride 2 along the
 *                      rows or too few channels for Winograd (the packer's rule): the sums
 *                      taken straight from X, tiles of 8 output channels by 3 row vectors
 *                      (conv_direct.h); W arrives packed as
 *                      [group][block of 8 channels][cg][kh][kw][8];
 * and, for weights that are not constant (so not packed):
 *   NN_CONV_POINTWISE  1x1 kernel, stride 1, no padding: Y = W @ X per image and group,
 *                      one BLAS GEMM straight on the input (no copy);
 *   NN_CONV_IM2COL     the general case: the input patches of `block` output positions
 *                      are laid out as columns in the scratch buffer (im2col), then
 *                      one BLAS GEMM per block computes those outputs.
 * Scratch: (C / group) * taps * block floats for im2col and the packed path, or for a
 * Winograd conv the larger of that and its own buffers (conv_winograd.h); for the bf16
 * paths the bf16 panels of `block` columns, then (pairs) a group's input as pair words
 * (conv_bf16_scratch_bytes).
 *
 * ge_hub.FusedConv (ge_conv_fused_f32): Conv, then the residual Add of input Z, then an
 * activation (conv_epilogue.h), each path applying them to its output as it stores it
 * (packed: in each GEMM tile's registers for the residual, Relu and Clip, over the
 * stored tile for the other activations; Winograd: per output row of a tile strip;
 * depthwise: per output plane, or row in the general loop; im2col: per block of
 * columns; pointwise: per GEMM). Blob: the Conv blob,
 * then ints activation, has_residual, then floats alpha, beta (pack_fused_conv).
 * Inputs X, W, B (may be omitted), Z (may be omitted).
 *
 * The depthwise path of both runs conv_depthwise.c's direct kernel for 1-D and 2-D
 * windows up to 7x7 (any stride, dilation and padding; nn_conv_depthwise_fits), and the
 * general loop below otherwise.
 *
 * ge_nn_conv_transpose_bf16 (nodes the precision pass marked bf16, constant W): the same
 * with the columns' product in bf16 (nn_gemm_bf16.h: W_g^T packed at compile time as its
 * bf16 A, X_g's rows packed per call by nn_bf16_pack_matrix, `block` input cells at a
 * time); blob: ints N, C, M, group, has_bias, block, window[18]. Scratch: the columns
 * (fp32, 64-byte aligned), then the bf16 panels of `block` cells.
 *
 * ConvTranspose blob (pack_conv_transpose): ints N, C, M, group, has_bias, window[18]
 * with `in` the input's spatial dims, `out` the output's and `pad` the begin pads (which
 * may be negative when output_shape asks for more than the full result). One GEMM per
 * image and group gives every input cell's contribution through every kernel tap (the
 * columns, in scratch: (M / group) * taps * in_size floats), then col2im adds the
 * columns into the output.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "nn_common.h"
#include "nn_gemm_packed.h"
#include "nn_gemm_bf16.h"
#include "conv_winograd.h"
#include "conv_depthwise.h"
#include "conv_direct.h"
#include "conv_epilogue.h"
#include "conv_nhwc_bf16.h"
#include "conv_pairs_bf16.h"
#include "conv_stride2_bf16.h"
#include "ge_hub/internal/threadpool.h"

enum {
    NN_CONV_POINTWISE = 0,
    NN_CONV_IM2COL = 1,
    NN_CONV_DEPTHWISE = 2,
    NN_CONV_WINOGRAD = 3,
    NN_CONV_PACKED = 4,
    NN_CONV_PACKED_BF16 = 5, /* the packed path in bf16 (nn_gemm_bf16.h; precision pass) */
    NN_CONV_FEW_CHANNELS = 6,
    NN_CONV_PAIRS_BF16 = 7, /* bf16, depth tap-major over channel pairs (conv_pairs_bf16.h) */
    NN_CONV_DIRECT = 8,     /* few channels on both sides, straight from X (conv_direct.h) */
    NN_CONV_WINOGRAD_BF16 = 9, /* Winograd with bf16 products (conv_winograd.h, u_bf16) */
    NN_CONV_NHWC_BF16 = 10, /* bf16 from a channels-last grid, for AMX (conv_nhwc_bf16.h) */
    NN_CONV_NHWC_BF16_CL = 11 /* the same with channels-last X, Z and Y */
};

/* Elements of work per parallel chunk: small convolutions run inline. */
#define NN_CONV_GRAIN_WORK 32768

typedef struct {
    int64_t path, n, c, m, group, has_bias, block, winograd_block, winograd_slots;
    nn_window w;
} conv_params;

/* Fills `count` consecutive output channels of one image with their bias (or zeros). */
static void fill_bias(float *y, const float *bias, int64_t count, int64_t size) {
    for (int64_t ch = 0; ch < count; ch++) {
        float value = bias ? bias[ch] : 0.0f;
        float *plane = y + ch * size;
        for (int64_t i = 0; i < size; i++) {
            plane[i] = value;
        }
    }
}

/* -- im2col ------------------------------------------------------------------------- */

typedef struct {
    const nn_window *w;
    const float *x;  /* the group's first input channel of one image */
    float *columns;  /* rows: (channel, tap); columns: output positions [p0, p0 + count) */
    int64_t p0, count;
} im2col_job;

/* One row of the column matrix: what tap (kz, ky, kx) of channel plane `x` sees at
 * output positions [p0, p0 + count). Padding reads as zero. */
static inline void im2col_row(const nn_window *w, const float *x, int64_t kz, int64_t ky, int64_t kx,
                       int64_t p0, int64_t count, float *dst) {
    const int64_t out_h = w->out[1], out_w = w->out[2];
    const int64_t stride_w = w->stride[2];
    const int64_t x_offset = kx * w->dil[2] - w->pad[2];
    int64_t p = p0;
    const int64_t end = p0 + count;
    while (p < end) {
        int64_t ox0 = p % out_w, rest = p / out_w;
        int64_t oy = rest % out_h, oz = rest / out_h;
        int64_t ox1 = out_w < ox0 + (end - p) ? out_w : ox0 + (end - p);
        int64_t iz = oz * w->stride[0] - w->pad[0] + kz * w->dil[0];
        int64_t iy = oy * w->stride[1] - w->pad[1] + ky * w->dil[1];
        float *out = dst + (p - p0);  /* out[ox - ox0] is position ox of this row */
        if (iz < 0 || iz >= w->in[0] || iy < 0 || iy >= w->in[1]) {
            for (int64_t ox = ox0; ox < ox1; ox++) {
                out[ox - ox0] = 0.0f;
            }
        } else {
            const float *row = x + (iz * w->in[1] + iy) * w->in[2];
            int64_t lo, hi;
            nn_position_range(x_offset, stride_w, w->in[2], out_w, &lo, &hi);
            if (lo < ox0) {
                lo = ox0;
            }
            if (hi > ox1) {
                hi = ox1;
            }
            if (hi < lo) {
                hi = lo;
            }
            for (int64_t ox = ox0; ox < lo && ox < ox1; ox++) {
                out[ox - ox0] = 0.0f;
            }
            if (stride_w == 1) {
                for (int64_t ox = lo; ox < hi; ox++) {
                    out[ox - ox0] = row[ox + x_offset];
                }
            } else {
                for (int64_t ox = lo; ox < hi; ox++) {
                    out[ox - ox0] = row[ox * stride_w + x_offset];
                }
            }
            for (int64_t ox = hi > ox0 ? hi : ox0; ox < ox1; ox++) {
                out[ox - ox0] = 0.0f;
            }
        }
        p += ox1 - ox0;
    }
}

/* Rows [begin, end) of the column matrix for output positions [p0, p0 + count), row r
 * written at dst + r * ld. */
NN_VECTORIZED static void im2col_rows_range(const nn_window *w, const float *x, int64_t begin, int64_t end,
                              int64_t p0, int64_t count, float *dst, int64_t ld) {
    const int64_t taps = nn_window_taps(w), in_size = nn_window_in_size(w);
    for (int64_t r = begin; r < end; r++) {
        int64_t channel = r / taps, tap = r % taps;
        int64_t kx = tap % w->k[2], ky = (tap / w->k[2]) % w->k[1], kz = tap / (w->k[2] * w->k[1]);
        im2col_row(w, x + channel * in_size, kz, ky, kx, p0, count, dst + r * ld);
    }
}

static void im2col_rows(void *arg, int64_t begin, int64_t end) {
    const im2col_job *job = (const im2col_job *)arg;
    im2col_rows_range(job->w, job->x, begin, end, job->p0, job->count, job->columns,
                      job->count);
}

/* One block of output positions split into column tiles: each tile lays out its own
 * columns and multiplies them, so tiles need no barrier between the two. */
typedef struct {
    const nn_window *w;
    const float *x, *weights;
    float *columns, *y;  /* y: the group's first output channel, at position 0 */
    int64_t p0, count, rows, mg, out_size, tile;
    float beta;
    const nn_epilogue *epilogue;  /* NULL: none */
    int64_t y_offset;             /* y's offset in the output (and residual) tensor */
} conv_tile_job;

static void conv_tiles(void *arg, int64_t begin, int64_t end) {
    const conv_tile_job *job = (const conv_tile_job *)arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t first = t * job->tile;
        if (first >= job->count) {
            continue;
        }
        int64_t size = job->count - first < job->tile ? job->count - first : job->tile;
        im2col_rows_range(job->w, job->x, 0, job->rows, job->p0 + first, size,
                          job->columns + first, job->count);
        ge_sgemm(0, 0, job->mg, size, job->rows, 1.0f, job->weights, job->rows,
                 job->columns + first, job->count, job->beta, job->y + job->p0 + first,
                 job->out_size);
        if (job->epilogue) {  /* the block's columns, still in cache */
            nn_epilogue_block(job->epilogue, job->y + job->p0 + first,
                              job->y_offset + job->p0 + first, job->mg, size, job->out_size);
        }
    }
}

/* -- im2col into packed-B panels ---------------------------------------------------------- */

typedef struct {
    const nn_window *w;
    const float *x;  /* the group's first input channel of one image */
} packed_columns;

/* Every other value: the constant stride lets the compiler vectorize it with shuffles. */
static inline __attribute__((always_inline)) void copy_stride2(float *restrict dst,
                                                              const float *restrict src,
                                                              int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dst[i] = src[2 * i];
    }
}

static inline __attribute__((always_inline)) void copy_strided(float *restrict dst,
                                                              const float *restrict src,
                                                              int64_t n, int64_t stride) {
    for (int64_t i = 0; i < n; i++) {
        dst[i] = src[i * stride];
    }
}

/* Row r = (channel, tap) of the column matrix for output positions [p0, p0 + count),
 * written contiguously at dst: runs cut only at output-row ends , the valid range of input columns found once. */
static inline __attribute__((always_inline)) void gather_column_row(
    const nn_window *w, const float *plane, int64_t kz, int64_t ky, int64_t kx,
    const int64_t start[3], int64_t lo, int64_t hi, int64_t count, float *restrict dst) {
    const int64_t out_h = w->out[1], out_w = w->out[2], stride_w = w->stride[2];
    const int64_t x_offset = kx * w->dil[2] - w->pad[2];
    /* [lo, hi): output columns whose input column lies inside the row (nn_position_range
     * for this kx); start: the first position's (ox, oy, oz) */
    int64_t ox = start[0], oy = start[1], oz = start[2];
    int64_t q = 0;
    while (q < count) {
        const int64_t n = out_w - ox < count - q ? out_w - ox : count - q;
        float *out = dst + q;
        const int64_t iz = oz * w->stride[0] - w->pad[0] + kz * w->dil[0];
        const int64_t iy = oy * w->stride[1] - w->pad[1] + ky * w->dil[1];
        if (iz < 0 || iz >= w->in[0] || iy < 0 || iy >= w->in[1]) {
            for (int64_t i = 0; i < n; i++) {
                out[i] = 0.0f;
            }
        } else {
            const float *row = plane + (iz * w->in[1] + iy) * w->in[2];
            const int64_t end = ox + n;
            const int64_t a = lo > ox ? (lo < end ? lo : end) : ox;  /* [ox, a): left pad */
            const int64_t b = hi < end ? (hi > a ? hi : a) : end;    /* [a, b): inside */
            for (int64_t i = 0; i < a - ox; i++) {
                out[i] = 0.0f;
            }
            if (stride_w == 1) {
                const float *src = row + x_offset + a;
                for (int64_t i = 0; i < b - a; i++) {
                    out[a - ox + i] = src[i];
                }
            } else if (stride_w == 2) {
                copy_stride2(out + (a - ox), row + x_offset + 2 * a, b - a);
            } else {
                copy_strided(out + (a - ox), row + x_offset + a * stride_w, b - a, stride_w);
            }
            for (int64_t i = b - ox; i < n; i++) {
                out[i] = 0.0f;
            }
        }
        q += n;
        ox += n;
        if (ox == out_w) {
            ox = 0;
            if (++oy == out_h) {
                oy = 0;
                oz++;
            }
        }
    }
}

/* Output positions gathered per row of the column matrix at a time (whole panels): the
 * gathered run stays in L1 until it is spread over the panels. */
#define NN_PACK_GATHER 512

/* Rows [row_begin, row_end) of the column matrix for output positions [col0, col0 + cols)
 * into the packed-B panels (nn_pack_b_fn; col0 starts a panel). Per row and chunk of
 * positions, the row is gathered contiguously into an L1 buffer (runs cut only at
 * output-row ends), then copied a whole panel row (NR floats) at a time: cutting the
 * gather at every panel end instead costs more than the copying on the small maps of
 * deep layers, whose output rows are 7 to 28 wide. */
NN_VECTORIZED NN_INLINE_COPIES static void pack_columns(const void *arg, int64_t row_begin,
                                                        int64_t row_end, int64_t col0,
                                                        int64_t cols, float *panels,
                                                        int64_t k) {
    const packed_columns *job = (const packed_columns *)arg;
    const nn_window *w = job->w;
    const int64_t taps = nn_window_taps(w), in_size = nn_window_in_size(w);
    const int64_t panel_floats = k * NN_PACK_NR;
    float buf[NN_PACK_GATHER] __attribute__((aligned(64)));
    /* The valid output columns per kx, found once per call (kernels up to 16 wide; wider
     * ones find theirs per row). */
    int64_t ranges[16][2];
    for (int64_t kx = 0; kx < w->k[2] && kx < 16; kx++) {
        nn_position_range(kx * w->dil[2] - w->pad[2], w->stride[2], w->in[2], w->out[2],
                          &ranges[kx][0], &ranges[kx][1]);
    }
    for (int64_t c0 = 0; c0 < cols; c0 += NN_PACK_GATHER) {
        const int64_t count = cols - c0 < NN_PACK_GATHER ? cols - c0 : NN_PACK_GATHER;
        const int64_t n_panels = nn_pack_panels(count, NN_PACK_NR);
        const int64_t rest = (col0 + c0) / w->out[2];
        const int64_t start[3] = {(col0 + c0) % w->out[2], rest % w->out[1], rest / w->out[1]};
        for (int64_t i = count; i < n_panels * NN_PACK_NR; i++) {  /* the last panel's tail */
            buf[i] = 0.0f;
        }
        float *dst = panels + (c0 / NN_PACK_NR) * panel_floats;
        const int64_t tap0 = row_begin % taps;
        int64_t channel = row_begin / taps, kx = tap0 % w->k[2];
        int64_t ky = (tap0 / w->k[2]) % w->k[1], kz = tap0 / (w->k[2] * w->k[1]);
        for (int64_t r = row_begin; r < row_end; r++) {
            int64_t lo, hi;
            if (kx < 16) {
                lo = ranges[kx][0];
                hi = ranges[kx][1];
            } else {
                nn_position_range(kx * w->dil[2] - w->pad[2], w->stride[2], w->in[2],
                                  w->out[2], &lo, &hi);
            }
            gather_column_row(w, job->x + channel * in_size, kz, ky, kx, start, lo, hi, count,
                              buf);
            float *row = dst + r * NN_PACK_NR;
            for (int64_t p = 0; p < n_panels; p++) {
                const float *src = buf + p * NN_PACK_NR;
                float *out = row + p * panel_floats;
                for (int j = 0; j < NN_PACK_NR; j++) {
                    out[j] = src[j];
                }
            }
            if (++kx == w->k[2]) {
                kx = 0;
                if (++ky == w->k[1]) {
                    ky = 0;
                    if (++kz == w->k[0]) {
                        kz = 0;
                        channel++;
                    }
                }
            }
        }
    }
}

/* -- depthwise ------------------------------------------------------------------------ */

typedef struct {
    const conv_params *p;
    const float *x, *weights, *bias;
    float *y;
    const nn_epilogue *epilogue;  /* NULL: none */
} depthwise_job;

/* Planes [begin, end) of N * C: each output plane is its channel's input plane
 * correlated with its channel's kernel, accumulated row by row. */
NN_VECTORIZED static void depthwise_planes(void *arg, int64_t begin, int64_t end) {
    const depthwise_job *job = (const depthwise_job *)arg;
    const nn_window *w = &job->p->w;
    nn_columns columns;
    nn_columns_init(&columns, w);
    const int64_t channels = job->p->c, taps = nn_window_taps(w);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    for (int64_t plane = begin; plane < end; plane++) {
        int64_t channel = plane % channels;
        const float *x = job->x + plane * in_size;
        const float *kernel = job->weights + channel * taps;
        float *y = job->y + plane * out_size;
        float bias = job->bias ? job->bias[channel] : 0.0f;
        for (int64_t oz = 0; oz < w->out[0]; oz++) {
            for (int64_t oy = 0; oy < w->out[1]; oy++) {
                float *y_row = y + (oz * w->out[1] + oy) * w->out[2];
                for (int64_t ox = 0; ox < w->out[2]; ox++) {
                    y_row[ox] = bias;
                }
                int64_t z_lo, z_hi, y_lo, y_hi;
                int64_t z0 = oz * w->stride[0] - w->pad[0], y0 = oy * w->stride[1] - w->pad[1];
                nn_tap_range(z0, w->in[0], w->k[0], w->dil[0], &z_lo, &z_hi);
                nn_tap_range(y0, w->in[1], w->k[1], w->dil[1], &y_lo, &y_hi);
                for (int64_t kz = z_lo; kz < z_hi; kz++) {
                    for (int64_t ky = y_lo; ky < y_hi; ky++) {
                        const float *x_row =
                            x + ((z0 + kz * w->dil[0]) * w->in[1] + y0 + ky * w->dil[1]) * w->in[2];
                        const float *k_row = kernel + (kz * w->k[1] + ky) * w->k[2];
                        for (int64_t kx = 0; kx < w->k[2]; kx++) {
                            int64_t lo, hi;
                            const int64_t offset = nn_column(&columns, w, kx, &lo, &hi);
                            const float weight = k_row[kx];
                            if (w->stride[2] == 1) {
                                for (int64_t ox = lo; ox < hi; ox++) {
                                    y_row[ox] += weight * x_row[ox + offset];
                                }
                            } else {
                                for (int64_t ox = lo; ox < hi; ox++) {
                                    y_row[ox] += weight * x_row[ox * w->stride[2] + offset];
                                }
                            }
                        }
                    }
                }
                if (job->epilogue) {  /* the finished row, still in L1 */
                    const float *res = job->epilogue->residual;
                    const int64_t at = plane * out_size + (y_row - y);
                    nn_epilogue_run(job->epilogue, y_row, res ? res + at : NULL, w->out[2]);
                }
            }
        }
    }
}

/* -- Conv ----------------------------------------------------------------------------- */

/* The Conv blob's values; the caller checks ge_blob_done (FusedConv's blob goes on). */
static int read_conv_params(ge_blob *blob, conv_params *p) {
    int64_t v[9] = {0};
    if (!ge_blob_ints(blob, v, 9) || !nn_blob_window(blob, &p->w, 0)) {
        return 0;
    }
    p->path = v[0];
    p->n = v[1];
    p->c = v[2];
    p->m = v[3];
    p->group = v[4];
    p->has_bias = v[5];
    p->block = v[6];
    p->winograd_block = v[7];
    p->winograd_slots = v[8];
    for (int i = 1; i < 9; i++) {
        if (v[i] > NN_MAX_NUMEL) {
            return 0;
        }
    }
    if (!(p->n >= 0 && p->group >= 1 && p->c >= 0 && p->m >= 0 && p->c % p->group == 0
          && p->m % p->group == 0 && p->block >= 1 && p->winograd_block >= 0
          && p->winograd_slots >= 0
          && p->path >= NN_CONV_POINTWISE && p->path <= NN_CONV_NHWC_BF16_CL)) {
        return 0;
    }
    /* Every size conv_run and its paths compute from these fits (nn_numel3): X, Y, the
     * weights in any layout (panels round channels up by at most a panel), the scratch. */
    const int64_t cg = p->c / p->group, mg = p->m / p->group, taps = nn_window_taps(&p->w);
    const int64_t rows = nn_numel3(cg, taps, 1);
    const int64_t mg_panels = mg + NN_PACK_MR, block_panels = p->block + NN_PACK_NR;
    const int64_t wino_panels = p->winograd_block + NN_PACK_NR;
    return rows >= 0
           && nn_numel3(p->n, p->c, nn_window_in_size(&p->w)) >= 0
           && nn_numel3(p->n, p->m, nn_window_out_size(&p->w)) >= 0
           && nn_numel3(p->group, mg_panels, rows) >= 0
           && nn_numel3(p->group, 16 * mg_panels, cg) >= 0
           && nn_numel3(rows, block_panels, 1) >= 0
           && nn_numel3(p->winograd_slots, 16 * (cg + mg), wino_panels) >= 0;
}

/* 1 when every value is finite (no NaN, no inf). */
NN_VECTORIZED static int all_finite(const float *data, int64_t n) {
    int finite = 1;
    for (int64_t i = 0; i < n; i++) {
        finite &= (data[i] - data[i]) == 0.0f;  /* NaN for inf and NaN alike */
    }
    return finite;
}

/* The general path: im2col of a block of output positions, then GEMM. */
static void conv_im2col(ge_context *ctx, const conv_params *p, const float *x,
                        const float *weights, const float *bias, float *y, float *columns,
                        const nn_epilogue *epilogue) {
    const nn_window *w = &p->w;
    const int64_t cg = p->c / p->group, mg = p->m / p->group;
    const int64_t rows = cg * nn_window_taps(w);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    for (int64_t image = 0; image < p->n; image++) {
        for (int64_t g = 0; g < p->group; g++) {
            float *y_group = y + (image * p->m + g * mg) * out_size;
            if (bias) {
                fill_bias(y_group, bias + g * mg, mg, out_size);
            }
            const float *x_group = x + (image * p->c + g * cg) * in_size;
            const float *w_group = weights + g * mg * rows;
            for (int64_t p0 = 0; p0 < out_size; p0 += p->block) {
                int64_t count = out_size - p0 < p->block ? out_size - p0 : p->block;
                int64_t tiles = nn_sgemm_tiles(mg, count, rows);
                if (tiles > 1 && count >= mg) {
                    int64_t tile = (count + tiles - 1) / tiles;
                    tile = (tile + 15) / 16 * 16;
                    conv_tile_job job = {w, x_group, w_group, columns, y_group, p0, count, rows,
                                         mg, out_size, tile, bias ? 1.0f : 0.0f, epilogue,
                                         (image * p->m + g * mg) * out_size};
                    ctx->parallel_for(ctx, (count + tile - 1) / tile, 1, conv_tiles, &job);
                    continue;
                }
                /* Few output positions: lay the columns out in parallel, then let the
                 * product split over output channels. */
                im2col_job job = {w, x_group, columns, p0, count};
                ctx->parallel_for(ctx, rows, nn_grain(count, NN_CONV_GRAIN_WORK), im2col_rows,
                                  &job);
                nn_sgemm(ctx, 0, 0, mg, count, rows, 1.0f, w_group, rows, columns, count,
                         bias ? 1.0f : 0.0f, y_group + p0, out_size);
                if (epilogue) {
                    nn_epilogue_block(epilogue, y_group + p0,
                                      (image * p->m + g * mg) * out_size + p0, mg, count,
                                      out_size);
                }
            }
        }
    }
}

/* A 1x1 window with stride 1 and no padding: the column matrix of a group is its input
 * planes as they are (rows in_size apart), which the packed GEMM then reads in place
 * instead of packing them. GE_HUB_CONV_POINTWISE=packed packs them all the same (for
 * tests and measurements). */
static int pointwise_in_place_allowed = 1;
static pthread_once_t pointwise_once = PTHREAD_ONCE_INIT;

static void read_pointwise_env(void) {
    const char *value = getenv("GE_HUB_CONV_POINTWISE");
    pointwise_in_place_allowed = !(value && strcmp(value, "packed") == 0);
}

static int reads_in_place(const nn_window *w) {
    for (int d = 0; d < 3; d++) {
        if (w->k[d] != 1 || w->stride[d] != 1 || w->pad[d] != 0 || w->in[d] != w->out[d]) {
            return 0;
        }
    }
    pthread_once(&pointwise_once, read_pointwise_env);
    return pointwise_in_place_allowed;
}

/* The packed path: `weights` laid out by the packer as the packed A of every group. */
static void conv_packed(ge_context *ctx, const conv_params *p, const float *x,
                        const float *weights, const float *bias, float *y, float *scratch,
                        const nn_epilogue *epilogue) {
    const nn_window *w = &p->w;
    const int64_t cg = p->c / p->group, mg = p->m / p->group;
    const int64_t rows = cg * nn_window_taps(w);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int64_t panel_floats = nn_pack_panels(mg, NN_PACK_MR) * rows * NN_PACK_MR;
    const int in_place = reads_in_place(w);
    for (int64_t image = 0; image < p->n; image++) {
        for (int64_t g = 0; g < p->group; g++) {
            packed_columns columns = {w, x + (image * p->c + g * cg) * in_size};
            nn_packed_gemm gemm = {mg, out_size, rows, weights + g * panel_floats,
                                   bias ? bias + g * mg : NULL,
                                   y + (image * p->m + g * mg) * out_size, out_size,
                                   pack_columns, &columns, p->block, scratch, epilogue,
                                   epilogue && epilogue->residual
                                       ? epilogue->residual + (image * p->m + g * mg) * out_size
                                       : NULL,
                                   in_place ? columns.x : NULL, in_size};
            nn_gemm_packed(ctx, &gemm);
        }
    }
}

/* Output positions gathered per pair of column rows by the bf16 packer (whole panels):
 * small enough that the pair stays in L1 between its gathering and its conversion. */
#define NN_BF16_GATHER 512

/* The bf16 packer of the packed path (nn_bf16_pack_fn): per pair of rows of the column
 * matrix and chunk of positions, both rows are gathered as fp32 into an L1 buffer
 * (zero-padded to whole panels), which nn_bf16_pair_rows converts into that pair-row of
 * every panel, so the columns are written once, in bf16. */
NN_VECTORIZED static void pack_columns_bf16(const void *arg, int64_t col0, int64_t cols,
                                            uint16_t *panels, int64_t panel_stride, int64_t k) {
    const packed_columns *job = (const packed_columns *)arg;
    const nn_window *w = job->w;
    const int64_t in_size = nn_window_in_size(w), kp = nn_bf16_depth(k);
    float buf[2][NN_BF16_GATHER] __attribute__((aligned(64)));
    /* The valid output columns per kx, found once per call (kernels up to 16 wide; wider
     * ones find theirs per row), and the taps walked without divisions. */
    int64_t ranges[16][2];
    for (int64_t kx = 0; kx < w->k[2] && kx < 16; kx++) {
        nn_position_range(kx * w->dil[2] - w->pad[2], w->stride[2], w->in[2], w->out[2],
                          &ranges[kx][0], &ranges[kx][1]);
    }
    for (int64_t c0 = 0; c0 < cols; c0 += NN_BF16_GATHER) {
        const int64_t count = cols - c0 < NN_BF16_GATHER ? cols - c0 : NN_BF16_GATHER;
        const int64_t n_panels = nn_pack_panels(count, NN_PACK_NR);
        const int64_t rest = (col0 + c0) / w->out[2];
        const int64_t start[3] = {(col0 + c0) % w->out[2], rest % w->out[1], rest / w->out[1]};
        uint16_t *dst = panels + (c0 / NN_PACK_NR) * panel_stride;
        int64_t channel = 0, kz = 0, ky = 0, kx = 0;  /* row r's channel and tap */
        for (int64_t r = 0; r < kp; r += 2) {
            const int real = r + 1 < k ? 2 : r < k ? 1 : 0;
            for (int half = 0; half < real; half++) {
                int64_t lo, hi;
                if (kx < 16) {
                    lo = ranges[kx][0];
                    hi = ranges[kx][1];
                } else {
                    nn_position_range(kx * w->dil[2] - w->pad[2], w->stride[2], w->in[2],
                                      w->out[2], &lo, &hi);
                }
                gather_column_row(w, job->x + channel * in_size, kz, ky, kx, start, lo, hi,
                                  count, buf[half]);
                for (int64_t i = count; i < n_panels * NN_PACK_NR; i++) {
                    buf[half][i] = 0.0f;
                }
                if (++kx == w->k[2]) {
                    kx = 0;
                    if (++ky == w->k[1]) {
                        ky = 0;
                        if (++kz == w->k[0]) {
                            kz = 0;
                            channel++;
                        }
                    }
                }
            }
            nn_bf16_pair_rows(real > 0 ? buf[0] : NULL, real > 1 ? buf[1] : NULL, n_panels,
                              dst + r * NN_PACK_NR, panel_stride);
        }
    }
}

/* A pointwise convolution with unit strides and no padding reads its input [C, HW] as the
 * column matrix itself: no gathering. */
static int conv_is_plain_matrix(const nn_window *w) {
    for (int a = 0; a < 3; a++) {
        if (w->k[a] != 1 || w->stride[a] != 1 || w->pad[a] != 0 || w->out[a] != w->in[a]) {
            return 0;
        }
    }
    return 1;
}

/* Bytes of scratch the bf16 paths take: the B panels of `block` columns (64-byte aligned),
 * then for NN_CONV_PAIRS_BF16 one group's input as channel pairs. */
static size_t conv_bf16_panel_bytes(const conv_params *p) {
    const int64_t rows = (p->c / p->group) * nn_window_taps(&p->w);
    return ((size_t)(nn_bf16_depth(rows) * p->block) * 2u + 63) / 64 * 64;
}

static size_t conv_bf16_scratch_bytes(const conv_params *p) {
    const size_t pairs = p->path == NN_CONV_PAIRS_BF16
                             ? (size_t)((p->c / p->group) * nn_window_in_size(&p->w)) * 2u
                             : 0;
    return conv_bf16_panel_bytes(p) + pairs;
}

/* The packed path in bf16: `weights` the bf16 packed A of every group (nn_gemm_bf16.h);
 * the columns are packed straight into bf16 pair-rows (pack_columns_bf16, or
 * nn_bf16_pack_matrix for a plain pointwise convolution), or for NN_CONV_PAIRS_BF16 copied
 * from the group's input converted into channel pairs (conv_pairs_bf16.h). */
static void conv_packed_bf16(ge_context *ctx, const conv_params *p, const float *x,
                             const uint16_t *weights, const float *bias, float *y,
                             float *scratch, const nn_epilogue *epilogue) {
    const nn_window *w = &p->w;
    const int64_t cg = p->c / p->group, mg = p->m / p->group;
    const int64_t rows = cg * nn_window_taps(w);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    const int pairs = p->path == NN_CONV_PAIRS_BF16;
    const int matrix = !pairs && conv_is_plain_matrix(w);
    const int stride2 = !pairs && !matrix && conv_stride2_fits(w, rows);
    uint32_t *pair_words = (uint32_t *)((char *)scratch + conv_bf16_panel_bytes(p));
    conv_pairs_grid grid = {0};
    /* read in place where the micro-kernel can and the plan's scratch holds the grid (a
     * file planned before has only the pairs' room) */
    const int in_place = pairs && conv_pairs_grid_of(w, cg, &grid)
                         && nn_gemm_bf16_reads_in_place(epilogue)
                         && ctx->scratch_bytes >= conv_bf16_panel_bytes(p)
                                                      + (size_t)conv_pairs_grid_bytes(&grid, cg, rows);
    int64_t *block_offsets =
        in_place ? (int64_t *)(pair_words + grid.copies * (cg / 2) * grid.plane) : NULL;
    if (in_place) {
        conv_pairs_grid_offsets(w, &grid, cg, rows, block_offsets);
    }
    /* read in place: C's columns are the grid's positions of the output rows */
    const nn_bf16_in_place read = {(const uint16_t *)pair_words, block_offsets, 2 * grid.plane,
                                   grid.pitch, w->out[2]};
    for (int64_t image = 0; image < p->n; image++) {
        for (int64_t g = 0; g < p->group; g++) {
            const float *x_group = x + (image * p->c + g * cg) * in_size;
            packed_columns columns = {w, x_group};
            conv_stride2_columns stride2_columns = {w, x_group};
            nn_bf16_matrix plain = {x_group, in_size};
            conv_pairs pair_columns = {w, pair_words, cg / 2};
            const int64_t at = (image * p->m + g * mg) * out_size;
            nn_bf16_gemm gemm = {mg, out_size, rows, weights + g * nn_bf16_a_values(mg, rows),
                                 bias ? bias + g * mg : NULL, y + at, out_size, 1,
                                 pairs     ? conv_pairs_pack
                                 : matrix  ? nn_bf16_pack_matrix
                                 : stride2 ? conv_stride2_pack
                                           : pack_columns_bf16,
                                 pairs     ? (const void *)&pair_columns
                                 : matrix  ? (const void *)&plain
                                 : stride2 ? (const void *)&stride2_columns
                                           : (const void *)&columns,
                                 p->block, (uint16_t *)scratch,
                                 nn_bf16_depth(rows) * NN_PACK_NR, epilogue,
                                 epilogue && epilogue->residual ? epilogue->residual + at
                                                                : NULL};
            if (in_place) {
                conv_pairs_convert_grid(ctx, x_group, cg / 2, w, &grid, pair_words);
                gemm.n = w->out[1] * grid.pitch;
                gemm.in_place = &read;
            } else if (pairs) {
                conv_pairs_convert(ctx, x_group, cg / 2, in_size, pair_words);
            }
            nn_gemm_bf16(ctx, &gemm);
        }
    }
}

/* NN_CONV_NHWC_BF16: each image's input onto the channels-last grid, then one product
 * whose A is the weight (packed-B panels), whose columns are the grid's positions of the
 * output rows (C's columns out_h x pitch, those past out_w dropped) and whose B the
 * micro-kernel reads from the grid (nn_bf16_in_place with `channels`). */
/* conv_nhwc_bf16's 1x1 windows read in place: positions [0, main) straight from X, the
 * rest (fewer than a block) from `positions` (the grid's scratch), copied there and
 * followed by zeros; each part C's columns in order (pitch = width = its positions). */
static void conv_pointwise_bf16_cl(ge_context *ctx, const conv_params *p, const uint16_t *x,
                                   const uint16_t *weights, const float *bias, uint16_t *y,
                                   const uint16_t *residual, const nn_epilogue *epilogue,
                                   const nn_bf16_in_place *read, uint16_t *positions) {
    const int64_t n = nn_window_out_size(&p->w), main = n / NN_BF16_NR * NN_BF16_NR;
    const int64_t k = p->c, kp = nn_bf16_depth(k);
    for (int64_t part = 0; part < 2; part++) {
        const int64_t first = part ? main : 0, count = part ? n - main : main;
        if (count == 0) {
            continue;
        }
        nn_bf16_in_place in_place = *read;
        in_place.b = x + first * p->c;
        if (part) {
            memcpy(positions, in_place.b, (size_t)(count * p->c) * 2);
            memset(positions + count * p->c, 0, (size_t)((NN_BF16_NR - count) * p->c) * 2);
            in_place.b = positions;
        }
        in_place.pitch = in_place.width = count;
        nn_bf16_gemm gemm = {p->m, count, k, weights, bias, NULL, 1, p->m, NULL, NULL,
                             NN_PACK_NR, NULL, kp * NN_BF16_NR, epilogue, NULL};
        gemm.in_place = &in_place;
        gemm.c_bf16 = y + first * p->m;
        gemm.residual_bf16 = residual ? residual + first * p->m : NULL;
        nn_gemm_bf16(ctx, &gemm);
    }
}

/* A stem's outputs (conv_nhwc_bf16.h, stem_width) whose depth blocks read an inf or a
 * NaN outside their window (multiplied by a zero weight: NaN where the sum has none),
 * computed again from the window's taps alone, in the order of the depth, then stored
 * with the bias and the epilogue as the product stores them. y and residual16 (bf16
 * tensors) or y32 and epilogue->residual (float32): the image's. */
static void conv_nhwc_stem_specials(const conv_params *p, const conv_nhwc_grid *grid,
                                    const uint16_t *positions, const int64_t *offsets,
                                    const uint16_t *weights, const float *bias, uint16_t *y,
                                    float *y32, const uint16_t *residual16,
                                    const float *residual32, const nn_epilogue *epilogue) {
    const nn_window *w = &p->w;
    const int64_t kh = w->k[1], kw = w->k[2], kp = nn_bf16_depth(kh * NN_BF16_KB);
    const int64_t step = 4 * grid->stride_w;
    float sums[NN_PACK_NR], residual[NN_PACK_NR];
    for (int64_t oy = 0; oy < w->out[1]; oy++) {
        for (int64_t ox = 0; ox < w->out[2]; ox++) {
            const uint16_t *at = positions + (oy * grid->pitch + ox) * step;
            int stray = 0;  /* a special past the window, in a block's row */
            for (int64_t ky = 0; ky < kh && !stray; ky++) {
                for (int64_t i = kw * 4; i < NN_BF16_KB; i++) {
                    stray |= (at[offsets[ky] + i] & 0x7f80) == 0x7f80;
                }
            }
            if (!stray) {
                continue;
            }
            const int64_t out = (oy * w->out[2] + ox) * p->m;
            for (int64_t j0 = 0; j0 < p->m; j0 += NN_PACK_NR) {
                const int64_t n = p->m - j0 < NN_PACK_NR ? p->m - j0 : NN_PACK_NR;
                /* the weight's packed-B panel of channels j0..: (kk / 2, j, kk % 2) */
                const uint16_t *panel = weights + j0 / NN_PACK_NR * kp * NN_PACK_NR;
                for (int64_t j = 0; j < n; j++) {
                    float sum = 0.0f;
                    for (int64_t ky = 0; ky < kh; ky++) {
                        for (int64_t t = 0; t < kw * 4; t++) {
                            const int64_t kk = ky * NN_BF16_KB + t;
                            const uint16_t wv = panel[(kk / 2 * NN_PACK_NR + j) * 2 + kk % 2];
                            sum += nn_bf16_value(at[offsets[ky] + t]) * nn_bf16_value(wv);
                        }
                    }
                    sums[j] = sum + (bias ? bias[j0 + j] : 0.0f);
                    residual[j] = residual16 ? nn_bf16_value(residual16[out + j0 + j])
                                  : residual32 ? residual32[out + j0 + j] : 0.0f;
                }
                if (epilogue) {
                    nn_epilogue_run(epilogue, sums, residual16 || residual32 ? residual : NULL,
                                    n);
                }
                for (int64_t j = 0; j < n; j++) {
                    if (y) {
                        y[out + j0 + j] = nn_bf16_of(sums[j]);
                    } else {
                        y32[out + j0 + j] = sums[j];
                    }
                }
            }
        }
    }
}

/* With `bf16` (channels-last only), X, Y and the residual are bf16 (uint16) tensors. */
static void conv_nhwc_bf16(ge_context *ctx, const conv_params *p, const conv_nhwc_grid *grid,
                           const void *x, const uint16_t *weights, const float *bias,
                           void *y, void *scratch, const nn_epilogue *epilogue,
                           const uint16_t *residual16, int bf16) {
    const int channels_last = p->path == NN_CONV_NHWC_BF16_CL;
    const nn_window *w = &p->w;
    const int64_t k = conv_nhwc_depth(w, grid, p->c), kp = nn_bf16_depth(k);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    uint16_t *positions = (uint16_t *)scratch;
    int64_t *offsets = (int64_t *)((char *)scratch + conv_nhwc_grid_bytes(grid, p->c, k)
                                   - kp / NN_BF16_KB * 8);
    conv_nhwc_offsets(w, grid, p->c, k, offsets);
    const nn_bf16_in_place read = {positions, offsets,   0, grid->pitch,
                                   w->out[2], conv_nhwc_position_values(grid, p->c),
                                   channels_last};
    /* A 1x1 window with unit strides and no padding over bf16 positions: X is its own
     * grid, read in place (a copy cost as much as the product: light ResNet-50's 256 -> 64
     * layers at 56x56 read 1.6 MB); only a last partial block of positions, whose tiles
     * would read past X, comes from the grid. */
    const int x_is_grid = bf16 && channels_last && !grid->stem_width && nn_window_taps(w) == 1
                          && w->stride[1] == 1 && w->stride[2] == 1 && grid->pitch == w->in[2]
                          && grid->rows == w->in[1] && grid->top == 0 && grid->left == 0;
    for (int64_t image = 0; image < p->n; image++) {
        const int64_t at = image * p->m * out_size;
        const int64_t x_at = image * p->c * in_size;
        if (x_is_grid) {
            conv_pointwise_bf16_cl(ctx, p, (const uint16_t *)x + x_at, weights, bias,
                                   (uint16_t *)y + at, residual16 ? residual16 + at : NULL,
                                   epilogue, &read, positions);
            continue;
        }
        int specials = 0;
        if (grid->stem_width) {
            specials = conv_nhwc_convert_stem(ctx, bf16 ? NULL : (const float *)x + x_at,
                                              bf16 ? (const uint16_t *)x + x_at : NULL, p->c,
                                              w, grid, positions);
        } else {
            conv_nhwc_convert(ctx, bf16 ? NULL : (const float *)x + x_at,
                              bf16 ? (const uint16_t *)x + x_at : NULL, p->c, channels_last,
                              w, grid, positions);
        }
        /* C[channel][position]: planes (NCHW) or positions of m channels (channels-last) */
        nn_bf16_gemm gemm = {p->m, w->out[1] * grid->pitch, k, weights, bias,
                             bf16 ? NULL : (float *)y + at,
                             channels_last ? 1 : out_size, channels_last ? p->m : 1, NULL,
                             NULL, NN_PACK_NR, NULL, kp * NN_BF16_NR,
                             epilogue, epilogue && epilogue->residual ? epilogue->residual + at
                                                                      : NULL};
        gemm.in_place = &read;
        if (bf16) {
            gemm.c_bf16 = (uint16_t *)y + at;
            gemm.residual_bf16 = residual16 ? residual16 + at : NULL;
        }
        nn_gemm_bf16(ctx, &gemm);
        if (specials) {
            conv_nhwc_stem_specials(p, grid, positions, offsets, weights, bias,
                                    bf16 ? (uint16_t *)y + at : NULL,
                                    bf16 ? NULL : (float *)y + at,
                                    residual16 ? residual16 + at : NULL,
                                    epilogue && epilogue->residual ? epilogue->residual + at
                                                                   : NULL,
                                    epilogue);
        }
    }
}

/* The checks of NN_CONV_NHWC_BF16's blob and inputs, then the run. */
static int conv_nhwc_bf16_run(ge_context *ctx, const char *name, ge_blob blob,
                              const conv_params *p, const ge_tensor *inputs,
                              const ge_tensor *outputs, const nn_epilogue *epilogue,
                              const uint16_t *residual16, int bf16) {
    const int activation = epilogue ? epilogue->activation : FUSED_ACT_NONE;
    conv_nhwc_grid grid;
    if (p->group != 1 || p->c * nn_window_taps(&p->w) < NN_BF16_MIN_K
        || !conv_nhwc_grid_of(&p->w, p->c, p->path == NN_CONV_NHWC_BF16_CL, &grid)
        || !(activation == FUSED_ACT_NONE || activation == FUSED_ACT_RELU
             || activation == FUSED_ACT_CLIP || activation == FUSED_ACT_GELU)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t k = conv_nhwc_depth(&p->w, &grid, p->c);
    /* the weight's packed-B panels: one of 32 output channels per 32, kp deep */
    const int64_t weight_values = nn_pack_panels(p->m, NN_BF16_NR) * NN_BF16_NR
                                  * nn_bf16_depth(k);
    if (inputs[1].dtype != GE_UINT16 || inputs[1].numel != weight_values) {
        return ctx->set_error(ctx, "%s: input W must be the bf16 weights packed at compile "
                              "time (%lld uint16 values)", name, (long long)weight_values);
    }
    const int64_t in_size = nn_window_in_size(&p->w), out_size = nn_window_out_size(&p->w);
    const int64_t x_numel = nn_numel3(p->n, p->c, in_size);
    const int64_t y_numel = nn_numel3(p->n, p->m, out_size);
    if ((bf16 ? nn_check_bf16(ctx, name, "input X", &inputs[0], x_numel)
              : nn_check_f32(ctx, name, "input X", &inputs[0], x_numel))
        || (p->has_bias && nn_check_f32(ctx, name, "input B", &inputs[2], p->m))
        || (bf16 ? nn_check_bf16(ctx, name, "output Y", &outputs[0], y_numel)
                 : nn_check_f32(ctx, name, "output Y", &outputs[0], y_numel))) {
        return -1;
    }
    const size_t needed = (size_t)conv_nhwc_grid_bytes(&grid, p->c, k);
    if (ctx->scratch_bytes < needed || ctx->scratch == NULL) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    conv_nhwc_bf16(ctx, p, &grid, inputs[0].data, (const uint16_t *)inputs[1].data,
                   p->has_bias ? (const float *)inputs[2].data : NULL, outputs[0].data,
                   ctx->scratch, epilogue, residual16, bf16);
    return 0;
}

/* A Winograd conv on data holding inf or NaN, with no copy of the weights but their signs
 * (`signs`: int8 per weight, M x cg x 3 x 3). Winograd's transforms would mix an inf with
 * itself (inf - inf), so it runs on a copy of X whose non-finite values are zeros (made
 * here, freed after: the rare case pays for it); an output whose window reads none of
 * them is then right as it is. Any other output is, as the direct sum computes it, NaN
 * when its window reads a NaN, multiplies an inf by a zero weight, or adds infinities
 * of both signs, else the infinity of the one sign (the finite terms do not matter);
 * then its bias and epilogue follow. */
static int winograd_nonfinite(ge_context *ctx, const char *name, const conv_params *p,
                              const float *x, const float *u, const uint16_t *u_bf16,
                              const int8_t *signs, const float *bias, float *y, float *scratch,
                              const nn_epilogue *epilogue) {
    const nn_window *w = &p->w;
    const int64_t cg = p->c / p->group, mg = p->m / p->group;
    const int64_t ih = w->in[1], iw = w->in[2], oh = w->out[1], ow = w->out[2];
    const int64_t ph = w->pad[1], pw = w->pad[2], in_size = ih * iw;
    const int64_t numel = p->n * p->c * in_size;
    float *clean = (float *)malloc((size_t)numel * sizeof(float));
    if (clean == NULL) {
        return ctx->set_error(ctx, "%s: no memory for a finite copy of input X (%lld floats)",
                              name, (long long)numel);
    }
    for (int64_t i = 0; i < numel; i++) {
        clean[i] = (x[i] - x[i]) == 0.0f ? x[i] : 0.0f;
    }
    nn_winograd_conv conv = {p->n, p->c, p->m, p->group, cg, mg, ih, iw, oh, ow, ph, pw,
                             p->winograd_block, p->winograd_slots, clean, u, bias, y, scratch,
                             epilogue, epilogue ? epilogue->residual : NULL, u_bf16};
    nn_conv_winograd(ctx, &conv);
    free(clean);
    for (int64_t image = 0; image < p->n; image++) {
        for (int64_t g = 0; g < p->group; g++) {
            const float *xg = x + (image * p->c + g * cg) * in_size;
            for (int64_t oy = 0; oy < oh; oy++) {
                for (int64_t ox = 0; ox < ow; ox++) {
                    int touched = 0;  /* does the window read an inf or NaN? */
                    for (int64_t c = 0; c < cg && !touched; c++) {
                        for (int64_t t = 0; t < 9; t++) {
                            const int64_t iy = oy - ph + t / 3, ix = ox - pw + t % 3;
                            if (iy >= 0 && iy < ih && ix >= 0 && ix < iw) {
                                const float v = xg[c * in_size + iy * iw + ix];
                                if ((v - v) != 0.0f) {
                                    touched = 1;
                                    break;
                                }
                            }
                        }
                    }
                    if (!touched) {
                        continue;
                    }
                    for (int64_t mm = 0; mm < mg; mm++) {
                        const int64_t out = g * mg + mm;
                        const int8_t *s = signs + out * cg * 9;
                        int nan = 0, plus = 0, minus = 0;
                        for (int64_t c = 0; c < cg; c++) {
                            for (int64_t t = 0; t < 9; t++) {
                                const int64_t iy = oy - ph + t / 3, ix = ox - pw + t % 3;
                                if (iy < 0 || iy >= ih || ix < 0 || ix >= iw) {
                                    continue;
                                }
                                const float v = xg[c * in_size + iy * iw + ix];
                                if ((v - v) == 0.0f) {
                                    continue;
                                }
                                const int8_t sign = s[c * 9 + t];
                                if (v != v || sign == 0) {
                                    nan = 1;
                                } else if ((v > 0.0f) == (sign > 0)) {
                                    plus = 1;
                                } else {
                                    minus = 1;
                                }
                            }
                        }
                        float r = (nan || (plus && minus)) ? NAN : plus ? INFINITY : -INFINITY;
                        if (bias) {
                            r += bias[out];
                        }
                        const int64_t at = ((image * p->m + out) * oh + oy) * ow + ox;
                        if (epilogue) {
                            nn_epilogue_run(epilogue, &r,
                                            epilogue->residual ? epilogue->residual + at : NULL, 1);
                        }
                        y[at] = r;
                    }
                }
            }
        }
    }
    return 0;
}

/* 1 where the window is the one Winograd F(2x2, 3x3) computes: 3x3, stride 1, dilation 1,
 * 2-D; and the blob gives it blocks and slots. */
static int winograd_window(const conv_params *p) {
    const nn_window *w = &p->w;
    return w->k[0] == 1 && w->k[1] == 3 && w->k[2] == 3 && w->in[0] == 1 && w->out[0] == 1
           && w->stride[1] == 1 && w->stride[2] == 1 && w->dil[1] == 1 && w->dil[2] == 1
           && p->winograd_block >= 1 && p->winograd_slots >= 1;
}

/* NN_CONV_WINOGRAD_BF16: W is the packer's bf16 U of every group (16 packed A each), then
 * the sign of every weight (int8, as for the fp32 path, in whole uint16 values). */
static int conv_winograd_bf16(ge_context *ctx, const char *name, ge_blob blob,
                              const conv_params *p, const ge_tensor *inputs,
                              const ge_tensor *outputs, const nn_epilogue *epilogue) {
    const nn_window *w = &p->w;
    const int64_t cg = p->c / p->group, mg = p->m / p->group;
    if (!winograd_window(p)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const int64_t u_values = p->group * 16 * nn_winograd_bf16_u_values(cg, mg);
    const int64_t sign_values = (p->m * cg * 9 + 1) / 2;
    if (inputs[1].dtype != GE_UINT16 || inputs[1].numel != u_values + sign_values) {
        return ctx->set_error(ctx, "%s: input W must be the bf16 Winograd kernels packed at "
                              "compile time (%lld uint16 values)", name,
                              (long long)(u_values + sign_values));
    }
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    if (nn_check_f32(ctx, name, "input X", &inputs[0], p->n * p->c * in_size)
        || (p->has_bias && nn_check_f32(ctx, name, "input B", &inputs[2], p->m))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], p->n * p->m * out_size)) {
        return -1;
    }
    const size_t needed = (size_t)(p->winograd_slots
                                   * nn_winograd_bf16_scratch_bytes(cg, mg, p->winograd_block));
    if (ctx->scratch_bytes < needed || ctx->scratch == NULL) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    const float *x = (const float *)inputs[0].data;
    const uint16_t *u = (const uint16_t *)inputs[1].data;
    const float *bias = p->has_bias ? (const float *)inputs[2].data : NULL;
    float *y = (float *)outputs[0].data;
    if (!all_finite(x, p->n * p->c * in_size)) {
        return winograd_nonfinite(ctx, name, p, x, NULL, u, (const int8_t *)(u + u_values),
                                  bias, y, (float *)ctx->scratch, epilogue);
    }
    nn_winograd_conv conv = {p->n, p->c, p->m, p->group, cg, mg, w->in[1], w->in[2],
                             w->out[1], w->out[2], w->pad[1], w->pad[2], p->winograd_block,
                             p->winograd_slots, x, NULL, bias, y, (float *)ctx->scratch,
                             epilogue, epilogue ? epilogue->residual : NULL, u};
    nn_conv_winograd(ctx, &conv);
    return 0;
}

/* A few-channel stem with stride-2 rows of 16 outputs or more runs the direct kernel
 * when the pool has several threads: the few-channel kernel phases the input planes first,
 * on both threads, then reads every phase on both, and on two threads of a 2-vCPU VM it
 * ran no faster than on one and varied (3 -> 16 channels from 128x128: 70-176 us against
 * 47-66 us direct; MobileNetV2's 3 -> 32 from 224x224: 290-600 us against 275-295 us). On
 * one thread it stays, 20-25% faster there. */
static int few_channels_goes_direct(const nn_window *w) {
    return ge_threadpool_size() > 1 && nn_conv_direct_fits(w) && w->stride[2] == 2
           && w->out[2] >= 16;
}

/* Conv and FusedConv once their blobs are read: `epilogue` NULL for a plain Conv, else
 * what to do to each output value (its residual checked by the caller). */
static int conv_run(ge_context *ctx, const char *name, ge_blob blob, conv_params p,
                    const ge_tensor *inputs, int32_t n_inputs, const ge_tensor *outputs,
                    int32_t n_outputs, const nn_epilogue *epilogue) {
    const nn_window *w = &p.w;
    const int64_t cg = p.c / p.group, mg = p.m / p.group, taps = nn_window_taps(w);
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    if (n_inputs < 2 + (int)p.has_bias || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs X, W%s and 1 output, got %d and %d",
                              name, p.has_bias ? ", B" : "", (int)n_inputs, (int)n_outputs);
    }
    /* Packed weights: per group, ceil(mg / MR) panels of (cg * taps) x MR; for Winograd,
     * the packed U of every group first (conv_winograd.h). */
    const int64_t packed_floats = p.group * nn_pack_panels(mg, NN_PACK_MR) * cg * taps
                                  * NN_PACK_MR;
    const int64_t u_floats = p.group * 16 * nn_winograd_u_plane_floats(cg, mg);
    /* Winograd: U, then the weights' signs (int8, in whole floats), or in files written
     * before, the packed path's weights (a different size: packed_floats > m * cg * 9). */
    const int64_t sign_floats = (p.m * cg * taps + 3) / 4;
    const int legacy_winograd = p.path == NN_CONV_WINOGRAD
                                && inputs[1].numel == u_floats + packed_floats;
    const int64_t weight_floats =
        p.path == NN_CONV_PACKED ? packed_floats
        : p.path == NN_CONV_WINOGRAD ? u_floats + (legacy_winograd ? packed_floats : sign_floats)
        : p.path == NN_CONV_DIRECT ? nn_conv_direct_weight_floats(p.group, cg, mg, taps)
                                   : p.m * cg * taps;
    if (p.path == NN_CONV_WINOGRAD_BF16) {
        return conv_winograd_bf16(ctx, name, blob, &p, inputs, outputs, epilogue);
    }
    if (p.path == NN_CONV_NHWC_BF16 || p.path == NN_CONV_NHWC_BF16_CL) {
        return conv_nhwc_bf16_run(ctx, name, blob, &p, inputs, outputs, epilogue, NULL, 0);
    }
    if (p.path == NN_CONV_PACKED_BF16 || p.path == NN_CONV_PAIRS_BF16) {
        /* bf16 weights: checked and run on their own */
        const size_t needed = conv_bf16_scratch_bytes(&p);
        if (p.block % NN_PACK_NR || cg * taps < NN_BF16_MIN_K
            || (p.path == NN_CONV_PAIRS_BF16 && cg % 2)) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
        if (inputs[1].dtype != GE_UINT16
            || inputs[1].numel != p.group * nn_bf16_a_values(mg, cg * taps)) {
            return ctx->set_error(ctx, "%s: input W must be the bf16 weights packed at "
                                  "compile time (%lld uint16 values)", name,
                                  (long long)(p.group * nn_bf16_a_values(mg, cg * taps)));
        }
        if (nn_check_f32(ctx, name, "input X", &inputs[0], p.n * p.c * in_size)
            || (p.has_bias && nn_check_f32(ctx, name, "input B", &inputs[2], p.m))
            || nn_check_f32(ctx, name, "output Y", &outputs[0], p.n * p.m * out_size)) {
            return -1;
        }
        if (ctx->scratch_bytes < needed || ctx->scratch == NULL) {
            return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                                  ctx->scratch_bytes);
        }
        conv_packed_bf16(ctx, &p, (const float *)inputs[0].data,
                         (const uint16_t *)inputs[1].data,
                         p.has_bias ? (const float *)inputs[2].data : NULL,
                         (float *)outputs[0].data, (float *)ctx->scratch, epilogue);
        return 0;
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], p.n * p.c * in_size)
        || nn_check_f32(ctx, name, "input W", &inputs[1], weight_floats)
        || (p.has_bias && nn_check_f32(ctx, name, "input B", &inputs[2], p.m))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], p.n * p.m * out_size)) {
        return -1;
    }
    const float *x = (const float *)inputs[0].data;
    const float *weights = (const float *)inputs[1].data;
    const float *bias = p.has_bias ? (const float *)inputs[2].data : NULL;
    float *y = (float *)outputs[0].data;

    if (p.path == NN_CONV_DEPTHWISE) {
        if (cg != 1 || mg != 1) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
        if (nn_conv_depthwise_fits(w)) {
            return nn_conv_depthwise(ctx, w, p.n * p.c, p.c, x, weights, bias, y, epilogue);
        }
        depthwise_job job = {&p, x, weights, bias, y, epilogue};
        ctx->parallel_for(ctx, p.n * p.c, nn_grain(out_size * taps, NN_CONV_GRAIN_WORK),
                          depthwise_planes, &job);
        return 0;
    }
    if (p.path == NN_CONV_DIRECT) {
        if (!nn_conv_direct_fits(w)) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
        nn_conv_direct(ctx, w, p.n, p.c, p.m, p.group, x, weights, bias, y, epilogue);
        return 0;
    }
    if (p.path == NN_CONV_FEW_CHANNELS) {
        if (!nn_conv_few_channels_fits(w, cg)) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
        if (few_channels_goes_direct(w)) {
            return nn_conv_direct_unpacked(ctx, w, p.n, p.c, p.m, p.group, x, weights, bias,
                                           y, epilogue);
        }
        return nn_conv_few_channels(ctx, w, p.n, p.c, p.m, p.group, x, weights, bias, y,
                                    epilogue);
    }
    if (p.path == NN_CONV_POINTWISE) {
        if (taps != 1 || in_size != out_size) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
        for (int64_t image = 0; image < p.n; image++) {
            for (int64_t g = 0; g < p.group; g++) {
                float *y_group = y + (image * p.m + g * mg) * out_size;
                if (bias) {
                    fill_bias(y_group, bias + g * mg, mg, out_size);
                }
                nn_sgemm(ctx, 0, 0, mg, out_size, cg, 1.0f, weights + g * mg * cg, cg,
                         x + (image * p.c + g * cg) * in_size, in_size, bias ? 1.0f : 0.0f,
                         y_group, out_size);
                if (epilogue) {  /* weights fed at run time only: one more pass */
                    nn_epilogue_block(epilogue, y_group, (image * p.m + g * mg) * out_size, 1,
                                      mg * out_size, 0);
                }
            }
        }
        return 0;
    }

    /* The scratch holds the packed or im2col columns, or the Winograd buffers (whose
     * fallback is the packed path), whichever is used. */
    size_t needed = (size_t)(cg * taps * p.block) * sizeof(float);
    const int winograd = p.path == NN_CONV_WINOGRAD;
    if (winograd) {
        if (!winograd_window(&p)) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
        size_t wino = (size_t)(p.winograd_slots
                               * nn_winograd_scratch_floats(cg, mg, p.winograd_block))
                      * sizeof(float);
        needed = wino > needed ? wino : needed;
    }
    if ((winograd || p.path == NN_CONV_PACKED) && p.block % NN_PACK_NR) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (ctx->scratch_bytes < needed || ctx->scratch == NULL) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    /* Winograd mixes an infinity with itself (inf - inf); such data takes
     * winograd_nonfinite (or, in files written before, the packed path, whose weights
     * follow U). (The packer took Winograd only for finite weights.) */
    const int finite = winograd && all_finite(x, p.n * p.c * in_size);
    if (winograd && !finite && !legacy_winograd) {
        return winograd_nonfinite(ctx, name, &p, x, weights, NULL,
                                  (const int8_t *)(weights + u_floats), bias, y,
                                  (float *)ctx->scratch, epilogue);
    }
    if (winograd && finite) {
        nn_winograd_conv conv = {p.n, p.c, p.m, p.group, cg, mg, w->in[1], w->in[2],
                                 w->out[1], w->out[2], w->pad[1], w->pad[2], p.winograd_block,
                                 p.winograd_slots, x, weights, bias, y, (float *)ctx->scratch,
                                 epilogue, epilogue ? epilogue->residual : NULL};
        nn_conv_winograd(ctx, &conv);
        return 0;
    }
    if (winograd || p.path == NN_CONV_PACKED) {
        conv_packed(ctx, &p, x, winograd ? weights + u_floats : weights, bias, y,
                    (float *)ctx->scratch, epilogue);
        return 0;
    }
    conv_im2col(ctx, &p, x, weights, bias, y, (float *)ctx->scratch, epilogue);
    return 0;
}

int ge_nn_conv_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                   const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                   size_t attrs_size) {
    static const char *name = "ge_nn_conv_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    conv_params p;
    if (!read_conv_params(&blob, &p) || !ge_blob_done(&blob)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    return conv_run(ctx, name, blob, p, inputs, n_inputs, outputs, n_outputs, NULL);
}

/* A FusedConv's blob: the Conv's, then ints activation and has_residual, floats alpha and
 * beta. */
typedef struct {
    conv_params conv;
    int64_t ints[2];   /* activation (FUSED_ACT_*), has_residual (0 or 1) */
    double floats[2];  /* alpha, beta */
} fused_params;

/* 0 where the blob is not a FusedConv's. */
static int read_fused_params(const void *attrs, size_t attrs_size, ge_blob *blob,
                             fused_params *fp) {
    *blob = ge_blob_open(attrs, attrs_size);
    const int64_t *v = fp->ints;
    return read_conv_params(blob, &fp->conv) && ge_blob_ints(blob, fp->ints, 2)
           && ge_blob_floats(blob, fp->floats, 2) && ge_blob_done(blob)
           && v[0] >= FUSED_ACT_NONE && v[0] < FUSED_ACT_COUNT && (v[1] == 0 || v[1] == 1);
}

int ge_conv_fused_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                      const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                      size_t attrs_size) {
    static const char *name = "ge_conv_fused_f32";
    ge_blob blob;
    fused_params fp;
    if (!read_fused_params(attrs, attrs_size, &blob, &fp)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const conv_params p = fp.conv;
    const int64_t *v = fp.ints;
    nn_epilogue epilogue = {(int)v[0], fp.floats[0], fp.floats[1], NULL};
    if (v[1]) {
        const int64_t out_numel = p.n * p.m * nn_window_out_size(&p.w);
        if (n_inputs < 4) {
            return ctx->set_error(ctx, "%s: expected input Z (the residual), got %d inputs",
                                  name, (int)n_inputs);
        }
        if (nn_check_f32(ctx, name, "input Z", &inputs[3], out_numel)) {
            return -1;
        }
        epilogue.residual = (const float *)inputs[3].data;
    }
    return conv_run(ctx, name, blob, p, inputs, n_inputs, outputs, n_outputs,
                    nn_epilogue_empty(&epilogue) ? NULL : &epilogue);
}

/* ge_hub.FusedConvNHWC: ge_conv_fused_f32's blob, its path NN_CONV_NHWC_BF16_CL; X, the
 * residual Z and Y channels-last, all float32 or all bfloat16 (the `channels_last` pass
 * keeps the activations between its Convs in bf16 in plans compiled with precision bf16). */
int ge_conv_nhwc_bf16(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                      const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                      size_t attrs_size) {
    static const char *name = "ge_conv_nhwc_bf16";
    ge_blob blob;
    fused_params fp;
    if (!read_fused_params(attrs, attrs_size, &blob, &fp)
        || fp.conv.path != NN_CONV_NHWC_BF16_CL) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    const conv_params p = fp.conv;
    const int64_t *v = fp.ints;
    if (n_inputs < (v[1] ? 4 : 2 + (int)p.has_bias) || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs X, W%s%s and 1 output, got %d and %d",
                              name, p.has_bias ? ", B" : "", v[1] ? ", Z" : "",
                              (int)n_inputs, (int)n_outputs);
    }
    const int bf16 = inputs[0].dtype == GE_BFLOAT16;
    nn_epilogue epilogue = {(int)v[0], fp.floats[0], fp.floats[1], NULL};
    const uint16_t *residual16 = NULL;
    if (v[1]) {
        const int64_t out_numel = nn_numel3(p.n, p.m, nn_window_out_size(&p.w));
        if (bf16 ? nn_check_bf16(ctx, name, "input Z", &inputs[3], out_numel)
                 : nn_check_f32(ctx, name, "input Z", &inputs[3], out_numel)) {
            return -1;
        }
        if (bf16) {
            residual16 = (const uint16_t *)inputs[3].data;
        } else {
            epilogue.residual = (const float *)inputs[3].data;
        }
    }
    const int empty = epilogue.activation == FUSED_ACT_NONE && !v[1];
    return conv_nhwc_bf16_run(ctx, name, blob, &p, inputs, outputs, empty ? NULL : &epilogue,
                              residual16, bf16);
}

/* -- ConvTranspose -------------------------------------------------------------------- */

typedef struct {
    const nn_window *w;
    const float *columns;  /* rows: (output channel of the group, tap); columns: input cells */
    const float *bias;     /* the group's first bias, or NULL */
    float *y;              /* the group's first output plane of one image */
} col2im_job;

/* Output channels [begin, end) of a group: bias, then every tap's columns added at the
 * output cells they reach. Channels are disjoint planes, so chunks never collide. */
static void col2im_channels(void *arg, int64_t begin, int64_t end) {
    const col2im_job *job = (const col2im_job *)arg;
    const nn_window *w = job->w;
    const int64_t taps = nn_window_taps(w), in_size = nn_window_in_size(w);
    const int64_t out_size = nn_window_out_size(w);
    for (int64_t ch = begin; ch < end; ch++) {
        float *y = job->y + ch * out_size;
        float value = job->bias ? job->bias[ch] : 0.0f;
        for (int64_t i = 0; i < out_size; i++) {
            y[i] = value;
        }
        for (int64_t tap = 0; tap < taps; tap++) {
            int64_t kx = tap % w->k[2], ky = (tap / w->k[2]) % w->k[1];
            int64_t kz = tap / (w->k[2] * w->k[1]);
            const float *column = job->columns + (ch * taps + tap) * in_size;
            /* input cell i lands on output i * stride + k * dil - pad along each axis */
            int64_t off_z = kz * w->dil[0] - w->pad[0], off_y = ky * w->dil[1] - w->pad[1];
            int64_t off_x = kx * w->dil[2] - w->pad[2];
            int64_t x_lo, x_hi;
            /* input cells ix whose output ix * stride + off_x lies in [0, out_w) */
            nn_position_range(off_x, w->stride[2], w->out[2], w->in[2], &x_lo, &x_hi);
            for (int64_t iz = 0; iz < w->in[0]; iz++) {
                int64_t oz = iz * w->stride[0] + off_z;
                if (oz < 0 || oz >= w->out[0]) {
                    continue;
                }
                for (int64_t iy = 0; iy < w->in[1]; iy++) {
                    int64_t oy = iy * w->stride[1] + off_y;
                    if (oy < 0 || oy >= w->out[1]) {
                        continue;
                    }
                    const float *src = column + (iz * w->in[1] + iy) * w->in[2];
                    float *dst = y + (oz * w->out[1] + oy) * w->out[2];
                    if (w->stride[2] == 1) {
                        for (int64_t ix = x_lo; ix < x_hi; ix++) {
                            dst[ix + off_x] += src[ix];
                        }
                    } else {
                        for (int64_t ix = x_lo; ix < x_hi; ix++) {
                            dst[ix * w->stride[2] + off_x] += src[ix];
                        }
                    }
                }
            }
        }
    }
}

/* A ConvTranspose blob's values: N, C, M, group, has_bias, then (bf16) block, window. */
typedef struct {
    int64_t n, c, m, group, has_bias, block;
    nn_window w;
} transpose_params;

/* Reads and checks the blob, the inputs' count and X, B, Y; 0 or an error (set). */
static int transpose_begin(ge_context *ctx, const char *name, const void *attrs,
                           size_t attrs_size, int with_block, const ge_tensor *inputs,
                           int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                           transpose_params *p) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[6] = {0};
    if (!ge_blob_ints(&blob, v, 5 + with_block) || !nn_blob_window(&blob, &p->w, 1)
        || !ge_blob_done(&blob)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    p->n = v[0], p->c = v[1], p->m = v[2], p->group = v[3], p->has_bias = v[4];
    p->block = v[5];
    if (p->n < 0 || p->c < 0 || p->m < 0 || p->group < 1 || p->c % p->group
        || p->m % p->group) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs < 2 + (int)p->has_bias || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs X, W%s and 1 output, got %d and %d",
                              name, p->has_bias ? ", B" : "", (int)n_inputs, (int)n_outputs);
    }
    const int64_t in_size = nn_window_in_size(&p->w), out_size = nn_window_out_size(&p->w);
    if (nn_check_f32(ctx, name, "input X", &inputs[0], p->n * p->c * in_size)
        || (p->has_bias && nn_check_f32(ctx, name, "input B", &inputs[2], p->m))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], p->n * p->m * out_size)) {
        return -1;
    }
    return 0;
}

/* The columns of one image and group (mg * taps x input cells, into `columns`). */
typedef void (*transpose_product_fn)(ge_context *ctx, const transpose_params *p, int64_t g,
                                     const float *x_group, float *columns, const void *arg);

/* Every image and group: the columns by `product`, then col2im with the bias into Y. */
static void transpose_run(ge_context *ctx, const transpose_params *p, const float *x,
                          const float *bias, float *y, float *columns,
                          transpose_product_fn product, const void *arg) {
    const int64_t cg = p->c / p->group, mg = p->m / p->group, taps = nn_window_taps(&p->w);
    const int64_t in_size = nn_window_in_size(&p->w), out_size = nn_window_out_size(&p->w);
    for (int64_t image = 0; image < p->n; image++) {
        for (int64_t g = 0; g < p->group; g++) {
            product(ctx, p, g, x + (image * p->c + g * cg) * in_size, columns, arg);
            col2im_job job = {&p->w, columns, bias ? bias + g * mg : NULL,
                              y + (image * p->m + g * mg) * out_size};
            ctx->parallel_for(ctx, mg, nn_grain(taps * in_size, NN_CONV_GRAIN_WORK),
                              col2im_channels, &job);
        }
    }
}

/* columns = W_g^T (W_g is cg x mg * taps, as given) @ X_g by the fp32 BLAS. */
static void transpose_product_f32(ge_context *ctx, const transpose_params *p, int64_t g,
                                  const float *x_group, float *columns, const void *arg) {
    const int64_t cg = p->c / p->group, rows = (p->m / p->group) * nn_window_taps(&p->w);
    const int64_t in_size = nn_window_in_size(&p->w);
    nn_sgemm(ctx, 1, 0, rows, in_size, cg, 1.0f, (const float *)arg + g * cg * rows, rows,
             x_group, in_size, 0.0f, columns, in_size);
}

int ge_nn_conv_transpose_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                             const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                             size_t attrs_size) {
    static const char *name = "ge_nn_conv_transpose_f32";
    transpose_params p;
    if (transpose_begin(ctx, name, attrs, attrs_size, 0, inputs, n_inputs, outputs, n_outputs,
                        &p)) {
        return -1;
    }
    const int64_t rows = (p.m / p.group) * nn_window_taps(&p.w);
    const int64_t in_size = nn_window_in_size(&p.w);
    if (nn_check_f32(ctx, name, "input W", &inputs[1], p.c * rows)) {
        return -1;
    }
    if (ctx->scratch_bytes < (size_t)(rows * in_size) * sizeof(float) || ctx->scratch == NULL) {
        return ctx->set_error(ctx, "%s: needs %lld bytes of scratch, got %zu", name,
                              (long long)(rows * in_size * (int64_t)sizeof(float)),
                              ctx->scratch_bytes);
    }
    transpose_run(ctx, &p, (const float *)inputs[0].data,
                  p.has_bias ? (const float *)inputs[2].data : NULL, (float *)outputs[0].data,
                  (float *)ctx->scratch, transpose_product_f32, inputs[1].data);
    return 0;
}

/* The bf16 product's weights and panels (ge_nn_conv_transpose_bf16). */
typedef struct {
    const uint16_t *weights;  /* each group's W_g^T as the bf16 packed A */
    uint16_t *panels;
} transpose_bf16;

/* columns = W_g^T @ X_g on the bf16 product, X_g's rows packed per call. */
static void transpose_product_bf16(ge_context *ctx, const transpose_params *p, int64_t g,
                                   const float *x_group, float *columns, const void *arg) {
    const transpose_bf16 *t = (const transpose_bf16 *)arg;
    const int64_t cg = p->c / p->group, rows = (p->m / p->group) * nn_window_taps(&p->w);
    const int64_t in_size = nn_window_in_size(&p->w);
    const nn_bf16_matrix plain = {x_group, in_size};
    nn_bf16_gemm gemm;
    memset(&gemm, 0, sizeof gemm);
    gemm.m = rows;
    gemm.n = in_size;
    gemm.k = cg;
    gemm.a_packed = t->weights + g * nn_bf16_a_values(rows, cg);
    gemm.c = columns;
    gemm.ldc_row = in_size;
    gemm.ldc_col = 1;
    gemm.pack_b = nn_bf16_pack_matrix;
    gemm.pack_arg = &plain;
    gemm.block = p->block;
    gemm.scratch = t->panels;
    gemm.panel_stride = nn_bf16_depth(cg) * NN_PACK_NR;
    nn_gemm_bf16(ctx, &gemm);
}

int ge_nn_conv_transpose_bf16(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                              const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                              size_t attrs_size) {
    static const char *name = "ge_nn_conv_transpose_bf16";
    transpose_params p;
    if (transpose_begin(ctx, name, attrs, attrs_size, 1, inputs, n_inputs, outputs, n_outputs,
                        &p)) {
        return -1;
    }
    const int64_t cg = p.c / p.group, mg = p.m / p.group, taps = nn_window_taps(&p.w);
    const int64_t in_size = nn_window_in_size(&p.w);
    const int64_t rows = nn_numel3(mg, taps, 1);
    if (p.block < NN_PACK_NR || p.block % NN_PACK_NR || p.block > NN_MAX_NUMEL
        || cg < NN_BF16_MIN_K || rows < 0 || nn_numel3(rows + NN_BF16_MR, in_size, 1) < 0
        || nn_numel3(p.group, rows + NN_BF16_MR, cg + NN_BF16_KB) < 0
        || nn_numel3(cg + NN_BF16_KB, p.block, 1) < 0) {
        return NN_BAD_BLOB_BYTES(ctx, name, attrs_size);
    }
    const int64_t a_values = nn_bf16_a_values(rows, cg);
    if (inputs[1].dtype != GE_UINT16 || inputs[1].numel != p.group * a_values) {
        return ctx->set_error(ctx, "%s: input W must be the bf16 weights packed at compile "
                              "time (%lld uint16 values)", name,
                              (long long)(p.group * a_values));
    }
    const size_t column_bytes = ((size_t)(rows * in_size) * sizeof(float) + 63) / 64 * 64;
    const size_t needed = column_bytes
                          + ((size_t)(nn_bf16_depth(cg) * p.block) * 2u + 63) / 64 * 64;
    if (ctx->scratch_bytes < needed || ctx->scratch == NULL) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    const transpose_bf16 t = {(const uint16_t *)inputs[1].data,
                              (uint16_t *)((char *)ctx->scratch + column_bytes)};
    transpose_run(ctx, &p, (const float *)inputs[0].data,
                  p.has_bias ? (const float *)inputs[2].data : NULL, (float *)outputs[0].data,
                  (float *)ctx->scratch, transpose_product_bf16, &t);
    return 0;
}
