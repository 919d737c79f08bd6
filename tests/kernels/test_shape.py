"""The shape-family C kernels (core/kernels/shape.c) against their ops' NumPy references.

Each case builds a small graph with ES, compiles it, checks that no step fell back to
Python, and compares the C result with the reference evaluator bit for bit (these
kernels only move elements): odd sizes, every kind of axis and broadcast, negative
steps and pads, sizes past the parallel grain, every element size (so every dtype the
kernels claim), NaN and inf carried through, and chains that tempt in-place reuse.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.emit import emit_plan
from ge_hub.errors import OpError
from ge_hub.executor import Executor, KernelError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType
from ge_hub.kernels import shape as shape_kernels
from ge_hub.kernels.base import pack_values
from ge_hub.kernels.shape_strided import collapse
from ge_hub.passes.schedule import schedule
from ge_hub.passes.select_kernels import select_kernels
from ge_hub.reference import evaluate

# Every dtype: the kernels work by element size (1, 2, 4, 8 bytes) and claim them all.
ALL_DTYPES = [d.value for d in DType]
MAIN_DTYPES = ["float32", "int32", "int64", "bool"]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def random_array(rng, shape, dtype="float32"):
    """Random non-zero data of any ge-hub dtype."""
    dtype = DType.parse(dtype).numpy
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        low = 1 if np.issubdtype(dtype, np.unsignedinteger) else -100
        data = rng.integers(low, 100, size=shape)
        data[data == 0] = 7
        return data.astype(dtype)
    data = rng.uniform(-3.0, 3.0, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


def with_specials(x: np.ndarray) -> np.ndarray:
    """x with NaN, inf and -inf in its first elements, when it is a float of some size."""
    if x.dtype.kind == "f" or x.dtype == DType.BFLOAT16.numpy:
        flat = x.reshape(-1)
        flat[: min(3, flat.size)] = np.array([np.nan, np.inf, -np.inf], x.dtype)[: flat.size]
    return x


def as_bytes(x: np.ndarray) -> np.ndarray:
    """The bytes of x, so that comparisons are exact (NaN included)."""
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def check(build, arrays, *, kernels=None):
    """Build a graph whose inputs have the arrays' dtypes and shapes (`build(*inputs)`
    returns its outputs), run it compiled and through the reference, and require equal
    results with no Python fallback. Returns the compiled model."""
    with es.GraphBuilder("g") as gb:
        inputs = [es.input(f"x{i}", str(a.dtype), list(a.shape)) for i, a in enumerate(arrays)]
        outputs = build(*inputs)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        for i, out in enumerate(outputs):
            gb.output(out, f"y{i}")
    model = ge_hub.compile(gb.graph)
    feed = {f"x{i}": a for i, a in enumerate(arrays)}
    got = model.run(feed)
    want = evaluate(gb.graph, feed)
    summary = model.summary()
    assert summary["fallback_steps"] == 0, summary
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(as_bytes(g), as_bytes(w))
    if kernels is not None:
        assert sorted({s.kernel for s in model.plan.steps}) == sorted(kernels)
    return model


# -- the strided walk ------------------------------------------------------------------------


@pytest.mark.parametrize("shape, strides, want", [
    ((3, 4, 5), (20, 5, 1), ([60], [1])),
    ((3, 1, 5), (5, 5, 1), ([15], [1])),
    ((3, 5), (1, 3), ([3, 5], [1, 3])),
    ((2, 3, 4), (0, 0, 1), ([6, 4], [0, 1])),
    ((1, 1), (7, 7), ([1], [1])),
    ((4, 3), (-3, 1), ([4, 3], [-3, 1])),
])
def test_collapse_merges_dims_that_walk_as_one(shape, strides, want):
    assert collapse(shape, strides) == want


# -- Transpose ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape, perm", [
    ((3, 5, 7), (2, 0, 1)),
    ((3, 5, 7), (1, 0, 2)),       # innermost dim stays: row copies
    ((3, 5, 7), (0, 2, 1)),       # a batch of matrix transposes: the tiled path
    ((3, 5, 7), None),            # default: reversed
    ((2, 1, 5, 1), (3, 2, 1, 0)),
    ((2, 33, 17, 19), (0, 2, 3, 1)),   # NCHW -> NHWC, past the parallel grain
    ((131, 257), (1, 0)),
    ((1030, 5), (1, 0)),          # tiled across more than one span of the last dim
    ((1,), (0,)),
    ((4, 0, 3), (2, 1, 0)),
])
def test_transpose_matches_reference(shape, perm, rng):
    x = random_array(rng, shape)
    check(lambda x: es.transpose(x, perm=perm), [x], kernels=["movement_transpose"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_transpose_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (3, 9, 11), dtype))
    check(lambda x: [es.transpose(x, perm=[0, 2, 1]), es.transpose(x, perm=[2, 0, 1])], [x])


# -- Slice -------------------------------------------------------------------------------

BIG = 2**31 - 1


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [4], None, None),
    ([1, 2], [-1, 100], [0, 2], [1, 3]),
    ([-1], [-BIG - 1], [1], [-1]),               # reversed whole axis
    ([5, 6], [-100, 0], [0, -1], [-2, -3]),      # negative steps, clamped bounds
    ([0, 0, 0], [BIG, BIG, BIG], [2, 0, 1], [2, 2, 2]),
    ([3], [1], [2], [1]),                        # empty
    ([2, 1], [3, 4], [0, 1], None),              # the inner dims stay contiguous
])
def test_slice_matches_reference(starts, ends, axes, steps, rng):
    x = random_array(rng, (7, 9, 11))
    check(lambda x: es.slice(x, starts, ends, axes, steps), [x], kernels=["movement_slice"])


def test_slice_with_int32_bounds_and_a_large_input(rng):
    x = random_array(rng, (64, 129, 33))
    bounds = [np.array(v, np.int32) for v in ([60, 3], [-BIG - 1, 120], [0, 1], [-3, 2])]
    check(lambda x: es.slice(x, *bounds), [x])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_slice_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (5, 6, 7), dtype))
    check(lambda x: es.slice(x, [-1, 1], [0, 6], [0, 2], [-2, 2]), [x])


def test_slice_of_runtime_bounds_falls_back_to_the_reference():
    # Bounds computed at run time would leave the output shape unknown; with constant
    # bounds the kernel is chosen, as every other test shows.
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [4, 5])
        gb.output(es.slice(x, [1], [3]), "y")
    graph = gb.graph
    node = graph.nodes[0]
    starts = graph.add_input("starts", TensorType(DType.INT64, (1,)))
    node.set_input(1, starts)
    select_kernels(graph)
    assert node.meta["kernel"].name.startswith("reference:")


# -- Expand, Tile ------------------------------------------------------------------------


@pytest.mark.parametrize("shape, target", [
    ((), [3, 5]),                 # scalar
    ((7,), [5, 7]),               # row
    ((5, 1), [5, 7]),             # column
    ((3, 1, 4), [3, 5, 4]),       # middle axis
    ((3, 1), [2, 1, 4]),          # both sides, and a rank mismatch
    ((2, 3), [1, 1]),             # 1s keep the input dims
    ((1, 61), [301, 61]),         # past the parallel grain
    ((4, 1, 1), [4, 33, 65]),     # innermost broadcast: one element repeated
])
def test_expand_matches_reference(shape, target, rng):
    x = random_array(rng, shape)
    check(lambda x: es.expand(x, target), [x], kernels=["movement_expand"])


@pytest.mark.parametrize("shape, repeats", [
    ((3, 5), [2, 3]),
    ((2, 3, 4), [1, 1, 1]),
    ((2, 3, 4), [3, 1, 2]),
    ((1, 7), [5, 1]),
    ((3, 2), [0, 2]),
    ((33, 65), [4, 3]),
])
def test_tile_matches_reference(shape, repeats, rng):
    x = random_array(rng, shape)
    check(lambda x: es.tile(x, repeats), [x], kernels=["movement_tile"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_expand_and_tile_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (3, 1, 5), dtype))
    check(lambda x: [es.expand(x, [2, 3, 4, 5]), es.tile(x, [2, 3, 1])], [x])


# -- DepthToSpace, SpaceToDepth ----------------------------------------------------------


@pytest.mark.parametrize("shape, blocksize, mode", [
    ((2, 8, 3, 5), 2, "DCR"),
    ((2, 8, 3, 5), 2, "CRD"),
    ((1, 27, 4, 3), 3, "DCR"),
    ((1, 27, 4, 3), 3, "CRD"),
    ((1, 5, 3, 3), 1, "DCR"),
])
def test_depth_to_space_matches_reference(shape, blocksize, mode, rng):
    x = random_array(rng, shape)
    check(lambda x: es.depth_to_space(x, blocksize=blocksize, mode=mode), [x],
          kernels=["movement_depth_to_space"])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape, blocksize", [((2, 3, 4, 6), 2), ((1, 5, 9, 3), 3)])
def test_space_to_depth_matches_reference(shape, blocksize, mode, rng):
    x = random_array(rng, shape)
    check(lambda x: es.space_to_depth(x, blocksize=blocksize, mode=mode), [x],
          kernels=["movement_space_to_depth"])


@pytest.mark.parametrize("dtype", MAIN_DTYPES + ["float16", "int8"])
def test_depth_space_round_trip_every_size(dtype, rng):
    x = random_array(rng, (2, 12, 3, 5), dtype)
    check(lambda x: es.space_to_depth(es.depth_to_space(x, blocksize=2, mode="CRD"),
                                      blocksize=2, mode="CRD"), [x])


# -- Concat, Split -----------------------------------------------------------------------


@pytest.mark.parametrize("shapes, axis", [
    ([(3, 5), (4, 5)], 0),
    ([(3, 5), (3, 1), (3, 7)], 1),
    ([(2, 3, 4), (2, 5, 4), (2, 1, 4)], -2),
    ([(2, 3, 4), (2, 3, 0), (2, 3, 5)], 2),        # an empty part
    ([(257, 301), (257, 3)], 1),                    # many rows: parallel
    ([(300, 301), (100, 301)], 0),                  # one big block per part
    ([(5,)], 0),
])
def test_concat_matches_reference(shapes, axis, rng):
    arrays = [random_array(rng, s) for s in shapes]
    check(lambda *xs: es.concat(*xs, axis=axis), arrays, kernels=["movement_concat"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_concat_every_dtype(dtype, rng):
    arrays = [with_specials(random_array(rng, (3, n, 2), dtype)) for n in (1, 4, 2)]
    check(lambda *xs: es.concat(*xs, axis=1), arrays)


@pytest.mark.parametrize("shape, axis, split, num_outputs", [
    ((7, 5), 0, [2, 5], None),
    ((3, 10, 2), 1, [1, 0, 6, 3], None),
    ((3, 10, 2), -2, None, 3),        # ceil parts, a smaller last one
    ((4, 9), 1, None, 3),
    ((301, 257), 1, [100, 157], None),
    ((5, 6), 0, [5], None),
])
def test_split_matches_reference(shape, axis, split, num_outputs, rng):
    x = random_array(rng, shape)
    count = len(split) if split is not None else num_outputs
    check(lambda x: list(es.split(x, split, axis=axis, num_outputs=num_outputs,
                                  outputs=count)), [x], kernels=["movement_split"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_split_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (3, 7, 2), dtype))
    check(lambda x: list(es.split(x, [2, 4, 1], axis=1, outputs=3)), [x])


# -- Pad ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("shape, pads, axes", [
    ((3, 5), [1, 2, 3, 1], None),
    ((2, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], None),   # NCHW spatial padding
    ((2, 3, 4, 5), [2, 1, 1, 3], [1, -1]),
    ((3, 7), [0, -2, 1, 2], None),                    # negative pads crop first
    ((4, 6), [-1, 3, -2, 1], None),
    ((33, 129), [2, 5, 3, 1], None),                  # past the parallel grain
    ((6, 4), [0, 0, 0, 0], None),
])
def test_pad_matches_reference(mode, shape, pads, axes, rng):
    x = random_array(rng, shape)
    check(lambda x: es.pad(x, pads, None, axes, mode=mode), [x], kernels=["movement_pad"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_pad_with_a_runtime_constant_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (3, 4, 5), dtype))
    value = random_array(rng, (), dtype)
    check(lambda x, v: [es.pad(x, [1, 0, 2, 0, 3, 1], v),
                        es.pad(x, [1, 2, 1, 2], mode="reflect", axes=[0, 2])], [x, value])


def test_pad_with_nan_constant_and_an_empty_input(rng):
    x = random_array(rng, (0, 3))
    nan = np.array(np.nan, np.float32)
    check(lambda x, v: es.pad(x, [2, 1, 1, 0], v), [x, nan])


def test_pad_of_a_dim_of_2_32_packs_only_its_padding():
    """Fuzz finding: the packer padded an index ramp as long as the dim (32 GiB for a dim
    of 2**32). Only the padded cells are mapped now; the plan is not run (64 GiB)."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2, 2**32])
        gb.output(es.pad(x, [0, 1, 0, 2], mode="reflect"), "y")
    model = ge_hub.compile(gb.graph)
    (step,) = model.plan.steps
    assert step.kernel == "movement_pad" and len(step.attrs) < 256


def test_pad_wider_than_the_map_budget_runs_the_reference(rng, monkeypatch):
    monkeypatch.setattr(shape_kernels, "MAX_PAD_MAP_ENTRIES", 4)
    x = random_array(rng, (3, 4))
    with es.GraphBuilder("g") as gb:
        gb.output(es.pad(es.input("x", "float32", [3, 4]), [1, 2, 1, 1], mode="wrap"), "y")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 1
    (got,) = model.run({"x": x})
    np.testing.assert_array_equal(got, np.pad(x, [(1, 1), (2, 1)], mode="wrap"))


def test_pad_cropping_more_than_a_dim_is_refused_by_inference():
    """Inference said 0 rows where the reference (crop, then pad) made 2: refused now."""
    with pytest.raises(OpError, match="crops more than dim 0"):
        with es.GraphBuilder("g"):
            es.pad(es.input("x", "float32", [2, 3]), [1, 0, -3, 0])


# -- ConstantOfShape: folded at compile time unless huge, so run its kernel from a plan ---


def run_plan_of(graph: Graph, inputs):
    """Run a graph whose types are already static without specializing (which folds
    constant-input nodes): kernels, schedule, plan, executor."""
    select_kernels(graph)
    schedule(graph)
    plan = emit_plan(graph)
    assert not any(s.kernel.startswith("reference:") for s in plan.steps), plan.steps
    return Executor(plan).run(inputs), plan


@pytest.mark.parametrize("value", [
    np.array([2.5], np.float32), np.array([-7], np.int32), np.array([1 << 40], np.int64),
    np.array([True]), np.array([np.nan], np.float32), np.array([-3], np.int8),
    np.array([1.5], np.float16), np.array([0], np.int64),
])
def test_constant_of_shape_fills_with_the_value(value):
    graph = Graph("g")
    shape = graph.add_constant(np.array([3, 0, 2], np.int64) if value[0] == 0
                               else np.array([37, 1001], np.int64))
    dims = tuple(int(d) for d in shape.const)
    node = graph.add_node("ConstantOfShape", [shape],
                          [TensorType(DType.from_numpy(value.dtype), dims)], {"value": value})
    graph.set_outputs(node.outputs)
    (got,), _ = run_plan_of(graph, [])
    want = np.full(dims, value[0], value.dtype)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


# -- malformed plans ---------------------------------------------------------------------


def test_a_blob_reading_outside_the_input_is_rejected(rng):
    x = random_array(rng, (4, 6))
    model = check(lambda x: es.transpose(x), [x])
    (step,) = model.plan.steps
    # A walk of the right output size whose strides reach past the input must fail, not
    # read past it: elem 4, 2 dims, base 0, shape [6, 4], strides [1, 7].
    bad = dataclasses.replace(step, attrs=pack_values([4, 2, 0, 6, 4, 1, 7]))
    with pytest.raises(KernelError, match="reads elements"):
        Executor(dataclasses.replace(model.plan, steps=(bad,))).run([x])
    truncated = dataclasses.replace(step, attrs=step.attrs[:-8])
    with pytest.raises(KernelError, match="attribute blob"):
        Executor(dataclasses.replace(model.plan, steps=(truncated,))).run([x])


# -- chains ------------------------------------------------------------------------------


def test_chain_reads_values_after_later_movement(rng):
    # t is read again after the Pad and the Concat that follow it: no kernel may write
    # over it, and the Relu that may run in place must not corrupt the slice it feeds.
    x = random_array(rng, (6, 7))

    def build(x):
        t = es.transpose(x)
        s = es.slice(t, [1], [6], [0])
        r = es.relu(s)
        p = es.pad(r, [1, 0, 1, 0], mode="edge")
        c = es.concat(p, t, axis=0)
        a, b = es.split(c, [3, 11], axis=0, outputs=2)
        first_row = es.slice(a, [0], [1], [0])
        return [es.add(b, es.expand(first_row, [11, 6])), es.neg(t), s]

    check(build, [x])


def test_movement_chain_of_every_kernel(rng):
    x = random_array(rng, (2, 8, 4, 6))

    def build(x):
        d = es.depth_to_space(x, blocksize=2)                 # [2, 2, 8, 12]
        s = es.space_to_depth(d, blocksize=2)                 # back to x
        e = es.expand(es.slice(s, [0], [1], [0]), [2, 8, 4, 6])
        t = es.tile(es.transpose(e, perm=[0, 1, 3, 2]), [1, 1, 1, 2])
        return [es.concat(t, es.transpose(x, perm=[0, 1, 3, 2]), axis=3), d]

    check(build, [x])
