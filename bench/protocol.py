"""Messages between the suite and its engine workers: length-prefixed pickles on a pipe.

Both ends are this package, started by the same user from the same checkout, so pickle
is safe here; it carries NumPy outputs without copying them through text.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct("<Q")


def send(stream: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def receive(stream: BinaryIO) -> Any:
    """The next message; EOFError when the other end has gone."""
    header = _read_exactly(stream, HEADER.size)
    (size,) = HEADER.unpack(header)
    return pickle.loads(_read_exactly(stream, size))


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise EOFError("the other end of the pipe closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
