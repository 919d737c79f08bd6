"""Tests of the recurrent ops: RNN, GRU, LSTM.

Each reference is checked against `spec_loop`, an independent reading of the ONNX
equations: it walks every batch row on its own, over exactly the time steps its
sequence has (forwards or backwards), with the gates computed one vector at a time in
float64, and places the results by explicit index arithmetic for each layout. Hand cases
come from the ONNX spec's examples.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import random_array, run_op

from ge_hub.errors import OpError
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
TOLERANCE = {"float32": 2e-5, "float64": 1e-12}


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def spec_loop(op, x, w, r, b=None, lengths=None, h0=None, c0=None, p=None, *,
              direction="forward", layout=0, functions=None, clip=None,
              linear_before_reset=0, input_forget=0):
    """Y, Y_h (and Y_c for LSTM) from the ONNX equations, row by row, in float64."""
    x, w, r = (np.asarray(a, np.float64) for a in (x, w, r))
    if layout == 1:
        x = np.stack([x[:, t] for t in range(x.shape[1])])  # to [seq, batch, input]
    seq, batch, _ = x.shape
    dirs, hidden = w.shape[0], r.shape[2]
    g = GATES[op]
    if functions is None:
        functions = {"RNN": [np.tanh], "GRU": [sigmoid, np.tanh],
                     "LSTM": [sigmoid, np.tanh, np.tanh]}[op]
    clip_fn = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))

    def state_of(s, d, row):
        if s is None:
            return np.zeros(hidden)
        s = np.asarray(s, np.float64)
        return s[d, row] if layout == 0 else s[row, d]

    y = np.zeros((seq, dirs, batch, hidden))
    y_h = np.zeros((dirs, batch, hidden))
    y_c = np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        wd = np.split(w[d], g)
        rd = np.split(r[d], g)
        bias = np.zeros(2 * g * hidden) if b is None else np.asarray(b[d], np.float64)
        wb, rb = np.split(bias[: g * hidden], g), np.split(bias[g * hidden:], g)
        peep = np.zeros(3 * hidden) if p is None else np.asarray(p[d], np.float64)
        pi, po, pf = np.split(peep, 3)
        backward = direction == "reverse" or d == 1
        for row in range(batch):
            length = seq if lengths is None else int(lengths[row])
            steps = list(range(length))
            if backward:
                steps.reverse()
            h, c = state_of(h0, d, row), state_of(c0, d, row)
            for t in steps:
                xt = x[t, row]
                if op == "RNN":
                    (f,) = functions
                    h = f(clip_fn(wd[0] @ xt + rd[0] @ h + wb[0] + rb[0]))
                elif op == "GRU":
                    f, gg = functions
                    z = f(clip_fn(wd[0] @ xt + rd[0] @ h + wb[0] + rb[0]))
                    rt = f(clip_fn(wd[1] @ xt + rd[1] @ h + wb[1] + rb[1]))
                    if linear_before_reset:
                        hh = gg(clip_fn(wd[2] @ xt + rt * (rd[2] @ h + rb[2]) + wb[2]))
                    else:
                        hh = gg(clip_fn(wd[2] @ xt + rd[2] @ (rt * h) + rb[2] + wb[2]))
                    h = (1 - z) * hh + z * h
                else:
                    f, gg, hf = functions
                    i = f(clip_fn(wd[0] @ xt + rd[0] @ h + pi * c + wb[0] + rb[0]))
                    ft = f(clip_fn(wd[2] @ xt + rd[2] @ h + pf * c + wb[2] + rb[2]))
                    if input_forget:
                        ft = 1 - i
                    ct = gg(clip_fn(wd[3] @ xt + rd[3] @ h + wb[3] + rb[3]))
                    c = ft * c + i * ct
                    o = f(clip_fn(wd[1] @ xt + rd[1] @ h + po * c + wb[1] + rb[1]))
                    h = o * hf(c)
                y[t, d, row] = h
            if length > 0:  # a row of length 0 ends with zero states, as onnxruntime does
                y_h[d, row], y_c[d, row] = h, c
    if layout == 1:
        y = np.stack([y[:, :, n] for n in range(batch)])  # [batch, seq, dirs, hidden]
        y_h = np.stack([y_h[:, n] for n in range(batch)])
        y_c = np.stack([y_c[:, n] for n in range(batch)])
    return (y, y_h, y_c) if op == "LSTM" else (y, y_h)


def make_inputs(rng, op, *, seq=4, batch=3, input_size=5, hidden=3, dirs=1, layout=0,
                dtype="float32", bias=True, lengths=False, initial=True, peepholes=True):
    """Random inputs of an op in its input order (None for those left out)."""
    g = GATES[op]
    x_shape = (seq, batch, input_size) if layout == 0 else (batch, seq, input_size)
    state_shape = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    inputs = [
        random_array(rng, x_shape, dtype, -1, 1),
        random_array(rng, (dirs, g * hidden, input_size), dtype, -1, 1),
        random_array(rng, (dirs, g * hidden, hidden), dtype, -1, 1),
        random_array(rng, (dirs, 2 * g * hidden), dtype, -1, 1) if bias else None,
        rng.integers(0, seq + 1, size=batch).astype(np.int32) if lengths else None,
        random_array(rng, state_shape, dtype, -1, 1) if initial else None,
    ]
    if op == "LSTM":
        inputs.append(random_array(rng, state_shape, dtype, -1, 1) if initial else None)
        inputs.append(random_array(rng, (dirs, 3 * hidden), dtype, -1, 1)
                      if peepholes else None)
    return inputs


def assert_close(outputs, expected, dtype):
    assert len(outputs) == len(expected)
    tol = TOLERANCE[dtype]
    for out, want in zip(outputs, expected):
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol)


def infer(op, types, attrs=None, num_outputs=None):
    types = [t if t is None or isinstance(t, TensorType) else TensorType(*t) for t in types]
    return get_schema(op).infer_types(types, attrs or {}, num_outputs=num_outputs)


# --- RNN ------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rnn_matches_spec(rng, direction, layout, dtype):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(rng, "RNN", dirs=dirs, layout=layout, dtype=dtype)
    attrs = {"hidden_size": 3, "direction": direction, "layout": layout}
    outputs = run_op("RNN", inputs, attrs)
    assert_close(outputs, spec_loop("RNN", *inputs, direction=direction, layout=layout), dtype)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_rnn_sequence_lens_hold_state_and_zero_y(rng, direction, layout):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(rng, "RNN", batch=5, dirs=dirs, layout=layout, lengths=True)
    inputs[4] = np.array([4, 0, 2, 1, 3], np.int32)  # every length, 0 and full included
    attrs = {"hidden_size": 3, "direction": direction, "layout": layout}
    y, y_h = run_op("RNN", inputs, attrs)
    expected = spec_loop("RNN", *inputs, direction=direction, layout=layout)
    assert_close((y, y_h), expected, "float32")
    # A row of length 0 writes nothing and ends with a zero state, whatever its initial one.
    assert not np.any(y_h[:, 1] if layout == 0 else y_h[1])
    assert not np.any(y[:, :, 1] if layout == 0 else y[1])
    # A row shorter than the sequence writes zeros past its end.
    assert not np.any(y[2:, :, 2] if layout == 0 else y[2, 2:])
    assert np.all(y[:2, :, 2] != 0) if layout == 0 else np.all(y[2, :2] != 0)


def test_rnn_spec_example_by_hand():
    """ONNX's test_simple_rnn_defaults: weights 0.1, no bias, one step per batch row."""
    x = np.array([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]], np.float32)
    w = np.full((1, 4, 2), 0.1, np.float32)
    r = np.full((1, 4, 4), 0.1, np.float32)
    y, y_h = run_op("RNN", [x, w, r], {"hidden_size": 4})
    for row, (a, b) in enumerate([(1, 2), (3, 4), (5, 6)]):
        np.testing.assert_allclose(y_h[0, row], [math.tanh(0.1 * (a + b))] * 4, rtol=1e-6)
    np.testing.assert_array_equal(y[0], y_h)


def test_rnn_defaults_needs_no_optional_inputs(rng):
    inputs = make_inputs(rng, "RNN", bias=False, initial=False)
    outputs = run_op("RNN", inputs[:3])  # hidden_size comes from R
    assert_close(outputs, spec_loop("RNN", *inputs[:3]), "float32")


def test_rnn_activations_alpha_queue_and_clip(rng):
    inputs = make_inputs(rng, "RNN", dirs=2, hidden=4)
    # Relu takes no alpha; LeakyRelu takes the first alpha of the queue.
    attrs = {"direction": "bidirectional", "activations": ["relu", "LeakyRelu"],
             "activation_alpha": [0.3], "clip": 0.7}
    outputs = run_op("RNN", inputs, attrs)
    leaky = lambda v: np.where(v >= 0, v, 0.3 * v)  # noqa: E731
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    # Each direction on its own (its own weights and initial state) is a one-direction RNN.
    for d in range(2):
        y_d, y_h_d = spec_loop("RNN", inputs[0], inputs[1][d:d + 1], inputs[2][d:d + 1],
                               inputs[3][d:d + 1], None, inputs[5][d:d + 1],
                               functions=[[relu, leaky][d]], clip=0.7,
                               direction=["forward", "reverse"][d])
        np.testing.assert_allclose(outputs[0][:, d], y_d[:, 0], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(outputs[1][d], y_h_d[0], rtol=2e-5, atol=2e-5)
    assert np.all(outputs[0][:, 0] <= 0.7 + 1e-6)  # clipped before a relu: at most 0.7


@pytest.mark.parametrize("name,alpha,beta,fn", [
    ("Affine", 2.0, 0.5, lambda v: 2.0 * v + 0.5),
    ("ThresholdedRelu", 0.2, None, lambda v: np.where(v >= 0.2, v, 0)),
    ("ScaledTanh", 1.5, 0.5, lambda v: 1.5 * np.tanh(0.5 * v)),
    ("HardSigmoid", 0.3, 0.4, lambda v: np.clip(0.3 * v + 0.4, 0, 1)),
    ("Elu", 0.7, None, lambda v: np.where(v >= 0, v, 0.7 * (np.exp(v) - 1))),
    ("Softsign", None, None, lambda v: v / (1 + np.abs(v))),
    ("Softplus", None, None, lambda v: np.log(1 + np.exp(v))),
    ("Sigmoid", None, None, sigmoid),
])
def test_rnn_each_activation(rng, name, alpha, beta, fn):
    inputs = make_inputs(rng, "RNN", seq=2)
    attrs = {"activations": [name]}
    if alpha is not None:
        attrs["activation_alpha"] = [alpha]
    if beta is not None:
        attrs["activation_beta"] = [beta]
    outputs = run_op("RNN", inputs, attrs)
    assert_close(outputs, spec_loop("RNN", *inputs, functions=[fn]), "float32")


def test_rnn_activation_defaults_and_schema_default_pair(rng):
    inputs = make_inputs(rng, "RNN", seq=2)
    leaky = run_op("RNN", inputs, {"activations": ["LEAKYRELU"]})
    expected = spec_loop("RNN", *inputs, functions=[lambda v: np.where(v >= 0, v, 0.01 * v)])
    assert_close(leaky, expected, "float32")
    # ONNX's schema default [Tanh, Tanh] on a forward layer means Tanh.
    pair = run_op("RNN", inputs, {"activations": ["Tanh", "Tanh"]})
    assert_close(pair, spec_loop("RNN", *inputs), "float32")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rnn_half_floats_keep_their_dtype(rng, dtype):
    inputs = make_inputs(rng, "RNN", dtype=dtype)
    y, y_h = run_op("RNN", inputs)
    assert str(y.dtype) == dtype and str(y_h.dtype) == dtype
    exact = spec_loop("RNN", *[None if a is None else a.astype(np.float64)
                               if a.dtype != np.int32 else a for a in inputs])
    np.testing.assert_allclose(y.astype(np.float64), exact[0], atol=0.05)


def test_rnn_inference_symbolic_and_layouts():
    seq, batch = Sym("seq"), Sym("batch")
    types = [("float32", (seq, batch, 5)), ("float32", (2, 12, 5)), ("float32", (2, 12, 12))]
    y, y_h = infer("RNN", types, {"direction": "bidirectional"})
    assert y == TensorType("float32", (seq, 2, batch, 12))
    assert y_h == TensorType("float32", (2, batch, 12))
    types[0] = ("float32", (batch, seq, 5))
    y, y_h = infer("RNN", types, {"direction": "bidirectional", "layout": 1, "hidden_size": 12})
    assert y == TensorType("float32", (batch, seq, 2, 12))
    assert y_h == TensorType("float32", (batch, 2, 12))
    (y,) = infer("RNN", types, {"direction": "bidirectional", "layout": 1}, num_outputs=1)
    assert y == TensorType("float32", (batch, seq, 2, 12))


def test_rnn_inference_unknown_ranks_get_fresh_symbols():
    types = [TensorType("float64", None), TensorType("float64", None),
             TensorType("float64", None)]
    y, y_h = infer("RNN", types, {"hidden_size": 7})
    assert y.dtype == "float64" and y.rank == 4 and y.shape[1:] == (1, y_h.shape[1], 7)
    assert isinstance(y.shape[0], Sym) and isinstance(y_h.shape[1], Sym)


@pytest.mark.parametrize("change,message", [
    ({1: ("float32", (1, 4, 6))}, "input 'W' must have shape [1, 3, 5]"),
    ({2: ("float32", (1, 3, 4))}, "input 'R' must have shape [1, 3, 3]"),
    ({3: ("float32", (1, 3))}, "input 'B' must have shape [1, 6]"),
    ({4: ("int32", (3,))}, "input 'sequence_lens' must have shape [2]"),
    ({4: ("int64", (2,))}, "input 'sequence_lens' must have dtype in {int32}"),
    ({5: ("float32", (2, 2, 3))}, "input 'initial_h' must have shape [1, 2, 3]"),
    ({0: ("float32", (4, 5))}, "input 'X' must have rank 3"),
    ({1: ("float64", (1, 3, 5))}, "input 'W' must have the same dtype as 'X'"),
])
def test_rnn_bad_inputs(change, message):
    types = [("float32", (4, 2, 5)), ("float32", (1, 3, 5)), ("float32", (1, 3, 3)),
             ("float32", (1, 6)), ("int32", (2,)), ("float32", (1, 2, 3))]
    for index, t in change.items():
        types[index] = t
    with pytest.raises(OpError, match="RNN") as error:
        infer("RNN", types, {"hidden_size": 3})
    assert message in str(error.value)


@pytest.mark.parametrize("attrs,message", [
    ({"direction": "backward"}, "attribute 'direction' must be one of forward, reverse, "
                                "bidirectional, got 'backward'"),
    ({"layout": 2}, "attribute 'layout' must be 0 or 1, got 2"),
    ({"hidden_size": 0}, "attribute 'hidden_size' must be >= 1, got 0"),
    ({"clip": -1.0}, "attribute 'clip' must be > 0, got -1.0"),
    ({"activations": ["Swish"]}, "unknown function 'Swish'"),
    ({"activations": ["Tanh"], "direction": "bidirectional"},
     "attribute 'activations' must name 2 functions"),
])
def test_rnn_bad_attributes(attrs, message):
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    types = [("float32", (4, 2, 5)), ("float32", (dirs, 3, 5)), ("float32", (dirs, 3, 3))]
    with pytest.raises(OpError, match="RNN") as error:
        infer("RNN", types, attrs)
    assert message in str(error.value)


def test_rnn_bad_sequence_lens_values(rng):
    inputs = make_inputs(rng, "RNN", batch=2, lengths=True)
    inputs[4] = np.array([2, 5], np.int32)  # longer than the 4 steps of X
    with pytest.raises(OpError, match=r"RNN: input 'sequence_lens' must hold 2 lengths in "
                                      r"\[0, 4\], got \[2, 5\]"):
        get_schema("RNN").run_reference(inputs, {})


def test_rnn_too_many_outputs():
    types = [("float32", (4, 2, 5)), ("float32", (1, 3, 5)), ("float32", (1, 3, 3))]
    with pytest.raises(OpError, match=r"expected 1 to 2 outputs \(Y, Y_h\), got 3"):
        infer("RNN", types, num_outputs=3)


# --- GRU ------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gru_matches_spec(rng, direction, layout, linear_before_reset, dtype):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(rng, "GRU", dirs=dirs, layout=layout, dtype=dtype, lengths=True)
    attrs = {"hidden_size": 3, "direction": direction, "layout": layout,
             "linear_before_reset": linear_before_reset}
    outputs = run_op("GRU", inputs, attrs)
    expected = spec_loop("GRU", *inputs, direction=direction, layout=layout,
                         linear_before_reset=linear_before_reset)
    assert_close(outputs, expected, dtype)


def test_gru_spec_example_by_hand():
    """ONNX's test_gru_defaults: weights 0.1, no bias, zero initial state, one step."""
    x = np.array([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]], np.float32)
    w = np.full((1, 15, 2), 0.1, np.float32)
    r = np.full((1, 15, 5), 0.1, np.float32)
    (y_h,) = run_op("GRU", [x, w, r], {"hidden_size": 5}, num_outputs=2)[1:]
    for row, (a, b) in enumerate([(1, 2), (3, 4), (5, 6)]):
        s = 0.1 * (a + b)  # every gate's input; H0 = 0, so r * H0 = 0
        z = 1 / (1 + math.exp(-s))
        np.testing.assert_allclose(y_h[0, row], [(1 - z) * math.tanh(s)] * 5, rtol=1e-6)


def test_gru_defaults_activations_and_clip(rng):
    inputs = make_inputs(rng, "GRU", seq=3, bias=False, initial=False)
    outputs = run_op("GRU", inputs[:3], {"clip": 0.5})
    assert_close(outputs, spec_loop("GRU", *inputs[:3], clip=0.5), "float32")
    attrs = {"activations": ["HardSigmoid", "Affine"], "activation_alpha": [0.25, 0.5],
             "activation_beta": [0.4, 0.1]}
    outputs = run_op("GRU", inputs, attrs)
    functions = [lambda v: np.clip(0.25 * v + 0.4, 0, 1), lambda v: 0.5 * v + 0.1]
    assert_close(outputs, spec_loop("GRU", *inputs, functions=functions), "float32")


def test_gru_inference():
    batch = Sym("batch")
    types = [("float32", (7, batch, 4)), ("float32", (1, 18, 4)), ("float32", (1, 18, 6))]
    y, y_h = infer("GRU", types)
    assert y == TensorType("float32", (7, 1, batch, 6))
    assert y_h == TensorType("float32", (1, batch, 6))
    with pytest.raises(OpError, match=r"GRU: input 'W' must have shape \[1, 18, 4\]"):
        infer("GRU", [types[0], ("float32", (1, 12, 4)), types[2]])
    with pytest.raises(OpError, match="attribute 'linear_before_reset' must be 0 or 1, got 2"):
        infer("GRU", types, {"linear_before_reset": 2})
    with pytest.raises(OpError, match=r"GRU: attribute 'activations' must name 2 functions"):
        infer("GRU", types, {"activations": ["Sigmoid"]})


# --- LSTM -----------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("input_forget", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lstm_matches_spec(rng, direction, layout, input_forget, dtype):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = make_inputs(rng, "LSTM", dirs=dirs, layout=layout, dtype=dtype, lengths=True)
    attrs = {"hidden_size": 3, "direction": direction, "layout": layout,
             "input_forget": input_forget}
    outputs = run_op("LSTM", inputs, attrs)
    expected = spec_loop("LSTM", *inputs, direction=direction, layout=layout,
                         input_forget=input_forget)
    assert_close(outputs, expected, dtype)


def test_lstm_spec_example_by_hand():
    """ONNX's test_lstm_defaults: weights 0.1, no bias, zero states, one step."""
    x = np.array([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]], np.float32)
    w = np.full((1, 12, 2), 0.1, np.float32)
    r = np.full((1, 12, 3), 0.1, np.float32)
    y, y_h, y_c = run_op("LSTM", [x, w, r], {"hidden_size": 3})
    for row, (a, b) in enumerate([(1, 2), (3, 4), (5, 6)]):
        s = 0.1 * (a + b)  # every gate's input; C0 = 0, so the forget gate drops nothing
        gate = 1 / (1 + math.exp(-s))
        c = gate * math.tanh(s)
        np.testing.assert_allclose(y_c[0, row], [c] * 3, rtol=1e-6)
        np.testing.assert_allclose(y_h[0, row], [gate * math.tanh(c)] * 3, rtol=1e-6)
    np.testing.assert_array_equal(y[0], y_h)


def test_lstm_optional_inputs_left_out_in_the_middle(rng):
    inputs = make_inputs(rng, "LSTM", seq=3)
    inputs[3] = inputs[4] = inputs[6] = None  # no B, lengths or initial_c; P given
    outputs = run_op("LSTM", inputs)
    assert_close(outputs, spec_loop("LSTM", *inputs), "float32")


def test_lstm_activations_per_direction_and_clip(rng):
    inputs = make_inputs(rng, "LSTM", seq=3, dirs=2)
    names = ["Sigmoid", "Tanh", "Tanh", "HardSigmoid", "Softsign", "ScaledTanh"]
    attrs = {"direction": "bidirectional", "activations": names, "clip": 1.5,
             "activation_alpha": [0.3, 0.8], "activation_beta": [0.45, 1.2]}
    outputs = run_op("LSTM", inputs, attrs)
    backward = [lambda v: np.clip(0.3 * v + 0.45, 0, 1), lambda v: v / (1 + np.abs(v)),
                lambda v: 0.8 * np.tanh(1.2 * v)]
    for d, functions in enumerate([None, backward]):
        one = [a if a is None or i in (0, 4) else a[d:d + 1] for i, a in enumerate(inputs)]
        y, y_h, y_c = spec_loop("LSTM", *one, functions=functions, clip=1.5,
                                direction=["forward", "reverse"][d])
        np.testing.assert_allclose(outputs[0][:, d], y[:, 0], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(outputs[1][d], y_h[0], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(outputs[2][d], y_c[0], rtol=2e-5, atol=2e-5)


def test_lstm_inference():
    seq, batch = Sym("seq"), Sym("batch")
    types = [("float64", (batch, seq, 3)), ("float64", (2, 8, 3)), ("float64", (2, 8, 2)),
             ("float64", (2, 16)), None, ("float64", (batch, 2, 2)),
             ("float64", (batch, 2, 2)), ("float64", (2, 6))]
    y, y_h, y_c = infer("LSTM", types, {"direction": "bidirectional", "layout": 1})
    assert y == TensorType("float64", (batch, seq, 2, 2))
    assert y_h == y_c == TensorType("float64", (batch, 2, 2))
    assert len(infer("LSTM", types, {"direction": "bidirectional", "layout": 1},
                     num_outputs=2)) == 2
    bad_p = types[:7] + [("float64", (2, 4))]
    with pytest.raises(OpError, match=r"LSTM: input 'P' must have shape \[2, 6\]"):
        infer("LSTM", bad_p, {"direction": "bidirectional", "layout": 1})
    bad_c = types[:6] + [("float64", (batch, 1, 2))] + types[7:]
    with pytest.raises(OpError, match=r"input 'initial_c' must have shape \[batch, 2, 2\]"):
        infer("LSTM", bad_c, {"direction": "bidirectional", "layout": 1})
    with pytest.raises(OpError, match="attribute 'input_forget' must be 0 or 1, got 3"):
        infer("LSTM", types, {"direction": "bidirectional", "layout": 1, "input_forget": 3})


def test_thresholded_relu_activation_is_strict_at_alpha():
    # ONNX ThresholdedRelu: X where X > alpha, else 0; X == alpha gives 0, as the core op.
    from ge_hub.ops.rnn import ACTIVATIONS

    x = np.array([0.5, 1.0, 1.5], np.float32)
    got = ACTIVATIONS["thresholdedrelu"].function(x, 1.0, 0.0)
    np.testing.assert_array_equal(got, [0.0, 0.0, 1.5])
    (core,) = run_op("ThresholdedRelu", [x], {"alpha": 1.0})
    np.testing.assert_array_equal(core, got)
