"""A test script run in a fresh interpreter: for what a process decides once, such as
which micro-kernel variant it runs (forced by an environment variable, read at the first
call)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_isolated(script: str, **env: str) -> None:
    """Run `script` (dedented) with `env` added to this process's environment, from the
    repository root; it must exit 0 after printing exactly "ok"."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                          env=dict(os.environ, PYTHONPATH=ROOT, **env), capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
