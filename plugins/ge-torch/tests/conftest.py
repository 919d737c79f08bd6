"""Shared helpers of the ge-torch tests: compiling with the ge backend, comparing with
eager at the tolerance the issue asks for (rtol 1e-4, atol 1e-5), and a clean Dynamo
cache per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # the zoo module

RTOL, ATOL = 1e-4, 1e-5


def assert_matches(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)


def max_relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected| over all outputs."""
    if isinstance(expected, torch.Tensor):
        actual, expected = [actual], [expected]
    worst = 0.0
    for a, e in zip(actual, expected):
        scale = e.abs().max().item() or 1.0
        worst = max(worst, (a.double() - e.double()).abs().max().item() / scale)
    return worst


def compile_ge(model, *, dynamic=None, **options):
    """`torch.compile(model, backend=GeBackend(...))` and the list its graph reports go to."""
    from ge_torch.backend import GeBackend

    reports: list = []
    compiled = torch.compile(model, backend=GeBackend(reports=reports, **options),
                             dynamic=dynamic)
    return compiled, reports


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)
