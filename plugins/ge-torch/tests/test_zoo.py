"""The model zoo, compiled three ways, each compared with eager on random inputs:

- `torch.compile(model, backend="ge")`, static shapes;
- the ahead-of-time path, `ge_hub.load(model, example_inputs=...)` then `ge_hub.compile`,
  run on NumPy arrays without PyTorch;
- `torch.compile(..., dynamic=True)` over two batch sizes, which must reuse one graph.

Every model must really run in ge-hub: all its ATen ops, except the one op the
`unconverted_op` model uses on purpose, which must fall back to PyTorch.
"""

from __future__ import annotations

import ge_hub
import numpy as np
import pytest
import torch
import zoo
from conftest import assert_matches, compile_ge

import ge_torch

# Recurrent modules are only traced by Dynamo with allow_rnn; without it Dynamo runs
# them in eager PyTorch (see test_lstm_without_allow_rnn_runs_in_eager).
RECURRENT = {"lstm", "gru"}
EXPECTED_FALLBACK = {"unconverted_op": {"aten.cumprod.default": 1}}


def _params(slow_dynamic=()):
    return [pytest.param(e.name, marks=pytest.mark.slow if e.slow or e.name in slow_dynamic
                         else ()) for e in zoo.ZOO]


def _dynamo_config(name):
    return torch._dynamo.config.patch(allow_rnn=name in RECURRENT)


@pytest.mark.parametrize("name", _params())
def test_backend_matches_eager(name):
    model = zoo.build(name)
    inputs = zoo.example_inputs(name, batch=2)
    with torch.no_grad(), _dynamo_config(name):
        expected = model(*inputs)
        compiled, reports = compile_ge(model)
        actual = compiled(*inputs)
    assert_matches(actual, expected)
    assert len(reports) == 1
    (report,) = reports
    assert dict(report.fallback_ops) == EXPECTED_FALLBACK.get(name, {})
    assert report.ge_nodes == report.aten_nodes - sum(report.fallback_ops.values()) > 0
    assert report.ge_steps > 0


@pytest.mark.parametrize("name", _params())
def test_export_path_matches_eager(name):
    model = zoo.build(name)
    inputs = zoo.example_inputs(name, batch=2)
    with torch.no_grad():
        expected = model(*inputs)
    graph = ge_hub.load(model, example_inputs=inputs)
    compiled = ge_hub.compile(graph)
    (actual,) = compiled.run([x.numpy() for x in inputs])
    assert_matches(torch.from_numpy(actual), expected)
    # Only the deliberately unconverted op runs in PyTorch, as a torch.ATen node.
    assert graph.attrs["torch_ops"] == EXPECTED_FALLBACK.get(name, {})


@pytest.mark.parametrize("name", _params(slow_dynamic=("unet", "mobilenetv2")))
def test_dynamic_backend_over_two_batch_sizes(name):
    model = zoo.build(name)
    with torch.no_grad(), _dynamo_config(name):
        compiled, reports = compile_ge(model, dynamic=True)
        for batch in (2, 3):
            inputs = zoo.example_inputs(name, batch=batch, seed=batch)
            assert_matches(compiled(*inputs), model(*inputs))
    assert len(reports) == 1, "a second batch size must not recompile"
    (report,) = reports
    assert dict(report.fallback_ops) == EXPECTED_FALLBACK.get(name, {})
    # The batch dim is a symbol of the ge-hub graph, not a constant.
    graph_inputs = [v for f in report.functions for v in f.converted.graph.inputs]
    assert any(isinstance(d, ge_hub.Sym) for v in graph_inputs for d in v.type.shape)


def test_lstm_without_allow_rnn_runs_in_eager():
    # Dynamo's default leaves nn.LSTM to eager PyTorch: no graph reaches the backend,
    # and the result is eager's.
    model = zoo.build("lstm")
    (x,) = zoo.example_inputs("lstm")
    with torch.no_grad():
        compiled, reports = compile_ge(model)
        assert_matches(compiled(x), model(x))
    assert reports == []


def test_export_path_dynamic_batch():
    model = zoo.build("gpt_block")
    (x,) = zoo.example_inputs("gpt_block", batch=2)
    batch = torch.export.Dim("batch", min=1, max=64)
    graph = ge_torch.from_module(model, (x,), dynamic_shapes={"x": {0: batch}})
    assert isinstance(graph.inputs[0].type.shape[0], ge_hub.Sym)
    compiled = ge_hub.compile(graph)
    for size in (2, 5):
        (x,) = zoo.example_inputs("gpt_block", batch=size, seed=size)
        with torch.no_grad():
            expected = model(x)
        (actual,) = compiled.run([x.numpy()])
        assert_matches(torch.from_numpy(actual), expected)
    assert compiled.summary()["cached_plans"] == 2


def test_export_path_runs_without_torch_tensors():
    # The compiled graph takes and returns NumPy arrays: PyTorch is out of the loop.
    model = zoo.build("mlp")
    (x,) = zoo.example_inputs("mlp")
    compiled = ge_hub.compile(ge_hub.load(model, example_inputs=(x,)))
    (y,) = compiled.run({"x": x.numpy()})
    assert isinstance(y, np.ndarray) and y.shape == (2, 10)
