"""RNN, GRU and LSTM's C kernels (core/kernels/rnn.c): one recurrent layer, float32.

Every variant of the ONNX ops runs in C: the three directions, both layouts, the optional
inputs (B, sequence_lens, initial_h, initial_c, P), clip, GRU's linear_before_reset,
LSTM's input_forget and every activation the ops accept, with its alpha and beta. The
packer resolves the activation queues of `ge_hub.ops.rnn` once, into a code and two
parameters per function, and chooses how many time steps one input projection (a GEMM
of X with W) covers, so that its buffer stays within `MAX_PROJECTION_FLOATS` per
direction however long the sequence is. For a batch of at most `SMALL_BATCH` rows the
kernel computes each step's product H R^T itself, from R^T laid out in panels of `PANEL`
columns (see core/kernels/rnn.c): a constant R is handed to it so laid out
(`prepack_recurrent`), any other R it lays out in its scratch once per run. Other dtypes
(float64, float16) are left to the counted reference fallback: the loaded BLAS is single
precision only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.ops import get_schema
from ge_hub.ops.rnn import (
    ACTIVATIONS,
    DIRECTIONS,
    GRU_FAMILY,
    LSTM_FAMILY,
    RNN_FAMILY,
    Family,
)
from ge_hub.registry import KernelSpec

F32, I32 = DType.FLOAT32, DType.INT32
FLOAT_BYTES, INT_BYTES = 4, 8

# The kernel's activation codes (RNN_* in core/kernels/rnn.c), by lower-case ONNX name.
ACTIVATION_CODES = {
    "relu": 0, "tanh": 1, "sigmoid": 2, "affine": 3, "leakyrelu": 4, "thresholdedrelu": 5,
    "scaledtanh": 6, "hardsigmoid": 7, "elu": 8, "softsign": 9, "softplus": 10,
}
# Floats of one direction's input projection buffer: up to 16 MiB; a longer sequence is
# projected a block of time steps at a time.
MAX_PROJECTION_FLOATS = 1 << 22
# The kernel's own per-step product (RNN_SMALL_BATCH, RNN_PANEL in rnn.c): batches of
# at most SMALL_BATCH rows, R^T in panels of PANEL columns.
SMALL_BATCH = 16
PANEL = 64
SEQUENCE_LENS = 4  # the input index of the one int32 input


def _attrs(node: Node) -> dict:
    return get_schema(node.op, node.domain).fill_attrs(dict(node.attrs), node.name)


def _fail(node: Node, message: str):
    raise OpError(f"{node.op} node {node.name!r}: {message}")


def activation_values(node: Node, attrs: dict, family: Family,
                      directions: int) -> tuple[list[int], list[float], list[float]]:
    """Each function's code, alpha and beta, direction by direction, resolved from
    `activations`, `activation_alpha` and `activation_beta` exactly as the reference's
    `resolve_activations` does (defaults, the half of a two-direction list, the queues)."""
    per_direction = len(family.default_activations)
    names = attrs["activations"]
    if names is None:
        names = list(family.default_activations) * directions
    elif directions == 1 and len(names) == 2 * per_direction:
        names = names[:per_direction]
    if len(names) != per_direction * directions:
        _fail(node, f"attribute 'activations' must name {per_direction * directions} "
                    f"functions, got {list(names)}")
    alpha_queue = list(attrs["activation_alpha"] or [])
    beta_queue = list(attrs["activation_beta"] or [])
    codes, alphas, betas = [], [], []
    for name in names:
        key = name.lower()
        if key not in ACTIVATION_CODES:
            _fail(node, f"attribute 'activations' names an unknown function {name!r}")
        activation = ACTIVATIONS[key]
        alpha = beta = 0.0
        if activation.alpha is not None:
            alpha = alpha_queue.pop(0) if alpha_queue else activation.alpha
        if activation.beta is not None:
            beta = beta_queue.pop(0) if beta_queue else activation.beta
        codes.append(ACTIVATION_CODES[key])
        alphas.append(float(alpha))
        betas.append(float(beta))
    return codes, alphas, betas


def _small_batch(node: Node, input_types) -> bool:
    layout = int(_attrs(node)["layout"])
    return int(input_types[0].shape[1 - layout]) <= SMALL_BATCH


def _packs_r(node: Node, input_types) -> bool:
    """Whether R reaches the kernel as panels: a constant R for a small batch."""
    r = node.inputs[2]
    return r is not None and r.const is not None and _small_batch(node, input_types)


def _column_ranges(node: Node, family: Family, hidden: int) -> list[tuple[int, int]]:
    """The column ranges of R^T that a step multiplies separately, each in its own panels:
    GRU without linear_before_reset multiplies the z and r gates, then the h gate."""
    if family is GRU_FAMILY and not _attrs(node)["linear_before_reset"]:
        return [(0, 2 * hidden), (2 * hidden, hidden)]
    return [(0, family.gates * hidden)]


def _panel_floats(node: Node, family: Family, hidden: int) -> int:
    return sum(-(-cols // PANEL) * PANEL * hidden
               for _, cols in _column_ranges(node, family, hidden))


def pack_panels(r: np.ndarray, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """R [directions, width, hidden] as the kernel's panels of R^T, per direction: for each
    column range [c0, c0 + cols), ceil(cols / PANEL) panels of `hidden` rows, row k of
    panel p holding R[c0 + PANEL * p + j, k] for j < PANEL (zeros past the range)."""
    directions, _, hidden = r.shape
    parts = []
    for c0, cols in ranges:
        panels = -(-cols // PANEL)
        padded = np.zeros((directions, panels * PANEL, hidden), np.float32)
        padded[:, :cols] = r[:, c0:c0 + cols]
        # [d, p, j, k] -> [d, p, k, j]
        parts.append(padded.reshape(directions, panels, PANEL, hidden).transpose(0, 1, 3, 2)
                     .reshape(directions, -1))
    return np.ascontiguousarray(np.concatenate(parts, axis=1))


def _prepacker(family: Family):
    def prepack_recurrent(node, input_types, output_types) -> dict[int, np.ndarray]:
        """A constant R as the kernel's panels of R^T, for a small batch (`pack_panels`)."""
        if not _packs_r(node, input_types):
            return {}
        r = np.asarray(node.inputs[2].const, dtype=np.float32)
        return {2: pack_panels(r, _column_ranges(node, family, r.shape[2]))}

    return prepack_recurrent


def _geometry(node: Node, attrs: dict, family: Family,
              input_types: Sequence[TensorType | None]) -> dict[str, int]:
    x, r = input_types[0].shape, input_types[2].shape
    layout = int(attrs["layout"])
    seq, batch, hidden = int(x[layout]), int(x[1 - layout]), int(r[2])
    width = family.gates * hidden
    block = max(1, min(seq, MAX_PROJECTION_FLOATS // max(1, batch * width)))
    state_buffers = 1 if family is RNN_FAMILY else 2  # h; h and c (LSTM) or r * h (GRU)
    per_direction = block * batch * width + batch * width + state_buffers * batch * hidden
    directions = DIRECTIONS[attrs["direction"]]
    # panels laid out at run time: a small batch whose R is not a constant
    run_time_panels = 0
    if _small_batch(node, input_types) and not _packs_r(node, input_types):
        run_time_panels = directions * _panel_floats(node, family, hidden)
    return dict(seq=seq, batch=batch, input=int(x[2]), hidden=hidden, layout=layout,
                directions=directions, block=block,
                scratch=INT_BYTES * batch
                + FLOAT_BYTES * (directions * per_direction + run_time_panels))


def _packer(family: Family):
    def pack(node, input_types, output_types) -> Packed:
        """Blob: ints seq, batch, input, hidden, directions, reverse, layout, has_clip,
        flag, block, r_packed, the activation codes; floats clip, the alphas, the betas."""
        attrs = _attrs(node)
        g = _geometry(node, attrs, family, input_types)
        codes, alphas, betas = activation_values(node, attrs, family, g["directions"])
        clip = attrs["clip"]
        flag = int(attrs[family.flags[0]]) if family.flags else 0
        ints = [g["seq"], g["batch"], g["input"], g["hidden"], g["directions"],
                int(attrs["direction"] == "reverse"), g["layout"], int(clip is not None), flag,
                g["block"], int(_packs_r(node, input_types)), *codes]
        floats = [float(clip) if clip is not None else 0.0, *alphas, *betas]
        return Packed(pack_values(ints, floats), scratch_bytes=g["scratch"])

    return pack


def supports_recurrent(node, input_types, output_types) -> bool:
    """Static shapes with at least one input feature and one hidden unit (the GEMMs' inner
    sizes); every attribute value the op accepts is handled."""
    if any(t is None or t.shape is None or not t.is_static for t in input_types[:3]):
        return False
    if any(t is not None and (t.shape is None or not t.is_static) for t in input_types[3:]):
        return False
    if any(t.shape is None or not t.is_static for t in output_types):
        return False
    if any(t is not None and t.dtype != (I32 if i == SEQUENCE_LENS else F32)
           for i, t in enumerate(input_types)):
        return False
    x, r = input_types[0].shape, input_types[2].shape
    return len(x) == 3 and len(r) == 3 and x[2] >= 1 and r[2] >= 1


def _kernel(family: Family, symbol: str, dtypes: tuple) -> KernelSpec:
    return KernelSpec(op=family.name, name=symbol, dtypes=dtypes,
                      impl=CKernel(symbol, pack=_packer(family), supports=supports_recurrent,
                                   prepack=_prepacker(family)))


# Declared: X, W, R. Selection would refuse a node that omits a declared input, so the
# optional ones (B, sequence_lens, initial_h, initial_c, P) are checked in
# `supports_recurrent` instead.
KERNELS = [
    _kernel(RNN_FAMILY, "ge_rnn_f32", (F32, F32, F32)),
    _kernel(GRU_FAMILY, "ge_gru_f32", (F32, F32, F32)),
    _kernel(LSTM_FAMILY, "ge_lstm_f32", (F32, F32, F32)),
]
