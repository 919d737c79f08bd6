"""Every hook a ge-hub plugin can implement: the plugin author's manual.

A plugin is a module (or any object) with functions marked `@ge_hub.hookimpl`, made
known to ge-hub through an entry point in the group `ge_hub`:

    # pyproject.toml of your distribution
    [project.entry-points.ge_hub]
    acme = "acme_ge.plugin"

    # acme_ge/plugin.py
    import ge_hub

    @ge_hub.hookimpl
    def register_ops(registry):
        registry.add_op(my_schema)       # an OpSchema in the "acme" domain

Every hook receives a `registry` (`ge_hub.registry.Registry`) and calls its `add_*`
methods; a hook returns nothing. Hooks run once, lazily, the first time ge-hub needs
what they register (never at `import ge_hub`). The registry validates what it is given
and rejects a name that another plugin already registered, naming both plugins.

Loading is controlled by two environment variables: `GE_HUB_PLUGINS`, a
comma-separated allow list (set but empty: no plugins besides the built-ins), and
`GE_HUB_DISABLE_PLUGINS`, a comma-separated block list. `ge-hub plugins` shows what
was loaded, with versions and the hooks each implements.

The built-in ops, kernels, passes and commands of ge-hub itself register through these
same hooks, from `ge_hub.builtin`. `ge_hub.plugin` re-exports everything a plugin
needs; `ge_hub.testing` has the checks to test it with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ge_hub.registry import Registry

PROJECT_NAME = "ge_hub"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def register_ops(registry: Registry) -> None:
    """Add op schemas with `registry.add_op(schema)`.

    Called once, before the first op lookup. `schema` is a `ge_hub.ops.OpSchema`
    (declare it with `ge_hub.ops.op`), with `domain` set to your own domain
    ("acme" or "com.acme"): only the built-in plugin may add ops to the core domain ''.
    Each op then appears in `ge_hub.es` (as `es.acme.my_op(...)`), in `ge-hub ops`,
    and can be used by frontends, passes and the reference evaluator.
    """


@hookspec
def register_kernels(registry: Registry) -> None:
    """Add kernels with `registry.add_kernel(kernel)`.

    Called once, before the compiler first selects kernels. `kernel` is a
    `ge_hub.registry.KernelSpec`: the op (name and domain) it implements, the device
    ("cpu"), the input dtypes it accepts (None: any) and the implementation (a Python
    callable taking and returning NumPy arrays, or a C function exported from a shared
    library built against `core/include/ge_hub/kernel.h`). Among kernels for the same
    (op, device, dtypes) the one with the highest `priority` wins.
    """


@hookspec
def register_frontends(registry: Registry) -> None:
    """Add model importers with `registry.add_frontend(frontend)`.

    Called once, on the first `ge_hub.load(...)`. `frontend` is a
    `ge_hub.registry.Frontend`: a name, an `accepts(model) -> bool` predicate that
    must be cheap and must not import a heavy framework unless the model is already one
    of its objects (check `type(model).__module__`, a path's suffix or magic bytes), and
    a `load(model, **options) -> Graph` that returns a verified graph.

    Declare what the frontend claims: `suffixes` (".onnx"), `magic` (leading bytes of a
    file) and `object_modules` (the top-level modules of the objects it loads, "torch");
    `claims_path(path)` for paths that are not the model's file (a saved model's prefix).
    `ge_hub.load` asks claiming frontends before catch-alls (frontends that declare no
    claim), and two frontends that claim and accept the same model are an error naming
    both, never a choice by plugin order. An `accepts` that raises is skipped and named.

    If loading a model can run code hidden in it (a pickle), set `executes_code(model)
    -> bool`: ge-hub then refuses the model unless the user passes `trusted=True`, and
    calls `load(model, trusted=True, ...)` when they do. If `load` has a parameter named
    `ctx`, it receives the load's context; look ops up in `ctx.registry`.
    """


@hookspec
def register_passes(registry: Registry) -> None:
    """Add compiler passes with `registry.add_pass(graph_pass)`.

    Called once, when the first compiler pipeline is built. `graph_pass` is a
    `ge_hub.registry.PassSpec`: a unique name, the stage it joins (one of
    `ge_hub.registry.PASS_STAGES`) and a function `Graph -> PassResult`; a function
    with a parameter named `ctx` also receives the compilation's `PassContext`
    (options, registry, device, rule log). Passes in a stage run in registration order;
    users can disable any pass by name (`ge-hub run --disable-pass NAME`).

    A fusion is best written as rewrite rules and registered as a rule pass, which
    leaves safety (escaping intermediates, cycles, types, verification) to the engine
    and lets users switch each rule by name (`--pass-config`):

        from ge_hub.plugin import rewrite

        rule = rewrite.Rule(pattern, replacement, check=check, name="acme.gemm_relu")
        registry.add_pass(rewrite.rule_pass("acme-fusions", [rule], stage="fuse"))

    `ge-hub passes` lists every pass with its plugin and rules.
    """


@hookspec
def register_commands(registry: Registry) -> None:
    """Add `ge-hub` subcommands with `registry.add_command(command)`.

    Called once, when the `ge-hub` command line is parsed. `command` is a
    `ge_hub.registry.Command`: a name, a one-line help, a function that adds arguments
    to an `argparse.ArgumentParser`, and a function `run(args) -> int` returning the
    exit status.
    """
