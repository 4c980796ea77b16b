"""Lab 08's compiled baseline: a compact Qwen3 decoder in torch, gpt-fast style.

One token per call at batch 1, a static KV cache (every tensor keeps its shape from call to call,
the position lives in a device tensor), so `torch.compile(step, mode="reduce-overhead")` captures
the whole step as CUDA graphs. It reads the same weights as lab 08's decoder (the Hugging Face
names, decoder.weight_shapes), so the two can be timed on identical weights in one run. Its
correctness is checked against the float64 reference (decoder.reference_step), which transformers'
Qwen3ForCausalLM checks in turn (tests/test_decoder.py). torch is optional (the `peers` extra):
nothing here is imported by the labs unless they ask for this baseline."""
from __future__ import annotations

from .decoder import LAYER_KEYS, Config, lm_head, lw


class TorchQwen3:
    """step(token, pos) -> logits [vocab] (float32; float64 for a float64 model), one token of greedy decoding.

    token, pos: int64 tensors of shape [1] on the model's device (pos: the token's position, which is
    also the number of tokens already in the cache). The cache holds `capacity` positions; attention
    reads all of them under a mask (a static shape), as gpt-fast does."""

    def __init__(self, cfg: Config, W: dict, device="cuda", dtype=None, capacity: int = 4096):
        import torch
        self.torch, self.cfg, self.capacity = torch, cfg, int(capacity)
        self.dtype = dtype or torch.float16
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        t = lambda a: torch.as_tensor(a).to(device=device, dtype=self.dtype)       # noqa: E731
        self.embed = t(W["model.embed_tokens.weight"])
        self.layers = [{k: t(W[lw(i, k)]) for k in LAYER_KEYS} for i in range(cfg.layers)]
        self.norm, self.head = t(W["model.norm.weight"]), t(lm_head(cfg, W))
        shape = (cfg.layers, cfg.kv_heads, self.capacity, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=self.dtype)
        self.v = torch.zeros_like(self.k)
        half = cfg.head_dim // 2
        inv = cfg.theta ** (-torch.arange(half, dtype=torch.float64, device=device) / half)
        ang = torch.arange(self.capacity, dtype=torch.float64, device=device)[:, None] * inv
        self.cos, self.sin = ang.cos().to(self.dtype), ang.sin().to(self.dtype)   # [capacity, half]
        self.slots = torch.arange(self.capacity, device=device)

    def _rms(self, x, w):
        torch = self.torch
        x32 = x.float() if x.dtype != torch.float64 else x
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.cfg.eps)).to(x.dtype) * w

    def _rope(self, x, pos):
        torch = self.torch
        c, s = self.cos[pos], self.sin[pos]                                  # [1, half]
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def step(self, token, pos):
        torch, cfg = self.torch, self.cfg
        F = torch.nn.functional
        hd, g = cfg.head_dim, cfg.heads // cfg.kv_heads
        h = self.embed[token]                                                # [1, hidden]
        mask = (self.slots <= pos)[None, None, None, :]                      # [1, 1, 1, capacity]
        for i, P in enumerate(self.layers):
            x = self._rms(h, P["input_layernorm"])
            q = (x @ P["self_attn.q_proj"].T).view(cfg.heads, hd)
            k = (x @ P["self_attn.k_proj"].T).view(cfg.kv_heads, hd)
            v = (x @ P["self_attn.v_proj"].T).view(cfg.kv_heads, hd)
            q = self._rope(self._rms(q, P["self_attn.q_norm"]), pos)
            k = self._rope(self._rms(k, P["self_attn.k_norm"]), pos)
            self.k[i].index_copy_(1, pos, k[:, None, :])
            self.v[i].index_copy_(1, pos, v[:, None, :])
            kk = self.k[i].repeat_interleave(g, dim=0)[None]                 # [1, heads, capacity, hd]
            vv = self.v[i].repeat_interleave(g, dim=0)[None]
            o = F.scaled_dot_product_attention(q[None, :, None, :], kk, vv, attn_mask=mask)
            h = h + o.reshape(1, cfg.heads * hd) @ P["self_attn.o_proj"].T
            x = self._rms(h, P["post_attention_layernorm"])
            h = h + (F.silu(x @ P["mlp.gate_proj"].T) * (x @ P["mlp.up_proj"].T)) @ P["mlp.down_proj"].T
        logits = (self._rms(h, self.norm) @ self.head.T)[0]
        return logits if logits.dtype == torch.float64 else logits.float()

    def generate(self, prompt, n_new: int):
        """Greedy tokens after `prompt` (a list of ints), one step per token, starting from an empty
        cache: the prompt is fed one token at a time, as lab 08's decoder does."""
        torch = self.torch
        if not prompt or len(prompt) + n_new > self.capacity:
            raise ValueError(f"need 1 <= len(prompt) and len(prompt) + n_new <= capacity ({self.capacity})")
        self.k.zero_(), self.v.zero_()
        dev = self.embed.device
        out, logits = [], None
        for p, t in enumerate(list(prompt) + [None] * n_new):
            if t is None:
                t = int(logits.argmax())
                out.append(t)
                if len(out) == n_new:
                    break
            logits = self.step(torch.tensor([t], device=dev), torch.tensor([p], device=dev))
        return out


def transformers_model(cfg: Config, W: dict, directory=None):
    """transformers' Qwen3ForCausalLM with our weights, float64, its rotary angles in float64 (it
    computes them in float32); saved to `directory` (save_pretrained: the Hugging Face layout) when
    one is given. None where transformers is not installed."""
    try:
        import torch
        import transformers as tf
    except ImportError:
        return None
    hf_cfg = tf.Qwen3Config(vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.ffn,
                            num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                            num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim, rms_norm_eps=cfg.eps,
                            rope_theta=cfg.theta, tie_word_embeddings=cfg.tied, max_position_embeddings=4096)
    m = tf.Qwen3ForCausalLM(hf_cfg).to(torch.float16).eval()
    m.load_state_dict({k: torch.from_numpy(v) for k, v in W.items()}, strict=not cfg.tied)
    if directory is not None:
        m.save_pretrained(directory)
    m = m.to(torch.float64)
    inv = 1.0 / cfg.theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)

    def rope64(x, position_ids):
        f = position_ids[..., None].to(torch.float64) * inv
        emb = torch.cat([f, f], dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    m.model.rotary_emb.forward = rope64
    return m


def transformers_check(cfg: Config, seeds=(1, 2), length: int = 24, n_new: int = 12):
    """Lab 08's float64 reference against transformers' Qwen3ForCausalLM on the same random
    weights, per seed: the relative error of the teacher-forced logits over `length` positions
    (transformers normalises in float32, so ~1e-7 is agreement) and how many of `n_new` greedy
    tokens agree. Without transformers: a line saying what it would check, and None."""
    import numpy as np
    import pandas as pd
    from . import decoder as D
    rows = []
    for seed in seeds:
        W = D.random_weights(cfg, seed=seed)
        m = transformers_model(cfg, W)
        if m is None:
            print("SKIPPED: transformers is not installed (`KERNELLAB_EXTRAS=peers`); with it this compares the "
                  "float64 reference's logits and greedy tokens with transformers' Qwen3ForCausalLM.")
            return None
        import torch
        tokens = np.random.default_rng(seed).integers(0, cfg.vocab, length)
        with torch.no_grad():
            hf = m(torch.from_numpy(tokens)[None]).logits[0].numpy()
            hf_new = m.generate(torch.from_numpy(tokens[:8])[None], max_new_tokens=n_new, do_sample=False,
                                min_new_tokens=n_new)[0, 8:].tolist()
        new, _ = D.reference_generate(cfg, W, tokens[:8], n_new)
        agree = next((i for i, (a, b) in enumerate(zip(new, hf_new)) if a != b), n_new)
        rows.append({"config": cfg.name, "seed": seed, "positions": length,
                     "logits rel err": D.rel_err(D.reference_sequence(cfg, W, tokens), hf),
                     "greedy tokens equal": f"{agree} of {n_new}"})
    return pd.DataFrame(rows)
