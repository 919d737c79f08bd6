"""The replacement builder: the `op` a rule's replacement function receives.

`op.GemmRelu(x, w, b, _domain="acme", alpha=1.0)` stages a node: its output types are
inferred from the registered schema at once (so a replacement that does not type-check
is refused before the graph changes), and nothing enters the graph until the engine has
accepted the whole replacement. NumPy arrays given as inputs become constants
(`op.constant(array)` does the same); `_outputs=n` asks for n outputs (a tuple).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ge_hub.ir.graph import Graph, Value
from ge_hub.ir.types import TensorType

if TYPE_CHECKING:
    from ge_hub.registry import Registry
    from ge_hub.rewrite.match import Match


class StagedNode:
    __slots__ = ("op", "domain", "inputs", "attrs", "outputs")

    def __init__(self, op, domain, inputs, attrs, out_types):
        self.op = op
        self.domain = domain
        self.inputs = inputs
        self.attrs = attrs
        self.outputs = [StagedValue(self, i, t) for i, t in enumerate(out_types)]


class StagedValue:
    """An output of a staged node; stands for a Value until the replacement is applied."""

    __slots__ = ("node", "index", "type")
    const = None
    is_constant = False

    def __init__(self, node: StagedNode, index: int, type: TensorType):
        self.node = node
        self.index = index
        self.type = type

    def __repr__(self) -> str:
        return f"<staged output {self.index} of {self.node.op}: {self.type}>"


class ReplacementBuilder:
    """Stages the nodes of one replacement."""

    def __init__(self, graph: Graph, registry: Registry, match: Match):
        self.graph = graph
        self.registry = registry
        self.match = match
        self.staged: list[StagedNode] = []

    def constant(self, array) -> Value:
        """A new constant holding `array` (a NumPy array or scalar)."""
        if not isinstance(array, (np.ndarray, np.generic)):
            raise TypeError(f"a replacement constant is a NumPy array, got "
                            f"{type(array).__name__} (say which dtype: np.float32(1.0))")
        return self.graph.add_constant(np.asarray(array), prefix="rewrite_const")

    def _input(self, item):
        if item is None or isinstance(item, (Value, StagedValue)):
            return item
        if isinstance(item, (np.ndarray, np.generic)):
            return self.constant(item)
        raise TypeError(f"a replacement input is a matched value, a staged output, a NumPy "
                        f"array or None, got {type(item).__name__}")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def stage(*inputs, _domain: str = "", _outputs: int | None = None, **attrs: Any):
            schema = self.registry.get_op(name, _domain)
            values = [self._input(i) for i in inputs]
            types = [None if v is None else v.type for v in values]
            consts = [None if v is None else v.const for v in values]
            out_types = schema.infer_types(types, attrs, consts=consts,
                                           num_outputs=_outputs, node_name=f"<{name}>")
            count = _outputs or len(schema.outputs)
            node = StagedNode(name, _domain, values, dict(attrs), out_types[:count])
            self.staged.append(node)
            return node.outputs[0] if _outputs is None else tuple(node.outputs)

        return stage
