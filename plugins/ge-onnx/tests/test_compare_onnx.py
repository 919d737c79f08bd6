"""`ge-hub compare --against onnxruntime`: ONNX Runtime's intermediates, matched by ONNX name."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime  # noqa: F401 - a dependency of the onnx envs, the peer compared against
from ge_hub.cli import main
from onnx import TensorProto, helper, numpy_helper


def tiny_model(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((256, 10)).astype(np.float32), "m")
    shape = numpy_helper.from_array(np.array([1, 256], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("Reshape", ["relu", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "m"], ["mm"]),
             helper.make_node("Tanh", ["mm"], ["th"]),
             helper.make_node("Add", ["th", "th"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w, m, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_ge_hub_matches_onnxruntime_value_by_value(tmp_path, capsys):
    path = tiny_model(tmp_path / "tiny.onnx")
    # (fuse_elementwise off: the Tanh's value is compared on its own)
    assert main(["compare", path, "--against", "onnxruntime", "--all",
                 "--disable-pass", "fuse_elementwise"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ge-hub against onnxruntime:")
    for name in ("mm (MatMul", "th (Tanh", "y ("):
        assert name in out
    assert "every matched value is within tolerance" in out


def test_a_wrong_kernel_shows_against_onnxruntime(tmp_path, capsys):
    from ge_hub import plugins
    from ge_hub.kernels.base import PyKernel
    from ge_hub.registry import KernelSpec

    path = tiny_model(tmp_path / "tiny.onnx")
    plugins.reset()
    try:
        registry = plugins.get_registry()
        registry.add_kernel(KernelSpec("Tanh", PyKernel(lambda x: np.tanh(x) * np.float32(1.01)),
                                       priority=10_000, name="test_wrong_tanh"))
        assert main(["compare", path, "--against", "onnxruntime"]) == 1
    finally:
        plugins.reset()
    out = capsys.readouterr().out
    assert "first divergence: th (output of Tanh node" in out
