"""Dumps of intermediate tensors: every value a step produces, as that step wrote it.

`CompiledModel.dump(inputs, directory, filter=...)` (and `ge-hub run --dump DIR
--dump-filter GLOB`) runs the plan once through the executor's per-step observer
(`Executor.run_traced`): right after each step, before any later step can reuse or
overwrite its memory (the planner computes values in place and shares arena bytes
between values whose lifetimes do not overlap), its outputs are copied. So a value is
dumped as it was produced, not as the arena holds it at the end.

Each value is saved as `<file-safe value name>.npy`, and `manifest.json` lists them in
step order: step, op, node, value name, dtype, shape, file. Graph inputs come first,
with step null; graph outputs written through a view come last. Other values the planner
turned into views of another value (a Reshape with no step of its own) are not dumped;
their source is.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MANIFEST = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class Dump:
    """The values captured by one run, in the order they were produced."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)   # when kept in memory
    outputs: list[np.ndarray] = field(default_factory=list)
    directory: str | None = None


def _matcher(filter: str | Sequence[str] | None) -> Callable[[str], bool]:
    if filter is None:
        return lambda name: True
    patterns = [filter] if isinstance(filter, str) else list(filter)
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


class _Files:
    """File-safe, unique file names for value names."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, name: str) -> str:
        stem = _UNSAFE.sub("_", name).lstrip(".") or "value"
        candidate, n = stem, 1
        while candidate.lower() in self.used:
            candidate = f"{stem}_{n}"
            n += 1
        self.used.add(candidate.lower())
        return candidate + ".npy"


def capture(executor, arrays: Sequence[np.ndarray], *, directory: str | None = None,
            filter: str | Sequence[str] | None = None, keep: bool | None = None,
            progress: Callable[[int, int], None] | None = None) -> Dump:
    """Run `executor` once on `arrays`, capturing every (matching) produced value.

    With `directory`, values are written there with a manifest; with `keep` (default:
    when there is no directory) they are also kept in `Dump.arrays` by value name.
    `progress(done_steps, total_steps)` is called after each step."""
    plan = executor.plan
    keep = directory is None if keep is None else keep
    matches = _matcher(filter)
    files = _Files()
    dump = Dump(directory=directory)
    if directory is not None:
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise ValueError(f"dump directory {directory!r} exists and is not a directory")
        os.makedirs(directory, exist_ok=True)

    # The plan names a graph output's tensor "<value>:output<i>"; dumps use value names.
    names = {t: plan.tensors[t].name for t in range(len(plan.tensors))}
    names.update(zip(plan.inputs, plan.input_names))
    names.update(zip(plan.outputs, plan.output_names))

    def record(step: int | None, t: int, array: np.ndarray) -> None:
        spec = plan.tensors[t]
        name = names[t]
        step_spec = plan.steps[step] if step is not None else None
        entry: dict[str, Any] = {
            "step": step, "op": step_spec.op if step_spec else None,
            "node": step_spec.node if step_spec else None, "value": name,
            "dtype": spec.dtype.value, "shape": list(spec.shape)}
        if directory is not None:
            entry["file"] = files(name)
            np.save(os.path.join(directory, entry["file"]), array, allow_pickle=False)
        if keep:
            dump.arrays[name] = array
        dump.entries.append(entry)

    for t, array in zip(plan.inputs, arrays):
        if matches(names[t]):
            record(None, t, np.array(array, copy=True))

    total = len(plan.steps)

    def observe(step: int, buffers) -> None:
        for t, buffer in zip(plan.steps[step].outputs, buffers):
            if t < 0 or buffer is None:
                continue
            spec = plan.tensors[t]
            if not matches(names[t]):
                continue
            array = np.frombuffer(buffer, spec.dtype.numpy).reshape(spec.shape).copy()
            record(step, t, array)
        if progress is not None:
            progress(step + 1, total)

    dump.outputs, _ = executor.run_traced(arrays, records=False, observer=observe)
    # A graph output that no step wrote under its own name (a step wrote a view of it, or
    # it is an input or constant passed through) is recorded from the returned array,
    # under the last step that wrote into that output's buffer.
    recorded = {entry["value"] for entry in dump.entries}
    writers = {plan.tensors[t].index: s for s, step in enumerate(plan.steps)
               for t in step.outputs if t >= 0 and plan.tensors[t].storage.value == "output"}
    for position, (t, array) in enumerate(zip(plan.outputs, dump.outputs)):
        if names[t] not in recorded and matches(names[t]):
            record(writers.get(position), t, np.array(array, copy=True))
    if directory is not None:
        with open(os.path.join(directory, MANIFEST), "w") as f:
            json.dump({"inputs": list(plan.input_names), "outputs": list(plan.output_names),
                       "values": dump.entries}, f, indent=1)
    return dump
