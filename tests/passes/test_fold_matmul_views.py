"""fold_matmul_views: the Transposes, Splits and Reshapes around a bf16 MatMul of two
activations become strided views of one ge_hub.StridedMatMul, whose plan gives the same
bits as the unfolded bf16 plan (the same values rounded into the same panels, the same
products), and runs no step for them; views compose as NumPy's do (a Reshape only where
NumPy reshapes without a copy); fp32 plans, MatMuls kept fp32, graph outputs and chains
read elsewhere are left as they were."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.kernels.nn_strided import contiguous_strides
from ge_hub.passes.fold_matmul_views import reshaped

BF16 = {"precision": "bf16"}
UNFOLDED = {"precision": "bf16", "disable_passes": ["fold_matmul_views"]}


def _const(rng, *shape):
    return es.const((rng.standard_normal(shape) * 0.3).astype(np.float32))


def fused_qkv_encoder(rng, b=2, s=19, h=3, d=8, dim=16, merged_output=False):
    """A fused QKV projection split into heads the way torch exports it: reshape to
    [B, S, 3, H, D], transpose to [3, B, H, S, D], split, squeeze; K transposed; the
    context transposed back and reshaped for the output projection."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [b, s, dim])
        qkv = es.op("MatMul", x, _const(rng, dim, 3 * h * d))
        heads = es.op("Reshape", qkv, es.const(np.array([b, s, 3, h, d], np.int64)))
        heads = es.op("Transpose", heads, perm=[2, 0, 3, 1, 4])
        parts = es.op("Split", heads, axis=0, outputs=3)
        axis0 = es.const(np.array([0], np.int64))
        q, k, v = (es.op("Squeeze", p, axis0) for p in parts)
        scores = es.op("MatMul", q, es.op("Transpose", k, perm=[0, 1, 3, 2]), name="scores")
        probs = es.op("Softmax", es.op("Mul", scores, es.const(np.float32(d ** -0.5))))
        context = es.op("Transpose", es.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        if merged_output:
            gb.output(context, "context")
        merged = es.op("Reshape", context, es.const(np.array([b, s, h * d], np.int64)))
        gb.output(es.op("MatMul", merged, _const(rng, h * d, dim)), "y")
    return gb.graph, {"x": rng.standard_normal((b, s, dim)).astype(np.float32)}


def separate_qkv_encoder(rng, b=1, s=33, h=4, d=16, dim=24):
    """BERT's layout: Q, K and V projected apart, each reshaped to [B, S, H, D]; Q and V
    transposed to [B, H, S, D], K straight to K^T [B, H, D, S]."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [b, s, dim])
        split = es.const(np.array([b, s, h, d], np.int64))
        q, k, v = (es.op("Reshape", es.op("MatMul", x, _const(rng, dim, h * d)), split)
                   for _ in range(3))
        scores = es.op("MatMul", es.op("Transpose", q, perm=[0, 2, 1, 3]),
                       es.op("Transpose", k, perm=[0, 2, 3, 1]))
        probs = es.op("Softmax", scores)
        context = es.op("MatMul", probs, es.op("Transpose", v, perm=[0, 2, 1, 3]))
        merged = es.op("Reshape", es.op("Transpose", context, perm=[0, 2, 1, 3]),
                       es.const(np.array([b, s, h * d], np.int64)))
        gb.output(es.op("MatMul", merged, _const(rng, h * d, dim)), "y")
    return gb.graph, {"x": rng.standard_normal((b, s, dim)).astype(np.float32)}


def step_ops(model) -> list[str]:
    return [s.op.rpartition(".")[2] for s in model.plan.steps]


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("build", [fused_qkv_encoder, separate_qkv_encoder])
def test_attention_reads_and_writes_in_place_with_the_same_bits(build, rng):
    graph, feeds = build(rng)
    folded = ge_hub.compile(graph, options=BF16)
    unfolded = ge_hub.compile(graph, options=UNFOLDED)
    assert {"Transpose", "Split"} & set(step_ops(unfolded))
    ops = step_ops(folded)
    assert ops.count("StridedMatMul") == 2
    assert "Transpose" not in ops and "Split" not in ops
    for got, want in zip(folded.run(feeds), unfolded.run(feeds)):
        np.testing.assert_array_equal(got, want)
    precision = folded.summary()["precision"]
    assert precision["fp32_products"] == []
    assert precision["bf16_steps"] == len([o for o in ops if "MatMul" in o])
    # and near the fp32 plan, as bf16 products are
    (want,) = ge_hub.compile(graph).run(feeds)
    (got,) = folded.run(feeds)
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


@pytest.mark.parametrize("build", [fused_qkv_encoder, separate_qkv_encoder])
def test_fp32_plans_fold_with_the_same_bits(build, rng):
    """Through the BLAS (transB for K^T, leading dims for the views): the same products,
    tiles and threads as the MatMul steps after their Transposes."""
    graph, feeds = build(rng)
    folded = ge_hub.compile(graph)
    kernels = [s.kernel for s in folded.plan.steps]
    assert kernels.count("ge_nn_matmul_strided_f32") == 2
    assert "Transpose" not in step_ops(folded) and "Split" not in step_ops(folded)
    unfolded = ge_hub.compile(graph, options={"disable_passes": ["fold_matmul_views"]})
    for got, want in zip(folded.run(feeds), unfolded.run(feeds)):
        np.testing.assert_array_equal(got, want)


def test_a_folded_output_transpose_gives_its_name_to_the_product(rng):
    """The product that now writes the Transpose's output holds that value, under its
    name: `ge-hub compare` matches it with the reference's Transpose output (under the
    MatMul's own name it showed a shape mismatch for the heads' merge)."""
    from ge_hub.compare import compare_model

    graph, feeds = separate_qkv_encoder(rng)
    context = next(n for n in graph.nodes if n.op == "Transpose"
                   and n.inputs[0].producer is not None and n.inputs[0].producer.op == "MatMul")
    name = context.outputs[0].name
    model = ge_hub.compile(graph)
    (step,) = [s for s in model.plan.steps if model.plan.tensors[s.outputs[0]].name == name]
    assert step_ops(model)[model.plan.steps.index(step)] == "StridedMatMul"
    result = compare_model(model, graph, feeds)
    assert name in [v.value for v in result.values]
    assert all(v.problem is None for v in result.values), [v.problem for v in result.values]


def test_a_product_kept_fp32_folds_on_the_fp32_kernel(rng):
    graph, feeds = fused_qkv_encoder(rng)
    forced = {"precision": "bf16", "precision_ops": {"scores": "fp32"}}
    model = ge_hub.compile(graph, options=forced)
    kernels = {s.node: s.kernel for s in model.plan.steps}
    assert kernels["scores"] == "ge_nn_matmul_strided_f32"
    assert list(kernels.values()).count("ge_nn_matmul_strided_bf16") == 1
    assert "Transpose" not in step_ops(model)
    assert model.summary()["precision"]["fp32_products"] == ["scores"]
    want = ge_hub.compile(graph, options={**forced, "disable_passes": ["fold_matmul_views"]})
    np.testing.assert_array_equal(model.run(feeds)[0], want.run(feeds)[0])


def test_a_graph_output_keeps_its_step_and_name(rng):
    """The merged context is also a graph output: its Transpose stays (the output's name is
    the model's), the products still read through views."""
    graph, feeds = fused_qkv_encoder(rng, merged_output=True)
    model = ge_hub.compile(graph, options=BF16)
    assert model.output_names == ["context", "y"]
    assert step_ops(model).count("Transpose") == 1
    want = ge_hub.compile(graph, options=UNFOLDED).run(feeds)
    for got, expected in zip(model.run(feeds), want):
        np.testing.assert_array_equal(got, expected)


def test_a_chain_read_elsewhere_stays_for_its_other_reader(rng):
    with es.GraphBuilder("g") as gb:
        a = es.input("a", "float32", [3, 5, 4])
        b = es.input("b", "float32", [3, 6, 4])
        bt = es.op("Transpose", b, perm=[0, 2, 1])
        gb.output(es.op("MatMul", es.op("Relu", a), bt), "y")
        gb.output(es.op("Relu", bt), "bt")
    feeds = {"a": rng.standard_normal((3, 5, 4)).astype(np.float32),
             "b": rng.standard_normal((3, 6, 4)).astype(np.float32)}
    model = ge_hub.compile(gb.graph, options=BF16)
    assert "StridedMatMul" in step_ops(model) and "Transpose" in step_ops(model)
    want = ge_hub.compile(gb.graph, options=UNFOLDED).run(feeds)
    for got, expected in zip(model.run(feeds), want):
        np.testing.assert_array_equal(got, expected)


def test_a_reshape_that_needs_a_copy_ends_the_chain(rng):
    """Transpose then a Reshape merging the swapped dims (NumPy would copy): the fold
    stops at the Reshape's output, which stays a step; the Transpose after it folds."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [4, 6, 10])
        merged = es.op("Reshape", es.op("Transpose", es.op("Relu", x), perm=[1, 0, 2]),
                       es.const(np.array([24, 10], np.int64)))
        z = es.input("z", "float32", [7, 10])
        gb.output(es.op("MatMul", es.op("Relu", z), es.op("Transpose", merged, perm=[1, 0])),
                  "y")
    feeds = {"x": rng.standard_normal((4, 6, 10)).astype(np.float32),
             "z": rng.standard_normal((7, 10)).astype(np.float32)}
    model = ge_hub.compile(gb.graph, options=BF16)
    ops = step_ops(model)
    assert "StridedMatMul" in ops and ops.count("Transpose") == 1
    np.testing.assert_array_equal(model.run(feeds)[0],
                                  ge_hub.compile(gb.graph, options=UNFOLDED).run(feeds)[0])


@pytest.mark.parametrize("seed", range(40))
def test_reshaped_views_agree_with_numpy(seed):
    """reshaped() gives strides exactly where NumPy reshapes a strided view without a
    copy, and those strides address the same values."""
    rng = np.random.default_rng(seed)
    shape = [int(d) for d in rng.integers(1, 5, rng.integers(2, 5))]
    base = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    perm = [int(p) for p in rng.permutation(len(shape))]
    view = base.transpose(perm)
    strides = [contiguous_strides(shape)[p] for p in perm]
    sizes = list(view.shape)
    new = []  # a random regrouping of the view's values into new dims
    flat = [d for d in sizes for d in ([d] if rng.random() < 0.5 or d == 1 else [1, d])]
    while flat:
        take = int(rng.integers(1, min(3, len(flat)) + 1))
        new.append(int(np.prod(flat[:take])))
        flat = flat[take:]
    try:
        want = np.reshape(view, new, copy=False)
    except ValueError:
        want = None
    got = reshaped(list(view.shape), strides, new)
    assert (got is None) == (want is None), (view.shape, view.strides, new, got)
    if got is not None:
        index = np.zeros(new, np.int64)
        for axis, (size, stride) in enumerate(zip(new, got)):
            index = index + (np.arange(size) * stride).reshape(
                (size,) + (1,) * (len(new) - axis - 1))
        np.testing.assert_array_equal(base.reshape(-1)[index], want)
