"""Which ONNX opsets ge-onnx reads and writes, and which version of an op a node means.

A model imports an opset per domain ("" or "ai.onnx": the ONNX op set). The version of
one node's op is the newest `since_version` of that op at or below the model's opset;
version adapters (`ge_onnx.adapters`) key on it. Other domains ("com.acme") map to the
ge-hub domain of the same name, where a plugin may have registered ops; they carry no
version history ge-onnx knows of.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import onnx
import onnx.defs
from ge_hub.plugin import OpError, UnknownOpError

ONNX_DOMAIN = ""
ONNX_DOMAIN_ALIASES = ("", "ai.onnx")
OLDEST_OPSET = 7
NEWEST_OPSET = onnx.defs.onnx_opset_version()


def normalize_domain(domain: str) -> str:
    return ONNX_DOMAIN if domain in ONNX_DOMAIN_ALIASES else domain


def display_domain(domain: str) -> str:
    return "ai.onnx" if domain == ONNX_DOMAIN else domain


def opsets_of(model: onnx.ModelProto) -> dict[str, int]:
    """The model's opset per (normalized) domain, checked against what ge-onnx reads."""
    opsets: dict[str, int] = {}
    for entry in model.opset_import:
        opsets[normalize_domain(entry.domain)] = int(entry.version)
    if not opsets:  # IR version 1-2 models carry no opset_import; they are opset 1
        opsets[ONNX_DOMAIN] = 1
    version = opsets.get(ONNX_DOMAIN)
    if version is not None and version > NEWEST_OPSET:
        raise OpError(f"model imports opset {version} of domain 'ai.onnx'; ge-onnx reads "
                      f"opsets {OLDEST_OPSET} to {NEWEST_OPSET} (the newest the installed "
                      f"onnx {onnx.__version__} knows); upgrade onnx or convert the model "
                      "with onnx.version_converter.convert_version")
    return opsets


@dataclasses.dataclass(frozen=True)
class OpVersion:
    """An op as a node names it: domain, type, the model's opset and the op's version."""

    op_type: str
    domain: str
    opset: int
    version: int  # the op's since_version in effect (== opset for non-ONNX domains)
    schema: onnx.defs.OpSchema | None  # ONNX's own schema, for ONNX ops

    def describe(self, node_name: str) -> str:
        return (f"op {self.op_type!r} of domain {display_domain(self.domain)!r}, "
                f"version {self.version} (opset {self.opset}), node {node_name!r}")


def resolve(op_type: str, domain: str, opsets: dict[str, int], node_name: str,
            old_forms_read: Collection[str] = ()) -> OpVersion:
    """Find the version of `op_type` that a node of a model with `opsets` means.

    Models older than OLDEST_OPSET are read op by op: an op whose definition did not
    change before OLDEST_OPSET, or one in `old_forms_read` (an adapter turns its older
    form into the newer one), is fine; any other fails.
    """
    domain = normalize_domain(domain)
    if domain not in opsets:
        imported = ", ".join(f"{display_domain(d)!r}" for d in sorted(opsets))
        raise UnknownOpError(
            f"op {op_type!r} of domain {display_domain(domain)!r}, node {node_name!r}: the "
            f"model does not import that domain (it imports {imported})")
    opset = opsets[domain]
    if not onnx.defs.has(op_type, domain) and domain != ONNX_DOMAIN:
        return OpVersion(op_type, domain, opset, opset, None)
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        raise UnknownOpError(
            f"op {op_type!r} of domain {display_domain(domain)!r}, node {node_name!r}: ONNX "
            f"defines no such op at opset {opset}") from None
    found = OpVersion(op_type, domain, opset, int(schema.since_version), schema)
    if domain == ONNX_DOMAIN and opset < OLDEST_OPSET and op_type not in old_forms_read:
        _check_unchanged_since(found, node_name)
    return found


def _check_unchanged_since(found: OpVersion, node_name: str) -> None:
    try:
        later = onnx.defs.get_schema(found.op_type, OLDEST_OPSET, ONNX_DOMAIN).since_version
    except onnx.defs.SchemaError:
        later = None
    if later != found.version:
        raise OpError(f"{found.describe(node_name)}: this version predates opset "
                      f"{OLDEST_OPSET}, the oldest ge-onnx reads (opsets {OLDEST_OPSET} to "
                      f"{NEWEST_OPSET}); convert the model with "
                      "onnx.version_converter.convert_version first")
