"""Every hlop bound in Python against NumPy on random inputs (f32, 1e-5 relative)."""
import math

import numpy as np
import pytest

import luminal
from conftest import run

erf = np.vectorize(math.erf)

UNARY = {
    "exp": np.exp, "log": np.log, "exp2": np.exp2, "log2": np.log2, "sin": np.sin,
    "cos": np.cos, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "recip": lambda x: 1 / x,
    "abs": np.abs, "sign": np.sign, "square": np.square, "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh, "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "erf": erf, "floor": np.floor, "ceil": np.ceil, "round": np.round,
}
POSITIVE = {"log", "log2", "sqrt", "rsqrt", "recip"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, rng):
    x = rng.uniform(0.1 if name in POSITIVE else -3, 3, (4, 37)).astype(np.float32)
    got = run(lambda g, t: getattr(t, name)(), x)
    np.testing.assert_allclose(got, UNARY[name](x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "%"])
def test_binary_broadcasts_and_takes_numbers_on_either_side(op, rng):
    a = rng.uniform(0.5, 3, (3, 1, 5)).astype(np.float32)
    b = rng.uniform(0.5, 3, (4, 1)).astype(np.float32)
    f = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
         "/": lambda x, y: x / y, "%": lambda x, y: x % y}[op]
    got = run(lambda g, x, y: (f(x, y), f(x, 1.5), f(2.5, y)), a, b)
    want = (f(a, b), f(a, np.float32(1.5)), f(np.float32(2.5), b))
    for gv, wv in zip(got, want):
        np.testing.assert_allclose(gv, wv, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod"])
@pytest.mark.parametrize("axis,keepdim", [(None, False), (1, False), ((0, 2), True), (-1, True)])
def test_reductions(name, axis, keepdim, rng):
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    got = run(lambda g, t: getattr(t, name)(axis=axis, keepdim=keepdim), x)
    want = getattr(np, name)(x.astype(np.float64), axis=axis, keepdims=keepdim)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_variance_and_deviation_with_corrections(rng):
    x = rng.normal(size=(6, 9)).astype(np.float32)
    got = run(lambda g, t: (t.var(axis=1), t.std(axis=0, correction=0)), x)
    np.testing.assert_allclose(got[0], x.var(axis=1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(got[1], x.std(axis=0, ddof=0), rtol=1e-5)


def test_softmax_and_norms(rng):
    x = rng.normal(size=(5, 16)).astype(np.float32)
    got = run(lambda g, t: (t.softmax(-1), t.log_softmax(1), t.layer_norm(), t.rms_norm(eps=1e-6)), x)
    d = x.astype(np.float64)
    e = np.exp(d - d.max(1, keepdims=True))
    softmax = e / e.sum(1, keepdims=True)
    layer = (d - d.mean(1, keepdims=True)) / np.sqrt(d.var(1, keepdims=True) + 1e-5)
    rms = d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-6)
    for g, w in zip(got, (softmax, np.log(softmax), layer, rms)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_batched_matmul_and_the_operator(rng):
    a = rng.normal(size=(2, 3, 8)).astype(np.float32)
    b = rng.normal(size=(8, 5)).astype(np.float32)
    got = run(lambda g, x, y: (x @ y, x.matmul(y)), a, b)
    for g in got:
        np.testing.assert_allclose(g, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_shape_ops(rng):
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    got = run(lambda g, t: (t.reshape(6, 4), t.permute(2, 0, 1), t.transpose(0, 2),
                            t.unsqueeze(1), t.slice(2, 1, 3), t.flatten(), t.flip(1),
                            t.sum(axis=2, keepdim=True).expand(2, 3, 4)), x)
    want = (x.reshape(6, 4), x.transpose(2, 0, 1), x.transpose(2, 1, 0), x[:, None],
            x[:, :, 1:3], x.reshape(-1), x[:, ::-1], np.broadcast_to(x.sum(2, keepdims=True), x.shape))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_where_concat_stack_cumsum_argmax(rng):
    a = rng.normal(size=(3, 4)).astype(np.float32)
    b = rng.normal(size=(3, 4)).astype(np.float32)
    got = run(lambda g, x, y: (luminal.where(x > y, x, y), luminal.where(x < 0, 0.0, x),
                               luminal.concat([x, y], 1), luminal.stack([x, y], 0),
                               x.cumsum(1), x.argmax(1), x.maximum(y), x.clamp(-0.5, 0.5)), a, b)
    want = (np.where(a > b, a, b), np.where(a < 0, 0, a), np.concatenate([a, b], 1),
            np.stack([a, b]), np.cumsum(a, 1), np.argmax(a, 1), np.maximum(a, b),
            np.clip(a, -0.5, 0.5))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _conv2d(x, w, b, stride, padding, groups):
    """Direct convolution in float64 (N, C, H, W), as torch.nn.functional.conv2d."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    per = o // groups
    for oc in range(o):
        g = oc // per
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3)) + (b[oc] if b is not None else 0)
    return out


@pytest.mark.parametrize("stride,padding,groups", [(1, 0, 1), (2, 1, 1), (1, 1, 2)])
def test_conv2d(stride, padding, groups, rng):
    x = rng.normal(size=(2, 4, 7, 6)).astype(np.float32)
    w = rng.normal(size=(6, 4 // groups, 3, 3)).astype(np.float32)
    b = rng.normal(size=(6,)).astype(np.float32)
    got = run(lambda g, xs, ws, bs: luminal.conv2d(xs, ws, bs, stride=stride, padding=padding,
                                                    groups=groups), x, w, b)
    np.testing.assert_allclose(got, _conv2d(x, w, b, stride, padding, groups), rtol=1e-4, atol=1e-4)


def test_pools(rng):
    x = rng.normal(size=(2, 3, 6, 8)).astype(np.float32)
    got = run(lambda g, t: (luminal.max_pool2d(t, 2), luminal.avg_pool2d(t, 2),
                            luminal.max_pool1d(t.reshape(2, 3, 48), 4, stride=2)), x)
    blocks = x.reshape(2, 3, 3, 2, 4, 2)
    np.testing.assert_allclose(got[0], blocks.max(axis=(3, 5)), rtol=1e-6)
    np.testing.assert_allclose(got[1], blocks.mean(axis=(3, 5)), rtol=1e-5)
    flat = x.reshape(2, 3, 48)
    want = np.stack([flat[..., i:i + 4].max(-1) for i in range(0, 45, 2)], -1)
    np.testing.assert_allclose(got[2], want, rtol=1e-6)


@pytest.mark.parametrize("key", [0, -1, (slice(None), 1), (1, slice(1, 3)), (Ellipsis, 2),
                                 (None, slice(0, 2), Ellipsis), (slice(-3, None), None, -2),
                                 (slice(2, 100),), (Ellipsis,)])
def test_basic_indexing_as_numpy(key, rng):
    x = rng.normal(size=(4, 5, 3)).astype(np.float32)
    got = run(lambda g, t: t[key] * 1.0, x)
    np.testing.assert_array_equal(got, x[key])


def test_indexing_errors():
    g = luminal.Graph()
    x = g.tensor((2, "n"))
    with pytest.raises(IndexError, match="out of bounds"):
        x[2]
    with pytest.raises(IndexError, match="step"):
        x[::2]
    with pytest.raises(IndexError, match="symbolic axis"):
        x[:, -1]
    with pytest.raises(IndexError, match="too many"):
        x[0, 0, 0]
    tail = x[:, 1:"n"]  # slice ends may be dim names
    assert tail.ndim == 2 and tail.shape[0] == 2 and isinstance(tail.shape[1], str)


def test_pad_roll_repeat_unfold_split_chunk_diagonal(rng):
    x = rng.normal(size=(4, 6)).astype(np.float32)
    got = run(lambda g, t: (t.pad(1, 2, 1, value=3.0), t.roll(2, 1), t.roll(-1, 0), t.repeat(2, 1),
                            t.unfold(1, 3, 2), *t.split(4, 1), *t.chunk(2, 0), t.diagonal(1)), x)
    want = (np.pad(x, ((0, 0), (2, 1)), constant_values=3.0), np.roll(x, 2, 1), np.roll(x, -1, 0),
            np.tile(x, (2, 1)), np.stack([x[:, i:i + 3] for i in (0, 2)], 1), x[:, :4], x[:, 4:],
            x[:2], x[2:], np.diagonal(x, 1))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_gather_and_scatter_along_an_axis(rng):
    x = rng.normal(size=(3, 5)).astype(np.float32)
    idx = rng.integers(0, 5, (3, 2)).astype(np.int64)
    src = rng.normal(size=(3, 2)).astype(np.float32)
    idx_unique = np.stack([rng.permutation(5)[:2] for _ in range(3)]).astype(np.int64)
    got = run(lambda g, t, i, j, s: (t.gather_axis(1, i), t.scatter_axis(1, j, s)),
              x, idx, idx_unique, src)
    np.testing.assert_array_equal(got[0], np.take_along_axis(x, idx, 1))
    want = x.copy()
    np.put_along_axis(want, idx_unique, src, 1)
    np.testing.assert_array_equal(got[1], want)


def test_top_k_picks_the_largest_first_lower_positions_first_among_equals(rng):
    x = rng.normal(size=(4, 9)).astype(np.float32)
    x[1, [2, 6]] = x[1].max() + 1  # a tie among the picks: the lower position first
    got = run(lambda g, t: luminal.top_k(t, 3), x)
    assert got.dtype == np.int32
    # A stable sort of the negated values puts equal values in position order.
    np.testing.assert_array_equal(got, np.argsort(-x, axis=1, kind="stable")[:, :3])


def test_cummax_norms_dot_outer_and_logic(rng):
    x = rng.normal(size=(3, 7)).astype(np.float32)
    v = rng.normal(size=(5,)).astype(np.float32)
    w = rng.normal(size=(5,)).astype(np.float32)
    got = run(lambda g, t, a, b: (t.cummax(1), t.mean_norm(), t.std_norm(eps=1e-5),
                                  t.normalize(2.0, 1), a.dot(b), a.outer(b),
                                  luminal.logical_and(a > 0, b > 0), luminal.logical_or(a > 0, b > 0)),
              x, v, w)
    d = x.astype(np.float64)
    want = (np.maximum.accumulate(x, 1), d - d.mean(1, keepdims=True),
            d / np.sqrt(d.var(1, keepdims=True) + 1e-5),
            d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12),
            np.dot(v.astype(np.float64), w), np.outer(v, w), (v > 0) & (w > 0), (v > 0) | (w > 0))
    for g, wv in zip(got, want):
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-6)
