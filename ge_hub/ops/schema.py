"""What an op is: its schema, its type inference and its NumPy reference, together.

An op is declared with the `op` decorator on its NumPy reference:

    @op("Relu", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
    def relu(x):
        return np.maximum(x, 0).astype(x.dtype)

The decorator returns an `OpSchema`. The reference is called with one NumPy array per
input (None for an omitted optional input; a variadic input contributes all of its
arrays) and the attributes as keyword arguments with defaults filled in, and returns
one array or a tuple of arrays (one per output; extra optional outputs are dropped by
the caller when the node does not ask for them).

`infer` receives an `InferenceContext` and returns the output `TensorType`s; their
number decides how many outputs the node has. `OpSchema.infer_types` runs the checks
that every op shares (input count, dtype constraints, attribute names and kinds) before
calling it, so an op's own `infer` only checks what is particular to it.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ge_hub.errors import LimitError, OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import limits


@dataclasses.dataclass(frozen=True)
class Input:
    """A formal input. Inputs that share a `type_var` must have the same dtype."""

    name: str
    types: frozenset[DType]
    type_var: str | None = "T"
    optional: bool = False
    variadic: bool = False  # only the last input; it takes one or more values
    # Its values (not only its shape) decide the output shapes: Reshape's `shape`,
    # Slice's `starts`. A compiler that meets such an input fed at run time specializes
    # on its values.
    decides_shape: bool = False


@dataclasses.dataclass(frozen=True)
class Output:
    name: str
    optional: bool = False
    variadic: bool = False


class AttrKind(str, enum.Enum):
    INT = "int"
    FLOAT = "float"
    STRING = "string"
    INTS = "ints"
    FLOATS = "floats"
    STRINGS = "strings"
    TENSOR = "tensor"
    GRAPH = "graph"
    DTYPE = "dtype"


REQUIRED = object()  # the default of an attribute that must be given
_FRESH_SYMBOLS = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class Attr:
    name: str
    kind: AttrKind
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


class InferenceContext:
    """What an op's `infer` function sees of the node being typed."""

    def __init__(self, schema: OpSchema, input_types, attrs, consts, num_outputs, node_name):
        self.schema = schema
        self.input_types: list[TensorType | None] = list(input_types)
        self.attrs: dict[str, Any] = attrs
        self._consts = consts
        self.num_outputs: int | None = num_outputs
        self.node_name = node_name

    def has_input(self, index: int) -> bool:
        return index < len(self.input_types) and self.input_types[index] is not None

    def input(self, index: int) -> TensorType:
        return self.input_types[index]

    def const(self, index: int) -> np.ndarray | None:
        """The data of input `index` when it is a known constant, else None."""
        if self._consts is None or index >= len(self._consts):
            return None
        return self._consts[index]

    def new_sym(self, hint: str) -> Sym:
        """A fresh symbol for a dim that cannot be expressed in terms of the inputs.

        Numbered process-wide, so two nodes never share a symbol by accident."""
        owner = self.node_name or self.schema.name.lower()
        return Sym.named(f"{owner}.{hint}{next(_FRESH_SYMBOLS)}")

    def fail(self, message: str):
        raise OpError(f"{self.schema.describe(self.node_name)}: {message}")

    def fail_limit(self, message: str):
        raise LimitError(f"{self.schema.describe(self.node_name)}: {message}")

    def new_syms(self, count: int, hint: str, source: str = "the inputs") -> tuple[Sym, ...]:
        """`count` fresh symbols, one per dim of an output whose rank is known but not its
        dims; a count past `limits.MAX_RANK` (a declared shape of 2**40 dims) is refused,
        naming `source` (what decides the rank), before any is made."""
        limits.check_rank(count, self.fail_limit, source)
        return tuple(self.new_sym(hint) for _ in range(count))

    def require_rank(self, index: int, *ranks: int, at_least: int | None = None) -> int | None:
        """Check the rank of input `index`; returns it (None when unknown)."""
        t = self.input_types[index]
        if t is None or t.rank is None:
            return None
        name = self.schema.input_name(index)
        if ranks and t.rank not in ranks:
            want = " or ".join(str(r) for r in ranks)
            self.fail(f"input {name!r} must have rank {want}, got {t} (rank {t.rank})")
        if at_least is not None and t.rank < at_least:
            self.fail(f"input {name!r} must have rank >= {at_least}, got {t} (rank {t.rank})")
        return t.rank


@dataclasses.dataclass(repr=False)
class OpSchema:
    name: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    infer: Callable[[InferenceContext], list[TensorType]]
    reference: Callable[..., Any]
    attrs: dict[str, Attr] = dataclasses.field(default_factory=dict)
    domain: str = ""
    doc: str = ""

    @property
    def qualified_name(self) -> str:
        return f"{self.domain}.{self.name}" if self.domain else self.name

    def __repr__(self) -> str:
        return f"<OpSchema {self.qualified_name}>"

    def describe(self, node_name: str | None = None) -> str:
        return f"{self.qualified_name} (node {node_name!r})" if node_name else self.qualified_name

    def input_name(self, index: int) -> str:
        if index < len(self.inputs):
            return self.inputs[index].name
        return f"{self.inputs[-1].name}[{index - len(self.inputs) + 1}]"

    def formal_input(self, index: int) -> Input:
        return self.inputs[min(index, len(self.inputs) - 1)]

    @property
    def min_inputs(self) -> int:
        return sum(1 for i in self.inputs if not i.optional)

    @property
    def max_inputs(self) -> int | None:
        return None if self.inputs and self.inputs[-1].variadic else len(self.inputs)

    def fill_attrs(self, attrs: dict[str, Any], node_name: str | None = None) -> dict[str, Any]:
        """Validate attributes by name and kind; return them with defaults filled in."""
        filled: dict[str, Any] = {}
        for key, value in attrs.items():
            spec = self.attrs.get(key)
            if spec is None:
                known = ", ".join(sorted(self.attrs)) or "none"
                raise OpError(f"{self.describe(node_name)}: unknown attribute {key!r} "
                              f"(known attributes: {known})")
            filled[key] = coerce_attr(self, spec, value, node_name)
        for key, spec in self.attrs.items():
            if key not in filled:
                if spec.required:
                    raise OpError(f"{self.describe(node_name)}: attribute {key!r} "
                                  f"({spec.kind.value}) is required")
                filled[key] = spec.default
        return filled

    def check_inputs(self, input_types: Sequence[TensorType | None], node_name=None) -> None:
        """Check input count, presence of required inputs and dtype constraints."""
        where = self.describe(node_name)
        n = len(input_types)
        if n < self.min_inputs or (self.max_inputs is not None and n > self.max_inputs):
            most = "any number of" if self.max_inputs is None else str(self.max_inputs)
            raise OpError(f"{where}: expected {self.min_inputs} to {most} inputs "
                          f"({', '.join(i.name for i in self.inputs)}), got {n}")
        bound: dict[str, tuple[DType, str]] = {}
        for index, t in enumerate(input_types):
            formal = self.formal_input(index)
            name = self.input_name(index)
            if t is None:
                if not formal.optional:
                    raise OpError(f"{where}: input {name!r} is required")
                continue
            if t.dtype not in formal.types:
                allowed = ", ".join(sorted(d.value for d in formal.types))
                raise OpError(f"{where}: input {name!r} must have dtype in {{{allowed}}}, "
                              f"got {t.dtype}")
            if formal.type_var is not None:
                if formal.type_var in bound and bound[formal.type_var][0] != t.dtype:
                    other_dtype, other = bound[formal.type_var]
                    raise OpError(f"{where}: input {name!r} must have the same dtype as "
                                  f"{other!r} ({other_dtype}), got {t.dtype}")
                bound.setdefault(formal.type_var, (t.dtype, name))

    def infer_types(
        self,
        input_types: Sequence[TensorType | None],
        attrs: dict[str, Any],
        consts: Sequence[np.ndarray | None] | None = None,
        num_outputs: int | None = None,
        node_name: str | None = None,
    ) -> list[TensorType]:
        """Validate a node's inputs and attributes and infer its output types."""
        self.check_inputs(input_types, node_name)
        filled = self.fill_attrs(attrs, node_name)
        ctx = InferenceContext(self, input_types, filled, consts, num_outputs, node_name)
        names = [f"input {self.input_name(i)!r}" for i in range(len(input_types))]
        limits.check_types(input_types, names, ctx.fail_limit)
        out_types = list(self.infer(ctx))
        names = [f"output {self.outputs[min(i, len(self.outputs) - 1)].name!r}"
                 if self.outputs else f"output {i}" for i in range(len(out_types))]
        limits.check_types(out_types, names, ctx.fail_limit)
        return out_types

    def run_reference(self, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any]):
        """Run the NumPy reference; always returns a tuple of arrays."""
        result = self.reference(*inputs, **self.fill_attrs(attrs))
        if not isinstance(result, tuple):
            result = (result,)
        return tuple(np.asarray(r) for r in result)

    def __call__(self, *inputs, **attrs):
        """Calling a schema runs its reference: `Relu(x)`."""
        outs = self.run_reference(inputs, attrs)
        return outs[0] if len(outs) == 1 else outs


def coerce_attr(schema: OpSchema, spec: Attr, value: Any, node_name=None) -> Any:
    """Check an attribute value against its declared kind; normalize its Python type."""
    from ge_hub.ir.graph import Graph

    def bad(expected: str):
        raise OpError(f"{schema.describe(node_name)}: attribute {spec.name!r} must be "
                      f"{expected}, got {value!r}")

    kind = spec.kind
    if value is None and not spec.required and spec.default is None:
        return None
    if kind is AttrKind.INT:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            bad("an int")
        return int(value)
    if kind is AttrKind.FLOAT:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            bad("a float")
        return float(value)
    if kind is AttrKind.STRING:
        if not isinstance(value, str):
            bad("a string")
        return value
    if kind in (AttrKind.INTS, AttrKind.FLOATS, AttrKind.STRINGS):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            bad(f"a list of {kind.value[:-1]}s")
        if kind is AttrKind.INTS:
            if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
                bad("a list of ints")
            return [int(v) for v in value]
        if kind is AttrKind.FLOATS:
            if not all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                       for v in value):
                bad("a list of floats")
            return [float(v) for v in value]
        if not all(isinstance(v, str) for v in value):
            bad("a list of strings")
        return list(value)
    if kind is AttrKind.TENSOR:
        if isinstance(value, (list, tuple, int, float, np.number)):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            bad("a NumPy array")
        DType.from_numpy(value.dtype)
        return value
    if kind is AttrKind.GRAPH:
        if not isinstance(value, Graph):
            bad("a Graph")
        return value
    if kind is AttrKind.DTYPE:
        try:
            return DType.parse(value)
        except TypeError:
            bad("a dtype name")
    raise AssertionError(kind)


def op(
    name: str,
    *,
    inputs: Sequence[Input],
    outputs: Sequence[Output],
    infer: Callable[[InferenceContext], list[TensorType]],
    attrs: Sequence[Attr] = (),
    domain: str = "",
) -> Callable[[Callable[..., Any]], OpSchema]:
    """Declare an op from its NumPy reference; see the module docstring."""

    def wrap(reference: Callable[..., Any]) -> OpSchema:
        return OpSchema(
            name=name,
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            infer=infer,
            reference=reference,
            attrs={a.name: a for a in attrs},
            domain=domain,
            doc=(reference.__doc__ or "").strip(),
        )

    return wrap


# Dtype sets for `Input(types=...)`, named as the op docs say them.
from ge_hub.ir.dtypes import (  # noqa: E402
    ALL_TYPES,
    FLOAT_TYPES,
    INDEX_TYPES,
    INTEGER_TYPES,
    NUMERIC_TYPES,
    SIGNED_INTEGER_TYPES,
)

FLOATS = FLOAT_TYPES
NUMERIC = NUMERIC_TYPES
SIGNED = FLOAT_TYPES | SIGNED_INTEGER_TYPES
INTEGERS = INTEGER_TYPES
INDICES = INDEX_TYPES
ANY = ALL_TYPES
BOOL = frozenset({DType.BOOL})
INT64 = frozenset({DType.INT64})
