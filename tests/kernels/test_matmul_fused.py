"""ge_hub.FusedMatMul's C kernels against the NumPy reference of
the subgraph it replaces (MatMul, then Add of the bias, Add of the residual, then the
activation's own reference): every activation, with and without bias and residual, odd
sizes, batch broadcasting (B shared, A shared, both batched), products split in tiles
over the pool and in several epilogue blocks, NaN and inf, and the product both through
the BLAS and through ge-hub's portable loop (GE_HUB_BLAS=none), in processes of their
own with several thread counts. Two kernels run it: ge_nn_linear_f32 (nn_matmul_packed.c)
where B is a constant matrix, laid out at compile time, and ge_nn_matmul_fused_f32 (the
BLAS) otherwise; each constant case runs both ways, the second with B fed as an input."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.ops.conv import CONV_ACTIVATIONS
from ge_hub.ops.nn import FUSED_DOMAIN
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close

# NumPy warns about the NaN and inf the specials tests feed on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

KERNEL = "ge_nn_matmul_fused_f32"
PACKED_KERNEL = "ge_nn_matmul_fused_packed_f32"
TOL = dict(rtol=2e-4, atol=2e-4)

# activation -> (alpha, beta)
PARAMS = {"": (0.0, 0.0), "Relu": (0.0, 0.0), "Clip": (-0.5, 0.75), "LeakyRelu": (0.13, 0.0),
          "Sigmoid": (0.0, 0.0), "HardSigmoid": (0.3, 0.45), "HardSwish": (0.0, 0.0),
          "SiLU": (0.0, 0.0), "Gelu": (0.0, 0.0), "GeluTanh": (0.0, 0.0)}

# name -> (A shape, B shape, B constant)
CASES = {
    "vector_rows": ((1, 7), (7, 5), True),
    "odd": ((13, 37), (37, 29), True),
    "batched_shared_b": ((2, 3, 11, 19), (19, 23), True),      # one tall GEMM
    "batched_both": ((3, 9, 17), (3, 17, 21), False),
    "broadcast_a": ((9, 17), (4, 17, 13), False),
    "broadcast_batch": ((2, 1, 5, 7), (1, 3, 7, 6), False),
    "vector_a": ((17,), (17, 11), True),
    "wide": ((7, 64), (64, 700), True),                       # several epilogue blocks
    "tiled": ((96, 200), (200, 300), True),                   # split over the pool
    "tiled_rows": ((300, 160), (160, 40), True),
    "empty_k": ((4, 0), (0, 6), True),
    "short_wide": ((3, 45), (45, 200), True),                 # 4-panel tiles, then single
    "deep": ((29, 600), (600, 70), True),                     # 3 slices of k, edge tiles
    # k a multiple of 1024: X's rows are copied further apart first (restride_bytes)
    "restrided": ((29, 2048), (2048, 70), True),
}


def out_shape(a_shape, b_shape):
    return np.matmul(np.zeros(a_shape, np.float32), np.zeros(b_shape, np.float32)).shape


def fused_graph(case, rng, activation, *, bias=True, residual=True, specials=False,
                b_input=False):
    a_shape, b_shape, b_const = CASES[case]
    b_const = b_const and not b_input
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = (rng.standard_normal(b_shape) / max(1, b_shape[-2]) ** 0.5).astype(np.float32)
    out = out_shape(a_shape, b_shape)
    c = rng.standard_normal(out[-1]).astype(np.float32) if bias else None
    z = rng.standard_normal(out).astype(np.float32) if residual else None
    if specials and a.size >= 3:
        flat = a.reshape(-1)
        flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    alpha, beta = PARAMS[activation]
    with es.GraphBuilder("g") as gb:
        ain = es.input("a", "float32", list(a_shape))
        bin_ = es.const(b) if b_const else es.input("b", "float32", list(b_shape))
        zin = None if z is None else es.input("z", "float32", list(out))
        y = es.op("FusedMatMul", ain, bin_, None if c is None else es.const(c), zin,
                  domain=FUSED_DOMAIN, activation=activation, alpha=alpha, beta=beta)
        es.output(y, "y")
    feeds = {"a": a}
    if not b_const:
        feeds["b"] = b
    if z is not None:
        feeds["z"] = z
    return gb.graph, feeds


def unfused_reference(graph, feeds):
    """The subgraph FusedMatMul stands for, built from the plain ops and evaluated by
    their references: MatMul, Add(bias), Add(Z), activation."""
    (node,) = graph.nodes
    values = {v.name: feeds[v.name] for v in graph.inputs}
    for v in node.inputs:
        if v is not None and v.is_constant:
            values[v.name] = v.const
    a, b, c, z = (None if v is None else values[v.name] for v in
                  list(node.inputs) + [None] * (4 - len(node.inputs)))
    ops = ge_hub.ops
    y = ops.get_schema("MatMul").reference(a, b)
    add = ops.get_schema("Add").reference
    if c is not None:
        y = add(y, c)
    if z is not None:
        y = add(y, z)
    alpha, beta = node.attrs["alpha"], node.attrs["beta"]
    act = node.attrs["activation"]
    if act == "Relu":
        y = ops.get_schema("Relu").reference(y)
    elif act == "Clip":
        y = ops.get_schema("Clip").reference(y, np.float32(alpha), np.float32(beta))
    elif act == "LeakyRelu":
        y = ops.get_schema("LeakyRelu").reference(y, alpha=alpha)
    elif act == "Sigmoid":
        y = ops.get_schema("Sigmoid").reference(y)
    elif act == "HardSigmoid":
        y = ops.get_schema("HardSigmoid").reference(y, alpha=alpha, beta=beta)
    elif act == "HardSwish":
        y = ops.get_schema("HardSwish").reference(y)
    elif act == "SiLU":
        y = ops.get_schema("Mul").reference(y, ops.get_schema("Sigmoid").reference(y))
    elif act in ("Gelu", "GeluTanh"):
        y = ops.get_schema("Gelu").reference(
            y, approximate="tanh" if act == "GeluTanh" else "none")
    return y


def expected_kernel(case, b_input):
    a_shape, b_shape, b_const = CASES[case]
    packed = b_const and not b_input and len(b_shape) == 2 and b_shape[0] > 0
    return PACKED_KERNEL if packed else KERNEL


def run_and_compare(case, activation, rng, *, b_input=False, **kwargs):
    graph, feeds = fused_graph(case, rng, activation, b_input=b_input, **kwargs)
    model = ge_hub.compile(graph)
    (step,) = model.plan.steps
    assert step.kernel == expected_kernel(case, b_input), step.kernel
    got = model.run(feeds)
    want = unfused_reference(graph, feeds)
    assert_outputs_close(got, [want], ["y"], **TOL)
    assert_outputs_close(got, evaluate(graph, feeds), ["y"], **TOL)
    return got[0], want


@pytest.fixture
def rng():
    return np.random.default_rng(17)


def both_kernels(cases):
    """(case, b_input) pairs: a constant-B case once per kernel, the others once."""
    return [(case, b_input) for case in cases for b_input in (False, True)
            if not b_input or CASES[case][2]]


@pytest.mark.parametrize("activation", CONV_ACTIVATIONS)
@pytest.mark.parametrize("case, b_input", both_kernels(["odd", "batched_shared_b", "wide"]))
def test_every_activation(case, b_input, activation, rng):
    run_and_compare(case, activation, rng, b_input=b_input)


@pytest.mark.parametrize("case, b_input", both_kernels(CASES))
@pytest.mark.parametrize("bias, residual, activation", [(True, True, "Relu"),
                                                        (True, False, "Gelu"),
                                                        (False, True, ""),
                                                        (False, False, "HardSwish")])
def test_every_shape(case, b_input, bias, residual, activation, rng):
    run_and_compare(case, activation, rng, b_input=b_input, bias=bias, residual=residual)


@pytest.mark.parametrize("case, b_input", both_kernels(["odd", "batched_both", "tiled"]))
@pytest.mark.parametrize("activation", ["", "Relu", "Clip", "Sigmoid", "Gelu"])
def test_nan_and_inf_propagate(case, b_input, activation, rng):
    got, want = run_and_compare(case, activation, rng, b_input=b_input, specials=True)
    assert np.isnan(got).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_bad_operands_are_refused_at_compile_time():
    with es.GraphBuilder("g") as gb:
        a = es.input("a", "float32", [3, 4])
        b = es.const(np.ones((4, 5), np.float32))
        with pytest.raises(ge_hub.errors.OpError, match="'Bias'"):
            es.op("FusedMatMul", a, b, es.const(np.ones(4, np.float32)), domain=FUSED_DOMAIN)
        with pytest.raises(ge_hub.errors.OpError, match="'Z'"):
            es.op("FusedMatMul", a, b, None, es.input("z", "float32", [3, 4]),
                  domain=FUSED_DOMAIN)
        with pytest.raises(ge_hub.errors.OpError, match="activation"):
            es.op("FusedMatMul", a, b, domain=FUSED_DOMAIN, activation="Tanh")
        with pytest.raises(ge_hub.errors.OpError, match="'B'"):
            es.op("FusedMatMul", a, es.const(np.ones(4, np.float32)), domain=FUSED_DOMAIN)
        with pytest.raises(ge_hub.errors.OpError, match="inner dims"):  # B' is 5 x 4
            es.op("FusedMatMul", a, b, domain=FUSED_DOMAIN, trans_b=1)
        with pytest.raises(ge_hub.errors.OpError, match="trans_b"):
            es.op("FusedMatMul", a, b, domain=FUSED_DOMAIN, trans_b=2)
        gb.output(es.op("FusedMatMul", a, b, domain=FUSED_DOMAIN), "y")


@pytest.mark.parametrize("blas, threads, micro_kernel", [
    ("default", "1", "default"), ("default", "3", "default"), ("none", "2", "default"),
    ("default", "2", "avx2"), ("default", "1", "generic"), ("default", "3", "generic")])
def test_each_product_path_and_thread_count(blas, threads, micro_kernel):
    """The product runs through the loaded BLAS or ge-hub's portable loop
    (GE_HUB_BLAS=none), or with a constant B through the packed kernel's micro-kernels
    (GE_HUB_GEMM_KERNEL forces avx2 or generic where the CPU has better), on one thread or
    split over several; each is chosen once per process, so each runs in a process of its
    own."""
    script = textwrap.dedent("""
        import numpy as np
        from tests.kernels import test_matmul_fused as t
        rng = np.random.default_rng(5)
        for case, b_input in t.both_kernels(t.CASES):
            for activation in ("Relu", "Clip", "LeakyRelu", "SiLU", "GeluTanh", ""):
                t.run_and_compare(case, activation, rng, b_input=b_input)
            t.run_and_compare(case, "Relu", rng, b_input=b_input, specials=True, bias=False)
        print("ok")
    """)
    env = dict(os.environ, GE_HUB_NUM_THREADS=threads)
    if micro_kernel != "default":
        env["GE_HUB_GEMM_KERNEL"] = micro_kernel
    if blas == "none":
        env["GE_HUB_BLAS"] = "none"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("a_shape, n", [((13, 37), 29), ((1, 300), 70), ((2, 5, 45), 200)])
def test_trans_b_reads_the_weight_as_stored(a_shape, n, precision, rng):
    """trans_b=1 (a Gemm's transB, kept by the fusion instead of a transposed copy): B is
    [N, K] and the product is A @ B^T, on both constant-weight kernels."""
    k = a_shape[-1]
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = (rng.standard_normal((n, k)) / k ** 0.5).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        y = es.op("FusedMatMul", es.input("a", "float32", list(a_shape)), es.const(b),
                  es.const(c), domain=FUSED_DOMAIN, activation="Relu", trans_b=1)
        es.output(y, "y")
    graph = gb.graph
    assert graph.outputs[0].type.shape == (*a_shape[:-1], n)
    model = ge_hub.compile(graph, options={"precision": precision})
    (step,) = model.plan.steps
    assert step.kernel == (PACKED_KERNEL if precision == "fp32" else "ge_nn_matmul_fused_bf16")
    got = model.run({"a": a})
    want = np.maximum(a @ b.T + c, 0)
    tol = TOL if precision == "fp32" else dict(rtol=3e-2, atol=3e-2)
    assert_outputs_close(got, [want], ["y"], **tol)
    assert_outputs_close(got, evaluate(graph, {"a": a}), ["y"], **tol)
