"""The plugin manager: finds plugins through entry points, loads them once, lazily.

Nothing here runs at `import ge_hub`. The first call to `get_registry()` (made by an op
lookup, `ge_hub.load`, the ES API or the CLI) registers the built-in plugin, loads the
entry points of the group `ge_hub` that the allow and block lists permit, and calls
every registration hook once, plugin by plugin, so the registry knows who added what.

    GE_HUB_PLUGINS           comma-separated allow list; unset: all installed plugins;
                             set but empty: none besides the built-ins
    GE_HUB_DISABLE_PLUGINS   comma-separated block list
"""

from __future__ import annotations

import dataclasses
import os
import threading
from importlib import metadata

import pluggy

from ge_hub import hookspecs, registry
from ge_hub._version import __version__
from ge_hub.errors import PluginError
from ge_hub.registry import BUILTIN_PLUGIN, Registry

ENTRY_POINT_GROUP = "ge_hub"
ALLOW_ENV = "GE_HUB_PLUGINS"
BLOCK_ENV = "GE_HUB_DISABLE_PLUGINS"

hookimpl = pluggy.HookimplMarker(hookspecs.PROJECT_NAME)

# The registration hooks, in the order they are called.
REGISTRATION_HOOKS = (
    "register_ops",
    "register_kernels",
    "register_frontends",
    "register_passes",
    "register_commands",
)


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """What `ge-hub plugins` shows of one loaded plugin."""

    name: str
    version: str
    hooks: tuple[str, ...]
    registered: dict[str, list[str]]


class _Hub:
    def __init__(self, manager: pluggy.PluginManager, registry: Registry,
                 versions: dict[str, str]):
        self.manager = manager
        self.registry = registry
        self.versions = versions


_hub: _Hub | None = None
_lock = threading.RLock()
# ge-hub's own plugin (`ge_hub.builtin`): it reaches every layer, so the package hands it
# over (`install_builtin`) instead of this module importing it.
_builtin: object | None = None


def install_builtin(plugin: object) -> None:
    """Register `plugin` as the built-in plugin, first of all, whenever plugins load."""
    global _builtin
    _builtin = plugin


def _env_list(name: str) -> list[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _build_hub() -> _Hub:
    if _builtin is None:
        raise PluginError("the built-in plugin is not installed: import ge_hub, which "
                          "installs it, before loading plugins")
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    manager.register(_builtin, name=BUILTIN_PLUGIN)
    versions = {BUILTIN_PLUGIN: __version__}

    allow = _env_list(ALLOW_ENV)
    block = set(_env_list(BLOCK_ENV) or ())
    for ep in _entry_points():
        if ep.name == BUILTIN_PLUGIN or ep.name in block:
            continue
        if allow is not None and ep.name not in allow:
            continue
        if manager.has_plugin(ep.name):
            continue  # the same distribution seen twice on sys.path
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:
            # SystemExit too: a plugin calling sys.exit() while imported must not end
            # ge-hub (or the user's program) with no word of which plugin did it.
            raise PluginError(
                f"plugin {ep.name!r} ({ep.value}) failed to load: {_describe_failure(exc)}; "
                f"set {BLOCK_ENV}={ep.name} to run without it") from exc
        manager.register(plugin, name=ep.name)
        versions[ep.name] = ep.dist.version if ep.dist is not None else "unknown"

    registry = Registry()
    for hook_name in REGISTRATION_HOOKS:
        hook = getattr(manager.hook, hook_name)
        # Call plugin by plugin in registration order (built-ins first), so a clash
        # blames the newcomer and the registry records who added what.
        for impl in hook.get_hookimpls():
            registry.current_plugin = impl.plugin_name
            try:
                impl.function(registry=registry)
            except PluginError:
                raise
            except (Exception, SystemExit) as exc:
                raise PluginError(f"plugin {impl.plugin_name!r} failed in {hook_name}: "
                                  f"{_describe_failure(exc)}; set {BLOCK_ENV}="
                                  f"{impl.plugin_name} to run without it") from exc
    registry.current_plugin = BUILTIN_PLUGIN
    return _Hub(manager, registry, versions)


def _describe_failure(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}"


def _get_hub() -> _Hub:
    global _hub
    if _hub is None:
        with _lock:
            if _hub is None:
                _hub = _build_hub()
    return _hub


def get_registry() -> Registry:
    """The registry of everything loaded plugins registered; loads them on first call."""
    return _get_hub().registry


registry.install_loader(get_registry)


def get_plugin_manager() -> pluggy.PluginManager:
    return _get_hub().manager


def loaded_plugins() -> list[PluginInfo]:
    """The loaded plugins, built-ins first, with versions and implemented hooks."""
    hub = _get_hub()
    infos = []
    for name, plugin in hub.manager.list_name_plugin():
        hooks = tuple(sorted(h.name for h in hub.manager.get_hookcallers(plugin) or ()))
        infos.append(PluginInfo(name, hub.versions.get(name, "unknown"), hooks,
                                hub.registry.registered_by(name)))
    infos.sort(key=lambda info: (info.name != BUILTIN_PLUGIN, info.name))
    return infos


def is_loaded() -> bool:
    """Whether plugins have been loaded yet (they load on first use, never at import)."""
    return _hub is not None


def reset() -> None:
    """Forget loaded plugins so the next use loads them again (tests, env changes)."""
    global _hub
    with _lock:
        _hub = None
