/*
 * The shape family's kernels (shape.c: the data movement behind Transpose, Slice, Expand,
 * Tile, DepthToSpace, SpaceToDepth, Concat, Split, Pad), for registry.c, and the helpers
 * they share with the index family (index.h, index.c).
 *
 * These kernels move elements without computing on them, so they work by element size
 * (1, 2, 4 or 8 bytes) rather than by dtype. Their packers (ge_hub/kernels/shape.py,
 * ge_hub/kernels/index.py) resolve every shape, stride and axis at compile time into a
 * blob of int64 values, read with ge_hub/blob.h, so that a malformed blob becomes an
 * error message, never a wild read.
 */
#ifndef GE_HUB_SHAPE_H
#define GE_HUB_SHAPE_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* The most dims a packed strided walk may have after collapsing (Tile doubles the rank). */
#define GE_MV_MAX_DIMS 16

/* Bytes below which a copy is not worth splitting over the thread pool. */
#define GE_MV_PARALLEL_BYTES (256 * 1024)

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

/* The shape family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_SHAPE_KERNELS(X) \
    X(ge_strided_copy)      \
    X(ge_concat)            \
    X(ge_split)             \
    X(ge_pad)

GE_SHAPE_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_SHAPE_H */
