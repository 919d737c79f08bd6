"""fuse_matmul_epilogue (rules): a MatMul's (or constant-weight Gemm's) bias Add, residual
Add and activation become one ge_hub.FusedMatMul with the same results; the rules stay
away where fusing would be wrong (an intermediate read elsewhere, a broadcast Add that is
not a bias, an activation before the Add, a Gemm whose alpha/beta/transA the kernel
does not take, a dtype the fused kernel does not run)."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es, rewrite
from ge_hub.passes.fuse_matmul_epilogue import NAME, RULES
from ge_hub.testing import assert_outputs_close, check_rule, random_feeds

RNG = np.random.default_rng(23)
FUSED = "FusedMatMul"

ACTIVATIONS = {
    "relu": lambda y: es.relu(y),
    "clip": lambda y: es.clip(y, np.float32(0.0), np.float32(6.0)),
    "leaky_relu": lambda y: es.leaky_relu(y, alpha=0.15),
    "sigmoid": lambda y: es.sigmoid(y),
    "hard_sigmoid": lambda y: es.hard_sigmoid(y, alpha=0.3, beta=0.4),
    "hard_swish": lambda y: es.hard_swish(y),
    "silu": lambda y: es.mul(y, es.sigmoid(y)),
    "gelu": lambda y: es.gelu(y),
}


def weight(k, n):
    return (RNG.standard_normal((k, n)) / k ** 0.5).astype(np.float32)


def vector(n):
    return RNG.standard_normal(n).astype(np.float32)


def linear(build, *, shape=(2, 7, 13), n=11, residual=False):
    """Graph with input x of `shape` (and z when `residual`), output build(x, z)."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(shape))
        z = es.input("z", "float32", [*shape[:-1], n]) if residual else None
        gb.output(build(x, z), "out")
    return gb.graph


def apply_all(graph):
    ctx = rewrite.PassContext()
    rewritten, fired = rewrite.apply(graph.copy(), RULES, ctx)
    return rewritten, fired, [e.reason for e in ctx.refusals()]


def fused(graph):
    return [n for n in graph.nodes if n.op == FUSED and n.domain == "ge_hub"]


def on_and_off_agree(graph, *, rtol=1e-5, atol=1e-5):
    feeds = random_feeds(graph, seed=3)
    on = ge_hub.compile(graph.copy())
    # fuse_elementwise off too: `off` is the plain graph whose steps the tests count
    off = ge_hub.compile(graph.copy(), options={"disable_passes": [NAME, "fuse_elementwise"]})
    assert_outputs_close(on.run(feeds), off.run(feeds), graph.output_names, rtol, atol)
    return on, off


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_each_activation_after_a_matmul_fuses(name):
    graph = linear(lambda x, z: ACTIVATIONS[name](es.matmul(x, weight(13, 11))))
    rule = next(r for r in RULES if r.name == f"{NAME}.{name}")
    rewritten, fired = check_rule(rule, graph, rtol=1e-5, atol=1e-5)
    assert fired == 1
    (node,) = rewritten.nodes
    assert node.op == FUSED and node.attrs["activation"] != ""


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_bias_residual_and_activation_become_one_step(name):
    w, b = weight(13, 11), vector(11)
    graph = linear(lambda x, z: ACTIVATIONS[name](es.add(es.add(es.matmul(x, w), b), z)),
                   residual=True)
    rewritten, fired, _ = apply_all(graph)
    assert fired == 3
    (node,) = rewritten.nodes
    assert node.op == FUSED and len([v for v in node.inputs if v is not None]) == 4
    check_rule(RULES, graph, rtol=1e-5, atol=1e-5)
    on, off = on_and_off_agree(graph)
    assert [s.op for s in on.plan.steps] == ["ge_hub.FusedMatMul"]
    assert len(off.plan.steps) == (5 if name == "silu" else 4)  # Sigmoid and Mul


def test_gelu_tanh_clip_bounds_and_bias_shapes_reach_the_node():
    w = weight(13, 11)
    graph = linear(lambda x, z: es.gelu(es.add(es.matmul(x, w), vector(11).reshape(1, 1, 11)),
                                        approximate="tanh"))
    (node,) = apply_all(graph)[0].nodes
    assert node.attrs["activation"] == "GeluTanh" and node.inputs[2].const.shape == (11,)
    graph = linear(lambda x, z: es.clip(es.add(np.float32(0.5), es.matmul(x, w)),
                                        np.float32(-1.5)))
    (node,) = apply_all(graph)[0].nodes
    assert (node.attrs["activation"], node.attrs["alpha"], node.attrs["beta"]) == \
        ("Clip", -1.5, np.inf)
    np.testing.assert_array_equal(node.inputs[2].const, np.full(11, 0.5, np.float32))
    on_and_off_agree(graph)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("with_c", [True, False])
def test_gemm_with_a_constant_weight_and_its_activation(trans_b, with_c):
    w = weight(13, 11)
    c = vector(11) if with_c else None

    def build(x, z):
        return es.relu(es.gemm(x, w.T.copy() if trans_b else w, c, transB=trans_b))

    graph = linear(build, shape=(19, 13))
    (gemm,) = [n for n in graph.nodes if n.op == "Gemm"]
    rewritten, fired, _ = apply_all(graph)
    assert fired == 1
    (node,) = rewritten.nodes
    assert node.op == FUSED and node.attrs["activation"] == "Relu"
    # The weight as the Gemm stores it, never a transposed copy: transB becomes trans_b.
    assert node.attrs.get("trans_b", 0) == trans_b
    assert node.inputs[1].const is gemm.inputs[1].const
    check_rule(RULES, graph, rtol=1e-5, atol=1e-5)
    on_and_off_agree(graph)


def test_gemm_residual_then_activation():
    w, c = weight(13, 11), vector(11)
    graph = linear(lambda x, z: es.sigmoid(es.add(es.gemm(x, w, c), z)), shape=(5, 13),
                   residual=True)
    rewritten, fired, _ = apply_all(graph)
    assert fired == 2
    (node,) = rewritten.nodes
    assert node.attrs["activation"] == "Sigmoid"
    on_and_off_agree(graph)


@pytest.mark.parametrize("attrs, why", [(dict(alpha=2.0), "alpha"),
                                        (dict(beta=0.5), "beta"),
                                        (dict(transA=1), "transA")])
def test_gemm_attributes_the_kernel_does_not_take_are_refused(attrs, why):
    w, c = weight(13, 11), vector(11)
    shape = (13, 5) if attrs.get("transA") else (5, 13)
    graph = linear(lambda x, z: es.relu(es.gemm(x, w, c, **attrs)), shape=shape)
    rewritten, fired, reasons = apply_all(graph)
    assert fired == 0 and any(why in r for r in reasons), reasons
    on_and_off_agree(graph)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_with_a_fed_weight_fuses_only_untransposed(trans_b):
    """ge-torch writes Gemm(x, Transpose(W)): the weight is computed (and folded at plan
    time), read as it is; a fed weight the Gemm transposes is refused."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [5, 13])
        w = es.input("w", "float32", [11, 13] if trans_b else [13, 11])
        gb.output(es.relu(es.gemm(x, w, vector(11), transB=trans_b)), "out")
    rewritten, fired, reasons = apply_all(gb.graph)
    if trans_b:
        assert fired == 0 and any("transB" in r for r in reasons), reasons
    else:
        assert fired == 1 and [n.op for n in rewritten.nodes] == [FUSED]
    on_and_off_agree(gb.graph)


def test_a_broadcast_add_that_is_not_a_bias_stays():
    w = weight(13, 11)
    per_row = RNG.standard_normal((7, 1)).astype(np.float32)
    graph = linear(lambda x, z: es.relu(es.add(es.matmul(x, w), per_row)))
    rewritten, fired, reasons = apply_all(graph)
    ops = sorted(n.op for n in rewritten.nodes)
    assert ops == ["Add", "FusedMatMul"] or ops == ["Add", "MatMul", "Relu"], ops
    assert not any(n.op == FUSED and n.inputs[2:3] != [None] and len(n.inputs) > 2
                   and n.inputs[2] is not None for n in rewritten.nodes)
    assert any("per column" in r or "broadcast" in r for r in reasons), reasons
    on_and_off_agree(graph)


def test_an_intermediate_read_elsewhere_is_not_swallowed():
    w, b = weight(13, 11), vector(11)

    def build(x, z):
        y = es.add(es.matmul(x, w), b)
        return es.add(es.relu(y), es.sigmoid(y))

    graph = linear(build)
    rewritten, _, _ = apply_all(graph)
    (node,) = fused(rewritten)
    assert node.attrs.get("activation", "") == "" and any(n.op == "Relu" for n in rewritten.nodes)
    on_and_off_agree(graph)


def test_an_activation_before_the_residual_keeps_the_add():
    w = weight(13, 11)
    graph = linear(lambda x, z: es.add(es.relu(es.matmul(x, w)), z), residual=True)
    rewritten, _, _ = apply_all(graph)
    assert sorted(n.op for n in rewritten.nodes) == ["Add", FUSED]
    on_and_off_agree(graph)


def test_integer_matmuls_and_vector_weights_are_left_alone():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "int32", [4, 6])
        gb.output(es.relu(es.matmul(x, np.ones((6, 3), np.int32))), "out")
    rewritten, fired, reasons = apply_all(gb.graph)
    assert fired == 0 and any("float32" in r for r in reasons)
    graph = linear(lambda x, z: es.relu(es.matmul(x, vector(13))))
    rewritten, fired, reasons = apply_all(graph)
    assert fired == 0 and any("rank" in r for r in reasons)


def test_a_two_layer_mlp_compiles_to_two_steps():
    w1, b1, w2, b2 = weight(13, 31), vector(31), weight(31, 11), vector(11)

    def build(x, z):
        hidden = es.relu(es.add(es.matmul(x, w1), b1))
        return es.add(es.matmul(hidden, w2), b2)

    graph = linear(build, shape=(3, 13))
    on, off = on_and_off_agree(graph)
    assert [s.op for s in on.plan.steps] == ["ge_hub.FusedMatMul"] * 2
    assert len(off.plan.steps) == 5


def test_an_activation_moves_across_a_reshape_to_reach_the_product():
    """ge-torch's Linear on [batch, seq, features]: Gemm on the flattened rows, Reshape
    back, then the activation."""
    w, c = weight(13, 11), vector(11)

    def build(x, z):
        y = es.gemm(es.reshape(x, np.array([14, 13], np.int64)), w, c)
        return es.gelu(es.reshape(y, np.array([2, 7, 11], np.int64)))

    graph = linear(build)
    rewritten, fired, _ = apply_all(graph)
    assert fired == 1
    assert [n.op for n in rewritten.nodes] == ["Reshape", FUSED, "Reshape"]
    assert fused(rewritten)[0].attrs["activation"] == "Gelu"
    check_rule(RULES, graph, rtol=1e-5, atol=1e-5)
    on, _ = on_and_off_agree(graph)
    assert "ge_hub.FusedMatMul" in [s.op for s in on.plan.steps]


def test_a_batch_1_linear_layer_fuses_into_the_packed_kernel():
    """Batch-1 Linear layers (Gemm with transB=1, as torch.onnx exports them): the weight
    is transposed at compile time and the FusedMatMul runs the packed-weight kernel, so
    the Relu joins it whatever the rows of A."""
    w = weight(13, 11)
    graph = linear(lambda x, z: es.relu(es.gemm(x, np.ascontiguousarray(w.T), vector(11),
                                                transB=1)),
                   shape=(1, 13))
    rewritten, fired, _ = apply_all(graph)
    assert fired == 1
    on, _ = on_and_off_agree(graph)
    assert [s.kernel for s in on.plan.steps] == ["ge_nn_matmul_fused_packed_f32"]
