"""Models of real shapes with random weights, for benchmarks on machines that cannot
download checkpoints: Hugging Face folders (config.json written by transformers,
model.safetensors in bf16, tokenizer.json) and GGUF files in ggml's block formats.

The tokenizer is byte-level BPE: ids 0-255 are the bytes, id 256 is the one merge ("QQ",
which GGUF readers want at least one of), the rest of the vocabulary are plain tokens no
text encodes to (decoding any id works), so a prompt of N ASCII characters without "QQ"
is exactly N tokens in luminal and in PyTorch (`prompt_ids`).
"""
import json
import os
import sys

import numpy as np


def _llama3(rope_factor, **shape):
    """A Llama 3 shape: what the family shares (vocabulary, 8 key-value heads, the llama3
    RoPE scaling by `rope_factor`) and `shape`."""
    return ("LlamaConfig", dict(
        vocab_size=128256, num_key_value_heads=8, rms_norm_eps=1e-5,
        max_position_embeddings=131072, **shape,
        rope_scaling={"rope_type": "llama3", "rope_theta": 500000.0, "factor": rope_factor,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}))


# name -> (transformers config class, its arguments); the tiny ones check the bench itself.
SHAPES = {
    "tiny-llama": ("LlamaConfig", dict(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
        max_position_embeddings=4096, tie_word_embeddings=False,
        rope_scaling={"rope_type": "default", "rope_theta": 10000.0})),
    "tiny-qwen3": ("Qwen3Config", dict(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
        max_position_embeddings=4096, tie_word_embeddings=True,
        rope_scaling={"rope_type": "default", "rope_theta": 1000000.0})),
    "llama-3.2-1b": _llama3(32.0, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                            num_attention_heads=32, head_dim=64, tie_word_embeddings=True),
    "llama-3.1-8b": _llama3(8.0, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                            num_attention_heads=32, head_dim=128, tie_word_embeddings=False),
    "llama-3.1-70b": _llama3(8.0, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                             num_attention_heads=64, head_dim=128, tie_word_embeddings=False),
    "qwen3-30b-a3b": ("Qwen3MoeConfig", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, rms_norm_eps=1e-6,
        num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
        max_position_embeddings=40960, tie_word_embeddings=False,
        rope_scaling={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3-8b": ("Qwen3Config", dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
        max_position_embeddings=40960, tie_word_embeddings=False,
        rope_scaling={"rope_type": "default", "rope_theta": 1000000.0})),
}


def config(shape):
    import transformers
    cls, args = SHAPES[shape]
    args = dict(args)
    rope = args.pop("rope_scaling")
    cfg = getattr(transformers, cls)(bos_token_id=0, eos_token_id=1, **args)
    # transformers 5 keeps RoPE in rope_parameters, 4 in rope_theta + rope_scaling.
    if hasattr(cfg, "rope_parameters"):
        cfg.rope_parameters = rope
    else:
        cfg.rope_theta = rope["rope_theta"]
        cfg.rope_scaling = None if rope["rope_type"] == "default" else {
            k: v for k, v in rope.items() if k != "rope_theta"}
    return cfg


def _bytes_to_unicode():
    """GPT-2's byte-level alphabet: printable bytes as themselves, others shifted up."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + n))
            n += 1
    return chars


MERGES = ["Q Q"]


def vocabulary(size):
    return _bytes_to_unicode() + ["QQ"] + [f"t{i}" for i in range(257, size)]


def write_tokenizer(path, vocab_size):
    vocab = {tok: i for i, tok in enumerate(vocabulary(vocab_size))}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
           "decoder": byte_level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": MERGES}}
    with open(path, "w") as f:
        json.dump(tok, f)


def prompt_text(tokens):
    """`tokens` ASCII characters of English-like text (one token each)."""
    words = ("the model reads every weight once for each token it writes so decode is "
             "bound by memory bandwidth and the prompt by arithmetic ").split()
    text, i = "", 0
    while len(text) < tokens:
        text += words[i % len(words)] + " "
        i += 1
    return text[:tokens]


def prompt_ids(tokens):
    return list(prompt_text(tokens).encode())


def random_state(cfg, seed=0):
    """The model's parameters (names and shapes as transformers has them), random, bf16, on
    the GPU where there is one: matrices N(0, 0.02), norm weights near 1."""
    import torch
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(seed)
    state = {}
    for name, p in model.state_dict().items():
        if cfg.tie_word_embeddings and name == "lm_head.weight":
            continue
        if name.endswith("norm.weight"):
            t = 1 + 0.1 * torch.randn(p.shape, generator=gen, device=device)
        else:
            t = 0.02 * torch.randn(p.shape, generator=gen, device=device)
        state[name] = t.to(torch.bfloat16)
    return state


def write_hf_folder(folder, shape, seed=0):
    """Writes config.json, model.safetensors and tokenizer.json; returns the config."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    cfg = config(shape)
    cfg.save_pretrained(folder)
    state = random_state(cfg, seed)
    save_file({k: v.cpu() for k, v in state.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    write_tokenizer(os.path.join(folder, "tokenizer.json"), cfg.vocab_size)
    return cfg


def write_config_folder(folder, shape):
    """config.json and tokenizer.json alone: a model for `luminal generate --random-weights`
    (a shape too large to write to disk, 70B's 141 GB of bf16); returns the config."""
    os.makedirs(folder, exist_ok=True)
    cfg = config(shape)
    cfg.save_pretrained(folder)
    write_tokenizer(os.path.join(folder, "tokenizer.json"), cfg.vocab_size)
    return cfg


def dense_parameter_shapes(cfg):
    """(HF name, shape) of a Llama-family model's parameters but a mixture's experts and
    router (transformers' names, without building the model)."""
    h, hd = cfg.hidden_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    moe = getattr(cfg, "num_experts", None)
    yield "model.embed_tokens.weight", (cfg.vocab_size, h)
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        yield p + "self_attn.q_proj.weight", (q, h)
        yield p + "self_attn.k_proj.weight", (kv, h)
        yield p + "self_attn.v_proj.weight", (kv, h)
        yield p + "self_attn.o_proj.weight", (h, q)
        if cfg.model_type in ("qwen3", "qwen3_moe"):
            yield p + "self_attn.q_norm.weight", (hd,)
            yield p + "self_attn.k_norm.weight", (hd,)
        if not moe:
            i = cfg.intermediate_size
            yield p + "mlp.gate_proj.weight", (i, h)
            yield p + "mlp.up_proj.weight", (i, h)
            yield p + "mlp.down_proj.weight", (h, i)
        yield p + "input_layernorm.weight", (h,)
        yield p + "post_attention_layernorm.weight", (h,)
    yield "model.norm.weight", (h,)
    if not cfg.tie_word_embeddings:
        yield "lm_head.weight", (cfg.vocab_size, h)


def weight_bytes(cfg):
    """Bytes of weights a decode step reads: every matrix and norm, the embedding table only
    where it is the output head too (a step gathers one row of it otherwise); of a
    mixture's experts, the router and the chosen experts' matrices."""
    h, i, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hd = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    ffn = 3 * h * i
    if getattr(cfg, "num_experts", None):
        ffn = cfg.num_experts * h + cfg.num_experts_per_tok * 3 * h * cfg.moe_intermediate_size
    per_layer = h * (q + 2 * kv) + q * h + ffn + 2 * h
    if cfg.model_type in ("qwen3", "qwen3_moe"):
        per_layer += 2 * hd
    return 2 * (layers * per_layer + h + cfg.vocab_size * h)


def kv_bytes_per_position(cfg, element_bytes=2):
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * hd * element_bytes


# --- GGUF -------------------------------------------------------------------------------

def _gguf_parts():
    # The GGUF writers' shared pieces live beside the fixture scripts.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                                    "fixtures"))
    import gguf_parts
    return gguf_parts


def write_gguf(path, shape, qtype_name="Q4_K", seed=0, layers=None):
    """A GGUF file of the shape as llama.cpp's converter names it (architecture llama, or
    qwen3moe with each layer's experts stacked per projection and the router in F32):
    matrices in `qtype_name` (the output head in Q6_K, as llama.cpp's Q4_K_M keeps it),
    norms in F32, the byte-level vocabulary above; `layers`: the shape's first layers only
    (its layers' real sizes, for a smaller file). Needs numpy, gguf and transformers (for
    the config), not torch. Returns the config."""
    import gguf
    from gguf import GGMLQuantizationType as T
    parts = _gguf_parts()
    cfg = config(shape)
    if layers:
        cfg.num_hidden_layers = layers
    assert cfg.model_type in ("llama", "qwen3_moe"), "GGUF writer: llama and qwen3_moe shapes"
    moe = cfg.model_type == "qwen3_moe"
    arch = "qwen3moe" if moe else "llama"
    qtype = T[qtype_name]
    rng = np.random.default_rng(seed)
    hd = cfg.head_dim
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    rope = cfg.rope_parameters if hasattr(cfg, "rope_parameters") else {"rope_theta": cfg.rope_theta}
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(vocabulary(cfg.vocab_size))
    w.add_token_types([1] * cfg.vocab_size)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)
    if moe:
        w.add_uint32(f"{arch}.expert_count", cfg.num_experts)
        w.add_uint32(f"{arch}.expert_used_count", cfg.num_experts_per_tok)
        w.add_uint32(f"{arch}.expert_feed_forward_length", cfg.moe_intermediate_size)

    def blocks(t, shape):
        # Small positive scales keep a random model's activations finite through its layers.
        raw, _ = parts.random_blocks(rng, t, int(np.prod(shape)) // gguf.GGML_QUANT_SIZES[t][0],
                                     scales=(0.0005, 0.002))
        return raw.reshape(*shape[:-1], -1)
    for name, shape in dense_parameter_shapes(cfg):
        if len(shape) == 1:
            data = (1 + 0.1 * rng.standard_normal(shape[0])).astype(np.float32)
            w.add_tensor(parts.gguf_name(name), data)
            continue
        t = T.Q6_K if name == "lm_head.weight" else qtype
        w.add_tensor(parts.gguf_name(name), blocks(t, shape), raw_dtype=t)
    for layer in range(cfg.num_hidden_layers if moe else 0):
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        w.add_tensor(f"blk.{layer}.ffn_gate_inp.weight",
                     (0.02 * rng.standard_normal((e, h))).astype(np.float32))
        for proj, shape in (("gate", (e, i, h)), ("up", (e, i, h)), ("down", (e, h, i))):
            w.add_tensor(f"blk.{layer}.ffn_{proj}_exps.weight", blocks(qtype, shape), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return cfg
