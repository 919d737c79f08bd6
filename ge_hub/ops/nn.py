"""Neural-network ops that need no sliding window: the matrix products MatMul and Gemm,
Softmax, LogSoftmax and Dropout; Det, the determinant of stacked matrices (computed in
float64 whatever the input dtype); ge_hub.Attention, the scaled dot-product attention
chain MatMul/scale/mask Add/Softmax/MatMul that the `fuse_attention` pass makes one op.

The window ops live beside this module: Conv, ConvTranspose, DeformConv and Col2Im in
`conv`, the pools in `pool`, the normalizations and LRN in `norm`, Resize, RoiAlign and
GridSample in `resize`; the helpers they share are in `nn_common` (whose docstring gives
the dtype policy of the references) and `window`.
"""

from __future__ import annotations

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops import elementwise as elementwise_ops
from ge_hub.ops.inference import broadcast_shapes, normalize_axis
from ge_hub.ops.nn_common import (
    check_broadcasts_to,
    check_flag,
    is_float,
    output_count,
    work_dtype,
)
from ge_hub.ops.norm import FUSED_DOMAIN
from ge_hub.ops.schema import BOOL, FLOATS, Attr, AttrKind, InferenceContext, Input, Output, op

MATMUL_TYPES = FLOATS | {DType.INT32, DType.INT64}


# -- matrix products -------------------------------------------------------------------


def _infer_matmul(ctx: InferenceContext, trans_b: bool = False) -> list[TensorType]:
    a, b = ctx.input(0), ctx.input(1)
    if trans_b and b.shape is not None and b.rank >= 2:  # B as the product reads it
        b = TensorType(b.dtype, [*b.shape[:-2], b.shape[-1], b.shape[-2]])
    for index, t in enumerate((a, b)):
        if t.rank == 0:
            ctx.fail(f"input {ctx.schema.input_name(index)!r} must have rank >= 1, got {t}")
    if a.shape is None or b.shape is None:
        return [TensorType(a.dtype, None)]
    a_shape = (1, *a.shape) if a.rank == 1 else a.shape
    b_shape = (*b.shape, 1) if b.rank == 1 else b.shape
    k_a, k_b = a_shape[-1], b_shape[-2]
    if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
        ctx.fail(f"inner dims differ: input 'A' {a} has {k_a} columns, "
                 f"input 'B' {b} has {k_b} rows")
    batch = broadcast_shapes(ctx, [a_shape[:-2], b_shape[:-2]])
    shape = list(batch)
    if a.rank > 1:
        shape.append(a_shape[-2])
    if b.rank > 1:
        shape.append(b_shape[-1])
    return [TensorType(a.dtype, shape)]


@op("MatMul", inputs=[Input("A", MATMUL_TYPES), Input("B", MATMUL_TYPES)],
    outputs=[Output("Y")], infer=_infer_matmul)
def matmul(a, b):
    """Y = A @ B with NumPy matmul semantics (1-D promotion, broadcast batch dims)."""
    if is_float(a.dtype) and a.dtype != np.float64:
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    return np.matmul(a, b)


def _infer_gemm(ctx: InferenceContext) -> list[TensorType]:
    a, b = ctx.input(0), ctx.input(1)
    ctx.require_rank(0, 2)
    ctx.require_rank(1, 2)
    for name in ("transA", "transB"):
        check_flag(ctx, name)
    m = ctx.new_sym("M") if a.shape is None else a.shape[1 if ctx.attrs["transA"] else 0]
    k_a = None if a.shape is None else a.shape[0 if ctx.attrs["transA"] else 1]
    k_b = None if b.shape is None else b.shape[1 if ctx.attrs["transB"] else 0]
    n = ctx.new_sym("N") if b.shape is None else b.shape[0 if ctx.attrs["transB"] else 1]
    if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
        ctx.fail(f"inner dims differ: input 'A' {a} (transA={ctx.attrs['transA']}) gives "
                 f"K={k_a}, input 'B' {b} (transB={ctx.attrs['transB']}) gives K={k_b}")
    if ctx.has_input(2):
        check_broadcasts_to(ctx, 2, (m, n))
    return [TensorType(a.dtype, (m, n))]


@op("Gemm",
    inputs=[Input("A", MATMUL_TYPES), Input("B", MATMUL_TYPES),
            Input("C", MATMUL_TYPES, optional=True)],
    outputs=[Output("Y")], infer=_infer_gemm,
    attrs=[Attr("alpha", AttrKind.FLOAT, 1.0), Attr("beta", AttrKind.FLOAT, 1.0),
           Attr("transA", AttrKind.INT, 0), Attr("transB", AttrKind.INT, 0)])
def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    """Y = alpha * A' @ B' + beta * C, A' and B' optionally transposed, C broadcast."""
    a = a.T if transA else a
    b = b.T if transB else b
    if not is_float(a.dtype):
        # Integer Gemm stays exact when alpha and beta are whole numbers.
        y = np.matmul(a.astype(np.int64), b.astype(np.int64))
        scaled = y * int(alpha) if float(alpha).is_integer() else np.trunc(y * alpha)
        if c is not None:
            scaled = scaled + (c.astype(np.int64) * int(beta) if float(beta).is_integer()
                               else np.trunc(c * beta))
        return np.asarray(scaled).astype(a.dtype)
    work = work_dtype(a.dtype)
    y = alpha * np.matmul(a.astype(work), b.astype(work))
    if c is not None:
        y = y + beta * c.astype(work)
    return np.asarray(y, dtype=work).astype(a.dtype)


def _infer_softmax(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    if x.rank == 0:
        ctx.fail(f"input 'input' must have rank >= 1, got {x}")
    normalize_axis(ctx, ctx.attrs["axis"], x.rank, "attribute 'axis'")
    return [x]


def _shifted(x, axis):
    """X minus its max along `axis`, in the work dtype: exp of it cannot overflow."""
    data = x.astype(work_dtype(x.dtype))
    if data.size == 0:  # an empty axis (or tensor) has no max: the output is empty too
        return data
    return data - np.max(data, axis=axis, keepdims=True)


@op("Softmax", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_softmax, attrs=[Attr("axis", AttrKind.INT, -1)])
def softmax(x, *, axis):
    """output = exp(x) / sum(exp(x)) along `axis`."""
    e = np.exp(_shifted(x, axis))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype)


@op("LogSoftmax", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_softmax, attrs=[Attr("axis", AttrKind.INT, -1)])
def log_softmax(x, *, axis):
    """output = x - log(sum(exp(x))) along `axis`."""
    shifted = _shifted(x, axis)
    if shifted.size == 0:
        return shifted.astype(x.dtype)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(x.dtype)


# -- dropout ---------------------------------------------------------------------------


def _infer_dropout(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    for index in (1, 2):
        if ctx.has_input(index):
            ctx.require_rank(index, 0)
    ratio = ctx.const(1)
    if ratio is not None and not 0.0 <= float(ratio) < 1.0:
        ctx.fail(f"input 'ratio' must be in [0, 1), got {float(ratio)}")
    y = [x]
    if output_count(ctx, 1) == 2:
        y.append(x.with_dtype(DType.BOOL))
    return y


@op("Dropout",
    inputs=[Input("data", FLOATS), Input("ratio", FLOATS, "T1", optional=True),
            Input("training_mode", BOOL, "T2", optional=True)],
    outputs=[Output("output"), Output("mask", optional=True)], infer=_infer_dropout,
    attrs=[Attr("seed", AttrKind.INT, None)])
def dropout(data, ratio=None, training_mode=None, *, seed):
    """Inference: output = data, mask all True. Training: each element is zeroed with
    probability `ratio` (NumPy generator seeded with `seed`), the rest scaled by
    1 / (1 - ratio)."""
    ratio = 0.5 if ratio is None else float(ratio)
    if training_mode is None or not bool(training_mode) or ratio == 0.0:
        return data.copy(), np.ones(data.shape, dtype=np.bool_)
    if not 0.0 <= ratio < 1.0:
        raise OpError(f"Dropout: input 'ratio' must be in [0, 1), got {ratio}")
    keep = np.random.default_rng(seed).random(data.shape) >= ratio
    work = work_dtype(data.dtype)
    output = np.where(keep, data.astype(work) / work.type(1.0 - ratio), work.type(0))
    return output.astype(data.dtype), keep


# --- Det --------------------------------------------------------------------------------


def _infer_det(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=2)
    if x.shape is None:
        return [TensorType(x.dtype, None)]
    rows, cols = x.shape[-2:]
    if isinstance(rows, int) and isinstance(cols, int) and rows != cols:
        ctx.fail(f"input 'X' {x} must hold square matrices in its last two dims, "
                 f"got {rows} x {cols}")
    return [TensorType(x.dtype, x.shape[:-2])]


@op("Det", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_det)
def det(x):
    """Y[...] = determinant of the square matrix X[..., :, :]."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise OpError(f"Det: input 'X' must hold square matrices in its last two dims, "
                      f"got shape {x.shape}")
    return np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)


# -- ge_hub.Attention --------------------------------------------------------------------

# The layouts Attention reads and writes: a perm attribute names the Transpose folded into
# that operand (empty: none), so the kernel reads Q, K and V where an exporter's head
# split left them and writes Y where the head merge wants it.
ATTENTION_PERMS = ("q_perm", "k_perm", "v_perm", "out_perm")


def _permuted(shape, perm):
    return tuple(shape) if not perm else tuple(shape[p] for p in perm)


def _check_perm(ctx: InferenceContext, name: str, rank: int) -> None:
    perm = list(ctx.attrs[name])
    if perm and sorted(perm) != list(range(rank)):
        ctx.fail(f"attribute {name!r} {perm} is not a permutation of {rank} axes")
    if name in ("v_perm", "out_perm") and perm and perm[-1] != rank - 1:
        ctx.fail(f"attribute {name!r} {perm} must keep the last axis last")


def _infer_attention(ctx: InferenceContext) -> list[TensorType]:
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    check_flag(ctx, "k_transposed")
    check_flag(ctx, "scale_divides")
    if not (q.rank == k.rank == v.rank) or q.rank < 2:
        ctx.fail(f"inputs 'Q' {q}, 'K' {k} and 'V' {v} must have one rank, at least 2")
    for name in ATTENTION_PERMS:
        _check_perm(ctx, name, q.rank)
    if q.shape is None or k.shape is None or v.shape is None:
        return [TensorType(q.dtype, None)]
    qs = _permuted(q.shape, ctx.attrs["q_perm"])
    keys = _permuted(k.shape, ctx.attrs["k_perm"])
    if not ctx.attrs["k_transposed"]:
        keys = (*keys[:-2], keys[-1], keys[-2])
    vs = _permuted(v.shape, ctx.attrs["v_perm"])
    static = all(isinstance(d, int) for d in (*qs, *keys, *vs))
    batch = {tuple(qs[:-2]), tuple(keys[:-2]), tuple(vs[:-2])}
    if static and (len(batch) != 1 or qs[-1] != keys[-1] or keys[-2] != vs[-2]):
        ctx.fail(f"'Q' {q}, 'K' {k} and 'V' {v} (after their perms; k_transposed="
                 f"{ctx.attrs['k_transposed']}) must be [..., S, D], [..., Sk, D] and "
                 "[..., Sk, Dv] with the same '...'")
    if ctx.has_input(3):
        check_broadcasts_to(ctx, 3, (*qs[:-1], keys[-2]))
    out = _permuted((*qs[:-1], vs[-1]), ctx.attrs["out_perm"])
    return [TensorType(q.dtype, out)]


@op("Attention", domain=FUSED_DOMAIN,
    inputs=[Input("Q", FLOATS), Input("K", FLOATS), Input("V", FLOATS),
            Input("Mask", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_attention,
    attrs=[Attr("scale", AttrKind.FLOAT, 1.0), Attr("scale_divides", AttrKind.INT, 0),
           Attr("k_transposed", AttrKind.INT, 1),
           *(Attr(name, AttrKind.INTS, []) for name in ATTENTION_PERMS)])
def attention(q, k, v, mask=None, *, scale, scale_divides, k_transposed, q_perm, k_perm,
              v_perm, out_perm):
    """Y = Softmax(MatMul(Q, K^T) (* or /) scale + Mask, axis=-1) @ V, as the nodes the
    `fuse_attention` pass replaced compute it: Q [..., S, D], K [..., Sk, D] (K^T
    [..., D, Sk] when k_transposed is 0), V [..., Sk, Dv]; the scores are divided by
    `scale` when scale_divides is 1, else multiplied; Mask (omitted: none) broadcasts to
    the [..., S, Sk] scores. Q, K and V are first transposed by q_perm, k_perm and
    v_perm, and Y by out_perm at the end (empty: no transpose)."""
    q, k, v = (x if not perm else np.transpose(x, perm)
               for x, perm in ((q, q_perm), (k, k_perm), (v, v_perm)))
    keys_t = np.swapaxes(k, -1, -2) if k_transposed else k
    scores = matmul(q, keys_t)
    factor = np.asarray(scale, dtype=q.dtype)
    scores = (elementwise_ops.div if scale_divides else elementwise_ops.mul)(scores, factor)
    if mask is not None:
        scores = elementwise_ops.add(scores, mask)
    with np.errstate(invalid="ignore", over="ignore"):
        y = matmul(softmax(scores, axis=-1), v)
    return y if not out_perm else np.ascontiguousarray(np.transpose(y, out_perm))


# -- ge_hub.StridedMatMul ----------------------------------------------------------------
# A MatMul whose operands are strided views of its inputs and whose result may be written
# transposed: what the `fold_matmul_views` pass (ge_hub/passes/fold_matmul_views.py) makes of
# a MatMul of two activations and the Transposes, Splits and Reshapes around it, so that
# its C kernels (ge_hub/kernels/nn_strided.py: bf16 or fp32) read and write the data where
# it lies instead of steps moving it first.

STRIDED_VIEWS = ("a", "b")


def view_indices(numel: int, offset: int, shape, strides) -> np.ndarray:
    """The flat indices of a strided view: element i at offset + sum i_d * strides_d."""
    index = np.full(tuple(shape), offset, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(shape, strides)):
        step = np.arange(size, dtype=np.int64) * stride
        index = index + step.reshape((size,) + (1,) * (len(shape) - axis - 1))
    if index.size and (index.min() < 0 or index.max() >= numel):
        raise OpError(f"StridedMatMul: a view (offset {offset}, shape {list(shape)}, strides "
                      f"{list(strides)}) reaches outside its input of {numel} values")
    return index


def _view_type(ctx: InferenceContext, which: str) -> tuple:
    index = STRIDED_VIEWS.index(which)
    offset, shape = ctx.attrs[f"{which}_offset"], list(ctx.attrs[f"{which}_shape"])
    strides = list(ctx.attrs[f"{which}_strides"])
    if len(shape) < 2 or len(strides) != len(shape):
        ctx.fail(f"attributes '{which}_shape' {shape} and '{which}_strides' {strides} must "
                 "be of one length, at least 2")
    if offset < 0 or any(d < 1 for d in shape) or any(s < 0 for s in strides):
        ctx.fail(f"view {which}: offset {offset}, shape {shape}, strides {strides} must be "
                 "non-negative, with dims of at least 1")
    base = ctx.input(index)
    numel = None if base.shape is None or not base.is_static else int(np.prod(base.shape))
    last = offset + sum((d - 1) * s for d, s in zip(shape, strides))
    if numel is not None and last >= numel:
        ctx.fail(f"view {which} (offset {offset}, shape {shape}, strides {strides}) reaches "
                 f"value {last} of input {ctx.schema.input_name(index)!r} {base}")
    return tuple(shape)


def _infer_strided_matmul(ctx: InferenceContext) -> list[TensorType]:
    a, b = _view_type(ctx, "a"), _view_type(ctx, "b")
    if a[-1] != b[-2]:
        ctx.fail(f"inner dims differ: view a {list(a)} has {a[-1]} columns, view b {list(b)} "
                 f"has {b[-2]} rows")
    shape = (*broadcast_shapes(ctx, [a[:-2], b[:-2]]), a[-2], b[-1])
    perm = list(ctx.attrs["out_perm"])
    if perm and (sorted(perm) != list(range(len(shape))) or perm[-1] != len(shape) - 1):
        ctx.fail(f"attribute 'out_perm' {perm} must be a permutation of {len(shape)} axes "
                 "that keeps the last one last")
    return [TensorType(ctx.input(0).dtype, _permuted(shape, perm))]


@op("StridedMatMul", domain=FUSED_DOMAIN,
    inputs=[Input("A", FLOATS), Input("B", FLOATS)], outputs=[Output("Y")],
    infer=_infer_strided_matmul,
    attrs=[*(Attr(f"{v}_{name}", kind, default) for v in STRIDED_VIEWS
             for name, kind, default in (("offset", AttrKind.INT, 0),
                                         ("shape", AttrKind.INTS, []),
                                         ("strides", AttrKind.INTS, []))),
           Attr("out_perm", AttrKind.INTS, [])])
def strided_matmul(a, b, *, a_offset, a_shape, a_strides, b_offset, b_shape, b_strides,
                   out_perm):
    """Y = Transpose(MatMul(A', B'), out_perm), where A' is the view of A's values (in
    row-major order) whose element i is A.flat[a_offset + sum i_d * a_strides_d], of shape
    a_shape, and B' the same of B; out_perm (empty: none) keeps the last axis last. As the
    MatMul and the Transposes, Splits and Reshapes it replaced compute it."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    view_a = flat_a[view_indices(flat_a.size, a_offset, a_shape, a_strides)]
    view_b = flat_b[view_indices(flat_b.size, b_offset, b_shape, b_strides)]
    y = matmul(view_a, view_b)
    return y if not out_perm else np.ascontiguousarray(np.transpose(y, out_perm))


# -- ge_hub.FusedMatMul ------------------------------------------------------------------
# A MatMul with its epilogue: what the `fuse_matmul_epilogue` rules (ge_hub/passes/
# fuse_matmul_epilogue.py) make of a MatMul (or a Gemm with a constant weight), the Add of
# its bias, the residual Add and the activation. Its C kernel (core/kernels/
# nn_matmul_fused.c) applies them to each block of the product while it is in cache.


def _infer_fused_matmul(ctx: InferenceContext) -> list[TensorType]:
    from ge_hub.ops.conv import CONV_ACTIVATIONS

    activation = ctx.attrs["activation"]
    if activation not in CONV_ACTIVATIONS:
        ctx.fail(f"attribute 'activation' must be one of "
                 f"{', '.join(repr(a) for a in CONV_ACTIVATIONS)}, got {activation!r}")
    if ctx.attrs["trans_b"] not in (0, 1):
        ctx.fail(f"attribute 'trans_b' must be 0 or 1, got {ctx.attrs['trans_b']!r}")
    if ctx.input(1).rank < 2:
        ctx.fail(f"input 'B' {ctx.input(1)} must have rank >= 2 (Y's last dim is its columns)")
    (y,) = _infer_matmul(ctx, trans_b=bool(ctx.attrs["trans_b"]))
    n = None if y.shape is None else y.shape[-1]
    if ctx.has_input(2):
        bias = ctx.input(2)
        if bias.shape is not None and (len(bias.shape) != 1 or (
                isinstance(bias.shape[0], int) and isinstance(n, int) and bias.shape[0] != n)):
            ctx.fail(f"input 'Bias' {bias} must be one value per column of Y {y}")
    if ctx.has_input(3):
        z = ctx.input(3)
        same = z.shape is None or y.shape is None or (
            len(z.shape) == len(y.shape)
            and all(not (isinstance(a, int) and isinstance(b, int)) or a == b
                    for a, b in zip(z.shape, y.shape)))
        if not same:
            ctx.fail(f"input 'Z' {z} must have the output's shape {y}")
    return [y]


@op("FusedMatMul", domain=FUSED_DOMAIN,
    inputs=[Input("A", FLOATS), Input("B", FLOATS), Input("Bias", FLOATS, optional=True),
            Input("Z", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_fused_matmul,
    attrs=[Attr("activation", AttrKind.STRING, ""), Attr("alpha", AttrKind.FLOAT, 0.0),
           Attr("beta", AttrKind.FLOAT, 0.0), Attr("trans_b", AttrKind.INT, 0)])
def fused_matmul(a, b, bias=None, z=None, *, activation, alpha, beta, trans_b):
    """Y = activation(MatMul(A, B') + Bias + Z): the product, the Add of Bias (one value
    per column of Y; omitted: none), the residual Add of Z (Y's shape; omitted: none) and
    an activation (`activation`, one of ge_hub.ops.conv.CONV_ACTIVATIONS, with its
    `alpha` and `beta`), as the nodes it replaces compute them. B' is B, or with
    `trans_b` 1 B with its last two dims swapped (a Gemm's transB: a Linear layer's
    weight is read as the file stores it, never transposed into a copy)."""
    from ge_hub.ops.conv import apply_activation

    y = matmul(a, np.swapaxes(b, -1, -2) if trans_b else b)
    if bias is not None:
        y = elementwise_ops.add(y, bias)
    if z is not None:
        if z.shape != y.shape:
            raise OpError(f"ge_hub.FusedMatMul: input 'Z' has shape {z.shape}, "
                          f"the output has {y.shape}")
        y = elementwise_ops.add(y, z)
    return apply_activation(y, activation, alpha, beta)
