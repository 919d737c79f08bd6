"""Tooling around passes: `ge-hub passes [--json]`, `ge-hub run --disable-pass` and
`--pass-config` (JSON and TOML), the rule counts `ge-hub run` prints, and the same
switches through `compile(..., options=...)`."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.cli import main
from ge_hub.ir.serialize import save
from ge_hub.passes.config import read_pass_config


def model_file(tmp_path):
    rng = np.random.default_rng(0)
    with es.GraphBuilder("convnet") as gb:
        x = es.input("x", "float32", [1, 3, 8, 8])
        y = es.conv(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), pads=[1] * 4)
        params = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
        y = es.batch_normalization(y, *params)
        gb.output(es.relu(es.identity(y)), "y")
    path = tmp_path / "convnet.gehub"
    save(gb.graph, path)
    return str(path), gb.graph


def test_passes_lists_every_pass_with_stage_plugin_rules(capsys):
    assert main(["passes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in rows}
    assert {"name", "stage", "plugin", "rules"} <= set(rows[0])
    assert by_name["fold_batch_norm"]["rules"] == [
        "fold_batch_norm.conv", "fold_batch_norm.conv_transpose", "fold_batch_norm.gemm",
        "fold_batch_norm.matmul"]
    assert "simplify.identity" in by_name["simplify"]["rules"]
    assert by_name["select_kernels"]["can_disable"] is False
    assert [r["stage"] for r in rows][:2] == ["canonicalize", "optimize"]
    assert main(["passes"]) == 0
    text = capsys.readouterr().out
    assert "rule fold_batch_norm.conv" in text and "fold_batch_norm" in text


def test_run_prints_rule_counts(tmp_path, capsys):
    path, _ = model_file(tmp_path)
    assert main(["run", path]) == 0
    out = capsys.readouterr().out
    assert ("rules: fold_batch_norm.conv 1, fuse_conv_epilogue.relu 1, simplify.identity 1"
            in out)


def test_run_disable_pass(tmp_path, capsys):
    path, _ = model_file(tmp_path)
    assert main(["run", path, "--disable-pass", "fold_batch_norm", "--disable-pass",
                 "simplify", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compile"]["rules"] == {}
    assert main(["run", path, "--disable-pass", "no_such_pass"]) == 1
    assert "cannot disable unknown pass 'no_such_pass'" in capsys.readouterr().err


@pytest.mark.parametrize("suffix, text", [
    (".json", '{"rules": {"fold_batch_norm.conv": "off"}, "passes": {"simplify": false}}'),
    (".toml", '[rules]\n"fold_batch_norm.conv" = "off"\n[passes]\nsimplify = false\n'),
])
def test_run_pass_config(tmp_path, capsys, suffix, text):
    path, _ = model_file(tmp_path)
    config = tmp_path / f"switches{suffix}"
    config.write_text(text)
    if suffix == ".toml" and not _can_read_toml():
        # Python 3.10 without tomli: a clear error, not a crash.
        assert main(["run", path, "--pass-config", str(config)]) == 1
        assert "reading TOML needs Python 3.11 or the tomli" in capsys.readouterr().err
        return
    assert main(["run", path, "--pass-config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compile"]["rules"] == {}


def _can_read_toml() -> bool:
    if sys.version_info >= (3, 11):
        return True
    try:
        import tomli  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def test_bad_pass_configs_say_what_is_wrong(tmp_path, capsys):
    path, _ = model_file(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules": {"fold_batch_norm.conv": "maybe"}}')
    assert main(["run", path, "--pass-config", str(bad)]) == 1
    assert "fold_batch_norm.conv must be true/false" in capsys.readouterr().err
    bad.write_text('{"rule": {}}')
    assert main(["run", path, "--pass-config", str(bad)]) == 1
    assert "unknown sections ['rule']" in capsys.readouterr().err
    assert main(["run", path, "--pass-config", str(tmp_path / "missing.json")]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        ge_hub.compile(model_file(tmp_path)[1], options={"disable_rules": ["nope"]})


def test_compile_options_switch_single_rules(tmp_path):
    _, graph = model_file(tmp_path)
    model = ge_hub.compile(graph, options={"disable_rules": ["simplify.identity"]})
    assert model.summary()["rules"] == {"fold_batch_norm.conv": 1}
    assert [(e.rule, e.event) for e in model.rule_log] == [("fold_batch_norm.conv", "fired")]
    model = ge_hub.compile(graph, options={"pass_config": {"rules": {"simplify.identity":
                                                                     "off"}}})
    assert model.summary()["rules"] == {"fold_batch_norm.conv": 1}


def test_read_pass_config_accepts_bools_and_on_off():
    config = read_pass_config({"passes": {"a": "ON"}, "rules": {"b": False, "c": True}})
    assert config == {"passes": {"a": True}, "rules": {"b": False, "c": True}}


def test_dump_after_a_rule_pass(tmp_path):
    _, graph = model_file(tmp_path)
    ge_hub.compile(graph, options={"dump_after": "fold_batch_norm", "dump_dir": str(tmp_path)})
    (dump,) = tmp_path.glob("*_fold_batch_norm.txt")
    assert "BatchNormalization" not in dump.read_text() and "Conv" in dump.read_text()
