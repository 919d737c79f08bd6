"""Every zoo model, loaded by ge-torch, gives the same outputs with fuse_elementwise on and
off (and matches torch); the plans with it on never have more steps."""

from __future__ import annotations

import ge_hub
import numpy as np
import pytest
import torch
import zoo

FUSED = "ge_hub.FusedElementwise"


@pytest.mark.parametrize("name", [entry.name for entry in zoo.ZOO])
def test_elementwise_fusion_on_and_off_agree(name):
    model = zoo.build(name)
    inputs = zoo.example_inputs(name, batch=2)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    graph = ge_hub.load(model, example_inputs=inputs)
    on = ge_hub.compile(graph.copy())
    off = ge_hub.compile(graph.copy(), options={"disable_passes": ["fuse_elementwise"]})
    assert FUSED not in {s.op for s in off.plan.steps}
    assert len(on.plan.steps) <= len(off.plan.steps)
    feeds = [x.numpy() for x in inputs]
    got_on, got_off = on.run(feeds), off.run(feeds)
    for a, b, want in zip(got_on, got_off, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(a, want.numpy(), rtol=1e-4, atol=1e-4)
