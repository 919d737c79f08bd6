"""Winograd F(2x2, 3x3) with bf16 products (core/kernels/conv_winograd.c with u_bf16,
conv.c's NN_CONV_WINOGRAD_BF16; ge_hub/kernels/conv.py, CONV_WINOGRAD_BF16) against a
float64 model of the same arithmetic: U = G g G^T summed in float64 and rounded to bf16
once, V = B^T d B in float32 in the strips' order (so the same bits) and rounded to bf16,
each M[xi] = U[xi] V[xi] in float64, Y = A^T M A + bias, then FusedConv's residual and
activation. The C sums run in fp32, so they agree to fp32 rounding of sums of that depth.
Odd channel counts (a last pair with a zero), depths that are no multiple of the bf16
depth block, tails in every dimension, groups and images, several blocks side by side
(slots) and one block split over the pool; data holding inf or NaN (winograd_nonfinite);
the error against the exact convolution stays within what bf16 rounding of U and V
explains. tests/kernels/test_nn_bf16.py runs these cases again in each micro-kernel
variant, and with the generic transforms (GE_HUB_GEMM_KERNEL=generic). Where the products
run on AMX the planner prefers the packed bf16 path (conv.bf16_winograd_pays); these cases
take Winograd whatever the micro-kernel (`winograd_taken`), so that it is tested with each."""

from __future__ import annotations

import contextlib
import struct

import numpy as np
import pytest

import ge_hub
from ge_hub import es, precision_report
from ge_hub.kernels import conv as conv_kernels
from ge_hub.kernels import cpu, nn_bf16
from ge_hub.ops.conv import FUSED_DOMAIN
from tests.kernels.test_nn_bf16 import fused_epilogue

BF16 = {"precision": "bf16"}

# name -> (x shape, w shape, attrs): 3x3, stride 1, at least WINOGRAD_MIN_CHANNELS
CASES = {
    # 37 output channels (no whole row block), depth 20 (padded to 32), 5x6 tiles
    "tails": ((1, 20, 9, 11), (37, 20, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 17 channels per group: the last pair's second channel is zero; two images
    "odd_groups_batch": ((2, 34, 12, 13), (32, 17, 3, 3), dict(group=2, pads=[0, 1, 2, 0])),
    # 400 tiles in four blocks, each a slot's (one thread start to end)
    "slots": ((1, 16, 40, 40), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 16 tiles of 64 channels: one block, its stages split over the pool
    "one_block": ((1, 64, 8, 8), (70, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
    # no padding, an odd output size (the last tile row and column half used)
    "no_padding": ((1, 16, 11, 13), (16, 16, 3, 3), {}),
}

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
_AT = np.array([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]])


def _round(a) -> np.ndarray:
    return nn_bf16.round_bf16(np.asarray(a, np.float32)).astype(np.float64)


def _v_tiles(x: np.ndarray, pads, out_hw) -> np.ndarray:
    """B^T d B of every 4x4 input tile in float32, in the strips' order of operations:
    (n, c, tiles_h, tiles_w, 4, 4)."""
    oh, ow = out_hw
    th, tw = -(-oh // 2), -(-ow // 2)
    xp = np.zeros((x.shape[0], x.shape[1], 2 * th + 2, 2 * tw + 2), np.float32)
    h, w = x.shape[2:]
    top, left = pads[0], pads[1]
    rows = slice(top, min(top + h, xp.shape[2]))
    cols = slice(left, min(left + w, xp.shape[3]))
    xp[:, :, rows, cols] = x[:, :, :rows.stop - top, :cols.stop - left]
    d = np.stack([np.stack([xp[:, :, i:i + 2 * th:2, j:j + 2 * tw:2] for j in range(4)], -1)
                  for i in range(4)], -2)  # (n, c, th, tw, 4 rows, 4 cols)
    r = np.stack([d[..., 0, :] - d[..., 2, :], d[..., 1, :] + d[..., 2, :],
                  d[..., 2, :] - d[..., 1, :], d[..., 1, :] - d[..., 3, :]], -2)
    return np.stack([r[..., 0] - r[..., 2], r[..., 1] + r[..., 2],
                     r[..., 2] - r[..., 1], r[..., 1] - r[..., 3]], -1)


def winograd_bf16_model(x, w, b, pads, group):
    """The bf16 Winograd path's result in float64 and the sums of the magnitudes it adds
    (for the fp32 rounding bound): (want, scale), each (n, m, oh, ow)."""
    n, c, h, wd = x.shape
    m, cg = w.shape[:2]
    mg = m // group
    oh, ow = h + pads[0] + pads[2] - 2, wd + pads[1] + pads[3] - 2
    u = np.einsum("ik,mckl,jl->mcij", _G, w.astype(np.float64), _G)
    u = _round(u.astype(np.float32))  # (m, cg, 4, 4)
    v = _round(_v_tiles(x, pads, (oh, ow)))  # (n, c, th, tw, 4, 4)
    want = np.zeros((n, m, oh, ow))
    scale = np.zeros_like(want)
    for g in range(group):
        ug, vg = u[g * mg:(g + 1) * mg], v[:, g * cg:(g + 1) * cg]
        for out, uu, vv in ((want, ug, vg), (scale, np.abs(ug), np.abs(vg))):
            mm = np.einsum("mcij,nctsij->nmtsij", uu, vv)
            at = np.abs(_AT) if out is scale else _AT
            y = np.einsum("ai,nmtsij,bj->nmtasb", at, mm, at)
            y = y.reshape(n, mg, y.shape[2] * 2, y.shape[4] * 2)[:, :, :oh, :ow]
            out[:, g * mg:(g + 1) * mg] = y
    if b is not None:
        want += b.reshape(1, -1, 1, 1)
        scale += np.abs(b).reshape(1, -1, 1, 1)
    return want, scale


@contextlib.contextmanager
def winograd_taken():
    """Compile with Winograd taken wherever it fits, whatever the bf16 micro-kernel."""
    chooses = conv_kernels.bf16_winograd_pays
    conv_kernels.bf16_winograd_pays = lambda: True
    try:
        yield
    finally:
        conv_kernels.bf16_winograd_pays = chooses


def exact_conv3x3(x, w):
    """The 3x3 convolution of x by w with one pixel of zero padding, in float64."""
    h, wd = x.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("nchw,mc->nmhw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
               for i in range(3) for j in range(3))


def compile_case(case, w, b, *, residual=True, activation="Relu"):
    x_shape, w_shape, attrs = CASES[case]
    out_shape = [x_shape[0], w_shape[0],
                 x_shape[2] + attrs.get("pads", [0] * 4)[0] + attrs.get("pads", [0] * 4)[2] - 2,
                 x_shape[3] + attrs.get("pads", [0] * 4)[1] + attrs.get("pads", [0] * 4)[3] - 2]
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x_shape))
        zin = es.input("z", "float32", out_shape) if residual else None
        y = es.op("FusedConv", xin, es.const(w), None if b is None else es.const(b), zin,
                  domain=FUSED_DOMAIN, activation=activation, alpha=0.0, beta=6.0, **attrs)
        es.output(y, "y")
    with winograd_taken():
        model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert struct.unpack_from("=q", step.attrs)[0] == conv_kernels.CONV_WINOGRAD_BF16
    assert precision_report.step_precision(step) == "bf16"
    return model, out_shape


def case_data(case, rng):
    x_shape, w_shape, attrs = CASES[case]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * (3.0 / (w_shape[1] * 9)) ** 0.5).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    return x, w, b, attrs.get("pads", [0, 0, 0, 0]), attrs.get("group", 1)


def run_winograd_case(case, rng, *, activation="Relu", residual=True):
    """One case against the float64 model, within fp32 rounding of its sums."""
    x, w, b, pads, group = case_data(case, rng)
    model, out_shape = compile_case(case, w, b, residual=residual, activation=activation)
    want, scale = winograd_bf16_model(x, w, b, pads, group)
    z = rng.standard_normal(out_shape).astype(np.float32) if residual else None
    (got,) = model.run({"x": x, **({"z": z} if residual else {})})
    want, scale = fused_epilogue(want, scale, z, activation)
    bound = (w.shape[1] + 16) * 2.0 ** -23 * scale + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), f"{case}: max error {err.max()} (bound {bound.max()})"


@pytest.fixture
def rng():
    return np.random.default_rng(31)


@pytest.mark.parametrize("case", CASES)
def test_winograd_bf16_cases(case, rng):
    run_winograd_case(case, rng)


@pytest.mark.parametrize("activation, residual", [("Clip", False), ("", True), ("Relu", False)])
def test_winograd_bf16_epilogues(activation, residual, rng):
    run_winograd_case("tails", rng, activation=activation, residual=residual)


def test_winograd_bf16_error_against_the_exact_convolution(rng):
    """The rounding of U and V to bf16 is the whole error: against the exact float64
    convolution of the fp32 data, on a ResNet-like layer (Relu'd input), the relative
    error stays within a few bf16 ulps (2^-8 = 3.9e-3), as the direct bf16 path's does."""
    x = np.maximum(rng.standard_normal((1, 64, 14, 14)), 0).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * (2.0 / (64 * 9)) ** 0.5).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        es.output(es.conv(xin, es.const(w), pads=[1, 1, 1, 1]), "y")
    with winograd_taken():
        model = ge_hub.compile(gb.graph, options=BF16)
    assert struct.unpack_from("=q", model.plan.steps[0].attrs)[0] \
        == conv_kernels.CONV_WINOGRAD_BF16
    (got,) = model.run({"x": x})
    exact = exact_conv3x3(x, w)
    rel = np.abs(got - exact).max() / np.abs(exact).max()
    assert 0 < rel < 8e-3


def test_winograd_bf16_nonfinite_input(rng):
    """inf and NaN in X: each output whose window reads one is what the direct sum gives
    (conv.c, winograd_nonfinite, from the weights' signs), then bias and epilogue; the
    others are the Winograd result of the input with those values zeroed."""
    x, w, b, pads, group = case_data("tails", rng)
    w[0, 3, 1, 1] = 0.0  # inf times this zero weight: NaN in output channel 0
    x[0, 3, 4, 5] = np.inf
    x[0, 7, 0, 0] = -np.inf
    x[0, 11, 8, 10] = np.nan
    model, out_shape = compile_case("tails", w, b, residual=False, activation="")
    (got,) = model.run({"x": x})
    clean = np.where(np.isfinite(x), x, 0).astype(np.float32)
    want, scale = winograd_bf16_model(clean, w, b, pads, group)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    with np.errstate(invalid="ignore"):
        direct = sum(np.einsum("nchw,mc->nmhw", xp[:, :, i:i + 9, j:j + 11], w[:, :, i, j])
                     for i in range(3) for j in range(3)) + b.reshape(1, -1, 1, 1)
    touched = ~np.isfinite(direct)
    assert touched.any() and np.isnan(direct[0, 0]).any()
    np.testing.assert_array_equal(got[touched], direct[touched].astype(np.float32))
    bound = (w.shape[1] + 16) * 2.0 ** -23 * scale + 1e-6
    assert (np.abs(got - want)[~touched] <= bound[~touched]).all()


def test_winograd_bf16_is_taken_only_where_it_fits(rng):
    """Stride 2, fewer than WINOGRAD_MIN_CHANNELS channels, or weights holding inf
    stay on the direct bf16 paths; fp32 keeps its own Winograd."""
    def path(w, precision="bf16", **attrs):
        with es.GraphBuilder("g") as gb:
            xin = es.input("x", "float32", [1, w.shape[1], 12, 12])
            es.output(es.conv(xin, es.const(w), pads=[1, 1, 1, 1], **attrs), "y")
        with winograd_taken():
            model = ge_hub.compile(gb.graph, options={"precision": precision})
        return struct.unpack_from("=q", model.plan.steps[0].attrs)[0]

    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    assert path(w) == conv_kernels.CONV_WINOGRAD_BF16
    assert path(w, precision="fp32") == conv_kernels.CONV_WINOGRAD
    assert path(w, strides=[2, 2]) in conv_kernels.BF16_PATHS
    assert path(w, strides=[2, 2]) != conv_kernels.CONV_WINOGRAD_BF16
    assert path(w[:, :14].copy()) != conv_kernels.CONV_WINOGRAD_BF16
    inf = w.copy()
    inf[0, 0, 0, 0] = np.inf
    assert path(inf) != conv_kernels.CONV_WINOGRAD_BF16


def test_an_offline_file_records_the_layout(rng, tmp_path, monkeypatch):
    """A .ghm holding a bf16 Winograd Conv records the layouts packed_bf16 and
    winograd_bf16, so a ge-hub from before that path (which does not know winograd_bf16)
    plans the file again from its graph, or refuses a non-portable one, instead of failing
    on a conv path it does not have."""
    from ge_hub.offline import portability
    from tests.offline_layouts import check_older_ge_hub_plans_again

    # planned again at load, the file must take Winograd again, AMX or not
    monkeypatch.setattr(conv_kernels, "bf16_winograd_pays", lambda: True)
    x, w, b, pads, group = case_data("tails", rng)
    model, _ = compile_case("tails", w, b, residual=False)
    assert portability.layouts_of(model.plan) == {"packed_bf16", "winograd_bf16"}
    check_older_ge_hub_plans_again(model, {"x": x}, "winograd_bf16", tmp_path, monkeypatch)


@pytest.mark.parametrize("kernel, winograd", [("amx", False), ("avx512bf16", True),
                                              ("generic", True)])
def test_winograd_bf16_is_left_to_the_packed_path_on_amx(kernel, winograd, monkeypatch, rng):
    """Where the bf16 products run on AMX tiles, a 3x3 Conv that Winograd fits takes the
    packed bf16 path instead (its products are cheaper there than Winograd's transforms);
    elsewhere Winograd. Both compute the layer within bf16 rounding."""
    monkeypatch.setattr(cpu, "bf16_micro_kernel", lambda: kernel)
    x = rng.standard_normal((1, 32, 10, 10)).astype(np.float32)
    w = (rng.standard_normal((24, 32, 3, 3)) * (2.0 / (32 * 9)) ** 0.5).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        es.output(es.conv(xin, es.const(w), pads=[1, 1, 1, 1]), "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    path = struct.unpack_from("=q", model.plan.steps[0].attrs)[0]
    assert (path == conv_kernels.CONV_WINOGRAD_BF16) == winograd
    assert path in conv_kernels.BF16_PATHS
    (got,) = model.run({"x": x})
    exact = exact_conv3x3(x, w)
    assert 0 < np.abs(got - exact).max() / np.abs(exact).max() < 8e-3
