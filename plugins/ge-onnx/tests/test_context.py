"""The ONNX frontend looks ops up, and verifies, in the registry of the load's context:
`ge_hub.load(model, registry=...)` imports an op that only that registry knows."""

from __future__ import annotations

import ge_hub
import numpy as np
import pytest
from ge_hub import builtin
from ge_hub.errors import GeHubError
from ge_hub.ops import Input, Output, op
from ge_hub.ops.inference import same_as_input
from ge_hub.ops.schema import FLOATS
from ge_hub.registry import Registry
from onnx import TensorProto, helper

from ge_onnx import plugin as onnx_plugin


@op("Twice", domain="acme", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=same_as_input)
def twice(x):
    """Y = 2 * X."""
    return (x * 2).astype(x.dtype)


def acme_registry() -> Registry:
    registry = Registry()
    for hook in (builtin.register_ops, builtin.register_kernels, builtin.register_passes,
                 builtin.register_frontends):
        hook(registry)
    registry.current_plugin = "onnx"
    onnx_plugin.register_frontends(registry)
    registry.current_plugin = "acme"
    registry.add_op(twice)
    return registry


def acme_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Twice", ["r"], ["y"], domain="acme")], "acme",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("acme", 1)])


def test_load_imports_ops_of_the_given_registry():
    registry = acme_registry()
    graph = ge_hub.load(acme_model(), registry=registry)
    assert [n.qualified_op for n in graph.nodes] == ["Relu", "acme.Twice"]
    x = np.array([-1, 0, 1, 2], np.float32)
    (y,) = ge_hub.compile(graph, registry=registry).run({"x": x})
    np.testing.assert_array_equal(y, [0, 0, 2, 4])


def test_the_loaded_plugins_registry_does_not_know_the_op():
    with pytest.raises(GeHubError, match="acme"):
        ge_hub.load(acme_model())
