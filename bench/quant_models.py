"""A small int8 CNN beside ONNX Runtime (issue 17: the quantized kernels).

A float CNN (a 3x3 stem and three stages of two 3x3 convolutions, global average pool, a
two-layer head) is built as an ONNX file with random weights, nothing downloaded, then
quantized by ONNX Runtime's static quantizer (per-channel int8 weights, uint8 activations,
calibrated on random images) in both forms:

- QOperator: QuantizeLinear -> QLinearConv -> DequantizeLinear around each convolution;
- QDQ: DequantizeLinear/QuantizeLinear pairs around float Conv and Gemm nodes (ONNX Runtime
  fuses them into integer kernels; ge-hub runs them as written: a float Conv between a
  QuantizeLinear and a DequantizeLinear).

`python -m bench.quant_models [--size S] [--rounds R] [--threads T]` prints, per form, the
median latency of ge-hub and ONNX Runtime over interleaved rounds, their largest output
difference beside the largest output, and ge-hub's step and Python-step counts. Needs
onnxruntime (a shared machine's timings are noisy: compare medians of several runs).
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
import time

import numpy as np

WIDTHS = (32, 64, 128, 256)


def float_model(size: int, seed: int = 0):
    """The float CNN as an onnx.ModelProto (opset 17)."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv(x, cin, cout, stride, name):
        w = rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))
        b = rng.standard_normal(cout) * 0.05
        nodes.append(helper.make_node("Conv", [x, const(name + "_w", w), const(name + "_b", b)],
                                      [name], pads=[1, 1, 1, 1], strides=[stride, stride]))
        nodes.append(helper.make_node("Relu", [name], [name + "_r"]))
        return name + "_r"

    x = conv("x", 3, WIDTHS[0], 2, "stem")
    for stage, (cin, cout) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        x = conv(x, cin, cout, 2, f"s{stage}a")
        x = conv(x, cout, cout, 1, f"s{stage}b")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"]))
    hidden = 512
    w1 = rng.standard_normal((WIDTHS[-1], hidden)) / np.sqrt(WIDTHS[-1])
    w2 = rng.standard_normal((hidden, 100)) / np.sqrt(hidden)
    nodes.append(helper.make_node("MatMul", ["flat", const("w1", w1)], ["h"]))
    nodes.append(helper.make_node("Add", ["h", const("b1", rng.standard_normal(hidden) * 0.1)],
                                  ["hb"]))
    nodes.append(helper.make_node("Relu", ["hb"], ["hr"]))
    nodes.append(helper.make_node("MatMul", ["hr", const("w2", w2)], ["y"]))
    graph = helper.make_graph(
        nodes, "quant_cnn",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 100])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def quantized_models(size: int, folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """{form: path} of the QOperator and QDQ models, quantized by ONNX Runtime."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    source = folder / "float.onnx"
    onnx.save(float_model(size), source)

    class Images(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.feeds = iter([{"x": rng.standard_normal((1, 3, size, size), np.float32)}
                               for _ in range(8)])

        def get_next(self):
            return next(self.feeds, None)

    paths = {}
    for form, quant_format in (("qoperator", QuantFormat.QOperator), ("qdq", QuantFormat.QDQ)):
        paths[form] = folder / f"{form}.onnx"
        quantize_static(str(source), str(paths[form]), Images(), quant_format=quant_format,
                        per_channel=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul"])
    return paths


def measure(path: pathlib.Path, size: int, rounds: int, threads: int) -> dict:
    import onnxruntime as ort

    import ge_hub

    x = np.random.default_rng(2).standard_normal((1, 3, size, size), np.float32)
    model = ge_hub.compile(ge_hub.load(str(path)))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (ours,) = model.run({"x": x})
    (theirs,) = session.run(None, {"x": x})
    ge_times, ort_times = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        model.run({"x": x})
        ge_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        session.run(None, {"x": x})
        ort_times.append(time.perf_counter() - start)
    summary = model.summary()
    return {"ge_hub_ms": float(np.median(ge_times) * 1e3),
            "ort_ms": float(np.median(ort_times) * 1e3),
            "max_abs_diff": float(np.abs(ours - theirs).max()),
            "max_abs_output": float(np.abs(theirs).max()),
            "steps": summary["steps"], "python_steps": summary["python_steps"]}


def main(argv=None) -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    os.environ.setdefault("GE_HUB_NUM_THREADS", str(args.threads))
    with tempfile.TemporaryDirectory() as folder:
        for form, path in quantized_models(args.size, pathlib.Path(folder)).items():
            row = measure(path, args.size, args.rounds, args.threads)
            print(f"{form:10s} ge-hub {row['ge_hub_ms']:8.2f} ms  onnxruntime {row['ort_ms']:8.2f}"
                  f" ms  max |diff| {row['max_abs_diff']:.3g} (of {row['max_abs_output']:.3g})"
                  f"  steps {row['steps']}"
                  f"  python steps {row['python_steps']}")


if __name__ == "__main__":
    main()
