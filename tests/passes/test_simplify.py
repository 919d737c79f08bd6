"""The `simplify` rules: each fires on a graph built for it and leaves the outputs as they
were (random non-zero inputs; references and compiled model), and each stays away from
the look-alike that is not a no-op."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es

from .rulecheck import does_not_fire, fires_and_agrees


def graph_of(fn, shape=(2, 3), dtype="float32"):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", dtype, list(shape))
        gb.output(es.relu(fn(x)) if dtype.startswith("float") else es.abs(fn(x)), "y")
    return gb.graph


I64 = np.int64

CASES = [
    ("simplify.identity", lambda x: es.identity(x), None),
    ("simplify.dropout", lambda x: es.dropout(x, np.array(0.5, np.float32)),
     lambda x: es.dropout(x, np.array(0.5, np.float32), np.array(True))),
    ("simplify.noop_reshape", lambda x: es.reshape(x, np.array([2, 3], I64)),
     lambda x: es.reshape(x, np.array([3, 2], I64))),
    ("simplify.noop_reshape", lambda x: es.expand(x, np.array([1, 3], I64)),
     lambda x: es.expand(x, np.array([2, 2, 3], I64))),
    ("simplify.noop_reshape", lambda x: es.squeeze(x),
     lambda x: es.unsqueeze(x, np.array([0], I64))),
    ("simplify.noop_cast", lambda x: es.cast(x, to="float32"),
     lambda x: es.cast(es.cast(x, to="float16"), to="float32")),
    ("simplify.noop_transpose", lambda x: es.transpose(x, perm=[0, 1]),
     lambda x: es.transpose(es.reshape(x, np.array([3, 2], I64)), perm=[1, 0])),
    ("simplify.noop_slice",
     lambda x: es.slice(x, np.array([0], I64), np.array([100], I64), np.array([1], I64)),
     lambda x: es.slice(x, np.array([-1], I64), np.array([-100], I64), np.array([1], I64),
                        np.array([-1], I64))),
    ("simplify.noop_pad", lambda x: es.pad(x, np.zeros(4, I64)),
     lambda x: es.slice(es.pad(x, np.array([0, 1, 0, 0], I64)), np.array([0], I64),
                        np.array([3], I64), np.array([1], I64))),
    ("simplify.transpose_pair", lambda x: es.transpose(es.transpose(x, perm=[1, 0])),
     lambda x: es.transpose(es.exp(es.transpose(x, perm=[1, 0])))),
    ("simplify.reshape_chain",
     lambda x: es.reshape(es.reshape(x, np.array([6], I64)), np.array([3, 2], I64)),
     lambda x: es.reshape(es.exp(es.reshape(x, np.array([6], I64))), np.array([3, 2], I64))),
    ("simplify.mul_one", lambda x: es.mul(np.ones(3, np.float32), x),
     lambda x: es.mul(x, np.full(3, 2, np.float32))),
    ("simplify.div_one", lambda x: es.div(x, np.ones(1, np.float32)),
     lambda x: es.div(np.ones(3, np.float32), x)),
    ("simplify.add_zero", lambda x: es.add(np.zeros(3, np.float32), x),
     lambda x: es.add(x, np.zeros((2, 2, 3), np.float32))),
    ("simplify.sub_zero", lambda x: es.sub(x, np.zeros(3, np.float32)),
     lambda x: es.sub(np.zeros(3, np.float32), x)),
    ("simplify.single_input", lambda x: es.concat(x, axis=0),
     lambda x: es.concat(x, x, axis=0)),
]


@pytest.mark.parametrize("name, fires, look_alike", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fires_and_keeps_outputs(name, fires, look_alike):
    rewritten = fires_and_agrees(graph_of(fires), name)
    assert len(rewritten.nodes) == 1 or name in ("simplify.transpose_pair",
                                                 "simplify.reshape_chain")
    if look_alike is not None:
        does_not_fire(graph_of(look_alike), name)


def test_transpose_pair_that_does_not_cancel_becomes_one_transpose():
    graph = graph_of(lambda x: es.transpose(es.transpose(x, perm=[1, 2, 0]), perm=[1, 0, 2]),
                     shape=(2, 3, 4))
    rewritten = fires_and_agrees(graph, "simplify.transpose_pair")
    assert [n.op for n in rewritten.nodes] == ["Transpose", "Relu"]


def test_squeeze_unsqueeze_pair_cancels():
    graph = graph_of(lambda x: es.squeeze(es.unsqueeze(x, np.array([1], I64)),
                                          np.array([1], I64)))
    rewritten = fires_and_agrees(graph, "simplify.reshape_chain")
    assert [n.op for n in rewritten.nodes] == ["Relu"]


def test_a_graph_output_identity_stays_and_says_why():
    with es.GraphBuilder("g") as gb:
        gb.output(es.identity(es.input("x", "float32", [3])), "y")
    (reason,) = does_not_fire(gb.graph, "simplify.identity")
    assert "graph output 'y'" in reason


def test_dropout_whose_mask_is_read_stays():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [3])
        y, mask = es.dropout(x, outputs=2)
        gb.output(es.relu(y), "y")
        gb.output(mask, "mask")
    (reason,) = does_not_fire(gb.graph, "simplify.dropout")
    assert "is a graph output" in reason


def test_integer_mul_by_one():
    fires_and_agrees(graph_of(lambda x: es.mul(x, np.ones(3, np.int32)), dtype="int32"),
                     "simplify.mul_one")
