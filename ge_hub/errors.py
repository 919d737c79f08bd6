"""Exceptions ge-hub raises, each a subclass of the builtin a caller would expect."""

from __future__ import annotations


class GeHubError(Exception):
    """Base of every ge-hub specific error."""


class GraphError(GeHubError, ValueError):
    """A graph breaks an IR invariant; the message names the offending node or value."""


class ValueDependentShapeError(GraphError):
    """A shape depends on the values of some graph input, not only on input shapes.

    `sources` names the values (of the graph being specialized) whose contents decide the
    shape; CompiledModel answers by specializing on the graph inputs they come from.
    """

    def __init__(self, message: str, sources: tuple[str, ...] = ()):
        super().__init__(message)
        self.sources = sources


class OpError(GeHubError, ValueError):
    """A node does not fit its op's schema: wrong input count, dtype, rank or attribute.

    The message names the op (and node when known), the argument, what was expected
    and what was given.
    """


class UnknownOpError(OpError, LookupError):
    """No schema is registered for an op name in a domain."""


class PluginError(GeHubError, RuntimeError):
    """A plugin failed to load or registered something invalid (a duplicate name)."""


class FrontendNotFoundError(GeHubError, ValueError):
    """No installed frontend accepts the model given to `ge_hub.load`."""


class AmbiguousFrontendError(GeHubError, ValueError):
    """Two frontends with the same claim on a model both accept it; the message names
    both and their plugins (ge-hub never picks one by plugin order)."""


class UntrustedModelError(GeHubError, PermissionError):
    """The model's format can execute code when loaded (a pickle), and the caller did not
    say it trusts the file (`ge_hub.load(path, trusted=True)`, `ge-hub run --trust-pickle`)."""


class SerializationError(GeHubError, ValueError):
    """A serialized graph is malformed or from an unknown format version."""


class LimitError(OpError, GraphError):
    """A graph declares a size past ge-hub's limits (rank, elements per tensor, window
    coordinates; see `ge_hub.ops.limits`). The message names the node and the attribute,
    input or output at fault. An OpError when shape inference finds it, a GraphError for
    whoever checks a compiled graph: it is both."""


class OfflineModelError(GeHubError, ValueError):
    """An offline model file (`.ghm`, `ge_hub.offline`) cannot be loaded: truncated, a
    checksum mismatch, a wrong magic, a newer format or kernel ABI, a section outside the
    file, an unknown kernel, a missing plugin, or layouts this CPU cannot run. The message
    names the file and the problem."""


class ProfileNotCompiledError(GeHubError, ValueError):
    """An offline model was loaded with compiling switched off (`load_compiled(...,
    allow_compile=False)`, `ge-hub run --no-compile`) and run on input shapes that match
    none of its compiled profiles; the message lists the profiles."""


class IntegerDivisionByZeroError(OpError, ZeroDivisionError):
    """An integer op divides by zero (Div, Mod, Pow of 0 to a negative power): a ZeroDivisionError
    for callers of a reference, and a ge-hub OpError when it happens while compiling (a fold)."""
