"""Each C kernel's attribute blob with each 8-byte value set to an edge value is refused
(KernelError) or runs; it never crashes or hangs (tests/kernels/blob_edges.py walks the
cases; run it as a script to see a crash's kernel and value without losing the run)."""

from __future__ import annotations

import pytest

from . import blob_edges

CASES = dict(blob_edges.compiled_cases())


@pytest.mark.parametrize("label", sorted(CASES))
def test_edited_blob_values_are_refused_or_run(label):
    model = CASES[label]
    feeds = blob_edges._feeds(model)
    edits = 0
    for _, _, _, plan in blob_edges.edited_steps(model):
        blob_edges.run_edited(model, plan, feeds)
        edits += 1
    assert edits >= len(blob_edges.EDGE_VALUES)  # the case has a C step with a blob
