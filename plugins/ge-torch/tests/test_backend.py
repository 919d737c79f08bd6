"""The backend's behaviour around the converters: freezing, partitioning, graph breaks,
symbolic sizes, and every case where it must fall back rather than be wrong."""

from __future__ import annotations

import warnings

import ge_hub
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_matches, compile_ge

import ge_torch
from ge_torch.backend import ge_backend


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _graph_inputs(reports):
    return [v for r in reports for f in r.functions for v in f.converted.graph.inputs]


def test_parameters_are_frozen_as_constants(gen):
    model = TwoLayers().eval()
    x = torch.randn(4, 6, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(model)
        assert_matches(compiled(x), model(x))
    # Only x is an input; the four parameters are constants of the graph.
    assert [list(v.type.shape) for v in _graph_inputs(reports)] == [[4, 6]]
    assert len(reports[0].functions[0].converted.frozen) == 4


def test_unfrozen_parameters_are_inputs(gen):
    model = TwoLayers().eval()
    x = torch.randn(4, 6, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(model, freeze=False)
        assert_matches(compiled(x), model(x))
    assert len(_graph_inputs(reports)) == 5


def test_a_frozen_parameter_changed_in_place_is_recopied(gen):
    model = TwoLayers().eval()
    x = torch.randn(4, 6, generator=gen)
    with torch.no_grad():
        compiled, _ = compile_ge(model)
        before = compiled(x)
        model.fc2.bias.add_(1.0)  # e.g. an optimizer step, or load_state_dict
        after = compiled(x)
        assert_matches(after, model(x))
    assert_matches(after, before + 1.0)


def test_unconverted_op_is_partitioned(gen):
    def fn(x):
        y = torch.sin(x) * 2
        return torch.cumprod(y, 1) + torch.cos(y)

    x = torch.randn(3, 5, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(fn)
        assert_matches(compiled(x), fn(x))
    (report,) = reports
    assert dict(report.fallback_ops) == {"aten.cumprod.default": 1}
    assert report.fallback_reasons["aten.cumprod.default"] == "no converter"
    assert report.partitions == 2 and report.ge_nodes == report.aten_nodes - 1


def test_float16_runs_in_pytorch(gen):
    # Half precision rounds differently in ge-hub: PyTorch keeps those nodes.
    def fn(x):
        return torch.relu(x.half()).sum(1).float() * 2

    x = torch.randn(3, 5, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(fn)
        assert_matches(compiled(x), fn(x))
    (report,) = reports
    assert report.fallback_ops["aten.relu.default"] == 1
    assert "float16" in report.fallback_reasons["aten.relu.default"]


def test_training_with_grad_runs_eager_with_a_warning(gen):
    model = TwoLayers().train()
    x = torch.randn(4, 6, generator=gen)
    compiled, reports = compile_ge(model)
    with pytest.warns(UserWarning, match="runs in eager PyTorch"):
        y = compiled(x)
    y.sum().backward()  # autograd works: it is eager
    assert model.fc1.weight.grad is not None
    assert reports == []


def test_input_mutation_is_honoured(gen):
    def fn(x, y):
        x.mul_(2)
        return x + y

    x, y = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    x_eager = x.clone()
    with torch.no_grad():
        expected = fn(x_eager, y)
        compiled, reports = compile_ge(fn)
        actual = compiled(x, y)
    assert_matches(actual, expected)
    assert_matches(x, x_eager)  # the input was doubled in place, as in eager
    assert reports[0].ge_nodes == reports[0].aten_nodes


def test_batch_norm_in_training_mode_updates_running_stats(gen):
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3)).train()
    eager = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3)).train()
    eager.load_state_dict(model.state_dict())
    x = torch.randn(2, 2, 5, 5, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(model)
        assert_matches(compiled(x), eager(x))
    # The running statistics are buffers mutated in place: never frozen, still updated.
    assert_matches(model[1].running_mean, eager[1].running_mean)
    assert_matches(model[1].running_var, eager[1].running_var)


def test_graph_breaks_give_several_graphs(gen):
    def fn(x):
        y = torch.tanh(x) @ x.T
        torch._dynamo.graph_break()
        return F.softmax(y, dim=-1) * 3

    x = torch.randn(4, 4, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(fn)
        assert_matches(compiled(x), fn(x))
    assert len(reports) == 2
    assert all(r.ge_nodes == r.aten_nodes > 0 for r in reports)


def test_dynamic_sizes_are_symbols_and_sym_int_outputs_work(gen):
    def fn(x):
        flat = x.reshape(x.shape[0] * x.shape[1], -1)
        return flat.softmax(-1), x.shape[0] * 2

    with torch.no_grad():
        compiled, reports = compile_ge(fn, dynamic=True)
        for rows in (3, 7):
            x = torch.randn(rows, 2, 5, generator=gen)
            out, size = compiled(x)
            expected, expected_size = fn(x)
            assert_matches(out, expected)
            assert size == expected_size
    assert len(reports) == 1
    (value,) = _graph_inputs(reports)
    assert value.type.rank == 3 and isinstance(value.type.shape[0], ge_hub.Sym)


def test_options_are_checked():
    with pytest.raises(ValueError, match="unknown options"):
        ge_backend(None, [], options={"freez": True})


def test_explain_reports_breaks_and_fallbacks(gen):
    def fn(x):
        y = torch.relu(x) + 1
        torch._dynamo.graph_break()
        return torch.cumprod(y, 0)

    explanation = ge_torch.explain(fn, torch.randn(3, 3, generator=gen))
    assert len(explanation.graphs) == 2 and len(explanation.graph_breaks) == 1
    assert dict(explanation.fallback_ops) == {"aten.cumprod.default": 1}
    text = str(explanation)
    assert "2 graphs, 1 graph break" in text
    assert "fallback: aten.cumprod.default x1 (no converter)" in text


def test_no_warning_for_inference(gen):
    model = TwoLayers().eval()
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        compiled, reports = compile_ge(model)
        x = torch.randn(2, 6, generator=gen)
        assert_matches(compiled(x), model(x))
    assert reports[0].ge_nodes == reports[0].aten_nodes


def test_dynamic_int_argument_is_a_scalar_input(gen):
    # After a second value Dynamo makes the int argument a SymInt that no tensor's shape
    # carries: it becomes an int64 scalar input of the ge-hub graph.
    def fn(x, n):
        return torch.arange(n) * n + x.sum()

    x = torch.randn(3, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(fn)
        for n in (2, 5, 7):
            assert_matches(compiled(x, n), fn(x, n))
    assert all(not r.fallback_ops for r in reports)
    scalar_inputs = [v for v in _graph_inputs(reports[-1:]) if v.type.shape == ()]
    assert [str(v.type.dtype) for v in scalar_inputs] == ["int64"]
