"""The models the suite measures, and how each becomes the files every engine loads.

A PyTorch case is built once in the parent process from a fixed seed; its weights are
saved for the PyTorch engines and the same module is exported to ONNX for ge-hub and
ONNX Runtime, so that all engines run one set of weights. An ONNX-file case (the light
real-model files shipped in the `onnx` package) runs on the ONNX engines only.
"""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np

from bench.engines import TORCH_ENGINES, ModelFiles

INPUT_SEED = 1234


@dataclasses.dataclass(frozen=True)
class TorchCase:
    name: str
    description: str
    architecture: str
    config: dict
    input_shape: tuple[int, ...]
    rtol: float = 1e-3
    atol: float = 1e-4
    quick: bool = False
    seed: int = 0

    def engines(self, wanted: list[str]) -> list[str]:
        return list(wanted)

    def prepare(self, directory: str) -> ModelFiles:
        import torch

        from bench import torch_models

        module = torch_models.build(self.architecture, self.seed, **self.config)
        x = np.random.default_rng(INPUT_SEED).standard_normal(self.input_shape)
        x = x.astype(np.float32)
        onnx_path = os.path.join(directory, f"{self.name}.onnx")
        torch_models.export_onnx(module, torch.from_numpy(x), onnx_path)
        state_path = os.path.join(directory, f"{self.name}.pt")
        torch.save(module.state_dict(), state_path)
        inputs_path = os.path.join(directory, f"{self.name}.inputs.npz")
        np.savez(inputs_path, x=x)
        spec = {"architecture": self.architecture, "config": dict(self.config),
                "state_dict": state_path}
        return ModelFiles(onnx_path, inputs_path, spec)

    def describe(self) -> dict:
        return {"source": "pytorch", "architecture": self.architecture,
                "config": dict(self.config), "input_shapes": {"x": list(self.input_shape)}}


@dataclasses.dataclass(frozen=True)
class OnnxFileCase:
    name: str
    description: str
    path: str
    rtol: float = 1e-3
    atol: float = 1e-4
    quick: bool = False

    def engines(self, wanted: list[str]) -> list[str]:
        return [e for e in wanted if e not in TORCH_ENGINES]

    def graph_inputs(self) -> dict[str, tuple[int, ...]]:
        """The real inputs: old model files also list their initializers as inputs."""
        import onnx

        model = onnx.load(self.path, load_external_data=False)
        weights = {t.name for t in model.graph.initializer}
        return {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                for i in model.graph.input if i.name not in weights}

    def prepare(self, directory: str) -> ModelFiles:
        rng = np.random.default_rng(INPUT_SEED)
        inputs = {name: rng.standard_normal(shape).astype(np.float32)
                  for name, shape in self.graph_inputs().items()}
        inputs_path = os.path.join(directory, f"{self.name}.inputs.npz")
        np.savez(inputs_path, **inputs)
        return ModelFiles(self.path, inputs_path)

    def describe(self) -> dict:
        return {"source": "onnx file", "path": self.path,
                "input_shapes": {k: list(v) for k, v in self.graph_inputs().items()}}


ENCODER_SMALL = {"layers": 4, "d_model": 256, "heads": 4, "ffn": 1024}
ENCODER_BERT_BASE = {"layers": 12, "d_model": 768, "heads": 12, "ffn": 3072}
# Deep stacks of random layers (and inductor's fused reductions) drift further apart
# than a single GEMM: these models get a looser absolute tolerance.
DEEP = {"rtol": 1e-3, "atol": 1e-3}

TORCH_CASES = [
    TorchCase("mlp", "MLP 784-256-256-10, batch 1", "mlp", {}, (1, 784), quick=True),
    TorchCase("resnet18-b1", "ResNet-18, batch 1, 224x224", "resnet18", {},
              (1, 3, 224, 224), **DEEP),
    TorchCase("resnet18-b8", "ResNet-18, batch 8, 224x224", "resnet18", {},
              (8, 3, 224, 224), **DEEP),
    TorchCase("mobilenetv2", "MobileNetV2 (width 1.0), batch 1, 224x224", "mobilenetv2", {},
              (1, 3, 224, 224), **DEEP),
    TorchCase("transformer", "4-layer encoder, d_model 256, 4 heads, seq 128, batch 1",
              "encoder", ENCODER_SMALL, (1, 128, 256), **DEEP),
    TorchCase("bert-base", "12-layer encoder, d_model 768, 12 heads, seq 128, batch 1",
              "encoder", ENCODER_BERT_BASE, (1, 128, 768), **DEEP),
    TorchCase("chain-1", "1 elementwise op on [1, 64]", "chain", {"length": 1}, (1, 64),
              quick=True),
    TorchCase("chain-200", "200 elementwise ops on [1, 64]", "chain", {"length": 200},
              (1, 64), quick=True),
]

QUICK_LIGHT_MODEL = "light_squeezenet"


def light_onnx_cases() -> list[OnnxFileCase]:
    """The light real-model files of the onnx package's backend test data."""
    try:
        import onnx
    except ImportError:
        return []
    directory = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    cases = []
    for path in sorted(glob.glob(os.path.join(directory, "*.onnx"))):
        stem = os.path.splitext(os.path.basename(path))[0]
        cases.append(OnnxFileCase(
            stem.replace("_", "-"), f"{stem}.onnx from the onnx package (constant weights)",
            path, quick=stem == QUICK_LIGHT_MODEL))
    return cases


def all_cases() -> list:
    return [*TORCH_CASES, *light_onnx_cases()]


def select(names: list[str] | None, quick: bool) -> list:
    """The cases named (any of all_cases), else the quick set or all of them."""
    cases = all_cases()
    if names:
        known = {c.name: c for c in cases}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown models {unknown}; known: {sorted(known)}")
        return [known[n] for n in names]
    return [c for c in cases if c.quick] if quick else cases
