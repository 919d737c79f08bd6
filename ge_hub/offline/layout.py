"""The `.ghm` offline model file: its byte layout, and the checks that keep reading it safe.

A `.ghm` file holds one compiled model: the plans the compiler made for its shape
profiles, the constants they read, and (in a portable file) the model's graph, so that
other shapes can still be planned and constants re-packed. Nothing in it is code: no
pickle, no Python; kernels are named, never stored.

Layout, format version `FORMAT_VERSION`; every integer little-endian:

    offset 0    header, 64 bytes (`HEADER`):
                  8s   magic b"GEHUBOM\\0"
                  u32  format version
                  u32  header size (64)
                  u32  byte-order mark 0x01020304, written in the writer's byte order
                       (a big-endian writer's file reads 0x04030201 and is refused)
                  u32  kernel ABI version of the ge-hub that wrote it (ge_hub._core)
                  u32  flags: bit 0 = portable (the graph section is present)
                  u32  number of sections
                  u64  file size in bytes
                  u32  CRC-32C of the section table
                  u32  CRC-32C of every byte after the header
                  16s  ge-hub version that wrote it, NUL-padded (the full string is in
                       the metadata)
    offset 64   section table: one 32-byte entry (`SECTION`) per section:
                  8s   kind, NUL-padded: b"meta", b"graph", b"plans" or b"data"
                  u64  offset from the start of the file (a multiple of 64)
                  u64  length in bytes
                  u32  CRC-32C of the section's bytes
                  u32  reserved (0)
    then        the sections, each starting at a multiple of 64, zero padding between:
      meta      JSON (UTF-8): format, ge-hub version, kernel ABI, source model name and
                SHA-256, the inputs and outputs (names, dtypes, shapes with symbolic dims
                as `ge_hub.ir.symbolic.to_json` writes them: "N", {"mul": [2, "N"]}; an
                older file's "2*N" reads too), the profiles (name and input shapes), the
                kernels the plans name (with the plugin and plugin version of each that is
                not built in), the portability record (`ge_hub.offline.portability`) and
                the compile options
      graph     the model's graph as `ge_hub.ir.serialize` writes it (a `.gehub` file,
                its constants 64-byte aligned inside it); only in portable files
      plans     JSON: one plan per profile (`ge_hub.offline.plans`): tensors, steps
                (kernel by name, attribute blobs in base64), memory statistics, and
                each constant as {dtype, shape, offset, nbytes}, `offset` from the start
                of the file, inside the graph or the data section, a multiple of 64
      data      constants that are not graph constants (prepacked weights, folded
                values), each at a multiple of 64; equal constants are stored once, and a
                constant equal to a graph constant is read from the graph section

Versions. The header's format version says how to read the file: its layout above, the
plans' JSON (`ge_hub.offline.plans`) and the attribute blobs of the built-in C kernels
those plans hold (a blob's layout is a contract between a kernel and its packer, so a
blob that gains a field changes what a stored step means). It is bumped on any change to
one of them (`tests/test_offline_versions.py` keeps a fingerprint of the fixed blob
records, and fails when one changes under the same version). A file newer than this
reader is refused naming both versions; an older one is read if its version is at least
`OLDEST_READABLE`, else refused naming its version and asking for a recompile:

    1  the first format. Within it, CumSum/CumProd's blob gained runtime_axis, the
       quantize kernels' blob gained block and control steps gained an 11th row field,
       so a version-1 file cannot be read with certainty: refused.
    2  segmented models (the "segments" key of the plans section,
       `ge_hub.offline.segments`); checksums are CRC-32C (were zlib's CRC-32);
       otherwise as the latest version 1.

The kernel ABI (`GE_KERNEL_ABI_VERSION`, the calling contract of every C kernel, a
plugin's too) must equal this ge-hub's. The ge-hub version is recorded, shown by
`ge-hub inspect`, and not compared: a release that changes neither the format nor the
ABI reads the file as the one that wrote it.

Reading maps the file (mmap, read-only) and makes each constant an `np.frombuffer` view of
the mapping: weights are shared with the page cache, not copied. Every offset, length and
count is checked against the file before use; every failure is an `OfflineModelError`
naming the file and what is wrong. The file must not change while a model loaded from it
lives (as with any mapped file, truncating it under a running process is undefined).
"""

from __future__ import annotations

import struct

from ge_hub.errors import OfflineModelError

SUFFIX = ".ghm"
MAGIC = b"GEHUBOM\0"
FORMAT_VERSION = 2
# The oldest format version this reader accepts (see "Versions" above).
OLDEST_READABLE = 2
ALIGNMENT = 64
BYTE_ORDER_MARK = 0x01020304
FLAG_PORTABLE = 1
KNOWN_FLAGS = FLAG_PORTABLE

HEADER = struct.Struct("<8sIIIIIIQII16s")
SECTION = struct.Struct("<8sQQII")
assert HEADER.size == 64 and SECTION.size == 32

SECTION_KINDS = ("meta", "graph", "plans", "data")
REQUIRED_SECTIONS = ("meta", "plans", "data")
# JSON sections are parsed whole; a larger one is refused before it is read.
MAX_JSON_BYTES = 1 << 30
MAX_SECTIONS = 16


def padding(size: int) -> int:
    return -size % ALIGNMENT


def crc32(data) -> int:
    """The CRC-32C (Castagnoli) of `data`: `ge_hub._core.crc32c`, the CPU's crc32
    instruction where it has SSE4.2 (light ResNet-50's 78 MiB file: ~20 ms against zlib's
    CRC-32 at ~67 ms on a loaded machine, paid on every verified load)."""
    from ge_hub import _core

    return _core.crc32c(data)


class Header:
    """The parsed, checked header of a `.ghm` file."""

    __slots__ = ("version", "abi", "flags", "sections", "file_size", "table_crc", "crc",
                 "ge_hub_version")

    def __init__(self, version, abi, flags, sections, file_size, table_crc, crc,
                 ge_hub_version):
        self.version = version
        self.abi = abi
        self.flags = flags
        self.sections = sections
        self.file_size = file_size
        self.table_crc = table_crc
        self.crc = crc
        self.ge_hub_version = ge_hub_version

    @property
    def portable(self) -> bool:
        return bool(self.flags & FLAG_PORTABLE)


def _readable() -> str:
    if OLDEST_READABLE == FORMAT_VERSION:
        return f"format {FORMAT_VERSION}"
    return f"formats {OLDEST_READABLE} to {FORMAT_VERSION}"


def pack_header(*, abi: int, flags: int, sections: int, file_size: int, table_crc: int,
                crc: int, ge_hub_version: str) -> bytes:
    return HEADER.pack(MAGIC, FORMAT_VERSION, HEADER.size, BYTE_ORDER_MARK, abi, flags,
                       sections, file_size, table_crc, crc,
                       ge_hub_version.encode("ascii", "replace")[:16])


def read_header(buffer, where: str, abi: int) -> Header:
    """Check magic, byte order, format version, header size, flags, ABI and file size."""
    size = len(buffer)
    if size < len(MAGIC) or bytes(buffer[:len(MAGIC)]) != MAGIC:
        head = bytes(buffer[:len(MAGIC)])
        raise OfflineModelError(f"{where}: not a ge-hub offline model (magic {head!r}, "
                                f"expected {MAGIC!r})")
    if size < HEADER.size:
        raise OfflineModelError(f"{where}: truncated: {size} bytes is shorter than the "
                                f"{HEADER.size}-byte header")
    (_, version, header_size, mark, file_abi, flags, sections, file_size, table_crc, crc,
     version_text) = HEADER.unpack_from(buffer)
    if mark != BYTE_ORDER_MARK:
        if mark == int.from_bytes(BYTE_ORDER_MARK.to_bytes(4, "little"), "big"):
            raise OfflineModelError(f"{where}: written on a big-endian machine; this one is "
                                    "little-endian and its data cannot be used as stored")
        raise OfflineModelError(f"{where}: corrupt header (byte-order mark {mark:#010x})")
    name = version_text.rstrip(b"\0").decode("ascii", "replace")
    if version > FORMAT_VERSION:
        raise OfflineModelError(f"{where}: format version {version} is newer than this "
                                f"ge-hub reads (format {FORMAT_VERSION}); upgrade ge-hub or "
                                "compile the model again with this one")
    if version < 1:
        raise OfflineModelError(f"{where}: corrupt header (format version {version})")
    if version < OLDEST_READABLE:
        raise OfflineModelError(f"{where}: format version {version} (written by ge-hub "
                                f"{name or 'unknown'}) is older than this ge-hub reads "
                                f"({_readable()}): its "
                                "kernels' attribute layouts have changed since; compile the "
                                "model again with this ge-hub")
    if header_size != HEADER.size:
        raise OfflineModelError(f"{where}: corrupt header (header size {header_size}, "
                                f"expected {HEADER.size})")
    if flags & ~KNOWN_FLAGS:
        raise OfflineModelError(f"{where}: unknown header flags {flags:#x}")
    if file_size != size:
        problem = "truncated" if size < file_size else "has trailing bytes"
        raise OfflineModelError(f"{where}: {problem}: the header announces {file_size} "
                                f"bytes, the file has {size}")
    if file_abi != abi:
        raise OfflineModelError(f"{where}: compiled for kernel ABI {file_abi}, this ge-hub "
                                f"runs ABI {abi}; compile the model again with this ge-hub")
    if not 1 <= sections <= MAX_SECTIONS:
        raise OfflineModelError(f"{where}: corrupt header ({sections} sections)")
    return Header(version, file_abi, flags, sections, file_size, table_crc, crc, name)


def read_sections(buffer, header: Header, where: str) -> dict[str, tuple[int, int, int]]:
    """The section table as {kind: (offset, length, crc)}, checked against the file."""
    table_end = HEADER.size + header.sections * SECTION.size
    if table_end > header.file_size:
        raise OfflineModelError(f"{where}: truncated: the section table ends at byte "
                                f"{table_end}, past the end of the file")
    if crc32(buffer[HEADER.size:table_end]) != header.table_crc:
        raise OfflineModelError(f"{where}: checksum mismatch in the section table (the file "
                                "is corrupt)")
    sections: dict[str, tuple[int, int, int]] = {}
    for i in range(header.sections):
        raw_kind, offset, length, crc, reserved = SECTION.unpack_from(
            buffer, HEADER.size + i * SECTION.size)
        kind = raw_kind.rstrip(b"\0").decode("ascii", "replace")
        if kind not in SECTION_KINDS:
            raise OfflineModelError(f"{where}: unknown section kind {kind!r}")
        if kind in sections:
            raise OfflineModelError(f"{where}: section {kind!r} appears twice")
        if offset % ALIGNMENT or offset < table_end or length < 0 \
                or offset + length > header.file_size:
            raise OfflineModelError(f"{where}: section {kind!r} at bytes [{offset}, "
                                    f"{offset + length}) lies outside the file's "
                                    f"{header.file_size} bytes or is misaligned")
        sections[kind] = (offset, length, crc)
    missing = [k for k in REQUIRED_SECTIONS if k not in sections]
    if missing:
        raise OfflineModelError(f"{where}: missing section(s) {', '.join(missing)}")
    if header.portable != ("graph" in sections):
        raise OfflineModelError(f"{where}: the portable flag and the graph section disagree")
    spans = sorted(sections.values())
    for (a_off, a_len, _), (b_off, _, _) in zip(spans, spans[1:]):
        if a_off + a_len > b_off:
            raise OfflineModelError(f"{where}: sections overlap at byte {b_off}")
    return sections


def crc32_update(data, crc: int) -> int:
    """`crc32` of what came before (`crc`) followed by `data`."""
    from ge_hub import _core

    return _core.crc32c(data, crc)


def assemble(sections: list[tuple[str, bytes]], *, abi: int, flags: int,
             ge_hub_version: str) -> bytes:
    """A whole file from its sections' bytes, in memory, checksums computed: for tools and
    tests that rewrite a section (the writer streams large files instead)."""
    position = HEADER.size + len(sections) * SECTION.size
    placed = []
    for kind, body in sections:
        position += padding(position)
        placed.append((kind, body, position))
        position += len(body)
    table = b"".join(SECTION.pack(kind.encode("ascii"), offset, len(body), crc32(body), 0)
                     for kind, body, offset in placed)
    out = bytearray(position)
    out[HEADER.size:HEADER.size + len(table)] = table
    for _, body, offset in placed:
        out[offset:offset + len(body)] = body
    out[:HEADER.size] = pack_header(abi=abi, flags=flags, sections=len(placed),
                                    file_size=position, table_crc=crc32(table),
                                    crc=crc32(memoryview(out)[HEADER.size:]),
                                    ge_hub_version=ge_hub_version)
    return bytes(out)
