"""The conformance report: per group of ONNX's backend test suite, what ran where.

Every test of `test_conformance.py` runs its model through `ge_onnx.backend`; the report
tallies, per group (node tests, simple models, pytorch-converted, pytorch-operator, light
real models), the tests and their outcomes beside what the compiled plans did outside the
C executor: the steps whose kernel is Python (reference fallbacks, If/Loop/Scan closures)
and the nodes folded at plan time from run-time values, with their ops. pytest prints it
at the end of the run; `--conformance-report FILE` writes it as JSON too.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
from typing import Any

import pytest

# The groups whose models must run with no Python step at all (issue #17's target).
NO_PYTHON_GROUPS = frozenset({"OnnxBackendPyTorchConvertedModelTest",
                              "OnnxBackendPyTorchOperatorModelTest",
                              "OnnxBackendRealModelTest"})

REPORT_KEY = pytest.StashKey["ConformanceReport"]()


@dataclasses.dataclass
class GroupTally:
    """One test group's outcomes and what its plans ran outside the C executor."""

    tests: int = 0
    passed: int = 0
    xfailed: int = 0
    failed: int = 0
    tests_with_python: int = 0
    python_steps: int = 0
    python_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    tests_with_folds: int = 0
    folded_steps: int = 0
    folded_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def as_dict(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["python_ops"] = dict(self.python_ops.most_common())
        row["folded_ops"] = dict(self.folded_ops.most_common())
        return row


class ConformanceReport:
    """Collects each test's plan summaries and outcome, by group."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupTally] = collections.defaultdict(GroupTally)
        self._summaries: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)

    def record_run(self, nodeid: str, summary: dict[str, Any]) -> None:
        """A test's model ran once; `summary` is its `CompiledModel.summary()`."""
        self._summaries[nodeid].append(summary)

    def record_outcome(self, nodeid: str, group: str, outcome: str) -> None:
        """The test ended `passed`, `xfailed` or `failed`; fold its runs into its group."""
        tally = self.groups[group]
        tally.tests += 1
        setattr(tally, outcome, getattr(tally, outcome) + 1)
        summaries = self._summaries.pop(nodeid, [])
        python = collections.Counter()
        folded = collections.Counter()
        for summary in summaries:
            python.update(summary["python_ops"])
            folded.update(summary["folded_ops"])
        if python:
            tally.tests_with_python += 1
            tally.python_steps += sum(python.values())
            tally.python_ops.update(python)
        if folded:
            tally.tests_with_folds += 1
            tally.folded_steps += sum(folded.values())
            tally.folded_ops.update(folded)

    def lines(self) -> list[str]:
        """The table pytest prints: one row per group, then the ops behind the counts."""
        header = (f"{'group':<38} {'tests':>6} {'passed':>6} {'xfail':>6} {'failed':>6} "
                  f"{'with Python':>11} {'Python steps':>12} {'folded':>7}")
        lines = [header, "-" * len(header)]
        for name in sorted(self.groups):
            t = self.groups[name]
            lines.append(f"{name:<38} {t.tests:>6} {t.passed:>6} {t.xfailed:>6} {t.failed:>6} "
                         f"{t.tests_with_python:>11} {t.python_steps:>12} {t.folded_steps:>7}")
        for name in sorted(self.groups):
            t = self.groups[name]
            if t.python_ops:
                lines.append(f"{name}: Python steps by op: {_top(t.python_ops)}")
            if t.folded_ops:
                lines.append(f"{name}: folded at plan time by op: {_top(t.folded_ops)}")
        return lines

    def write_json(self, path: pathlib.Path) -> None:
        rows = {name: tally.as_dict() for name, tally in sorted(self.groups.items())}
        path.write_text(json.dumps(rows, indent=2) + "\n")


def _top(counts: collections.Counter, limit: int = 12) -> str:
    shown = ", ".join(f"{op} {n}" for op, n in counts.most_common(limit))
    rest = len(counts) - limit
    return shown + (f", and {rest} more ops" if rest > 0 else "")


def outcome_of(report: pytest.TestReport) -> str | None:
    """`passed`, `xfailed` or `failed` for a test's final report, None for other phases."""
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "failed"  # an unexpected pass fails
        return "passed" if report.passed else "failed" if report.failed else None
    return None
