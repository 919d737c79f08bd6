"""ge_hub.FusedConvNHWC's depthwise kernel (core/kernels/conv_depthwise_nhwc.c,
ge_conv_depthwise_nhwc_bf16): bf16 channels-last X and Y, against a float64 reference from
the same bf16 inputs, in each geometry its loops take (a window row's runs shared at
stride 1 and 2, tap by tap for wider, dilated and one-sided windows, single outputs at the
edges and in tails, several bands and images), each activation, inf and NaN as the
reference has them; each loop variant in a process of its own; and the `channels_last`
pass that puts MobileNet's depthwise Convs into its chains, padding their channels to 32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ge_hub
from ge_hub import es, precision_report
from ge_hub.kernels import conv_depthwise_nhwc as dw_kernel
from ge_hub.kernels import cpu
from ge_hub.ops.conv import FUSED_DOMAIN
from tests.kernels.test_nn_bf16 import BF16, conv2d64, fused_epilogue, round64, run_in_process

BF16_DTYPE = np.dtype(ml_dtypes.bfloat16)

# name -> (x shape NCHW, kernel, attrs)
CASES = {
    # a window row's runs shared (3 wide, stride 1): 13 outputs a row, 3 groups of 4 and a
    # tail; two blocks of channels
    "shared": ((1, 64, 9, 13), (3, 3), dict(pads=[1, 1, 1, 1])),
    # shared at stride 2, two images, an odd width
    "shared_stride2": ((2, 32, 11, 15), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    # 5 wide: tap by tap, three blocks of channels
    "five": ((1, 96, 10, 9), (5, 5), dict(pads=[2, 2, 2, 2])),
    # dilated with pads on one side only: tap by tap
    "dilated": ((1, 32, 12, 15), (3, 3), dict(dilations=[2, 2], pads=[2, 0, 1, 3])),
    # no padding, strides 1 x 2, two outputs a row: single outputs only; 16 bands
    "narrow_bands": ((1, 32, 40, 5), (3, 3), dict(strides=[1, 2])),
    # 1 x 7 (EfficientNet-like factorized), the ring one row deep
    "one_by_seven": ((1, 32, 6, 20), (1, 7), dict(pads=[0, 3, 0, 3])),
}
ACTIVATIONS = ["", "Relu", "Clip", "HardSwish", "Sigmoid"]


def case_data(case, rng):
    x_shape, kernel, attrs = CASES[case]
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(BF16_DTYPE).astype(np.float32)
    w = (rng.standard_normal((c, 1, *kernel)) / np.prod(kernel) ** 0.5).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    return x, w, b


def case_model(case, w, b, activation):
    x_shape, kernel, attrs = CASES[case]
    n, c, h, wd = x_shape
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "bfloat16", [n, h, wd, c])
        y = es.op("FusedConvNHWC", x, es.const(w), es.const(b), domain=FUSED_DOMAIN,
                  group=c, activation=activation, alpha=0.0, beta=6.0, **attrs)
        es.output(y, "y")
    return ge_hub.compile(gb.graph, options=BF16)


def last(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def run_case(case, rng, activation="Clip"):
    """The kernel's output within its fp32 sums and one bf16 rounding of the float64
    result from the same inputs."""
    x, w, b = case_data(case, rng)
    model = case_model(case, w, b, activation)
    (step,) = model.plan.steps
    assert step.kernel == dw_kernel.KERNEL
    (got,) = model.run({"x": last(x).astype(BF16_DTYPE)})
    assert got.dtype == BF16_DTYPE
    attrs = CASES[case][2]
    window = (attrs.get("strides", (1, 1)), attrs.get("pads", (0, 0, 0, 0)), x.shape[1],
              attrs.get("dilations", (1, 1)))
    want = conv2d64(round64(x), w.astype(np.float64), b.astype(np.float64), *window)
    scale = conv2d64(np.abs(round64(x)), np.abs(w.astype(np.float64)),
                     np.abs(b.astype(np.float64)), *window)
    if activation == "HardSwish":  # not among fused_epilogue's
        want = want * np.clip(want / 6 + 0.5, 0, 1)
        scale = scale * 1.5
    else:
        want, scale = fused_epilogue(want, scale, None, activation)
    got = got.astype(np.float32).transpose(0, 3, 1, 2).astype(np.float64)
    taps = int(np.prod(CASES[case][1]))
    bound = (taps + 4) * 2.0 ** -23 * scale + 2.0 ** -8 * np.abs(want) + 1e-6
    err = np.abs(got - want)
    assert (err <= bound).all(), f"{case} {activation}: max error {err.max()}"
    return got, want


@pytest.fixture
def rng():
    return np.random.default_rng(17)


@pytest.mark.parametrize("case", list(CASES))
def test_cases(case, rng):
    run_case(case, rng)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_activations(activation, rng):
    run_case("shared", rng, activation)


def test_inf_and_nan_as_the_reference_has_them(rng):
    """An inf in X makes its outputs +-inf, a NaN NaN; an inf weight meets the padding (rows
    and columns) as NaN, as the reference's zero padding does."""
    x, w, b = case_data("shared", rng)
    x[0, 3, 4, 6] = np.inf
    x[0, 40, 0, 0] = np.nan
    w[7, 0, 0, 0] = np.inf
    model = case_model("shared", w, b, "Relu")
    (got,) = model.run({"x": last(x).astype(BF16_DTYPE)})
    from ge_hub.ops.conv import fused_conv_nhwc

    attrs = dict(auto_pad="NOTSET", dilations=None, group=64, kernel_shape=None,
                 pads=[1, 1, 1, 1], strides=None, activation="Relu", alpha=0.0, beta=0.0)
    with np.errstate(invalid="ignore"):
        want = fused_conv_nhwc(last(x).astype(BF16_DTYPE), w, b, **attrs)
    got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isnan(got[0, 0, :, 7]).all()  # the top row's window reads the padding
    near = got[0, 3:6, 5:8, 3]  # the inf's outputs: +inf, or 0 where Relu met -inf
    assert np.isinf(near).any() and (np.isinf(near) | (near == 0)).all()


@pytest.mark.parametrize("variant", [{}, {"GE_HUB_BF16_KERNEL": "generic"},
                                     {"GE_HUB_DEPTHWISE_KERNEL": "generic"}],
                         ids=["avx512_cvt", "avx512_integer_rounding", "generic"])
def test_each_loop_variant(variant):
    """The loops are picked once per process: AVX-512 with AVX512-BF16's rounding where the
    CPU has it, AVX-512 with the integer rounding (the bf16 kernels held to plain C, as on
    a CPU without AVX512-BF16), and the plain loops (GE_HUB_DEPTHWISE_KERNEL=generic)."""
    run_in_process(variant, """
        import numpy as np
        from tests.kernels import test_conv_depthwise_nhwc as t
        rng = np.random.default_rng(5)
        for case in t.CASES:
            t.run_case(case, rng)
        for activation in t.ACTIVATIONS:
            t.run_case("five", rng, activation)
    """)


def test_what_the_kernel_leaves_to_the_reference(rng):
    """Channels not a multiple of 32 (the chains pad theirs) or a window spanning more rows
    than the ring holds: the counted reference runs."""
    assert dw_kernel.BLOCK == 32 and dw_kernel.MAX_SPAN == 16
    for shape, attrs in (((1, 48, 6, 6), dict(pads=[1, 1, 1, 1])),
                         ((1, 32, 40, 6), dict(dilations=[9, 1], pads=[9, 1, 9, 1]))):
        n, c, h, wd = shape
        w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
        with es.GraphBuilder("g") as gb:
            x = es.input("x", "bfloat16", [n, h, wd, c])
            es.output(es.op("FusedConvNHWC", x, es.const(w),
                            es.const(np.zeros(c, np.float32)), domain=FUSED_DOMAIN, group=c,
                            **attrs), "y")
        model = ge_hub.compile(gb.graph, options=BF16)
        assert [s.kernel for s in model.plan.steps] != [dw_kernel.KERNEL]
        assert model.summary()["python_steps"] == 1


def test_offline_file_records_the_layout(tmp_path, rng):
    """A .ghm with the kernel records its weights' layout depthwise_nhwc (so that a ge-hub
    from before it plans the file again), and loads to the same results."""
    from ge_hub.offline import portability, reader, writer

    x, w, b = case_data("shared", rng)
    model = case_model("shared", w, b, "Relu")
    assert portability.layouts_of(model.plan) == {"depthwise_nhwc"}
    meta = writer.save(model, str(tmp_path / "dw.ghm"))
    assert "depthwise_nhwc" in meta["portability"]["layouts"]
    assert portability.problems(meta["portability"]) == []
    feeds = {"x": last(x).astype(BF16_DTYPE)}
    got = reader.load_compiled(str(tmp_path / "dw.ghm")).run(feeds)[0]
    np.testing.assert_array_equal(got.astype(np.float32), model.run(feeds)[0].astype(np.float32))


# -- the channels_last pass ---------------------------------------------------------------

def mobilenet_blocks(rng, channels=(16, 24, 24), expand=6, size=20):
    """MobileNetV2's stem and inverted residual blocks (expansion, depthwise, projection,
    the residual where the shapes agree), with folded batch norms' biases and Relu6: 16,
    24 and 144 channels, which the chain pads to 32, 32 and 160 (96 as it is)."""
    def conv(x, c_in, c_out, kernel=1, group=1, stride=1, act=True, z=None):
        w = (rng.standard_normal((c_out, c_in // group, kernel, kernel))
             * (2.0 / (c_in // group * kernel * kernel)) ** 0.5).astype(np.float32)
        b = (rng.standard_normal(c_out) * 0.1).astype(np.float32)
        y = es.op("Conv", x, es.const(w), es.const(b), group=group, strides=[stride] * 2,
                  pads=[kernel // 2] * 4)
        y = es.op("Add", y, z) if z is not None else y
        return es.op("Clip", y, es.const(np.float32(0)), es.const(np.float32(6))) if act else y

    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 3, size, size])
        h = conv(x, 3, 32, 3, stride=2)
        h = conv(h, 32, 32, 3, group=32)
        h = conv(h, 32, channels[0], act=False)
        c_in = channels[0]
        for i, c_out in enumerate(channels[1:]):
            e = conv(h, c_in, c_in * expand)
            e = conv(e, c_in * expand, c_in * expand, 3, group=c_in * expand,
                     stride=2 if i == 0 else 1)
            h = conv(e, c_in * expand, c_out, act=False, z=h if c_in == c_out else None)
            c_in = c_out
        h = conv(h, c_in, 40)
        es.output(es.op("GlobalAveragePool", h), "y")
    return gb.graph


def test_the_chain_takes_mobilenets_depthwise_convs(rng):
    """In a bf16 plan on AMX the whole of MobileNetV2's front is one chain: stem, depthwise
    and pointwise Convs channels-last on bf16 activations padded to 32 channels, the
    residual Add in the projection, one value turned in and one out (sliced back from 64
    channels to its 40). In mixed plans too, but for the last Conv, which GlobalAveragePool
    reads: kept accurate, it stays NCHW fp32. Without AMX the pass does not run and the
    plans stay NCHW. Either way the bf16 result is the NCHW bf16 plan's within bf16
    activations' rounding, and mixed's is closer to fp32 than bf16's."""
    graph = mobilenet_blocks(rng)
    x = rng.standard_normal((1, 3, 20, 20)).astype(np.float32)
    chained = ge_hub.compile(graph, options=BF16)
    mixed = ge_hub.compile(graph, options={"precision": "mixed"})
    kernels = [s.kernel for s in chained.plan.steps]
    summary = chained.summary()["precision"]
    if cpu.bf16_micro_kernel() == "amx":
        _check_the_chains(chained, mixed)
    else:  # channels_last runs where the bf16 products run on AMX only
        assert dw_kernel.KERNEL not in kernels + [s.kernel for s in mixed.plan.steps]
        assert summary["bf16_activation_steps"] == 0
    nchw = ge_hub.compile(graph, options={**BF16, "disable_passes": ["channels_last"]})
    fp32 = ge_hub.compile(graph)
    (got,), (ref,), (exact,) = (m.run({"x": x}) for m in (chained, nchw, fp32))
    assert got.shape == exact.shape == (1, 40, 1, 1)
    err = np.abs(got - exact).max() / np.abs(exact).max()
    assert 0 < err < 1e-2, err
    assert np.abs(got - ref).max() / np.abs(exact).max() < 1e-2
    (mixed_out,) = mixed.run({"x": x})
    assert np.abs(mixed_out - exact).max() < err * np.abs(exact).max()


def _check_the_chains(chained, mixed):
    """The plans test_the_chain_takes_mobilenets_depthwise_convs expects on AMX."""
    kernels = [s.kernel for s in chained.plan.steps]
    assert kernels.count(dw_kernel.KERNEL) == 3
    assert kernels.count("ge_conv_nhwc_bf16") == 7
    assert kernels.count("ge_to_channels_last_bf16") == 1
    assert [s.op for s in chained.plan.steps][-4:] == ["Transpose", "Cast", "Slice",
                                                       "GlobalAveragePool"]
    shapes = {chained.plan.tensors[s.outputs[0]].shape[-1] for s in chained.plan.steps
              if s.kernel in (dw_kernel.KERNEL, "ge_conv_nhwc_bf16")}
    assert shapes == {32, 96, 160, 64}
    summary = chained.summary()["precision"]
    assert summary["bf16_activation_steps"] == 10
    depthwise = [s for s in chained.plan.steps if s.kernel == dw_kernel.KERNEL]
    assert all(precision_report.step_precision(s) == "fp32" for s in depthwise)
    assert {s.node for s in depthwise} <= set(summary["fp32_products"])
    kernels = [s.kernel for s in mixed.plan.steps]
    assert kernels.count(dw_kernel.KERNEL) == 3 and kernels.count("ge_conv_nhwc_bf16") == 6
    (last_conv,) = [s for s in mixed.plan.steps if s.kernel == "ge_conv_fused_f32"]
    assert precision_report.step_precision(last_conv) == "fp32"
