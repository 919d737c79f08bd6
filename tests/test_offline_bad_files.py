"""Bad .ghm files: truncated, a flipped byte, a wrong magic, a newer format version, another
kernel ABI, a big-endian writer, a section outside the file, an unknown kernel, a kernel
table that lies: each is one OfflineModelError naming the problem, and in `ge-hub run` one
line on stderr and exit status 1."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from offline_models import conv_net

import ge_hub
from ge_hub import _core
from ge_hub.cli import main
from ge_hub.errors import OfflineModelError
from ge_hub.offline import layout, open_file


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    path = tmp_path_factory.mktemp("ghm") / "good.ghm"
    model.save(path)
    return path.read_bytes()


def sections_of(data: bytes) -> list[tuple[str, bytes]]:
    """The sections of a valid file, in file order."""
    header = layout.read_header(memoryview(data), "test", _core.ABI_VERSION)
    table = layout.read_sections(memoryview(data), header, "test")
    return [(kind, data[off:off + length])
            for kind, (off, length, _) in sorted(table.items(), key=lambda kv: kv[1][0])]


def reseal(sections, flags=layout.FLAG_PORTABLE) -> bytes:
    return layout.assemble(sections, abi=_core.ABI_VERSION, flags=flags,
                           ge_hub_version=ge_hub.__version__)


def edit_json(data: bytes, kind: str, change) -> bytes:
    sections = []
    for name, body in sections_of(data):
        if name == kind:
            document = json.loads(body)
            change(document)
            body = json.dumps(document).encode()
        sections.append((name, body))
    return reseal(sections)


def load(tmp_path, data: bytes, name="bad.ghm"):
    path = tmp_path / name
    path.write_bytes(data)
    return ge_hub.load_compiled(path)


def test_reseal_of_a_good_file_loads(good, tmp_path):
    assert reseal(sections_of(good)) == good  # the writer and assemble agree byte for byte
    load(tmp_path, reseal(sections_of(good)))


@pytest.mark.parametrize("cut", [0, 5, 63, 64, 100, -1, -4096])
def test_truncated(good, tmp_path, cut):
    data = good[:cut] if cut > 0 else good[:len(good) + cut] if cut < 0 else b""
    with pytest.raises(OfflineModelError, match=r"truncated|empty|not a ge-hub offline"):
        load(tmp_path, data)


@pytest.mark.parametrize("where", ["table", "meta", "plans", "graph", "data"])
def test_flipped_byte_is_a_checksum_mismatch(good, tmp_path, where):
    file_sections = dict((k, v) for k, v in _offsets(good).items())
    position = layout.HEADER.size + 3 if where == "table" else file_sections[where] + 7
    data = bytearray(good)
    data[position] ^= 0x10
    with pytest.raises(OfflineModelError, match="checksum mismatch"):
        load(tmp_path, bytes(data))


def _offsets(data: bytes) -> dict[str, int]:
    header = layout.read_header(memoryview(data), "test", _core.ABI_VERSION)
    return {k: v[0] for k, v in layout.read_sections(memoryview(data), header, "test").items()}


def test_flipped_weight_byte_passes_without_verify_but_never_crashes(good, tmp_path):
    data = bytearray(good)
    data[_offsets(good)["data"] + 5] ^= 0x40
    path = tmp_path / "w.ghm"
    path.write_bytes(bytes(data))
    with pytest.raises(OfflineModelError, match="checksum mismatch"):
        ge_hub.load_compiled(path)
    model = ge_hub.load_compiled(path, verify=False)
    (y,) = model.run({"x": np.ones((2, 3, 18, 18), np.float32)})
    assert y.shape == (2, 10)


def test_wrong_magic(good, tmp_path):
    with pytest.raises(OfflineModelError, match="not a ge-hub offline model"):
        load(tmp_path, b"GEHUBIR\0" + good[8:])


def _patch_header(good: bytes, field: int, value: int) -> bytes:
    fields = list(layout.HEADER.unpack_from(good))
    fields[field] = value
    return layout.HEADER.pack(*fields) + good[layout.HEADER.size:]


def test_newer_format_version(good, tmp_path):
    with pytest.raises(OfflineModelError,
                       match=rf"format version {layout.FORMAT_VERSION + 1} is newer"):
        load(tmp_path, _patch_header(good, 1, layout.FORMAT_VERSION + 1))


def test_other_kernel_abi(good, tmp_path):
    with pytest.raises(OfflineModelError, match=r"kernel ABI 99"):
        load(tmp_path, _patch_header(good, 4, 99))


def test_big_endian_writer(good, tmp_path):
    swapped = struct.unpack("<I", struct.pack(">I", layout.BYTE_ORDER_MARK))[0]
    with pytest.raises(OfflineModelError, match="big-endian"):
        load(tmp_path, _patch_header(good, 3, swapped))


def test_trailing_bytes(good, tmp_path):
    with pytest.raises(OfflineModelError, match="trailing bytes"):
        load(tmp_path, good + b"\0")


def test_section_outside_the_file(good, tmp_path):
    data = bytearray(good)
    header = layout.read_header(memoryview(good), "test", _core.ABI_VERSION)
    at = layout.HEADER.size  # the first table entry: move it past the end
    kind, offset, length, crc, reserved = layout.SECTION.unpack_from(good, at)
    layout.SECTION.pack_into(data, at, kind, offset, len(good), crc, reserved)
    table = bytes(data[layout.HEADER.size:layout.HEADER.size + header.sections * 32])
    fields = list(layout.HEADER.unpack_from(good))
    fields[8] = layout.crc32(table)
    data[:layout.HEADER.size] = layout.HEADER.pack(*fields)
    with pytest.raises(OfflineModelError, match=r"lies outside the file"):
        load(tmp_path, bytes(data))


def test_constant_outside_its_section(good, tmp_path):
    def change(document):
        document["plans"][0]["constants"][0]["offset"] = 1 << 40

    with pytest.raises(OfflineModelError, match=r"constant 0: bytes .* lie outside"):
        load(tmp_path, edit_json(good, "plans", change))


def test_tensor_outside_the_arena(good, tmp_path):
    def change(document):
        plan = document["plans"][0]
        arena = next(t for t in plan["tensors"] if t[3] == "arena")
        arena[4] = plan["memory"][0]

    with pytest.raises(OfflineModelError, match=r"lies outside its arena buffer"):
        load(tmp_path, edit_json(good, "plans", change))


def test_an_output_stored_larger_than_the_model_makes(good, tmp_path):
    # Outputs are allocated at their stored shapes before any kernel runs: a shape the
    # model's output type contradicts is refused at load, not allocated (found by
    # widening the fuzzer to run every model it loads).
    def change(document):
        plan = document["plans"][0]
        plan["tensors"][plan["outputs"][0]][2] = [2, 2**36]

    with pytest.raises(OfflineModelError, match=r"stores output 'logits' as \[2, 68719476736\]"
                                                r"; the model's type .* gives 10 at dim 1"):
        load(tmp_path, edit_json(good, "plans", change))


@pytest.mark.parametrize("arena", [2**40, 2**33])
def test_an_arena_larger_than_its_tensors_reach(good, tmp_path, arena):
    # The executor allocates the whole arena when it is built: an edited size under a
    # valid checksum must be refused, not allocated.
    def change(document):
        document["plans"][0]["memory"][0] = arena

    with pytest.raises(OfflineModelError, match=rf"the arena of {arena} bytes is larger "
                                                r"than its tensors and scratch reach"):
        load(tmp_path, edit_json(good, "plans", change))


def test_unknown_kernel(good, tmp_path):
    def rename(document):
        document["plans"][0]["steps"][0][2] = "no_such_kernel"

    def table(document):
        document["kernels"]["no_such_kernel"] = {"plugin": "builtin"}

    data = edit_json(edit_json(good, "plans", rename), "meta", table)
    with pytest.raises(OfflineModelError, match=r"unknown kernel 'no_such_kernel'"):
        load(tmp_path, data)
    with pytest.raises(OfflineModelError, match=r"kernel table does not list"):
        load(tmp_path, edit_json(good, "plans", rename))


def test_missing_plugin_in_the_kernel_table(good, tmp_path):
    def claim(document):
        name = next(iter(document["kernels"]))
        document["kernels"][name] = {"plugin": "acme-kernels", "version": "2.1"}

    with pytest.raises(OfflineModelError,
                       match=r"plugin 'acme-kernels' 2.1, which is not installed"):
        load(tmp_path, edit_json(good, "meta", claim))


def test_malformed_json_sections(good, tmp_path):
    sections = [(k, b"{not json" if k == "plans" else v) for k, v in sections_of(good)]
    with pytest.raises(OfflineModelError, match="plans section is not valid JSON"):
        load(tmp_path, reseal(sections))

    def wrong_type(document):
        document["plans"][0]["steps"][0][4] = "zero"

    with pytest.raises(OfflineModelError, match=r"step 0 inputs has the wrong type"):
        load(tmp_path, edit_json(good, "plans", wrong_type))


def test_graph_section_damaged_under_a_valid_checksum(good, tmp_path):
    sections = [(k, v[:40] + b"!" * 16 + v[56:] if k == "graph" else v)
                for k, v in sections_of(good)]
    # The graph is read only to plan a new shape: the stored profile still runs.
    model = load(tmp_path, reseal(sections))
    (y,) = model.run({"x": np.ones((2, 3, 18, 18), np.float32)})
    assert y.shape == (2, 10)
    with pytest.raises(OfflineModelError, match="graph section is malformed"):
        model.run({"x": np.ones((1, 3, 18, 18), np.float32)})
    with pytest.raises(OfflineModelError, match="graph section is malformed"):
        ge_hub.load(str(tmp_path / "bad.ghm"))


def test_portable_flag_must_match_the_sections(good, tmp_path):
    with pytest.raises(OfflineModelError, match="portable flag"):
        load(tmp_path, reseal(sections_of(good), flags=0))


@pytest.mark.parametrize("problem", ["truncated", "flipped", "magic", "version"])
def test_ge_hub_run_reports_one_line(good, tmp_path, capsys, problem):
    data = {"truncated": good[:len(good) // 2],
            "flipped": good[:-10] + bytes([good[-10] ^ 1]) + good[-9:],
            "magic": b"XXXXXXXX" + good[8:],
            "version": _patch_header(good, 1, 7)}[problem]
    path = tmp_path / "bad.ghm"
    path.write_bytes(data)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ge-hub run: error: ")
    assert str(path) in err[0]


def test_open_file_on_a_directory_and_a_missing_file(tmp_path):
    with pytest.raises(IsADirectoryError):
        open_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_file(tmp_path / "missing.ghm")
