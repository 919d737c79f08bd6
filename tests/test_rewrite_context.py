"""The pass context: one per compilation, carrying options, registry, device and the
rule log; the pipeline, the passes that ask for it, shape specialization and kernel
selection use its registry, so a test can compile against an isolated registry."""

from __future__ import annotations

import numpy as np

from ge_hub import builtin, es, rewrite
from ge_hub.compiler import compile_plan
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext
from ge_hub.registry import PassSpec, Registry


def isolated_registry() -> Registry:
    """ge-hub's built-ins only, in a registry of its own (no plugin, not the global one)."""
    registry = Registry()
    for hook in (builtin.register_ops, builtin.register_kernels, builtin.register_passes):
        hook(registry)
    return registry


def small_graph():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2, 3])
        gb.output(es.relu(es.identity(es.neg(es.neg(x)))), "y")
    return gb.graph


def test_compile_uses_the_contexts_registry_and_hands_the_context_to_passes():
    registry = isolated_registry()
    seen = []

    def spy(graph, ctx):
        seen.append((ctx.registry, ctx.device, ctx.options["verify"]))
        return PassResult(graph, False)

    registry.current_plugin = "test"
    registry.add_pass(PassSpec("spy", spy, stage="optimize"))
    neg_neg = rewrite.Rule(lambda op, x: op.Neg(op.Neg(x)), lambda op, x: x, name="t.neg_neg")
    registry.add_pass(rewrite.rule_pass("test-rules", [neg_neg], stage="fuse"))
    ctx = PassContext(registry=registry)
    plan = compile_plan(small_graph(), {"x": [2, 3]}, {"verify": True}, ctx=ctx)
    assert seen == [(registry, "cpu", True)]
    assert ctx.fired == {"simplify.identity": 1, "t.neg_neg": 1}
    assert [s.op for s in plan.steps] == ["Relu"]
    assert [str(e) for e in ctx.log] == ["simplify.identity fired at [identity]",
                                        "t.neg_neg fired at [neg, neg_1]"]


def test_a_pass_without_ctx_is_called_with_the_graph_only():
    registry = isolated_registry()
    calls = []

    def plain(graph):
        calls.append(graph.name)
        return PassResult(graph, False)

    registry.current_plugin = "test"
    registry.add_pass(PassSpec("plain", plain, stage="schedule"))
    compile_plan(small_graph(), {"x": [2, 3]}, ctx=PassContext(registry=registry))
    assert calls == ["g"]


def test_rule_switches_come_from_the_contexts_options():
    ctx = PassContext({"disable_rules": ["a"], "enable_rules": ["b"]})
    assert not ctx.rule_enabled("a") and ctx.rule_enabled("b", default=False)
    assert ctx.rule_enabled("c") and not ctx.rule_enabled("d", default=False)


def test_an_opt_in_rule_runs_only_when_enabled():
    rule = rewrite.Rule(lambda op, x: op.Neg(op.Neg(x)), lambda op, x: x, name="t.opt_in",
                        enabled=False)
    assert rewrite.apply(small_graph(), [rule])[1] == 0
    ctx = PassContext({"enable_rules": ["t.opt_in"]})
    graph, count = rewrite.apply(small_graph(), [rule], ctx)
    assert count == 1 and "Neg" not in [n.op for n in graph.nodes]
    feeds = {"x": np.ones((2, 3), np.float32)}
    from ge_hub.reference import evaluate
    np.testing.assert_array_equal(evaluate(graph, feeds)[0], np.ones((2, 3), np.float32))


def acme_op_registry():
    """The built-ins plus an op `acme.Twice` that the global registry does not have."""
    from ge_hub.ops import Input, Output, op
    from ge_hub.ops.inference import same_as_input
    from ge_hub.ops.schema import FLOATS

    @op("Twice", domain="acme", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
        infer=same_as_input)
    def twice(x):
        """Y = 2 * X."""
        return (x * 2).astype(x.dtype)

    registry = isolated_registry()
    registry.current_plugin = "acme"
    registry.add_op(twice)
    return registry


def acme_graph():
    from ge_hub.ir import Graph, TensorType

    graph = Graph("acme")
    x = graph.add_input("x", TensorType("float32", [3]))
    node = graph.add_node("Twice", [x], [TensorType("float32", [3])], domain="acme",
                          name="twice")
    graph.set_outputs(node.outputs)
    return graph


def test_verify_checks_against_the_registry_it_is_given():
    import pytest

    from ge_hub.errors import GraphError

    registry = acme_op_registry()
    graph = acme_graph()
    graph.verify(schemas=registry.get_op)  # acme.Twice is known there
    with pytest.raises(GraphError, match="acme.Twice"):
        graph.verify()  # and unknown to the loaded plugins


def test_compile_plan_verifies_against_the_contexts_registry():
    registry = acme_op_registry()
    ctx = PassContext(registry=registry)
    plan = compile_plan(acme_graph(), {"x": [3]}, {"verify": True}, ctx=ctx)
    assert [s.op for s in plan.steps] == ["acme.Twice"]


def test_load_hands_its_context_to_frontends_that_ask():
    import ge_hub
    from ge_hub.registry import Frontend

    registry = isolated_registry()
    seen = []
    registry.current_plugin = "test"
    registry.add_frontend(Frontend("with-ctx", accepts=lambda m: True, suffixes=(".ctx",),
                                   load=lambda model, ctx: seen.append(ctx) or "graph"))
    registry.add_frontend(Frontend("plain", accepts=lambda m: True, suffixes=(".plain",),
                                   load=lambda model: "plain graph"))
    assert ge_hub.load("m.ctx", registry=registry) == "graph"
    assert seen[0].registry is registry
    assert ge_hub.load("m.plain", registry=registry) == "plain graph"


def test_compile_with_an_isolated_registry_end_to_end():
    """ge_hub.compile(graph, registry=...): verified, planned, kernel-resolved and run
    against that registry only; the loaded plugins' registry never sees acme.Twice."""
    import ge_hub
    from ge_hub.kernels.base import PyKernel
    from ge_hub.registry import KernelSpec

    registry = acme_op_registry()
    registry.add_kernel(KernelSpec("Twice", PyKernel(lambda x: x * 2), domain="acme",
                                   name="acme_twice_kernel"))
    model = ge_hub.compile(acme_graph(), registry=registry)
    x = np.arange(3, dtype=np.float32) + 1
    (y,) = model.run({"x": x})
    np.testing.assert_array_equal(y, 2 * x)
    assert model.summary()["python_ops"] == {"acme.Twice": 1}
    assert model.plan.steps[0].kernel == "acme_twice_kernel"
