"""Where ES functions come from: one per registered op, generated on first use.

`ge_hub.es` has no op functions of its own. Its module `__getattr__` asks this module,
which reads the op registry (loading plugins then, never at import), generates the
function of the op from its schema (`ge_hub.es.calls.make_function`) and caches it for
that registry. Core ops are attributes of `ge_hub.es` under their snake_case name, their
exact ONNX name and a few aliases; the ops of a plugin domain ("acme", "com.acme") are
attributes of a `DomainNamespace` (`es.acme`, `es.com_acme`).
"""

from __future__ import annotations

import difflib
import weakref
from collections.abc import Callable
from typing import Any

from ge_hub.es import tensor
from ge_hub.es.calls import make_function
from ge_hub.es.naming import ALIASES, domain_attribute, snake_case
from ge_hub.registry import Registry


class _Ambiguous:
    """Two ops of a domain whose snake_case names collide: only exact names reach them."""

    def __init__(self, names: list[str]):
        self.names = names


class _DomainTable:
    """The ES functions of one registry, by domain and by attribute name."""

    def __init__(self, registry: Registry):
        self.op_count = len(registry.ops())
        self.functions: dict[str, dict[str, Callable | _Ambiguous]] = {}
        for schema in registry.ops():
            table = self.functions.setdefault(schema.domain, {})
            module = "ge_hub.es" + (f".{domain_attribute(schema.domain)}"
                                    if schema.domain else "")
            function = make_function(schema, snake_case(schema.name), module)
            short = snake_case(schema.name)
            existing = table.get(short)
            if existing is None:
                table[short] = function
            elif existing is not function and short != schema.name:
                table[short] = _Ambiguous([*_op_names(existing), schema.name])
        # Exact names win over snake_case ones, and are never ambiguous.
        for schema in registry.ops():
            table = self.functions[schema.domain]
            by_snake = table.get(snake_case(schema.name))
            table[schema.name] = (by_snake if getattr(by_snake, "schema", None) is schema
                                  else make_function(schema, schema.name))
        core = self.functions.setdefault("", {})
        for alias, target in ALIASES.items():
            if target in core and alias not in core:
                core[alias] = core[target]
        self.domains = {domain_attribute(d): d for d in self.functions if d}


def _op_names(entry: Callable | _Ambiguous) -> list[str]:
    return entry.names if isinstance(entry, _Ambiguous) else [entry.schema.name]


_tables: weakref.WeakKeyDictionary[Registry, _DomainTable] = weakref.WeakKeyDictionary()


def _table() -> _DomainTable:
    from ge_hub.plugins import get_registry

    registry = get_registry()
    table = _tables.get(registry)
    # A registry can still gain ops after its first use (tests register ops by hand).
    if table is None or table.op_count != len(registry.ops()):
        table = _tables[registry] = _DomainTable(registry)
    return table


def function_for(name: str, domain: str = "") -> Callable:
    """The ES function of op `name` (exact or snake_case) in `domain`."""
    return lookup(name, domain, f"ge_hub.es{'.' + domain_attribute(domain) if domain else ''}")


def call_core_op(op: str, *args: Any):
    """Apply the core op `op` (what Tensor's Python operators do)."""
    return function_for(op, "")(*args)


tensor.install_operator_call(call_core_op)


def lookup(attr: str, domain: str, where: str) -> Callable:
    table = _table().functions.get(domain, {})
    entry = table.get(attr)
    if isinstance(entry, _Ambiguous):
        raise AttributeError(f"{where}.{attr} is ambiguous: ops {', '.join(entry.names)} "
                             "share that snake_case name; use the exact op name")
    if entry is None:
        hint = difflib.get_close_matches(attr, list(table), n=3)
        suggestion = f"; did you mean {', '.join(hint)}?" if hint else ""
        qualified = f"{domain}.{attr}" if domain else attr
        raise AttributeError(f"{where} has no op {attr!r} (no installed plugin registers an "
                             f"op {qualified!r}; `ge-hub ops` lists them){suggestion}")
    return entry


def resolve_top_level(attr: str) -> Callable | DomainNamespace:
    """What `ge_hub.es.<attr>` means: a core op's function or a plugin domain."""
    table = _table()
    if attr in table.functions.get("", {}):
        return lookup(attr, "", "ge_hub.es")
    if attr in table.domains:
        return DomainNamespace(table.domains[attr])
    return lookup(attr, "", "ge_hub.es")  # raises, with suggestions


def top_level_names() -> list[str]:
    table = _table()
    return sorted({*table.functions.get("", {}), *table.domains})


class DomainNamespace:
    """The ES functions of one plugin domain: `es.acme.fused_op(...)`."""

    def __init__(self, domain: str):
        self._domain = domain

    @property
    def domain(self) -> str:
        return self._domain

    def __getattr__(self, attr: str) -> Callable:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return lookup(attr, self._domain, f"ge_hub.es.{domain_attribute(self._domain)}")

    def __dir__(self) -> list[str]:
        return sorted(_table().functions.get(self._domain, {}))

    def __repr__(self) -> str:
        return f"<ES ops of domain {self._domain!r}>"
