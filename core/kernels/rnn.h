/*
 * The recurrent layers RNN, GRU and LSTM (nn_rnn.c), for the table in registry.c. Their
 * Python side, the packer, is ge_hub/kernels/rnn.py.
 */
#ifndef GE_HUB_NN_RNN_H
#define GE_HUB_NN_RNN_H

#include "kernels.h"

GE_KERNEL(ge_rnn_f32);
GE_KERNEL(ge_gru_f32);
GE_KERNEL(ge_lstm_f32);

#endif /* GE_HUB_NN_RNN_H */
