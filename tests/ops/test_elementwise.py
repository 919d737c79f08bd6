"""Elementwise ops: inference (concrete, symbolic, unknown rank), references checked
against an independent computation with Python scalars (Python ints for the bitwise
ops), broadcasting, dtypes, bad input."""

from __future__ import annotations

import math
import operator
from fractions import Fraction

import numpy as np
import pytest
from conftest import infer as infer_types
from conftest import random_array, run_op, tt

from ge_hub.errors import IntegerDivisionByZeroError, OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema

FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES

# (shape of A, shape of B): same shape, B broadcast, A broadcast, both broadcast, scalars.
BROADCAST_PAIRS = [
    ((3, 4, 5), (3, 4, 5)),
    ((3, 4, 5), (5,)),
    ((1, 5), (3, 4, 5)),
    ((3, 1, 5), (4, 1)),
    ((), (2, 3)),
    ((7,), ()),
]

RTOL = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-2}


def np_dtype(name: str) -> np.dtype:
    return DType(name).numpy


def rand(rng, shape, dtype, low=-3.0, high=3.0):
    return random_array(rng, shape, np_dtype(dtype), low, high)


def python_values(array: np.ndarray) -> list:
    """Elements as Python scalars: float for every float dtype, int, or bool."""
    if DType.from_numpy(array.dtype).is_float:
        return array.astype(np.float64).ravel().tolist()
    return array.ravel().tolist()


def wrap(value: int, dtype: np.dtype) -> int:
    """Two's-complement wraparound of a Python int into an integer dtype."""
    bits = dtype.itemsize * 8
    value %= 1 << bits
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def oracle(fn, out_dtype, *arrays) -> np.ndarray:
    """fn applied to every tuple of broadcast elements, as Python scalars."""
    arrays = [np.asarray(a) for a in arrays]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    columns = [python_values(a) for a in np.broadcast_arrays(*arrays)]
    values = [fn(*args) for args in zip(*columns)]
    out_dtype = np.dtype(out_dtype)
    if out_dtype.kind in "iu":
        data = np.array([wrap(int(v), out_dtype) for v in values], dtype=np.int64)
    elif out_dtype == np.bool_:
        data = np.array(values, dtype=np.bool_)
    else:
        data = np.array(values, dtype=np.float64)
    return data.astype(out_dtype).reshape(shape)


def assert_matches(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    name = DType.from_numpy(got.dtype).value
    if name in RTOL:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=RTOL[name], atol=0, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def infer(op_name, *types, node_name=None, **attrs):
    schema = get_schema(op_name)
    return schema.infer_types(list(types), attrs, node_name=node_name)


def trunc_div(a, b):
    return math.trunc(Fraction(a, b))


# --- inference ----------------------------------------------------------------------

BINARY_OPS = [  # (op, dtype it accepts, attrs, output dtype or None for the input's)
    ("Add", "float32", {}, None),
    ("Sub", "int32", {}, None),
    ("Mul", "float16", {}, None),
    ("Div", "int64", {}, None),
    ("Pow", "float32", {}, None),
    ("Mod", "int8", {}, None),
    ("Equal", "bool", {}, "bool"),
    ("Less", "float64", {}, "bool"),
    ("LessOrEqual", "int16", {}, "bool"),
    ("Greater", "bfloat16", {}, "bool"),
    ("GreaterOrEqual", "uint8", {}, "bool"),
    ("And", "bool", {}, "bool"),
    ("Or", "bool", {}, "bool"),
    ("Xor", "bool", {}, "bool"),
    ("BitShift", "uint8", {"direction": "LEFT"}, None),
    ("Max", "int32", {}, None),
    ("Min", "float32", {}, None),
    ("Sum", "float64", {}, None),
    ("Mean", "float16", {}, None),
]


@pytest.mark.parametrize("op_name, dtype, attrs, out_dtype", BINARY_OPS)
def test_binary_inference_concrete_symbolic_and_unknown_rank(op_name, dtype, attrs, out_dtype):
    out_dtype = out_dtype or dtype
    (t,) = infer(op_name, TensorType(dtype, (3, 1, 5)), TensorType(dtype, (4, 1)), **attrs)
    assert t == TensorType(out_dtype, (3, 4, 5))

    (t,) = infer(op_name, TensorType(dtype, ("N", 1, 5)), TensorType(dtype, ("C", 1)), **attrs)
    assert t == TensorType(out_dtype, ("N", "C", 5))

    # A symbol against a concrete dim > 1 takes the concrete dim.
    (t,) = infer(op_name, TensorType(dtype, ("N", 7)), TensorType(dtype, (3, 1)), **attrs)
    assert t == TensorType(out_dtype, (3, 7))

    # Two different symbols broadcast to a fresh one; the same symbol stays.
    (t,) = infer(op_name, TensorType(dtype, ("N",)), TensorType(dtype, ("M",)), **attrs)
    assert t.rank == 1 and isinstance(t.shape[0], Sym) and t.shape[0] not in (Sym("N"), Sym("M"))
    (t,) = infer(op_name, TensorType(dtype, ("N", 2)), TensorType(dtype, ("N", 2)), **attrs)
    assert t == TensorType(out_dtype, ("N", 2))

    (t,) = infer(op_name, TensorType(dtype, None), TensorType(dtype, (4,)), **attrs)
    assert t == TensorType(out_dtype, None)


@pytest.mark.parametrize("op_name", ["Max", "Min", "Sum", "Mean"])
def test_variadic_inference_broadcasts_all_inputs(op_name):
    types = [TensorType("float32", s) for s in [("B", 1, 1), (1, 6, 1), (5,), (1,)]]
    assert infer(op_name, *types) == [TensorType("float32", ("B", 6, 5))]
    assert infer(op_name, TensorType("float32", (2, "S"))) == [TensorType("float32", (2, "S"))]


def test_not_inference_keeps_shape():
    assert infer("Not", TensorType("bool", ("N", 3))) == [TensorType("bool", ("N", 3))]
    assert infer("Not", TensorType("bool", None)) == [TensorType("bool", None)]


def test_pow_output_has_base_dtype():
    (t,) = infer("Pow", TensorType("float16", ("N", 3)), TensorType("int64", (3,)))
    assert t == TensorType("float16", ("N", 3))
    (t,) = infer("Pow", TensorType("int32", (2, 1)), TensorType("float64", (1, 4)))
    assert t == TensorType("int32", (2, 4))


def test_where_inference_broadcasts_condition_and_both_branches():
    (t,) = infer("Where", TensorType("bool", ("N", 1, 1)), TensorType("int8", (4, 1)),
                 TensorType("int8", (5,)))
    assert t == TensorType("int8", ("N", 4, 5))
    (t,) = infer("Where", TensorType("bool", (3,)), TensorType("float32", None),
                 TensorType("float32", (3,)))
    assert t == TensorType("float32", None)


# --- arithmetic references ----------------------------------------------------------


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op_name, fn", [("Add", operator.add), ("Sub", operator.sub),
                                         ("Mul", operator.mul)])
def test_add_sub_mul_match_python(rng, op_name, fn, dtype, shapes):
    a, b = rand(rng, shapes[0], dtype, -9, 9), rand(rng, shapes[1], dtype, -9, 9)
    (c,) = run_op(op_name, [a, b])
    assert_matches(c, oracle(fn, a.dtype, a, b))


def test_integer_arithmetic_wraps_like_c():
    a = np.array([127, -128, 100, 50], np.int8)
    b = np.array([1, 1, 3, -3], np.int8)
    np.testing.assert_array_equal(run_op("Add", [a, b])[0], [-128, -127, 103, 47])
    np.testing.assert_array_equal(run_op("Sub", [a, b])[0], [126, 127, 97, 53])
    np.testing.assert_array_equal(run_op("Mul", [a, b])[0], [127, -128, 44, 106])
    u = np.array([250, 3], np.uint8)
    np.testing.assert_array_equal(run_op("Add", [u, np.uint8(10)])[0], [4, 13])
    np.testing.assert_array_equal(run_op("Sub", [u, np.uint8(10)])[0], [240, 249])


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_div_matches_python(rng, dtype, shapes):
    a, b = rand(rng, shapes[0], dtype), rand(rng, shapes[1], dtype)
    (c,) = run_op("Div", [a, b])
    assert_matches(c, oracle(operator.truediv, a.dtype, a, b))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_div_truncates_toward_zero(rng, dtype, shapes):
    a, b = rand(rng, shapes[0], dtype, -50, 50), rand(rng, shapes[1], dtype, -7, 7)
    (c,) = run_op("Div", [a, b])
    assert_matches(c, oracle(trunc_div, a.dtype, a, b))


def test_div_hand_cases():
    a = np.array([7, -7, 7, -7, 6, -128], np.int8)
    b = np.array([2, 2, -2, -2, 3, -1], np.int8)
    # -128 / -1 overflows int8; like two's-complement C it wraps back to -128.
    np.testing.assert_array_equal(run_op("Div", [a, b])[0], [3, -3, -3, 3, 2, -128])
    x = np.array([1.0, -1.0, 0.0], np.float32)
    got = run_op("Div", [x, np.float32(0)])[0]
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


def test_integer_div_and_mod_by_zero_raise():
    a, b = np.array([1, 2], np.int32), np.array([1, 0], np.int32)
    with pytest.raises(ZeroDivisionError, match="Div.*'B'"):
        run_op("Div", [a, b])
    for fmod in (0, 1):
        with pytest.raises(ZeroDivisionError, match="Mod.*'B'"):
            run_op("Mod", [a, b], {"fmod": fmod})
    # a ge-hub error too (fuzz finding: folding a Mod by a constant 0 leaked a bare
    # ZeroDivisionError from compile)
    with pytest.raises(IntegerDivisionByZeroError):
        run_op("Mod", [a, b])
    assert issubclass(IntegerDivisionByZeroError, OpError)


# --- Pow ------------------------------------------------------------------------------


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("base_dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("exponent_dtype", ["float32", "float64", "float16"])
def test_pow_float_base_float_exponent(rng, base_dtype, exponent_dtype, shapes):
    x = rand(rng, shapes[0], base_dtype, 0.2, 3)
    y = rand(rng, shapes[1], exponent_dtype, -2.5, 2.5)
    (z,) = run_op("Pow", [x, y])
    assert_matches(z, oracle(math.pow, x.dtype, x, y))


@pytest.mark.parametrize("base_dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("exponent_dtype", INT_DTYPES)
def test_pow_float_base_integer_exponent_allows_negative_base(rng, base_dtype, exponent_dtype):
    x = rand(rng, (3, 1, 5), base_dtype)
    y = rand(rng, (4, 1), exponent_dtype, -4, 4)
    (z,) = run_op("Pow", [x, y])
    assert_matches(z, oracle(lambda a, e: a ** e, x.dtype, x, y))


def int_power(a: int, e: int) -> int:
    return a ** e if e >= 0 else math.trunc(Fraction(1, a ** -e))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("base_dtype", ["int32", "int64"])
@pytest.mark.parametrize("exponent_dtype", INT_DTYPES)
def test_pow_integer_is_exact_and_wraps(rng, base_dtype, exponent_dtype, shapes):
    x = rand(rng, shapes[0], base_dtype, -9, 9)
    y = rand(rng, shapes[1], exponent_dtype, -3, 30)
    (z,) = run_op("Pow", [x, y])
    assert_matches(z, oracle(int_power, x.dtype, x, y))


def test_pow_integer_base_float_exponent_truncates(rng):
    x = rand(rng, (2, 5), "int32", 1, 50)
    y = rand(rng, (5,), "float32", 0.1, 2.5)
    (z,) = run_op("Pow", [x, y])
    assert_matches(z, oracle(lambda a, e: math.trunc(math.pow(a, e)), x.dtype, x, y))


def test_pow_hand_cases():
    # From the ONNX spec example, plus negative exponents of integers.
    x = np.array([1, 2, 3], np.int64)
    np.testing.assert_array_equal(run_op("Pow", [x, np.array([4, 5, 6], np.int64)])[0],
                                  [1, 32, 729])
    x = np.array([1, -1, -1, 2, -3], np.int32)
    np.testing.assert_array_equal(run_op("Pow", [x, np.array([-3, -3, -2, -1, -1], np.int8)])[0],
                                  [1, -1, 1, 0, 0])
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    np.testing.assert_array_equal(run_op("Pow", [x, np.array([1, 2, 3], np.float32)])[0],
                                  [[1, 4, 27], [4, 25, 216]])


def test_pow_integer_errors_name_the_inputs():
    with pytest.raises(ZeroDivisionError, match="'X'.*negative"):
        run_op("Pow", [np.array([0, 2], np.int32), np.array([-1, 1], np.int32)])
    with pytest.raises(ValueError, match="Pow.*'X'.*'Y'"):
        run_op("Pow", [np.array([-8], np.int32), np.array([0.5], np.float32)])


# --- Mod ------------------------------------------------------------------------------


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("fmod, fn", [(0, operator.mod), (1, lambda a, b: int(math.fmod(a, b)))])
def test_integer_mod_both_sign_conventions(rng, dtype, fmod, fn, shapes):
    a, b = rand(rng, shapes[0], dtype, -50, 50), rand(rng, shapes[1], dtype, -7, 7)
    (c,) = run_op("Mod", [a, b], {"fmod": fmod})
    assert_matches(c, oracle(fn, a.dtype, a, b))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_mod_is_c_fmod(rng, dtype, shapes):
    a, b = rand(rng, shapes[0], dtype, -20, 20), rand(rng, shapes[1], dtype)
    (c,) = run_op("Mod", [a, b], {"fmod": 1})
    assert_matches(c, oracle(math.fmod, a.dtype, a, b))


def test_mod_hand_cases_from_onnx_spec():
    x = np.array([-4, 7, 5, 4, -7, 8], np.int64)
    y = np.array([2, -3, 8, -2, 3, 5], np.int64)
    np.testing.assert_array_equal(run_op("Mod", [x, y])[0], [0, -2, 5, 0, 2, 3])
    np.testing.assert_array_equal(run_op("Mod", [x, y], {"fmod": 1})[0], [0, 1, 5, 0, -1, 3])
    x = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0], np.float64)
    y = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0], np.float64)
    np.testing.assert_allclose(run_op("Mod", [x, y], {"fmod": 1})[0],
                               [-0.1, 0.4, 5.0, 0.1, -0.4, 3.0], rtol=1e-9)


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_mod_fmod_0_is_floor_modulo(rng, dtype, shapes):
    a, b = rand(rng, shapes[0], dtype, -20, 20), rand(rng, shapes[1], dtype)
    (c,) = run_op("Mod", [a, b], {"fmod": 0})
    # Python's float % takes the sign of the divisor, like ONNX's fmod=0.
    assert_matches(c, oracle(operator.mod, a.dtype, a, b))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_mod_fmod_0_edge_cases_from_onnx_spec(dtype):
    inf, nan = math.inf, math.nan
    x = np.array([0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, inf, -inf, 1.0, 1.0, nan, 1.0],
                 dtype)
    y = np.array([-2.0, 2.0, 2.0, -2.0, inf, inf, -inf, -inf, 2.0, 2.0, 0.0, -0.0, 2.0, nan],
                 dtype)
    (c,) = run_op("Mod", [x, y], {"fmod": 0})
    assert c.dtype == np.dtype(dtype)
    # A zero result takes the divisor's sign; x mod +-inf is x when the signs agree, else
    # +-inf; inf mod y, x mod 0 and anything with NaN are NaN.
    np.testing.assert_array_equal(np.signbit(c[:4]), [True, False, False, True])
    np.testing.assert_array_equal(c[:8], [0, 0, 0, 0, inf, 3.0, -1.0, -inf])
    assert np.isnan(c[8:]).all()


def test_float_mod_fmod_0_hand_cases_from_onnx_spec():
    x = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0], np.float64)
    y = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0], np.float64)
    np.testing.assert_allclose(run_op("Mod", [x, y], {"fmod": 0})[0],
                               [2.0, -3.0, 5.0, -2.0, 3.0, 3.0], rtol=1e-9)


def test_mod_attribute_errors():
    with pytest.raises(OpError, match=r"Mod \(node 'm1'\).*'fmod' must be 0 or 1, got 2"):
        infer("Mod", TensorType("int32", (3,)), TensorType("int32", (3,)), node_name="m1",
              fmod=2)
    # Calling the reference directly checks the same thing.
    with pytest.raises(OpError, match="Mod: attribute 'fmod' must be 0 or 1, got -1"):
        get_schema("Mod")(np.ones(2, np.float32), np.ones(2, np.float32), fmod=-1)


# --- variadic -------------------------------------------------------------------------

VARIADIC_SHAPES = [[(3, 5)], [(3, 1, 5), (4, 1)], [(2, 1, 1), (1, 3, 1), (5,)],
                   [(), (7,), (2, 7), (1, 1)]]


@pytest.mark.parametrize("shapes", VARIADIC_SHAPES)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op_name, fn", [("Max", max), ("Min", min)])
def test_max_min_variadic(rng, op_name, fn, dtype, shapes):
    inputs = [rand(rng, s, dtype, -9, 9) for s in shapes]
    (out,) = run_op(op_name, inputs)
    assert_matches(out, oracle(lambda *v: fn(v), inputs[0].dtype, *inputs))


@pytest.mark.parametrize("op_name", ["Max", "Min"])
def test_max_min_propagate_nan(op_name):
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 3.0], np.float32)
    out = run_op(op_name, [a, b, np.float32(1.5)])[0]
    assert np.isnan(out[0]) and np.isnan(out[1])
    assert out[2] == (3.0 if op_name == "Max" else 1.5)


@pytest.mark.parametrize("shapes", VARIADIC_SHAPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sum_and_mean_variadic(rng, dtype, shapes):
    inputs = [rand(rng, s, dtype) for s in shapes]
    (total,) = run_op("Sum", inputs)
    assert_matches(total, oracle(lambda *v: math.fsum(v), inputs[0].dtype, *inputs))
    (average,) = run_op("Mean", inputs)
    assert_matches(average, oracle(lambda *v: math.fsum(v) / len(v), inputs[0].dtype, *inputs))


def test_mean_hand_case():
    out = run_op("Mean", [np.array([3.0, 0.0], np.float32), np.array([1.0, 3.0], np.float32),
                          np.array([2.0, 6.0], np.float32)])[0]
    np.testing.assert_array_equal(out, [2.0, 3.0])


# --- comparison and logic ---------------------------------------------------------------

COMPARISONS = [("Equal", operator.eq), ("Less", operator.lt), ("LessOrEqual", operator.le),
               ("Greater", operator.gt), ("GreaterOrEqual", operator.ge)]


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op_name, fn", COMPARISONS)
def test_comparisons_match_python(rng, op_name, fn, dtype, shapes):
    # Few distinct values, so that ties are common.
    a, b = rand(rng, shapes[0], dtype, -2, 2), rand(rng, shapes[1], dtype, -2, 2)
    if a.dtype.kind == "f" or a.dtype == np_dtype("bfloat16"):
        a, b = np.round(a.astype(np.float32)).astype(a.dtype), np.round(
            b.astype(np.float32)).astype(b.dtype)
    (c,) = run_op(op_name, [a, b])
    assert_matches(c, oracle(fn, np.bool_, a, b))


@pytest.mark.parametrize("op_name, fn", COMPARISONS[1:])
def test_comparisons_with_nan_are_false(op_name, fn):
    a = np.array([np.nan, 1.0], np.float64)
    np.testing.assert_array_equal(run_op(op_name, [a, np.float64(np.nan)])[0], [False, False])
    assert not run_op("Equal", [a, a])[0][0]


def test_equal_on_bool(rng):
    a, b = rand(rng, (3, 1, 5), "bool"), rand(rng, (4, 1), "bool")
    assert_matches(run_op("Equal", [a, b])[0], oracle(operator.eq, np.bool_, a, b))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("op_name, fn", [("And", operator.and_), ("Or", operator.or_),
                                         ("Xor", operator.xor)])
def test_logic_ops_match_python(rng, op_name, fn, shapes):
    a, b = rand(rng, shapes[0], "bool"), rand(rng, shapes[1], "bool")
    (c,) = run_op(op_name, [a, b])
    assert_matches(c, oracle(fn, np.bool_, a, b))


@pytest.mark.parametrize("shape", [(), (7,), (3, 1, 5)])
def test_not(rng, shape):
    x = rand(rng, shape, "bool")
    assert_matches(run_op("Not", [x])[0], oracle(operator.not_, np.bool_, x))


# --- Where and BitShift -------------------------------------------------------------------

WHERE_SHAPES = [((3, 4, 5), (3, 4, 5), (3, 4, 5)), ((3, 1, 1), (4, 1), (5,)),
                ((5,), (3, 4, 5), (1, 5)), ((4, 1), (1,), (3, 4, 7)), ((), (2, 3), ())]


@pytest.mark.parametrize("shapes", WHERE_SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "int64", "uint8", "bool"])
def test_where_broadcasts_all_three(rng, dtype, shapes):
    condition = rand(rng, shapes[0], "bool")
    x, y = rand(rng, shapes[1], dtype), rand(rng, shapes[2], dtype)
    (out,) = run_op("Where", [condition, x, y])
    assert_matches(out, oracle(lambda c, a, b: a if c else b, x.dtype, condition, x, y))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("direction, fn", [("LEFT", lambda a, s: (a << s) & 0xFF),
                                           ("RIGHT", operator.rshift)])
def test_bit_shift_matches_python(rng, direction, fn, shapes):
    x = rand(rng, shapes[0], "uint8", 1, 255)
    y = rand(rng, shapes[1], "uint8", 0, 10)  # includes shifts by 8 or more
    (z,) = run_op("BitShift", [x, y], {"direction": direction})
    assert_matches(z, oracle(fn, np.uint8, x, y))


def test_bit_shift_hand_cases_from_onnx_spec():
    x = np.array([16, 4, 1], np.uint8)
    y = np.array([1, 2, 3], np.uint8)
    np.testing.assert_array_equal(run_op("BitShift", [x, y], {"direction": "RIGHT"})[0], [8, 1, 0])
    np.testing.assert_array_equal(run_op("BitShift", [x, y], {"direction": "LEFT"})[0], [32, 16, 8])


def signed_shift(direction, bits):
    """ONNX opset-28 BitShift on Python ints: arithmetic right shift; a negative shift or
    one by the bit width or more leaves only the sign fill."""
    def shift(a, s):
        if not 0 <= s < bits:
            return -1 if direction == "RIGHT" and a < 0 else 0
        return a << s if direction == "LEFT" else a >> s  # oracle() wraps the left shift
    return shift


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_signed_bit_shift_matches_python(rng, dtype, direction, shapes):
    bits = np_dtype(dtype).itemsize * 8
    x = rand(rng, shapes[0], dtype, -100, 100)
    y = rand(rng, shapes[1], dtype, -3, bits + 3)  # negative, in range and too wide shifts
    (z,) = run_op("BitShift", [x, y], {"direction": direction})
    assert_matches(z, oracle(signed_shift(direction, bits), x.dtype, x, y))


@pytest.mark.parametrize("direction, x, y, z", [
    ("RIGHT", [-8, -1, -128], [1, 1, 1], [-4, -1, -64]),
    ("LEFT", [64, 1, -64], [1, 7, 1], [-128, -128, -128]),
    ("RIGHT", [-8, 4, -1], [8, 9, 127], [-1, 0, -1]),
    ("LEFT", [-8, 4, -1], [8, 9, 127], [0, 0, 0]),
    ("RIGHT", [-8, 4, -1], [-1, -8, -16], [-1, 0, -1]),
    ("LEFT", [-8, 4, -1], [-1, -8, -16], [0, 0, 0]),
])
def test_signed_bit_shift_hand_cases_from_onnx_spec(direction, x, y, z):
    (got,) = run_op("BitShift", [np.array(x, np.int8), np.array(y, np.int8)],
                    {"direction": direction})
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, z)


# --- bad input ------------------------------------------------------------------------------

F32 = TensorType("float32", (3,))
I32 = TensorType("int32", (3,))
BOOL3 = TensorType("bool", (3,))


@pytest.mark.parametrize("op_name, types, attrs, message", [
    ("Add", [F32, I32], {}, r"Add \(node 'n'\): input 'B' must have the same dtype as 'A' "
                            r"\(float32\), got int32"),
    ("Sub", [BOOL3, BOOL3], {}, r"input 'A' must have dtype in \{.*\}, got bool"),
    ("Mul", [F32, TensorType("float32", (4,))], {}, r"cannot be broadcast \(dim 0: 3 vs 4\)"),
    ("Div", [F32], {}, r"expected 2 to 2 inputs \(A, B\), got 1"),
    ("Add", [F32, F32], {"alpha": 1.0}, r"unknown attribute 'alpha'"),
    ("Pow", [TensorType("int8", (3,)), I32], {}, r"input 'X' must have dtype in .*, got int8"),
    ("Pow", [F32, BOOL3], {}, r"input 'Y' must have dtype in .*, got bool"),
    ("Max", [], {}, r"expected 1 to any number of inputs"),
    ("Min", [F32, F32, I32], {}, r"input 'data_0\[2\]' must have the same dtype as 'data_0'"),
    ("Sum", [I32, I32], {}, r"input 'data_0' must have dtype in .*, got int32"),
    ("Mean", [TensorType("float16", (3,)), F32], {}, r"'data_0\[1\]'.*\(float16\), got float32"),
    ("Less", [BOOL3, BOOL3], {}, r"input 'A' must have dtype in .*, got bool"),
    ("Equal", [BOOL3, F32], {}, r"input 'B' must have the same dtype as 'A' \(bool\)"),
    ("And", [F32, F32], {}, r"input 'A' must have dtype in \{bool\}, got float32"),
    ("Not", [I32], {}, r"input 'X' must have dtype in \{bool\}, got int32"),
    ("Where", [F32, F32, F32], {}, r"input 'condition' must have dtype in \{bool\}"),
    ("Where", [BOOL3, F32, I32], {}, r"input 'Y' must have the same dtype as 'X' \(float32\)"),
    ("Where", [BOOL3, F32, TensorType("float32", (2,))], {}, r"cannot be broadcast"),
    ("BitShift", [TensorType("uint8", (3,))] * 2, {}, r"attribute 'direction' \(string\) is "
                                                       r"required"),
    ("BitShift", [TensorType("uint8", (3,))] * 2, {"direction": "UP"},
     r"attribute 'direction' must be 'LEFT' or 'RIGHT', got 'UP'"),
    ("BitShift", [F32, F32], {"direction": "LEFT"}, r"input 'X' must have dtype in \{.*\}, "
                                                     r"got float32"),
    ("BitShift", [I32, TensorType("int8", (3,))], {"direction": "LEFT"},
     r"input 'Y' must have the same dtype as 'X' \(int32\), got int8"),
    ("Mod", [F32, F32], {"fmod": 1.5}, r"attribute 'fmod' must be an int, got 1.5"),
])
def test_bad_input_names_the_culprit(op_name, types, attrs, message):
    with pytest.raises(OpError, match=message) as info:
        get_schema(op_name).infer_types(types, attrs, node_name="n")
    assert op_name in str(info.value)


def test_bit_shift_reference_rejects_bad_direction():
    x = np.array([1], np.uint8)
    with pytest.raises(OpError, match="BitShift.*'direction'.*got 'left'"):
        get_schema("BitShift")(x, x, direction="left")


# --- bitwise ----------------------------------------------------------------------------

T = Sym("T")
N = Sym("N")


BITWISE = {"BitwiseAnd": operator.and_, "BitwiseOr": operator.or_,
           "BitwiseXor": operator.xor}


@pytest.mark.parametrize("op", list(BITWISE))
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_binary_matches_python_ints(rng, op, dtype):
    a = random_array(rng, (3, 1, 5), dtype, low=-120, high=120)
    b = random_array(rng, (4, 5), dtype, low=-120, high=120)
    (out,) = run_op(op, [a, b])
    wide_a, wide_b = np.broadcast_arrays(a, b)
    expected = [BITWISE[op](int(p), int(q)) for p, q in zip(wide_a.ravel(), wide_b.ravel())]
    assert out.shape == (3, 4, 5)
    assert out.ravel().tolist() == expected


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_not_flips_every_bit(rng, dtype):
    x = random_array(rng, (2, 3, 4), dtype, low=-100, high=100)
    (out,) = run_op("BitwiseNot", [x])
    bits = np.dtype(dtype).itemsize * 8
    # Flipping every bit is subtracting from all-ones, read back in the dtype's range.
    expected = [wrap((1 << bits) - 1 - (int(v) % (1 << bits)), np.dtype(dtype)) for v in x.ravel()]
    assert out.ravel().tolist() == expected


def test_bitwise_hand_cases():
    a = np.array([0b1100, -1, 7], dtype=np.int32)
    b = np.array([0b1010, 5, -8], dtype=np.int32)
    assert run_op("BitwiseAnd", [a, b])[0].tolist() == [0b1000, 5, 0]
    assert run_op("BitwiseOr", [a, b])[0].tolist() == [0b1110, -1, -1]
    assert run_op("BitwiseXor", [a, b])[0].tolist() == [0b0110, -6, -1]
    assert run_op("BitwiseNot", [np.array([0, 255], dtype=np.uint8)])[0].tolist() == [255, 0]


def test_bitwise_inference_broadcasts_symbols():
    (y,) = infer_types("BitwiseXor", [tt("int16", (N, 1)), tt("int16", (1, 4))])
    assert y == tt("int16", (N, 4))
    assert infer_types("BitwiseNot", [tt("uint8", (N, T))]) == [tt("uint8", (N, T))]


def test_bitwise_rejects_floats_and_mixed_dtypes():
    with pytest.raises(OpError, match=r"BitwiseAnd.*'A'.*dtype.*float32"):
        infer_types("BitwiseAnd", [tt("float32", (2,)), tt("float32", (2,))])
    with pytest.raises(OpError, match=r"BitwiseOr.*'B'.*same dtype.*int32.*int64"):
        infer_types("BitwiseOr", [tt("int32", (2,)), tt("int64", (2,))])
    with pytest.raises(OpError, match=r"BitwiseNot.*'X'.*bool"):
        infer_types("BitwiseNot", [tt("bool", (2,))])
    with pytest.raises(OpError, match="cannot be broadcast"):
        infer_types("BitwiseAnd", [tt("int8", (2, 3)), tt("int8", (4,))])
