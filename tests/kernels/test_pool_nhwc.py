"""ge_hub.MaxPoolNHWC (core/kernels/pool_nhwc.c): MaxPool on channels-last tensors, float32
and bfloat16, against the op's NumPy reference (MaxPool turned around), bit for bit: the
maximum is exact. Windows with padding, strides, dilation and ceil_mode, channel counts
below, at and past the kernel's chunk of 256, NaN and -inf among the values; in the
AVX-512 variant and the generic loops (GE_HUB_POOL_KERNEL), each in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.errors import OpError
from ge_hub.kernels import pool as pool_kernels
from ge_hub.ops import pool as pool_ops
from ge_hub.ops.conv import FUSED_DOMAIN

BF16 = np.dtype(ml_dtypes.bfloat16)

# (X shape N x H x W x C, attributes)
CASES = {
    "resnet": ((1, 15, 17, 64), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "few_channels": ((2, 9, 8, 5), dict(kernel_shape=[2, 2], strides=[2, 2])),
    "wide": ((1, 6, 7, 300), dict(kernel_shape=[3, 2], pads=[1, 0, 1, 1])),
    "ceil_dilated": ((1, 11, 10, 24),
                     dict(kernel_shape=[2, 3], strides=[2, 3], dilations=[2, 1], ceil_mode=1)),
}
DEFAULTS = dict(auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None, strides=None)


def data(shape, dtype, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 5, replace=False)] = np.nan
    flat[rng.choice(flat.size, 5, replace=False)] = -np.inf
    return x.astype(dtype)


def compiled(shape, dtype, attrs):
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", str(np.dtype(dtype)), list(shape))
        es.output(es.op("MaxPoolNHWC", xin, domain=FUSED_DOMAIN, **attrs), "y")
    return ge_hub.compile(gb.graph)


@pytest.fixture
def rng():
    return np.random.default_rng(5)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
def test_kernel_matches_reference(case, dtype, rng):
    shape, attrs = CASES[case]
    x = data(shape, dtype, rng)
    model = compiled(shape, dtype, attrs)
    (step,) = model.plan.steps
    assert step.kernel == pool_kernels.MAX_POOL_NHWC_KERNEL
    (got,) = model.run({"x": x})
    want = pool_ops.max_pool_nhwc(x, **{**DEFAULTS, **attrs})
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_reference_is_max_pool_turned_around(rng):
    x = data((2, 9, 12, 7), np.float32, rng)
    attrs = {**DEFAULTS, "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    want, _ = pool_ops.max_pool(x.transpose(0, 3, 1, 2), storage_order=0, **attrs)
    got = pool_ops.max_pool_nhwc(x, **attrs)
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))
    got16 = pool_ops.max_pool_nhwc(x.astype(BF16), **attrs)
    assert got16.dtype == BF16
    # compared as float32: NumPy 1.x's comparison does not see NaN == NaN in ml_dtypes' bf16
    np.testing.assert_array_equal(got16.astype(np.float32),
                                  want.transpose(0, 2, 3, 1).astype(BF16).astype(np.float32))


def test_shape_inference_and_bad_rank():
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "bfloat16", [1, 112, 112, 64])
        y = es.op("MaxPoolNHWC", xin, domain=FUSED_DOMAIN, kernel_shape=[3, 3],
                  strides=[2, 2], pads=[1, 1, 1, 1])
        es.output(y, "y")
    (out,) = gb.graph.outputs
    assert tuple(out.type.shape) == (1, 56, 56, 64) and out.type.dtype.name == "BFLOAT16"
    with pytest.raises(OpError, match="MaxPoolNHWC"):
        with es.GraphBuilder("g") as gb:
            xin = es.input("x", "float32", [1, 8, 8])
            es.op("MaxPoolNHWC", xin, domain=FUSED_DOMAIN, kernel_shape=[2, 2])


@pytest.mark.parametrize("variant", ["avx512", "generic"])
def test_each_variant(variant):
    """The AVX-512 path (a multiple of 16 channels, where the CPU has it) and the generic
    loops pass this file's kernel tests, the variant picked once per process."""
    env = dict(os.environ, GE_HUB_POOL_KERNEL=variant)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "matches_reference"], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout
