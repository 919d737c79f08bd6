"""ge_hub.PointwiseDepthwise (core/kernels/conv_pointwise_depthwise.c; the
`fuse_pointwise_depthwise` pass): a bf16 pointwise Conv and the depthwise Conv reading it,
one step computed band by band.

The fused step computes what the two steps compute, in the same order (the same bf16
product per output, rounded to fp32 and activated, then the same depthwise sums), so its
outputs must equal theirs bit for bit: each case is compiled with the pass and without it
and compared exactly, and against a float64 model of the arithmetic. The cases run with
many bands (MID_BYTES made small), their halo rows at the plane's edges and between bands,
strides 1 and 2, a 5x5 window with dilation and asymmetric pads, a partial block of
channels, groups of channel blocks, several images, and epilogues that the depthwise
kernel applies in registers (Clip, Relu) and after each band (SiLU, HardSwish).
tests/kernels/test_nn_bf16.py runs the cases again in each bf16 micro-kernel variant;
here they run with each depthwise kernel (avx512's masked direct reads, and the padded
copies of avx2 and generic).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import ge_hub
from ge_hub import es, precision_report
from ge_hub.kernels import conv_pointwise_depthwise as pd_kernel
from ge_hub.kernels import nn_bf16
from ge_hub.ops.conv import FUSED_DOMAIN, apply_activation
from ge_hub.passes import fuse_pointwise_depthwise as pd_pass
from tests.kernels.test_nn_bf16 import run_in_process

BF16 = {"precision": "bf16"}
UNFUSED = {"precision": "bf16", "disable_passes": [pd_pass.NAME]}

# name -> (x shape, expanded channels, depthwise attrs, pointwise activation, depthwise
# activation, mid rows): mid rows sets MID_BYTES to that many rows of a block (None: as
# shipped)
CASES = {
    # 37 channels (a block of 32 and one of 5), 23 rows in bands of 3
    "tails": ((1, 20, 23, 19), 37, dict(pads=[1, 1, 1, 1]), "Clip", "Clip", 5),
    # stride 2, pads only at the end, odd width, two images
    "stride2": ((2, 16, 30, 33), 48, dict(pads=[0, 0, 1, 1], strides=[2, 2]), "Relu", "Clip", 6),
    # 5x5 with dilation 2 and asymmetric pads; SiLU and HardSwish after each band
    "dilated5": ((1, 24, 26, 21), 64, dict(pads=[4, 3, 2, 4], dilations=[2, 2]), "SiLU",
                 "HardSwish", 11),
    # one band, 200 channels in 7 blocks split into groups (MIN_TASKS)
    "groups": ((1, 32, 10, 10), 200, dict(pads=[1, 1, 1, 1]), "Clip", "", None),
    # a 3x3 stride-2 window of 1-row bands
    "thin_bands": ((1, 17, 9, 40), 33, dict(pads=[1, 1, 1, 1], strides=[2, 2]), "", "Relu", 3),
}


@contextlib.contextmanager
def fused_everywhere(mid_rows: int | None, width: int):
    """The pass fusing any size, and bands of `mid_rows` input rows at most."""
    saved = pd_pass.MIN_HIDDEN_BYTES, pd_kernel.MID_BYTES
    pd_pass.MIN_HIDDEN_BYTES = 0
    if mid_rows is not None:
        pd_kernel.MID_BYTES = pd_kernel.BLOCK_CHANNELS * width * 4 * mid_rows
    try:
        yield
    finally:
        pd_pass.MIN_HIDDEN_BYTES, pd_kernel.MID_BYTES = saved


def case_graph(case, w1, b1, w2, b2):
    x_shape, _, attrs, act1, act2, _ = CASES[case]
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(x_shape))
        hidden = es.op("FusedConv", x, es.const(w1), None if b1 is None else es.const(b1),
                       domain=FUSED_DOMAIN, activation=act1, alpha=0.0, beta=6.0)
        y = es.op("FusedConv", hidden, es.const(w2), None if b2 is None else es.const(b2),
                  domain=FUSED_DOMAIN, activation=act2, alpha=0.0, beta=6.0,
                  group=w1.shape[0], **attrs)
        es.output(y, "y")
    return gb.graph


def case_data(case, rng, bias=True):
    x_shape, e, _, _, _, _ = CASES[case]
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w1 = (rng.standard_normal((e, c, 1, 1)) * (2.0 / c) ** 0.5).astype(np.float32)
    kernel = 5 if case == "dilated5" else 3
    w2 = (rng.standard_normal((e, 1, kernel, kernel)) / kernel).astype(np.float32)
    b1 = rng.standard_normal(e).astype(np.float32) if bias else None
    b2 = rng.standard_normal(e).astype(np.float32) if bias else None
    return x, w1, b1, w2, b2


def float64_model(case, x, w1, b1, w2, b2):
    """The fused step's arithmetic in float64: the pointwise product of bf16-rounded X and
    W1, its activation, then the depthwise window (FusedConv's reference, in float64)."""
    _, e, attrs, act1, act2, _ = CASES[case]
    xr = nn_bf16.round_bf16(x).astype(np.float64)
    wr = nn_bf16.round_bf16(w1).astype(np.float64)[:, :, 0, 0]
    hidden = np.einsum("nchw,ec->nehw", xr, wr)
    if b1 is not None:
        hidden += b1.reshape(1, -1, 1, 1)
    hidden = apply_activation(hidden, act1, 0.0, 6.0)
    from ge_hub.ops.conv import fused_conv

    return fused_conv(hidden, w2.astype(np.float64), None if b2 is None else b2.astype(np.float64),
                      auto_pad="NOTSET", dilations=attrs.get("dilations"), group=e,
                      kernel_shape=None, pads=attrs.get("pads"), strides=attrs.get("strides"),
                      activation=act2, alpha=0.0, beta=6.0)


def run_case(case, rng, bias=True):
    """One case: fused equals unfused exactly, and both the float64 model closely."""
    x, w1, b1, w2, b2 = case_data(case, rng, bias)
    graph = case_graph(case, w1, b1, w2, b2)
    with fused_everywhere(CASES[case][5], x.shape[3]):
        fused = ge_hub.compile(graph, options=BF16)
    (step,) = fused.plan.steps
    assert step.kernel == pd_kernel.KERNEL
    assert precision_report.step_precision(step) == "bf16"
    unfused = ge_hub.compile(case_graph(case, w1, b1, w2, b2), options=UNFUSED)
    assert len(unfused.plan.steps) == 2
    (got,) = fused.run({"x": x})
    (want,) = unfused.run({"x": x})
    np.testing.assert_array_equal(got, want)
    model = float64_model(case, x, w1, b1, w2, b2)
    np.testing.assert_allclose(got, model, rtol=1e-4, atol=1e-4 * np.abs(model).max())
    return step


@pytest.fixture
def rng():
    return np.random.default_rng(17)


@pytest.mark.parametrize("case", CASES)
def test_fused_equals_the_two_steps(case, rng):
    run_case(case, rng)


def test_absent_biases_become_zeros(rng):
    run_case("tails", rng, bias=False)


def test_bands_and_groups_are_what_the_case_asks(rng):
    """The cases do exercise several bands and several groups of channel blocks."""
    for case, (bands_min, groups_min) in {"tails": (7, 1), "groups": (1, 2)}.items():
        x, w1, b1, w2, b2 = case_data(case, rng)
        with fused_everywhere(CASES[case][5], x.shape[3]):
            model = ge_hub.compile(case_graph(case, w1, b1, w2, b2), options=BF16)
        _, _, _, band, groups, _ = np.frombuffer(model.plan.steps[0].attrs, np.int64, count=6)
        out_h = model.run({"x": x})[0].shape[2]
        assert -(-out_h // band) >= bands_min and groups >= groups_min, case


DEPTHWISE_SCRIPT = """
    import numpy as np
    from tests.kernels import test_conv_pointwise_depthwise as t
    rng = np.random.default_rng(5)
    for case in t.CASES:
        t.run_case(case, rng)
    print("ok")
"""


@pytest.mark.parametrize("variant", ["avx512f", "avx2", "generic"])
def test_with_each_depthwise_kernel(variant):
    """The bands through the other depthwise kernels (GE_HUB_DEPTHWISE_KERNEL): avx512f's
    direct kernel with its masks one at a time, and the padded copies of avx2 and generic
    (avx512, with its masks four at a time, runs the cases above)."""
    assert run_in_process({"GE_HUB_DEPTHWISE_KERNEL": variant}, DEPTHWISE_SCRIPT) == "ok"


# -- the pass ------------------------------------------------------------------------------


def _ops(model):
    return [s.op for s in model.plan.steps]


def test_fp32_plans_are_not_fused(rng):
    x, w1, b1, w2, b2 = case_data("tails", rng)
    with fused_everywhere(None, x.shape[3]):
        model = ge_hub.compile(case_graph("tails", w1, b1, w2, b2))
    assert "ge_hub.PointwiseDepthwise" not in _ops(model)


def test_small_intermediates_are_not_fused(rng):
    """Below MIN_HIDDEN_BYTES per image (as shipped) the two steps stay."""
    x, w1, b1, w2, b2 = case_data("tails", rng)
    model = ge_hub.compile(case_graph("tails", w1, b1, w2, b2), options=BF16)
    assert _ops(model) == ["ge_hub.FusedConv", "ge_hub.FusedConv"]


def test_a_large_intermediate_is_fused_as_shipped(rng):
    """MobileNetV2's first expansion (16 -> 96 at 112x112: 4.8 MB) is fused with the
    shipped MIN_HIDDEN_BYTES and MID_BYTES; summary() counts it as a bf16 product."""
    x = rng.standard_normal((1, 16, 112, 112)).astype(np.float32)
    w1 = (rng.standard_normal((96, 16, 1, 1)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((96, 1, 3, 3)) * 0.3).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        h = es.op("FusedConv", xin, es.const(w1), None, domain=FUSED_DOMAIN, activation="Clip",
                  alpha=0.0, beta=6.0)
        y = es.op("FusedConv", h, es.const(w2), None, domain=FUSED_DOMAIN, activation="Clip",
                  alpha=0.0, beta=6.0, group=96, pads=[1, 1, 1, 1], strides=[2, 2])
        es.output(y, "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    assert _ops(model) == ["ge_hub.PointwiseDepthwise"]
    summary = model.summary()
    assert summary["python_steps"] == 0
    assert summary["precision"]["bf16_steps"] == 1
    unfused = ge_hub.compile(gb.graph, options=UNFUSED)
    np.testing.assert_array_equal(model.run({"x": x})[0], unfused.run({"x": x})[0])


def _two_convs(rng, *, pointwise_attrs=None, residual=False, also_output=False,
               forced=None):
    x_shape = (1, 16, 12, 12)
    w1 = rng.standard_normal((32, 16, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x_shape))
        h = es.op("FusedConv", xin, es.const(w1), None, domain=FUSED_DOMAIN, activation="Relu",
                  **(pointwise_attrs or {}))
        z = es.input("z", "float32", [1, 32, 12, 12]) if residual else None
        y = es.op("FusedConv", h, es.const(w2), None, z, domain=FUSED_DOMAIN,
                  activation="Relu", group=32, pads=[1, 1, 1, 1])
        es.output(y, "y")
        if also_output:
            es.output(h, "h")
    options = dict(BF16, precision_ops=forced) if forced else BF16
    with fused_everywhere(None, 12):
        return ge_hub.compile(gb.graph, options=options)


def test_what_the_pass_leaves_alone(rng):
    assert "ge_hub.PointwiseDepthwise" in _ops(_two_convs(rng))
    for leaves in (dict(residual=True), dict(also_output=True),
                   dict(pointwise_attrs=dict(strides=[1, 1], pads=[1, 1, 1, 1])),
                   dict(forced={"Conv": "fp32"})):
        assert "ge_hub.PointwiseDepthwise" not in _ops(_two_convs(rng, **leaves)), leaves


def test_the_reference_runs_where_no_kernel_does(rng):
    """A PointwiseDepthwise built by hand in an fp32 plan has no C kernel (its kernel is
    the bf16 one): it runs its reference, counted as a Python step, and computes the two
    FusedConvs in fp32."""
    x, w1, b1, w2, b2 = case_data("tails", rng)
    _, e, attrs, act1, act2, _ = CASES["tails"]
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        y = es.op("PointwiseDepthwise", xin, es.const(w1), es.const(b1), es.const(w2),
                  es.const(b2), domain=FUSED_DOMAIN, group=e, pointwise_activation=act1,
                  pointwise_beta=6.0, activation=act2, beta=6.0, **attrs)
        es.output(y, "y")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["python_steps"] == 1
    fp32 = ge_hub.compile(case_graph("tails", w1, b1, w2, b2))
    np.testing.assert_allclose(model.run({"x": x})[0], fp32.run({"x": x})[0], rtol=1e-5,
                               atol=1e-5)


def test_offline_file_keeps_the_fused_step(rng, tmp_path):
    x, w1, b1, w2, b2 = case_data("stride2", rng)
    with fused_everywhere(CASES["stride2"][5], x.shape[3]):
        model = ge_hub.compile(case_graph("stride2", w1, b1, w2, b2), options=BF16)
    model.save(tmp_path / "m.ghm")
    loaded = ge_hub.load_compiled(tmp_path / "m.ghm")
    assert [s.kernel for s in loaded.plan.steps] == [pd_kernel.KERNEL]
    np.testing.assert_array_equal(loaded.run({"x": x})[0], model.run({"x": x})[0])
