"""Packaging: the entry points that make ge-torch discoverable, checked in fresh
interpreters (where nothing was imported by hand)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

FRESH_COMPILE = """
import sys, torch
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()).eval()
x = torch.randn(3, 4)
with torch.no_grad():
    y = torch.compile(model, backend="ge")(x)
    torch.testing.assert_close(y, model(x), rtol=1e-4, atol=1e-5)
assert "ge_torch.backend" in sys.modules, "the backend did not come from ge-torch"
print("ok")
"""


def _run(code: str, tmp_path) -> str:
    # Run outside the source tree, so that only the installed package can be found.
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_dynamo_entry_point_is_a_plain_function():
    (ep,) = [e for e in entry_points(group="torch_dynamo_backends") if e.name == "ge"]
    assert ep.value == "ge_torch.backend:ge_backend"
    from ge_torch.backend import ge_backend

    assert ep.load() is ge_backend


def test_ge_hub_entry_point():
    (ep,) = [e for e in entry_points(group="ge_hub") if e.name == "torch"]
    assert ep.value == "ge_torch.plugin"


def test_compile_with_backend_name_in_a_fresh_interpreter(tmp_path):
    assert _run(FRESH_COMPILE, tmp_path).strip().endswith("ok")


def test_importing_ge_torch_or_its_plugin_does_not_import_torch(tmp_path):
    code = ("import sys, ge_torch, ge_torch.plugin; "
            "assert 'torch' not in sys.modules, 'torch was imported'; print('ok')")
    assert _run(code, tmp_path).strip() == "ok"
