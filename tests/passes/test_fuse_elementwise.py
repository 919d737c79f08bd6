"""fuse_elementwise: maximal groups of float32 elementwise ops become one
ge_hub.FusedElementwise with the same results (chains, trees, diamonds sharing an input or
an intermediate, constants, broadcast inputs); the pass stays away where fusing would be
wrong or impossible (an intermediate read outside the group or a graph output, integer
and float64 ops, an intermediate smaller than the output, a Pow exponent or Clip bound
computed at run time, a lone op)."""

from __future__ import annotations

import numpy as np

import ge_hub
from ge_hub import es
from ge_hub.passes.context import PassContext
from ge_hub.passes.fuse_elementwise import NAME, fuse_elementwise
from ge_hub.testing import assert_outputs_close, random_feeds

FUSED = "FusedElementwise"


def build(fn, shapes, dtype="float32"):
    with es.GraphBuilder("g") as gb:
        xs = [es.input(f"x{i}", dtype, list(s)) for i, s in enumerate(shapes)]
        outs = fn(*xs)
        for i, out in enumerate(outs if isinstance(outs, tuple) else (outs,)):
            es.output(out, f"out{i}")
    return gb.graph


def fuse(graph):
    ctx = PassContext()
    result = fuse_elementwise(graph.copy(), ctx)
    result.graph.verify()
    return result.graph, ctx


def ops_of(graph):
    return [n.op for n in graph.nodes]


def on_and_off_agree(graph, rtol=1e-5, atol=1e-6):
    feeds = random_feeds(graph, seed=5)
    on = ge_hub.compile(graph.copy())
    off = ge_hub.compile(graph.copy(), options={"disable_passes": [NAME]})
    assert_outputs_close(on.run(feeds), off.run(feeds), graph.output_names, rtol, atol)
    return len(on.plan.steps), len(off.plan.steps)


def test_a_chain_becomes_one_node_and_keeps_its_output_name():
    # (Sub, not Add: the example plugin's ScaleShift fusion would take Mul + Add first)
    graph = build(lambda x: es.tanh(es.sub(es.mul(x, np.float32(0.5)), np.float32(1.0))),
                  [(3, 11)])
    fused, ctx = fuse(graph)
    assert ops_of(fused) == [FUSED]
    (node,) = fused.nodes
    assert node.attrs["ops"] == ["Mul", "Sub", "Tanh"]
    assert fused.output_names == ["out0"]
    assert ctx.fired[NAME] == 1
    on, off = on_and_off_agree(graph)
    assert on == 1 < off


def test_a_diamond_sharing_an_input_and_an_intermediate_is_one_node():
    def diamond(x, y):
        a = es.mul(x, y)
        left, right = es.sigmoid(a), es.relu(es.sub(x, a))
        return es.add(left, right)

    graph = build(diamond, [(4, 9), (9,)])
    fused, _ = fuse(graph)
    (node,) = fused.nodes
    assert node.op == FUSED and len(node.inputs) == 2   # x and y read once each
    # a is computed once: the program has one Mul
    assert node.attrs["ops"].count("Mul") == 1
    assert on_and_off_agree(graph) == (1, 5)


def test_an_intermediate_read_outside_stays_a_value():
    # a = Exp(x) is also a graph output: the group starts after it, reading it
    def two_outputs(x):
        a = es.exp(x)
        return es.mul(es.relu(a), np.float32(2.0)), a

    graph = build(two_outputs, [(5, 7)])
    fused, _ = fuse(graph)
    assert ops_of(fused) == ["Exp", FUSED]
    exp, node = fused.nodes
    assert node.inputs[0] is exp.outputs[0] and fused.outputs[1] is exp.outputs[0]
    assert fused.output_names == ["out0", "out1"]
    on_and_off_agree(graph)


def test_an_intermediate_read_by_another_step_is_not_fused_away():
    def two_readers(x):
        a = es.sigmoid(es.mul(x, x))            # read by the group and by ReduceSum
        return es.add(es.neg(a), np.float32(3.0)), es.reduce_sum(a, keepdims=0)

    graph = build(two_readers, [(6, 13)])
    fused, _ = fuse(graph)
    ops = ops_of(fused)
    assert ops.count(FUSED) == 2                    # Mul + Sigmoid, then Neg + Add
    assert "ReduceSum" in ops
    on_and_off_agree(graph)


def test_integer_and_float64_ops_are_left_alone():
    for dtype in ("int32", "int64", "float64"):
        graph = build(lambda x: es.abs(es.add(es.mul(x, x), x)), [(4, 5)], dtype)
        fused, ctx = fuse(graph)
        assert FUSED not in ops_of(fused), dtype
        assert ctx.fired[NAME] == 0


def test_a_lone_op_is_not_fused():
    graph = build(lambda x, y: es.add(x, y), [(4, 5), (5,)])
    fused, _ = fuse(graph)
    assert ops_of(fused) == ["Add"]


def test_an_intermediate_smaller_than_the_output_is_a_group_boundary():
    # Neg(b) has b's shape [5]: it is an input of the outer group, computed on its own
    graph = build(lambda x, b: es.relu(es.add(x, es.abs(es.neg(b)))), [(3, 5), (5,)])
    fused, _ = fuse(graph)
    ops = ops_of(fused)
    assert ops.count(FUSED) == 2
    assert on_and_off_agree(graph) == (2, 4)


def test_run_time_exponent_and_clip_bounds_stop_the_group():
    graph = build(lambda x, e: es.exp(es.pow(es.neg(x), e)), [(3, 4), ()])
    fused, _ = fuse(graph)
    assert "Pow" in ops_of(fused)
    graph = build(lambda x, lo: es.exp(es.clip(es.neg(x), lo)), [(3, 4), ()])
    fused, _ = fuse(graph)
    assert "Clip" in ops_of(fused)


def test_broadcast_inputs_and_constants_of_a_residual_block():
    w = np.random.default_rng(3).standard_normal((8, 1, 1)).astype(np.float32)

    def block(x, skip):
        y = es.add(es.mul(x, w), np.float32(0.25))          # per-channel scale and shift
        return es.clip(es.add(y, skip), np.float32(0.0), np.float32(6.0))

    graph = build(block, [(2, 8, 5, 5), (2, 8, 5, 5)])
    fused, _ = fuse(graph)
    assert ops_of(fused) == [FUSED]
    assert on_and_off_agree(graph) == (1, 4)


def test_the_pass_runs_last_in_the_fuse_stage_after_plugins_passes():
    from ge_hub.compiler import all_steps
    from ge_hub.plugins import get_registry

    fuse = [s.name for s in all_steps(get_registry()) if s.stage == "fuse"]
    assert fuse[-1] == NAME and len(fuse) > 1


def test_an_op_a_plugin_kernel_outranks_keeps_that_kernel():
    from ge_hub import plugins
    from ge_hub.kernels.base import PyKernel
    from ge_hub.registry import KernelSpec

    plugins.reset()
    try:
        registry = plugins.get_registry()
        registry.current_plugin = "test-own-tanh"
        registry.add_kernel(KernelSpec("Tanh", PyKernel(np.tanh), priority=10_000,
                                       name="test_own_tanh"))
        registry.current_plugin = plugins.BUILTIN_PLUGIN
        graph = build(lambda x: es.neg(es.tanh(es.abs(es.mul(x, x)))), [(3, 5)])
        model = ge_hub.compile(graph)
        kernels = [s.kernel for s in model.plan.steps]
        # Mul + Abs before the Tanh are one group; the lone Neg after it stays itself
        assert "test_own_tanh" in kernels and kernels.count("ge_elementwise_fused_f32") == 1
    finally:
        plugins.reset()
