"""Whole transformer encoders, written as ONNX the way exporters write them, give the same
outputs with the transformer fusions (fuse_gelu, fuse_layer_norm, fuse_attention) on and
off, and the same as ONNX Runtime; with them on, each layer compiles to fewer steps and
the fused ops are really there (fuse_attention's opt-in rules turned on).

Three export styles, each a small stack of layers with random weights:
- torch17: torch.onnx at opset 17 (the bench's encoder): one QKV MatMul, a 5-D Transpose
  and Split, K^T by Transpose, a Mul scale, LayerNormalization nodes, GELU in erf form;
- hf_bert14: a transformers BERT export at opset 14: separate Q/K/V, K^T by two
  Transposes, a Div scale and an additive mask from a [B, S] input, LayerNormalization
  written out with eps 1e-12, GELU as x * 0.5 * (1 + erf(x / sqrt 2));
- gpt2_14: a pre-norm block (the residual sum is read twice, so the fused step must
  also write it) with GELU's tanh form written with Pow.
"""

from __future__ import annotations

import math

import ge_hub
import numpy as np
import onnx
import pytest
from ge_hub.passes.fuse_attention import RULE_NAMES
from onnx import TensorProto, helper, numpy_helper

FUSIONS = ["fuse_gelu", "fuse_layer_norm", "fuse_attention", "fuse_matmul_epilogue"]
# fuse_attention's rules are opt-in in the compiler: turned on here
ON = {"enable_rules": RULE_NAMES}
B, S, D, H, FFN = 2, 19, 32, 4, 48


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, stem):
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, array, stem="c"):
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape, scale=None):
        scale = scale or 1 / math.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def op(self, op_type, *inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def ops(self, op_type, inputs, n, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def f32(self, value):
        return self.const(np.float32(value))

    def linear(self, x, cin, cout):
        product = self.op("MatMul", x, self.weight(cin, cout))
        return self.op("Add", self.weight(cout, scale=0.1), product)

    def shape(self, *dims):
        return self.const(np.asarray(dims, np.int64))

    def layer_norm(self, x, decomposed, eps):
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(D)).astype(np.float32))
        beta = self.const((0.1 * self.rng.standard_normal(D)).astype(np.float32))
        if not decomposed:
            return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=eps)
        mean = self.op("ReduceMean", x, axes=[-1])
        d = self.op("Sub", x, mean)
        var = self.op("ReduceMean", self.op("Pow", d, self.f32(2.0)), axes=[-1])
        n = self.op("Div", d, self.op("Sqrt", self.op("Add", var, self.f32(eps))))
        return self.op("Add", self.op("Mul", n, gamma), beta)

    def gelu_erf_torch(self, x):
        erf = self.op("Erf", self.op("Div", x, self.f32(1.4142135381698608)))
        return self.op("Mul", self.op("Mul", x, self.op("Add", erf, self.f32(1.0))),
                       self.f32(0.5))

    def gelu_erf_hf(self, x):
        erf = self.op("Erf", self.op("Div", x, self.f32(math.sqrt(2.0))))
        return self.op("Mul", self.op("Mul", x, self.f32(0.5)),
                       self.op("Add", self.f32(1.0), erf))

    def gelu_tanh(self, x):
        cube = self.op("Mul", self.op("Pow", x, self.f32(3.0)), self.f32(0.044715))
        inner = self.op("Mul", self.op("Add", x, cube), self.f32(math.sqrt(2 / math.pi)))
        return self.op("Mul", self.op("Mul", self.f32(0.5), x),
                       self.op("Add", self.f32(1.0), self.op("Tanh", inner)))

    def heads(self, x):  # [B, S, D] -> [B, H, S, D/H]
        r = self.op("Reshape", x, self.shape(B, S, H, D // H))
        return self.op("Transpose", r, perm=[0, 2, 1, 3])

    def merge(self, ctx):  # [B, H, S, D/H] -> [B, S, D]
        return self.op("Reshape", self.op("Transpose", ctx, perm=[0, 2, 1, 3]),
                       self.shape(B, S, D))


def torch17_layer(g, x):
    qkv = g.op("Reshape", g.linear(x, D, 3 * D), g.shape(B, S, 3, H, D // H))
    parts = g.ops("Split", [g.op("Transpose", qkv, perm=[2, 0, 3, 1, 4]),
                            g.shape(1, 1, 1)], 3, axis=0)
    q, k, v = (g.op("Squeeze", p, g.shape(0)) for p in parts)
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])),
                  g.f32(1 / math.sqrt(D // H)))
    ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    x = g.layer_norm(g.op("Add", x, g.linear(g.merge(ctx), D, D)), False, 1e-5)
    ffn = g.linear(g.gelu_erf_torch(g.linear(x, D, FFN)), FFN, D)
    return g.layer_norm(g.op("Add", x, ffn), False, 1e-5)


def hf_bert14_layer(g, x, mask):
    q, k, v = (g.heads(g.linear(x, D, D)) for _ in range(3))
    kt = g.op("Transpose", k, perm=[0, 1, 3, 2])
    scores = g.op("Div", g.op("MatMul", q, kt), g.f32(math.sqrt(D // H)))
    probs = g.op("Softmax", g.op("Add", scores, mask), axis=-1)
    ctx = g.merge(g.op("MatMul", probs, v))
    x = g.layer_norm(g.op("Add", g.linear(ctx, D, D), x), True, 1e-12)
    ffn = g.linear(g.gelu_erf_hf(g.linear(x, D, FFN)), FFN, D)
    return g.layer_norm(g.op("Add", ffn, x), True, 1e-12)


def gpt2_14_layer(g, x):
    h = g.layer_norm(x, True, 1e-5)
    q, k, v = (g.heads(g.linear(h, D, D)) for _ in range(3))
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])),
                  g.f32(1 / math.sqrt(D // H)))
    causal = np.triu(np.full((S, S), -1e4, np.float32), 1)
    probs = g.op("Softmax", g.op("Add", scores, g.const(causal)), axis=-1)
    x = g.op("Add", x, g.linear(g.merge(g.op("MatMul", probs, v)), D, D))
    h = g.layer_norm(x, True, 1e-5)
    return g.op("Add", x, g.linear(g.gelu_tanh(g.linear(h, D, FFN)), FFN, D))


def build(style, layers=2, seed=0):
    g = Builder(seed)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, D])]
    x = "x"
    mask = None
    if style == "hf_bert14":
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [B, S]))
        extended = g.op("Unsqueeze", "attention_mask", g.shape(1, 2))
        mask = g.op("Mul", g.op("Sub", g.f32(1.0), extended), g.f32(-10000.0))
    for _ in range(layers):
        if style == "torch17":
            x = torch17_layer(g, x)
        elif style == "hf_bert14":
            x = hf_bert14_layer(g, x, mask)
        else:
            x = gpt2_14_layer(g, x)
    g.nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(g.nodes, style, inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, D])],
                              g.inits)
    opset = 17 if style == "torch17" else 14
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def feeds_for(style, seed=1):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((B, S, D)).astype(np.float32)}
    if style == "hf_bert14":
        mask = np.ones((B, S), np.float32)
        mask[1, 13:] = 0.0  # padding at the end of the second sequence
        feeds["attention_mask"] = mask
    return feeds


# per style: the fused ops the two layers must end with. The Gelu after the first FFN
# product joins it (with its bias) in a ge_hub.FusedMatMul, as do the Q/K/V projections'
# bias Adds; the products whose bias and residual Adds meet a LayerNormalization stay
# MatMuls in front of a SkipLayerNormalization.
EXPECTED = {
    "torch17": {"ge_hub.Attention": 2, "ge_hub.SkipLayerNormalization": 4, "Gelu": 0,
                "ge_hub.FusedMatMul": 4, "MatMul": 4},
    "hf_bert14": {"ge_hub.Attention": 2, "ge_hub.SkipLayerNormalization": 4, "Gelu": 0,
                  "ge_hub.FusedMatMul": 8, "MatMul": 4},
    # pre-norm: the first LayerNormalization reads the graph input alone; the others
    # follow a residual Add whose sum is read again, which their fused step also writes;
    # the second FFN product takes its bias and the residual Add (FusedMatMul)
    "gpt2_14": {"ge_hub.Attention": 2, "LayerNormalization": 1,
                "ge_hub.SkipLayerNormalization": 3, "Gelu": 0, "ge_hub.FusedMatMul": 9,
                "MatMul": 3},
}


@pytest.mark.parametrize("style", list(EXPECTED))
def test_fusion_on_and_off_and_onnx_runtime_agree(style, tmp_path):
    model = build(style)
    path = tmp_path / f"{style}.onnx"
    onnx.save(model, path)
    feeds = feeds_for(style)
    on = ge_hub.compile(str(path), options=ON)
    off = ge_hub.compile(str(path), options={"disable_passes": FUSIONS})
    ops_on = [s.op for s in on.plan.steps]
    for op_name, count in EXPECTED[style].items():
        assert ops_on.count(op_name) == count, (op_name, ops_on)
    assert not {"ge_hub.Attention", "ge_hub.SkipLayerNormalization", "ge_hub.FusedMatMul"} & {
        s.op for s in off.plan.steps}
    assert len(ops_on) < len(off.plan.steps)
    assert on.summary()["python_steps"] == 0 and on.summary()["fallback_steps"] == 0
    (got_on,), (got_off,) = on.run(feeds), off.run(feeds)
    np.testing.assert_allclose(got_on, got_off, rtol=1e-4, atol=1e-4)
    ort = pytest.importorskip("onnxruntime")
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    np.testing.assert_allclose(got_on, want, rtol=1e-4, atol=1e-4)
