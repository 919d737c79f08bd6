"""The models the fuzzer mutates: ONNX files shipped in the onnx package, and `.gehub`
files made from them.

- the node-test models of `onnx.backend.test.case.node` (one op each, about 1,900);
- the light real models (`onnx/backend/test/data/light/*.onnx`: ResNet-50, VGG-19, ...);
- `.gehub` files: a sample of the node-test models that ge-onnx imports, serialized by
  `ge_hub.ir.serialize`, plus the light models that import.

A seed is (name, suffix, bytes); the order is fixed, so a fuzz seed picks the same
models on every machine with the same onnx version.
"""

from __future__ import annotations

import pathlib
import warnings
from typing import NamedTuple

import onnx


class Seed(NamedTuple):
    name: str
    suffix: str  # ".onnx" or ".gehub"
    data: bytes


LIGHT_DIR = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def onnx_seeds() -> list[Seed]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases("")
    seeds = [Seed(case.name, ".onnx", case.model.SerializeToString())
             for case in sorted(cases, key=lambda c: c.name)]
    for path in sorted(LIGHT_DIR.glob("light_*.onnx")):
        seeds.append(Seed(path.stem, ".onnx", path.read_bytes()))
    return seeds


def gehub_seeds(onnx_models: list[Seed], every: int = 8) -> list[Seed]:
    """Every `every`-th node-test model and each light model that imports, as `.gehub`."""
    from ge_hub.ir import serialize

    from ge_onnx.importer import import_model

    chosen = [s for i, s in enumerate(onnx_models)
              if i % every == 0 or s.name.startswith("light_")]
    seeds = []
    for seed in chosen:
        model = onnx.ModelProto()
        model.ParseFromString(seed.data)
        try:
            graph = import_model(model)
        except Exception:  # noqa: BLE001  a model ge-onnx refuses makes no .gehub seed
            continue
        seeds.append(Seed(seed.name, ".gehub", serialize.dumps(graph)))
    return seeds
