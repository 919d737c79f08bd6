"""The resize family's C kernel (core/kernels/resize.c: Resize, nearest and linear)
against the op's NumPy reference, and the variants left to the fallback.
"""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.kernels import resize as resize_kernels
from ge_hub.ops import get_schema
from ge_hub.passes.select_kernels import choose_kernel, is_fallback

from .nn_cases import EXACT, check, compile_op, random_array, with_specials

# -- Resize ---------------------------------------------------------------------------------

RESIZE_CASES = {
    "nearest_up": (dict(mode="nearest"), [1, 1, 2, 3], None),
    "nearest_down_floor": (dict(mode="nearest", nearest_mode="floor"), [1, 1, 0.5, 0.6], None),
    "nearest_asymmetric_ceil": (dict(mode="nearest", nearest_mode="ceil",
                                     coordinate_transformation_mode="asymmetric"),
                                [1, 1, 1.7, 2.5], None),
    "nearest_sizes": (dict(mode="nearest", nearest_mode="round_prefer_ceil"), None,
                      [2, 3, 11, 4]),
    "linear_half_pixel": (dict(mode="linear"), [1, 1, 2, 1.5], None),
    "linear_align_corners": (dict(mode="linear", coordinate_transformation_mode="align_corners"),
                             None, [2, 3, 9, 13]),
    "linear_pytorch": (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
                       [1, 1, 0.6, 2], None),
    "linear_asymmetric": (dict(mode="linear", coordinate_transformation_mode="asymmetric"),
                          [1, 1, 1.3, 0.8], None),
    "linear_symmetric": (dict(mode="linear",
                              coordinate_transformation_mode="half_pixel_symmetric"),
                         [1, 1, 2.5, 1.25], None),
    "linear_exclude_outside": (dict(mode="linear", exclude_outside=1), [1, 1, 1.6, 2.2], None),
    "linear_one_axis": (dict(mode="linear"), [1, 1, 1, 2], None),
    "linear_axes_attr": (dict(mode="linear", axes=[2, 3]), [2.0, 0.7], None),
    "linear_keep_aspect": (dict(mode="linear", keep_aspect_ratio_policy="not_larger",
                                axes=[2, 3]), None, [10, 10]),
}


@pytest.mark.parametrize("case", RESIZE_CASES)
def test_resize(rng, case):
    attrs, scales, sizes = RESIZE_CASES[case]
    x = random_array(rng, (2, 3, 5, 7))
    inputs = [x, None,
              None if scales is None else np.array(scales, np.float32),
              None if sizes is None else np.array(sizes, np.int64)]
    check("Resize", inputs, attrs, consts=(2, 3))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_large_enough_to_split_over_slots(rng, mode):
    x = random_array(rng, (2, 8, 33, 47))
    check("Resize", [x, None, np.array([1, 1, 2, 1.5], np.float32)], {"mode": mode},
          consts=(2,))


def test_resize_nan_and_infinities(rng):
    x = with_specials(random_array(rng, (1, 2, 4, 5)), rng)
    check("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "nearest"},
          consts=(2,))
    check("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"},
          consts=(2,))


@pytest.mark.parametrize("attrs, scales, has_kernel", [
    (dict(mode="linear"), [1, 1, 2, 2], True),
    (dict(mode="cubic"), [1, 1, 2, 2], False),
    (dict(mode="linear"), [1, 2, 2, 2], False),  # a channel axis that moves
    (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"), [1, 1, 2, 2],
     False),
    (dict(mode="linear", antialias=1), [1, 1, 0.5, 0.6], False),  # antialiased downsampling
    (dict(mode="cubic", antialias=1), [1, 1, 0.5, 0.6], False),
])
def test_resize_variants_without_a_kernel_are_left_to_the_fallback(rng, attrs, scales,
                                                                    has_kernel):
    inputs = [random_array(rng, (1, 2, 4, 5)),
              np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8], np.float32),
              np.array(scales, np.float32)]
    with es.GraphBuilder("g") as gb:
        y = es.resize(es.input("x", "float32", [1, 2, 4, 5]), es.const(inputs[1]),
                      es.const(inputs[2]), **attrs)
        gb.output(y, "y")
    kernel = choose_kernel(y.value.producer)
    assert is_fallback(kernel) != has_kernel, kernel.name
    # Either way the compiled model answers like the reference; a fallback is counted.
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == (0 if has_kernel else 1)
    np.testing.assert_allclose(model.run({"x": inputs[0]})[0],
                               get_schema("Resize").run_reference(inputs, attrs)[0], **EXACT)


def test_resize_with_an_axis_past_the_table_limit_runs_the_reference(rng, monkeypatch):
    """The packer tabulates taps per cell of every axis: a declared dim of 2**32 must not
    become a 32 GiB table at compile time, so such a Resize is left to the reference."""
    with es.GraphBuilder("g") as gb:
        y = es.resize(es.input("x", "float32", [2**32, 1, 2, 2]), None,
                      es.const(np.array([1, 1, 2, 2], np.float32)))
        gb.output(y, "y")
    assert is_fallback(choose_kernel(y.value.producer))
    monkeypatch.setattr(resize_kernels, "RESIZE_MAX_AXIS", 8)
    x = random_array(rng, (1, 2, 4, 5))
    model, feeds = compile_op("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)],
                              {"mode": "linear"}, consts=(2,))
    assert model.summary()["fallback_steps"] == 1  # the output's W is 10 cells
    np.testing.assert_allclose(
        model.run(feeds)[0],
        get_schema("Resize").run_reference([x, None, np.array([1, 1, 2, 2], np.float32)],
                                           {"mode": "linear"})[0], **EXACT)
