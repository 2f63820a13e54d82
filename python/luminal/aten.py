"""Core ATen ops in luminal: the table torch.compile(backend="luminal") translates with.

Each entry maps an ATen overload to a function of (node, *args, **kwargs) that builds the
op in a luminal graph, one line per op. The args are the FX node's, with tensors already
luminal Tensors and symbolic sizes already dims (ints, or expressions over luminal's
symbolic dims as text). `node` (a Node below) tells the result's dtype and shape as
PyTorch traced them. Whatever a translation yields is cast to the traced dtype after, so
entries leave type promotion to `node.operands`.

Ops whose arguments luminal cannot express (a strided slice, a transposed convolution)
are refused by `SUPPORTED_IF`, so they run in PyTorch instead.
"""
import math
import operator

import torch

from . import _luminal as lm

aten = torch.ops.aten
prims = torch.ops.prims

DTYPES = {torch.float32: lm.float32, torch.float16: lm.float16, torch.bfloat16: lm.bfloat16,
          torch.float64: lm.float64, torch.int32: lm.int32, torch.int64: lm.int64,
          torch.int8: lm.int8, torch.uint8: lm.uint8, torch.bool: lm.bool_}


def dim_text(size):
    """An int, or a torch.SymInt's expression in luminal's syntax (over its dims s0, s1...)."""
    if isinstance(size, int):
        return size
    # The shape environment's own facts first: a symbol tracing settled (a cache's length
    # found to be 0) may live on in the expressions traced before.
    expr = size.node.shape_env.simplify(size.node.expr)
    if expr.is_Integer:
        return int(expr)
    # A size torch's guards pin to one value (an image pooled and flattened into a
    # Linear, whose width is fixed): that value, as the graph runs only while they hold.
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    if size.node.hint is not None and statically_known_true(size == size.node.hint):
        return int(size.node.hint)
    return _sympy_text(expr)


def _traced(size):
    """A size as traced (a SymInt's value in the traced call): comparing these adds no
    guard to the graph."""
    return size.node.hint if isinstance(size, torch.SymInt) else size


def _view(n, x):
    """aten.view as luminal's reshape; where the element counts are not equal as
    expressions but torch's guards make them so (a pooled image of symbolic size
    flattened into a Linear's fixed width), the flattened elements sliced to the count
    the result has, which under those guards is all of them."""
    try:
        return x.reshape(n.shape)
    except lm.Error:
        source = n.fx.args[0].meta.get("val")
        if source is None or _traced(source.numel()) != _traced(n.val.numel()):
            raise
    count = 1
    for d in n.shape:
        count = count * d if isinstance(d, int) and isinstance(count, int) else f"{count}*{d}"
    return x.flatten().slice(0, 0, count).reshape(n.shape)


def _sympy_text(e):
    import sympy
    name = type(e).__name__
    # (Torch's own subclasses count as their base: CleanDiv, a FloorDiv known to be exact,
    # is how an image's size halved by a strided convolution comes.)
    kinds = {c.__name__ for c in type(e).__mro__}
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return e.name
    kids = [_sympy_text(a) for a in e.args]
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(kids) + ")"
    if isinstance(e, sympy.Mul):
        return "(" + "*".join(kids) + ")"
    if isinstance(e, sympy.Pow) and e.args[1].is_Integer and int(e.args[1]) > 0:
        return "(" + "*".join([kids[0]] * int(e.args[1])) + ")"
    if "FloorDiv" in kinds:
        return f"({kids[0]} / {kids[1]})"
    if kinds & {"Mod", "PythonMod"}:
        return f"({kids[0]} % {kids[1]})"
    if name in ("Max", "Min") and len(kids) == 2:
        return f"{name.lower()}({kids[0]}, {kids[1]})"
    raise NotImplementedError(f"the symbolic size {e} has no luminal expression")


def traced(a):
    """An FX node's value as traced (its meta's "val"); anything else as it is."""
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else a


class Node:
    """An FX node being translated: the luminal graph it goes into, and its traced result."""

    def __init__(self, graph, fx_node, env=None):
        self.g = graph
        self.fx = fx_node
        self.env = env or {}  # the luminal values of the subgraph's nodes translated so far
        val = fx_node.meta.get("val")
        self.val = val[0] if isinstance(val, (tuple, list)) else val

    @property
    def dtype(self):
        return self.val.dtype

    @property
    def shape(self):
        return tuple(dim_text(s) for s in self.val.shape)

    def promoted(self):
        """The dtype PyTorch computes a binary op's two arguments in (torch.result_type)."""
        def stand_in(v):  # an empty tensor of the dtype, 0-d where the argument is
            v = traced(v)
            return torch.empty((1,) * min(v.dim(), 1), dtype=v.dtype) if isinstance(
                v, torch.Tensor) else v
        return torch.result_type(stand_in(self.fx.args[0]), stand_in(self.fx.args[1]))

    def operands(self, *xs, dtype=None):
        """The arguments as luminal tensors of `dtype` (the result's by default)."""
        want = DTYPES[dtype or self.dtype]
        return [x.cast(want) if isinstance(x, lm.Tensor) and x.dtype != want else
                x if isinstance(x, lm.Tensor) else self.g.constant(float(x), want) for x in xs]

    def full(self, value):
        return self.g.full(self.shape, float(value), DTYPES[self.dtype])


def _axes(x, dims):
    """Reduction axes: None or [] is every axis, as in ATen."""
    return list(range(len(x.shape))) if dims is None or dims == [] else [
        d if isinstance(d, int) else int(d) for d in ([dims] if isinstance(dims, int) else dims)]


def _arith(fn):
    def translate(n, a, b, alpha=1, **_):
        a, b = n.operands(a, b)
        return fn(a, b if alpha == 1 else b * n.operands(alpha)[0])
    return translate


def _compare(fn):
    def translate(n, a, b):
        return fn(*n.operands(a, b, dtype=n.promoted()))
    return translate


def _unary(fn):
    return lambda n, x, *args, **kwargs: fn(n.operands(x)[0], *args, **kwargs)


def _div_mode(n, a, b, rounding_mode=None):
    a, b = n.operands(a, b, dtype=n.promoted())
    q = a / b
    if rounding_mode == "floor":
        return q.floor()
    if rounding_mode == "trunc":
        return _trunc(q)
    return q


def _reduce(method):
    def translate(n, x, dims=None, keepdim=False, **_):
        return getattr(n.operands(x)[0], method)(axis=_axes(x, dims), keepdim=keepdim)
    return translate


def _var(n, x, dims=None, correction=1, keepdim=False):
    return n.operands(x)[0].var(axis=_axes(x, dims), correction=int(correction), keepdim=keepdim)


def _any(n, x, dims=None, keepdim=False):
    return (x.cast(lm.float32).abs().sum(axis=_axes(x, dims), keepdim=keepdim) > 0.0)


def _arg_with_values(method, arg):
    def translate(n, x, dim, keepdim=False):
        return (getattr(x, method)(axis=dim, keepdim=keepdim), getattr(x, arg)(dim, keepdim))
    return translate


def _axis_last(rank, axis):
    """The permutation moving `axis` last (the others in order), and the one back."""
    order = [a for a in range(rank) if a != axis] + [axis]
    return order, [order.index(a) for a in range(rank)]


def _topk(n, x, k, dim=-1, largest=True, sorted=True):
    """The k largest (or smallest) values along `dim` and their positions, largest (or
    smallest) first: luminal's top_k runs along the last axis, so another axis is moved
    there and back. (With `sorted=False` the order is PyTorch's to choose; this one is
    sorted too.)"""
    x = n.operands(x)[0]
    last = len(x.shape) - 1
    dim = dim % len(x.shape)
    order, back = _axis_last(last + 1, dim)
    moved = x.permute(order) if dim != last else x
    picks = lm.top_k(moved if largest else -moved, int(k))
    values = moved.gather_axis(last, picks)
    if dim != last:
        values, picks = values.permute(back), picks.permute(back)
    return values, picks.cast(lm.int64)


def _sort(n, x, dim=-1, descending=False, stable=False):
    """All of `dim` in order, with the positions it came from: a top-k of all of it.
    (Among equal values the lower position comes first, a stable order.)"""
    return _topk(n, x, x.shape[dim], dim, largest=descending)


def _computed_in(dtype):
    """The type PyTorch's kernels compute a float type in: f32 for the half types."""
    return dtype if dtype in (lm.float32, lm.float64) else lm.float32


def _half_in_f32(fn, *xs):
    """fn over xs, which are of one type: computed in f32 where that is a half-precision
    type and rounded once back to it, as PyTorch's kernels do."""
    dtype = xs[0].dtype
    if _computed_in(dtype) == dtype:
        return fn(*xs)
    return fn(*(x.cast(lm.float32) for x in xs)).cast(dtype)


def _in_f32(fn):
    """A unary op composed of several steps, half precision computed in f32."""
    return lambda n, x: _half_in_f32(fn, n.operands(x)[0])


# Abramowitz & Stegun 4.4.49: atan(t) for t in [0, 1] as t times a polynomial in t^2,
# within 2e-8; beyond 1, pi/2 - atan(1/t).
ATAN_COEFFICIENTS = (1.0, -0.3333314528, 0.1999355085, -0.1420889944, 0.1065626393,
                     -0.0752896400, 0.0429096138, -0.0161657367, 0.0028662257)


def _atan(x):
    a = x.abs()
    big = a > 1.0
    t = lm.where(big, 1.0 / a, a)
    t2 = t * t
    poly = t2 * ATAN_COEFFICIENTS[-1]
    for c in reversed(ATAN_COEFFICIENTS[1:-1]):
        poly = (poly + c) * t2
    r = (poly + 1.0) * t
    r = lm.where(big, math.pi / 2 - r, r)
    return lm.where(x < 0.0, -r, r)  # (a NaN stays one)


def _asin(x):
    return _atan(x / ((1.0 - x) * (1.0 + x)).sqrt())  # +-inf at +-1: +-pi/2


def _acos(x):
    return _atan(((1.0 - x) / (1.0 + x)).sqrt()) * 2.0  # (no cancellation near 1)


def _atan2(n, y, x):
    y, x = n.operands(y, x, dtype=n.promoted())
    wide = _computed_in(x.dtype)
    y, x = y.cast(wide), x.cast(wide)
    r = _atan(y / x)
    r = lm.where(x < 0.0, lm.where(y < 0.0, r - math.pi, r + math.pi), r)
    on_axis = lm.where(y > 0.0, math.pi / 2, lm.where(y < 0.0, -math.pi / 2, 0.0 * y))
    return lm.where(x == 0.0, on_axis, r)


# Near 0 the logarithms below lose the small result to rounding (1 + 1e-8 is 1 in f32):
# there a series, to x^5. Far out, x^2 overflows: there log(2|x|).
def _asinh(x):
    a = x.abs()
    r = lm.where(a < 0.01, a - a * a * a / 6.0 + a * a * a * a * a * 0.075,
                 lm.where(a > 1e10, a.log() + math.log(2.0), (a + (a * a + 1.0).sqrt()).log()))
    return lm.where(x < 0.0, -r, r)


def _acosh(x):
    return lm.where(x > 1e10, x.log() + math.log(2.0),
                    (x + ((x - 1.0) * (x + 1.0)).sqrt()).log())


def _atanh(x):
    return lm.where(x.abs() < 0.01, x + x * x * x / 3.0 + x * x * x * x * x * 0.2,
                    ((1.0 + x) / (1.0 - x)).log() * 0.5)


def _scatter_reduce(n, x, dim, index, src, reduce="sum", include_self=True):
    x, src = n.operands(x, src)
    return _reduced_into(n.g, x, dim, index, src, reduce, include_self)


def _reduced_into(g, x, dim, index, src, reduce="sum", include_self=True):
    """torch.scatter_reduce (scatter_add: "sum"): each of x's positions along `dim`
    combined with every src element whose index names it. For each output position, the
    index is compared with it over all of the index's positions along `dim` and the
    matching src elements reduced: work of index's size times x's length along `dim`, no
    memory beyond the output (the comparison is fused into the reduction)."""
    last, d = len(x.shape) - 1, dim % len(x.shape)
    order, back = _axis_last(last + 1, d)
    for a, size in enumerate(index.shape):  # src read over index's shape
        if src.shape[a] != size:
            src = src.slice(axis=a, start=0, end=size)
    moved_x, moved_i, moved_s = (t.permute(order) for t in (x, index, src))
    length = x.shape[d]
    rest = tuple(index.shape[a] for a in order[:-1])
    positions = g.iota("z", (1,) * len(rest) + (1, length), index.dtype)
    hit = moved_i.unsqueeze(axis=last + 1).eq(positions)  # [rest..., index's length, length]
    s = moved_s.unsqueeze(axis=last + 1)
    identity = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": -math.inf, "amin": math.inf}[reduce]
    picked = lm.where(hit, s, identity)
    method = {"sum": "sum", "mean": "sum", "prod": "prod", "amax": "max", "amin": "min"}[reduce]
    got = getattr(picked, method)(axis=[last], keepdim=False)  # [rest..., length]
    count = hit.cast(lm.float32).sum(axis=[last], keepdim=False)
    for a, size in enumerate(moved_x.shape[:-1]):  # index may cover less of x than x
        if size != rest[a]:
            got = got.pad(axis=a, before=0, after=size - rest[a], value=identity)
            count = count.pad(axis=a, before=0, after=size - rest[a], value=0.0)
    touched = count > 0.0
    if reduce == "mean":
        count = count.cast(x.dtype)
        combined = (moved_x + got) / (count + 1.0) if include_self else got / count
    elif include_self:
        combined = {"sum": lambda: moved_x + got, "prod": lambda: moved_x * got,
                    "amax": lambda: moved_x.maximum(got),
                    "amin": lambda: moved_x.minimum(got)}[reduce]()
    else:
        combined = got
    out = lm.where(touched, combined, moved_x) if reduce != "sum" or not include_self else combined
    return out.permute(back)


def _scatter(n, x, dim, index, src):
    """A copy of x with src written where index points along dim (torch.scatter; src a
    tensor, read over index's shape, or a number)."""
    x = n.operands(x)[0]
    src = n.operands(src)[0] if isinstance(src, lm.Tensor) else n.g.full(
        tuple(index.shape), float(src), DTYPES[n.dtype])
    return x.scatter_axis(dim, index, src)


def _clamp(n, x, lo=None, hi=None):
    x = n.operands(x)[0]
    x = x if lo is None else x.maximum(n.operands(lo)[0])
    return x if hi is None else x.minimum(n.operands(hi)[0])


def _addmm(n, bias, a, b, beta=1, alpha=1):
    bias, a, b = n.operands(bias, a, b)
    prod = a.matmul(b)
    return (prod if alpha == 1 else prod * float(alpha)) + (bias if beta == 1 else bias * float(beta))


# Convolutions and pools by their input's rank: [N, C, L], [N, C, H, W], [N, C, D, H, W].
CONVS = {3: lm.conv1d, 4: lm.conv2d, 5: lm.conv3d}
MAX_POOLS = {3: lm.max_pool1d, 4: lm.max_pool2d, 5: lm.max_pool3d}
AVG_POOLS = {3: lm.avg_pool1d, 4: lm.avg_pool2d, 5: lm.avg_pool3d}


def _convolution(n, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    conv = CONVS[len(x.shape)]
    if len(set(padding)) > 1:  # padded apart per dim (Inception's 1x7 and 7x1 kernels)
        for axis, p in enumerate(padding, start=2):
            x = x.pad(axis=axis, before=p, after=p) if p else x
        padding = [0]
    return conv(x, w, b, stride=stride[0], padding=padding[0], dilation=dilation[0], groups=groups)


def _padded(x, axis, before, after, value=0.0):
    """x with `before`/`after` elements of `value` around `axis`, or that many elements cut
    where negative (a symbolic amount pads)."""
    cut = [-n if isinstance(n, int) and n < 0 else 0 for n in (before, after)]
    if cut != [0, 0]:
        size = x.shape[axis]
        x = x.slice(axis=axis, start=cut[0],
                    end=size - cut[1] if isinstance(size, int) else f"({size} - {cut[1]})")
        before, after = (n + c if c else n for n, c in zip((before, after), cut))
    if (before, after) != (0, 0):
        x = x.pad(axis=axis, before=before, after=after, value=float(value))
    return x


def _spread(x, axis, s):
    """x with s - 1 zeros after each element along `axis` but the last (a stride undone)."""
    if s == 1:
        return x
    length = x.shape[axis]
    x = x.unsqueeze(axis=axis + 1).pad(axis=axis + 1, before=0, after=s - 1)
    shape = list(x.shape)
    x = x.reshape(tuple(shape[:axis]) + (length * s,) + tuple(shape[axis + 2:]))
    return x.slice(axis=axis, start=0, end=(length - 1) * s + 1)


def _correlation_input_gradient(grad, w, x_shape, s, p, d, g):
    """The gradient of a convolution's input x (of `x_shape`; weight w, stride s, padding
    p, dilation d, g groups) from its output's: the output's gradient spread out by s
    (s - 1 zeros between its elements), padded by d (K - 1) - p (and, at the end, by the
    input positions past the last window), correlated with the weight flipped along its
    spatial dims and its two channel dims swapped within each group."""
    spatial = list(range(2, len(x_shape)))
    c_in, c_out, kernel = x_shape[1], w.shape[0], w.shape[2:]
    spread = grad
    for axis in spatial:
        spread = _spread(spread, axis, s)
        k, size = kernel[axis - 2], x_shape[axis]
        reach = d * (k - 1) - p
        past = size + 2 * p - d * (k - 1) - 1 - (grad.shape[axis] - 1) * s
        spread = _padded(spread, axis, reach, reach + past)
    flipped = w
    for axis in spatial:
        flipped = flipped.flip(axis=axis)
    per = c_out // g
    swapped = flipped.reshape((g, per, c_in // g) + tuple(kernel)).permute(
        [0, 2, 1] + [a + 1 for a in spatial]).reshape((c_in, per) + tuple(kernel))
    return CONVS[len(x_shape)](spread, swapped, None, stride=1, padding=0, dilation=d, groups=g)


def _avg_pool_backward(n, grad, x, kernel, stride=(), padding=(0,), ceil_mode=False,
                       count_include_pad=True, divisor_override=None):
    """Average pooling's input gradient: a depthwise convolution's, the weight 1 / the
    window's size everywhere (padded zeros counted, as the forward translation has it)."""
    k, p = kernel[0], (padding or [0])[0]
    s = (stride or kernel)[0]
    channels, spatial = x.shape[1], len(x.shape) - 2
    w = n.g.full((channels, 1) + (k,) * spatial, 1.0 / k ** spatial, grad.dtype)
    return _correlation_input_gradient(grad, w, x.shape, s, p, 1, channels)


def _convolution_backward(n, grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    """The gradients of a convolution (stride s, padding p, dilation d the same along every
    spatial dim) as convolutions. The input's: _correlation_input_gradient. The weight's:
    the input, padded by p, with its images taken as channels and its channels as images,
    correlated with the output's gradient as the weight (its images as channels), stride
    d and dilation s, grouped so that each group's output channels read its own input
    channels; the windows past the kernel cut off. The bias's: the output's gradient
    summed over images and positions."""
    x, w = (v if v.dtype == grad.dtype else v.cast(grad.dtype) for v in (x, w))
    conv = CONVS[len(x.shape)]
    spatial = list(range(2, len(x.shape)))
    s, p, d, g = stride[0], padding[0], dilation[0], groups
    batch, c_in = x.shape[0], x.shape[1]
    kernel = w.shape[2:]
    out = [None, None, None]
    if output_mask[0]:
        out[0] = _correlation_input_gradient(grad, w, x.shape, s, p, d, g)
    if output_mask[1]:
        padded = x
        for axis in spatial:
            padded = _padded(padded, axis, p, p)
        rest = tuple(padded.shape[2:])
        images = padded.reshape((batch, g, c_in // g) + rest).permute(
            [2, 1, 0] + [a + 1 for a in spatial]).reshape((c_in // g, g * batch) + rest)
        weights = grad.permute([1, 0] + spatial)  # [c_out, batch, positions...]
        full = conv(images, weights, None, stride=d, padding=0, dilation=s, groups=g)
        for axis in spatial:
            full = full.slice(axis=axis, start=0, end=kernel[axis - 2])
        out[1] = full.permute([1, 0] + spatial)
    if output_mask[2] and bias_sizes is not None:
        out[2] = grad.sum(axis=[0] + spatial, keepdim=False)
    return tuple(out)


def _pool_args(kernel, stride, padding):
    return dict(kernel_size=kernel[0], stride=(stride or kernel)[0], padding=(padding or [0])[0])


def _max_pool(n, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    args = _pool_args(kernel, stride, padding)
    image = x
    if ceil_mode:  # the windows that start in the image: -inf past its end for the last
        k, s, p = args["kernel_size"], args["stride"], args["padding"]
        for axis in range(2, len(x.shape)):
            size = x.shape[axis]
            windows = -(-(size + 2 * p - k) // s) + 1
            if (windows - 1) * s >= size + p:  # (one starting in the right padding: dropped)
                windows -= 1
            extra = (windows - 1) * s + k - (size + 2 * p)
            if extra > 0:
                x = x.pad(axis=axis, before=0, after=extra, value=-math.inf)
    values = MAX_POOLS[len(x.shape)](x, **args)
    wanted = any(u.target is operator.getitem and u.args[1] == 1 for u in n.fx.users)
    return values, _max_positions(n, x, values, image.shape[3], **args) if wanted else None


def _pool_taps(k, s, p, out_h, out_w, width):
    """A 2-D pooling's k x k taps, the last first: (i, j, where tap (i, j) of each of the
    out_h x out_w windows lies in an image plane `width` wide, as the flat h * width + w
    of an iota expression)."""
    for i in reversed(range(k)):
        for j in reversed(range(k)):
            yield i, j, f"(z / {out_w} * {s} + {i - p}) * {width} + z % {out_w} * {s} + {j - p}"


def _max_positions(n, x, values, width, kernel_size, stride, padding):
    """Max pooling's indices (2-D): where each window's maximum lies in its image plane,
    h * width + w, the first of equal maxima in the window's row-major order as PyTorch
    picks it. Each tap of the windows is compared with their maxima, the last taps first,
    so that an earlier one's match replaces a later one's."""
    k, s, p = kernel_size, stride, padding
    out_h, out_w = values.shape[2], values.shape[3]
    padded = x
    for axis in (2, 3):
        padded = padded.pad(axis=axis, before=p, after=p, value=-math.inf)
    found = None
    for i, j, at in _pool_taps(k, s, p, out_h, out_w, width):
        tap = _every(_every(padded, 2, i, out_h, s), 3, j, out_w, s)
        position = n.g.iota(at, (out_h, out_w), lm.int64)
        found = position.expand(*values.shape) if found is None else lm.where(
            tap == values, position, found)
    return found


def _max_pool_backward(n, grad, x, kernel, stride=(), padding=(0,), dilation=(1,),
                       ceil_mode=False, indices=None):
    """max_pool2d_with_indices_backward: each window's gradient to where its maximum lay
    (the forward's indices). Tap by tap, the windows whose maximum is that tap give their
    gradient, spread out by the stride and shifted to the tap's place in the padded image;
    the taps' sum, cut back to the image, is the input's gradient (windows overlapping
    where the stride is below the kernel add up, as PyTorch's scatter-add does)."""
    args = _pool_args(kernel, stride, padding)
    k, s, p = args["kernel_size"], args["stride"], args["padding"]
    (height, width), (out_h, out_w) = x.shape[2:], grad.shape[2:]
    span = [max(size + 2 * p, (o - 1) * s + k) for size, o in ((height, out_h), (width, out_w))]
    total = None
    for i, j, at in _pool_taps(k, s, p, out_h, out_w, width):
        hit = indices == n.g.iota(at, (out_h, out_w), indices.dtype)
        part = lm.where(hit, grad, 0.0)
        for axis, start, size in ((2, i, span[0]), (3, j, span[1])):
            part = _spread(part, axis, s)
            part = part.pad(axis=axis, before=start, after=size - start - part.shape[axis])
        total = part if total is None else total + part
    return total.slice(axis=2, start=p, end=p + height).slice(axis=3, start=p, end=p + width)


def _avg_pool(n, x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    return AVG_POOLS[len(x.shape)](x, **_pool_args(kernel, stride, padding))


def _adaptive_avg_pool(n, x, size):
    spatial = len(size)
    if all(s == 1 for s in size):
        return x.mean(axis=list(range(-spatial, 0)), keepdim=True)
    sizes = tuple(x.shape[-spatial:])
    if len(set(sizes)) == 1 and len(set(size)) == 1 and sizes[0] % size[0] == 0:
        k = sizes[0] // size[0]
        return AVG_POOLS[spatial + 2](x, kernel_size=k, stride=k)
    # Otherwise each output averages its own span of the input, [floor(i L / O),
    # ceil((i + 1) L / O)), spans overlapping or repeating where O does not divide L: a
    # product with an [L, O] matrix of 1/span inside the spans, one spatial dim at a time
    # (in f32 for half precision, rounded once).
    return _span_products(n, x, [(length, out) for length, out in zip(sizes, size)])


def _span_weights(n, length, out, dtype):
    """[length, out]: 1 / the span of output i where input position j lies in it,
    [floor(i L / O), ceil((i + 1) L / O)), else 0."""
    begin, end = f"((z % {out}) * {length}) / {out}", \
        f"((z % {out}) * {length} + {length} + {out} - 1) / {out}"
    inside = n.g.iota(f"((z / {out}) >= {begin}) * ((z / {out}) < {end})", (length, out), dtype)
    return inside / n.g.iota(f"{end} - {begin}", (length, out), dtype)


def _span_products(n, x, spans, transposed=False):
    """x's last len(spans) dims each multiplied by its (length, out) span weights (their
    transpose: an adaptive pooling's gradient), in f32 for half precision, rounded once."""
    def products(x):
        for k, (length, out) in enumerate(spans):
            axis = len(x.shape) - len(spans) + k
            weights = _span_weights(n, length, out, x.dtype)
            order, back = _axis_last(len(x.shape), axis)
            x = x.permute(order).matmul(weights.permute([1, 0]) if transposed else weights)
            x = x.permute(back)
        return x
    return _half_in_f32(products, x)


def _adaptive_avg_pool_backward(n, grad, x):
    """An adaptive average pooling's input gradient: the output's gradient multiplied by
    each spatial dim's span weights transposed (as the forward, whatever its sizes)."""
    return _span_products(n, grad, [(length, out) for length, out in
                                    zip(x.shape[2:], grad.shape[2:])], transposed=True)


def _layer_norm(n, x, shape, w=None, b=None, eps=1e-5):
    """The hlop for the result, computed in f32 where x is half precision and rounded once
    (weight and bias included), as PyTorch's kernels do; the statistics (for a backward
    pass, only computed where read) in the types the trace gives them."""
    axes = list(range(-len(shape), 0))
    x = n.operands(x)[0]
    wide = _computed_in(x.dtype)
    xf = x.cast(wide)
    y = xf.layer_norm(axis=axes, eps=eps)
    y = y if w is None else y * w.cast(wide)
    y = y if b is None else y + b.cast(wide)
    mean = xf.mean(axis=axes, keepdim=True)
    rstd = ((xf - mean).square().mean(axis=axes, keepdim=True) + eps).rsqrt()
    types = [DTYPES[v.dtype] for v in n.fx.meta["val"]]
    return y.cast(types[0]), mean.cast(types[1]), rstd.cast(types[2])


def _channel(t, ndim):
    """A per-channel [C] vector shaped to broadcast over [N, C, ...]."""
    return t.reshape((t.shape[0],) + (1,) * (ndim - 2))


def _group_norm(n, x, w, b, batch, channels, hw, groups, eps):
    shape = tuple(x.shape)
    g = x.reshape((shape[0], groups, -1))
    mean = g.mean(axis=2, keepdim=True)
    rstd = ((g - mean).square().mean(axis=2, keepdim=True) + eps).rsqrt()
    y = ((g - mean) * rstd).reshape(shape)
    y = y if w is None else y * _channel(w, len(shape))
    y = y if b is None else y + _channel(b, len(shape))
    return y, mean.reshape((shape[0], groups)), rstd.reshape((shape[0], groups))


def _batch_norm_eval(n, x, w, b, mean, var, momentum, eps):
    nd = len(x.shape)
    y = (x - _channel(mean, nd)) * (_channel(var, nd) + eps).rsqrt()
    y = y if w is None else y * _channel(w, nd)
    y = y if b is None else y + _channel(b, nd)
    empty = n.g.full((0,), 0.0, DTYPES[n.dtype])
    return y, empty, empty


def _batch_norm_batch_stats(n, x, w, b, running_mean, running_var, training, momentum, eps):
    """BatchNorm in training mode: normalised by the batch's statistics over every dim but
    the channels, the running statistics moved towards them by `momentum` (the variance's
    unbiased); with the statistics used, and the running ones new, as its outputs."""
    nd = len(x.shape)
    axes = [0] + list(range(2, nd))
    wide = x.cast(lm.float32) if x.dtype in (lm.float16, lm.bfloat16) else x
    mean = wide.mean(axis=axes, keepdim=True)
    centred = wide - mean
    var = centred.square().mean(axis=axes, keepdim=True)
    rstd = (var + eps).rsqrt()
    y = centred * rstd
    y = y if w is None else y * _channel(w.cast(wide.dtype), nd)
    y = (y if b is None else y + _channel(b.cast(wide.dtype), nd)).cast(x.dtype)
    count = math.prod(x.shape[a] for a in axes)
    mean, var, rstd = (t.reshape((x.shape[1],)) for t in (mean, var, rstd))
    new_mean = new_var = None
    if running_mean is not None:
        new_mean = running_mean * (1.0 - momentum) + mean.cast(running_mean.dtype) * momentum
        new_var = running_var * (1.0 - momentum) + (
            var * (count / max(count - 1, 1))).cast(running_var.dtype) * momentum
    return y, mean, rstd, new_mean, new_var


def _cdist(n, x1, x2, p=2.0, compute_mode=None):
    """torch.cdist: the p-norm distance of each row of x1 [..., P, M] to each row of x2
    [..., R, M], summed over the differences broadcast to [..., P, R, M] (the subtraction
    is fused into the reduction: nothing of that size is stored). Computed directly for
    every p, where PyTorch takes |a|^2 + |b|^2 - 2 a.b for p = 2 past 25 rows, which loses
    the precision of distances small against the norms. Half precision in f32."""
    p = float(p)

    def distances(a, b):
        rank = len(a.shape)
        d = a.unsqueeze(axis=rank - 1) - b.unsqueeze(axis=rank - 2)
        last = [rank]
        if p == 0.0:
            return (d != 0.0).cast(d.dtype).sum(axis=last, keepdim=False)
        if p == 1.0:
            return d.abs().sum(axis=last, keepdim=False)
        if p == 2.0:
            return (d * d).sum(axis=last, keepdim=False).sqrt()
        if math.isinf(p):
            return d.abs().max(axis=last, keepdim=False)
        return d.abs().pow(p).sum(axis=last, keepdim=False).pow(1.0 / p)
    return _half_in_f32(distances, *n.operands(x1, x2))


def _reflected(x, twice_low, twice_high):
    """PyTorch's reflect_coordinates: x folded back and forth into [low, high] (given
    twice, so that half steps stay integers)."""
    if twice_low == twice_high:
        return x * 0.0
    low, span = twice_low / 2.0, (twice_high - twice_low) / 2.0
    x = (x - low).abs()
    flips = (x / span).floor()
    extra = x - flips * span
    even = (flips - (flips / 2.0).floor() * 2.0) == 0.0
    return lm.where(even, extra + low, span - extra + low)


def _sample_coordinate(g, size, padding_mode, align_corners):
    """A grid coordinate in [-1, 1] as a position among `size` pixels, padded as asked
    (0 zeros: left as is, 1 border: clipped, 2 reflection: folded back, then clipped)."""
    x = (g + 1.0) * ((size - 1) / 2.0) if align_corners else ((g + 1.0) * size - 1.0) / 2.0
    if padding_mode == 2:
        x = _reflected(x, 0, 2 * (size - 1)) if align_corners else _reflected(x, -1, 2 * size - 1)
    if padding_mode in (1, 2):
        x = x.clamp(0.0, float(size - 1))
    return x


def _grid_sampler_2d(n, x, grid, interpolation_mode, padding_mode, align_corners):
    """F.grid_sample over NCHW images, bilinear (0) or nearest (1): each output pixel's
    taps are rows picked from the images laid out [N*H*W, C], their weights zero where a
    tap falls outside (padding by zeros) and the position clamped in."""
    return _half_in_f32(lambda x, grid: _sampled(n, x, grid, interpolation_mode, padding_mode,
                                                 align_corners), *n.operands(x, grid))


def _sampled(n, x, grid, interpolation_mode, padding_mode, align_corners):
    """_grid_sampler_2d's result, in x's type."""
    batch, channels, height, width = x.shape
    _, out_h, out_w, _ = grid.shape
    rows = x.permute([0, 2, 3, 1]).reshape((batch * height * width, channels))
    gx = grid.slice(axis=3, start=0, end=1).reshape((batch, out_h, out_w))
    gy = grid.slice(axis=3, start=1, end=2).reshape((batch, out_h, out_w))
    px = _sample_coordinate(gx, width, padding_mode, align_corners)
    py = _sample_coordinate(gy, height, padding_mode, align_corners)
    image = n.g.iota(f"z / {out_h * out_w} * {height * width}", (batch, out_h, out_w), lm.int64)

    def tap(ix, iy, weight):
        inside = lm.logical_and(lm.logical_and(ix >= 0.0, ix <= float(width - 1)),
                                lm.logical_and(iy >= 0.0, iy <= float(height - 1)))
        at = (iy.clamp(0.0, float(height - 1)) * float(width) +
              ix.clamp(0.0, float(width - 1))).cast(lm.int64) + image
        picked = rows.index_select(axis=0, indices=at.reshape((batch * out_h * out_w,)))
        picked = picked.reshape((batch, out_h, out_w, channels))
        return picked * lm.where(inside, weight, 0.0).unsqueeze(axis=3)

    if interpolation_mode == 1:
        out = tap(px.round(), py.round(), px * 0.0 + 1.0)
    else:
        x0, y0 = px.floor(), py.floor()
        x1, y1 = x0 + 1.0, y0 + 1.0
        out = (tap(x0, y0, (x1 - px) * (y1 - py)) + tap(x1, y0, (px - x0) * (y1 - py)) +
               tap(x0, y1, (x1 - px) * (py - y0)) + tap(x1, y1, (px - x0) * (py - y0)))
    return out.permute([0, 3, 1, 2])


def _slice(n, x, dim=0, start=None, end=None, step=1):
    # The traced result's length settles the end however it was given (past the size,
    # negative, symbolic): only the start is worked out here.
    start = 0 if start is None else start
    if isinstance(start, int) and start < 0:
        size = x.shape[dim]
        start = max(size + start, 0) if isinstance(size, int) else f"max({size} + {start}, 0)"
    if step == 1:
        return x.slice(axis=dim, start=start, end=_add(start, n.shape[dim]))
    return _every(x, dim % len(x.shape), start, n.shape[dim], step)


def _every(x, axis, start, length, step):
    """`length` rows of x along `axis` from `start`, `step` apart (sizes known): the rows
    from start, padded to a whole number of steps, split into [length, step], and the
    first of each step kept."""
    span = length * step
    x = x.slice(axis=axis, start=start, end=min(start + span, x.shape[axis]))
    if x.shape[axis] < span:
        x = x.pad(axis=axis, before=0, after=span - x.shape[axis])  # (never read)
    shape = tuple(x.shape)
    x = x.reshape(shape[:axis] + (length, step) + shape[axis + 1:])
    return x.slice(axis=axis + 1, start=0, end=1).squeeze(axis=axis + 1)


def _as_strided(n, x, size, stride, storage_offset=None):
    """The elements of x's storage (x contiguous) at offset + sum(i_k * stride_k): a
    reshape where the strides lay `size` out row-major (strides of dims of size 1 do not
    matter), else a gather at those positions."""
    offset, size, stride = storage_offset or 0, list(size), list(stride)
    expected, row_major = 1, True
    for d in reversed(range(len(size))):
        if size[d] != 1:
            row_major = row_major and stride[d] == expected
            expected *= size[d]
    count = math.prod(size)
    if row_major and offset == 0 and count == math.prod(x.shape):
        return x.reshape(tuple(size))
    terms = [str(offset)] + [f"((z / {math.prod(size[d + 1:])}) % {size[d]}) * {stride[d]}"
                             for d in range(len(size)) if size[d] != 1]
    positions = n.g.iota(" + ".join(terms), (count,), lm.int64)
    return x.reshape((math.prod(x.shape),)).index_select(axis=0, indices=positions).reshape(
        tuple(size))


def _select(n, x, dim, index):
    if isinstance(index, int) and index < 0:
        index += x.shape[dim]
    return x.slice(axis=dim, start=index, end=_add(index, 1)).squeeze(axis=dim)


def _slice_scatter(n, x, src, dim=0, start=None, end=None, step=1):
    # x with src in place of x[start:end] along dim: the rows before, src, the rows after.
    size = x.shape[dim]
    start = 0 if start is None else start + size if isinstance(start, int) and start < 0 else start
    end = _add(start, src.shape[dim])
    before, after = x.slice(axis=dim, start=0, end=start), x.slice(axis=dim, start=end, end=size)
    return lm.concat([before, n.operands(src)[0], after], dim)


def _select_scatter(n, x, src, dim, index):
    index = index + x.shape[dim] if isinstance(index, int) and index < 0 else index
    return _slice_scatter(n, x, src.unsqueeze(axis=dim), dim, index)


def _add(a, b):
    return a + b if isinstance(a, int) and isinstance(b, int) else f"({a} + {b})"


def _cat(n, parts, dim=0):
    # As torch.cat, 1-D empty tensors are skipped whatever the others' rank (an empty cache).
    parts = [p for p in parts if len(p.shape) > 1 or p.shape[0] != 0] or parts[:1]
    return lm.concat(n.operands(*parts), dim)


def _split(n, x, sizes, dim=0):
    out, at = [], 0
    for s in sizes:
        out.append(x.slice(axis=dim, start=at, end=_add(at, s)))
        at = _add(at, s)
    return tuple(out)


def _squeeze(n, x, dims=None):
    dims = range(len(x.shape)) if dims is None else [dims] if isinstance(dims, int) else dims
    for d in sorted((d % len(x.shape) for d in dims), reverse=True):
        if x.shape[d] == 1:
            x = x.squeeze(axis=d)
    return x


def _expand(n, x, sizes, implicit=False):
    lead = len(sizes) - len(x.shape)
    x = x.reshape((1,) * lead + tuple(x.shape)) if lead else x
    return x.expand(n.shape)


def _pad(n, x, pad, value=0.0):
    """constant_pad_nd: pairs from the last axis back; a negative amount crops."""
    for i in range(len(pad) // 2):
        x = _padded(x, len(x.shape) - 1 - i, pad[2 * i], pad[2 * i + 1], value)
    return x


def _embedding(n, weight, indices, *_):
    return weight.index_select(axis=0, indices=indices.flatten()).reshape(n.shape)


def _static(shape):
    return all(isinstance(s, int) for s in shape)


def _index(n, x, indices):
    """Advanced indexing, x[..., i, j, ...]: the indexed axes become one (their sizes
    multiplied, the index tensors combined into flat positions, broadcast together) and
    rows are picked along it. As in NumPy, the broadcast index dims stand where the indexed
    axes stood when those are adjacent, else in front."""
    picked, rest, rows, flat = _indexed_rows(x, indices)
    picked_shape = tuple(flat.shape)
    out = rows.index_select(axis=0, indices=flat.reshape((math.prod(picked_shape),)))
    out = out.reshape(picked_shape + tuple(x.shape[a] for a in rest))
    if _index_dims_in_place(picked):
        lead, width = picked[0], len(picked_shape)
        order = list(range(width, width + lead)) + list(range(width)) + list(
            range(width + lead, len(out.shape)))
        out = out.permute(order)
    return out


def _indexed_rows(x, indices):
    """x with its indexed axes (`picked`) made one, in front of the others (`rest`), and
    the index tensors combined into flat positions along it (broadcast together)."""
    indices = list(indices) + [None] * (len(x.shape) - len(indices))
    picked = [a for a, t in enumerate(indices) if t is not None]
    rest = [a for a, t in enumerate(indices) if t is None]
    sizes = [x.shape[a] for a in picked]
    flat = None
    for k, a in enumerate(picked):
        idx = indices[a]
        idx = lm.where(idx < 0, idx + sizes[k], idx)  # negative positions count from the end
        term = idx * math.prod(sizes[k + 1:])
        flat = term if flat is None else flat + term
    rows = x.permute(picked + rest).reshape((math.prod(sizes),) + tuple(x.shape[a] for a in rest))
    return picked, rest, rows, flat


def _index_dims_in_place(picked):
    """Whether x[indices] has the index tensors' dims where the indexed axes stood (they
    are adjacent, after the first axis), not in front."""
    return picked == list(range(picked[0], picked[-1] + 1)) and picked[0] > 0


def _index_put(n, x, indices, values, accumulate=False):
    """x[..., i, j, ...] = values (+= with `accumulate`): as _index picks rows, the
    indexed axes made one and the values scattered along it at the index tensors' flat
    positions (where two name one position, the last written stays, as on PyTorch's
    CPU)."""
    x, values = n.operands(x, values)
    picked, rest, rows, flat = _indexed_rows(x, indices)
    rest_shape = tuple(x.shape[a] for a in rest)
    picked_shape = tuple(flat.shape)
    count = math.prod(picked_shape)
    # The values as x[indices] would be laid out (see _index), then as rows: picked first.
    width = len(picked_shape)
    if _index_dims_in_place(picked):
        lead = picked[0]
        shape = rest_shape[:lead] + picked_shape + rest_shape[lead:]
        values = values.expand(shape).permute(
            list(range(lead, lead + width)) + list(range(lead)) +
            list(range(lead + width, len(shape))))
    else:
        values = values.expand(picked_shape + rest_shape)
    values = values.reshape((count,) + rest_shape)
    at = flat.reshape((count,) + (1,) * len(rest_shape)).expand((count,) + rest_shape)
    rows = (_reduced_into(n.g, rows, 0, at, values) if accumulate else
            rows.scatter_axis(0, at, values))
    back = [(picked + rest).index(a) for a in range(len(x.shape))]
    return rows.reshape(tuple(x.shape[a] for a in picked) + rest_shape).permute(back)


def _embedding_bag(n, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """nn.EmbeddingBag: the rows of `weight` that `indices` name, summed (mode 0, each
    scaled by its per-sample weight if given), averaged (1) or maxed (2) within each bag,
    bag b holding positions offsets[b] up to the next offset (the end of indices after
    the last, but with `include_last_offset`, where the last offset is that end). A bag
    with no rows gives zeros; rows named `padding_idx` do not count."""
    weight = n.operands(weight)[0]
    count = indices.shape[0]
    rows = weight.index_select(axis=0, indices=indices)  # [N, D]
    if per_sample_weights is not None:
        rows = rows * n.operands(per_sample_weights)[0].unsqueeze(axis=1)
    if include_last_offset:
        starts, ends = offsets.slice(axis=0, start=0, end=offsets.shape[0] - 1), \
            offsets.slice(axis=0, start=1, end=offsets.shape[0])
    else:
        starts = offsets
        ends = lm.concat([offsets.slice(axis=0, start=1, end=offsets.shape[0]),
                          n.g.full((1,), float(count), offsets.dtype)], 0)
    position = n.g.iota("z", (1, count), offsets.dtype)
    member = lm.logical_and(position >= starts.unsqueeze(axis=1),
                            position < ends.unsqueeze(axis=1))  # [B, N]
    if padding_idx is not None and padding_idx >= 0:
        member = lm.logical_and(member, (indices != padding_idx).unsqueeze(axis=0))
    if mode == 2:
        picked = lm.where(member.unsqueeze(axis=2), rows.unsqueeze(axis=0), -math.inf)
        out = picked.max(axis=[1], keepdim=False)
        out = lm.where(member.cast(lm.float32).sum(axis=[1], keepdim=True) > 0.0, out, 0.0)
    else:
        out = member.cast(rows.dtype).matmul(rows)
        if mode == 1:
            sizes = member.cast(rows.dtype).sum(axis=[1], keepdim=True)
            out = out / sizes.maximum(n.g.full((1, 1), 1.0, rows.dtype))
    return out, None, None, None


def _arange(n, start, end=None, step=1, **_):
    start, end = (0, start) if end is None else (start, end)
    if all(isinstance(v, (int, float)) for v in (start, end, step)):
        return n.g.arange(float(start), float(end), float(step), DTYPES[n.dtype])
    return n.g.iota(f"{start} + z*{step}", n.shape, DTYPES[n.dtype])


def _to_copy(n, x, dtype=None, **_):
    return x.cast(DTYPES[dtype]) if dtype is not None else x


def _softmax(method):
    return lambda n, x, dim, half_to_float=False: getattr(n.operands(x)[0], method)(axis=dim)


def _where(n, cond, a, b):
    a, b = n.operands(a, b)
    return lm.where(cond, a, b)


def _gelu(n, x, approximate="none"):
    x = n.operands(x)[0]
    return x.gelu_tanh() if approximate == "tanh" else x.gelu()


def _elu(n, x, alpha=1.0, scale=1.0, input_scale=1.0):
    x = n.operands(x)[0]
    neg = ((x * float(input_scale)).exp() - 1.0) * float(alpha)
    return lm.where(x > 0.0, x, neg) * float(scale)


def _ne(a, b):
    return a.ne(b)


def _hardtanh(n, x, lo=-1.0, hi=1.0):
    return n.operands(x)[0].clamp(float(lo), float(hi))


def _trunc(x):
    return x.sign() * x.abs().floor()


# (== and != on luminal tensors are IEEE's: a NaN equals nothing, itself included.)
def _isnan(n, x):
    return x != x


def _isinf(n, x):
    return lm.logical_and((x.abs() < math.inf).logical_not(), x.abs() > -math.inf)


def _copy(n, x, *_, **__):
    return x


# Ops that keep every value of their input (a bias's 0 and -inf), looked through to find
# where an attention bias was made.
_VALUE_KEEPING = {aten._to_copy.default, aten.alias.default, aten.clone.default,
                  aten.expand.default, aten.view.default, aten.unsqueeze.default}


def _mask_as_bias(bias):
    """Whether the FX node of an attention bias is a boolean mask made additive:
    where(mask, 0, fill) with a fill that no score outweighs, as PyTorch makes a boolean
    mask (Hugging Face models' causal mask) into the bias its fused kernels take (-inf,
    or -65504 for cuDNN). Read as the mask, it gives the same weights; a query that the
    mask leaves no key gets 0, as from PyTorch's other kernels (cuDNN's own, given the
    finite fill, ignores the mask there)."""
    while isinstance(bias, torch.fx.Node) and bias.target in _VALUE_KEEPING:
        bias = bias.args[0]
    if not isinstance(bias, torch.fx.Node) or bias.target is not aten.where.self:
        return False
    values = []
    for a in bias.args[1:]:
        if isinstance(a, torch.fx.Node) and a.target is aten.scalar_tensor.default:
            a = a.args[0]
        if not isinstance(a, (int, float)):
            return False
        values.append(float(a))
    return sorted(values)[1] == 0.0 and sorted(values)[0] <= -65504.0


def _heads_served(n, fx):
    """The keys or values that the FX node `fx` copies each head of to the query heads
    it serves, as Hugging Face's repeat_kv does (view(clone(expand(unsqueeze(x, 2))))):
    x's luminal value, or None where `fx` is no such copy (or x is not in this subgraph)."""
    def node(a, *targets):
        return a if isinstance(a, torch.fx.Node) and a.target in targets else None
    x = node(fx, aten.view.default, aten._unsafe_view.default)
    x = x and (node(x.args[0], aten.clone.default) or x)
    x = x and node(x.args[0], aten.expand.default)
    x = x and node(x.args[0], aten.unsqueeze.default)
    if x is None or x.args[1] not in (2, -3) or x.args[0].meta["val"].dim() != 4:
        return None
    # [b, kv, s, d] -> [b, kv, group, s, d] -> [b, kv * group, s, d]
    before = [_traced(d) for d in x.args[0].meta["val"].shape]
    after = [_traced(d) for d in fx.meta["val"].shape]
    if len(after) != 4 or after[:1] + after[2:] != before[:1] + before[2:] or \
            after[1] % before[1]:
        return None
    return n.env.get(x.args[0])


def _attention(n, q, k, v, bias=None, is_causal=False, scale=None, fx_bias=None,
               fx_kv=(None, None)):
    """softmax(q k^T * scale + bias) v over [..., heads, length, head dim], as PyTorch's
    fused attention ops compute it (its causal mask aligned top-left); keys and values
    with fewer heads serve groups of query heads. luminal's compiler fuses it back into
    one attention kernel; a bias made from a boolean mask (`fx_bias`, its FX node, shows
    it) is read as that mask, which the kernel takes, and keys and values whose heads
    were copied for each query head they serve (`fx_kv`, their FX nodes, show it) are
    read before the copy."""
    served = [_heads_served(n, fx) for fx in fx_kv]
    if all(s is not None for s in served):
        k, v = served
    if bias is not None and bias.dtype != lm.bool_ and _mask_as_bias(fx_bias):
        bias = bias.eq(0.0)
    heads, kv_heads = q.shape[-3], k.shape[-3]
    lead = tuple(q.shape[:-3])
    grouped = heads != kv_heads
    mask = bias
    if grouped:  # query heads in groups, one a key head, which is read where it lies
        group = heads // kv_heads
        q = q.reshape(lead + (kv_heads, group) + tuple(q.shape[-2:]))
        k, v = k.unsqueeze(axis=-3), v.unsqueeze(axis=-3)
        if bias is not None and bias.ndim >= 3:
            mask = bias.unsqueeze(axis=-3) if bias.shape[-3] == 1 else bias.reshape(
                tuple(bias.shape[:-3]) + (kv_heads, group) + tuple(bias.shape[-2:]))
    scores = q.matmul(k.transpose(-2, -1)) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:  # one iota of bools, which the GPU's attention kernels compute in place
        queries, keys = q.shape[-2], k.shape[-2]
        keep = n.g.iota(f"(z / ({keys})) >= (z % ({keys}))", (queries, keys), lm.bool_)
        scores = lm.where(keep, scores, -math.inf)
    boolean = bias is not None and bias.dtype == lm.bool_
    if bias is not None:
        scores = lm.where(mask, scores, -math.inf) if boolean else \
            scores + mask.cast(scores.dtype)
    out = scores.softmax(axis=-1).matmul(v)
    if grouped:
        out = out.reshape(lead + (heads,) + tuple(out.shape[-2:]))
    if bias is None:
        return out
    # A query the mask leaves no key is 0, as PyTorch's kernels give it (softmax alone gives
    # 0 / 0); chosen after the product, so the product keeps the attention pattern.
    seen = bias.cast(lm.float32).sum(axis=-1, keepdim=True) > 0.0 if boolean else \
        bias.max(axis=-1, keepdim=True) > -math.inf
    return lm.where(seen, out, 0.0)


def _sdpa_with_bias(n, q, k, v, bias, log_sumexp=False, dropout=0.0, is_causal=False,
                    return_debug_mask=False, scale=None):
    return (_attention(n, q, k, v, bias, is_causal, scale, n.fx.args[3], n.fx.args[1:3]),) + \
        (None,) * 8


def _sdpa_flash(n, q, k, v, dropout=0.0, is_causal=False, return_debug_mask=False, scale=None):
    return (_attention(n, q, k, v, None, is_causal, scale, None, n.fx.args[1:3]),) + (None,) * 8


def _sdpa_cpu(n, q, k, v, dropout=0.0, is_causal=False, attn_mask=None, scale=None):
    fx_mask = n.fx.kwargs.get("attn_mask")
    return _attention(n, q, k, v, attn_mask, is_causal, scale, fx_mask, n.fx.args[1:3]), None


def _getitem(n, values, i):
    return values[i]


# Sizes worked out from symbolic sizes (a dynamic shape's flattened width): the size an
# op asks for, and Python's arithmetic on sizes, which traced graphs keep as operators.
SIZE_OPS = (aten.sym_size.int, operator.add, operator.sub, operator.mul, operator.floordiv)


def _size(n, *_, **__):
    """A size: its expression, as shapes spell it (what the ops reading it take)."""
    return dim_text(n.val)


def expressible_size(val):
    """Whether a traced size has a luminal expression."""
    if not isinstance(val, (int, torch.SymInt)):
        return False
    try:
        dim_text(val)
    except NotImplementedError:
        return False
    return True


# One line per op. Where an ATen op has a composite form in luminal's hlops, the hlop is
# used: the compiler fuses them back (softmax, norms, attention).
TABLE = {
    aten.add.Tensor: _arith(operator.add),
    aten.add.Scalar: _arith(operator.add),
    aten.sub.Tensor: _arith(operator.sub),
    aten.sub.Scalar: _arith(operator.sub),
    aten.mul.Tensor: _arith(operator.mul),
    aten.mul.Scalar: _arith(operator.mul),
    aten.div.Tensor: _arith(operator.truediv),
    aten.div.Scalar: _arith(operator.truediv),
    aten.div.Tensor_mode: _div_mode,
    aten.div.Scalar_mode: _div_mode,
    aten.remainder.Tensor: _arith(operator.mod),
    aten.remainder.Scalar: _arith(operator.mod),
    aten.fmod.Tensor: _arith(lm.fmod),
    aten.fmod.Scalar: _arith(lm.fmod),
    aten.pow.Tensor_Scalar: lambda n, x, e: n.operands(x)[0].pow(float(e)),
    aten.pow.Tensor_Tensor: _arith(lambda a, b: a.pow(b)),
    aten.pow.Scalar: _arith(lambda a, b: a.pow(b)),
    aten.maximum.default: _arith(lambda a, b: a.maximum(b)),
    aten.minimum.default: _arith(lambda a, b: a.minimum(b)),
    aten.eq.Tensor: _compare(operator.eq),
    aten.eq.Scalar: _compare(operator.eq),
    aten.ne.Tensor: _compare(operator.ne),
    aten.ne.Scalar: _compare(operator.ne),
    aten.lt.Tensor: _compare(operator.lt),
    aten.lt.Scalar: _compare(operator.lt),
    aten.le.Tensor: _compare(operator.le),
    aten.le.Scalar: _compare(operator.le),
    aten.gt.Tensor: _compare(operator.gt),
    aten.gt.Scalar: _compare(operator.gt),
    aten.ge.Tensor: _compare(operator.ge),
    aten.ge.Scalar: _compare(operator.ge),
    aten.logical_and.default: lambda n, a, b: lm.logical_and(a.cast(lm.bool_), b.cast(lm.bool_)),
    aten.logical_or.default: lambda n, a, b: lm.logical_or(a.cast(lm.bool_), b.cast(lm.bool_)),
    aten.logical_xor.default: lambda n, a, b: a.cast(lm.bool_).ne(b.cast(lm.bool_)),
    aten.logical_not.default: lambda n, x: x.cast(lm.bool_).logical_not(),
    aten.bitwise_and.Tensor: lambda n, a, b: lm.logical_and(*n.operands(a, b)),
    aten.bitwise_and.Scalar: lambda n, a, b: lm.logical_and(*n.operands(a, b)),
    aten.bitwise_or.Tensor: lambda n, a, b: lm.logical_or(*n.operands(a, b)),
    aten.bitwise_or.Scalar: lambda n, a, b: lm.logical_or(*n.operands(a, b)),
    aten.bitwise_xor.Tensor: lambda n, a, b: _ne(*n.operands(a, b)),
    aten.bitwise_xor.Scalar: lambda n, a, b: _ne(*n.operands(a, b)),
    aten.bitwise_not.default: lambda n, x: x.logical_not(),
    aten.where.self: _where,
    aten.clamp.default: _clamp,
    aten.clamp.Tensor: _clamp,
    aten.neg.default: _unary(lambda x: -x),
    aten.abs.default: _unary(lambda x: x.abs()),
    aten.sign.default: _unary(lambda x: x.sign()),
    aten.exp.default: _unary(lambda x: x.exp()),
    aten.exp2.default: _unary(lambda x: (x * math.log(2.0)).exp()),
    aten.expm1.default: _unary(lambda x: x.exp() - 1.0),
    aten.log.default: _unary(lambda x: x.log()),
    aten.log2.default: _unary(lambda x: x.log() * (1.0 / math.log(2.0))),
    aten.log10.default: _unary(lambda x: x.log() * (1.0 / math.log(10.0))),
    aten.log1p.default: _unary(lambda x: (x + 1.0).log()),
    aten.sqrt.default: _unary(lambda x: x.sqrt()),
    aten.rsqrt.default: _unary(lambda x: x.rsqrt()),
    aten.reciprocal.default: _unary(lambda x: 1.0 / x),
    aten.sin.default: _unary(lambda x: x.sin()),
    aten.cos.default: _unary(lambda x: x.cos()),
    aten.tan.default: _unary(lambda x: x.sin() / x.cos()),
    aten.tanh.default: _unary(lambda x: x.tanh()),
    aten.atan.default: _in_f32(_atan),
    aten.asin.default: _in_f32(_asin),
    aten.acos.default: _in_f32(_acos),
    aten.atan2.default: _atan2,
    aten.asinh.default: _in_f32(_asinh),
    aten.acosh.default: _in_f32(_acosh),
    aten.atanh.default: _in_f32(_atanh),
    aten.sinh.default: _unary(lambda x: (x.exp() - (-x).exp()) * 0.5),
    aten.cosh.default: _unary(lambda x: (x.exp() + (-x).exp()) * 0.5),
    aten.sigmoid.default: _unary(lambda x: x.sigmoid()),
    aten.relu.default: _unary(lambda x: x.relu()),
    aten.gelu.default: _gelu,
    aten.erf.default: _unary(lambda x: x.erf()),
    aten.floor.default: _unary(lambda x: x.floor()),
    aten.ceil.default: _unary(lambda x: x.ceil()),
    aten.round.default: _unary(lambda x: x.round()),
    aten.trunc.default: _unary(_trunc),
    aten.isnan.default: _isnan,
    aten.isinf.default: _isinf,
    aten.leaky_relu.default: lambda n, x, slope=0.01: n.operands(x)[0].leaky_relu(float(slope)),
    aten.hardtanh.default: _hardtanh,
    aten.elu.default: _elu,
    aten.sum.dim_IntList: _reduce("sum"),
    aten.mean.dim: _reduce("mean"),
    aten.mean.default: _reduce("mean"),
    aten.prod.dim_int: lambda n, x, dim, keepdim=False, **_: n.operands(x)[0].prod(
        axis=dim, keepdim=keepdim),
    aten.prod.default: lambda n, x, **_: n.operands(x)[0].prod(),
    aten.amax.default: _reduce("max"),
    aten.amin.default: _reduce("min"),
    aten.max.dim: _arg_with_values("max", "argmax"),
    aten.min.dim: _arg_with_values("min", "argmin"),
    aten.topk.default: _topk,
    aten._cdist_forward.default: _cdist,
    aten.grid_sampler_2d.default: _grid_sampler_2d,
    aten.sort.default: _sort,
    aten.sort.stable: lambda n, x, stable=False, dim=-1, descending=False: _sort(
        n, x, dim, descending),
    aten.argmax.default: lambda n, x, dim, keepdim=False: x.argmax(dim, keepdim),
    aten.argmin.default: lambda n, x, dim, keepdim=False: x.argmin(dim, keepdim),
    aten.var.correction: _var,
    aten.any.dim: _any,
    aten.any.dims: _any,
    aten.any.default: _any,
    aten.cumsum.default: lambda n, x, dim, **_: n.operands(x)[0].cumsum(dim),
    aten.cumprod.default: lambda n, x, dim, **_: n.operands(x)[0].cumprod(dim),
    aten._softmax.default: _softmax("softmax"),
    aten._log_softmax.default: _softmax("log_softmax"),
    aten.mm.default: _arith(lambda a, b: a.matmul(b)),
    aten.bmm.default: _arith(lambda a, b: a.matmul(b)),
    aten.addmm.default: _addmm,
    # PyTorch's fused attention, as the GPU's and the CPU's dispatch leave it.
    aten._scaled_dot_product_efficient_attention.default: _sdpa_with_bias,
    aten._scaled_dot_product_cudnn_attention.default: _sdpa_with_bias,
    aten._scaled_dot_product_flash_attention.default: _sdpa_flash,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa_cpu,
    aten.convolution.default: _convolution,
    aten.convolution_backward.default: _convolution_backward,
    aten.avg_pool2d_backward.default: _avg_pool_backward,
    aten._adaptive_avg_pool2d_backward.default: _adaptive_avg_pool_backward,
    aten.max_pool2d_with_indices.default: _max_pool,
    aten.max_pool2d_with_indices_backward.default: _max_pool_backward,
    aten.max_pool3d_with_indices.default: _max_pool,
    aten.avg_pool2d.default: _avg_pool,
    aten.avg_pool3d.default: _avg_pool,
    aten._adaptive_avg_pool2d.default: _adaptive_avg_pool,
    aten._adaptive_avg_pool3d.default: _adaptive_avg_pool,
    aten.native_layer_norm.default: _layer_norm,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_eval,
    aten._native_batch_norm_legit_functional.default: _batch_norm_batch_stats,
    aten._native_batch_norm_legit.no_stats: lambda n, x, w, b, training, momentum, eps: \
        _batch_norm_batch_stats(n, x, w, b, None, None, training, momentum, eps)[:3],
    aten.native_group_norm.default: _group_norm,
    aten.view.default: lambda n, x, size: _view(n, x),
    aten.permute.default: lambda n, x, dims: x.permute(list(dims)),
    aten.expand.default: _expand,
    aten.unsqueeze.default: lambda n, x, dim: x.unsqueeze(axis=dim),
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.slice.Tensor: _slice,
    aten.as_strided.default: _as_strided,
    aten.select.int: _select,
    aten.slice_scatter.default: _slice_scatter,
    aten.select_scatter.default: _select_scatter,
    aten.diagonal.default: lambda n, x, offset=0, dim1=0, dim2=1: x.diagonal(offset),
    aten.repeat.default: lambda n, x, times: x.reshape(
        (1,) * (len(times) - len(x.shape)) + tuple(x.shape)).repeat(tuple(times)),
    aten.cat.default: _cat,
    aten.split_with_sizes.default: _split,
    aten.flip.default: lambda n, x, dims: _flip(x, dims),
    aten.constant_pad_nd.default: _pad,
    aten.embedding.default: _embedding,
    aten.index_select.default: lambda n, x, dim, idx: x.index_select(axis=dim, indices=idx),
    aten.index.Tensor: _index,
    aten.gather.default: lambda n, x, dim, idx, **_: x.gather_axis(axis=dim, indices=idx),
    aten.scatter.src: _scatter,
    aten.scatter.value: _scatter,
    aten.scatter_add.default: _scatter_reduce,
    aten.scatter_reduce.two: _scatter_reduce,
    aten.index_put.default: _index_put,
    **{op: _embedding_bag for op in (aten._embedding_bag.default,
                                     aten._embedding_bag_forward_only.default)},
    aten.full.default: lambda n, size, value, **_: n.full(value),
    aten.full_like.default: lambda n, x, value, **_: n.full(value),
    aten.scalar_tensor.default: lambda n, value, **_: n.full(value),
    aten.empty.memory_format: lambda n, size, **_: n.full(0),
    aten.empty_strided.default: lambda n, size, stride, **_: n.full(0),
    aten.copy.default: lambda n, dst, src, non_blocking=False: n.operands(src)[0].expand(n.shape),
    aten.fill.Scalar: lambda n, x, value: n.full(value),
    aten.arange.start_step: _arange,
    aten._to_copy.default: _to_copy,
    prims.convert_element_type.default: _to_copy,
    aten.clone.default: _copy,
    aten.alias.default: _copy,
    aten.lift_fresh_copy.default: _copy,
    operator.getitem: _getitem,
    **{op: _size for op in SIZE_OPS},
}


def _flip(x, dims):
    for d in dims:
        x = x.flip(axis=d)
    return x


# Outputs of multi-output ops that luminal does not compute (3-D max pooling's indices; 2-D
# ones over image planes of symbolic size): a node reading one stays in PyTorch, and so does
# the op. An entry is the outputs, or a function of the op's traced arguments giving them.
MISSING_OUTPUTS = {aten._embedding_bag.default: {1, 2, 3},
                   aten._embedding_bag_forward_only.default: {1, 2, 3},
                   aten.max_pool3d_with_indices.default: {1},
                   aten.max_pool2d_with_indices.default: lambda x, *_: set() if _static(
                       x.shape[2:]) else {1},
                   aten._scaled_dot_product_efficient_attention.default: set(range(1, 4)),
                   aten._scaled_dot_product_cudnn_attention.default: set(range(1, 9)),
                   aten._scaled_dot_product_flash_attention.default: set(range(1, 9)),
                   aten._scaled_dot_product_flash_attention_for_cpu.default: {1}}


def missing_outputs(node):
    """The outputs of FX node `node` (an op's call) that luminal does not compute."""
    missing = MISSING_OUTPUTS.get(node.target, set())
    if callable(missing):
        missing = missing(*torch.fx.node.map_aggregate(node.args, traced))
    return missing


def _meta_dtype(v):
    return v.dtype if isinstance(v, torch.Tensor) else type(v)


def _ints_equal(*lists):
    return all(len(set(v)) <= 1 for v in lists if v)


# Arguments luminal's ops cannot express: such nodes stay in PyTorch.
SUPPORTED_IF = {
    # (Bilinear or nearest, sizes known; bicubic stays in PyTorch.)
    aten.grid_sampler_2d.default: lambda x, grid, interpolation_mode, padding_mode,
    align_corners: interpolation_mode in (0, 1) and _static(x.shape) and _static(grid.shape),
    # (A step over rows of known number.)
    aten.slice.Tensor: lambda x, dim=0, start=None, end=None, step=1: step == 1 or (
        isinstance(x.shape[dim], int) and isinstance(start or 0, int)),
    # (Over x's own storage, sizes known.)
    aten.as_strided.default: lambda x, size, stride, storage_offset=None: x.is_contiguous() and (
        x.storage_offset() == 0) and _static(x.shape) and _static(size) and _static(stride) and (
        isinstance(storage_offset or 0, int)),
    # (As the forward translations take them.)
    aten.avg_pool2d_backward.default: lambda grad, x, kernel, stride=(), padding=(0,),
    ceil_mode=False, count_include_pad=True, divisor_override=None: not ceil_mode and
    divisor_override is None and (count_include_pad or not any(padding)) and
    _ints_equal(kernel, stride, padding) and _static(x.shape) and _static(grad.shape),
    aten._adaptive_avg_pool2d_backward.default: lambda grad, x: _static(x.shape) and
    _static(grad.shape),
    aten.convolution_backward.default: lambda grad, x, w, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask: not transposed and len(stride) in (1, 2, 3) and
    _ints_equal(stride, padding, dilation) and _static(x.shape) and _static(grad.shape),
    aten.convolution.default: lambda x, w, b, stride, padding, dilation, transposed, output_padding,
    groups: not transposed and len(stride) in (1, 2, 3) and _ints_equal(stride, dilation),
    aten.max_pool2d_with_indices.default: lambda x, kernel, stride=(), padding=(0,),
    dilation=(1,), ceil_mode=False: len(x.shape) == 4 and (not ceil_mode or _static(
        x.shape[2:])) and all(d == 1 for d in dilation) and _ints_equal(kernel, stride, padding),
    aten.max_pool3d_with_indices.default: lambda x, kernel, stride=(), padding=(0,),
    dilation=(1,), ceil_mode=False: (not ceil_mode or _static(x.shape[2:])) and
    all(d == 1 for d in dilation) and _ints_equal(kernel, stride, padding),
    aten.max_pool2d_with_indices_backward.default: lambda grad, x, kernel, stride, padding,
    dilation, ceil_mode, indices: len(x.shape) == 4 and _static(x.shape) and _static(grad.shape) and
    all(d == 1 for d in dilation) and _ints_equal(kernel, stride, padding),
    **{op: lambda x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
       divisor_override=None: not ceil_mode and divisor_override is None and
       (count_include_pad or not any(padding)) and _ints_equal(kernel, stride, padding)
       for op in (aten.avg_pool2d.default, aten.avg_pool3d.default)},
    # (Spatial sizes known, unless the output is one element.)
    **{op: lambda x, size: all(s == 1 for s in size) or _static(x.shape[-len(size):])
       for op in (aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)},
    # (Training mode: the running statistics' form in eval mode is another op.)
    aten._native_batch_norm_legit_functional.default: lambda x, w, b, rm, rv, training, *_: training,
    aten._native_batch_norm_legit.no_stats: lambda x, w, b, training, *_: training,
    # (Indices and offsets of known numbers; per-sample weights only where they sum.)
    **{op: lambda w, i, o, scale=False, mode=0, sparse=False, psw=None, last=False, pad=-1:
       i.dim() == 1 and _static(i.shape) and _static(o.shape) and (psw is None or mode == 0)
       for op in (aten._embedding_bag.default, aten._embedding_bag_forward_only.default)},
    aten.index_put.default: lambda x, indices, values, accumulate=False: _static(x.shape) and all(
        i is None or (i.dtype in (torch.int64, torch.int32) and _static(i.shape))
        for i in indices) and any(i is not None for i in indices),
    aten.index.Tensor: lambda x, indices: all(
        i is None or i.dtype in (torch.int64, torch.int32) for i in indices) and all(
        isinstance(x.shape[a], int) and (i is None or _static(i.shape))
        for a, i in enumerate(indices)),
    **{op: lambda q, k, v, bias=None, log_sumexp=False, dropout=0.0, *_, **__: dropout == 0.0
       for op in (aten._scaled_dot_product_efficient_attention.default,
                  aten._scaled_dot_product_cudnn_attention.default)},
    **{op: lambda q, k, v, dropout=0.0, *_, **__: dropout == 0.0
       for op in (aten._scaled_dot_product_flash_attention.default,
                  aten._scaled_dot_product_flash_attention_for_cpu.default)},
    aten.slice_scatter.default: lambda x, src, dim=0, start=None, end=None, step=1: step == 1,
    # (luminal's top_k picks among floats, k of a known length at most.)
    aten.topk.default: lambda x, k, dim=-1, largest=True, sorted=True: x.dim() > 0 and x.dtype in (
        torch.float32, torch.float16, torch.bfloat16) and isinstance(k, int) and isinstance(
        x.shape[dim], int) and 1 <= k <= x.shape[dim],
    **{op: lambda x, *args, stable=False, dim=-1, descending=False: x.dim() > 0 and x.dtype in (
        torch.float32, torch.float16, torch.bfloat16) and isinstance(
        x.shape[args[0] if args else dim], int) and x.shape[args[0] if args else dim] >= 1
       for op in (aten.sort.default, aten.sort.stable)},
    # (Shapes known; a mean of floats.)
    **{op: lambda x, dim, index, src, reduce="sum", include_self=True: _static(x.shape) and
       _static(index.shape) and x.dtype != torch.bool and (
           reduce != "mean" or x.dtype in (torch.float32, torch.float16, torch.bfloat16))
       for op in (aten.scatter_add.default, aten.scatter_reduce.two)},
    aten.diagonal.default: lambda x, offset=0, dim1=0, dim2=1: x.dim() == 2 and (dim1, dim2) in (
        (0, 1), (-2, -1)),
    **{op: lambda a, b: _meta_dtype(a) == torch.bool and _meta_dtype(b) in (torch.bool, bool)
       for op in (aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_or.Tensor,
                  aten.bitwise_or.Scalar, aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)},
}
