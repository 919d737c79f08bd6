"""A tiny detector for segmented plans (issue 17): a ResNet-style backbone whose boxes and
class scores feed NonZero, a TopK with a run-time K and NonMaxSuppression, built as an
ONNX file (random weights, nothing downloaded) so that ge-hub and ONNX Runtime run the
same model.

    image [1, 3, S, S] -> stem (3x3 /2) -> 2 stages of residual blocks (/2 each)
      -> box head (4 anchors x 4 per cell: cx, cy, w, h) and class head (4 x C logits)
    scores = Sigmoid(logits) [1, C, N]; best = ReduceMax over classes [1, N]
    kept = NonZero(best > 0.5)                      (data-dependent length)
    K = Min(len(kept), 100); TopK(best[kept], K)    (run-time K)
    NonMaxSuppression(boxes[top], scores[top], 20 per class, IoU 0.5, score 0.5)
    detections = boxes[top][selected box]          [M, 4], and the [M, 3] selection

`python -m bench.detection_models [--size S] [--images N] [--rounds R] [--threads T]
[--blocks B]` prints ge-hub's and ONNX Runtime's latency per image over N distinct images
(the median of B interleaved blocks of R passes each, and the spread of the per-block
ratios), after a warm-up pass over them (ge-hub plans each new length once), and ge-hub's
summary(); with
`--ssdlite`, the same for torchvision's SSDlite320-MobileNetV3 exported to ONNX (random
weights; needs torchvision, whose NonMaxSuppression sees 27,000 boxes).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

CLASSES = 3
ANCHORS = 4
WIDTHS = (16, 32, 64)


def tiny_detector(size: int = 128, seed: int = 0) -> bytes:
    """The detector as a serialized ONNX model (opset 17); input `image` [1, 3, size,
    size], outputs `detections` [M, 4] and `selected` [M, 3]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    counter = iter(range(10_000))

    def const(array, name=None):
        name = name or f"c{next(counter)}"
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, attrs=None, outputs=1):
        names = [f"t{next(counter)}" for _ in range(outputs)]
        nodes.append(helper.make_node(op, inputs, names, **(attrs or {})))
        return names[0] if outputs == 1 else names

    def conv(x, cin, cout, k, stride=1, relu=True):
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        b = rng.standard_normal(cout) * 0.05
        y = node("Conv", [x, const(w.astype(np.float32)), const(b.astype(np.float32))],
                 {"kernel_shape": [k, k], "strides": [stride, stride],
                  "pads": [k // 2] * 4})
        return node("Relu", [y]) if relu else y

    def block(x, c):
        y = conv(conv(x, c, c, 3), c, c, 3, relu=False)
        return node("Relu", [node("Add", [x, y])])

    x = conv("image", 3, WIDTHS[0], 3, stride=2)
    x = block(x, WIDTHS[0])
    for cin, cout in zip(WIDTHS, WIDTHS[1:]):
        x = block(conv(x, cin, cout, 3, stride=2), cout)
    cells = size // 2 ** len(WIDTHS)
    n = cells * cells * ANCHORS
    deltas = conv(x, WIDTHS[-1], ANCHORS * 4, 1, relu=False)
    logits = conv(x, WIDTHS[-1], ANCHORS * CLASSES, 1, relu=False)
    # [1, A*4, H, W] -> [1, H, W, A*4] -> [1, N, 4]: (cx, cy, w, h) around each cell.
    deltas = node("Reshape", [node("Transpose", [deltas], {"perm": [0, 2, 3, 1]}),
                              const(np.array([1, n, 4], np.int64))])
    grid = (np.stack(np.meshgrid(np.arange(cells), np.arange(cells)), -1) + 0.5) / cells
    centers = np.repeat(grid.reshape(-1, 2), ANCHORS, axis=0).reshape(1, n, 2)
    anchors = np.concatenate([centers, np.full((1, n, 2), 2.0 / cells)], -1)
    boxes = node("Add", [node("Mul", [deltas, const(np.float32(0.1))]),
                         const(anchors.astype(np.float32))])
    logits = node("Reshape", [node("Transpose", [logits], {"perm": [0, 2, 3, 1]}),
                              const(np.array([1, n, CLASSES], np.int64))])
    scores = node("Transpose", [node("Sigmoid", [logits])], {"perm": [0, 2, 1]})  # [1, C, N]
    best = node("ReduceMax", [scores], {"axes": [1], "keepdims": 0})  # [1, N]
    kept = node("NonZero", [node("Greater", [best, const(np.float32(0.5))])])  # [2, k]
    kept = node("Gather", [kept, const(np.int64(1))], {"axis": 0})  # [k]
    kept_best = node("Gather", [best, kept], {"axis": 1})  # [1, k]
    k = node("Min", [node("Shape", [kept]), const(np.array([100], np.int64))])
    _, top = node("TopK", [kept_best, k], {"axis": 1}, outputs=2)  # [1, K]
    top = node("Gather", [kept, node("Squeeze", [top, const(np.array([0], np.int64))])],
               {"axis": 0})  # [K] anchor indices
    top_boxes = node("Gather", [boxes, top], {"axis": 1})  # [1, K, 4]
    top_scores = node("Gather", [scores, top], {"axis": 2})  # [1, C, K]
    nodes.append(helper.make_node(
        "NonMaxSuppression", [top_boxes, top_scores, const(np.array([20], np.int64)),
                              const(np.array([0.5], np.float32)),
                              const(np.array([0.5], np.float32))],
        ["selected"], center_point_box=1))
    which = node("Gather", ["selected", const(np.int64(2))], {"axis": 1})  # [M]
    nodes.append(helper.make_node(
        "Gather", [node("Squeeze", [top_boxes, const(np.array([0], np.int64))]), which],
        ["detections"], axis=0))
    graph = helper.make_graph(
        nodes, "tiny_detector",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["M", 4]),
         helper.make_tensor_value_info("selected", TensorProto.INT64, ["M", 3])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _torchvision_nms_for_export() -> None:
    """Make torchvision's `nms` op exist when its compiled extension cannot load (PyPI's
    torchvision wheel links CUDA libraries a CPU torch lacks): the op is declared, with a
    plain greedy CPU version for eager runs; tracing records the op, and torchvision's
    ONNX symbolic turns it into NonMaxSuppression as usual."""
    import torch

    try:
        torch.ops.torchvision.nms  # noqa: B018 - raises when the op does not exist
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

    def nms(dets, scores, iou_threshold):
        order = torch.argsort(scores, descending=True, stable=True).tolist()
        x1, y1, x2, y2 = dets.unbind(1)
        areas = (x2 - x1) * (y2 - y1)
        suppressed = torch.zeros(len(order), dtype=torch.bool)
        keep = []
        for i in order:
            if suppressed[i]:
                continue
            keep.append(i)
            w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
            h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
            suppressed |= w * h / (areas[i] + areas - w * h) > iou_threshold
        return torch.tensor(keep, dtype=torch.int64)

    lib.impl("nms", nms, "CPU")
    _torchvision_nms_for_export.lib = lib  # the registration lives as long as the library

    import torchvision.ops.boxes as boxes

    boxes._assert_has_ops = _ops_present


def _ops_present() -> None:
    return None


def ssdlite(path: str, seed: int = 0) -> None:
    """torchvision's SSDlite320-MobileNetV3 (random weights, nothing downloaded) exported
    to ONNX at `path` (opset 17, TorchScript exporter); input `image` [3, 320, 320],
    outputs boxes, scores and labels of up to 300 detections."""
    import torch

    _torchvision_nms_for_export()
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    torch.manual_seed(seed)
    model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
    x = torch.rand(3, 320, 320)
    torch.onnx.export(model, ([x],), path, opset_version=17, dynamo=False,
                      input_names=["image"], output_names=["boxes", "scores", "labels"])


def images(size: int, count: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, size, size)).astype(np.float32) for _ in range(count)]


def _mean_ms(run, feeds, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        for feed in feeds:
            run(feed)
    return (time.perf_counter() - start) * 1e3 / (rounds * len(feeds))


def check_detections(got, want) -> None:
    """Same detections as rows in any order, the same number selected: boxes whose
    scores differ in the last bits may be ranked in either order by the two engines
    (which renumbers `selected`, indices into the TopK result)."""
    (g, g_selected), (w, w_selected) = got, want
    assert g.shape == w.shape and g_selected.shape == w_selected.shape, (g.shape, w.shape)
    np.testing.assert_allclose(g[np.lexsort(g.T[::-1])], w[np.lexsort(w.T[::-1])],
                               rtol=1e-4, atol=1e-4)


def same_outputs(got, want) -> None:
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def measure(model_bytes: bytes, feeds: list[dict], rounds: int, threads: int,
            check=None, blocks: int = 15) -> dict:
    """Both engines on the same file and feeds, in `blocks` interleaved blocks of `rounds`
    passes over the feeds each; the medians of the blocks' mean ms per image, their ratio,
    and the 10th-90th percentile of the per-block ratios (how noisy the run was). `check`
    (default check_detections) compares the outputs on the warm-up pass."""
    import onnx
    import onnxruntime as ort

    import ge_hub

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    model = ge_hub.compile(ge_hub.load(onnx.load_from_string(model_bytes)))
    for feed in feeds:  # warm-up: every distinct length planned once
        want = session.run(None, feed)
        got = model.run(feed)
        (check or check_detections)(got, want)
    compiles = model.summary().get("segment_compiles", 0)
    ge, rt = [], []
    for index in range(blocks):  # interleaved, each engine first in every other block
        pair = [(ge, model.run), (rt, lambda f: session.run(None, f))]
        for times, run in (pair if index % 2 == 0 else pair[::-1]):
            times.append(_mean_ms(run, feeds, rounds))
            # Both engines share this process: let the one that just ran park its
            # threads (ORT's spin for tens of milliseconds after a run) before the other
            # starts, or with 2 threads each the second runs beside a spinning pool.
            time.sleep(0.2)
    summary = model.summary()
    ratios = sorted(g / r for g, r in zip(ge, rt))
    return {"ge_hub_ms": float(np.median(ge)), "ort_ms": float(np.median(rt)),
            "ratio": float(np.median(ge) / np.median(rt)),
            "block_ratio_p10_p90": [round(float(np.percentile(ratios, q)), 3) for q in (10, 90)],
            "blocks": blocks,
            "recompiles_after_warmup": summary.get("segment_compiles", 0) - compiles,
            "summary": summary}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=None,
                        help="interleaved blocks per engine, whose medians are reported "
                             "(default 15; 3 with --ssdlite, whose images take 0.5 s)")
    parser.add_argument("--ssdlite", action="store_true",
                        help="torchvision's SSDlite320-MobileNetV3 instead (needs torchvision)")
    args = parser.parse_args(argv)
    # ge-hub's pool is sized once, when the core first runs: the same threads as ORT's.
    os.environ["GE_HUB_NUM_THREADS"] = str(args.threads)
    if args.ssdlite:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            ssdlite(f"{tmp}/ssdlite.onnx")
            with open(f"{tmp}/ssdlite.onnx", "rb") as f:
                data = f.read()
        rng = np.random.default_rng(1)
        feeds = [{"image": rng.random((3, 320, 320), dtype=np.float32)}
                 for _ in range(args.images)]
        result = measure(data, feeds, args.rounds, args.threads, check=same_outputs,
                         blocks=args.blocks or 3)
    else:
        feeds = [{"image": x} for x in images(args.size, args.images)]
        result = measure(tiny_detector(args.size), feeds, args.rounds, args.threads,
                         blocks=args.blocks or 15)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
