"""The ahead-of-time path: ge_hub.load / ge_torch.from_module / from_exported."""

from __future__ import annotations

import ge_hub
import numpy as np
import pytest
import torch
from conftest import assert_matches

import ge_torch
from ge_torch.errors import ConversionError


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.register_buffer("offset", torch.linspace(-1, 1, 4))

    def forward(self, image, scale):
        y = torch.relu(self.bn(self.conv(image)))
        return y.mean((2, 3)) * scale + self.offset


def _model():
    torch.manual_seed(0)
    return ConvNet().eval()


def _inputs(gen, batch=2):
    return torch.randn(batch, 3, 6, 6, generator=gen), torch.randn(batch, 1, generator=gen)


def test_load_names_inputs_after_forward_arguments(gen):
    model = _model()
    image, scale = _inputs(gen)
    graph = ge_hub.load(model, example_inputs=(image, scale))
    assert graph.input_names == ["image", "scale"]
    # Parameters and buffers are constants, not inputs.
    assert len(graph.constants) >= 7
    (y,) = ge_hub.compile(graph).run({"image": image.numpy(), "scale": scale.numpy()})
    with torch.no_grad():
        assert_matches(torch.from_numpy(y), model(image, scale))


def test_from_exported_program(gen):
    model = _model()
    inputs = _inputs(gen)
    program = torch.export.export(model, inputs)
    (y,) = ge_hub.compile(ge_torch.from_exported(program)).run([x.numpy() for x in inputs])
    with torch.no_grad():
        assert_matches(torch.from_numpy(y), model(*inputs))


def test_pt2_file_through_ge_hub_load(gen, tmp_path):
    model = _model()
    inputs = _inputs(gen)
    path = tmp_path / "convnet.pt2"
    torch.export.save(torch.export.export(model, inputs), path)
    graph = ge_hub.load(str(path), trusted=True)  # our own file (see test_trust.py)
    (y,) = ge_hub.compile(graph).run([x.numpy() for x in inputs])
    with torch.no_grad():
        assert_matches(torch.from_numpy(y), model(*inputs))


def test_dynamic_batch_is_a_symbol(gen):
    model = _model()
    batch = torch.export.Dim("batch", min=1, max=32)
    graph = ge_torch.from_module(model, _inputs(gen),
                                 dynamic_shapes={"image": {0: batch}, "scale": {0: batch}})
    assert isinstance(graph.inputs[0].type.shape[0], ge_hub.Sym)
    assert graph.inputs[0].type.shape[0] == graph.inputs[1].type.shape[0]
    compiled = ge_hub.compile(graph)
    for size in (1, 5):
        inputs = _inputs(gen, size)
        (y,) = compiled.run([x.numpy() for x in inputs])
        with torch.no_grad():
            assert_matches(torch.from_numpy(y), model(*inputs))


def test_sizes_become_ge_hub_dim_expressions():
    import sympy
    from ge_hub.plugin import Sym
    from torch.utils._sympy import functions as fn

    from ge_torch.symbolic import as_dim

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    a, b = Sym("s0"), Sym("s1")
    assert as_dim(s0) == a and as_dim(4 * s0) == 4 * a == a * 4
    assert as_dim(s0 * s1 + 1) == b * a + 1
    assert as_dim(fn.FloorDiv(s0 - 1, 2) + 1) == (a - 1) // 2 + 1
    assert as_dim(fn.PythonMod(s0, 4)) == a % 4
    assert as_dim(fn.CeilDiv(s0, 2)) == (a + 1) // 2
    assert as_dim(s0**2) == a * a
    assert as_dim(sympy.Max(s0, s1)) == Sym.named(str(sympy.Max(s0, s1)))  # no ge-hub form


def test_dynamic_sizes_agree_with_ge_hub_inference(gen):
    module = _Function(lambda x: torch.relu(x.flatten(0, 1)))
    x = torch.randn(5, 3, 4, generator=gen)
    batch = torch.export.Dim("batch", min=2, max=32)
    graph = ge_torch.from_module(module, (x,), dynamic_shapes={"x": {0: batch}})
    (n, _, _) = graph.inputs[0].type.shape
    assert graph.outputs[0].type.shape == (3 * n, 4)
    compiled = ge_hub.compile(graph)
    for size in (2, 7):
        x = torch.randn(size, 3, 4, generator=gen)
        (y,) = compiled.run([x.numpy()])
        assert_matches(torch.from_numpy(y), torch.relu(x.flatten(0, 1)))


def test_unconverted_op_runs_as_a_torch_node(gen):
    def body(x):
        return torch.cumprod(torch.sigmoid(x), dim=1) * 2

    module = _Function(body)
    x = torch.randn(3, 4, generator=gen)
    graph = ge_hub.load(module, example_inputs=(x,))
    assert [n.qualified_op for n in graph.nodes if n.domain] == ["torch.ATen"]
    compiled = ge_hub.compile(graph)
    (y,) = compiled.run([x.numpy()])
    assert_matches(torch.from_numpy(y), body(x))
    assert compiled.summary()["fallback_ops"] == {"torch.ATen": 1}


def test_unconverted_op_can_be_refused(gen):
    module = _Function(lambda x: torch.cumprod(x, 0))
    with pytest.raises(ConversionError, match=r"aten.cumprod.default x1 \(no converter\)"):
        ge_torch.from_module(module, (torch.randn(3, generator=gen),), allow_torch_ops=False)


def test_module_without_example_inputs_is_an_error():
    with pytest.raises(ConversionError, match="needs example inputs"):
        ge_hub.load(_model())


def test_training_mode_buffer_mutation_is_refused(gen):
    model = _model().train()
    with pytest.raises(ConversionError, match="mutates .*running_mean"):
        ge_hub.load(model, example_inputs=_inputs(gen))


def test_frontend_is_registered():
    names = [f.name for f, _ in ge_hub.plugins.get_registry().frontends()]
    assert "torch" in names
    from ge_torch.plugin import accepts

    assert accepts(torch.nn.Linear(2, 2)) and accepts("model.pt2")
    assert not accepts(np.zeros(2)) and not accepts("model.onnx")


class _Function(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)
