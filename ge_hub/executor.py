"""Runs a Plan: the Python face of the C executor (`ge_hub._core.Executor`).

`Executor(plan, resolve)` turns a `ge_hub.plan.Plan` into the plain data the C core
takes: every kernel name becomes a C function address or a Python callable (through a
resolver; by default the kernels registered by plugins), every tensor a (dtype, shape,
storage, offset, index) row. Everything is derived once, in `__init__`, so `run()` only
checks its inputs, allocates the outputs and makes one C call, which runs every step
with the GIL released.

A Python kernel step carries its node's attributes as JSON (`ge_hub.plan.encode_py_attrs`,
written by the compiler) and is called as `fn(*input_arrays, **attrs)`; its results are
checked against the plan and copied into the step's output memory.
"""

from __future__ import annotations

import ctypes
import functools
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np

from ge_hub import _blas, _core
from ge_hub.kernels.base import CKernel, PyKernel
from ge_hub.plan import (  # noqa: F401  (the attribute codec is re-exported)
    DTYPE_CODES,
    FALLBACK_PREFIX,
    KernelKind,
    Plan,
    Step,
    Storage,
    TensorSpec,
    decode_py_attrs,
    encode_py_attrs,
)

KernelError = _core.KernelError

_ndarray = np.ndarray
_empty = np.empty

STORAGE_CODES = {
    Storage.ARENA: _core.STORAGE_ARENA,
    Storage.INPUT: _core.STORAGE_INPUT,
    Storage.OUTPUT: _core.STORAGE_OUTPUT,
    Storage.CONSTANT: _core.STORAGE_CONSTANT,
}

# A kernel as the executor takes it: a C function address, or a Python callable.
KernelEntry = Union[int, Callable[..., Any]]
# Maps a step's registered kernel name to its entry.
KernelResolver = Callable[[str], KernelEntry]

_HEADER_DIRS = (
    os.path.join(os.path.dirname(__file__), "include"),                 # an installed wheel
    os.path.join(os.path.dirname(__file__), os.pardir, "core", "include"),  # a source tree
)


def include_dir() -> str:
    """The directory holding `ge_hub/kernel.h`, for compiling an outside kernel library."""
    for directory in _HEADER_DIRS:
        if os.path.exists(os.path.join(directory, "ge_hub", "kernel.h")):
            return os.path.normpath(directory)
    raise FileNotFoundError("ge_hub/kernel.h is not installed with this ge_hub")


# -- kernel resolution ------------------------------------------------------------------------


@functools.cache
def _builtin_kernels() -> dict[str, int]:
    return _core.builtin_kernels()


@functools.cache
def _kernel_library(path: str) -> ctypes.CDLL:
    library = ctypes.CDLL(path)  # kept (cached) for the life of the process
    try:
        version = ctypes.c_int32.in_dll(library, "ge_kernel_abi_version").value
    except ValueError:
        raise ValueError(f"kernel library {path} does not export ge_kernel_abi_version; "
                         "build it against ge_hub/kernel.h") from None
    if version != _core.ABI_VERSION:
        raise ValueError(f"kernel library {path} was built for kernel ABI {version}, this "
                         f"ge_hub runs ABI {_core.ABI_VERSION}")
    return library


def kernel_entry(impl: Any) -> KernelEntry:
    """What the executor calls for a registered kernel implementation.

    A built-in CKernel gives the address of its symbol in ge_hub._core, a plugin's gives
    the address in its shared library (after checking the library's ABI version); a
    PyKernel gives its callable.
    """
    if isinstance(impl, CKernel):
        if impl.library is None:
            try:
                return _builtin_kernels()[impl.symbol]
            except KeyError:
                raise LookupError(f"C kernel {impl.symbol!r} is not built into "
                                  "ge_hub._core") from None
        library = _kernel_library(impl.library)
        try:
            function = getattr(library, impl.symbol)
        except AttributeError:
            raise LookupError(f"kernel library {impl.library} has no symbol "
                              f"{impl.symbol!r}") from None
        return ctypes.cast(function, ctypes.c_void_p).value
    if isinstance(impl, PyKernel):
        return impl.fn
    if callable(impl):
        return impl
    raise TypeError(f"a kernel implementation must be a CKernel or a PyKernel, got {impl!r}")


def registry_resolver(registry=None) -> KernelResolver:
    """Resolves kernel names among the kernels registered by plugins (`KernelSpec.name`)."""
    if registry is None:
        from ge_hub.plugins import get_registry

        registry = get_registry()
    impls: dict[str, Any] = {}
    for spec in registry.kernels():  # highest priority first: it wins a shared name
        impls.setdefault(spec.name, spec.impl)

    def resolve(name: str) -> KernelEntry:
        impl = impls.get(name)
        if impl is None and name.startswith(FALLBACK_PREFIX):
            # A counted fallback: the op's NumPy reference, "reference:<domain.>Op".
            qualified = name[len(FALLBACK_PREFIX):]
            domain, _, op = qualified.rpartition(".")
            impl = PyKernel(registry.get_op(op, domain).reference)
        if impl is None:
            raise LookupError(f"no registered kernel is named {name!r}")
        return kernel_entry(impl)

    return resolve


# -- Python kernel steps ----------------------------------------------------------------------


def _numpy_type(spec: TensorSpec) -> tuple[np.dtype, tuple[int, ...]]:
    return spec.dtype.numpy, tuple(spec.shape)


def _store_results(results: Any, out_buffers, out_types) -> None:
    if not isinstance(results, (tuple, list)):
        results = (results,)
    if len(results) < len(out_types):
        raise ValueError(f"it returned {len(results)} outputs, the plan expects "
                         f"{len(out_types)}")
    for k, (buffer, (dtype, shape)) in enumerate(zip(out_buffers, out_types)):
        result = np.asarray(results[k])
        if result.dtype != dtype or result.shape != shape:
            raise ValueError(f"its output {k} is {result.dtype} {list(result.shape)}, the plan "
                             f"expects {dtype} {list(shape)}")
        np.copyto(np.frombuffer(buffer, dtype).reshape(shape), result)


def _python_step(fn: Callable[..., Any], attrs: dict[str, Any], in_types, out_types):
    """The callable the C loop calls for one Python step.

    It gets one buffer object per input and output of the step (None for an omitted
    input), valid only during the call, and wraps them as arrays without copying.
    """

    def run(in_buffers, out_buffers):
        args = [None if buffer is None else np.frombuffer(buffer, kind[0]).reshape(kind[1])
                for buffer, kind in zip(in_buffers, in_types)]
        _store_results(fn(*args, **attrs), out_buffers, out_types)

    def call(in_buffers, out_buffers):
        try:
            run(in_buffers, out_buffers)
        except BaseException as error:
            # The step's buffers end with the call (the arena is reused): arrays on them
            # must not live on in the traceback's frames.
            traceback.clear_frames(error.__traceback__)
            raise

    return call


# -- the executor -----------------------------------------------------------------------------


def _step_label(step: Step) -> str:
    return f"node {step.node!r} (op {step.op}, kernel {step.kernel!r})"


def _check_boundary(plan: Plan, indices: Sequence[int], names: Sequence[str],
                    storage: Storage) -> None:
    side = storage.value
    if len(indices) != len(names):
        raise ValueError(f"plan has {len(indices)} {side}s but {len(names)} {side} names")
    for position, (t, name) in enumerate(zip(indices, names)):
        if not 0 <= t < len(plan.tensors):
            raise ValueError(f"plan {side} {position} ({name!r}) names tensor {t}, out of range")
        spec = plan.tensors[t]
        if spec.storage is not storage or spec.index != position or spec.offset != 0:
            raise ValueError(f"plan {side} {position} ({name!r}) is tensor {t}, which lives in "
                             f"{spec.storage.value} {spec.index} at offset {spec.offset}; "
                             f"expected {side} {position} at offset 0")


class Executor:
    """A Plan made runnable; `run` may be called from several threads at once."""

    __slots__ = ("plan", "input_names", "output_names", "_core", "_run", "_input_checks",
                 "_output_dtypes", "_output_shapes", "_subplans")

    def __init__(self, plan: Plan, resolve: KernelResolver | None = None):
        _blas.load()
        if resolve is None:
            resolve = registry_resolver()
        _check_boundary(plan, plan.inputs, plan.input_names, Storage.INPUT)
        _check_boundary(plan, plan.outputs, plan.output_names, Storage.OUTPUT)
        self.plan = plan
        self.input_names = tuple(plan.input_names)
        self.output_names = tuple(plan.output_names)

        tensors = [(DTYPE_CODES[t.dtype], tuple(t.shape), STORAGE_CODES[t.storage], t.offset,
                    t.index) for t in plan.tensors]
        steps = []
        py_kernels = []
        for step in plan.steps:
            entry = self._resolve(resolve, step)
            if step.kind is KernelKind.C:
                kind, kernel = _core.KIND_C, entry
            else:
                kind, kernel = _core.KIND_PYTHON, len(py_kernels)
                py_kernels.append(self._python_kernel(plan, step, entry))
            row = (kind, kernel, tuple(step.inputs), tuple(step.outputs), step.attrs,
                   step.scratch_offset, step.scratch_bytes, step.node, step.op)
            steps.append((*row, tuple(step.subplans)) if step.subplans else row)
        constants = [np.ascontiguousarray(c) for c in plan.constants]
        # A control step's bodies: each sub-plan its own core Executor, which the core
        # holds and whose ge_plan the control kernel runs (core/kernels/closure.c).
        self._subplans = tuple(Executor(sub, resolve) for sub in plan.subplans)
        self._core = _core.Executor(
            tensors, steps, plan.arena_bytes, constants,
            [plan.tensors[t].nbytes for t in plan.inputs],
            [plan.tensors[t].nbytes for t in plan.outputs],
            py_kernels, subplans=[sub._core for sub in self._subplans])
        if plan.events or any(s.stream or s.threads for s in plan.steps):
            self._core.set_streams([s.stream for s in plan.steps],
                                   [s.threads for s in plan.steps],
                                   [(e.signal, e.wait) for e in plan.events])
        self._run = self._core.run
        self._input_checks = tuple(_numpy_type(plan.tensors[t]) for t in plan.inputs)
        self._output_dtypes = tuple(plan.tensors[t].dtype.numpy for t in plan.outputs)
        self._output_shapes = tuple(tuple(plan.tensors[t].shape) for t in plan.outputs)

    @staticmethod
    def _resolve(resolve: KernelResolver, step: Step) -> KernelEntry:
        try:
            entry = resolve(step.kernel)
        except (LookupError, ValueError, OSError) as error:
            raise type(error)(f"{_step_label(step)}: {error}") from error
        if step.kind is KernelKind.C:
            if not isinstance(entry, int) or isinstance(entry, bool) or entry <= 0:
                raise ValueError(f"{_step_label(step)} is a C step, but its kernel resolved "
                                 f"to {entry!r}, not a function address")
        elif not callable(entry):
            raise ValueError(f"{_step_label(step)} is a Python step, but its kernel resolved "
                             f"to {entry!r}, not a callable")
        return entry

    @staticmethod
    def _python_kernel(plan: Plan, step: Step, fn: Callable[..., Any]):
        try:
            attrs = decode_py_attrs(step.attrs)
        except (ValueError, TypeError, KeyError) as error:
            raise ValueError(f"{_step_label(step)}: its attributes are not the JSON of "
                             f"encode_py_attrs: {error!r}") from error
        for value in attrs.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False  # shared by every run of the step
        tensors = plan.tensors

        def types(indices):
            return tuple(None if t < 0 or t >= len(tensors) else _numpy_type(tensors[t])
                         for t in indices)

        # Out-of-range indices are left to the C side, which rejects them with context.
        return _python_step(fn, attrs, types(step.inputs), types(step.outputs))

    @property
    def arena_bytes(self) -> int:
        return self._core.arena_bytes

    @property
    def arenas(self) -> int:
        """Arenas allocated so far: the most runs that were ever in flight at once."""
        return self._core.arenas

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the plan on one array per graph input; returns new output arrays.

        Inputs of the planned dtype and shape are read in place when C-contiguous and
        aligned, and copied otherwise; a wrong count, dtype or shape raises ValueError
        naming the input. A failing kernel raises KernelError naming its node and op.
        """
        checks = self._input_checks
        if len(inputs) != len(checks):
            raise self._count_error(inputs)
        for x, (dtype, shape) in zip(inputs, checks):
            # Identity first: NumPy's built-in dtypes are singletons, and this is hot.
            if x.__class__ is not _ndarray or x.dtype is not dtype or x.shape != shape:
                inputs = self._prepare(inputs)
                break
        outputs = list(map(_empty, self._output_shapes, self._output_dtypes))
        try:
            self._run(inputs, outputs)
        except ValueError:
            # The core checks layout itself (C-contiguous, aligned) before any step runs;
            # dtypes and shapes are right here, so copy what it refused and run again.
            self._run(self._prepare(inputs), outputs)
        return outputs

    __call__ = run

    def run_traced(self, inputs: Sequence[np.ndarray], *, records: bool = True,
                   observer: Callable[[int, tuple], Any] | None = None):
        """Run once through the core's per-step hook: (outputs, records).

        records (when asked) is int64 [n_steps, 3]: each step's start and end on
        CLOCK_MONOTONIC in ns and the lane (thread or stream) it ran on; a step that did
        not run keeps -1. observer(step_index, output_buffers) is called right after each
        step with its outputs as read-only buffers valid during the call, as the step wrote
        them (before a later step reuses the memory); an exception it raises fails the run.
        """
        inputs = self._prepare(inputs)
        outputs = list(map(_empty, self._output_shapes, self._output_dtypes))
        table = np.full((len(self.plan.steps), 3), -1, np.int64) if records else None
        self._run(inputs, outputs, table, observer)
        return outputs, table

    def _count_error(self, inputs) -> ValueError:
        names = ", ".join(self.input_names)
        return ValueError(f"expected {len(self.input_names)} inputs ({names}), "
                          f"got {len(inputs)}")

    def _prepare(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """The slow path of run(): explain a bad input, or copy one into a usable layout."""
        prepared = []
        for name, x, (dtype, shape) in zip(self.input_names, inputs, self._input_checks):
            x = np.asarray(x)
            if x.dtype != dtype or x.shape != shape:
                raise ValueError(f"input {name!r}: expected {dtype} {list(shape)}, got "
                                 f"{x.dtype} {list(x.shape)}")
            if not (x.flags.c_contiguous and x.flags.aligned):
                x = np.array(x, order="C", copy=True)
            prepared.append(x)
        return prepared
