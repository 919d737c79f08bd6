"""The backend is faithful or loud (issue #12): a compiled graph computes with the
parameters it is called with, outputs that alias an input or each other do so as in
eager, and an error is raised (or, when asked, warned about) instead of a quiet run in
eager PyTorch. The first two tests are the issue's reproductions."""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch
from conftest import assert_matches, compile_ge
from ge_hub.errors import PluginError
from torch import nn
from torch._dynamo.exc import BackendCompilerFailed

from ge_torch import runtime
from ge_torch.backend import GeBackend
from ge_torch.converters import CONVERTERS
from ge_torch.errors import ConverterError, FallbackWarning, LoweringError


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        x = self.norm(x)
        torch._dynamo.graph_break()  # Dynamo reuses each half's graph for every Block
        return self.fc(x)


def _blocks(count: int, gen) -> nn.Module:
    model = nn.Sequential(*[Block() for _ in range(count)]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return model


def _functions(reports):
    return [f for r in reports for f in r.functions]


def test_repeated_blocks_use_each_instances_parameters(gen):
    model = _blocks(2, gen)
    x = torch.randn(3, 8, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(model)
        assert_matches(compiled(x), model(x))
        assert_matches(compiled(x), model(x))  # the cached variants, called again
    # The graphs were shared by both blocks, each frozen once per block.
    assert len(reports) == 2
    assert all(len(f._variants) == 2 for f in _functions(reports))


def test_dynamic_output_aliasing_the_input_keeps_its_permute():
    def fn(x):
        return x.permute(0, 2, 1, 3).reshape(-1, x.shape[1], x.shape[3])

    x = torch.randn(1, 16, 16, 8)
    with torch.no_grad():
        compiled, _ = compile_ge(fn, dynamic=True)
        actual, expected = compiled(x), fn(x)
    assert_matches(actual, expected)
    assert actual.stride() == expected.stride() == (8, 128, 1)
    assert actual.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_outputs_aliasing_each_other_share_storage_as_in_eager(gen):
    def fn(x):
        y = x * 2
        return y, y.t(), y[1:]

    x = torch.randn(3, 4, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(fn)
        outs = compiled(x)
    for actual, expected in zip(outs, fn(x)):
        assert_matches(actual, expected)
        assert actual.stride() == expected.stride()
    y, yt, tail = outs
    y.add_(1)  # as in eager, writing to y is seen through its views
    assert_matches(yt, y.t())
    assert_matches(tail, y[1:])
    assert reports[0].ge_nodes == reports[0].aten_nodes == 1
    assert reports[0].output_views == 2


def test_a_parameter_changed_in_place_in_one_block_is_recopied(gen):
    model = _blocks(2, gen)
    x = torch.randn(3, 8, generator=gen)
    with torch.no_grad():
        compiled, _ = compile_ge(model)
        compiled(x)
        model[1].fc.weight.mul_(-1)
        assert_matches(compiled(x), model(x))


def test_beyond_the_frozen_variants_parameters_are_inputs(gen, monkeypatch):
    monkeypatch.setattr(runtime, "MAX_FROZEN_VARIANTS", 1)
    model = _blocks(3, gen)
    x = torch.randn(3, 8, generator=gen)
    with torch.no_grad():
        compiled, reports = compile_ge(model)
        assert_matches(compiled(x), model(x))
        model[2].fc.bias.add_(1.0)  # no copy to refresh: read at each call
        assert_matches(compiled(x), model(x))
    functions = _functions(reports)
    assert all(f._unfrozen is not None for f in functions)
    unfrozen_inputs = [len(f._unfrozen_graph().inputs) for f in functions]
    assert unfrozen_inputs == [3, 3]  # x, weight, bias


def test_a_deleted_module_releases_its_frozen_variant(gen):
    reports: list = []
    backend = GeBackend(reports=reports)
    x = torch.randn(3, 8, generator=gen)
    first = _blocks(1, gen)
    with torch.no_grad():
        compiled_first = torch.compile(first, backend=backend)
        compiled_first(x)
        other = _blocks(1, gen)
        # The same forward code: Dynamo's guards pass and its graphs are reused.
        assert_matches(torch.compile(other, backend=backend)(x), other(x))
        assert all(len(f._variants) == 2 for f in _functions(reports))
        del other
        gc.collect()
        assert_matches(compiled_first(x), first(x))
    assert all(len(f._variants) == 1 for f in _functions(reports))


# -- no silent eager ---------------------------------------------------------------


def _break_converter(monkeypatch, target, error):
    def broken(cx, node, *args, **kwargs):
        raise error

    original = CONVERTERS[target]
    monkeypatch.setitem(CONVERTERS, target, dataclasses.replace(original, convert=broken))


def _sin_then_cos(x):
    return torch.cos(torch.sin(x) * 2)


def test_a_failing_converter_raises(gen, monkeypatch):
    _break_converter(monkeypatch, torch.ops.aten.sin.default, KeyError("oops"))
    compiled, _ = compile_ge(_sin_then_cos)
    with torch.no_grad(), pytest.raises(BackendCompilerFailed) as info:
        compiled(torch.randn(3, generator=gen))
    assert isinstance(info.value.inner_exception, ConverterError)
    assert "converter of aten.sin.default failed on node sin: KeyError" in str(info.value)


def test_a_failed_plugin_load_is_an_error_not_eager(gen, monkeypatch):
    # What every converter meets when a third-party plugin broke ge-hub's registry.
    def registry_broken(*args, **kwargs):
        raise PluginError("plugin 'acme' failed in register_ops: boom")

    monkeypatch.setattr("ge_torch.context.get_schema", registry_broken)
    compiled, reports = compile_ge(_sin_then_cos)
    with torch.no_grad(), pytest.raises(BackendCompilerFailed, match="plugin 'acme' failed") \
            as info:
        compiled(torch.randn(3, generator=gen))
    assert isinstance(info.value.inner_exception, ConverterError)
    assert reports == []


def test_on_error_fallback_warns_once_and_runs_the_node_in_pytorch(gen, monkeypatch):
    _break_converter(monkeypatch, torch.ops.aten.sin.default, KeyError("oops-fallback"))
    x = torch.randn(3, generator=gen)
    with torch.no_grad():
        with pytest.warns(FallbackWarning, match="oops-fallback") as record:
            compiled, reports = compile_ge(_sin_then_cos, on_error="fallback")
            assert_matches(compiled(x), _sin_then_cos(x))
            torch._dynamo.reset()
            compiled, reports = compile_ge(_sin_then_cos, on_error="fallback")
            assert_matches(compiled(x), _sin_then_cos(x))
    assert len([w for w in record if issubclass(w.category, FallbackWarning)]) == 1
    assert dict(reports[0].fallback_ops) == {"aten.sin.default": 1}
    assert "oops-fallback" in reports[0].fallback_reasons["aten.sin.default"]


def test_a_graph_ge_hub_cannot_compile_raises_or_warns(gen, monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("no plan for this graph")

    monkeypatch.setattr("ge_torch.runtime.ge_hub.compile", refuse)
    x = torch.randn(3, generator=gen)
    compiled, _ = compile_ge(_sin_then_cos)
    with torch.no_grad(), pytest.raises(BackendCompilerFailed, match="no plan for this graph") \
            as info:
        compiled(x)
    assert isinstance(info.value.inner_exception, LoweringError)
    torch._dynamo.reset()
    compiled, reports = compile_ge(_sin_then_cos, on_error="fallback")
    with torch.no_grad(), pytest.warns(FallbackWarning, match="no plan for this graph"):
        assert_matches(compiled(x), _sin_then_cos(x))
    assert reports[0].ge_nodes == 0


def test_on_error_is_checked():
    with pytest.raises(ValueError, match="on_error"):
        GeBackend(on_error="ignore")


@pytest.mark.parametrize("dynamic", [False, True])
def test_as_strided_in_pytorch_reads_eagers_layout(gen, dynamic):
    # Found by the differential test: x * 1 of a permuted tensor keeps the permuted
    # layout in eager, and as_strided reads that storage; ge-hub's row-major result
    # must come back in eager's strides.
    def fn(x):
        x = x.permute(2, 0, 1).contiguous().tanh().permute(1, 2, 0)
        return x + torch.as_strided(x * 1, (x.shape[0], 6, 8), (48, 1, 6))

    with torch.no_grad():
        compiled, reports = compile_ge(fn, dynamic=dynamic)
        for batch in (2, 3):
            x = torch.randn(batch, 6, 8, generator=gen)
            assert_matches(compiled(x), fn(x))
    assert all(r.ge_nodes > 0 for r in reports)
