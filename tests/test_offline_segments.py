"""Models that run in segments (`ge_hub.segments`) saved as .ghm files
(`ge_hub.offline.segments`): NonZero, TopK with a computed K, NonMaxSuppression and a
chain of cuts, each run at several sizes, saved, and loaded in a fresh process with the
frontend plugins blocked and planning refused: the stored segment plans give outputs
bit-identical to the in-memory model's, all in C. A portable file plans a new size from
its stored segment graphs; a non-portable one refuses it; a malformed segments record is
one OfflineModelError."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_offline_bad_files import edit_json

import ge_hub
from ge_hub import es
from ge_hub.errors import OfflineModelError, ProfileNotCompiledError
from ge_hub.reference import evaluate


def non_zero():
    with es.GraphBuilder("nonzero") as gb:
        x = es.input("x", "float32", ["N", 3])
        gb.output(es.add(es.non_zero(es.relu(x)), np.array(1, np.int64)), "where")
    rng = np.random.default_rng(0)
    return gb.graph, [{"x": rng.standard_normal((n, 3)).astype(np.float32)}
                      for n in (4, 4, 2, 0)]


def top_k():
    with es.GraphBuilder("topk") as gb:
        x = es.input("x", "float32", [10])
        k = es.cast(es.reduce_sum(es.cast(es.greater(x, np.float32(0)), to="int64"),
                                  keepdims=1), to="int64")
        values, indices = es.top_k(es.relu(x), k, outputs=2)
        gb.output(values, "best")
        gb.output(indices, "where")
    rng = np.random.default_rng(1)
    return gb.graph, [{"x": rng.standard_normal(10).astype(np.float32)} for _ in range(4)]


def nms():
    with es.GraphBuilder("nms") as gb:
        boxes = es.input("boxes", "float32", [1, 8, 4])
        logits = es.input("logits", "float32", [1, 2, 8])
        selected = es.non_max_suppression(boxes, es.sigmoid(logits), np.array([3], np.int64),
                                          np.array([0.4], np.float32),
                                          np.array([0.3], np.float32))
        gb.output(es.gather(es.reshape(boxes, np.array([8, 4], np.int64)),
                            es.gather(selected, np.array(2, np.int64), axis=1)), "kept")
    rng = np.random.default_rng(2)
    feeds = []
    for _ in range(3):
        corner = rng.uniform(0, 3, (1, 8, 2))
        box = np.concatenate([corner, corner + rng.uniform(0.5, 2, (1, 8, 2))], axis=-1)
        feeds.append({"boxes": box.astype(np.float32),
                      "logits": rng.standard_normal((1, 2, 8)).astype(np.float32)})
    return gb.graph, feeds


def chain():
    with es.GraphBuilder("chain") as gb:
        x = es.input("x", "float32", [6, 5])
        where = es.non_zero(es.relu(x))
        distinct = es.unique(es.gather(where, np.array(0, np.int64), axis=0))
        values, _ = es.top_k(es.cast(distinct, to="float32"), es.shape(distinct), outputs=2)
        gb.output(es.neg(values), "rows_desc")
        gb.output(where, "where")
    rng = np.random.default_rng(3)
    return gb.graph, [{"x": rng.standard_normal((6, 5)).astype(np.float32)} for _ in range(4)]


MODELS = {"nonzero": non_zero, "topk": top_k, "nms": nms, "chain": chain}

CHILD = r"""
import json, sys
import numpy as np
import ge_hub
from ge_hub import reference, runtime, segments
from ge_hub.plugins import loaded_plugins

blocked = {"onnx", "torch", "paddle", "example"}
assert not blocked & {p.name for p in loaded_plugins()}, "the frontends must be blocked"

def refuse(*args, **kwargs):
    raise AssertionError("a stored segment plan was not used")

segments.compile_plan = runtime.compile_plan = refuse  # nothing may be planned
reference.evaluate = refuse  # nor computed by the NumPy references
model = ge_hub.load_compiled(sys.argv[1], allow_compile=False)
feeds = np.load(sys.argv[2])
count = int(feeds["count"])
results = {}
for i in range(count):
    names = [n for n in feeds.files if n.startswith(f"{i}:")]
    outputs = model.run({n.split(":", 1)[1]: feeds[n] for n in names})
    for j, array in enumerate(outputs):
        results[f"{i}:{j}"] = array
summary = model.summary()
np.savez(sys.argv[3], **results)
print(json.dumps({k: summary[k] for k in ("segments", "python_steps", "fallback_steps",
                                           "segment_compiles", "cut_ops")}))
"""


def compiled(name):
    graph, feeds = MODELS[name]()
    model = ge_hub.compile(graph)
    want = [model.run(feed) for feed in feeds]
    for feed, outputs in zip(feeds, want):  # the in-memory model is right to begin with
        for got, expected in zip(outputs, evaluate(graph, feed)):
            np.testing.assert_array_equal(got, expected)
    assert model.segmented is not None and model.summary()["python_steps"] == 0
    return graph, feeds, model, want


@pytest.mark.parametrize("name", sorted(MODELS))
def test_saved_segments_run_as_stored_without_frontends(name, tmp_path):
    _, feeds, model, want = compiled(name)
    path = tmp_path / f"{name}.ghm"
    model.save(path)
    arrays = {"count": np.array(len(feeds))}
    for i, feed in enumerate(feeds):
        arrays.update({f"{i}:{n}": a for n, a in feed.items()})
    np.savez(tmp_path / "feeds.npz", **arrays)
    env = {**os.environ, "GE_HUB_DISABLE_PLUGINS": "onnx,torch,paddle,example"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "feeds.npz"),
                           str(tmp_path / "out.npz")], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["python_steps"] == 0 and summary["fallback_steps"] == 0
    assert summary["segment_compiles"] == 0 and summary["segments"] >= 2
    got = np.load(tmp_path / "out.npz")
    for i, outputs in enumerate(want):
        for j, expected in enumerate(outputs):
            array = got[f"{i}:{j}"]
            assert array.dtype == expected.dtype and array.shape == expected.shape
            np.testing.assert_array_equal(array, expected)


def test_a_new_size_is_planned_from_the_stored_segment_graphs(tmp_path):
    graph, _, model, _ = compiled("nonzero")
    model.save(tmp_path / "m.ghm")
    loaded = ge_hub.load_compiled(tmp_path / "m.ghm")
    feed = {"x": np.random.default_rng(9).standard_normal((7, 3)).astype(np.float32)}
    (got,) = loaded.run(feed)
    np.testing.assert_array_equal(got, model.run(feed)[0])
    np.testing.assert_array_equal(got, evaluate(graph, feed)[0])
    assert loaded.summary()["segment_compiles"] >= 1
    # and the model saves again, with the new plans beside the stored ones
    loaded.save(tmp_path / "again.ghm")
    again = ge_hub.load_compiled(tmp_path / "again.ghm", allow_compile=False)
    np.testing.assert_array_equal(again.run(feed)[0], got)


def test_a_non_portable_file_runs_its_stored_sizes_and_refuses_others(tmp_path):
    _, feeds, model, want = compiled("nonzero")
    model.save(tmp_path / "m.ghm", portable=False)
    loaded = ge_hub.load_compiled(tmp_path / "m.ghm")
    np.testing.assert_array_equal(loaded.run(feeds[0])[0], want[0][0])
    with pytest.raises(ProfileNotCompiledError, match="no stored segment plan matches"):
        loaded.run({"x": np.ones((9, 3), np.float32)})


def test_inspect_lists_the_segment_plans(tmp_path, capsys):
    from ge_hub.cli import main

    _, _, model, _ = compiled("chain")
    model.save(tmp_path / "m.ghm")
    assert main(["inspect", str(tmp_path / "m.ghm")]) == 0
    text = capsys.readouterr().out
    assert "runs in segments:" in text and "cut at NonZero" in text
    assert main(["inspect", "--json", str(tmp_path / "m.ghm")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["segments"]["plans"] and all(p["python_steps"] == 0
                                             for p in info["segments"]["plans"])


def head(document):
    """The first stored plan that ends at a cut."""
    return next(e for e in document["entries"] if e["cuts"])


def count_tensor(document):
    """The tensor record of the first cut's count output."""
    plan = head(document)["plan"]
    return plan["tensors"][plan["outputs"][head(document)["cuts"][0][2][-1]]]


@pytest.mark.parametrize("change, message", [
    (lambda s: s["entries"][0].update(tail=99), "tail 99 is out of range"),
    (lambda s: s["entries"][0].update(segment=-1), "segment -1 is out of range"),
    (lambda s: head(s)["cuts"][0].__setitem__(2, [0]), "disagree in length"),
    (lambda s: head(s)["cuts"][0].__setitem__(3, [7]), "or its axis 7 is malformed"),
    (lambda s: s["entries"][0].update(shapes=[]), "input shapes for a segment"),
    (lambda s: s["entries"][0]["plan"]["steps"][0].__setitem__(2, "no_such_kernel"),
     "no_such_kernel"),
    (lambda s: s.update(segments=[]), "no segment"),
    # The fuzzer's findings (seed 21): a count output declared 2**40 long (allocated at
    # its stored shape before the kernel runs), and a head's tail dropped (the run then
    # ended without the model's outputs).
    (lambda s: count_tensor(s).__setitem__(2, [2**40]), r"must be int64 \[1\], not int64"),
    (lambda s: head(s).pop("tail"), "missing field 'tail'"),
    (lambda s: head(s).update(tail=None), "ends the run without the model outputs"),
    (lambda s: next(e for e in s["entries"] if e["segment"] == 1).update(tail=1),
     "tails form a cycle"),
    # seed 22, case 8123: a tail's output renamed; a size planned anew then wrote it by
    # that name and the run did not find the model's output
    (lambda s: s["segments"][1].update(outputs=["renamed"]),
     r"segment 1 names outputs \['renamed'\] that are not the model's"),
])
def test_a_malformed_segments_record_is_one_clear_error(tmp_path, change, message):
    _, _, model, _ = compiled("nonzero")
    model.save(tmp_path / "good.ghm")
    data = (tmp_path / "good.ghm").read_bytes()
    bad = edit_json(data, "plans", lambda doc: change(doc["segments"]))
    (tmp_path / "bad.ghm").write_bytes(bad)
    with pytest.raises(OfflineModelError, match=message):
        ge_hub.load_compiled(tmp_path / "bad.ghm")


def test_a_model_interface_other_than_the_first_segments_is_refused(tmp_path):
    # The first segment is fed the caller's inputs by the model's names: an interface
    # edited under a valid checksum (the fuzzer emptied it) is refused at load.
    _, _, model, _ = compiled("nonzero")
    model.save(tmp_path / "good.ghm")
    bad = edit_json((tmp_path / "good.ghm").read_bytes(), "meta",
                    lambda doc: doc["inputs"].clear())
    (tmp_path / "bad.ghm").write_bytes(bad)
    with pytest.raises(OfflineModelError, match=r"the first segment takes the inputs "
                                                r"\['x'\], the model \[\]"):
        ge_hub.load_compiled(tmp_path / "bad.ghm")
