/*
 * NonZero, Compress, Unique and NonMaxSuppression with data-dependent output sizes (see
 * select.h for how they report the size they produced). Blobs (ge_hub/kernels/select.py):
 *
 *   ge_non_zero_bounded   (empty)        X any numeric dtype, read through its shape
 *   ge_compress_bounded   outer, length, inner_bytes
 *       input [outer, length, inner] -> output [outer, n, inner]; condition (bool) has
 *       at most `length` entries, the slices past its end are dropped
 *   ge_unique_bounded     sorted         X flattened; float32/float64/int32/int64
 *   ge_nms_bounded        center_point_box, bound
 *       boxes float32 [B, N, 4], scores float32 [B, C, N]; max_output_boxes_per_class
 *       (int64), iou_threshold and score_threshold (float32) are optional scalar inputs
 *       read at run time; scratch: N candidates and N corner boxes
 *
 * Semantics are the NumPy references' (ge_hub/ops/index.py non_zero, ge_hub/ops/select.py):
 * values compare as numbers (-0.0 is zero and equals 0.0, NaNs are one value sorting
 * last), NMS boxes are taken by decreasing score with ties by lower index, IoU in double.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "select.h"

static int check_count(ge_context *ctx, const char *op, const ge_tensor *count) {
    if (count->dtype != GE_INT64 || count->numel != 1) {
        return ctx->set_error(ctx, "%s: the last output must be the int64 [1] count", op);
    }
    return 0;
}

/* -- NonZero ------------------------------------------------------------------------------ */

/* Whether element i is non-zero, comparing as a number; -1 for a dtype not handled. */
static inline int nonzero_at(const void *data, int32_t dtype, int64_t i) {
    switch (dtype) {
    case GE_FLOAT32: return ((const float *)data)[i] != 0.0f;
    case GE_FLOAT64: return ((const double *)data)[i] != 0.0;
    case GE_FLOAT16:
    case GE_BFLOAT16: return (((const uint16_t *)data)[i] & 0x7fffu) != 0;
    case GE_INT8: case GE_UINT8: case GE_BOOL: return ((const uint8_t *)data)[i] != 0;
    case GE_INT16: case GE_UINT16: return ((const uint16_t *)data)[i] != 0;
    case GE_INT32: case GE_UINT32: return ((const uint32_t *)data)[i] != 0;
    case GE_INT64: case GE_UINT64: return ((const uint64_t *)data)[i] != 0;
    default: return -1;
    }
}

GE_KERNEL(ge_non_zero_bounded) {
    static const char *op = "NonZero";
    if (attrs_size != 0 || n_inputs != 1 || n_outputs != 2) {
        return ctx->set_error(ctx, "%s: takes 1 input, 2 outputs and no attributes", op);
    }
    (void)attrs;
    const ge_tensor *x = &inputs[0], *y = &outputs[0];
    if (check_count(ctx, op, &outputs[1])) {
        return -1;
    }
    if (x->numel > 0 && nonzero_at(x->data, x->dtype, 0) < 0) {
        return ctx->set_error(ctx, "%s: no kernel for input dtype %d", op, x->dtype);
    }
    int64_t rank = x->ndim, n = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        n += nonzero_at(x->data, x->dtype, i);
    }
    if (y->dtype != GE_INT64 || y->numel < rank * n) {
        return ctx->set_error(ctx, "%s: output buffer of %lld elements cannot hold [%lld, %lld]",
                              op, (long long)y->numel, (long long)rank, (long long)n);
    }
    int64_t *out = (int64_t *)y->data;
    int64_t at = 0;
    for (int64_t i = 0; i < x->numel && rank > 0; i++) {
        if (!nonzero_at(x->data, x->dtype, i)) {
            continue;
        }
        int64_t rest = i;
        for (int64_t d = rank - 1; d >= 0; d--) {
            int64_t size = x->shape[d];
            out[d * n + at] = rest % size;
            rest /= size;
        }
        at++;
    }
    ((int64_t *)outputs[1].data)[0] = n;
    return 0;
}

/* -- Compress ----------------------------------------------------------------------------- */

GE_KERNEL(ge_compress_bounded) {
    static const char *op = "Compress";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t outer = ge_blob_int_in(&blob, 0, INT64_MAX);
    int64_t length = ge_blob_int_in(&blob, 0, INT64_MAX);
    int64_t inner_bytes = ge_blob_int_in(&blob, 0, INT64_MAX);
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 2 || n_outputs != 2 || check_count(ctx, op, &outputs[1])) {
        return n_inputs != 2 || n_outputs != 2
            ? ctx->set_error(ctx, "%s: takes 2 inputs and 2 outputs", op) : -1;
    }
    const ge_tensor *x = &inputs[0], *cond = &inputs[1], *y = &outputs[0];
    if (cond->dtype != GE_BOOL || cond->numel > length) {
        return ctx->set_error(ctx, "%s: input 'condition' must be bool with at most %lld "
                              "entries, got %lld", op, (long long)length,
                              (long long)cond->numel);
    }
    if ((size_t)(outer * length * inner_bytes) > ge_tensor_nbytes(x)
        || (size_t)(outer * cond->numel * inner_bytes) > ge_tensor_nbytes(y)) {
        return ctx->set_error(ctx, "%s: blob [%lld, %lld, %lld bytes] does not fit the tensors",
                              op, (long long)outer, (long long)length, (long long)inner_bytes);
    }
    const uint8_t *keep = (const uint8_t *)cond->data;
    int64_t n = 0;
    for (int64_t i = 0; i < cond->numel; i++) {
        n += keep[i] != 0;
    }
    const char *src = (const char *)x->data;
    char *dst = (char *)y->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < cond->numel; i++) {
            if (keep[i]) {
                memcpy(dst, src + (o * length + i) * inner_bytes, (size_t)inner_bytes);
                dst += inner_bytes;
            }
        }
    }
    ((int64_t *)outputs[1].data)[0] = n;
    return 0;
}

/* -- Unique ------------------------------------------------------------------------------- */

typedef struct {
    double key;   /* the value as a number, 0 for NaN; -0.0 made 0.0 */
    int64_t ikey; /* integer inputs compare here */
    int64_t index;
    int32_t nan;
} unique_item;

static int unique_cmp(const void *pa, const void *pb) {
    const unique_item *a = (const unique_item *)pa, *b = (const unique_item *)pb;
    if (a->nan != b->nan) {
        return a->nan - b->nan;  /* NaN last */
    }
    if (a->key != b->key) {
        return a->key < b->key ? -1 : 1;
    }
    if (a->ikey != b->ikey) {
        return a->ikey < b->ikey ? -1 : 1;
    }
    return a->index < b->index ? -1 : a->index > b->index;
}

static int same_value(const unique_item *a, const unique_item *b) {
    return a->nan == b->nan && a->key == b->key && a->ikey == b->ikey;
}

static int first_cmp(const void *pa, const void *pb) {
    /* groups (as first-index, group id pairs) by their first occurrence */
    const int64_t *a = (const int64_t *)pa, *b = (const int64_t *)pb;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

GE_KERNEL(ge_unique_bounded) {
    static const char *op = "Unique";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t sorted = ge_blob_int_in(&blob, 0, 1);
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs != 1 || n_outputs != 5) {
        return ctx->set_error(ctx, "%s: takes 1 input and 5 outputs", op);
    }
    const ge_tensor *x = &inputs[0];
    int64_t numel = x->numel;
    size_t elem = ge_dtype_itemsize(x->dtype);
    if (check_count(ctx, op, &outputs[4])) {
        return -1;
    }
    if (x->dtype != GE_FLOAT32 && x->dtype != GE_FLOAT64 && x->dtype != GE_INT32
        && x->dtype != GE_INT64) {
        return ctx->set_error(ctx, "%s: no kernel for input dtype %d", op, x->dtype);
    }
    for (int i = 0; i < 4; i++) {
        if (outputs[i].numel < numel || (i > 0 && outputs[i].dtype != GE_INT64)) {
            return ctx->set_error(ctx, "%s: output %d cannot hold %lld values", op, i,
                                  (long long)numel);
        }
    }
    unique_item *items = (unique_item *)ctx->scratch;
    if (ctx->scratch_bytes < (size_t)numel * (sizeof *items + 2 * sizeof(int64_t))) {
        return ctx->set_error(ctx, "%s: scratch of %zu bytes is too small", op,
                              ctx->scratch_bytes);
    }
    int64_t *groups = (int64_t *)(items + numel);  /* [n][2]: first index, group id */
    for (int64_t i = 0; i < numel; i++) {
        unique_item it = {0.0, 0, i, 0};
        if (x->dtype == GE_FLOAT32 || x->dtype == GE_FLOAT64) {
            double v = x->dtype == GE_FLOAT32 ? ((const float *)x->data)[i]
                                              : ((const double *)x->data)[i];
            it.nan = isnan(v) ? 1 : 0;
            it.key = it.nan ? 0.0 : v + 0.0;
        } else {
            it.ikey = x->dtype == GE_INT32 ? ((const int32_t *)x->data)[i]
                                           : ((const int64_t *)x->data)[i];
        }
        items[i] = it;
    }
    if (numel > 1) {  /* an empty input has no items (and qsort takes no NULL) */
        qsort(items, (size_t)numel, sizeof *items, unique_cmp);
    }
    int64_t *first = (int64_t *)outputs[1].data, *inverse = (int64_t *)outputs[2].data;
    int64_t *counts = (int64_t *)outputs[3].data;
    int64_t n = 0;
    for (int64_t i = 0; i < numel; i++) {
        if (i == 0 || !same_value(&items[i], &items[i - 1])) {
            groups[2 * n] = items[i].index;  /* sorted by index within a value: the first */
            groups[2 * n + 1] = n;
            counts[n] = 0;
            n++;
        }
        counts[n - 1]++;
        inverse[items[i].index] = n - 1;
    }
    if (!sorted) {
        /* Renumber the groups by first occurrence: rank[old id] = new id. */
        if (n > 1) {
            qsort(groups, (size_t)n, 2 * sizeof(int64_t), first_cmp);
        }
        int64_t *rank = (int64_t *)items;  /* items are no longer needed */
        int64_t *old_counts = rank + numel;
        for (int64_t g = 0; g < n; g++) {
            old_counts[g] = counts[g];
        }
        for (int64_t g = 0; g < n; g++) {
            rank[groups[2 * g + 1]] = g;
            counts[g] = old_counts[groups[2 * g + 1]];
        }
        for (int64_t i = 0; i < numel; i++) {
            inverse[i] = rank[inverse[i]];
        }
    }
    char *y = (char *)outputs[0].data;
    for (int64_t g = 0; g < n; g++) {
        first[g] = groups[2 * g];
        memcpy(y + g * elem, (const char *)x->data + groups[2 * g] * elem, elem);
    }
    ((int64_t *)outputs[4].data)[0] = n;
    return 0;
}

/* -- NonMaxSuppression -------------------------------------------------------------------- */

typedef struct {
    float score;
    int32_t index;
} nms_candidate;

static int nms_cmp(const void *pa, const void *pb) {
    const nms_candidate *a = (const nms_candidate *)pa, *b = (const nms_candidate *)pb;
    if (a->score != b->score) {
        return a->score > b->score ? -1 : 1;  /* higher score first */
    }
    return a->index < b->index ? -1 : a->index > b->index;
}

/* min and max that propagate NaN, as NumPy's minimum and maximum do */
static inline double nan_min(double a, double b) {
    return (a != a || b != b) ? NAN : (a < b ? a : b);
}

static inline double nan_max(double a, double b) {
    return (a != a || b != b) ? NAN : (a > b ? a : b);
}

/* IoU as the reference computes it (float64; degenerate boxes never suppress; a NaN
 * coordinate gives NaN, which suppresses, as `not iou <= threshold` in the reference). */
static inline double nms_iou(const double *a, double area_a, const double *b, double area_b) {
    double h = nan_min(a[2], b[2]) - nan_max(a[0], b[0]);
    double w = nan_min(a[3], b[3]) - nan_max(a[1], b[1]);
    double overlap = (h < 0.0 ? 0.0 : h) * (w < 0.0 ? 0.0 : w);
    double uni = area_a + area_b - overlap;
    if (overlap <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || uni <= 0.0) {
        return 0.0;
    }
    return overlap / uni;
}

/*
 * Kept boxes bucketed by their left edge (x1), so that a candidate is compared only with
 * kept boxes that can overlap it: a box reaching x1 - widest .. x2. Exact, not a
 * heuristic: boxes in other buckets have IoU 0, which suppresses nothing unless the IoU
 * threshold is negative (then, and for non-finite or few boxes, every pair is compared).
 * Pays off when boxes spread out, as with torchvision's batched NMS, which offsets each
 * class's boxes so that classes never overlap.
 */
typedef struct {
    double left, cell, widest;
    int64_t count;
} nms_grid;

static inline int64_t nms_bucket(const nms_grid *grid, double x) {
    double at = (x - grid->left) / grid->cell;
    if (!(at > 0.0)) {
        return 0;
    }
    return at >= (double)grid->count ? grid->count - 1 : (int64_t)at;
}

static int nms_grid_make(nms_grid *grid, const nms_candidate *cand, int64_t m,
                         const double *corners, double iou_limit, int32_t *heads) {
    if (m < 64 || !(iou_limit >= 0.0)) {
        return 0;
    }
    double left = INFINITY, right = -INFINITY, widest = 0.0;
    for (int64_t j = 0; j < m; j++) {
        const double *c = corners + 4 * cand[j].index;
        if (!isfinite(c[1]) || !isfinite(c[3])) {
            return 0;
        }
        left = fmin(left, c[1]);
        right = fmax(right, c[3]);
        widest = fmax(widest, c[3] - c[1]);
    }
    /* Cells at least as wide as the widest box, at most m of them. */
    double cell = fmax(widest, (right - left) / (double)m);
    if (!(cell > 0.0) || !isfinite(cell)) {
        return 0;
    }
    grid->left = left;
    grid->cell = cell;
    grid->widest = widest;
    grid->count = (int64_t)((right - left) / cell) + 1;
    if (grid->count > m + 1) {
        grid->count = m + 1;
    }
    for (int64_t g = 0; g < grid->count; g++) {
        heads[g] = -1;
    }
    return 1;
}

static int nms_scalar(ge_context *ctx, const ge_tensor *t, const char *name, int32_t dtype) {
    if (t->data != NULL && (t->numel != 1 || t->dtype != dtype)) {
        return ctx->set_error(ctx, "NonMaxSuppression: input '%s' must be a scalar of dtype "
                              "%d, got %lld elements of dtype %d", name, dtype,
                              (long long)t->numel, t->dtype);
    }
    return 0;
}

GE_KERNEL(ge_nms_bounded) {
    static const char *op = "NonMaxSuppression";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t center = ge_blob_int_in(&blob, 0, 1);
    int64_t bound = ge_blob_int_in(&blob, 0, INT64_MAX);
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs < 2 || n_inputs > 5 || n_outputs != 2 || check_count(ctx, op, &outputs[1])) {
        return n_inputs < 2 || n_inputs > 5 || n_outputs != 2
            ? ctx->set_error(ctx, "%s: takes 2 to 5 inputs and 2 outputs", op) : -1;
    }
    /* Omitted optional inputs (trailing ones may be absent altogether) read as NULL. */
    static const ge_tensor none = {NULL, GE_INT64, 0, NULL, 0};
    const ge_tensor *opt[3];
    for (int i = 0; i < 3; i++) {
        opt[i] = 2 + i < n_inputs ? &inputs[2 + i] : &none;
    }
    const ge_tensor *boxes = &inputs[0], *scores = &inputs[1];
    if (boxes->dtype != GE_FLOAT32 || scores->dtype != GE_FLOAT32 || boxes->ndim != 3
        || scores->ndim != 3 || boxes->shape[2] != 4 || scores->shape[0] != boxes->shape[0]
        || scores->shape[2] != boxes->shape[1]) {
        return ctx->set_error(ctx, "%s: 'boxes' must be float32 [B, N, 4] and 'scores' "
                              "float32 [B, C, N]", op);
    }
    if (nms_scalar(ctx, opt[0], "max_output_boxes_per_class", GE_INT64)
        || nms_scalar(ctx, opt[1], "iou_threshold", GE_FLOAT32)
        || nms_scalar(ctx, opt[2], "score_threshold", GE_FLOAT32)) {
        return -1;
    }
    int64_t limit = opt[0]->data ? ((const int64_t *)opt[0]->data)[0] : 0;
    double iou_limit = opt[1]->data ? ((const float *)opt[1]->data)[0] : 0.0;
    int has_floor = opt[2]->data != NULL;
    float floor = has_floor ? ((const float *)opt[2]->data)[0] : 0.0f;
    if (limit < 0) {
        return ctx->set_error(ctx, "%s: input 'max_output_boxes_per_class' must be >= 0, "
                              "got %lld", op, (long long)limit);
    }
    int64_t batches = boxes->shape[0], n = boxes->shape[1], classes = scores->shape[1];
    nms_candidate *cand = (nms_candidate *)ctx->scratch;
    /* per box: a candidate, its corners and area, a kept index, a bucket head and link */
    size_t need = (size_t)n * (sizeof *cand + 5 * sizeof(double) + 3 * sizeof(int32_t))
                  + sizeof(int32_t);
    if (ctx->scratch_bytes < need || n > INT32_MAX) {
        return ctx->set_error(ctx, "%s: scratch of %zu bytes is too small for %lld boxes", op,
                              ctx->scratch_bytes, (long long)n);
    }
    double *corners = (double *)(cand + n);  /* [n][4] y1 x1 y2 x2 */
    double *areas = corners + 4 * n;
    int32_t *kept = (int32_t *)(areas + n);
    int32_t *heads = kept + n;  /* n + 1 buckets at most */
    int32_t *links = heads + n + 1;
    int64_t *out = (int64_t *)outputs[0].data;
    int64_t written = 0;
    for (int64_t b = 0; b < batches; b++) {
        const float *bx = (const float *)boxes->data + b * n * 4;
        for (int64_t i = 0; i < n; i++) {
            double c[4];
            const float *p = bx + 4 * i;
            if (center) {
                double x = p[0], y = p[1], w = p[2], h = p[3];
                c[0] = y - h / 2; c[1] = x - w / 2; c[2] = y + h / 2; c[3] = x + w / 2;
            } else {
                c[0] = nan_min(p[0], p[2]); c[1] = nan_min(p[1], p[3]);
                c[2] = nan_max(p[0], p[2]); c[3] = nan_max(p[1], p[3]);
            }
            memcpy(corners + 4 * i, c, sizeof c);
            areas[i] = (c[2] - c[0]) * (c[3] - c[1]);
        }
        for (int64_t k = 0; k < classes; k++) {
            const float *sc = (const float *)scores->data + (b * classes + k) * n;
            int64_t m = 0;
            for (int64_t i = 0; i < n; i++) {
                if (!has_floor || sc[i] > floor) {
                    cand[m].score = sc[i];
                    cand[m].index = (int32_t)i;
                    m++;
                }
            }
            if (m > 1) {
                qsort(cand, (size_t)m, sizeof *cand, nms_cmp);
            }
            nms_grid grid;
            int bucketed = nms_grid_make(&grid, cand, m, corners, iou_limit, heads);
            int64_t n_kept = 0;
            for (int64_t j = 0; j < m && n_kept < limit; j++) {
                int32_t box = cand[j].index;
                const double *cb = corners + 4 * box;
                int suppressed = 0;
                if (bucketed) {
                    /* Only kept boxes whose left edge lies in (x1 - widest, x2) can overlap
                     * this one: their buckets, one more on each side for rounding. */
                    int64_t lo = nms_bucket(&grid, cb[1] - grid.widest) - 1;
                    int64_t hi = nms_bucket(&grid, cb[3]) + 1;
                    lo = lo < 0 ? 0 : lo;
                    hi = hi >= grid.count ? grid.count - 1 : hi;
                    for (int64_t g = lo; g <= hi && !suppressed; g++) {
                        for (int32_t q = heads[g]; q >= 0 && !suppressed; q = links[q]) {
                            int32_t other = kept[q];
                            suppressed = !(nms_iou(cb, areas[box], corners + 4 * other,
                                                   areas[other]) <= iou_limit);
                        }
                    }
                } else {
                    for (int64_t q = 0; q < n_kept && !suppressed; q++) {
                        int32_t other = kept[q];
                        suppressed = !(nms_iou(cb, areas[box], corners + 4 * other,
                                               areas[other]) <= iou_limit);
                    }
                }
                if (suppressed) {
                    continue;
                }
                if (bucketed) {
                    int64_t g = nms_bucket(&grid, cb[1]);
                    links[n_kept] = heads[g];
                    heads[g] = (int32_t)n_kept;
                }
                kept[n_kept++] = box;
                if (written >= bound || 3 * (written + 1) > outputs[0].numel) {
                    return ctx->set_error(ctx, "%s: more than the bound of %lld boxes selected",
                                          op, (long long)bound);
                }
                out[3 * written] = b;
                out[3 * written + 1] = k;
                out[3 * written + 2] = box;
                written++;
            }
        }
    }
    ((int64_t *)outputs[1].data)[0] = written;
    return 0;
}
