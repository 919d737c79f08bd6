"""Tests of the normalization ops, LRN and Hardmax (ge_hub/ops/norm.py): inference on concrete,
symbolic and unknown shapes, the NumPy references against independent direct-loop or
hand-computed results, and clear errors on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import close, infer, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.types import Sym
from ge_hub.ops import get_schema

N, C, H, W = Sym("N"), Sym("C"), Sym("H"), Sym("W")


# -- normalization ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (1, 4, 3, 5)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_batch_normalization(rng, shape, dtype):
    x = random_array(rng, shape, dtype)
    scale, b, mean = (random_array(rng, (shape[1],), dtype) for _ in range(3))
    var = random_array(rng, (shape[1],), dtype, low=0.1, high=2.0)
    (y,) = run_op("BatchNormalization", [x, scale, b, mean, var], {"epsilon": 1e-3})
    # Channels last, so the per-channel vectors broadcast on the trailing axis.
    moved = np.moveaxis(x.astype(np.float64), 1, -1)
    expected = ((moved - mean.astype(np.float64)) / np.sqrt(var.astype(np.float64) + 1e-3)
                * scale.astype(np.float64) + b.astype(np.float64))
    close(y, np.moveaxis(expected, -1, 1), dtype)


def test_batch_normalization_mixed_parameter_dtypes(rng):
    x = random_array(rng, (2, 3, 4), "float16")
    scale, b = (random_array(rng, (3,), "float32") for _ in range(2))
    mean = random_array(rng, (3,), "float64")
    var = random_array(rng, (3,), "float64", low=0.5, high=1.0)
    (y,) = run_op("BatchNormalization", [x, scale, b, mean, var])
    assert y.dtype == np.float16
    expected = (x.astype(np.float64) - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) \
        * scale[:, None] + b[:, None]
    close(y, expected, "float16")


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 4, 3, 5)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_batch_normalization_training_mode(rng, shape, dtype):
    x = random_array(rng, shape, dtype)
    scale, b, mean = (random_array(rng, (shape[1],), dtype) for _ in range(3))
    var = random_array(rng, (shape[1],), dtype, low=0.1, high=2.0)
    y, running_mean, running_var = run_op(
        "BatchNormalization", [x, scale, b, mean, var],
        {"training_mode": 1, "momentum": 0.8, "epsilon": 1e-2}, num_outputs=3)
    assert y.dtype == running_mean.dtype == running_var.dtype == np.dtype(dtype)
    assert running_mean.shape == running_var.shape == (shape[1],)
    # Per channel, element by element: batch mean, population variance, then the update.
    expected = np.empty(shape)
    for c in range(shape[1]):
        values = [float(v) for v in np.take(x, c, axis=1).ravel()]
        batch_mean = sum(values) / len(values)
        batch_var = sum((v - batch_mean) ** 2 for v in values) / len(values)
        for at in np.ndindex(*shape):
            if at[1] == c:
                expected[at] = ((float(x[at]) - batch_mean) / math.sqrt(batch_var + 1e-2)
                                * float(scale[c]) + float(b[c]))
        close(running_mean[c:c + 1], [float(mean[c]) * 0.8 + batch_mean * 0.2], dtype)
        close(running_var[c:c + 1], [float(var[c]) * 0.8 + batch_var * 0.2], dtype)
    close(y, expected, dtype)


def test_batch_normalization_training_mode_hand_case():
    # Channel 0 holds 1, 3 (mean 2, variance 1); channel 1 holds 4, 8 (mean 6, variance 4).
    x = np.array([[1.0, 4.0], [3.0, 8.0]], np.float32)
    scale, bias = np.array([1.0, 2.0], np.float32), np.array([0.0, 0.5], np.float32)
    mean, var = np.zeros(2, np.float32), np.array([1.0, 2.0], np.float32)
    y, running_mean, running_var = run_op(
        "BatchNormalization", [x, scale, bias, mean, var], {"training_mode": 1, "epsilon": 0.0},
        num_outputs=3)
    np.testing.assert_allclose(y, [[-1.0, -1.5], [1.0, 2.5]], rtol=1e-6)
    np.testing.assert_allclose(running_mean, [0.2, 0.6], rtol=1e-6)  # momentum 0.9
    np.testing.assert_allclose(running_var, [1.0, 2.2], rtol=1e-6)


def test_batch_normalization_training_mode_mixed_dtypes_and_inference():
    x = tt("float16", (N, 16, H, W))
    v = tt("float32", (16,))
    stats = tt("float64", (16,))
    y, running_mean, running_var = infer("BatchNormalization", [x, v, v, stats, stats],
                                         {"training_mode": 1}, num_outputs=3)
    assert y == x and running_mean == running_var == tt("float64", (16,))
    # An unknown channel count becomes one symbol, shared by the running statistics.
    (_, running_mean) = infer("BatchNormalization", [tt("float32", None)] + [v] * 4,
                              {"training_mode": 1}, num_outputs=2)
    assert running_mean.rank == 1
    # Training mode may ask for Y alone.
    (y,) = infer("BatchNormalization", [x, v, v, stats, stats], {"training_mode": 1})
    assert y == x


def test_batch_normalization_inference_and_errors():
    x = tt("float32", (N, 16, H, W))
    v = tt("float32", (16,))
    (y,) = infer("BatchNormalization", [x, v, v, v, v])
    assert y == x
    with pytest.raises(OpError, match=r"attribute 'training_mode' must be 0 or 1, got 2"):
        infer("BatchNormalization", [x, v, v, v, v], {"training_mode": 2})
    with pytest.raises(OpError, match=r"input 'input_var' must have 16 values"):
        infer("BatchNormalization", [x, v, v, v, tt("float32", (8,))])
    with pytest.raises(OpError, match=r"input 'scale' must have rank 1"):
        infer("BatchNormalization", [x, tt("float32", (16, 1)), v, v, v])
    with pytest.raises(OpError, match=r"running_mean.*only in training mode"):
        infer("BatchNormalization", [x, v, v, v, v], num_outputs=3)
    with pytest.raises(OpError, match=r"expected 1 to 3 outputs .*got 4"):
        infer("BatchNormalization", [x, v, v, v, v], {"training_mode": 1}, num_outputs=4)
    with pytest.raises(OpError, match=r"BatchNormalization: attribute 'training_mode' must be "
                                      r"0 or 1, got -1"):
        get_schema("BatchNormalization").run_reference(
            [np.ones((1, 1), np.float32)] * 5, {"training_mode": -1})


@pytest.mark.parametrize("shape, axis", [((2, 3, 5), -1), ((2, 3, 5), 1), ((4, 7), 0),
                                         ((2, 3, 2, 3), -2)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_layer_normalization(rng, shape, axis, dtype):
    x = random_array(rng, shape, dtype)
    normalized = shape[axis:]
    scale, b = random_array(rng, normalized, dtype), random_array(rng, normalized, dtype)
    y, mean, inv_std = run_op("LayerNormalization", [x, scale, b], {"axis": axis},
                              num_outputs=3)
    axes = tuple(range(axis % len(shape), len(shape)))
    data = x.astype(np.float64)
    expected_mean = data.mean(axis=axes, keepdims=True)
    expected_std = np.sqrt(data.var(axis=axes, keepdims=True) + 1e-5)
    expected = (data - expected_mean) / expected_std * scale.astype(np.float64) + b
    # The default stash_type computes in float32, even for float64 data.
    close(y, expected, "float32" if dtype == "float64" else dtype)
    close(mean, expected_mean, "float32")
    close(inv_std, 1 / expected_std, "float32")
    assert mean.dtype == np.float32 and inv_std.dtype == np.float32


def test_layer_normalization_broadcast_scale_without_bias(rng):
    x = random_array(rng, (2, 3, 4))
    scale = random_array(rng, (1, 4))
    (y,) = run_op("LayerNormalization", [x, scale], {"axis": 1})
    data = x.astype(np.float64).reshape(2, -1)
    normalized = (data - data.mean(1, keepdims=True)) / np.sqrt(data.var(1, keepdims=True)
                                                                + 1e-5)
    close(y, normalized.reshape(2, 3, 4) * scale)


def test_layer_normalization_stash_type_float64(rng):
    x = random_array(rng, (3, 5), "float64")
    y, mean, inv_std = run_op("LayerNormalization", [x, np.ones(5)], {"stash_type": 11},
                              num_outputs=3)
    assert mean.dtype == np.float64 and inv_std.dtype == np.float64
    close(y, (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5),
          "float64")


def test_layer_normalization_inference_and_errors():
    x = tt("float16", (N, Sym("S"), 64))
    y, mean, inv_std = infer("LayerNormalization", [x, tt("float16", (64,))], num_outputs=3)
    assert y == x and mean == tt("float32", (N, Sym("S"), 1)) and inv_std == mean
    (y,) = infer("LayerNormalization", [x, tt("float16", (64,))], {"axis": 1})
    assert y == x
    _, mean = infer("LayerNormalization", [x, tt("float16", (Sym("S"), 64))], {"axis": -2},
                    num_outputs=2)
    assert mean.shape == (N, 1, 1)
    with pytest.raises(OpError, match=r"attribute 'axis' 3 is out of range for rank 3"):
        infer("LayerNormalization", [x, tt("float16", (64,))], {"axis": 3})
    with pytest.raises(OpError, match=r"input 'Scale' float16\[32\] cannot be broadcast"):
        infer("LayerNormalization", [x, tt("float16", (32,))])
    with pytest.raises(OpError, match=r"attribute 'stash_type' must be 1 .* got 10"):
        infer("LayerNormalization", [x, tt("float16", (64,))], {"stash_type": 10})
    with pytest.raises(OpError, match=r"input 'B' must have the same dtype as 'X'"):
        infer("LayerNormalization", [x, tt("float16", (64,)), tt("float32", (64,))])


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 3, 4), (2, 1, 2, 3, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_instance_normalization(rng, shape, dtype):
    x = random_array(rng, shape, dtype)
    scale, b = random_array(rng, (shape[1],), dtype), random_array(rng, (shape[1],), dtype)
    (y,) = run_op("InstanceNormalization", [x, scale, b], {"epsilon": 1e-4})
    flat = x.astype(np.float64).reshape(shape[0], shape[1], -1)
    normalized = (flat - flat.mean(-1, keepdims=True)) / np.sqrt(flat.var(-1, keepdims=True)
                                                                 + 1e-4)
    expected = normalized * scale[:, None].astype(np.float64) + b[:, None]
    close(y, expected.reshape(shape), dtype)


def test_instance_normalization_inference_and_errors():
    (y,) = infer("InstanceNormalization", [tt("float32", (N, 3, H, W)), tt("float32", (3,)),
                                           tt("float32", (3,))])
    assert y.shape == (N, 3, H, W)
    with pytest.raises(OpError, match=r"input 'B' must have 3 values"):
        infer("InstanceNormalization", [tt("float32", (N, 3, H)), tt("float32", (3,)),
                                        tt("float32", (4,))])
    with pytest.raises(OpError, match=r"input 'input' must have rank >= 3"):
        infer("InstanceNormalization", [tt("float32", (2, 3)), tt("float32", (3,)),
                                        tt("float32", (3,))])


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_lrn(rng, size, dtype):
    x = random_array(rng, (2, 5, 3, 2), dtype)
    attrs = {"size": size, "alpha": 0.1, "beta": 0.6, "bias": 1.5}
    (y,) = run_op("LRN", [x], attrs)
    data = x.astype(np.float64)
    expected = np.empty_like(data)
    for c in range(5):
        low, high = max(0, c - (size - 1) // 2), min(4, c + math.ceil((size - 1) / 2))
        square_sum = sum(data[:, i] ** 2 for i in range(low, high + 1))
        expected[:, c] = data[:, c] / (1.5 + 0.1 / size * square_sum) ** 0.6
    close(y, expected, dtype)


def test_lrn_inference_and_errors():
    (y,) = infer("LRN", [tt("float32", (N, C, H, W))], {"size": 3})
    assert y.shape == (N, C, H, W)
    with pytest.raises(OpError, match=r"LRN: attribute 'size' \(int\) is required"):
        infer("LRN", [tt("float32", (N, C, H, W))])
    with pytest.raises(OpError, match=r"attribute 'size' must be >= 1, got 0"):
        infer("LRN", [tt("float32", (N, C, H, W))], {"size": 0})


def test_lrn_keeps_inf_inside_its_windows():
    x = np.array([np.inf, 1, 1, 1, 1, 1], np.float32).reshape(1, 6, 1, 1)
    (y,) = run_op("LRN", [x], {"size": 3, "alpha": 1e-4, "beta": 0.75, "bias": 1.0})
    # Channels 0 and 1 see the inf; channels 2-5 are ONNX's formula on ones.
    expected = 1 / (1 + 1e-4 / 3 * 3) ** 0.75
    np.testing.assert_allclose(y.reshape(-1)[2:5], expected, rtol=1e-6)
    np.testing.assert_allclose(y.reshape(-1)[5], 1 / (1 + 1e-4 / 3 * 2) ** 0.75, rtol=1e-6)
    assert np.isnan(y.reshape(-1)[0]) and y.reshape(-1)[1] == 0


# --- Hardmax ----------------------------------------------------------------------------

FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
T = Sym("T")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_hardmax_marks_the_first_maximum(rng, dtype, axis):
    # Few distinct values, so that ties are common and the first must win.
    x = (random_array(rng, (3, 4, 5), "int32", low=-2, high=2)).astype(dtype)
    (out,) = run_op("Hardmax", [x], {"axis": axis})
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    expected = np.zeros(moved.shape)
    for index in np.ndindex(*moved.shape[:-1]):
        line = moved[index].tolist()
        expected[index + (line.index(max(line)),)] = 1
    assert out.dtype == x.dtype
    assert out.astype(np.float64).tolist() == np.moveaxis(expected, -1, axis).tolist()


def test_hardmax_spec_example():
    x = np.array([[3, 0, 1, 2], [2, 5, 1, 0], [0, 1, 3, 2], [0, 1, 2, 3]], dtype=np.float32)
    (out,) = run_op("Hardmax", [x])
    assert out.tolist() == np.eye(4)[[0, 1, 2, 3]].tolist()


def test_hardmax_inference_and_errors():
    x = tt("float16", (N, T))
    assert infer("Hardmax", [x], {"axis": 0}) == [x]
    with pytest.raises(OpError, match=r"Hardmax.*'axis' 2 is out of range for rank 2"):
        infer("Hardmax", [x], {"axis": 2})
    with pytest.raises(OpError, match=r"Hardmax.*'input'.*dtype.*int32"):
        infer("Hardmax", [tt("int32", (2,))])


# --- LpNormalization --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization_matches_python(rng, dtype, p, axis):
    x = random_array(rng, (3, 4, 5), dtype)
    (out,) = run_op("LpNormalization", [x], {"axis": axis, "p": p})
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    expected = np.zeros(moved.shape)
    for index in np.ndindex(*moved.shape[:-1]):
        line = moved[index].tolist()
        norm = math.fsum(abs(v) ** p for v in line) ** (1 / p)
        expected[index] = [v / norm for v in line]
    close(out, np.moveaxis(expected, -1, axis), dtype)


def test_lp_normalization_of_zeros_is_zero():
    x = np.array([[0.0, 0.0], [3.0, -4.0]], dtype=np.float32)
    (l2,) = run_op("LpNormalization", [x], {"p": 2})
    assert l2.tolist() == [[0.0, 0.0], [0.6000000238418579, -0.800000011920929]]
    (l1,) = run_op("LpNormalization", [x], {"p": 1, "axis": 0})
    close(l1, [[0.0, 0.0], [1.0, -1.0]])


def test_lp_normalization_errors():
    with pytest.raises(OpError, match=r"LpNormalization.*'p' must be 1 or 2, got 3"):
        infer("LpNormalization", [tt("float32", (2, 3))], {"p": 3})
    with pytest.raises(OpError, match=r"LpNormalization.*'axis' -3 is out of range"):
        infer("LpNormalization", [tt("float32", (2, 3))], {"axis": -3})
    with pytest.raises(OpError, match=r"LpNormalization: attribute 'p' must be 1 or 2"):
        get_schema("LpNormalization")(np.ones(3, dtype=np.float32), p=0)


# --- MeanVarianceNormalization ----------------------------------------------------------

M = Sym("M")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("axes", [None, [1], [0, -1], [1, 2, 3]])
def test_mvn_matches_python(rng, dtype, axes):
    x = random_array(rng, (2, 3, 4, 5), dtype)
    attrs = {} if axes is None else {"axes": axes}
    (out,) = run_op("MeanVarianceNormalization", [x], attrs)
    reduced = sorted(a % 4 for a in (axes or [0, 2, 3]))
    kept = [a for a in range(4) if a not in reduced]
    wide = x.astype(np.float64)
    expected = np.zeros(x.shape)
    for kept_index in np.ndindex(*[x.shape[a] for a in kept]):
        group = []
        for reduced_index in np.ndindex(*[x.shape[a] for a in reduced]):
            full = [0] * 4
            for a, i in zip(kept + reduced, kept_index + reduced_index):
                full[a] = i
            group.append(tuple(full))
        values = [wide[i] for i in group]
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        for i, v in zip(group, values):
            expected[i] = (v - mean) / (std + 1e-9)
    close(out, expected, dtype)


def test_mvn_inference_and_errors():
    x = tt("float32", (N, 3, T, M))
    assert infer("MeanVarianceNormalization", [x]) == [x]
    with pytest.raises(OpError, match=r"MeanVarianceNormalization.*'axes' 3 is out of range "
                                      r"for rank 3"):
        infer("MeanVarianceNormalization", [tt("float32", (2, 3, 4))])
    with pytest.raises(OpError, match=r"MeanVarianceNormalization.*repeats an axis"):
        infer("MeanVarianceNormalization", [x], {"axes": [1, -3]})
