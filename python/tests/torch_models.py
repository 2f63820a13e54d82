"""Small PyTorch models the torch.compile tests and bench/torch_compile_bench.py share."""
import torch
import torch.nn.functional as F
from torch import nn


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


def llama_pieces(config):
    """A Hugging Face Llama decoder layer's pieces, each a module over hidden states
    [batch, tokens, hidden]: its RMSNorm, its MLP, its attention (rotary positions from
    0, causal) and the whole layer, to find which piece a wrong layer goes wrong in."""
    from transformers.models.llama import modeling_llama as llama
    config._attn_implementation = "sdpa"

    class WithPositions(nn.Module):
        """`piece` called with rotary positions from 0 and no mask (causal); its
        frequencies a buffer, moved with it."""

        def __init__(self, piece):
            super().__init__()
            self.piece, self.rotary = piece, llama.LlamaRotaryEmbedding(config)

        def forward(self, x):
            positions = self.rotary(x, torch.arange(x.shape[1], device=x.device)[None])
            out = self.piece(x, position_embeddings=positions, attention_mask=None)
            return out[0] if isinstance(out, tuple) else out

    return {"norm": llama.LlamaRMSNorm(config.hidden_size), "mlp": llama.LlamaMLP(config),
            "attention": WithPositions(llama.LlamaAttention(config, layer_idx=0)),
            "layer": WithPositions(llama.LlamaDecoderLayer(config, layer_idx=0))}
