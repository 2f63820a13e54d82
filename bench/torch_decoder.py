"""Plain PyTorch decode of a Llama / Qwen3-shape model with a CUDA graph per step: the
peer that shows what eager PyTorch reaches once launch overhead is gone (no compiler).

The prompt runs eagerly (scaled_dot_product_attention, causal); each decode step is one
captured graph that reads the token and position from device buffers, appends to a
static KV cache, attends over it under a position mask, takes the argmax and advances
the position, so the host only replays the graph and reads the token.
"""
import time

import torch
import torch.nn.functional as F


class TorchDecoder:
    def __init__(self, cfg, state, max_len):
        self.cfg, self.w, self.max_len = cfg, state, max_len
        dev = state["model.embed_tokens.weight"].device
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.layers = cfg.num_hidden_layers
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.qk_norm = cfg.model_type == "qwen3"
        self.head = state.get("lm_head.weight", state["model.embed_tokens.weight"])
        rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": cfg.rope_theta}
        inv = 1.0 / (rope["rope_theta"] ** (torch.arange(0, self.hd, 2, device=dev) / self.hd))
        angles = torch.outer(torch.arange(max_len, device=dev, dtype=torch.float32), inv)
        self.cos = torch.cat([angles.cos()] * 2, -1).to(torch.bfloat16)
        self.sin = torch.cat([angles.sin()] * 2, -1).to(torch.bfloat16)
        shape = (self.layers, 1, self.nkv, max_len, self.hd)
        self.k = torch.zeros(shape, device=dev, dtype=torch.bfloat16)
        self.v = torch.zeros(shape, device=dev, dtype=torch.bfloat16)
        self.positions = torch.arange(max_len, device=dev)
        self.token = torch.zeros(1, device=dev, dtype=torch.long)
        self.pos = torch.zeros(1, device=dev, dtype=torch.long)
        self.graph = None

    def _norm(self, x, name):
        return F.rms_norm(x, (x.shape[-1],), self.w[name], self.cfg.rms_norm_eps)

    def _rope(self, x, pos):  # x [1, heads, seq, hd]
        cos, sin = self.cos[pos], self.sin[pos]
        half = self.hd // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def _forward(self, tokens, pos, decode):
        """tokens [seq], pos [seq] (device); appends to the cache; returns the last logits."""
        w, seq = self.w, tokens.shape[0]
        x = w["model.embed_tokens.weight"][tokens]
        for i in range(self.layers):
            p = f"model.layers.{i}."
            h = self._norm(x, p + "input_layernorm.weight")
            q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(seq, self.nh, self.hd)
            k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(seq, self.nkv, self.hd)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(seq, self.nkv, self.hd)
            if self.qk_norm:
                q = self._norm(q, p + "self_attn.q_norm.weight")
                k = self._norm(k, p + "self_attn.k_norm.weight")
            q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            q, k = self._rope(q, pos), self._rope(k, pos)
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v)
            if decode:
                mask = (self.positions <= pos).view(1, 1, 1, -1)
                o = F.scaled_dot_product_attention(q, self.k[i], self.v[i], attn_mask=mask,
                                                   enable_gqa=True)
            else:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            o = o.squeeze(0).transpose(0, 1).reshape(seq, self.nh * self.hd)
            x = x + F.linear(o, w[p + "self_attn.o_proj.weight"])
            h = self._norm(x, p + "post_attention_layernorm.weight")
            g = F.silu(F.linear(h, w[p + "mlp.gate_proj.weight"])) * F.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(g, w[p + "mlp.down_proj.weight"])
        x = self._norm(x[-1:], "model.norm.weight")
        return F.linear(x, self.head)

    def _step(self):
        nxt = self._forward(self.token, self.pos, True).argmax(-1)
        self.token.copy_(nxt)
        self.pos.add_(1)

    @torch.inference_mode()
    def generate(self, prompt, new_tokens):
        """Greedy tokens after `prompt`; returns (ids, seconds to the first token, seconds
        per decode step)."""
        torch.cuda.synchronize()
        start = time.perf_counter()
        ids = torch.tensor(prompt, device=self.positions.device)
        logits = self._forward(ids, self.positions[:len(prompt)], False)
        self.token.copy_(logits.argmax(-1))
        self.pos.fill_(len(prompt))
        out = [self.token.item()]
        ttft = time.perf_counter() - start
        if self.graph is None:
            # Capture on a side stream after warm-up runs, as torch's docs do; the warm-up
            # steps write the cache past the prompt, which the timed run overwrites.
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            saved = self.token.clone()
            with torch.cuda.stream(s):
                for _ in range(3):
                    self._step()
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step()
            self.token.copy_(saved)
            self.pos.fill_(len(prompt))
        decode_start = time.perf_counter()
        for _ in range(new_tokens - 1):
            self.graph.replay()
            out.append(self.token.item())
        per_step = (time.perf_counter() - decode_start) / max(new_tokens - 1, 1)
        return out, ttft, per_step
