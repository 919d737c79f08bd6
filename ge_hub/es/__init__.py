"""ES: build ge-hub graphs by calling functions, in the spirit of Ascend GE's ES API.

    from ge_hub import es

    with es.GraphBuilder("mlp") as gb:
        x = es.input("x", "float32", ["N", 784])
        w = es.const(np.random.rand(784, 10).astype(np.float32))
        y = es.relu(x @ w + 1.0)
        gb.output(y, "y")
    graph = gb.graph                    # verified when the block ends

Every registered op, plugin ops included, is a function here, generated from its schema
when first used (importing this module loads no plugin):

- core ops by snake_case name (`es.mat_mul`, also `es.matmul`, `es.global_average_pool`,
  `es.is_nan`; Python keywords get an underscore: `es.and_`) or by ONNX name (`es.MatMul`);
- a plugin domain's ops under the domain (`es.acme.fused_op`; "com.acme" is `es.com_acme`);
- any op by name: `es.op("MatMul", a, b)`, `es.op("FusedOp", x, domain="acme", alpha=0.5)`.

`help(es.conv)` shows an op's inputs (positional), attributes (keyword-only, with
defaults) and outputs. `ge_hub.es.calls` says how arguments become a node: Python
numbers and lists as constants, `outputs=k` for optional and variadic outputs, `name=`
for the node name. Every call is checked against the op's schema at once: a wrong
rank, dtype or attribute raises `ge_hub.OpError` at the offending line.

Builders nest: a `GraphBuilder` entered inside another builds a subgraph (an If/Loop
body), whose calls may read the enclosing builders' tensors.
"""

from __future__ import annotations

from typing import Any

from ge_hub.es import calls, namespace, naming
from ge_hub.es.builder import (
    GraphBuilder,
    active_builders,
    const,
    current_builder,
    input,
    output,
)
from ge_hub.es.namespace import DomainNamespace
from ge_hub.es.tensor import Tensor


def op(op_type: str, /, *inputs: Any, domain: str = "", **kwargs: Any):
    """Apply the registered op `op_type` of `domain` to `inputs`.

    Keywords are the op's attributes, its optional inputs by snake_case name, and the
    reserved `outputs=` and `name=` (see `ge_hub.es.calls`).
    """
    return namespace.function_for(op_type, domain)(*inputs, **kwargs)


def __getattr__(attr: str):
    # Private and dunder names are never ops: answering them must not load plugins
    # (import machinery, pickling and doc tools probe such names).
    if attr.startswith("_"):
        raise AttributeError(f"module 'ge_hub.es' has no attribute {attr!r}")
    return namespace.resolve_top_level(attr)


def __dir__() -> list[str]:
    return sorted({*globals(), *namespace.top_level_names()})


__all__ = [
    "DomainNamespace",
    "GraphBuilder",
    "Tensor",
    "active_builders",
    "calls",
    "const",
    "current_builder",
    "input",
    "naming",
    "namespace",
    "op",
    "output",
]
