"""Accuracy comparison: ge-hub's values against a reference's, matched by value name.

`compare_model(path_or_graph, feeds, against=...)` (and `ge-hub compare MODEL`) runs the
model in ge-hub, capturing every value each step produces (`ge_hub.dump`, so values
computed in place are compared as produced), and in a reference:

- "reference": ge-hub's NumPy reference evaluator on the loaded graph (always there);
- a frontend's own runner (`Frontend.reference`, `reference_name`): ONNX Runtime for
  .onnx files with ge-onnx, the source framework (torch for .pt2 files with ge-torch;
  Paddle Inference or a Layer with ge-paddle; MindSpore with ge-mindspore). A runner
  that returns only the model's outputs (Paddle, MindSpore: their runtimes expose no
  intermediate values by name) is compared on those, and the report says so.

Values are matched by name (a value that a compiler pass created, such as a fused
node's output, has no counterpart and is counted as unmatched). For each matched value:
the largest absolute error, the relative error (largest absolute error over the largest
reference magnitude), the cosine similarity, and whether every element is within
`atol + rtol * |reference|` (integers and booleans: equal). The first value out of
tolerance in ge-hub's execution order is the first divergence: where to look first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ge_hub.errors import GeHubError

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-4
BUILTIN_REFERENCE = "reference"


@dataclass
class ValueReport:
    value: str
    source_name: str | None       # the framework's name for it, when the frontend knows
    step: int | None
    op: str | None
    node: str | None
    shape: list[int]
    max_abs: float | None
    rel: float | None
    cosine: float | None
    ok: bool
    is_output: bool
    problem: str | None = None    # a shape or dtype mismatch, NaNs that differ
    precision: str | None = None  # of a product step: "bf16", "bf16x3" or "fp32" (its kernel's)


@dataclass
class Comparison:
    against: str
    rtol: float
    atol: float
    values: list[ValueReport] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)   # ge-hub values the reference lacks
    # what the reference could not give, e.g. "outputs only" (its framework exposes no
    # intermediate values by name)
    note: str | None = None
    # ge-hub's precision mode ("fp32", "bf16", "mixed") and its product steps in bf16 and
    # in bf16x3
    precision: str = "fp32"
    bf16_steps: int = 0
    bf16x3_steps: int = 0

    @property
    def first_divergence(self) -> ValueReport | None:
        return next((v for v in self.values if not v.ok), None)

    @property
    def outputs_ok(self) -> bool:
        return all(v.ok for v in self.values if v.is_output)

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return {"against": self.against, "rtol": self.rtol, "atol": self.atol,
                "matched": len(self.values), "unmatched": len(self.unmatched),
                "outputs_ok": self.outputs_ok, "note": self.note,
                "precision": self.precision, "bf16_steps": self.bf16_steps,
                "bf16x3_steps": self.bf16x3_steps,
                "first_divergence": first.value if first else None,
                "values": [asdict(v) for v in self.values]}

    def format(self, everything: bool = False, limit: int = 40) -> str:
        first = self.first_divergence
        lines = [f"ge-hub against {self.against}: {len(self.values)} values matched by name, "
                 f"{len(self.unmatched)} ge-hub values without a reference value; "
                 f"tolerance atol {self.atol:g} + rtol {self.rtol:g}"]
        if self.precision != "fp32":
            split = (f" and {self.bf16x3_steps} in bf16x3 (about 2e-5)" if self.bf16x3_steps
                     else "")
            lines.append(f"  (ge-hub in precision {self.precision}: {self.bf16_steps} product "
                         f"steps in bf16{split}, marked below; their values differ from an "
                         "fp32 reference by bf16's rounding, about 4e-3 relative per input)")
        if self.note:
            lines.append(f"  ({self.note})")
        rows = self.values
        if not everything and len(rows) > limit:
            keep = {id(v) for v in rows if not v.ok or v.is_output}
            keep |= {id(v) for v in rows[:limit - len(keep)]}
            rows = [v for v in rows if id(v) in keep]
        lines.append(f"  {'':2}{'max abs':>10} {'rel':>10} {'cosine':>9}  value (op, node)")
        for v in rows:
            mark = ">>" if v is first else ("!!" if not v.ok else "  ")
            name = v.value + (f" [{v.source_name}]" if v.source_name else "")
            op = f"{v.op} in {v.precision}" if v.precision not in (None, "fp32") else v.op
            where = f" ({op}, {v.node})" if v.op else " (input)" if v.step is None else ""
            output = "  <- output" if v.is_output else ""
            figures = (f"{_num(v.max_abs):>10} {_num(v.rel):>10} {_num(v.cosine, 6):>9}"
                       if v.problem is None else f"{v.problem:>31}")
            lines.append(f"  {mark}{figures}  {name}{where}{output}")
        if len(rows) < len(self.values):
            lines.append(f"  ... {len(self.values) - len(rows)} more within tolerance "
                         "(--all lists every value)")
        if len(self.unmatched) > len(self.values) and not self.note:
            lines.append("  (values that fusion passes made have no reference counterpart; "
                         "--disable-pass fuse_conv_epilogue and the like keep the model's own)")
        if first is None:
            lines.append("every matched value is within tolerance")
        else:
            where = f"{first.op} node {first.node!r}" if first.op else "an input"
            lines.append(f"first divergence: {first.value} (output of {where}, step "
                         f"{first.step})")
        lines.append("outputs: " + ("within tolerance" if self.outputs_ok
                                    else "OUT OF TOLERANCE"))
        return "\n".join(lines)


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if digits != 3 else f"{value:.3e}"


def compare_arrays(ours: np.ndarray, reference: np.ndarray, rtol: float = DEFAULT_RTOL,
                   atol: float = DEFAULT_ATOL) -> tuple[float | None, float | None,
                                                        float | None, bool, str | None]:
    """(max abs error, relative error, cosine similarity, within tolerance, problem)."""
    ours, reference = np.asarray(ours), np.asarray(reference)
    if ours.shape != reference.shape:
        return None, None, None, False, f"shape {list(ours.shape)} vs {list(reference.shape)}"
    if ours.size == 0:
        return 0.0, 0.0, 1.0, True, None
    exact = not (np.issubdtype(ours.dtype, np.inexact) or
                 np.issubdtype(reference.dtype, np.inexact))
    a = ours.astype(np.float64)
    b = reference.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if (nan_a != nan_b).any():
        return None, None, None, False, f"NaN in {int(nan_a.sum())} vs {int(nan_b.sum())}"
    a, b = np.where(nan_a, 0, a), np.where(nan_b, 0, b)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - b)
        diff = np.where(a == b, 0, diff)  # equal infinities
        max_abs = float(diff.max())
        scale = float(np.abs(b[np.isfinite(b)]).max(initial=0.0))
        rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        cosine = float(np.dot(a.ravel(), b.ravel()) / (na * nb)) if na and nb else \
            (1.0 if na == nb else 0.0)
        ok = bool((diff == 0).all()) if exact else bool((diff <= atol + rtol * np.abs(b)).all())
    return max_abs, rel, cosine, ok, None


def compare_dump(dump, reference: Mapping[str, np.ndarray], output_names: Sequence[str], *,
                 against: str, source_names: Mapping[str, str] | None = None,
                 rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                 products: Mapping[str, str] | None = None) -> Comparison:
    """Compare a `ge_hub.dump.Dump` (kept in memory) with reference values by name;
    `products` (node name -> "bf16", "bf16x3" or "fp32", `summary()["precision"]["products"]`)
    marks each product's value with the precision it ran in."""
    source_names = source_names or {}
    products = products or {}
    outputs = set(output_names)
    result = Comparison(against, rtol, atol)
    for entry in dump.entries:
        name = entry["value"]
        if entry["step"] is None:
            continue  # a graph input: the same feed on both sides
        if name not in reference:
            result.unmatched.append(name)
            continue
        max_abs, rel, cosine, ok, problem = compare_arrays(dump.arrays[name], reference[name],
                                                           rtol, atol)
        result.values.append(ValueReport(name, source_names.get(name), entry["step"],
                                         entry["op"], entry["node"], entry["shape"], max_abs,
                                         rel, cosine, ok, name in outputs, problem,
                                         products.get(entry["node"])))
    missing = outputs - {v.value for v in result.values}
    for name in sorted(missing):  # an output must be compared: no reference is a failure
        result.values.append(ValueReport(name, source_names.get(name), None, None, None, [],
                                         None, None, None, False, True,
                                         "no reference value"))
    return result


def reference_values(graph, feeds: Mapping[str, np.ndarray], against: str, *, model=None,
                     trusted: bool = False, registry=None) -> dict[str, np.ndarray]:
    """Every value `against` computes for `graph` on `feeds`, by ge-hub value name."""
    if against == BUILTIN_REFERENCE:
        from ge_hub.reference import evaluate

        names = [v.name for n in graph.nodes for v in n.outputs if v is not None]
        names = list(dict.fromkeys(names + list(graph.output_names)))
        return dict(zip(names, evaluate(graph, dict(feeds), names)))
    if registry is None:
        from ge_hub.plugins import get_registry

        registry = get_registry()
    runners = {f.reference_name: f for f, _ in registry.frontends() if f.reference is not None}
    frontend = runners.get(against)
    if frontend is None:
        known = ", ".join(sorted([BUILTIN_REFERENCE, *runners]))
        raise GeHubError(f"no installed plugin runs models for --against {against!r}; "
                         f"available here: {known}")
    if model is None:
        raise GeHubError(f"--against {against}: needs the model itself (a file), not a graph")
    if not frontend.accepts(model):
        raise GeHubError(f"--against {against}: the {frontend.name} frontend does not take "
                         f"{model!r}")
    values = frontend.reference(model, dict(feeds), graph, trusted=trusted)
    return {name: np.asarray(array) for name, array in values.items()}


def compare_model(compiled, graph, feeds: Mapping[str, np.ndarray], *,
                  against: str = BUILTIN_REFERENCE, model=None, trusted: bool = False,
                  rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                  progress=None) -> Comparison:
    """Run `compiled` (the CompiledModel of `graph`) and `against` on `feeds`; compare."""
    dump = compiled.dump(feeds, progress=progress)
    reference = reference_values(graph, feeds, against, model=model, trusted=trusted,
                                 registry=compiled.registry)
    precision = compiled.summary().get("precision") or {}
    result = compare_dump(dump, reference, graph.output_names, against=against,
                          source_names=graph.attrs.get("source_names"), rtol=rtol, atol=atol,
                          products=precision.get("products"))
    result.precision = precision.get("mode", "fp32")
    result.bf16_steps = int(precision.get("bf16_steps", 0))
    result.bf16x3_steps = int(precision.get("bf16x3_steps", 0))
    if result.unmatched and set(reference) <= set(graph.output_names):
        result.note = (f"{against} gives the model's outputs only: intermediate values are "
                       "not compared, so a divergence is located at the outputs")
    return result
