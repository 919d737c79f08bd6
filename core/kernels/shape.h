/*
 * The data-movement and index kernels (movement.c, index.c), for registry.c, and the
 * helpers they share.
 *
 * These kernels move elements without computing on them, so they work by element size
 * (1, 2, 4 or 8 bytes) rather than by dtype. Their packers (ge_hub/kernels/movement.py,
 * ge_hub/kernels/index.py) resolve every shape, stride and axis at compile time into a
 * blob of int64 values; the readers below walk such a blob and notice a short one, so
 * that a malformed blob becomes an error message, never a wild read.
 */
#ifndef GE_HUB_MOVEMENT_H
#define GE_HUB_MOVEMENT_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* The most dims a packed strided walk may have after collapsing (Tile doubles the rank). */
#define GE_MV_MAX_DIMS 16

/* Bytes below which a copy is not worth splitting over the thread pool. */
#define GE_MV_PARALLEL_BYTES (256 * 1024)

/* Reads a blob's int64 values in order; `ok` drops to 0 on a read past the end. */
typedef struct {
    const unsigned char *next;
    size_t left;
    int ok;
} ge_blob_reader;

static inline ge_blob_reader ge_blob_open(const void *attrs, size_t size) {
    ge_blob_reader reader = {attrs, size, attrs != NULL || size == 0};
    return reader;
}

static inline int64_t ge_blob_int(ge_blob_reader *reader) {
    int64_t value = 0;
    if (reader->left < sizeof value) {
        reader->ok = 0;
        return 0;
    }
    memcpy(&value, reader->next, sizeof value);  /* the blob promises no alignment */
    reader->next += sizeof value;
    reader->left -= sizeof value;
    return value;
}

/* Reads `count` values into `out` (room for `capacity`); fails on a count out of range. */
static inline void ge_blob_ints(ge_blob_reader *reader, int64_t *out, int64_t count,
                                int64_t capacity) {
    if (count < 0 || count > capacity) {
        reader->ok = 0;
        return;
    }
    for (int64_t i = 0; i < count; i++) {
        out[i] = ge_blob_int(reader);
    }
}

/* Whether the blob was read exactly to its end without a short read. */
static inline int ge_blob_done(const ge_blob_reader *reader) {
    return reader->ok && reader->left == 0;
}

static inline int ge_mv_elem_ok(int64_t elem) {
    return elem == 1 || elem == 2 || elem == 4 || elem == 8;
}

/* Checks that a tensor is present with `numel` elements of `elem` bytes; reports and
 * returns -1 otherwise. `role` is "input" or "output". */
int ge_mv_check(ge_context *ctx, const char *op, const char *role, int index,
                const ge_tensor *tensor, int64_t numel, int64_t elem);

/* dst[0..n) = the one element at `value`, for any element size. */
void ge_mv_fill(void *dst, const void *value, int64_t n, int64_t elem);

/* memcpy, split over the thread pool when large; no-op when dst == src. */
void ge_mv_copy(ge_context *ctx, void *dst, const void *src, size_t bytes);

/* -- movement.c ------------------------------------------------------------------------ */
GE_KERNEL(ge_strided_copy);
GE_KERNEL(ge_concat);
GE_KERNEL(ge_split);
GE_KERNEL(ge_pad);
GE_KERNEL(ge_fill);

/* -- index.c --------------------------------------------------------------------------- */
GE_KERNEL(ge_gather);
GE_KERNEL(ge_gather_elements);
GE_KERNEL(ge_gather_nd);
GE_KERNEL(ge_scatter_elements);
GE_KERNEL(ge_scatter_nd);
GE_KERNEL(ge_trilu);
GE_KERNEL(ge_range);
GE_KERNEL(ge_one_hot);

#endif /* GE_HUB_MOVEMENT_H */
