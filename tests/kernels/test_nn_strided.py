"""ge_hub.StridedMatMul in fp32 (core/kernels/nn_matmul.c, ge_nn_matmul_strided_f32):
test_nn_bf16's view cases against a float64 reference, every product through the BLAS
with its leading dims and transB; views whose rows overlap (which the BLAS refuses) left
to the NumPy reference and counted as such; a hostile blob refused by name. The bf16
kernel's cases are in test_nn_bf16.py."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub.kernels import nn_strided
from tests.kernels.test_nn_bf16 import STRIDED_CASES, strided_graph, view_of


@pytest.fixture
def rng():
    return np.random.default_rng(11)


@pytest.mark.parametrize("case", sorted(STRIDED_CASES))
def test_strided_cases_in_fp32(case, rng):
    a_in, b_in, a_view, b_view, out_perm = STRIDED_CASES[case]
    a = rng.standard_normal(a_in).astype(np.float32)
    b = rng.standard_normal(b_in).astype(np.float32)
    model = ge_hub.compile(strided_graph(a_in, b_in, a_view, b_view, out_perm))
    (step,) = model.plan.steps
    assert step.kernel == nn_strided.F32_KERNEL
    (got,) = model.run({"a": a, "b": b})
    va, vb = view_of(a, *a_view).astype(np.float64), view_of(b, *b_view).astype(np.float64)
    want, scale = va @ vb, np.abs(va) @ np.abs(vb)
    if out_perm:
        want, scale = want.transpose(out_perm), scale.transpose(out_perm)
    assert got.shape == want.shape
    bound = (a_view[1][-1] + 4) * 2.0 ** -23 * scale + 1e-6
    assert (np.abs(got - want) <= bound).all()


def test_overlapping_rows_run_on_the_reference(rng):
    """A's rows 3 values apart but 5 long: the BLAS would refuse the leading dim, so no C
    kernel takes the node and the NumPy reference runs it, counted as fallback."""
    a = rng.standard_normal((30,)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    graph = strided_graph((30,), (5, 4), (0, (6, 5), (3, 1)), (0, (5, 4), (4, 1)))
    model = ge_hub.compile(graph)
    assert model.summary()["fallback_ops"] == {"ge_hub.StridedMatMul": 1}
    (got,) = model.run({"a": a, "b": b})
    np.testing.assert_allclose(got, view_of(a, 0, (6, 5), (3, 1)) @ b, rtol=1e-5, atol=1e-5)
