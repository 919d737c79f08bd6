"""The zoo's transformer models give the same outputs with the transformer fusions on
(fuse_attention's opt-in rules and fuse_matmul_epilogue included) and off, on the
ahead-of-time path; ge-torch's graphs of them fuse their residual LayerNormalizations
(post-norm: into one ge_hub.SkipLayerNormalization each; pre-norm, where the sum is read
again: into one that also writes the sum) and their Linear layers' activations
(ge_hub.FusedMatMul)."""

from __future__ import annotations

import ge_hub
import numpy as np
import pytest
import torch
import zoo
from ge_hub.passes.fuse_attention import RULE_NAMES

FUSIONS = ["fuse_gelu", "fuse_layer_norm", "fuse_attention", "fuse_matmul_epilogue"]


@pytest.mark.parametrize("name, skip_norms", [("transformer", 4), ("gpt_block", 1)])
def test_fusion_on_and_off_agree(name, skip_norms):
    model = zoo.build(name)
    inputs = zoo.example_inputs(name, batch=2)
    with torch.no_grad():
        expected = model(*inputs)
    graph = ge_hub.load(model, example_inputs=inputs)
    on = ge_hub.compile(graph.copy(), options={"enable_rules": RULE_NAMES})
    off = ge_hub.compile(graph.copy(), options={"disable_passes": FUSIONS})
    ops_on = [s.op for s in on.plan.steps]
    assert ops_on.count("ge_hub.SkipLayerNormalization") == skip_norms, ops_on
    assert len(ops_on) < len(off.plan.steps)
    assert "ge_hub.FusedMatMul" in ops_on
    assert "ge_hub.FusedMatMul" not in {s.op for s in off.plan.steps}
    feeds = [x.numpy() for x in inputs]
    (got_on,), (got_off,) = on.run(feeds), off.run(feeds)
    np.testing.assert_allclose(got_on, got_off, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_on, expected.numpy(), rtol=1e-4, atol=1e-4)
