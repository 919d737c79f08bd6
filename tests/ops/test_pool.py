"""Tests of the pooling ops, LpPool and MaxUnpool (ge_hub/ops/pool.py): inference on concrete,
symbolic and unknown shapes, the NumPy references against independent direct-loop or
hand-computed results, and clear errors on bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import close, infer, positions, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, dim_add, dim_floordiv, dim_mul, dim_sub
from ge_hub.ops import get_schema

N, C, H, W = Sym("N"), Sym("C"), Sym("H"), Sym("W")


# -- pooling ---------------------------------------------------------------------------


def pool_out_dims(in_dims, kernel, strides, pads, dilations, ceil_mode):
    """Output size as PyTorch documents it (ceil_mode drops windows starting in the end
    padding); an independent formulation of the spec's formula."""
    r = len(in_dims)
    dims = []
    for i in range(r):
        span = in_dims[i] + pads[i] + pads[i + r] - dilations[i] * (kernel[i] - 1) - 1
        out = (math.ceil if ceil_mode else math.floor)(span / strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= in_dims[i] + pads[i]:
            out -= 1
        dims.append(out)
    return dims


def loop_pool(x, kernel, strides, pads, dilations, ceil_mode, kind, count_include_pad=0,
              storage_order=0):
    """Direct pooling, one window at a time; returns (values, flat argmax indices)."""
    n, c, *in_dims = x.shape
    r = len(in_dims)
    out_dims = pool_out_dims(in_dims, kernel, strides, pads, dilations, ceil_mode)
    y = np.zeros((n, c, *out_dims))
    where = np.zeros((n, c, *out_dims), dtype=np.int64)
    for index in itertools.product(range(n), range(c), *map(range, out_dims)):
        batch, channel, *out = index
        values, coords, counted = [], [], 0
        for tap in itertools.product(*map(range, kernel)):
            pos = [out[i] * strides[i] - pads[i] + tap[i] * dilations[i] for i in range(r)]
            if all(-pads[i] <= pos[i] < in_dims[i] + pads[i + r] for i in range(r)):
                counted += 1  # inside input + explicit pads (not ceil_mode overhang)
            if all(0 <= pos[i] < in_dims[i] for i in range(r)):
                values.append(float(x[(batch, channel, *pos)]))
                coords.append(pos)
        if kind == "max":
            best = int(np.argmax(values))
            y[index] = values[best]
            order = range(r) if storage_order == 0 else reversed(range(r))
            flat = 0
            for i in order:
                flat = flat * in_dims[i] + coords[best][i]
            where[index] = (batch * c + channel) * math.prod(in_dims) + flat
        else:
            y[index] = sum(values) / (counted if count_include_pad else len(values))
    return y, where


POOL_CASES = [
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1], dilations=[1], ceil_mode=0)),
    ((1, 2, 8), dict(kernel_shape=[2], strides=[3], pads=[0, 1], dilations=[2], ceil_mode=1)),
    ((2, 2, 5, 6), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                        dilations=[1, 1], ceil_mode=1)),
    ((1, 3, 7, 7), dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0],
                        dilations=[2, 1], ceil_mode=0)),
    ((1, 2, 5, 5), dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1],
                        dilations=[1, 1], ceil_mode=1)),  # last window would start in pad
    ((1, 2, 4, 3, 5), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1],
                           dilations=[1, 2, 1], ceil_mode=1)),
]


@pytest.mark.parametrize("x_shape, attrs", POOL_CASES)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_matches_direct_loops(rng, x_shape, attrs, storage_order):
    x = random_array(rng, x_shape)
    y, indices = run_op("MaxPool", [x], {**attrs, "storage_order": storage_order},
                        num_outputs=2)
    expected, expected_indices = loop_pool(x, attrs["kernel_shape"], attrs["strides"],
                                           attrs["pads"], attrs["dilations"],
                                           attrs["ceil_mode"], "max",
                                           storage_order=storage_order)
    close(y, expected)
    np.testing.assert_array_equal(indices, expected_indices)
    if storage_order == 0:
        np.testing.assert_array_equal(x.reshape(-1)[indices], y)


@pytest.mark.parametrize("x_shape, attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_matches_direct_loops(rng, x_shape, attrs, count_include_pad):
    x = random_array(rng, x_shape)
    (y,) = run_op("AveragePool", [x], {**attrs, "count_include_pad": count_include_pad})
    expected, _ = loop_pool(x, attrs["kernel_shape"], attrs["strides"], attrs["pads"],
                            attrs["dilations"], attrs["ceil_mode"], "avg",
                            count_include_pad=count_include_pad)
    close(y, expected)


def test_pools_by_hand_ceil_mode():
    # ONNX's maxpool_2d_ceil / averagepool_2d_ceil examples.
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}
    np.testing.assert_array_equal(run_op("MaxPool", [x], attrs)[0][0, 0], [[11, 12], [15, 16]])
    np.testing.assert_array_equal(run_op("AveragePool", [x], attrs)[0][0, 0],
                                  [[6, 7.5], [12, 13.5]])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_pools_auto_pad(rng, auto_pad):
    x = random_array(rng, (1, 2, 7, 6))
    kernel, strides = [3, 2], [2, 2]
    pads = [0, 0, 0, 0]
    if auto_pad != "VALID":
        begins, ends = [], []
        for size, k, s in zip((7, 6), kernel, strides):
            total = max(0, (math.ceil(size / s) - 1) * s + k - size)
            small, big = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else big)
            ends.append(big if auto_pad == "SAME_UPPER" else small)
        pads = begins + ends
    attrs = {"kernel_shape": kernel, "strides": strides, "auto_pad": auto_pad}
    y, _ = run_op("MaxPool", [x], attrs, num_outputs=2)
    expected, _ = loop_pool(x, kernel, strides, pads, [1, 1], 0, "max")
    close(y, expected)
    (avg,) = run_op("AveragePool", [x], {**attrs, "count_include_pad": 1})
    expected, _ = loop_pool(x, kernel, strides, pads, [1, 1], 0, "avg", count_include_pad=1)
    close(avg, expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int8", "uint8"])
def test_max_pool_dtypes(rng, dtype):
    x = random_array(rng, (1, 2, 5, 4), dtype, low=-100, high=100)
    attrs = {"kernel_shape": [2, 2], "pads": [1, 0, 0, 1]}
    y, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    assert y.dtype == x.dtype and indices.dtype == np.int64
    expected, _ = loop_pool(x, [2, 2], [1, 1], [1, 0, 0, 1], [1, 1], 0, "max")
    close(y, expected, dtype)
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_average_pool_dtypes(rng, dtype):
    x = random_array(rng, (1, 2, 5, 4), dtype)
    (y,) = run_op("AveragePool", [x], {"kernel_shape": [3, 2], "strides": [2, 1]})
    close(y, loop_pool(x, [3, 2], [2, 1], [0] * 4, [1, 1], 0, "avg")[0], dtype)


def test_max_pool_indices_never_point_into_padding():
    x = np.full((1, 1, 3), -np.inf, dtype=np.float32)
    y, indices = run_op("MaxPool", [x], {"kernel_shape": [2], "pads": [1, 1]}, num_outputs=2)
    assert np.isneginf(y).all()
    np.testing.assert_array_equal(indices[0, 0], [0, 0, 1, 2])


def test_max_pool_propagates_nan():
    x = np.array([[[1.0, np.nan, 3.0, 0.5]]], dtype=np.float32)
    (y,) = run_op("MaxPool", [x], {"kernel_shape": [2]})
    assert np.isnan(y[0, 0, :2]).all() and y[0, 0, 2] == 3.0


def test_pool_inference_symbolic():
    x = tt("float32", (N, C, H, W))
    (y,) = infer("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    assert y.shape == (N, C, H, W)
    y, indices = infer("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]},
                       num_outputs=2)
    assert y.shape == (N, C, positions(H, 2, 2), positions(W, 2, 2))
    assert indices == y.with_dtype("int64")
    # ceil_mode with no end padding cannot drop a window: still an expression of H.
    (y,) = infer("AveragePool", [x], {"kernel_shape": [3, 3], "strides": [2, 2],
                                      "ceil_mode": 1})
    assert y.shape[2] == positions(H, 2, 2)
    # ... but with end padding it might: a fresh symbol.
    (y,) = infer("AveragePool", [x], {"kernel_shape": [2, 2], "strides": [2, 2],
                                      "ceil_mode": 1, "pads": [0, 0, 1, 1]})
    assert isinstance(y.shape[2], Sym) and "H" not in y.shape[2].name
    (y,) = infer("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2],
                                  "auto_pad": "SAME_LOWER"})
    assert y.shape == (N, C, dim_floordiv(dim_add(H, 1), 2), dim_floordiv(dim_add(W, 1), 2))
    (y,) = infer("MaxPool", [tt("float32", None)], {"kernel_shape": [3, 3]})
    assert y.rank == 4


def test_pool_rejects_bad_input():
    x = tt("float32", (1, 2, 8, 8))
    with pytest.raises(OpError, match=r"MaxPool: attribute 'kernel_shape' \(ints\) is required"):
        infer("MaxPool", [x])
    with pytest.raises(OpError, match=r"'kernel_shape' \[3\] has 1 values but input 'X'"):
        infer("MaxPool", [x], {"kernel_shape": [3]})
    with pytest.raises(OpError, match=r"attribute 'storage_order' must be 0 or 1, got 2"):
        infer("MaxPool", [x], {"kernel_shape": [3, 3], "storage_order": 2})
    with pytest.raises(OpError, match=r"AveragePool: input 'X' must have dtype .*got int8"):
        infer("AveragePool", [tt("int8", (1, 2, 8, 8))], {"kernel_shape": [3, 3]})
    with pytest.raises(OpError, match=r"AveragePool: attribute 'dilations' must have 2 values"):
        infer("AveragePool", [x], {"kernel_shape": [3, 3], "dilations": [1, 1, 1]})
    with pytest.raises(OpError, match=r"MaxPool: expected 1 to 2 outputs .*got 3"):
        infer("MaxPool", [x], {"kernel_shape": [3, 3]}, num_outputs=3)
    with pytest.raises(OpError, match=r"input 'X' must have rank >= 3"):
        infer("AveragePool", [tt("float32", (2, 8))], {"kernel_shape": [3]})


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 3), (2, 2, 3, 2, 3)])
def test_global_pools(rng, dtype, shape):
    x = random_array(rng, shape, dtype)
    (avg,) = run_op("GlobalAveragePool", [x])
    (top,) = run_op("GlobalMaxPool", [x])
    flat = x.astype(np.float64).reshape(shape[0], shape[1], -1)
    keep = (shape[0], shape[1], *([1] * (len(shape) - 2)))
    close(avg, (flat.sum(-1) / flat.shape[-1]).reshape(keep), dtype)
    close(top, np.sort(flat, axis=-1)[..., -1].reshape(keep), dtype)


def test_global_pools_inference_and_errors():
    (y,) = infer("GlobalAveragePool", [tt("float32", (N, C, H, W))])
    assert y.shape == (N, C, 1, 1)
    (y,) = infer("GlobalMaxPool", [tt("float16", None)])
    assert y.shape is None and y.dtype == "float16"
    with pytest.raises(OpError, match=r"GlobalMaxPool: input 'X' must have rank >= 2"):
        infer("GlobalMaxPool", [tt("float32", (5,))])


# --- LpPool -----------------------------------------------------------------------------

FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
T = Sym("T")


def same_pads(in_dims, kernel, strides, dilations, upper):
    """ONNX SAME padding: begin and end pads per axis (the odd cell at the end if upper)."""
    begins, ends = [], []
    for size, k, s, d in zip(in_dims, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins + ends


def loop_lp_pool(x, kernel, strides, pads, dilations, p, ceil_mode=False):
    """(sum |x|^p)^(1/p) over each window, one window at a time; padding contributes 0."""
    n, c, *in_dims = x.shape
    r = len(in_dims)
    out_dims = []
    for i in range(r):
        span = in_dims[i] + pads[i] + pads[i + r] - dilations[i] * (kernel[i] - 1) - 1
        out = (math.ceil if ceil_mode else math.floor)(span / strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= in_dims[i] + pads[i]:
            out -= 1
        out_dims.append(out)
    wide = x.astype(np.float64)
    y = np.zeros((n, c, *out_dims))
    for index in itertools.product(range(n), range(c), *map(range, out_dims)):
        batch, channel, *out = index
        total = []
        for tap in itertools.product(*map(range, kernel)):
            pos = [out[i] * strides[i] - pads[i] + tap[i] * dilations[i] for i in range(r)]
            if all(0 <= pos[i] < in_dims[i] for i in range(r)):
                total.append(abs(float(wide[(batch, channel, *pos)])) ** p)
        y[index] = math.fsum(total) ** (1 / p)
    return y


LP_POOL_CASES = [
    # shape, kernel, strides, pads, dilations, ceil_mode
    ((1, 2, 9), [3], [1], [0, 0], [1], 0),
    ((2, 3, 7, 6), [2, 3], [2, 1], [1, 0, 0, 2], [1, 1], 0),
    ((1, 2, 8, 7), [3, 2], [1, 2], [0, 0, 0, 0], [2, 2], 0),
    ((1, 1, 7, 8), [3, 3], [2, 3], [1, 1, 1, 1], [1, 1], 1),
    ((1, 2, 4, 5, 3), [2, 2, 2], [1, 2, 1], [0, 1, 0, 1, 0, 1], [1, 1, 2], 0),
]


@pytest.mark.parametrize("case", LP_POOL_CASES)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_loop(rng, case, p):
    shape, kernel, strides, pads, dilations, ceil_mode = case
    x = random_array(rng, shape, "float64")
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads,
             "dilations": dilations, "ceil_mode": ceil_mode, "p": p}
    (out,) = run_op("LpPool", [x], attrs)
    close(out, loop_lp_pool(x, kernel, strides, pads, dilations, p, ceil_mode), "float64")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_lp_pool_auto_pad(rng, auto_pad, dtype):
    x = random_array(rng, (1, 2, 6, 5), dtype)
    kernel, strides, dilations = [3, 2], [2, 1], [1, 2]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
             "auto_pad": auto_pad}
    (out,) = run_op("LpPool", [x], attrs)
    if auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    else:
        pads = same_pads([6, 5], kernel, strides, dilations, auto_pad == "SAME_UPPER")
    close(out, loop_lp_pool(x, kernel, strides, pads, dilations, 2), dtype)


def test_lp_pool_inference():
    (y,) = infer("LpPool", [tt("float32", (N, 3, T, 8))],
                 {"kernel_shape": [1, 3], "strides": [1, 2]})
    assert y == tt("float32", (N, 3, T, 3))
    (y,) = infer("LpPool", [tt("float16", (N, 3, T))],
                 {"kernel_shape": [2], "auto_pad": "SAME_UPPER"})
    assert y == tt("float16", (N, 3, T))


def test_lp_pool_errors():
    x = tt("float32", (1, 3, 5, 5))
    with pytest.raises(OpError, match=r"LpPool.*'kernel_shape' \[2\] has 1 values but input "
                                      r"'X'.*2 spatial dims"):
        infer("LpPool", [x], {"kernel_shape": [2]})
    with pytest.raises(OpError, match=r"LpPool.*'p' must be >= 1, got 0"):
        infer("LpPool", [x], {"kernel_shape": [2, 2], "p": 0})
    with pytest.raises(OpError, match=r"LpPool.*'kernel_shape' \(ints\) is required"):
        infer("LpPool", [x], {})
    with pytest.raises(OpError, match=r"LpPool.*too small"):
        infer("LpPool", [x], {"kernel_shape": [6, 2]})
    with pytest.raises(OpError, match=r"LpPool.*'strides' must have 2 values"):
        infer("LpPool", [x], {"kernel_shape": [2, 2], "strides": [1]})
    with pytest.raises(OpError, match=r"LpPool.*'X'.*dtype.*int32"):
        infer("LpPool", [tt("int32", (1, 3, 5, 5))], {"kernel_shape": [2, 2]})


# --- MaxUnpool ----------------------------------------------------------------------------

F32 = DType.FLOAT32


def i64(value):
    return np.array(value, dtype=np.int64)


@pytest.mark.parametrize("shape,attrs", [
    ((2, 3, 8, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 2, 9, 7), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ((2, 2, 9), {"kernel_shape": [3], "strides": [3]}),
])
def test_max_unpool_inverts_max_pool(rng, shape, attrs):
    # Positive data: a zero left by unpooling must not beat a negative maximum.
    x = random_array(rng, shape, low=0.1)
    pooled, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    (y,) = run_op("MaxUnpool", [pooled, indices], attrs)
    kernel, strides = attrs["kernel_shape"], attrs["strides"]
    pads = attrs.get("pads", [0] * 2 * len(kernel))
    spatial = [(pooled.shape[d + 2] - 1) * strides[d] + kernel[d] - pads[d]
               - pads[d + len(kernel)] for d in range(len(kernel))]
    assert y.shape == pooled.shape[:2] + tuple(spatial)
    expected = np.zeros(y.size, np.float32)
    for value, index in zip(pooled.reshape(-1), indices.reshape(-1)):
        expected[index] = value  # every max goes back where MaxPool found it
    np.testing.assert_array_equal(y.reshape(-1), expected)
    # "Pooling the result of an unpooling operation gives back the input to unpooling."
    if y.shape == x.shape:
        np.testing.assert_array_equal(run_op("MaxPool", [y], attrs)[0], pooled)


def test_max_unpool_spec_case_and_output_shape():
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    indices = np.array([[[[5, 7], [13, 15]]]], np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    (y,) = run_op("MaxUnpool", [x, indices], attrs)
    np.testing.assert_array_equal(y, [[[[0, 0, 0, 0], [0, 5, 0, 6], [0, 0, 0, 0],
                                        [0, 7, 0, 8]]]])
    (bigger,) = run_op("MaxUnpool", [x, indices, i64([1, 1, 5, 6])], attrs)
    assert bigger.shape == (1, 1, 5, 6)
    np.testing.assert_array_equal(bigger[..., :4, :4], y)
    assert not bigger[..., 4:, :].any() and not bigger[..., 4:].any()


def test_max_unpool_inference():
    n, h = Sym("n"), Sym("h")
    types = [tt(F32, (n, 3, h, 5)), tt(DType.INT64, (n, 3, h, 5))]
    attrs = {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 1, 0]}
    (out,) = infer("MaxUnpool", types, attrs)
    assert out == tt(F32, (n, 3, dim_add(dim_mul(dim_sub(h, 1), 2), 1), 10))
    (out,) = infer("MaxUnpool", [*types, tt(DType.INT64, (4,))], attrs)
    assert len(out.shape) == 4 and all(isinstance(d, Sym) for d in out.shape)
    (out,) = infer("MaxUnpool", [*types, tt(DType.INT64, (4,))], attrs,
                   consts=[None, None, i64([2, 3, 7, 11])])
    assert out == tt(F32, (2, 3, 7, 11))


def test_max_unpool_bad_inputs(rng):
    types = [tt(F32, (1, 1, 2, 2)), tt(DType.INT64, (1, 1, 2, 2))]
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    with pytest.raises(OpError, match="MaxUnpool.*'I'.*must have the shape of 'X'"):
        infer("MaxUnpool", [types[0], tt(DType.INT64, (1, 1, 2, 3))], attrs)
    with pytest.raises(OpError, match="MaxUnpool.*'X' must have rank 4"):
        infer("MaxUnpool", [tt(F32, (1, 2, 2)), types[1]], attrs)
    with pytest.raises(OpError, match="MaxUnpool.*dim 3 must be at least 4"):
        infer("MaxUnpool", [*types, tt(DType.INT64, (4,))], attrs,
              consts=[None, None, i64([1, 1, 4, 3])])
    with pytest.raises(OpError, match="MaxUnpool.*'kernel_shape'.*required"):
        infer("MaxUnpool", types)
    with pytest.raises(OpError, match="MaxUnpool: input 'I' must index into the 16 elements"):
        get_schema("MaxUnpool").run_reference(
            [random_array(rng, (1, 1, 2, 2)), np.full((1, 1, 2, 2), 16, np.int64)], attrs)
