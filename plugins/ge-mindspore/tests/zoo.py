"""The zoo: small classic networks written with mindspore.nn, at random init.

Each entry builds a Cell in inference mode and its example input. The networks are
written here (not taken from a model library) so that the test needs nothing but
mindspore; their structure follows the published architectures.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn, ops


class LeNet5(nn.Cell):
    def __init__(self, num_class: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid", has_bias=True)
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", has_bias=True)
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, num_class)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def _conv_bn(cin, cout, kernel, stride=1, groups=1, relu=True, relu6=False):
    layers = [nn.Conv2d(cin, cout, kernel, stride=stride, pad_mode="pad",
                        padding=kernel // 2, group=groups, has_bias=False),
              nn.BatchNorm2d(cout)]
    if relu6:
        layers.append(nn.ReLU6())
    elif relu:
        layers.append(nn.ReLU())
    return nn.SequentialCell(layers)


class BasicBlock(nn.Cell):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = _conv_bn(cin, cout, 3, stride)
        self.conv2 = _conv_bn(cout, cout, 3, relu=False)
        self.down = (_conv_bn(cin, cout, 1, stride, relu=False)
                     if stride != 1 or cin != cout else None)
        self.relu = nn.ReLU()

    def construct(self, x):
        identity = x if self.down is None else self.down(x)
        return self.relu(self.conv2(self.conv1(x)) + identity)


class ResNet18(nn.Cell):
    def __init__(self, num_class: int = 1000):
        super().__init__()
        self.stem = _conv_bn(3, 64, 7, 2)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.SequentialCell(blocks)
        self.fc = nn.Dense(512, num_class)

    def construct(self, x):
        x = self.layers(self.pool(self.stem(x)))
        x = ops.mean(x, (2, 3))
        return self.fc(x)


class InvertedResidual(nn.Cell):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [_conv_bn(cin, hidden, 1, relu6=True)]
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, relu6=True),
                   _conv_bn(hidden, cout, 1, relu=False)]
        self.body = nn.SequentialCell(layers)
        self.residual = stride == 1 and cin == cout

    def construct(self, x):
        if self.residual:
            return x + self.body(x)
        return self.body(x)


class MobileNetV2(nn.Cell):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_class: int = 1000):
        super().__init__()
        layers, cin = [_conv_bn(3, 32, 3, 2, relu6=True)], 32
        for expand, cout, repeats, stride in self.SETTINGS:
            for index in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if index == 0 else 1, expand))
                cin = cout
        layers.append(_conv_bn(cin, 1280, 1, relu6=True))
        self.features = nn.SequentialCell(layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.head = nn.Dense(1280, num_class)

    def construct(self, x):
        return self.head(self.flatten(self.pool(self.features(x))))


class EncoderBlock(nn.Cell):
    """A post-norm transformer encoder layer (mindspore.nn.TransformerEncoderLayer)."""

    def __init__(self, d_model: int = 64, heads: int = 4, ffn: int = 128):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.0,
                                                batch_first=True)

    def construct(self, x):
        return self.layer(x)


def _random(shape, seed):
    return ms.Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# name -> (builder, input shape); slow ones are marked in the tests.
MODELS = {
    "lenet5": (LeNet5, (2, 1, 32, 32)),
    "resnet18": (ResNet18, (1, 3, 224, 224)),
    "mobilenet_v2": (MobileNetV2, (1, 3, 224, 224)),
    "encoder_block": (EncoderBlock, (2, 16, 64)),
}
SLOW = {"resnet18", "mobilenet_v2"}


def build(name: str, seed: int = 0):
    """(cell in inference mode, example input) for a zoo entry, seeded."""
    builder, shape = MODELS[name]
    ms.set_seed(seed)
    cell = builder()
    _initialize(cell, np.random.default_rng(seed))
    cell.set_train(False)
    return cell, _random(shape, seed)


def _initialize(cell, rng) -> None:
    """He-normal convolution weights and non-trivial batch-norm statistics.

    MindSpore's default initializers shrink activations about tenfold per block in a deep
    net (MobileNetV2's features end near 1e-7), which would leave only the head's bias to
    compare; BatchNorm's defaults (mean 0, variance 1, scale 1, shift 0) would make it an
    identity to the test.
    """
    for parameter in cell.get_parameters():
        name, data = parameter.name, parameter.asnumpy()
        if name.endswith("weight") and data.ndim == 4:
            fan_in = int(np.prod(data.shape[1:]))
            value = rng.standard_normal(data.shape) * np.sqrt(2.0 / fan_in)
        elif name.endswith("moving_mean") or name.endswith("beta"):
            value = rng.uniform(-0.1, 0.1, data.shape)
        elif name.endswith("moving_variance") or name.endswith("gamma"):
            value = rng.uniform(0.5, 1.5, data.shape)
        else:
            continue
        parameter.set_data(ms.Tensor(value.astype(data.dtype)))
