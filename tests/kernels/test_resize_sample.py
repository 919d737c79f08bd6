"""GridSample and RoiAlign's C kernels (core/kernels/resize_sample.c) against their ops'
NumPy references (ge_hub/ops/resize.py).

Each case compiles a one-node graph, checks that no step runs Python and compares with
the reference on random non-zero inputs: every GridSample mode and padding mode with and
without align_corners, 1, 2 and 3 spatial axes, grids reaching well outside [-1, 1] and
landing exactly half-way between pixels; RoiAlign in avg and max mode, both coordinate
transformations, fixed and adaptive sampling ratios, rois partly or wholly outside the
map, several images. A batch index out of range and a roi so large that sampling it would
take hours are errors naming the input; float64
falls back, counted; a malformed blob is an error, not a crash.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.ops import get_schema

TOLERANCE = dict(rtol=2e-5, atol=2e-5)


def compile_node(op, inputs, attrs, consts=()):
    feeds = {}
    with es.GraphBuilder(op.lower()) as gb:
        args = []
        for i, array in enumerate(inputs):
            if i in consts:
                args.append(es.const(array))
            else:
                feeds[f"x{i}"] = array
                args.append(es.input(f"x{i}", array.dtype.name, list(array.shape)))
        gb.output(es.op(op, *args, **attrs), "y")
    return ge_hub.compile(gb.graph), feeds


def check(op, inputs, attrs, consts=()):
    model, feeds = compile_node(op, inputs, attrs, consts)
    assert model.summary()["python_steps"] == 0, model.summary()
    (got,) = model.run(feeds)
    want = get_schema(op).run_reference(inputs, attrs)
    want = want[0] if isinstance(want, (tuple, list)) else want
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **TOLERANCE)


def random_array(rng, shape, low=-1.0, high=1.0, dtype=np.float32):
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


# -- GridSample ---------------------------------------------------------------------------

SPATIAL = {1: ((2, 3, 7), (2, 5, 1)), 2: ((2, 3, 6, 7), (2, 4, 5, 2)),
           3: ((1, 2, 3, 4, 5), (1, 2, 3, 3, 3))}


# ONNX defines cubic GridSample for 2 spatial axes only.
GRID_CASES = [(mode, spatial) for mode in ("linear", "nearest", "cubic") for spatial in (1, 2, 3)
              if mode != "cubic" or spatial == 2]


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize(("mode", "spatial"), GRID_CASES)
def test_grid_sample(rng, mode, padding_mode, align_corners, spatial):
    x_shape, grid_shape = SPATIAL[spatial]
    x = random_array(rng, x_shape, -2, 2)
    grid = random_array(rng, grid_shape, -1.7, 1.7)
    # exact half-way points and the corners
    flat = grid.reshape(-1)
    size = x_shape[-1]
    flat[:4] = [-1.0, 1.0, 0.0, (2 * 0.5 + 1) / size - 1]
    check("GridSample", [x, grid], dict(mode=mode, padding_mode=padding_mode,
                                        align_corners=align_corners))


def test_grid_sample_with_a_constant_grid_and_many_channels(rng):
    x = random_array(rng, (1, 37, 9, 11))
    grid = random_array(rng, (1, 13, 17, 2), -1.1, 1.1)
    check("GridSample", [x, grid], {}, consts=(1,))


# -- RoiAlign -----------------------------------------------------------------------------

def _rois(rng, count, height, width, scale):
    x1 = rng.uniform(-2, width / scale, count)
    y1 = rng.uniform(-2, height / scale, count)
    w = rng.uniform(0.3, width / scale, count)
    h = rng.uniform(0.3, height / scale, count)
    return np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align(rng, mode, transform, sampling_ratio):
    x = random_array(rng, (2, 5, 11, 13), -3, 3)
    scale = 0.5
    rois = _rois(rng, 7, 11, 13, scale)
    rois[0] = [100, 100, 120, 130]  # wholly outside: zeros
    rois[1] = [-30, -30, 2, 2]      # mostly outside
    indices = np.array([0, 1, 1, 0, 1, 0, 1], np.int64)
    check("RoiAlign", [x, rois, indices],
          dict(mode=mode, coordinate_transformation_mode=transform, output_height=3,
               output_width=4, sampling_ratio=sampling_ratio, spatial_scale=scale))


def test_roi_align_bad_batch_index_is_an_error(rng):
    x = random_array(rng, (2, 3, 5, 5))
    rois = _rois(rng, 2, 5, 5, 1.0)
    model, feeds = compile_node("RoiAlign", [x, rois, np.array([0, 1], np.int64)], {})
    feeds["x2"] = np.array([0, 2], np.int64)
    with pytest.raises(KernelError, match="batch_indices"):
        model.run(feeds)


def test_roi_align_huge_roi_is_an_error_not_a_hang(rng):
    x = random_array(rng, (1, 2, 5, 5))
    rois = _rois(rng, 1, 5, 5, 1.0)
    model, feeds = compile_node("RoiAlign", [x, rois, np.zeros(1, np.int64)], {})
    feeds["x1"] = np.array([[0, 0, 1e9, 1e9]], np.float32)
    with pytest.raises(KernelError, match="roi 0 of input 'rois' needs"):
        model.run(feeds)


def test_float64_falls_back_counted(rng):
    x = random_array(rng, (1, 2, 4, 4), dtype=np.float64)
    grid = random_array(rng, (1, 3, 3, 2), dtype=np.float64)
    model, _ = compile_node("GridSample", [x, grid], {})
    assert model.summary()["fallback_ops"] == {"GridSample": 1}


@pytest.mark.parametrize("op", ["GridSample", "RoiAlign"])
def test_a_truncated_or_padded_blob_is_an_error_not_a_crash(rng, op):
    if op == "GridSample":
        inputs = [random_array(rng, (1, 2, 4, 4)), random_array(rng, (1, 3, 3, 2))]
    else:
        inputs = [random_array(rng, (1, 2, 4, 4)), _rois(rng, 2, 4, 4, 1.0),
                  np.zeros(2, np.int64)]
    model, feeds = compile_node(op, inputs, {})
    plan = model.plan
    (step,) = plan.steps
    for blob in (step.attrs[:-8], step.attrs + bytes(8), b""):
        bad = dataclasses.replace(plan, steps=(dataclasses.replace(step, attrs=blob),))
        with pytest.raises(KernelError, match="attribute blob"):
            Executor(bad).run(list(feeds.values()))
