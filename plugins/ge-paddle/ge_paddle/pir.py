"""Reading Paddle 3's PIR program (`model.json`) without Paddle.

The file is JSON written by PIR's serializer with one-letter keys: an op is
`{"#": name, "A": attributes, "I": operands, "O": results, "OA": result attributes}`,
a value `{"%": id}` (0: an absent optional operand), a type or attribute
`{"#": kind, "D": data}`. Names carry their dialect as a number (`1.conv2d` is
`pd_op.conv2d`); parameters are `"p"` ops whose attributes end with the parameter's name.
`base_code.magic` is "pir", which is how a `.json` file is told from any other.
"""

from __future__ import annotations

import json
from typing import Any

from ge_hub.plugin import SerializationError

from ge_paddle.program import Parameter, PdOp, PdType, Program

DIALECTS = {"0": "builtin", "1": "pd_op", "2": "cf"}

ELEMENT_TYPES = {
    "t_f32": "float32", "t_f64": "float64", "t_f16": "float16", "t_bf16": "bfloat16",
    "t_i8": "int8", "t_ui8": "uint8", "t_i16": "int16", "t_i32": "int32", "t_i64": "int64",
    "t_bool": "bool",
}


def looks_like_pir(head: bytes) -> bool:
    """Whether a file's first bytes are a PIR program's (the serializer writes
    `{"base_code":{"magic":"pir"` first)."""
    compact = head.replace(b" ", b"").replace(b"\n", b"")
    return compact.startswith(b'{"base_code":{"magic":"pir"')


def read_program(path: str) -> Program:
    try:
        with open(path, "rb") as stream:
            document = json.loads(stream.read())
    except OSError as exc:
        raise SerializationError(f"cannot read Paddle program {path!r}: {exc}") from None
    except ValueError as exc:
        raise SerializationError(f"Paddle program {path!r} is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or \
            (document.get("base_code") or {}).get("magic") != "pir":
        raise SerializationError(f"{path!r} is not a Paddle PIR program (no base_code.magic "
                                 "'pir')")
    try:
        regions = document["program"]["regions"]
        ops_json = regions[0]["blocks"][0]["ops"]
    except (KeyError, IndexError, TypeError):
        raise SerializationError(f"Paddle program {path!r} has no top-level block") from None
    reader = _Reader(path)
    ops = reader.block(ops_json, "block 0")
    return Program(ops=ops, parameters=reader.parameters, source=path, format="pir")


class _Reader:
    def __init__(self, path: str):
        self.path = path
        self.parameters: list[Parameter] = []

    def block(self, ops_json: list, where: str) -> list[PdOp]:
        ops = []
        for index, op_json in enumerate(ops_json):
            location = f"{self.path}: {where}, op {index}"
            try:
                op = self.op(op_json, location)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise SerializationError(f"{location}: malformed op ({type(exc).__name__}: "
                                         f"{exc})") from None
            if op is not None:
                ops.append(op)
        return ops

    def op(self, op_json: dict, location: str) -> PdOp | None:
        kind = op_json["#"]
        if kind == "p":  # builtin.parameter: [.., .., .., name]
            result = op_json["O"]
            attrs = op_json["A"]
            self.parameters.append(Parameter(result["%"], str(attrs[-1]),
                                             decode_type(result["TT"])))
            return None
        dialect, _, short = kind.partition(".")
        name = f"{DIALECTS.get(dialect, dialect)}.{short}"
        attrs = {a["N"]: decode_attr(a["AT"]) for a in op_json.get("A", [])}
        results = op_json.get("O", [])
        if isinstance(results, dict):
            results = [results]
        inputs = [operand["%"] or None for operand in op_json.get("I", [])]
        regions, region_args = [], []
        for r_index, region in enumerate(op_json.get("regions", [])):
            for b_index, block in enumerate(region.get("blocks", [])):
                regions.append(self.block(block.get("ops", []),
                                          f"{location} region {r_index} block {b_index}"))
                # Block arguments are numbered like values, with negative ids.
                region_args.append([(arg["#"], decode_type(arg.get("TT")))
                                    for arg in block.get("args", [])])
        return PdOp(name=name, attrs=attrs, inputs=inputs,
                    outputs=[r["%"] for r in results],
                    output_types=[decode_type(r.get("TT")) for r in results],
                    where=f"{location} ({name})", regions=regions, region_args=region_args)


def decode_type(type_json: Any):
    if not type_json:
        return None
    kind = type_json.get("#", "")
    data = type_json.get("D")
    if kind.endswith("t_dtensor"):
        element = data[0]["#"].partition(".")[2]
        dtype = ELEMENT_TYPES.get(element, element)
        return PdType(dtype, tuple(int(d) for d in data[1]))
    if kind.endswith("t_vec"):
        return [decode_type(t) for t in data]
    element = kind.partition(".")[2]
    if element in ELEMENT_TYPES:
        return PdType(ELEMENT_TYPES[element], ())
    return None  # a type ge-paddle does not model; the converter refuses its op


def decode_attr(attr_json: dict) -> Any:
    kind = attr_json.get("#", "").partition(".")[2]
    data = attr_json.get("D")
    if kind == "a_array":
        return [decode_attr(item) for item in data]
    if kind == "a_intarray":
        return [int(v) for v in data]
    if kind in ("a_i32", "a_i64"):
        return int(data)
    if kind in ("a_f32", "a_f64"):
        return float(data)
    if kind == "a_bool":
        return bool(data)
    if kind == "a_scalar" and isinstance(data, list) and len(data) == 2:
        return data[1]  # [type, value]
    return data
