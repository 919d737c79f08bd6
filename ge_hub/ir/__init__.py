"""The graph IR: Graph, Node, Value, TensorType, DType and symbolic dims.

See `ge_hub.ir.graph` for who owns what. `print(graph)` gives the text form
(`ge_hub.ir.printer`), `graph.verify()` checks the invariants (`ge_hub.ir.verifier`),
and `ge_hub.ir.serialize` saves and loads graphs losslessly.
"""

from ge_hub.errors import GraphError
from ge_hub.ir import graph, printer, serialize, verifier
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.ir.types import Dim, Sym, TensorType

graph.install_methods(verify=verifier.verify, clone=serialize.clone,
                      format_graph=printer.format_graph)

__all__ = ["DType", "Dim", "Graph", "GraphError", "Node", "Sym", "TensorType", "Value"]
