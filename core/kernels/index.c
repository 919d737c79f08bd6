/*
 * Index kernels: Gather, GatherElements, GatherND, ScatterElements, ScatterND, Trilu,
 * Range, OneHot, and the fill behind ConstantOfShape.
 *
 * Index values come at run time, so every gather and scatter checks them first, in
 * order, and reports the first one out of [-size, size-1] naming the op and the input,
 * as the op's reference does; a negative index counts from the end.
 *
 * Scatters apply their updates one after another in index order (with repeated targets,
 * reduction 'none' keeps the last update), and accumulate float32 'add' and 'mul' in
 * float64 scratch, rounding once, like the reference.
 *
 * Blob layouts (int64 values; written by ge_hub/kernels/index.py):
 *
 *   ge_gather            elem, axis, outer, axis_n, inner, n_indices
 *       data [outer, axis_n, inner] -> out [outer, n_indices, inner]
 *   ge_gather_elements   elem, axis, axis_n, ndim, walk_axis, shape[ndim], stride[ndim]
 *   ge_scatter_elements  reduction, elem, axis, axis_n, ndim, walk_axis, shape[ndim],
 *                        stride[ndim]
 *       a walk over the indices tensor (shape `shape`, collapsed, dim `walk_axis` being
 *       the gather/scatter axis) with the data strides (elements) of each walked dim;
 *       `axis` and `axis_n` are the op's axis and its size in data, for messages.
 *   ge_gather_nd         elem, batches, batch_stride, tuples, depth, slice,
 *                        size[depth], stride[depth]
 *   ge_scatter_nd        reduction, elem, tuples, depth, slice, size[depth], stride[depth]
 *       `tuples` index tuples (per batch) of `depth` coordinates, each picking a block
 *       of `slice` contiguous elements at sum(coordinate * stride) in its batch.
 *   ge_trilu             elem, batches, rows, cols, upper     (k: input 1 at run time)
 *   ge_range             (empty)   start and delta are inputs 0 and 2 at run time
 *   ge_fill              elem, value (its bytes in the low bytes of one int64, native order)
 *   ge_one_hot           elem, outer, depth, inner
 *       indices [outer, inner] -> out [outer, depth, inner]; values (input 2) are
 *       [off, on] at run time
 *
 * Reductions: 0 none, 1 add, 2 mul, 3 max, 4 min.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "index.h"

#define GRAIN_ELEMS 32768

enum { RED_NONE = 0, RED_ADD = 1, RED_MUL = 2, RED_MAX = 3, RED_MIN = 4 };
static const char *const reduction_names[] = {"none", "add", "mul", "max", "min"};

/* -- index checks ------------------------------------------------------------------------ */

static inline int64_t index_at(const ge_tensor *indices, int64_t k) {
    if (indices->dtype == GE_INT32) {
        return ((const int32_t *)indices->data)[k];
    }
    return ((const int64_t *)indices->data)[k];
}

static int check_index_dtype(ge_context *ctx, const char *op, const ge_tensor *indices) {
    if (indices->dtype != GE_INT32 && indices->dtype != GE_INT64) {
        return ctx->set_error(ctx, "%s: input 'indices' must be int32 or int64, got dtype "
                              "code %d", op, indices->dtype);
    }
    return 0;
}

/* Reports the first index (in order) outside [-size, size-1]. */
static int check_indices(ge_context *ctx, const char *op, const ge_tensor *indices,
                         int64_t size, int64_t axis) {
    for (int64_t k = 0; k < indices->numel; k++) {
        int64_t v = index_at(indices, k);
        if (v < -size || v >= size) {
            return ctx->set_error(ctx, "%s: input 'indices' has value %lld, out of range "
                                  "[%lld, %lld] for axis %lld of input 'data'", op,
                                  (long long)v, (long long)-size, (long long)(size - 1),
                                  (long long)axis);
        }
    }
    return 0;
}

static inline int64_t wrap(int64_t v, int64_t size) {
    return v < 0 ? v + size : v;
}

/* -- Gather ------------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *data;
    unsigned char *out;
    const ge_tensor *indices;
    int64_t elem, axis_n, inner, n_indices;
} gather_args;

#define GATHER_ONE_AS(T) \
    ((T *)a->out)[item] = ((const T *)a->data)[outer * a->axis_n + wrap(index_at(a->indices, j), a->axis_n)]

/* Items [begin, end): item (outer, j) copies one inner block of data to the output. */
static void gather_items(void *arg, int64_t begin, int64_t end) {
    const gather_args *a = arg;
    size_t block = (size_t)(a->inner * a->elem);
    for (int64_t item = begin; item < end; item++) {
        int64_t outer = item / a->n_indices, j = item % a->n_indices;
        if (a->inner == 1) {  /* one element: a typed move beats a memcpy call */
            switch (a->elem) {
            case 1: GATHER_ONE_AS(uint8_t); break;
            case 2: GATHER_ONE_AS(uint16_t); break;
            case 4: GATHER_ONE_AS(uint32_t); break;
            default: GATHER_ONE_AS(uint64_t); break;
            }
            continue;
        }
        int64_t row = outer * a->axis_n + wrap(index_at(a->indices, j), a->axis_n);
        memcpy(a->out + (size_t)item * block, a->data + (size_t)row * block, block);
    }
}

GE_KERNEL(ge_gather) {
    static const char *op = "Gather";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    gather_args a;
    a.elem = ge_blob_int(&blob);
    int64_t axis = ge_blob_int(&blob);
    int64_t outer = ge_blob_int(&blob);
    a.axis_n = ge_blob_int(&blob);
    a.inner = ge_blob_int(&blob);
    a.n_indices = ge_blob_int(&blob);
    if (!ge_blob_done(&blob) || !ge_mv_elem_ok(a.elem) || outer < 0 || a.axis_n < 0
        || a.inner < 0 || a.n_indices < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 2 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    if (ge_mv_check(ctx, op, "input", 0, &inputs[0], outer * a.axis_n * a.inner, a.elem)
        || check_index_dtype(ctx, op, &inputs[1])
        || ge_mv_check(ctx, op, "input", 1, &inputs[1], a.n_indices,
                       (int64_t)ge_dtype_itemsize(inputs[1].dtype))
        || ge_mv_check(ctx, op, "output", 0, &outputs[0], outer * a.n_indices * a.inner,
                       a.elem)
        || check_indices(ctx, op, &inputs[1], a.axis_n, axis)) {
        return -1;
    }
    if (outputs[0].numel == 0) {
        return 0;
    }
    a.data = inputs[0].data;
    a.out = outputs[0].data;
    a.indices = &inputs[1];
    int64_t grain = GRAIN_ELEMS / a.inner > 1 ? GRAIN_ELEMS / a.inner : 1;
    ctx->parallel_for(ctx, outer * a.n_indices, grain, gather_items, &a);
    return 0;
}

/* -- the walk shared by GatherElements and ScatterElements ------------------------------- */

typedef struct {
    int64_t elem, axis, axis_n;
    int ndim, walk_axis;
    int64_t shape[GE_MV_MAX_DIMS];
    int64_t stride[GE_MV_MAX_DIMS];
    int64_t numel;
} element_walk;

static int read_walk(ge_blob *blob, element_walk *w) {
    w->elem = ge_blob_int(blob);
    w->axis = ge_blob_int(blob);
    w->axis_n = ge_blob_int(blob);
    int64_t ndim = ge_blob_int(blob);
    int64_t walk_axis = ge_blob_int(blob);
    ge_blob_ints_capped(blob, w->shape, ndim, GE_MV_MAX_DIMS);
    ge_blob_ints_capped(blob, w->stride, ndim, GE_MV_MAX_DIMS);
    if (!ge_blob_done(blob) || !ge_mv_elem_ok(w->elem) || ndim < 1 || walk_axis < 0
        || walk_axis >= ndim || w->axis_n < 0) {
        return -1;
    }
    w->ndim = (int)ndim;
    w->walk_axis = (int)walk_axis;
    w->numel = 1;
    for (int d = 0; d < w->ndim; d++) {
        /* checked sizes (ge_hub/blob.h): a blob from a file must not wrap one around */
        w->numel = ge_size_mul(w->numel, w->shape[d]);
        if (w->numel < 0 || ge_size_mul(w->stride[d], 1) < 0) {
            return -1;
        }
    }
    return ge_size_mul(w->axis_n, 1) < 0 ? -1 : 0;
}

/* The data offset of walk position `pos` without its axis coordinate, and whether every
 * read of the walk stays inside `data_numel` elements. */
static int walk_fits(const element_walk *w, int64_t data_numel) {
    if (w->numel == 0) {
        return 1;
    }
    if (w->axis_n < 1) {
        return 0;
    }
    int64_t high = 0;
    for (int d = 0; d < w->ndim; d++) {
        high = ge_size_add(high, ge_size_mul(d == w->walk_axis ? w->axis_n - 1
                                             : w->shape[d] - 1, w->stride[d]));
    }
    return high >= 0 && high < data_numel;
}

typedef struct {
    const element_walk *w;
    const unsigned char *data;
    unsigned char *out;
    const ge_tensor *indices;
} gather_elements_args;

#define GATHER_ELEMENTS_AS(T)                                                          \
    do {                                                                               \
        T *o = (T *)a->out + row * n;                                                  \
        const T *d = (const T *)a->data + offset;                                      \
        for (int64_t k = 0; k < n; k++) {                                              \
            int64_t v = wrap(index_at(a->indices, row * n + k), w->axis_n);            \
            o[k] = d[axis_last ? v * s_axis : k * s_last + v * s_axis];                \
        }                                                                              \
    } while (0)

static void gather_elements_rows(void *arg, int64_t begin, int64_t end) {
    const gather_elements_args *a = arg;
    const element_walk *w = a->w;
    int last = w->ndim - 1;
    int64_t n = w->shape[last];
    int axis_last = w->walk_axis == last;
    int64_t s_axis = w->stride[w->walk_axis], s_last = w->stride[last];
    int64_t idx[GE_MV_MAX_DIMS];
    int64_t rest = begin;
    for (int d = last - 1; d >= 0; d--) {
        idx[d] = rest % w->shape[d];
        rest /= w->shape[d];
    }
    for (int64_t row = begin; row < end; row++) {
        int64_t offset = 0;
        for (int d = 0; d < last; d++) {
            offset += d == w->walk_axis ? 0 : idx[d] * w->stride[d];
        }
        switch (w->elem) {
        case 1: GATHER_ELEMENTS_AS(uint8_t); break;
        case 2: GATHER_ELEMENTS_AS(uint16_t); break;
        case 4: GATHER_ELEMENTS_AS(uint32_t); break;
        default: GATHER_ELEMENTS_AS(uint64_t); break;
        }
        for (int d = last - 1; d >= 0; d--) {
            if (++idx[d] < w->shape[d]) {
                break;
            }
            idx[d] = 0;
        }
    }
}

GE_KERNEL(ge_gather_elements) {
    static const char *op = "GatherElements";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    element_walk w;
    if (read_walk(&blob, &w)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 2 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    if (ge_mv_check(ctx, op, "input", 0, &inputs[0], inputs[0].numel, w.elem)
        || check_index_dtype(ctx, op, &inputs[1])
        || ge_mv_check(ctx, op, "input", 1, &inputs[1], w.numel,
                       (int64_t)ge_dtype_itemsize(inputs[1].dtype))
        || ge_mv_check(ctx, op, "output", 0, &outputs[0], w.numel, w.elem)) {
        return -1;
    }
    if (check_indices(ctx, op, &inputs[1], w.axis_n, w.axis)) {
        return -1;
    }
    if (!walk_fits(&w, inputs[0].numel)) {
        return ctx->set_error(ctx, "%s: the plan reads past input 'data' (%lld elements)", op,
                              (long long)inputs[0].numel);
    }
    if (w.numel == 0) {
        return 0;
    }
    gather_elements_args a = {&w, inputs[0].data, outputs[0].data, &inputs[1]};
    int64_t n = w.shape[w.ndim - 1];
    int64_t grain = GRAIN_ELEMS / n > 1 ? GRAIN_ELEMS / n : 1;
    ctx->parallel_for(ctx, w.numel / n, grain, gather_elements_rows, &a);
    return 0;
}

/* -- scatter updates --------------------------------------------------------------------- */

/* The reductions on each element type; `acc` is the output element, `u` the update.
 * Integers wrap like C unsigned arithmetic (no undefined overflow); float max and min
 * propagate NaN like np.maximum and np.minimum. */
#define REDUCE_FLOAT(acc, u, reduction)                                     \
    do {                                                                    \
        switch (reduction) {                                                \
        case RED_ADD: acc = acc + (u); break;                               \
        case RED_MUL: acc = acc * (u); break;                               \
        case RED_MAX: acc = (acc > (u) || acc != acc) ? acc : (u); break;   \
        case RED_MIN: acc = (acc < (u) || acc != acc) ? acc : (u); break;   \
        default: acc = (u); break;                                          \
        }                                                                   \
    } while (0)

#define REDUCE_INT(T, U, acc, u, reduction)                                 \
    do {                                                                    \
        switch (reduction) {                                                \
        case RED_ADD: acc = (T)((U)acc + (U)(u)); break;                    \
        case RED_MUL: acc = (T)((U)acc * (U)(u)); break;                    \
        case RED_MAX: acc = acc > (u) ? acc : (u); break;                   \
        case RED_MIN: acc = acc < (u) ? acc : (u); break;                   \
        default: acc = (u); break;                                          \
        }                                                                   \
    } while (0)

/* Where a scatter accumulates: the output itself, or float64 scratch for float32 add and
 * mul, converted to and fro around the updates. */
typedef struct {
    int reduction;
    int32_t dtype;
    int64_t elem;
    unsigned char *out;
    double *wide;  /* NULL unless accumulating float32 in float64 */
    const unsigned char *updates;
} scatter_target;

/* out[at .. at+n) = reduce(out[...], updates[from .. from+n)). */
static void scatter_block(const scatter_target *t, int64_t at, int64_t from, int64_t n) {
    if (t->reduction == RED_NONE) {
        memcpy(t->out + at * t->elem, t->updates + from * t->elem, (size_t)(n * t->elem));
        return;
    }
    if (t->wide != NULL) {
        const float *u = (const float *)t->updates + from;
        double *acc = t->wide + at;
        for (int64_t k = 0; k < n; k++) {
            REDUCE_FLOAT(acc[k], (double)u[k], t->reduction);
        }
        return;
    }
    switch (t->dtype) {
    case GE_FLOAT32: {
        float *acc = (float *)t->out + at;
        const float *u = (const float *)t->updates + from;
        for (int64_t k = 0; k < n; k++) REDUCE_FLOAT(acc[k], u[k], t->reduction);
        break;
    }
    case GE_FLOAT64: {
        double *acc = (double *)t->out + at;
        const double *u = (const double *)t->updates + from;
        for (int64_t k = 0; k < n; k++) REDUCE_FLOAT(acc[k], u[k], t->reduction);
        break;
    }
    case GE_INT32: {
        int32_t *acc = (int32_t *)t->out + at;
        const int32_t *u = (const int32_t *)t->updates + from;
        for (int64_t k = 0; k < n; k++) REDUCE_INT(int32_t, uint32_t, acc[k], u[k], t->reduction);
        break;
    }
    default: {  /* GE_INT64, checked by scatter_begin */
        int64_t *acc = (int64_t *)t->out + at;
        const int64_t *u = (const int64_t *)t->updates + from;
        for (int64_t k = 0; k < n; k++) REDUCE_INT(int64_t, uint64_t, acc[k], u[k], t->reduction);
        break;
    }
    }
}

/* Checks the reduction against the dtype, copies data to the output (unless the step runs
 * in place) and sets up the float64 scratch when needed. */
static int scatter_begin(ge_context *ctx, const char *op, int64_t reduction, int64_t elem,
                         const ge_tensor *data, const ge_tensor *updates,
                         const ge_tensor *out, scatter_target *t) {
    if (reduction < RED_NONE || reduction > RED_MIN) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (reduction %lld)", op,
                              (long long)reduction);
    }
    if (updates->dtype != data->dtype) {
        return ctx->set_error(ctx, "%s: input 'updates' has dtype code %d, input 'data' %d",
                              op, updates->dtype, data->dtype);
    }
    int32_t dtype = data->dtype;
    if (reduction != RED_NONE && dtype != GE_FLOAT32 && dtype != GE_FLOAT64
        && dtype != GE_INT32 && dtype != GE_INT64) {
        return ctx->set_error(ctx, "%s: reduction '%s' has no kernel for dtype code %d", op,
                              reduction_names[reduction], dtype);
    }
    t->reduction = (int)reduction;
    t->dtype = dtype;
    t->elem = elem;
    t->out = out->data;
    t->updates = updates->data;
    t->wide = NULL;
    ge_mv_copy(ctx, out->data, data->data, ge_tensor_nbytes(out));
    if (dtype == GE_FLOAT32 && (reduction == RED_ADD || reduction == RED_MUL)) {
        if (ctx->scratch == NULL || ctx->scratch_bytes < (size_t)out->numel * sizeof(double)) {
            return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", op,
                                  (size_t)out->numel * sizeof(double), ctx->scratch_bytes);
        }
        t->wide = ctx->scratch;
        const float *from = (const float *)out->data;
        for (int64_t k = 0; k < out->numel; k++) {
            t->wide[k] = from[k];
        }
    }
    return 0;
}

static void scatter_end(const scatter_target *t, int64_t numel) {
    if (t->wide != NULL) {
        float *to = (float *)t->out;
        for (int64_t k = 0; k < numel; k++) {
            to[k] = (float)t->wide[k];  /* rounded once, after every update */
        }
    }
}

/* -- ScatterElements --------------------------------------------------------------------- */

GE_KERNEL(ge_scatter_elements) {
    static const char *op = "ScatterElements";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t reduction = ge_blob_int(&blob);
    element_walk w;
    if (read_walk(&blob, &w)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 3 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 3 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    if (ge_mv_check(ctx, op, "input", 0, &inputs[0], inputs[0].numel, w.elem)
        || check_index_dtype(ctx, op, &inputs[1])
        || ge_mv_check(ctx, op, "input", 1, &inputs[1], w.numel,
                       (int64_t)ge_dtype_itemsize(inputs[1].dtype))
        || ge_mv_check(ctx, op, "input", 2, &inputs[2], w.numel, w.elem)
        || ge_mv_check(ctx, op, "output", 0, &outputs[0], inputs[0].numel, w.elem)) {
        return -1;
    }
    if (check_indices(ctx, op, &inputs[1], w.axis_n, w.axis)) {
        return -1;
    }
    if (!walk_fits(&w, inputs[0].numel)) {
        return ctx->set_error(ctx, "%s: the plan writes past input 'data' (%lld elements)",
                              op, (long long)inputs[0].numel);
    }
    scatter_target t;
    if (scatter_begin(ctx, op, reduction, w.elem, &inputs[0], &inputs[2], &outputs[0], &t)) {
        return -1;
    }
    /* In order, one element at a time: later updates of a target must see earlier ones. */
    int last = w.ndim - 1;
    int64_t idx[GE_MV_MAX_DIMS] = {0};
    for (int64_t pos = 0; pos < w.numel; pos++) {
        int64_t at = 0;
        for (int d = 0; d <= last; d++) {
            int64_t coordinate = d == w.walk_axis
                ? wrap(index_at(&inputs[1], pos), w.axis_n) : idx[d];
            at += coordinate * w.stride[d];
        }
        scatter_block(&t, at, pos, 1);
        for (int d = last; d >= 0; d--) {
            if (++idx[d] < w.shape[d]) {
                break;
            }
            idx[d] = 0;
        }
    }
    scatter_end(&t, outputs[0].numel);
    return 0;
}

/* -- GatherND, ScatterND ----------------------------------------------------------------- */

typedef struct {
    int64_t tuples, depth, slice;
    int64_t size[GE_MV_MAX_DIMS];
    int64_t stride[GE_MV_MAX_DIMS];
} nd_walk;

static int read_nd(ge_blob *blob, nd_walk *w) {
    w->tuples = ge_blob_int(blob);
    w->depth = ge_blob_int(blob);
    w->slice = ge_blob_int(blob);
    ge_blob_ints_capped(blob, w->size, w->depth, GE_MV_MAX_DIMS);
    ge_blob_ints_capped(blob, w->stride, w->depth, GE_MV_MAX_DIMS);
    if (!ge_blob_done(blob) || w->tuples < 0 || w->depth < 1 || w->slice < 0) {
        return -1;
    }
    for (int64_t k = 0; k < w->depth; k++) {
        if (w->size[k] < 0 || w->stride[k] < 0) {
            return -1;
        }
    }
    return 0;
}

/* The largest element offset of one batch a tuple can reach, plus one. */
static int64_t nd_extent(const nd_walk *w) {
    int64_t high = w->slice;
    for (int64_t k = 0; k < w->depth; k++) {
        high += (w->size[k] - 1) * w->stride[k];
    }
    return high;
}

/* Reports the first coordinate (in order) outside its axis. */
static int check_nd_indices(ge_context *ctx, const char *op, const ge_tensor *indices,
                            const nd_walk *w) {
    const int64_t *values = indices->data;
    for (int64_t k = 0; k < indices->numel; k++) {
        int64_t size = w->size[k % w->depth];
        if (values[k] < -size || values[k] >= size) {
            return ctx->set_error(ctx, "%s: input 'indices' has value %lld, out of range "
                                  "[%lld, %lld] for the indexed axes of input 'data'", op,
                                  (long long)values[k], (long long)-size,
                                  (long long)(size - 1));
        }
    }
    return 0;
}

static inline int64_t nd_offset(const nd_walk *w, const int64_t *tuple) {
    int64_t at = 0;
    for (int64_t k = 0; k < w->depth; k++) {
        at += wrap(tuple[k], w->size[k]) * w->stride[k];
    }
    return at;
}

typedef struct {
    const nd_walk *w;
    int64_t elem, batch_stride;
    const unsigned char *data;
    unsigned char *out;
    const int64_t *indices;
} gather_nd_args;

/* Items [begin, end): item (batch, tuple) copies one slice. */
static void gather_nd_items(void *arg, int64_t begin, int64_t end) {
    const gather_nd_args *a = arg;
    const nd_walk *w = a->w;
    size_t block = (size_t)(w->slice * a->elem);
    for (int64_t item = begin; item < end; item++) {
        int64_t batch = item / w->tuples;
        int64_t at = batch * a->batch_stride + nd_offset(w, a->indices + item * w->depth);
        memcpy(a->out + (size_t)item * block, a->data + (size_t)at * (size_t)a->elem, block);
    }
}

GE_KERNEL(ge_gather_nd) {
    static const char *op = "GatherND";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t elem = ge_blob_int(&blob);
    int64_t batches = ge_blob_int(&blob);
    int64_t batch_stride = ge_blob_int(&blob);
    nd_walk w;
    if (read_nd(&blob, &w) || !ge_mv_elem_ok(elem) || batches < 0 || batch_stride < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 2 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    if (ge_mv_check(ctx, op, "input", 0, &inputs[0], batches * batch_stride, elem)
        || ge_mv_check(ctx, op, "input", 1, &inputs[1], batches * w.tuples * w.depth, 8)
        || ge_mv_check(ctx, op, "output", 0, &outputs[0], batches * w.tuples * w.slice,
                       elem)) {
        return -1;
    }
    if (inputs[1].dtype != GE_INT64) {
        return ctx->set_error(ctx, "%s: input 'indices' must be int64, got dtype code %d", op,
                              inputs[1].dtype);
    }
    if (batches * w.tuples > 0 && nd_extent(&w) > batch_stride) {
        return ctx->set_error(ctx, "%s: the plan reads past a batch of input 'data'", op);
    }
    if (check_nd_indices(ctx, op, &inputs[1], &w)) {
        return -1;
    }
    if (outputs[0].numel == 0) {
        return 0;
    }
    gather_nd_args a = {&w, elem, batch_stride, inputs[0].data, outputs[0].data,
                        inputs[1].data};
    int64_t grain = w.slice > 0 && GRAIN_ELEMS / w.slice > 1 ? GRAIN_ELEMS / w.slice : 1;
    ctx->parallel_for(ctx, batches * w.tuples, grain, gather_nd_items, &a);
    return 0;
}

GE_KERNEL(ge_scatter_nd) {
    static const char *op = "ScatterND";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t reduction = ge_blob_int(&blob);
    int64_t elem = ge_blob_int(&blob);
    nd_walk w;
    if (read_nd(&blob, &w) || !ge_mv_elem_ok(elem)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 3 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 3 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    if (ge_mv_check(ctx, op, "input", 0, &inputs[0], inputs[0].numel, elem)
        || ge_mv_check(ctx, op, "input", 1, &inputs[1], w.tuples * w.depth, 8)
        || ge_mv_check(ctx, op, "input", 2, &inputs[2], w.tuples * w.slice, elem)
        || ge_mv_check(ctx, op, "output", 0, &outputs[0], inputs[0].numel, elem)) {
        return -1;
    }
    if (inputs[1].dtype != GE_INT64) {
        return ctx->set_error(ctx, "%s: input 'indices' must be int64, got dtype code %d", op,
                              inputs[1].dtype);
    }
    if (w.tuples > 0 && nd_extent(&w) > inputs[0].numel) {
        return ctx->set_error(ctx, "%s: the plan writes past input 'data'", op);
    }
    if (check_nd_indices(ctx, op, &inputs[1], &w)) {
        return -1;
    }
    scatter_target t;
    if (scatter_begin(ctx, op, reduction, elem, &inputs[0], &inputs[2], &outputs[0], &t)) {
        return -1;
    }
    const int64_t *indices = inputs[1].data;
    for (int64_t tuple = 0; tuple < w.tuples; tuple++) {
        scatter_block(&t, nd_offset(&w, indices + tuple * w.depth), tuple * w.slice, w.slice);
    }
    scatter_end(&t, outputs[0].numel);
    return 0;
}

/* -- Trilu ------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *in;
    unsigned char *out;
    int64_t elem, rows, cols, k;
    int upper;
} trilu_args;

static void trilu_rows(void *arg, int64_t begin, int64_t end) {
    const trilu_args *a = arg;
    size_t row_bytes = (size_t)(a->cols * a->elem);
    for (int64_t r = begin; r < end; r++) {
        int64_t i = r % a->rows;
        /* Kept columns j: j - i >= k (upper) or j - i <= k (lower); k is clamped, so
         * i + k cannot overflow. */
        int64_t edge = a->upper ? i + a->k : i + a->k + 1;
        edge = edge < 0 ? 0 : edge > a->cols ? a->cols : edge;
        unsigned char *out = a->out + (size_t)r * row_bytes;
        const unsigned char *in = a->in + (size_t)r * row_bytes;
        size_t split = (size_t)(edge * a->elem);
        if (a->upper) {  /* zero [0, edge), keep [edge, cols) */
            memset(out, 0, split);
            if (out != in) {
                memcpy(out + split, in + split, row_bytes - split);
            }
        } else {  /* keep [0, edge), zero [edge, cols) */
            if (out != in) {
                memcpy(out, in, split);
            }
            memset(out + split, 0, row_bytes - split);
        }
    }
}

GE_KERNEL(ge_trilu) {
    static const char *op = "Trilu";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    trilu_args a;
    a.elem = ge_blob_int(&blob);
    int64_t batches = ge_blob_int(&blob);
    a.rows = ge_blob_int(&blob);
    a.cols = ge_blob_int(&blob);
    a.upper = ge_blob_int(&blob) != 0;
    if (!ge_blob_done(&blob) || !ge_mv_elem_ok(a.elem) || batches < 0 || a.rows < 0
        || a.cols < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs < 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 1 or 2 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    int64_t numel = batches * a.rows * a.cols;
    if (ge_mv_check(ctx, op, "input", 0, &inputs[0], numel, a.elem)
        || ge_mv_check(ctx, op, "output", 0, &outputs[0], numel, a.elem)) {
        return -1;
    }
    a.k = 0;
    if (n_inputs > 1 && inputs[1].data != NULL) {
        if (inputs[1].dtype != GE_INT64 || inputs[1].numel != 1) {
            return ctx->set_error(ctx, "%s: input 'k' must be one int64, got %lld elements of "
                                  "dtype code %d", op, (long long)inputs[1].numel,
                                  inputs[1].dtype);
        }
        a.k = *(const int64_t *)inputs[1].data;
    }
    /* Beyond +-(rows + cols) every k keeps or zeroes the same columns. */
    int64_t bound = a.rows + a.cols + 1;
    a.k = a.k > bound ? bound : a.k < -bound ? -bound : a.k;
    if (numel == 0) {
        return 0;
    }
    a.in = inputs[0].data;
    a.out = outputs[0].data;
    int64_t grain = GRAIN_ELEMS / a.cols > 1 ? GRAIN_ELEMS / a.cols : 1;
    ctx->parallel_for(ctx, batches * a.rows, grain, trilu_rows, &a);
    return 0;
}

/* -- Range ------------------------------------------------------------------------------- */

GE_KERNEL(ge_range) {
    static const char *op = "Range";
    if (attrs_size != 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 3 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 3 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    const ge_tensor *start = &inputs[0], *delta = &inputs[2], *out = &outputs[0];
    int32_t dtype = out->dtype;
    int64_t elem = (int64_t)ge_dtype_itemsize(dtype);
    if (ge_mv_check(ctx, op, "input", 0, start, 1, elem)
        || ge_mv_check(ctx, op, "input", 2, delta, 1, elem)) {
        return -1;
    }
    if (start->dtype != dtype || delta->dtype != dtype) {
        return ctx->set_error(ctx, "%s: inputs 'start' and 'delta' must have the output's "
                              "dtype code %d, got %d and %d", op, dtype, start->dtype,
                              delta->dtype);
    }
    int64_t n = out->numel;
    /* Like the reference: floats in float64, integers in int64 wrapping like C. */
    switch (dtype) {
    case GE_FLOAT32: {
        double first = *(const float *)start->data, step = *(const float *)delta->data;
        float *o = out->data;
        for (int64_t i = 0; i < n; i++) o[i] = (float)(first + (double)i * step);
        break;
    }
    case GE_FLOAT64: {
        double first = *(const double *)start->data, step = *(const double *)delta->data;
        double *o = out->data;
        for (int64_t i = 0; i < n; i++) o[i] = first + (double)i * step;
        break;
    }
    case GE_INT32: {
        uint64_t first = (uint64_t)(int64_t)*(const int32_t *)start->data;
        uint64_t step = (uint64_t)(int64_t)*(const int32_t *)delta->data;
        int32_t *o = out->data;
        for (int64_t i = 0; i < n; i++) o[i] = (int32_t)(uint32_t)(first + (uint64_t)i * step);
        break;
    }
    case GE_INT64: {
        uint64_t first = (uint64_t)*(const int64_t *)start->data;
        uint64_t step = (uint64_t)*(const int64_t *)delta->data;
        int64_t *o = out->data;
        for (int64_t i = 0; i < n; i++) o[i] = (int64_t)(first + (uint64_t)i * step);
        break;
    }
    default:
        return ctx->set_error(ctx, "%s: no kernel for dtype code %d", op, dtype);
    }
    return 0;
}

/* -- OneHot ------------------------------------------------------------------------------ */

/* The class an index names, or -1 for none: float indices truncate toward zero like
 * NumPy's astype(int64); negative ones count from the end; out of range is no class. */
static inline int64_t one_hot_class(const ge_tensor *indices, int64_t k, int64_t depth) {
    int64_t v;
    switch (indices->dtype) {
    case GE_INT32: v = ((const int32_t *)indices->data)[k]; break;
    case GE_INT64: v = ((const int64_t *)indices->data)[k]; break;
    default: {  /* GE_FLOAT32, checked by the kernel */
        double f = ((const float *)indices->data)[k];
        if (!(f > -(double)depth - 1 && f < (double)depth)) {  /* NaN too */
            return -1;
        }
        v = (int64_t)f;
        break;
    }
    }
    if (v < 0) {
        v += depth;
    }
    return v >= 0 && v < depth ? v : -1;
}

GE_KERNEL(ge_one_hot) {
    static const char *op = "OneHot";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t elem = ge_blob_int(&blob);
    int64_t outer = ge_blob_int(&blob);
    int64_t depth = ge_blob_int(&blob);
    int64_t inner = ge_blob_int(&blob);
    if (!ge_blob_done(&blob) || !ge_mv_elem_ok(elem) || outer < 0 || depth < 1 || inner < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 3 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 3 inputs and 1 output, got %d and %d", op,
                              n_inputs, n_outputs);
    }
    const ge_tensor *indices = &inputs[0];
    if (indices->dtype != GE_INT32 && indices->dtype != GE_INT64
        && indices->dtype != GE_FLOAT32) {
        return ctx->set_error(ctx, "%s: input 'indices' must be int32, int64 or float32 here, "
                              "got dtype code %d", op, indices->dtype);
    }
    if (ge_mv_check(ctx, op, "input", 0, indices, outer * inner,
                    (int64_t)ge_dtype_itemsize(indices->dtype))
        || ge_mv_check(ctx, op, "input", 2, &inputs[2], 2, elem)
        || ge_mv_check(ctx, op, "output", 0, &outputs[0], outer * depth * inner, elem)) {
        return -1;
    }
    const unsigned char *values = inputs[2].data;  /* [off, on] */
    unsigned char *out = outputs[0].data;
    ge_mv_fill(out, values, outputs[0].numel, elem);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            int64_t c = one_hot_class(indices, o * inner + i, depth);
            if (c >= 0) {
                memcpy(out + ((o * depth + c) * inner + i) * elem, values + elem, (size_t)elem);
            }
        }
    }
    return 0;
}

/* -- ge_fill (ConstantOfShape) ----------------------------------------------------------- */

typedef struct {
    unsigned char *out;
    int64_t elem;
    unsigned char value[8];
} fill_args;

static void fill_range(void *arg, int64_t begin, int64_t end) {
    const fill_args *a = arg;
    ge_mv_fill(a->out + begin * a->elem, a->value, end - begin, a->elem);
}

GE_KERNEL(ge_fill) {
    static const char *op = "ConstantOfShape";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    fill_args a;
    a.elem = ge_blob_int(&blob);
    int64_t bits = ge_blob_int(&blob);
    if (!ge_blob_done(&blob) || !ge_mv_elem_ok(a.elem)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes 1 output, got %d", op, n_outputs);
    }
    if (ge_mv_check(ctx, op, "output", 0, &outputs[0], outputs[0].numel, a.elem)) {
        return -1;
    }
    memcpy(a.value, &bits, sizeof a.value);  /* the packer put the value's bytes first */
    a.out = outputs[0].data;
    if (outputs[0].numel == 0) {
        return 0;
    }
    ctx->parallel_for(ctx, outputs[0].numel, GE_MV_PARALLEL_BYTES / a.elem, fill_range, &a);
    return 0;
}
