"""The `ge-hub` command line: --version, plugins, ops."""

from __future__ import annotations

import json
import subprocess
import sys

import ge_hub
from ge_hub.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ge_hub", *args],
                          capture_output=True, text=True)


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"ge-hub {ge_hub.__version__}"


def test_plugins_json(capsys):
    assert main(["plugins", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    builtin = next(p for p in data if p["name"] == "builtin")
    assert builtin["version"] == ge_hub.__version__
    assert "register_ops" in builtin["hooks"]
    assert {"name", "version", "hooks"} <= set(builtin)


def test_plugins_text(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"builtin {ge_hub.__version__}")
    assert "register_ops" in out


def test_ops_json_lists_core_ops(capsys):
    assert main(["ops", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {(row["domain"], row["name"]) for row in data}
    assert ("", "Add") in names and ("", "Relu") in names
    assert all({"name", "domain"} <= set(row) for row in data)


def test_ops_text(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "Add" in out and out.rstrip().endswith("ops")


def test_no_command_prints_help():
    result = run_cli()
    assert result.returncode == 2
    assert "plugins" in result.stdout and "ops" in result.stdout


def test_unknown_command_fails():
    result = run_cli("no-such-command")
    assert result.returncode != 0
    assert "no-such-command" in result.stderr
