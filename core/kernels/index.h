/*
 * The index family's kernels (index.c: gathers, scatters, Trilu, Range, OneHot, and the
 * fill behind ConstantOfShape), for registry.c. They move elements by size like the shape
 * family and share its helpers (shape.h). Their packers are ge_hub/kernels/index.py.
 */
#ifndef GE_HUB_INDEX_H
#define GE_HUB_INDEX_H

#include "shape.h"

/* The index family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_INDEX_KERNELS(X) \
    X(ge_gather)            \
    X(ge_gather_elements)   \
    X(ge_gather_nd)         \
    X(ge_scatter_elements)  \
    X(ge_scatter_nd)        \
    X(ge_trilu)             \
    X(ge_range)             \
    X(ge_one_hot)           \
    X(ge_fill)

GE_INDEX_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_INDEX_H */
