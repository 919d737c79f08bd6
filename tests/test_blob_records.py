"""Fixed attribute blobs are declared once per side and the two declarations agree.

A kernel whose blob is always the same named fields declares it in C as a field list,
`#define GE_<NAME>_BLOB(INT, FLOAT) INT(a) ... FLOAT(z)`, that GE_BLOB_RECORD
(core/include/ge_hub/blob.h) turns into a struct and its reader; its packer declares the
same fields with `ge_hub.kernels.base.BlobRecord`. Here every C list under core/kernels
is read and compared with the Python record naming it, field for field and kind for kind,
both ways; and a record packs exactly what `pack_values` would, refusing a missing or
unknown field.
"""

from __future__ import annotations

import importlib
import re
import struct
from pathlib import Path

import pytest

from ge_hub.kernels import FAMILY_MODULES
from ge_hub.kernels.base import BlobRecord, pack_values

KERNEL_DIR = Path(__file__).resolve().parents[1] / "core" / "kernels"
FIELD_LIST = re.compile(r"#define (GE_\w+_BLOB)\(INT, FLOAT\)((?:[^\n]*\\\n)*[^\n]*)")


def _c_records() -> dict[str, list[tuple[str, str]]]:
    """{macro: [(kind, field), ...]} from every field list under core/kernels."""
    records = {}
    for header in sorted(KERNEL_DIR.glob("*.h")):
        for macro, body in FIELD_LIST.findall(header.read_text()):
            records[macro] = re.findall(r"\b(INT|FLOAT)\((\w+)\)", body)
    return records


def _python_records() -> dict[str, tuple[str, BlobRecord]]:
    """{C macro: (module, record)} for every BlobRecord a kernel family module defines."""
    records = {}
    for module in FAMILY_MODULES:
        for value in vars(importlib.import_module(module)).values():
            if isinstance(value, BlobRecord):
                assert value.c_list not in records or records[value.c_list][1] == value, (
                    f"{value.c_list} is declared differently in {records[value.c_list][0]} "
                    f"and {module}")
                records[value.c_list] = (module, value)
    return records


def test_there_are_records_to_check():
    assert {"GE_LRN_BLOB", "GE_GEMM_BLOB"} <= set(_c_records())


def test_each_c_record_has_the_python_fields_in_order():
    c_records, python_records = _c_records(), _python_records()
    assert set(c_records) == set(python_records), (
        f"C field lists without a Python BlobRecord: "
        f"{sorted(set(c_records) - set(python_records))}; Python records without a C list: "
        f"{sorted(set(python_records) - set(c_records))}")
    for macro, fields in c_records.items():
        module, record = python_records[macro]
        python = [("INT", name) for name in record.ints] + [("FLOAT", n) for n in record.floats]
        assert fields == python, f"{macro} in C: {fields}; in {module}: {python}"


def test_a_record_packs_as_pack_values_and_names_its_fields():
    record = BlobRecord("GE_TEST_BLOB", ("n", "c"), ("alpha",))
    assert record.pack(c=3, alpha=0.5, n=2) == pack_values([2, 3], [0.5])
    assert struct.unpack("=2qd", record.pack(n=-1, c=2**62, alpha=-0.0)) == (-1, 2**62, -0.0)
    with pytest.raises(TypeError, match=r"GE_TEST_BLOB: expected fields \['n', 'c', 'alpha'\]"):
        record.pack(n=1, alpha=2.0)
    with pytest.raises(TypeError, match="GE_TEST_BLOB"):
        record.pack(n=1, c=2, alpha=2.0, beta=1.0)
