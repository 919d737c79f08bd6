"""The plugin as installed: its entry point, `ge_hub.load` and `ge-hub run` on a .mindir
file, and reading MINDIR without importing mindspore (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import ge_hub
import numpy as np
from ge_hub.cli import main

from ge_mindspore import testing

from .conftest import random
from .zoo import LeNet5

# MindSpore refuses to compile code given with `python -c`, so fresh interpreters run
# script files.
READ_WITHOUT_MINDSPORE = """
import sys, time
start = time.perf_counter()
import ge_hub
graph = ge_hub.load(sys.argv[1])
model = ge_hub.compile(graph)
assert "mindspore" not in sys.modules, "reading MINDIR imported mindspore"
print("ok", round(time.perf_counter() - start, 3))
"""


def _script(tmp_path, code: str, *args: str) -> str:
    script = tmp_path / "script.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_ge_hub_entry_point():
    (ep,) = [e for e in entry_points(group="ge_hub") if e.name == "mindspore"]
    assert ep.value == "ge_mindspore.plugin"
    frontends = {f.name: f for f, _ in ge_hub.plugin.get_registry().frontends()}
    assert frontends["mindspore"].suffixes == (".mindir",)
    assert frontends["mindspore"].object_modules == ("mindspore",)


def test_reading_mindir_does_not_import_mindspore(tmp_path, export):
    path = export(LeNet5(), random((1, 1, 32, 32)))
    out = _script(tmp_path, READ_WITHOUT_MINDSPORE, path)
    assert out.startswith("ok")


def test_importing_the_plugin_does_not_import_mindspore(tmp_path):
    code = ("import sys, ge_mindspore, ge_mindspore.plugin\n"
            "assert 'mindspore' not in sys.modules, 'mindspore was imported'\nprint('ok')\n")
    assert _script(tmp_path, code).strip() == "ok"


def test_load_dispatches_cells_and_files(export):
    cell = LeNet5()
    x = random((2, 1, 32, 32))
    from_cell = ge_hub.load(cell, example_inputs=(x,))
    from_file = ge_hub.load(export(cell, x))
    assert [n.op for n in from_cell.nodes] == [n.op for n in from_file.nodes]


def test_cli_run_mindir(tmp_path, export, capsys):
    cell = LeNet5()
    x = random((2, 1, 32, 32))
    path = export(cell, x)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    code = main(["run", path, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out),
                 "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)
    (saved,) = sorted(out.glob("*.npy"))
    (want,) = testing.run_cell(cell, [x])
    np.testing.assert_allclose(np.load(saved), want, rtol=1e-4, atol=1e-5)
