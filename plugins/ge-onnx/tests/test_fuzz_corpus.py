"""The fuzzer's regression corpus (tests/fuzz/corpus), replayed case by case.

Each file once crashed, hung or leaked an internal exception; it must now load,
compile and run, or be refused with a ge-hub error. Files in known_findings.txt still
fail for a reason outside ge-onnx and are expected failures until fixed.
"""

from __future__ import annotations

import warnings

import pytest

from .fuzz.corpus_files import corpus_cases, known_findings
from .fuzz.runner import run_case

KNOWN = known_findings()


@pytest.mark.parametrize("path", corpus_cases(), ids=lambda p: p.name)
def test_corpus_case_is_refused_cleanly_or_runs(path):
    outcome = run_case(str(path), timeout=30.0)
    if path.name in KNOWN:
        if outcome.failed:
            pytest.xfail(f"known finding ({KNOWN[path.name]}): {outcome.line()}")
        # Fixed elsewhere (the bounds checks): passing is right, the list is stale.
        warnings.warn(f"{path.name} no longer fails ({outcome.line()}): remove it from "
                      "known_findings.txt", stacklevel=1)
        return
    assert not outcome.failed, outcome.line()


def test_corpus_is_not_empty():
    assert corpus_cases(), "the fuzz corpus lost its files"
