"""`ge_torch.explain(model, *inputs)`: what `torch.compile(model, backend="ge")` does with
a model: how many graphs Dynamo captures and why it broke between them, and for each
graph how many ATen ops run in ge-hub (in how many partitions, as how many ge-hub steps,
of which how many still use an op's NumPy reference), and which ops fall back to
PyTorch, how often and why.

    >>> print(ge_torch.explain(model, x))
    ge-torch: 1 graph, 0 graph breaks
    graph  aten ops  in ge-hub  partitions  ge-hub steps  reference steps  in PyTorch
    0      8         7          2           9             0                aten.cumprod.default x1
    fallback: aten.cumprod.default x1 (no converter)
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import torch

from ge_torch.backend import GeBackend
from ge_torch.lowering import GraphReport


@dataclasses.dataclass
class Explanation:
    graphs: list[GraphReport]
    graph_breaks: list[str]

    @property
    def fallback_ops(self) -> collections.Counter:
        """Every op that ran in PyTorch, over all graphs, with its count."""
        total: collections.Counter = collections.Counter()
        for report in self.graphs:
            total.update(report.fallback_ops)
        return total

    @property
    def fallback_reasons(self) -> dict[str, str]:
        reasons: dict[str, str] = {}
        for report in self.graphs:
            for op, why in report.fallback_reasons.items():
                reasons.setdefault(op, why)
        return reasons

    def __str__(self) -> str:
        lines = [f"ge-torch: {len(self.graphs)} graph{'s' * (len(self.graphs) != 1)}, "
                 f"{len(self.graph_breaks)} graph break"
                 f"{'s' * (len(self.graph_breaks) != 1)}"]
        lines += [f"  break: {reason}" for reason in self.graph_breaks]
        header = ("graph", "aten ops", "in ge-hub", "partitions", "ge-hub steps",
                  "reference steps", "in PyTorch")
        rows = [header] + [
            (str(i), str(r.aten_nodes), str(r.ge_nodes), str(r.partitions), str(r.ge_steps),
             str(r.reference_steps),
             ", ".join(f"{op} x{n}" for op, n in r.fallback_ops.most_common()) or "-")
            for i, r in enumerate(self.graphs)]
        widths = [max(len(row[c]) for row in rows) for c in range(len(header) - 1)]
        for row in rows:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths))
                         + "  " + row[-1])
        reasons = self.fallback_reasons
        for op, count in self.fallback_ops.most_common():
            lines.append(f"fallback: {op} x{count} ({reasons.get(op, '?')})")
        return "\n".join(lines)


def explain(model: Any, *inputs: Any, dynamic: bool | None = None, graph_breaks: bool = True,
            **kwargs: Any) -> Explanation:
    """Compile `model` with the ge backend, run it once on `inputs` under no_grad, and
    report what went where. `graph_breaks=False` skips Dynamo's own explanation (which
    traces the model a second time)."""
    breaks: list[str] = []
    with torch.no_grad():
        if graph_breaks:
            dynamo_view = torch._dynamo.explain(model)(*inputs, **kwargs)
            # The first line of each reason says what broke the graph; the rest is hints.
            breaks = [str(getattr(b, "reason", b)).strip().splitlines()[0]
                      for b in dynamo_view.break_reasons]
        reports: list[GraphReport] = []
        compiled = torch.compile(model, backend=GeBackend(reports=reports), dynamic=dynamic)
        compiled(*inputs, **kwargs)
    return Explanation(reports, breaks)
