"""The reference evaluator: results against hand-written NumPy, input checks, intermediate
outputs, failing references, and subgraphs that read enclosing values."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es, plugins
from ge_hub.errors import GeHubError, GraphError, UnknownOpError
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType
from ge_hub.ops import Attr, AttrKind, Input, Output, get_schema, op
from ge_hub.ops.inference import same_as_input
from ge_hub.ops.schema import FLOATS
from ge_hub.reference import (
    EvaluationError,
    ReferenceEvaluator,
    current_scope,
    evaluate,
    run_subgraph,
)


def random_array(rng, shape, dtype="float32"):
    """Random non-zero data."""
    data = rng.uniform(0.25, 3.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return data.astype(dtype)


@pytest.fixture
def rng():
    return np.random.default_rng(11)


# -- test-only ops -------------------------------------------------------------------

@op("Repeat", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    attrs=[Attr("body", AttrKind.GRAPH), Attr("times", AttrKind.INT, 2)], domain="test")
def repeat(x, *, body, times):
    """Y = body applied `times` times to X; the body may read enclosing values."""
    for _ in range(times):
        (x,) = run_subgraph(body, [x])
    return x


@op("Boom", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    domain="test")
def boom(x):
    """Always fails: stands for a buggy reference."""
    raise ZeroDivisionError("the reference divided by zero")


@op("Widen", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    domain="test")
def widen(x):
    """Returns float64 whatever its inference says: a reference that disagrees with it."""
    return x.astype(np.float64)


@op("ScopeSize", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    domain="test")
def scope_size(x):
    """Y = X * (number of values visible in the current scope)."""
    return (x * len(current_scope())).astype(x.dtype)


@pytest.fixture
def test_ops():
    plugins.reset()
    registry = plugins.get_registry()
    registry.current_plugin = "test"
    for schema in (repeat, boom, widen, scope_size):
        registry.add_op(schema)
    yield
    plugins.reset()


def mlp_like_graph(rng):
    """y = sigmoid(relu(x * w + b)) - x, built node by node with the IR API."""
    graph = Graph("mlp_like")
    x = graph.add_input("x", TensorType("float32", ["N", 4]))
    w = graph.add_constant(random_array(rng, (4,)), "w")
    b = graph.add_constant(random_array(rng, (1, 4)), "b")

    def node(op_name, *inputs, name):
        types = get_schema(op_name).infer_types([v.type for v in inputs], {})
        return graph.add_node(op_name, inputs, types, name=f"{name}_node",
                              output_names=[name]).outputs[0]

    h = node("Mul", x, w, name="h")
    a = node("Add", h, b, name="a")
    r = node("Relu", a, name="r")
    s = node("Sigmoid", r, name="s")
    y = node("Sub", s, x, name="y")
    graph.set_outputs([y])
    graph.verify()
    return graph


def mlp_like_numpy(graph, x):
    w, b = graph.find_value("w").const, graph.find_value("b").const
    h = x * w
    r = np.maximum(h + b, 0)
    return {"h": h, "a": h + b, "r": r, "s": 1 / (1 + np.exp(-r)), "y": 1 / (1 + np.exp(-r)) - x}


# -- results -----------------------------------------------------------------------------

def test_evaluate_matches_numpy_with_dict_or_list_inputs(rng):
    graph = mlp_like_graph(rng)
    x = random_array(rng, (5, 4))
    want = mlp_like_numpy(graph, x)["y"]
    (by_name,) = evaluate(graph, {"x": x})
    (by_order,) = evaluate(graph, [x])
    np.testing.assert_allclose(by_name, want, rtol=1e-6)
    np.testing.assert_array_equal(by_name, by_order)
    assert by_name.dtype == np.float32


def test_an_evaluator_runs_again_with_new_inputs(rng):
    graph = mlp_like_graph(rng)
    evaluator = ReferenceEvaluator(graph)
    for rows in (1, 3, 7):  # the symbolic N takes a new size each run
        x = random_array(rng, (rows, 4))
        (got,) = evaluator.run({"x": x})
        np.testing.assert_allclose(got, mlp_like_numpy(graph, x)["y"], rtol=1e-6)


def test_intermediate_values_by_name(rng):
    graph = mlp_like_graph(rng)
    x = random_array(rng, (2, 4))
    want = mlp_like_numpy(graph, x)
    names = ["r", "h", "y", "s", "a"]
    got = ReferenceEvaluator(graph).run([x], names)
    for name, value in zip(names, got):
        np.testing.assert_allclose(value, want[name], rtol=1e-6, err_msg=name)
    x_back, w = evaluate(graph, [x], ["x", "w"])  # inputs and constants too
    assert x_back is x
    np.testing.assert_array_equal(w, graph.find_value("w").const)


def test_unknown_output_name_is_reported(rng):
    graph = mlp_like_graph(rng)
    with pytest.raises(ValueError, match="graph 'mlp_like' has no value named 'nope'"):
        evaluate(graph, [random_array(rng, (1, 4))], ["y", "nope"])
    with pytest.raises(TypeError, match="output_names is a list of value names"):
        evaluate(graph, [random_array(rng, (1, 4))], "y")


def test_es_graph_with_symbols_and_broadcasting(rng):
    with es.GraphBuilder("g") as gb:
        a = es.input("a", "float64", ["N", 1])
        b = es.input("b", "float64", [1, "M"])
        gb.output((a - b) * (a + 2.0) / b, "y")
    a_data, b_data = random_array(rng, (3, 1), "float64"), random_array(rng, (1, 5), "float64")
    (got,) = evaluate(gb.graph, {"b": b_data, "a": a_data})
    np.testing.assert_allclose(got, (a_data - b_data) * (a_data + 2) / b_data, rtol=1e-12)
    assert got.shape == (3, 5)


# -- input checks ------------------------------------------------------------------------

def two_input_graph():
    with es.GraphBuilder("pair") as gb:
        x = es.input("x", "float32", ["N", 3])
        y = es.input("y", "float32", ["N", "M"])
        z = es.input("z", "int64", None)  # unknown rank: any shape goes
        gb.output(x + y, "sum")
        gb.output(es.neg(z), "negz")
    return gb.graph


@pytest.mark.parametrize("inputs, message", [
    ({"x": np.ones((2, 3), np.float32), "z": np.ones(2, np.int64)},
     r"graph 'pair': missing input\(s\) 'y'; expected x: float32\[N,3\], y: float32\[N,M\], "
     r"z: int64\[\?\]"),
    ({"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32),
      "z": np.ones(2, np.int64), "w": np.ones(1)},
     r"graph 'pair': unexpected input\(s\) 'w'"),
    ([np.ones((2, 3), np.float32)],
     r"graph 'pair': expected 3 inputs \(x: float32\[N,3\], .*\), got 1"),
    ([np.ones((2, 3)), np.ones((2, 3), np.float32), np.ones(1, np.int64)],
     r"graph 'pair': input 'x' must have dtype float32 \(float32\[N,3\]\), got float64"),
    ([np.ones(3, np.float32), np.ones((2, 3), np.float32), np.ones(1, np.int64)],
     r"input 'x' must have rank 2 \(float32\[N,3\]\), got shape \(3,\) \(rank 1\)"),
    ([np.ones((2, 4), np.float32), np.ones((2, 4), np.float32), np.ones(1, np.int64)],
     r"input 'x' dim 1 must be 3 \(float32\[N,3\]\), got shape \(2, 4\)"),
    ([np.ones((2, 3), np.float32), np.ones((5, 3), np.float32), np.ones(1, np.int64)],
     r"input 'y' dim 0 is symbol 'N', which input 'x' dim 0 sets to 2; got 5"),
    ([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32), [1.0, 2.0]],
     r"input 'z' must have dtype int64 \(int64\[\?\]\), got float64"),  # no silent cast
])
def test_bad_inputs_are_rejected_before_running(inputs, message):
    with pytest.raises(ValueError, match=message):
        evaluate(two_input_graph(), inputs)


def test_symbol_bound_twice_within_one_input():
    with es.GraphBuilder("square") as gb:
        gb.output(es.neg(es.input("m", "float32", ["K", "K"])), "y")
    with pytest.raises(ValueError, match=r"input 'm' dim 1 is symbol 'K', which input 'm' "
                                         r"dim 0 sets to 2; got 3"):
        evaluate(gb.graph, [np.ones((2, 3), np.float32)])


def test_inputs_of_the_wrong_container_type():
    with pytest.raises(TypeError, match="inputs must be a dict by name or a list"):
        evaluate(two_input_graph(), np.ones((2, 3), np.float32))


def test_good_inputs_with_any_shape_for_unknown_rank(rng):
    x, y = random_array(rng, (4, 3)), random_array(rng, (4, 3))
    z = np.arange(1, 25, dtype=np.int64).reshape(2, 3, 4)
    total, negz = evaluate(two_input_graph(), [x, y, z])
    np.testing.assert_allclose(total, x + y, rtol=1e-6)
    np.testing.assert_array_equal(negz, -z)


# -- failures inside references ----------------------------------------------------------

def boom_graph():
    with es.GraphBuilder("fragile") as gb:
        x = es.input("x", "float32", [3])
        fine = es.relu(x, name="fine")
        gb.output(es.test.boom(fine, name="kaboom"), "y")
    return gb.graph, fine.name


def test_failing_reference_names_node_and_op_and_is_chained(rng, test_ops):
    with pytest.raises(EvaluationError, match=r"graph 'fragile', node 'kaboom' \(test.Boom\): "
                                              r"the NumPy reference failed: ZeroDivisionError: "
                                              r"the reference divided by zero") as info:
        evaluate(boom_graph()[0], [random_array(rng, (3,))])
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert isinstance(info.value, GeHubError) and isinstance(info.value, RuntimeError)


def test_only_the_nodes_needed_for_the_outputs_run(rng, test_ops):
    x = random_array(rng, (3,))
    graph, fine_name = boom_graph()
    (fine,) = evaluate(graph, [x], [fine_name])  # the failing node is not needed
    np.testing.assert_array_equal(fine, np.maximum(x, 0))


def test_reference_that_contradicts_its_node_type(rng, test_ops):
    with es.GraphBuilder("g") as gb:
        gb.output(es.test.widen(es.input("x", "float32", [2]), name="wide"), "y")
    with pytest.raises(EvaluationError, match=r"node 'wide' \(test.Widen\): the NumPy "
                                              r"reference gave float64\[2\] for output 'y', "
                                              r"which the graph types float32\[2\]"):
        evaluate(gb.graph, [random_array(rng, (2,))])


def test_unknown_op_is_reported_when_the_evaluator_is_made():
    graph = Graph("odd")
    x = graph.add_input("x", TensorType("float32", [1]))
    node = graph.add_node("NoSuchOp", [x], [TensorType("float32", [1])])
    graph.set_outputs(node.outputs)
    with pytest.raises(UnknownOpError, match="unknown op 'NoSuchOp'"):
        ReferenceEvaluator(graph)


# -- subgraphs ---------------------------------------------------------------------------

def test_subgraph_body_reads_computed_outer_values(rng, test_ops):
    x, w = random_array(rng, (2, 3)), random_array(rng, (3,))
    with es.GraphBuilder("main") as main:
        tx = es.input("x", "float32", [2, 3])
        tw = es.input("w", "float32", [3])
        scale = es.sigmoid(tw)  # computed in the outer graph, read by the body
        with es.GraphBuilder("body") as body:
            state = es.input("state", "float32", [2, 3])
            body.output(state * scale - 0.25, "next")
        main.output(es.test.repeat(tx, body=body, times=3), "y")
    (got,) = evaluate(main.graph, {"x": x, "w": w})
    want, s = x, 1 / (1 + np.exp(-w))
    for _ in range(3):
        want = want * s - np.float32(0.25)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_nested_subgraphs_read_every_enclosing_scope(rng, test_ops):
    x, w = random_array(rng, (4,)), random_array(rng, (4,))
    with es.GraphBuilder("main") as main:
        tx = es.input("x", "float32", [4])
        tw = es.input("w", "float32", [4])
        with es.GraphBuilder("outer_body") as outer_body:
            s = es.input("s", "float32", [4])
            shift = s + 1.0  # a value of the middle scope, read by the inner body
            with es.GraphBuilder("inner_body") as inner_body:
                t = es.input("t", "float32", [4])
                inner_body.output(t * tw + shift, "u")  # reads main's w and outer_body's shift
            outer_body.output(es.test.repeat(s, body=inner_body, times=2), "v")
        main.output(es.test.repeat(tx, body=outer_body, times=1), "y")
    (got,) = evaluate(main.graph, [x, w])
    shift_data = x + 1
    want = (x * w + shift_data) * w + shift_data
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_evaluate_a_subgraph_with_explicit_outer_values(rng, test_ops):
    with es.GraphBuilder("main") as main:
        tw = es.input("w", "float32", [3])
        with es.GraphBuilder("body") as body:
            body.output(es.input("s", "float32", [3]) * tw, "out")
        main.output(es.test.repeat(tw, body=body), "y")
    s, w = random_array(rng, (3,)), random_array(rng, (3,))
    (got,) = evaluate(body.graph, {"s": s}, outer={tw.value: w})
    np.testing.assert_allclose(got, s * w, rtol=1e-6)
    with pytest.raises(GraphError, match=r"node 'mul' \(Mul\) reads value 'w', which has no "
                                         r"data here"):
        evaluate(body.graph, {"s": s})  # the captured w is given by nobody
    with pytest.raises(GraphError, match="reads value 'w', which has no data here"):
        repeat(s, body=body.graph, times=1)  # a reference called outside any evaluation


def test_current_scope_is_visible_only_during_evaluation(rng, test_ops):
    assert len(current_scope()) == 0
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        es.const(np.float32([1, 2]), name="unused")
        gb.output(es.test.scope_size(es.neg(x)), "y")
    data = random_array(rng, (2,))
    (got,) = evaluate(gb.graph, [data])
    # x, the constant and the Neg output are visible when ScopeSize runs.
    np.testing.assert_allclose(got, -data * 3, rtol=1e-6)
    assert len(current_scope()) == 0
