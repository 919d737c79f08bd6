"""nn.LSTM, nn.GRU and nn.RNN through torch.export: one ge-hub LSTM, GRU or RNN node per
layer (ge_torch/converters/rnn.py), run by ge-hub's C kernels, against eager PyTorch.

Every variant PyTorch's modules offer in inference: layers stacked, both directions,
batch_first, no biases, tanh and relu, initial states given as inputs, a dynamic batch;
a projection (proj_size), which ONNX lacks, is unrolled as before."""

from __future__ import annotations

import ge_hub
import pytest
import torch
from conftest import assert_matches

import ge_torch

OP_OF = {torch.nn.LSTM: "LSTM", torch.nn.GRU: "GRU", torch.nn.RNN: "RNN"}

MODULES = {
    "lstm": lambda: torch.nn.LSTM(5, 7),
    "lstm_deep_bidirectional_batch_first": lambda: torch.nn.LSTM(
        5, 6, num_layers=2, bidirectional=True, batch_first=True),
    "lstm_no_bias_odd_hidden": lambda: torch.nn.LSTM(3, 17, bias=False),
    "gru": lambda: torch.nn.GRU(5, 7),
    "gru_deep_bidirectional": lambda: torch.nn.GRU(5, 4, num_layers=3, bidirectional=True),
    "gru_batch_first_no_bias": lambda: torch.nn.GRU(5, 3, batch_first=True, bias=False),
    "rnn_tanh_bidirectional": lambda: torch.nn.RNN(5, 6, bidirectional=True),
    "rnn_relu_deep_batch_first": lambda: torch.nn.RNN(
        5, 8, num_layers=2, nonlinearity="relu", batch_first=True),
}


def _sequence(module, gen, seq=9, batch=3):
    shape = (batch, seq, module.input_size) if module.batch_first else (
        seq, batch, module.input_size)
    return torch.randn(*shape, generator=gen)


def _flat(outputs):
    y, states = outputs
    return [y, *(states if isinstance(states, tuple) else (states,))]


def _recurrent_nodes(graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if node.op in ("LSTM", "GRU", "RNN"):
            counts[node.op] = counts.get(node.op, 0) + 1
    return counts


@pytest.mark.parametrize("name", MODULES)
def test_one_node_per_layer_matches_eager(name, gen):
    torch.manual_seed(0)
    module = MODULES[name]().eval()
    x = _sequence(module, gen)
    graph = ge_torch.from_module(module, (x,))
    assert _recurrent_nodes(graph) == {OP_OF[type(module)]: module.num_layers}
    assert graph.attrs["torch_ops"] == {}
    compiled = ge_hub.compile(graph)
    assert compiled.summary()["python_steps"] == 0, compiled.summary()
    got = compiled.run([x.numpy()])
    with torch.no_grad():
        want = _flat(module(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_matches(torch.from_numpy(g), w)


class StatefulLSTM(torch.nn.Module):
    """Initial states as inputs, and an op after the layer."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True)

    def forward(self, x, h, c):
        y, (h_n, c_n) = self.lstm(x, (h, c))
        return torch.relu(y), h_n, c_n


def test_initial_states_and_a_dynamic_batch(gen):
    torch.manual_seed(0)
    module = StatefulLSTM().eval()

    def inputs(batch):
        return (torch.randn(5, batch, 4, generator=gen), torch.randn(4, batch, 6, generator=gen),
                torch.randn(4, batch, 6, generator=gen))

    batch = torch.export.Dim("batch", min=2, max=64)
    graph = ge_torch.from_module(module, inputs(3), dynamic_shapes={
        "x": {1: batch}, "h": {1: batch}, "c": {1: batch}})
    assert _recurrent_nodes(graph) == {"LSTM": 2}
    compiled = ge_hub.compile(graph)
    for size in (3, 11):
        args = inputs(size)
        got = compiled.run([a.numpy() for a in args])
        assert compiled.summary()["python_steps"] == 0
        with torch.no_grad():
            want = module(*args)
        for g, w in zip(got, want):
            assert_matches(torch.from_numpy(g), w)


def test_a_long_sequence_stays_one_node(gen):
    """Unrolled, this LSTM was hundreds of nodes per time step's worth of graph."""
    torch.manual_seed(0)
    module = torch.nn.LSTM(16, 32).eval()
    x = torch.randn(64, 2, 16, generator=gen)
    graph = ge_torch.from_module(module, (x,))
    assert len(graph.nodes) < 40
    got = ge_hub.compile(graph).run([x.numpy()])
    with torch.no_grad():
        want = _flat(module(x))
    for g, w in zip(got, want):
        assert_matches(torch.from_numpy(g), w)


def test_a_projection_is_unrolled_as_before(gen):
    """No ONNX op has LSTM's projection: that call is decomposed, and still runs in
    ge-hub, as every LSTM did before the converters."""
    torch.manual_seed(0)
    module = torch.nn.LSTM(5, 8, proj_size=3).eval()
    x = _sequence(module, gen)
    graph = ge_torch.from_module(module, (x,))
    assert _recurrent_nodes(graph) == {}
    assert graph.attrs["torch_ops"] == {}
    got = ge_hub.compile(graph).run([x.numpy()])
    with torch.no_grad():
        want = _flat(module(x))
    for g, w in zip(got, want):
        assert_matches(torch.from_numpy(g), w)
