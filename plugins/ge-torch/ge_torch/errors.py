"""Exceptions of ge-torch.

`Unsupported` is not a failure: a converter raises it when ge-hub cannot reproduce a
node's semantics exactly (a dtype, an argument combination), and the backend then runs
that node in PyTorch. Everything else is an error and is raised, never hidden behind a
run in eager PyTorch: `ConverterError` (a converter failed), `LoweringError` (ge-hub
could not compile a converted graph), and `ConversionError` on the ahead-of-time path,
where no PyTorch is left to fall back on. The backend can be told to fall back on such
errors instead (`on_error="fallback"`); it then says so with a `FallbackWarning`.
"""

from __future__ import annotations

from typing import Any

from ge_hub.plugin import GeHubError


class Unsupported(GeHubError, NotImplementedError):
    """ge-hub cannot run this node with eager's exact semantics; run it in PyTorch."""


class ConversionError(GeHubError, ValueError):
    """A PyTorch program cannot become a ge-hub graph; the message names the nodes."""


class ConverterError(GeHubError, RuntimeError):
    """A converter failed on a node it claimed (an exception other than `Unsupported`, or
    a result whose dtype or shape differs from PyTorch's): a bug, never a silent fallback.

    `node` is the FX node, `reason` what went wrong."""

    def __init__(self, node: Any, reason: str):
        super().__init__(f"ge-torch: the converter of {node.target} failed on node "
                         f"{node.name}: {reason}")
        self.node = node
        self.reason = reason


class LoweringError(GeHubError, RuntimeError):
    """ge-hub could not run a graph ge-torch converted (it failed to compile it).

    With `torch.compile(..., options={"on_error": "fallback"})` the nodes run in PyTorch
    instead, with a `FallbackWarning`."""


class FallbackWarning(UserWarning):
    """Nodes run in PyTorch because of an error (`on_error="fallback"`); the message says
    which and why. Issued once per distinct reason."""
