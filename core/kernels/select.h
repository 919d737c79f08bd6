/*
 * The select family's kernels (select.c): NonZero, Compress, Unique and
 * NonMaxSuppression, whose output length depends on the data. Their packers are
 * ge_hub/kernels/select.py; the ops they run are the `ge_hub.*Bounded` forms of
 * ge_hub/ops/select_bounded.py, which the segmenter (ge_hub/segments.py) puts at the end
 * of a segment.
 *
 * The ops: ge_hub.NonZeroBounded, ge_hub.CompressBounded, ge_hub.UniqueBounded and
 * ge_hub.NonMaxSuppressionBounded.
 *
 * Data-dependent output sizes (the convention of core/include/ge_hub/kernel.h, "Kernels
 * whose output size depends on data"): each output arrives allocated at its bound shape
 * (the largest the op can produce for these input shapes); the kernel writes each output
 * contiguously, row-major, at its real shape, in the leading elements of that buffer,
 * and writes the real length n of the data-dependent axis into its last output (`count`,
 * int64 [1]). The real shape of an output is its bound shape with that axis set to n.
 */
#ifndef GE_HUB_SELECT_H
#define GE_HUB_SELECT_H

#include "kernels.h"

#define GE_SELECT_KERNELS(X)     \
    X(ge_non_zero_bounded)       \
    X(ge_compress_bounded)       \
    X(ge_unique_bounded)         \
    X(ge_nms_bounded)

GE_SELECT_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_SELECT_H */
