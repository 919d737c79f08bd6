"""The C executor (ge_hub._core) through ge_hub.executor.Executor, on plans built by hand.

Plans here use the executor's own test kernel ge_test_add_f32 (core/testing/, built for the
tests only by testing_kernels.py), ge_copy, the built-in MatMul kernel for the BLAS, and
Python kernels, so nothing depends on the compiler.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from testing_kernels import build_test_kernels, library_path

from ge_hub import _blas, _core
from ge_hub.executor import (
    Executor,
    KernelError,
    decode_py_attrs,
    encode_py_attrs,
    kernel_entry,
    registry_resolver,
)
from ge_hub.ir.dtypes import DType
from ge_hub.kernels.base import CKernel, PyKernel
from ge_hub.plan import KernelKind, MemoryStats, Plan, Step, Storage, TensorSpec
from ge_hub.registry import KernelSpec, Registry

F32 = DType.FLOAT32
BUILTIN = {**_core.builtin_kernels(), **build_test_kernels()}
ADD = "ge_test_add_f32"
COPY = "ge_copy"
# The built-in MatMul kernel; its blob for a plain [m, k] @ [k, n] is ints m, n, k, 0.
MATMUL = "ge_nn_matmul_f32"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# -- building plans by hand ---------------------------------------------------------------


def tensor(name, shape, storage=Storage.ARENA, offset=0, index=0, dtype=F32):
    return TensorSpec(name, dtype, tuple(shape), storage, offset, index)


def step(node, kernel, inputs, outputs, *, op="Add", kind=KernelKind.C, attrs=b"",
         scratch=(0, 0)):
    return Step(node, op, kernel, kind, tuple(inputs), tuple(outputs), attrs, *scratch)


def make_plan(tensors, steps, inputs, outputs, constants=(), arena_bytes=None):
    if arena_bytes is None:
        ends = [t.offset + t.nbytes for t in tensors if t.storage is Storage.ARENA]
        ends += [s.scratch_offset + s.scratch_bytes for s in steps]
        arena_bytes = -(-max(ends, default=0) // 64) * 64
    return Plan(tuple(tensors), tuple(steps), tuple(inputs), tuple(outputs),
                tuple(tensors[i].name for i in inputs), tuple(tensors[i].name for i in outputs),
                tuple(constants), MemoryStats(arena_bytes, arena_bytes, arena_bytes))


def resolver(**python_kernels):
    """Kernel names are built-in symbols, or the names given here for Python kernels."""

    def resolve(name):
        return python_kernels[name] if name in python_kernels else BUILTIN[name]

    return resolve


def random_f32(rng, shape):
    data = rng.uniform(-3.0, 3.0, size=shape).astype(np.float32)
    data[data == 0] = 0.5
    return data


def add_plan(n, dtype=F32):
    """out = x + y, in one C step."""
    tensors = [tensor("x", [n], Storage.INPUT, dtype=dtype),
               tensor("y", [n], Storage.INPUT, index=1, dtype=dtype),
               tensor("out", [n], Storage.OUTPUT, dtype=dtype)]
    return make_plan(tensors, [step("add", ADD, [0, 1], [2])], [0, 1], [2])


# -- running plans ------------------------------------------------------------------------


def test_chain_through_the_arena_with_in_place_steps_and_views(rng):
    rows, cols = 3, 4097
    n = rows * cols
    tensors = [
        tensor("x", [rows, cols], Storage.INPUT),             # 0
        tensor("y", [rows, cols], Storage.INPUT, index=1),    # 1
        tensor("a", [rows, cols], offset=0),                  # 2
        tensor("a_flat", [n], offset=0),                      # 3: a view of a
        tensor("x_flat", [n], Storage.INPUT),                 # 4: a view of input x
        tensor("b", [n], offset=-(-n * 4 // 64) * 64),        # 5
        tensor("out", [rows, cols], Storage.OUTPUT),          # 6
    ]
    steps = [
        step("a", ADD, [0, 1], [2]),          # a = x + y
        step("a2", ADD, [2, 2], [2]),         # a = a + a, in place
        step("b", ADD, [3, 4], [5]),          # b = a + x, through two views
        step("out", COPY, [5], [6], op="Identity"),
    ]
    executor = Executor(make_plan(tensors, steps, [0, 1], [6]), resolver())
    x, y = random_f32(rng, (rows, cols)), random_f32(rng, (rows, cols))
    (out,) = executor.run([x, y])
    np.testing.assert_array_equal(out, (x + y) * 2 + x)
    assert out.dtype == np.float32 and out.shape == (rows, cols)


def test_steps_write_graph_outputs_at_offsets(rng):
    n = 33
    tensors = [tensor("x", [n], Storage.INPUT), tensor("y", [n], Storage.INPUT, index=1),
               tensor("top", [n], Storage.OUTPUT),                     # rows of output 0
               tensor("bottom", [n], Storage.OUTPUT, offset=n * 4),
               tensor("out", [2, n], Storage.OUTPUT),
               tensor("copy", [n], Storage.OUTPUT, index=1)]
    steps = [step("top", ADD, [0, 1], [2]), step("bottom", ADD, [0, 0], [3]),
             step("copy", COPY, [1], [5], op="Identity")]
    executor = Executor(make_plan(tensors, steps, [0, 1], [4, 5]), resolver())
    x, y = random_f32(rng, n), random_f32(rng, n)
    out, copy = executor.run([x, y])
    np.testing.assert_array_equal(out, np.stack([x + y, x + x]))
    np.testing.assert_array_equal(copy, y)
    assert executor.output_names == ("out", "copy")


def test_constants_and_views_into_them(rng):
    n = 40
    weights = random_f32(rng, 2 * n)
    tensors = [tensor("x", [n], Storage.INPUT), tensor("w_hi", [n], Storage.CONSTANT,
                                                        offset=n * 4),
               tensor("t", [n]), tensor("w", [2 * n], Storage.CONSTANT),
               tensor("out", [2 * n], Storage.OUTPUT)]
    steps = [step("t", ADD, [0, 1], [2]),                  # t = x + weights[n:]
             step("out", ADD, [3, 3], [4])]                # out = 2 * weights
    tensors.append(tensor("out_lo", [n], Storage.OUTPUT))
    steps.append(step("lo", ADD, [2, 1], [5]))            # out[:n] = t + weights[n:]
    executor = Executor(make_plan(tensors, steps, [0], [4], constants=[weights]), resolver())
    x = random_f32(rng, n)
    (out,) = executor.run([x])
    expected = weights * 2
    expected[:n] = (x + weights[n:]) + weights[n:]
    np.testing.assert_array_equal(out, expected)


def test_inputs_are_read_in_place_and_others_copied_first(rng):
    seen = []

    def spy(x):
        seen.append(x.__array_interface__["data"][0])
        return x * 2

    tensors = [tensor("x", [4, 5], Storage.INPUT), tensor("out", [4, 5], Storage.OUTPUT)]
    plan = make_plan(tensors, [step("spy", "spy", [0], [1], op="Spy",
                                    kind=KernelKind.PYTHON)], [0], [1])
    executor = Executor(plan, resolver(spy=spy))
    x = random_f32(rng, (4, 5))
    (out,) = executor.run([x])
    assert seen[-1] == x.ctypes.data
    np.testing.assert_array_equal(out, x * 2)

    strided = random_f32(rng, (4, 10))[:, ::2]
    fortran = np.asfortranarray(x)
    readonly = x.copy()
    readonly.flags.writeable = False
    unaligned = np.frombuffer(bytearray(x.nbytes + 1), np.uint8)[1:].view(np.float32)
    unaligned = unaligned.reshape(4, 5)
    unaligned[...] = x
    for given in (strided, fortran, readonly, unaligned):
        (out,) = executor.run([given])
        np.testing.assert_array_equal(out, given * 2)
    assert seen[-2] == readonly.ctypes.data  # read-only but contiguous: still in place
    assert seen[-1] != unaligned.ctypes.data


def test_python_kernel_gets_its_attributes_and_omitted_inputs(rng):
    table = np.arange(6, dtype=np.int64).reshape(2, 3) + 1
    calls = []

    def affine(x, missing, bias, *, alpha, shift, name, to, table):
        calls.append((missing, name, to, table.dtype))
        return (x * np.float32(alpha) + bias + np.float32(shift[1] + table.sum())).astype(to.numpy)

    attrs = encode_py_attrs({"alpha": 1.5, "shift": [0, 2], "name": "affine",
                             "to": DType.FLOAT32, "table": table})
    tensors = [tensor("x", [7], Storage.INPUT), tensor("bias", [7], Storage.INPUT, index=1),
               tensor("out", [7], Storage.OUTPUT)]
    steps = [step("affine", "affine", [0, -1, 1], [2], op="Affine", kind=KernelKind.PYTHON,
                  attrs=attrs)]
    executor = Executor(make_plan(tensors, steps, [0, 1], [2]), resolver(affine=affine))
    x, bias = random_f32(rng, 7), random_f32(rng, 7)
    (out,) = executor.run([x, bias])
    np.testing.assert_allclose(out, x * 1.5 + bias + 2 + 21, rtol=1e-6)
    assert calls == [(None, "affine", DType.FLOAT32, np.int64)]


def test_mixed_c_and_python_steps(rng):
    n = 50000
    tensors = [tensor("x", [n], Storage.INPUT), tensor("y", [n], Storage.INPUT, index=1),
               tensor("s", [n]), tensor("p", [n], offset=n * 4),
               tensor("out", [n], Storage.OUTPUT)]
    steps = [step("s", ADD, [0, 1], [2]),
             step("p", "square", [2], [3], op="Square", kind=KernelKind.PYTHON),
             step("out", ADD, [3, 0], [4])]
    executor = Executor(make_plan(tensors, steps, [0, 1], [4]),
                        resolver(square=PyKernel(lambda v: v * v).fn))
    x, y = random_f32(rng, n), random_f32(rng, n)
    (out,) = executor.run([x, y])
    s = x + y
    np.testing.assert_array_equal(out, s * s + x)


def test_empty_tensors_run(rng):
    tensors = [tensor("x", [0, 3], Storage.INPUT), tensor("y", [0, 3], Storage.INPUT, index=1),
               tensor("t", [0, 3]), tensor("out", [0, 3], Storage.OUTPUT)]
    steps = [step("t", ADD, [0, 1], [2]),
             step("out", "neg", [2], [3], op="Neg", kind=KernelKind.PYTHON)]
    executor = Executor(make_plan(tensors, steps, [0, 1], [3]), resolver(neg=np.negative))
    (out,) = executor.run([np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)])
    assert out.shape == (0, 3) and out.dtype == np.float32


@pytest.mark.parametrize("dtype", [DType.INT64, DType.BOOL, DType.BFLOAT16, DType.UINT8])
def test_copy_of_every_width(rng, dtype):
    tensors = [tensor("x", [3, 5], Storage.INPUT, dtype=dtype),
               tensor("out", [3, 5], Storage.OUTPUT, dtype=dtype)]
    executor = Executor(make_plan(tensors, [step("id", COPY, [0], [1], op="Identity")],
                                  [0], [1]), resolver())
    x = (rng.integers(1, 100, size=(3, 5)) % 2 == 0 if dtype is DType.BOOL
         else rng.integers(1, 100, size=(3, 5))).astype(dtype.numpy)
    (out,) = executor.run([x])
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, x)


# -- failures -----------------------------------------------------------------------------


def test_a_failing_c_kernel_raises_naming_node_and_op(rng):
    tensors = [tensor("x", [8], Storage.INPUT), tensor("y", [4], Storage.INPUT, index=1),
               tensor("out", [8], Storage.OUTPUT)]
    executor = Executor(make_plan(tensors, [step("bad_add", ADD, [0, 1], [2])], [0, 1], [2]),
                        resolver())
    message = r"node 'bad_add' \(op Add\): ge_test_add_f32: inputs have 8 and 4 "
    with pytest.raises(KernelError, match=message) as caught:
        executor.run([random_f32(rng, 8), random_f32(rng, 4)])
    assert caught.value.node == "bad_add" and caught.value.op == "Add"
    assert isinstance(caught.value, RuntimeError)


def test_a_raising_python_kernel_raises_with_its_exception_chained(rng):
    def explode(x):
        raise ZeroDivisionError(f"boom on {x.shape}")

    tensors = [tensor("x", [3], Storage.INPUT), tensor("t", [3]),
               tensor("out", [3], Storage.OUTPUT)]
    steps = [step("t", ADD, [0, 0], [1]),
             step("explode", "explode", [1], [2], op="Explode", kind=KernelKind.PYTHON)]
    executor = Executor(make_plan(tensors, steps, [0], [2]), resolver(explode=explode))
    with pytest.raises(KernelError, match=r"node 'explode' \(op Explode\).*boom on \(3,\)") \
            as caught:
        executor.run([random_f32(rng, 3)])
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    assert caught.value.__cause__.__traceback__ is not None

    # The failed run gave its arena back in a usable state.
    ok = Executor(make_plan(tensors, [steps[0], step("out", COPY, [1], [2])], [0], [2]),
                  resolver())
    x = random_f32(rng, 3)
    np.testing.assert_array_equal(ok.run([x])[0], x + x)


@pytest.mark.parametrize("result, message", [
    (lambda x: x.astype(np.float64), r"output 0 is float64 \[5\], the plan expects float32"),
    (lambda x: x[:4], r"output 0 is float32 \[4\]"),
    (lambda x: (), r"returned 0 outputs, the plan expects 1"),
])
def test_a_python_kernel_with_the_wrong_result_is_caught(rng, result, message):
    tensors = [tensor("x", [5], Storage.INPUT), tensor("out", [5], Storage.OUTPUT)]
    plan = make_plan(tensors, [step("odd", "odd", [0], [1], op="Odd",
                                    kind=KernelKind.PYTHON)], [0], [1])
    executor = Executor(plan, resolver(odd=result))
    with pytest.raises(KernelError, match=r"node 'odd' \(op Odd\)") as caught:
        executor.run([random_f32(rng, 5)])
    assert caught.match(message)


def test_a_python_kernel_may_not_keep_its_buffers(rng):
    kept = []

    def hoard(x):
        kept.append(x)
        return x + 1

    tensors = [tensor("x", [5], Storage.INPUT), tensor("t", [5]),
               tensor("out", [5], Storage.OUTPUT)]
    steps = [step("t", ADD, [0, 0], [1]),
             step("hoard", "hoard", [1], [2], op="Hoard", kind=KernelKind.PYTHON)]
    executor = Executor(make_plan(tensors, steps, [0], [2]), resolver(hoard=hoard))
    with pytest.raises(KernelError, match=r"node 'hoard' \(op Hoard\).*kept a reference"):
        executor.run([random_f32(rng, 5)])


def test_a_view_kept_only_by_a_reference_cycle_is_not_blamed_on_the_kernel(rng):
    # An exception caught inside a kernel leaves a cycle (its traceback holds the frame
    # that holds it) keeping the frame's arrays, views of the step's buffers, alive until
    # the next garbage collection: the executor collects before it blames the kernel.
    def catches(x):
        try:
            raise ValueError("handled")
        except ValueError as error:
            caught = error  # noqa: F841 - the frame -> error -> traceback -> frame cycle
        return x * 2

    tensors = [tensor("x", [5], Storage.INPUT), tensor("t", [5]),
               tensor("out", [5], Storage.OUTPUT)]
    steps = [step("t", ADD, [0, 0], [1]),
             step("catches", "catches", [1], [2], op="Catches", kind=KernelKind.PYTHON)]
    executor = Executor(make_plan(tensors, steps, [0], [2]), resolver(catches=catches))
    x = random_f32(rng, 5)
    for _ in range(3):
        np.testing.assert_array_equal(executor.run([x])[0], (x + x) * 2)


def test_step_buffers_end_with_the_step(rng):
    kept, readonly = [], []

    def raw_kernel(inputs, outputs):
        kept.extend(inputs + outputs)
        readonly.extend(memoryview(buffer).readonly for buffer in inputs + outputs)
        np.frombuffer(outputs[0], np.float32)[:] = np.frombuffer(inputs[0], np.float32) * 3

    core = _core.Executor([(0, [4], _core.STORAGE_INPUT, 0, 0),
                           (0, [4], _core.STORAGE_OUTPUT, 0, 0)],
                          [(_core.KIND_PYTHON, 0, (0,), (1,), b"", 0, 0, "raw", "Raw")],
                          0, [], [16], [16], [raw_kernel])
    x, out = random_f32(rng, 4), np.empty(4, np.float32)
    core.run([x], [out])
    np.testing.assert_array_equal(out, x * 3)
    assert readonly == [True, False]
    for buffer in kept:
        with pytest.raises(BufferError, match="valid only during its call"):
            np.frombuffer(buffer, np.float32)


def test_a_python_kernel_may_not_write_its_inputs(rng):
    def scribble(x):
        x += 1
        return x

    tensors = [tensor("x", [5], Storage.INPUT), tensor("out", [5], Storage.OUTPUT)]
    plan = make_plan(tensors, [step("s", "scribble", [0], [1], op="Scribble",
                                    kind=KernelKind.PYTHON)], [0], [1])
    x = random_f32(rng, 5)
    before = x.copy()
    with pytest.raises(KernelError, match="read-only") as caught:
        Executor(plan, resolver(scribble=scribble)).run([x])
    assert isinstance(caught.value.__cause__, ValueError)
    np.testing.assert_array_equal(x, before)


# -- bad input to run() -------------------------------------------------------------------


def test_bad_inputs_raise_value_errors_naming_the_input(rng):
    executor = Executor(add_plan(6), resolver())
    x = random_f32(rng, 6)
    with pytest.raises(ValueError, match=r"expected 2 inputs \(x, y\), got 1"):
        executor.run([x])
    with pytest.raises(ValueError, match=r"expected 2 inputs \(x, y\), got 3"):
        executor.run([x, x, x])
    with pytest.raises(ValueError, match=r"input 'y': expected float32 \[6\], got float64 \[6\]"):
        executor.run([x, x.astype(np.float64)])
    with pytest.raises(ValueError, match=r"input 'x': expected float32 \[6\], got float32 "
                                         r"\[2, 3\]"):
        executor.run([x.reshape(2, 3), x])
    with pytest.raises(ValueError, match=r"input 'x': expected float32 \[6\], got float32 \[7\]"):
        executor.run([random_f32(rng, 7), x])
    np.testing.assert_array_equal(executor.run([x, x])[0], x + x)


def test_the_core_checks_buffers_itself(rng):
    core = Executor(add_plan(6), resolver())._core
    x = random_f32(rng, 6)
    out = np.empty(6, np.float32)
    with pytest.raises(ValueError, match="input 1 has 20 bytes, expected 24"):
        core.run([x, x[:5]], [out])
    with pytest.raises(ValueError, match="input 0 must be a C-contiguous buffer of 24") as caught:
        core.run([random_f32(rng, 12)[::2], x], [out])
    assert "not C-contiguous" in str(caught.value.__cause__)
    readonly = np.empty(6, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="output 0 must be a C-contiguous, writable"):
        core.run([x, x], [readonly])
    unaligned = np.frombuffer(bytearray(25), np.uint8)[1:].view(np.float32)
    with pytest.raises(ValueError, match="input 0 is not aligned to 4 bytes"):
        core.run([unaligned, x], [out])
    with pytest.raises(ValueError, match="expected 2 inputs and 1 outputs, got 1 and 1"):
        core.run([x], [out])
    with pytest.raises(TypeError, match="takes \\(inputs, outputs\\)"):
        core.run([x, x])
    core.run([x, x], [out])
    np.testing.assert_array_equal(out, x + x)


# -- bad plans ----------------------------------------------------------------------------


def _replace_tensor(plan, position, **changes):
    import dataclasses

    tensors = list(plan.tensors)
    tensors[position] = dataclasses.replace(tensors[position], **changes)
    return dataclasses.replace(plan, tensors=tuple(tensors))


def _replace_step(plan, position, **changes):
    import dataclasses

    steps = list(plan.steps)
    steps[position] = dataclasses.replace(steps[position], **changes)
    return dataclasses.replace(plan, steps=tuple(steps))


def _chain_plan():
    """x -> t (arena) -> out, with room for scratch after t."""
    tensors = [tensor("x", [16], Storage.INPUT), tensor("t", [16]),
               tensor("out", [16], Storage.OUTPUT)]
    steps = [step("t", ADD, [0, 0], [1]), step("out", ADD, [1, 1], [2])]
    return make_plan(tensors, steps, [0], [2], arena_bytes=256)


@pytest.mark.parametrize("mutate, message", [
    (lambda p: _replace_tensor(p, 1, offset=224), r"tensor 1: bytes \[224, 288\) do not fit "
                                                  r"in arena"),
    (lambda p: _replace_tensor(p, 1, offset=2), "tensor 1: offset 2 is not a non-negative "
                                                "multiple of its itemsize 4"),
    (lambda p: _replace_tensor(p, 1, shape=(4, -4)), "tensor 1: dimension 1 is negative"),
    (lambda p: _replace_tensor(p, 1, shape=(1,) * 9), "rank 9 exceeds"),
    (lambda p: _replace_tensor(p, 1, shape=(2**40, 2**40)), "overflows"),
    (lambda p: _replace_tensor(p, 1, storage=Storage.CONSTANT), "constant index 0 is out of "
                                                                "range"),
    (lambda p: _replace_tensor(p, 1, storage=Storage.INPUT, shape=(32,)),
     r"tensor 1: bytes \[0, 128\) do not fit in input 0 \(64 bytes\)"),
    (lambda p: _replace_step(p, 0, inputs=(0, 7)), "step 0 .*node 't'.*input 1 names tensor 7"),
    (lambda p: _replace_step(p, 1, outputs=(0,)), "output 0 is tensor 0, which lives in "
                                                  "input 0; a step may not write there"),
    (lambda p: _replace_step(p, 1, outputs=(-1,)), "output 0 names tensor -1"),
    (lambda p: _replace_step(p, 0, scratch_offset=192, scratch_bytes=128),
     "scratch .* does not fit in the arena"),
    (lambda p: _replace_step(p, 0, scratch_offset=32, scratch_bytes=16), "not 64-byte aligned"),
    (lambda p: _replace_step(p, 0, scratch_offset=0, scratch_bytes=64),
     "its scratch overlaps its own tensor 1"),
    (lambda p: _replace_tensor(p, 0, storage=Storage.ARENA), "plan input 0 .* lives in arena"),
    (lambda p: _replace_tensor(p, 2, index=1), "plan output 0 .* lives in output 1"),
])
def test_bad_plans_are_rejected_at_construction(mutate, message):
    Executor(_chain_plan(), resolver())  # the unmutated plan is fine
    with pytest.raises(ValueError, match=message):
        Executor(mutate(_chain_plan()), resolver())


def test_bad_kernels_are_rejected_at_construction():
    plan = _chain_plan()
    with pytest.raises(LookupError, match=r"node 't' \(op Add, kernel 'nope'\): 'nope'"):
        Executor(_replace_step(plan, 0, kernel="nope"), resolver())
    with pytest.raises(ValueError, match="is a C step, but its kernel resolved to .*lambda"):
        Executor(plan, lambda name: lambda x: x)
    with pytest.raises(ValueError, match="not a function address"):
        Executor(plan, lambda name: 0)
    with pytest.raises(ValueError, match="is a Python step, but its kernel resolved to 12"):
        Executor(_replace_step(plan, 0, kind=KernelKind.PYTHON), lambda name: 12)
    with pytest.raises(ValueError, match="attributes are not the JSON"):
        Executor(_replace_step(plan, 0, kind=KernelKind.PYTHON, attrs=b"\x01\x02"),
                 lambda name: np.add)


@pytest.mark.parametrize("args, error, message", [
    (([(0, [4], 9, 0, 0)], [], 0, [], [], []), ValueError, "unknown storage code 9"),
    (([(99, [4], 0, 0, 0)], [], 64, [], [], []), ValueError, "unknown dtype code 99"),
    (([(0, [4], 0, 0)], [], 64, [], [], []), ValueError, "tensor 0 must have 5 items"),
    (([7], [], 64, [], [], []), TypeError, "tensor 0 must be a tuple"),
    (([(0, "ab", 0, 0, 0)], [], 64, [], [], []), TypeError, "a dimension must be a 64-bit int"),
    (([], [], -64, [], [], []), ValueError, "arena size -64 is negative"),
    (([], [], 0, [object()], [], []), TypeError, "constant 0 must be a C-contiguous buffer"),
    (([], [], 0, [], [-4], []), ValueError, "input 0: negative byte size"),
    (([], [(1, 0, (), (), b"", 0, 0, "n", "Op")], 0, [], [], []), ValueError,
     "Python kernel index 0 is out of range"),
    (([], [(5, 0, (), (), b"", 0, 0, "n", "Op")], 0, [], [], []), ValueError,
     "unknown kernel kind 5"),
    (([], [(0, 0, (), (), b"", 0, 0, "n", "Op")], 0, [], [], []), ValueError,
     "the C kernel address is 0"),
    (([], [(0, 1.5, (), (), b"", 0, 0, "n", "Op")], 0, [], [], []), TypeError,
     "function address"),
    (([], [(1, 0, (), (), "text", 0, 0, "n", "Op")], 0, [], [], [], [print]), TypeError,
     "attrs must be bytes"),
    (([], [(1, 0, 5, (), b"", 0, 0, "n", "Op")], 0, [], [], [], [print]), TypeError,
     "inputs must be a sequence"),
    (([], [(1, 0, (), (), b"", 0, 0, 3, "Op")], 0, [], [], [], [print]), TypeError,
     "node must be a str"),
    (([], [], 0, [], [], [], [5]), TypeError, r"py_kernels\[0\] is not callable"),
])
def test_the_core_rejects_malformed_plan_data(args, error, message):
    with pytest.raises(error, match=message):
        _core.Executor(*args)


def test_misaligned_constants_are_rejected():
    raw = np.frombuffer(bytearray(17), np.uint8)[1:]
    with pytest.raises(ValueError, match="constant 0 at offset 0 is not aligned to its itemsize"):
        _core.Executor([(0, [4], _core.STORAGE_CONSTANT, 0, 0)], [], 0, [raw], [], [])


# -- attributes of Python steps -----------------------------------------------------------


def test_python_attributes_round_trip():
    tensors = {
        "f": np.array([[1.5, -np.inf], [np.nan, 3.25]], np.float32),
        "b": np.array([True, False]),
        "h": np.array([0.5, 2.0], DType.BFLOAT16.numpy),
        "i": np.array(7, np.int64),
    }
    attrs = {"n": 3, "x": 0.1, "nan": float("nan"), "s": "same", "ints": [1, -2],
             "floats": (0.5, 1e300), "strs": ["a", "b"], "dtype": DType.INT8,
             "np_int": np.int64(4), "none": None, **tensors}
    back = decode_py_attrs(encode_py_attrs(attrs))
    assert back.keys() == attrs.keys()
    assert (back["n"], back["x"], back["s"], back["ints"], back["floats"], back["strs"]) == \
        (3, 0.1, "same", [1, -2], [0.5, 1e300], ["a", "b"])
    assert np.isnan(back["nan"]) and back["dtype"] is DType.INT8 and back["np_int"] == 4
    assert back["none"] is None
    for name, array in tensors.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)
    assert decode_py_attrs(b"") == {}
    with pytest.raises(TypeError, match="cannot be stored in a plan"):
        encode_py_attrs({"body": object()})


def test_tensor_attributes_of_python_steps_are_read_only(rng):
    def add_table(x, *, table):
        table += 1  # must fail: the same array serves every run
        return x

    tensors = [tensor("x", [2], Storage.INPUT), tensor("out", [2], Storage.OUTPUT)]
    attrs = encode_py_attrs({"table": np.ones(2, np.float32)})
    plan = make_plan(tensors, [step("t", "t", [0], [1], op="T", kind=KernelKind.PYTHON,
                                    attrs=attrs)], [0], [1])
    with pytest.raises(KernelError, match="read-only"):
        Executor(plan, resolver(t=add_table)).run([random_f32(rng, 2)])


# -- kernel resolution --------------------------------------------------------------------


def test_the_registry_resolver_finds_kernels_by_name(rng):
    registry = Registry()
    registry.add_kernel(KernelSpec("Add", CKernel(ADD, library=library_path()), name="test.add"))
    registry.add_kernel(KernelSpec("Neg", PyKernel(np.negative), name="test.neg"))
    registry.add_kernel(KernelSpec("Abs", CKernel("ge_no_such_kernel"), name="test.missing"))
    resolve = registry_resolver(registry)
    assert resolve("test.add") == BUILTIN[ADD]
    assert resolve("test.neg") is np.negative
    with pytest.raises(LookupError, match="no registered kernel is named 'test.other'"):
        resolve("test.other")
    with pytest.raises(LookupError, match="'ge_no_such_kernel' is not built into"):
        resolve("test.missing")
    with pytest.raises(TypeError, match="CKernel or a PyKernel"):
        kernel_entry(42)

    tensors = [tensor("x", [5], Storage.INPUT), tensor("t", [5]),
               tensor("out", [5], Storage.OUTPUT)]
    steps = [step("t", "test.add", [0, 0], [1]),
             step("out", "test.neg", [1], [2], op="Neg", kind=KernelKind.PYTHON)]
    x = random_f32(rng, 5)
    (out,) = Executor(make_plan(tensors, steps, [0], [2]), resolve).run([x])
    np.testing.assert_array_equal(out, -(x + x))


# -- threads, the pool and the GIL --------------------------------------------------------


def _chain_of_adds(n, steps):
    """x, y -> a = x + y -> a = a + y (steps - 1 times, in place) -> out = a + x."""
    tensors = [tensor("x", [n], Storage.INPUT), tensor("y", [n], Storage.INPUT, index=1),
               tensor("a", [n]), tensor("out", [n], Storage.OUTPUT)]
    plan_steps = [step("a0", ADD, [0, 1], [2])]
    plan_steps += [step(f"a{i}", ADD, [2, 1], [2]) for i in range(1, steps)]
    plan_steps.append(step("out", ADD, [2, 0], [3]))
    return make_plan(tensors, plan_steps, [0, 1], [3])


def _expected_chain(x, y, steps):
    a = x + y
    for _ in range(steps - 1):
        a = a + y
    return a + x


def test_eight_threads_run_one_executor_at_once(rng):
    n, steps = 1 << 17, 4  # above the test add's parallel grain
    executor = Executor(_chain_of_adds(n, steps), resolver())
    inputs = [(random_f32(rng, n), random_f32(rng, n)) for _ in range(8)]
    expected = [_expected_chain(x, y, steps) for x, y in inputs]
    failures = []
    barrier = threading.Barrier(8)

    def work(k):
        barrier.wait()
        for _ in range(6):
            (out,) = executor.run(list(inputs[k]))
            if not np.array_equal(out, expected[k]):
                failures.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert 1 <= executor.arenas <= 8


def test_sequential_runs_reuse_one_arena(rng):
    executor = Executor(_chain_of_adds(100, 3), resolver())
    x, y = random_f32(rng, 100), random_f32(rng, 100)
    for _ in range(5):
        np.testing.assert_array_equal(executor.run([x, y])[0], _expected_chain(x, y, 3))
    assert executor.arenas == 1


def test_the_gil_is_released_while_a_plan_runs(rng):
    n, steps = 1 << 20, 120
    executor = Executor(_chain_of_adds(n, steps), resolver())
    x, y = random_f32(rng, n), random_f32(rng, n)
    executor.run([x, y])  # warm: arena and pool
    ticks = 0
    stop = False

    def count():
        nonlocal ticks
        while not stop:
            ticks += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        time.sleep(0.01)
        before = ticks
        started = time.perf_counter()
        (out,) = executor.run([x, y])
        elapsed = time.perf_counter() - started
        during = ticks - before
    finally:
        stop = True
        counter.join()
    np.testing.assert_allclose(out, _expected_chain(x, y, steps), rtol=1e-5)
    assert elapsed > 0.02, "the run was too short to tell"
    # Holding the GIL, the counter could not tick at all during the run.
    assert during > 1000, f"the counter ticked {during} times in {elapsed:.3f} s"


def _python(code: str, **env) -> subprocess.CompletedProcess:
    # Run from tests/, so that a source tree without a built core is not on sys.path.
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env},
                          cwd=os.path.dirname(__file__))


def test_idle_pool_threads_do_not_spin():
    # In a process of its own, without a BLAS (whose threads may spin a while after a
    # call), so that any CPU used while idle is the pool's.
    done = _python("""
        import time
        import numpy as np
        from ge_hub import _core
        from ge_hub.executor import Executor
        from test_executor import _chain_of_adds, resolver
        n = 1 << 18
        executor = Executor(_chain_of_adds(n, 4), resolver())
        executor.run([np.ones(n, np.float32), np.ones(n, np.float32)])
        time.sleep(0.05)
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(0.3)
        print(_core.num_threads(), time.process_time() - cpu, time.perf_counter() - wall)
    """, GE_HUB_BLAS="none", GE_HUB_NUM_THREADS="4")
    assert done.returncode == 0, done.stderr
    threads, used, idle = done.stdout.split()
    assert threads == "4"
    assert float(used) < 0.03, f"the process used {used} s of CPU in {idle} s idle"


def test_an_idle_pool_leaves_its_threads_free_to_run_on_every_cpu():
    # A worker woken beside the caller moves itself off the caller's CPU by narrowing its
    # own affinity; it must widen it again before it sleeps. Runs separated by pauses long
    # enough for the workers to sleep make them be woken, again and again.
    done = _python("""
        import os, time
        import numpy as np
        from ge_hub.executor import Executor
        from test_executor import _chain_of_adds, _expected_chain, resolver
        n = 1 << 18
        executor = Executor(_chain_of_adds(n, 4), resolver())
        x, y = np.full(n, 1.5, np.float32), np.full(n, 0.25, np.float32)
        for _ in range(40):
            (out,) = executor.run([x, y])
            assert np.array_equal(out, _expected_chain(x, y, 4))
            time.sleep(0.003)
        time.sleep(0.05)
        allowed = os.sched_getaffinity(0)
        narrowed = [tid for tid in os.listdir("/proc/self/task")
                    if os.sched_getaffinity(int(tid)) != allowed]
        print(len(os.listdir("/proc/self/task")), narrowed)
    """, GE_HUB_BLAS="none", GE_HUB_NUM_THREADS=str(max(2, len(os.sched_getaffinity(0)))))
    assert done.returncode == 0, done.stderr
    threads, narrowed = done.stdout.split(maxsplit=1)
    assert int(threads) >= 2
    assert narrowed.strip() == "[]", f"threads left narrowed while idle: {narrowed}"


def test_a_malformed_thread_count_falls_back_to_the_cpus():
    # A valid GE_HUB_NUM_THREADS is tested in test_kernel_abi (it counts pool threads).
    done = _python("from ge_hub import _core; print(_core.num_threads())",
                   GE_HUB_NUM_THREADS="zero")
    assert int(done.stdout) == len(os.sched_getaffinity(0))


# Python 3.12+ warns about fork() with threads running: here that is the point.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_starts_its_own_pool(rng):
    n = 1 << 17
    executor = Executor(_chain_of_adds(n, 3), resolver())
    x, y = random_f32(rng, n), random_f32(rng, n)
    executor.run([x, y])  # the parent's pool is running
    pid = os.fork()
    if pid == 0:  # the child: a hang here would be a pool inherited without its threads
        import signal

        signal.alarm(20)
        ok = np.array_equal(executor.run([x, y])[0], _expected_chain(x, y, 3))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


# -- BLAS ---------------------------------------------------------------------------------


def _matmul_plan(m, k, n):
    tensors = [tensor("a", [m, k], Storage.INPUT), tensor("b", [k, n], Storage.INPUT, index=1),
               tensor("c", [m, n], Storage.OUTPUT)]
    attrs = struct.pack("=4q", m, n, k, 0)
    return make_plan(tensors, [step("mm", MATMUL, [0, 1], [2], op="MatMul", attrs=attrs)],
                     [0, 1], [2])


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (7, 13, 5), (64, 33, 129), (3, 0, 4)])
def test_sgemm_through_the_loaded_blas(rng, m, k, n):
    executor = Executor(_matmul_plan(m, k, n), resolver())
    assert _blas.load() is not None and _blas.available()
    a, b = random_f32(rng, (m, k)), random_f32(rng, (k, n))
    (c,) = executor.run([a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_sgemm_without_a_blas_runs_the_portable_loop():
    done = _python("""
        import struct
        import numpy as np
        from ge_hub import _blas, _core
        from ge_hub.executor import Executor
        from ge_hub.ir.dtypes import DType
        from ge_hub.plan import KernelKind, MemoryStats, Plan, Step, Storage, TensorSpec
        F = DType.FLOAT32
        plan = Plan((TensorSpec("a", F, (9, 11), Storage.INPUT),
                     TensorSpec("b", F, (11, 6), Storage.INPUT, 0, 1),
                     TensorSpec("c", F, (9, 6), Storage.OUTPUT)),
                    (Step("mm", "MatMul", "mm", KernelKind.C, (0, 1), (2,),
                          struct.pack("=4q", 9, 6, 11, 0)),), (0, 1), (2,),
                    ("a", "b"), ("c",), (), MemoryStats(0, 0, 0))
        executor = Executor(plan, lambda name: _core.builtin_kernels()["ge_nn_matmul_f32"])
        rng = np.random.default_rng(1)
        a = rng.uniform(-2, 2, (9, 11)).astype(np.float32)
        b = rng.uniform(-2, 2, (11, 6)).astype(np.float32)
        np.testing.assert_allclose(executor.run([a, b])[0], a @ b, rtol=1e-4, atol=1e-4)
        print(_blas.available())
    """, GE_HUB_BLAS="none")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_blas_named_but_missing_is_an_error():
    done = _python("""
        from ge_hub import _blas
        try:
            _blas.load()
        except OSError as error:
            print("OSError", error)
    """, GE_HUB_BLAS="/no/such/libblas.so")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OSError cannot load BLAS /no/such/libblas.so")


@pytest.mark.parametrize("caller", [None, "3"])
def test_loading_the_blas_starts_no_openblas_thread(caller):
    # OpenBLAS sizes its pool when it is loaded; its idle threads spin ~0.1 s of CPU each,
    # which on a small machine slowed a model's first run. ge_hub loads it single-threaded
    # and gives the caller's OPENBLAS_NUM_THREADS (or its absence) back.
    env = {} if caller is None else {"OPENBLAS_NUM_THREADS": caller}
    done = _python("""
        import os
        import numpy  # its own OpenBLAS (and threads) first, so only ge-hub's count below
        def threads():
            return len(os.listdir("/proc/self/task"))
        before = threads()
        from ge_hub import _blas
        assert _blas.load() is not None
        print(threads() - before, os.environ.get("OPENBLAS_NUM_THREADS"))
    """, **env)
    assert done.returncode == 0, done.stderr
    expected = caller if caller is not None else os.environ.get("OPENBLAS_NUM_THREADS")
    assert done.stdout.split() == ["0", str(expected)]
