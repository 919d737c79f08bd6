"""ge-torch: PyTorch models on ge-hub.

    torch.compile(model, backend="ge")          # JIT: Dynamo graphs lowered to ge-hub
    graph = ge_hub.load(model, example_inputs=(x,))   # AOT: torch.export -> ge-hub Graph
    graph = ge_torch.from_exported(exported_program)  # the same from an ExportedProgram
    print(ge_torch.explain(model, x))           # what runs in ge-hub, what in PyTorch

Importing ge_torch imports neither torch nor ge-hub's op set; each name below is loaded
on first use. `torch.compile` finds the backend through the `torch_dynamo_backends`
entry point, so `import ge_torch` is not needed for it.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ge_backend": ("ge_torch.backend", "ge_backend"),
    "GeBackend": ("ge_torch.backend", "GeBackend"),
    "explain": ("ge_torch.explanation", "explain"),
    "Explanation": ("ge_torch.explanation", "Explanation"),
    "from_exported": ("ge_torch.export", "from_exported"),
    "from_module": ("ge_torch.export", "from_module"),
    "decomposition_table": ("ge_torch.decompositions", "decomposition_table"),
    "Unsupported": ("ge_torch.errors", "Unsupported"),
    "ConversionError": ("ge_torch.errors", "ConversionError"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'ge_torch' has no attribute {name!r}")
