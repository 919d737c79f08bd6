"""ge-hub: one graph engine for every ML framework.

The public API is what this module re-exports; everything else is free to change.
Importing ge_hub loads no plugin: plugins load on first use.
"""

from ge_hub import builtin, plugins
from ge_hub._version import __version__
from ge_hub.errors import (
    FrontendNotFoundError,
    GeHubError,
    GraphError,
    OpError,
    PluginError,
    UnknownOpError,
)
from ge_hub.frontend import load
from ge_hub.ir import DType, Graph, Node, Sym, TensorType, Value
from ge_hub.offline import load_compiled
from ge_hub.plugins import hookimpl
from ge_hub.runtime import CompiledModel, compile

# The plugin manager sits low in the layers and so cannot import the built-in plugin,
# which reaches every layer; the package hands it over here, before any lookup.
plugins.install_builtin(builtin)

__all__ = [
    "CompiledModel",
    "DType",
    "FrontendNotFoundError",
    "GeHubError",
    "Graph",
    "GraphError",
    "Node",
    "OpError",
    "PluginError",
    "Sym",
    "TensorType",
    "UnknownOpError",
    "Value",
    "__version__",
    "compile",
    "hookimpl",
    "load",
    "load_compiled",
]
