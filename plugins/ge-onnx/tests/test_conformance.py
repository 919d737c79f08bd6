"""ONNX's own backend test suite, run through ge_onnx.backend.

The suite ships inside the onnx package (`onnx.backend.test`): the node tests (one op
each), the simple, pytorch-converted and pytorch-operator model tests, and the light
real-model tests (resnet50, densenet121, ...; local files, no download). Tests ge-onnx
cannot pass yet are listed with a reason in `expected_failures.txt` and run as expected
failures, so a test that starts passing is reported; none is skipped. The CUDA variants
are dropped (ge-hub runs on CPU), and the light real-model tests are marked `slow`:
select them with `pytest -m slow`.

    pytest tests/test_conformance.py -q                        # all but the real models
    pytest tests/test_conformance.py -q -k OnnxBackendNodeModelTest

At the end pytest prints, per group, the tests and their outcomes beside the Python steps
and plan-time folds their plans needed (`conformance_report.py`; `--conformance-report
FILE` writes it as JSON). The pytorch-converted, pytorch-operator and light real-model
groups must run with no Python step: a plan that needs one fails its test.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

import onnx.backend.test
import pytest
from packaging.requirements import Requirement

import ge_onnx.backend

from .conformance_report import NO_PYTHON_GROUPS, REPORT_KEY

EXPECTED_FAILURES = pathlib.Path(__file__).with_name("expected_failures.txt")
CATEGORIES = {"missing-op", "other-domain", "unsupported-dtype", "non-tensor-type",
              "core-op-limitation", "numerics", "random", "data-dependent-shape",
              "spec-undefined"}
SLOW_GROUPS = {"OnnxBackendRealModelTest"}


def read_expected_failures(path: pathlib.Path = EXPECTED_FAILURES) -> dict[str, tuple[str, str]]:
    """test name -> (category, reason), from lines `name  category  [when:REQ]  reason`.

    A `when:` condition (a requirement such as `ml_dtypes>=0.7`) makes the entry apply only
    while the installed distribution satisfies it; otherwise the test must pass.
    """
    entries: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, category, reason = (line.split(None, 2) + ["", ""])[:3]
        condition = None
        if reason.startswith("when:"):
            condition, reason = (reason.split(None, 1) + [""])[:2]
        if category not in CATEGORIES or not reason:
            raise ValueError(f"{path.name}:{number}: expected 'test_name category reason' "
                             f"with a category in {sorted(CATEGORIES)}, got {line!r}")
        if name in entries:
            raise ValueError(f"{path.name}:{number}: {name} is listed twice")
        if condition is None or condition_holds(condition.removeprefix("when:")):
            entries[name] = (category, reason)
    return entries


def listed_names(path: pathlib.Path = EXPECTED_FAILURES) -> set[str]:
    """Every test name the file lists, whether or not its condition holds here."""
    return {line.split(None, 1)[0] for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def condition_holds(requirement: str) -> bool:
    """Whether the installed distribution satisfies `requirement` (`ml_dtypes>=0.7`)."""
    parsed = Requirement(requirement)
    try:
        installed = importlib.metadata.version(parsed.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return parsed.specifier.contains(installed, prereleases=True)


def _backend_test_cases() -> dict[str, type]:
    runner = onnx.backend.test.BackendTest(ge_onnx.backend, __name__)
    for name in read_expected_failures():
        runner.xfail(f"^{re.escape(name)}_cpu$")
    cases = runner.test_cases
    for case in cases.values():
        for attr in [a for a in vars(case) if a.startswith("test_") and a.endswith("_cuda")]:
            delattr(case, attr)  # ge-hub runs on CPU; these would only be skipped
        if case.__name__ in SLOW_GROUPS:
            case.pytestmark = [pytest.mark.slow]
    return cases


globals().update(_backend_test_cases())


@pytest.fixture(autouse=True)
def _record_plans(request, monkeypatch):
    """Each run's plan summary goes to the conformance report; in the groups that must run
    without Python, a plan with a Python step fails its test, naming the ops."""
    if request.node.cls is None:
        return
    report = request.config.stash[REPORT_KEY]
    group, nodeid = request.node.cls.__name__, request.node.nodeid

    def execute(graph, inputs):
        outputs, summary = ge_onnx.backend.execute_with_summary(graph, inputs)
        report.record_run(nodeid, summary)
        if group in NO_PYTHON_GROUPS and summary["python_steps"]:
            raise AssertionError(f"{group} must run with no Python step; this plan ran "
                                 f"{summary['python_steps']}: {summary['python_ops']}")
        return outputs

    monkeypatch.setattr(ge_onnx.backend, "execute", execute)


def test_expected_failures_name_existing_tests():
    runner = onnx.backend.test.BackendTest(ge_onnx.backend, __name__)
    known = {name.removesuffix("_cpu") for items in runner._test_items.values()
             for name in items}
    stale = sorted(listed_names() - known)
    assert not stale, f"expected_failures.txt lists tests the suite does not have: {stale}"
