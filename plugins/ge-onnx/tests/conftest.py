"""Helpers for ge-onnx tests: build small ONNX models, run them both ways, compare.

onnxruntime is the second opinion: a model imported by ge-onnx and run by ge-hub's
reference evaluator must give what onnxruntime gives for the same ONNX model.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnxruntime
import pytest
from ge_hub.reference import evaluate
from onnx import helper

import ge_onnx

from .conformance_report import REPORT_KEY, ConformanceReport, outcome_of


def pytest_addoption(parser):
    parser.addoption("--conformance-report", metavar="FILE", default=None,
                     help="write the conformance suite's per-group report as JSON to FILE")


def pytest_configure(config):
    config.stash[REPORT_KEY] = ConformanceReport()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    outcome = outcome_of(report)
    if outcome and item.module.__name__.endswith("test_conformance") and item.cls:
        item.config.stash[REPORT_KEY].record_outcome(item.nodeid, item.cls.__name__, outcome)
    return report


def pytest_terminal_summary(terminalreporter, config):
    report = config.stash[REPORT_KEY]
    if not report.groups:
        return
    terminalreporter.write_sep("-", "ONNX conformance: what ran outside the C executor")
    for line in report.lines():
        terminalreporter.write_line(line)
    path = config.getoption("--conformance-report")
    if path:
        report.write_json(pathlib.Path(path))
        terminalreporter.write_line(f"written to {path}")


def make_model(nodes, inputs, outputs, *, opset: int, initializers=(), domains=None,
               name: str = "test", **graph_kwargs) -> onnx.ModelProto:
    """An ONNX model from nodes and (name, elem_type, shape) inputs and outputs."""

    def info(spec):
        if isinstance(spec, onnx.ValueInfoProto):
            return spec
        value_name, elem_type, shape = spec
        return helper.make_tensor_value_info(value_name, elem_type, shape)

    graph = helper.make_graph(nodes, name, [info(i) for i in inputs], [info(o) for o in outputs],
                              list(initializers), **graph_kwargs)
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import),
                                                      ignore_unknown=True)
    return model


def random_array(rng: np.random.Generator, shape, dtype="float32", low=-3.0, high=3.0):
    """Random non-zero data."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        data = rng.integers(int(low), int(high) + 1, size=shape)
        data[data == 0] = 1
        return data.astype(dtype)
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


def run_onnxruntime(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_ge_hub(model_or_graph, feeds: dict) -> list[np.ndarray]:
    graph = model_or_graph
    if isinstance(model_or_graph, onnx.ModelProto):
        graph = ge_onnx.load(model_or_graph)
    return evaluate(graph, feeds)


def assert_outputs_close(ours, theirs, rtol=1e-5, atol=1e-6):
    assert len(ours) == len(theirs)
    for index, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == b.dtype, f"output {index}: dtype {a.dtype} vs {b.dtype}"
        assert a.shape == b.shape, f"output {index}: shape {a.shape} vs {b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {index}")


def assert_matches_onnxruntime(model: onnx.ModelProto, feeds: dict, **tolerances):
    """Import `model`, run it with ge-hub and with onnxruntime; outputs must agree.

    Returns the imported graph for further checks.
    """
    graph = ge_onnx.load(model)
    assert_outputs_close(evaluate(graph, feeds), run_onnxruntime(model, feeds), **tolerances)
    return graph


@pytest.fixture
def rng():
    return np.random.default_rng(0)
