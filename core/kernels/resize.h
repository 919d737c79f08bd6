/*
 * The resize family's kernels: Resize, nearest and linear (resize.c, packed by
 * ge_hub/kernels/resize.py), and GridSample and RoiAlign (resize_sample.c, packed by
 * ge_hub/kernels/resize_sample.py; their blobs are documented there), for registry.c.
 */
#ifndef GE_HUB_RESIZE_H
#define GE_HUB_RESIZE_H

#include "kernels.h"

/* The resize family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_RESIZE_KERNELS(X)                          \
    X(ge_nn_resize_f32)                               \
    /* resize_sample.c */                             \
    X(ge_grid_sample_f32)  /* GridSample */           \
    X(ge_roi_align_f32)  /* RoiAlign */

GE_RESIZE_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_RESIZE_H */
