/*
 * PRelu: x where x >= 0, slope * x where x < 0, with the slope broadcast against x.
 *
 * An activation by its op's family (ge_hub/ops/activation.py), a broadcast binary op by
 * its machinery: the blob is elementwise.h's broadcast layout (n_operands, ndim, shape,
 * strides; packed by ge_hub/kernels/activation.py through the elementwise packer), walked
 * by ge_ew_binary_kernel. Integer products wrap, as NumPy's do. Output 0 may share memory
 * with either input of its dtype and size: each element is read before it is written.
 */
#include <stdint.h>

#include "activation.h"
#include "elementwise.h"

/* x * y in the unsigned type U, so an overflowing product wraps instead of being UB. */
#define WRAP_MUL(T, U, x, y) ((T)((U)(x) * (U)(y)))

GE_EW_BINARY_LOOPS(prelu_f32, float, float, float, x < 0 ? y * x : x)
GE_EW_BINARY_LOOPS(prelu_i32, int32_t, int32_t, int32_t,
                   x < 0 ? WRAP_MUL(int32_t, uint32_t, y, x) : x)
GE_EW_BINARY_LOOPS(prelu_i64, int64_t, int64_t, int64_t,
                   x < 0 ? WRAP_MUL(int64_t, uint64_t, y, x) : x)

#define PRELU_KERNEL(SUFFIX, DTYPE)                                                         \
    static const ge_ew_binary prelu_##SUFFIX##_op = {                                       \
        "PRelu", DTYPE, DTYPE, DTYPE, GE_EW_GRAIN_CHEAP, prelu_##SUFFIX##_loops,            \
        "a row failed"};                                                                    \
    GE_KERNEL(ge_prelu_##SUFFIX) {                                                          \
        return ge_ew_binary_kernel(ctx, "PRelu", &prelu_##SUFFIX##_op, inputs, n_inputs,    \
                                   outputs, n_outputs, attrs, attrs_size);                  \
    }

PRELU_KERNEL(f32, GE_FLOAT32)
PRELU_KERNEL(i32, GE_INT32)
PRELU_KERNEL(i64, GE_INT64)
