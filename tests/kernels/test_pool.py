"""The pool family's C kernels (core/kernels/pool.c: MaxPool, AveragePool, the global
pools) against their ops' NumPy references, every window variant, NaN and inf, and the
separable MaxPool and AveragePool row kernels (pool_rows.c,
GE_HUB_POOL_KERNEL=avx512|avx2|generic) each in a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from .nn_cases import check, random_array, with_specials

# -- pools ----------------------------------------------------------------------------------

POOL_CASES = {
    "resnet": ((1, 3, 13, 12), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "ceil_mode": ((2, 2, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    "ceil_mode_pads": ((1, 2, 7, 10), dict(kernel_shape=[3, 3], strides=[3, 3], ceil_mode=1,
                                           pads=[1, 0, 1, 1])),
    "dilation": ((1, 3, 11, 9), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 0, 2])),
    "asymmetric_pads": ((1, 2, 6, 7), dict(kernel_shape=[3, 3], pads=[0, 2, 2, 0])),
    "same_upper": ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    "same_lower": ((1, 2, 7, 8), dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER")),
    "pool1d": ((2, 3, 15), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    "pool3d": ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2],
                                     pads=[0, 1, 1, 1, 0, 0])),
    # the windows CNNs use, on rows long enough for full vectors and a masked tail
    "squeezenet_ceil": ((1, 3, 37, 53), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "3x3_s2_floor": ((2, 2, 18, 41), dict(kernel_shape=[3, 3], strides=[2, 2])),
    "2x2_s2": ((1, 3, 17, 35), dict(kernel_shape=[2, 2], strides=[2, 2])),
    "2x2_s2_ceil": ((1, 2, 9, 35), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    "3x3_s1_pad1": ((1, 3, 11, 45), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "5x4_s2_pads": ((1, 2, 13, 51), dict(kernel_shape=[5, 4], strides=[2, 2],
                                         pads=[2, 1, 1, 2])),
    "stride3_wide": ((1, 2, 7, 70), dict(kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1])),
    "dilation_wide": ((1, 2, 9, 49), dict(kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 2])),
    "one_column": ((1, 2, 9, 1), dict(kernel_shape=[3, 1], strides=[2, 1], pads=[1, 0, 1, 0])),
    # read straight from X by the AVX-512 row kernel (stride 1 or 2, up to 3 columns):
    # output rows of 15-17, 31-33 and 47-49 (chunk edges), left padding, k of 1 and 2,
    # ceil_mode cells past the row, and SqueezeNet's and ResNet's pools at full size
    "direct_s2_pad_wide": ((1, 2, 15, 67), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                pads=[1, 1, 1, 1])),
    "direct_s2_chunk_edges": ((1, 2, 7, 97), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                  ceil_mode=1)),
    "direct_s2_k1": ((1, 2, 9, 65), dict(kernel_shape=[3, 1], strides=[2, 2])),
    "direct_s2_k2_pad": ((1, 2, 9, 66), dict(kernel_shape=[1, 2], strides=[1, 2],
                                             pads=[0, 1, 0, 1])),
    "direct_s1_k2": ((1, 2, 6, 33), dict(kernel_shape=[2, 2], pads=[0, 1, 1, 0])),
    "direct_s1_k1_rows": ((1, 2, 12, 49), dict(kernel_shape=[5, 1], strides=[3, 1],
                                               pads=[2, 0, 2, 0])),
    "direct_squeezenet": ((1, 4, 111, 111), dict(kernel_shape=[3, 3], strides=[2, 2])),
    "direct_resnet_stem": ((1, 2, 112, 112), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                  pads=[1, 1, 1, 1])),
    # a window that is the whole plane: the global pools' pass
    "whole_plane": ((2, 3, 7, 9), dict(kernel_shape=[7, 9])),
    "whole_plane_1d": ((2, 3, 11), dict(kernel_shape=[11])),
    # planes too large for the whole-plane path (NN_POOL_PLANE_MAX): a row at a time
    "large_plane_3x3_s2": ((1, 2, 131, 133), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                  pads=[1, 1, 1, 1])),
    "large_plane_s1_ceil": ((1, 1, 129, 141), dict(kernel_shape=[3, 2], strides=[1, 2],
                                                   pads=[1, 0, 0, 1], ceil_mode=1)),
    # rows wider than the separable paths keep on the stack (NN_POOL_ROW_MAX)
    "wide_rows": ((1, 1, 3, 4099), dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 1])),
}


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool(rng, case):
    shape, attrs = POOL_CASES[case]
    check("MaxPool", [random_array(rng, shape)], attrs)
    check("MaxPool", [random_array(rng, shape)], attrs, outputs=2)


def test_max_pool_indices_column_major_and_ties(rng):
    shape, attrs = POOL_CASES["resnet"]
    check("MaxPool", [random_array(rng, shape)], dict(attrs, storage_order=1), outputs=2)
    check("MaxPool", [random_array(rng, POOL_CASES["pool3d"][0])],
          dict(POOL_CASES["pool3d"][1], storage_order=1), outputs=2)
    # Ties: integers in a small range repeat; the first maximum in tap order wins.
    x = rng.integers(-2, 3, size=(1, 2, 7, 7)).astype(np.float32)
    check("MaxPool", [x], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), outputs=2)


def test_max_pool_nan_and_infinities(rng):
    shape, attrs = POOL_CASES["resnet"]
    x = with_specials(random_array(rng, shape), rng)
    check("MaxPool", [x], attrs)  # rows first, then columns: a NaN still wins
    check("MaxPool", [x], attrs, outputs=2)
    # An input of -inf: the winner is the first tap inside X, never the padding.
    check("MaxPool", [np.full((1, 1, 5, 5), -np.inf, np.float32)], attrs, outputs=2)


def test_max_pool_nan_everywhere_in_long_rows(rng):
    """NaN and inf at many places, so they land in vector lanes, masked tails, the left
    and right padding and ceil_mode's extra cells."""
    for case in ("squeezenet_ceil", "2x2_s2", "3x3_s1_pad1", "5x4_s2_pads", "direct_s2_pad_wide",
                 "direct_s2_chunk_edges", "direct_s1_k2"):
        shape, attrs = POOL_CASES[case]
        x = random_array(rng, shape)
        flat = x.reshape(-1)
        picks = rng.choice(flat.size, 24, replace=False)
        flat[picks] = np.tile(np.array([np.nan, np.inf, -np.inf], np.float32), 8)
        flat[-1] = np.nan  # the last column of the last row: a ceil_mode window's edge
        check("MaxPool", [x], attrs)


@pytest.mark.parametrize("variant", ["avx512", "avx2", "generic"])
def test_pool_row_kernels(variant):
    """Each row kernel the CPU runs (a variant it lacks falls back to a lesser one) passes
    this file's MaxPool and AveragePool tests in a process of its own, the variant picked
    once per process."""
    env = dict(os.environ, GE_HUB_POOL_KERNEL=variant)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         "-k", "(max_pool or average_pool) and not row_kernels"],
        env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES)
def test_average_pool(rng, case, count_include_pad):
    shape, attrs = POOL_CASES[case]
    check("AveragePool", [random_array(rng, shape)],
          dict(attrs, count_include_pad=count_include_pad))


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_nan_and_infinities(rng, count_include_pad):
    shape, attrs = POOL_CASES["resnet"]
    attrs = dict(attrs, count_include_pad=count_include_pad)
    check("AveragePool", [with_specials(random_array(rng, shape), rng)], attrs)
    # NaN, inf and -inf at many places: vector lanes, masked tails, rows summed into the
    # buffer, the columns next to the padding and ceil_mode's extra cells
    for case in ("squeezenet_ceil", "2x2_s2_ceil", "3x3_s1_pad1", "5x4_s2_pads",
                 "stride3_wide"):
        shape, attrs = POOL_CASES[case]
        x = random_array(rng, shape)
        flat = x.reshape(-1)
        picks = rng.choice(flat.size, 24, replace=False)
        flat[picks] = np.tile(np.array([np.nan, np.inf, -np.inf], np.float32), 8)
        flat[-1] = np.inf
        check("AveragePool", [x], dict(attrs, count_include_pad=count_include_pad))


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_cnn_windows(rng, count_include_pad):
    """The windows of Inception (3x3, stride 1, pad 1), ShuffleNet and DenseNet (3x3 and
    2x2, stride 2) on odd sizes, many planes, so the work splits across threads."""
    for shape, attrs in [((2, 9, 17, 19), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
                         ((1, 6, 29, 27), dict(kernel_shape=[3, 3], strides=[2, 2],
                                               pads=[1, 1, 1, 1])),
                         ((1, 5, 15, 33), dict(kernel_shape=[2, 2], strides=[2, 2],
                                               ceil_mode=1)),
                         ((1, 3, 7, 7), dict(kernel_shape=[7, 7]))]:
        check("AveragePool", [random_array(rng, shape)],
              dict(attrs, count_include_pad=count_include_pad))


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (2, 3, 9), (1, 2, 3, 4, 5), (2, 5),
                                   (1, 4, 67, 61)])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(rng, op, shape):
    check(op, [random_array(rng, shape)])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_nan_and_infinities(rng, op):
    x = random_array(rng, (2, 3, 4, 5))
    x[0, 0, 1, 1], x[0, 1, 2, 2], x[1, 2, 0, 3] = np.nan, np.inf, -np.inf
    check(op, [x])
