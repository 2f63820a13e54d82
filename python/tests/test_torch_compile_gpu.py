"""torch.compile(backend="luminal") on CUDA tensors: luminal reads the inputs and
parameters where they lie and hands back CUDA tensors (skipped without a GPU)."""
import warnings

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here", allow_module_level=True)

from torch_models import CNN, MLP, Block  # noqa: E402


def compiled_matches_eager(model, x, dtype, rtol):
    model = model.to("cuda", dtype).eval()
    x = x.to("cuda")
    x = x.to(dtype) if x.is_floating_point() else x
    torch._dynamo.reset()
    fast = torch.compile(model, backend="luminal")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want = model(x)
        for _ in range(2):  # the second call reuses what the first set
            got = fast(x)
    breaks = [str(w.message) for w in caught if "luminal:" in str(w.message)]
    assert not breaks, breaks  # every op in luminal, none left to PyTorch
    want, got = getattr(want, "logits", want), getattr(got, "logits", got)
    assert got.device == want.device and got.dtype == want.dtype and got.shape == want.shape
    scale = want.float().abs().max().item()
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-3), (torch.bfloat16, 3e-2)])
def test_models_on_the_gpu(dtype, rtol):
    torch.manual_seed(0)
    compiled_matches_eager(MLP(), torch.randn(4, 16), dtype, rtol)
    compiled_matches_eager(CNN(), torch.randn(2, 3, 16, 16), dtype, rtol)
    compiled_matches_eager(Block(), torch.randn(2, 9, 32), dtype, rtol)


def test_llama_on_the_gpu():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2)
    compiled_matches_eager(transformers.LlamaForCausalLM(config), torch.randint(0, 128, (2, 11)),
                           torch.float32, 1e-3)


def bench_shape_llama_config():
    """One layer of the bench's llama-tiny: hidden 256, 8 heads of 32 on 4 key heads."""
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=704,
                                    num_hidden_layers=1, num_attention_heads=8,
                                    num_key_value_heads=4)


# At the bench's shape (8 heads of 32 on 4 key heads, 128 tokens, batch 1) in f32 the
# attention's output, [batch, key heads, group, tokens, head dim], is read as [batch,
# tokens, heads x head dim] by the output projection: the attention stores its rows so.
def test_llama_at_the_bench_shape_in_f32():
    config = bench_shape_llama_config()  # (skips without transformers)
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    compiled_matches_eager(LlamaForCausalLM(config), torch.randint(0, 1000, (1, 128)),
                           torch.float32, 1e-3)


# The pieces of that layer alone, in f32 at the same shape.
@pytest.mark.parametrize("piece", ["attention", "layer"])
def test_llama_layer_pieces_at_the_bench_shape_in_f32(piece):
    from torch_models import llama_pieces
    config = bench_shape_llama_config()
    torch.manual_seed(0)
    compiled_matches_eager(llama_pieces(config)[piece], torch.randn(1, 128, 256),
                           torch.float32, 1e-3)


def test_a_buffer_left_on_the_cpu_runs_on_the_inputs_gpu():
    class Scaled(torch.nn.Module):  # as HF's rotary frequencies, moved by .to(x.device)
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.linspace(0.5, 2.0, 8))

        def forward(self, x):
            return x * self.scale.to(x.device) + 1

    model = Scaled()  # (its buffer stays on the CPU)
    x = torch.randn(4, 8, device="cuda")
    torch._dynamo.reset()
    got = torch.compile(model, backend="luminal")(x)
    assert got.device == x.device
    torch.testing.assert_close(got, model(x))


def test_inputs_changed_between_calls_are_read_again():
    torch._dynamo.reset()
    fast = torch.compile(lambda a, b: (a * b).sum(-1), backend="luminal")
    a, b = torch.randn(3, 8, device="cuda"), torch.randn(3, 8, device="cuda")
    fast(a, b)
    a.mul_(3)  # in place, on torch's stream
    torch.testing.assert_close(fast(a, b), (a * b).sum(-1), rtol=1e-5, atol=1e-5)


def test_calls_run_in_order_with_torchs_stream():
    # Each input is written by a product still running on torch's stream when the call is
    # made, and each output is changed in place on that stream right after: luminal's run
    # must follow the first and precede the second, the host waiting for neither.
    torch._dynamo.reset()
    fast = torch.compile(lambda a: (a * 2.0).sum(-1), backend="luminal")
    big = torch.randn(4096, 4096, device="cuda")
    outs, wants = [], []
    for i in range(6):
        a = (big @ big)[:8] * 0.0 + float(i)
        got = fast(a)
        got.add_(1.0)
        outs.append(got)
        wants.append(torch.full((8,), 2.0 * 4096 * i + 1.0, device="cuda"))
    for got, want in zip(outs, wants):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-3)


def test_outputs_are_torchs_tensors():
    # Each output is computed into a tensor torch allocated for the call (no copy out of
    # luminal's memory); a value returned twice comes back twice, and outputs kept from
    # earlier calls keep their values.
    torch._dynamo.reset()

    def f(x, w):
        y = (x @ w).relu()
        return y, y, y.sum(0)

    fast = torch.compile(f, backend="luminal")
    w = torch.randn(8, 8, device="cuda")
    calls = []
    for i in range(4):
        x = torch.randn(4, 8, device="cuda")
        calls.append((fast(x, w), f(x, w)))
    for got, want in calls:
        assert all(g.device == e.device and g.shape == e.shape for g, e in zip(got, want))
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, rtol=1e-3, atol=1e-3)
