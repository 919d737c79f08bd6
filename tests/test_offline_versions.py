"""Format versions of .ghm files (`ge_hub.offline.layout`, "Versions"): a file newer than
this reader is refused naming both versions, an older one below OLDEST_READABLE is refused
naming its version and asking for a recompile, the header and the metadata must agree,
the kernel ABI is compared and the ge-hub version is not; and a fingerprint of the
built-in kernels' fixed attribute blobs, so that a blob changing under the same format
version fails here instead of as "malformed attribute blob" in a user's old file."""

from __future__ import annotations

import hashlib
import importlib
import json

import numpy as np
import pytest
from offline_models import conv_net
from test_offline_bad_files import edit_json, sections_of

import ge_hub
from ge_hub import _core
from ge_hub.cli import main
from ge_hub.errors import OfflineModelError
from ge_hub.kernels import FAMILY_MODULES
from ge_hub.kernels.base import BlobRecord
from ge_hub.offline import layout

# The format version and the fingerprint of the blob records it was last bumped for.
# When test_blob_layouts_are_those_of_this_format_version fails: a fixed attribute blob
# changed, so files written before cannot be read as they are. Bump
# layout.FORMAT_VERSION (and OLDEST_READABLE, unless the reader still reads the older
# blobs), note the change in layout's "Versions", and record the new fingerprint here.
FORMAT_BLOBS = (2, "f6776f49989c93f8")


def blob_fingerprint() -> str:
    records = set()
    for module in FAMILY_MODULES:
        for value in vars(importlib.import_module(module)).values():
            if isinstance(value, BlobRecord):
                records.add((value.c_list, tuple(value.ints), tuple(value.floats)))
    return hashlib.sha256(repr(sorted(records)).encode()).hexdigest()[:16]


def test_blob_layouts_are_those_of_this_format_version():
    assert (layout.FORMAT_VERSION, blob_fingerprint()) == FORMAT_BLOBS, (
        "a built-in kernel's attribute blob changed (or the format version did without a "
        "new fingerprint): bump ge_hub.offline.layout.FORMAT_VERSION, describe the change "
        "in its 'Versions', and record the new fingerprint in FORMAT_BLOBS")


@pytest.fixture(scope="module")
def model_and_file(tmp_path_factory):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    path = tmp_path_factory.mktemp("ghm") / "good.ghm"
    model.save(path)
    return model, shapes, path.read_bytes()


def with_header(data: bytes, **fields) -> bytes:
    names = ["magic", "version", "header_size", "mark", "abi", "flags", "sections",
             "file_size", "table_crc", "crc", "ge_hub_version"]
    values = dict(zip(names, layout.HEADER.unpack_from(data)))
    values.update(fields)
    return layout.HEADER.pack(*values.values()) + data[layout.HEADER.size:]


def write(tmp_path, data: bytes):
    path = tmp_path / "crafted.ghm"
    path.write_bytes(data)
    return path


def test_writes_the_current_version(model_and_file):
    _, _, data = model_and_file
    header = layout.read_header(memoryview(data), "test", _core.ABI_VERSION)
    assert header.version == layout.FORMAT_VERSION == 2
    meta = json.loads(dict(sections_of(data))["meta"])
    assert meta["format_version"] == layout.FORMAT_VERSION


def test_newer_version_is_refused_naming_both(model_and_file, tmp_path):
    _, _, data = model_and_file
    newer = layout.FORMAT_VERSION + 1
    path = write(tmp_path, with_header(data, version=newer))
    with pytest.raises(OfflineModelError,
                       match=rf"format version {newer} is newer than this ge-hub reads "
                             rf"\(format {layout.FORMAT_VERSION}\)"):
        ge_hub.load_compiled(path)


def test_version_1_is_refused_naming_it_and_asking_for_a_recompile(model_and_file, tmp_path,
                                                                   capsys):
    # A version-1 file as the first writer made it: its header says 1 and its metadata too.
    _, _, data = model_and_file
    old = edit_json(data, "meta", lambda meta: meta.update(format_version=1))
    path = write(tmp_path, with_header(old, version=1, ge_hub_version=b"0.0.9"))
    with pytest.raises(OfflineModelError,
                       match=r"format version 1 \(written by ge-hub 0\.0\.9\) is older than "
                             r"this ge-hub reads \(format 2\).*compile the model again"):
        ge_hub.load_compiled(path)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "format version 1" in err[0] and "compile the model again" \
        in err[0]


def test_header_and_metadata_versions_must_agree(model_and_file, tmp_path):
    _, _, data = model_and_file
    path = write(tmp_path, edit_json(data, "meta", lambda meta: meta.update(format_version=7)))
    with pytest.raises(OfflineModelError, match="metadata says format version 7, its header 2"):
        ge_hub.load_compiled(path)


def test_kernel_abi_is_compared(model_and_file, tmp_path):
    _, _, data = model_and_file
    path = write(tmp_path, with_header(data, abi=_core.ABI_VERSION + 1))
    with pytest.raises(OfflineModelError, match=rf"compiled for kernel ABI "
                                                rf"{_core.ABI_VERSION + 1}, this ge-hub runs "
                                                rf"ABI {_core.ABI_VERSION}; compile"):
        ge_hub.load_compiled(path)


def test_ge_hub_version_is_recorded_not_compared(model_and_file, tmp_path, capsys):
    # Another release that kept the format and the ABI: its file reads and runs the same.
    model, shapes, data = model_and_file
    other = edit_json(data, "meta", lambda meta: meta.update(ge_hub_version="99.1.0"))
    path = write(tmp_path, with_header(other, ge_hub_version=b"99.1.0"))
    loaded = ge_hub.load_compiled(path)
    x = np.random.default_rng(3).standard_normal(shapes["x"]).astype(np.float32)
    np.testing.assert_array_equal(loaded.run([x])[0], model.run([x])[0])
    assert main(["inspect", str(path)]) == 0
    assert "written by ge-hub 99.1.0" in capsys.readouterr().out
