"""The models the zoo tests run: every paddle.vision.models architecture, a
TransformerEncoder, and for the legacy format (whose writer in Paddle 3.3.1 cannot trace
a matmul between two activations) an encoder-like block without one.

Each entry builds a fresh layer in eval mode at random initialization (seeded) and names
its input shape (-1: a dim the program keeps symbolic). Fast entries use small images;
`slow` ones run at the size the architecture expects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import paddle
import paddle.nn.functional as F


class Encoder(paddle.nn.Layer):
    """paddle.nn.TransformerEncoder, 2 layers of width 32 and 4 heads."""

    def __init__(self, norm_first: bool = False):
        super().__init__()
        layer = paddle.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                  normalize_before=norm_first)
        self.encoder = paddle.nn.TransformerEncoder(layer, 2)

    def forward(self, x):
        return self.encoder(x)


class LegacyBlock(paddle.nn.Layer):
    """Linear, LayerNorm, softmax, ReLU, reshape and transpose: what an encoder layer
    holds apart from its activation-by-activation matmuls (those, and GELU, the old-IR
    writer of Paddle 3.3.1 cannot trace)."""

    def __init__(self):
        super().__init__()
        self.q = paddle.nn.Linear(32, 32)
        self.out = paddle.nn.Linear(32, 32)
        self.norm = paddle.nn.LayerNorm(32)
        self.ff = paddle.nn.Linear(32, 64)
        self.back = paddle.nn.Linear(64, 32)

    def forward(self, x):
        heads = paddle.transpose(paddle.reshape(self.q(x), [0, 0, 4, 8]), [0, 2, 1, 3])
        mixed = paddle.reshape(paddle.transpose(F.softmax(heads * 0.5, -1), [0, 2, 1, 3]),
                               [0, 0, 32])
        y = self.norm(x + self.out(mixed))
        return y + self.back(F.relu(self.ff(y)))


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    build: Callable[[], paddle.nn.Layer]
    shape: tuple[int, ...]  # -1: symbolic in the program
    example: tuple[int, ...]  # the shape the test feeds
    slow: bool = False
    legacy: bool = True  # Paddle 3.3.1's old-IR writer can save it


def _vision(name):
    return lambda: getattr(paddle.vision.models, name)()


VISION = [n for n in paddle.vision.models.__all__ if n[0].islower()] + ["LeNet"]
FAST_VISION = {"resnet18": 64, "mobilenet_v2": 64, "mobilenet_v3_small": 64,
               "shufflenet_v2_x0_25": 64, "squeezenet1_1": 64}


def _entries() -> list[Entry]:
    entries = []
    for name in VISION:
        if name == "LeNet":
            entries.append(Entry(name, paddle.vision.models.LeNet, (-1, 1, 28, 28),
                                 (2, 1, 28, 28)))
            continue
        size = FAST_VISION.get(name, 299 if name == "inception_v3" else 224)
        entries.append(Entry(name, _vision(name), (-1, 3, size, size), (2, 3, size, size),
                             slow=name not in FAST_VISION))
    entries.append(Entry("transformer_encoder", Encoder, (-1, -1, 32), (2, 7, 32),
                         legacy=False))
    entries.append(Entry("transformer_encoder_norm_first", lambda: Encoder(True),
                         (-1, -1, 32), (3, 5, 32), legacy=False))
    entries.append(Entry("legacy_block", LegacyBlock, (-1, -1, 32), (2, 6, 32)))
    return entries


ZOO = _entries()
BY_NAME = {e.name: e for e in ZOO}


def build(name: str) -> paddle.nn.Layer:
    paddle.seed(0)
    layer = BY_NAME[name].build()
    layer.eval()
    return layer
