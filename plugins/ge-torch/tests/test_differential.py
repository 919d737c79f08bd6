"""Differential test of the backend against eager PyTorch, on randomly composed modules.

Hypothesis writes the source of a model: a stack of instances of one block class whose
forward mixes parameters (Linear, LayerNorm, a scale), activations, reductions, views
and permutes (round trips through other layouts), sort, as_strided, in-place ops on
intermediates and on the input, an op ge-torch leaves to PyTorch (cumprod, for
partitioning), matmuls and graph breaks; the model returns its result, and maybe views
of it or of its input. Two instances of the model (different weights, one class, so
Dynamo shares their graphs) are compiled with `backend="ge"`, static, dynamic or
automatic, and called in turn with several batch sizes. Every call is compared with
eager on fresh copies of the input:

- the values of every output, and of the input after the call (in-place mutation);
- which outputs share storage with each other and with the input, as in eager;
- the strides of outputs that are views of the input, as in eager.

The issue #12 bugs (parameters frozen to the first instance; an output aliasing the
input losing its permute under dynamic shapes) each fail this test within a few dozen
examples. The hypothesis profile is chosen with GE_TORCH_HYPOTHESIS_PROFILE: `ci` (the
default, ~200 examples, a couple of minutes on 2 cores), `dev` (30) or `long` (2000).
"""

from __future__ import annotations

import itertools
import linecache
import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from ge_torch.backend import GeBackend

F, S = 8, 6  # features (the last dim, kept by every step) and sequence length

settings.register_profile("ci", max_examples=200, deadline=None, database=None,
                          derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", parent=settings.get_profile("ci"), max_examples=30)
settings.register_profile("long", parent=settings.get_profile("ci"), max_examples=2000,
                          derandomize=False)
PROFILE = os.environ.get("GE_TORCH_HYPOTHESIS_PROFILE", "ci")

# Statements of a forward: each reads `x` of shape (B, S, F) and leaves one of the same
# shape in `x`. "{p}" is `self.` in a block (its parameters), `self.head_` in the model.
STEPS = {
    "linear": "x = {p}fc(x)",
    "norm": "x = {p}norm(x)",
    "scale": "x = x * {p}scale",
    "relu": "x = torch.relu(x)",
    "tanh": "x = torch.tanh(x)",
    "gelu": "x = torch.nn.functional.gelu(x)",
    "softmax": "x = torch.softmax(x, dim=-1)",
    "center": "x = x - x.mean(dim=1, keepdim=True)",
    "residual": "x = x + torch.sigmoid({p}fc(x))",
    "attention": "x = torch.softmax(x @ x.transpose(1, 2) / 3, dim=-1) @ x",
    "permute_softmax": "x = x.permute(0, 2, 1).softmax(-1).permute(0, 2, 1)",
    "permute_contiguous": "x = x.permute(2, 0, 1).contiguous().tanh().permute(1, 2, 0)",
    "flatten": "x = x.reshape(x.shape[0], -1).softmax(-1).reshape(x.shape) * {s}",
    "transpose_flatten": ("x = x.transpose(1, 2).reshape(-1, x.shape[1]).relu()"
                          ".reshape(x.shape[0], {f}, {s}).transpose(1, 2)"),
    "roll": "x = torch.cat([x[:, 1:], x[:, :1]], dim=1)",
    "expand": "x = x + x[:, :1].expand(-1, {s}, -1) * 0.5",
    "select_assign": "x = x.clone()\n    x[:, 0] += 1.0",
    "inplace_chain": "x = x * 1.0\n    x.mul_(0.5).add_(0.25)",
    "inplace_view": "x = torch.relu(x)\n    x[:, :, :2].mul_(-1)",
    "inplace_activation": "x = x + 0\n    x.tanh_()",
    "cumprod": "x = torch.cumprod(torch.tanh(x) * 0.3 + 1, dim=1)",
    "sort": "x = torch.sort(x, dim=1, descending=True).values",
    "as_strided": ("x = x + torch.as_strided(x * 1, (x.shape[0], {s}, {f}), "
                   "({s} * {f}, 1, {s}))"),
    "graph_break": "torch._dynamo.graph_break()",
}

# What the model returns; `inp` is its input (after any in-place change of it).
RETURNS = {
    "result": "x",
    "result_and_view": "x, x.transpose(1, 2)",
    "result_and_slices": "x, x[:, 1:], x[:, :, :3]",
    # A view of the input; with batch 1 the reshape is a view too (issue #12's case).
    "input_view": "x, inp.permute(1, 0, 2).reshape({s}, -1)",
    "input_itself": "x, inp",
    "sum": "x.sum(dim=-1), x",
}

step_names = st.sampled_from(sorted(STEPS))


@st.composite
def programs(draw):
    return {
        "block": draw(st.lists(step_names, min_size=1, max_size=4)),
        "pre": draw(st.lists(step_names, max_size=2)),
        "post": draw(st.lists(step_names, max_size=2)),
        "blocks": draw(st.integers(1, 3)),
        "mutate_input": draw(st.booleans()),
        "returns": draw(st.sampled_from(sorted(RETURNS))),
        "dynamic": draw(st.sampled_from([False, True, None])),
        "batches": draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3)),
        "seed": draw(st.integers(0, 2**16)),
    }


_counter = itertools.count()


def _source(program) -> str:
    def body(steps, prefix):
        lines = [STEPS[s].format(p=prefix, s=S, f=F) for s in steps]
        return "".join(f"    {line}\n" for line in lines)

    pre = "    x.mul_(1.5)\n" if program["mutate_input"] else ""
    return (
        "def block_forward(self, x):\n"
        f"{body(program['block'], 'self.')}"
        "    return x\n"
        "\n"
        "def model_forward(self, x):\n"
        f"{pre}"
        "    inp = x\n"
        f"{body(program['pre'], 'self.head_')}"
        "    for block in self.blocks:\n"
        "        x = block(x)\n"
        f"{body(program['post'], 'self.head_')}"
        f"    return {RETURNS[program['returns']].format(s=S)}\n")


def _classes(program):
    """A block class and a model class whose forwards are the program's source, compiled
    under a file name of their own (fresh code objects, and readable tracebacks)."""
    source = _source(program)
    filename = f"<ge-torch differential {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"torch": torch}
    exec(compile(source, filename, "exec"), namespace)

    def block_init(self):
        nn.Module.__init__(self)
        self.fc = nn.Linear(F, F)
        self.norm = nn.LayerNorm(F)
        self.scale = nn.Parameter(torch.randn(F))

    blocks = program["blocks"]

    def model_init(self):
        nn.Module.__init__(self)
        self.blocks = nn.ModuleList(block_class() for _ in range(blocks))
        self.head_fc = nn.Linear(F, F)
        self.head_norm = nn.LayerNorm(F)
        self.head_scale = nn.Parameter(torch.randn(F))

    block_class = type("Block", (nn.Module,), {"__init__": block_init,
                                               "forward": namespace["block_forward"]})
    model_class = type("Model", (nn.Module,), {"__init__": model_init,
                                               "forward": namespace["model_forward"]})
    return model_class, source


def _instance(model_class, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = model_class().eval()
    with torch.no_grad():
        for p in model.parameters():  # well away from the default init's symmetries
            p.copy_(torch.randn(p.shape) * 0.5 + (1.0 if p.ndim == 1 else 0.0))
    return model


def _outputs(result):
    return list(result) if isinstance(result, tuple) else [result]


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _compare(label, actual, expected, actual_input, expected_input):
    assert len(actual) == len(expected), label
    for i, (a, e) in enumerate(zip(actual, expected)):
        scale = 1.0 + e.abs().max().item()
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4 * scale,
                                   msg=lambda m, i=i: f"{label}: output {i}: {m}")
        shares_input = _shares(e, expected_input)
        assert _shares(a, actual_input) == shares_input, (
            f"{label}: output {i} shares the input's storage: {not shares_input} here, "
            f"{shares_input} in eager")
        if shares_input:
            assert a.stride() == e.stride(), (
                f"{label}: output {i}, a view of the input, has strides {a.stride()}, "
                f"{e.stride()} in eager")
        for j in range(i):
            assert _shares(a, actual[j]) == _shares(e, expected[j]), (
                f"{label}: outputs {j} and {i} share storage in one and not the other")
    torch.testing.assert_close(actual_input, expected_input, rtol=1e-4, atol=1e-5,
                               msg=lambda m: f"{label}: the input after the call: {m}")


@settings(settings.get_profile(PROFILE))
@given(program=programs())
def test_compiled_matches_eager_on_every_call(program):
    torch._dynamo.reset()
    model_class, source = _classes(program)
    seed = program["seed"]
    models = [_instance(model_class, seed), _instance(model_class, seed + 1)]
    backend = GeBackend()
    compiled = [torch.compile(m, backend=backend, dynamic=program["dynamic"]) for m in models]
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for call, batch in enumerate(program["batches"]):
            x = torch.randn(batch, S, F, generator=generator)
            for which, (model, fast) in enumerate(zip(models, compiled)):
                eager_input, ge_input = x.clone(), x.clone()
                expected = _outputs(model(eager_input))
                actual = _outputs(fast(ge_input))
                label = f"call {call} (batch {batch}) of instance {which}\n{source}"
                _compare(label, actual, expected, ge_input, eager_input)
