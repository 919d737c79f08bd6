"""`ge_hub.load`: hand a model to the frontend plugin that accepts it.

Frontends come from plugins (`register_frontends`). Each declares what it claims (file
suffixes, magic bytes, the modules of the Python objects it loads; see
`ge_hub.registry.Frontend`) and answers `accepts(model)`. The choice never depends on
plugin order:

1. The frontends whose claims match the model are asked first. Exactly one accepting
   wins; two accepting is an `AmbiguousFrontendError` naming both plugins.
2. Only when none of them accepts are the catch-all frontends (no claims) asked, by the
   same rule. So a plugin that accepts everything cannot take `.onnx` files from ge-onnx.
3. A frontend whose `accepts` raises is skipped and named: in a warning when another
   frontend loads the model, in the error when none does.

Model files never execute code by default: a frontend whose `executes_code(model)` is
True (pickle-based formats such as torch's `.pt2`) is refused with
`UntrustedModelError` unless the caller passes `trusted=True`. `.onnx` and `.gehub`
files are plain data and never run code.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from ge_hub.errors import (
    AmbiguousFrontendError,
    FrontendNotFoundError,
    GeHubError,
    UntrustedModelError,
)
from ge_hub.ir.graph import Graph
from ge_hub.passes.context import PassContext
from ge_hub.registry import Frontend, Registry

# Which extra brings the frontend for a file suffix or a framework's Python objects.
# Only extras that exist in pyproject.toml, with a package on main behind them.
EXTRA_BY_SUFFIX = {
    ".onnx": "onnx",
    ".pt": "torch",
    ".pt2": "torch",
    ".mindir": "mindspore",
    ".pdmodel": "paddle",
    ".pdiparams": "paddle",
}
EXTRA_BY_MODULE = {
    "onnx": "onnx",
    "torch": "torch",
    "mindspore": "mindspore",
    "paddle": "paddle",
}
# Enough of a file's head for any frontend's magic bytes.
MAGIC_BYTES = 64


def load(model: Any, *, trusted: bool = False, registry: Registry | None = None,
         **options: Any) -> Graph:
    """Import `model` (a path or a framework object) as a ge-hub Graph.

    `trusted=True` allows formats that can execute code while loading (pickles); give it
    only for files from a source you trust. `registry` is the one to load with (default:
    the loaded plugins'); a frontend whose `load` has a `ctx` parameter receives the
    context made from it (`ctx.registry`), so it looks ops up there. Other options go to
    the frontend.
    """
    if isinstance(model, Graph):
        return model
    ctx = PassContext(registry=registry)
    frontend = choose_frontend(model, ctx.registry.frontends())
    if frontend.executes_code is not None and frontend.executes_code(model):
        if not trusted:
            raise UntrustedModelError(
                f"refusing to load the {_describe(model)}: its format can carry pickled "
                f"Python that runs while it loads (frontend {frontend.name!r}); load it only "
                "if you trust where it came from, with ge_hub.load(..., trusted=True) or "
                "`ge-hub run --trust-pickle`")
        options["trusted"] = True
    given = dict(options)
    if "ctx" in _parameters(frontend.load):
        options["ctx"] = ctx
    graph = frontend.load(model, **options)
    if isinstance(model, (str, os.PathLike)) and isinstance(graph, Graph) \
            and os.path.isfile(model):
        # One file whose stamp says whether it changed; a model given as a prefix or a
        # directory (Paddle's, MindSpore's) spans several files: its graph is kept whole.
        path = os.path.abspath(os.fspath(model))
        _SOURCES[graph] = _Source(path, _stamp(path), trusted, registry, given)
    return graph


# -- reading a graph again from its file ------------------------------------------------
# A CompiledModel need not keep the whole graph (every original weight) alive once it is
# planned when the graph can be read again from the file it came from: it keeps only the
# inputs' and outputs' types and reads the file again to plan another shape or to save
# the graph (`ge_hub.runtime`). The file must not change meanwhile: its size, mtime and
# inode are checked, and a changed file is an error rather than other weights.


@dataclasses.dataclass(frozen=True)
class _Source:
    path: str
    stamp: tuple[int, int, int]
    trusted: bool
    registry: Registry | None
    options: dict[str, Any]


_SOURCES: weakref.WeakKeyDictionary[Graph, _Source] = weakref.WeakKeyDictionary()


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def source_loader(graph: Graph) -> Callable[[], Graph] | None:
    """A function that reads `graph` again from the model file `load` read it from (an
    equal, new Graph), or None for a graph that was not loaded from a file."""
    source = _SOURCES.get(graph)
    if source is None:
        return None

    def reload() -> Graph:
        try:
            stamp = _stamp(source.path)
        except OSError as exc:
            raise GeHubError(f"cannot read the model file {source.path!r} again (the "
                             f"compiled model reads its weights from it to plan a new shape "
                             f"or save its graph): {exc}") from None
        if stamp != source.stamp:
            raise GeHubError(f"the model file {source.path!r} changed since it was compiled; "
                             "the compiled model reads its weights from it to plan a new "
                             "shape or save its graph: compile it again")
        return load(source.path, trusted=source.trusted, registry=source.registry,
                    **source.options)

    return reload


def _parameters(function: Any) -> set[str]:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin or C callable: no ctx for it
        return set()


def choose_frontend(model: Any, frontends: list[tuple[Frontend, str]]) -> Frontend:
    """The one frontend that loads `model`, by the rules in this module's docstring."""
    head = _file_head(model)
    claiming = [(f, p) for f, p in frontends if _claims(f, model, head)]
    catch_all = [(f, p) for f, p in frontends if f.is_catch_all]
    failures: list[str] = []
    for tier in (claiming, catch_all):
        accepting = [(f, p) for f, p in tier if _asks(f, p, model, failures)]
        if len(accepting) > 1:
            names = " and ".join(f"{f.name!r} (plugin {p!r})" for f, p in accepting)
            raise AmbiguousFrontendError(
                f"the {_describe(model)} is accepted by frontends {names}; uninstall or "
                "block one (GE_HUB_DISABLE_PLUGINS) so that ge-hub does not guess")
        if accepting:
            if failures:
                warnings.warn("; ".join(failures), RuntimeWarning, stacklevel=3)
            return accepting[0][0]
    message = _not_found_message(model, [f.name for f, _ in frontends])
    if failures:
        message += "; " + "; ".join(failures)
    raise FrontendNotFoundError(message)


def _asks(frontend: Frontend, plugin: str, model: Any, failures: list[str]) -> bool:
    try:
        return bool(frontend.accepts(model))
    except Exception as exc:  # a broken plugin must not take loading down for all
        failures.append(f"frontend {frontend.name!r} (plugin {plugin!r}) raised in accepts() "
                        f"and was skipped: {type(exc).__name__}: {exc}")
        return False


def _claims(frontend: Frontend, model: Any, head: bytes | None) -> bool:
    if isinstance(model, (str, os.PathLike)):
        if _path_claimed(model, frontend.suffixes, frontend.magic, head):
            return True
        return frontend.claims_path is not None and _safe_claim(frontend, model)
    modules = {cls.__module__.split(".")[0] for cls in type(model).__mro__}
    return bool(modules & set(frontend.object_modules))


def _safe_claim(frontend: Frontend, path: Any) -> bool:
    try:
        return bool(frontend.claims_path(path))
    except Exception:  # a broken plugin's claim is no claim; its accepts() is not asked
        return False


def is_file_of(model: Any, suffixes: tuple[str, ...], magic: tuple[bytes, ...]) -> bool:
    """Whether `model` is a path with one of `suffixes` or starting with one of `magic`:
    the `accepts` of a frontend for a file format of its own."""
    if not isinstance(model, (str, os.PathLike)):
        return False
    return _path_claimed(model, suffixes, magic, _file_head(model))


def _path_claimed(path: Any, suffixes: tuple[str, ...], magic: tuple[bytes, ...],
                  head: bytes | None) -> bool:
    suffix = os.path.splitext(os.fsdecode(os.fspath(path)))[1].lower()
    if suffix and suffix in suffixes:
        return True
    return head is not None and any(head.startswith(m) for m in magic if m)


def _file_head(model: Any) -> bytes | None:
    if not isinstance(model, (str, os.PathLike)):
        return None
    try:
        with open(model, "rb") as stream:
            return stream.read(MAGIC_BYTES)
    except OSError:  # missing, a directory, unreadable: not ours to judge
        return None


def _describe(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return f"model file {os.fspath(model)!r}"
    return f"model of type {type(model).__module__}.{type(model).__qualname__}"


def suggested_extra(model: Any) -> str | None:
    """The `ge-hub[...]` extra whose frontend would load this model, if we can tell."""
    if isinstance(model, (str, os.PathLike)):
        suffix = os.path.splitext(os.fspath(model))[1].lower()
        return EXTRA_BY_SUFFIX.get(suffix)
    root = type(model).__module__.split(".")[0]
    return EXTRA_BY_MODULE.get(root)


def _not_found_message(model: Any, installed: list[str]) -> str:
    listing = ", ".join(sorted(installed)) if installed else "none"
    message = (f"no installed frontend accepts the {_describe(model)} "
               f"(installed frontends: {listing})")
    if isinstance(model, (str, os.PathLike)) and not os.path.exists(model):
        message += "; the file does not exist"
    extra = suggested_extra(model)
    if extra:
        message += f"; install one with: pip install ge-hub[{extra}]"
    return message
