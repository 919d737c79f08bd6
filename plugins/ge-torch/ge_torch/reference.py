"""PyTorch as the reference of `ge-hub compare --against torch`.

The exported program is decomposed exactly as ge-torch's converter decomposes it, then
run node by node by `torch.fx.Interpreter`, keeping each node's tensor result. The
converter recorded which ge-hub value each FX node became
(`graph.attrs["source_names"]`), so the results come back under ge-hub's value names,
and `ge-hub compare` shows the FX names beside them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from ge_hub.plugin import UntrustedModelError


def run_torch(model: Any, feeds: Mapping[str, np.ndarray], graph,
              trusted: bool = False) -> dict[str, np.ndarray]:
    from ge_torch.decompositions import decomposition_table, lowering_mode
    from ge_torch.export import _classify_inputs

    if isinstance(model, torch.export.ExportedProgram):
        program = model
    elif isinstance(model, torch.nn.Module):
        example = tuple(torch.from_numpy(np.asarray(feeds[n])) for n in graph.input_names)
        with torch.no_grad():
            program = torch.export.export(model, example, strict=False)
    else:
        if not trusted:
            raise UntrustedModelError(
                f"refusing to open {os.fspath(model)!r} for --against torch: "
                "torch.export.load unpickles the archive; pass --trust-pickle only for a "
                "file from a source you trust")
        program = torch.export.load(model)
    with lowering_mode():
        program = program.run_decompositions(decomposition_table())
    gm = program.graph_module
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    frozen, user_inputs = _classify_inputs(program, program.graph_signature, placeholders)
    args = [frozen[p] if p in frozen else torch.from_numpy(np.array(feeds[p.name]))
            for p in placeholders]
    by_fx = {fx: name for name, fx in graph.attrs.get("source_names", {}).items()}
    values: dict[str, np.ndarray] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            results = result if isinstance(result, (tuple, list)) else (result,)
            for position, item in enumerate(results):
                key = node.name + (f"[{position}]" if len(results) > 1 else "")
                if key in by_fx and isinstance(item, torch.Tensor):
                    values[by_fx[key]] = item.detach().cpu().numpy()
            return result

    with torch.no_grad():
        outputs = Recorder(gm).run(*args)
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
    for name, tensor in zip(graph.output_names, tensors):
        values.setdefault(name, tensor.detach().cpu().numpy())
    return values
