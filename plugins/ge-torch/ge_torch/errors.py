"""Exceptions of ge-torch.

`Unsupported` is not a failure: a converter raises it when ge-hub cannot reproduce a
node's semantics exactly (a dtype, an argument combination), and the backend then runs
that node in PyTorch. `ConversionError` is a real error of the ahead-of-time path, where
no PyTorch is left to fall back on.
"""

from __future__ import annotations

from ge_hub.errors import GeHubError


class Unsupported(GeHubError, NotImplementedError):
    """ge-hub cannot run this node with eager's exact semantics; run it in PyTorch."""


class ConversionError(GeHubError, ValueError):
    """A PyTorch program cannot become a ge-hub graph; the message names the nodes."""
