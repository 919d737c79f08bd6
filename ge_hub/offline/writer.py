"""Writing a `.ghm` offline model file (layout: `ge_hub.offline.layout`).

`save(model, path)` stores every plan the CompiledModel holds, one per shape profile,
with the constants they read, the model's graph (portable files), and the metadata the
loader checks. Constants are stored once per distinct content: a plan constant equal to
a graph constant is read from the graph section, and the profiles share their prepacked
weights. The file is written next to its destination and renamed into place, so a model
mapped from an older file at that path keeps its bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ge_hub.errors import GraphError, SerializationError
from ge_hub.ir import symbolic
from ge_hub.offline import kernels, layout, portability, segments
from ge_hub.offline.plans import encode_plan, nested, split_key
from ge_hub.plan import KernelKind, Storage

# Compile options that travel with the file (the loader plans new shapes with them).
STORED_OPTIONS = ("disable_passes", "disable_rules", "enable_rules", "max_cached_plans",
                  "precision", "precision_ops")


def _digest(data) -> bytes:
    return hashlib.blake2b(data, digest_size=20).digest()


def _dims(shape) -> list | None:
    return None if shape is None else [symbolic.to_json(d) for d in shape]


def _interface(values) -> list[dict[str, Any]]:
    return [{"name": v.name, "dtype": v.type.dtype.value, "shape": _dims(v.type.shape)}
            for v in values]


def _graph_blobs(graph_bytes: bytes) -> dict[bytes, int]:
    """{digest of a constant's bytes: its offset in the serialized graph} for every tensor
    the `.gehub` bytes hold (found through their JSON: entries with dtype, shape, offset
    and nbytes, the offsets relative to the data section)."""
    from ge_hub.ir import serialize

    document, payload = serialize._split(graph_bytes)
    base = len(graph_bytes) - len(payload)
    found: dict[bytes, int] = {}
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if {"dtype", "shape", "offset", "nbytes"} <= item.keys() \
                    and isinstance(item["offset"], int) and isinstance(item["nbytes"], int):
                start = item["offset"]
                found.setdefault(_digest(payload[start:start + item["nbytes"]]), base + start)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def profile_name(key: tuple, input_names: Sequence[str]) -> str:
    """A default profile name from its input shapes: "x=1x3x224x224,y=4"."""
    shapes, values = split_key(key, len(input_names))
    name = ",".join(f"{n}={'x'.join(map(str, s)) or 'scalar'}"
                    for n, s in zip(input_names, shapes))
    return name + (f"+{len(values)}values" if values else "")


def save(model, path: str | os.PathLike, *, portable: bool = True,
         profile_names: Mapping[tuple, str] | None = None,
         source: str | os.PathLike | None = None, source_name: str | None = None) -> dict:
    """Write `model` (a CompiledModel) as an offline model file; returns its metadata.

    - `portable` (default True): keep the model's graph with its original weights, so
      the loader can plan shapes outside the stored profiles and re-pack weights for a
      CPU that cannot read the stored layouts (`ge_hub.offline.portability`).
    - `profile_names`: a name for each plan's cache key (default: made from the shapes).
    - `source`: the model file it was compiled from (its name and SHA-256 are recorded);
      without it, the graph's name and the SHA-256 of its serialized form (of the plans,
      for a model loaded from a non-portable file).
    """
    from ge_hub import _core
    from ge_hub._version import __version__
    from ge_hub.ir import serialize

    entries = model.plans()
    segmented = model.segmented
    if not entries and (segmented is None or not segmented.entries()):
        raise ValueError("the model has no compiled plan yet: compile it with input_shapes "
                         "or run it once before saving")
    names = dict(profile_names or {})
    used: set[str] = set()
    profiles = []
    for key, plan, rules in entries:
        name = names.get(key) or profile_name(key, model.input_names)
        if name in used:
            raise ValueError(f"two profiles are named {name!r}")
        used.add(name)
        profiles.append((name, key, plan, rules))

    if portable:
        try:
            model.graph.verify()
        except GraphError as exc:
            raise ValueError(f"the model's graph is not available to save ({exc}): a model "
                             "loaded from a non-portable file saves with portable=False") \
                from None
    graph_bytes = serialize.dumps(model.graph) if portable else b""
    if source is not None:
        with open(source, "rb") as f:
            source_hash = hashlib.file_digest(f, "sha256").hexdigest() \
                if hasattr(hashlib, "file_digest") else hashlib.sha256(f.read()).hexdigest()
        source_name = source_name or os.path.basename(os.fspath(source))
    else:
        source_hash = None  # the graph's own hash, below
        source_name = source_name or model.graph.name

    # Constants: a reference into the graph section when a graph constant has the same
    # bytes, else into the data section, each distinct content stored once.
    in_graph = _graph_blobs(graph_bytes) if portable else {}
    data_chunks: list[tuple[int, np.ndarray]] = []
    data_size = 0
    in_data: dict[bytes, int] = {}
    plan_docs = []

    def constant_refs(plan) -> list[dict]:
        refs = []
        read = {t.index for t in plan.tensors if t.storage is Storage.CONSTANT}
        for index, array in enumerate(plan.constants):
            if index not in read:
                # Replaced by its prepacked form and read by no step: not stored (a
                # portable file keeps the original in its graph, for re-packing).
                refs.append({"section": "data", "offset": 0, "dtype": _dtype(array),
                             "shape": [0], "nbytes": 0})
                continue
            refs.append(store(np.ascontiguousarray(array)))
        return refs

    def store(array: np.ndarray) -> dict:
        nonlocal data_size
        raw = memoryview(array.reshape(-1).view(np.uint8)) if array.size else b""
        digest = _digest(raw)
        if digest in in_graph:
            section, offset = "graph", in_graph[digest]
        else:
            if digest not in in_data:
                data_size += layout.padding(data_size)
                in_data[digest] = data_size
                data_chunks.append((data_size, array))
                data_size += array.nbytes
            section, offset = "data", in_data[digest]
        return {"section": section, "offset": offset, "dtype": _dtype(array),
                "shape": list(array.shape), "nbytes": int(array.nbytes)}

    for name, key, plan, rules in profiles:
        plan_docs.append(encode_plan(plan, key, name, rules, constant_refs))
    plans_document: dict[str, Any] = {"plans": plan_docs}
    if segmented is not None:
        plans_document["segments"] = segments.encode(segmented, store, constant_refs,
                                                     portable)

    if source_hash is None:
        # Without a source file: the serialized graph, or (a model loaded from a file
        # without one) the plans.
        try:
            identity = graph_bytes or serialize.dumps(model.graph)
        except SerializationError:
            identity = _json(plans_document)
        source_hash = hashlib.sha256(identity).hexdigest()
    plans_only = [sub for _, _, p, _ in profiles for sub in nested(p)]
    if segmented is not None:
        plans_only += segments.plans_of(segmented)
    layouts: set[str] = set()
    for plan in plans_only:
        layouts |= portability.layouts_of(plan)
    options = {k: model.options[k] for k in STORED_OPTIONS if k in model.options}
    meta = {
        "format": "ge-hub-offline",
        "format_version": layout.FORMAT_VERSION,
        "ge_hub_version": __version__,
        "kernel_abi": _core.ABI_VERSION,
        "source": {"name": source_name, "sha256": source_hash},
        "graph_name": model.graph.name,
        "inputs": _interface(model.graph.inputs),
        "outputs": _interface(model.graph.outputs),
        "value_inputs": list(model._value_inputs),
        "profiles": [_profile_summary(name, plan) for name, _, plan, _ in profiles],
        "kernels": kernels.record(plans_only),
        "portability": portability.record(layouts),
        "options": options,
        "portable": portable,
    }
    if segmented is not None:
        meta["segments"] = segments.summary(plans_document["segments"])
    sections = [("meta", _json(meta)), ("plans", _json(plans_document))]
    if portable:
        sections.append(("graph", graph_bytes))
    sections.append(("data", None))  # written chunk by chunk below
    _write(path, sections, data_chunks, data_size, portable, _core.ABI_VERSION, __version__)
    meta["file_bytes"] = os.path.getsize(path)
    return meta


def _dtype(array: np.ndarray) -> str:
    from ge_hub.ir.dtypes import DType

    return DType.from_numpy(array.dtype).value


def _json(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _profile_summary(name: str, plan) -> dict[str, Any]:
    python = [s for s in plan.steps if s.kind is not KernelKind.C]
    return {"name": name, "shapes": [list(s) for s in plan.signature],
            "steps": len(plan.steps), "python_steps": len(python),
            "python_ops": sorted({s.op for s in python}),
            "arena_bytes": plan.memory.arena_bytes,
            "constant_bytes": int(sum(np.asarray(plan.constants[i]).nbytes for i in
                                      {t.index for t in plan.tensors
                                       if t.storage is Storage.CONSTANT}))}


def _write(path, sections, data_chunks, data_size, portable, abi, version) -> None:
    # Offsets: header, table, then each section at a multiple of 64.
    table_size = len(sections) * layout.SECTION.size
    position = layout.HEADER.size + table_size
    placed = []
    for kind, body in sections:
        position += layout.padding(position)
        length = data_size if body is None else len(body)
        placed.append((kind, body, position, length))
        position += length
    file_size = position

    def data_crc() -> int:
        crc, at = 0, 0
        for offset, array in data_chunks:
            crc = layout.crc32_update(bytes(offset - at), crc)
            crc = layout.crc32_update(_raw(array), crc)
            at = offset + array.nbytes
        return layout.crc32_update(bytes(data_size - at), crc)

    table = b"".join(layout.SECTION.pack(kind.encode("ascii"), offset, length,
                                         data_crc() if body is None else layout.crc32(body), 0)
                     for kind, body, offset, length in placed)
    directory = os.path.dirname(os.path.abspath(os.fspath(path)))
    handle, temporary = tempfile.mkstemp(prefix=".ghm-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(bytes(layout.HEADER.size))  # the header, once the checksum is known
            crc = layout.crc32(table)
            f.write(table)
            at = layout.HEADER.size + table_size
            for _kind, body, offset, length in placed:
                pad = bytes(offset - at)
                f.write(pad)
                crc = layout.crc32_update(pad, crc)
                if body is not None:
                    f.write(body)
                    crc = layout.crc32_update(body, crc)
                else:
                    inner = 0
                    for chunk_offset, array in data_chunks:
                        gap = bytes(chunk_offset - inner)
                        f.write(gap)
                        crc = layout.crc32_update(gap, crc)
                        raw = _raw(array)
                        f.write(raw)
                        crc = layout.crc32_update(raw, crc)
                        inner = chunk_offset + array.nbytes
                at = offset + length
            f.seek(0)
            f.write(layout.pack_header(
                abi=abi, flags=layout.FLAG_PORTABLE if portable else 0, sections=len(placed),
                file_size=file_size, table_crc=layout.crc32(table), crc=crc,
                ge_hub_version=version))
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _raw(array: np.ndarray):
    return memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8)) \
        if array.size else b""
