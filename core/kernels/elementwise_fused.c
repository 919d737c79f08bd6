/*
 * ge_hub.FusedElementwise (ge_elementwise_fused_f32): a whole expression of float32
 * elementwise ops, evaluated per tile of the output so that no intermediate tensor is
 * ever written to the arena. The `fuse_elementwise` pass (ge_hub/passes/
 * fuse_elementwise.py) makes one of a chain or tree of plain ops; the Python packer
 * (ge_hub/kernels/elementwise_fused.py) writes this blob (int64 values, then float64):
 *
 *     n_operands, ndim, shape[ndim], strides[n_operands][ndim]   (elementwise.h's layout)
 *     n_buffers, n_instructions,
 *     per instruction: opcode, dst, a, b
 *     per instruction (floats): p0, p1
 *
 * An operand reference (a, b) below n_operands names an input, n_operands + k buffer k;
 * b is -1 for a unary op; dst is a buffer, or -1 for the output (the last instruction).
 * Buffers are TILE floats on the stack, reused by the packer once their value is dead.
 *
 * Each input is read per tile one of three ways, decided once per run: in place (it has
 * the output's elements: the same shape), as one value (a scalar: the ops take their
 * scalar-operand loops), or gathered into a stack buffer along the broadcast strides
 * (per-channel, per-row, any unidirectional broadcast). When every gathered input is
 * constant over the same aligned blocks of at least FE_MIN_BLOCK elements (per-channel
 * scale and shift over H x W planes: BatchNormalization lowered to Mul + Add), tiles are
 * cut along those blocks instead and such inputs are read as one value per tile, which
 * saves the gather (most of a short chain's time). The tiles are shared over the
 * thread pool. Each op's loop over a tile is one plain loop, compiled also for AVX2 and
 * AVX-512 (NN_VECTORIZED); the math is that of the standalone kernels (activation.c),
 * except that Exp and Sigmoid use the vectorizable nn_expf (within 2 ulp of expf; results
 * below float's normal range flush to 0).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elementwise.h"
#include "nn_common.h"

#if defined(__SSE__)
#include <immintrin.h>
#endif

#define FE_TILE 1024
/* The smallest block worth cutting tiles along (shorter tiles cost more per element in
 * the per-op calls than the gather they save). */
#define FE_MIN_BLOCK 64
#define FE_MAX_BUFFERS 12
#define FE_MAX_OPERANDS 16
#define FE_MAX_INSTRUCTIONS 256
/* Element-ops per parallel chunk (an element through one op is one unit). */
#define FE_CHUNK_WORK 65536

enum {
    FE_ADD = 1, FE_SUB, FE_MUL, FE_DIV, FE_MAX, FE_MIN,
    FE_NEG = 10, FE_ABS, FE_RELU, FE_SIGMOID, FE_TANH, FE_EXP, FE_LOG, FE_SQRT,
    FE_RECIPROCAL, FE_ERF, FE_CLIP, FE_LEAKY_RELU, FE_HARD_SIGMOID, FE_POW,
    FE_LAST_OPCODE = FE_POW
};

enum { FE_IN_PLACE, FE_SCALAR, FE_GATHER };

typedef struct {
    int64_t opcode, dst, a, b;
    double p0, p1;
} fe_instruction;

typedef struct {
    int32_t n_operands, ndim, n_buffers, n_instructions;
    int64_t numel;
    int64_t shape[GE_MAX_RANK];
    int64_t strides[FE_MAX_OPERANDS][GE_MAX_RANK];
    int kind[FE_MAX_OPERANDS];
    /* Block mode (block > 0): every gathered input is constant over aligned blocks of
     * `block` output elements (a per-channel [C, 1, 1] operand over [N, C, H, W]: H * W),
     * so tiles are cut at block boundaries, `parts` tiles of at most part_len per block,
     * and such an input is one value per tile (no gather). */
    int64_t block, parts, part_len;
    int32_t outer_ndim; /* the axes before the trailing ones a block spans */
    const float *data[FE_MAX_OPERANDS];
    float *out;
    fe_instruction code[FE_MAX_INSTRUCTIONS];
} fe_program;

/* -- the math, as in activation.c ------------------------------------------------------- */

static inline float fe_max(float x, float y) { return (x > y || x != x) ? x : y; }
static inline float fe_min(float x, float y) { return (x < y || x != x) ? x : y; }

static inline float fe_sigmoid(float x) {
    float e = nn_expf(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

static inline float fe_tanh(float x) {
    double magnitude = fabs((double)x);
    double from_exp = 1.0 - 2.0 / (exp(2.0 * magnitude) + 1.0);
    double series = magnitude - magnitude * magnitude * magnitude * (1.0 / 3.0);
    return (float)copysign(magnitude < 1e-3 ? series : from_exp, (double)x);
}

static inline double fe_clamp_unit(double v) {
    double low = v < 0.0 ? 0.0 : v;
    return low > 1.0 ? 1.0 : low;
}

/* np.clip keeps NaN: both comparisons are false for it. */
static inline float fe_clip(float x, float lo, float hi) {
    float low = x < lo ? lo : x;
    return low > hi ? hi : low;
}

/* -- one op over a tile ----------------------------------------------------------------- */

#define FE_BINARY(EXPR)                                                  \
    if (a_scalar && b_scalar) {                                          \
        const float x = a[0], y = b[0];                                  \
        out[0] = (EXPR);                                                 \
    } else if (b_scalar) {                                               \
        const float y = b[0];                                            \
        for (int64_t i = 0; i < n; i++) {                                \
            const float x = a[i];                                        \
            out[i] = (EXPR);                                             \
        }                                                                \
    } else if (a_scalar) {                                               \
        const float x = a[0];                                            \
        for (int64_t i = 0; i < n; i++) {                                \
            const float y = b[i];                                        \
            out[i] = (EXPR);                                             \
        }                                                                \
    } else {                                                             \
        for (int64_t i = 0; i < n; i++) {                                \
            const float x = a[i], y = b[i];                              \
            out[i] = (EXPR);                                             \
        }                                                                \
    }                                                                    \
    break;

#define FE_UNARY(EXPR)                                                   \
    for (int64_t i = 0; i < m; i++) {                                    \
        const float x = a[i];                                            \
        out[i] = (EXPR);                                                 \
    }                                                                    \
    break;

/* out = op(a, b) over n elements (one when every operand is a single value). Scalar
 * operands are read at [0]; out never overlaps a differently indexed operand. */
NN_VECTORIZED static void fe_apply(const fe_instruction *ins, float *out, const float *a,
                                   int a_scalar, const float *b, int b_scalar, int64_t n) {
    const int64_t m = a_scalar ? 1 : n;
    const float p0 = (float)ins->p0, p1 = (float)ins->p1;
    const double d0 = ins->p0, d1 = ins->p1;
    switch (ins->opcode) {
    case FE_ADD: FE_BINARY(x + y)
    case FE_SUB: FE_BINARY(x - y)
    case FE_MUL: FE_BINARY(x * y)
    case FE_DIV: FE_BINARY(x / y)
    case FE_MAX: FE_BINARY(fe_max(x, y))
    case FE_MIN: FE_BINARY(fe_min(x, y))
    case FE_NEG: FE_UNARY(-x)
    case FE_ABS: FE_UNARY(fabsf(x))
    case FE_RELU: FE_UNARY(x < 0.0f ? 0.0f : x)
    case FE_SIGMOID: FE_UNARY(fe_sigmoid(x))
    case FE_TANH: FE_UNARY(fe_tanh(x))
    case FE_EXP: FE_UNARY(nn_expf(x))
    case FE_LOG: FE_UNARY(logf(x))
    case FE_SQRT: {
        int64_t i = 0;
#if defined(__SSE__)
        /* sqrtf keeps errno and so stays scalar; sqrtps rounds the same way. */
        for (; i + 4 <= m; i += 4) {
            _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(a + i)));
        }
#endif
        for (; i < m; i++) {
            out[i] = sqrtf(a[i]);
        }
        break;
    }
    case FE_RECIPROCAL: FE_UNARY(1.0f / x)
    case FE_ERF: FE_UNARY(erff(x))
    case FE_CLIP: FE_UNARY(fe_clip(x, p0, p1))
    case FE_LEAKY_RELU: FE_UNARY(x >= 0.0f ? x : (float)(d0 * x))
    case FE_HARD_SIGMOID: FE_UNARY((float)fe_clamp_unit(d0 * x + d1))
    case FE_POW:
        if (p0 == 2.0f) {
            FE_UNARY(x * x)
        } else if (p0 == 1.0f) {
            FE_UNARY(x)
        } else if (p0 == -1.0f) {
            FE_UNARY(1.0f / x)
        }
        FE_UNARY((float)pow((double)x, d0))
    default:
        break;
    }
}

/* -- reading the inputs of one tile ----------------------------------------------------- */

/* Input `k`'s elements for output elements [start, start + n), along its strides. */
static void fe_gather(const fe_program *p, int32_t k, int64_t start, int64_t n, float *into) {
    const int32_t last = p->ndim - 1;
    int64_t index[GE_MAX_RANK], offset = 0, flat = start;
    for (int32_t axis = last; axis >= 0; axis--) {
        index[axis] = flat % p->shape[axis];
        flat /= p->shape[axis];
        offset += index[axis] * p->strides[k][axis];
    }
    const float *src = p->data[k];
    const int64_t step = p->strides[k][last];
    int64_t done = 0;
    while (done < n) {
        int64_t run = p->shape[last] - index[last];
        run = run < n - done ? run : n - done;
        if (step == 1) {
            memcpy(into + done, src + offset, (size_t)run * sizeof *into);
        } else {
            const float v = src[offset];
            for (int64_t i = 0; i < run; i++) {
                into[done + i] = v;
            }
        }
        done += run;
        offset += run * step;
        index[last] += run;
        /* carry into the outer dims at the end of a row */
        for (int32_t axis = last; axis > 0 && index[axis] == p->shape[axis]; axis--) {
            offset -= index[axis] * p->strides[k][axis];
            index[axis] = 0;
            index[axis - 1]++;
            offset += p->strides[k][axis - 1];
        }
    }
}

/* Block `b`'s index along the outer axes (block mode), once per tile for all inputs. */
static void fe_block_index(const fe_program *p, int64_t b, int64_t *index) {
    for (int32_t axis = p->outer_ndim - 1; axis >= 0; axis--) {
        index[axis] = b % p->shape[axis];
        b /= p->shape[axis];
    }
}

static void fe_range(void *arg, int64_t begin, int64_t end) {
    const fe_program *p = arg;
    float buffers[FE_MAX_BUFFERS][FE_TILE];
    float gathered[FE_MAX_OPERANDS][FE_TILE];
    for (int64_t tile = begin; tile < end; tile++) {
        int64_t start, n, block_index[GE_MAX_RANK];
        if (p->block > 0) {
            fe_block_index(p, tile / p->parts, block_index);
            const int64_t part = tile % p->parts;
            start = tile / p->parts * p->block + part * p->part_len;
            n = p->block - part * p->part_len;
            n = n < p->part_len ? n : p->part_len;
        } else {
            start = tile * FE_TILE;
            n = p->numel - start < FE_TILE ? p->numel - start : FE_TILE;
        }
        const float *ref[FE_MAX_OPERANDS + FE_MAX_BUFFERS];
        int scalar[FE_MAX_OPERANDS + FE_MAX_BUFFERS];
        for (int32_t k = 0; k < p->n_operands; k++) {
            scalar[k] = p->kind[k] == FE_SCALAR;
            if (p->kind[k] == FE_IN_PLACE) {
                ref[k] = p->data[k] + start;
            } else if (p->kind[k] == FE_SCALAR) {
                ref[k] = p->data[k];
            } else if (p->block > 0) {
                int64_t offset = 0;  /* one value over the tile */
                for (int32_t axis = 0; axis < p->outer_ndim; axis++) {
                    offset += block_index[axis] * p->strides[k][axis];
                }
                ref[k] = p->data[k] + offset;
                scalar[k] = 1;
            } else {
                fe_gather(p, k, start, n, gathered[k]);
                ref[k] = gathered[k];
            }
        }
        for (int32_t i = 0; i < p->n_instructions; i++) {
            const fe_instruction *ins = &p->code[i];
            const int unary = ins->b < 0;
            const float *a = ref[ins->a], *b = unary ? NULL : ref[ins->b];
            const int a_scalar = scalar[ins->a], b_scalar = unary ? 1 : scalar[ins->b];
            const int result_scalar = a_scalar && b_scalar;
            if (ins->dst < 0) {
                float *out = p->out + start;
                if (result_scalar) {
                    float value;
                    fe_apply(ins, &value, a, 1, b, 1, 1);
                    for (int64_t j = 0; j < n; j++) {
                        out[j] = value;
                    }
                } else {
                    fe_apply(ins, out, a, a_scalar, b, b_scalar, n);
                }
            } else {
                const int64_t slot = p->n_operands + ins->dst;
                float *out = buffers[ins->dst];
                fe_apply(ins, out, a, a_scalar, b, b_scalar, n);
                ref[slot] = out;
                scalar[slot] = result_scalar;
            }
        }
    }
}

/* -- reading and checking the blob ------------------------------------------------------ */

/* Block mode (fe_program) when every gathered input is constant over the same trailing
 * extent (its trailing strides 0) of at least FE_MIN_BLOCK elements. */
static void fe_choose_blocks(fe_program *p) {
    int64_t block = 0;
    p->block = 0;
    for (int32_t k = 0; k < p->n_operands; k++) {
        if (p->kind[k] != FE_GATHER) {
            continue;
        }
        int64_t extent = 1;
        for (int32_t axis = p->ndim - 1; axis >= 0 && p->strides[k][axis] == 0; axis--) {
            extent *= p->shape[axis];
        }
        if (extent < FE_MIN_BLOCK || (block != 0 && extent != block)) {
            return;
        }
        block = extent;
    }
    /* the trailing axes whose product is the block (axes of 1 read index 0 either way) */
    int32_t outer = p->ndim;
    for (int64_t extent = 1; outer > 0 && extent < block; outer--) {
        extent *= p->shape[outer - 1];
    }
    if (block == 0 || p->numel % block != 0) {
        return;
    }
    p->outer_ndim = outer;
    p->block = block;
    p->parts = (block + FE_TILE - 1) / FE_TILE;
    p->part_len = (block + p->parts - 1) / p->parts;
}

static int fe_read(ge_context *ctx, const void *attrs, size_t size, const ge_tensor *inputs,
                   int32_t n_inputs, const ge_tensor *outputs, fe_program *p) {
    static const char *name = "ge_elementwise_fused_f32";
    ge_blob blob = ge_blob_open(attrs, size);
    p->n_operands = (int32_t)ge_blob_int_in(&blob, 1, FE_MAX_OPERANDS);
    p->ndim = (int32_t)ge_blob_int_in(&blob, 1, GE_MAX_RANK);
    if (!blob.ok || p->n_operands != n_inputs) {
        return NN_BAD_BLOB_BYTES(ctx, name, size);
    }
    p->numel = 1;
    for (int32_t axis = 0; axis < p->ndim; axis++) {
        p->shape[axis] = ge_blob_int_in(&blob, 0, INT64_MAX);
        if (__builtin_mul_overflow(p->numel, p->shape[axis], &p->numel)) {
            blob.ok = 0;
        }
    }
    for (int32_t k = 0; k < p->n_operands; k++) {
        ge_blob_ints_in(&blob, p->strides[k], p->ndim, 0, INT64_MAX);
    }
    p->n_buffers = (int32_t)ge_blob_int_in(&blob, 0, FE_MAX_BUFFERS);
    p->n_instructions = (int32_t)ge_blob_int_in(&blob, 1, FE_MAX_INSTRUCTIONS);
    if (!blob.ok) {
        return NN_BAD_BLOB_BYTES(ctx, name, size);
    }
    const int64_t refs = p->n_operands + p->n_buffers;
    for (int32_t i = 0; i < p->n_instructions; i++) {
        fe_instruction *ins = &p->code[i];
        ins->opcode = ge_blob_int_in(&blob, FE_ADD, FE_LAST_OPCODE);
        ins->dst = ge_blob_int_in(&blob, -1, p->n_buffers - 1);
        ins->a = ge_blob_int_in(&blob, 0, refs - 1);
        ins->b = ge_blob_int_in(&blob, ins->opcode < FE_NEG ? 0 : -1,
                                ins->opcode < FE_NEG ? refs - 1 : -1);
        /* the output last and only last; a buffer read only once it was written */
        if ((ins->dst < 0) != (i == p->n_instructions - 1)) {
            blob.ok = 0;
        }
    }
    for (int32_t i = 0; i < p->n_instructions; i++) {
        p->code[i].p0 = ge_blob_float(&blob);
        p->code[i].p1 = ge_blob_float(&blob);
    }
    if (!ge_blob_done(&blob)) {
        return NN_BAD_BLOB_BYTES(ctx, name, size);
    }
    int written[FE_MAX_BUFFERS] = {0};
    for (int32_t i = 0; i < p->n_instructions; i++) {
        const fe_instruction *ins = &p->code[i];
        int64_t reads[2] = {ins->a, ins->b};
        for (int r = 0; r < 2; r++) {
            if (reads[r] >= p->n_operands && !written[reads[r] - p->n_operands]) {
                return ctx->set_error(ctx, "%s: instruction %d reads buffer %lld before it is "
                                      "written", name, i, (long long)(reads[r] - p->n_operands));
            }
        }
        if (ins->dst >= 0) {
            written[ins->dst] = 1;
        }
    }
    if (nn_check_f32(ctx, name, "the output", &outputs[0], p->numel)) {
        return -1;
    }
    p->out = outputs[0].data;
    for (int32_t k = 0; k < p->n_operands; k++) {
        int64_t furthest = 0, contiguous = 1, step = 1;
        for (int32_t axis = p->ndim - 1; axis >= 0; axis--) {
            int64_t reach;
            if ((axis == p->ndim - 1 && p->strides[k][axis] > 1)
                || __builtin_mul_overflow(p->shape[axis] - 1, p->strides[k][axis], &reach)
                || __builtin_add_overflow(furthest, reach, &furthest)) {
                return ctx->set_error(ctx, "%s: the attribute blob has an invalid stride for "
                                      "input %d", name, k);
            }
            contiguous &= p->strides[k][axis] == step;
            step *= p->shape[axis];
        }
        if (inputs[k].dtype != GE_FLOAT32 || inputs[k].data == NULL) {
            return ctx->set_error(ctx, "%s: input %d must be float32 (dtype code %d) with "
                                  "data, got dtype code %d", name, k, (int)GE_FLOAT32,
                                  (int)inputs[k].dtype);
        }
        if (p->numel > 0 && furthest >= inputs[k].numel) {
            return ctx->set_error(ctx, "%s: input %d has %lld elements, the attribute blob "
                                  "reads element %lld", name, k, (long long)inputs[k].numel,
                                  (long long)furthest);
        }
        p->data[k] = inputs[k].data;
        p->kind[k] = furthest == 0 ? FE_SCALAR : contiguous ? FE_IN_PLACE : FE_GATHER;
    }
    fe_choose_blocks(p);
    return 0;
}

GE_KERNEL(ge_elementwise_fused_f32) {
    if (n_outputs != 1) {
        return ctx->set_error(ctx, "ge_elementwise_fused_f32: expected 1 output, got %d",
                              n_outputs);
    }
    fe_program *p = malloc(sizeof *p);
    if (p == NULL) {
        return ctx->set_error(ctx, "ge_elementwise_fused_f32: out of memory");
    }
    int status = fe_read(ctx, attrs, attrs_size, inputs, n_inputs, outputs, p);
    if (status == 0 && p->numel > 0) {
        const int64_t tiles = p->block > 0 ? p->numel / p->block * p->parts
                                           : (p->numel + FE_TILE - 1) / FE_TILE;
        const int64_t tile = p->block > 0 ? p->part_len : FE_TILE;
        const int64_t grain = nn_grain(tile * p->n_instructions, FE_CHUNK_WORK);
        if (tiles <= grain) {
            fe_range(p, 0, tiles);
        } else {
            ctx->parallel_for(ctx, tiles, grain, fe_range, p);
        }
    }
    free(p);
    return status;
}
