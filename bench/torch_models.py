"""The benchmark models as PyTorch modules, with seeded random weights (nothing downloaded).

Each model is defined once, here; the suite exports it to ONNX so that ge-hub and ONNX
Runtime run the very graph and weights that PyTorch runs. `build(name, seed, **config)`
is the one constructor the parent process and the engine workers share.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class MLP(nn.Module):
    def __init__(self, sizes=(784, 256, 256, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            x = layer(x)
            if index < len(self.layers) - 1:
                x = F.relu(x)
        return x


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.first = conv_bn(cin, cout, 3, stride)
        self.second = conv_bn(cout, cout, 3)
        self.shortcut = (conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout
                         else nn.Identity())

    def forward(self, x):
        return F.relu(self.second(F.relu(self.first(x))) + self.shortcut(x))


class ResNet18(nn.Module):
    """He et al.: 7x7 stem, 4 stages of 2 basic blocks, global average pool, FC."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = conv_bn(3, 64, 7, 2)
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, 1)
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1), nn.ReLU6()]
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6(),
                   conv_bn(hidden, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """Sandler et al., width 1.0: the (expand, channels, repeats, stride) table of the paper."""

    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2), nn.ReLU6()], 32
        for expand, cout, repeats, stride in self.SETTINGS:
            for index in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if index == 0 else 1, expand))
                cin = cout
        layers += [conv_bn(cin, 1280, 1), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class EncoderLayer(nn.Module):
    """A post-norm (BERT-style) encoder layer: self-attention and a GELU feed-forward.

    Attention is written out as MatMul/Softmax rather than PyTorch's fused kernels so
    that the exported ONNX graph is the plain one every engine can read.
    """

    def __init__(self, d_model: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, ffn)
        self.down = nn.Linear(ffn, d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x):
        batch, seq, d_model = x.shape
        head = d_model // self.heads
        q, k, v = (self.qkv(x).reshape(batch, seq, 3, self.heads, head)
                   .permute(2, 0, 3, 1, 4).unbind(0))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(head))
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        context = context.transpose(1, 2).reshape(batch, seq, d_model)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.down(F.gelu(self.up(x))))


class Encoder(nn.Module):
    def __init__(self, layers: int, d_model: int, heads: int, ffn: int):
        super().__init__()
        self.layers = nn.Sequential(*(EncoderLayer(d_model, heads, ffn) for _ in range(layers)))

    def forward(self, x):
        return self.layers(x)


class ElementwiseChain(nn.Module):
    """`length` small elementwise ops (add, mul, relu, tanh in turn), values kept bounded."""

    def __init__(self, length: int):
        super().__init__()
        self.length = length

    def forward(self, x):
        for index in range(self.length):
            kind = index % 4
            if kind == 0:
                x = x + 0.01
            elif kind == 1:
                x = x * 0.99
            elif kind == 2:
                x = torch.relu(x)
            else:
                x = torch.tanh(x)
        return x


ARCHITECTURES = {
    "mlp": MLP,
    "resnet18": ResNet18,
    "mobilenetv2": MobileNetV2,
    "encoder": Encoder,
    "chain": ElementwiseChain,
}


def randomize_norm_statistics(module: nn.Module, generator: torch.Generator) -> None:
    """Give every BatchNorm random statistics and affine terms, so that folding it matters.

    Fresh BatchNorm layers are the identity (mean 0, variance 1, scale 1, shift 0), which
    would let an engine skip work that a trained model makes it do.
    """
    for layer in module.modules():
        if isinstance(layer, nn.BatchNorm2d):
            channels = layer.num_features
            layer.weight.data = torch.rand(channels, generator=generator) * 0.5 + 0.5
            layer.bias.data = torch.randn(channels, generator=generator) * 0.1
            layer.running_mean.data = torch.randn(channels, generator=generator) * 0.1
            layer.running_var.data = torch.rand(channels, generator=generator) + 0.5


def build(architecture: str, seed: int = 0, **config) -> nn.Module:
    """The model `architecture` with `config`, its weights drawn from `seed`, in eval mode."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {architecture!r}; known: {sorted(ARCHITECTURES)}")
    torch.manual_seed(seed)
    module = ARCHITECTURES[architecture](**config)
    randomize_norm_statistics(module, torch.Generator().manual_seed(seed + 1))
    return module.eval()


def export_onnx(module: nn.Module, example: torch.Tensor, path: str, opset: int = 17) -> None:
    """Write `module` as ONNX with one input "x" and one output "y", shapes static.

    The TorchScript exporter (`dynamo=False`) is used: it works offline with what torch
    ships, while the torch.export-based one needs the separate `onnxscript` package.
    """
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(module, (example,), path, dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=["y"])
