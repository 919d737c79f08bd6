"""ge_hub.Attention's C kernel (core/kernels/nn_attention.c) against the NumPy references
of the unfused nodes it replaces (Transpose, MatMul, the scale Mul or Div, the mask Add,
Softmax, MatMul): odd head sizes, several query-row blocks and key blocks (the online
softmax), ranks 3 and 4, K^T given as an operand, every broadcast of the mask, -inf
masks (a key block or a whole row masked), NaN and inf, and each micro-kernel variant."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.passes.fuse_attention import RULE_NAMES
from ge_hub.reference import evaluate

from .nn_cases import random_array

KERNEL = "ge_nn_attention_f32"
ON = {"enable_rules": RULE_NAMES}  # the compiler's fuse_attention rules are opt-in
TOL = dict(rtol=1e-4, atol=2e-5)


def attention_graph(q_shape, sk, dv, *, mask_shape=None, scale=("mul", 0.125),
                    k_given_transposed=False):
    """The unfused chain, inputs q, k (or kt), v and mask."""
    *batch, s, d = q_shape
    k_shape = [*batch, d, sk] if k_given_transposed else [*batch, sk, d]
    rank = len(q_shape)
    perm = [*range(rank - 2), rank - 1, rank - 2]
    with es.GraphBuilder("g") as gb:
        q = es.input("q", "float32", list(q_shape))
        k = es.input("k", "float32", k_shape)
        v = es.input("v", "float32", [*batch, sk, dv])
        kt = k if k_given_transposed else es.transpose(k, perm=perm)
        scores = es.matmul(q, kt)
        if scale is not None:
            kind, value = scale
            op = es.mul if kind == "mul" else es.div
            scores = op(scores, np.float32(value))
        if mask_shape is not None:
            scores = es.add(scores, es.input("mask", "float32", list(mask_shape)))
        gb.output(es.matmul(es.softmax(scores, axis=-1), v), "y")
    return gb.graph


def feeds_for(graph, rng):
    return {v.name: random_array(rng, v.type.shape, -1.5, 1.5) for v in graph.inputs}


def run_fused(graph, feeds):
    model = ge_hub.compile(graph, options=ON)
    kernels = [s.kernel for s in model.plan.steps]
    assert kernels == [KERNEL], kernels
    (got,) = model.run(feeds)
    with np.errstate(all="ignore"):
        (want,) = evaluate(graph, feeds)
    return got, want


CASES = {
    # name: (q shape, sk, dv, mask shape)
    "bert_like": ((1, 12, 16, 64), 16, 64, (1, 1, 1, 16)),
    "odd_sizes": ((2, 3, 37, 7), 37, 19, None),
    "many_blocks": ((1, 2, 70, 24), 300, 80, (70, 300)),
    "one_row": ((2, 1, 1, 5), 129, 5, None),
    "rank3": ((6, 33, 16), 45, 16, (6, 33, 45)),
    "full_mask": ((2, 2, 35, 8), 130, 9, (2, 2, 35, 130)),
    "key_mask": ((3, 2, 9, 12), 200, 12, (3, 1, 1, 200)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("scale", [("mul", 0.125), ("div", 2.7), None])
def test_matches_the_unfused_chain(case, scale, rng):
    q_shape, sk, dv, mask_shape = CASES[case]
    graph = attention_graph(q_shape, sk, dv, mask_shape=mask_shape, scale=scale)
    got, want = run_fused(graph, feeds_for(graph, rng))
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("case", ["odd_sizes", "many_blocks", "rank3"])
def test_k_transposed_given_as_an_operand(case, rng):
    q_shape, sk, dv, mask_shape = CASES[case]
    graph = attention_graph(q_shape, sk, dv, mask_shape=mask_shape, k_given_transposed=True)
    got, want = run_fused(graph, feeds_for(graph, rng))
    np.testing.assert_allclose(got, want, **TOL)


def split_heads_graph(batch, s, heads, d, sk, dv, *, rank=4):
    """Attention as a transformers export leaves it: Q, K, V given [B, S, H, D] and moved
    to [B, H, S, D] by Transposes (K to [B, H, D, S] by two), the context moved back;
    after fusion all of them are strides of the one Attention step. rank=3 puts the
    heads first: [S, H, D] -> [H, S, D]."""
    lead = [batch] if rank == 4 else []
    split = [0, 2, 1, 3] if rank == 4 else [1, 0, 2]
    swap = [0, 1, 3, 2] if rank == 4 else [0, 2, 1]
    with es.GraphBuilder("g") as gb:
        q = es.input("q", "float32", [*lead, s, heads, d])
        k = es.input("k", "float32", [*lead, sk, heads, d])
        v = es.input("v", "float32", [*lead, sk, heads, dv])
        mask = es.input("mask", "float32", [*lead[:1], 1, 1, sk][-rank:])
        kt = es.transpose(es.transpose(k, perm=split), perm=swap)
        scores = es.div(es.matmul(es.transpose(q, perm=split), kt), np.float32(3.0))
        probs = es.softmax(es.add(scores, mask), axis=-1)
        y = es.matmul(probs, es.transpose(v, perm=split))
        gb.output(es.transpose(y, perm=split), "y")
    return gb.graph


LAYOUTS = {"bert": (2, 37, 3, 16, 37, 16, 4), "long_keys": (1, 20, 2, 7, 260, 9, 4),
           "rank3": (1, 33, 5, 8, 140, 12, 3)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_folded_transposes_read_and_write_in_place(layout, rng):
    *dims, rank = LAYOUTS[layout]
    graph = split_heads_graph(*dims, rank=rank)
    model = ge_hub.compile(graph, options=ON)
    assert [s.kernel for s in model.plan.steps] == [KERNEL], [s.op for s in model.plan.steps]
    feeds = feeds_for(graph, rng)
    (got,) = model.run(feeds)
    (want,) = evaluate(graph, feeds)
    np.testing.assert_allclose(got, want, **TOL)


def masked_feeds(graph, rng):
    """Feeds whose mask hides keys with -inf: in row 0 every key (a NaN row, 0 / 0, as in
    the reference), in row 1 the whole first key block (the online softmax starts late),
    elsewhere at random."""
    feeds = feeds_for(graph, rng)
    mask = feeds["mask"]
    mask[rng.random(mask.shape) < 0.3] = -np.inf
    mask[..., 0, :] = -np.inf
    mask[..., 1, :128] = -np.inf
    return feeds


def test_minus_inf_masks(rng):
    graph = attention_graph((2, 2, 35, 8), 300, 9, mask_shape=(2, 2, 35, 300))
    got, want = run_fused(graph, masked_feeds(graph, rng))
    assert np.isnan(want[:, :, 0]).all() and not np.isnan(want[:, :, 1:]).any()
    np.testing.assert_allclose(got, want, equal_nan=True, **TOL)


@pytest.mark.parametrize("where, value", [("q", np.nan), ("k", np.inf), ("k", -np.inf),
                                          ("mask", np.nan), ("mask", np.inf)])
def test_nan_and_inf_rows_as_in_the_reference(where, value, rng):
    graph = attention_graph((1, 2, 40, 8), 150, 8, mask_shape=(1, 1, 40, 150))
    feeds = feeds_for(graph, rng)
    flat = feeds[where].reshape(-1)
    flat[rng.integers(flat.size, size=3)] = value
    got, want = run_fused(graph, feeds)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, equal_nan=True, **TOL)


@pytest.mark.parametrize("variant", ["generic", "avx2", "avx512"])
def test_each_micro_kernel_variant(variant):
    """The kernel's variant is picked once per process from the CPU; GE_HUB_GEMM_KERNEL
    forces a lesser one (ignored where the CPU lacks it), so each runs in its own
    process, on every case and on the -inf masks."""
    script = textwrap.dedent("""
        import numpy as np
        from tests.kernels import test_nn_attention as t
        rng = np.random.default_rng(11)
        for case, (q_shape, sk, dv, mask_shape) in t.CASES.items():
            graph = t.attention_graph(q_shape, sk, dv, mask_shape=mask_shape)
            got, want = t.run_fused(graph, t.feeds_for(graph, rng))
            np.testing.assert_allclose(got, want, **t.TOL)
        graph = t.attention_graph((2, 2, 35, 8), 300, 9, mask_shape=(2, 2, 35, 300))
        got, want = t.run_fused(graph, t.masked_feeds(graph, rng))
        np.testing.assert_allclose(got, want, equal_nan=True, **t.TOL)
        for *dims, rank in t.LAYOUTS.values():
            graph = t.split_heads_graph(*dims, rank=rank)
            got, want = t.run_fused(graph, t.feeds_for(graph, rng))
            np.testing.assert_allclose(got, want, **t.TOL)
        print("ok")
    """)
    env = dict(os.environ, GE_HUB_GEMM_KERNEL=variant)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_variants_agree(rng, tmp_path):
    """The AVX-512, AVX2 and generic builds agree to rounding (the first two contract
    their multiply-adds into FMA)."""
    graph = attention_graph((1, 2, 40, 24), 200, 80, mask_shape=(40, 200))
    feeds = feeds_for(graph, rng)
    np.savez(tmp_path / "feeds.npz", **feeds)
    script = textwrap.dedent(f"""
        import numpy as np, ge_hub
        from tests.kernels import test_nn_attention as t
        graph = t.attention_graph((1, 2, 40, 24), 200, 80, mask_shape=(40, 200))
        feeds = dict(np.load({str(tmp_path / "feeds.npz")!r}))
        (got,) = ge_hub.compile(graph, options=t.ON).run(feeds)
        np.save({str(tmp_path)!r} + "/" + __import__("os").environ["GE_HUB_GEMM_KERNEL"],
                got)
    """)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outs = []
    for variant in ("generic", "avx2", "avx512"):
        env = dict(os.environ, GE_HUB_GEMM_KERNEL=variant)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=300, cwd=root)
        assert done.returncode == 0, done.stderr[-3000:]
        outs.append(np.load(tmp_path / f"{variant}.npy"))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[2], outs[0], rtol=1e-5, atol=1e-6)
