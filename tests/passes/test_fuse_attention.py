"""fuse_attention (rules): the MatMul/scale/mask Add/Softmax/MatMul chain becomes one
ge_hub.Attention with the unfused graph's results, its K Transpose folded in; the rules
stay away where fusing would be wrong (an intermediate read elsewhere, Softmax over
another axis, a scale of several values, shapes or dtypes the kernel does not take)."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es, rewrite
from ge_hub.passes.fuse_attention import RULES
from ge_hub.testing import check_rule


def chain(*, scale="mul", mask=True, transpose=True, also_output=None, softmax_axis=-1,
          scale_value=None, dtype="float32", k_batch=(2, 3), q_shape=(2, 3, 11, 8), sk=13):
    *batch, s, d = q_shape
    with es.GraphBuilder("g") as gb:
        q = es.input("q", dtype, list(q_shape))
        k = es.input("k", dtype, [*k_batch, sk, d] if transpose else [*k_batch, d, sk])
        v = es.input("v", dtype, [*batch, sk, 5])
        rank = len(q_shape)
        kt = es.transpose(k, perm=[*range(rank - 2), rank - 1, rank - 2]) if transpose else k
        scores = es.matmul(q, kt)
        value = np.asarray(0.35 if scale_value is None else scale_value, dtype)
        if scale == "mul":
            scores = es.mul(scores, value)
        elif scale == "div":
            scores = es.div(scores, value)
        if mask:
            scores = es.add(scores, es.input("mask", dtype, [batch[0], 1, 1, sk]
                                             if len(batch) == 2 else [sk]))
        probs = es.softmax(scores, axis=softmax_axis)
        gb.output(es.matmul(probs, v), "y")
        if also_output == "scores":
            gb.output(scores, "scores")
        elif also_output == "probs":
            gb.output(probs, "probs")
        elif also_output == "kt":
            gb.output(kt, "kt")
    return gb.graph


def attention_nodes(graph):
    return [n for n in graph.nodes if (n.op, n.domain) == ("Attention", "ge_hub")]


def apply_all(graph):
    ctx = rewrite.PassContext()
    rewritten, fired = rewrite.apply(graph.copy(), RULES, ctx)
    return rewritten, fired, [e.reason for e in ctx.refusals()]


@pytest.mark.parametrize("scale", ["mul", "div", "none"])
@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_each_form_becomes_one_attention(scale, mask, transpose):
    graph = chain(scale=scale, mask=mask, transpose=transpose)
    rewritten, fired = check_rule(RULES, graph, rtol=1e-4, atol=1e-5)
    (node,) = rewritten.nodes
    assert (node.op, node.domain) == ("Attention", "ge_hub")
    assert node.attrs["k_transposed"] == int(transpose)
    assert node.attrs["scale_divides"] == int(scale == "div")
    assert node.attrs["scale"] == pytest.approx(1.0 if scale == "none" else 0.35)


def test_rank_3_heads_folded_into_the_batch():
    graph = chain(q_shape=(6, 9, 4), k_batch=(6,), sk=21)
    rewritten, _ = check_rule(RULES, graph, rtol=1e-4, atol=1e-5)
    assert len(attention_nodes(rewritten)) == 1


@pytest.mark.parametrize("what", ["scores", "probs"])
def test_an_intermediate_read_elsewhere_is_not_swallowed(what):
    rewritten, fired, reasons = apply_all(chain(also_output=what))
    assert fired == 0 and not attention_nodes(rewritten) and reasons


def test_a_transpose_read_elsewhere_stays_and_its_output_is_k_t():
    rewritten, fired, _ = apply_all(chain(also_output="kt"))
    (node,) = attention_nodes(rewritten)
    assert node.attrs["k_transposed"] == 0
    assert "Transpose" in [n.op for n in rewritten.nodes]
    check_rule(RULES, chain(also_output="kt"), rtol=1e-4, atol=1e-5)


def test_softmax_over_another_axis_is_not_attention():
    rewritten, fired, reasons = apply_all(chain(softmax_axis=-2))
    assert fired == 0 and any("axis" in r for r in reasons), reasons


def test_a_scale_of_several_values_stays():
    rewritten, fired, reasons = apply_all(chain(scale_value=np.full(13, 0.5)))
    assert fired == 0 and any("values" in r for r in reasons), reasons


def test_keys_shared_across_heads_are_left_to_the_matmuls():
    rewritten, fired, reasons = apply_all(chain(k_batch=(2, 1)))
    assert fired == 0 and any("leading dims" in r for r in reasons), reasons


def test_float64_is_not_fused():
    rewritten, fired, reasons = apply_all(chain(dtype="float64"))
    assert fired == 0 and any("float32" in r for r in reasons), reasons


def split_heads_chain(*, also_output_q=False, v_perm=(0, 2, 1, 3)):
    """Q, K, V given [B, S, H, D] and the context merged back, as exporters write it."""
    with es.GraphBuilder("g") as gb:
        q = es.input("q", "float32", [2, 9, 3, 4])
        k = es.input("k", "float32", [2, 11, 3, 4])
        v = es.input("v", "float32", [2, 11, 3, 5] if v_perm == (0, 2, 1, 3) else [2, 3, 5, 11])
        qt = es.transpose(q, perm=[0, 2, 1, 3])
        kt = es.transpose(es.transpose(k, perm=[0, 2, 1, 3]), perm=[0, 1, 3, 2])
        vt = es.transpose(v, perm=list(v_perm))
        probs = es.softmax(es.mul(es.matmul(qt, kt), np.float32(0.5)), axis=-1)
        gb.output(es.transpose(es.matmul(probs, vt), perm=[0, 2, 1, 3]), "y")
        if also_output_q:
            gb.output(qt, "qt")
    return gb.graph


def test_head_split_and_merge_transposes_fold_into_the_op():
    rewritten, fired = check_rule(RULES, split_heads_chain(), min_fired=5, rtol=1e-4,
                                  atol=1e-5)
    (node,) = rewritten.nodes
    assert node.attrs["q_perm"] == [0, 2, 1, 3] and node.attrs["v_perm"] == [0, 2, 1, 3]
    assert node.attrs["out_perm"] == [0, 2, 1, 3]
    # K: the two Transposes (merged by simplify into [0, 2, 3, 1]) as K^T, or as K
    # transposed back; either way read in place.
    assert node.attrs["k_perm"] and node.inputs[1].name == "k"


def test_a_transpose_read_elsewhere_is_not_folded():
    rewritten, _, _ = apply_all(split_heads_chain(also_output_q=True))
    (node,) = attention_nodes(rewritten)
    assert not node.attrs.get("q_perm") and "Transpose" in [n.op for n in rewritten.nodes]
    check_rule(RULES, split_heads_chain(also_output_q=True), rtol=1e-4, atol=1e-5)


def test_a_v_transpose_moving_its_rows_stays_a_step():
    graph = split_heads_chain(v_perm=(0, 1, 3, 2))
    rewritten, _, reasons = apply_all(graph)
    (node,) = attention_nodes(rewritten)
    assert not node.attrs.get("v_perm") and any("last axis" in r for r in reasons), reasons
    check_rule(RULES, graph, rtol=1e-4, atol=1e-5)
