"""Tests of MatMul, Gemm, Softmax, LogSoftmax, Dropout and Det (ge_hub/ops/nn.py): inference
on concrete, symbolic and unknown shapes, the NumPy references against independent
direct-loop or hand-computed results, and clear errors on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import close, infer, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.types import Sym

N, H = Sym("N"), Sym("H")


# -- MatMul ----------------------------------------------------------------------------


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 5), (5, 4)),
    ((5,), (5, 4)),
    ((3, 5), (5,)),
    ((5,), (5,)),
    ((2, 1, 3, 5), (4, 5, 7)),
    ((7, 3, 5), (5, 2)),
    ((5,), (3, 5, 2)),
])
def test_matmul_matches_einsum_with_promotion_and_batch_broadcast(rng, a_shape, b_shape):
    a, b = random_array(rng, a_shape), random_array(rng, b_shape)
    (y,) = run_op("MatMul", [a, b])
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    expected = np.einsum("...ik,...kj->...ij",
                         np.broadcast_to(a2, (*batch, *a2.shape[-2:])).astype(np.float64),
                         np.broadcast_to(b2, (*batch, *b2.shape[-2:])).astype(np.float64))
    if a.ndim == 1:
        expected = expected[..., 0, :]
    if b.ndim == 1:
        expected = expected[..., 0]
    close(y, expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32", "int64"])
def test_matmul_dtypes(rng, dtype):
    a, b = random_array(rng, (2, 3, 5), dtype), random_array(rng, (5, 3), dtype)
    (y,) = run_op("MatMul", [a, b])
    assert y.dtype == a.dtype
    expected = [[[sum(float(a[n, i, k]) * float(b[k, j]) for k in range(5)) for j in range(3)]
                 for i in range(3)] for n in range(2)]
    close(y, expected, dtype)


def test_matmul_inference_symbolic_and_unknown():
    (y,) = infer("MatMul", [tt("float32", (N, Sym("S"), 64)), tt("float32", (64, 32))])
    assert y.shape == (N, Sym("S"), 32)
    (y,) = infer("MatMul", [tt("float32", (N, 1, 3, 8)), tt("float32", (5, 8, 2))])
    assert y.shape == (N, 5, 3, 2)
    (y,) = infer("MatMul", [tt("float32", (8,)), tt("float32", (N, 8, 2))])
    assert y.shape == (N, 2)
    (y,) = infer("MatMul", [tt("float32", None), tt("float32", (8, 2))])
    assert y.shape is None


def test_matmul_rejects_mismatched_inner_dims_scalars_and_dtypes():
    with pytest.raises(OpError, match=r"MatMul.*inner dims.*'A'.*5 columns.*'B'.*4 rows"):
        infer("MatMul", [tt("float32", (3, 5)), tt("float32", (4, 2))])
    with pytest.raises(OpError, match=r"input 'B' must have rank >= 1"):
        infer("MatMul", [tt("float32", (3, 5)), tt("float32", ())])
    with pytest.raises(OpError, match=r"input 'A' must have dtype in .*got uint8"):
        infer("MatMul", [tt("uint8", (3, 5)), tt("uint8", (5, 2))])
    with pytest.raises(OpError, match=r"input 'B' must have the same dtype as 'A'"):
        infer("MatMul", [tt("float32", (3, 5)), tt("float64", (5, 2))])


# -- Gemm ------------------------------------------------------------------------------


def loop_gemm(a, b, c, alpha, beta, trans_a, trans_b):
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((1,)) if c is None else c
    c = np.broadcast_to(c, (m, n))
    return [[alpha * sum(float(a[i, p]) * float(b[p, j]) for p in range(k))
             + beta * float(c[i, j]) for j in range(n)] for i in range(m)]


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (3, 1), (1, 5), (3, 5)])
def test_gemm_transposes_and_broadcast_c(rng, trans_a, trans_b, c_shape):
    a = random_array(rng, (7, 3) if trans_a else (3, 7))
    b = random_array(rng, (5, 7) if trans_b else (7, 5))
    c = None if c_shape is None else random_array(rng, c_shape)
    attrs = {"alpha": 0.75, "beta": -1.5, "transA": trans_a, "transB": trans_b}
    (y,) = run_op("Gemm", [a, b, c] if c is not None else [a, b], attrs)
    close(y, loop_gemm(a, b, c, 0.75, -1.5, trans_a, trans_b))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32", "int64"])
def test_gemm_dtypes(rng, dtype):
    a, b, c = (random_array(rng, s, dtype) for s in ((3, 4), (4, 5), (5,)))
    attrs = {"alpha": 2.0, "beta": 3.0}
    (y,) = run_op("Gemm", [a, b, c], attrs)
    expected = loop_gemm(a, b, c, 2.0, 3.0, 0, 0)
    if dtype.startswith("int"):
        np.testing.assert_array_equal(y, np.array(expected, dtype=np.int64))
    else:
        close(y, expected, dtype)


def test_gemm_inference_symbolic():
    (y,) = infer("Gemm", [tt("float32", (N, 16)), tt("float32", (32, 16)),
                          tt("float32", (32,))], {"transB": 1})
    assert y.shape == (N, 32)
    (y,) = infer("Gemm", [tt("float32", (16, N)), tt("float32", None)], {"transA": 1})
    assert y.shape[0] == N and isinstance(y.shape[1], Sym)


def test_gemm_rejects_bad_rank_k_c_and_flags():
    with pytest.raises(OpError, match=r"Gemm: input 'A' must have rank 2"):
        infer("Gemm", [tt("float32", (2, 3, 4)), tt("float32", (4, 5))])
    with pytest.raises(OpError, match=r"inner dims.*K=3.*K=4"):
        infer("Gemm", [tt("float32", (2, 3)), tt("float32", (4, 5))])
    with pytest.raises(OpError, match=r"input 'C' float32\[3\] cannot be broadcast to \[2,5\]"):
        infer("Gemm", [tt("float32", (2, 4)), tt("float32", (4, 5)), tt("float32", (3,))])
    with pytest.raises(OpError, match=r"attribute 'transA' must be 0 or 1, got 2"):
        infer("Gemm", [tt("float32", (2, 4)), tt("float32", (4, 5))], {"transA": 2})


# -- Softmax / LogSoftmax --------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_softmax_and_log_softmax(rng, axis, dtype):
    x = random_array(rng, (3, 4, 5), dtype)
    (soft,) = run_op("Softmax", [x], {"axis": axis})
    (log_soft,) = run_op("LogSoftmax", [x], {"axis": axis})
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    expected = np.empty_like(moved)
    for index in np.ndindex(*moved.shape[:-1]):
        exps = [math.exp(v) for v in moved[index]]
        expected[index] = [e / math.fsum(exps) for e in exps]
    close(soft, np.moveaxis(expected, -1, axis), dtype)
    close(log_soft, np.log(np.moveaxis(expected, -1, axis)), dtype)


def test_softmax_is_numerically_stable():
    x = np.array([[1000.0, 1000.0, -1000.0], [-5e4, -5e4 + 1, -5e4]], dtype=np.float32)
    (soft,) = run_op("Softmax", [x])
    (log_soft,) = run_op("LogSoftmax", [x])
    e = math.exp(1)
    close(soft, [[0.5, 0.5, 0.0], [1 / (2 + e), e / (2 + e), 1 / (2 + e)]])
    close(log_soft[1], [-math.log(2 + e), 1 - math.log(2 + e), -math.log(2 + e)])
    assert np.isfinite(log_soft[0, :2]).all()


def test_softmax_inference_and_errors():
    (y,) = infer("Softmax", [tt("float32", (N, H, 10))], {"axis": 1})
    assert y.shape == (N, H, 10)
    with pytest.raises(OpError, match=r"LogSoftmax: attribute 'axis' -4 is out of range"):
        infer("LogSoftmax", [tt("float32", (N, H, 10))], {"axis": -4})
    with pytest.raises(OpError, match=r"Softmax: input 'input' must have dtype .*got int32"):
        infer("Softmax", [tt("int32", (2, 3))])


# -- Dropout ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_dropout_inference_mode_is_identity(rng, dtype):
    x = random_array(rng, (3, 5), dtype)
    y, mask = run_op("Dropout", [x], num_outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
    y, mask = run_op("Dropout", [x, np.array(0.7, np.float32), np.array(False)],
                     num_outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.all()


def test_dropout_training_mode_with_seed(rng):
    x = random_array(rng, (40, 50))
    inputs = [x, np.array(0.25, np.float32), np.array(True)]
    y, mask = run_op("Dropout", inputs, {"seed": 7}, num_outputs=2)
    again, _ = run_op("Dropout", inputs, {"seed": 7}, num_outputs=2)
    np.testing.assert_array_equal(y, again)  # seeded: reproducible
    assert 0.2 < 1 - mask.mean() < 0.3  # about a quarter dropped
    close(y[mask], x[mask] / 0.75)
    assert not y[~mask].any()


def test_dropout_inference_and_errors():
    y, mask = infer("Dropout", [tt("float16", (N, 8))], num_outputs=2)
    assert y == tt("float16", (N, 8)) and mask == tt("bool", (N, 8))
    assert len(infer("Dropout", [tt("float16", (N, 8))])) == 1
    with pytest.raises(OpError, match=r"input 'ratio' must be in \[0, 1\), got 1.5"):
        infer("Dropout", [tt("float32", (2,)), tt("float32", ())],
              consts=[None, np.array(1.5, np.float32)])
    with pytest.raises(OpError, match=r"input 'training_mode' must have rank 0"):
        infer("Dropout", [tt("float32", (2,)), tt("float32", ()), tt("bool", (1,))])
    with pytest.raises(OpError, match=r"input 'training_mode' must have dtype in \{bool\}"):
        infer("Dropout", [tt("float32", (2,)), tt("float32", ()), tt("int64", ())])


# --- Det --------------------------------------------------------------------------------

FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
M = Sym("M")


def laplace_det(matrix):
    """Determinant by cofactor expansion along the first row."""
    if len(matrix) == 1:
        return matrix[0][0]
    return math.fsum((-1) ** j * matrix[0][j]
                     * laplace_det([row[:j] + row[j + 1:] for row in matrix[1:]])
                     for j in range(len(matrix)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2), (1, 1)])
def test_det_matches_cofactor_expansion(rng, dtype, shape):
    x = random_array(rng, shape, dtype, low=-2, high=2)
    (out,) = run_op("Det", [x])
    wide = x.astype(np.float64)
    expected = np.zeros(shape[:-2])
    for index in np.ndindex(*shape[:-2]):
        expected[index] = laplace_det(wide[index].tolist())
    close(out, expected, dtype if dtype != "float16" else "bfloat16")


def test_det_hand_case():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    (out,) = run_op("Det", [x])
    assert out.shape == () and math.isclose(float(out), -2.0, rel_tol=1e-6)


def test_det_inference_and_errors():
    assert infer("Det", [tt("float32", (N, M, M))]) == [tt("float32", (N,))]
    assert infer("Det", [tt("float64", None)]) == [tt("float64", None)]
    with pytest.raises(OpError, match=r"Det.*'X'.*square matrices.*2 x 3"):
        infer("Det", [tt("float32", (4, 2, 3))])
    with pytest.raises(OpError, match=r"Det.*'X' must have rank >= 2"):
        infer("Det", [tt("float32", (4,))])
    with pytest.raises(OpError, match=r"Det.*'X'.*dtype.*int32"):
        infer("Det", [tt("int32", (2, 2))])
