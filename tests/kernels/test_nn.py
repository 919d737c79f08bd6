"""The nn family's C kernels (core/kernels/nn_matmul.c, nn_softmax.c: MatMul, Gemm,
Softmax, LogSoftmax) against their ops' NumPy references, and small graphs across the
float32 families: in-place normalizations, a small CNN, threads sharing a model, and
malformed attribute blobs, which must be an error, not a crash (truncated or padded here;
each value replaced by an edge value in test_blob_edges.py).
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.reference import evaluate

from .nn_cases import SUMMED, check, compile_op, random_array, with_specials

# -- MatMul ---------------------------------------------------------------------------------

MATMUL_SHAPES = {
    "2d": [(3, 5), (5, 7)],
    "vector_left": [(5,), (5, 7)],
    "vector_right": [(3, 5), (5,)],
    "dot": [(9,), (9,)],
    "batched": [(2, 3, 5), (2, 5, 7)],
    "shared_b_folds": [(4, 3, 5), (5, 7)],
    "shared_a": [(3, 5), (4, 5, 7)],
    "both_sides": [(2, 1, 3, 5), (1, 4, 5, 7)],
    "middle": [(2, 3, 3, 5), (3, 5, 7)],
    "rank_mismatch": [(3, 1, 3, 5), (4, 5, 2)],
    "vector_batched": [(5,), (2, 5, 3)],
    "batched_vector": [(2, 3, 5), (5,)],
    "many_small": [(65, 7, 9), (65, 9, 5)],
    "large": [(67, 131), (131, 69)],
}


@pytest.mark.parametrize("case", MATMUL_SHAPES)
def test_matmul(rng, case):
    a_shape, b_shape = MATMUL_SHAPES[case]
    check("MatMul", [random_array(rng, a_shape), random_array(rng, b_shape)], tol=SUMMED)


def test_matmul_with_constant_weights_and_specials(rng):
    a = with_specials(random_array(rng, (2, 4, 6)), rng)
    check("MatMul", [a, random_array(rng, (6, 3))], consts=(1,), tol=SUMMED)


# -- Gemm -----------------------------------------------------------------------------------

GEMM_C_SHAPES = {"none": None, "scalar": (), "row": (7,), "row_2d": (1, 7), "column": (5, 1),
                 "full": (5, 7), "one": (1, 1)}


@pytest.mark.parametrize("c_shape", GEMM_C_SHAPES)
@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(rng, c_shape, trans_a, trans_b):
    m, k, n = 5, 11, 7
    a = random_array(rng, (k, m) if trans_a else (m, k))
    b = random_array(rng, (n, k) if trans_b else (k, n))
    shape = GEMM_C_SHAPES[c_shape]
    inputs = [a, b] if shape is None else [a, b, random_array(rng, shape)]
    attrs = dict(alpha=0.75, beta=-1.5, transA=trans_a, transB=trans_b)
    check("Gemm", inputs, attrs, consts=(1, 2), tol=SUMMED)


def test_gemm_defaults_and_nan_in_c(rng):
    c = with_specials(random_array(rng, (4, 6)), rng, count=1)
    check("Gemm", [random_array(rng, (4, 9)), random_array(rng, (9, 6)), c], tol=SUMMED)
    # beta 0 still reads C: 0 * NaN is NaN in the reference too.
    check("Gemm", [random_array(rng, (4, 9)), random_array(rng, (9, 6)), c], {"beta": 0.0},
          tol=SUMMED)


# -- Softmax --------------------------------------------------------------------------------

SOFTMAX_CASES = {
    "last": ((3, 5, 7), -1),
    "middle": ((3, 5, 7), 1),
    "first": ((6, 4, 3), 0),
    "vector": ((11,), 0),
    "long_rows": ((4, 2049), 1),
    "many_middle_blocks": ((40, 33, 50), 1),
}


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("case", SOFTMAX_CASES)
def test_softmax(rng, op, case):
    shape, axis = SOFTMAX_CASES[case]
    # A wide range: the stable form matters (exp(30) alone overflows nothing, exp(90) would).
    check(op, [random_array(rng, shape, -90.0, 90.0)], {"axis": axis})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_nan_and_infinities(rng, op, axis):
    x = random_array(rng, (2, 5, 6))
    x[0, 1, 2] = np.nan
    x[1, 2, 3] = np.inf
    x[1, 3, 1] = -np.inf
    x[0, :, 5] = -np.inf  # a whole row of -inf (along axis 1) is NaN too
    check(op, [x], {"axis": axis})


# -- graphs that write in place ------------------------------------------------------------


def test_in_place_normalizations_keep_values_still_in_use(rng):
    """Softmax, LogSoftmax, LayerNormalization, BatchNormalization and
    InstanceNormalization write over their input when it dies there; a value still read
    later (h) must survive, and the in-place chain (g) must still be right."""
    x = random_array(rng, (2, 4, 5, 6))
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", [2, 4, 5, 6])
        h = es.matmul(xin, es.const(random_array(rng, (6, 6))))
        s = es.softmax(h, axis=1)           # h is read again at the end: not in place
        n = es.layer_normalization(s, es.const(random_array(rng, (6,))))
        n = n[0] if isinstance(n, tuple) else n
        stats = [es.const(random_array(rng, (4,))) for _ in range(3)]
        b = es.batch_normalization(n, *stats, es.const(np.ones(4, np.float32)))
        i = es.instance_normalization(b, es.const(random_array(rng, (4,))),
                                      es.const(random_array(rng, (4,))))
        ls = es.log_softmax(i, axis=-1)
        g = es.matmul(xin, es.const(random_array(rng, (6, 6))))
        g = es.softmax(g, axis=2)           # dies here: in place, middle axis
        g = es.layer_normalization(g, es.const(random_array(rng, (5, 6))), axis=2)
        g = g[0] if isinstance(g, tuple) else g
        g = es.log_softmax(g, axis=1)
        gb.output(ls + h + g, "y")
        gb.output(s, "s")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0
    plan = model.plan
    in_place = {step.op for step in plan.steps
                if plan.tensors[step.outputs[0]] == dataclasses.replace(
                    plan.tensors[step.inputs[0]], name=plan.tensors[step.outputs[0]].name)}
    assert {"Softmax", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
            "LogSoftmax"} <= in_place, in_place
    got = model.run({"x": x})
    want = evaluate(gb.graph, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_small_cnn_matches_the_reference(rng):
    """Conv, BatchNormalization (folded or not), pools, Gemm and Softmax in one graph."""
    x = random_array(rng, (2, 3, 16, 15))
    with es.GraphBuilder("cnn") as gb:
        xin = es.input("x", "float32", [2, 3, 16, 15])
        h = es.conv(xin, es.const(random_array(rng, (8, 3, 3, 3)) * 0.3),
                    es.const(random_array(rng, (8,))), pads=[1, 1, 1, 1], strides=[2, 2])
        h = es.batch_normalization(
            h, es.const(random_array(rng, (8,))), es.const(random_array(rng, (8,))),
            es.const(random_array(rng, (8,))), es.const(np.full(8, 2.0, np.float32)))
        pooled = es.max_pool(h, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        if isinstance(pooled, tuple):
            pooled = pooled[0]
        d = es.conv(pooled, es.const(random_array(rng, (8, 1, 3, 3))), group=8,
                    pads=[1, 1, 1, 1])
        p = es.conv(d, es.const(random_array(rng, (6, 8, 1, 1))))
        g = es.flatten(es.global_average_pool(p))
        logits = es.gemm(g, es.const(random_array(rng, (6, 4))), es.const(random_array(rng, (4,))))
        gb.output(es.softmax(logits), "probs")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0, model.summary()
    np.testing.assert_allclose(model.run({"x": x})[0], evaluate(gb.graph, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)


def test_threads_running_one_model_keep_their_scratch_apart(rng):
    """Scratch (im2col columns, Winograd buffers, Softmax slots) lives in each run's own
    arena: 8 threads running one model on different inputs all get their own answers."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 16, 16, 17])
        h = es.conv(x, es.const(random_array(rng, (16, 16, 3, 3)) * 0.2), pads=[1, 1, 1, 1])
        h = es.conv(h, es.const(random_array(rng, (8, 16, 3, 3)) * 0.2), strides=[2, 2])
        gb.output(es.softmax(h, axis=1), "y")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0
    inputs = [random_array(rng, (1, 16, 16, 17)) for _ in range(8)]
    expected = [evaluate(gb.graph, {"x": x})[0] for x in inputs]
    results: list = [None] * len(inputs)

    def work(i):
        for _ in range(20):
            results[i] = model.run({"x": inputs[i]})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# -- malformed blobs --------------------------------------------------------------------------


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Conv", [(1, 3, 7, 9), (4, 3, 3, 3)], dict(pads=[1, 1, 1, 1])),
    ("MatMul", [(2, 3, 5), (5, 4)], {}),
    ("MaxPool", [(1, 3, 7, 9)], dict(kernel_shape=[3, 3])),
    ("Softmax", [(3, 5, 7)], dict(axis=1)),
    ("Resize", [(1, 2, 3, 4), None, (4,)], dict(mode="linear")),
])
def test_a_truncated_or_padded_blob_is_an_error_not_a_crash(rng, op, inputs, attrs):
    arrays = [None if s is None else random_array(rng, s) for s in inputs]
    if op == "Resize":
        arrays[2] = np.array([1, 1, 2, 2], np.float32)
    model, feeds = compile_op(op, arrays, attrs, consts=(2,))
    plan = model.plan
    step = next(s for s in plan.steps if s.op == op)
    for attrs_blob in (step.attrs[:-8], step.attrs + bytes(8), b""):
        bad = dataclasses.replace(step, attrs=attrs_blob)
        executor = Executor(dataclasses.replace(plan, steps=(bad,)))
        with pytest.raises(KernelError, match="attribute blob"):
            executor.run([feeds[name] for name in plan.input_names])

