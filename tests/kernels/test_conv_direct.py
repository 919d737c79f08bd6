"""The direct convolution path (core/kernels/conv_direct.c, NN_CONV_DIRECT) behind Conv and
ge_hub.FusedConv, against the NumPy references of Conv and of the unfused subgraph.

The planner takes it for rows of at least 16 outputs over at most 64 channels on each side,
stride 2 or (past 1x1) stride 1 where Winograd does not apply, with more than 4 input
channels (ge_hub.kernels.conv._direct_fits: not the stems); the kernel
itself takes any 1-D or 2-D window up to 7x7 with strides 1 or 2 and no dilation, which
these tests run by widening the rule to every geometry the kernel takes: stride 1 and 2 on
either axis, 3x3, 5x5, 7x7, 3x5 and 1x1 windows, uneven and missing pads, rows that end
mid-vector, output channels that leave a block of 8 part-empty, groups, batches, each
activation (Relu and Clip in the registers, the rest over the stored values), residuals,
NaN and inf passing through, and each tile kernel (GE_HUB_CONV_DIRECT_KERNEL=generic, and
the CPU's own) in a process of its own."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub.kernels import conv as conv_kernels
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close
from tests.kernels.isolated import run_isolated
from tests.kernels.test_conv_depthwise import ACTIVATIONS, GEOMETRIES
from tests.kernels.test_conv_few_channels import case_arrays, conv_graph, path_of

TOL = dict(rtol=2e-4, atol=2e-4)

# (input channels, output channels, group): a detector's stride-2 layer, channels that
# leave the last block of 8 part-empty, two groups, a stem, one channel in, one out
CHANNELS = [(16, 32, 1), (5, 13, 1), (8, 6, 2), (3, 16, 1), (1, 9, 1), (7, 1, 1)]


def _fits(name) -> bool:
    _, k, attrs = GEOMETRIES[name]
    strides = attrs.get("strides", [1, 1])
    dilations = attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0] * (2 * len(k)))
    return (all(size <= conv_kernels.DIRECT_MAX_K for size in k)
            and all(s in (1, 2) for s in strides) and all(d == 1 for d in dilations)
            and all(0 <= p < size for p, size in zip(pads, k)))


NAMES = [name for name in GEOMETRIES if _fits(name)]


@pytest.fixture
def rng():
    return np.random.default_rng(43)


@pytest.fixture
def every_geometry(monkeypatch):
    """The planner's rule widened to every window the kernel takes, stems included."""
    monkeypatch.setattr(conv_kernels, "_direct_fits",
                        lambda window, cg, mg, out_dims, begins:
                        conv_kernels._direct_geometry(window, begins))
    monkeypatch.setattr(conv_kernels, "_few_channels_fits", lambda *args: False)


def check(graph, feeds):
    model = ge_hub.compile(graph)
    assert path_of(model) == conv_kernels.CONV_DIRECT
    got = model.run(feeds)
    assert_outputs_close(got, evaluate(graph, feeds), ["y"], **TOL)
    return got[0]


def test_the_geometries_cover_the_kernels_forms():
    forms = {(GEOMETRIES[n][2].get("strides", [1])[-1], GEOMETRIES[n][1][-1]) for n in NAMES}
    assert {(1, 3), (2, 3), (2, 5), (1, 5), (1, 7)} <= forms, forms  # s2 3x3: its own tile


@pytest.mark.parametrize("channels", CHANNELS)
@pytest.mark.parametrize("name", NAMES)
def test_every_geometry(name, channels, rng, every_geometry):
    x, w, b, attrs = case_arrays(name, channels, rng)
    check(conv_graph(x, w, b, attrs), {"x": x})


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("name", ["3x3_wide", "3x3_stride2_odd", "5x5_stride2", "1d"])
def test_fused_activations(name, activation, rng, every_geometry):
    x, w, b, attrs = case_arrays(name, (6, 11, 1), rng)
    check(conv_graph(x, w, b, attrs, activation), {"x": x})


@pytest.mark.parametrize("activation", ["", "Relu", "Clip", "HardSwish"])
@pytest.mark.parametrize("name", ["3x3_wide", "3x3_stride2_even", "3x3_stride2_wide"])
def test_fused_residual(name, activation, rng, every_geometry):
    x, w, b, attrs = case_arrays(name, (5, 10, 1), rng)
    shape = evaluate(conv_graph(x, w, b, attrs), {"x": x})[0].shape
    z = rng.standard_normal(shape).astype(np.float32)
    check(conv_graph(x, w, b, attrs, activation, residual=z), {"x": x, "z": z})


@pytest.mark.parametrize("name", ["3x3_wide", "3x3_stride2_odd", "stride_1_2"])
def test_nan_and_inf_pass_through(name, rng, every_geometry):
    x, w, b, attrs = case_arrays(name, (4, 9, 1), rng, specials=True)
    # 4 channels: the few-channel path's range, taken over by the widened rule
    graph = conv_graph(x, w, b, attrs, "Relu")
    got = check(graph, {"x": x})
    want = evaluate(graph, {"x": x})[0]
    assert np.isnan(got).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_a_batch_over_the_pool(rng):
    """Two images of a detector's 16 -> 32 stride-2 layer, as the planner picks it."""
    x, w, b = (rng.standard_normal(shape).astype(np.float32)
               for shape in [(2, 16, 64, 64), (32, 16, 3, 3), (32,)])
    z = rng.standard_normal((2, 32, 32, 32)).astype(np.float32)
    graph = conv_graph(x, w * 0.2, b, dict(strides=[2, 2], pads=[1, 1, 1, 1]), "Relu",
                       residual=z)
    check(graph, {"x": x, "z": z})


# (x shape, w shape, attrs, expected path): what the planner picks around the rule
RULE_CASES = {
    "stride2_16_to_32": ((1, 16, 64, 64), (32, 16, 3, 3), dict(strides=[2, 2], pads=[1] * 4),
                         conv_kernels.CONV_DIRECT),
    "stride2_stem": ((1, 3, 128, 128), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1] * 4),
                     conv_kernels.CONV_FEW_CHANNELS),
    "stride2_7x7_stem": ((1, 3, 37, 41), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3] * 4),
                         conv_kernels.CONV_PACKED),
    "stride1_winograd": ((1, 16, 64, 64), (16, 16, 3, 3), dict(pads=[1] * 4),
                         conv_kernels.CONV_WINOGRAD),
    "stride1_8_to_16": ((1, 8, 64, 64), (16, 8, 3, 3), dict(pads=[1] * 4),
                        conv_kernels.CONV_DIRECT),
    "stride1_16_to_8": ((1, 16, 40, 40), (8, 16, 3, 3), dict(pads=[1] * 4),
                        conv_kernels.CONV_DIRECT),
    "stride1_5x5": ((1, 24, 30, 30), (40, 24, 5, 5), dict(pads=[2] * 4),
                    conv_kernels.CONV_DIRECT),
    "stride1_1x1": ((1, 8, 64, 64), (16, 8, 1, 1), {}, conv_kernels.CONV_PACKED),
    "stride2_65_out": ((1, 16, 64, 64), (65, 16, 3, 3), dict(strides=[2, 2], pads=[1] * 4),
                       conv_kernels.CONV_PACKED),
    "stride2_65_in": ((1, 65, 64, 64), (16, 65, 3, 3), dict(strides=[2, 2], pads=[1] * 4),
                      conv_kernels.CONV_PACKED),
    "stride2_narrow_rows": ((1, 16, 28, 28), (32, 16, 3, 3), dict(strides=[2, 2], pads=[1] * 4),
                            conv_kernels.CONV_PACKED),
    "stride2_dilated": ((1, 16, 64, 64), (32, 16, 3, 3),
                        dict(strides=[2, 2], dilations=[2, 2], pads=[2] * 4),
                        conv_kernels.CONV_PACKED),
}


@pytest.mark.parametrize("case", RULE_CASES)
def test_the_planner_takes_it_for_few_channels_where_winograd_does_not(case, rng):
    x_shape, w_shape, attrs, path = RULE_CASES[case]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * 0.2).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    graph = conv_graph(x, w, b, attrs)
    model = ge_hub.compile(graph)
    assert path_of(model) == path
    assert_outputs_close(model.run({"x": x}), evaluate(graph, {"x": x}), ["y"], **TOL)


def test_not_for_bf16_marked_layers(rng):
    """A layer the precision pass marked bf16 keeps its bf16 path (or the few-channel one)."""
    x = rng.standard_normal((1, 16, 64, 64)).astype(np.float32)
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.2).astype(np.float32)
    graph = conv_graph(x, w, rng.standard_normal(32).astype(np.float32),
                       dict(strides=[2, 2], pads=[1] * 4))
    model = ge_hub.compile(graph, options={"precision": "bf16"})
    assert path_of(model) != conv_kernels.CONV_DIRECT


def test_weights_are_packed_in_blocks_of_eight_channels(rng):
    """Per group, ceil(mg / 8) blocks of (cg * taps, 8): channel q of block k at [k, :, q],
    zero past mg."""
    w = rng.standard_normal((2, 13, 12)).astype(np.float32)  # 2 groups, 13 channels, k 12
    packed = conv_kernels._direct_weights(w).reshape(2, 2, 12, 8)
    np.testing.assert_array_equal(packed[1, 0, :, 3], w[1, 3])
    np.testing.assert_array_equal(packed[0, 1, :, :5], w[0, 8:].T)
    assert not packed[:, 1, :, 5:].any()


@pytest.mark.parametrize("variant", ["generic", "cpu"])
def test_each_tile_kernel(variant):
    """GE_HUB_CONV_DIRECT_KERNEL=generic forces the plain tile kernel (the CPU's own runs
    otherwise: AVX-512 where it has it); it is picked once per process."""
    run_isolated("""
        import numpy as np
        from tests.kernels import test_conv_direct as t
        t.conv_kernels._direct_fits = (
            lambda window, cg, mg, out_dims, begins:
            t.conv_kernels._direct_geometry(window, begins))
        t.conv_kernels._few_channels_fits = lambda *args: False
        rng = np.random.default_rng(11)
        for name in t.NAMES:
            for channels in t.CHANNELS[:3]:
                x, w, b, attrs = t.case_arrays(name, channels, rng)
                t.check(t.conv_graph(x, w, b, attrs, "Clip"), {"x": x})
            x, w, b, attrs = t.case_arrays(name, (5, 12, 1), rng, specials=True)
            t.check(t.conv_graph(x, w, b, attrs, "HardSwish"), {"x": x})
        print("ok")
    """, **({"GE_HUB_CONV_DIRECT_KERNEL": "generic"} if variant == "generic" else {}))


def test_an_offline_file_records_the_layout(rng, tmp_path, monkeypatch):
    """A .ghm holding a direct Conv records the layout direct_conv, so a ge-hub from before
    that path (which does not know it) plans the file again from its graph, or refuses a
    non-portable one, instead of reading the blocks as packed GEMM panels."""
    from ge_hub.offline import portability
    from tests.offline_layouts import check_older_ge_hub_plans_again

    x_shape, w_shape, attrs, _ = RULE_CASES["stride2_16_to_32"]
    x = rng.standard_normal(x_shape).astype(np.float32)
    graph = conv_graph(x, (rng.standard_normal(w_shape) * 0.2).astype(np.float32),
                       rng.standard_normal(w_shape[0]).astype(np.float32), attrs, "Relu")
    model = ge_hub.compile(graph)
    assert portability.layouts_of(model.plan) == {"direct_conv"}
    check_older_ge_hub_plans_again(model, {"x": x}, "direct_conv", tmp_path, monkeypatch)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_stems_on_several_threads_run_it_from_the_conv_weights(threads):
    """A few-channel stem with stride-2 rows of 16 or more runs the direct kernel on a pool
    of several threads (conv.c, few_channels_goes_direct), its weights packed into blocks
    at run time; on one thread the few-channel kernel. Both against the reference, with
    each tile kernel."""
    for variant in ("generic", "cpu"):
        run_isolated("""
            import numpy as np
            from tests.kernels import test_conv_direct as t
            from tests.kernels.test_conv_few_channels import CHANNELS, fits
            rng = np.random.default_rng(5)
            for name in ["3x3_stride2_odd", "3x3_stride2_wide", "3x3_stride2_very_wide",
                         "stride_1_2", "5x5_stride2", "3x3_wide"]:
                for channels in [c for c in CHANNELS if fits(name, c)]:
                    x, w, b, attrs = t.case_arrays(name, channels, rng)
                    graph = t.conv_graph(x, w, b, attrs, "Relu")
                    model = t.ge_hub.compile(graph)
                    assert t.path_of(model) == t.conv_kernels.CONV_FEW_CHANNELS
                    t.assert_outputs_close(model.run({"x": x}), t.evaluate(graph, {"x": x}),
                                           ["y"], **t.TOL)
                    z = rng.standard_normal(model.run({"x": x})[0].shape).astype(np.float32)
                    graph = t.conv_graph(x, w, b, attrs, "HardSwish", residual=z)
                    t.assert_outputs_close(t.ge_hub.compile(graph).run({"x": x, "z": z}),
                                           t.evaluate(graph, {"x": x, "z": z}), ["y"],
                                           **t.TOL)
            print("ok")
        """, GE_HUB_NUM_THREADS=threads,
            **({"GE_HUB_CONV_DIRECT_KERNEL": "generic"} if variant == "generic" else {}))
