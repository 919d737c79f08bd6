"""The registry that plugin hooks fill: ops, kernels, frontends, passes, commands.

Each hook receives the one `Registry` and calls its `add_*` methods. The registry
remembers which plugin added what, validates entries, and rejects a duplicate name
with an error that names both plugins.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from ge_hub.errors import PluginError, UnknownOpError
from ge_hub.ir.dtypes import DType
from ge_hub.ops.schema import OpSchema

CORE_DOMAIN = ""
BUILTIN_PLUGIN = "builtin"

# Compiler stages, in pipeline order; a pass joins exactly one.
PASS_STAGES = ("canonicalize", "optimize", "fuse", "select", "schedule", "plan")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One implementation of an op on a device for some input dtypes."""

    op: str
    impl: Any
    domain: str = ""
    device: str = "cpu"
    dtypes: tuple[DType, ...] | None = None  # input dtypes it accepts; None: any
    priority: int = 0
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Frontend:
    """A model importer: decides whether it accepts a model, then loads it.

    A frontend says what it claims, so that `ge_hub.load` can tell a specific match from
    a catch-all one without trusting plugin order: file `suffixes` (".onnx"), leading
    `magic` bytes of a file, and `object_modules`, the top-level modules of the Python
    objects it loads ("torch" claims any object whose class, or a base class, comes from
    torch). A frontend that declares none of these is a catch-all, asked only when no
    claiming frontend accepts the model.

    `claims_path(path)` claims paths that name a model without being its file (a saved
    model's prefix or directory, which no suffix or magic bytes can show); it is called
    only on paths and must stay cheap.

    `executes_code(model)` is True for models whose loading can run code hidden in them
    (pickles: torch's .pt/.pt2 files); `ge_hub.load` refuses those unless the caller
    passes `trusted=True`, and hands `trusted` on to `load`.

    `reference(model, feeds, graph, trusted=False) -> {value name: array}` (optional)
    runs the model in its source framework, or that format's reference runtime, named
    `reference_name` ("torch", "onnxruntime"), for `ge-hub compare --against NAME`
    (`ge_hub.compare`): `feeds` by graph input name, `graph` what `load` returned; it
    returns the graph's outputs and every intermediate value it can, keyed by `graph`'s
    value names. A frontend that can name values as its framework does puts
    `{value name: source name}` in `graph.attrs["source_names"]`.
    """

    name: str
    accepts: Callable[[Any], bool]
    load: Callable[..., Any]
    doc: str = ""
    suffixes: tuple[str, ...] = ()
    magic: tuple[bytes, ...] = ()
    object_modules: tuple[str, ...] = ()
    executes_code: Callable[[Any], bool] | None = None
    claims_path: Callable[[Any], bool] | None = None
    reference: Callable[..., Any] | None = None
    reference_name: str = ""

    @property
    def is_catch_all(self) -> bool:
        return not (self.suffixes or self.magic or self.object_modules or self.claims_path)


@dataclasses.dataclass(frozen=True)
class PassSpec:
    """A compiler pass: a named function `Graph -> PassResult` in one stage.

    A `run` with a parameter named `ctx` also receives the compilation's
    `ge_hub.passes.context.PassContext`; `rules` names the rewrite rules of a rule pass
    (`ge_hub.rewrite.rule_pass`), which users can switch one by one.
    """

    name: str
    run: Callable[..., Any]
    stage: str = "optimize"
    doc: str = ""
    rules: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Command:
    """A `ge-hub` subcommand; `example` is one command line that `ge-hub --help` shows."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    example: str = ""


class Registry:
    """Everything the plugins registered, with who registered it."""

    def __init__(self) -> None:
        self.current_plugin = BUILTIN_PLUGIN
        self._ops: dict[tuple[str, str], tuple[OpSchema, str]] = {}
        self._kernels: dict[str, tuple[KernelSpec, str]] = {}
        self._frontends: dict[str, tuple[Frontend, str]] = {}
        self._passes: dict[str, tuple[PassSpec, str]] = {}
        self._commands: dict[str, tuple[Command, str]] = {}

    def _add(self, table: dict, key, item, what: str, label: str) -> None:
        if key in table:
            _, owner = table[key]
            raise PluginError(f"{what} {label!r} is registered twice: by plugin {owner!r} "
                              f"and by plugin {self.current_plugin!r}")
        table[key] = (item, self.current_plugin)

    # -- ops ---------------------------------------------------------------------

    def add_op(self, schema: OpSchema) -> None:
        if not isinstance(schema, OpSchema):
            raise PluginError(f"plugin {self.current_plugin!r}: add_op expects an OpSchema, "
                              f"got {type(schema).__name__}")
        if schema.domain == CORE_DOMAIN and self.current_plugin != BUILTIN_PLUGIN:
            raise PluginError(f"plugin {self.current_plugin!r}: op {schema.name!r} must be in "
                              "the plugin's own domain; the core domain '' is ge-hub's")
        self._add(self._ops, (schema.domain, schema.name), schema, "op", schema.qualified_name)

    def get_op(self, name: str, domain: str = CORE_DOMAIN) -> OpSchema:
        try:
            return self._ops[(domain, name)][0]
        except KeyError:
            qualified = f"{domain}.{name}" if domain else name
            raise UnknownOpError(f"unknown op {qualified!r}: no installed plugin registers it "
                                 "(`ge-hub ops` lists the known ops)") from None

    def has_op(self, name: str, domain: str = CORE_DOMAIN) -> bool:
        return (domain, name) in self._ops

    def ops(self) -> list[OpSchema]:
        return [schema for schema, _ in self._ops.values()]

    def op_owner(self, schema: OpSchema) -> str:
        return self._ops[(schema.domain, schema.name)][1]

    # -- kernels -----------------------------------------------------------------

    def add_kernel(self, kernel: KernelSpec) -> None:
        if not kernel.name:
            raise PluginError(f"plugin {self.current_plugin!r}: kernel for {kernel.op!r} "
                              "needs a name (plans refer to kernels by name)")
        self._add(self._kernels, kernel.name, kernel, "kernel", kernel.name)

    def kernel_by_name(self, name: str) -> KernelSpec | None:
        entry = self._kernels.get(name)
        return None if entry is None else entry[0]

    def kernels(self, op: str | None = None, domain: str = CORE_DOMAIN) -> list[KernelSpec]:
        found = [k for k, _ in self._kernels.values()]
        if op is not None:
            found = [k for k in found if k.op == op and k.domain == domain]
        return sorted(found, key=lambda k: -k.priority)

    # -- frontends, passes, commands ---------------------------------------------

    def add_frontend(self, frontend: Frontend) -> None:
        bad = [s for s in frontend.suffixes if not (s.startswith(".") and s == s.lower())]
        if bad:
            raise PluginError(f"plugin {self.current_plugin!r}: frontend {frontend.name!r} "
                              f"suffixes must be lower case and start with '.', got {bad}")
        self._add(self._frontends, frontend.name, frontend, "frontend", frontend.name)

    def frontends(self) -> list[tuple[Frontend, str]]:
        return list(self._frontends.values())

    def kernel_overrides(self) -> list[tuple[KernelSpec, str, KernelSpec]]:
        """(plugin kernel, its plugin, built-in kernel) for every plugin kernel that
        outranks a built-in one: same op and device, overlapping dtypes, and a higher
        priority, so kernel selection picks it where the built-in would have run."""
        builtin = [k for k, owner in self._kernels.values() if owner == BUILTIN_PLUGIN]
        found = []
        for kernel, owner in self._kernels.values():
            if owner == BUILTIN_PLUGIN:
                continue
            for base in builtin:
                if ((base.op, base.domain, base.device) == (kernel.op, kernel.domain,
                                                            kernel.device)
                        and kernel.priority > base.priority
                        and _dtypes_overlap(kernel.dtypes, base.dtypes)):
                    found.append((kernel, owner, base))
        return found

    def kernel_owner(self, kernel: KernelSpec) -> str:
        return self._kernels[kernel.name][1]

    def add_pass(self, graph_pass: PassSpec) -> None:
        if graph_pass.stage not in PASS_STAGES:
            raise PluginError(f"plugin {self.current_plugin!r}: pass {graph_pass.name!r} has "
                              f"unknown stage {graph_pass.stage!r}; "
                              f"stages: {', '.join(PASS_STAGES)}")
        self._add(self._passes, graph_pass.name, graph_pass, "pass", graph_pass.name)

    def passes(self, stage: str | None = None) -> list[PassSpec]:
        found = [p for p, _ in self._passes.values()]
        return found if stage is None else [p for p in found if p.stage == stage]

    def pass_owner(self, name: str) -> str:
        """The plugin that registered pass `name`."""
        return self._passes[name][1]

    def add_command(self, command: Command) -> None:
        self._add(self._commands, command.name, command, "command", command.name)

    def commands(self) -> list[Command]:
        return [c for c, _ in self._commands.values()]

    # -- provenance --------------------------------------------------------------

    def registered_by(self, plugin: str) -> dict[str, list[str]]:
        """What one plugin registered, by kind (for `ge-hub plugins`)."""
        tables: Iterable[tuple[str, dict]] = (
            ("ops", self._ops), ("kernels", self._kernels), ("frontends", self._frontends),
            ("passes", self._passes), ("commands", self._commands))
        result: dict[str, list[str]] = {}
        for kind, table in tables:
            names = [_label(item) for item, owner in table.values() if owner == plugin]
            if names:
                result[kind] = names
        return result


# The process-wide registry is built by the plugin manager (`ge_hub.plugins`), which sits
# above this module: it installs its loader here when imported (as `import ge_hub` does),
# so that op lookup, the compiler and the runtime reach the registry without importing
# the manager.
_loader: Callable[[], Registry] | None = None


def install_loader(loader: Callable[[], Registry]) -> None:
    """Make `loader()` what `get_registry` returns (the plugin manager's, once)."""
    global _loader
    _loader = loader


def get_registry() -> Registry:
    """The registry of everything the loaded plugins registered; plugins load on the first
    call (see `ge_hub.plugins`)."""
    if _loader is None:
        raise PluginError("no plugin manager is installed: import ge_hub (which installs "
                          "ge_hub.plugins) before looking anything up")
    return _loader()


def _dtypes_overlap(a: tuple[DType, ...] | None, b: tuple[DType, ...] | None) -> bool:
    return a is None or b is None or bool(set(a) & set(b))


def _label(item) -> str:
    if isinstance(item, OpSchema):
        return item.qualified_name
    return item.name
