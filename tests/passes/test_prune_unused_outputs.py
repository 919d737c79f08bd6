"""prune_unused_outputs: unread optional outputs go; read ones and graph outputs stay."""

from __future__ import annotations

import numpy as np

import ge_hub
from ge_hub import es
from ge_hub.passes.prune_unused_outputs import prune_unused_outputs
from ge_hub.reference import evaluate


def graph_with_masks(keep_mask_as_output: bool):
    with es.GraphBuilder("masks") as gb:
        x = es.input("x", "float32", [2, 8])
        y, mask = es.dropout(x, np.array(0.5, np.float32), outputs=2)
        pooled, indices = es.max_pool(es.unsqueeze(y, np.array([1], np.int64)),
                                      kernel_shape=[2], strides=[2], outputs=2)
        gb.output(pooled, "pooled")
        if keep_mask_as_output:
            gb.output(mask, "mask")
    return gb.graph


def test_drops_unread_optional_outputs():
    graph = graph_with_masks(keep_mask_as_output=False)
    result = prune_unused_outputs(graph)
    assert result.changed
    result.graph.verify()
    assert [len(n.outputs) for n in result.graph.nodes] == [1, 1, 1]


def test_keeps_graph_outputs():
    graph = graph_with_masks(keep_mask_as_output=True)
    prune_unused_outputs(graph)
    dropout = graph.nodes[0]
    assert len(dropout.outputs) == 2


def test_unread_dropout_mask_becomes_a_free_view():
    graph = graph_with_masks(keep_mask_as_output=False)
    feed = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    model = ge_hub.compile(graph)
    np.testing.assert_allclose(model.run(feed)[0], evaluate(graph, feed)[0], rtol=1e-6)
    summary = model.summary()
    assert summary["fallback_steps"] == 0
    assert [s.op for s in model.plan.steps] == ["MaxPool"]


def test_keeps_unread_split_pieces():
    with es.GraphBuilder("split") as gb:
        c = es.input("c", "float32", [3, 6])
        pieces = es.split(c, np.array([2, 1, 3], np.int64), axis=1, outputs=3)
        gb.output(pieces[0], "y")
    assert not prune_unused_outputs(gb.graph).changed
    feed = {"c": np.arange(18, dtype=np.float32).reshape(3, 6)}
    (y,) = ge_hub.compile(gb.graph).run(feed)
    np.testing.assert_array_equal(y, feed["c"][:, :2])
