"""CRC-32C, the .ghm files' checksum (core/src/checksum.c): the standard check value, the
SSE4.2 path (three chains joined per 12 KiB) equal to the portable table loop at every
length around its block edges, chaining like zlib.crc32, and any buffer accepted."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import _core
from ge_hub.offline import layout


def test_check_value():
    # The CRC-32C of "123456789" (RFC 3720, appendix B.4).
    assert _core.crc32c(b"123456789") == 0xE3069283
    assert _core.crc32c(b"123456789", portable=True) == 0xE3069283
    assert _core.crc32c(b"") == 0


@pytest.mark.parametrize("size", [1, 7, 8, 9, 4095, 4096, 12287, 12288, 12289, 24576 + 5,
                                  100_003])
def test_hardware_and_portable_paths_agree_and_chain(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    whole = _core.crc32c(data)
    assert whole == _core.crc32c(data, portable=True)
    for cut in (0, 1, size // 3, size - 1):
        assert _core.crc32c(data[cut:], _core.crc32c(data[:cut])) == whole
    flipped = bytearray(data)
    flipped[size // 2] ^= 0x10
    assert _core.crc32c(bytes(flipped)) != whole


def test_layout_uses_it_over_any_buffer():
    array = np.arange(10_000, dtype=np.float32)
    assert layout.crc32(memoryview(array).cast("B")) == _core.crc32c(array.tobytes())
    assert layout.crc32_update(b"56789", layout.crc32(b"1234")) == 0xE3069283
    assert isinstance(_core.crc32c_hardware(), bool)
