/*
 * The table of built-in kernels: name -> function, read by ge_hub._core.builtin_kernels().
 *
 * Nothing is named here: each family header lists its kernels once (GE_<FAMILY>_KERNELS)
 * and the table expands every list. The name is the symbol a CKernel registration gives;
 * tests/test_kernel_list.py checks that the Python specs name exactly these symbols.
 * Test-only kernels (core/testing/) are not built into the core at all.
 */
#include <stddef.h>

#include "activation.h"
#include "closure.h"
#include "conv.h"
#include "elementwise.h"
#include "index.h"
#include "kernels.h"
#include "nn.h"
#include "norm.h"
#include "pool.h"
#include "quant.h"
#include "reduce.h"
#include "resize.h"
#include "rnn.h"
#include "select.h"
#include "shape.h"

#define GE_TABLE_ENTRY(name) {#name, name},

const ge_builtin_kernel ge_builtin_kernels[] = {
    GE_ACTIVATION_KERNELS(GE_TABLE_ENTRY)
    GE_ELEMENTWISE_KERNELS(GE_TABLE_ENTRY)
    GE_SHAPE_KERNELS(GE_TABLE_ENTRY)
    GE_INDEX_KERNELS(GE_TABLE_ENTRY)
    GE_NN_KERNELS(GE_TABLE_ENTRY)
    GE_CONV_KERNELS(GE_TABLE_ENTRY)
    GE_POOL_KERNELS(GE_TABLE_ENTRY)
    GE_NORM_KERNELS(GE_TABLE_ENTRY)
    GE_RESIZE_KERNELS(GE_TABLE_ENTRY)
    GE_RNN_KERNELS(GE_TABLE_ENTRY)
    GE_REDUCE_KERNELS(GE_TABLE_ENTRY)
    GE_QUANT_KERNELS(GE_TABLE_ENTRY)
    GE_CLOSURE_KERNELS(GE_TABLE_ENTRY)
    GE_SELECT_KERNELS(GE_TABLE_ENTRY)
    {NULL, NULL},
};
