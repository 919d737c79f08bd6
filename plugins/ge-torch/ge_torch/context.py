"""ConvertContext: what a converter sees while one FX node becomes ge-hub nodes.

A converter receives the context, the FX node and the node's arguments with every FX
node replaced by what it became: a ge-hub `Value` for a tensor, a tuple of them for a
multi-output op, a sympy expression for a symbolic size, a plain Python value
otherwise. It adds nodes with `cx.op(...)`, which runs the op schema's own checks and
type inference, exactly as the ES API does, and returns the output value(s).

The context also holds the helpers most converters need: constants, casts, a scalar
argument as a tensor of the right dtype, a list of sizes as an int64 shape tensor, and
the dtypes PyTorch computed for the node (`out_dtype`), which is what type promotion
must produce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx
from ge_hub.plugin import DType, Graph, Value, get_schema

from ge_torch import symbolic
from ge_torch.dtypes import to_dtype
from ge_torch.errors import Unsupported


class ConvertContext:
    """The ge-hub graph under construction and the FX node being converted."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.node: torch.fx.Node | None = None
        self.symbols = symbolic.SymbolTable()
        self.sym_cache: dict[Any, Value] = {}
        # Constants copied from frozen parameters: never folded here, so that a refreshed
        # parameter only needs its constant replaced (see ge_torch.runtime).
        self.frozen_ids: set[int] = set()
        self._scalar_cache: dict[tuple, Value] = {}

    # -- adding nodes ------------------------------------------------------------

    def op(self, op_type: str, *inputs: Value | None, outputs: int | None = None,
           domain: str = "", **attrs: Any) -> Value | list[Value]:
        """Add an op (of the core set unless `domain` says otherwise); returns its output,
        or the list of `outputs` outputs."""
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()  # an omitted trailing optional input is simply absent
        attrs = {k: v for k, v in attrs.items() if v is not None}
        schema = get_schema(op_type, domain)
        types = [None if v is None else v.type for v in inputs]
        consts = [None if v is None else v.const for v in inputs]
        where = None if self.node is None else self.node.name  # names it in errors
        out_types = schema.infer_types(types, attrs, consts=consts, num_outputs=outputs,
                                       node_name=where)
        if outputs is not None:
            out_types = out_types[:outputs]
        else:
            out_types = out_types[:1]
        node = self.graph.add_node(op_type, inputs, out_types, attrs, domain=domain)
        return node.outputs[0] if outputs is None else list(node.outputs)

    # -- constants and casts -----------------------------------------------------

    def const(self, array, dtype: DType | None = None) -> Value:
        array = np.asarray(array)
        if dtype is not None:
            array = array.astype(dtype.numpy)
        if array.ndim <= 1 and array.size <= 8:
            key = (array.dtype.str, array.shape, array.tobytes())
            cached = self._scalar_cache.get(key)
            if cached is None:
                cached = self._scalar_cache[key] = self.graph.add_constant(array, prefix="c")
            return cached
        return self.graph.add_constant(array, prefix=self.node.name if self.node else "const")

    def cast(self, value: Value, dtype: DType) -> Value:
        if value.type.dtype == dtype:
            return value
        if value.is_constant and id(value) not in self.frozen_ids:
            return self.const(value.const.astype(dtype.numpy))
        return self.op("Cast", value, to=dtype)

    def scalar(self, x: Any, dtype: DType) -> Value:
        """A scalar argument (a number, a symbolic size, or a 0-d tensor) as a rank-0
        tensor of `dtype`."""
        if isinstance(x, Value):
            return self.cast(x, dtype)
        if symbolic.is_symbolic(x):
            value = self.op("Squeeze", symbolic.emit(self, x), self.ints([0]))
            return self.cast(value, dtype)
        if isinstance(x, bool) and dtype is not DType.BOOL:
            x = int(x)
        return self.const(np.asarray(x).astype(dtype.numpy))

    def ints(self, values: Sequence[int]) -> Value:
        """A constant int64 vector (axes, pads, starts)."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(-1))

    def shape(self, sizes: Sequence[Any]) -> Value:
        """Sizes (ints or symbolic expressions) as an int64 vector computed in the graph."""
        sizes = [symbolic.as_expr(s) for s in sizes]
        if not any(symbolic.is_symbolic(s) for s in sizes):
            return self.ints(sizes)
        pieces, run = [], []
        for size in sizes:
            if symbolic.is_symbolic(size):
                if run:
                    pieces.append(self.ints(run))
                    run = []
                pieces.append(symbolic.emit(self, size))
            else:
                run.append(int(size))
        if run:
            pieces.append(self.ints(run))
        return pieces[0] if len(pieces) == 1 else self.op("Concat", *pieces, axis=0)

    # -- what PyTorch computed for the node --------------------------------------

    def meta(self, arg: Any = None) -> Any:
        """The FakeTensor (or value) PyTorch recorded for an FX node; the current node's
        when `arg` is None."""
        node = self.node if arg is None else arg
        if not isinstance(node, torch.fx.Node):
            return node
        return node.meta.get("val", node.meta.get("example_value"))

    @property
    def out_dtype(self) -> DType:
        """The ge-hub dtype of the current node's (first) output."""
        val = self.meta()
        if isinstance(val, (tuple, list)):
            val = val[0]
        return to_dtype(val.dtype)

    def out_sizes(self, index: int | None = None) -> list[Any]:
        """The current node's output sizes as ints and sympy expressions."""
        val = self.meta()
        if index is not None:
            val = val[index]
        return [symbolic.as_expr(s) for s in val.shape]

    def fail(self, reason: str):
        raise Unsupported(f"{self.node.target if self.node else 'node'}: {reason}")


def rank(value: Value) -> int:
    if value.type.rank is None:
        raise Unsupported(f"value {value.name!r} has unknown rank")
    return value.type.rank
