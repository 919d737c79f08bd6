"""One ES call, one node: bind the arguments to the op's schema, check them, add the node.

Every ES function (`es.relu`, `es.acme.fused_op`, `es.op("Relu", ...)`, `x + y`) ends in
`apply_op`. It runs the schema's own checks and type inference (`OpSchema.infer_types`)
before touching the graph, so a wrong rank, dtype or attribute raises `OpError` at the
offending call and leaves the graph as it was.

Arguments, as the generated signatures show them:

- inputs, positionally in schema order (an optional input also by its snake_case name);
  a variadic last input takes the remaining positional arguments (or one list of them);
  None, or leaving it out, omits an optional input;
- an input may be an ES tensor, or data that becomes a constant: a NumPy array keeps its
  dtype, while a Python number or list takes the dtype the op needs there (the dtype of
  the tensors sharing its type variable, else of the first tensor argument, else the
  one dtype the input allows, else float32 / int64 / bool);
- attributes, by keyword, with the schema's defaults;
- two reserved keywords: `outputs=k` asks for the first k outputs (an op's optional
  outputs, such as Dropout's mask, are left out unless asked for; for Split it is the
  number of pieces when neither `split` nor `num_outputs` decides it) and `name=` names
  the node. An attribute or input whose name would clash with these is spelled with a
  trailing underscore (`name_=`).

A call returns one Tensor when the node has one output and the op's outputs are not
variadic (Split), else a tuple of Tensors.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ge_hub.errors import GraphError, OpError
from ge_hub.es.builder import GraphBuilder, current_builder
from ge_hub.es.naming import python_identifier, snake_case
from ge_hub.es.tensor import Tensor
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Value
from ge_hub.ir.types import TensorType
from ge_hub.ops.schema import REQUIRED, Input, OpSchema

RESERVED_KEYWORDS = ("outputs", "name")

_MISSING = object()  # an input slot the call did not fill

# For a Python value with no dtype to follow: the dtypes to try, by NumPy kind.
_PYTHON_DTYPES = {
    "b": (DType.BOOL,),
    "i": (DType.INT64, DType.INT32, DType.FLOAT32, DType.FLOAT64, DType.FLOAT16),
    "f": (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16),
}


@dataclasses.dataclass(frozen=True)
class EsSignature:
    """The Python face of one op: parameter names for its inputs and attributes."""

    schema: OpSchema
    function_name: str
    input_params: tuple[str, ...]  # one per formal input, in schema order
    attr_params: dict[str, str]  # Python keyword -> attribute name

    @property
    def variadic(self) -> bool:
        return bool(self.schema.inputs) and self.schema.inputs[-1].variadic

    @property
    def fixed_inputs(self) -> int:
        return len(self.schema.inputs) - (1 if self.variadic else 0)

    @property
    def variadic_outputs(self) -> bool:
        return any(o.variadic for o in self.schema.outputs)

    @property
    def has_output_choice(self) -> bool:
        return self.variadic_outputs or any(o.optional for o in self.schema.outputs)

    @property
    def required_outputs(self) -> int:
        return sum(1 for o in self.schema.outputs if not o.optional and not o.variadic)


def es_signature(schema: OpSchema, function_name: str) -> EsSignature:
    taken = set(RESERVED_KEYWORDS)
    attr_params: dict[str, str] = {}
    for attr_name in schema.attrs:
        attr_params[_unique(python_identifier(attr_name), taken)] = attr_name
    # Inputs after attributes: an input named like an attribute is the one renamed,
    # since attribute keywords are what readers of the ONNX spec will type.
    input_params = tuple(_unique(snake_case(i.name), taken) for i in schema.inputs)
    return EsSignature(schema, function_name, input_params, attr_params)


def _unique(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


# -- generated functions -----------------------------------------------------------

def make_function(schema: OpSchema, function_name: str, module: str = "ge_hub.es") -> Callable:
    """The ES function of `schema`, with a signature and docstring built from it."""
    sig = es_signature(schema, function_name)

    def es_function(*args, **kwargs):
        return apply_op(sig, args, kwargs)

    es_function.__name__ = es_function.__qualname__ = function_name
    es_function.__module__ = module
    es_function.__signature__ = python_signature(sig)
    es_function.__doc__ = docstring(sig)
    es_function.schema = schema
    return es_function


def python_signature(sig: EsSignature) -> inspect.Signature:
    P = inspect.Parameter
    params: list[inspect.Parameter] = []
    seen_optional = False
    for formal, param in zip(sig.schema.inputs, sig.input_params):
        if formal.variadic:
            params.append(P(param, P.VAR_POSITIONAL))
            continue
        # A required input after an optional one still needs a default to be legal Python;
        # the schema check then reports it missing by name.
        seen_optional = seen_optional or formal.optional
        default = None if seen_optional else P.empty
        params.append(P(param, P.POSITIONAL_OR_KEYWORD, default=default))
    for param, attr_name in sig.attr_params.items():
        default = sig.schema.attrs[attr_name].default
        params.append(P(param, P.KEYWORD_ONLY, default=P.empty if default is REQUIRED
                        else default))
    if sig.has_output_choice:
        params.append(P("outputs", P.KEYWORD_ONLY, default=None, annotation="int | None"))
    params.append(P("name", P.KEYWORD_ONLY, default=None, annotation="str | None"))
    returns = "tuple[Tensor, ...]" if sig.variadic_outputs or sig.required_outputs > 1 \
        else "Tensor"
    return inspect.Signature(params, return_annotation=returns)


def docstring(sig: EsSignature) -> str:
    schema = sig.schema
    lines = [f"{schema.qualified_name}: {schema.doc or 'no description.'}", ""]
    if schema.inputs:
        lines.append("Inputs (positional):")
        for formal, param in zip(schema.inputs, sig.input_params):
            notes = [", ".join(sorted(d.value for d in formal.types))]
            if formal.optional:
                notes.append("optional")
            if formal.variadic:
                notes.append("variadic")
            label = param if param == formal.name else f"{param} ({formal.name})"
            lines.append(f"    {label}: {'; '.join(notes)}")
    if sig.attr_params:
        lines.append("Attributes (keyword):")
        for param, attr_name in sig.attr_params.items():
            spec = schema.attrs[attr_name]
            default = "required" if spec.required else f"default {spec.default!r}"
            lines.append(f"    {param}: {spec.kind.value}, {default}")
    lines.append("Outputs:")
    for index, out in enumerate(schema.outputs):
        if out.variadic:
            note = " (variadic: `outputs=k` gives k)"
        elif out.optional:
            note = f" (optional: `outputs={index + 1}` includes it)"
        else:
            note = ""
        lines.append(f"    {out.name}{note}")
    if sig.variadic_outputs or sig.required_outputs > 1:
        returns = "a tuple of Tensors"
    elif len(schema.outputs) > 1:
        returns = "a Tensor, or a tuple of Tensors when `outputs=` asks for more than one"
    else:
        returns = "a Tensor"
    lines += ["", f"`name=` names the node. Returns {returns}."]
    return "\n".join(lines)


# -- one call ----------------------------------------------------------------------

@dataclasses.dataclass
class _Bound:
    inputs: list[Any]  # per input slot: an argument, None, or _MISSING
    attrs: dict[str, Any]
    outputs: int | None
    node_name: str | None


def apply_op(sig: EsSignature, args: Sequence[Any], kwargs: dict[str, Any]):
    """Add the node that `es.<op>(*args, **kwargs)` describes; return its output tensors."""
    schema = sig.schema
    builder = current_builder(f"es.{sig.function_name}")
    bound = _bind(sig, args, kwargs)
    node_name = bound.node_name
    where = schema.describe(node_name)
    if node_name is not None:
        _check_node_name(builder, node_name, where)

    hints = _dtype_hints(sig, bound.inputs)
    operands: list[Value | np.ndarray | None] = []
    for index, arg in enumerate(bound.inputs):
        operands.append(_operand(builder, sig, index, arg, hints, where))
    while operands and operands[-1] is None and schema.formal_input(len(operands) - 1).optional:
        operands.pop()  # trailing omitted optional inputs are simply absent

    types = [None if o is None else o.type if isinstance(o, Value) else TensorType.of(o)
             for o in operands]
    consts = [None if o is None else o.const if isinstance(o, Value) else o for o in operands]
    attrs = {key: _attr_value(value) for key, value in bound.attrs.items()}
    if (schema.qualified_name == "Split" and bound.outputs is not None
            and "num_outputs" not in attrs and (len(operands) < 2 or operands[1] is None)):
        # Split's count must live in the node (not only in its output list) so that the
        # reference, constant folding and kernels can see it.
        attrs["num_outputs"] = bound.outputs
    wanted = bound.outputs
    if wanted is None and not sig.variadic_outputs:
        wanted = sig.required_outputs
    out_types = schema.infer_types(types, attrs, consts=consts, num_outputs=wanted,
                                   node_name=node_name)
    out_types = _check_output_count(sig, out_types, wanted, bound.outputs, where)
    # Store the attributes as given, in the normalized Python types the schema keeps.
    filled = schema.fill_attrs(attrs, node_name)
    stored = {key: filled[key] for key in attrs}

    graph = builder.graph
    inputs = [graph.add_constant(o) if isinstance(o, np.ndarray) else o for o in operands]
    node = builder.add_node(schema, inputs, out_types, stored, node_name)
    results = tuple(Tensor(v, builder) for v in node.outputs)
    if len(results) == 1 and not sig.variadic_outputs:
        return results[0]
    return results


def _bind(sig: EsSignature, args: Sequence[Any], kwargs: dict[str, Any]) -> _Bound:
    schema = sig.schema
    where = schema.describe(kwargs.get("name"))
    fixed = sig.fixed_inputs
    inputs: list[Any] = [_MISSING] * fixed
    if len(args) > fixed and not sig.variadic:
        names = ", ".join(i.name for i in schema.inputs) or "none"
        raise OpError(f"{where}: expected at most {fixed} inputs ({names}), "
                      f"got {len(args)} positional arguments")
    inputs[: min(len(args), fixed)] = args[:fixed]
    if sig.variadic:
        rest = list(args[fixed:])
        if len(rest) == 1 and isinstance(rest[0], (list, tuple)) and any(
                isinstance(item, Tensor) for item in rest[0]):
            rest = list(rest[0])  # es.concat([a, b], axis=0) reads as es.concat(a, b, ...)
        inputs += rest

    attrs: dict[str, Any] = {}
    outputs: int | None = None
    node_name: str | None = None
    for key, value in kwargs.items():
        if key == "outputs":
            outputs = _output_request(sig, value, where)
        elif key == "name":
            if value is not None and (not isinstance(value, str) or not value):
                raise OpError(f"{where}: argument 'name' (the node name) must be a non-empty "
                              f"string, got {value!r}")
            node_name = value
        elif key in sig.attr_params:
            attrs[sig.attr_params[key]] = value
        elif key in sig.input_params[:fixed]:
            index = sig.input_params.index(key)
            if inputs[index] is not _MISSING:
                raise OpError(f"{where}: input {schema.inputs[index].name!r} is given both "
                              f"by position and by keyword {key!r}")
            inputs[index] = value
        else:
            raise OpError(f"{where}: unknown keyword argument {key!r}; "
                          f"{_known_keywords(sig)}")
    inputs = [None if arg is _MISSING else arg for arg in inputs]
    return _Bound(inputs, attrs, outputs, node_name)


def _known_keywords(sig: EsSignature) -> str:
    inputs = ", ".join(sig.input_params[: sig.fixed_inputs]) or "none"
    attrs = ", ".join(sig.attr_params) or "none"
    reserved = "outputs, name" if sig.has_output_choice else "name"
    return f"inputs: {inputs}; attributes: {attrs}; reserved: {reserved}"


def _output_request(sig: EsSignature, value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise OpError(f"{where}: argument 'outputs' must be a positive int (how many "
                      f"outputs to return), got {value!r}")
    if not sig.variadic_outputs:
        low, high = sig.required_outputs, len(sig.schema.outputs)
        if not low <= value <= high:
            names = ", ".join(o.name for o in sig.schema.outputs)
            raise OpError(f"{where}: argument 'outputs' must be between {low} and {high} "
                          f"(outputs: {names}), got {value}")
    return int(value)


def _check_output_count(sig, out_types, wanted, asked, where) -> list[TensorType]:
    if wanted is None:
        return out_types
    if len(out_types) < wanted:
        raise OpError(f"{where}: {wanted} outputs were asked for, but the op gives "
                      f"{len(out_types)} here")
    if sig.variadic_outputs and asked is not None and len(out_types) != wanted:
        raise OpError(f"{where}: argument 'outputs' asks for {wanted} outputs, but the "
                      f"attributes give {len(out_types)}")
    return out_types[:wanted]


def _check_node_name(builder: GraphBuilder, name: str, where: str) -> None:
    graph = builder.graph
    if any(n.name == name for n in graph.nodes) or any(v.name == name for v in graph.values()):
        raise GraphError(f"{where}: builder {builder.name!r} already has a node or value "
                         f"named {name!r}")


def _attr_value(value: Any) -> Any:
    if isinstance(value, GraphBuilder):
        if not value.is_built:
            raise GraphError(f"subgraph builder {value.name!r} is used as an attribute "
                             "before its `with` block has ended")
        return value.graph
    return value


# -- inputs ------------------------------------------------------------------------

def _dtype_hints(sig: EsSignature, args: Sequence[Any]) -> tuple[dict[str, DType], DType | None]:
    """Dtypes that Python values should follow: per type variable, and the first tensor's."""
    by_type_var: dict[str, DType] = {}
    first: DType | None = None
    for index, arg in enumerate(args):
        if not isinstance(arg, Tensor):
            continue
        if first is None:
            first = arg.dtype
        formal = sig.schema.formal_input(index)
        if formal.type_var is not None:
            by_type_var.setdefault(formal.type_var, arg.dtype)
    return by_type_var, first


def _operand(builder: GraphBuilder, sig: EsSignature, index: int, arg: Any,
             hints, where: str) -> Value | np.ndarray | None:
    """The IR value an argument stands for; data is returned as an array, added to the
    graph only once the call has passed its checks."""
    if arg is None:
        return None
    input_name = sig.schema.input_name(index)
    if isinstance(arg, Tensor):
        if not builder.can_read(arg):
            raise OpError(f"{where}: input {input_name!r} is tensor {arg.name!r} of builder "
                          f"{arg.builder.name!r}, which is neither the active builder "
                          f"{builder.name!r} nor one enclosing it")
        return arg.value
    if isinstance(arg, (np.ndarray, np.generic)):
        array = np.asarray(arg)
        try:
            DType.from_numpy(array.dtype)
        except TypeError as exc:
            raise OpError(f"{where}: input {input_name!r}: {exc}") from None
        return array
    if isinstance(arg, (bool, int, float, list, tuple)):
        return _python_constant(arg, sig.schema.formal_input(index), hints, where, input_name)
    raise OpError(f"{where}: input {input_name!r} must be an ES tensor, a NumPy array or a "
                  f"Python number or list, got {type(arg).__name__}")


def _python_constant(value, formal: Input, hints, where: str, input_name: str) -> np.ndarray:
    raw = np.asarray(value)
    kind = raw.dtype.kind
    if kind not in _PYTHON_DTYPES:
        raise OpError(f"{where}: input {input_name!r}: cannot make a constant from "
                      f"{value!r} (it is not numbers of one kind)")
    by_type_var, first = hints
    dtype = _python_dtype(kind, formal, by_type_var, first)
    with np.errstate(invalid="ignore", over="ignore"):
        converted = raw.astype(dtype.numpy)
        back = converted.astype(raw.dtype)
    if dtype.is_float:  # rounding is what float constants do; overflowing to inf is not
        fits = bool(np.all(np.isfinite(converted) | ~np.isfinite(raw)))
    else:
        fits = bool(np.array_equal(back, raw))
    if not fits:
        raise OpError(f"{where}: input {input_name!r}: the Python value {value!r} does not "
                      f"fit dtype {dtype}, which the op needs there; pass an ES tensor or a "
                      "NumPy array of the dtype you mean")
    return converted


def _python_dtype(kind: str, formal: Input, by_type_var: dict[str, DType],
                  first: DType | None) -> DType:
    if formal.type_var is not None and formal.type_var in by_type_var:
        return by_type_var[formal.type_var]
    if first is not None and first in formal.types and _fits_kind(kind, first):
        return first
    if len(formal.types) == 1:
        return next(iter(formal.types))
    candidates = _PYTHON_DTYPES[kind]
    return next((d for d in candidates if d in formal.types), candidates[0])


def _fits_kind(kind: str, dtype: DType) -> bool:
    if kind == "b":
        return dtype is DType.BOOL
    if kind == "i":
        return dtype.is_integer or dtype.is_float
    return dtype.is_float

