"""ge_hub.rewrite: every pattern feature and every safety rule of the engine, each with a
graph where the rule fires and one where it must not (and the reason it gives)."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es, rewrite
from ge_hub.reference import evaluate
from ge_hub.testing import check_rule, random_feeds


def build(fn, *inputs):
    """A graph from `fn(*input values)`; inputs are (name, dtype, shape); `fn` returns the
    outputs as a dict name -> value."""
    with es.GraphBuilder("g") as gb:
        values = [es.input(name, dtype, shape) for name, dtype, shape in inputs]
        for name, value in fn(*values).items():
            gb.output(value, name)
    return gb.graph


def ops(graph):
    return [n.op for n in graph.nodes]


def run(graph, rules):
    ctx = rewrite.PassContext()
    graph, count = rewrite.apply(graph, rules, ctx, verify=True)
    return graph, count, ctx


NEG_NEG = rewrite.Rule(lambda op, x: op.Neg(op.Neg(x)), lambda op, x: x, name="t.neg_neg")
SQUARE = rewrite.Rule(lambda op, x: op.Mul(x, x), lambda op, x: op.Pow(x, np.float32(2)),
                      name="t.square")


# -- escaping intermediates ----------------------------------------------------------

def test_fires_when_the_intermediate_is_read_only_inside():
    graph = build(lambda x: {"y": es.relu(es.neg(es.neg(x)))}, ("x", "float32", [2, 3]))
    check_rule(NEG_NEG, graph)
    graph, count, _ = run(graph, [NEG_NEG])
    assert count == 1 and ops(graph) == ["Relu"]


def test_refuses_when_the_intermediate_is_read_outside_and_says_why():
    def fn(x):
        inner = es.neg(x)
        return {"y": es.relu(es.neg(inner)), "z": es.sigmoid(inner)}
    graph = build(fn, ("x", "float32", [2, 3]))
    graph, count, ctx = run(graph, [NEG_NEG])
    assert count == 0 and ops(graph).count("Neg") == 2
    (entry,) = ctx.refusals("t.neg_neg")
    assert "outside the match" in entry.reason and "sigmoid" in entry.reason


def test_recompute_lets_an_escaping_intermediate_stay_for_its_readers():
    rule = rewrite.Rule(lambda op, x: op.Neg(op.Neg(x)), lambda op, x: x, name="t.recompute",
                        recompute=True)

    def fn(x):
        inner = es.neg(x)
        return {"y": es.relu(es.neg(inner)), "z": es.sigmoid(inner)}
    graph = build(fn, ("x", "float32", [2, 3]))
    rewritten, fired = check_rule(rule, graph)
    assert fired == 1 and sorted(ops(rewritten)) == ["Neg", "Relu", "Sigmoid"]


# -- graph outputs inside the match ---------------------------------------------------

def test_refuses_when_an_intermediate_is_a_graph_output():
    def fn(x):
        inner = es.neg(x)
        return {"y": es.neg(inner), "inner": inner}
    graph = build(fn, ("x", "float32", [4]))
    graph, count, ctx = run(graph, [NEG_NEG])
    assert count == 0
    assert "is a graph output" in ctx.refusals()[0].reason


def test_a_replaced_graph_output_keeps_its_name():
    graph = build(lambda x: {"y": es.mul(x, x)}, ("x", "float32", [4]))
    rewritten, _ = check_rule(SQUARE, graph)
    assert ops(rewritten) == ["Pow"] and rewritten.output_names == ["y"]


def test_a_graph_output_is_never_renamed_onto_an_existing_value():
    graph = build(lambda x: {"y": es.neg(es.neg(x))}, ("x", "float32", [4]))
    graph, count, ctx = run(graph, [NEG_NEG])
    assert count == 0 and "graph output 'y'" in ctx.refusals()[0].reason


# -- cycles ---------------------------------------------------------------------------

def _two_outputs():
    # Two pattern outputs; the second's replacement reads the first's replacement, so it
    # must not also read anything computed from the first's matched output.
    def pattern(op, x, y):
        return op.Relu(x), op.Sigmoid(y)

    def replacement(op, x, y):
        a = op.Relu(x)
        return a, op.Sigmoid(op.Add(y, op.Mul(a, np.float32(0))))
    return rewrite.Rule(pattern, replacement, name="t.pair")


def test_two_output_pattern_fires_on_independent_values():
    graph = build(lambda x, y: {"a": es.relu(x), "b": es.sigmoid(y)},
                  ("x", "float32", [3]), ("y", "float32", [3]))
    rewritten, fired = check_rule(_two_outputs(), graph)
    assert fired == 1 and sorted(ops(rewritten)) == ["Add", "Mul", "Relu", "Sigmoid"]


def test_refuses_a_replacement_that_would_make_a_cycle():
    def fn(x):
        a = es.relu(x)
        return {"a": a, "b": es.sigmoid(es.neg(a))}
    graph = build(fn, ("x", "float32", [3]))
    graph, count, ctx = run(graph, [_two_outputs()])
    assert count == 0
    assert "cycle" in ctx.refusals("t.pair")[0].reason


def test_refuses_replacing_a_value_by_one_computed_from_it():
    def pattern(op, x, y):
        return op.Relu(x), op.Sigmoid(y)
    rule = rewrite.Rule(pattern, lambda op, x, y: (y, y), name="t.back")
    graph = build(lambda x: {"b": es.abs(es.sigmoid(es.neg(es.relu(x))))},
                  ("x", "float32", [3]))
    graph, count, ctx = run(graph, [rule])
    assert count == 0 and "cycle" in ctx.refusals()[0].reason


# -- commutative operands ---------------------------------------------------------------

@pytest.mark.parametrize("one_first", [False, True])
def test_commutative_ops_match_either_operand_order(one_first):
    rule = rewrite.Rule(lambda op, x: op.Mul(x, 1.0), lambda op, x: x, name="t.mul_one")
    one = np.ones(3, np.float32)
    graph = build(lambda x: {"y": es.relu(es.mul(one, x) if one_first else es.mul(x, one))},
                  ("x", "float32", [2, 3]))
    rewritten, fired = check_rule(rule, graph)
    assert ops(rewritten) == ["Relu"]


def test_non_commutative_ops_match_one_order_only():
    rule = rewrite.Rule(lambda op, x: op.Sub(x, 0.0), lambda op, x: x, name="t.sub_zero")
    zero = np.zeros(3, np.float32)
    graph = build(lambda x: {"y": es.relu(es.sub(zero, x))}, ("x", "float32", [3]))
    assert run(graph, [rule])[1] == 0
    graph = build(lambda x: {"y": es.relu(es.sub(x, zero))}, ("x", "float32", [3]))
    assert run(graph, [rule])[1] == 1


def test_the_same_variable_twice_must_be_the_same_value():
    graph = build(lambda x, y: {"z": es.mul(x, y)}, ("x", "float32", [3]), ("y", "float32", [3]))
    assert run(graph, [SQUARE])[1] == 0


# -- attribute constraints --------------------------------------------------------------

def _transpose_rule(perm):
    return rewrite.Rule(lambda op, x: op.Transpose(x, perm=perm),
                        lambda op, x: op.Transpose(x, perm=[1, 0]), name="t.transpose")


def test_attribute_constraint_matches_the_given_value():
    graph = build(lambda x: {"y": es.relu(es.transpose(x, perm=[1, 0]))}, ("x", "float32", [2, 3]))
    assert run(graph, [_transpose_rule([1, 0])])[1] == 1


def test_attribute_constraint_rejects_another_value():
    graph = build(lambda x: {"y": es.relu(es.transpose(x, perm=[1, 0]))}, ("x", "float32", [2, 3]))
    assert run(graph, [_transpose_rule([0, 1])])[1] == 0


def test_attribute_constraint_sees_schema_defaults_and_predicates():
    rule = rewrite.Rule(lambda op, x: op.LeakyRelu(x, alpha=lambda a: abs(a - 0.01) < 1e-9),
                        lambda op, x: op.LeakyRelu(x, alpha=0.01), name="t.default")
    graph = build(lambda x: {"y": es.relu(es.leaky_relu(x))}, ("x", "float32", [3]))
    assert run(graph, [rule])[1] == 1
    graph = build(lambda x: {"y": es.relu(es.leaky_relu(x, alpha=0.2))}, ("x", "float32", [3]))
    assert run(graph, [rule])[1] == 0


# -- constants required -----------------------------------------------------------------

def _scale_rule():
    return rewrite.Rule(lambda op, x, s: op.Mul(x, s.constant()),
                        lambda op, x, s: op.Mul(s, x), name="t.const")


def test_constant_variable_matches_a_constant():
    s = np.full(3, 2.0, np.float32)
    graph = build(lambda x: {"y": es.relu(es.mul(x, s))}, ("x", "float32", [3]))
    assert run(graph, [_scale_rule()])[1] >= 1


def test_constant_variable_rejects_a_computed_value():
    graph = build(lambda x, y: {"y2": es.mul(x, y)}, ("x", "float32", [3]), ("y", "float32", [3]))
    assert run(graph, [_scale_rule()])[1] == 0


# -- optional inputs ------------------------------------------------------------------

def _conv_rule(optional):
    def pattern(op, x, w, b):
        return op.Relu(op.Conv(x, w, b.optional() if optional else b))

    def replacement(op, x, w, b, match):
        return op.Relu(op.Conv(x, w, b, **match.node("Conv").attrs))
    return rewrite.Rule(pattern, replacement, name="t.conv")


def _conv_graph(bias):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(2).astype(np.float32) if bias else None
    return build(lambda x: {"y": es.relu(es.conv(x, w, b))}, ("x", "float32", [1, 1, 5, 5]))


def test_optional_variable_matches_with_and_without_the_input():
    for bias in (True, False):
        assert run(_conv_graph(bias), [_conv_rule(True)])[1] == 1


def test_required_variable_does_not_match_an_absent_input():
    assert run(_conv_graph(False), [_conv_rule(False)])[1] == 0
    assert run(_conv_graph(True), [_conv_rule(False)])[1] == 1


# -- multiple outputs -------------------------------------------------------------------

def _split_rule():
    def pattern(op, x):
        a, b = op.Split(x, _outputs=2, axis=0, num_outputs=2)
        return op.Add(a, b)

    def replacement(op, x):
        return op.ReduceSum(op.Reshape(x, np.array([2, -1], np.int64)), np.array([0]),
                            keepdims=0)
    return rewrite.Rule(pattern, replacement, name="t.split_add")


def test_multi_output_node_pattern_matches():
    graph = build(lambda x: {"y": es.relu(es.add(*es.split(x, axis=0, num_outputs=2)))},
                  ("x", "float32", [4]))
    rewritten, fired = check_rule(_split_rule(), graph)
    assert "Split" not in ops(rewritten)


def test_multi_output_node_pattern_needs_both_outputs_in_place():
    def fn(x):
        a, b = es.split(x, axis=0, num_outputs=2)
        return {"y": es.add(a, a), "z": b}
    graph = build(fn, ("x", "float32", [4]))
    assert run(graph, [_split_rule()])[1] == 0


def test_two_output_pattern_needs_both_outputs():
    graph = build(lambda x: {"a": es.relu(x)}, ("x", "float32", [3]))
    assert run(graph, [_two_outputs()])[1] == 0


# -- broadcasting and types -------------------------------------------------------------

ADD_ZERO = rewrite.Rule(lambda op, x: op.Add(x, 0), lambda op, x: x, name="t.add_zero")


def test_broadcast_that_keeps_the_shape_is_simplified():
    zero = np.zeros(3, np.float32)
    graph = build(lambda x: {"y": es.relu(es.add(x, zero))}, ("x", "float32", [2, 3]))
    check_rule(ADD_ZERO, graph)


def test_broadcast_that_grows_the_shape_is_refused_by_the_type_check():
    zero = np.zeros((2, 3), np.float32)
    graph = build(lambda x: {"y": es.relu(es.add(x, zero))}, ("x", "float32", [3]))
    graph, count, ctx = run(graph, [ADD_ZERO])
    assert count == 0 and "has type float32[3]" in ctx.refusals()[0].reason


# -- check, ctx.reject, replacement failures ------------------------------------------------

def test_check_rejects_with_its_reason_and_accepts():
    def check(ctx, x):
        return x.type.rank == 2 or ctx.reject("not a matrix")
    rule = rewrite.Rule(lambda op, x: op.Neg(op.Neg(x)), lambda op, x: x, check=check,
                        name="t.check")
    graph = build(lambda x: {"y": es.relu(es.neg(es.neg(x)))}, ("x", "float32", [3]))
    graph, count, ctx = run(graph, [rule])
    assert count == 0 and ctx.refusals()[0].reason == "not a matrix"
    graph = build(lambda x: {"y": es.relu(es.neg(es.neg(x)))}, ("x", "float32", [2, 3]))
    assert run(graph, [rule])[1] == 1


def test_replacement_with_an_unknown_op_is_refused_with_the_reason():
    rule = rewrite.Rule(lambda op, x: op.Neg(op.Neg(x)),
                        lambda op, x: op.NoSuchOp(x, _domain="nowhere"), name="t.unknown")
    graph = build(lambda x: {"y": es.relu(es.neg(es.neg(x)))}, ("x", "float32", [3]))
    graph, count, ctx = run(graph, [rule])
    assert count == 0 and "nowhere.NoSuchOp" in ctx.refusals()[0].reason


def test_malformed_rules_raise_naming_the_rule():
    with pytest.raises(TypeError, match="t.bad"):
        rewrite.Rule(lambda op, x: x, lambda op, x: x, name="t.bad")
    with pytest.raises(TypeError, match="t.bad3.*complex"):
        rewrite.Rule(lambda op, x: op.Relu(x, 1j), lambda op, x: x, name="t.bad3")
    with pytest.raises(rewrite.RewriteError, match="'y'"):
        rewrite.Rule(lambda op, x: op.Relu(x), lambda op, y: y, name="t.bad2")


def test_apply_chains_and_counts_every_firing():
    graph = build(lambda x: {"y": es.relu(es.neg(es.neg(es.neg(es.neg(x)))))},
                  ("x", "float32", [3]))
    feeds = random_feeds(graph)
    want = evaluate(graph, feeds)
    graph, count, ctx = run(graph, [NEG_NEG])
    assert count == 2 and ops(graph) == ["Relu"] and ctx.fired["t.neg_neg"] == 2
    np.testing.assert_array_equal(evaluate(graph, feeds)[0], want[0])
