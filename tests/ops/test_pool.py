"""Tests of the pooling ops (ge_hub/ops/pool.py): inference on concrete, symbolic and
unknown shapes, the NumPy references against independent direct-loop or hand-computed
results, and clear errors on bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import close, infer, positions, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.types import Sym, dim_add, dim_floordiv

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
