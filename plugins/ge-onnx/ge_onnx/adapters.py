"""Version adapters: older ONNX forms of an op rewritten into ge-hub's core form.

ge-hub's core op set follows the newest ONNX opset. An ONNX op that changed its form
over the versions (an attribute that became an input, a semantics that moved) gets one
small function per difference, registered in `ADAPTERS` with the version that introduced
the new form:

    @adapter("Squeeze", below=13)       # Squeeze-1/11 had `axes` as an attribute
    def _squeeze_axes_to_input(node, b):
        ...

A node whose op version is lower than `below` passes through that adapter; adapters of
one op run in ascending `below` order, so a node of an old version climbs every step to
the newest form. An adapter edits the `OnnxNode` in place (its op, inputs, attrs) and
returns None, or builds the whole replacement itself with the builder `b` and returns
the values that stand for the node's outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ge_hub.plugin import OpError, Value

from ge_onnx.versions import OpVersion

if TYPE_CHECKING:
    from ge_onnx.importer import GraphBuilder

ALL_VERSIONS = 1 << 30  # `below` of an adapter that every version of its op passes through


@dataclasses.dataclass
class OnnxNode:
    """An ONNX node on its way into a ge-hub graph: attributes decoded, inputs resolved."""

    op_type: str
    name: str  # the ge-hub node name (unique in its graph)
    inputs: list[Value | None]
    attrs: dict[str, Any]
    outputs: list[str]  # ONNX output names; "" for an output the node does not ask for
    origin: OpVersion

    def describe(self) -> str:
        return self.origin.describe(self.name)

    def fail(self, message: str):
        raise OpError(f"{self.describe()}: {message}")

    def input(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def required(self, index: int, what: str) -> Value:
        """Input `index` (`what` names it in the error), which the node must give."""
        value = self.input(index)
        if value is None:
            self.fail(f"input {index} ({what}) is required, but the node "
                      f"{'leaves it empty' if index < len(self.inputs) else 'does not give it'}")
        return value

    def int_attr(self, name: str, value: Any) -> int:
        """`value` of attribute `name`, checked to be an int."""
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            self.fail(f"attribute {name!r} must be an int, got {value!r}")
        return int(value)

    def set_input(self, index: int, value: Value | None) -> None:
        while len(self.inputs) <= index:
            self.inputs.append(None)
        self.inputs[index] = value

    def wants_output(self, index: int) -> bool:
        return index < len(self.outputs) and self.outputs[index] != ""


# Deprecated ONNX ops whose adapters turn them into another core op.
RENAMED = {"Scatter": "ScatterElements", "Upsample": "Resize"}

Adapter = Callable[[OnnxNode, "GraphBuilder"], "Sequence[Value] | None"]
ADAPTERS: dict[str, list[tuple[int, Adapter]]] = {}


# Ops whose forms from before opset 7 (the oldest opset ge-onnx reads whole) have an
# adapter, so a model of opset 1-6 that uses them can still be read.
PRE_OPSET_7_FORMS: set[str] = set()


def adapter(*op_types: str, below: int) -> Callable[[Adapter], Adapter]:
    """Register an adapter for the versions of `op_types` lower than `below`."""

    def register(fn: Adapter) -> Adapter:
        if below == 7:
            PRE_OPSET_7_FORMS.update(op_types)
        for op_type in op_types:
            ADAPTERS.setdefault(op_type, []).append((below, fn))
            ADAPTERS[op_type].sort(key=lambda entry: entry[0])
        return fn

    return register


def adapt(node: OnnxNode, b: GraphBuilder) -> Sequence[Value] | None:
    """Run the node through every adapter its version needs; see the module docstring."""
    if node.origin.domain != "":
        return None
    for below, fn in ADAPTERS.get(node.op_type, ()):
        if node.origin.version < below:
            replaced = fn(node, b)
            if replaced is not None:
                return replaced
    return None


# --- helpers ------------------------------------------------------------------------


def _int64s(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _attr_to_input(node: OnnxNode, b: GraphBuilder, attr: str, index: int,
                   to_array: Callable[[Any], np.ndarray] = _int64s) -> None:
    """Move attribute `attr`, when present, to input `index` as a constant."""
    if attr in node.attrs:
        value = node.attrs.pop(attr)
        try:
            array = to_array(value)
        except (TypeError, ValueError, OverflowError) as exc:
            node.fail(f"attribute {attr!r} ({value!r}) cannot become input {index}: {exc}")
        node.set_input(index, b.constant(array, f"{node.name}.{attr}"))


def _scalar_like(node: OnnxNode, value: float) -> np.ndarray:
    """A scalar of the dtype of the node's first input."""
    return np.array(value).astype(node.required(0, "the data").type.dtype.numpy)


# --- opset 7: multidirectional broadcasting ---------------------------------------------

LEGACY_BROADCAST_OPS = ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal",
                        "Greater", "Less")


@adapter(*LEGACY_BROADCAST_OPS, below=7)
def _legacy_broadcast(node, b):
    # Before opset 7, B broadcast to A only with broadcast=1, matching A's dims from
    # `axis` on (default: A's trailing dims, as NumPy does). Give B trailing 1s so that
    # NumPy broadcasting lines it up the same way.
    node.attrs.pop("consumed_inputs", None)
    broadcast = node.attrs.pop("broadcast", 0)
    axis = node.attrs.pop("axis", None)
    if not broadcast or axis is None:
        return None
    a, other = node.required(0, "A"), node.required(1, "B")
    axis = node.int_attr("axis", axis)
    if a.type.rank is None or other.type.rank is None:
        node.fail("broadcast=1 with an axis (before opset 7) needs the ranks of both inputs")
    trailing = a.type.rank - axis % max(a.type.rank, 1) - other.type.rank
    if trailing > 0:
        axes = b.constant(_int64s(range(other.type.rank, other.type.rank + trailing)),
                          f"{node.name}.axes")
        (node.inputs[1],) = b.emit("Unsqueeze", [other, axes], hint=f"{node.name}.aligned")
    return None


@adapter("Gemm", below=7)
def _gemm_broadcast_attr(node, b):
    node.attrs.pop("broadcast", None)  # C always broadcasts (one way) since Gemm-7


@adapter("PRelu", below=7)
def _prelu_slope_per_channel(node, b):
    # PRelu-6 applied a 1-D slope along the channel dim (1); PRelu-7 broadcasts it like
    # NumPy (along the last dim). Shape it [C, 1, ...] so it stays per channel.
    node.attrs.pop("consumed_inputs", None)
    x, slope = node.required(0, "X"), node.required(1, "slope")
    if x.type.rank is None or x.type.rank <= 2 or slope.type.shape is None:
        return None
    if slope.type.rank == 1 and slope.type.shape[0] != 1:
        shape = b.constant(_int64s([-1] + [1] * (x.type.rank - 2)), f"{node.name}.shape")
        (node.inputs[1],) = b.emit("Reshape", [slope, shape], hint=f"{node.name}.slope")
    return None


@adapter("BatchNormalization", "Dropout", below=7)
def _drop_is_test(node, b):
    node.attrs.pop("is_test", None)  # inference is what ge-hub runs anyway
    node.attrs.pop("consumed_inputs", None)


@adapter("AveragePool", below=7)
def _average_pool_1(node, b):
    return None  # AveragePool-7 only added count_include_pad, whose default is AveragePool-1


# --- attributes that became inputs -----------------------------------------------------

REDUCE_OPS_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                 "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@adapter("ReduceSum", below=13)
@adapter(*REDUCE_OPS_18, below=18)
def _reduce_axes_to_input(node, b):
    _attr_to_input(node, b, "axes", 1)


@adapter("Squeeze", "Unsqueeze", below=13)
def _squeeze_axes_to_input(node, b):
    _attr_to_input(node, b, "axes", 1)


@adapter("Split", below=13)
def _split_sizes_to_input(node, b):
    _attr_to_input(node, b, "split", 1)


@adapter("Split", below=18)
def _split_into_equal_parts(node, b):
    # Before Split-18, omitting `split` meant "as many equal parts as outputs"; now the
    # number of parts is the attribute num_outputs.
    if node.input(1) is None:
        node.attrs["num_outputs"] = len(node.outputs)


@adapter("Clip", below=11)
def _clip_bounds_to_inputs(node, b):
    for index, attr in ((1, "min"), (2, "max")):
        _attr_to_input(node, b, attr, index, lambda v: _scalar_like(node, v))


@adapter("Pad", below=11)
def _pad_attrs_to_inputs(node, b):
    _attr_to_input(node, b, "pads", 1)
    _attr_to_input(node, b, "value", 2, lambda v: _scalar_like(node, v))


@adapter("Slice", below=10)
def _slice_attrs_to_inputs(node, b):
    for index, attr in ((1, "starts"), (2, "ends"), (3, "axes")):
        _attr_to_input(node, b, attr, index)


@adapter("TopK", below=10)
def _topk_k_to_input(node, b):
    _attr_to_input(node, b, "k", 1)


@adapter("Dropout", below=12)
def _dropout_ratio_to_input(node, b):
    _attr_to_input(node, b, "ratio", 1, lambda v: np.array(v, dtype=np.float32))
    if node.origin.version < 10 and node.wants_output(1):
        # Dropout-7's mask had the data's dtype; from Dropout-10 on it is bool.
        output, mask = b.emit("Dropout", node.inputs, node.attrs, hint=node.name,
                              output_names=[node.outputs[0], ""])
        (mask_as_data,) = b.emit("Cast", [mask], {"to": node.required(0, "data").type.dtype},
                                 output_names=[node.outputs[1]], hint=f"{node.name}.mask")
        return [output, mask_as_data]
    return None


# --- semantics that moved ---------------------------------------------------------------


@adapter("Softmax", "LogSoftmax", "Hardmax", below=13)
def _softmax_on_2d_view(node, b):
    # Before opset 13 these ops flattened the input to 2-D at `axis` (default 1) and
    # worked on the second dim; since 13 they work along `axis` (default -1). Where
    # `axis` is the last dim the two agree; elsewhere flatten, apply, reshape back.
    x = node.required(0, "input")
    axis = node.int_attr("axis", node.attrs.pop("axis", 1))
    rank = x.type.rank
    if rank is not None and axis % max(rank, 1) == rank - 1:
        node.attrs["axis"] = -1
        return None
    (flat,) = b.emit("Flatten", [x], {"axis": axis}, hint=f"{node.name}.flat")
    (applied,) = b.emit(node.op_type, [flat], {"axis": -1}, hint=f"{node.name}.2d")
    if x.type.is_static:
        shape = b.constant(_int64s(x.type.shape), f"{node.name}.shape")
    else:
        (shape,) = b.emit("Shape", [x], hint=f"{node.name}.shape")
    return b.emit("Reshape", [applied, shape], output_names=node.outputs, name=node.name)


@adapter("BatchNormalization", below=9)
def _batch_norm_spatial(node, b):
    if node.attrs.pop("spatial", 1) != 1:
        node.fail("spatial=0 (per-activation statistics) is not supported; ge-hub's "
                  "BatchNormalization normalizes per channel")


@adapter("BatchNormalization", below=14)
def _batch_norm_inference_outputs(node, b):
    # BatchNormalization-7/9 could also return the saved mean and variance of training;
    # BatchNormalization-14 returns the running statistics only in training_mode.
    node.attrs.pop("is_test", None)
    extra = [name for name in node.outputs[1:] if name]
    if extra:
        node.fail(f"training outputs {extra} are not supported (ge-hub runs inference; "
                  "BatchNormalization-14 and later return running statistics only with "
                  "training_mode=1)")


@adapter("Range", below=ALL_VERSIONS)
def _range_bounds_as_scalars(node, b):
    # Range takes scalars, yet producers, ONNX's own function bodies among them
    # (RMSNormalization, the window functions, Attention), feed it one-element 1-D
    # tensors, which onnxruntime and ONNX's reference accept. Reshape those to scalars.
    for index, value in enumerate(node.inputs):
        if value is None or value.type.shape != (1,):
            continue
        if value.const is not None:
            node.inputs[index] = b.constant(value.const.reshape(()), f"{node.name}.scalar")
        else:
            scalar_shape = b.constant(np.zeros(0, dtype=np.int64), f"{node.name}.scalar_shape")
            (node.inputs[index],) = b.emit("Reshape", [value, scalar_shape],
                                           hint=f"{node.name}.scalar")
    return None


@adapter("Scatter", below=ALL_VERSIONS)
def _scatter_is_scatter_elements(node, b):
    node.op_type = RENAMED["Scatter"]  # Scatter-9 was renamed ScatterElements in opset 11


@adapter("Upsample", below=ALL_VERSIONS)
def _upsample_to_resize(node, b):
    # Upsample (deprecated since opset 10) is Resize with output = floor(input * scale),
    # sampled at input coordinate output / scale: the asymmetric transform, nearest
    # rounding down.
    _attr_to_input(node, b, "scales", 1, lambda v: np.asarray(v, dtype=np.float32))
    return _resize_10(node, b, op_type="Upsample")


@adapter("Resize", below=11)
def _resize_10_to_11(node, b):
    return _resize_10(node, b, op_type="Resize")


def _resize_10(node, b, *, op_type):
    mode = node.attrs.get("mode", "nearest")
    if mode == "bilinear":  # an alias some Upsample-7 exporters wrote
        mode = "linear"
    if mode not in ("nearest", "linear"):
        node.fail(f"attribute 'mode' must be 'nearest' or 'linear' for {op_type}-"
                  f"{node.origin.version}, got {mode!r}")
    node.op_type = "Resize"
    node.attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric"}
    if mode == "nearest":
        node.attrs["nearest_mode"] = "floor"
    scales = node.input(1)
    node.inputs = [node.required(0, "X"), None, scales]
    return None


@adapter("Resize", below=13)
def _resize_empty_inputs_are_omitted(node, b):
    # Resize-11 required `roi` and `scales`, passing empty tensors for unused ones;
    # Resize-13 makes them optional.
    for index in (1, 2):
        value = node.input(index)
        if value is not None and value.type.shape is not None and 0 in value.type.shape:
            node.set_input(index, None)


@adapter("GroupNormalization", below=21)
def _group_norm_per_channel(node, b):
    # GroupNormalization-18 took scale and bias per group; 21 takes them per channel.
    x, scale, bias = node.required(0, "X"), node.required(1, "scale"), node.required(2, "bias")
    groups = node.attrs.get("num_groups")
    channels = None if x.type.shape is None or len(x.type.shape) < 2 else x.type.shape[1]
    if not isinstance(channels, int) or not isinstance(groups, int) or groups <= 0:
        node.fail("scale and bias per group (GroupNormalization-18) need a static channel "
                  f"count and num_groups to become per-channel; got input {x.type} and "
                  f"num_groups {groups}")
    for index, value in ((1, scale), (2, bias)):
        (column,) = b.emit("Unsqueeze", [value, b.constant(_int64s([1]), f"{node.name}.ax")],
                           hint=f"{node.name}.col")
        (tiled,) = b.emit("Expand", [column, b.constant(_int64s([groups, channels // groups]),
                                                        f"{node.name}.to")],
                          hint=f"{node.name}.tile")
        (flat,) = b.emit("Reshape", [tiled, b.constant(_int64s([channels]), f"{node.name}.c")],
                         hint=f"{node.name}.per_channel")
        node.inputs[index] = flat
    return None


@adapter("GridSample", below=20)
def _grid_sample_mode_names(node, b):
    # GridSample-16 (4-D only) called its modes "bilinear" and "bicubic"; GridSample-20
    # names them "linear" and "cubic", for any number of spatial dims.
    renamed = {"bilinear": "linear", "bicubic": "cubic"}
    mode = node.attrs.get("mode", "bilinear")
    node.attrs["mode"] = renamed.get(mode, mode) if isinstance(mode, str) else mode


@adapter("DFT", below=20)
def _dft_axis_to_input(node, b):
    # DFT-17 took `axis` as an attribute defaulting to 1; DFT-20 takes it as an input
    # whose default is -2, so the old default must be written out.
    axis = node.int_attr("axis", node.attrs.pop("axis", 1))
    node.set_input(2, b.constant(np.asarray(axis, dtype=np.int64), f"{node.name}.axis"))


@adapter("Scan", below=9)
def _scan_batch_axis(node, b):
    # Scan-8 runs each batch row (axis 0 of every input) on its own, scanning axis 1, with
    # optional per-row lengths. Without those lengths it is a Scan over the batch axis
    # whose body runs a Scan-9 over one row; with them, rows of different lengths would
    # need padded outputs, which no core op gives.
    from ge_hub.plugin import Graph

    if node.input(0) is not None:
        node.fail("sequence_lens (Scan-8 rows of their own lengths) is not supported; "
                  "leave it out when every row has the full length")
    values = node.inputs[1:]
    for key in ("body", "num_scan_inputs"):
        if key not in node.attrs:
            node.fail(f"attribute {key!r} is required")
    row = Graph(f"{node.name}.row")
    row_inputs = []
    for index, value in enumerate(values):
        if value is None:
            node.fail(f"input {index + 1} is empty; Scan-8 takes no optional inputs after "
                      "sequence_lens")
        if value.type.shape is None or not value.type.shape:
            node.fail(f"input {index + 1} must have a known rank of at least 1 (axis 0 is "
                      f"the batch), got {value.type}")
        row_inputs.append(row.add_input(f"row{index}", value.type.with_shape(
            value.type.shape[1:])))
    attrs = {"body": node.attrs["body"], "num_scan_inputs": node.attrs["num_scan_inputs"]}
    if node.attrs.get("directions") is not None:
        attrs["scan_input_directions"] = node.attrs["directions"]
    types = b.context.registry.get_op("Scan").infer_types([v.type for v in row_inputs], attrs,
                                           node_name=f"{node.name}.row")
    inner = row.add_node("Scan", row_inputs, types, attrs, name="scan_row")
    row.set_outputs(inner.outputs)
    return b.emit("Scan", values, {"body": row, "num_scan_inputs": len(values)},
                  output_names=node.outputs, name=node.name)
