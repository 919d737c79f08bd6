"""ge_hub.compile and CompiledModel: API, plan cache, options, and every bad-input case."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.compiler import check_options
from ge_hub.reference import evaluate


def small_graph():
    with es.GraphBuilder("small") as gb:
        x = es.input("x", "float32", ["N", 5])
        b = es.input("b", "float32", [5])
        gb.output(es.sigmoid(es.relu(x + b) * 2.0), "y")
    return gb.graph


def inputs(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 5)).astype(np.float32),
            "b": rng.standard_normal(5).astype(np.float32)}


def test_run_dict_list_and_call_agree_with_reference():
    graph = small_graph()
    model = ge_hub.compile(graph)
    feed = inputs()
    expected = evaluate(graph, feed)
    for result in (model.run(feed), model.run([feed["x"], feed["b"]]), model(feed)):
        assert isinstance(result, list) and len(result) == 1
        np.testing.assert_allclose(result[0], expected[0], rtol=1e-5, atol=1e-6)


def test_symbolic_dims_specialize_on_first_sight_and_cache():
    model = ge_hub.compile(small_graph(), options={"max_cached_plans": 2})
    for n in (1, 4, 7, 4):
        feed = inputs(n)
        (y,) = model.run(feed)
        assert y.shape == (n, 5)
    assert model.summary()["cached_plans"] == 2  # bounded: the oldest plan was evicted


def test_input_shapes_compile_ahead():
    model = ge_hub.compile(small_graph(), input_shapes={"x": [2, 5]})
    assert model.plan.signature == ((2, 5), (5,))
    summary = model.summary()
    for key in ("steps", "fallback_steps", "arena_bytes", "lower_bound_bytes", "naive_bytes"):
        assert isinstance(summary[key], int)


def test_summary_counts_fallbacks_by_op(monkeypatch):
    model = ge_hub.compile(small_graph(), input_shapes={"x": [2, 5]})
    summary = model.summary()
    assert summary["fallback_steps"] == sum(summary["fallback_ops"].values())


@pytest.mark.parametrize("feed, message", [
    ({"x": np.zeros((3, 5), np.float32)}, r"missing input\(s\) 'b'"),
    ({**inputs(), "z": np.zeros(1, np.float32)}, r"unexpected input\(s\) 'z'"),
    ({"x": np.zeros((3, 5), np.float64), "b": np.zeros(5, np.float32)},
     r"input 'x' must have dtype float32 \(float32\[N,5\]\), got float64"),
    ({"x": np.zeros((3, 5, 1), np.float32), "b": np.zeros(5, np.float32)},
     r"input 'x' must have rank 2"),
    ({"x": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float32)},
     r"input 'x' dim 1 must be 5 \(float32\[N,5\]\), got shape \(3, 4\)"),
    ({"x": np.zeros((3, 5), np.float32), "b": np.zeros(6, np.float32)},
     r"input 'b' dim 0 must be 5"),
])
def test_bad_inputs_raise_value_error_naming_the_input(feed, message):
    model = ge_hub.compile(small_graph())
    with pytest.raises(ValueError, match=message):
        model.run(feed)


def test_wrong_input_count_in_a_list():
    model = ge_hub.compile(small_graph())
    with pytest.raises(ValueError,
                       match=r"expected 2 inputs \(x: float32\[N,5\], b: float32\[5\]\), got 1"):
        model.run([np.zeros((3, 5), np.float32)])


def test_inconsistent_symbol_between_inputs():
    with es.GraphBuilder("sym") as gb:
        x = es.input("x", "float32", ["N", 3])
        y = es.input("y", "float32", ["N", 3])
        gb.output(x + y, "z")
    model = ge_hub.compile(gb.graph)
    with pytest.raises(ValueError,
                       match=r"input 'y' dim 0 is symbol 'N', which input 'x' dim 0 "
                             r"sets to 2; got 3"):
        model.run({"x": np.zeros((2, 3), np.float32), "y": np.zeros((3, 3), np.float32)})


def test_non_contiguous_input_is_accepted():
    model = ge_hub.compile(small_graph())
    feed = inputs(6)
    strided = {"x": feed["x"][::2], "b": feed["b"]}
    np.testing.assert_allclose(model.run(strided)[0],
                               evaluate(small_graph(), {"x": feed["x"][::2].copy(),
                                                        "b": feed["b"]})[0], rtol=1e-6)


def test_failing_kernel_names_node_and_op():
    with es.GraphBuilder("div") as gb:
        a = es.input("a", "int32", [4])
        b = es.input("b", "int32", [4])
        gb.output(es.div(a, b, name="the_div"), "q")
    model = ge_hub.compile(gb.graph)
    with pytest.raises(Exception, match=r"the_div.*Div|Div.*the_div"):
        model.run({"a": np.arange(1, 5, dtype=np.int32), "b": np.array([1, 0, 1, 1], np.int32)})


def test_unknown_option_and_pass_names():
    with pytest.raises(ValueError, match="unknown compile options"):
        ge_hub.compile(small_graph(), options={"fast": True})
    model = ge_hub.compile(small_graph(), options={"disable_passes": ["no_such_pass"]})
    with pytest.raises(ValueError, match="unknown pass 'no_such_pass'"):
        model.run(inputs())
    with pytest.raises(ValueError, match="cannot be disabled"):
        ge_hub.compile(small_graph(), input_shapes={"x": [1, 5]},
                       options={"disable_passes": ["select_kernels"]})


def test_disable_pass_and_dump_after(tmp_path):
    with es.GraphBuilder("dead") as gb:
        x = es.input("x", "float32", [4])
        es.exp(x)  # dead
        gb.output(es.relu(x), "y")
    kept = ge_hub.compile(gb.graph, options={"disable_passes": ["eliminate_dead_code"],
                                             "dump_after": ["eliminate_dead_code", "schedule"],
                                             "dump_dir": str(tmp_path)})
    with pytest.raises(ValueError, match="unknown pass"):
        ge_hub.compile(gb.graph, options={"dump_after": "nope"})
    pruned = ge_hub.compile(gb.graph, options={"dump_after": "eliminate_dead_code",
                                               "dump_dir": str(tmp_path)})
    assert kept.summary()["steps"] == pruned.summary()["steps"] + 1
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert any(name.endswith("_eliminate_dead_code.txt") for name in dumps)
    assert any(name.endswith("_schedule.txt") for name in dumps)
    text = next(tmp_path.glob("*_eliminate_dead_code.txt")).read_text()
    assert "Relu" in text


def test_compile_goes_through_load_for_non_graphs():
    with pytest.raises(ge_hub.FrontendNotFoundError):
        ge_hub.compile("model.unknownformat")


def test_fallback_steps_run_the_reference_and_are_counted():
    with es.GraphBuilder("fallback") as gb:
        x = es.input("x", "float64", [3, 4])  # no C kernel claims float64 Relu/Sigmoid
        gb.output(es.sigmoid(es.relu(x)), "y")
    model = ge_hub.compile(gb.graph)
    feed = {"x": np.random.default_rng(0).standard_normal((3, 4))}
    np.testing.assert_allclose(model.run(feed)[0], evaluate(gb.graph, feed)[0], rtol=1e-12)
    summary = model.summary()
    assert summary["fallback_steps"] == 2
    assert summary["fallback_ops"] == {"Relu": 1, "Sigmoid": 1}
    assert summary["python_steps"] == 2  # every fallback is a Python step
    assert summary["python_ops"] == {"Relu": 1, "Sigmoid": 1}


def test_plugin_python_kernel_is_a_python_step_not_a_fallback():
    from ge_hub.kernels.base import PyKernel
    from ge_hub.plugins import get_registry
    from ge_hub.registry import KernelSpec

    registry = get_registry()
    registry.current_plugin = "test-python-kernel"
    try:
        registry.add_kernel(KernelSpec("Softsign", PyKernel(lambda x: x / (1 + np.abs(x))),
                                       priority=100, name="test_python_softsign"))
    finally:
        registry.current_plugin = "builtin"
    try:
        with es.GraphBuilder("py_kernel") as gb:
            x = es.input("x", "float32", [3, 4])
            gb.output(es.relu(es.softsign(x)), "y")
        model = ge_hub.compile(gb.graph)
        feed = {"x": np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)}
        np.testing.assert_allclose(model.run(feed)[0], evaluate(gb.graph, feed)[0],
                                   rtol=1e-6)
        summary = model.summary()
        assert summary["python_ops"] == {"Softsign": 1}
        assert summary["fallback_steps"] == 0
    finally:
        from ge_hub import plugins
        plugins.reset()


def test_fallback_gets_attribute_defaults():
    with es.GraphBuilder("defaults") as gb:
        x = es.input("x", "float64", [2, 5])  # float64 LeakyRelu: reference fallback
        gb.output(es.leaky_relu(x), "y")     # alpha left at its default
    feed = {"x": np.linspace(-2, 2, 10).reshape(2, 5)}
    np.testing.assert_allclose(ge_hub.compile(gb.graph).run(feed)[0],
                               evaluate(gb.graph, feed)[0])


def test_unused_and_passthrough_inputs():
    with es.GraphBuilder("unused") as gb:
        es.input("ignored", "float32", [2])
        x = es.input("x", "float32", [3])
        gb.output(x, "same")
    model = ge_hub.compile(gb.graph)
    x = np.arange(3, dtype=np.float32)
    (y,) = model.run({"ignored": np.zeros(2, np.float32), "x": x})
    np.testing.assert_array_equal(y, x)
    assert not np.shares_memory(x, y)


def test_shapes_computed_from_input_values_specialize_on_those_values():
    with es.GraphBuilder("value_shapes") as gb:
        x = es.input("x", "float32", [2, 12])
        target = es.input("target", "int64", [2])     # a Reshape target given at run time
        axes = es.input("axes", "int64", [1])         # ReduceSum axes given at run time
        gb.output(es.reduce_sum(es.reshape(x, target), axes), "y")
    model = ge_hub.compile(gb.graph)
    x = np.random.default_rng(0).standard_normal((2, 12)).astype(np.float32)
    for target, axes in (([4, 6], [1]), ([3, 8], [0]), ([4, 6], [1])):
        feed = {"x": x, "target": np.array(target, np.int64), "axes": np.array(axes, np.int64)}
        (y,) = model.run(feed)
        np.testing.assert_allclose(y, evaluate(gb.graph, feed)[0], rtol=1e-5)
    assert model.summary()["cached_plans"] == 2  # one plan per distinct (shape, value) key


def test_large_constant_of_shape_is_folded_once():
    from ge_hub.passes import specialize_shapes

    with es.GraphBuilder("big_fill") as gb:
        x = es.input("x", "float32", [1, 8])
        big = es.constant_of_shape(np.array([8, 4096], np.int64),
                                   value=np.array([0.5], np.float32))
        gb.output(x @ big, "y")
    original = specialize_shapes.MAX_FOLD_ELEMENTS
    specialize_shapes.MAX_FOLD_ELEMENTS = 1024  # make the fill "large" for this test
    try:
        model = ge_hub.compile(gb.graph)
    finally:
        specialize_shapes.MAX_FOLD_ELEMENTS = original
    assert [s.op for s in model.plan.steps] == ["MatMul"]
    (y,) = model.run({"x": np.ones((1, 8), np.float32)})
    np.testing.assert_allclose(y, np.full((1, 4096), 4.0, np.float32))


def test_pass_and_rule_lists_must_be_names():
    # A .ghm file's stored options pass through here too: a fuzzed file nested a list.
    with pytest.raises(ValueError, match="'disable_passes' must be a name or a list of names"):
        check_options({"disable_passes": [["fold_constants"]]})
