"""Fixtures shared by the core tests."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from importlib import metadata

import pytest

EXAMPLE_PLUGIN_DIR = pathlib.Path(__file__).parent / "plugins" / "example-plugin"


@pytest.fixture(scope="session")
def example_plugin():
    """The example plugin distribution (tests/plugins/example-plugin), pip-installed into
    this environment as a user would install it: tox installs it up front, a bare
    `pytest` run installs it here, once."""
    try:
        metadata.distribution("ge-hub-example-plugin")
    except metadata.PackageNotFoundError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        str(EXAMPLE_PLUGIN_DIR)], check=True)
    yield EXAMPLE_PLUGIN_DIR
