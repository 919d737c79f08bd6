/*
 * The resize family's kernel (resize.c): Resize, nearest and linear, for registry.c. Its
 * packer is ge_hub/kernels/resize.py.
 */
#ifndef GE_HUB_RESIZE_H
#define GE_HUB_RESIZE_H

#include "kernels.h"

/* The resize family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_RESIZE_KERNELS(X) \
    X(ge_nn_resize_f32)

GE_RESIZE_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_RESIZE_H */
