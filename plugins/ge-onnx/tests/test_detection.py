"""Detection models, whose NonZero, TopK and NonMaxSuppression lengths depend on the
image: ge-hub runs them as segmented plans (ge_hub.segments), every step in C, and must
agree with ONNX Runtime on the same file.

The tiny detector is bench/detection_models.py's (a ResNet-style backbone, random
weights); the slow test exports torchvision's SSDlite320-MobileNetV3 (random weights,
nothing downloaded) when torchvision is installed in the environment.
"""

from __future__ import annotations

import pathlib
import sys

import ge_hub
import onnx
import onnxruntime

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
