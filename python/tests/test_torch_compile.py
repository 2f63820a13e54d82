"""torch.compile(model, backend="luminal") against the same model run eagerly by PyTorch."""
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import luminal  # noqa: E402
import luminal.torch_backend as torch_backend  # noqa: E402


def close(got, want):
    """fp32 at 1e-4 relative to the result's scale."""
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * max(scale, 1e-6))


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


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 64), nn.Linear(64, 10)

    def forward(self, x):
        return F.log_softmax(self.b(F.gelu(self.a(x))), dim=-1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


class Block(nn.Module):
    """A pre-norm transformer block: causal multi-head attention, then a GELU MLP."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


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


def test_llama_for_causal_lm():
    t = hf()
    config = t.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           rope_theta=10000.0)
    compiled_matches_eager(t.LlamaForCausalLM(config), tokens((2, 11)))


def test_qwen3_for_causal_lm():
    t = hf()
    config = t.Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16)
    compiled_matches_eager(t.Qwen3ForCausalLM(config), tokens((1, 13)))


def test_gpt2_lm_head_model():
    t = hf()
    config = t.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    compiled_matches_eager(t.GPT2LMHeadModel(config), tokens((2, 10)))


def test_resnet18():
    torchvision = pytest.importorskip("torchvision")
    net = torchvision.models.resnet18(num_classes=10)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    compiled_matches_eager(net, torch.randn(2, 3, 64, 64))


class Sorts(nn.Module):
    """An op luminal has no translation for (sort) between ops it has."""

    def forward(self, x):
        y = torch.sort(torch.tanh(x) * 2, dim=-1).values
        return y.exp().sum(-1)


def test_an_op_without_translation_breaks_the_graph_and_keeps_eagers_answer():
    said = compiled_matches_eager(Sorts(), torch.randn(3, 7), whole=False)
    assert any("aten.sort" in s and "graph break" in s for s in said), said


def test_strict_names_the_op_without_translation():
    torch._dynamo.reset()
    fast = torch.compile(Sorts(), backend="luminal", options={"strict": True})
    with pytest.raises(Exception, match="no translation for aten.sort"):
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
    built = []
    original = torch_backend.LuminalSubgraph._build
    monkeypatch.setattr(torch_backend.LuminalSubgraph, "_build",
                        lambda self, args: built.append(1) or original(self, args))
    torch._dynamo.reset()
    fast = torch.compile(model, backend="luminal", dynamic=True)
    with torch.no_grad():
        # (Lengths of 1 are specialised by torch: it asks for a compile of their own.)
        for shape in ((2, 5), (2, 12), (3, 7)):
            x = tokens(shape)
            close(fast(x).logits, model(x).logits)
    assert len(built) == 1


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


def test_backend_is_found_without_importing_luminal():
    # The entry point names the backend; the child never imports luminal itself.
    code = ("import torch\n"
            "f = torch.compile(lambda x: (x * 2).sin(), backend='luminal')\n"
            "x = torch.randn(5)\n"
            "assert torch.allclose(f(x), (x * 2).sin(), atol=1e-6)\n"
            "import sys; assert 'luminal' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


