"""The Plan: what the compiler hands to the C executor, as plain data.

A plan is tensors, steps, an arena size and constants. Nothing in it is a Python
object other than ints, strings, bytes, tuples and NumPy arrays, so that it can be
saved to an offline model file unchanged and loaded without the compiler.

Where a tensor lives (`TensorSpec.storage`):

- ARENA: at `offset` bytes into the one arena allocated per run;
- INPUT / OUTPUT / CONSTANT: in graph input / graph output / constant number `index`,
  at `offset` bytes into it (a view, e.g. a Reshape of an input, has the same index).

A step names its kernel by registered name (`KernelSpec.name`), its input and output
tensors by index (-1 for an omitted optional input), its packed attribute blob, and the
scratch area the kernel asked for (in the arena, live only during the step).

A plan may hold sub-plans (`Plan.subplans`): the compiled bodies of If, Loop and Scan
steps run by the C control kernel (`ge_hub.kernels.closure`); a step names the ones
it runs (`Step.subplans`). They are plans like any other, plain data too.

Streams and events (the `schedule` pass): each step names its stream and how many
threads it may use (`threads`: 0 the whole pool, run alone; 1 its calling thread, free
to overlap steps of other streams). A stream's steps run in plan order; an `Event`
(signal, wait) makes step `wait` start only after step `signal` (on another stream)
finished. Plan order is always a valid one-stream order, so a plan runs correctly,
one step after another, wherever streams are ignored.
"""

from __future__ import annotations

import dataclasses
import enum

import numpy as np

from ge_hub.ir.dtypes import DType

# Numbering shared with `ge_dtype` in core/include/ge_hub/kernel.h.
DTYPE_CODES = {
    DType.FLOAT32: 0,
    DType.FLOAT64: 1,
    DType.FLOAT16: 2,
    DType.BFLOAT16: 3,
    DType.INT8: 4,
    DType.INT16: 5,
    DType.INT32: 6,
    DType.INT64: 7,
    DType.UINT8: 8,
    DType.BOOL: 9,
    DType.UINT16: 10,
    DType.UINT32: 11,
    DType.UINT64: 12,
    DType.FLOAT8_E4M3FN: 13,
    DType.FLOAT8_E4M3FNUZ: 14,
    DType.FLOAT8_E5M2: 15,
    DType.FLOAT8_E5M2FNUZ: 16,
    DType.FLOAT8_E8M0FNU: 17,
    DType.INT4: 18,
    DType.UINT4: 19,
    DType.INT2: 20,
    DType.UINT2: 21,
    DType.FLOAT4_E2M1FN: 22,
}

ARENA_ALIGNMENT = 64


class Storage(str, enum.Enum):
    ARENA = "arena"
    INPUT = "input"
    OUTPUT = "output"
    CONSTANT = "constant"


# The kernel name of a step that runs its op's NumPy reference because no kernel fits:
# "reference:" + the op's qualified name. Kernel selection writes it; the executor
# resolves it to the reference, and the runtime and offline files count such steps.
FALLBACK_PREFIX = "reference:"


class KernelKind(str, enum.Enum):
    C = "c"            # a ge_kernel_fn, built in or from a plugin's shared library
    PYTHON = "python"  # a Python callable on NumPy arrays, run with the GIL held


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    storage: Storage
    offset: int = 0  # bytes: into the arena, or into the input/output/constant buffer
    index: int = 0   # which input/output/constant (unused for the arena)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class Step:
    node: str          # the graph node it runs (for error messages and profiles)
    op: str            # qualified op name
    kernel: str        # registered kernel name
    kind: KernelKind
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: bytes = b""
    scratch_offset: int = 0
    scratch_bytes: int = 0
    stream: int = 0
    # A control step (If/Loop/Scan run in C): the plan's sub-plans its kernel runs, as
    # indices into `Plan.subplans`, in the order its attributes refer to them.
    subplans: tuple[int, ...] = ()
    threads: int = 0   # 0: the whole thread pool (the step runs alone); 1: its own thread


@dataclasses.dataclass(frozen=True)
class Event:
    """Step `wait` starts only after step `signal` finished (indices into Plan.steps)."""

    signal: int
    wait: int


@dataclasses.dataclass(frozen=True)
class MemoryStats:
    arena_bytes: int        # the arena the plan needs
    lower_bound_bytes: int  # the largest sum of live intermediate bytes at any step
    naive_bytes: int        # every intermediate in its own buffer
    # The same figures were every step on one stream (None: the plan has one stream).
    serial_arena_bytes: int | None = None
    serial_lower_bound_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
    tensors: tuple[TensorSpec, ...]
    steps: tuple[Step, ...]
    inputs: tuple[int, ...]        # tensor index of each graph input, in order
    outputs: tuple[int, ...]       # tensor index of each graph output, in order
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    constants: tuple[np.ndarray, ...]
    memory: MemoryStats
    # The compiled bodies of its control steps (each a whole Plan with its own tensors,
    # constants and arena; nested control flow nests further).
    subplans: tuple[Plan, ...] = ()
    events: tuple[Event, ...] = ()

    @property
    def arena_bytes(self) -> int:
        return self.memory.arena_bytes

    @property
    def n_streams(self) -> int:
        return 1 + max((s.stream for s in self.steps), default=0)

    @property
    def signature(self) -> tuple[tuple[int, ...], ...]:
        """The input shapes this plan was specialized for."""
        return tuple(self.tensors[i].shape for i in self.inputs)


# -- attributes of Python-kernel steps -----------------------------------------------
# A Python kernel is called with the node's attributes as keyword arguments. The plan
# stores them as JSON (no pickle: a plan file must be safe to load), with NumPy tensor
# attributes and dtypes tagged.


def encode_py_attrs(attrs: dict) -> bytes:
    import json

    def encode(value):
        if isinstance(value, DType):
            return {"__dtype__": value.value}
        if isinstance(value, np.ndarray):
            dtype = DType.from_numpy(value.dtype)
            flat = value.reshape(-1).astype(np.float64 if dtype.is_float else value.dtype)
            return {"__tensor__": [dtype.value, list(value.shape), flat.tolist()]}
        if isinstance(value, (list, tuple)):
            return [encode(v) for v in value]
        if isinstance(value, (bool, int, float, str)) or value is None:
            return value
        if isinstance(value, np.generic):
            return value.item()
        raise TypeError(f"attribute value {value!r} cannot be stored in a plan")

    return json.dumps({k: encode(v) for k, v in attrs.items()}).encode()


def decode_py_attrs(blob: bytes) -> dict:
    import json

    def decode(value):
        if isinstance(value, dict):
            if "__dtype__" in value:
                return DType(value["__dtype__"])
            dtype, shape, data = value["__tensor__"]
            dtype = DType(dtype)
            # Floats travel as float64 (exact for every narrower float); integers are
            # read straight as their own type, so uint64 above int64's range stays exact.
            wire = np.float64 if dtype.is_float else dtype.numpy
            return np.asarray(data, dtype=wire).astype(dtype.numpy).reshape(shape)
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value

    return {k: decode(v) for k, v in json.loads(blob.decode()).items()} if blob else {}
