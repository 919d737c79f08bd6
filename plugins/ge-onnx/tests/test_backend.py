"""ge_onnx.backend as the onnx.backend interface: prepare, run_model, run_node, devices."""

from __future__ import annotations

import numpy as np
import onnx.backend.base
import pytest
from onnx import TensorProto as T
from onnx import helper

import ge_onnx
from ge_onnx import backend

from .conftest import make_model, random_array

F = T.FLOAT


def add_relu_model():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    return make_model(nodes, [("a", F, [2, 3]), ("b", F, [3])], [("y", F, None)], opset=17)


def test_backend_is_an_onnx_backend():
    assert issubclass(backend.GeHubBackend, onnx.backend.base.Backend)
    assert ge_onnx.backend is backend


def test_prepare_then_run_many_times(rng):
    rep = backend.prepare(add_relu_model())
    assert isinstance(rep, onnx.backend.base.BackendRep)
    for _ in range(2):
        a, b = random_array(rng, (2, 3)), random_array(rng, (3,))
        (y,) = rep.run([a, b])
        np.testing.assert_allclose(y, np.maximum(a + b, 0), rtol=1e-6)
        (by_name,) = rep.run({"b": b, "a": a})
        np.testing.assert_array_equal(by_name, y)


def test_run_with_the_wrong_number_of_inputs(rng):
    rep = backend.prepare(add_relu_model())
    with pytest.raises(ValueError, match=r"takes 2 inputs \(a, b\), got 1"):
        rep.run([random_array(rng, (2, 3))])


def test_run_model(rng):
    a, b = random_array(rng, (2, 3)), random_array(rng, (3,))
    (y,) = backend.run_model(add_relu_model(), [a, b])
    np.testing.assert_allclose(y, np.maximum(a + b, 0), rtol=1e-6)


def test_run_node(rng):
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2])
    x = random_array(rng, (2, 3, 4))
    (y,) = backend.run_node(node, [x])
    np.testing.assert_array_equal(y, x.transpose(1, 0, 2))


def test_run_node_at_an_older_opset(rng):
    node = helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)
    x = random_array(rng, (2, 3))
    (y,) = backend.run_node(node, [x], opset_version=11)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-6)


def test_devices():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")
    with pytest.raises(ValueError, match="not 'CUDA'"):
        backend.prepare(add_relu_model(), "CUDA")
