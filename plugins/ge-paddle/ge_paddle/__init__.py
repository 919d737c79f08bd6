"""ge-paddle: PaddlePaddle models on ge-hub.

`ge_hub.load("model.json")`, `ge_hub.load("model.pdmodel")`, `ge_hub.load("model")` (a
prefix) or `ge_hub.load(layer, input_spec=[...])` reach this package through its
`ge_hub` entry point (`ge_paddle.plugin`). Saved models are read without importing
paddle.
"""

__version__ = "0.1.0"
