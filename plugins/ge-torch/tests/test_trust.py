"""A .pt2 file is a zip of pickles that `torch.export.load` runs: ge-torch opens one only
when the caller says it trusts the file (issue #11). The hostile file here is a real
exported program whose weight entry was swapped for a pickle that creates a marker file
when unpickled; the trusted load proves that it does, the others that nothing ran."""

from __future__ import annotations

import json
import pathlib
import pickle
import zipfile

import ge_hub
import pytest
import torch
from ge_hub.errors import UntrustedModelError

from ge_torch.export import load


class _TouchOnUnpickle:
    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def _hostile_pt2(tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """A .pt2 whose first weight is a pickle that touches `marker`; (file, marker)."""
    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),)), clean)
    marker = tmp_path / "code-ran"
    with zipfile.ZipFile(clean) as source:
        members = {name: source.read(name) for name in source.namelist()}
    (config_name,) = [n for n in members if n.endswith("_weights_config.json")]
    config = json.loads(members[config_name])
    entry = next(iter(config["config"].values()))
    entry["use_pickle"] = True  # torch.export.load then torch.load()s the weight's bytes
    members[config_name] = json.dumps(config).encode()
    weight_name = config_name.rsplit("/", 1)[0] + "/" + entry["path_name"]
    members[weight_name] = pickle.dumps(_TouchOnUnpickle(marker), protocol=4)
    hostile = tmp_path / "hostile.pt2"
    with zipfile.ZipFile(hostile, "w") as target:
        for name, data in members.items():
            target.writestr(name, data)
    return hostile, marker


def test_the_hostile_file_runs_code_when_trusted(tmp_path):
    # The control: without this, the tests below would prove nothing.
    path, marker = _hostile_pt2(tmp_path)
    try:
        load(path, trusted=True)
    except Exception:  # the "weight" is None once the pickle ran: torch fails after it
        pass
    assert marker.exists(), "the hostile pickle did not run: the file is not hostile"


def test_ge_torch_load_refuses_a_file_by_default(tmp_path):
    path, marker = _hostile_pt2(tmp_path)
    with pytest.raises(UntrustedModelError, match="trusted=True"):
        load(path)
    with pytest.raises(UntrustedModelError):
        load(str(path), trusted=False)
    assert not marker.exists()


def test_ge_hub_load_refuses_a_pt2_by_default(tmp_path):
    path, marker = _hostile_pt2(tmp_path)
    with pytest.raises(UntrustedModelError, match="trusted=True"):
        ge_hub.load(str(path))
    assert not marker.exists()


def test_objects_need_no_trust():
    model = torch.nn.Linear(2, 2).eval()
    x = torch.randn(3, 2)
    graph = load(model, example_inputs=(x,))
    (y,) = ge_hub.compile(graph).run([x.numpy()])
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(y), model(x), rtol=1e-4, atol=1e-5)
