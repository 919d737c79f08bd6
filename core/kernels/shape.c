/*
 * Data-movement kernels: one strided copy behind Transpose, Slice, Expand, Tile,
 * DepthToSpace and SpaceToDepth; block copies for Concat and Split; and Pad. Every one
 * works by element size, so it serves every dtype.
 *
 * Blob layouts (int64 values; written by ge_hub/kernels/shape.py):
 *
 *   ge_strided_copy   elem, ndim, base, shape[ndim], stride[ndim]
 *       out (contiguous, shape `shape`) at multi-index i is
 *       in[base + sum_k i_k * stride_k]; strides are in elements and may be 0 (a
 *       broadcast or repeat) or negative (a reversed slice). Dims are collapsed at pack
 *       time, so ndim is small and the innermost dim is as long as it can be.
 *   ge_concat / ge_split   outer, parts, part_bytes[parts]
 *       the joined tensor is [outer, sum(part_bytes)] bytes; part p is
 *       [outer, part_bytes[p]] bytes, at byte column sum(part_bytes[:p]).
 *   ge_pad   elem, ndim, then per dim: out_n, in_stride, lo, mid_start, mid_len, hi;
 *            then per dim its lo map (lo values) and hi map (hi values)
 *       output coordinate k of a dim reads input coordinate map(k): lomap[k] for
 *       k < lo, mid_start + (k - lo) for the next mid_len, then himap; -1 means the
 *       constant (input 2 when present, else zero).
 */
#include <stdint.h>
#include <string.h>

#include "shape.h"

/* Elements per parallel chunk below which a chunk costs more than it saves. */
#define GRAIN_ELEMS 32768

/* -- shared helpers ---------------------------------------------------------------------- */

int ge_mv_check(ge_context *ctx, const char *op, const char *role, int index,
                const ge_tensor *tensor, int64_t numel, int64_t elem) {
    if (tensor->data == NULL) {
        return ctx->set_error(ctx, "%s: %s %d is omitted", op, role, index);
    }
    if ((int64_t)ge_dtype_itemsize(tensor->dtype) != elem) {
        return ctx->set_error(ctx, "%s: %s %d has %zu-byte elements, the plan says %lld", op,
                              role, index, ge_dtype_itemsize(tensor->dtype), (long long)elem);
    }
    if (tensor->numel != numel) {
        return ctx->set_error(ctx, "%s: %s %d has %lld elements, the plan says %lld", op, role,
                              index, (long long)tensor->numel, (long long)numel);
    }
    return 0;
}

#define FILL_AS(T)                                           \
    do {                                                     \
        T v;                                                 \
        memcpy(&v, value, sizeof v);                         \
        T *d = (T *)dst;                                     \
        for (int64_t k = 0; k < n; k++) d[k] = v;            \
    } while (0)

void ge_mv_fill(void *dst, const void *value, int64_t n, int64_t elem) {
    switch (elem) {
    case 1: memset(dst, *(const unsigned char *)value, (size_t)n); break;
    case 2: FILL_AS(uint16_t); break;
    case 4: FILL_AS(uint32_t); break;
    default: FILL_AS(uint64_t); break;
    }
}

typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes;
} copy_args;

#define COPY_CHUNK ((int64_t)64 * 1024)

static void copy_range(void *arg, int64_t begin, int64_t end) {
    const copy_args *a = arg;
    size_t from = (size_t)(begin * COPY_CHUNK);
    size_t to = (size_t)(end * COPY_CHUNK);
    if (to > a->bytes) {
        to = a->bytes;
    }
    memcpy(a->dst + from, a->src + from, to - from);
}

void ge_mv_copy(ge_context *ctx, void *dst, const void *src, size_t bytes) {
    if (dst == src || bytes == 0) {
        return;
    }
    if (bytes < GE_MV_PARALLEL_BYTES) {
        memcpy(dst, src, bytes);
        return;
    }
    copy_args args = {dst, src, bytes};
    int64_t chunks = (int64_t)((bytes + COPY_CHUNK - 1) / COPY_CHUNK);
    ctx->parallel_for(ctx, chunks, GE_MV_PARALLEL_BYTES / COPY_CHUNK, copy_range, &args);
}

/* -- ge_strided_copy --------------------------------------------------------------------- */

typedef struct {
    const unsigned char *in;
    unsigned char *out;
    int64_t elem;
    int ndim;
    int64_t base;
    int64_t shape[GE_MV_MAX_DIMS];
    int64_t stride[GE_MV_MAX_DIMS];
    /* the tiled (transpose) path: the dim whose input stride is 1, the tile edge, and
     * the output's own strides */
    int tile_dim;
    int64_t tile;
    int64_t tile_blocks;
    int64_t out_stride[GE_MV_MAX_DIMS];
} strided_args;

#define GATHER_ROW_AS(T)                                             \
    do {                                                             \
        T *o = (T *)out;                                             \
        const T *i = (const T *)in;                                  \
        if (stride == 0) {                                           \
            T v = i[0];                                              \
            for (int64_t k = 0; k < n; k++) o[k] = v;                \
        } else {                                                     \
            for (int64_t k = 0; k < n; k++) o[k] = i[k * stride];    \
        }                                                            \
    } while (0)

/* out[0..n) = in[k * stride]: a memcpy when the run is contiguous. */
static inline void copy_row(unsigned char *out, const unsigned char *in, int64_t n,
                            int64_t stride, int64_t elem) {
    if (stride == 1) {
        memcpy(out, in, (size_t)(n * elem));
        return;
    }
    switch (elem) {
    case 1: GATHER_ROW_AS(uint8_t); break;
    case 2: GATHER_ROW_AS(uint16_t); break;
    case 4: GATHER_ROW_AS(uint32_t); break;
    default: GATHER_ROW_AS(uint64_t); break;
    }
}

/* Rows [begin, end) of the output, a row being the innermost dim. */
static void strided_rows(void *arg, int64_t begin, int64_t end) {
    const strided_args *a = arg;
    int last = a->ndim - 1;
    int64_t inner = a->shape[last];
    int64_t idx[GE_MV_MAX_DIMS];
    int64_t offset = a->base;
    int64_t rest = begin;
    for (int d = last - 1; d >= 0; d--) {
        idx[d] = rest % a->shape[d];
        rest /= a->shape[d];
        offset += idx[d] * a->stride[d];
    }
    unsigned char *out = a->out + begin * inner * a->elem;
    for (int64_t row = begin; row < end; row++) {
        copy_row(out, a->in + offset * a->elem, inner, a->stride[last], a->elem);
        out += inner * a->elem;
        for (int d = last - 1; d >= 0; d--) {  /* odometer: step to the next row */
            offset += a->stride[d];
            if (++idx[d] < a->shape[d]) {
                break;
            }
            offset -= a->stride[d] * a->shape[d];
            idx[d] = 0;
        }
    }
}

/* The tile edge for an element type: one cache line of contiguous reads, at least 8. */
#define TILE_EDGE(T) (64 / sizeof(T) < 8 ? 8 : 64 / sizeof(T))

/* One tiled item for element type T: output coordinates [j0, j1) of the tile dim by
 * [l0, l_end) of the last dim. Full tiles have a constant edge, so the compiler unrolls
 * them. */
#define DEFINE_TILE_BLOCK(NAME, T)                                                    \
    static void NAME(const strided_args *a, int64_t in_base, int64_t out_base,        \
                     int64_t j0, int64_t j1, int64_t l0, int64_t l_end) {             \
        enum { EDGE = TILE_EDGE(T) };                                                 \
        int64_t out_j = a->out_stride[a->tile_dim], in_l = a->stride[a->ndim - 1];    \
        T *out = (T *)a->out + out_base;                                              \
        const T *in = (const T *)a->in + in_base;                                     \
        if (j1 - j0 == EDGE) {                                                        \
            for (; l0 + EDGE <= l_end; l0 += EDGE) {                                  \
                for (int64_t j = j0; j < j0 + EDGE; j++) {                            \
                    T *o = out + j * out_j + l0;                                      \
                    const T *i = in + j + l0 * in_l;                                  \
                    for (int64_t l = 0; l < EDGE; l++) o[l] = i[l * in_l];            \
                }                                                                     \
            }                                                                         \
        }                                                                             \
        for (; l0 < l_end; l0 += EDGE) {                                              \
            int64_t l1 = l0 + EDGE < l_end ? l0 + EDGE : l_end;                       \
            for (int64_t j = j0; j < j1; j++) {                                       \
                T *o = out + j * out_j;                                               \
                const T *i = in + j;                                                  \
                for (int64_t l = l0; l < l1; l++) o[l] = i[l * in_l];                 \
            }                                                                         \
        }                                                                             \
    }

DEFINE_TILE_BLOCK(tile_block_1, uint8_t)
DEFINE_TILE_BLOCK(tile_block_2, uint16_t)
DEFINE_TILE_BLOCK(tile_block_4, uint32_t)
DEFINE_TILE_BLOCK(tile_block_8, uint64_t)

static int64_t tile_edge(int64_t elem) {
    switch (elem) {
    case 1: return TILE_EDGE(uint8_t);
    case 2: return TILE_EDGE(uint16_t);
    case 4: return TILE_EDGE(uint32_t);
    default: return TILE_EDGE(uint64_t);
    }
}

/* Columns of the last dim per tiled item: a multiple of every tile edge, so that items
 * split the last dim of a large transpose for the thread pool. */
#define TILE_SPAN 1024

/* Items [begin, end) of the tiled path: an item is one block of `tile` coordinates of
 * the tile dim by TILE_SPAN of the last, for one index of the remaining outer dims.
 * Reading in tile x tile squares keeps both the strided reads and the contiguous
 * writes in cache, which a row-by-row gather does not when the read stride is large. */
static void tiled_items(void *arg, int64_t begin, int64_t end) {
    const strided_args *a = arg;
    int last = a->ndim - 1;
    int64_t n_j = a->shape[a->tile_dim], n_l = a->shape[last];
    int64_t spans = (n_l + TILE_SPAN - 1) / TILE_SPAN;
    for (int64_t item = begin; item < end; item++) {
        int64_t l0 = item % spans * TILE_SPAN;
        int64_t l_end = l0 + TILE_SPAN < n_l ? l0 + TILE_SPAN : n_l;
        int64_t block = item / spans % a->tile_blocks;
        int64_t rest = item / spans / a->tile_blocks;
        int64_t in_base = a->base, out_base = 0;
        for (int d = last - 1; d >= 0; d--) {
            if (d == a->tile_dim) {
                continue;
            }
            int64_t i = rest % a->shape[d];
            rest /= a->shape[d];
            in_base += i * a->stride[d];
            out_base += i * a->out_stride[d];
        }
        int64_t j0 = block * a->tile;
        int64_t j1 = j0 + a->tile < n_j ? j0 + a->tile : n_j;
        switch (a->elem) {
        case 1: tile_block_1(a, in_base, out_base, j0, j1, l0, l_end); break;
        case 2: tile_block_2(a, in_base, out_base, j0, j1, l0, l_end); break;
        case 4: tile_block_4(a, in_base, out_base, j0, j1, l0, l_end); break;
        default: tile_block_8(a, in_base, out_base, j0, j1, l0, l_end); break;
        }
    }
}

/* The dim (not the last) that reads contiguous input, when the last dim does not:
 * the shape of a transpose, worth the tiled path. -1 when there is none. */
static int find_tile_dim(const strided_args *a) {
    int last = a->ndim - 1;
    int64_t s = a->stride[last];
    if (a->ndim < 2 || s == 1 || s == 0 || s == -1 || a->shape[last] < 4) {
        return -1;
    }
    for (int d = last - 1; d >= 0; d--) {
        if (a->stride[d] == 1 && a->shape[d] >= 4) {
            return d;
        }
    }
    return -1;
}

/* Writes the `numel` elements of the walk `a` describes, on the thread pool. */
static void strided_walk(ge_context *ctx, strided_args *a, int64_t numel) {
    a->tile_dim = find_tile_dim(a);
    if (a->tile_dim >= 0) {
        int64_t step = 1;
        for (int d = a->ndim - 1; d >= 0; d--) {
            a->out_stride[d] = step;
            step *= a->shape[d];
        }
        a->tile = tile_edge(a->elem);
        a->tile_blocks = (a->shape[a->tile_dim] + a->tile - 1) / a->tile;
        int64_t n_l = a->shape[a->ndim - 1];
        int64_t spans = (n_l + TILE_SPAN - 1) / TILE_SPAN;
        int64_t items = numel / a->shape[a->tile_dim] / n_l * a->tile_blocks * spans;
        int64_t per_item = a->tile * (n_l < TILE_SPAN ? n_l : TILE_SPAN);
        int64_t grain = GRAIN_ELEMS / per_item > 1 ? GRAIN_ELEMS / per_item : 1;
        ctx->parallel_for(ctx, items, grain, tiled_items, a);
        return;
    }
    int64_t inner = a->shape[a->ndim - 1];
    int64_t rows = numel / inner;
    int64_t grain = GRAIN_ELEMS / inner > 1 ? GRAIN_ELEMS / inner : 1;
    ctx->parallel_for(ctx, rows, grain, strided_rows, a);
}

GE_KERNEL(ge_strided_copy) {
    static const char *op = "strided copy";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    strided_args a;
    a.elem = ge_blob_int(&blob);
    int64_t ndim = ge_blob_int(&blob);
    a.base = ge_blob_int(&blob);
    ge_blob_ints_capped(&blob, a.shape, ndim, GE_MV_MAX_DIMS);
    ge_blob_ints_capped(&blob, a.stride, ndim, GE_MV_MAX_DIMS);
    if (!ge_blob_done(&blob) || ndim < 1 || !ge_mv_elem_ok(a.elem)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs < 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes at least 1 input and 1 output, got %d and %d",
                              op, n_inputs, n_outputs);
    }
    a.ndim = (int)ndim;
    int64_t numel = 1;
    for (int d = 0; d < a.ndim; d++) {
        /* checked sizes (ge_hub/blob.h): a blob from a file must not wrap one around */
        numel = ge_size_mul(numel, a.shape[d]);
        if (a.shape[d] < 0 || numel < 0 || a.stride[d] < -GE_MAX_SIZE
            || a.stride[d] > GE_MAX_SIZE) {
            return ctx->set_error(ctx, "%s: malformed attribute blob (dim %d: %lld, stride "
                                  "%lld)", op, d, (long long)a.shape[d],
                                  (long long)a.stride[d]);
        }
    }
    if (ge_mv_check(ctx, op, "output", 0, &outputs[0], numel, a.elem)) {
        return -1;
    }
    if (numel == 0) {
        return 0;
    }
    /* Every read must land inside the input, whatever the blob says. Each span is at
     * most 2^40 elements and the base too, so their sums cannot overflow. */
    if (a.base < 0 || a.base > GE_MAX_SIZE) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (base %lld)", op,
                              (long long)a.base);
    }
    int64_t low = a.base, high = a.base;
    for (int d = 0; d < a.ndim; d++) {
        int64_t span = ge_size_mul(a.shape[d] - 1, a.stride[d] < 0 ? -a.stride[d]
                                                                   : a.stride[d]);
        if (span < 0) {
            return ctx->set_error(ctx, "%s: malformed attribute blob (dim %d spans past %lld "
                                  "elements)", op, d, (long long)GE_MAX_SIZE);
        }
        if (a.stride[d] < 0) {
            low -= span;
        } else {
            high += span;
        }
    }
    if (ge_mv_check(ctx, op, "input", 0, &inputs[0], inputs[0].numel, a.elem)) {
        return -1;
    }
    if (low < 0 || high >= inputs[0].numel) {
        return ctx->set_error(ctx, "%s: the plan reads elements %lld..%lld of input 0, which "
                              "has %lld", op, (long long)low, (long long)high,
                              (long long)inputs[0].numel);
    }
    a.in = inputs[0].data;
    a.out = outputs[0].data;

    /* An outermost repeat (Tile's leading repeats, Expand's leading broadcast) makes the
     * output one slab over and over: walk the slab once, then double it with long
     * copies instead of walking every repeat. */
    int64_t repeats = 1;
    if (a.ndim > 1 && a.stride[0] == 0) {
        repeats = a.shape[0];
        memmove(a.shape, a.shape + 1, (size_t)(a.ndim - 1) * sizeof a.shape[0]);
        memmove(a.stride, a.stride + 1, (size_t)(a.ndim - 1) * sizeof a.stride[0]);
        a.ndim--;
        numel /= repeats;
    }
    strided_walk(ctx, &a, numel);
    size_t slab = (size_t)(numel * a.elem);
    for (int64_t done = 1; done < repeats;) {
        int64_t copies = done < repeats - done ? done : repeats - done;
        ge_mv_copy(ctx, a.out + (size_t)done * slab, a.out, (size_t)copies * slab);
        done += copies;
    }
    return 0;
}

/* -- ge_concat, ge_split ----------------------------------------------------------------- */

#define MAX_PARTS 4096

typedef struct {
    int64_t outer;
    int64_t parts;
    int64_t row_bytes;
    const int64_t *part_bytes;
    const int64_t *column;
    const ge_tensor *pieces;   /* the inputs of Concat, the outputs of Split */
    unsigned char *whole;      /* Concat's output, Split's input */
    int joining;               /* 1: Concat, 0: Split */
} blocks_args;

static void block_rows(void *arg, int64_t begin, int64_t end) {
    const blocks_args *a = arg;
    for (int64_t row = begin; row < end; row++) {
        unsigned char *whole = a->whole + row * a->row_bytes;
        for (int64_t p = 0; p < a->parts; p++) {
            unsigned char *piece = (unsigned char *)a->pieces[p].data + row * a->part_bytes[p];
            if (a->joining) {
                memcpy(whole + a->column[p], piece, (size_t)a->part_bytes[p]);
            } else {
                memcpy(piece, whole + a->column[p], (size_t)a->part_bytes[p]);
            }
        }
    }
}

/* Concat (joining = 1) and Split (joining = 0): the same block copies, either way. */
static int join_or_split(ge_context *ctx, const char *op, int joining,
                         const ge_tensor *pieces, int32_t n_pieces, const ge_tensor *whole,
                         const void *attrs, size_t attrs_size) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t outer = ge_blob_int(&blob);
    int64_t parts = ge_blob_int(&blob);
    if (!blob.ok || outer < 0 || parts < 1 || parts > MAX_PARTS) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    int64_t part_bytes[MAX_PARTS], column[MAX_PARTS];
    ge_blob_ints_capped(&blob, part_bytes, parts, MAX_PARTS);
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_pieces != parts) {
        return ctx->set_error(ctx, "%s: the plan has %lld parts, the step %d", op,
                              (long long)parts, n_pieces);
    }
    const char *role = joining ? "input" : "output";
    int64_t row_bytes = 0;
    for (int64_t p = 0; p < parts; p++) {
        const ge_tensor *piece = &pieces[p];
        if (piece->data == NULL || part_bytes[p] < 0
            || (int64_t)ge_tensor_nbytes(piece) != outer * part_bytes[p]) {
            return ctx->set_error(ctx, "%s: %s %lld has %zu bytes, the plan says %lld x %lld",
                                  op, role, (long long)p, ge_tensor_nbytes(piece),
                                  (long long)outer, (long long)part_bytes[p]);
        }
        column[p] = row_bytes;
        row_bytes += part_bytes[p];
    }
    if (whole->data == NULL || (int64_t)ge_tensor_nbytes(whole) != outer * row_bytes) {
        return ctx->set_error(ctx, "%s: %s 0 has %zu bytes, the plan says %lld x %lld", op,
                              joining ? "output" : "input", ge_tensor_nbytes(whole),
                              (long long)outer, (long long)row_bytes);
    }
    if (outer == 1) {  /* one block per part: let each big copy use the pool itself */
        for (int64_t p = 0; p < parts; p++) {
            unsigned char *at = (unsigned char *)whole->data + column[p];
            if (joining) {
                ge_mv_copy(ctx, at, pieces[p].data, (size_t)part_bytes[p]);
            } else {
                ge_mv_copy(ctx, pieces[p].data, at, (size_t)part_bytes[p]);
            }
        }
        return 0;
    }
    blocks_args a = {outer, parts, row_bytes, part_bytes, column, pieces, whole->data,
                     joining};
    int64_t grain = row_bytes > 0 ? GE_MV_PARALLEL_BYTES / row_bytes : outer;
    ctx->parallel_for(ctx, outer, grain > 1 ? grain : 1, block_rows, &a);
    return 0;
}

GE_KERNEL(ge_concat) {
    if (n_outputs != 1) {
        return ctx->set_error(ctx, "Concat: takes 1 output, got %d", n_outputs);
    }
    return join_or_split(ctx, "Concat", 1, inputs, n_inputs, &outputs[0], attrs, attrs_size);
}

GE_KERNEL(ge_split) {
    if (n_inputs < 1) {
        return ctx->set_error(ctx, "Split: takes at least 1 input, got %d", n_inputs);
    }
    return join_or_split(ctx, "Split", 0, outputs, n_outputs, &inputs[0], attrs, attrs_size);
}

/* -- ge_pad ------------------------------------------------------------------------------ */

typedef struct {
    int64_t out_n, in_stride, lo, mid_start, mid_len, hi;
    const unsigned char *lo_map, *hi_map;  /* int64 values in the blob, read in place */
} pad_dim;

typedef struct {
    const unsigned char *in;
    unsigned char *out;
    int64_t elem;
    int ndim;
    pad_dim dims[GE_MV_MAX_DIMS];
    unsigned char value[8];  /* the constant, elem bytes */
} pad_args;

/* Input coordinate of output coordinate k along one dim; -1: the constant. */
static inline int64_t pad_map(const pad_dim *d, int64_t k) {
    if (k < d->lo) {
        int64_t m;
        memcpy(&m, d->lo_map + k * (int64_t)sizeof m, sizeof m);
        return m;
    }
    k -= d->lo;
    if (k < d->mid_len) {
        return d->mid_start + k;
    }
    int64_t m;
    memcpy(&m, d->hi_map + (k - d->mid_len) * (int64_t)sizeof m, sizeof m);
    return m;
}

#define PAD_EDGE_AS(T)                                                           \
    do {                                                                         \
        T v, *o = (T *)out;                                                      \
        const T *i = (const T *)in;                                              \
        memcpy(&v, a->value, sizeof v);                                          \
        for (int64_t k = from; k < to; k++) {                                    \
            int64_t m = pad_map(last, k);                                        \
            o[k] = m < 0 ? v : i[m];                                             \
        }                                                                        \
    } while (0)

/* Output coordinates [from, to) of the last dim that are padding, read through the map. */
static void pad_edges(const pad_args *a, const pad_dim *last, unsigned char *out,
                      const unsigned char *in, int64_t from, int64_t to) {
    switch (a->elem) {
    case 1: PAD_EDGE_AS(uint8_t); break;
    case 2: PAD_EDGE_AS(uint16_t); break;
    case 4: PAD_EDGE_AS(uint32_t); break;
    default: PAD_EDGE_AS(uint64_t); break;
    }
}

static void pad_rows(void *arg, int64_t begin, int64_t end) {
    const pad_args *a = arg;
    int lastd = a->ndim - 1;
    const pad_dim *last = &a->dims[lastd];
    int64_t n = last->out_n;
    int64_t idx[GE_MV_MAX_DIMS];
    int64_t rest = begin;
    for (int d = lastd - 1; d >= 0; d--) {
        idx[d] = rest % a->dims[d].out_n;
        rest /= a->dims[d].out_n;
    }
    for (int64_t row = begin; row < end; row++) {
        unsigned char *out = a->out + row * n * a->elem;
        int64_t offset = 0;
        int filled = 0;
        for (int d = 0; d < lastd; d++) {
            int64_t m = pad_map(&a->dims[d], idx[d]);
            if (m < 0) {
                filled = 1;
                break;
            }
            offset += m * a->dims[d].in_stride;
        }
        if (filled) {
            ge_mv_fill(out, a->value, n, a->elem);
        } else {
            const unsigned char *in = a->in + offset * a->elem;
            pad_edges(a, last, out, in, 0, last->lo);
            memcpy(out + last->lo * a->elem, in + last->mid_start * a->elem,
                   (size_t)(last->mid_len * a->elem));
            pad_edges(a, last, out, in, last->lo + last->mid_len, n);
        }
        for (int d = lastd - 1; d >= 0; d--) {
            if (++idx[d] < a->dims[d].out_n) {
                break;
            }
            idx[d] = 0;
        }
    }
}

GE_KERNEL(ge_pad) {
    static const char *op = "Pad";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    pad_args a;
    memset(a.value, 0, sizeof a.value);
    a.elem = ge_blob_int(&blob);
    int64_t ndim = ge_blob_int(&blob);
    if (!blob.ok || !ge_mv_elem_ok(a.elem) || ndim < 1 || ndim > GE_MV_MAX_DIMS) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    a.ndim = (int)ndim;
    int64_t numel = 1;
    for (int d = 0; d < a.ndim; d++) {
        pad_dim *dim = &a.dims[d];
        dim->out_n = ge_blob_int(&blob);
        dim->in_stride = ge_blob_int(&blob);
        dim->lo = ge_blob_int(&blob);
        dim->mid_start = ge_blob_int(&blob);
        dim->mid_len = ge_blob_int(&blob);
        dim->hi = ge_blob_int(&blob);
        /* checked sizes (ge_hub/blob.h): a blob from a file must not wrap one around */
        if (dim->out_n < 0 || ge_size_add(dim->mid_start, dim->mid_len) < 0
            || ge_size_add(ge_size_add(dim->lo, dim->mid_len), dim->hi) != dim->out_n
            || ge_size_mul(dim->in_stride, 1) < 0) {
            blob.ok = 0;
        }
        numel = ge_size_mul(numel, dim->out_n);
    }
    if (!blob.ok || numel < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    /* The maps stay in the blob; check that each one is there and stays in the input. */
    int64_t high = 0;
    int reads = 1;  /* whether any output element reads the input: no dim is all constant */
    for (int d = 0; d < a.ndim; d++) {
        pad_dim *dim = &a.dims[d];
        int64_t top = dim->mid_len > 0 ? dim->mid_start + dim->mid_len - 1 : -1;
        const unsigned char *maps = ge_blob_take(&blob, dim->lo + dim->hi);
        if (maps == NULL) {
            return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op,
                                  attrs_size);
        }
        dim->lo_map = maps;
        dim->hi_map = maps + (size_t)dim->lo * GE_BLOB_SLOT;
        for (int64_t k = 0; k < dim->lo + dim->hi; k++) {
            int64_t m = ge_blob_load_int(maps, k);
            if (m < -1 || m > GE_MAX_SIZE) {
                return ctx->set_error(ctx, "%s: malformed attribute blob (map value %lld)",
                                      op, (long long)m);
            }
            top = m > top ? m : top;
        }
        reads = reads && top >= 0;
        high = ge_size_add(high, ge_size_mul(top >= 0 ? top : 0, dim->in_stride));
    }
    if (high < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (its reach passes %lld "
                              "elements)", op, (long long)GE_MAX_SIZE);
    }
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", op, attrs_size);
    }
    if (n_inputs < 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: takes at least 1 input and 1 output, got %d and %d",
                              op, n_inputs, n_outputs);
    }
    if (ge_mv_check(ctx, op, "output", 0, &outputs[0], numel, a.elem)
        || ge_mv_check(ctx, op, "input", 0, &inputs[0], inputs[0].numel, a.elem)) {
        return -1;
    }
    if (numel == 0) {
        return 0;
    }
    if (n_inputs > 2 && inputs[2].data != NULL) {
        if (inputs[2].numel != 1 || (int64_t)ge_dtype_itemsize(inputs[2].dtype) != a.elem) {
            return ctx->set_error(ctx, "%s: input 'constant_value' must be one element of "
                                  "%lld bytes, got %lld of %zu", op, (long long)a.elem,
                                  (long long)inputs[2].numel,
                                  ge_dtype_itemsize(inputs[2].dtype));
        }
        memcpy(a.value, inputs[2].data, (size_t)a.elem);
    }
    /* A read happens only where some output is not the constant; then it must fit. */
    if (reads && high >= inputs[0].numel) {
        return ctx->set_error(ctx, "%s: the plan reads element %lld of input 0, which has "
                              "%lld", op, (long long)high, (long long)inputs[0].numel);
    }
    a.in = inputs[0].data;
    a.out = outputs[0].data;
    int64_t n = a.dims[a.ndim - 1].out_n;
    int64_t rows = numel / n;
    int64_t grain = GRAIN_ELEMS / n > 1 ? GRAIN_ELEMS / n : 1;
    ctx->parallel_for(ctx, rows, grain, pad_rows, &a);
    return 0;
}
