"""The ES graph-building API: generated op functions, operators, constants, validation at
the offending call, plugin namespaces, lazy loading and nested builders."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

from ge_hub import es, plugins
from ge_hub.errors import GraphError, OpError
from ge_hub.es.naming import snake_case
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import outer_values
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import Attr, AttrKind, Input, Output, get_schema, op
from ge_hub.ops.inference import same_as_input
from ge_hub.ops.schema import FLOATS
from ge_hub.reference import evaluate, run_subgraph


def random_array(rng, shape, dtype="float32"):
    """Random non-zero data, away from zero so that division stays tame."""
    data = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return data.astype(dtype)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


# -- test-only ops -------------------------------------------------------------------

def _infer_two_way(ctx):
    x = ctx.input(0)
    return [x, x.with_dtype(DType.BOOL)]


@op("TwoWay", inputs=[Input("X", FLOATS), Input("Bias", FLOATS, optional=True)],
    outputs=[Output("Y"), Output("Mask", optional=True)], infer=_infer_two_way,
    attrs=[Attr("scale", AttrKind.FLOAT, 1.0), Attr("name", AttrKind.STRING, "")],
    domain="acme")
def two_way(x, bias=None, *, scale, name):
    """Y = X * scale (+ Bias); Mask = X > 0. Has an attribute that clashes with `name=`."""
    del name
    y = x * x.dtype.type(scale) + (0 if bias is None else bias)
    return y.astype(x.dtype), x > 0


@op("FusedOp", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    attrs=[Attr("alpha", AttrKind.FLOAT, 0.5)], domain="com.acme")
def fused_op(x, *, alpha):
    """Y = alpha * X."""
    return (x * x.dtype.type(alpha)).astype(x.dtype)


@op("Repeat", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    attrs=[Attr("body", AttrKind.GRAPH), Attr("times", AttrKind.INT, 2)], domain="test")
def repeat(x, *, body, times):
    """Y = body applied `times` times to X."""
    for _ in range(times):
        (x,) = run_subgraph(body, [x])
    return x


@pytest.fixture
def test_ops():
    plugins.reset()
    registry = plugins.get_registry()
    registry.current_plugin = "test"
    for schema in (two_way, fused_op, repeat):
        registry.add_op(schema)
    yield
    plugins.reset()


def graph_of(build):
    """Run `build(gb)` inside a fresh builder and return the built graph."""
    with es.GraphBuilder("g") as gb:
        build(gb)
    return gb.graph


# -- names, lookup, signatures -------------------------------------------------------

@pytest.mark.parametrize("onnx_name, python_name", [
    ("Relu", "relu"), ("MatMul", "mat_mul"), ("GlobalAveragePool", "global_average_pool"),
    ("IsNaN", "is_nan"), ("ReduceL2", "reduce_l2"), ("ReduceLogSumExp", "reduce_log_sum_exp"),
    ("LessOrEqual", "less_or_equal"), ("QLinearConv", "q_linear_conv"), ("TopK", "top_k"),
    ("And", "and_"), ("GatherND", "gather_nd"), ("data_0", "data_0"), ("X", "x"),
])
def test_snake_case_names(onnx_name, python_name):
    assert snake_case(onnx_name) == python_name


@pytest.mark.parametrize("attr, op_name", [
    ("relu", "Relu"), ("Relu", "Relu"), ("is_nan", "IsNaN"), ("IsNaN", "IsNaN"),
    ("reduce_l2", "ReduceL2"), ("less_or_equal", "LessOrEqual"), ("and_", "And"),
    ("top_k", "TopK"),
])
def test_core_ops_resolve_by_snake_case_and_onnx_name(attr, op_name):
    function = getattr(es, attr)
    assert function.schema is get_schema(op_name)
    assert function.__module__ == "ge_hub.es"


def test_unknown_op_is_an_attribute_error_with_suggestions():
    with pytest.raises(AttributeError, match=r"no op 'rleu'.*did you mean relu"):
        es.rleu  # noqa: B018


def test_dir_lists_ops_and_the_builder_api():
    names = dir(es)
    for expected in ("relu", "Relu", "less_or_equal", "top_k", "GraphBuilder", "input", "op"):
        assert expected in names


def test_signature_inputs_positional_attributes_keyword_only_with_defaults():
    params = inspect.signature(es.clip).parameters
    assert list(params) == ["input", "min", "max", "name"]
    assert params["input"].default is inspect.Parameter.empty
    assert params["min"].default is None and params["max"].default is None
    assert params["name"].kind is inspect.Parameter.KEYWORD_ONLY

    params = inspect.signature(es.cast).parameters
    assert params["to"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["to"].default is inspect.Parameter.empty  # a required attribute
    assert params["saturate"].default == get_schema("Cast").attrs["saturate"].default

    params = inspect.signature(es.concat).parameters
    assert params["inputs"].kind is inspect.Parameter.VAR_POSITIONAL
    assert "outputs" not in params  # Concat has exactly one output

    assert "outputs" in inspect.signature(es.split).parameters  # a variadic output


def test_docstring_comes_from_the_schema():
    doc = es.top_k.__doc__
    assert doc.startswith("TopK: " + get_schema("TopK").doc)
    for piece in ("x (X)", "k (K): int64", "axis: int, default -1", "Values", "Indices",
                  "tuple of Tensors"):
        assert piece in doc


def test_import_loads_no_plugin():
    code = ("import ge_hub.es as es, ge_hub.plugins as p; "
            "hasattr(es, '__wrapped__'); hasattr(es, '_private'); "
            "print(p.is_loaded()); es.relu; print(p.is_loaded())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False", "True"]


# -- building and running --------------------------------------------------------------

def test_builder_makes_a_verified_graph_that_prints_and_runs(rng):
    with es.GraphBuilder("small") as gb:
        x = es.input("x", "float32", ["N", 4])
        b = es.const(random_array(rng, (4,)), name="bias")
        y = es.sigmoid(es.relu(x + b))
        gb.output(y, "y")
    graph = gb.graph
    assert gb.is_built
    graph.verify()
    assert graph.input_names == ["x"] and graph.output_names == ["y"]
    assert [n.op for n in graph.nodes] == ["Add", "Relu", "Sigmoid"]
    assert graph.outputs[0].type == TensorType("float32", [Sym("N"), 4])
    text = str(graph)
    assert "graph small(" in text and "Sigmoid(" in text and "%y" in text

    data = random_array(rng, (3, 4))
    (got,) = evaluate(graph, {"x": data})
    want = 1 / (1 + np.exp(-np.maximum(data + b.value.const, 0)))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tensor_exposes_its_value_and_type():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "int32", [2, "S"])
        assert x.dtype is DType.INT32
        assert x.shape == (2, Sym("S")) and x.rank == 2
        assert x.type == TensorType("int32", [2, "S"])
        assert x.name == "x" and x.value is gb.graph.inputs[0]
        y = es.neg(x)
        assert {x: 1, y: 2}[y] == 2  # hashable by identity
        assert (x == y) is False  # no elementwise __eq__: identity comparison
        with pytest.raises(TypeError, match="no truth value"):
            bool(x)
        gb.output(y, "y")


OPERATORS = [
    ("add", lambda a, b: a + b, "Add"),
    ("sub", lambda a, b: a - b, "Sub"),
    ("mul", lambda a, b: a * b, "Mul"),
    ("div", lambda a, b: a / b, "Div"),
    ("pow", lambda a, b: a ** b, "Pow"),
]


@pytest.mark.parametrize("label, apply, op_name", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_binary_operators_and_reflected_forms(rng, label, apply, op_name):
    # `a` is positive, so that Pow has real results.
    a_data, b_data = np.abs(random_array(rng, (3, 4))), random_array(rng, (4,))
    with es.GraphBuilder("g") as gb:
        a = es.input("a", "float32", [3, 4])
        b = es.input("b", "float32", [4])
        gb.output(apply(a, b), "tensor_tensor")
        gb.output(apply(a, 1.5), "tensor_scalar")
        gb.output(apply(2.5, b), "scalar_tensor")  # the reflected form
    assert op_name in [n.op for n in gb.graph.nodes]
    got = evaluate(gb.graph, [a_data, b_data])
    want = [apply(a_data, b_data), apply(a_data, np.float32(1.5)), apply(np.float32(2.5), b_data)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)
        assert g.dtype == np.float32


def test_unary_minus_and_numpy_scalars_on_the_left(rng):
    data = random_array(rng, (2, 3))
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2, 3])
        gb.output(-x, "neg")
        gb.output(np.float32(3.0) * x, "scaled")  # NumPy defers to Tensor.__rmul__
    assert [n.op for n in gb.graph.nodes] == ["Neg", "Mul"]
    neg, scaled = evaluate(gb.graph, [data])
    np.testing.assert_array_equal(neg, -data)
    np.testing.assert_allclose(scaled, 3 * data, rtol=1e-6)


def test_operator_with_an_unsupported_operand_is_a_type_error():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        with pytest.raises(TypeError):
            x + "one"  # noqa: B018
        gb.output(x, "x")


# -- constants and dtypes ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "float64", "bfloat16", "int32", "int8"])
def test_python_scalar_takes_the_dtype_of_the_other_operand(rng, dtype):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", dtype, [3])
        gb.output(x + 1, "plus")
        gb.output(2 * x, "times")
    assert [c.const.dtype for c in gb.graph.constants] == [np.dtype(DType(dtype).numpy)] * 2
    data = np.array([1, -2, 3]).astype(DType(dtype).numpy)
    plus, times = evaluate(gb.graph, [data])
    np.testing.assert_array_equal(plus.astype(np.float64), data.astype(np.float64) + 1)
    np.testing.assert_array_equal(times.astype(np.float64), 2 * data.astype(np.float64))


def test_python_values_follow_the_op_not_a_global_default(rng):
    data = random_array(rng, (2, 6))
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float16", [2, 6])
        cond = es.input("c", "bool", [2, 6])
        r = es.reshape(x, [3, -1])  # the shape input allows int64 only
        gb.output(r, "r")
        gb.output(es.where(cond, x, 0.0), "w")  # Y shares X's type variable
        gb.output(x ** 2, "p")  # Pow's exponent has its own type variable: follows X
    consts = [c.const for c in gb.graph.constants]
    assert [c.dtype for c in consts] == [np.int64, np.float16, np.float16]
    assert r.shape == (3, 4)  # the constant shape made inference exact
    mask = rng.random((2, 6)) < 0.5
    r_got, w_got, p_got = evaluate(gb.graph, {"x": data.astype(np.float16), "c": mask})
    half = data.astype(np.float16)
    np.testing.assert_array_equal(r_got, half.reshape(3, 4))
    np.testing.assert_array_equal(w_got, np.where(mask, half, np.float16(0)))
    np.testing.assert_allclose(p_got, half ** 2, rtol=1e-3)


def test_numpy_arrays_keep_their_dtype():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [3])
        with pytest.raises(OpError, match=r"Add: input 'B' must have the same dtype as 'A' "
                                          r"\(float32\), got float64"):
            x + np.ones(3)  # noqa: B018
        gb.output(x + np.ones(3, np.float32), "y")


def test_python_value_that_does_not_fit_the_dtype_is_rejected():
    with es.GraphBuilder("g") as gb:
        i = es.input("i", "int32", [3])
        with pytest.raises(OpError, match=r"Add.*input 'B'.*1\.5 does not fit dtype int32"):
            i + 1.5  # noqa: B018
        small = es.input("s", "int8", [3])
        with pytest.raises(OpError, match=r"Mul.*input 'B'.*1000 does not fit dtype int8"):
            small * 1000  # noqa: B018
        half = es.input("h", "float16", [3])
        with pytest.raises(OpError, match=r"input 'B'.*does not fit dtype float16"):
            half + 1e10  # noqa: B018
        gb.output(i + 2.0, "y")  # an integral float fits exactly


def test_const_defaults_and_explicit_dtype():
    with es.GraphBuilder("g") as gb:
        f = es.const(0.25)
        i = es.const([1, 2, 3])
        h = es.const(2, dtype="float16")
        assert (f.dtype, i.dtype, h.dtype) == (DType.FLOAT32, DType.INT64, DType.FLOAT16)
        assert i.shape == (3,)
        gb.output(f, "f")


# -- inputs by keyword, variadic inputs, node names --------------------------------------

def test_optional_input_by_keyword_or_none(rng):
    data = random_array(rng, (5,)) * 4
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [5])
        upper = es.clip(x, max=1.0)
        both = es.clip(x, None, 1.0, name="clamp")
        lower = es.clip(x, -1.0)
        gb.output(upper, "upper")
        gb.output(both, "both")
        gb.output(lower, "lower")
    upper_node, both_node, lower_node = gb.graph.nodes
    assert upper_node.inputs[1] is None and upper_node.inputs[2] is not None
    assert both_node.name == "clamp"
    assert len(lower_node.inputs) == 2  # trailing omitted inputs are left out
    got = evaluate(gb.graph, [data])
    for g, w in zip(got, [np.minimum(data, 1), np.minimum(data, 1), np.maximum(data, -1)]):
        np.testing.assert_array_equal(g, w)


def test_variadic_inputs_as_arguments_or_one_list(rng):
    a, b, c = (random_array(rng, (2, k)) for k in (1, 2, 3))
    with es.GraphBuilder("g") as gb:
        ta, tb, tc = (es.input(n, "float32", [2, k]) for n, k in (("a", 1), ("b", 2), ("c", 3)))
        joined = es.concat([ta, tb, tc], axis=1)
        assert joined.shape == (2, 6)
        gb.output(joined, "joined")
        gb.output(es.sum(ta, ta, ta), "total")
    joined, total = evaluate(gb.graph, [a, b, c])
    np.testing.assert_array_equal(joined, np.concatenate([a, b, c], axis=1))
    np.testing.assert_allclose(total, 3 * a, rtol=1e-6)


# -- multi-output ops -------------------------------------------------------------------

def test_multi_output_ops_return_tuples(rng):
    data = random_array(rng, (3, 7))
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [3, 7])
        values, indices = es.top_k(x, [2])
        assert values.shape == (3, 2) and indices.dtype is DType.INT64
        halves = es.split(x, axis=0, num_outputs=2)
        pieces = es.split(x, [2, 5], axis=1)
        assert [len(halves), len(pieces)] == [2, 2]
        assert [p.shape for p in halves] == [(2, 7), (1, 7)]
        assert [p.shape for p in pieces] == [(3, 2), (3, 5)]
        for name, tensor in [("v", values), ("i", indices), ("h1", halves[1]),
                             ("p1", pieces[1])]:
            gb.output(tensor, name)
    v, i, h1, p1 = evaluate(gb.graph, [data])
    order = np.argsort(-data, axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(i, order)
    np.testing.assert_array_equal(v, np.take_along_axis(data, order, axis=1))
    np.testing.assert_array_equal(h1, data[2:])
    np.testing.assert_array_equal(p1, data[:, 2:])


def test_outputs_keyword_gives_split_its_count():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [6, "N"])
        thirds = es.split(x, axis=0, outputs=3)  # neither `split` nor `num_outputs` here
        assert [t.shape for t in thirds] == [(2, Sym("N"))] * 3
        (single,) = es.split(x, outputs=1)  # a variadic output is always a tuple
        assert single.shape == x.shape
        with pytest.raises(OpError, match="Split.*attribute 'num_outputs' is 2 but the node "
                                          "has 3 outputs"):
            es.split(x, num_outputs=2, outputs=3)
        gb.output(thirds[1], "t")
    assert len(gb.graph.nodes[0].outputs) == 3


def test_optional_outputs_only_when_asked(rng, test_ops):
    data = random_array(rng, (4,))
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [4])
        y = es.acme.two_way(x, scale=2.0)
        y2, mask = es.acme.two_way(x, scale=3.0, outputs=2)
        assert mask.dtype is DType.BOOL
        with pytest.raises(OpError, match=r"acme.TwoWay: argument 'outputs' must be between 1 "
                                          r"and 2 \(outputs: Y, Mask\), got 3"):
            es.acme.two_way(x, outputs=3)
        with pytest.raises(OpError, match="argument 'outputs' must be a positive int"):
            es.acme.two_way(x, outputs=0)
        gb.output(y, "y")
        gb.output(y2, "y2")
        gb.output(mask, "mask")
    assert [len(n.outputs) for n in gb.graph.nodes] == [1, 2]
    got_y, got_y2, got_mask = evaluate(gb.graph, [data])
    np.testing.assert_allclose(got_y, 2 * data, rtol=1e-6)
    np.testing.assert_allclose(got_y2, 3 * data, rtol=1e-6)
    np.testing.assert_array_equal(got_mask, data > 0)


# -- plugin domains --------------------------------------------------------------------

def test_plugin_domains_are_namespaces(rng, test_ops):
    data, bias = random_array(rng, (2, 3)), random_array(rng, (3,))
    assert {"acme", "com_acme", "test"} <= set(dir(es))
    assert {"two_way", "TwoWay"} <= set(dir(es.acme))
    assert es.com_acme.fused_op.schema is fused_op
    assert es.com_acme.FusedOp is es.com_acme.fused_op
    assert es.com_acme.fused_op.__module__ == "ge_hub.es.com_acme"
    with pytest.raises(AttributeError, match="ge_hub.es.acme has no op 'fused_op'"):
        es.acme.fused_op  # noqa: B018
    # The attribute `name` clashes with the reserved `name=`: it is spelled `name_`.
    assert "name_" in inspect.signature(es.acme.two_way).parameters

    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2, 3])
        a = es.com_acme.fused_op(x, alpha=0.25)
        b = es.op("FusedOp", x, domain="com.acme")
        c = es.acme.two_way(x, bias=es.const(bias), name_="tag", name="tw")
        d = es.op("Relu", x)
        for tensor, name in [(a, "a"), (b, "b"), (c, "c"), (d, "d")]:
            gb.output(tensor, name)
    node = gb.graph.find_node("tw")
    assert (node.domain, node.op, node.attrs) == ("acme", "TwoWay", {"name": "tag"})
    got = evaluate(gb.graph, [data])
    for g, w in zip(got, [0.25 * data, 0.5 * data, data + bias, np.maximum(data, 0)]):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_es_op_with_an_unknown_name_fails_clearly():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        with pytest.raises(AttributeError, match="ge_hub.es.nowhere has no op 'Relu'"):
            es.op("Relu", x, domain="nowhere")
        gb.output(x, "x")


# -- validation at the offending call ----------------------------------------------------

def test_wrong_dtype_names_op_input_expected_and_given():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        h = es.input("h", "float16", [2])
        with pytest.raises(OpError, match=r"^Add: input 'B' must have the same dtype as 'A' "
                                          r"\(float32\), got float16$"):
            x + h  # noqa: B018
        i = es.input("i", "int32", [2])
        with pytest.raises(OpError, match=r"Sigmoid.*input 'X' must have dtype in "
                                          r"\{bfloat16, float16, float32, float64\}, got int32"):
            es.sigmoid(i, name="act")
        gb.output(x, "x")


def test_wrong_rank_and_shape_raise_at_the_call():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [3, 4])
        m = es.input("m", "float32", [3, 4, 5])
        with pytest.raises(OpError, match=r"TopK.*input 'K' must have rank 1, got int64\[\]"):
            es.top_k(x, np.array(2, np.int64))
        with pytest.raises(OpError, match=r"Concat.*input 'inputs\[1\]'.*must have rank 2"):
            es.concat(x, m, axis=0)
        with pytest.raises(OpError, match=r"Add.*cannot be broadcast"):
            x + es.input("y", "float32", [5])  # noqa: B018
        gb.output(x, "x")


def test_bad_attributes_and_arguments():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2, 3])
        cases = [
            (lambda: es.flatten(x, axis="1"), r"Flatten: attribute 'axis' must be an int, "
                                              r"got '1'"),
            (lambda: es.cast(x), r"Cast: attribute 'to' \(dtype\) is required"),
            (lambda: es.relu(x, alpha=0.1), r"Relu: unknown keyword argument 'alpha'; "
                                            r"inputs: x; attributes: none; reserved: name"),
            (lambda: es.relu(x, x), r"Relu: expected at most 1 inputs \(X\), got 2"),
            (lambda: es.add(x), r"Add: input 'B' is required"),
            (lambda: es.clip(x, 0.0, min=1.0), r"Clip: input 'min' is given both by position "
                                               r"and by keyword 'min'"),
            (lambda: es.add(x, "two"), r"Add: input 'B' must be an ES tensor, a NumPy array "
                                       r"or a Python number or list, got str"),
            (lambda: es.relu(x, name=""), r"argument 'name' \(the node name\) must be a "
                                          r"non-empty string"),
        ]
        for call, message in cases:
            with pytest.raises(OpError, match=message):
                call()
        gb.output(x, "x")


def test_a_failed_call_leaves_the_graph_unchanged():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        before = (len(gb.graph.nodes), len(gb.graph.constants))
        with pytest.raises(OpError):
            es.where(x, x, 1.0)  # the condition must be bool; 1.0 would become a constant
        assert (len(gb.graph.nodes), len(gb.graph.constants)) == before
        gb.output(x, "x")


def test_tensor_of_another_builder_is_rejected():
    with es.GraphBuilder("first") as first:
        a = es.input("a", "float32", [2])
        first.output(a, "a")
    with es.GraphBuilder("second") as second:
        b = es.input("b", "float32", [2])
        with pytest.raises(OpError, match=r"Add: input 'B' is tensor 'a' of builder 'first', "
                                          r"which is neither the active builder 'second'"):
            b + a  # noqa: B018
        with pytest.raises(GraphError, match="tensor 'a' belongs to builder 'first'"):
            second.output(a, "y")
        second.output(b, "b")


def test_use_outside_any_builder_is_rejected():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        gb.output(x, "x")
    with pytest.raises(GraphError, match=r"es.relu was called outside any GraphBuilder"):
        es.relu(x)
    with pytest.raises(GraphError, match=r"es.input was called outside any GraphBuilder"):
        es.input("y", "float32", [2])
    with pytest.raises(GraphError, match=r"es.output was called outside any GraphBuilder"):
        es.output(x, "y")
    with pytest.raises(GraphError, match="builder 'g' is already built"):
        gb.output(x, "z")


def test_duplicate_names_are_rejected():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        with pytest.raises(GraphError, match="duplicate input name 'x'"):
            es.input("x", "float32", [3])
        y = es.relu(x, name="act")
        with pytest.raises(GraphError, match="already has a node or value named 'act'"):
            es.relu(x, name="act")
        gb.output(y, "y")
        with pytest.raises(GraphError, match="duplicate output name 'y'"):
            gb.output(es.neg(x), "y")
        with pytest.raises(GraphError, match="duplicate output name 'x'"):
            gb.output(es.neg(x), "x")  # taken by the input
        with pytest.raises(GraphError, match="output name 'act' is the name given to a node"):
            gb.output(es.neg(x), "act")
        gb.output(es.neg(x), "neg")  # a generated node name gives way
    assert gb.graph.find_value("neg").producer.name != "neg"


def test_builder_without_outputs_is_rejected():
    with pytest.raises(GraphError, match="builder 'empty' has no outputs"):
        with es.GraphBuilder("empty"):
            es.relu(es.input("x", "float32", [2]))


def test_builder_is_used_once():
    gb = es.GraphBuilder("once")
    with gb:
        gb.output(es.input("x", "float32", [1]), "x")
    with pytest.raises(GraphError, match="already used"):
        with gb:
            pass


def test_outputs_may_be_inputs_constants_or_repeated(rng):
    data = random_array(rng, (2,))
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        c = es.const(np.float32([1.5, -2.5]))
        y = es.relu(x)
        gb.output(x)  # under its own name: no node needed
        gb.output(c, "c")  # a constant under another name: through Identity
        gb.output(y, "y")  # a node output is renamed
        gb.output(y, "y_again")  # the same value twice: through Identity
    assert gb.graph.output_names == ["x", "c", "y", "y_again"]
    assert [n.op for n in gb.graph.nodes] == ["Relu", "Identity", "Identity"]
    got = evaluate(gb.graph, [data])
    for g, w in zip(got, [data, c.value.const, np.maximum(data, 0), np.maximum(data, 0)]):
        np.testing.assert_array_equal(g, w)


# -- nested builders ---------------------------------------------------------------------

def test_nested_builder_builds_a_subgraph_that_captures_outer_tensors(rng, test_ops):
    data, weight = random_array(rng, (2, 3)), random_array(rng, (3,))
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [2, 3])
        w = es.const(weight, name="w")
        with es.GraphBuilder("body") as body:
            state = es.input("state", "float32", [2, 3])
            body.output(es.relu(state * w + 0.5), "next")
        assert body.is_built and not main.is_built
        assert [v.name for v in outer_values(body.graph)] == ["w"]
        y = es.test.repeat(x, body=body, times=3)  # a built builder stands for its graph
        main.output(y, "y")
    main.graph.verify()
    assert main.graph.nodes[0].attrs["body"] is body.graph
    (got,) = evaluate(main.graph, [data])
    want = data
    for _ in range(3):
        want = np.maximum(want * weight + np.float32(0.5), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_subgraph_tensors_do_not_leak_out(test_ops):
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [2])
        with es.GraphBuilder("body") as body:
            inner = es.neg(es.input("s", "float32", [2]))
            body.output(inner, "out")
        with pytest.raises(OpError, match="tensor 'out' of builder 'body'"):
            x + inner  # noqa: B018
        main.output(es.test.repeat(x, body=body.graph), "y")


def test_unused_capturing_subgraph_is_reported(test_ops):
    with pytest.raises(GraphError, match=r"subgraph 'body' reads the enclosing tensors 'x' "
                                         r"but no node of 'main' uses it"):
        with es.GraphBuilder("main") as main:
            x = es.input("x", "float32", [2])
            with es.GraphBuilder("body") as body:
                body.output(es.neg(x), "out")
            main.output(x, "x")


def test_failed_subgraph_releases_its_captures(test_ops):
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [2])
        with pytest.raises(OpError):
            with es.GraphBuilder("body"):
                es.neg(x)  # reads the outer x ...
                es.sigmoid(es.input("i", "int32", [2]))  # ... then fails
        assert x.value.uses == []
        main.output(es.neg(x), "y")
    main.graph.verify()


def test_unfinished_subgraph_builder_cannot_be_an_attribute(test_ops):
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [2])
        with es.GraphBuilder("body") as body:
            body.output(es.input("s", "float32", [2]), "s")
            with pytest.raises(GraphError, match="subgraph builder 'body' is used as an "
                                                 "attribute before its `with` block has ended"):
                es.test.repeat(x, body=body)
        main.output(es.test.repeat(x, body=body), "y")


# -- whole models against hand-written NumPy ----------------------------------------------

def softmax_numpy(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_matmul_operator_and_alias(rng):
    a, b = random_array(rng, (3, 4)), random_array(rng, (4, 2))
    with es.GraphBuilder("g") as gb:
        ta = es.input("a", "float32", ["N", 4])
        tb = es.const(b)
        gb.output(ta @ tb, "y")
        gb.output(np.ones((2, 3), np.float32) @ ta, "z")  # reflected: the array on the left
        assert es.matmul is es.mat_mul is es.MatMul
    assert [n.op for n in gb.graph.nodes] == ["MatMul", "MatMul"]
    assert gb.graph.outputs[0].type == TensorType("float32", ["N", 2])
    y, z = evaluate(gb.graph, [a])
    np.testing.assert_allclose(y, a @ b, rtol=1e-5)
    np.testing.assert_allclose(z, np.ones((2, 3), np.float32) @ a, rtol=1e-5)


def test_mlp_matches_numpy(rng):
    w1, b1 = random_array(rng, (8, 16)), random_array(rng, (16,))
    w2, b2 = random_array(rng, (5, 16)), random_array(rng, (5,))
    with es.GraphBuilder("mlp") as gb:
        x = es.input("x", "float32", ["N", 8])
        hidden = es.relu(x @ es.const(w1) + es.const(b1))
        logits = es.gemm(hidden, es.const(w2), es.const(b2), transB=1, alpha=0.5)
        with pytest.raises(OpError, match=r"MatMul: inner dims differ: input 'A' "
                                          r"float32\[N,16\] has 16 columns, input 'B' "
                                          r"float32\[5,16\] has 5 rows"):
            hidden @ w2  # forgot the transpose: caught at this line, graph unchanged
        gb.output(es.softmax(logits), "probs")
    graph = gb.graph
    assert graph.outputs[0].type == TensorType("float32", ["N", 5])
    assert [n.op for n in graph.nodes] == ["MatMul", "Add", "Relu", "Gemm", "Softmax"]
    data = random_array(rng, (6, 8))
    (got,) = evaluate(graph, {"x": data})
    want = softmax_numpy(0.5 * (np.maximum(data @ w1 + b1, 0) @ w2.T) + b2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def conv2d_numpy(x, w, b, pad):
    x = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    k = w.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w) + b[None, :, None, None]


def test_small_cnn_matches_numpy(rng):
    conv_w, conv_b = random_array(rng, (4, 2, 3, 3)), random_array(rng, (4,))
    mean, var = random_array(rng, (4,)), np.abs(random_array(rng, (4,)))
    gamma, beta = random_array(rng, (4,)), random_array(rng, (4,))
    fc_w, fc_b = random_array(rng, (4, 3)), random_array(rng, (3,))
    with es.GraphBuilder("cnn") as gb:
        x = es.input("x", "float32", ["N", 2, 6, 6])
        y = es.conv(x, es.const(conv_w), es.const(conv_b), kernel_shape=[3, 3],
                    pads=[1, 1, 1, 1])
        assert y.shape == (Sym("N"), 4, 6, 6)
        y = es.batch_normalization(y, *(es.const(a) for a in (gamma, beta, mean, var)),
                                   epsilon=1e-3)
        y = es.max_pool(es.relu(y), kernel_shape=[2, 2], strides=[2, 2])
        assert isinstance(y, es.Tensor) and y.shape == (Sym("N"), 4, 3, 3)
        y, kept = es.dropout(y, outputs=2)  # inference mode: the identity, mask all True
        features = es.flatten(es.global_average_pool(y), axis=1)
        logits = features @ es.const(fc_w) + es.const(fc_b)
        gb.output(es.softmax(logits, axis=1), "probs")
        gb.output(kept, "kept")
    data = random_array(rng, (2, 2, 6, 6))
    probs, kept = evaluate(gb.graph, [data])

    h = conv2d_numpy(data, conv_w, conv_b, pad=1)
    h = (h - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3) * gamma[:, None, None] \
        + beta[:, None, None]
    h = np.maximum(h, 0).reshape(2, 4, 3, 2, 3, 2).max(axis=(3, 5))
    want = softmax_numpy(h.mean(axis=(2, 3)) @ fc_w + fc_b)
    np.testing.assert_allclose(probs, want, rtol=1e-4, atol=1e-6)
    assert kept.dtype == np.bool_ and kept.shape == (2, 4, 3, 3) and kept.all()


def test_layer_normalization_optional_outputs(rng):
    scale = random_array(rng, (6,))
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", ["N", 6])
        y = es.layer_normalization(x, es.const(scale))
        y3, mean, inv_std = es.layer_normalization(x, es.const(scale), outputs=3)
        assert isinstance(y, es.Tensor) and mean.shape == (Sym("N"), 1)
        for name, tensor in [("y", y), ("y3", y3), ("mean", mean), ("inv_std", inv_std)]:
            gb.output(tensor, name)
    data = random_array(rng, (3, 6))
    y, y3, mean, inv_std = evaluate(gb.graph, [data])
    want_mean = data.mean(axis=1, keepdims=True)
    want_inv = 1 / np.sqrt(((data - want_mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, (data - want_mean) * want_inv * scale, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(y, y3)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv_std, want_inv, rtol=1e-4)
