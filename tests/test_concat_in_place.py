"""Concat run in place: which Concats qualify, where their inputs live, and outputs that
are the same bit for bit with the pass on and off (one stream or several, offline too)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_streams import assert_no_concurrent_overlap, build_dag, graph_with_branches

import ge_hub
from ge_hub import es
from ge_hub.compiler import optimize
from ge_hub.passes.concat_in_place import NAME, concat_offsets
from ge_hub.plan import Storage

OFF = {"disable_passes": [NAME]}


def conv_relu(x, cin, cout, k, rng):
    w = (rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32)
    return es.relu(es.conv(x, w, pads=[k // 2] * 4))


def fire(batch=1, features_out=False):
    """SqueezeNet's fire module: squeeze 1x1, expand 1x1 and 3x3 side by side, concat."""
    rng = np.random.default_rng(0)
    with es.GraphBuilder("fire") as gb:
        x = es.input("x", "float32", [batch, 8, 9, 7])
        s = conv_relu(x, 8, 4, 1, rng)
        y = es.concat([conv_relu(s, 4, 6, 1, rng), conv_relu(s, 4, 10, 3, rng)], axis=1)
        if features_out:
            gb.output(y, "features")
        gb.output(conv_relu(y, 16, 5, 1, rng), "y")
    return gb.graph


def feeds_for(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([int(d) for d in v.type.shape]).astype(np.float32)
            for v in graph.inputs}


def same_outputs(graph, options=None):
    """Compile with the pass on and off, run both on random inputs, compare exactly;
    the model with the pass on is returned."""
    feeds = feeds_for(graph)
    shapes = {k: v.shape for k, v in feeds.items()}
    on = ge_hub.compile(graph, shapes, options=dict(options or {}))
    off_options = dict(options or {})
    off_options["disable_passes"] = list(off_options.get("disable_passes", [])) + [NAME]
    off = ge_hub.compile(graph, shapes, options=off_options)
    want = off.run(feeds)
    for _ in range(2):  # twice: nothing left over from a run changes the next
        for got, expected in zip(on.run(feeds), want):
            np.testing.assert_array_equal(got, expected)
    return on


def concat_steps(model):
    return [s for s in model.plan.steps if s.op == "Concat"]


def tensor(plan, name):
    (spec,) = [t for t in plan.tensors if t.name == name]
    return spec


def test_fire_module_concat_runs_no_step():
    graph = fire()
    on = same_outputs(graph)
    assert concat_steps(on) == []
    off = ge_hub.compile(graph, {"x": [1, 8, 9, 7]}, options=OFF)
    assert len(concat_steps(off)) == 1
    assert len(on.plan.steps) == len(off.plan.steps) - 1


def test_inputs_are_back_to_back_slices_of_the_output():
    graph = optimize(fire(), {"x": [1, 8, 9, 7]}, {})
    (concat,) = [n for n in graph.nodes if n.op == "Concat"]
    assert concat.meta["kernel"] is None
    a, b = concat.inputs
    assert concat_offsets(concat) == (0, a.type.nbytes)
    plan = ge_hub.compile(fire(), {"x": [1, 8, 9, 7]}).plan
    out = tensor(plan, concat.outputs[0].name)
    first, second = tensor(plan, a.name), tensor(plan, b.name)
    assert out.storage is first.storage is second.storage is Storage.ARENA
    assert first.offset == out.offset
    assert second.offset == out.offset + first.nbytes
    assert first.nbytes + second.nbytes == out.nbytes


def test_concat_that_is_a_graph_output_has_its_inputs_written_into_the_callers_array():
    on = same_outputs(fire(features_out=True))
    assert concat_steps(on) == []
    plan = on.plan
    writes = [plan.tensors[t] for s in plan.steps for t in s.outputs
              if plan.tensors[t].storage is Storage.OUTPUT and plan.tensors[t].index == 0]
    assert sorted(t.offset for t in writes) == [0, 6 * 9 * 7 * 4]


def test_batch_above_one_keeps_the_copy():
    on = same_outputs(fire(batch=2))
    assert len(concat_steps(on)) == 1  # each input is two strided runs of the output


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_rows_of_a_matrix_concatenate_in_place_only_along_the_first_axis_that_varies(axis):
    with es.GraphBuilder("rows") as gb:
        x = es.input("x", "float32", [1, 3, 5])
        c = es.concat([es.tanh(x), es.sigmoid(x), es.neg(x)], axis=axis)
        gb.output(es.relu(c), "y")
    on = same_outputs(gb.graph, {"disable_passes": ["fuse_elementwise"]})
    # axis 0 and 1: every dimension before it is 1; axis -1: the 3 rows interleave.
    assert len(concat_steps(on)) == (1 if axis == -1 else 0)


def test_nested_concats_share_the_outer_buffer():
    rng = np.random.default_rng(2)
    with es.GraphBuilder("nested") as gb:
        x = es.input("x", "float32", [1, 4, 6, 6])
        inner = es.concat([conv_relu(x, 4, 3, 1, rng), conv_relu(x, 4, 5, 3, rng)], axis=1)
        outer = es.concat([inner, conv_relu(x, 4, 2, 1, rng)], axis=1)
        gb.output(conv_relu(outer, 10, 3, 1, rng), "y")
    on = same_outputs(gb.graph)
    assert concat_steps(on) == []
    plan = on.plan
    convs = [s for s in plan.steps if "Conv" in s.op]
    out_offsets = sorted(plan.tensors[s.outputs[0]].offset for s in convs[:3])
    sizes = [3 * 36 * 4, 5 * 36 * 4]
    assert out_offsets == [out_offsets[0], out_offsets[0] + sizes[0],
                           out_offsets[0] + sizes[0] + sizes[1]]


def test_inputs_that_cannot_live_in_the_output_keep_the_copy():
    rng = np.random.default_rng(3)
    with es.GraphBuilder("kept") as gb:
        x = es.input("x", "float32", [1, 4, 5, 5])
        a = conv_relu(x, 4, 3, 1, rng)
        gb.output(a, "a")                                      # a graph output
        gb.output(es.concat([a, conv_relu(x, 4, 2, 1, rng)], axis=1), "graph_output_input")
        b = conv_relu(x, 4, 2, 3, rng)
        gb.output(es.concat([b, b], axis=1), "twice")           # one value twice
        gb.output(es.concat([x, b], axis=1), "graph_input")     # the caller's input
        w = es.const(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
        gb.output(es.concat([b, w], axis=1), "constant")        # a constant
    on = same_outputs(gb.graph)
    assert len(concat_steps(on)) == 4


def test_a_value_in_two_concats_lives_in_the_first():
    rng = np.random.default_rng(4)
    with es.GraphBuilder("dense") as gb:  # DenseNet: every feature map is in later concats
        x = es.input("x", "float32", [1, 4, 5, 5])
        f0 = conv_relu(x, 4, 4, 1, rng)
        f1 = conv_relu(f0, 4, 4, 3, rng)
        c1 = es.concat([f0, f1], axis=1)
        f2 = conv_relu(c1, 8, 4, 3, rng)
        c2 = es.concat([f0, f1, f2], axis=1)
        gb.output(conv_relu(c2, 12, 2, 1, rng), "y")
    on = same_outputs(gb.graph)
    assert len(concat_steps(on)) == 1


def test_split_outputs_written_straight_into_a_concat():
    """ShuffleNet's channel split and rejoin: one step writes two of the inputs."""
    rng = np.random.default_rng(5)
    with es.GraphBuilder("shuffle") as gb:
        x = es.input("x", "float32", [1, 8, 4, 4])
        left, right = es.split(x, axis=1, num_outputs=2)
        y = es.concat([left, conv_relu(right, 4, 4, 3, rng)], axis=1)
        y = es.reshape(y, np.array([1, 2, 4, 4, 4], np.int64))
        y = es.transpose(y, perm=[0, 2, 1, 3, 4])
        gb.output(es.reshape(y, np.array([1, 8, 4, 4], np.int64)), "y")
    on = same_outputs(gb.graph)
    assert concat_steps(on) == []


def test_a_python_step_writes_its_slice_too():
    """A step on the reference fallback gets its slice like a C kernel's step."""
    rng = np.random.default_rng(6)
    with es.GraphBuilder("python") as gb:
        x = es.input("x", "float32", [1, 3, 4, 4])
        a = es.det(es.reshape(x, np.array([3, 4, 4], np.int64)))       # [3]
        b = es.reduce_sum(conv_relu(x, 3, 2, 1, rng), np.array([1, 2, 3], np.int64),
                          keepdims=0)                                  # [1]
        gb.output(es.concat([a, b], axis=0), "y")
    on = same_outputs(gb.graph)
    assert on.summary()["python_steps"] >= 1
    assert concat_steps(on) == []


def test_elementwise_after_the_concat_may_write_in_place_into_it():
    rng = np.random.default_rng(7)
    with es.GraphBuilder("after") as gb:
        x = es.input("x", "float32", [1, 4, 6, 6])
        c = es.concat([conv_relu(x, 4, 3, 1, rng), conv_relu(x, 4, 5, 3, rng)], axis=1)
        gb.output(es.reduce_mean(es.sigmoid(c), axes=np.array([2, 3], np.int64)), "y")
    on = same_outputs(gb.graph)
    assert concat_steps(on) == []


@pytest.mark.parametrize("streams", [2, 3])
def test_branches_on_several_streams_write_their_slices_concurrently(streams):
    graph = graph_with_branches()
    options = {"disable_passes": ["fuse_elementwise"], "streams": streams}
    on = same_outputs(graph, options)
    assert concat_steps(on) == []
    assert on.summary()["streams"] > 1
    assert_no_concurrent_overlap(on.plan)


def test_offline_file_carries_the_slices(tmp_path):
    graph = fire(features_out=True)
    feeds = feeds_for(graph)
    model = ge_hub.compile(graph, {"x": [1, 8, 9, 7]})
    path = tmp_path / "fire.ghm"
    model.save(path)
    loaded = ge_hub.load_compiled(path)
    for got, want in zip(loaded.run(feeds), model.run(feeds)):
        np.testing.assert_array_equal(got, want)


UNARY = ("relu", "tanh", "neg", "sigmoid", "abs")


@st.composite
def concat_dags(draw):
    """Random graphs of [1, w] values: unary ops, and joins of two or three earlier
    values that concatenate them and fold the result back to [1, w]."""
    n = draw(st.integers(3, 12))
    nodes = []
    for i in range(n):
        if i >= 2 and draw(st.booleans()):
            k = draw(st.integers(2, 3))
            nodes.append(("cat", [draw(st.integers(-1, i - 1)) for _ in range(k)]))
        else:
            nodes.append((draw(st.sampled_from(UNARY)), [draw(st.integers(-1, i - 1))]))
    outputs = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))
    return nodes, sorted(outputs), draw(st.sampled_from([8, 40, 1024]))


def concat_then_fold(*args):
    """The values, [1, w] each, concatenated to [1, k*w] and folded back to their
    elementwise maximum [1, w] (through a view of the Concat)."""
    width = args[0].type.shape[1]
    rows = es.reshape(es.concat(list(args), axis=1), np.array([len(args), width], np.int64))
    return es.reduce_max(rows, axes=np.array([0], np.int64))


def test_an_input_written_on_another_stream_keeps_the_concat_apart_from_earlier_buffers():
    """Found by the random test below: the in-place Concat's second input is written on
    stream 1 while stream 0 still reads another Concat's output; the planner had put the
    two buffers on the same bytes, judging the in-place one's life from its first write
    in plan order alone."""
    nodes = [("relu", [-1]), ("relu", [-1]), ("cat", [0, 0]), ("relu", [2]), ("relu", [0]),
             ("relu", [0]), ("relu", [0]), ("relu", [0]), ("cat", [3, 4]), ("relu", [0]),
             ("relu", [0])]
    graph = build_dag((nodes, [8], 8), rows=1, ops={"cat": concat_then_fold})
    model = same_outputs(graph, {"disable_passes": ["fuse_elementwise"], "streams": 2})
    assert model.summary()["streams"] == 2
    assert len(concat_steps(model)) == 1  # cat(v0, v0) copies; cat(v3, v4) is in place
    assert_no_concurrent_overlap(model.plan)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(concat_dags(), st.sampled_from([1, 2, 3]))
def test_random_graphs_with_concats_match_and_never_overlap_live_memory(spec, streams):
    graph = build_dag(spec, rows=1, ops={"cat": concat_then_fold})
    model = same_outputs(graph, {"disable_passes": ["fuse_elementwise"], "streams": streams})
    assert_no_concurrent_overlap(model.plan)
    assert model.plan.memory.lower_bound_bytes <= model.plan.memory.arena_bytes


def test_concats_in_a_loop_body_write_the_carried_value_and_the_scan_output():
    """A Loop run in C: its body's Concats, one the next carried value (the body's output
    buffer, swapped between iterations) and one a scan output (a slice of the loop's
    output per iteration), run no step and match the NumPy reference."""
    from test_control_flow_c import check, in_c

    rng = np.random.default_rng(8)
    w1 = (rng.standard_normal((8, 4)) * 0.5).astype(np.float32)
    w2 = (rng.standard_normal((8, 4)) * 0.5).astype(np.float32)
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [1, 8])
        with es.GraphBuilder("body") as body:
            es.input("i", "int64", [])
            keep = es.input("c", "bool", [])
            a = es.input("a", "float32", [1, 8])
            p = es.relu(es.matmul(a, es.const(w1)))
            q = es.tanh(es.matmul(a, es.const(w2)))
            body.output(keep, "keep")
            body.output(es.concat([p, q], axis=1), "a_next")
            body.output(es.concat([es.sigmoid(q), es.neg(p)], axis=1), "scanned")
        final, scanned = es.loop(es.const(np.array(5, np.int64)), None, x, body=body)
        main.output(final, "final")
        main.output(scanned, "scanned")
    graph = main.graph
    feed = {"x": rng.standard_normal((1, 8)).astype(np.float32)}
    model = ge_hub.compile(graph)
    (step,) = in_c(model)
    body_plan = model.plan.subplans[step.subplans[0]]
    assert [s for s in body_plan.steps if s.op == "Concat"] == []
    check(model, graph, feed)
    same_outputs(graph)
