"""Ops whose output length depends on data (NonZero, Compress, Unique, NonMaxSuppression)
through ge_hub.compile: the plan is specialized on the values that decide the length,
whether they are graph inputs or computed from them, one plan per distinct value."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
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


def test_non_zero_of_a_graph_input_specializes_on_its_values(rng):
    with es.GraphBuilder("nonzero") as gb:
        x = es.input("x", "float32", ["N", 3])
        gb.output(es.non_zero(es.relu(x)), "where")
    model = ge_hub.compile(gb.graph, options={"max_cached_plans": 2})
    feeds = [{"x": rng.standard_normal((n, 3)).astype(np.float32)} for n in (4, 4, 2)]
    for feed in feeds:
        (where,) = check(model, gb.graph, feed)
        assert where.tolist() == np.array(np.nonzero(feed["x"] > 0)).tolist()
    assert model.summary()["cached_plans"] == 2  # bounded; the oldest plan was dropped
    check(model, gb.graph, feeds[0])  # and is compiled again when its value returns


def test_compress_specializes_on_the_condition_only(rng):
    # The condition is computed in the graph from two inputs; the data compressed is
    # another input, read at run time by a Compress step of the plan.
    with es.GraphBuilder("compress") as gb:
        x = es.input("x", "float32", [5, 4])
        score = es.input("score", "float32", [5])
        floor = es.input("floor", "float32", [])
        gb.output(es.compress(es.relu(x), es.greater(score, floor), axis=0), "rows")
    model = ge_hub.compile(gb.graph)
    score = rng.standard_normal(5).astype(np.float32)
    for floor in (0.0, -10.0, 0.0, 10.0):
        for _ in range(2):  # new data, same condition: the same plan
            feed = {"x": rng.standard_normal((5, 4)).astype(np.float32), "score": score,
                    "floor": np.float32(floor)}
            (rows,) = check(model, gb.graph, feed)
            assert rows.shape == (int(np.sum(score > floor)), 4)
    assert model.summary()["cached_plans"] == 3
    assert "Compress" in [s.op for s in model.plan.steps]


def test_unique_of_computed_data_gives_all_four_outputs(rng):
    with es.GraphBuilder("unique") as gb:
        x = es.input("x", "int32", [12])
        y, first, inverse, counts = es.unique(es.abs(x), sorted=0, outputs=4)
        gb.output(y, "y")
        gb.output(first, "first")
        gb.output(inverse, "inverse")
        gb.output(counts, "counts")
    model = ge_hub.compile(gb.graph)
    for _ in range(3):
        x = rng.integers(-4, 5, 12).astype(np.int32)
        y, first, inverse, counts = check(model, gb.graph, {"x": x})
        assert y.tolist() == list(dict.fromkeys(np.abs(x).tolist()))
        np.testing.assert_array_equal(y[inverse], np.abs(x))
        assert counts.sum() == 12 and first.tolist() == [np.abs(x).tolist().index(v) for v in y]


def test_non_max_suppression_from_graph_inputs(rng):
    with es.GraphBuilder("nms") as gb:
        boxes = es.input("boxes", "float32", [1, 8, 4])
        scores = es.input("scores", "float32", [1, 2, 8])
        gb.output(es.non_max_suppression(boxes, scores, np.array([3], np.int64),
                                         np.array([0.4], np.float32),
                                         np.array([0.1], np.float32)), "selected")
    model = ge_hub.compile(gb.graph)
    for _ in range(2):
        corner = rng.uniform(0, 3, (1, 8, 2))
        boxes = np.concatenate([corner, corner + rng.uniform(0.5, 2, (1, 8, 2))], axis=-1)
        feed = {"boxes": boxes.astype(np.float32),
                "scores": rng.random((1, 2, 8)).astype(np.float32)}
        (selected,) = check(model, gb.graph, feed)
        assert selected.shape[1] == 3 and 0 < selected.shape[0] <= 6


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


def test_deciding_data_too_large_to_fold_is_refused_by_name(monkeypatch, rng):
    from ge_hub.errors import ValueDependentShapeError
    from ge_hub.passes import specialize_shapes

    with es.GraphBuilder("too_large") as gb:
        x = es.input("x", "float32", [4, 4])
        gb.output(es.non_zero(es.relu(x, name="big")), "where")
    monkeypatch.setattr(specialize_shapes, "MAX_FOLD_ELEMENTS", 8)  # Relu's 16 are "large"
    model = ge_hub.compile(gb.graph)
    with pytest.raises(ValueDependentShapeError, match="NonZero.*big"):
        model.run({"x": rng.standard_normal((4, 4)).astype(np.float32)})


def test_summary_names_what_folded_from_run_time_values(rng):
    with es.GraphBuilder("nonzero") as gb:
        x = es.input("x", "float32", ["N", 3])
        gb.output(es.non_zero(es.relu(x)), "where")
    model = ge_hub.compile(gb.graph)
    check(model, gb.graph, {"x": rng.standard_normal((4, 3)).astype(np.float32)})
    summary = model.summary()
    assert summary["specialized_on"] == ["x"]
    # Relu and NonZero both ran in NumPy at plan time, on this call's values.
    assert summary["folded_ops"] == {"Relu": 1, "NonZero": 1}
    assert summary["folded_steps"] == 2


def test_summary_of_a_plan_without_value_specialization_folds_nothing(rng):
    with es.GraphBuilder("compress") as gb:
        x = es.input("x", "float32", [5, 4])
        keep = es.const(np.array([True, False, True, True, False]))
        gb.output(es.compress(es.relu(x), keep, axis=0), "rows")
    model = ge_hub.compile(gb.graph)
    check(model, gb.graph, {"x": rng.standard_normal((5, 4)).astype(np.float32)})
    summary = model.summary()
    assert summary["specialized_on"] == [] and summary["folded_steps"] == 0
