"""Every element type end to end: DType and NumPy, the plan's dtype codes and attribute
encoding, data carried through a compiled graph by the C executor, and Cast in a compiled
graph between the new dtypes and float32/int64: the unsigned and the 4- and 2-bit integers
against Python's own integer arithmetic, the float8 and float4 types against ml_dtypes."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.ir.dtypes import (
    ALL_TYPES,
    FLOAT8_TYPES,
    INTEGER_TYPES,
    NARROW_TYPES,
    UNSIGNED_INTEGER_TYPES,
    DType,
)
from ge_hub.plan import DTYPE_CODES, decode_py_attrs, encode_py_attrs

ALL_DTYPES = [d.value for d in DType]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
FLOAT8 = sorted(d.value for d in FLOAT8_TYPES)
SMALL_INTS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def sample(rng, dtype: str, shape) -> np.ndarray:
    """Random values of `dtype` covering its whole range (its extremes included)."""
    numpy_type = DType.parse(dtype).numpy
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.issubdtype(numpy_type, np.integer):
        info = np.iinfo(numpy_type)
        data = rng.integers(info.min, info.max, size=shape, dtype=numpy_type, endpoint=True)
        flat = data.reshape(-1)
        flat[:2] = [info.min, info.max][: flat.size]
        return data
    return rng.uniform(-100, 100, size=shape).astype(numpy_type)


# -- DType ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtype_round_trips_through_numpy_and_its_name(dtype):
    d = DType(dtype)
    assert DType.from_numpy(d.numpy) is d
    assert DType.parse(dtype) is d and DType.parse(d) is d and DType.parse(d.numpy) is d
    assert d.itemsize == d.numpy.itemsize
    assert str(d) == dtype


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_integers_are_integers_without_a_sign(dtype):
    d = DType(dtype)
    assert d.is_integer and not d.is_signed and not d.is_float
    assert d in UNSIGNED_INTEGER_TYPES and d in INTEGER_TYPES
    assert d.numpy == np.dtype(dtype)


@pytest.mark.parametrize("dtype", [*FLOAT8, "float8_e8m0fnu"])
def test_float8_types_are_narrow_floats_of_one_byte(dtype):
    d = DType(dtype)
    assert d.is_float and d.is_narrow and not d.is_integer and d.itemsize == 1
    assert d.is_signed == (d is not DType.FLOAT8_E8M0FNU)
    assert d.numpy == np.dtype(getattr(ml_dtypes, dtype))


@pytest.mark.parametrize("dtype", [*SMALL_INTS, "float4_e2m1fn"])
def test_four_and_two_bit_types_are_narrow_and_take_a_byte_each(dtype):
    d = DType(dtype)
    assert d.is_narrow and d.itemsize == 1
    assert d.is_integer == (dtype in SMALL_INTS) and d.is_float == (dtype not in SMALL_INTS)
    assert d.is_signed == (dtype in ("int4", "int2", "float4_e2m1fn"))
    assert d.numpy == np.dtype(getattr(ml_dtypes, dtype))


def test_narrow_types_are_in_no_compute_set():
    from ge_hub.ops.schema import FLOATS, INTEGERS, NUMERIC

    assert not NARROW_TYPES & (FLOATS | INTEGERS | NUMERIC)


def test_unknown_dtype_names_are_rejected_with_the_known_ones():
    with pytest.raises(TypeError, match="unknown dtype 'uint128'.*uint64"):
        DType.parse("uint128")


# -- the plan ------------------------------------------------------------------------------


def test_every_dtype_has_one_plan_code():
    assert set(DTYPE_CODES) == ALL_TYPES
    assert sorted(DTYPE_CODES.values()) == list(range(len(DTYPE_CODES)))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_tensor_attributes_survive_plan_encoding(rng, dtype):
    tensor = sample(rng, dtype, (2, 3))
    back = decode_py_attrs(encode_py_attrs({"table": tensor, "to": DType(dtype)}))
    assert back["to"] is DType(dtype)
    assert back["table"].dtype == tensor.dtype and back["table"].shape == tensor.shape
    assert back["table"].tobytes() == tensor.tobytes()


# -- the executor --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_a_compiled_graph_carries_every_dtype_in_and_out(rng, dtype):
    with es.GraphBuilder("carry") as gb:
        x = es.input("x", dtype, [2, 6])
        gb.output(es.identity(x), "same")
        gb.output(es.reshape(x, np.array([3, 4], np.int64)), "reshaped")
        gb.output(es.cast(x, to=dtype), "cast")
    model = ge_hub.compile(gb.graph)
    x = sample(rng, dtype, (2, 6))
    same, reshaped, cast = model.run({"x": x})
    for got, shape in ((same, (2, 6)), (reshaped, (3, 4)), (cast, (2, 6))):
        assert got.dtype == x.dtype and got.shape == shape
        assert got.tobytes() == x.tobytes()


# -- Cast between the unsigned integers and float32 / int64 ---------------------------------


def run_cast(x: np.ndarray, to: str) -> np.ndarray:
    """Cast x to `to` in a compiled graph (the C kernel), checking it ran there."""
    with es.GraphBuilder("cast") as gb:
        gb.output(es.cast(es.input("x", DType.from_numpy(x.dtype), list(x.shape)), to=to), "y")
    model = ge_hub.compile(gb.graph)
    assert [step.kernel for step in model.plan.steps] == ["cast"]
    return model.run({"x": x})[0]


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_cast_from_int64_to_unsigned_keeps_the_low_bits(rng, dtype):
    x = sample(rng, "int64", 64)
    x[:4] = [-1, 2**32 + 5, -(2**63), 300]
    bits = np.iinfo(dtype).bits
    want = [int(v) % 2**bits for v in x]
    np.testing.assert_array_equal(run_cast(x, dtype), np.array(want, dtype))


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_cast_from_unsigned_to_int64_wraps_only_above_int64(rng, dtype):
    x = sample(rng, dtype, 64)
    want = [int(v) - 2**64 if int(v) >= 2**63 else int(v) for v in x]
    np.testing.assert_array_equal(run_cast(x, "int64"), np.array(want, np.int64))


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_cast_from_float32_to_unsigned_truncates_and_saturates(rng, dtype):
    top = 2**np.iinfo(dtype).bits - 1
    x = np.concatenate([rng.uniform(0, min(top, 2**24), 40).astype(np.float32),
                        np.array([-0.9, -1.0, -5e9, 0.99, np.nan, np.inf, -np.inf, 3e38,
                                  float(top) * 2], np.float32)])
    want = []
    for v in x.astype(np.float64):
        if np.isnan(v):
            want.append(0)
        else:
            whole = int(v) if np.isfinite(v) else (top + 1 if v > 0 else -1)
            want.append(min(max(whole, 0), top))
    np.testing.assert_array_equal(run_cast(x, dtype), np.array(want, dtype))


def float32_of(n: int) -> float:
    """The non-negative integer n rounded once to float32's 24 significant bits, halves to
    even, with integer arithmetic only."""
    drop = max(n.bit_length() - 24, 0)
    kept, rest = divmod(n, 2**drop)
    half = 2**drop // 2
    if drop and (rest > half or (rest == half and kept % 2)):
        kept += 1
    return float(kept * 2**drop)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_cast_from_unsigned_to_float32_rounds_once(rng, dtype):
    x = sample(rng, dtype, 64)
    x[2:4] = [np.iinfo(dtype).max // 3, 2**(np.iinfo(dtype).bits - 1) + 1]
    want = np.array([float32_of(int(v)) for v in x], np.float32)
    np.testing.assert_array_equal(run_cast(x, "float32"), want)


def test_cast_from_uint64_to_float_handles_the_top_bit():
    # 2**63 + 2**39 + 1 is just above a float32 tie; through float64 (which rounds it onto
    # the tie) it would round to even, 2**63: the cast must round once, up.
    x = np.array([2**63, 2**64 - 1, 2**63 + 2**39, 2**63 + 2**39 + 1, 2**53 + 1], np.uint64)
    np.testing.assert_array_equal(run_cast(x, "float64"),
                                  [2.0**63, 2.0**64, 2.0**63 + 2.0**39, 2.0**63 + 2.0**39, 2.0**53])
    np.testing.assert_array_equal(
        run_cast(x, "float32"),
        np.array([2.0**63, 2.0**64, 2.0**63, 2.0**63 + 2.0**40, 2.0**53], np.float32))
    np.testing.assert_array_equal(run_cast(x, "int8"), [0, -1, 0, 1, 1])


# -- Cast between the float8 types and float32 / int64 --------------------------------------


def run_graph(build, feeds: dict) -> tuple[list, list[str]]:
    """Compile the graph `build(inputs...)` makes and run it; also return its kernels."""
    with es.GraphBuilder("g") as gb:
        inputs = [es.input(name, DType.from_numpy(x.dtype), list(x.shape))
                  for name, x in feeds.items()]
        for k, output in enumerate(build(*inputs)):
            gb.output(output, f"y{k}")
    model = ge_hub.compile(gb.graph)
    return model.run(feeds), [step.kernel for step in model.plan.steps]


def float8_of(x: np.ndarray, dtype: str) -> np.ndarray:
    """ml_dtypes' rounding after ONNX's default saturation to the largest finite value."""
    largest = float(ml_dtypes.finfo(DType(dtype).numpy).max)
    return np.clip(x.astype(np.float64), -largest, largest).astype(np.float32).astype(
        DType(dtype).numpy)


@pytest.mark.parametrize("dtype", FLOAT8)
def test_cast_float8_from_and_to_float32_and_int64(rng, dtype):
    x = rng.uniform(-1000, 1000, 64).astype(np.float32)
    n = rng.integers(-100000, 100000, 64)
    (y, back, whole, from_int), kernels = run_graph(
        lambda x, n: [es.cast(x, to=dtype), es.cast(es.cast(x, to=dtype), to="float32"),
                      es.cast(es.cast(x, to=dtype), to="int64"), es.cast(n, to=dtype)],
        {"x": x, "n": n})
    want = float8_of(x, dtype)
    assert y.tobytes() == want.tobytes()
    np.testing.assert_array_equal(back, want.astype(np.float32))
    np.testing.assert_array_equal(whole, np.trunc(want.astype(np.float64)).astype(np.int64))
    assert from_int.tobytes() == float8_of(n, dtype).tobytes()
    assert "cast" not in kernels  # the C kernel does not claim float8: reference fallback


def test_cast_e8m0_from_and_to_float32_and_int64(rng):
    x = np.exp2(rng.uniform(-20, 20, 64)).astype(np.float32)
    (y, back, whole), _ = run_graph(
        lambda x: [es.cast(x, to="float8_e8m0fnu"),
                   es.cast(es.cast(x, to="float8_e8m0fnu"), to="float32"),
                   es.cast(es.cast(x, to="float8_e8m0fnu"), to="int64")], {"x": x})
    # round_mode "up": the power of two at or above each value.
    powers = [2.0 ** math.ceil(math.log2(v)) for v in x.astype(np.float64)]
    np.testing.assert_array_equal(y.astype(np.float64), powers)
    np.testing.assert_array_equal(back, np.array(powers, np.float32))
    np.testing.assert_array_equal(whole, np.trunc(powers).astype(np.int64))


# -- Cast between the 4- and 2-bit types and float32 / int64 --------------------------------


@pytest.mark.parametrize("dtype", sorted(SMALL_INTS))
def test_cast_small_integers_from_and_to_float32_and_int64(rng, dtype):
    bits, signed = SMALL_INTS[dtype]

    def wrapped(value: int) -> int:
        low = value % 2**bits
        return low - 2**bits if signed and low >= 2 ** (bits - 1) else low

    n = rng.integers(-1000, 1000, 64)
    x = rng.uniform(-20, 20, 64).astype(np.float32)
    (y, back, whole, from_float), _ = run_graph(
        lambda n, x: [es.cast(n, to=dtype), es.cast(es.cast(n, to=dtype), to="float32"),
                      es.cast(es.cast(n, to=dtype), to="int64"), es.cast(x, to=dtype)],
        {"n": n, "x": x})
    want = [wrapped(int(v)) for v in n]
    # One element per byte, in its low bits (what kernel.h promises C kernels).
    assert y.dtype == DType(dtype).numpy and (y.view(np.uint8) < 2**bits).all()
    np.testing.assert_array_equal(y.astype(np.int64), want)
    np.testing.assert_array_equal(back, np.array(want, np.float32))
    np.testing.assert_array_equal(whole, want)
    np.testing.assert_array_equal(from_float.astype(np.int64),
                                  [wrapped(int(v)) for v in x])  # int() truncates


def test_cast_float4_from_and_to_float32_and_int64(rng):
    x = rng.uniform(-8, 8, 64).astype(np.float32)
    n = rng.integers(-8, 8, 64)
    (y, back, whole, from_int), _ = run_graph(
        lambda x, n: [es.cast(x, to="float4_e2m1fn"),
                      es.cast(es.cast(x, to="float4_e2m1fn"), to="float32"),
                      es.cast(es.cast(x, to="float4_e2m1fn"), to="int64"),
                      es.cast(n, to="float4_e2m1fn")], {"x": x, "n": n})
    want = x.astype(ml_dtypes.float4_e2m1fn)
    assert y.tobytes() == want.tobytes()
    np.testing.assert_array_equal(back, want.astype(np.float32))
    np.testing.assert_array_equal(whole, np.trunc(want.astype(np.float64)).astype(np.int64))
    assert from_int.tobytes() == n.astype(np.float32).astype(ml_dtypes.float4_e2m1fn).tobytes()


# -- the CLI's random feeds ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_random_feeds_are_finite_values_of_every_dtype(rng, dtype):
    from ge_hub.commands.feeds import random_array

    x = random_array(rng, DType(dtype), (50,))
    assert x.dtype == DType(dtype).numpy and x.shape == (50,)
    if DType(dtype).is_float:
        with np.errstate(invalid="ignore"):
            assert np.isfinite(x.astype(np.float64)).all()
