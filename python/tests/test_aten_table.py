"""Every entry of luminal's ATen table, compiled strictly (no op left to PyTorch), against
the same function run eagerly by PyTorch."""
import math
import operator
import pathlib
import re

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from luminal import aten as table  # noqa: E402

A = torch.ops.aten
translated = set()


@pytest.fixture(scope="module", autouse=True)
def record_translations():
    """Notes which entries the cases below reach, for the last test."""
    original = dict(table.TABLE)

    def recording(op, fn):
        def run(*args, **kwargs):
            translated.add(op)
            return fn(*args, **kwargs)
        return run
    for op, fn in original.items():
        table.TABLE[op] = recording(op, fn)
    yield
    table.TABLE.update(original)


torch.manual_seed(0)  # the cases' inputs, drawn below, are the same every run


def randn(*shape):
    return torch.randn(*shape)


def positive(*shape):
    return torch.rand(*shape) + 0.5


def mask_without_row_0(n):
    mask = torch.rand(n, n) > 0.3
    mask[0] = False
    return mask


def repeat_heads(x, n):
    """Each head of [b, heads, s, d] n times in a row, as Hugging Face's repeat_kv."""
    b, heads, s, d = x.shape
    return x[:, :, None, :, :].expand(b, heads, n, s, d).reshape(b, heads * n, s, d)


def ints(*shape, high=7):
    return torch.randint(-high, high, shape)


# (name, function, inputs): each function's ops, once AOTAutograd has lowered them, are
# table entries only.
CASES = [
    ("arith", lambda x, y: (x + y, x - y * 2, 3 - x, x * y, x / y, 2 / y, x + 1.5, x * 0.5),
     (randn(3, 4), positive(3, 4))),
    ("broadcast", lambda x, y: (x + y, x * y[0], torch.maximum(x, y), torch.minimum(x, y)),
     (randn(3, 1, 4), randn(5, 4))),
    ("int_arith", lambda a, b: (a + b, a * b, a - 3, a // 2, a % 3, torch.fmod(a, 3), a / 2,
                                torch.div(a, b.abs() + 1, rounding_mode="trunc")),
     (ints(4, 5), ints(4, 5))),
    ("float_rounding", lambda x: (torch.div(x, 0.7, rounding_mode="floor"), x % 0.7,
                                  torch.fmod(x, 0.7), x.floor(), x.ceil(), x.round(), x.trunc(),
                                  torch.remainder(x, x.abs() + 1)),
     (randn(6, 5) * 3,)),
    ("pow", lambda x, y: (x ** 2, x.abs() ** 0.5, y ** x, 2.0 ** x), (randn(4, 4), positive(4, 4))),
    ("compare", lambda x, y: (x < y, x <= 0.1, x > y, x >= 0, x == y, x != 0.5, x.eq(x),
                              x.ne(y)), (randn(3, 5), randn(3, 5))),
    ("logic", lambda a, b: (a & b, a | b, a ^ b, ~a, torch.logical_and(a, b),
                            torch.logical_or(a, b), torch.logical_xor(a, b), a & True),
     (torch.rand(4, 3) > 0.5, torch.rand(4, 3) > 0.5)),
    ("logical_not_of_numbers", lambda x: torch.logical_not(x), (ints(3, 4),)),
    ("where_clamp", lambda x, y: (torch.where(x > 0, x, y), x.clamp(-0.5, 0.5), x.clamp(min=0),
                                  x.clamp(max=y), F.hardtanh(x)), (randn(3, 4), randn(3, 4))),
    ("unary", lambda x: (-x, x.abs(), x.sign(), x.exp(), torch.exp2(x), torch.expm1(x),
                         x.sin(), x.cos(), x.tanh(), x.sinh(), x.cosh(), x.sigmoid(),
                         x.erf()), (randn(5, 3),)),
    # Away from tan's poles, where a cosine built from sin(x + pi/2) keeps only an
    # absolute accuracy that the quotient magnifies.
    ("tan", lambda x: x.tan(), (torch.rand(5, 3) * 2.4 - 1.2,)),
    ("unary_positive", lambda x: (x.log(), x.log2(), x.log10(), x.log1p(), x.sqrt(), x.rsqrt(),
                                  x.reciprocal()), (positive(5, 3),)),
    ("activations", lambda x: (F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"),
                               F.leaky_relu(x, 0.2), F.elu(x), F.silu(x), F.selu(x)),
     (randn(4, 6),)),
    ("special_values", lambda x: (x.isnan(), x.isinf(), torch.nan_to_num(x, 0.0, 9.0, -9.0)),
     (torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -2.0]),)),
    ("reductions", lambda x: (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.mean(),
                              x.mean(-1), x.amax(1), x.amin((0, 1)), x.prod(2), x.prod(),
                              x.var(1), x.var(2, correction=0), x.std(0)), (randn(3, 4, 5),)),
    ("arg_reductions", lambda x: (x.argmax(1), x.argmin(0, keepdim=True), x.max(1), x.min(0)),
     (randn(4, 6),)),
    ("any", lambda x: ((x > 1).any(), (x > 1).any(1), (x > 0).all(0)), (randn(5, 4),)),
    ("cumulative", lambda x: (x.cumsum(1), x.cumprod(0)), (positive(4, 5),)),
    ("softmax", lambda x: (x.softmax(-1), x.log_softmax(1), x.softmax(0)), (randn(3, 7),)),
    ("matmul", lambda a, b, c: (a @ b, torch.bmm(c, c.transpose(1, 2)),
                                torch.addmm(b[0], a, b, beta=0.5, alpha=2.0)),
     (randn(3, 4), randn(4, 4), randn(2, 3, 4))),
    ("conv", lambda x, w, w1: (F.conv2d(x, w, padding=1, stride=2), F.conv2d(x, w, groups=1),
                               F.conv1d(x[:, :, 0], w1, padding=2, dilation=2)),
     (randn(2, 3, 9, 9), randn(4, 3, 3, 3), randn(5, 3, 3))),
    ("conv3d_pooling", lambda x, w: (F.conv3d(x, w, padding=1), F.conv3d(x, w[:, :2], groups=2,
                                                                     stride=2),
                                     F.max_pool3d(x, 3, 2, 1), F.avg_pool3d(x, 2),
                                     F.adaptive_avg_pool3d(x, 1), F.adaptive_avg_pool3d(x, 3)),
     (randn(2, 4, 6, 6, 6), randn(6, 4, 3, 3, 3))),
    ("pooling", lambda x: (F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2),
                           F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, 4)),
     (randn(2, 3, 8, 8),)),
    # Adaptive pooling to sizes that do not divide the input's (spans overlap, or repeat
    # where the output is larger), and a convolution padded apart per dim.
    ("uneven_pooling_and_padding", lambda x, w: (F.adaptive_avg_pool2d(x, (3, 4)),
                                                 F.adaptive_avg_pool2d(x, (7, 9)),
                                                 F.adaptive_avg_pool1d(x[:, :, 0], 3),
                                                 F.adaptive_avg_pool2d(x.half(), (3, 4)),
                                                 F.conv2d(x, w, padding=(0, 1)),
                                                 F.conv2d(x, w, padding=(2, 0), stride=2)),
     (randn(2, 3, 5, 7), randn(4, 3, 1, 3))),
    ("norms", lambda x, w, b: (F.layer_norm(x, (6,), w, b), F.layer_norm(x, (4, 6)),
                               F.group_norm(x.reshape(2, 4, 3, 2), 2, torch.ones(4), b[:4]),
                               F.batch_norm(x.reshape(2, 4, 6), b[:4], w[:4].abs() + 0.1,
                                            w[:4], b[:4])),
     (randn(2, 4, 6), randn(6), randn(6))),
    # Training mode: the batch's statistics, the running ones updated (returned, as the
    # module's buffers would be written).
    ("batch_norm_training", lambda x, rm, rv, w, b: (
        lambda m, v: (F.batch_norm(x, m, v, w, b, training=True, momentum=0.2), m, v))(
            rm.clone(), rv.clone()) + (F.batch_norm(x[:, :, 0], None, None, w, None, True,
                                                    eps=1e-3),),
     (randn(3, 4, 5, 6) * 2 + 1, randn(4), torch.rand(4) + 0.5, randn(4), randn(4))),
    ("views", lambda x: (x.view(6, 4), x.reshape(2, 12).t(), x.permute(2, 0, 1),
                         x.unsqueeze(1).expand(2, 5, 3, 4), x[:, None].squeeze(1),
                         x.transpose(0, 2).contiguous(), x.flatten(), x.flip(0, 2)),
     (randn(2, 3, 4),)),
    # Steps over rows, and as_strided over a contiguous value: a gather, or a reshape where
    # the strides lay the sizes out row-major (those of dims of size 1 aside).
    ("strided_views", lambda x: (x[:, ::2], x[..., 1:4:2], x[:, 1::3, 0::2],
                                 torch.as_strided(x + 1.0, (2, 3, 2), (12, 1, 5), 1),
                                 x.mean(2, keepdim=True).as_strided((2, 3, 1), (3, 1, 3))),
     (randn(2, 5, 4),)),
    # Windows of max pooling rounding up: those starting in the image count.
    # Max pooling's indices (the first of equal maxima: the rounded, ReLU'd image has many),
    # padded, overlapping, with ceil mode.
    ("max_pool_indices", lambda x: (F.max_pool2d(x, 3, 2, 1, return_indices=True),
                                    F.max_pool2d(x.round().relu(), 3, 1, 1, return_indices=True),
                                    F.max_pool2d(x, 2, return_indices=True),
                                    F.max_pool2d(x, 3, 2, ceil_mode=True, return_indices=True)),
     (randn(2, 3, 11, 13),)),
    ("pooling_ceil_mode", lambda x: (F.max_pool2d(x, 3, 2, ceil_mode=True),
                                     F.max_pool2d(x, 2, 2, 1, ceil_mode=True),
                                     F.max_pool2d(x, 3, 3, ceil_mode=True)), (randn(2, 3, 11, 13),)),
    ("squeeze", lambda x: (x.squeeze(), x.squeeze(0), x.squeeze((0, 2))), (randn(1, 3, 1, 2),)),
    ("slicing", lambda x: (x[1:3], x[:, -2:], x[..., 1], x[-1], x[:, 1:-1, :2], x.narrow(2, 1, 2),
                           x.split(2, dim=1), x.split([1, 3], dim=1), x.chunk(2, -1)),
     (randn(4, 4, 4),)),
    # Negative amounts crop (one side or both, alone or with padding on the other side).
    ("cat_pad", lambda x, y: (torch.cat([x, y], 1), torch.cat([x, x, y], -1),
                              torch.stack([x, y]), F.pad(x, (1, 2)), F.pad(x, (0, 1, 2, 0), value=3.0),
                              F.pad(x, (-1, 2)), F.pad(x, (1, -1, -1, 0), value=2.0),
                              F.pad(y, (-1, -1))),
     (randn(2, 3), randn(2, 3))),
    ("scatter_slices", lambda x, y: (torch.slice_scatter(x, y, 1, 1, 3),
                                     torch.select_scatter(x, y[:, 0], 1, -1)), (randn(3, 4), randn(3, 2))),
    ("topk", lambda x: (torch.topk(x, 3), torch.topk(x, 2, dim=0, largest=False),
                        x.topk(1, dim=1), x.half().topk(4)),
     (randn(5, 7),)),
    # Inverse trigonometric and hyperbolic functions, with the points where their
    # compositions would lose precision (near 0, near +-1, far out) and edge values.
    ("inverse_trig", lambda x, u, v: (torch.atan(x), torch.asin(u), torch.acos(u),
                                      torch.atan2(x, v), torch.atan2(v, x), torch.asinh(x),
                                      torch.atanh(u), torch.acosh(x.abs() + 1.0)),
     (torch.tensor([-1e12, -40.0, -3.0, -1.0, -0.3, -1e-6, 0.0, 2e-7, 0.004, 0.5, 0.999, 1.0,
                    7.5, 1e11, float("nan"), float("inf")]),
      torch.tensor([-1.0, -0.9999, -0.97, -0.5, -0.011, -1e-5, 0.0, 1e-7, 0.009, 0.3, 0.6,
                    0.9, 0.99, 0.99999, 1.0, 1.5]),
      torch.tensor([0.0, 2.0, -3.0, 0.0, -0.7, 1.0, -5.0, 4.0, 0.0, -1.0, 2.0, -0.1, 3.0, 0.0,
                    1.0, 1.0]))),
    # Every p the translation tells apart, batched, rows repeated (distance 0, and zero
    # differences for p = 0).
    ("cdist", lambda x, y, b, c: (torch.cdist(x, y), torch.cdist(x, y, p=1.0),
                                  torch.cdist(x, y, p=0.0), torch.cdist(x, y, p=float("inf")),
                                  torch.cdist(x, y, p=3.0), torch.cdist(b, c, p=2.0),
                                  torch.cdist(b, c, p=0.5)),
     (torch.tensor([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5], [0.0, 1.0, 2.0], [4.0, 4.0, -2.0],
                    [1.0, 0.0, 0.0]]),
      torch.tensor([[0.0, 1.0, 2.0], [3.0, 1.0, 0.5], [-1.0, 0.0, 7.0], [1.0, 0.0, 0.0]]),
      randn(2, 5, 6), randn(2, 4, 6))),
    # Both modes the translation takes, every padding, either corner alignment; the grid
    # reaching past the images on every side.
    ("grid_sample", lambda x, g: tuple(
        F.grid_sample(x, g, mode=m, padding_mode=p, align_corners=a)
        for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection")
        for a in (False, True)),
     (randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2) * 3.2 - 1.6)),
    ("inverse_trig_half", lambda x: (torch.atan(x), torch.asinh(x)), (randn(4, 5).half(),)),
    ("sort", lambda x: (torch.sort(x), torch.sort(x, dim=0, descending=True), x.argsort(1),
                        torch.sort(x, stable=True, descending=True)), (randn(5, 7),)),
    # Repeated positions, an index covering part of x, src larger than the index.
    ("scatter_reduce", lambda x, i, j, s: (x.scatter_add(1, i, s), x.scatter_add(0, j, s),
                                           x.scatter_reduce(1, i, s, "amax"),
                                           x.scatter_reduce(1, i, s, "amin", include_self=False),
                                           x.scatter_reduce(1, i, s, "prod"),
                                           x.scatter_reduce(0, j, s, "mean", include_self=False),
                                           x.scatter_reduce(0, j, s, "mean"),
                                           x.scatter_reduce(1, i, s, "sum", include_self=False)),
     (randn(4, 6), torch.tensor([[0, 2, 2, 5], [1, 1, 1, 1], [5, 4, 0, 0]]),
      torch.tensor([[3, 0, 3], [3, 1, 0]]), randn(4, 5))),
    ("scatter", lambda x, i, j, s: (x.scatter(1, i, s), x.scatter(0, j, 2.5),
                                    x.scatter(1, i[:, :1], s)),
     (randn(3, 5), torch.rand(3, 5).argsort(1)[:, :2], torch.rand(3, 5).argsort(0)[:2],
      randn(3, 4))),
    ("gather", lambda w, i, j: (F.embedding(i, w), w.index_select(0, i.flatten()), w[i],
                                torch.gather(w, 1, j)),
     (randn(10, 4), torch.randint(0, 10, (2, 3)), torch.randint(0, 4, (10, 2)))),
    ("advanced_index", lambda x, i, j: (x[i], x[:, i], x[i, :, j[0]], x[:, i[:, None], j[0]],
                                        x[..., -1 - i], x[i[:2, None], j]),
     (randn(4, 5, 6), torch.randint(0, 4, (3,)), torch.randint(-4, 4, (2, 3)))),
    # Bags of embedding rows: summed with per-sample weights, averaged, maxed; an empty
    # bag, the last offset as the end, a padding row left out, and the op itself.
    ("embedding_bag", lambda w, i, o, q, p: (
        F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
        F.embedding_bag(i, w, o, mode="mean"), F.embedding_bag(i, w, o, mode="max"),
        F.embedding_bag(i, w, q, mode="mean", padding_idx=4, include_last_offset=True),
        F.embedding_bag(i.reshape(2, 4), w, mode="max"), A._embedding_bag(w, i, o, False, 1)[0]),
     (randn(10, 4), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4, 4, 6]),
      torch.tensor([0, 3, 3, 8]), torch.rand(8))),
    # Writes through advanced indexing: rows, middle axes, axes apart (their positions in
    # front), a broadcast value, repeated positions accumulated.
    ("index_put", lambda x, i, j, v: (x.index_put((i,), v), x.index_put((i,), torch.tensor(7.0)),
                                      A.index_put(x, [None, j[:, 0]], v[:1, :2]),
                                      A.index_put(x, [i[:2], None, j], v[0, :2, :5]),
                                      x.index_put((i[[0, 0, 1]],), v, accumulate=True)),
     (randn(4, 5, 6), torch.tensor([0, 2, -1]), torch.tensor([[1], [3]]), randn(3, 5, 6))),
    # Lowered by PyTorch into advanced indexing.
    ("upsample", lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                            F.interpolate(x, size=(5, 7), mode="nearest"),
                            F.interpolate(x, scale_factor=2, mode="bilinear")), (randn(1, 2, 3, 4),)),
    ("edge_padding", lambda x: (F.pad(x, (1, 2, 2, 1), mode="reflect"),
                                F.pad(x, (1, 2, 2, 1), mode="replicate")), (randn(1, 2, 5, 6),)),
    ("diagonal_repeat", lambda x: (x.diagonal(), x.repeat(2, 1), x.repeat(2, 1, 3)), (randn(3, 3),)),
    ("creation", lambda x: (torch.zeros_like(x), torch.full_like(x, 2.5), x + torch.arange(4),
                            x * torch.arange(1, 9, 2), torch.full((2, 4), 7.0) - x,
                            torch.ones(2, 4, dtype=torch.int64) + torch.arange(0, 4) * 2,
                            torch.empty(2, 4).fill_(3.0) + x, torch.arange(0.5, 2.5, 0.5)),
     (randn(2, 4),)),
    ("casts", lambda x: (x.to(torch.int64), x.to(torch.float16).to(torch.float32), x.bool(),
                         (x > 0).to(torch.float32) + x.to(torch.int32)), (randn(3, 4) * 5,)),
    ("copies", lambda x: (x.clone(), x.clone().copy_(torch.ones(4)), x.detach() + 1.0),
     (randn(3, 4),)),
    # Overloads that tracing reaches from models rather than from these Python spellings.
    ("overloads", lambda x, a, b: (A.add.Scalar(x, 2), A.sub.Scalar(x, 1.5), A.mul.Scalar(x, 3),
                                   A.div.Scalar(x, 4), A.div.Scalar_mode(x, 0.3, rounding_mode="floor"),
                                   A.fmod.Tensor(x, x.abs() + 0.5), A.ge.Tensor(x, x * 0.5),
                                   A.le.Tensor(x, -x), A.lt.Scalar(x, 0.25),
                                   A.any.dims(a, [0, 1]), A.bitwise_or.Scalar(a, False),
                                   A.bitwise_xor.Scalar(a, True), torch.ops.prims.convert_element_type(
                                       x, torch.float64), A.empty_strided([2, 2], [2, 1]).fill_(1.0),
                                   A.eq.Tensor(x, b), A.ne.Scalar(x, float("nan"))),
     (randn(3, 4), torch.rand(3, 4) > 0.5, torch.tensor([[1.0, float("nan"), 2.0, float("inf")]]))),
    ("attention", lambda q, k, v, m: (F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                      F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0),
                                      A._scaled_dot_product_flash_attention_for_cpu(
                                          q, k, v, is_causal=True)[0],
                                      A._scaled_dot_product_flash_attention_for_cpu(
                                          q, k, v, attn_mask=m)[0]),
     (randn(2, 4, 6, 8), randn(2, 4, 6, 8), randn(2, 4, 6, 8), randn(6, 6))),
    # A query the mask leaves no key gets 0, as from PyTorch's kernels.
    ("attention_masked_row", lambda q, k, v, m: (
        F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        A._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, attn_mask=torch.zeros(m.shape).masked_fill(~m, -math.inf))[0]),
     (randn(2, 4, 6, 8), randn(2, 4, 6, 8), randn(2, 4, 6, 8), mask_without_row_0(6))),
    # A boolean mask made a bias as PyTorch makes it for cuDNN (-65504 where masked): read
    # as the mask (every query keeps a key, where the two agree).
    ("attention_bias_of_a_mask", lambda q, k, v, m: A._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=torch.where(m, torch.scalar_tensor(0.0), torch.scalar_tensor(-65504.0))
    )[0], (randn(2, 4, 6, 8), randn(2, 4, 6, 8), randn(2, 4, 6, 8),
           (torch.rand(6, 6) > 0.5) | torch.eye(6, dtype=torch.bool))),
    # Key heads serving groups of query heads: given as such, and copied per query head as
    # Hugging Face's repeat_kv does (read before the copy).
    ("attention_grouped_heads", lambda q, k, v, m: (
        F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
        F.scaled_dot_product_attention(q, repeat_heads(k, 3), repeat_heads(v, 3), attn_mask=m),
        F.scaled_dot_product_attention(q, repeat_heads(k, 3), repeat_heads(v, 3), is_causal=True)),
     (randn(2, 6, 5, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8), mask_without_row_0(5))),
    ("scalar_tensor", lambda x: torch.where(x > 0, x, torch.tensor(-1.0)), (randn(5,),)),
]


@pytest.mark.parametrize("name,fn,inputs", CASES, ids=[c[0] for c in CASES])
def test_op_matches_eager(name, fn, inputs):
    torch._dynamo.reset()
    fast = torch.compile(fn, backend="luminal", options={"strict": True})
    with torch.no_grad():
        want, got = fn(*inputs), fast(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for w, g in zip(want, got):
        for w1, g1 in zip(w if isinstance(w, tuple) else (w,), g if isinstance(g, tuple) else (g,)):
            assert g1.dtype == w1.dtype and g1.shape == w1.shape
            torch.testing.assert_close(g1, w1, rtol=1e-5, atol=1e-5, equal_nan=True)


# Entries reached only where AOTAutograd leaves the op whole (which depends on how the
# model is written, on the torch version, or on the op having no decomposition applied):
# they are covered by the model tests of test_torch_compile.py or not reached today.
NOT_REACHED_HERE = {A.lift_fresh_copy.default, A.alias.default, operator.getitem,
                    # sizes of symbolic shapes: test_torch_compile.py's dynamic CNN
                    A.sym_size.int, operator.add, operator.sub, operator.mul,
                    operator.floordiv,
                    # backward passes: test_torch_compile.py's convolution and pooling
                    # gradients
                    A.convolution_backward.default, A.avg_pool2d_backward.default,
                    A._adaptive_avg_pool2d_backward.default,
                    A.max_pool2d_with_indices_backward.default,
                    # the GPU's dispatch: test_torch_compile_gpu.py
                    A._scaled_dot_product_efficient_attention.default,
                    A._scaled_dot_product_cudnn_attention.default,
                    A._scaled_dot_product_flash_attention.default}


def test_every_entry_is_reached():
    missing = sorted(str(op) for op in table.TABLE if op not in translated and
                     op not in NOT_REACHED_HERE)
    assert not missing, " ".join(missing)


def test_the_docs_list_the_table():
    doc = (pathlib.Path(__file__).parents[2] / "docs" / "torch_compile.md").read_text()
    listed = set(re.findall(r"^- `((?:aten|prims)\.[\w.]+)`", doc, re.M))
    assert listed == {str(op) for op in table.TABLE if isinstance(op, torch._ops.OpOverload)}, (
        "docs/torch_compile.md: regenerate the list with python/tools/aten_coverage.py")
