"""The types of a control-flow body's inputs, from the node that runs the body.

ONNX lets a Loop or Scan body leave its inputs untyped (function bodies such as Range's
and LinearAttention's do): their types follow from the node's own inputs. ge-hub values
always have a dtype, so the importer gives such an input the type worked out here:

- Loop: (iteration number int64[], condition bool[], then each v_initial's type);
- Scan (opset 9 on): (each state's type, then each scanned input's type without its
  scan axis);
- Scan-8: the same for one batch row: the batch axis 0 is gone too, and the scan axis
  is 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from ge_hub.plugin import DType, TensorType, Value


def body_input_types(proto: onnx.NodeProto, version: int,
                     inputs: Sequence[Value | None]) -> dict[str, list[TensorType | None]]:
    """Attribute name -> the types its body's inputs take (None where not known)."""
    if proto.op_type == "Loop":
        carried = [_type(v) for v in inputs[2:]]
        return {"body": [TensorType(DType.INT64, ()), TensorType(DType.BOOL, ()), *carried]}
    if proto.op_type != "Scan":
        return {}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
    scanned_count = attrs.get("num_scan_inputs", 0)
    rows = [_drop_axis(_type(v), 0) for v in inputs[1:]] if version < 9 \
        else [_type(v) for v in inputs]
    # Malformed attributes leave the body untyped; the op's own checks report them.
    if not isinstance(scanned_count, int) or not 0 <= scanned_count <= len(rows):
        return {}
    if version < 9:
        axes = [0] * scanned_count  # axis 1 of the node's input is axis 0 of a row
    else:
        axes = attrs.get("scan_input_axes") or [0] * scanned_count
        if not isinstance(axes, list) or not all(isinstance(a, int) for a in axes):
            return {}
    states = len(rows) - scanned_count
    if len(axes) != scanned_count:
        return {}
    slices = [_drop_axis(t, axis) for t, axis in zip(rows[states:], axes)]
    return {"body": [*rows[:states], *slices]}


def _type(value: Value | None) -> TensorType | None:
    return None if value is None else value.type


def _drop_axis(t: TensorType | None, axis: int) -> TensorType | None:
    if t is None or t.shape is None:
        return t
    if not -len(t.shape) <= axis < len(t.shape):
        return None
    axis %= len(t.shape)
    return t.with_shape(t.shape[:axis] + t.shape[axis + 1:])
