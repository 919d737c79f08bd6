/*
 * The closure family (closure.c): a Closure step (If, Loop or Scan) runs as one step
 * whose bodies are compiled sub-plans, run re-entrantly by the executor inside the same C
 * run. The packer is ge_hub/kernels/closure.py.
 *
 * A control step's attribute blob starts with a header that only the binding writes
 * (core/src/module.c, from the Executor objects of the step's sub-plans): a magic
 * number, the count n, then n ge_plan pointers; the packer's blob follows. The binding
 * writes the header for every step whose kernel is ge_control and refuses sub-plans for
 * any other kernel, so a blob from a file never supplies a pointer.
 */
#ifndef GE_HUB_CLOSURE_H
#define GE_HUB_CLOSURE_H

#include "kernels.h"

#define GE_CLOSURE_KERNELS(X) \
    X(ge_control)

GE_CLOSURE_KERNELS(GE_DECLARE_KERNEL)

#define GE_CONTROL_MAGIC 0x67652d63746c3031ULL /* "ge-ctl01" */

/* Bytes of the header in front of a control step's blob with n sub-plans. */
static inline size_t ge_control_header_bytes(int64_t n) {
    return 16 + (size_t)n * sizeof(void *);
}

#endif /* GE_HUB_CLOSURE_H */
