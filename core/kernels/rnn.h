/*
 * The rnn family's kernels (rnn.c): RNN, GRU and LSTM, for registry.c. Their packer is
 * ge_hub/kernels/rnn.py.
 */
#ifndef GE_HUB_RNN_H
#define GE_HUB_RNN_H

#include "kernels.h"

/* The rnn family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_RNN_KERNELS(X) \
    X(ge_rnn_f32)         \
    X(ge_gru_f32)         \
    X(ge_lstm_f32)

GE_RNN_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_RNN_H */
