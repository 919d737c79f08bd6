"""RNN, GRU and LSTM's C kernels (core/kernels/rnn.c) against their ops' NumPy references.

Each case builds a one-node graph with ES, compiles it, checks that no step runs Python
and compares every output with the reference (ge_hub/ops/rnn.py) on the same random
non-zero inputs: the three directions, both layouts, each optional input present and
absent (also in the middle of the input list), sequence lengths that differ per batch row
(0 and the full length included), clip, GRU's linear_before_reset, LSTM's input_forget
and peepholes, every activation with and without alpha/beta, odd sizes (hidden 1, 3, 17;
batch 1 and 5; seq 0, 1 and 7), each output asked for or not, input projections done in
blocks of time steps, and sizes large enough for the thread pool. float64 is left to the
counted fallback; a bad sequence length and a malformed blob are errors, not crashes.
R is a constant (handed to the kernel transposed at compile time) in most cases and a
graph input (transposed by the kernel) in some.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.kernels import rnn as rnn_kernels
from ge_hub.ops import get_schema

# float32 GEMMs summed in another order than the reference's, over a few steps.
TOLERANCE = dict(rtol=1e-4, atol=2e-5)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
FLAG = {"GRU": "linear_before_reset", "LSTM": "input_forget"}
# Input order: X, W, R, B, sequence_lens, initial_h, initial_c, P.
INPUT_NAMES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def random_array(rng, shape, scale=1.0, dtype=np.float32):
    """Random non-zero data in [-scale, scale]."""
    data = rng.uniform(-1.0, 1.0, size=shape)
    data[data == 0] = 0.5
    return (data * scale).astype(dtype)


@dataclasses.dataclass
class Layer:
    op: str
    seq: int = 7
    batch: int = 5
    input: int = 4
    hidden: int = 3
    direction: str = "forward"
    layout: int = 0
    dtype: type = np.float32

    @property
    def directions(self) -> int:
        return DIRECTIONS[self.direction]

    def state_shape(self):
        d, b, h = self.directions, self.batch, self.hidden
        return (d, b, h) if self.layout == 0 else (b, d, h)

    def inputs(self, rng, given=(), lengths=None):
        """X, W, R and the optional inputs named in `given` (None for the others), as
        long as the op has them; weights scaled by 1/sqrt(fan-in), as trained nets are."""
        g, d, h = GATES[self.op], self.directions, self.hidden
        x_shape = (self.seq, self.batch, self.input) if self.layout == 0 else (
            self.batch, self.seq, self.input)
        arrays = [random_array(rng, x_shape, 2.0, self.dtype),
                  random_array(rng, (d, g * h, self.input), self.input ** -0.5, self.dtype),
                  random_array(rng, (d, g * h, h), h ** -0.5, self.dtype)]
        optional = {
            "B": lambda: random_array(rng, (d, 2 * g * h), 0.5, self.dtype),
            "sequence_lens": lambda: np.asarray(
                lengths if lengths is not None else rng.integers(0, self.seq + 1, self.batch),
                dtype=np.int32),
            "initial_h": lambda: random_array(rng, self.state_shape(), 1.0, self.dtype),
            "initial_c": lambda: random_array(rng, self.state_shape(), 1.0, self.dtype),
            "P": lambda: random_array(rng, (d, 3 * h), 0.5, self.dtype),
        }
        count = 8 if self.op == "LSTM" else 6
        for name in INPUT_NAMES[3:count]:
            arrays.append(optional[name]() if name in given else None)
        while arrays[-1] is None:
            arrays.pop()
        return arrays

    def attrs(self, **extra):
        return dict(hidden_size=self.hidden, direction=self.direction, layout=self.layout,
                    **extra)


def compile_layer(op, inputs, attrs, *, outputs=None, keep=None, consts=(1, 2, 3)):
    """A compiled graph of one `op` node with `outputs` outputs (all by default) of which
    the graph returns those listed in `keep`; inputs in `consts` are constants, the others
    graph inputs, None omitted. Returns (model, feeds)."""
    outputs = outputs or (3 if op == "LSTM" else 2)
    keep = range(outputs) if keep is None else keep
    feeds = {}
    with es.GraphBuilder(op.lower()) as gb:
        args = []
        for i, array in enumerate(inputs):
            if array is None:
                args.append(None)
            elif i in consts:
                args.append(es.const(array))
            else:
                feeds[f"x{i}"] = array
                args.append(es.input(f"x{i}", array.dtype.name, list(array.shape)))
        result = es.op(op, *args, outputs=outputs, **attrs)
        result = result if isinstance(result, tuple) else (result,)
        for j in keep:
            gb.output(result[j], f"y{j}")
    return ge_hub.compile(gb.graph), feeds


def reference(op, inputs, attrs):
    return get_schema(op).run_reference(inputs, attrs)


def check(op, inputs, attrs, *, outputs=None, keep=None, consts=(1, 2, 3)):
    """Run in C (no Python step) and compare the kept outputs with the reference."""
    model, feeds = compile_layer(op, inputs, attrs, outputs=outputs, keep=keep, consts=consts)
    summary = model.summary()
    assert summary["python_steps"] == 0, summary
    got = model.run(feeds)
    want = reference(op, inputs, attrs)
    keep = range(len(want) if outputs is None else outputs) if keep is None else keep
    assert len(got) == len(list(keep))
    for g, j in zip(got, keep):
        assert g.dtype == np.float32 and g.shape == want[j].shape, (g.shape, want[j].shape)
        np.testing.assert_allclose(g, want[j], err_msg=f"output {j}", **TOLERANCE)
    return got


# -- every direction, layout and attribute variant ------------------------------------------

VARIANTS = {
    "minimal": dict(given=(), attrs={}),
    "all_inputs": dict(given=("B", "sequence_lens", "initial_h", "initial_c", "P"), attrs={}),
    "clip": dict(given=("B", "initial_h"), attrs=dict(clip=0.7)),
    "flag": dict(given=("B", "sequence_lens", "initial_h", "initial_c"), attrs="flag"),
    "flag_clip_peepholes": dict(given=("B", "initial_c", "P"), attrs="flag+clip"),
}


# RNN has no linear_before_reset or input_forget: no "flag" variants for it.
OP_VARIANTS = [(op, variant) for op in GATES for variant in VARIANTS
               if op != "RNN" or not isinstance(VARIANTS[variant]["attrs"], str)]


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("op, variant", OP_VARIANTS)
def test_matches_reference(rng, op, variant, direction, layout):
    spec = VARIANTS[variant]
    extra = spec["attrs"]
    if isinstance(extra, str):
        extra = {FLAG[op]: 1, **(dict(clip=1.1) if "clip" in extra else {})}
    layer = Layer(op, direction=direction, layout=layout)
    lengths = [7, 0, 3, 1, 6]  # the full length, an empty row, and between
    check(op, layer.inputs(rng, spec["given"], lengths), layer.attrs(**extra))


@pytest.mark.parametrize("seq, batch, hidden", [
    (1, 1, 1), (7, 1, 1), (1, 5, 3), (7, 5, 17), (7, 1, 17), (1, 5, 17), (7, 5, 1)])
@pytest.mark.parametrize("op", list(GATES))
def test_odd_sizes(rng, op, seq, batch, hidden):
    for direction, layout in (("bidirectional", 0), ("reverse", 1)):
        layer = Layer(op, seq=seq, batch=batch, hidden=hidden, input=5, direction=direction,
                      layout=layout)
        given = ("B", "sequence_lens", "initial_h", "initial_c", "P")
        check(op, layer.inputs(rng, given), layer.attrs())


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("lengths", [[0, 0, 0], [4, 4, 4], [4, 0, 2], [1, 2, 3]])
def test_sequence_lengths(rng, op, lengths):
    for direction in DIRECTIONS:
        layer = Layer(op, seq=4, batch=3, hidden=5, direction=direction, layout=1)
        check(op, layer.inputs(rng, ("sequence_lens", "initial_h", "initial_c"), lengths),
              layer.attrs())


def test_a_row_of_length_zero_ends_with_zero_states(rng):
    layer = Layer("LSTM", seq=3, batch=2, direction="bidirectional")
    inputs = layer.inputs(rng, ("sequence_lens", "initial_h", "initial_c"), [0, 3])
    y, y_h, y_c = check("LSTM", inputs, layer.attrs())
    assert not y[:, :, 0].any() and not y_h[:, 0].any() and not y_c[:, 0].any()
    assert y[:, :, 1].all() and y_h[:, 1].all()


@pytest.mark.parametrize("op", list(GATES))
def test_empty_sequence(rng, op):
    layer = Layer(op, seq=0, batch=2, direction="bidirectional")
    check(op, layer.inputs(rng, ("initial_h", "initial_c")), layer.attrs())


# -- optional inputs and outputs ------------------------------------------------------------

OMITTED = {
    "no_bias_with_lengths": ("sequence_lens", "initial_h"),
    "no_initial_h": ("B", "initial_c", "P"),
    "only_peepholes": ("P",),
    "only_initial_c": ("initial_c",),
    "only_lengths": ("sequence_lens",),
}


@pytest.mark.parametrize("given", list(OMITTED))
@pytest.mark.parametrize("op", list(GATES))
def test_inputs_omitted_in_the_middle(rng, op, given):
    layer = Layer(op, direction="bidirectional")
    inputs = layer.inputs(rng, OMITTED[given])
    check(op, inputs, layer.attrs())


@pytest.mark.parametrize("op", list(GATES))
def test_every_input_a_graph_input(rng, op):
    layer = Layer(op, direction="bidirectional", layout=1)
    inputs = layer.inputs(rng, ("B", "sequence_lens", "initial_h", "initial_c", "P"))
    check(op, inputs, layer.attrs(), consts=())


@pytest.mark.parametrize("op, outputs, keep", [
    ("RNN", 1, [0]), ("RNN", 2, [1]), ("RNN", 2, [0, 1]),
    ("GRU", 1, [0]), ("GRU", 2, [1]),
    ("LSTM", 1, [0]), ("LSTM", 2, [1]), ("LSTM", 3, [2]), ("LSTM", 3, [1, 2]),
    ("LSTM", 3, [0, 2]),
])
def test_outputs_asked_for_or_not(rng, op, outputs, keep):
    layer = Layer(op, direction="bidirectional")
    inputs = layer.inputs(rng, ("B", "sequence_lens", "initial_h"))
    check(op, inputs, layer.attrs(), outputs=outputs, keep=keep)


# -- activations ----------------------------------------------------------------------------

# Each function with its parameters given, and once more with the ONNX defaults.
WITH_PARAMETERS = {
    "Relu": ([], []), "Tanh": ([], []), "Sigmoid": ([], []), "Softsign": ([], []),
    "Softplus": ([], []), "Affine": ([0.7], [0.2]), "LeakyRelu": ([0.3], []),
    "ThresholdedRelu": ([0.4], []), "ScaledTanh": ([1.3], [0.6]),
    "HardSigmoid": ([0.3], [0.45]), "Elu": ([0.8], []),
}


@pytest.mark.parametrize("defaults", [False, True])
@pytest.mark.parametrize("function", list(WITH_PARAMETERS))
def test_every_activation(rng, function, defaults):
    alphas, betas = WITH_PARAMETERS[function]
    for op in GATES:
        layer = Layer(op, direction="bidirectional", hidden=6)
        others = {"RNN": [], "GRU": ["Tanh"], "LSTM": ["Tanh", "Sigmoid"]}[op]
        # forward: the function first (gate f), the defaults reversed after it;
        # backward: the defaults, the function last
        names = [function, *others, *get_default(op)[:-1], function]
        extra = dict(activations=names)
        if not defaults:
            extra.update(activation_alpha=alphas * 2 + [0.9], activation_beta=betas * 2 + [0.1])
        inputs = layer.inputs(rng, ("B", "initial_h", "initial_c"))
        check(op, inputs, layer.attrs(**extra))


def get_default(op):
    return {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[op]


def test_activation_queues_and_case(rng):
    """alpha/beta are queues consumed across functions in order; names in any case."""
    layer = Layer("LSTM", direction="bidirectional")
    attrs = layer.attrs(
        activations=["hardsigmoid", "AFFINE", "scaledTanh", "Sigmoid", "LeakyRelu", "Elu"],
        activation_alpha=[0.25, 0.9, 1.2, 0.05], activation_beta=[0.55, -0.1])
    codes, alphas, betas = rnn_kernels.activation_values(
        None, get_schema("LSTM").fill_attrs(attrs), rnn_kernels.LSTM_FAMILY, 2)
    assert codes == [rnn_kernels.ACTIVATION_CODES[name] for name in (
        "hardsigmoid", "affine", "scaledtanh", "sigmoid", "leakyrelu", "elu")]
    assert alphas == [0.25, 0.9, 1.2, 0.0, 0.05, 1.0]  # Elu takes its default
    assert betas == [0.55, -0.1, 1.0, 0.0, 0.0, 0.0]  # ScaledTanh's beta defaults to 1
    check("LSTM", layer.inputs(rng, ("B",)), attrs)


def test_a_two_direction_list_on_one_direction_uses_its_first_half(rng):
    layer = Layer("RNN")
    attrs = layer.attrs(activations=["Relu", "Sigmoid"])
    got = check("RNN", layer.inputs(rng, ("B",)), attrs)
    assert (got[0] >= 0).all()  # Relu ran, not Sigmoid or Tanh
    assert (got[0] > 1).any()


# -- blocks, threads, and what is left to the fallback ---------------------------------------


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("op", list(GATES))
def test_projection_in_blocks_of_time_steps(rng, monkeypatch, op, layout):
    layer = Layer(op, seq=11, batch=3, hidden=4, direction="bidirectional", layout=layout)
    # 3 rows x G*4 gates: blocks of 2 time steps, the last one a single step
    monkeypatch.setattr(rnn_kernels, "MAX_PROJECTION_FLOATS", 2 * 3 * GATES[op] * 4 + 1)
    inputs = layer.inputs(rng, ("B", "sequence_lens", "initial_h"), [11, 4, 7])
    model, _ = compile_layer(op, inputs, layer.attrs())
    (step,) = model.plan.steps
    assert np.frombuffer(step.attrs[: 11 * 8], dtype=np.int64)[9] == 2  # `block`
    check(op, inputs, layer.attrs())


@pytest.mark.parametrize("op", list(GATES))
def test_large_enough_for_the_thread_pool(rng, op):
    layer = Layer(op, seq=5, batch=33, input=40, hidden=96, direction="bidirectional")
    check(op, layer.inputs(rng, ("B", "sequence_lens", "initial_h", "P")), layer.attrs())
    layer = Layer(op, seq=3, batch=64, input=24, hidden=160, layout=1)
    check(op, layer.inputs(rng, ("B",)), layer.attrs())
    # at most 16 rows: the kernel's own tiles for the step's product, split over the pool
    layer = Layer(op, seq=3, batch=16, input=8, hidden=300, direction="reverse")
    check(op, layer.inputs(rng, ("B", "initial_h")), layer.attrs())


@pytest.mark.parametrize("batch", [3, 20])  # the kernel's tiles, the BLAS
def test_threads_running_one_model_keep_their_scratch_apart(rng, batch):
    """Lengths, projections, states and runtime-packed R live in each run's own arena: 6
    threads running one model (R a graph input) on different inputs get their own answers."""
    layer = Layer("GRU", seq=6, batch=batch, hidden=20, direction="bidirectional")
    runs = [layer.inputs(rng, ("B", "sequence_lens", "initial_h")) for _ in range(6)]
    for run in runs:
        run[1] = runs[0][1]  # W is the model's constant
    model, _ = compile_layer("GRU", runs[0], layer.attrs(), consts=(1,))
    names = [f"x{i}" for i, a in enumerate(runs[0]) if a is not None and i != 1]
    feeds = [dict(zip(names, [a for i, a in enumerate(r) if a is not None and i != 1]))
             for r in runs]
    expected = [reference("GRU", r, layer.attrs()) for r in runs]
    results: list = [None] * len(runs)

    def work(i):
        for _ in range(10):
            results[i] = model.run(feeds[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, **TOLERANCE)


def test_portable_tiles_give_the_same_bits():
    """The step's product runs in AVX-512 tiles where the CPU has them and in portable
    loops elsewhere (or with GE_HUB_GEMM_KERNEL=generic, read once per process, hence the
    subprocesses): same products, same order, so the same bits."""
    script = textwrap.dedent("""
        import sys
        import numpy as np, ge_hub
        from ge_hub import es
        rng = np.random.default_rng(5)
        for op, gates, attrs in [("LSTM", 4, {}), ("GRU", 3, {}),
                                 ("GRU", 3, {"linear_before_reset": 1}), ("RNN", 1, {})]:
            for batch, hidden in [(1, 70), (4, 64), (7, 13), (16, 33)]:
                x = rng.standard_normal((5, batch, 6)).astype(np.float32)
                w = rng.uniform(-0.4, 0.4, (2, gates * hidden, 6)).astype(np.float32)
                r = rng.uniform(-0.2, 0.2, (2, gates * hidden, hidden)).astype(np.float32)
                with es.GraphBuilder("g") as gb:
                    y = es.op(op, es.input("x", "float32", list(x.shape)), es.const(w),
                              es.const(r), hidden_size=hidden, direction="bidirectional",
                              outputs=1, **attrs)
                    es.output(y, "y")
                sys.stdout.write(ge_hub.compile(gb.graph).run([x])[0].tobytes().hex())
    """)
    outputs = []
    for micro_kernel in ("", "generic"):
        env = dict(os.environ, GE_HUB_GEMM_KERNEL=micro_kernel)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] and outputs[0] == outputs[1]


@pytest.mark.parametrize("op", list(GATES))
def test_float64_falls_back_counted(rng, op):
    layer = Layer(op, dtype=np.float64, direction="bidirectional")
    inputs = layer.inputs(rng, ("B", "initial_h"))
    model, feeds = compile_layer(op, inputs, layer.attrs())
    assert model.summary()["fallback_ops"] == {op: 1}
    for got, want in zip(model.run(feeds), reference(op, inputs, layer.attrs())):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_sequence_length_past_the_sequence_is_an_error(rng):
    layer = Layer("GRU", seq=4, batch=3)
    inputs = layer.inputs(rng, ("sequence_lens",), [4, 2, 1])
    model, feeds = compile_layer("GRU", inputs, layer.attrs(), consts=(1, 2))
    model.run(feeds)
    for bad in ([4, 5, 1], [0, -1, 2]):
        feeds["x4"] = np.asarray(bad, dtype=np.int32)
        with pytest.raises(KernelError, match=r"sequence_lens\[1\]"):
            model.run(feeds)


def test_a_truncated_or_padded_blob_is_an_error_not_a_crash(rng):
    layer = Layer("LSTM")
    inputs = layer.inputs(rng, ())
    model, feeds = compile_layer("LSTM", inputs, layer.attrs())
    plan = model.plan
    (step,) = plan.steps
    for blob in (step.attrs[:-8], step.attrs + bytes(8), b""):
        bad = dataclasses.replace(plan, steps=(dataclasses.replace(step, attrs=blob),))
        with pytest.raises(KernelError, match="attribute blob"):
            Executor(bad).run([inputs[0]])
