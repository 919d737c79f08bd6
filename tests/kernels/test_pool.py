"""The pool family's C kernels (core/kernels/pool.c: MaxPool, AveragePool, the global
pools) against their ops' NumPy references, every window variant, NaN and inf.
"""

from __future__ import annotations

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
    # rows wider than MaxPool's separable path keeps on the stack (NN_POOL_ROW_MAX)
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


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES)
def test_average_pool(rng, case, count_include_pad):
    shape, attrs = POOL_CASES[case]
    check("AveragePool", [random_array(rng, shape)],
          dict(attrs, count_include_pad=count_include_pad))


def test_average_pool_nan_and_infinities(rng):
    shape, attrs = POOL_CASES["resnet"]
    check("AveragePool", [with_specials(random_array(rng, shape), rng)], attrs)


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
