"""The C kernel lists and the Python kernel specs name the same kernels, family by family.

Each family header under core/kernels names its kernels once, in a list macro
GE_<FAMILY>_KERNELS(X) that becomes both the prototypes and the table of built-in kernels
(`ge_hub._core.builtin_kernels()`); each Python family module (ge_hub/kernels/<family>.py
or <family>_<part>.py) registers CKernels by symbol. Here both ways:

- every symbol a built-in Python spec names is exported by the core, and every kernel the
  core exports is named by some spec (no dead C kernel, no spec that fails at compile
  time), each difference named;
- the table holds no test kernel (those are built for the tests only, tests/testing_kernels.py);
- a kernel's C list and its Python spec sit in files named for the same op family, and so
  does its op's schema (ge_hub/ops/<family>*.py), and the op's name appears in that
  family's C files, so `git grep` for an op finds all three side by side.
"""

from __future__ import annotations

import importlib
import re
from collections import defaultdict
from pathlib import Path

from ge_hub import _core
from ge_hub.kernels import FAMILY_MODULES, builtin_kernels
from ge_hub.kernels.base import CKernel

ROOT = Path(__file__).resolve().parents[1]
KERNEL_DIR = ROOT / "core" / "kernels"
LIST_MACRO = re.compile(r"#define GE_(\w+)_KERNELS\(X\)((?:[^\n]*\\\n)*[^\n]*)")


def _c_lists() -> dict[str, list[str]]:
    """{family: symbols} from every GE_<FAMILY>_KERNELS list under core/kernels."""
    lists: dict[str, list[str]] = {}
    for header in sorted(KERNEL_DIR.glob("*.h")):
        for family, body in LIST_MACRO.findall(header.read_text()):
            assert header.stem == family.lower(), (
                f"{header.name} defines the list of family {family.lower()!r}: a family's "
                f"list belongs in core/kernels/{family.lower()}.h")
            body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
            lists[family.lower()] = re.findall(r"\bX\((\w+)\)", body)
    return lists


def _family(module: str) -> str:
    return module.rsplit(".", 1)[-1].split("_")[0]


def _python_specs() -> dict[str, list]:
    """{family: built-in C kernel specs} by the Python module that registers them."""
    specs = defaultdict(list)
    for module in FAMILY_MODULES:
        for spec in importlib.import_module(module).KERNELS:
            if isinstance(spec.impl, CKernel) and spec.impl.library is None:
                specs[_family(module)].append(spec)
    return specs


def _differences(python: set[str], core: set[str]) -> str:
    return (f"named by a Python spec but not exported by the core: {sorted(python - core)}; "
            f"exported by the core but named by no Python spec: {sorted(core - python)}")


def test_python_specs_and_core_export_the_same_symbols():
    python = {spec.impl.symbol for spec in builtin_kernels()
              if isinstance(spec.impl, CKernel) and spec.impl.library is None}
    core = set(_core.builtin_kernels())
    assert python == core, _differences(python, core)


def test_the_table_is_the_family_lists_and_holds_no_test_kernel():
    lists = _c_lists()
    listed = [symbol for symbols in lists.values() for symbol in symbols]
    duplicates = sorted({s for s in listed if listed.count(s) > 1})
    assert not duplicates, f"kernels listed twice: {duplicates}"
    table = set(_core.builtin_kernels())
    assert set(listed) == table, _differences(set(listed), table)
    assert not [name for name in table if name.startswith("ge_test_")]


def test_each_family_names_the_same_kernels_in_c_and_python():
    lists = _c_lists()
    for family, specs in _python_specs().items():
        python = {spec.impl.symbol for spec in specs}
        c = set(lists.get(family, ()))
        assert python <= c, (
            f"ge_hub/kernels/{family}*.py registers {sorted(python - c)}, which "
            f"core/kernels/{family}.h does not list (GE_{family.upper()}_KERNELS)")
    for family, symbols in lists.items():
        python = {spec.impl.symbol for spec in _python_specs().get(family, ())}
        missing = sorted(set(symbols) - python)
        assert not missing, (f"core/kernels/{family}.h lists {missing}, which no "
                             f"ge_hub/kernels/{family}*.py spec registers")


def _schema_files(op: str) -> list[str]:
    pattern = re.compile(rf"[\"']{re.escape(op)}[\"']")
    return sorted(path.stem for path in (ROOT / "ge_hub" / "ops").glob("*.py")
                  if pattern.search(path.read_text()))


def _c_family_text(family: str) -> str:
    return "\n".join(path.read_text() for path in sorted(KERNEL_DIR.glob(f"{family}*.[ch]"))
                     if _family(path.stem) == family)


def test_each_kernel_sits_in_the_family_of_its_op_schema():
    misplaced = []
    for family, specs in _python_specs().items():
        c_text = _c_family_text(family)
        for op in sorted({spec.op for spec in specs}):
            files = _schema_files(op)
            if not any(_family(name) == family for name in files):
                misplaced.append(f"{op}: kernel in family {family!r}, schema in {files}")
            if not re.search(rf"\b{re.escape(op)}\b", c_text):
                misplaced.append(f"{op}: named in no core/kernels/{family}*.[ch] (git grep "
                                 f"{op} would not find its C kernel)")
    assert not misplaced, "; ".join(misplaced)
