"""LRN's C kernel (core/kernels/norm_lrn.c) against the op's NumPy reference.

Random non-zero float32 inputs of rank 3 to 5, odd and even window sizes (an even size
reaches one channel further up than down), windows wider than the channel count, spatial
extents below, at and above the kernel's 256-position block, the beta = 0.75 fast path
and the general power, a negative base (NaN), sizes large enough to be split over the
thread pool, and NaN/inf inputs. Other dtypes are left to the counted fallback.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.ops import get_schema

TOLERANCE = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def random_array(rng, shape, dtype=np.float32):
    data = rng.uniform(-3.0, 3.0, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


def compile_lrn(x: np.ndarray, attrs: dict) -> ge_hub.CompiledModel:
    with es.GraphBuilder("lrn") as gb:
        gb.output(es.lrn(es.input("x", x.dtype.name, list(x.shape)), **attrs), "y")
    return ge_hub.compile(gb.graph)


def run_lrn(x: np.ndarray, attrs: dict) -> np.ndarray:
    model = compile_lrn(x, attrs)
    assert model.summary()["fallback_steps"] == 0, model.summary()
    (y,) = model.run({"x": x})
    assert y.dtype == np.float32 and y.shape == x.shape
    return y


def reference(x: np.ndarray, attrs: dict) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return get_schema("LRN").run_reference([x], attrs)[0]


CASES = {
    "alexnet": ((1, 96, 13, 11), dict(size=5, alpha=1e-4, beta=0.75, bias=1.0)),
    "defaults": ((2, 7, 5, 3), dict(size=3)),
    "rank3": ((2, 9, 7), dict(size=3, alpha=0.5, beta=0.75, bias=2.0)),
    "rank5": ((1, 4, 2, 3, 5), dict(size=3, alpha=0.3)),
    "even_size": ((2, 8, 3, 3), dict(size=4, alpha=0.4, beta=0.6)),
    "size_one": ((1, 5, 4, 4), dict(size=1, alpha=0.7, beta=1.0)),
    "wider_than_channels": ((1, 3, 4, 5), dict(size=9, alpha=0.9)),
    "one_channel": ((2, 1, 6, 6), dict(size=5, alpha=0.8)),
    "general_beta": ((1, 6, 9, 9), dict(size=5, alpha=0.6, beta=1.37, bias=0.5)),
    "block_exactly": ((1, 5, 16, 16), dict(size=3, alpha=0.25)),
    "blocks_with_tail": ((2, 6, 17, 19), dict(size=5, alpha=0.25, beta=0.9)),
    "parallel": ((2, 64, 30, 30), dict(size=5, alpha=0.1)),
}


@pytest.mark.parametrize("case", CASES)
def test_lrn_matches_reference(rng, case):
    shape, attrs = CASES[case]
    x = random_array(rng, shape)
    np.testing.assert_allclose(run_lrn(x, attrs), reference(x, attrs), **TOLERANCE)


def test_negative_base_is_nan_as_in_the_reference(rng):
    x = random_array(rng, (1, 6, 5, 5))
    for beta in (0.75, 0.6):
        attrs = dict(size=3, alpha=0.3, beta=beta, bias=-0.5)
        y, want = run_lrn(x, attrs), reference(x, attrs)
        assert np.isnan(want).any() and not np.isnan(want).all()
        np.testing.assert_allclose(y, want, equal_nan=True, **TOLERANCE)


def windowed_lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float):
    """ONNX's formula with each channel window summed directly, in float64.

    The op's reference sums windows as differences of a cumulative sum over channels,
    which spreads a NaN or inf into every later channel (inf - inf); the formula, and
    the kernel, confine it to the windows that contain it.
    """
    work = x.astype(np.float64)
    channels = x.shape[1]
    below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
    y = np.empty_like(work)
    with np.errstate(invalid="ignore"):
        for c in range(channels):
            window = work[:, max(0, c - below):min(channels, c + above + 1)]
            square_sum = np.sum(window * window, axis=1)
            y[:, c] = work[:, c] / (bias + alpha / size * square_sum) ** beta
    return y.astype(np.float32)


def test_nan_and_inf_stay_within_their_windows(rng):
    x = random_array(rng, (1, 9, 4, 4))
    x[0, 1, 0, 0] = np.nan
    x[0, 4, 1, 2] = np.inf
    x[0, 7, 3, 3] = -np.inf
    attrs = dict(size=3, alpha=0.2, beta=0.75, bias=1.0)
    y = run_lrn(x, attrs)
    np.testing.assert_allclose(y, windowed_lrn(x, **attrs), equal_nan=True, **TOLERANCE)
    # The NaN reaches channels 0 to 2 at its position and nothing else.
    assert np.isnan(y[0, :3, 0, 0]).all() and not np.isnan(y[0, 3:, 0, 0]).any()
    # Away from the special values the kernel agrees with the reference.
    clean = (slice(None), slice(None), 2, slice(None))
    np.testing.assert_allclose(y[clean], reference(x, attrs)[clean], **TOLERANCE)


def test_in_a_graph_the_input_stays_intact(rng):
    x = random_array(rng, (2, 8, 5, 5))
    attrs = dict(size=5, alpha=0.5)
    with es.GraphBuilder("relu_lrn_add") as gb:
        relu = es.relu(es.input("x", "float32", list(x.shape)))
        gb.output(es.lrn(relu, **attrs) + relu, "y")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0
    relu_x = np.maximum(x, 0)
    np.testing.assert_allclose(model.run({"x": x})[0], reference(relu_x, attrs) + relu_x,
                               **TOLERANCE)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_dtypes_fall_back_counted(rng, dtype):
    x = random_array(rng, (1, 4, 3, 3), dtype)
    model = compile_lrn(x, dict(size=3))
    (y,) = model.run({"x": x})
    assert model.summary()["fallback_ops"] == {"LRN": 1}
    np.testing.assert_allclose(y, reference(x, dict(size=3)), rtol=1e-3)


def test_a_truncated_or_padded_blob_is_an_error_not_a_crash(rng):
    x = random_array(rng, (1, 4, 3, 3))
    plan = compile_lrn(x, dict(size=3)).plan
    (step,) = plan.steps
    for blob in (step.attrs[:-8], step.attrs + bytes(8), b""):
        executor = Executor(dataclasses.replace(plan, steps=(dataclasses.replace(step,
                                                                                 attrs=blob),)))
        with pytest.raises(KernelError, match="attribute blob"):
            executor.run([x])
