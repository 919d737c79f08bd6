"""specialize_shapes: folded constants keep their rank, and subgraphs are copied onto the
specialized values they capture."""

from __future__ import annotations

import numpy as np

from ge_hub import es
from ge_hub.ir.graph import outer_values
from ge_hub.passes.specialize_shapes import specialize_shapes


def test_a_folded_scalar_stays_a_scalar():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [])
        gb.output(es.add(x, es.cast(es.const(np.float16(1.5)), to="float32")), "y")
    graph = specialize_shapes(gb.graph, {"x": []}).graph
    graph.verify()
    (folded,) = [v for v in graph.constants if v.const.dtype == np.float32]
    assert folded.const.shape == () and folded.type.shape == ()


def test_bodies_read_the_specialized_values():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", ["N"])
        h = es.relu(x)
        with es.GraphBuilder("then") as then_b:
            then_b.output(es.neg(h), "t")
        with es.GraphBuilder("else") as else_b:
            else_b.output(es.abs(h), "e")
        (y,) = es.if_(es.input("c", "bool", []), then_branch=then_b, else_branch=else_b)
        gb.output(y, "y")
    new = specialize_shapes(gb.graph, {"x": [3], "c": []}).graph
    new.verify()
    node = new.nodes[-1]
    (captured,) = outer_values(node.attrs["then_branch"])
    assert captured is new.nodes[0].outputs[0] and captured.type.shape == (3,)
    assert node.outputs[0].type.shape == (3,)
    # The original graph is untouched: its bodies still read its own values.
    assert outer_values(gb.graph.nodes[-1].attrs["then_branch"])[0] is gb.graph.nodes[0].outputs[0]


def test_shape_of_a_narrow_typed_input_folds():
    # Fuzz finding: the zero-strided dummy of Shape's input was made in the input's dtype,
    # which as_strided cannot view for ml_dtypes' float8 (a TypeError at compile time).
    import ge_hub

    for dtype in ("float8_e5m2", "int4", "float32"):
        with es.GraphBuilder("g") as gb:
            x = es.input("x", dtype, [3, 5, 2])
            gb.output(es.shape(x, start=1, end=2), "s")
        graph = specialize_shapes(gb.graph, {"x": [3, 5, 2]}).graph
        (folded,) = [v.const for v in graph.constants]
        assert folded.tolist() == [5]
        model = ge_hub.compile(gb.graph)
        assert model.summary()["steps"] >= 1
