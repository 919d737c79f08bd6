"""The activation C kernels (core/kernels/activation.c, activation_cast.c) against their
ops' NumPy references.

Each case builds a one-op graph with ES, compiles it, checks that the step runs the
family's C kernel (named in the plan, so no fallback), and compares the result with the
op's reference on random non-zero data of odd shapes, on NaN, infinities, signed zeros
and values far out in the tails, and on a tensor large enough to be split over the
thread pool. Unary ops do not broadcast; Clip's bounds are one-element tensors, tested
as rank 0 and as shape [1], as constants and as graph inputs read at run time. Cast is
checked for all 100 (source, target) pairs. Small graphs chain the kernels so that the
memory plan writes in place under values that are read again later.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.compiler import compile_plan
from ge_hub.executor import Executor, KernelError
from ge_hub.ir.dtypes import DType
from ge_hub.ops import get_schema
from ge_hub.passes.select_kernels import choose_kernel, is_fallback
from ge_hub.reference import evaluate

EXACT = dict(rtol=1e-5, atol=1e-6)
# Odd sizes; more than the C side's grains (16384 cheap, 4096 libm), so split in chunks.
SHAPE = (3, 5, 7)
LARGE = (5, 4099)

# NaN, infinities, signed zeros, halves (rounding), the edges of float32 exp, tails.
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0,
                     88.5, -88.5, 100.0, -100.0, 1e30, -1e30, 3e-39, -3e-39, 8388607.5,
                     -8388609.0], dtype=np.float32)


def random_array(rng, shape, dtype="float32", low=-3.0, high=3.0):
    """Random non-zero data of a float or integer dtype."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.integer):
        data = rng.integers(int(low), int(high) + 1, size=shape)
        data[data == 0] = 1
        return data.astype(dtype)
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


def compile_op(op, inputs, attrs=None, *, consts=()):
    """A compiled one-node graph: input i is a graph input, a constant (i in `consts`)
    or omitted (None). Returns (model, feeds)."""
    feeds = {}
    with es.GraphBuilder("g") as gb:
        args = []
        for i, array in enumerate(inputs):
            if array is None:
                args.append(None)
            elif i in consts:
                args.append(es.const(array))
            else:
                feeds[f"x{i}"] = array
                args.append(es.input(f"x{i}", DType.from_numpy(array.dtype).value,
                                     list(array.shape)))
        result = es.op(op, *args, **dict(attrs or {}))
        gb.output(result[0] if isinstance(result, tuple) else result, "y")
    return ge_hub.compile(gb.graph), feeds


def check(op, inputs, attrs=None, *, kernel, consts=(), tol=EXACT):
    """Run `op` through the C kernel named `kernel` and compare with the reference."""
    model, feeds = compile_op(op, inputs, attrs, consts=consts)
    assert model.summary()["fallback_steps"] == 0, model.summary()
    assert [step.kernel for step in model.plan.steps] == [kernel]
    (got,) = model.run(feeds)
    with np.errstate(all="ignore"):  # NaN and inf cases
        (want,) = get_schema(op).run_reference(inputs, dict(attrs or {}))
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    else:
        np.testing.assert_array_equal(got, want)
    return got


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# -- float32 ops --------------------------------------------------------------------------------

# op -> (C kernel, attributes, range of the random data). The ranges cover each op's
# domain and some of what lies outside (NaN there, as in the reference).
FLOAT_OPS = {
    "Neg": ("neg_f32", {}, (-3, 3)),
    "Abs": ("abs_f32", {}, (-3, 3)),
    "Sign": ("sign_f32", {}, (-3, 3)),
    "Floor": ("floor_f32", {}, (-5, 5)),
    "Ceil": ("ceil_f32", {}, (-5, 5)),
    "Round": ("round_f32", {}, (-5, 5)),
    "Exp": ("exp_f32", {}, (-10, 10)),
    "Log": ("log_f32", {}, (-1, 10)),
    "Sqrt": ("sqrt_f32", {}, (-1, 10)),
    "Reciprocal": ("reciprocal_f32", {}, (-3, 3)),
    "Erf": ("erf_f32", {}, (-3, 3)),
    "Sin": ("sin_f32", {}, (-7, 7)),
    "Cos": ("cos_f32", {}, (-7, 7)),
    "Tan": ("tan_f32", {}, (-1.5, 1.5)),
    "Asin": ("asin_f32", {}, (-1.2, 1.2)),
    "Acos": ("acos_f32", {}, (-1.2, 1.2)),
    "Atan": ("atan_f32", {}, (-5, 5)),
    "Sinh": ("sinh_f32", {}, (-5, 5)),
    "Cosh": ("cosh_f32", {}, (-5, 5)),
    "Tanh": ("tanh_f32", {}, (-5, 5)),
    "Asinh": ("asinh_f32", {}, (-5, 5)),
    "Acosh": ("acosh_f32", {}, (0.5, 5)),
    "Atanh": ("atanh_f32", {}, (-1.2, 1.2)),
    "Relu": ("relu_f32", {}, (-3, 3)),
    "Sigmoid": ("sigmoid_f32", {}, (-20, 20)),
    "LeakyRelu": ("leaky_relu_f32", {"alpha": 0.15}, (-3, 3)),
    "ThresholdedRelu": ("thresholded_relu_f32", {"alpha": 0.7}, (-3, 3)),
    "Elu": ("elu_f32", {"alpha": 0.6}, (-5, 5)),
    "Selu": ("selu_f32", {"alpha": 1.5, "gamma": 0.8}, (-5, 5)),
    "Celu": ("celu_f32", {"alpha": 1.7}, (-5, 5)),
    "Gelu": ("gelu_f32", {}, (-5, 5)),
    "Softplus": ("softplus_f32", {}, (-20, 20)),
    "Softsign": ("softsign_f32", {}, (-5, 5)),
    "Mish": ("mish_f32", {}, (-20, 20)),
    "HardSigmoid": ("hard_sigmoid_f32", {"alpha": 0.3, "beta": 0.4}, (-5, 5)),
    "HardSwish": ("hard_swish_f32", {}, (-5, 5)),
}


@pytest.mark.parametrize("op", FLOAT_OPS)
def test_float_op_on_random_data(rng, op):
    kernel, attrs, (low, high) = FLOAT_OPS[op]
    check(op, [random_array(rng, SHAPE, low=low, high=high)], attrs, kernel=kernel)


@pytest.mark.parametrize("op", FLOAT_OPS)
def test_float_op_on_nan_inf_zeros_and_tails(op):
    kernel, attrs, _ = FLOAT_OPS[op]
    check(op, [SPECIALS], attrs, kernel=kernel)


@pytest.mark.parametrize("op", ["Relu", "Exp", "Gelu", "Cast"])
def test_large_tensors_split_over_the_pool(rng, op):
    x = random_array(rng, LARGE)
    if op == "Cast":
        check(op, [x], {"to": "float16"}, kernel="cast")
    else:
        check(op, [x], FLOAT_OPS[op][1], kernel=FLOAT_OPS[op][0])


def test_default_attributes_are_packed(rng):
    x = random_array(rng, SHAPE, low=-4, high=4)
    for op in ("LeakyRelu", "ThresholdedRelu", "Elu", "Selu", "Celu", "HardSigmoid"):
        check(op, [x], {}, kernel=FLOAT_OPS[op][0])


def test_celu_with_negative_alpha(rng):
    check("Celu", [random_array(rng, SHAPE, low=-4, high=4)], {"alpha": -0.8},
          kernel="celu_f32")


@pytest.mark.parametrize("approximate, kernel", [("none", "gelu_f32"),
                                                 ("tanh", "gelu_tanh_f32")])
def test_gelu_modes(rng, approximate, kernel):
    x = np.concatenate([random_array(rng, (37,), low=-6, high=6), SPECIALS])
    check("Gelu", [x], {"approximate": approximate}, kernel=kernel)


def test_gelu_keeps_precision_in_the_negative_tail():
    # x * Phi(x) is tiny but not zero here; the reference's 1 + erf cancels to 0, the
    # kernel computes erfc. Compare with the exact value, a sum over the tail of Phi.
    x = np.array([-9.0, -7.5, -6.0], dtype=np.float32)
    model, feeds = compile_op("Gelu", [x])
    (got,) = model.run(feeds)
    # Phi(x) ~ pdf(x) / |x| * (1 - 1/x^2 + 3/x^4 - 15/x^6): accurate to 1e-4 here.
    w = x.astype(np.float64)
    pdf = np.exp(-w * w / 2) / np.sqrt(2 * np.pi)
    phi = pdf / -w * (1 - 1 / w**2 + 3 / w**4 - 15 / w**6 + 105 / w**8)
    np.testing.assert_allclose(got, w * phi, rtol=1e-4)


def test_sigmoid_of_large_magnitudes_does_not_overflow():
    x = np.array([-1e30, -100.0, -50.0, 50.0, 100.0, 1e30], dtype=np.float32)
    model, feeds = compile_op("Sigmoid", [x])
    (got,) = model.run(feeds)
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got[[0, 5]], [0.0, 1.0])
    assert 0 < got[2] < 1e-21  # exp(-50) = 1.9e-22: kept, not flushed to zero


def test_rounding_halves_to_even_and_keeps_signed_zeros():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.4, 0.4, 8388607.5, -0.0],
                 dtype=np.float32)
    for op, kernel in (("Round", "round_f32"), ("Floor", "floor_f32"), ("Ceil", "ceil_f32")):
        got = check(op, [x], kernel=kernel)
        want = get_schema(op).run_reference([x], {})[0]
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


# -- integer ops --------------------------------------------------------------------------------

INT_OPS = ("Neg", "Abs", "Sign", "Relu")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", INT_OPS)
def test_integer_op(rng, op, dtype):
    info = np.iinfo(dtype)
    x = random_array(rng, SHAPE, dtype, low=-1000, high=1000)
    extremes = np.array([info.min, info.min + 1, info.max, -1, 1, 0], dtype=dtype)
    kernel = f"{op.lower()}_i{dtype[3:]}"
    check(op, [x], kernel=kernel)
    got = check(op, [extremes], kernel=kernel)
    if op in ("Neg", "Abs"):
        assert got[0] == info.min  # wraps, as the reference says


def test_integer_relu_on_a_large_tensor(rng):
    check("Relu", [random_array(rng, LARGE, "int64", low=-50, high=50)], kernel="relu_i64")


# -- IsNaN, IsInf ---------------------------------------------------------------------------------


def test_isnan(rng):
    x = np.concatenate([random_array(rng, (41,)), SPECIALS])
    got = check("IsNaN", [x], kernel="isnan_f32")
    assert got.sum() == 1


@pytest.mark.parametrize("detect_negative, detect_positive", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf(rng, detect_negative, detect_positive):
    x = np.concatenate([random_array(rng, (41,)), SPECIALS])
    got = check("IsInf", [x], dict(detect_negative=detect_negative,
                                   detect_positive=detect_positive), kernel="isinf_f32")
    assert got.sum() == detect_negative + detect_positive


# -- Clip ---------------------------------------------------------------------------------------

CLIP_KERNELS = {"float32": "clip_f32", "int32": "clip_i32", "int64": "clip_i64"}


@pytest.mark.parametrize("dtype", CLIP_KERNELS)
@pytest.mark.parametrize("bounds", ["both", "min_only", "max_only", "none", "crossed"])
@pytest.mark.parametrize("bound_shape", [(), (1,)])
def test_clip(rng, dtype, bounds, bound_shape):
    x = random_array(rng, SHAPE, dtype, low=-9, high=9)
    low, high = {"both": (-2, 3), "min_only": (-2, None), "max_only": (None, 3),
                 "none": (None, None), "crossed": (3, -2)}[bounds]
    inputs = [x] + [None if b is None else np.full(bound_shape, b, dtype) for b in (low, high)]
    while inputs[-1] is None and len(inputs) > 1:
        inputs.pop()
    check("Clip", inputs, kernel=CLIP_KERNELS[dtype], consts=(1, 2))


def test_clip_reads_bounds_given_as_graph_inputs_at_run_time(rng):
    x = random_array(rng, LARGE, low=-9, high=9)
    model, _ = compile_op("Clip", [x, np.float32(0), np.float32(0)])
    assert [step.kernel for step in model.plan.steps] == ["clip_f32"]
    for low, high in [(-1.0, 2.0), (0.5, 4.0), (3.0, -3.0)]:
        feeds = {"x0": x, "x1": np.float32(low), "x2": np.float32(high)}
        (got,) = model.run(feeds)
        np.testing.assert_array_equal(got, np.minimum(np.maximum(x, low), high))


def test_clip_propagates_nan(rng):
    x = np.concatenate([random_array(rng, (9,), low=-5, high=5), SPECIALS])
    check("Clip", [x, np.float32(-1), np.float32(1)], kernel="clip_f32", consts=(1, 2))
    # A NaN bound makes every element NaN, as np.maximum does.
    for bounds in ([np.float32(np.nan), np.float32(1)], [np.float32(-1), np.float32(np.nan)]):
        got = check("Clip", [x, *bounds], kernel="clip_f32", consts=(1, 2))
        assert np.isnan(got).all()


def test_clip_on_integer_extremes():
    x = np.array([np.iinfo(np.int64).min, -5, 5, np.iinfo(np.int64).max], dtype=np.int64)
    check("Clip", [x], kernel="clip_i64")
    check("Clip", [x, np.int64(-3), np.int64(4)], kernel="clip_i64", consts=(1, 2))


# -- Cast ---------------------------------------------------------------------------------------

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
          "bool", "uint16", "uint32", "uint64"]


def cast_source(rng, dtype: str) -> np.ndarray:
    """Random non-zero values, the dtype's extremes, and for floats the special values,
    halves, and values just beyond the integer types' ranges."""
    numpy_type = DType.parse(dtype).numpy
    if dtype == "bool":
        return rng.random(23) < 0.5
    if np.issubdtype(numpy_type, np.integer):
        info = np.iinfo(numpy_type)
        data = rng.integers(info.min, info.max, size=51, dtype=numpy_type, endpoint=True)
        data[data == 0] = 1
        edges = [info.min, info.max, 1, 2, 255, 256, 300, -1, -129, 65519, 65520, 2**24 + 1,
                 65535, 65536, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1]
        edges = [e for e in edges if info.min <= e <= info.max]
        return np.concatenate([data, np.array(edges, dtype=numpy_type)])
    edges = [0.0, -0.0, np.nan, np.inf, -np.inf, 0.5, -0.5, 1.5, -1.5, 2.5, -0.99, 127.5, 128.0,
             -128.5, -129.0, 255.9, 256.0, -1.0, 32767.5, 32768.0, -32769.0, 65504.0, 65519.0,
             65520.0, 2.0**31, -2.0**31 - 1, 2.0**63, -2.0**64, 1e-8, 2.0**-25, 3.0 * 2.0**-26,
             1e30, -1e30, 1.00390625, 1.01171875, 65535.5, 65536.0, 2.0**32 - 0.5, 2.0**32,
             2.0**63 + 2.0**11, 2.0**64 - 2.0**11, 2.0**64, 1.9e19]
    data = np.concatenate([rng.uniform(-400, 400, 41), rng.uniform(-70000, 70000, 20),
                           np.exp(rng.uniform(-60, 60, 20)), edges])
    data[data == 0] = 0.25
    data[-len(edges):] = edges
    with np.errstate(over="ignore"):
        return data.astype(numpy_type)


def assert_same_values(got, want):
    """Equal dtypes and values; floats bit for bit (signed zeros too), any NaN for NaN."""
    assert got.dtype == want.dtype
    if DType.from_numpy(got.dtype).is_float:
        with np.errstate(invalid="ignore"):  # ml_dtypes warns on widening a NaN
            got64, want64 = got.astype(np.float64), want.astype(np.float64)
        same = (got64 == want64) & (np.signbit(got64) == np.signbit(want64))
        same |= np.isnan(got64) & np.isnan(want64)
        assert same.all(), (got[~same], want[~same])
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", DTYPES)
@pytest.mark.parametrize("source", DTYPES)
def test_cast(rng, source, target):
    x = cast_source(rng, source)
    model, feeds = compile_op("Cast", [x], {"to": target})
    assert [step.kernel for step in model.plan.steps] == ["cast"]
    (got,) = model.run(feeds)
    with np.errstate(all="ignore"):
        (want,) = get_schema("Cast").run_reference([x], {"to": target})
    assert_same_values(got, want)


@pytest.mark.parametrize("source", ["float16", "bfloat16"])
def test_cast_from_every_half_precision_value(source):
    x = np.arange(1 << 16, dtype=np.uint16).view(DType.parse(source).numpy)
    for target in ("float32", "int32", "float16", "bfloat16"):
        model, feeds = compile_op("Cast", [x], {"to": target})
        (got,) = model.run(feeds)
        with np.errstate(all="ignore"):
            (want,) = get_schema("Cast").run_reference([x], {"to": target})
        assert_same_values(got, want)


def test_cast_rounds_to_half_precision_once(rng):
    # float64 values next to half and bfloat16 ties: rounding through float32 would
    # land on the tie and round to even instead of away from it.
    ties = np.array([1.0 + 2.0**-11, 1.0 + 2.0**-8], dtype=np.float64)
    x = np.concatenate([ties + 2.0**-40, ties - 2.0**-40, -ties - 2.0**-40,
                        rng.uniform(-1e5, 1e5, 37)])
    got16 = check("Cast", [x], {"to": "float16"}, kernel="cast")
    gotbf = check("Cast", [x], {"to": "bfloat16"}, kernel="cast")
    assert got16[0] == np.float16(1.0 + 2.0**-10) and got16[2] == np.float16(1.0)
    assert gotbf[1] == ml_dtypes.bfloat16(1.0 + 2.0**-7) and gotbf[3] == 1.0


def test_cast_like_uses_the_cast_kernel(rng):
    x = random_array(rng, SHAPE, low=-300, high=300)
    target = np.zeros(2, dtype=np.int8)
    model, feeds = compile_op("CastLike", [x, target])
    assert [step.kernel for step in model.plan.steps] == ["cast_like"]
    (got,) = model.run(feeds)
    np.testing.assert_array_equal(got, get_schema("CastLike").run_reference([x, target], {})[0])


# -- kernel choice ------------------------------------------------------------------------------


@pytest.mark.parametrize("op, dtype", [("Relu", "float64"), ("Abs", "int8"), ("Exp", "float16"),
                                       ("Clip", "uint8"), ("Sigmoid", "bfloat16")])
def test_dtypes_without_a_kernel_fall_back_and_are_counted(op, dtype):
    with es.GraphBuilder("g") as gb:
        gb.output(es.op(op, es.input("x", dtype, list(SHAPE))), "y")
    (node,) = gb.graph.nodes
    assert is_fallback(choose_kernel(node))
    plan = compile_plan(gb.graph, {"x": list(SHAPE)})
    assert [step.kernel for step in plan.steps] == [f"reference:{op}"]


# -- in place -----------------------------------------------------------------------------------


def test_chain_with_in_place_writes_keeps_values_still_in_use(rng):
    x = random_array(rng, (7, 9))
    with es.GraphBuilder("chain") as gb:
        xi = es.input("x", "float32", [7, 9])
        a = es.exp(xi)           # read again at the end, after b and c
        b = es.neg(a)            # may take a's buffer only if a were dead: it is not
        c = es.tanh(es.sigmoid(b))
        d = es.relu(es.clip(c, es.const(np.float32(-0.5)), es.const(np.float32(0.4))))
        e = es.mul(a, d)         # a, whose buffer the planner must not have reused
        gb.output(es.leaky_relu(e, alpha=0.3), "y")
        gb.output(es.abs(b), "b_abs")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0
    for got, want in zip(model.run({"x": x}), evaluate(gb.graph, {"x": x})):
        np.testing.assert_allclose(got, want, **EXACT)


def test_chain_writes_in_place_where_it_may(rng):
    x = random_array(rng, (33, 65))
    with es.GraphBuilder("in_place") as gb:
        xi = es.input("x", "float32", [33, 65])
        h = es.add(xi, xi)
        for op in (es.relu, es.sigmoid, es.neg, es.exp, es.sqrt, es.hard_swish, es.softsign):
            h = op(h)
        gb.output(h, "y")
    model = ge_hub.compile(gb.graph)
    summary = model.summary()
    assert summary["fallback_steps"] == 0
    # One buffer for the chain (the output is written straight into the result array).
    assert summary["arena_bytes"] <= x.nbytes + 64
    np.testing.assert_allclose(model.run({"x": x})[0], evaluate(gb.graph, {"x": x})[0], **EXACT)


# -- malformed blobs ----------------------------------------------------------------------------


@pytest.mark.parametrize("op, attrs", [("LeakyRelu", {"alpha": 0.2}), ("Selu", {}),
                                       ("IsInf", {}), ("Relu", {}), ("Clip", {}),
                                       ("Cast", {"to": "int32"})])
def test_a_truncated_or_padded_blob_is_an_error_not_a_crash(rng, op, attrs):
    x = random_array(rng, SHAPE)
    model, feeds = compile_op(op, [x], attrs)
    plan = model.plan
    (step,) = plan.steps
    for blob in {step.attrs[:-8], step.attrs + bytes(8), b""} - {step.attrs}:
        executor = Executor(dataclasses.replace(plan, steps=(dataclasses.replace(step,
                                                                                 attrs=blob),)))
        with pytest.raises(KernelError, match="attribute blob"):
            executor.run([feeds["x0"]])
