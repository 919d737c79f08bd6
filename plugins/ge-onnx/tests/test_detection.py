"""Detection models, whose NonZero, TopK and NonMaxSuppression lengths depend on the
image: ge-hub runs them as segmented plans (ge_hub.segments), every step in C, and must
agree with ONNX Runtime on the same file.

The tiny detector is bench/detection_models.py's (a ResNet-style backbone, random
weights); the slow test exports torchvision's SSDlite320-MobileNetV3 (random weights,
nothing downloaded; the onnx-slow env installs torchvision for it).
"""

from __future__ import annotations

import pathlib
import sys

import ge_hub
import numpy as np
import onnx
import onnxruntime
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # bench/ is the repository's, not an installed package
    sys.path.insert(0, str(ROOT))

from bench.detection_models import check_detections, images, tiny_detector  # noqa: E402


def test_tiny_detector_runs_in_c_segments_and_agrees_with_onnxruntime():
    data = tiny_detector(96)
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    model = ge_hub.compile(ge_hub.load(onnx.load_from_string(data)))
    feeds = [{"image": x} for x in images(96, 3)]
    for feed in feeds:
        check_detections(model.run(feed), session.run(None, feed))
    summary = model.summary()
    assert summary["segments"] == 3
    assert summary["cut_ops"] == {"NonZero": 1, "NonMaxSuppression": 1}
    assert summary["python_steps"] == 0 and summary["folded_steps"] == 0
    compiles = summary["segment_compiles"]
    for feed in feeds:  # the same lengths again: every segment plan from the cache
        check_detections(model.run(feed), session.run(None, feed))
    assert model.summary()["segment_compiles"] == compiles
    # The backbone ran once per image, in the first segment's plan.
    head = model.segment_plans[0]
    assert sum(s.op.endswith("Conv") for s in head.steps) >= 10
    assert not any(s.op.endswith("Conv") for p in model.segment_plans[1:] for s in p.steps)


def test_an_if_decided_by_shapes_is_inlined_and_its_nonzero_cut():
    # torchvision's batched NMS asks "no boxes?" with an If on the boxes' shape; once the
    # shape is known the If is its branch, and the data-dependent op inside it is a cut.
    from onnx import TensorProto, helper

    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["nz"])],
        "then", [], [helper.make_tensor_value_info("nz", TensorProto.INT64, [2, "k"])])
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["none"], value=helper.make_tensor(
            "none", TensorProto.INT64, [2, 0], []))],
        "else", [], [helper.make_tensor_value_info("none", TensorProto.INT64, [2, 0])])
    nodes = [helper.make_node("Size", ["x"], ["size"]),
             helper.make_node("Greater", ["size", "zero"], ["any"]),
             helper.make_node("If", ["any"], ["where"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["where", "one"], ["y"])]
    graph = helper.make_graph(
        nodes, "if_nonzero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, "k"])],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
         helper.make_tensor("one", TensorProto.INT64, [], [1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    model = ge_hub.compile(ge_hub.load(proto))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        (got,), (want,) = model.run({"x": x}), session.run(None, {"x": x})
        np.testing.assert_array_equal(got, want)
    summary = model.summary()
    assert summary["segments"] == 2 and summary["cut_ops"] == {"NonZero": 1}
    assert summary["python_steps"] == 0 and summary["folded_steps"] == 0


@pytest.mark.slow
def test_ssdlite_runs_in_c_segments_and_agrees_with_onnxruntime(tmp_path):
    # The onnx-slow env installs torch and torchvision (tox.ini) for this export: without
    # them the test fails rather than skips.
    from bench.detection_models import same_outputs, ssdlite

    path = tmp_path / "ssdlite.onnx"
    ssdlite(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    model = ge_hub.compile(ge_hub.load(str(path)))
    rng = np.random.default_rng(0)
    feeds = [{"image": rng.random((3, 320, 320), dtype=np.float32)} for _ in range(2)]
    for feed in feeds:
        same_outputs(model.run(feed), session.run(None, feed))
    summary = model.summary()
    # 180 NonZero (a score threshold and a box filter per class) end the first segment,
    # the batched NonMaxSuppression (inside an If on the box count) the second.
    assert summary["segments"] == 3
    assert summary["cut_ops"] == {"NonZero": 180, "NonMaxSuppression": 1}
    assert summary["python_steps"] == 0 and summary["folded_steps"] == 0
    path.unlink()


SEGMENTED_CHILD = r"""
import sys
import numpy as np
import ge_hub
from ge_hub import reference, runtime, segments
from ge_hub.plugins import loaded_plugins

assert "onnx" not in {p.name for p in loaded_plugins()}, "the ONNX frontend must be blocked"

def refuse(*args, **kwargs):
    raise AssertionError("a stored segment plan was not used")

segments.compile_plan = runtime.compile_plan = reference.evaluate = refuse
model = ge_hub.load_compiled(sys.argv[1], allow_compile=False)
images = np.load(sys.argv[2])
results = {}
for i in range(len(images)):
    for j, array in enumerate(model.run({"image": images[i]})):
        results[f"{i}:{j}"] = array
summary = model.summary()
assert summary["python_steps"] == 0 and summary["segment_compiles"] == 0, summary
np.savez(sys.argv[3], **results)
"""


def test_tiny_detector_saved_as_ghm_runs_without_the_frontend(tmp_path):
    # A segmented ONNX model: its stored segment plans run from the .ghm in a process with
    # the ONNX frontend blocked, bit-identical to the in-memory model, nothing compiled.
    import os
    import subprocess

    model = ge_hub.compile(ge_hub.load(onnx.load_from_string(tiny_detector(96))))
    pictures = np.stack(images(96, 3))
    want = [model.run({"image": x}) for x in pictures]
    path = tmp_path / "detector.ghm"
    model.save(path)
    np.save(tmp_path / "images.npy", pictures)
    done = subprocess.run([sys.executable, "-c", SEGMENTED_CHILD, str(path),
                           str(tmp_path / "images.npy"), str(tmp_path / "out.npz")],
                          env=dict(os.environ, GE_HUB_DISABLE_PLUGINS="onnx"),
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(tmp_path / "out.npz") as got:
        for i, outputs in enumerate(want):
            for j, expected in enumerate(outputs):
                assert got[f"{i}:{j}"].dtype == expected.dtype
                np.testing.assert_array_equal(got[f"{i}:{j}"], expected)
