"""Convolutions with few input channels per group (core/kernels/conv_depthwise.c,
nn_conv_few_channels: the 3-channel stems), behind Conv and ge_hub.FusedConv, against the
NumPy references of Conv and of the unfused subgraph: every window geometry of the
depthwise tests with 1 to 4 input channels per group, output channel counts that leave
planes over after the AVX-512 kernel's groups of four, groups whose four would straddle
two groups, batches, each activation (Relu and Clip in registers, the rest over the
finished plane), residuals, NaN and inf passing through, and each span kernel
(GE_HUB_DEPTHWISE_KERNEL=avx512|avx2|generic) in a process of its own. Convolutions past
its limits (5 input channels, 5x5 over 3 channels) keep the packed path.

The direct path (test_conv_direct.py) is turned off here, so that a change of its rule
never takes geometries away from this kernel's tests. On a pool of several threads the C
core runs stride-2 stems of 16 outputs a row or more on the direct kernel instead (conv.c,
few_channels_goes_direct): these tests check their results either way, and the span
kernel tests run on one thread, where every geometry takes this kernel."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.kernels import conv as conv_kernels
from ge_hub.ops.conv import FUSED_DOMAIN
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close
from tests.kernels.isolated import run_isolated
from tests.kernels.test_conv_depthwise import ACTIVATIONS, GEOMETRIES

TOL = dict(rtol=2e-4, atol=2e-4)

# (input channels, output channels, group): a stem, quads and a remainder, one channel,
# groups of two input channels whose three outputs never fill a quad, four per group
CHANNELS = [(3, 32, 1), (3, 7, 1), (1, 5, 1), (4, 6, 2), (8, 8, 2)]


def case_arrays(name, channels, rng, *, specials=False):
    shape, k, attrs = GEOMETRIES[name]
    c, m, group = channels
    x = rng.standard_normal((shape[0], c, *shape[2:])).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    w = (rng.standard_normal((m, c // group, *k)) * 0.5).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return x, w, b, dict(attrs, group=group)


def conv_graph(x, w, b, attrs, activation=None, residual=None):
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        if activation is None:
            y = es.op("Conv", xin, es.const(w), es.const(b), **attrs)
        else:
            alpha, beta = ACTIVATIONS[activation]
            zin = None if residual is None else es.input("z", "float32", list(residual.shape))
            y = es.op("FusedConv", xin, es.const(w), es.const(b), zin, domain=FUSED_DOMAIN,
                      activation=activation, alpha=alpha, beta=beta, **attrs)
        es.output(y, "y")
    return gb.graph


def path_of(model) -> int:
    (step,) = model.plan.steps
    return struct.unpack_from("=q", step.attrs)[0]


def check(graph, feeds, path=conv_kernels.CONV_FEW_CHANNELS):
    model = ge_hub.compile(graph)
    assert path_of(model) == path
    got = model.run(feeds)
    assert_outputs_close(got, evaluate(graph, feeds), ["y"], **TOL)
    return got[0]


@pytest.fixture
def rng():
    return np.random.default_rng(31)


@pytest.fixture(autouse=True)
def without_the_direct_path(monkeypatch):
    monkeypatch.setattr(conv_kernels, "_direct_fits", lambda *args: False)


def fits(name, channels) -> bool:
    _, k, _ = GEOMETRIES[name]
    c, _, group = channels
    return c // group * int(np.prod(k)) <= 49


CASES = [(name, channels) for name in GEOMETRIES for channels in CHANNELS
         if fits(name, channels)]


@pytest.mark.parametrize(("name", "channels"), CASES)
def test_every_geometry(name, channels, rng):
    x, w, b, attrs = case_arrays(name, channels, rng)
    check(conv_graph(x, w, b, attrs), {"x": x})


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("name", ["3x3_wide", "3x3_narrow_7", "3x3_stride2_odd", "1d"])
def test_fused_activations(name, activation, rng):
    x, w, b, attrs = case_arrays(name, (3, 7, 1), rng)
    check(conv_graph(x, w, b, attrs, activation), {"x": x})


@pytest.mark.parametrize("activation", ["Relu", "HardSwish"])
@pytest.mark.parametrize("name", ["3x3_wide", "3x3_narrow_14", "3x3_stride2_even"])
def test_fused_residual(name, activation, rng):
    x, w, b, attrs = case_arrays(name, (3, 6, 1), rng)
    shape = evaluate(conv_graph(x, w, b, attrs), {"x": x})[0].shape
    z = rng.standard_normal(shape).astype(np.float32)
    check(conv_graph(x, w, b, attrs, activation, residual=z), {"x": x, "z": z})


@pytest.mark.parametrize("name", ["3x3_wide", "3x3_narrow_7", "3x3_stride2_odd"])
def test_nan_and_inf_pass_through(name, rng):
    x, w, b, attrs = case_arrays(name, (3, 9, 1), rng, specials=True)
    got = check(conv_graph(x, w, b, attrs, "Relu"), {"x": x})
    want = evaluate(conv_graph(x, w, b, attrs, "Relu"), {"x": x})[0]
    assert np.isnan(got).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_a_stem_split_over_the_pool(rng):
    """MobileNetV2's stem, 2 images: its planes split into chunks of whole fours."""
    x, w, b = (rng.standard_normal(shape).astype(np.float32)
               for shape in [(2, 3, 64, 64), (32, 3, 3, 3), (32,)])
    check(conv_graph(x, w, b, dict(strides=[2, 2], pads=[1, 1, 1, 1]), "Clip"), {"x": x})


@pytest.mark.parametrize(("c", "k"), [(5, 3), (3, 5)])
def test_past_the_limits_stays_packed(c, k, rng):
    x = rng.standard_normal((1, c, 12, 12)).astype(np.float32)
    w = rng.standard_normal((8, c, k, k)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    check(conv_graph(x, w, b, dict(pads=[k // 2] * 4)), {"x": x}, conv_kernels.CONV_PACKED)


@pytest.mark.parametrize("variant", ["generic", "avx2", "avx512"])
def test_each_span_kernel(variant):
    """GE_HUB_DEPTHWISE_KERNEL forces a lesser span kernel (ignored where the CPU lacks
    it); it is picked once per process, so each variant runs in a process of its own, on
    one thread (on several, stride-2 stems run the direct kernel: test_conv_direct)."""
    run_isolated("""
        import numpy as np
        from tests.kernels import test_conv_few_channels as t
        t.conv_kernels._direct_fits = lambda *args: False
        rng = np.random.default_rng(7)
        for name, channels in t.CASES:
            x, w, b, attrs = t.case_arrays(name, channels, rng)
            t.check(t.conv_graph(x, w, b, attrs, "Clip"), {"x": x})
            x, w, b, attrs = t.case_arrays(name, channels, rng, specials=True)
            t.check(t.conv_graph(x, w, b, attrs, "HardSwish"), {"x": x})
        print("ok")
    """, GE_HUB_DEPTHWISE_KERNEL=variant, GE_HUB_NUM_THREADS="1")
