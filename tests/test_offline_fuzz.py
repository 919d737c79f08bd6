"""A bounded run of the .ghm loading fuzzer (tests/offline_fuzz.py) in a child process:
300 mutated files (raw and checksum-resealed mutations of the header, section table,
JSON sections, graph and weights), each either loaded or refused with OfflineModelError;
no other exception, no crash, no hang. The long run is documented in the fuzzer:
`python tests/offline_fuzz.py --cases 100000`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

FUZZER = os.path.join(os.path.dirname(__file__), "offline_fuzz.py")
CASES = int(os.environ.get("GE_HUB_OFFLINE_FUZZ_CASES", "300"))


@pytest.mark.parametrize("seed", [0])
def test_mutated_files_load_or_are_refused_by_name(seed):
    done = subprocess.run([sys.executable, FUZZER, "--cases", str(CASES), "--seed", str(seed)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.returncode, done.stdout[-4000:], done.stderr[-4000:])
    assert f"{CASES} mutated loads" in done.stdout
    assert "0 findings" in done.stdout
