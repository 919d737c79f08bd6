/*
 * The table of built-in kernels: name -> function, read by ge_hub._core.builtin_kernels().
 *
 * One line per kernel, grouped by family, so that families added in parallel merge
 * cleanly. The name is the symbol a CKernel registration gives.
 */
#include <stddef.h>

#include "kernels.h"

const ge_builtin_kernel ge_builtin_kernels[] = {
    /* copy.c */
    {"ge_copy", ge_copy},

    /* test_kernels.c */
    {"ge_test_add_f32", ge_test_add_f32},
    {"ge_test_matmul_f32", ge_test_matmul_f32},

    {NULL, NULL},
};
