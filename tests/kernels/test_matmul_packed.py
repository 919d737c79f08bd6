"""ge_nn_linear_f32 (core/kernels/nn_matmul_packed.c): MatMul and Gemm with a constant 2-D
weight, laid out at compile time, against their ops' NumPy references: which nodes take
it, odd sizes on every tile edge (rows around the 12-row and 4-row tiles, columns around
the 32-column panels, depth over several 256-deep slices, a depth of a multiple of 1024
whose X the kernel first copies into scratch with its rows further apart), batch dims
folded into rows, Gemm's alpha, beta, transB and broadcast C, NaN and inf, and every micro-kernel
(GE_HUB_GEMM_KERNEL) with several thread counts, each in a process of its own.
(ge_hub.FusedMatMul's epilogues on this kernel: test_matmul_fused.py.)"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.ops.nn import FUSED_DOMAIN
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

TOL = dict(rtol=2e-4, atol=2e-4)
# name -> (X shape, W shape)
SHAPES = {
    "vector": ((37,), (37, 5)),
    "row": ((1, 784), (784, 256)),
    "rows_3_wide": ((3, 45), (45, 200)),
    "rows_13": ((13, 37), (37, 29)),
    "rows_29_deep": ((29, 600), (600, 70)),
    "batched": ((2, 3, 11, 19), (19, 33)),
    "tall": ((130, 64), (64, 96)),
    "panels_exact": ((24, 256), (256, 64)),
    # k a multiple of 1024: X's rows are copied further apart first (restride_bytes)
    "restrided": ((29, 2048), (2048, 70)),
    "restrided_batched": ((2, 7, 1024), (1024, 40)),
}


def matmul_graph(x_shape, w):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(x_shape))
        gb.output(es.matmul(x, es.const(w)), "y")
    return gb.graph


def run(graph, feeds, kernel):
    model = ge_hub.compile(graph)
    (step,) = model.plan.steps
    assert step.kernel == kernel, step.kernel
    got = model.run(feeds)
    assert_outputs_close(got, evaluate(graph, feeds), ["y"], **TOL)
    return got[0]


def check_matmul(name, rng, specials=False):
    x_shape, w_shape = SHAPES[name]
    x = rng.standard_normal(x_shape).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    w = (rng.standard_normal(w_shape) / w_shape[0] ** 0.5).astype(np.float32)
    got = run(matmul_graph(x_shape, w), {"x": x}, "ge_nn_matmul_packed_f32")
    if specials:
        assert np.isnan(got).any()


def check_gemm(rng, trans_b, c_shape, m=17, k=300, n=45):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32) / k ** 0.5
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", [m, k])
        c = None if c_shape is None else es.const(rng.standard_normal(c_shape).astype(np.float32))
        gb.output(es.gemm(xin, es.const(w), c, alpha=0.75, beta=-1.5, transB=trans_b), "y")
    run(gb.graph, {"x": x}, "ge_nn_gemm_packed_f32")


def check_gelu_accuracy():
    """A FusedMatMul with Gelu over an identity weight: Gelu of every value on [-12, 12],
    and of NaN, inf and -inf (brought in by the bias, as a product would spread them over
    a row), against x erfc(-x / sqrt 2) / 2 in float64 (the avx512 tiles apply their own
    formula in registers, within 1e-7 |x|; the others the standalone Gelu's)."""
    x = np.linspace(-12, 12, 37 * 64).astype(np.float32).reshape(37, 64)
    bias = np.zeros(64, np.float32)
    bias[[5, 17, 40]] = [np.nan, np.inf, -np.inf]
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", [37, 64])
        gb.output(es.op("FusedMatMul", xin, es.const(np.eye(64, dtype=np.float32)),
                        es.const(bias), domain=FUSED_DOMAIN, activation="Gelu", alpha=0.0,
                        beta=0.0), "y")
    model = ge_hub.compile(gb.graph)
    assert model.plan.steps[0].kernel == "ge_nn_matmul_fused_packed_f32"
    (got,) = model.run({"x": x})
    pre = (x + bias).astype(np.float64).reshape(-1)
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) if math.isfinite(v)
                      else (v if v > 0 else np.nan) for v in pre])
    np.testing.assert_allclose(got.reshape(-1), exact, rtol=1e-6, atol=1e-6)


def test_gelu_in_the_tiles():
    check_gelu_accuracy()


@pytest.fixture
def rng():
    return np.random.default_rng(23)


@pytest.mark.parametrize("name", SHAPES)
def test_matmul(name, rng):
    check_matmul(name, rng)


@pytest.mark.parametrize("name", ["rows_13", "rows_29_deep", "row"])
def test_nan_and_inf_propagate(name, rng):
    check_matmul(name, rng, specials=True)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (45,), (1, 45)])
def test_gemm(trans_b, c_shape, rng):
    check_gemm(rng, trans_b, c_shape)


def test_other_products_keep_their_kernels(rng):
    """A computed B, a batched constant B, a Gemm with a full C or transA, and a product
    the precision pass marked bf16 do not take the packed kernel."""
    a = rng.standard_normal((5, 6)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [5, 6])
        b = es.input("b", "float32", [6, 4])
        gb.output(es.matmul(x, b), "y")
    assert ge_hub.compile(gb.graph).plan.steps[0].kernel == "ge_nn_matmul_f32"
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2, 5, 6])
        gb.output(es.matmul(x, es.const(rng.standard_normal((2, 6, 4)).astype(np.float32))),
                  "y")
    assert ge_hub.compile(gb.graph).plan.steps[0].kernel == "ge_nn_matmul_f32"
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [5, 6])
        gb.output(es.gemm(x, es.const(a.T.copy()), es.const(a[:, :5].copy())), "y")
    assert ge_hub.compile(gb.graph).plan.steps[0].kernel == "ge_nn_gemm_f32"
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [6, 5])
        gb.output(es.gemm(x, es.const(a.T.copy()), transA=1), "y")
    assert ge_hub.compile(gb.graph).plan.steps[0].kernel == "ge_nn_gemm_f32"
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [5, 64])
        gb.output(es.matmul(x, es.const(rng.standard_normal((64, 32)).astype(np.float32))),
                  "y")
    model = ge_hub.compile(gb.graph, options={"precision": "bf16"})
    assert model.plan.steps[0].kernel == "ge_nn_matmul_bf16"


@pytest.mark.parametrize("micro_kernel, threads", [("default", "1"), ("default", "2"),
                                                   ("default", "3"), ("avx2", "1"),
                                                   ("avx2", "2"), ("generic", "2")])
def test_each_micro_kernel_and_thread_count(micro_kernel, threads):
    """The micro-kernel is picked once per process from the CPU (GE_HUB_GEMM_KERNEL forces
    a lesser one) and products are split over the pool: each runs in a process of its
    own."""
    script = textwrap.dedent("""
        import numpy as np
        from tests.kernels import test_matmul_packed as t
        rng = np.random.default_rng(3)
        for name in t.SHAPES:
            t.check_matmul(name, rng)
            t.check_matmul(name, rng, specials=True)
        for trans_b in (0, 1):
            t.check_gemm(rng, trans_b, (45,))
        t.check_gelu_accuracy()
        print("ok")
    """)
    env = dict(os.environ, GE_HUB_NUM_THREADS=threads)
    if micro_kernel != "default":
        env["GE_HUB_GEMM_KERNEL"] = micro_kernel
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("rows, k, scratch", [(29, 2048, 29 * 2064 * 4), (4, 2048, 0),
                                              (29, 2000, 0), (29, 256, 0)])
def test_x_is_restrided_only_where_its_rows_would_alias(rows, k, scratch, rng):
    """The packer asks for scratch (X's rows 16 floats further apart) exactly when k is a
    multiple of 1024 floats, X has more than 4 rows and more than one slice of k."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [rows, k])
        gb.output(es.matmul(x, es.const(rng.standard_normal((k, 40)).astype(np.float32))),
                  "y")
    (step,) = ge_hub.compile(gb.graph).plan.steps
    assert step.kernel == "ge_nn_matmul_packed_f32"
    assert step.scratch_bytes == scratch


def test_a_plan_without_the_scratch_still_runs(rng):
    """An offline file planned before the restride gave the step no scratch: X is read in
    place, with the same result."""
    import dataclasses

    from ge_hub.executor import Executor

    w = rng.standard_normal((2048, 40)).astype(np.float32)
    graph = matmul_graph((29, 2048), w)
    plan = ge_hub.compile(graph).plan
    bare = dataclasses.replace(plan, steps=tuple(dataclasses.replace(s, scratch_bytes=0,
                                                                     scratch_offset=0)
                                                 for s in plan.steps))
    x = rng.standard_normal((29, 2048)).astype(np.float32)
    np.testing.assert_array_equal(Executor(bare).run([x])[0], Executor(plan).run([x])[0])
