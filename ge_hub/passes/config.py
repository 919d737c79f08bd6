"""Pass configuration files: switch passes and single rules on and off by name.

In the manner of ATC's `--fusion_switch_file`; JSON or TOML (by the file's suffix, or
by content when the suffix is neither):

    {"passes": {"simplify": "off"},
     "rules": {"fold_batch_norm.matmul": false, "example.scale_shift": "on"}}

    [passes]
    simplify = "off"
    [rules]
    "fold_batch_norm.matmul" = false

A value is a bool or "on"/"off". `ge-hub run --pass-config FILE` and
`ge_hub.compile(..., options={"pass_config": FILE or dict})` take the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

SECTIONS = ("passes", "rules")


def read_pass_config(source: str | os.PathLike | Mapping[str, Any]) -> dict[str, dict[str, bool]]:
    """Parse a pass configuration (a path or an already-parsed mapping)."""
    if isinstance(source, Mapping):
        data, where = source, "pass_config"
    else:
        where = f"pass config {os.fspath(source)!r}"
        data = _read_file(os.fspath(source), where)
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a table with sections {SECTIONS}")
    unknown = set(data) - set(SECTIONS)
    if unknown:
        raise ValueError(f"{where}: unknown sections {sorted(unknown)}; known: "
                         f"{', '.join(SECTIONS)}")
    config: dict[str, dict[str, bool]] = {}
    for section in SECTIONS:
        table = data.get(section, {})
        if not isinstance(table, Mapping):
            raise ValueError(f"{where}: [{section}] must map names to on/off")
        config[section] = {str(name): _switch(value, where, section, name)
                           for name, value in table.items()}
    return config


def _switch(value: Any, where: str, section: str, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("on", "off"):
        return value.lower() == "on"
    raise ValueError(f"{where}: {section}.{name} must be true/false or \"on\"/\"off\", "
                     f"got {value!r}")


def _read_file(path: str, where: str) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ValueError(f"{where} cannot be read: {exc}") from None
    text = raw.decode("utf-8", errors="replace")
    as_toml = path.endswith(".toml") or (not path.endswith(".json")
                                         and not text.lstrip().startswith("{"))
    if not as_toml:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not valid JSON: {exc}") from None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ValueError(f"{where}: reading TOML needs Python 3.11 or the tomli "
                             "package; give the config as JSON") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where} is not valid TOML: {exc}") from None
