"""Every C kernel's attribute blob with each value set to an edge value: the kernel must
refuse it (KernelError) or run, never crash, hang or write outside its tensors.

An offline model file (`.ghm`) stores each step's blob; a file edited under a valid
checksum hands the kernels any values at all. The kernels check the sizes they compute
from a blob against their tensors before indexing them; this walks small compiled graphs
(single ops of every C kernel family, and fused models) and replaces each 8-byte word of
each blob in turn. `test_blob_edges.py` runs it in process; as a script it runs each step
in a child process with an alarm, so that a crash or a hang is reported with its kernel
and word, and the walk goes on:

    python -m tests.kernels.blob_edges [--seconds 10]
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys

import numpy as np

EDGE_VALUES = (-1, 0, 2**31, 2**40 + 1, 2**62, 2**63 - 1, 7493989779944505346, -2**63)


def _random(rng, shape, dtype="float32"):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 3, shape).astype(dtype)


def op_cases(rng):
    """(label, op, inputs, attrs, consts[, outputs]): one graph per kernel family and
    layout."""
    r = lambda *s: _random(rng, s)  # noqa: E731
    return [
        ("conv", "Conv", [r(1, 3, 7, 9), r(4, 3, 3, 3)], dict(pads=[1, 1, 1, 1]), (1,)),
        ("conv-group", "Conv", [r(2, 4, 5, 5), r(4, 2, 1, 1), r(4)], dict(group=2), (1, 2)),
        ("conv-winograd", "Conv", [r(1, 8, 10, 10), r(8, 8, 3, 3)], dict(pads=[1, 1, 1, 1]),
         (1,)),
        ("conv-depthwise", "Conv", [r(1, 4, 9, 9), r(4, 1, 3, 3)],
         dict(group=4, strides=[2, 2]), (1,)),
        ("conv-computed-w", "Conv", [r(1, 3, 6, 6), r(2, 3, 3, 3)], {}, ()),
        ("conv-transpose", "ConvTranspose", [r(1, 3, 5, 5), r(3, 2, 3, 3)],
         dict(strides=[2, 2]), (1,)),
        ("matmul", "MatMul", [r(2, 3, 5), r(5, 4)], {}, ()),
        ("matmul-const", "MatMul", [r(3, 5), r(5, 40)], {}, (1,)),
        ("gemm", "Gemm", [r(3, 5), r(4, 5), r(4)], dict(transB=1), (1, 2)),
        ("maxpool", "MaxPool", [r(1, 3, 7, 9)], dict(kernel_shape=[3, 3]), ()),
        ("avgpool", "AveragePool", [r(1, 3, 7, 9)],
         dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), ()),
        ("gap", "GlobalAveragePool", [r(1, 5, 6, 7)], {}, ()),
        ("softmax", "Softmax", [r(3, 5, 7)], dict(axis=1), ()),
        ("softmax-last", "Softmax", [r(3, 5, 7)], dict(axis=-1), ()),
        ("batchnorm", "BatchNormalization",
         [r(2, 3, 4, 5), r(3), r(3), r(3), np.abs(r(3)) + 0.5], {}, (1, 2, 3, 4)),
        ("layernorm", "LayerNormalization", [r(2, 5, 8), r(8), r(8)], dict(axis=-1), (1, 2)),
        ("instancenorm", "InstanceNormalization", [r(2, 3, 4, 5), r(3), r(3)], {}, (1, 2)),
        ("lrn", "LRN", [r(1, 5, 4, 4)], dict(size=3), ()),
        ("resize", "Resize", [r(1, 2, 3, 4), None, np.array([1, 1, 2, 2], np.float32)],
         dict(mode="linear"), (2,)),
        ("reduce", "ReduceSum", [r(3, 4, 5), np.array([1], np.int64)], {}, (1,)),
        ("argmax", "ArgMax", [r(3, 4, 5)], dict(axis=1), ()),
        ("cumsum", "CumSum", [r(3, 4, 5), np.array(1, np.int64)], {}, (1,)),
        ("topk", "TopK", [r(3, 9), np.array([4], np.int64)], dict(axis=1), (1,)),
        ("transpose", "Transpose", [r(2, 3, 4)], dict(perm=[2, 0, 1]), ()),
        ("concat", "Concat", [r(2, 3), r(2, 5)], dict(axis=1), ()),
        ("split", "Split", [r(2, 6), np.array([2, 4], np.int64)], dict(axis=1), (1,)),
        ("slice", "Slice", [r(5, 6), np.array([1, 0], np.int64), np.array([4, 6], np.int64),
                            np.array([0, 1], np.int64), np.array([2, 2], np.int64)], {},
         (1, 2, 3, 4)),
        ("pad", "Pad", [r(3, 4), np.array([1, 0, 2, 1], np.int64)], {}, (1,)),
        ("gather", "Gather", [r(5, 4), np.array([[0, 4], [2, 1]], np.int64)], dict(axis=0),
         (1,)),
        ("gather-elements", "GatherElements", [r(3, 4), np.array([[0, 2, 1, 0]] * 3,
                                                                  np.int64)], {}, (1,)),
        ("expand", "Expand", [r(3, 1), np.array([2, 3, 4], np.int64)], {}, (1,)),
        ("tile", "Tile", [r(2, 3), np.array([2, 2], np.int64)], {}, (1,)),
        ("add", "Add", [r(2, 3, 4), r(3, 1)], {}, ()),
        ("where", "Where", [r(3, 4) > 0, r(3, 4), r(1, 4)], {}, ()),
        ("einsum", "Einsum", [r(2, 3, 4), r(2, 4, 5)], dict(equation="bij,bjk->bik"), ()),
        ("trilu", "Trilu", [r(4, 5)], {}, ()),
        ("onehot", "OneHot", [np.array([0, 2, 1], np.int64), np.array(4, np.int64),
                              np.array([0, 1], np.float32)], {}, (1, 2)),
        ("quantize", "QuantizeLinear", [r(3, 4), np.array(0.1, np.float32),
                                        np.array(3, np.uint8)], {}, (1, 2)),
        ("dequantize", "DequantizeLinear", [np.arange(12, dtype=np.uint8).reshape(3, 4),
                                            np.array(0.1, np.float32),
                                            np.array(3, np.uint8)], {}, (1, 2)),
        ("gru", "GRU", [r(4, 1, 3), r(1, 15, 3), r(1, 15, 5)], dict(hidden_size=5), (1, 2), 2),
        ("lstm", "LSTM", [r(4, 1, 3), r(1, 20, 3), r(1, 20, 5)], dict(hidden_size=5), (1, 2),
         2),
    ]


def _conv_transpose_bf16():
    """A ConvTranspose on the bf16 kernel (ge_nn_conv_transpose_bf16): groups, stride 2."""
    import numpy as np

    import ge_hub
    from ge_hub import es

    rng = np.random.default_rng(5)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 32, 5, 6])
        w = es.const(rng.standard_normal((32, 3, 3, 3)).astype(np.float32))
        es.output(es.op("ConvTranspose", x, w, strides=[2, 2], group=2, pads=[1, 1, 0, 0]),
                  "y")
    return ge_hub.compile(gb.graph, options={"precision": "bf16"})


def _pointwise_depthwise_bf16():
    """A PointwiseDepthwise step (ge_conv_pointwise_depthwise_f32): two images, bands of a
    few rows, a partial block of channels, stride 2."""
    import ge_hub

    from . import test_conv_pointwise_depthwise as pd

    x, w1, b1, w2, b2 = pd.case_data("stride2", np.random.default_rng(5))
    with pd.fused_everywhere(pd.CASES["stride2"][5], x.shape[3]):
        return ge_hub.compile(pd.case_graph("stride2", w1, b1, w2, b2),
                              options={"precision": "bf16"})


def _depthwise_nhwc_bf16():
    """A depthwise FusedConvNHWC step (ge_conv_depthwise_nhwc_bf16): two images, stride 2,
    its rows shared per window row."""
    from . import test_conv_depthwise_nhwc as dw

    _, w, b = dw.case_data("shared_stride2", np.random.default_rng(5))
    return dw.case_model("shared_stride2", w, b, "Clip")


def _model_cases():
    """Fused steps: conv+BN+Relu with a residual (ResNet-18 at 32x32, in fp32 and bf16),
    packed FusedMatMul with its epilogue (an MLP), and the whole graphs of
    tests/test_graphs.py."""
    here = os.path.dirname(os.path.abspath(__file__))
    # the repository root (bench/) and tests/ (test_graphs), however this was imported
    sys.path[:0] = [os.path.dirname(os.path.dirname(here)), os.path.dirname(here)]
    import test_graphs

    import ge_hub
    from bench import models

    yield "resnet18-32", ge_hub.compile(models.resnet18(1, size=32, classes=10))
    # in bf16: the bf16 conv paths (Winograd on its 3x3 layers, tap-major pairs on the
    # strided ones) and the bf16 Gemm
    yield "resnet18-32-bf16", ge_hub.compile(models.resnet18(1, size=32, classes=10),
                                            options={"precision": "bf16"})
    yield "mlp", ge_hub.compile(models.mlp(2))
    yield "conv-transpose-bf16", _conv_transpose_bf16()
    yield "pointwise-depthwise-bf16", _pointwise_depthwise_bf16()
    yield "depthwise-nhwc-bf16", _depthwise_nhwc_bf16()
    # tests/test_graphs.py's whole graphs: fused elementwise chains, depthwise-separable
    # blocks, an encoder block (LayerNorm, attention MatMuls, Gelu), and that block in bf16
    for build in test_graphs.MODELS:
        graph, feed = build()
        shapes = {name: array.shape for name, array in feed.items()}
        yield f"graph-{build.__name__}", ge_hub.compile(graph, input_shapes=shapes)
    graph, feed = test_graphs.transformer_block()
    yield "graph-transformer-bf16", ge_hub.compile(
        graph, input_shapes={name: array.shape for name, array in feed.items()},
        options={"precision": "bf16"})


def compiled_cases():
    """(label, compiled model) for every case."""
    from .nn_cases import compile_op

    rng = np.random.default_rng(5)
    for label, op, inputs, attrs, consts, *outputs in op_cases(rng):
        model, _ = compile_op(op, inputs, attrs, consts=consts,
                              outputs=outputs[0] if outputs else None)
        yield label, model
    yield from _model_cases()


def _feeds(model):
    rng = np.random.default_rng(0)
    plan = model.plan
    return [_random(rng, plan.tensors[t].shape, plan.tensors[t].dtype.numpy)
            for t in plan.inputs]


def edited_steps(model):
    """(step index, word offset, value, one-step plan with that word edited) for each C
    step's blob."""
    plan = model.plan
    for index, step in enumerate(plan.steps):
        if step.kind.value != "c":
            continue
        for at in range(0, len(step.attrs) - 7, 8):
            for value in EDGE_VALUES:
                blob = step.attrs[:at] + value.to_bytes(8, "little", signed=True) + \
                    step.attrs[at + 8:]
                yield index, at, value, dataclasses.replace(
                    plan, steps=(dataclasses.replace(step, attrs=blob),))


def run_edited(model, plan, feeds) -> None:
    from ge_hub.executor import Executor, KernelError

    try:
        Executor(plan).run(feeds)
    except KernelError:
        pass


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="a step's edits that take longer are a hang")
    parser.add_argument("--only", action="append", help="run only this case (repeatable)")
    args = parser.parse_args(argv)
    findings = 0
    for label, model in compiled_cases():
        if args.only and label not in args.only:
            continue
        feeds = _feeds(model)
        by_step: dict[int, list] = {}
        for index, at, value, plan in edited_steps(model):
            by_step.setdefault(index, []).append((at, value, plan))
        for index, edits in by_step.items():
            kernel = model.plan.steps[index].kernel
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                signal.alarm(int(args.seconds))
                for at, value, plan in edits:  # the edit about to run, for the parent
                    os.write(write, f"word {at // 8} = {value}\n".encode())
                    run_edited(model, plan, feeds)
                os._exit(0)
            os.close(write)
            with os.fdopen(read) as pipe:
                last = (pipe.read().splitlines() or ["?"])[-1]
            _, status = os.waitpid(pid, 0)
            if status:
                findings += 1
                how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                       else f"exit {os.WEXITSTATUS(status)}")
                print(f"FINDING {label} step {index} ({kernel}) at {last}: {how}", flush=True)
    print(f"{findings} findings", flush=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
