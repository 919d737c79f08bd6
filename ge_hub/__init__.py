"""ge-hub: one graph engine for every ML framework.

The public API is what this module re-exports; everything else is free to change.
Importing ge_hub loads no plugin: plugins load on first use.
"""

from importlib.metadata import PackageNotFoundError, version

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

try:
    __version__ = version("ge-hub")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

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
