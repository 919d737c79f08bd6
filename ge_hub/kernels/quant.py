"""The quant family's C kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv (core/kernels/quant.c and
quant_gemm.c; quant.h documents the blobs and the integer GEMM).

What the C handles, checked here at compile time (anything else keeps the op's NumPy
reference, counted as a Python step): static shapes; float32 scales (QLinearMatMul's may
be float16, its multiplier then rounded to float16 as the reference does); 8-bit operands for
the products, parameters per tensor or per axis (per row of A and per column of B, per
output channel of w), not N-D; QuantizeLinear and DequantizeLinear also take 16-, 4- and
2-bit integers (and int32 for DequantizeLinear) and blocked parameters (block_size).
"""

from __future__ import annotations

from ge_hub.ir.dtypes import DType
from ge_hub.kernels.base import BlobRecord, CKernel, Packed, pack_values
from ge_hub.kernels.bounds import check_window
from ge_hub.kernels.nn_common import filled_attrs, node_fail, numel_of, window_ints
from ge_hub.ops.window import layout as _layout
from ge_hub.ops.window import window as _window
from ge_hub.registry import KernelSpec

F32, F16, I32 = DType.FLOAT32, DType.FLOAT16, DType.INT32
EIGHT_BIT = frozenset({DType.UINT8, DType.INT8})
SIXTEEN_BIT = frozenset({DType.UINT16, DType.INT16})
# 4- and 2-bit integers, one per byte in memory (as ml_dtypes stores them).
SMALL = frozenset({DType.INT4, DType.UINT4, DType.INT2, DType.UINT2})
# The integer GEMM's tile and panel sizes (QGEMM_MR, QGEMM_NR, QGEMM_PANEL in quant.h).
QGEMM_MR, QGEMM_NR, QGEMM_PANEL = 4, 32, 16
# The most gathered patch bytes ConvInteger holds at a time.
QCONV_MAX_PATCH_BYTES = 1 << 21

QUANTIZE_BLOB = BlobRecord("GE_QUANTIZE_BLOB", ("outer", "channels", "inner", "has_zero_point",
                                                "block"))


def _static(types) -> bool:
    return all(t is None or (t.shape is not None and t.is_static) for t in types)


def _present(types, index: int):
    return types[index] if len(types) > index else None


def _per_tensor(t) -> bool:
    return t.rank == 0 or (t.rank == 1 and t.shape[0] == 1)


# -- QuantizeLinear, DequantizeLinear -------------------------------------------------


def _axis_params(node, input_types) -> tuple[int, int, int, int] | None:
    """(outer, channels, inner, block) of x around the node's axis, or None when the C
    kernel cannot take its scale (not float32, or of an unexpected shape)."""
    attrs = filled_attrs(node)
    x, scale = input_types[0], input_types[1]
    zero = _present(input_types, 2)
    if scale.dtype != F32 or not _static([x, scale, zero]):
        return None
    if zero is not None and zero.shape != scale.shape \
            and not (_per_tensor(zero) and _per_tensor(scale)):
        return None  # a scalar and a [1] both apply to the whole tensor
    if _per_tensor(scale):
        return 1, 1, numel_of(x.shape), 0
    if x.rank == 0:
        return None
    axis = attrs["axis"] % x.rank
    outer, channels, inner = (numel_of(x.shape[:axis]), x.shape[axis],
                              numel_of(x.shape[axis + 1:]))
    block = attrs["block_size"]
    if not block:
        return (outer, channels, inner, 0) if scale.shape == (channels,) else None
    blocked = tuple(-(-d // block) if a == axis else d for a, d in enumerate(x.shape))
    return (outer, channels, inner, block) if scale.shape == blocked else None


def supports_quantize(node, input_types, output_types) -> bool:
    """float32 x and scale to (u)int2/4/8/16, per tensor, per axis or blocked."""
    attrs = filled_attrs(node)
    return (input_types[0].dtype == F32
            and output_types[0].dtype in EIGHT_BIT | SIXTEEN_BIT | SMALL
            and attrs["precision"] in (None, F32, "float32")
            and _axis_params(node, input_types) is not None)


def supports_dequantize(node, input_types, output_types) -> bool:
    """(u)int2/4/8/16 or int32 x with a float32 scale to float32, per tensor, axis or block."""
    return (input_types[0].dtype in EIGHT_BIT | SIXTEEN_BIT | SMALL | {I32}
            and output_types[0].dtype == F32
            and _axis_params(node, input_types) is not None)


def pack_quantize(node, input_types, output_types) -> Packed:
    """Blob: outer, channels, inner, has_zero_point, block."""
    outer, channels, inner, block = _axis_params(node, input_types)
    return Packed(QUANTIZE_BLOB.pack(outer=outer, channels=channels, inner=inner,
                                     has_zero_point=int(_present(input_types, 2) is not None),
                                     block=block))


def supports_dynamic_quantize(node, input_types, output_types) -> bool:
    return _static(input_types)


def pack_dynamic_quantize(node, input_types, output_types) -> Packed:
    return Packed()


# -- the integer GEMM's scratch ---------------------------------------------------------


def _kp(k: int) -> int:
    return -(-k // 4) * 4


def _panels(n: int) -> int:
    return -(-n // QGEMM_NR) * 2


def _rows(m: int) -> int:
    return -(-m // QGEMM_MR) * QGEMM_MR


def _carved(parts) -> int:
    """Bytes of scratch carved in 64-byte pieces, as quant_gemm.c's carve() does."""
    return sum(-(-int(p) // 64) * 64 for p in parts)


# -- MatMulInteger, QLinearMatMul ---------------------------------------------------------


def _matmul_params(node, input_types):
    """(a, a_zero, a_scale, b, b_zero, b_scale) types of either matmul op."""
    if node.op == "MatMulInteger":
        return (input_types[0], _present(input_types, 2), None, input_types[1],
                _present(input_types, 3), None)
    return (input_types[0], input_types[2], input_types[1], input_types[3], input_types[5],
            input_types[4])


def _matmul_geometry(node, input_types):
    """The blob's ints, or None when the C kernel does not take this node."""
    a, a_zero, a_scale, b, b_zero, b_scale = _matmul_params(node, input_types)
    if not _static(input_types) or a.rank < 1 or b.rank < 1:
        return None
    if a.dtype not in EIGHT_BIT or b.dtype not in EIGHT_BIT:
        return None
    a_shape = [1, a.shape[0]] if a.rank == 1 else list(a.shape)
    b_shape = [b.shape[0], 1] if b.rank == 1 else list(b.shape)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    if b_shape[-2] != k:
        return None
    a_rows = b_cols = 1
    for param in (a_zero, a_scale):
        if param is not None and not _per_tensor(param):
            if param.rank != 1 or param.shape[0] != m or a.rank == 1:
                return None
            a_rows = m
    for param in (b_zero, b_scale):
        if param is not None and not _per_tensor(param):
            if param.rank != 1 or param.shape[0] != n or b.rank == 1:
                return None
            b_cols = n
    for param in (a_scale, b_scale):
        if param is not None and param.dtype not in (F32, F16):
            return None
    a_batch, b_batch = a_shape[:-2], b_shape[:-2]
    if numel_of(b_batch) == 1:
        # B is one matrix: A's batches are more rows of one product.
        return [0, numel_of(a_batch) * m, n, k, a_rows, b_cols]
    nb = max(len(a_batch), len(b_batch))
    a_batch = [1] * (nb - len(a_batch)) + a_batch
    b_batch = [1] * (nb - len(b_batch)) + b_batch
    out_batch, a_strides, b_strides = [], [], []
    for d in range(nb):
        if a_batch[d] != b_batch[d] and 1 not in (a_batch[d], b_batch[d]):
            return None
        out_batch.append(max(a_batch[d], b_batch[d]))
        a_strides.append(0 if a_batch[d] == 1 else numel_of(a_batch[d + 1:]))
        b_strides.append(0 if b_batch[d] == 1 else numel_of(b_batch[d + 1:]))
    if nb > 8:
        return None
    return [nb, *out_batch, *a_strides, *b_strides, m, n, k, a_rows, b_cols]


def supports_matmul(node, input_types, output_types) -> bool:
    """8-bit operands, static shapes, parameters per tensor, per row of A, per column of B."""
    if node.op == "QLinearMatMul":
        y_scale, y_zero = input_types[6], input_types[7]
        if y_scale.dtype not in (F32, F16) or not _per_tensor(y_scale) \
                or not _per_tensor(y_zero):
            return False
    return _matmul_geometry(node, input_types) is not None


def pack_matmul(node, input_types, output_types) -> Packed:
    """Blob: nb, out_batch[nb], a_stride[nb], b_stride[nb], m, n, k, a_rows, b_cols."""
    ints = _matmul_geometry(node, input_types)
    m, n, k = ints[-5], ints[-4], ints[-3]
    mp, kp = _rows(m), _kp(k)
    panels = _panels(n)
    scratch = _carved([mp * kp, panels * kp * QGEMM_PANEL, 4 * mp, 4 * mp,
                       4 * panels * QGEMM_PANEL, 4 * n, 4 * mp, 4 * n])
    return Packed(pack_values(ints), scratch)


# -- ConvInteger, QLinearConv ---------------------------------------------------------------


def _conv_operands(node, input_types):
    """(x, x_zero, w, w_zero, w_scale, bias) types of either conv op."""
    if node.op == "ConvInteger":
        return (input_types[0], _present(input_types, 2), input_types[1],
                _present(input_types, 3), None, None)
    return (input_types[0], input_types[2], input_types[3], input_types[5], input_types[4],
            _present(input_types, 8))


def _conv_plan(node, input_types):
    """(ints, scratch bytes), or None when the C kernel does not take this node."""
    x, x_zero, w, w_zero, w_scale, bias = _conv_operands(node, input_types)
    if not _static(input_types) or not 3 <= x.rank <= 5 or w.rank != x.rank:
        return None
    if x.dtype not in EIGHT_BIT or w.dtype not in EIGHT_BIT or numel_of(x.shape) == 0:
        return None
    if x_zero is not None and not _per_tensor(x_zero):
        return None
    per_channel = 0
    for param in (w_zero, w_scale):
        if param is not None and not _per_tensor(param):
            if param.rank != 1 or param.shape[0] != w.shape[0]:
                return None
            per_channel = 1
    attrs = filled_attrs(node)
    kernel = attrs["kernel_shape"] or w.shape[2:]
    window = _window(attrs, x.rank - 2, kernel, node_fail(node))
    in_dims = list(x.shape[2:])
    out_dims, pads = _layout(window, in_dims)
    check_window(node, window, in_dims, out_dims, pads)
    n, c, m, group = x.shape[0], x.shape[1], w.shape[0], attrs["group"]
    if c % group or m % group or w.shape[1] * group != c:
        return None
    k = (c // group) * numel_of(window.kernel)
    kp, out_size = _kp(k), numel_of(out_dims)
    block = min(out_size, max(QGEMM_NR, QCONV_MAX_PATCH_BYTES // kp // QGEMM_NR * QGEMM_NR))
    block = max(block, 1)
    ints = [n, c, m, group, int(bias is not None), per_channel, block,
            *window_ints(in_dims, out_dims, window.kernel, window.strides, window.dilations,
                         [p[0] for p in pads])]
    mp = _rows(m // group)
    panels = _panels(block)
    scratch = _carved([group * mp * kp, panels * kp * QGEMM_PANEL, 4 * group * mp, 4 * m,
                       4 * panels * QGEMM_PANEL, 4 * block, 4 * m, 4 * block])
    return ints, scratch


def supports_conv(node, input_types, output_types) -> bool:
    """8-bit x and w, 1 to 3 spatial dims, static shapes; x's parameters per tensor, w's
    per tensor or per output channel; QLinearConv's scales float32."""
    if node.op == "QLinearConv":
        if any(input_types[i].dtype != F32 for i in (1, 4, 6)) \
                or not _per_tensor(input_types[6]) or not _per_tensor(input_types[7]) \
                or not _per_tensor(input_types[1]):
            return False
    return _conv_plan(node, input_types) is not None


def pack_conv(node, input_types, output_types) -> Packed:
    """Blob: n, c, m, group, has_bias, w_per_channel, block, window[18]."""
    ints, scratch = _conv_plan(node, input_types)
    return Packed(pack_values(ints), scratch)


def _spec(op: str, symbol: str, pack, supports) -> KernelSpec:
    # Dtypes are checked by `supports`: every op here mixes several.
    return KernelSpec(op=op, name=symbol.removeprefix("ge_"),
                      impl=CKernel(symbol, pack=pack, supports=supports))


KERNELS = [
    _spec("QuantizeLinear", "ge_quantize_linear", pack_quantize, supports_quantize),
    _spec("DequantizeLinear", "ge_dequantize_linear", pack_quantize, supports_dequantize),
    _spec("DynamicQuantizeLinear", "ge_dynamic_quantize_linear", pack_dynamic_quantize,
          supports_dynamic_quantize),
    _spec("MatMulInteger", "ge_matmul_integer", pack_matmul, supports_matmul),
    _spec("QLinearMatMul", "ge_qlinear_matmul", pack_matmul, supports_matmul),
    _spec("ConvInteger", "ge_conv_integer", pack_conv, supports_conv),
    _spec("QLinearConv", "ge_qlinear_conv", pack_conv, supports_conv),
]
