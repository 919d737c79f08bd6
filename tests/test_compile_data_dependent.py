"""Shapes decided by values computed at run time: the model runs in segments
(`ge_hub.segments`), cut at each data-dependent op, each segment a static C plan.

Every test checks the outputs against the NumPy reference, then what ran: segments, the
ops at the cuts, no Python step, nothing upstream of a cut folded from its values."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.errors import GraphError
from ge_hub.reference import evaluate


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def check(model, graph, feed):
    got = model.run(feed)
    want = evaluate(graph, feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return got


def assert_in_c(model, segments: int, cut_ops: dict[str, int] | None = None):
    summary = model.summary()
    assert summary["segments"] == segments
    assert summary["python_steps"] == 0 and summary["fallback_steps"] == 0
    if cut_ops is not None:
        assert summary["cut_ops"] == cut_ops
    return summary


# --- a cut at each data-dependent op, alone ----------------------------------------------


def test_non_zero_of_computed_data_is_a_cut_and_nothing_folds(rng):
    with es.GraphBuilder("nonzero") as gb:
        x = es.input("x", "float32", ["N", 3])
        where = es.non_zero(es.relu(x))
        gb.output(es.add(where, np.array(1, np.int64)), "where")
    model = ge_hub.compile(gb.graph)
    for n in (4, 4, 2, 0):
        check(model, gb.graph, {"x": rng.standard_normal((n, 3)).astype(np.float32)})
    summary = assert_in_c(model, 2, {"NonZero": 1})
    # Relu and NonZero ran in the first segment's plan, the Add in the second's.
    assert summary["folded_steps"] == 0 and summary["specialized_on"] == []
    head, tail = model.segment_plans
    assert [s.op for s in head.steps][-1] == "ge_hub.NonZeroBounded"
    assert [s.op for s in tail.steps] == ["Add"]


def test_non_zero_of_all_zeros_gives_an_empty_result(rng):
    with es.GraphBuilder("zeros") as gb:
        x = es.input("x", "float32", [2, 3])
        gb.output(es.non_zero(es.relu(x)), "where")
    model = ge_hub.compile(gb.graph)
    (where,) = check(model, gb.graph, {"x": -np.ones((2, 3), np.float32)})
    assert where.shape == (2, 0)
    assert_in_c(model, 1, {"NonZero": 1})


def test_compress_reads_its_data_in_the_plan(rng):
    with es.GraphBuilder("compress") as gb:
        x = es.input("x", "float32", [5, 4])
        score = es.input("score", "float32", [5])
        floor = es.input("floor", "float32", [])
        kept = es.compress(es.relu(x), es.greater(score, floor), axis=0)
        gb.output(es.mul(kept, np.float32(2)), "rows")
    model = ge_hub.compile(gb.graph)
    score = rng.standard_normal(5).astype(np.float32)
    for floor in (0.0, -10.0, 0.0, 10.0):
        feed = {"x": rng.standard_normal((5, 4)).astype(np.float32), "score": score,
                "floor": np.float32(floor)}
        (rows,) = check(model, gb.graph, feed)
        assert rows.shape == (int(np.sum(score > floor)), 4)
    assert_in_c(model, 2, {"Compress": 1})


def test_compress_flattened(rng):
    with es.GraphBuilder("compress_flat") as gb:
        x = es.input("x", "int32", [3, 4])
        condition = es.reshape(es.greater(x, np.int32(0)), np.array([-1], np.int64))
        gb.output(es.compress(x, condition), "kept")
    model = ge_hub.compile(gb.graph)
    for _ in range(3):
        check(model, gb.graph, {"x": rng.integers(-3, 3, (3, 4)).astype(np.int32)})
    assert_in_c(model, 1, {"Compress": 1})


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_of_computed_data_gives_all_four_outputs(rng, sorted_):
    with es.GraphBuilder("unique") as gb:
        x = es.input("x", "int32", [12])
        y, first, inverse, counts = es.unique(es.abs(x), sorted=sorted_, outputs=4)
        gb.output(y, "y")
        gb.output(first, "first")
        gb.output(inverse, "inverse")
        gb.output(counts, "counts")
    model = ge_hub.compile(gb.graph)
    for _ in range(3):
        x = rng.integers(-4, 5, 12).astype(np.int32)
        y, first, inverse, counts = check(model, gb.graph, {"x": x})
        np.testing.assert_array_equal(y[inverse], np.abs(x))
    assert_in_c(model, 1, {"Unique": 1})


def test_non_max_suppression_from_computed_scores(rng):
    with es.GraphBuilder("nms") as gb:
        boxes = es.input("boxes", "float32", [1, 8, 4])
        logits = es.input("logits", "float32", [1, 2, 8])
        selected = es.non_max_suppression(boxes, es.sigmoid(logits), np.array([3], np.int64),
                                          np.array([0.4], np.float32),
                                          np.array([0.3], np.float32))
        gb.output(es.gather(es.reshape(boxes, np.array([8, 4], np.int64)),
                            es.gather(selected, np.array(2, np.int64), axis=1)), "kept")
    model = ge_hub.compile(gb.graph)
    for _ in range(3):
        corner = rng.uniform(0, 3, (1, 8, 2))
        boxes = np.concatenate([corner, corner + rng.uniform(0.5, 2, (1, 8, 2))], axis=-1)
        check(model, gb.graph, {"boxes": boxes.astype(np.float32),
                                "logits": rng.standard_normal((1, 2, 8)).astype(np.float32)})
    assert_in_c(model, 2, {"NonMaxSuppression": 1})


def test_non_max_suppression_with_no_boxes(rng):
    with es.GraphBuilder("nms_empty") as gb:
        boxes = es.input("boxes", "float32", [1, "N", 4])
        scores = es.input("scores", "float32", [1, 1, "N"])
        gb.output(es.non_max_suppression(boxes, es.relu(scores), np.array([5], np.int64)),
                  "selected")
    model = ge_hub.compile(gb.graph)
    (selected,) = check(model, gb.graph, {"boxes": np.zeros((1, 0, 4), np.float32),
                                          "scores": np.zeros((1, 1, 0), np.float32)})
    assert selected.shape == (0, 3)


def test_top_k_with_a_computed_k_specializes_the_next_segment_on_k(rng):
    with es.GraphBuilder("topk") as gb:
        x = es.input("x", "float32", [10])
        k = es.cast(es.reduce_sum(es.cast(es.greater(x, np.float32(0)), to="int64"),
                                  keepdims=1), to="int64")
        values, _ = es.top_k(es.relu(x), k, outputs=2)
        gb.output(values, "best")
    model = ge_hub.compile(gb.graph)
    for _ in range(3):
        (best,) = check(model, gb.graph, {"x": rng.standard_normal(10).astype(np.float32)})
    summary = assert_in_c(model, 2)
    # K was computed once by the first segment; the second is planned on its value and
    # runs TopK as a C step (nothing upstream of the cut folded).
    assert "TopK" in [s.op for s in model.segment_plans[1].steps]
    assert "Relu" in [s.op for s in model.segment_plans[0].steps]
    assert summary["folded_ops"] == {}


@pytest.mark.parametrize("which", ["reshape", "expand", "tile", "slice", "pad", "range",
                                   "constant_of_shape"])
def test_shape_inputs_computed_at_run_time(rng, which):
    with es.GraphBuilder(which) as gb:
        x = es.input("x", "float32", [2, 6])
        n = es.input("n", "int64", [])
        # A shape value computed from an input's values (not from its shape).
        m = es.add(n, np.array(1, np.int64))
        if which == "reshape":
            y = es.reshape(es.relu(x), es.concat([es.unsqueeze(m, np.array([0], np.int64)),
                                                   np.array([-1], np.int64)], axis=0))
        elif which == "expand":
            y = es.expand(es.relu(x), es.concat([es.unsqueeze(m, np.array([0], np.int64)),
                                                  np.array([2, 6], np.int64)], axis=0))
        elif which == "tile":
            y = es.tile(es.relu(x), es.concat([np.array([1], np.int64),
                                                es.unsqueeze(m, np.array([0], np.int64))],
                                               axis=0))
        elif which == "slice":
            y = es.slice(es.relu(x), np.array([0], np.int64),
                         es.unsqueeze(m, np.array([0], np.int64)), np.array([1], np.int64))
        elif which == "pad":
            pads = es.concat([np.array([0, 0, 0], np.int64),
                              es.unsqueeze(m, np.array([0], np.int64))], axis=0)
            y = es.pad(es.relu(x), pads)
        elif which == "range":
            y = es.add(es.range(np.array(0, np.int64), m, np.array(1, np.int64)),
                       np.array(3, np.int64))
        else:
            y = es.add(es.constant_of_shape(es.unsqueeze(m, np.array([0], np.int64))),
                       np.float32(1))
        gb.output(y, "y")
    model = ge_hub.compile(gb.graph)
    sizes = {"reshape": (1, 2, 3, 1), "slice": (0, 1, 1)}.get(which, (1, 2, 1))
    for size in sizes:
        check(model, gb.graph, {"x": rng.standard_normal((2, 6)).astype(np.float32),
                                "n": np.array(size, np.int64)})
    summary = model.summary()
    assert summary["python_steps"] == 0


# --- chained cuts -------------------------------------------------------------------------


def test_chained_cuts_nonzero_then_unique_then_topk(rng):
    with es.GraphBuilder("chain") as gb:
        x = es.input("x", "float32", [6, 5])
        where = es.non_zero(es.relu(x))  # cut 1
        rows = es.gather(where, np.array(0, np.int64), axis=0)
        distinct = es.unique(rows)  # cut 2 (its input is only known after cut 1)
        k = es.shape(distinct)
        values, _ = es.top_k(es.cast(distinct, to="float32"), k, outputs=2)  # shape-only K
        gb.output(es.neg(values), "rows_desc")
        gb.output(where, "where")
    model = ge_hub.compile(gb.graph)
    for _ in range(4):
        check(model, gb.graph, {"x": rng.standard_normal((6, 5)).astype(np.float32)})
    summary = assert_in_c(model, 3, {"NonZero": 1, "Unique": 1})
    assert summary["folded_steps"] == 0


def test_independent_cuts_share_one_segment(rng):
    with es.GraphBuilder("two") as gb:
        x = es.input("x", "float32", [4, 4])
        gb.output(es.non_zero(es.relu(x)), "a")
        gb.output(es.unique(es.cast(es.greater(x, np.float32(0.5)), to="int32")), "b")
    model = ge_hub.compile(gb.graph)
    for _ in range(3):
        check(model, gb.graph, {"x": rng.standard_normal((4, 4)).astype(np.float32)})
    assert_in_c(model, 1, {"NonZero": 1, "Unique": 1})


def test_a_deciding_graph_input_specializes_the_plan_directly(rng):
    with es.GraphBuilder("target") as gb:
        x = es.input("x", "float32", [2, 6])
        shape = es.input("shape", "int64", [2])
        gb.output(es.reshape(es.relu(x), shape), "y")
    model = ge_hub.compile(gb.graph)
    for shape in ([3, 4], [4, 3], [3, 4]):
        check(model, gb.graph, {"x": rng.standard_normal((2, 6)).astype(np.float32),
                                "shape": np.array(shape, np.int64)})
    # A deciding value that is a graph input costs nothing to specialize on: one plan per
    # value (savable as offline profiles), no segments.
    summary = model.summary()
    assert "segments" not in summary and summary["python_steps"] == 0
    assert summary["specialized_on"] == ["shape"]
    assert summary["cached_plans"] == 2  # [3, 4] came back from the cache


# --- caching and its bound ----------------------------------------------------------------


def test_segment_plans_are_cached_by_shape_within_the_bound(rng):
    with es.GraphBuilder("cache") as gb:
        x = es.input("x", "float32", [8])
        gb.output(es.mul(es.non_zero(es.relu(x)), np.array(2, np.int64)), "y")
    model = ge_hub.compile(gb.graph, options={"max_cached_plans": 3})

    def feed(count):
        x = -np.ones(8, np.float32)
        x[:count] = 1
        return {"x": x}

    for count in (1, 2, 1, 2, 1):  # head + 2 tails: all cached after the first two runs
        check(model, gb.graph, feed(count))
    summary = model.summary()
    assert summary["segment_compiles"] == 3 and summary["segment_plans"] == 3
    assert summary["max_cached_plans"] == 3
    check(model, gb.graph, feed(3))  # a third tail evicts the least recently used plan
    summary = model.summary()
    assert summary["segment_compiles"] == 4 and summary["segment_plans"] == 3
    check(model, gb.graph, feed(3))
    assert model.summary()["segment_compiles"] == 4


# --- bad inputs -----------------------------------------------------------------------------


def test_negative_k_is_refused_naming_the_node(rng):
    with es.GraphBuilder("negk") as gb:
        x = es.input("x", "float32", [5])
        k = es.input("k", "int64", [1])
        values, _ = es.top_k(es.relu(x), es.sub(k, np.array([3], np.int64)), outputs=2,
                             name="best")
        gb.output(values, "y")
    model = ge_hub.compile(gb.graph)
    feed = {"x": rng.standard_normal(5).astype(np.float32)}
    check(model, gb.graph, {**feed, "k": np.array([5], np.int64)})
    with pytest.raises(GraphError, match="best.*'K' must be >= 0, got -2"):
        model.run({**feed, "k": np.array([1], np.int64)})


def test_a_shape_input_that_does_not_fit_is_refused_naming_the_node(rng):
    with es.GraphBuilder("nofit") as gb:
        x = es.input("x", "float32", [2, 6])
        n = es.input("n", "int64", [1])
        target = es.concat([es.add(n, np.array([1], np.int64)), np.array([5], np.int64)],
                           axis=0)
        gb.output(es.reshape(es.relu(x), target, name="to_rows"), "y")
    model = ge_hub.compile(gb.graph)
    with pytest.raises(GraphError, match="to_rows"):
        model.run({"x": np.ones((2, 6), np.float32), "n": np.array([2], np.int64)})


def test_negative_max_output_boxes_is_refused_by_the_kernel(rng):
    with es.GraphBuilder("nms_bad") as gb:
        boxes = es.input("boxes", "float32", [1, 4, 4])
        scores = es.input("scores", "float32", [1, 1, 4])
        limit = es.input("limit", "int64", [1])
        gb.output(es.non_max_suppression(boxes, es.relu(scores), limit), "selected")
    model = ge_hub.compile(gb.graph)
    feed = {"boxes": rng.random((1, 4, 4)).astype(np.float32),
            "scores": rng.random((1, 1, 4)).astype(np.float32)}
    check(model, gb.graph, {**feed, "limit": np.array([2], np.int64)})
    from ge_hub.executor import KernelError

    with pytest.raises(KernelError, match="max_output_boxes_per_class' must be >= 0"):
        model.run({**feed, "limit": np.array([-1], np.int64)})


def test_constant_deciding_inputs_fold_at_compile_time(rng):
    condition = np.array([True, False, True, True])
    with es.GraphBuilder("folded") as gb:
        x = es.input("x", "float32", [3, 4])
        where = es.non_zero(np.array([[0, 2], [3, 0]], np.float32))
        gb.output(es.compress(x, condition, axis=1), "kept")
        gb.output(where, "where")
    model = ge_hub.compile(gb.graph)
    assert model.plan is not None  # planned at compile time, no value to wait for
    assert "NonZero" not in [s.op for s in model.plan.steps]
    kept, where = check(model, gb.graph, {"x": rng.standard_normal((3, 4)).astype(np.float32)})
    assert kept.shape == (3, 3) and where.tolist() == [[0, 1], [1, 0]]
    assert "segments" not in model.summary()


def test_data_dependent_ops_of_graph_inputs_run_their_c_kernels(rng):
    # Boxes and scores fed by the caller decide NMS's length: its C kernel runs, not a
    # plan per input value with NMS folded in NumPy.
    with es.GraphBuilder("nms_inputs") as gb:
        boxes = es.input("boxes", "float32", [1, 8, 4])
        scores = es.input("scores", "float32", [1, 1, 8])
        gb.output(es.non_max_suppression(boxes, scores, np.array([4], np.int64),
                                         np.array([0.5], np.float32)), "selected")
    model = ge_hub.compile(gb.graph)
    for _ in range(3):
        corner = rng.uniform(0, 3, (1, 8, 2))
        boxes = np.concatenate([corner, corner + rng.uniform(0.5, 2, (1, 8, 2))], axis=-1)
        check(model, gb.graph, {"boxes": boxes.astype(np.float32),
                                "scores": rng.random((1, 1, 8)).astype(np.float32)})
    summary = assert_in_c(model, 1, {"NonMaxSuppression": 1})
    assert summary["specialized_on"] == [] and summary["folded_steps"] == 0
    assert summary["segment_compiles"] == 1
