"""The verifier: valid graphs pass; each broken invariant is reported, naming the culprit.

Each case starts from a valid graph, breaks one invariant by poking at the objects'
internals (as a buggy pass would), and checks that `verify` raises a `GraphError` whose
message names the graph and the offending node or value.
"""

from __future__ import annotations

import numpy as np
import pytest
import test_ir
from test_ir import add_typed_node, all_attr_kinds, build_graph, build_nested

from ge_hub.errors import GraphError
from ge_hub.ir import Graph, Sym, TensorType, Value
from ge_hub.ir.verifier import types_compatible, verify

# The fixtures shared with the other IR tests.
rng = test_ir.rng
ir_test_ops = test_ir.ir_test_ops


def expect_error(graph: Graph, *fragments: str) -> str:
    with pytest.raises(GraphError) as info:
        verify(graph)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# -- valid graphs -------------------------------------------------------------------


def test_valid_graph_passes(rng):
    g = build_graph(rng)
    g.verify()
    verify(g)


def test_valid_nested_graph_passes(rng, ir_test_ops):
    build_nested(rng).verify()


def test_omitted_optional_input_and_output_pass(rng, ir_test_ops):
    g = Graph("k")
    x = g.add_input("x", TensorType("int8", [Sym("N"), 2]))
    node = add_typed_node(g, "Kinds", [x, None], all_attr_kinds(rng), domain="test")
    node.outputs.pop()  # the optional second output is dropped
    g.set_outputs(node.outputs)
    g.verify()
    bias = g.add_constant(rng.uniform(-1, 1, 2), "bias")  # float64: its own type variable
    node.set_input(1, bias)
    g.verify()


def test_symbolic_and_unknown_dims_are_compatible(rng):
    g = build_graph(rng)
    g.find_value("r").type = TensorType("float32", ["M", 3])   # inference says [N,3]
    g.find_value("y").type = TensorType("float32", [7, 3])     # inference says [M,3]
    g.find_value("same").type = TensorType("bool", None)       # unknown rank
    g.verify()


def test_types_compatible():
    f = TensorType("float32", ["N", 3])
    assert types_compatible(f, TensorType("float32", [5, 3]))
    assert types_compatible(TensorType("float32", None), f)
    assert not types_compatible(f, TensorType("float64", ["N", 3]))
    assert not types_compatible(f, TensorType("float32", ["N", 4]))
    assert not types_compatible(f, TensorType("float32", ["N"]))


# -- one broken invariant at a time -------------------------------------------------


def _other_value(type_: TensorType) -> Value:
    return Graph("elsewhere").add_input("stranger", type_)


def _extra_output(g: Graph) -> None:
    relu = g.find_node("relu1")
    extra = Value("extra", relu.outputs[0].type)
    extra.producer, extra.index = relu, 1
    relu.outputs.append(extra)


def _set(obj, **fields):
    for key, value in fields.items():
        setattr(obj, key, value)


BREAKERS = {
    "duplicate value name": (
        lambda g: _set(g.find_value("r"), name="y"),
        ["graph 'small'", "name 'y' is used twice", "output 0 of node 'relu1' (Relu)"]),
    "empty value name": (
        lambda g: _set(g.find_value("r"), name=""),
        ["graph 'small'", "output 0 of node 'relu1' (Relu) has no name"]),
    "node named like a value": (
        lambda g: _set(g.find_node("relu1"), name="x"),
        ["name 'x' is used twice (graph input 'x' and node 'x' (Relu))"]),
    "empty node name": (
        lambda g: _set(g.find_node("relu1"), name=""),
        ["nodes[1] (Relu) has no name"]),
    "node of another graph": (
        lambda g: _set(g.find_node("relu1"), graph=Graph("other")),
        ["node 'relu1' (Relu) has node.graph = 'other'"]),
    "same node twice": (
        lambda g: g.nodes.append(g.nodes[-1]),
        ["node 'equal' (Equal) appears twice"]),
    "not a node": (
        lambda g: g.nodes.append("Relu"),
        ["nodes[4] is a str, not a Node"]),
    "required input omitted": (
        lambda g: g.find_node("relu1").set_input(0, None),
        ["graph 'small': Relu (node 'relu1'): input 'X' is required"]),
    "input from another graph": (
        lambda g: g.find_node("relu1").set_input(0, _other_value(g.find_value("r").type)),
        ["node 'relu1' (Relu) input 0 reads 'stranger'", "not defined in this graph"]),
    "not topologically sorted": (
        lambda g: g.nodes.insert(0, g.nodes.pop(1)),
        ["node 'relu1' (Relu) input 0 reads", "node 'add' (Add) produces later",
         "not in topological order"]),
    "reads its own output": (
        lambda g: g.find_node("relu1").set_input(0, g.find_value("r")),
        ["node 'relu1' (Relu) input 0 reads its own output 'r'"]),
    "wrong producer": (
        lambda g: _set(g.find_value("r"), producer=g.find_node("sigmoid")),
        ["value 'r' is output 0 of node 'relu1' (Relu), but records node 'sigmoid'"]),
    "wrong output index": (
        lambda g: _set(g.find_value("r"), index=1),
        ["value 'r' is output 0 of node 'relu1' (Relu), but records node 'relu1' (Relu) "
         "output 1"]),
    "dangling user": (
        lambda g: (g.nodes.remove(g.find_node("equal")), g.outputs.pop()),
        ["lists a dangling user, node 'equal' (Equal), which is not in the graph"]),
    "missing use": (
        lambda g: g.find_value("r").uses.clear(),
        ["node 'sigmoid' (Sigmoid) reads value 'r' as input 0, but the value's uses do not "
         "record it"]),
    "use of the wrong input": (
        lambda g: g.inputs[0].uses.__setitem__(0, (g.find_node("add"), 1)),
        ["value 'x' lists a use as input 1 of node 'add' (Add), but that input is 'c'"]),
    "use of a missing input": (
        lambda g: g.inputs[0].uses.__setitem__(0, (g.find_node("add"), 5)),
        ["value 'x' lists a use as input 5 of node 'add' (Add), which has 2 inputs"]),
    "use listed twice": (
        lambda g: g.inputs[0].uses.append(g.inputs[0].uses[0]),
        ["value 'x' lists its use as input 0 of node 'add' (Add) twice"]),
    "constant of another dtype": (
        lambda g: _set(g.find_value("c"), const=g.find_value("c").const.astype(np.float64)),
        ["constant 'c' is declared float32[3] but its data is float64[3]"]),
    "constant of another shape": (
        lambda g: _set(g.find_value("c"), const=g.find_value("c").const.reshape(1, 3)),
        ["constant 'c' is declared float32[3] but its data is float32[1,3]"]),
    "constant without data": (
        lambda g: _set(g.find_value("c"), const=None),
        ["constant 'c' has no NumPy data"]),
    "graph input with data": (
        lambda g: _set(g.inputs[0], const=np.zeros((2, 3), np.float32)),
        ["graph input 'x' carries constant data"]),
    "node output with data": (
        lambda g: _set(g.find_value("r"), const=np.zeros((2, 3), np.float32)),
        ["value 'r', output 0 of node 'relu1' (Relu), carries constant data"]),
    "value without a TensorType": (
        lambda g: _set(g.find_value("r"), type="float32"),
        ["value 'r' has type 'float32', expected a TensorType"]),
    "undefined graph output": (
        lambda g: g.outputs.append(_other_value(TensorType("float32", [1]))),
        ["graph output 2 'stranger' is not defined"]),
    "graph output None": (
        lambda g: g.outputs.append(None),
        ["graph output 2 is None"]),
    "unknown op": (
        lambda g: _set(g.find_node("relu1"), op="Relux"),
        ["node 'relu1' (Relux)", "unknown op 'Relux'"]),
    "unknown attribute": (
        lambda g: g.find_node("relu1").attrs.update(alpha=0.5),
        ["graph 'small': Relu (node 'relu1'): unknown attribute 'alpha'"]),
    "input dtypes disagree": (
        lambda g: g.find_node("add").set_input(1, g.add_constant(np.ones(3, np.int32), "ci")),
        ["Add (node 'add'): input 'B' must have the same dtype as 'A' (float32), got int32"]),
    "output dtype disagrees": (
        lambda g: _set(g.find_value("r"), type=TensorType("float64", ["N", 3])),
        ["node 'relu1' (Relu) output 0 'r' is recorded as float64[N,3], but op Relu infers "
         "float32[N,3]"]),
    "output dim disagrees": (
        lambda g: _set(g.find_value("y"), type=TensorType("float32", ["N", 4])),
        ["node 'sigmoid' (Sigmoid) output 0 'y' is recorded as float32[N,4]"]),
    "output rank disagrees": (
        lambda g: _set(g.find_value("y"), type=TensorType("float32", ["N"])),
        ["output 0 'y' is recorded as float32[N], but op Sigmoid infers float32[N,3]"]),
    "too many outputs": (
        _extra_output,
        ["node 'relu1' (Relu) has 2 outputs, but op Relu gives 1"]),
    "required output missing": (
        lambda g: g.find_node("sigmoid").outputs.clear(),
        ["node 'sigmoid' (Sigmoid) has 0 outputs, but op Sigmoid requires output 0 ('Y')"]),
}


@pytest.mark.parametrize("case", list(BREAKERS))
def test_broken_invariant_is_reported(rng, case):
    g = build_graph(rng)
    g.verify()
    breaker, fragments = BREAKERS[case]
    breaker(g)
    expect_error(g, *fragments)


def test_inference_crash_names_the_node(rng, ir_test_ops):
    g = Graph("f")
    x = g.add_input("x", TensorType("float32", [2]))
    node = g.add_node("Faulty", [x], [x.type], domain="test", name="oops")
    g.set_outputs(node.outputs)
    message = expect_error(g, "graph 'f': node 'oops' (test.Faulty)",
                           "type inference of test.Faulty failed: IndexError")
    assert "Traceback" not in message


def test_verify_needs_a_graph():
    with pytest.raises(GraphError, match="verify expects a Graph, got list"):
        verify([])


# -- subgraphs ----------------------------------------------------------------------

THEN = "graph 'then' (attribute 'then_branch' of node 'if' (test.If) in graph 'outer')"


def test_subgraph_reading_a_later_outer_value(rng, ir_test_ops):
    g = build_nested(rng)
    later = add_typed_node(g, "Relu", [g.find_value("h")], output_names=["later"]).outputs[0]
    then = g.find_node("if").attrs["then_branch"]
    then.nodes[0].set_input(0, later)
    expect_error(g, THEN, "node 'relu' (Relu) input 0 reads 'later'",
                 "not defined in this graph or an enclosing one")


def test_error_two_levels_down_names_the_path(rng, ir_test_ops):
    g = build_nested(rng)
    inner = g.find_node("if").attrs["else_branch"].find_node("if").attrs["then_branch"]
    inner.nodes[0].outputs[0].type = TensorType("float16", ["B", 4])
    expect_error(g, "graph 'inner' (attribute 'then_branch' of node 'if' (test.If) in graph "
                    "'else' (attribute 'else_branch' of node 'if' (test.If) in graph 'outer'))",
                 "node 'sigmoid' (Sigmoid) output 0 'i' is recorded as float16[B,4]")


def test_subgraph_alone_does_not_see_the_enclosing_graph(rng, ir_test_ops):
    then = build_nested(rng).find_node("if").attrs["then_branch"]
    expect_error(then, "graph 'then': node 'relu' (Relu) input 0 reads 'h'",
                 "not defined in this graph or an enclosing one")


def test_missing_use_of_an_outer_value(rng, ir_test_ops):
    g = build_nested(rng)
    h = g.find_value("h")
    h.uses = [use for use in h.uses if use[0].graph is g]  # forget the branch's read
    expect_error(g, "graph 'outer': node 'relu' (Relu) reads value 'h' as input 0, but the "
                    "value's uses do not record it")


def test_value_owned_by_two_graphs(rng, ir_test_ops):
    g = build_nested(rng)
    g.find_node("if").attrs["then_branch"].constants.append(g.find_value("w"))
    expect_error(g, THEN, "value 'w' (constant 'w') is also owned elsewhere, in graph 'outer'")


def test_graph_containing_itself(rng, ir_test_ops):
    g = build_nested(rng)
    g.find_node("if").attrs["else_branch"] = g
    expect_error(g, "graph 'outer' (attribute 'else_branch' of node 'if' (test.If) in "
                    "graph 'outer'): contains itself as a subgraph")


def test_subgraph_shared_by_two_attributes(rng, ir_test_ops):
    g = build_nested(rng)
    node = g.find_node("if")
    node.attrs["else_branch"] = node.attrs["then_branch"]
    expect_error(g, "graph 'then' (attribute 'else_branch'", f"the same Graph object is also "
                 f"{THEN}")


def test_subgraphs_in_a_list_are_verified(rng, ir_test_ops):
    g = build_nested(rng)
    node = g.find_node("if")
    broken = node.attrs["then_branch"]
    broken.outputs[0].type = TensorType("int32", ["B", 4])
    node.attrs["then_branch"] = [broken]
    expect_error(g, "graph 'then' (attribute 'then_branch[0]' of node 'if' (test.If)",
                 "output 0 't' is recorded as int32[B,4]")


def test_subgraph_attribute_kind_is_checked(rng, ir_test_ops):
    g = build_nested(rng)
    g.find_node("if").attrs["then_branch"] = "then"
    expect_error(g, "graph 'outer': test.If (node 'if'): attribute 'then_branch' must be a "
                    "Graph, got 'then'")
