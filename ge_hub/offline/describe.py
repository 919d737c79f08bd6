"""What `ge-hub inspect` shows of a `.ghm` file, as one plain dict, and its text form.

Header and versions, the source model, inputs and outputs, the profiles (shapes, steps,
Python steps, arena, constant bytes), steps by kernel, the stored segment plans of a
model that runs in segments, the weights' sizes by section, the
plugins and CPU features the file needs, and whether this machine can run its plans as
stored.
"""

from __future__ import annotations

import collections
from typing import Any

from ge_hub.ir import symbolic
from ge_hub.offline import portability
from ge_hub.offline.reader import OfflineFile
from ge_hub.plan import KernelKind
from ge_hub.registry import BUILTIN_PLUGIN


def describe(file: OfflineFile) -> dict[str, Any]:
    meta = file.meta
    header = file.header
    stored = file.plans()
    kernels_by_profile = {}
    for name, _, plan, _ in stored:
        kernels_by_profile[name] = dict(collections.Counter(s.kernel for s in plan.steps)
                                        .most_common())
    profiles = []
    for name, _, plan, _ in stored:
        python = collections.Counter(s.op for s in plan.steps if s.kind is not KernelKind.C)
        profiles.append({
            "name": name,
            "inputs": {n: list(s) for n, s in zip(plan.input_names, plan.signature)},
            "steps": len(plan.steps),
            "python_steps": sum(python.values()),
            "python_ops": dict(python),
            "arena_bytes": plan.memory.arena_bytes,
            "streams": plan.n_streams,
            "events": len(plan.events),
            "constant_bytes": int(sum(c.nbytes for c in plan.constants)),
            "steps_by_kernel": kernels_by_profile[name],
        })
    table = meta.get("kernels") or {}
    plugins = sorted({f"{e.get('plugin')} {e.get('version', '')}".strip()
                      for e in table.values()
                      if isinstance(e, dict) and e.get("plugin") != BUILTIN_PLUGIN})
    record = meta.get("portability") or {}
    features = sorted({f for entry in (record.get("layouts") or {}).values()
                       if isinstance(entry, dict) for f in entry.get("cpu_features") or ()})
    problems = portability.problems(record)
    return {
        "segments": _segments(file),
        "file": file.path,
        "file_bytes": header.file_size,
        "format_version": header.version,
        "ge_hub_version": meta.get("ge_hub_version"),
        "kernel_abi": header.abi,
        "portable": header.portable,
        "checksum": "verified" if file.verified else "metadata only",
        "source": meta.get("source"),
        "graph": meta.get("graph_name"),
        "inputs": meta.get("inputs"),
        "outputs": meta.get("outputs"),
        "specialized_on_values": [meta["inputs"][i]["name"]
                                  for i in meta.get("value_inputs") or ()],
        "profiles": profiles,
        "sections": {kind: {"offset": off, "bytes": length}
                     for kind, (off, length, _) in sorted(file.sections.items(),
                                                          key=lambda kv: kv[1][0])},
        "weights": {"graph_bytes": file.sections.get("graph", (0, 0, 0))[1],
                    "data_bytes": file.sections["data"][1]},
        "kernels": len(table),
        "plugins_required": plugins,
        "gemm_kernel": record.get("gemm_kernel"),
        "layouts": record.get("layouts"),
        "cpu_features_required": features,
        "runs_here_as_stored": not problems,
        "portability_problems": problems,
        "options": meta.get("options"),
    }


def _segments(file: OfflineFile) -> dict[str, Any] | None:
    """A model that runs in segments: its segment graphs and each stored segment plan
    (segment, input shapes, steps, Python steps, arena, the ops it cuts at, kernels)."""
    from ge_hub.executor import registry_resolver
    from ge_hub.plugins import get_registry

    if "segments" not in file.plans_document():
        return None
    registry = get_registry()
    # Decoded and checked as loading does (without running anything).
    model = file.segments({}, registry, registry_resolver(registry), root_loader=None,
                          allow_compile=False)
    plans = []
    documents = file.plans_document()["segments"]["entries"]
    for doc, (segment, shapes, values, entry) in zip(documents, model.entries()):
        python = collections.Counter(s.op for s in entry.plan.steps
                                     if s.kind is not KernelKind.C)
        plans.append({
            "segment": doc["segment"],
            "inputs": {n: list(shape) for n, shape in zip(segment.input_names, shapes)},
            "specialized_on_values": len(values),
            "steps": len(entry.plan.steps),
            "python_steps": sum(python.values()),
            "python_ops": dict(python),
            "arena_bytes": entry.plan.memory.arena_bytes,
            "cut_ops": [c.op for c in entry.cuts],
            "steps_by_kernel": dict(collections.Counter(s.kernel for s in entry.plan.steps)
                                    .most_common()),
        })
    plans.sort(key=lambda p: p["segment"])
    return {"segments": len(file.plans_document()["segments"]["segments"]), "plans": plans}


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def _dim_text(dim: Any) -> str:
    try:
        return str(symbolic.from_json(dim))
    except ValueError:  # the reader refuses such a file; describing it shows what it holds
        return str(dim)


def _type(entry: dict) -> str:
    shape = entry.get("shape")
    dims = "?" if shape is None else ",".join(map(_dim_text, shape))
    return f"{entry.get('name')}: {entry.get('dtype')}[{dims}]"


def format_text(info: dict[str, Any]) -> str:
    source = info.get("source") or {}
    lines = [
        f"{info['file']}: ge-hub offline model, format {info['format_version']}, written by "
        f"ge-hub {info['ge_hub_version']} (kernel ABI {info['kernel_abi']}), "
        f"{_mib(info['file_bytes'])}, {'portable' if info['portable'] else 'not portable'}, "
        f"checksum {info['checksum']}",
        f"  source: {source.get('name')} (sha256 {str(source.get('sha256'))[:16]}...)",
        f"  inputs: {'; '.join(_type(e) for e in info['inputs'] or ())}",
        f"  outputs: {'; '.join(_type(e) for e in info['outputs'] or ())}",
    ]
    if info["specialized_on_values"]:
        lines.append(f"  specialized on the values of: {', '.join(info['specialized_on_values'])}")
    for p in info["profiles"]:
        shapes = ", ".join(f"{n}={'x'.join(map(str, s)) or 'scalar'}"
                           for n, s in p["inputs"].items())
        python = (f", {p['python_steps']} in Python ({', '.join(p['python_ops'])})"
                  if p["python_steps"] else ", 0 in Python")
        lines.append(f"  profile {p['name']}: {shapes}; {p['steps']} steps{python}; arena "
                     f"{_mib(p['arena_bytes'])}; constants {_mib(p['constant_bytes'])}")
        top = ", ".join(f"{k} {n}" for k, n in list(p["steps_by_kernel"].items())[:8])
        more = len(p["steps_by_kernel"]) - 8
        lines.append(f"    steps by kernel: {top}{f', ... {more} more' if more > 0 else ''}")
    segments = info.get("segments")
    if segments:
        lines.append(f"  runs in segments: {segments['segments']} segment graphs, "
                     f"{len(segments['plans'])} stored segment plans")
        for p in segments["plans"]:
            shapes = ", ".join(f"{n}={'x'.join(map(str, s)) or 'scalar'}"
                               for n, s in p["inputs"].items())
            cut = f"; cut at {', '.join(p['cut_ops'])}" if p["cut_ops"] else ""
            lines.append(f"    segment {p['segment']}: {shapes}; {p['steps']} steps, "
                         f"{p['python_steps']} in Python; arena {_mib(p['arena_bytes'])}{cut}")
    weights = info["weights"]
    lines.append(f"  weights: graph section {_mib(weights['graph_bytes'])}, data section "
                 f"{_mib(weights['data_bytes'])} (mapped, not copied, when loaded)")
    lines.append(f"  kernels: {info['kernels']}; plugins required: "
                 f"{', '.join(info['plugins_required']) or 'none'}")
    gemm = info.get("gemm_kernel") or {}
    lines.append(f"  compiled with GEMM micro-kernel {gemm.get('name')}; layouts "
                 f"{', '.join(info.get('layouts') or {}) or 'none'}; CPU features required: "
                 f"{', '.join(info['cpu_features_required']) or 'none'}")
    if info["runs_here_as_stored"]:
        lines.append("  this machine runs its plans as stored")
    else:
        lines.append(f"  this machine cannot run its plans as stored: "
                     f"{'; '.join(info['portability_problems'])}")
    return "\n".join(lines)
