"""`torch.ATen`: one PyTorch op call inside a ge-hub graph, for the ahead-of-time path.

A graph made by `ge_torch.export` has no PyTorch around it to run what ge-hub cannot, so
an op without a converter becomes a node of this op instead: the ATen overload's name,
its non-tensor arguments (JSON, tensors replaced by their input index) and the dtypes
and shapes PyTorch recorded for its outputs. Its reference calls PyTorch, so ge-hub runs
it as a counted reference step, and the graph still needs PyTorch at run time for it;
`ge_torch.from_module(..., allow_torch_ops=False)` refuses such graphs instead.

Shape inference runs the op on PyTorch's meta device when the input shapes are known,
so a graph specialized for new input shapes gets exact output shapes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from ge_hub.plugin import (
    ANY,
    Attr,
    AttrKind,
    DType,
    InferenceContext,
    Input,
    Output,
    TensorType,
    dim_from_json,
    dim_to_json,
    op,
)

DOMAIN = "torch"


def encode_arguments(args, kwargs, tensor_index) -> str:
    """JSON for an op call's arguments; `tensor_index(value)` names a tensor input."""
    return json.dumps({"args": _encode(args, tensor_index),
                       "kwargs": _encode(kwargs, tensor_index)})


def _encode(value, tensor_index):
    import torch

    index = tensor_index(value)
    if index is not None:
        return {"tensor": index}
    if isinstance(value, (list, tuple)):
        return [_encode(v, tensor_index) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v, tensor_index) for k, v in value.items()}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot record argument {value!r} of type {type(value).__name__}")


def _decode(value, tensors):
    import torch

    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        if "tensor" in value:
            return tensors[value["tensor"]]
        if "dtype" in value:
            return getattr(torch, value["dtype"])
        if "device" in value:
            return torch.device(value["device"])
        if "memory_format" in value:
            return getattr(torch, value["memory_format"])
        if "layout" in value:
            return getattr(torch, value["layout"])
        return {k: _decode(v, tensors) for k, v in value.items()}
    return value


def resolve(target: str):
    """The OpOverload named like 'aten::cumprod.default'."""
    import torch

    namespace, rest = target.split("::")
    name, overload = rest.rsplit(".", 1)
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _call(target: str, arguments: str, tensors: list):
    decoded = json.loads(arguments)
    args = _decode(decoded["args"], tensors)
    kwargs = _decode(decoded["kwargs"], tensors)
    result = resolve(target)(*args, **kwargs)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _infer(ctx: InferenceContext) -> list[TensorType]:
    dtypes = [DType.parse(d) for d in ctx.attrs["output_dtypes"]]
    inputs = [ctx.input(i) for i in range(len(ctx.input_types))]
    if all(t is not None and t.is_static for t in inputs):
        import torch

        from ge_torch.dtypes import to_torch

        metas = [torch.empty(t.shape, dtype=to_torch(t.dtype), device="meta") for t in inputs]
        try:
            results = _call(ctx.attrs["target"], ctx.attrs["arguments"], metas)
            return [TensorType(d, tuple(r.shape)) for d, r in zip(dtypes, results)]
        except Exception:  # no meta kernel: fall back on the recorded shapes
            pass
    shapes = json.loads(ctx.attrs["output_shapes"])
    return [TensorType(d, [dim_from_json(s) for s in shape]) for d, shape in zip(dtypes, shapes)]


@op("ATen", domain=DOMAIN, inputs=[Input("inputs", ANY, type_var=None, variadic=True)],
    outputs=[Output("outputs", variadic=True)], infer=_infer,
    attrs=[Attr("target", AttrKind.STRING), Attr("arguments", AttrKind.STRING),
           Attr("output_dtypes", AttrKind.STRINGS), Attr("output_shapes", AttrKind.STRING)])
def aten(*inputs: np.ndarray, target: str, arguments: str, output_dtypes, output_shapes):
    """outputs = the PyTorch op `target` applied to the inputs and the recorded arguments."""
    import torch

    # Copies: inputs may be read-only (constants), and the op must not write into them.
    tensors = [torch.from_numpy(np.array(x)) for x in inputs]
    with torch.no_grad():
        results = _call(target, arguments, tensors)
    return tuple(r.detach().contiguous().numpy() for r in results)


def describe_outputs(val: Any) -> tuple[list[str], str]:
    """(output_dtypes, output_shapes) attributes from a node's FakeTensor(s)."""
    from ge_torch import symbolic
    from ge_torch.dtypes import to_dtype

    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    dtypes = [to_dtype(v.dtype).value for v in vals]
    shapes = [[dim_to_json(d) for d in map(symbolic.as_dim, v.shape)] for v in vals]
    return dtypes, json.dumps(shapes)


__all__ = ["DOMAIN", "aten", "describe_outputs", "encode_arguments", "resolve"]
