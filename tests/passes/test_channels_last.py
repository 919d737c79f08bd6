"""The channels_last pass (ge_hub/passes/channels_last.py): neighbouring bf16 Convs become
FusedConvNHWC with bf16 activations between them, Casts and Transposes only at the chain's
edges, on a CPU whose bf16 micro-kernel is AMX (forced here, so that the pass is checked on
any CPU: the other micro-kernels run the channels-last layout in plain C); and nothing
changes where it should not (fp32, no AMX, a lone Conv, a Conv writing a graph output or
reading a window the kernel cannot take, mixed's accurate Convs)."""

from __future__ import annotations

import collections
import contextlib

import numpy as np

import ge_hub
from ge_hub import es
from ge_hub.kernels import conv as conv_kernels
from ge_hub.ops.conv import FUSED_DOMAIN


@contextlib.contextmanager
def amx_pays(pays=True):
    """Plans made inside take the channels-last path as on an AMX CPU (or not)."""
    saved = conv_kernels.nhwc_bf16_pays
    conv_kernels.nhwc_bf16_pays = lambda: pays
    try:
        yield
    finally:
        conv_kernels.nhwc_bf16_pays = saved


def weight(rng, out, inp, k):
    return es.const((rng.standard_normal((out, inp, k, k)) * (2.0 / (inp * k * k)) ** 0.5)
                    .astype(np.float32))


def resnet_graph(rng, lone=False, stem=False, blocks=2):
    """Four ResNet basic blocks after a MaxPool, the second with a stride-2 1x1 shortcut,
    then GlobalAveragePool (a chain of 9 Convs, 2 values turned in and out); with `lone`,
    a Conv the pass could take reading the pool's output, read only by a Conv it cannot
    (a Sigmoid epilogue, which the AMX store does not apply): a chain of one. With `stem`,
    ResNet's first layer before the MaxPool: 3 channels in, 7x7 stride 2 (from a 3 x 35 x 37
    input; the MaxPool 3x3 stride 2 then, as ResNet's). `blocks`: how many 64-channel
    blocks follow the strided one."""
    with es.GraphBuilder("resnet") as gb:

        def conv(v, out, inp, k, stride=1, z=None, act="Relu"):
            return es.op("FusedConv", v, weight(rng, out, inp, k),
                         es.const(rng.standard_normal(out).astype(np.float32)), z,
                         domain=FUSED_DOMAIN, activation=act, alpha=0.0, beta=0.0,
                         pads=[k // 2] * 4, strides=[stride, stride])

        if stem:
            x = es.input("x", "float32", [1, 3, 35, 37])
            pool = es.op("MaxPool", conv(x, 32, 3, 7, stride=2), kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1])
        else:
            x = es.input("x", "float32", [1, 32, 18, 18])
            pool = es.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
        a = conv(conv(pool, 32, 32, 3), 32, 32, 3, z=pool)
        short = es.op("Conv", a, weight(rng, 64, 32, 1), strides=[2, 2])
        b = conv(conv(a, 64, 32, 3, stride=2), 64, 64, 3, z=short)
        for _ in range(blocks):
            b = conv(conv(b, 64, 64, 3), 64, 64, 3, z=b)
        outputs = [es.op("GlobalAveragePool", b)]
        if lone:
            outputs.append(conv(pool, 32, 32, 3))
            outputs[-1] = es.op("Relu", conv(outputs[-1], 16, 32, 3, act="Sigmoid"))
        for i, v in enumerate(outputs):
            es.output(v, f"y{i}")
    return gb.graph


def ops_of(model) -> collections.Counter:
    return collections.Counter(s.op for s in model.plan.steps)


def run_both(graph, options, feeds):
    """The model with the pass and without it (and its fp32 outputs)."""
    on = ge_hub.compile(graph, options=options)
    off = ge_hub.compile(graph, options={**options, "disable_passes": ["channels_last"]})
    return on, off, ge_hub.compile(graph).run(feeds)


def test_a_resnet_chain_runs_channels_last_in_bf16():
    rng = np.random.default_rng(0)
    graph = resnet_graph(rng)
    feeds = {"x": rng.standard_normal((1, 32, 18, 18)).astype(np.float32)}
    with amx_pays():
        on, off, fp32 = run_both(graph, {"precision": "bf16"}, feeds)
    ops = ops_of(on)
    # every Conv but none of the rest: the shortcut 1x1 too
    assert ops["ge_hub.FusedConvNHWC"] == 9 and ops["ge_hub.FusedConv"] == 0
    assert ops["Conv"] == 0 and ops["ge_hub.MaxPoolNHWC"] == 1
    # one way in (the graph's input, read by the pool), one way out
    assert ops["ge_hub.ToChannelsLast"] == 1 and ops["Cast"] == 1 and ops["Transpose"] == 1
    nhwc = [s for s in on.plan.steps if s.op == "ge_hub.FusedConvNHWC"]
    # named after the Convs they replace, as profiles show them
    assert {s.node for s in nhwc} == {s.node + "_nhwc" for s in off.plan.steps
                                      if s.op in ("ge_hub.FusedConv", "Conv")}
    dtypes = {str(on.plan.tensors[s.outputs[0]].dtype) for s in nhwc}
    assert dtypes == {"bfloat16"}
    assert on.summary()["python_steps"] == 0
    assert on.summary()["precision"]["fp32_products"] == []
    assert on.summary()["precision"]["bf16_steps"] == 9
    assert on.summary()["precision"]["bf16_activation_steps"] == 9
    assert off.summary()["precision"]["bf16_activation_steps"] == 0
    from ge_hub.commands.report import _compile_text

    assert "9 of them channels-last on bf16 activations" in _compile_text(on.summary())
    (got,), (without,), (want,) = on.run(feeds), off.run(feeds), fp32
    scale = np.abs(want).max()
    # bf16 activations between the Convs: within a few bf16 units of the fp32 result
    assert np.abs(got - want).max() <= 3e-2 * scale
    assert np.abs(without - want).max() <= 3e-2 * scale
    assert not np.array_equal(got, without)  # the activations really were rounded


def test_a_stem_and_its_max_pool_join_the_chain():
    """ResNet's 3-channel 7x7 stem and its MaxPool run channels-last too: the chain's way
    in is then the graph's 3-channel input, and the pool a MaxPoolNHWC on bf16."""
    rng = np.random.default_rng(6)
    graph = resnet_graph(rng, stem=True)
    feeds = {"x": rng.standard_normal((1, 3, 35, 37)).astype(np.float32)}
    with amx_pays():
        on, off, fp32 = run_both(graph, {"precision": "bf16"}, feeds)
    ops = ops_of(on)
    assert ops["ge_hub.FusedConvNHWC"] == 10 and ops["ge_hub.FusedConv"] == 0
    assert ops["ge_hub.MaxPoolNHWC"] == 1 and ops["MaxPool"] == 0
    (way_in,) = [s for s in on.plan.steps if s.op == "ge_hub.ToChannelsLast"]
    assert tuple(on.plan.tensors[way_in.outputs[0]].shape) == (1, 35, 37, 3)
    assert ops_of(off)["MaxPool"] == 1
    (got,), (want,) = on.run(feeds), fp32
    assert np.abs(got - want).max() <= 3e-2 * np.abs(want).max()


def test_mixed_chains_its_bf16_convs_only():
    """In mixed, the Conv it keeps accurate (the last, which GlobalAveragePool reads) stays
    an NCHW fp32 step; the chain before it runs channels-last on bf16 activations, from
    the stem on."""
    rng = np.random.default_rng(7)
    # the chain: 13 Convs, 3 values turned (the input in; the last Conv's input and
    # residual out)
    graph = resnet_graph(rng, stem=True, blocks=4)
    feeds = {"x": rng.standard_normal((1, 3, 35, 37)).astype(np.float32)}
    with amx_pays():
        on, off, fp32 = run_both(graph, {"precision": "mixed"}, feeds)
    ops = ops_of(on)
    assert ops["ge_hub.FusedConvNHWC"] == 13 and ops["ge_hub.FusedConv"] == 1
    assert ops["ge_hub.MaxPoolNHWC"] == 1
    summary = on.summary()["precision"]
    assert len(summary["fp32_products"]) == 1 and summary["bf16_activation_steps"] == 13
    (got,), (want,) = on.run(feeds), fp32
    assert np.abs(got - want).max() <= 3e-2 * np.abs(want).max()


def test_nothing_changes_without_amx_or_in_fp32():
    rng = np.random.default_rng(1)
    graph = resnet_graph(rng)
    feeds = {"x": rng.standard_normal((1, 32, 18, 18)).astype(np.float32)}
    for options, pays in (({"precision": "bf16"}, False), ({"precision": "mixed"}, False),
                          ({"precision": "fp32"}, True)):
        with amx_pays(pays):
            on, off, _ = run_both(graph, options, feeds)
        assert ops_of(on) == ops_of(off), options
        assert "ge_hub.FusedConvNHWC" not in ops_of(on)
        np.testing.assert_array_equal(on.run(feeds)[0], off.run(feeds)[0])


def test_lone_convs_and_graph_outputs_stay_nchw():
    """A Conv with no neighbour the pass takes (its reader, with a Sigmoid, has no
    channels-last kernel) keeps its NCHW step."""
    rng = np.random.default_rng(2)
    graph = resnet_graph(rng, lone=True)
    feeds = {"x": rng.standard_normal((1, 32, 18, 18)).astype(np.float32)}
    with amx_pays():
        on, off, fp32 = run_both(graph, {"precision": "bf16"}, feeds)
    assert ops_of(on)["ge_hub.FusedConvNHWC"] == 9
    assert ops_of(on)["ge_hub.FusedConv"] == 2  # the lone one and its Sigmoid reader
    # the MaxPool both read stays NCHW: joined, the two chains would not pass together
    assert ops_of(on)["MaxPool"] == 1 and "ge_hub.MaxPoolNHWC" not in ops_of(on)
    for got, want in zip(on.run(feeds), fp32):
        assert np.abs(got - want).max() <= 3e-2 * np.abs(want).max()


def test_short_chains_stay_nchw():
    """A chain with fewer than MIN_CONVS_PER_EDGE Convs per value turned at its edges
    (MobileNetV2's projection and next expansion) is left alone: its Casts and Transposes
    would cost more than it saves."""
    rng = np.random.default_rng(4)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 32, 8, 8])
        a = es.op("Conv", x, weight(rng, 32, 32, 3), pads=[1, 1, 1, 1])
        b = es.op("Conv", a, weight(rng, 32, 32, 3), pads=[1, 1, 1, 1])
        es.output(es.op("Relu", b), "y")
    with amx_pays():
        model = ge_hub.compile(gb.graph, options={"precision": "bf16"})
    assert "ge_hub.FusedConvNHWC" not in ops_of(model)


def test_a_conv_writing_a_graph_output_stays_nchw(monkeypatch):
    """A Conv whose output is a graph output keeps it NCHW float32 (the chain after it is
    converted: every chain counts here)."""
    from ge_hub.passes import channels_last

    monkeypatch.setattr(channels_last, "MIN_CONVS_PER_EDGE", 1)
    rng = np.random.default_rng(3)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 32, 8, 8])
        a = es.op("Conv", x, weight(rng, 32, 32, 3), pads=[1, 1, 1, 1])
        b = es.op("Conv", a, weight(rng, 32, 32, 3), pads=[1, 1, 1, 1])
        c = es.op("Conv", b, weight(rng, 32, 32, 3), pads=[1, 1, 1, 1])
        es.output(es.op("MaxPool", c, kernel_shape=[2, 2]), "y")
        es.output(a, "a")
    feeds = {"x": rng.standard_normal((1, 32, 8, 8)).astype(np.float32)}
    with amx_pays():
        model = ge_hub.compile(gb.graph, options={"precision": "bf16"})
    assert ops_of(model)["ge_hub.FusedConvNHWC"] == 2 and ops_of(model)["Conv"] == 1
    y, a_out = model.run(feeds)
    want_y, want_a = ge_hub.compile(gb.graph).run(feeds)
    assert a_out.dtype == np.float32 and a_out.shape == want_a.shape
    assert np.abs(y - want_y).max() <= 3e-2 * np.abs(want_y).max()
