/*
 * ge_copy: output 0 becomes a byte copy of input 0.
 *
 * Runs Identity, and materializes a graph output that the planner could not write in
 * place (one that is a graph input, a constant, or a view of another tensor).
 */
#include <string.h>

#include "activation.h"

GE_KERNEL(ge_copy) {
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_copy takes 1 input and 1 output, got %d and %d",
                              n_inputs, n_outputs);
    }
    if (inputs[0].data == NULL) {
        return ctx->set_error(ctx, "ge_copy: input 0 is omitted");
    }
    size_t bytes = ge_tensor_nbytes(&outputs[0]);
    if (ge_tensor_nbytes(&inputs[0]) != bytes) {
        return ctx->set_error(ctx, "ge_copy: input 0 has %zu bytes, output 0 has %zu",
                              ge_tensor_nbytes(&inputs[0]), bytes);
    }
    if (outputs[0].data != inputs[0].data) {
        memmove(outputs[0].data, inputs[0].data, bytes);  /* a partial overlap is legal */
    }
    return 0;
}
