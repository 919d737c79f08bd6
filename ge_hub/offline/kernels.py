"""Which kernels a `.ghm` file's plans name, and who provides them.

Plans name kernels by their registered name (`KernelSpec.name`); the file records, for
each name, the plugin that registered it and that plugin's version ("builtin" for
ge-hub's own). Loading resolves every name in this process's registry and refuses a file
that names a kernel nobody registers, or one whose plugin is missing or at another
version (a plugin's packed attribute blobs are its own format), with the kernel, step and
plugin named.
"""

from __future__ import annotations

from ge_hub.errors import OfflineModelError, UnknownOpError
from ge_hub.plan import FALLBACK_PREFIX
from ge_hub.registry import BUILTIN_PLUGIN


def _versions() -> dict[str, str]:
    from ge_hub.plugins import loaded_plugins

    return {info.name: info.version for info in loaded_plugins()}


def _owner(registry, name: str) -> str | None:
    kernel = registry.kernel_by_name(name)
    if kernel is not None:
        return registry.kernel_owner(kernel)
    if name.startswith(FALLBACK_PREFIX):
        domain, _, op = name[len(FALLBACK_PREFIX):].rpartition(".")
        try:
            return registry.op_owner(registry.get_op(op, domain))
        except UnknownOpError:
            return None
    return None


def record(plans) -> dict[str, dict[str, str]]:
    """{kernel name: {"plugin": name[, "version": version]}} for every kernel the plans use."""
    from ge_hub.plugins import get_registry

    registry = get_registry()
    versions = _versions()
    table = {}
    for plan in plans:
        for step in plan.steps:
            if step.kernel in table:
                continue
            owner = _owner(registry, step.kernel) or BUILTIN_PLUGIN
            entry = {"plugin": owner}
            if owner != BUILTIN_PLUGIN:
                entry["version"] = versions.get(owner, "unknown")
            table[step.kernel] = entry
    return table


def check(table: dict, plans, where: str) -> None:
    """Every kernel the plans name is registered here, by the plugin (and version) that
    compiled them."""
    from ge_hub.plugins import get_registry

    if not isinstance(table, dict):
        raise OfflineModelError(f"{where}: the kernel table is malformed")
    registry = get_registry()
    versions = _versions()
    for plan_name, plan in plans:
        for step in plan.steps:
            recorded = table.get(step.kernel)
            if not isinstance(recorded, dict) or not isinstance(recorded.get("plugin"), str):
                raise OfflineModelError(f"{where}: profile {plan_name!r}: step {step.node!r} "
                                        f"names kernel {step.kernel!r}, which the file's kernel "
                                        "table does not list")
            plugin = recorded["plugin"]
            wanted = recorded.get("version")
            owner = _owner(registry, step.kernel)
            label = f"kernel {step.kernel!r} (node {step.node!r}, profile {plan_name!r})"
            if plugin != BUILTIN_PLUGIN and plugin not in versions:
                raise OfflineModelError(f"{where}: {label} comes from plugin {plugin!r} "
                                        f"{wanted or ''}, which is not installed or not loaded "
                                        "here (see `ge-hub plugins`)".replace("  ", " "))
            if owner is None:
                raise OfflineModelError(f"{where}: unknown {label}: no loaded plugin registers "
                                        f"it (the file says plugin {plugin!r} did)")
            if owner != plugin:
                raise OfflineModelError(f"{where}: {label} was registered by plugin {plugin!r} "
                                        f"when compiled, here by {owner!r}")
            if plugin != BUILTIN_PLUGIN and wanted is not None and versions.get(plugin) != wanted:
                raise OfflineModelError(f"{where}: {label} was compiled with plugin {plugin!r} "
                                        f"{wanted}, here it is {versions.get(plugin)}; compile "
                                        "the model again")
