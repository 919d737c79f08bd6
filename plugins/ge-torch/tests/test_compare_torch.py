"""`ge-hub compare --against torch`: values matched to the FX nodes they came from."""

from __future__ import annotations

import ge_hub
import numpy as np
import pytest
import torch
from ge_hub import plugins
from ge_hub.cli import main
from ge_hub.compare import compare_model


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.linear = torch.nn.Linear(512, 10)

    def forward(self, x):
        y = torch.relu(self.conv(x)).flatten(1)
        return torch.tanh(self.linear(y)) * 2


@pytest.fixture(scope="module")
def example():
    torch.manual_seed(0)
    return Small().eval(), torch.randn(1, 3, 8, 8)


def test_values_carry_fx_names_and_match_torch(example, tmp_path, capsys):
    module, x = example
    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(module, (x,)), path)
    # (fuse_elementwise off: the Tanh and the Mul are compared one by one)
    assert main(["compare", str(path), "--against", "torch", "--trust-pickle", "--all",
                 "--disable-pass", "fuse_elementwise"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ge-hub against torch:")
    assert "[tanh]" in out and "[mul]" in out   # the FX node names beside ge-hub's
    assert "every matched value is within tolerance" in out


def test_a_pt2_file_needs_trust(example, tmp_path, capsys):
    module, x = example
    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(module, (x,)), path)
    assert main(["compare", str(path), "--against", "torch"]) == 1
    assert "trust" in capsys.readouterr().err


def test_a_wrong_kernel_is_named_by_its_fx_node(example):
    from ge_hub.kernels.base import PyKernel
    from ge_hub.registry import KernelSpec

    module, x = example
    graph = ge_hub.load(module, example_inputs=(x,))
    assert "tanh" in graph.attrs["source_names"].values()
    plugins.reset()
    try:
        plugins.get_registry().add_kernel(KernelSpec(
            "Tanh", PyKernel(lambda v: np.tanh(v) * np.float32(1.01)), priority=10_000,
            name="test_wrong_tanh"))
        result = compare_model(ge_hub.compile(graph), graph, {graph.input_names[0]: x.numpy()},
                               against="torch", model=module)
    finally:
        plugins.reset()
    first = result.first_divergence
    assert first.source_name == "tanh" and first.op == "Tanh"
    assert not result.outputs_ok
