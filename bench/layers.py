"""`python -m bench.layers`: single layers where a whole model's time goes, timed in
ge-hub (fp32 and bf16), ONNX Runtime, OpenVINO at its default precision (bf16 on CPUs with
AMX or AVX512-BF16) and OpenVINO in f32, each row in a worker process of its own with its
rounds interleaved, as bench.precision does for whole models.

A model's latency says that ge-hub is slower, not where: these are the layers whose
shapes decide it (ResNet's 1x1 convolutions with their residual at 56x56, its 3x3 layers
at 56x56 and 7x7, its 7x7 stem, MobileNetV2's first expansion with its depthwise reader,
a stride-2 depthwise layer, BERT's feed-forward product), each as a one-layer ONNX model
with random weights. Each row's error against ge-hub fp32 is reported too, and a row whose
engine computes in fp32 and disagrees, or a bf16 one far off, fails the run.

    python -m bench.layers [--quick] [--threads 1] [--models r50-1x1-res,...] [--json F]

Timings on a shared machine are noisy: only medians of interleaved rounds are reported,
and only the ratios within one run mean anything.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile

import numpy as np

ROWS = ("ge-hub fp32", "ge-hub bf16", "ort", "ov default", "ov f32")
FP32_ROWS = ("ort", "ov f32")
# A fp32 engine further than this from ge-hub fp32 (max |y - y_fp32| / max |y_fp32|)
# computes something else; a bf16 row further than BF16_TOLERANCE is broken, not rounded
# (one bf16 layer: about 1e-2 at most).
FP32_TOLERANCE = 1e-3
BF16_TOLERANCE = 5e-2
SEED = 0


@dataclasses.dataclass(frozen=True)
class Conv:
    """One convolution of a layer chain: `cout` outputs, a k x k window."""

    cout: int
    k: int
    stride: int = 1
    depthwise: bool = False
    activation: str | None = "Relu"  # "Relu", "Clip" (0..6, MobileNet's ReLU6) or None


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    description: str
    input_shape: tuple[int, ...]       # NCHW, or (rows, k) for a linear layer
    convs: tuple[Conv, ...] = ()
    residual: bool = False             # the last conv's output plus an input "z"
    linear_n: int = 0                  # a MatMul by a (k, linear_n) weight, plus bias
    quick: bool = False


LAYERS = (
    Layer("r50-1x1-res", "ResNet-50: 1x1 64 -> 256 at 56x56, + residual, Relu",
          (1, 64, 56, 56), (Conv(256, 1),), residual=True, quick=True),
    Layer("r50-1x1-reduce", "ResNet-50: 1x1 256 -> 64 at 56x56, Relu",
          (1, 256, 56, 56), (Conv(64, 1),)),
    Layer("r18-3x3-56", "ResNet-18: 3x3 64 -> 64 at 56x56, Relu",
          (1, 64, 56, 56), (Conv(64, 3),), quick=True),
    Layer("r50-3x3s2-56", "ResNet-50: 3x3 stride 2, 128 -> 128 from 56x56, Relu",
          (1, 128, 56, 56), (Conv(128, 3, stride=2),)),
    Layer("r18-3x3-7", "ResNet-18: 3x3 512 -> 512 at 7x7, Relu",
          (1, 512, 7, 7), (Conv(512, 3),)),
    Layer("r18-stem", "ResNet-18: 7x7 stride 2 stem, 3 -> 64 from 224x224, Relu",
          (1, 3, 224, 224), (Conv(64, 7, stride=2),)),
    Layer("mbv2-expand-dw", "MobileNetV2: 1x1 16 -> 96 at 112x112, ReLU6, then 3x3 "
          "depthwise stride 2, ReLU6", (1, 16, 112, 112),
          (Conv(96, 1, activation="Clip"), Conv(96, 3, stride=2, depthwise=True,
                                                 activation="Clip"))),
    Layer("mbv2-dw-s2-14", "MobileNetV2: 3x3 depthwise stride 2, 576 channels from 14x14, "
          "ReLU6", (1, 576, 14, 14), (Conv(576, 3, stride=2, depthwise=True,
                                             activation="Clip"),)),
    Layer("bert-ffn-up", "BERT-base: [128, 768] x [768, 3072] + bias",
          (128, 768), linear_n=3072),
)
BY_NAME = {layer.name: layer for layer in LAYERS}
QUICK = tuple(layer.name for layer in LAYERS if layer.quick)


def _conv_output(shape: tuple[int, ...], conv: Conv) -> tuple[int, ...]:
    n, _, h, w = shape
    pad = conv.k // 2
    return (n, conv.cout, (h + 2 * pad - conv.k) // conv.stride + 1,
            (w + 2 * pad - conv.k) // conv.stride + 1)


def _depth(conv: Conv, cin: int) -> int:
    """Inputs per output: the window's taps over every input channel, or one's."""
    return conv.k * conv.k * (1 if conv.depthwise else cin)


def output_shape(layer: Layer) -> tuple[int, ...]:
    if layer.linear_n:
        return (layer.input_shape[0], layer.linear_n)
    shape = layer.input_shape
    for conv in layer.convs:
        shape = _conv_output(shape, conv)
    return shape


def flops(layer: Layer) -> int:
    """Multiply-adds times two, of the products only."""
    if layer.linear_n:
        rows, k = layer.input_shape
        return 2 * rows * k * layer.linear_n
    total, shape = 0, layer.input_shape
    for conv in layer.convs:
        out = _conv_output(shape, conv)
        total += 2 * int(np.prod(out)) * _depth(conv, shape[1])
        shape = out
    return total


def build_model(layer: Layer):
    """The layer as an ONNX model (opset 17): input "x" (and "z", the residual), output
    "y", weights drawn from a seeded generator (scaled so that values stay near 1)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, weights = [], []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(layer.input_shape))]

    def constant(name: str, value: np.ndarray) -> str:
        weights.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    if layer.linear_n:
        rows, k = layer.input_shape
        w = constant("w", rng.standard_normal((k, layer.linear_n)) / np.sqrt(k))
        b = constant("b", rng.standard_normal(layer.linear_n))
        nodes += [helper.make_node("MatMul", ["x", w], ["p"]),
                  helper.make_node("Add", ["p", b], ["y"])]
    else:
        value, shape = "x", layer.input_shape
        for i, conv in enumerate(layer.convs):
            cin = shape[1]
            w_shape = (conv.cout, 1 if conv.depthwise else cin, conv.k, conv.k)
            w = constant(f"w{i}", rng.standard_normal(w_shape) / np.sqrt(_depth(conv, cin)))
            b = constant(f"b{i}", rng.standard_normal(conv.cout) * 0.1)
            pad = conv.k // 2
            out = f"c{i}"
            nodes.append(helper.make_node(
                "Conv", [value, w, b], [out], kernel_shape=[conv.k, conv.k],
                strides=[conv.stride] * 2, pads=[pad] * 4,
                group=cin if conv.depthwise else 1))
            shape = _conv_output(shape, conv)
            if layer.residual and i == len(layer.convs) - 1:
                inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                            list(shape)))
                nodes.append(helper.make_node("Add", [out, "z"], [f"r{i}"]))
                out = f"r{i}"
            if conv.activation == "Relu":
                nodes.append(helper.make_node("Relu", [out], [f"a{i}"]))
                out = f"a{i}"
            elif conv.activation == "Clip":
                low = constant(f"low{i}", np.array(0.0))
                high = constant(f"high{i}", np.array(6.0))
                nodes.append(helper.make_node("Clip", [out, low, high], [f"a{i}"]))
                out = f"a{i}"
            value = out
        # the last node writes "y" itself: an Identity would cost ge-hub a copy step
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, layer.name.replace("-", "_"), inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output_shape(layer)))],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def write_files(layer: Layer, directory: str):
    """The layer's model and its inputs in `directory`, as the bench's workers load them."""
    import onnx

    from bench.engines import ModelFiles

    onnx_path = os.path.join(directory, f"{layer.name}.onnx")
    inputs_path = os.path.join(directory, f"{layer.name}.inputs.npz")
    onnx.save(build_model(layer), onnx_path)
    rng = np.random.default_rng(SEED + 1)
    inputs = {"x": rng.standard_normal(layer.input_shape).astype(np.float32)}
    if layer.residual:
        inputs["z"] = rng.standard_normal(output_shape(layer)).astype(np.float32)
    np.savez(inputs_path, **inputs)
    return ModelFiles(onnx_path, inputs_path)


def measure(names: list[str], threads: int, quick: bool) -> dict:
    os.environ["GE_HUB_NUM_THREADS"] = str(threads)  # read once, on the pool's first use
    from bench import precision
    from ge_hub.precision_report import kernel_name

    rounds, budget = (5, 5.0) if quick else (20, 30.0)
    directory = tempfile.mkdtemp(prefix="ge-layers-")
    doc = {"threads": threads, "bf16_kernel": kernel_name(), "layers": []}
    for name in names:
        layer = BY_NAME[name]
        print(f"[layers] {name}", file=sys.stderr, flush=True)
        engines = {row: precision.engine_name(row, threads) + "-nodes"
                   for row in ROWS if row != "ort"}
        entry = precision.measure_model(name, threads, ROWS, rounds, budget, directory,
                                        files=write_files(layer, directory), engines=engines)
        entry.update(description=layer.description, gflop=flops(layer) / 1e9)
        doc["layers"].append(entry)
    return doc


def _problems(entry: dict) -> list[str]:
    """What makes a layer's rows untrustworthy: a failed engine, or an error beyond what
    its precision allows."""
    problems = []
    for row, result in entry["rows"].items():
        if "error" in result:
            problems.append(f"{row} failed")
            continue
        error = result.get("error_vs_fp32")
        limit = FP32_TOLERANCE if row in FP32_ROWS else BF16_TOLERANCE
        if error is not None and error > limit:
            problems.append(f"{row} error {error:.1e} > {limit:.0e}")
    return problems


def markdown(doc: dict) -> str:
    lines = [f"Layer rows, {doc['threads']} thread(s); ge-hub bf16 micro-kernel "
             f"{doc['bf16_kernel']}. ms = median latency of one call; err = max |y - y_fp32|"
             " / max |y_fp32| against ge-hub fp32; nodes: the engine's own per-step (per-node)"
             " times, summed: ge-hub's steps without binding the inputs and returning the"
             " outputs, OpenVINO's nodes without the Reorders that convert the input and"
             " output to and from its blocked layout (a whole model does both once).", "",
             "| layer | GFLOP | " + " | ".join(ROWS) + " | bf16 / ov default, nodes |",
             "|---" * (len(ROWS) + 3) + "|"]
    for entry in doc["layers"]:
        cells = []
        for row in ROWS:
            result = entry["rows"].get(row, {})
            if "ms" not in result:
                cells.append("failed")
                continue
            error = result.get("error_vs_fp32")
            cells.append(f"{result['ms']:.3f} ms"
                         + (f" (nodes {result['nodes_ms']:.3f})" if "nodes_ms" in result else "")
                         + (f", err {error:.1e}" if error and row != "ge-hub fp32" else ""))
        bf16, ov = entry["rows"].get("ge-hub bf16", {}), entry["rows"].get("ov default", {})
        cells.append(f"{bf16['nodes_ms'] / ov['nodes_ms']:.2f}"
                     if bf16.get("nodes_ms") and ov.get("nodes_ms") else "n/a")
        lines.append(f"| {entry['model']} | {entry['gflop']:.3f} | " + " | ".join(cells) + " |")
    lines.append("")
    for entry in doc["layers"]:
        problems = _problems(entry)
        lines.append(f"- {entry['model']}: {entry['description']}"
                     + (f" (**{'; '.join(problems)}**)" if problems else ""))
    return "\n".join(lines)


def failed(doc: dict) -> bool:
    return any(_problems(entry) for entry in doc["layers"])


def main(argv=None) -> int:
    from bench.group_cli import group_main

    return group_main(argv, prog="python -m bench.layers", description=__doc__.split("\n")[0],
                      models={layer.name: layer for layer in LAYERS}, quick=QUICK,
                      quick_help=f"{', '.join(QUICK)} only, few rounds", measure=measure,
                      markdown=markdown, failed=failed)


if __name__ == "__main__":
    sys.exit(main())
