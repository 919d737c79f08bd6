"""MindSpore primitives -> ge-hub ops.

A converter takes the builder, the node's data inputs (monads removed; ge-hub `Value`s
for tensors, Python values for constants) and the primitive's attributes, and returns
the node's value: a `Value`, or a tuple for primitives with several outputs. Legacy
primitives carry their settings as attributes (`Conv2D`'s `pad_list`, `MaxPool`'s
`kernel_size`); primitive-function ops take them as constant inputs (`MatMul`'s
transpose flags, `BatchNorm`'s epsilon), so converters read either.

In-place primitives (`InplaceAddExt`, `InplaceMuls`, `Assign`, ...) are converted as
their pure forms; `in_place_target` says which input they update, and the importer
makes later readers see the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from ge_hub.plugin import DType, Value

Converter = Callable[[Any, list, dict], Any]
CONVERTERS: dict[str, Converter] = {}

# In-place primitives whose pure form has another name; the others drop "Inplace".
_PURE_FORMS = {"Assign": "_Assign", "AssignAdd": "Add", "AssignSub": "Sub",
               "InplaceCopy": "_Assign"}


def converts(*names: str):
    def register(function: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = function
        return function
    return register


def in_place_target(op: str) -> int | None:
    """The input an in-place primitive updates (always its first), or None."""
    if op in _PURE_FORMS or (op.startswith("Inplace") and len(op) > 7):
        return 0
    return None


def lookup(op: str) -> Converter | None:
    if op in CONVERTERS:
        return CONVERTERS[op]
    if in_place_target(op) is not None:
        return CONVERTERS.get(_PURE_FORMS.get(op, op[len("Inplace"):]))
    return None


def supported() -> list[str]:
    """Every primitive name with a converter (in-place forms of these work too)."""
    return sorted(n for n in CONVERTERS if not n.startswith("_"))


# -- helpers ----------------------------------------------------------------------------

def ints(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, np.ndarray):
        return [int(v) for v in value.reshape(-1)]
    if isinstance(value, (tuple, list)):
        return [int(v) for v in value]
    return [int(value)]


def arg(inputs: list, index: int, attrs: dict, name: str, default: Any = None) -> Any:
    """A setting given as constant input `index` (primitive-function ops) or as the
    primitive's attribute `name` (legacy ops)."""
    if index < len(inputs) and inputs[index] is not None:
        value = inputs[index]
        if isinstance(value, Value):
            if value.const is None:
                raise ValueError(f"{name} must be a constant, got the tensor {value.name!r}")
            value = value.const
        return value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
    return attrs.get(name, default)


def i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def pair(values: Any, rank: int = 2) -> list[int]:
    """A kernel/stride/dilation attribute as `rank` spatial values: MindSpore writes
    (k,), (kh, kw) or (1, 1, kh, kw)."""
    found = ints(values)
    if len(found) == 1:
        return found * rank
    return found[-rank:]


def binary(b, op: str, x: Any, y: Any) -> Value:
    if not isinstance(x, Value) and isinstance(y, Value):
        x = b.tensor(x, like=y)
    x = b.tensor(x)
    return b.one(op, [x, b.tensor(y, like=x)])


# -- elementwise ------------------------------------------------------------------------

for _name, _op in {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "RealDiv": "Div",
                   "Maximum": "Max", "Minimum": "Min", "Pow": "Pow", "Equal": "Equal",
                   "Greater": "Greater", "GreaterEqual": "GreaterOrEqual", "Less": "Less",
                   "LessEqual": "LessOrEqual", "LogicalAnd": "And", "LogicalOr": "Or",
                   "Muls": "Mul", "Adds": "Add", "Subs": "Sub", "Divs": "Div",
                   "LessScalar": "Less", "GreaterScalar": "Greater", "ScalarAdd": "Add",
                   "ScalarSub": "Sub", "ScalarMul": "Mul", "ScalarDiv": "Div",
                   "_Mul": "Mul", "_Add": "Add"}.items():
    CONVERTERS[_name] = (lambda op: lambda b, inputs, attrs: binary(b, op, inputs[0],
                                                                     inputs[1]))(_op)


@converts("AddExt", "SubExt")
def _add_ext(b, inputs, attrs):
    x, y = inputs[0], inputs[1]
    alpha = inputs[2] if len(inputs) > 2 and inputs[2] is not None else 1
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        y = binary(b, "Mul", y, alpha)
    return binary(b, "Add" if b.current_op in ("AddExt", "InplaceAddExt") else "Sub", x, y)


@converts("NotEqual")
def _not_equal(b, inputs, attrs):
    return b.one("Not", [binary(b, "Equal", inputs[0], inputs[1])])


@converts("FloorDiv")
def _floor_div(b, inputs, attrs):
    return b.one("Floor", [binary(b, "Div", inputs[0], inputs[1])])


for _name, _op in {"ReLU": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Exp": "Exp",
                   "Log": "Log", "Sqrt": "Sqrt", "Neg": "Neg", "Abs": "Abs", "Erf": "Erf",
                   "Floor": "Floor", "Ceil": "Ceil", "Sin": "Sin", "Cos": "Cos",
                   "Reciprocal": "Reciprocal", "Round": "Round", "Sign": "Sign",
                   "LogicalNot": "Not", "HSwish": "HardSwish", "Softplus": "Softplus",
                   "Identity": "Identity", "Mish": "Mish", "Softsign": "Softsign"}.items():
    CONVERTERS[_name] = (lambda op: lambda b, inputs, attrs: b.one(op, [b.tensor(inputs[0])]))(
        _op)


@converts("ReLU6")
def _relu6(b, inputs, attrs):
    x = b.tensor(inputs[0])
    return b.one("Clip", [x, b.tensor(0.0, like=x), b.tensor(6.0, like=x)])


@converts("Rsqrt")
def _rsqrt(b, inputs, attrs):
    return b.one("Reciprocal", [b.one("Sqrt", [b.tensor(inputs[0])])])


@converts("Square")
def _square(b, inputs, attrs):
    x = b.tensor(inputs[0])
    return b.one("Mul", [x, x])


@converts("SiLU")
def _silu(b, inputs, attrs):
    x = b.tensor(inputs[0])
    return b.one("Mul", [x, b.one("Sigmoid", [x])])


@converts("HSigmoid")
def _hsigmoid(b, inputs, attrs):
    return b.one("HardSigmoid", [b.tensor(inputs[0])], {"alpha": 1 / 6, "beta": 0.5})


@converts("GeLU")
def _gelu(b, inputs, attrs):
    # The GeLU primitive is the tanh form (nn.GELU(approximate=True)); the exact form
    # reaches MINDIR already written out with Erf.
    return b.one("Gelu", [b.tensor(inputs[0])], {"approximate": "tanh"})


@converts("FastGeLU")
def _fast_gelu(b, inputs, attrs):
    # x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|)), which is x * sigmoid(1.702 x).
    x = b.tensor(inputs[0])
    return b.one("Mul", [x, b.one("Sigmoid", [binary(b, "Mul", x, 1.702)])])


@converts("LeakyReLU", "LeakyReLUExt")
def _leaky_relu(b, inputs, attrs):
    alpha = arg(inputs, 1, attrs, "alpha", attrs.get("negative_slope", 0.01))
    return b.one("LeakyRelu", [b.tensor(inputs[0])], {"alpha": float(alpha)})


@converts("Elu")
def _elu(b, inputs, attrs):
    return b.one("Elu", [b.tensor(inputs[0])], {"alpha": float(arg(inputs, 1, attrs, "alpha",
                                                                   1.0))})


@converts("Softmax")
def _softmax(b, inputs, attrs):
    axis = ints(arg(inputs, 1, attrs, "axis", -1))
    if len(axis) != 1:
        raise ValueError(f"Softmax over several axes {axis}")
    return b.one("Softmax", [b.tensor(inputs[0])], {"axis": axis[0]})


@converts("LogSoftmax")
def _log_softmax(b, inputs, attrs):
    axis = ints(arg(inputs, 1, attrs, "axis", -1))
    return b.one("LogSoftmax", [b.tensor(inputs[0])], {"axis": axis[0]})


@converts("Cast")
def _cast(b, inputs, attrs):
    to = arg(inputs, 1, attrs, "dst_type")
    return b.one("Cast", [b.tensor(inputs[0])], {"to": _dtype(to)})


def _dtype(value: Any) -> DType:
    """A MindSpore type id (an int in MINDIR: the TensorProto data type numbers)."""
    from ge_mindspore.tensors import numpy_dtype

    if isinstance(value, np.ndarray):  # a typed empty tensor stands for its dtype
        return DType.from_numpy(value.dtype)
    if isinstance(value, int):
        # MindSpore's TypeId numbering (mindspore/core/ir/dtype/type_id.h).
        by_type_id = {30: np.bool_, 32: np.int8, 33: np.int16, 34: np.int32, 35: np.int64,
                      37: np.uint8, 38: np.uint16, 39: np.uint32, 40: np.uint64,
                      42: np.float16, 43: np.float32, 44: np.float64}
        if value in by_type_id:
            return DType.from_numpy(np.dtype(by_type_id[value]))
        return DType.from_numpy(numpy_dtype(value, "Cast"))
    raise ValueError(f"cannot read a dtype from {value!r}")


@converts("Select")
def _select(b, inputs, attrs):
    x = b.tensor(inputs[1]) if isinstance(inputs[1], Value) else None
    y = b.tensor(inputs[2], like=x) if x is not None else b.tensor(inputs[2])
    x = x if x is not None else b.tensor(inputs[1], like=y)
    return b.one("Where", [b.tensor(inputs[0]), x, y])


@converts("Dropout", "DropoutExt")
def _dropout(b, inputs, attrs):
    x = b.tensor(inputs[0])
    return (x, x)  # inference: the input, and an unused mask


# -- shapes -----------------------------------------------------------------------------

@converts("Reshape")
def _reshape(b, inputs, attrs):
    shape = inputs[1]
    if isinstance(shape, Value):
        if shape.type.dtype is not DType.INT64:
            shape = b.one("Cast", [shape], {"to": DType.INT64})
    else:
        shape = b.const(i64(ints(shape)))
    return b.one("Reshape", [b.tensor(inputs[0]), shape])


@converts("Transpose")
def _transpose(b, inputs, attrs):
    return b.one("Transpose", [b.tensor(inputs[0])], {"perm": ints(arg(inputs, 1, attrs,
                                                                        "perm"))})


@converts("Flatten")
def _flatten(b, inputs, attrs):
    return b.one("Flatten", [b.tensor(inputs[0])], {"axis": 1})


@converts("FlattenExt")
def _flatten_ext(b, inputs, attrs):
    x = b.tensor(inputs[0])
    start, end = int(arg(inputs, 1, attrs, "start_dim", 0)), int(arg(inputs, 2, attrs,
                                                                   "end_dim", -1))
    rank = len(x.type.shape)
    start, end = start % max(rank, 1), end % max(rank, 1)
    if end == rank - 1:
        if start == 0:
            return b.one("Reshape", [x, b.const(i64([-1]))])
        return b.one("Flatten", [x], {"axis": start})
    dims = x.type.shape
    if any(not isinstance(d, int) for d in dims):
        raise ValueError(f"FlattenExt({start}, {end}) of dynamic shape {dims}")
    shape = [*dims[:start], -1, *dims[end + 1:]]
    return b.one("Reshape", [x, b.const(i64(shape))])


@converts("ExpandDims")
def _expand_dims(b, inputs, attrs):
    return b.one("Unsqueeze", [b.tensor(inputs[0]), b.const(i64(ints(arg(inputs, 1, attrs,
                                                                          "axis"))))])


@converts("Squeeze")
def _squeeze(b, inputs, attrs):
    axes = ints(arg(inputs, 1, attrs, "axis", ()))
    x = b.tensor(inputs[0])
    return b.one("Squeeze", [x, b.const(i64(axes)) if axes else None])


@converts("Concat")
def _concat(b, inputs, attrs):
    tensors = inputs[0] if isinstance(inputs[0], tuple) else tuple(inputs[:-1])
    axis = int(arg(inputs, 1, attrs, "axis", 0))
    values = [b.tensor(t) for t in tensors]
    return b.one("Concat", values, {"axis": axis})


@converts("Split")
def _split(b, inputs, attrs):
    axis = int(arg(inputs, 1, attrs, "axis", 0))
    count = int(arg(inputs, 2, attrs, "output_num", 1))
    outputs = b.emit("Split", [b.tensor(inputs[0])], {"axis": axis, "num_outputs": count},
                     num_outputs=count)
    return tuple(outputs)


@converts("Gather", "GatherV2")
def _gather(b, inputs, attrs):
    axis = int(arg(inputs, 2, attrs, "axis", 0))
    batch_dims = int(arg(inputs, 3, attrs, "batch_dims", 0))
    if batch_dims:
        raise ValueError(f"Gather with batch_dims={batch_dims}")
    return b.one("Gather", [b.tensor(inputs[0]), b.tensor(inputs[1])], {"axis": axis})


@converts("Tile")
def _tile(b, inputs, attrs):
    return b.one("Tile", [b.tensor(inputs[0]), b.const(i64(ints(arg(inputs, 1, attrs,
                                                                     "multiples"))))])


# -- reductions -------------------------------------------------------------------------

def _reduce(op: str, legacy: bool):
    def convert(b, inputs, attrs):
        x = b.tensor(inputs[0])
        axes = arg(inputs, 1, attrs, "axis")
        keep = bool(arg(inputs, 2, attrs, "keep_dims", attrs.get("keepdim", False)))
        dtype = inputs[3] if not legacy and len(inputs) > 3 else None
        axis_list = ints(axes) if axes is not None else []
        attrs_out = {"keepdims": int(keep)}
        result = b.one(op, [x, b.const(i64(axis_list)) if axis_list else None], attrs_out)
        if dtype is not None:
            result = b.one("Cast", [result], {"to": _dtype(dtype)})
        return result
    return convert


for _name, _op in {"ReduceMean": "ReduceMean", "ReduceSum": "ReduceSum",
                   "ReduceMax": "ReduceMax", "ReduceMin": "ReduceMin",
                   "ReduceProd": "ReduceProd"}.items():
    CONVERTERS[_name] = _reduce(_op, legacy=True)
CONVERTERS["MeanExt"] = _reduce("ReduceMean", legacy=False)


@converts("Max", "Min")
def _reduce_all(b, inputs, attrs):
    """Max(x) / Min(x): the whole tensor to a scalar."""
    return b.one("ReduceMax" if b.current_op == "Max" else "ReduceMin", [b.tensor(inputs[0])],
                 {"keepdims": 0})
CONVERTERS["SumExt"] = _reduce("ReduceSum", legacy=False)


# -- linear algebra ---------------------------------------------------------------------

def _swap_last(b, x: Value) -> Value:
    rank = len(x.type.shape)
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return b.one("Transpose", [x], {"perm": perm})


@converts("MatMul", "BatchMatMul")
def _matmul(b, inputs, attrs):
    x, y = b.tensor(inputs[0]), b.tensor(inputs[1])
    if bool(arg(inputs, 2, attrs, "transpose_a", attrs.get("transpose_x1", False))):
        x = _swap_last(b, x)
    if bool(arg(inputs, 3, attrs, "transpose_b", attrs.get("transpose_x2", False))):
        y = _swap_last(b, y)
    return b.one("MatMul", [x, y])


@converts("MatMulExt", "BatchMatMulExt", "Mm", "Bmm")
def _matmul_ext(b, inputs, attrs):
    return b.one("MatMul", [b.tensor(inputs[0]), b.tensor(inputs[1])])


@converts("Dense")
def _dense(b, inputs, attrs):
    x, w = b.tensor(inputs[0]), b.tensor(inputs[1])
    y = b.one("MatMul", [x, _swap_last(b, w) if len(w.type.shape) == 2 else w])
    if len(inputs) > 2 and inputs[2] is not None:
        y = b.one("Add", [y, b.tensor(inputs[2])])
    return y


@converts("BiasAdd")
def _bias_add(b, inputs, attrs):
    x, bias = b.tensor(inputs[0]), b.tensor(inputs[1])
    data_format = arg(inputs, 2, attrs, "data_format", attrs.get("format", "NCHW"))
    channels_first = data_format in (0, "NCHW", "NCDHW")
    rank = len(x.type.shape)
    if channels_first and rank > 2:
        bias = b.one("Reshape", [bias, b.const(i64([-1] + [1] * (rank - 2)))])
    return b.one("Add", [x, bias])


# -- convolution, pooling, normalization -----------------------------------------------

def _spatial_pads(pad_list: Any, rank: int) -> list[int]:
    """MindSpore's (top, bottom, left, right) as ge-hub's (begins..., ends...)."""
    pads = ints(pad_list)
    if len(pads) == 2 * rank:
        return pads[0::2] + pads[1::2]
    if len(pads) == 1:
        return pads * (2 * rank)
    return [0] * (2 * rank)


@converts("Conv2D")
def _conv2d(b, inputs, attrs):
    x, w = b.tensor(inputs[0]), b.tensor(inputs[1])
    if attrs.get("format", "NCHW") != "NCHW":
        raise ValueError(f"Conv2D in format {attrs.get('format')!r} (only NCHW)")
    mode = str(attrs.get("pad_mode", "valid")).lower()
    out = {"strides": pair(attrs.get("stride", 1)), "dilations": pair(attrs.get("dilation", 1)),
           "group": int(attrs.get("group", attrs.get("groups", 1))),
           "kernel_shape": [int(d) for d in w.type.shape[2:]]}
    pads = ints(attrs.get("pad_list")) or ints(attrs.get("pad"))
    if mode == "same" and not any(pads):
        out["auto_pad"] = "SAME_UPPER"
    else:
        out["pads"] = _spatial_pads(pads, 2)
    bias = b.tensor(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
    return b.one("Conv", [x, w, bias], out)


@converts("Conv2DExt", "ConvolutionExt", "Convolution")
def _conv_ext(b, inputs, attrs):
    x, w = b.tensor(inputs[0]), b.tensor(inputs[1])
    rank = len(w.type.shape) - 2
    bias = b.tensor(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
    strides = pair(arg(inputs, 3, attrs, "stride", 1), rank)
    padding = arg(inputs, 4, attrs, "padding", 0)
    dilations = pair(arg(inputs, 5, attrs, "dilation", 1), rank)
    groups = int(arg(inputs, 6, attrs, "groups", 1))
    out = {"strides": strides, "dilations": dilations, "group": groups,
           "kernel_shape": [int(d) for d in w.type.shape[2:]]}
    if isinstance(padding, str) or (isinstance(padding, int) and not isinstance(padding,
                                                                                 bool)
                                    and b.current_op == "Conv2DPadding"):
        out["auto_pad"] = "SAME_UPPER" if str(padding).lower() in ("same", "1") else "VALID"
    else:
        pads = pair(padding, rank)
        out["pads"] = pads + pads
    return b.one("Conv", [x, w, bias], out)


# MindSpore's PadMode numbering, for primitive-function pools that take it as an input.
_PAD_MODES = {0: "PAD", 1: "SAME", 2: "VALID"}


def _pool(op: str):
    def convert(b, inputs, attrs):
        x = b.tensor(inputs[0])
        data_format = arg(inputs, 4, attrs, "data_format", attrs.get("format", "NCHW"))
        if data_format not in (0, "NCHW"):
            raise ValueError(f"{op} in format {data_format!r} (only NCHW)")
        kernel = arg(inputs, 1, attrs, "kernel_size")
        out = {"kernel_shape": pair(kernel),
               "strides": pair(arg(inputs, 2, attrs, "strides", kernel))}
        mode = arg(inputs, 3, attrs, "pad_mode", "VALID")
        mode = _PAD_MODES.get(mode, mode) if isinstance(mode, int) else str(mode).upper()
        if mode == "SAME":
            out["auto_pad"] = "SAME_UPPER"
        elif mode == "PAD":
            out["pads"] = _spatial_pads(attrs.get("pad_list", attrs.get("pad", 0)), 2)
        elif mode != "VALID":
            raise ValueError(f"{op} with pad_mode {mode!r}")
        if op == "AveragePool":
            # MindSpore's SAME average divides by the cells inside the input.
            out["count_include_pad"] = 0
        return b.one(op, [x], out)
    return convert


CONVERTERS["MaxPool"] = _pool("MaxPool")
CONVERTERS["AvgPool"] = _pool("AveragePool")


@converts("AdaptiveAvgPool2D", "AdaptiveAvgPool2DExt")
def _adaptive_avg_pool(b, inputs, attrs):
    x = b.tensor(inputs[0])
    size = arg(inputs, 1, attrs, "output_size")
    size = [size, size] if isinstance(size, int) else list(size)
    spatial = list(x.type.shape[-2:])
    wanted = [spatial[k] if s is None or s == -1 else int(s) for k, s in enumerate(size)]
    if wanted == [1, 1]:
        return b.one("GlobalAveragePool", [x])
    if any(not isinstance(d, int) or d % o for d, o in zip(spatial, wanted)):
        raise ValueError(f"AdaptiveAvgPool2D from {spatial} to {wanted}: only sizes that "
                         "divide the input evenly")
    kernel = [d // o for d, o in zip(spatial, wanted)]
    return b.one("AveragePool", [x], {"kernel_shape": kernel, "strides": kernel})


@converts("BatchNorm")
def _batch_norm(b, inputs, attrs):
    x, scale, bias, mean, var = (b.tensor(v) for v in inputs[:5])
    if bool(arg(inputs, 5, attrs, "is_training", False)):
        raise ValueError("BatchNorm in training mode (export the Cell with set_train(False))")
    epsilon = float(arg(inputs, 6, attrs, "epsilon", 1e-5))
    y = b.one("BatchNormalization", [x, scale, bias, mean, var], {"epsilon": epsilon})
    return (y, mean, var, mean, var)


@converts("LayerNorm")
def _layer_norm(b, inputs, attrs):
    x, gamma, beta = (b.tensor(v) for v in inputs[:3])
    axis = int(arg(inputs, 3, attrs, "begin_norm_axis", -1))
    params_axis = int(arg(inputs, 4, attrs, "begin_params_axis", -1))
    rank = len(x.type.shape)
    if axis % rank != params_axis % rank:
        raise ValueError(f"LayerNorm with begin_norm_axis={axis} and "
                         f"begin_params_axis={params_axis}")
    epsilon = float(arg(inputs, 5, attrs, "epsilon", 1e-7))
    y = b.one("LayerNormalization", [x, gamma, beta], {"axis": axis, "epsilon": epsilon})
    return (y, None, None)


@converts("_Assign")
def _assign(b, inputs, attrs):
    return b.tensor(inputs[1])
