/*
 * LRN, local response normalization across channels (lrn.c), for the table in
 * registry.c. Its Python side, the packer, is ge_hub/kernels/lrn.py.
 */
#ifndef GE_HUB_LRN_H
#define GE_HUB_LRN_H

#include "kernels.h"

GE_KERNEL(ge_lrn_f32);

#endif /* GE_HUB_LRN_H */
