"""Recurrent layers: aten.lstm, aten.gru, aten.rnn_tanh and aten.rnn_relu (what
`torch.export` keeps of nn.LSTM, nn.GRU and nn.RNN) as one ge-hub LSTM, GRU or RNN node
per layer, which ge-hub runs with its C kernels, instead of the thousands of matmuls and
activations their decomposition unrolls into.

PyTorch and ONNX stack the gates of W, R and B in different orders (LSTM: i, f, g, o
against i, o, f, c; GRU: r, z, n against z, r, h), so each converter splits the weights
per gate and concatenates them in ONNX's order, one direction after the other; the
graph then folds those constants. PyTorch's GRU applies the reset gate after the
recurrent product, which is ONNX's `linear_before_reset=1`. A layer runs in ONNX's
layout 0 ([seq, batch, features]; `batch_first` transposes around the stack), its Y
[seq, directions, batch, hidden] becomes PyTorch's [seq, batch, directions * hidden] and
the input of the next layer, and the final states of every layer are concatenated as
PyTorch returns them.

The decomposition table keeps the four ops whole only for the calls converted here
(`keep_whole_when_converted`); the others (projections, LSTM's `proj_size`; dropout
between layers in training; a batch-less, 2-D input) are unrolled as before.
"""

from __future__ import annotations

import torch

from ge_torch.context import rank
from ge_torch.converters import converter

aten = torch.ops.aten

# ONNX gate order as indices into PyTorch's.
LSTM_GATES = (0, 3, 1, 2)  # i, o, f, c from i, f, g, o
GRU_GATES = (1, 0, 2)  # z, r, h from r, z, n
SIMPLE_GATES = (0,)


OPS = (aten.lstm.input, aten.gru.input, aten.rnn_tanh.input, aten.rnn_relu.input)


def _unsupported(target, x, params, has_biases, num_layers, dropout, train,
                 bidirectional) -> str | None:
    """Why a call stays with PyTorch, or None; `x` is the input's tensor (real or fake)."""
    directions = 2 if bidirectional else 1
    per_direction = 2 + 2 * bool(has_biases)
    if len(params) != num_layers * directions * per_direction:
        return (f"{target}: {len(params)} parameters for {num_layers} layer(s) (a "
                "projection, proj_size, has no ONNX equivalent)")
    if train and dropout > 0 and num_layers > 1:
        return f"{target}: dropout between layers in training"
    if x is not None and (x.dim() != 3 or not x.dtype.is_floating_point):
        return (f"{target}: a {x.dim()}-D {x.dtype} input (ge-hub takes a batched "
                "floating-point sequence)")
    return None


def _check(node) -> str | None:
    x = node.args[0]
    val = x.meta.get("val") if hasattr(x, "meta") else None
    return _unsupported(node.target, val, *node.args[2:8])


def keep_whole_when_converted(table: dict) -> None:
    """Make the decomposition `table` keep the four ops whole for every call the converters
    below take (a decomposition that returns NotImplemented declines), and unroll the rest
    as before."""
    for op in OPS:
        original = table.get(op)
        if original is None:
            continue

        def decompose(x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                      batch_first, _op=op, _original=original):
            if _unsupported(_op, x, params, has_biases, num_layers, dropout, train,
                            bidirectional) is None:
                return NotImplemented
            return _original(x, hx, params, has_biases, num_layers, dropout, train,
                             bidirectional, batch_first)

        table[op] = decompose


def _gates(cx, value, order):
    """`value`'s gate blocks along axis 0, in ONNX's order."""
    if len(order) == 1:
        return value
    parts = cx.op("Split", value, axis=0, num_outputs=len(order), outputs=len(order))
    return cx.op("Concat", *[parts[i] for i in order], axis=0)


def _stack(cx, values):
    """[directions, ...] from one value per direction."""
    expanded = [cx.op("Unsqueeze", v, cx.ints([0])) for v in values]
    return expanded[0] if len(expanded) == 1 else cx.op("Concat", *expanded, axis=0)


def _layers(cx, op, order, x, states, params, has_biases, num_layers, bidirectional,
            batch_first, **attrs):
    """Run `num_layers` ONNX `op` nodes; returns (output, final states)."""
    directions = 2 if bidirectional else 1
    per_direction = 2 + 2 * bool(has_biases)
    if batch_first:
        x = cx.op("Transpose", x, perm=[1, 0, 2])
    finals = [[] for _ in states]
    for layer in range(num_layers):
        ws, rs, bs = [], [], []
        for d in range(directions):
            first = (layer * directions + d) * per_direction
            w_ih, w_hh = params[first], params[first + 1]
            ws.append(_gates(cx, w_ih, order))
            rs.append(_gates(cx, w_hh, order))
            if has_biases:
                bs.append(cx.op("Concat", _gates(cx, params[first + 2], order),
                                _gates(cx, params[first + 3], order), axis=0))
        hidden = int(params[layer * directions * per_direction + 1].type.shape[1])
        initial = [cx.op("Slice", s, cx.ints([layer * directions]),
                         cx.ints([(layer + 1) * directions]), cx.ints([0])) for s in states]
        inputs = [x, _stack(cx, ws), _stack(cx, rs), _stack(cx, bs) if bs else None, None,
                  *initial]
        y, *final = cx.op(op, *inputs, outputs=1 + len(states), hidden_size=hidden,
                          direction="bidirectional" if bidirectional else "forward", **attrs)
        # [seq, directions, batch, hidden] -> [seq, batch, directions * hidden]
        y = cx.op("Transpose", y, perm=[0, 2, 1, 3])
        x = cx.op("Reshape", y, cx.ints([0, 0, directions * hidden]))
        for collected, state in zip(finals, final):
            collected.append(state)
    if batch_first:
        x = cx.op("Transpose", x, perm=[1, 0, 2])
    states = [parts[0] if len(parts) == 1 else cx.op("Concat", *parts, axis=0)
              for parts in finals]
    return x, states


@converter(aten.lstm.input, check=_check)
def lstm(cx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
         batch_first):
    if rank(x) != 3:
        cx.fail("a batch-less input")
    y, (h, c) = _layers(cx, "LSTM", LSTM_GATES, x, list(hx), params, has_biases, num_layers,
                        bidirectional, batch_first)
    return y, h, c


@converter(aten.gru.input, check=_check)
def gru(cx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
        batch_first):
    if rank(x) != 3:
        cx.fail("a batch-less input")
    y, (h,) = _layers(cx, "GRU", GRU_GATES, x, [hx], params, has_biases, num_layers,
                      bidirectional, batch_first, linear_before_reset=1)
    return y, h


def _simple(activation: str):
    def convert(cx, node, x, hx, params, has_biases, num_layers, dropout, train,
                bidirectional, batch_first):
        if rank(x) != 3:
            cx.fail("a batch-less input")
        directions = 2 if bidirectional else 1
        y, (h,) = _layers(cx, "RNN", SIMPLE_GATES, x, [hx], params, has_biases, num_layers,
                          bidirectional, batch_first, activations=[activation] * directions)
        return y, h

    return convert


converter(aten.rnn_tanh.input, check=_check)(_simple("Tanh"))
converter(aten.rnn_relu.input, check=_check)(_simple("Relu"))
