"""A minimal protobuf wire-format decoder, enough for Paddle's framework.proto.

The legacy `.pdmodel` program and the TensorDesc headers of `.pdiparams` are protobuf
messages. Decoding them by field number needs neither Paddle (its framework_pb2 module
lives inside the paddle package) nor a generated module of our own: `decode` returns
each field's raw values, and the readers name the fields they use.
"""

from __future__ import annotations

import struct

from ge_hub.plugin import SerializationError

Fields = dict[int, list]


def decode(data: bytes, where: str) -> Fields:
    """field number -> its values in order: ints for varints, bytes for length-delimited
    fields, 4- or 8-byte bytes for fixed-width ones."""
    fields: Fields = {}
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position, where)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, position = _varint(data, position, where)
        elif kind == 2:
            size, position = _varint(data, position, where)
            if position + size > end:
                raise SerializationError(f"{where}: field {number} runs past the message end")
            value = data[position:position + size]
            position += size
        elif kind in (1, 5):
            width = 8 if kind == 1 else 4
            if position + width > end:
                raise SerializationError(f"{where}: field {number} runs past the message end")
            value = data[position:position + width]
            position += width
        else:
            raise SerializationError(f"{where}: unsupported protobuf wire type {kind} "
                                     f"(field {number}); the file is not a Paddle program")
        fields.setdefault(number, []).append(value)
    return fields


def _varint(data: bytes, position: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise SerializationError(f"{where}: truncated or overlong protobuf varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, position


def signed(value: int) -> int:
    """An int32/int64 field's varint as the signed number it encodes."""
    return value - (1 << 64) if value >= 1 << 63 else value


def first(fields: Fields, number: int, default=None):
    values = fields.get(number)
    return values[-1] if values else default


def ints(fields: Fields, number: int) -> list[int]:
    """A repeated integer field, packed or not."""
    out: list[int] = []
    for value in fields.get(number, ()):
        if isinstance(value, bytes):  # packed
            position = 0
            while position < len(value):
                item, position = _varint(value, position, f"packed field {number}")
                out.append(item)
        else:
            out.append(value)
    return out


def floats(fields: Fields, number: int, double: bool = False) -> list[float]:
    """A repeated float (or double) field, packed or not."""
    code, width = ("<d", 8) if double else ("<f", 4)
    out: list[float] = []
    for value in fields.get(number, ()):
        out += [v for (v,) in struct.iter_unpack(code, value)] if len(value) != width \
            else [struct.unpack(code, value)[0]]
    return out


def text(value: bytes, where: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise SerializationError(f"{where}: string is not UTF-8 ({value[:40]!r})") from None
