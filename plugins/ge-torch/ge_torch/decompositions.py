"""The decomposition table ge-torch lowers PyTorch programs with.

PyTorch's core ATen decompositions, minus the ops ge-hub runs whole: an activation or a
layer that ge-hub has a kernel (and fusions) for is worth more as one node than as the
arithmetic it expands to. LayerNorm (`native_layer_norm`), GELU, batch norm, softmax,
convolution, pooling and `addmm` are not in the core table to begin with, so they stay
whole anyway. Scaled-dot-product attention has no core ge-hub op and is decomposed to
matmuls and a softmax.

`lowering_mode` is the context to trace in: with oneDNN (mkldnn) disabled, PyTorch's
LSTM decomposition emits plain matmuls and activations instead of the fused
`mkldnn_rnn_layer`, which ge-hub has no equivalent for.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch._decomp import core_aten_decompositions

aten = torch.ops.aten

# Ops the core table would decompose but ge-hub converts whole.
KEEP_WHOLE = (
    aten.hardsigmoid.default,
    aten.hardswish.default,
    aten.mish.default,
    aten.pixel_shuffle.default,
    aten.upsample_nearest2d.default,
)


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    for op in KEEP_WHOLE:
        table.pop(op, None)
    # LSTM, GRU and RNN stay whole where ge_torch.converters.rnn converts them.
    from ge_torch.converters.rnn import keep_whole_when_converted

    keep_whole_when_converted(table)
    return table


@contextlib.contextmanager
def lowering_mode():
    # torch.backends.mkldnn.flags() would also reset the TF32 setting, with a warning.
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)
