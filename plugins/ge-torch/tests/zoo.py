"""The model zoo: small PyTorch models, written in plain torch, that the tests compile.

Each entry of `ZOO` builds a model in eval mode and random example inputs for a batch
size; the sizes are small so that the whole zoo compiles and runs in seconds, but every
model keeps the structure that makes it interesting (residual blocks, depthwise convs,
skip connections, attention masks, recurrence).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

# --- MLP ------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, features=32, hidden=64, classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, classes))

    def forward(self, x):
        return torch.log_softmax(self.net(x), dim=-1)


# --- ResNet-18 ------------------------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """ResNet-18 as in the paper (2-2-2-2 basic blocks, 64-512 channels)."""

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --- MobileNetV2-like -----------------------------------------------------------------


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.block(x)
        return x + y if self.use_residual else y


class MobileNetV2Like(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU6())
        self.blocks = nn.Sequential(InvertedResidual(16, 16, 1, 1), InvertedResidual(16, 24, 2, 6),
                                    InvertedResidual(24, 24, 1, 6), InvertedResidual(24, 32, 2, 6))
        self.head = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
        self.fc = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, classes))

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


# --- UNet-like ------------------------------------------------------------------------


def _double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class UNetLike(nn.Module):
    """Two levels down, a ConvTranspose and a bilinear interpolate up, skip concats."""

    def __init__(self, channels=3, classes=2, width=8):
        super().__init__()
        self.enc1 = _double_conv(channels, width)
        self.enc2 = _double_conv(width, width * 2)
        self.mid = _double_conv(width * 2, width * 4)
        self.up2 = nn.ConvTranspose2d(width * 4, width * 2, 2, stride=2)
        self.dec2 = _double_conv(width * 4, width * 2)
        self.dec1 = _double_conv(width * 3, width)
        self.out = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        up = F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([up, e1], dim=1))
        return self.out(d1)


# --- Transformer encoder with a padding mask ------------------------------------------


class TransformerClassifier(nn.Module):
    """nn.TransformerEncoder over embedded tokens; padded positions are masked out."""

    def __init__(self, vocab=50, d_model=32, heads=4, layers=2, ffn=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=ffn, dropout=0.1,
                                           batch_first=True, activation="gelu")
        # The nested-tensor fast path only exists in eager; it changes nothing numerically.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, 3)

    def forward(self, tokens, padding_mask):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=padding_mask)
        keep = (~padding_mask).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))


# --- GPT-style decoder block ----------------------------------------------------------


class GPTBlock(nn.Module):
    def __init__(self, d_model=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


# --- recurrent --------------------------------------------------------------------------


class LSTMTagger(nn.Module):
    def __init__(self, features=8, hidden=16, classes=5):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=1, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out)


class GRUTagger(nn.Module):
    def __init__(self, features=8, hidden=16, classes=5):
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.fc(out)


# --- an op without a converter ----------------------------------------------------------


class WithUnconvertedOp(nn.Module):
    """cumprod has no ge-hub converter (and no core op): the graph must be partitioned,
    the convolutions and the rest in ge-hub, cumprod in PyTorch."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.tanh(self.conv(x))
        y = torch.cumprod(y * 0.5 + 1.0, dim=3)
        return self.fc(y.mean(dim=(2, 3)))


# --- the table --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator, int], tuple]
    slow: bool = False  # compiled only by the slow tests


def _floats(*shape):
    return lambda gen, batch: (torch.randn(batch, *shape, generator=gen),)


def _tokens_and_mask(gen, batch, seq=7, vocab=50):
    tokens = torch.randint(0, vocab, (batch, seq), generator=gen)
    lengths = torch.randint(2, seq + 1, (batch,), generator=gen)
    lengths[0] = seq  # at least one full row, so the pad positions vary per row
    mask = torch.arange(seq)[None, :] >= lengths[:, None]
    return tokens, mask


ZOO = [
    ZooEntry("mlp", MLP, _floats(32)),
    ZooEntry("resnet18", lambda: ResNet18(classes=10), _floats(3, 64, 64), slow=True),
    ZooEntry("mobilenetv2", MobileNetV2Like, _floats(3, 32, 32)),
    ZooEntry("unet", UNetLike, _floats(3, 16, 16)),
    ZooEntry("transformer", TransformerClassifier, _tokens_and_mask),
    ZooEntry("gpt_block", GPTBlock, _floats(6, 32)),
    ZooEntry("lstm", LSTMTagger, _floats(5, 8)),
    ZooEntry("gru", GRUTagger, _floats(5, 8)),
    ZooEntry("unconverted_op", WithUnconvertedOp, _floats(3, 8, 8)),
]
ZOO_BY_NAME = {entry.name: entry for entry in ZOO}


def build(name: str, seed: int = 0) -> nn.Module:
    """The zoo model `name` in eval mode, with weights drawn from `seed`."""
    torch.manual_seed(seed)
    model = ZOO_BY_NAME[name].build().eval()
    # Non-trivial batch-norm statistics, so that folding them is really tested.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    return model


def example_inputs(name: str, batch: int = 2, seed: int = 1) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    return ZOO_BY_NAME[name].inputs(gen, batch)
