"""The norm family's C kernels (core/kernels/norm.c: BatchNormalization,
LayerNormalization, InstanceNormalization) against their ops' NumPy references; LRN is in
test_norm_lrn.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub.ops import get_schema

from .nn_cases import EXACT, check, compile_op, random_array, with_specials

# -- normalization --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (4, 5), (1, 3, 9), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("constant_stats", [True, False])
def test_batch_norm(rng, shape, constant_stats):
    c = shape[1]
    stats = [random_array(rng, (c,)), random_array(rng, (c,)), random_array(rng, (c,)),
             rng.uniform(0.5, 2.0, size=c).astype(np.float32)]
    check("BatchNormalization", [random_array(rng, shape), *stats], {"epsilon": 1e-3},
          consts=(1, 2, 3, 4) if constant_stats else (), tol=dict(rtol=1e-5, atol=1e-5))


def test_batch_norm_specials(rng):
    x = with_specials(random_array(rng, (2, 3, 4, 5)), rng)
    stats = [random_array(rng, (3,)) for _ in range(3)] + [np.ones(3, np.float32)]
    check("BatchNormalization", [x, *stats], consts=(1, 2, 3, 4),
          tol=dict(rtol=1e-5, atol=1e-5))


@pytest.mark.parametrize("outputs", [3, 1])
def test_batch_norm_training_mode_is_left_to_the_fallback(rng, outputs):
    # The kernel only normalizes with given statistics; training mode runs the reference.
    x = random_array(rng, (2, 3, 4, 5))
    stats = [random_array(rng, (3,)) for _ in range(3)] + [np.ones(3, np.float32)]
    attrs = {"training_mode": 1, "momentum": 0.7}
    model, feeds = compile_op("BatchNormalization", [x, *stats], attrs, outputs=outputs)
    assert model.summary()["fallback_steps"] == 1
    got = model.run(feeds)
    want = get_schema("BatchNormalization").run_reference([x, *stats], attrs)
    assert len(got) == outputs
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **EXACT)


# (X shape, axis, Scale shape, B shape or None)
LAYER_NORM_CASES = {
    "last": ((3, 5, 7), -1, (7,), (7,)),
    "no_bias": ((3, 5, 7), -1, (7,), None),
    "two_axes": ((2, 3, 4, 5), 2, (4, 5), (4, 5)),
    "scale_repeats": ((2, 3, 4, 5), 1, (5,), (1, 4, 5)),
    "scalar_scale": ((4, 9), 1, (1,), ()),
    "whole": ((3, 4), 0, (3, 4), (4,)),
    "long_rows": ((5, 1031), -1, (1031,), (1031,)),
}


@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("case", LAYER_NORM_CASES)
def test_layer_norm(rng, case, outputs):
    shape, axis, scale_shape, bias_shape = LAYER_NORM_CASES[case]
    inputs = [random_array(rng, shape), random_array(rng, scale_shape)]
    if bias_shape is not None:
        inputs.append(random_array(rng, bias_shape))
    check("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-4}, consts=(1, 2),
          outputs=outputs, tol=dict(rtol=1e-4, atol=1e-5))


def test_layer_norm_nan_stays_in_its_row(rng):
    x = random_array(rng, (4, 6))
    x[1, 2] = np.nan
    got = check("LayerNormalization", [x, random_array(rng, (6,)), random_array(rng, (6,))],
                outputs=3, tol=dict(rtol=1e-4, atol=1e-5))
    assert np.isnan(got[0][1]).all() and not np.isnan(got[0][[0, 2, 3]]).any()


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 11), (2, 2, 3, 4, 5)])
def test_instance_norm(rng, shape):
    c = shape[1]
    check("InstanceNormalization",
          [random_array(rng, shape), random_array(rng, (c,)), random_array(rng, (c,))],
          {"epsilon": 1e-4}, consts=(1, 2), tol=dict(rtol=1e-4, atol=1e-5))
