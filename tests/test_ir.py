"""The IR objects and their text form (`print(graph)`).

This module also holds what the other IR tests share (they import it): a tiny op set in
domain "test" with every attribute kind and subgraphs, the fixture that registers it,
graph builders, and `assert_graphs_equal`, a structural comparison of two graphs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from ge_hub import plugins
from ge_hub.errors import GraphError
from ge_hub.ir import DType, Graph, Sym, TensorType, Value
from ge_hub.ir.printer import SMALL_CONSTANT, format_graph
from ge_hub.ops import Attr, AttrKind, Input, Output, get_schema, op
from ge_hub.ops.schema import ANY, BOOL
from ge_hub.registry import BUILTIN_PLUGIN

# -- a test-only op set -------------------------------------------------------------


def _kinds_types(ctx):
    x = ctx.input(0)
    return [x, x.with_dtype(ctx.attrs["to"])]


@op("Kinds", domain="test",
    inputs=[Input("X", ANY), Input("Bias", ANY, type_var=None, optional=True)],
    outputs=[Output("Y"), Output("Cast", optional=True)],
    attrs=[Attr("count", AttrKind.INT, 1), Attr("scale", AttrKind.FLOAT, 1.0),
           Attr("mode", AttrKind.STRING, "plain"), Attr("sizes", AttrKind.INTS, []),
           Attr("weights", AttrKind.FLOATS, []), Attr("labels", AttrKind.STRINGS, []),
           Attr("table", AttrKind.TENSOR, None), Attr("body", AttrKind.GRAPH, None),
           Attr("to", AttrKind.DTYPE, DType.FLOAT32)],
    infer=_kinds_types)
def kinds(x, bias=None, *, to, **_):
    """Y = X and Cast = X as `to`: an op whose point is its attributes."""
    return x, x.astype(to.numpy)


def _branch_types(ctx):
    return [v.type for v in ctx.attrs["then_branch"].outputs]


@op("If", domain="test", inputs=[Input("cond", BOOL)], outputs=[Output("outputs", variadic=True)],
    attrs=[Attr("then_branch", AttrKind.GRAPH), Attr("else_branch", AttrKind.GRAPH)],
    infer=_branch_types)
def if_(cond, *, then_branch, else_branch):
    """Runs a branch; the graph tests never run it (no interpreter here)."""
    raise NotImplementedError("test.If has no reference")


def _faulty_types(ctx):
    return [ctx.input(0).shape[5]]  # an inference bug: IndexError on small ranks


@op("Faulty", domain="test", inputs=[Input("X", ANY)], outputs=[Output("Y")], infer=_faulty_types)
def faulty(x):
    """An op whose inference crashes, for the verifier's error wrapping."""
    return x


TEST_OPS = (kinds, if_, faulty)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def ir_test_ops():
    """Register the "test" domain ops in a fresh registry; forget them afterwards."""
    plugins.reset()
    registry = plugins.get_registry()
    registry.current_plugin = "test"
    try:
        for schema in TEST_OPS:
            registry.add_op(schema)
    finally:
        registry.current_plugin = BUILTIN_PLUGIN
    yield
    plugins.reset()


# -- graph builders -----------------------------------------------------------------


def add_typed_node(graph: Graph, op_name: str, inputs, attrs=None, *, domain="", **kwargs):
    """Add a node whose output types come from the op's schema."""
    schema = get_schema(op_name, domain)
    types = schema.infer_types([None if v is None else v.type for v in inputs], attrs or {},
                               consts=[None if v is None else v.const for v in inputs])
    return graph.add_node(op_name, inputs, types, attrs, domain=domain, **kwargs)


def build_graph(rng) -> Graph:
    """x[N,3] -> Add(x, c) -> Relu -> Sigmoid -> y, plus a bool output of Equal."""
    g = Graph("small")
    x = g.add_input("x", TensorType("float32", ["N", 3]))
    c = g.add_constant(rng.uniform(-2, 2, 3).astype(np.float32), "c")
    g.add_constant(rng.uniform(-2, 2, (4, 5)).astype(np.float32), "big")
    s = add_typed_node(g, "Add", [x, c]).outputs[0]
    r = add_typed_node(g, "Relu", [s], name="relu1", output_names=["r"]).outputs[0]
    y = add_typed_node(g, "Sigmoid", [r], output_names=["y"]).outputs[0]
    e = add_typed_node(g, "Equal", [r, s], output_names=["same"]).outputs[0]
    g.set_outputs([y, e])
    return g


def build_nested(rng) -> Graph:
    """A graph with a test.If whose branches read values of the enclosing graph, one of
    them through a second level of nesting."""
    g = Graph("outer")
    x = g.add_input("x", TensorType("float32", ["B", 4]))
    cond = g.add_input("cond", TensorType("bool", []))
    w = g.add_constant(rng.uniform(-1, 1, 4).astype(np.float32), "w")
    h = add_typed_node(g, "Add", [x, w], output_names=["h"]).outputs[0]

    then = Graph("then")
    t = add_typed_node(then, "Relu", [h], output_names=["t"]).outputs[0]
    then.set_outputs([t])

    inner = Graph("inner")
    i = add_typed_node(inner, "Sigmoid", [x], output_names=["i"]).outputs[0]
    inner.set_outputs([i])
    orelse = Graph("else")
    flag = orelse.add_constant(np.array(True), "flag")
    nested = add_typed_node(orelse, "If", [flag], {"then_branch": inner,
                                                   "else_branch": _identity_branch(h)},
                            domain="test", output_names=["n"]).outputs[0]
    orelse.set_outputs([nested])

    y = add_typed_node(g, "If", [cond], {"then_branch": then, "else_branch": orelse},
                       domain="test", output_names=["y"]).outputs[0]
    g.set_outputs([y])
    return g


def _identity_branch(value: Value) -> Graph:
    """A branch that returns a value of an enclosing graph unchanged."""
    branch = Graph("pass")
    branch.set_outputs([value])
    return branch


def all_attr_kinds(rng) -> dict:
    return {"count": 3, "scale": 0.5, "mode": "fast", "sizes": [], "weights": [1.5, -2.0],
            "labels": ["a", "β"], "table": rng.uniform(-1, 1, (2, 2)).astype(np.float16),
            "to": DType.FLOAT16}


# -- structural equality ------------------------------------------------------------


def assert_graphs_equal(a: Graph, b: Graph, mapping: dict[int, Value] | None = None) -> None:
    """Same names, types, constants' bytes, nodes, attributes (kinds included) and the
    same wiring: each value of `b` is where the corresponding value of `a` is."""
    mapping = {} if mapping is None else mapping
    assert a.name == b.name
    assert len(a.inputs) == len(b.inputs) and len(a.constants) == len(b.constants)
    assert len(a.nodes) == len(b.nodes)
    for va, vb in zip(list(a.inputs) + list(a.constants), list(b.inputs) + list(b.constants)):
        _assert_values_equal(va, vb, mapping)
    for na, nb in zip(a.nodes, b.nodes):
        assert (na.name, na.op, na.domain) == (nb.name, nb.op, nb.domain)
        assert nb.graph is b
        assert len(na.outputs) == len(nb.outputs)
        for index, (va, vb) in enumerate(zip(na.outputs, nb.outputs)):
            _assert_values_equal(va, vb, mapping)
            assert vb.producer is nb and vb.index == index
    for na, nb in zip(a.nodes, b.nodes):
        assert len(na.inputs) == len(nb.inputs)
        for va, vb in zip(na.inputs, nb.inputs):
            assert (va is None) == (vb is None)
            if va is not None:
                assert mapping[id(va)] is vb, f"node {na.name!r} reads the wrong value"
                assert (nb, nb.inputs.index(vb)) in vb.uses
        assert_attrs_equal(na.attrs, nb.attrs, mapping)
    assert_attrs_equal(a.attrs, b.attrs, mapping)
    assert [mapping[id(v)] for v in a.outputs] == b.outputs


def _assert_values_equal(va: Value, vb: Value, mapping: dict[int, Value]) -> None:
    assert va.name == vb.name
    assert va.type == vb.type
    assert (va.const is None) == (vb.const is None)
    if va.const is not None:
        assert va.const.dtype == vb.const.dtype and va.const.shape == vb.const.shape
        assert va.const.tobytes() == vb.const.tobytes()
    mapping[id(va)] = vb


def assert_attrs_equal(a: dict, b: dict, mapping: dict[int, Value]) -> None:
    assert list(a) == list(b)
    for key in a:
        _assert_attr_equal(a[key], b[key], mapping)


def _assert_attr_equal(x, y, mapping) -> None:
    assert type(x) is type(y), f"{x!r} became {y!r}"
    if isinstance(x, Graph):
        assert_graphs_equal(x, y, mapping)
    elif isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y)
        for xi, yi in zip(x, y):
            _assert_attr_equal(xi, yi, mapping)
    elif isinstance(x, dict):
        assert_attrs_equal(x, y, mapping)
    elif isinstance(x, float) and np.isnan(x):
        assert np.isnan(y)
    elif isinstance(x, float):
        assert x == y and np.copysign(1, x) == np.copysign(1, y)
    else:
        assert x == y


# -- the text form ------------------------------------------------------------------


def _elements(array) -> list[str]:
    return [str(v) for v in array.reshape(-1)]


def test_print_shows_signature_constants_nodes_and_return(rng):
    g = build_graph(rng)
    lines = str(g).splitlines()
    assert lines[0] == "graph small(%x: float32[N,3]) -> (%y: float32[N,3], %same: bool[N,3]) {"
    c = g.find_value("c").const
    assert lines[1] == f"  %c = const float32[3] [{', '.join(_elements(c))}]"
    assert lines[2] == "  %big = const float32[4,5]"  # more than SMALL_CONSTANT elements
    assert g.find_value("big").const.size > SMALL_CONSTANT
    assert re.fullmatch(r"  %add_\d+ = Add\(%x, %c\) +: float32\[N,3\]", lines[3])
    assert re.fullmatch(r"  %r = Relu\(%add_\d+\) +: float32\[N,3\]  # node 'relu1'", lines[4])
    assert re.fullmatch(r"  %same = Equal\(%r, %add_\d+\) +: bool\[N,3\]  # node 'equal'",
                        lines[6])
    assert lines[-2:] == ["  return %y, %same", "}"]
    assert str(g) == format_graph(g)


def test_print_lines_up_types_of_short_lines(rng):
    lines = str(build_graph(rng)).splitlines()[3:7]
    assert len({line.index(" : ") for line in lines}) == 1


def test_print_zero_d_and_empty_constants(rng):
    g = Graph("c")
    scalar = g.add_constant(np.array(rng.integers(1, 100), dtype=np.int64), "k")
    g.add_constant(np.zeros((0, 3), np.float32), "e")
    g.set_outputs([scalar])
    lines = str(g).splitlines()
    assert lines[1] == f"  %k = const int64[] {scalar.const[()]}"
    assert lines[2] == "  %e = const float32[0,3] []"


def test_print_optional_input_attrs_and_two_outputs(rng, ir_test_ops):
    g = Graph("k")
    x = g.add_input("x", TensorType("float32", [2, Sym("S")]))
    attrs = all_attr_kinds(rng)
    node = add_typed_node(g, "Kinds", [x, None], attrs, domain="test", output_names=["y", "z"])
    g.set_outputs(node.outputs)
    line = str(g).splitlines()[1]
    table = ", ".join(f"[{', '.join(_elements(row))}]" for row in attrs["table"])
    assert line == (
        '  %y, %z = test.Kinds(%x, _) {count=3, scale=0.5, mode="fast", sizes=[], '
        f'weights=[1.5, -2.0], labels=["a", "\\u03b2"], table=tensor float16[2,2] [{table}], '
        "to=float16} : float32[2,S], float16[2,S]  # node 'kinds'")


def test_print_nests_subgraphs_indented(rng, ir_test_ops):
    text = str(build_nested(rng))
    assert "  %y = test.If(%cond) {then_branch=@then, else_branch=@else} : float32[B,4]" in text
    expected_block = [
        "    then_branch: graph then() -> (%t: float32[B,4]) {",
        "      %t = Relu(%h) : float32[B,4]  # node 'relu'",
        "      return %t",
        "    }",
    ]
    lines = text.splitlines()
    start = lines.index(expected_block[0])
    assert lines[start:start + 4] == expected_block
    # Two levels down: the else branch's own If and its branches.
    assert "        then_branch: graph inner() -> (%i: float32[B,4]) {" in lines
    assert "          %i = Sigmoid(%x) : float32[B,4]  # node 'sigmoid'" in lines
    assert "        else_branch: graph pass() -> (%h: float32[B,4]) {" in lines


def test_print_lists_of_graphs_and_graph_attrs(rng):
    g = Graph("g")
    x = g.add_input("x", TensorType("float32", [3]))
    branches = [_identity_branch(x), _identity_branch(x)]
    g.add_node("Switch", [x], [x.type], {"cases": branches, "pair": (1, 2.5)}, domain="acme",
               output_names=["y"])
    g.attrs = {"producer": "unit test", "opset": 17}
    lines = str(g).splitlines()
    assert lines[1] == '  attrs {producer="unit test", opset=17}'
    assert "  %y = acme.Switch(%x) {cases=[@pass, @pass], pair=(1, 2.5)} : float32[3]" \
        + "  # node 'switch'" in lines
    assert "    cases[0]: graph pass() -> (%x: float32[3]) {" in lines
    assert "    cases[1]: graph pass() -> (%x: float32[3]) {" in lines


def test_print_survives_a_broken_graph(rng):
    g = build_graph(rng)
    g.nodes[0].inputs[0] = None  # breaks the uses invariant, but must still print
    g.constants[0].const = None
    text = str(g)
    assert "Add(_, %c)" in text
    assert "%c = const float32[3] <no data>" in text


def test_unique_names_do_not_clash(rng):
    g = build_graph(rng)
    taken = {v.name for v in g.values()} | {n.name for n in g.nodes}
    fresh = [g.unique_name("add") for _ in range(3)]
    assert len(set(fresh)) == 3 and not set(fresh) & taken
    with pytest.raises(ValueError, match="already has a value or node named 'x'"):
        g.add_input("x", TensorType("float32", [1]))


def test_topological_sort_restores_a_valid_order(rng):
    g = build_graph(rng)
    g.nodes.reverse()
    with pytest.raises(GraphError, match="not in topological order"):
        g.verify()
    g.topological_sort()
    position = {id(n): i for i, n in enumerate(g.nodes)}
    for node in g.nodes:
        for value in node.inputs:
            if value.producer is not None:
                assert position[id(value.producer)] < position[id(node)]
    g.verify()


def test_add_node_that_fails_leaves_the_graph_unchanged(rng):
    g = build_graph(rng)
    before = str(g)
    x = g.inputs[0]
    other = Graph("other")
    foreign = other.add_node("Relu", [other.add_input("v", x.type)], [x.type])
    for bad in (dict(output_names=["r"]), dict(name="y"), dict(output_names=["p", "p"]),
                dict(output_names=["p", "q"]), dict(before=foreign)):
        with pytest.raises(ValueError):
            g.add_node("Relu", [x], [x.type], **bad)
        assert str(g) == before
        g.verify()  # in particular, no use of x was recorded for the failed node
    assert len(x.uses) == 1
    node = g.add_node("Relu", [x], [x.type], output_names=["relu"])
    assert node.name != "relu" and node.outputs[0].name == "relu"
    g.verify()
