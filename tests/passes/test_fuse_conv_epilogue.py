"""fuse_conv_epilogue (rules): a Conv's residual Add and its activation become one
ge_hub.FusedConv with the same results; the rules stay away where fusing would be wrong
(an intermediate read elsewhere, a broadcast Add, an activation before the Add, bounds
that are not constants, a dtype the fused kernel does not run)."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es, rewrite
from ge_hub.passes.fuse_conv_epilogue import RULES
from ge_hub.testing import assert_outputs_close, check_rule, random_feeds

RNG = np.random.default_rng(7)


def weights(m, c, k=3):
    return RNG.standard_normal((m, c, k, k)).astype(np.float32) * 0.3


def bias(m):
    return RNG.standard_normal(m).astype(np.float32)


ACTIVATIONS = {
    "relu": lambda y: es.relu(y),
    "clip": lambda y: es.clip(y, np.float32(0.0), np.float32(6.0)),
    "leaky_relu": lambda y: es.leaky_relu(y, alpha=0.15),
    "sigmoid": lambda y: es.sigmoid(y),
    "hard_sigmoid": lambda y: es.hard_sigmoid(y, alpha=0.3, beta=0.4),
    "hard_swish": lambda y: es.hard_swish(y),
    "silu": lambda y: es.mul(y, es.sigmoid(y)),
    "gelu": lambda y: es.gelu(y),
}


def conv_then(activation, *, with_bias=True, shape=(2, 3, 7, 9), channels=5, stride=1):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(shape))
        y = es.conv(x, weights(channels, shape[1]), bias(channels) if with_bias else None,
                    pads=[1, 1, 1, 1], strides=[stride, stride])
        gb.output(activation(y), "out")
    return gb.graph


def fused_nodes(graph):
    return [n for n in graph.nodes if n.op == "FusedConv" and n.domain == "ge_hub"]


def apply_all(graph):
    ctx = rewrite.PassContext()
    rewritten, fired = rewrite.apply(graph.copy(), RULES, ctx)
    return rewritten, fired, [e.reason for e in ctx.refusals()]


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("with_bias", [True, False])
def test_each_activation_after_a_conv_fuses(name, with_bias):
    graph = conv_then(ACTIVATIONS[name], with_bias=with_bias)
    rule = next(r for r in RULES if r.name == f"fuse_conv_epilogue.{name}")
    rewritten, fired = check_rule(rule, graph, rtol=1e-5, atol=1e-5)
    assert fired == 1
    (node,) = rewritten.nodes
    assert node.op == "FusedConv" and node.attrs["activation"] != ""


def test_gelu_tanh_and_clip_bounds_reach_the_attributes():
    graph = conv_then(lambda y: es.gelu(y, approximate="tanh"))
    (node,) = apply_all(graph)[0].nodes
    assert node.attrs["activation"] == "GeluTanh"
    graph = conv_then(lambda y: es.clip(y, np.float32(-1.5)))
    (node,) = apply_all(graph)[0].nodes
    assert (node.attrs["activation"], node.attrs["alpha"], node.attrs["beta"]) == \
        ("Clip", -1.5, np.inf)
    graph = conv_then(lambda y: es.leaky_relu(y, alpha=0.25))
    (node,) = apply_all(graph)[0].nodes
    assert (node.attrs["activation"], node.attrs["alpha"]) == ("LeakyRelu", 0.25)


def residual_block(then=None, *, z_is_conv=False, z_shape=None, also_output_conv=False):
    """Add(Conv(x), z) (z: x itself, another Conv of x, or an input of z_shape),
    optionally followed by `then`."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 4, 9, 7])
        y = es.conv(x, weights(4, 4), bias(4), pads=[1, 1, 1, 1])
        if z_shape is not None:
            z = es.input("z", "float32", list(z_shape))
        elif z_is_conv:
            z = es.conv(x, weights(4, 4, 1), None)
        else:
            z = x
        out = es.add(y, z)
        gb.output(then(out) if then else out, "out")
        if also_output_conv:
            gb.output(y, "y")
    return gb.graph


@pytest.mark.parametrize("z_is_conv", [False, True])
def test_residual_add_then_relu_is_one_step(z_is_conv):
    graph = residual_block(es.relu, z_is_conv=z_is_conv)
    rewritten, fired = check_rule(RULES, graph, min_fired=2, rtol=1e-5, atol=1e-5)
    fused = fused_nodes(rewritten)
    with_z = [n for n in fused if len(n.inputs) > 3 and n.inputs[3] is not None]
    assert len(with_z) == 1 and with_z[0].attrs["activation"] == "Relu"
    assert [n.op for n in rewritten.nodes if n.op not in ("FusedConv", "Conv")] == []


def test_two_input_sum_is_a_residual_too():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 4, 7, 5])
        y = es.conv(x, weights(4, 4), bias(4), pads=[1, 1, 1, 1])
        gb.output(es.relu(es.sum(y, x)), "out")
    rewritten, fired = check_rule(RULES, gb.graph, min_fired=2, rtol=1e-5, atol=1e-5)
    (node,) = rewritten.nodes
    assert node.attrs["activation"] == "Relu" and node.inputs[3] is not None


def test_residual_without_activation():
    rewritten, _ = check_rule(RULES, residual_block(), rtol=1e-5, atol=1e-5)
    (node,) = rewritten.nodes
    assert node.attrs.get("activation", "") == "" and node.inputs[3] is not None


def test_conv_read_by_another_node_keeps_its_residual_add():
    rewritten, fired, reasons = apply_all(residual_block(es.relu, also_output_conv=True))
    assert fired == 0
    assert any("graph output" in r or "read" in r for r in reasons), reasons
    assert sorted(n.op for n in rewritten.nodes) == ["Add", "Conv", "Relu"]


def test_conv_read_by_two_activations_is_left_alone():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 3, 6, 6])
        y = es.conv(x, weights(4, 3), bias(4))
        gb.output(es.add(es.relu(y), es.sigmoid(y)), "out")
    rewritten, fired, _ = apply_all(gb.graph)
    assert fired == 0 and "Conv" in [n.op for n in rewritten.nodes]


def test_broadcast_add_is_not_a_residual():
    rewritten, fired, reasons = apply_all(residual_block(z_shape=(1, 4, 1, 1)))
    assert fired == 0
    assert any("broadcast" in r for r in reasons), reasons


def test_activation_before_the_add_keeps_the_add():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 4, 5, 5])
        gb.output(es.add(es.relu(es.conv(x, weights(4, 4), bias(4), pads=[1, 1, 1, 1])), x),
                  "out")
    rewritten, _ = check_rule(RULES, gb.graph, rtol=1e-5, atol=1e-5)
    assert sorted(n.op for n in rewritten.nodes) == ["Add", "FusedConv"]
    assert fused_nodes(rewritten)[0].attrs["activation"] == "Relu"


def test_clip_with_bounds_fed_at_run_time_is_left_alone():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 3, 5, 5])
        hi = es.input("hi", "float32", [])
        gb.output(es.clip(es.conv(x, weights(2, 3)), np.float32(0.0), hi), "out")
    assert apply_all(gb.graph)[1] == 0


def test_float64_conv_is_left_alone():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float64", [1, 3, 5, 5])
        gb.output(es.relu(es.conv(x, weights(2, 3).astype(np.float64))), "out")
    _, fired, reasons = apply_all(gb.graph)
    assert fired == 0 and any("float32" in r for r in reasons), reasons


def test_the_fused_op_checks_its_residual_shape():
    from ge_hub.errors import OpError
    from ge_hub.ir.dtypes import DType
    from ge_hub.ir.types import TensorType
    from ge_hub.ops import get_schema

    schema = get_schema("FusedConv", "ge_hub")
    f32 = DType.FLOAT32
    types = [TensorType(f32, (1, 3, 5, 5)), TensorType(f32, (4, 3, 3, 3)), None,
             TensorType(f32, (1, 4, 3, 2))]
    with pytest.raises(OpError, match="'Z'"):
        schema.infer_types(types, {})
    with pytest.raises(OpError, match="activation"):
        schema.infer_types(types[:2], {"activation": "Tanh"})


def compiled_steps(graph, feed=None, **options):
    shapes = None if feed is None else {k: v.shape for k, v in feed.items()}
    model = ge_hub.compile(graph.copy(), input_shapes=shapes, options=options)
    return model, [s.op for s in model.plan.steps]


def test_the_pass_fuses_a_resnet_block_and_can_be_disabled():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 8, 11, 11])
        y = es.relu(es.conv(x, weights(8, 8), bias(8), pads=[1, 1, 1, 1]))
        y = es.conv(y, weights(8, 8), bias(8), pads=[1, 1, 1, 1])
        gb.output(es.relu(es.add(y, x)), "out")
    graph = gb.graph
    on, steps_on = compiled_steps(graph)
    off, steps_off = compiled_steps(graph, disable_passes=["fuse_conv_epilogue",
                                                           "fuse_elementwise"])
    assert steps_on == ["ge_hub.FusedConv", "ge_hub.FusedConv"]
    assert sorted(steps_off) == ["Add", "Conv", "Conv", "Relu", "Relu"]
    assert on.summary()["rules"] == {"fuse_conv_epilogue.relu": 1,
                                     "fuse_conv_epilogue.residual": 1,
                                     "fuse_conv_epilogue.residual_relu": 1}
    assert on.summary()["python_steps"] == 0
    feeds = random_feeds(graph, seed=3)
    assert_outputs_close(on.run(feeds), off.run(feeds), graph.output_names, 1e-4, 1e-4)


@pytest.mark.parametrize("name", ["cnn_bn", "depthwise_separable"])
def test_whole_models_agree_with_fusion_on_and_off(name):
    from tests import test_graphs

    graph, feed = getattr(test_graphs, name)()
    on, steps_on = compiled_steps(graph, feed)
    off, steps_off = compiled_steps(graph, feed, disable_passes=["fuse_conv_epilogue"])
    assert len(steps_on) < len(steps_off)
    assert "ge_hub.FusedConv" in steps_on and "ge_hub.FusedConv" not in steps_off
    assert on.summary()["python_steps"] == 0
    assert_outputs_close(on.run(feed), off.run(feed), graph.output_names, 1e-4, 1e-4)


def test_single_rules_switch_off_by_name():
    graph = conv_then(ACTIVATIONS["relu"])
    model, steps = compiled_steps(graph, disable_rules=["fuse_conv_epilogue.relu"])
    assert steps == ["Conv", "Relu"]
    assert "fuse_conv_epilogue.relu" not in model.summary()["rules"]


def test_a_fused_model_survives_the_offline_file(tmp_path):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 6, 9, 9])
        y = es.conv(x, weights(6, 6), bias(6), pads=[1, 1, 1, 1])
        gb.output(es.clip(es.add(y, x), np.float32(0.0), np.float32(6.0)), "out")
    feed = random_feeds(gb.graph, seed=4)
    model, steps = compiled_steps(gb.graph, feed)
    assert steps == ["ge_hub.FusedConv"]
    path = tmp_path / "fused.ghm"
    model.save(str(path))
    loaded = ge_hub.load_compiled(str(path))
    assert_outputs_close(loaded.run(feed), model.run(feed), gb.graph.output_names, 0, 0)


@pytest.mark.parametrize("shape", [(5, 1, 1), (1, 5, 1, 1), ()])
@pytest.mark.parametrize("with_bias", [True, False])
def test_a_batch_norm_written_as_mul_and_add_folds_and_meets_its_relu(shape, with_bias):
    scale = RNG.uniform(-1.5, 1.5, shape).astype(np.float32)
    shift = RNG.standard_normal(shape).astype(np.float32)
    graph = conv_then(lambda y: es.relu(es.add(es.mul(scale, y), shift)), with_bias=with_bias)
    rewritten, fired = check_rule(RULES, graph, min_fired=3, rtol=1e-5, atol=1e-5)
    (node,) = rewritten.nodes
    assert node.op == "FusedConv" and node.attrs["activation"] == "Relu"


def test_a_per_position_mul_or_add_is_not_folded():
    per_position = RNG.standard_normal((1, 1, 7, 9)).astype(np.float32)
    for build in (es.mul, es.add):
        graph = conv_then(lambda y, build=build: build(y, per_position))
        _, fired, reasons = apply_all(graph)
        assert fired == 0 and any("per output channel" in r for r in reasons), reasons


def test_the_scale_needs_constant_weights():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 3, 5, 5])
        w = es.input("w", "float32", [2, 3, 3, 3])
        gb.output(es.mul(es.conv(x, w), np.float32(2.0)), "out")
    assert apply_all(gb.graph)[1] == 0
