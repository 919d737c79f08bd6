"""The zoo table: every zoo model through both ge-torch paths, against eager.

    python plugins/ge-torch/benchmarks/zoo_report.py [--models mlp,resnet18]

For `torch.compile(backend="ge")` (static shapes, and dynamic=True over batch sizes 2
and 3) and for the ahead-of-time path (`ge_hub.load` + `ge_hub.compile`), prints a
Markdown row per model and path: graphs Dynamo produced, ATen ops in ge-hub out of all,
steps of the ge-hub plans (and how many of them run an op's NumPy reference), the ops
that fell back to PyTorch, and the largest relative error against eager
(max |ge - eager| / max |eager|).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import ge_hub  # noqa: E402
import zoo  # noqa: E402

from ge_torch.backend import GeBackend  # noqa: E402

RECURRENT = {"lstm", "gru"}


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.abs().max().item() or 1.0
    return (actual.double() - expected.double()).abs().max().item() / scale


def _fallback_text(counter) -> str:
    return ", ".join(f"{op.removeprefix('aten.')} x{n}" for op, n in counter.most_common()) or "-"


def backend_row(name: str, dynamic: bool) -> list[str]:
    model = zoo.build(name)
    reports: list = []
    torch._dynamo.reset()
    error = 0.0
    with torch.no_grad(), torch._dynamo.config.patch(allow_rnn=name in RECURRENT):
        compiled = torch.compile(model, backend=GeBackend(reports=reports),
                                 dynamic=True if dynamic else None)
        for batch in ((2, 3) if dynamic else (2,)):
            inputs = zoo.example_inputs(name, batch=batch, seed=batch)
            error = max(error, relative_error(compiled(*inputs), model(*inputs)))
    fallback: collections.Counter = collections.Counter()
    for report in reports:
        fallback.update(report.fallback_ops)
    aten = sum(r.aten_nodes for r in reports)
    in_ge = sum(r.ge_nodes for r in reports)
    steps = sum(r.ge_steps for r in reports)
    reference = sum(r.reference_steps for r in reports)
    path = "backend, dynamic (B=2,3)" if dynamic else "backend"
    return [name, path, str(len(reports)), f"{in_ge}/{aten}", f"{steps} ({reference})",
            _fallback_text(fallback), f"{error:.1e}"]


def export_row(name: str) -> list[str]:
    model = zoo.build(name)
    inputs = zoo.example_inputs(name, batch=2)
    with torch.no_grad():
        expected = model(*inputs)
    graph = ge_hub.load(model, example_inputs=inputs)
    compiled = ge_hub.compile(graph)
    (actual,) = compiled.run([x.numpy() for x in inputs])
    summary = compiled.summary()
    torch_ops = collections.Counter(graph.attrs.get("torch_ops", {}))
    return [name, "export (AOT)", "-", "-", f"{summary['steps']} ({summary['fallback_steps']})",
            _fallback_text(torch_ops), f"{relative_error(torch.from_numpy(actual), expected):.1e}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: all)")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else [e.name for e in zoo.ZOO]
    header = ["model", "path", "graphs", "ATen ops in ge-hub", "ge-hub steps (reference)",
              "fallback ops", "max rel. error"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in names:
        for row in (backend_row(name, False), backend_row(name, True), export_row(name)):
            print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
