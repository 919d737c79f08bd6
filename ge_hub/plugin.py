"""Everything a ge-hub plugin needs, from one module (in the manner of `tox.plugin`).

Quick start: a distribution with an entry point in the group `ge_hub`

    # pyproject.toml
    [project.entry-points.ge_hub]
    acme = "acme_ge.plugin"

whose module implements the hooks of `ge_hub.hookspecs`:

    # acme_ge/plugin.py
    import numpy as np
    from ge_hub.plugin import (FLOATS, Input, KernelSpec, Output, PyKernel, hookimpl,
                               op, rewrite, same_as_input)

    @op("Twice", domain="acme", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
        infer=same_as_input)
    def twice(x):
        '''Y = 2 * X.'''
        return (x * 2).astype(x.dtype)

    def pattern(op, x):                      # what to find: x + x
        return op.Add(x, x)

    def replacement(op, x):                  # what to put instead
        return op.Twice(x, _domain="acme")

    twice_rule = rewrite.Rule(pattern, replacement, name="acme.add_self")

    @hookimpl
    def register_ops(registry):
        registry.add_op(twice)

    @hookimpl
    def register_kernels(registry):
        registry.add_kernel(KernelSpec(op="Twice", domain="acme", name="acme.twice",
                                       impl=PyKernel(lambda x: x * 2), priority=1))

    @hookimpl
    def register_passes(registry):
        registry.add_pass(rewrite.rule_pass("acme-fusions", [twice_rule], stage="fuse"))

Then `ge-hub plugins`, `ge-hub ops` and `ge-hub passes` list what it added, and
`ge-hub run --disable-pass acme-fusions` (or a `--pass-config` file naming the rule)
switches the fusion off. `ge_hub.testing` has the checks to test such a plugin with: a
kernel against its op's reference, a rule against the unrewritten graph.

What is here: the hook marker; op declaration (`op`, `Input`, `Output`, `Attr`,
`AttrKind`, `REQUIRED`, inference helpers, the dtype sets); kernels (`KernelSpec`,
`CKernel`, `PyKernel`, `Packed`, `include_dir` for C kernels); passes (`PassSpec`,
`PassResult`, `PassContext`, `PASS_STAGES`, the `rewrite` module with `Rule` and
`rule_pass`); `Frontend` and `Command`; the IR (`Graph`, `Node`, `Value`,
`TensorType`, `DType`, `Sym`, `Dim`, and `dim_to_json`/`dim_from_json` for a dim kept in
an attribute) and the errors a plugin raises or catches; op and
registry lookup for code that runs outside a compilation (`get_schema`, `get_registry`:
the loaded plugins'; inside one, use the context's `ctx.registry`).
"""

from ge_hub import rewrite
from ge_hub.errors import (
    GeHubError,
    GraphError,
    OpError,
    PluginError,
    SerializationError,
    UnknownOpError,
    UntrustedModelError,
)
from ge_hub.executor import include_dir
from ge_hub.ir import DType, Graph, Node, Sym, TensorType, Value
from ge_hub.ir.symbolic import from_json as dim_from_json
from ge_hub.ir.symbolic import to_json as dim_to_json
from ge_hub.ir.types import Dim
from ge_hub.kernels.base import CKernel, Packed, PyKernel
from ge_hub.ops import (
    REQUIRED,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    OpSchema,
    Output,
    get_schema,
    op,
)
from ge_hub.ops.inference import broadcast, broadcast_to_bool, same_as_input
from ge_hub.ops.schema import ANY, BOOL, FLOATS, INDICES, INT64, INTEGERS, NUMERIC, SIGNED
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext
from ge_hub.plugins import get_registry, hookimpl
from ge_hub.registry import PASS_STAGES, Command, Frontend, KernelSpec, PassSpec, Registry
from ge_hub.rewrite import Rule, rule_pass

__all__ = [
    "ANY", "BOOL", "FLOATS", "INDICES", "INT64", "INTEGERS", "NUMERIC", "PASS_STAGES",
    "REQUIRED", "SIGNED", "Attr", "AttrKind", "CKernel", "Command", "DType", "Dim",
    "Frontend", "GeHubError", "Graph", "GraphError", "InferenceContext", "Input",
    "KernelSpec", "Node", "OpError", "OpSchema", "Output", "Packed", "PassContext",
    "PassResult", "PassSpec", "PluginError", "PyKernel", "Registry", "Rule",
    "SerializationError", "Sym", "TensorType", "UnknownOpError", "UntrustedModelError",
    "Value", "broadcast", "broadcast_to_bool", "dim_from_json", "dim_to_json", "get_registry",
    "get_schema", "hookimpl", "include_dir", "op", "rewrite", "rule_pass", "same_as_input",
]
