"""eliminate_common_subexpressions: equal constants and equal nodes are merged, outputs
stay the same; random ops, different attributes and graph outputs are kept apart."""

from __future__ import annotations

import numpy as np

import ge_hub
from ge_hub import es
from ge_hub.passes.context import PassContext
from ge_hub.passes.cse import NAME, eliminate_common_subexpressions
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close, random_feeds


def graph_of(fn):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2, 3])
        for name, value in fn(x).items():
            gb.output(value, name)
    return gb.graph


def merged(graph):
    feeds = random_feeds(graph)
    want = evaluate(graph, feeds)
    ctx = PassContext()
    result = eliminate_common_subexpressions(graph.copy(), ctx)
    result.graph.verify()
    assert_outputs_close(evaluate(result.graph, feeds), want, graph.output_names, 1e-6, 0)
    on = ge_hub.compile(graph.copy())
    off = ge_hub.compile(graph.copy(), options={"disable_passes": [NAME]})
    assert_outputs_close(on.run(feeds), off.run(feeds), graph.output_names, 1e-6, 0)
    return result, ctx


def test_equal_nodes_on_equal_constants_merge():
    c1, c2 = np.full(3, 2.0, np.float32), np.full(3, 2.0, np.float32)
    graph = graph_of(lambda x: {"y": es.add(es.relu(es.mul(x, c1)), es.sigmoid(es.mul(x, c2)))})
    result, ctx = merged(graph)
    assert [n.op for n in result.graph.nodes].count("Mul") == 1
    assert ctx.fired[NAME] == 1


def test_different_attributes_stay_apart():
    graph = graph_of(lambda x: {"y": es.add(es.leaky_relu(x, alpha=0.1),
                                            es.leaky_relu(x, alpha=0.2))})
    result, _ = merged(graph)
    assert not result.changed


def test_graph_outputs_are_not_merged_away():
    graph = graph_of(lambda x: {"a": es.relu(x), "b": es.relu(x)})
    result, _ = merged(graph)
    assert not result.changed and result.graph.output_names == ["a", "b"]


def test_random_ops_are_never_merged():
    # Training-mode Dropout draws a fresh mask per node.
    ratio, training = np.array(0.5, np.float32), np.array(True)
    graph = graph_of(lambda x: {"y": es.add(es.dropout(x, ratio, training),
                                            es.dropout(x, ratio, training))})
    result = eliminate_common_subexpressions(graph.copy())
    assert [n.op for n in result.graph.nodes].count("Dropout") == 2


def test_constants_that_differ_outside_the_sampled_words_stay_apart():
    # Constants are bucketed by a sample of their bytes and compared in full: a, then b
    # (a with one unsampled element changed), then a copy of b, which merges with b.
    a = np.arange(1000, dtype=np.float32)
    b = a.copy()
    b[2] = -1.0  # word 1 of 500: the sample takes every 7th word
    c = b.copy()
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1000])
        for i, k in enumerate(es.const(v) for v in (a, b, c)):
            gb.output(es.mul(x, k), f"y{i}")
    graph = gb.graph
    result, ctx = merged(graph)
    kept = [v.const for v in result.graph.constants if v.uses]
    assert len(kept) == 2
    assert any(np.array_equal(k, a) for k in kept) and any(np.array_equal(k, b) for k in kept)
