"""The executor's optional per-step hook: timing records and the after-step observer."""

from __future__ import annotations

import numpy as np
import pytest
from test_executor import ADD, COPY, make_plan, random_f32, resolver, step, tensor

from ge_hub.executor import Executor, KernelError
from ge_hub.plan import Storage


@pytest.fixture
def rng():
    return np.random.default_rng(1)


def in_place_plan(n):
    """a = x + y; a = a + a (in place, same memory); out = a: `a` is overwritten."""
    tensors = [tensor("x", [n], Storage.INPUT), tensor("y", [n], Storage.INPUT, index=1),
               tensor("a", [n]), tensor("a2", [n]), tensor("out", [n], Storage.OUTPUT)]
    steps = [step("first", ADD, [0, 1], [2]), step("double", ADD, [2, 2], [3]),
             step("copy", COPY, [3], [4], op="Identity")]
    return make_plan(tensors, steps, [0, 1], [4])


def test_records_are_ordered_monotonic_times_on_lane_zero(rng):
    executor = Executor(in_place_plan(1000), resolver())
    x, y = random_f32(rng, 1000), random_f32(rng, 1000)
    (out,), records = executor.run_traced([x, y])
    np.testing.assert_array_equal(out, (x + y) * 2)
    assert records.shape == (3, 3) and records.dtype == np.int64
    starts, ends, lanes = records.T
    assert (starts > 0).all() and (ends >= starts).all()
    assert (starts[1:] >= ends[:-1]).all()           # sequential steps do not overlap
    assert (lanes == 0).all()


def test_the_observer_sees_values_as_produced_before_in_place_reuse(rng):
    executor = Executor(in_place_plan(64), resolver())
    x, y = random_f32(rng, 64), random_f32(rng, 64)
    seen = {}

    def observe(index, buffers):
        (buffer,) = buffers
        seen[index] = np.frombuffer(buffer, np.float32).copy()

    (out,), records = executor.run_traced([x, y], records=False, observer=observe)
    assert records is None
    assert sorted(seen) == [0, 1, 2]
    np.testing.assert_array_equal(seen[0], x + y)    # not a's final (doubled) content
    np.testing.assert_array_equal(seen[1], (x + y) * 2)
    np.testing.assert_array_equal(seen[2], out)


def test_observer_buffers_are_read_only_and_end_with_the_call(rng):
    executor = Executor(in_place_plan(8), resolver())
    kept = []

    def write(index, buffers):
        np.frombuffer(buffers[0], np.float32)[0] = 1.0

    with pytest.raises(KernelError, match="node 'first'") as caught:
        executor.run_traced([random_f32(rng, 8), random_f32(rng, 8)], observer=write)
    assert isinstance(caught.value.__cause__, ValueError)

    def keep(index, buffers):
        kept.append(np.frombuffer(buffers[0], np.float32))

    with pytest.raises(KernelError, match="kept a reference"):
        executor.run_traced([random_f32(rng, 8), random_f32(rng, 8)], observer=keep)


def test_a_failing_observer_stops_the_run_at_its_step(rng):
    executor = Executor(in_place_plan(8), resolver())

    def fail_at_second(index, buffers):
        if index == 1:
            raise RuntimeError("stop here")

    with pytest.raises(KernelError, match="node 'double'"):
        executor.run_traced([random_f32(rng, 8), random_f32(rng, 8)], observer=fail_at_second)
    # The pooled run is clean again: a plain run works and a traced one records all steps.
    x, y = random_f32(rng, 8), random_f32(rng, 8)
    np.testing.assert_array_equal(executor.run([x, y])[0], (x + y) * 2)
    _, records = executor.run_traced([x, y])
    assert (records[:, 0] > 0).all()


def test_a_bad_records_buffer_or_observer_is_refused(rng):
    executor = Executor(in_place_plan(8), resolver())
    x, y = random_f32(rng, 8), random_f32(rng, 8)
    out = [np.empty(8, np.float32)]
    with pytest.raises(ValueError, match="records must be"):
        executor._core.run([x, y], out, np.zeros((2, 3), np.int64))
    with pytest.raises(TypeError, match="observer must be callable"):
        executor._core.run([x, y], out, None, 3)
    with pytest.raises(TypeError, match="optionally records"):
        executor._core.run([x, y], out, None, None, None)
