"""Converter tests: small functions compiled with the ge backend on random inputs.

Each case must be converted entirely (no op left to PyTorch) and match eager. The cases
aim at the places where ge-hub's ONNX semantics and PyTorch's differ: type promotion,
integer and floor division, remainders of negative numbers, pooling windows, resampling
coordinates, advanced indexing, and PyTorch's fused inference kernels.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_matches, compile_ge


def floats(*shape, low=-3.0, high=3.0):
    def make(gen):
        x = torch.rand(*shape, generator=gen) * (high - low) + low
        return torch.where(x == 0, torch.full_like(x, 0.5), x)

    return make


def ints(*shape, low=-9, high=10, dtype=torch.int64):
    def make(gen):
        x = torch.randint(low, high, shape, generator=gen, dtype=dtype)
        return torch.where(x == 0, torch.ones_like(x), x)

    return make


def bools(*shape):
    return lambda gen: torch.rand(*shape, generator=gen) < 0.5


def indices(*shape, high):
    return lambda gen: torch.randint(0, high, shape, generator=gen)


def _stack_of_parts(p0, p1, p2, a):
    return torch.stack([p0, a]) + p1 + p2.sum(1, keepdim=True)


CASES = {
    # arithmetic and promotion
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2.5), [floats(3, 4), floats(4)]),
    "int_plus_float_scalar": (lambda a: a + 2.5, [ints(3, 4)]),
    "int_true_division": (lambda a, b: a / b, [ints(5, 6), ints(5, 6)]),
    "int_floor_division": (lambda a, b: a // b, [ints(5, 6), ints(5, 6)]),
    "float_floor_division": (lambda a, b: torch.div(a, b, rounding_mode="floor"),
                             [floats(5, 6), floats(5, 6)]),
    "trunc_division": (lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                       [floats(5, 6), floats(5, 6)]),
    "int_remainder": (lambda a, b: a % b, [ints(5, 6), ints(5, 6)]),
    "float_remainder": (lambda a, b: torch.remainder(a, b), [floats(5, 6), floats(5, 6)]),
    "fmod": (lambda a, b: torch.fmod(a, b), [floats(5, 6), floats(5, 6)]),
    "pow_and_square": (lambda a: a.abs() ** 1.5 + a ** 2, [floats(4, 5)]),
    "rsub_scalar": (lambda a: 1 - a, [floats(4, 5)]),
    "max_min": (lambda a, b: torch.maximum(a, b) - torch.minimum(a, b), [floats(3, 4),
                                                                           floats(1, 4)]),
    "int_mul_bool": (lambda a, m: a * m, [ints(4, 4), bools(4, 4)]),
    # comparison and logic
    "compare_int_with_float": (lambda a: (a > 1.5) & (a <= 7), [ints(4, 5)]),
    "eq_ne": (lambda a, b: (a == b) | (a != b * 2), [ints(4, 5, low=-2, high=3),
                                                     ints(4, 5, low=-2, high=3)]),
    "logical_ops": (lambda a, b: torch.logical_xor(a, ~b) | torch.logical_not(a),
                    [bools(3, 5), bools(3, 5)]),
    "int_bitwise": (lambda a, b: (a & b) | (a ^ 3) | ~b, [ints(4, 5), ints(4, 5)]),
    "where_promotes": (lambda c, a, b: torch.where(c, a, b), [bools(3, 4), floats(3, 4),
                                                              ints(3, 4)]),
    "masked_fill": (lambda x, m: x.masked_fill(m, -1.0), [floats(3, 4), bools(3, 4)]),
    "isnan_isinf": (lambda x: torch.isnan(x / (x - x)) | torch.isinf(x / 0.0), [floats(4)]),
    # unary math and activations
    "unary_math": (lambda x: torch.exp(x / 3) + torch.sin(x) * torch.tanh(x) + torch.erf(x)
                   + torch.rsqrt(x.abs()) - torch.sigmoid(x), [floats(4, 5)]),
    "rounding": (lambda x: torch.floor(x) + torch.ceil(x) + torch.round(x) + torch.trunc(x),
                 [floats(6, 7, low=-5, high=5)]),
    "int_abs_neg_sign": (lambda a: a.abs() - a.neg() * a.sign(), [ints(5)]),
    "activations": (lambda x: F.elu(x) + F.celu(x, 0.7) + F.selu(x) + F.leaky_relu(x, 0.2)
                    + F.hardsigmoid(x) + F.hardswish(x) + F.mish(x) + F.silu(x)
                    + F.softplus(x) + F.relu6(x) + F.hardtanh(x, -0.5, 0.8),
                    [floats(4, 6)]),
    "gelu_both": (lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"), [floats(4, 6)]),
    "clamp_forms": (lambda x, lo: x.clamp(min=-1.0) + x.clamp(max=0.5) + x.clamp(lo, lo + 1),
                    [floats(3, 4), floats(3, 4)]),
    "prelu": (lambda x, w: F.prelu(x, w), [floats(2, 3, 4), floats(3)]),
    "casts": (lambda x: x.to(torch.int32).to(torch.float64) + x.double(), [floats(3, 4)]),
    # reductions
    "sum_mean_keepdim": (lambda x: x.sum(1, keepdim=True) + x.mean((0, 2), keepdim=True)
                         .sum(), [floats(2, 3, 4)]),
    "int_sum_is_int64": (lambda a: a.sum(0), [ints(4, 5, dtype=torch.int32)]),
    "bool_sum_counts": (lambda m: m.sum(-1), [bools(4, 5)]),
    "amax_amin_prod": (lambda x: x.amax(1) - x.amin((0, 1)) + x.prod(1), [floats(3, 4)]),
    "max_dim_values_indices": (lambda x: x.max(1).values + x.min(0, keepdim=True)[1].T,
                               [floats(4, 4)]),
    "argmax_flat_and_dim": (lambda x: x.argmax() + x.argmin(1), [floats(4, 5)]),
    "var_std": (lambda x: x.var(1) + x.std(0).sum() + x.var(unbiased=False),
                [floats(4, 5)]),
    "var_mean": (lambda x: torch.stack(torch.var_mean(x, dim=-1, correction=0)),
                 [floats(3, 6)]),
    "any_all": (lambda m: m.any(1) | m.all(0)[:3] | m.any(), [bools(3, 4)]),
    "cumsum": (lambda x: x.cumsum(1), [floats(3, 6)]),
    "logsumexp_norm": (lambda x: torch.logsumexp(x, 1) + x.norm(dim=1), [floats(3, 6)]),
    # shapes and movement
    # (* 2: a view returned as an output is taken by PyTorch from its base, as in eager,
    # which would leave nothing but views here; see test_backend's aliasing tests)
    "view_permute_expand": (lambda x: x.view(2, 3, 4).permute(2, 0, 1).unsqueeze(1)
                            .expand(4, 5, 2, 3).reshape(20, 6) * 2, [floats(6, 4)]),
    "cat_stack_split": (lambda a, b: _stack_of_parts(*torch.cat([a, b], 1).split([2, 1, 3], 1),
                                                     a), [floats(3, 2), floats(3, 4)]),
    "chunk_unbind": (lambda x: sum(x.chunk(3, dim=0)) + sum(x.unbind(1)).unsqueeze(1).mean(),
                     [floats(6, 4)]),
    "slice_select_negative": (lambda x: x[1:, ::2, -1] + x[-1, :3:2, 2:4].sum(),
                              [floats(4, 5, 6)]),
    "flip_repeat_pad": (lambda x: F.pad(torch.flip(x, [0, 2]).repeat(1, 2, 1), (1, 2, 0, 1),
                                        value=0.5), [floats(2, 3, 4)]),
    "squeeze_forms": (lambda x: x.squeeze() + x.squeeze(1).sum() + x.squeeze((0, 3)),
                      [floats(1, 1, 4, 1)]),
    "transpose_t_contiguous": (lambda x: x.t().contiguous() @ x.transpose(0, 1).T,
                               [floats(3, 4)]),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), [floats(1, 8, 3, 3)]),
    # indexing
    "embedding_index_select": (lambda w, i: F.embedding(i, w) + w.index_select(0, i[0])
                               .sum(), [floats(10, 4), indices(2, 5, high=10)]),
    "gather": (lambda x, i: torch.gather(x, 1, i), [floats(3, 5), indices(3, 4, high=5)]),
    "advanced_index_adjacent": (lambda x, i, j: x[:, i, j], [floats(2, 5, 6),
                                                              indices(3, high=5),
                                                              indices(3, high=6)]),
    "advanced_index_split": (lambda x, i, j: x[i, :, j], [floats(5, 2, 6), indices(4, high=5),
                                                          indices(1, high=6)]),
    "advanced_index_negative": (lambda x, i: x[i - 5, i], [floats(5, 5), indices(3, high=5)]),
    # factories
    "arange_full_like": (lambda x: x + torch.arange(x.shape[1]) * 0.5
                         + torch.full_like(x, 2.0) + torch.ones(x.shape[1]), [floats(3, 4)]),
    "tril_triu": (lambda x: torch.tril(x) - torch.triu(x, 1), [floats(4, 4)]),
    # linear algebra
    "matmul_forms": (lambda a, b, v: (a @ b).sum() + torch.bmm(a.unsqueeze(0), b.unsqueeze(0))
                     + (a @ v), [floats(3, 4), floats(4, 3), floats(4)]),
    "addmm_beta_alpha": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
                         [floats(3), floats(2, 4), floats(4, 3)]),
    "einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), [floats(2, 3, 4),
                                                                  floats(2, 4, 5)]),
    # sort (TopK of the whole axis): values and indices, both directions, ties, NaN
    "sort": (lambda x: _sorted_parts(torch.sort(x, dim=1)), [floats(4, 7)]),
    "sort_descending_dim0": (lambda x: _sorted_parts(torch.sort(x, 0, descending=True)),
                             [floats(5, 3)]),
    "sort_stable_ties": (lambda x: _sorted_parts(torch.sort(x, stable=True, descending=True)),
                         [ints(3, 9, low=0, high=3)]),
    "sort_nan": (lambda x: _sorted_parts(torch.sort(torch.where(x > 1, torch.nan, x))),
                 [floats(3, 8)]),
    "argsort": (lambda x: torch.argsort(x, dim=-1) * 2, [floats(2, 3, 6)]),
    # as_strided on a contiguous intermediate (the output is computed from it: a view
    # returned as such would be left to PyTorch)
    "as_strided_transpose": (lambda x: torch.as_strided(x * 2, (4, 3), (1, 4)) + 1,
                             [floats(3, 4)]),
    "as_strided_offset_block": (lambda x: torch.as_strided(x * 2, (2, 1, 3), (4, 9, 1), 5) + 1,
                                [floats(3, 4)]),
    "as_strided_windows": (lambda x: torch.as_strided(x + 1, (5, 4), (2, 1)).sum(1),
                           [floats(12)]),
    "as_strided_broadcast": (lambda x: torch.as_strided(x - 1, (3, 2, 4), (0, 4, 1), 4) * 3,
                             [floats(2, 6)]),
}


def _sorted_parts(result):
    values, order = result
    # (NaN compares unequal in assert_close: where the NaNs went shows as 100)
    return torch.where(torch.isnan(values), 100.0, values * 2), order + 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_converted_function_matches_eager(name, gen):
    fn, makers = CASES[name]
    inputs = [make(gen) for make in makers]
    with torch.no_grad():
        expected = fn(*inputs)
        compiled, reports = compile_ge(fn)
        actual = compiled(*inputs)
    assert_matches(actual, expected)
    assert reports, "the backend was not called"
    fallback = {op: n for r in reports for op, n in r.fallback_ops.items()}
    assert not fallback, f"ran in PyTorch: {fallback}"


def test_split_with_unread_outputs(gen):
    def fn(x):
        return x.split([2, 1, 3], 1)[0] * 2

    x = floats(3, 6)(gen)
    with torch.no_grad():
        compiled, reports = compile_ge(fn)
        assert_matches(compiled(x), fn(x))


MODULES = {
    "conv1d_dilated_grouped": (lambda: torch.nn.Conv1d(4, 6, 3, stride=2, padding=2,
                                                       dilation=2, groups=2), [floats(2, 4, 9)]),
    "conv3d": (lambda: torch.nn.Conv3d(2, 3, 2, padding=1), [floats(1, 2, 3, 4, 4)]),
    "conv_transpose_output_padding": (lambda: torch.nn.ConvTranspose2d(
        3, 2, 3, stride=2, padding=1, output_padding=1), [floats(1, 3, 4, 5)]),
    "max_pool_ceil_mode": (lambda: torch.nn.MaxPool2d(3, 2, padding=1, ceil_mode=True),
                           [floats(1, 2, 8, 9)]),
    "max_pool_dilated": (lambda: torch.nn.MaxPool2d(2, 1, dilation=2), [floats(1, 2, 6, 6)]),
    "avg_pool_no_pad_count": (lambda: torch.nn.AvgPool2d(3, 2, padding=1,
                                                         count_include_pad=False),
                              [floats(1, 2, 7, 7)]),
    "avg_pool_pad_count": (lambda: torch.nn.AvgPool2d(2, padding=1), [floats(1, 2, 5, 5)]),
    "adaptive_avg_pool": (lambda: torch.nn.AdaptiveAvgPool2d((2, 3)), [floats(1, 2, 6, 9)]),
    "group_norm": (lambda: torch.nn.GroupNorm(2, 6), [floats(2, 6, 3, 3)]),
    "layer_norm_no_affine": (lambda: torch.nn.LayerNorm([3, 4], elementwise_affine=False),
                             [floats(2, 3, 4)]),
    "batch_norm_1d": (lambda: torch.nn.BatchNorm1d(5), [floats(4, 5)]),
    "instance_norm": (lambda: torch.nn.InstanceNorm2d(3, affine=True), [floats(2, 3, 4, 4)]),
    "upsample_nearest": (lambda: torch.nn.Upsample(scale_factor=2, mode="nearest"),
                         [floats(1, 2, 3, 4)]),
    "upsample_nearest_size": (lambda: torch.nn.Upsample(size=(5, 7), mode="nearest"),
                              [floats(1, 2, 3, 4)]),
    "upsample_bilinear": (lambda: torch.nn.Upsample(scale_factor=2, mode="bilinear"),
                          [floats(1, 2, 3, 4)]),
    "upsample_bilinear_align_corners": (lambda: torch.nn.Upsample(
        size=(5, 7), mode="bilinear", align_corners=True), [floats(1, 2, 3, 4)]),
    "softmax_log_softmax": (lambda: torch.nn.Sequential(torch.nn.Softmax(1),
                                                        torch.nn.LogSoftmax(0)),
                            [floats(3, 5)]),
    "multihead_attention_fast_path": (lambda: torch.nn.MultiheadAttention(
        8, 2, batch_first=True), [floats(2, 5, 8)]),
    "transformer_layer_norm_first_relu": (lambda: torch.nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=True), [floats(2, 5, 8)]),
}


class _SelfAttention(torch.nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_converted_module_matches_eager(name, gen):
    torch.manual_seed(0)
    build, makers = MODULES[name]
    module = build()
    if isinstance(module, torch.nn.MultiheadAttention):
        module = _SelfAttention(module)
    module = module.eval()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
    inputs = [make(gen) for make in makers]
    with torch.no_grad():
        expected = module(*inputs)
        compiled, reports = compile_ge(module)
        actual = compiled(*inputs)
    assert_matches(actual, expected)
    fallback = {op: n for r in reports for op, n in r.fallback_ops.items()}
    assert reports and not fallback, f"ran in PyTorch: {fallback}"
