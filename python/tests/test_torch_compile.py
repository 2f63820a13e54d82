"""torch.compile(model, backend="luminal") against the same model run eagerly by PyTorch."""
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import luminal.aten as aten  # noqa: E402
import luminal.torch_backend as torch_backend  # noqa: E402
from torch_models import CNN, MLP, Block  # noqa: E402


def close(got, want):
    """fp32 at 1e-4 relative to the result's scale."""
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1e-6))


def counted_builds(monkeypatch):
    """A list that grows by one each time a luminal subgraph is built (compiled)."""
    built = []
    original = torch_backend.LuminalSubgraph._build
    monkeypatch.setattr(torch_backend.LuminalSubgraph, "_build",
                        lambda self, args: built.append(1) or original(self, args))
    return built


def compiled_matches_eager(model, *inputs, whole=True, **compile_args):
    """The model compiled by luminal gives eager's answer; `whole`: with no op left to
    PyTorch (no graph-break warning)."""
    model.eval()
    torch._dynamo.reset()
    torch_backend._warned.clear()
    fast = torch.compile(model, backend="luminal", **compile_args)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want, got = model(*inputs), fast(*inputs)
    breaks = [str(w.message) for w in caught if "luminal:" in str(w.message)]
    assert not whole or not breaks, breaks
    if hasattr(want, "logits"):
        want, got = want.logits, got.logits
    close(got, want)
    return breaks


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def test_mlp():
    compiled_matches_eager(MLP(), torch.randn(4, 16))


def test_cnn_with_conv_batch_norm_and_pooling():
    cnn = CNN()
    for bn in (cnn.bn1, cnn.bn2):  # statistics that are not the identity
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    compiled_matches_eager(cnn, torch.randn(2, 3, 16, 16))


def test_transformer_block():
    compiled_matches_eager(Block(), torch.randn(2, 9, 32))


transformers = None


def hf():
    global transformers
    transformers = transformers or pytest.importorskip("transformers")
    return transformers


def tokens(shape, vocab=128):
    return torch.randint(0, vocab, shape)


# Tiny random configurations of three families (grouped-query attention, per-head query
# and key norms, learned positions and tied heads), over batches and lengths of their own.
HF_MODELS = [
    ("LlamaConfig", "LlamaForCausalLM", (2, 11),
     dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, rope_theta=10000.0)),
    ("Qwen3Config", "Qwen3ForCausalLM", (1, 13),
     dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, head_dim=16)),
    ("GPT2Config", "GPT2LMHeadModel", (2, 10), dict(n_embd=64, n_layer=2, n_head=4, n_positions=64)),
]


def test_half_precision_layer_norm_rounds_once_as_eager_does():
    """A bf16 LayerNorm with weight and bias, computed in f32 and rounded once (as PyTorch's
    kernel does, not op by op in bf16): at most one bf16 step from eager's, almost always
    none."""
    norm = torch.nn.LayerNorm(768).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
        norm.bias.uniform_(-1.0, 1.0)
    x = (torch.randn(64, 768) * 3 + 1).to(torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        want, got = norm(x).float(), torch.compile(norm, backend="luminal")(x).float()
    step = want.abs().clamp(min=2.0 ** -6) * 2.0 ** -7  # one bf16 step (8 bits kept)
    off = (got - want).abs()
    assert (off <= step).all(), off.max().item()
    assert (off > 0).float().mean().item() < 0.02


@pytest.mark.parametrize("config,model,shape,sizes", HF_MODELS, ids=[m[1] for m in HF_MODELS])
def test_hugging_face_causal_lm(config, model, shape, sizes):
    t = hf()
    net = getattr(t, model)(getattr(t, config)(vocab_size=128, **sizes))
    compiled_matches_eager(net, tokens(shape))


# The program the CUDA backend would run, on the interpreter (its rewrites and passes,
# checked without a GPU; options={"backend": "cuda_program_reference"}). PyTorch's graphs
# carry views luminal's own do not (a leading dim of 1 with a real stride, grouped heads
# merged in one view): there a CUDA-only pass once stored a Llama's attention rows in the
# wrong places, right on the CPU backend and wrong on the GPU.
def bench_shape_llama():
    t = hf()
    config = t.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=704,
                           num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=4)
    return t.LlamaForCausalLM(config), tokens((1, 128), vocab=1000)


def hf_model(i, shape=None):
    config, model, default_shape, sizes = HF_MODELS[i]
    t = hf()
    return (getattr(t, model)(getattr(t, config)(vocab_size=128, **sizes)),
            tokens(shape or default_shape))


def resnet18_with_statistics():
    """torchvision's resnet18, its batch norms' statistics not the identity."""
    torchvision = pytest.importorskip("torchvision")
    net = torchvision.models.resnet18(num_classes=10)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return net


CUDA_PROGRAM_CASES = {
    "mlp": lambda: (MLP(), torch.randn(4, 16)),
    "cnn": lambda: (CNN(), torch.randn(2, 3, 16, 16)),
    "block": lambda: (Block(), torch.randn(2, 9, 32)),
    "llama": lambda: hf_model(0),
    "llama-batch-1": lambda: hf_model(0, (1, 12)),
    "qwen3": lambda: hf_model(1),
    "gpt2": lambda: hf_model(2),
    "llama-bench-shape": bench_shape_llama,
    # (convolutions stored channels last, window products)
    "resnet18": lambda: (resnet18_with_statistics(), torch.randn(2, 3, 32, 32)),
}


@pytest.mark.parametrize("case", list(CUDA_PROGRAM_CASES))
def test_the_cuda_backends_program_matches_eager(case):
    model, x = CUDA_PROGRAM_CASES[case]()
    compiled_matches_eager(model, x, options={"backend": "cuda_program_reference"})


@pytest.mark.parametrize("host", ["cpu", "cuda_program_reference"])
def test_a_bf16_blocks_gradients_match_eager(host):
    """The backward pass of a bf16 transformer block (heads of 16) against f32 eager's, to
    bf16's precision: on the CPU backend, and through the CUDA backend's program (whose
    rewrites include attention gradients over tiles of recomputed scores). Its saved
    tensors reach luminal as strided views."""
    model, x = Block(dim=64, heads=4), torch.randn(2, 24, 64)
    model(x).square().sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.to(torch.bfloat16)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # backward ops luminal lacks run in PyTorch
        fast = torch.compile(model, backend="luminal", options={"backend": host})
        fast(x.to(torch.bfloat16)).square().sum().backward()
    for p, w in zip(model.parameters(), want):
        scale = w.abs().max().item()
        torch.testing.assert_close(p.grad.float(), w, rtol=3e-2, atol=3e-2 * scale)


def test_an_unknown_host_backend_is_an_error():
    torch._dynamo.reset()
    fast = torch.compile(MLP(), backend="luminal", options={"backend": "tpu"})
    with pytest.raises(Exception, match="'tpu' is not one of"):
        fast(torch.randn(2, 16))


def test_resnet18():
    compiled_matches_eager(resnet18_with_statistics(), torch.randn(2, 3, 64, 64))


# Vision models beyond ResNet whose graphs reach other ops: ConvNeXt's restrided pooled
# features, Swin's strided patch merging and shifted windows, SqueezeNet's pooling
# rounding up, AlexNet's adaptive pooling to more outputs than inputs, Inception's 1x7
# and 7x1 convolutions padded apart.
@pytest.mark.parametrize("name", ["convnext_tiny", "swin_t", "squeezenet1_0", "alexnet",
                                  "inception_v3"])
def test_torchvision_models(name):
    torchvision = pytest.importorskip("torchvision")
    extra = dict(aux_logits=False, init_weights=True) if name == "inception_v3" else {}
    net = getattr(torchvision.models, name)(num_classes=10, **extra)
    compiled_matches_eager(net, torch.randn(1, 3, 80, 80))


class Distances(nn.Module):
    """An op luminal has no translation for (torch.pdist) between ops it has."""

    def forward(self, x):
        y = torch.pdist(torch.tanh(x) * 2)
        return y.exp() + x.sum()


def test_an_op_without_translation_breaks_the_graph_and_keeps_eagers_answer():
    said = compiled_matches_eager(Distances(), torch.randn(3, 7), whole=False)
    assert any("aten._pdist_forward" in s and "graph break" in s for s in said), said


def test_strict_names_the_op_without_translation():
    torch._dynamo.reset()
    fast = torch.compile(Distances(), backend="luminal", options={"strict": True})
    with pytest.raises(Exception, match="no translation for aten._pdist_forward"):
        fast(torch.randn(3, 7))


def test_unknown_option_is_an_error():
    torch._dynamo.reset()
    fast = torch.compile(MLP(), backend="luminal", options={"fast": True})
    with pytest.raises(Exception, match="unknown option"):
        fast(torch.randn(4, 16))


def test_dynamic_shapes_compile_once_for_every_length(monkeypatch):
    t = hf()
    config = t.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4)
    model = t.LlamaForCausalLM(config).eval()
    built = counted_builds(monkeypatch)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="luminal", dynamic=True)
    with torch.no_grad():
        # (Lengths of 1 are specialised by torch: it asks for a compile of their own.)
        for shape in ((2, 5), (2, 12), (3, 7)):
            x = tokens(shape)
            close(fast(x).logits, model(x).logits)
    assert len(built) == 1


def test_a_dynamic_batch_of_images_compiles_once(monkeypatch):
    cnn = CNN()
    built = counted_builds(monkeypatch)
    torch._dynamo.reset()
    fast = torch.compile(cnn.eval(), backend="luminal")
    with torch.no_grad():
        for batch in (2, 3, 5):
            x = torch.randn(batch, 3, 16, 16)
            torch._dynamo.mark_dynamic(x, 0)
            close(fast(x), cnn(x))
    assert len(built) == 1


def test_a_cnn_of_symbolic_image_size_compiles_once(monkeypatch):
    # dynamic=True makes the images' size symbolic too: the pooled size flattened into the
    # Linear (16 * f * f = 64) is fixed by torch's guards, not by its expressions. The
    # flattened width, worked out from the sizes (aten.sym_size, then Python's *), is
    # worked out inside the one subgraph: no graph break.
    cnn = CNN()
    built = counted_builds(monkeypatch)
    torch._dynamo.reset()
    torch_backend._warned.clear()
    fast = torch.compile(cnn.eval(), backend="luminal", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a graph break warns
        with torch.no_grad():
            for shape in ((2, 3, 16, 16), (3, 3, 14, 14), (5, 3, 16, 16)):
                x = torch.randn(*shape)
                close(fast(x), cnn(x))
    assert len(built) == 1


def test_key_heads_copied_per_query_head_are_read_before_the_copy(monkeypatch):
    # Hugging Face's repeat_kv copies each key and value head for the query heads it
    # serves (expand, clone, view); the attention reads the heads before the copy, in
    # groups of query heads, and gives eager's answer.
    found = []
    original = aten._heads_served
    monkeypatch.setattr(aten, "_heads_served",
                        lambda n, fx: found.append(original(n, fx)) or found[-1])

    def repeat(x, n):
        b, heads, s, d = x.shape
        return x[:, :, None, :, :].expand(b, heads, n, s, d).reshape(b, heads * n, s, d)

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, repeat(k, 2), repeat(v, 2), is_causal=True)

    torch._dynamo.reset()
    fast = torch.compile(attend, backend="luminal", options={"strict": True})
    q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    with torch.no_grad():
        close(fast(q, k, v), attend(q, k, v))
    assert len(found) == 2 and all(f is not None for f in found)


def test_exact_symbolic_divisions_translate():
    # An image's size halved by a strided convolution comes as CleanDiv, torch's FloorDiv
    # known to be exact.
    import sympy
    from torch.utils._sympy.functions import CleanDiv, FloorDiv

    s = sympy.Symbol("s53", integer=True, positive=True)
    assert aten._sympy_text(CleanDiv(s, 2)) == "(s53 / 2)"
    assert aten._sympy_text(FloorDiv(s - 1, 2)) == "((-1 + s53) / 2)"


def test_parameters_changed_in_place_are_seen():
    mlp = MLP().eval()
    torch._dynamo.reset()
    fast = torch.compile(mlp, backend="luminal")
    x = torch.randn(4, 16)
    with torch.no_grad():
        fast(x)
        mlp.b.weight.mul_(-2)  # the copy luminal holds is now stale
        close(fast(x), mlp(x))


def test_gradients_match_eager():
    mlp = MLP()
    x = torch.randn(4, 16)
    mlp(x).sum().backward()
    want = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # backward ops luminal lacks run in PyTorch
        torch.compile(mlp, backend="luminal")(x).sum().backward()
    for p, w in zip(mlp.parameters(), want):
        close(p.grad, w)


# Convolutions whose backward pass the table translates: strides leaving input positions
# past the last window, groups with dilation, depthwise, a 7x7 stem, 1-D and 3-D, padding
# past the kernel's reach.
CONV_GRADIENT_CASES = [
    ((2, 3, 9, 11), (4, 3, 3, 3), dict(stride=2, padding=1)),
    ((2, 4, 10, 10), (6, 2, 3, 3), dict(stride=2, dilation=2, groups=2)),
    ((2, 6, 8, 7), (6, 1, 3, 3), dict(padding=1, groups=6)),
    ((2, 3, 20, 17), (5, 3, 7, 7), dict(stride=2, padding=3)),
    ((2, 3, 13), (4, 3, 5), dict(stride=3, padding=2)),
    ((1, 2, 5, 6, 7), (3, 2, 3, 3, 3), dict(stride=2, padding=1)),
    ((2, 3, 5, 5), (4, 3, 3, 3), dict(padding=3)),
]


@pytest.mark.parametrize("x_shape,w_shape,options", CONV_GRADIENT_CASES)
def test_convolution_gradients_match_eager(x_shape, w_shape, options):
    """The backward graph's convolution_backward runs in luminal (strict: nothing left to
    PyTorch), and the input's, weight's and bias's gradients are eager's."""
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(x_shape)]

    def loss(x, w, b):
        return conv(x, w, b, **options).sin().sum()

    leaves = [torch.randn(*x_shape, requires_grad=True), torch.randn(*w_shape, requires_grad=True),
              torch.randn(w_shape[0], requires_grad=True)]
    loss(*leaves).backward()
    want = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    torch._dynamo.reset()
    torch.compile(loss, backend="luminal", options={"strict": True})(*leaves).backward()
    for t, w in zip(leaves, want):
        close(t.grad, w)


@pytest.mark.parametrize("pool", [
    lambda x: F.avg_pool2d(x, 2),
    lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
    lambda x: F.avg_pool2d(x, 3, stride=1, padding=1),
    lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
    lambda x: F.adaptive_avg_pool2d(x, (4, 4)),
    lambda x: F.max_pool2d(x, 2),
    lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
    lambda x: F.max_pool2d(x.round().relu(), 3, stride=1, padding=1),
    lambda x: F.max_pool2d(x, 3, stride=2, ceil_mode=True),
], ids=["avg_2x2", "avg_3x3_stride_2_padded", "avg_3x3_stride_1_padded", "adaptive_uneven",
        "adaptive_even", "max_2x2", "max_3x3_stride_2_padded", "max_3x3_stride_1_ties",
        "max_3x3_ceil_mode"])
def test_pooling_gradients_match_eager(pool):
    """The backward graph's avg_pool2d_backward, _adaptive_avg_pool2d_backward and
    max_pool2d_with_indices_backward (with the forward's indices) run in luminal (strict),
    the input's gradient eager's: a max pool's windows give theirs where eager's do,
    overlapping windows' added, equal maxima (a rounded, ReLU'd image) to the first."""
    def loss(x):
        return pool(x).sin().sum()

    x = torch.randn(2, 3, 8, 11, requires_grad=True)
    loss(x).backward()
    want, x.grad = x.grad.clone(), None
    torch._dynamo.reset()
    torch.compile(loss, backend="luminal", options={"strict": True})(x).backward()
    close(x.grad, want)


def test_backend_is_found_without_importing_luminal():
    # The entry point names the backend; the child never imports luminal itself.
    code = ("import torch\n"
            "f = torch.compile(lambda x: (x * 2).sin(), backend='luminal')\n"
            "x = torch.randn(5)\n"
            "assert torch.allclose(f(x), (x * 2).sin(), atol=1e-6)\n"
            "import sys; assert 'luminal' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


