"""Lab 08's peers, the models: a compact Qwen3 decoder in torch, gpt-fast style (TorchQwen3), and
transformers' Qwen3ForCausalLM / Qwen2ForCausalLM on our weights (on the GPU as views, or in float64),
with the checks of our decoder against them. torch_decoder.py times them beside ours (the records).
torch is optional (the `peers` extra): nothing here is imported by the labs unless they ask for it."""
from __future__ import annotations

from .core.results import print_once
from .decoder import LAYER_KEYS, Config, Decoder, lm_head, lw

class TorchQwen3:
    """step(token, pos) -> logits [vocab] (float32; float64 for a float64 model), one token of greedy decoding.

    token, pos: int64 tensors of shape [1] on the model's device (pos: the token's position, which is
    also the number of tokens already in the cache). The cache holds `capacity` positions; attention
    reads all of them under a mask (a static shape), as gpt-fast does. It reads lab 08's weights by their Hugging
    Face names, and is checked against the float64 reference (tests/test_decoder.py)."""

    def __init__(self, cfg: Config, W: dict, device="cuda", dtype=None, capacity: int = 4096):
        import torch
        self.torch, self.cfg, self.capacity = torch, cfg, int(capacity)
        self.dtype = dtype or torch.float16
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if not cfg.qk_norm or cfg.qkv_bias:
            raise ValueError(f"{cfg.name}: the torch.compile baseline is Qwen3's layer (q/k norm, no biases)")
        # a torch tensor or a CuPy array on the device is used in place (no copy: lab 08 times this
        # decoder on the very weights of its own); a NumPy array is copied to the device
        t = lambda a: torch.as_tensor(a, device=device).to(dtype=self.dtype)      # noqa: E731
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

    def _layer(self, P, kc, vc, h, pos, mask):
        """One layer on the residual h [1, hidden]; kc, vc: this layer's cache [kv_heads, capacity, hd]."""
        torch, cfg = self.torch, self.cfg
        F = torch.nn.functional
        hd = cfg.head_dim
        x = self._rms(h, P["input_layernorm"])
        q = (x @ P["self_attn.q_proj"].T).view(cfg.heads, hd)
        k = (x @ P["self_attn.k_proj"].T).view(cfg.kv_heads, hd)
        v = (x @ P["self_attn.v_proj"].T).view(cfg.kv_heads, hd)
        q = self._rope(self._rms(q, P["self_attn.q_norm"]), pos)
        k = self._rope(self._rms(k, P["self_attn.k_norm"]), pos)
        kc.index_copy_(1, pos, k[:, None, :])
        vc.index_copy_(1, pos, v[:, None, :])
        # grouped-query attention without copying K and V per query head (SDPA's enable_gqa)
        o = F.scaled_dot_product_attention(q[None, :, None, :], kc[None], vc[None], attn_mask=mask, enable_gqa=True)
        h = h + o.reshape(1, cfg.heads * hd) @ P["self_attn.o_proj"].T
        x = self._rms(h, P["post_attention_layernorm"])
        return h + (F.silu(x @ P["mlp.gate_proj"].T) * (x @ P["mlp.up_proj"].T)) @ P["mlp.down_proj"].T

    def step(self, token, pos, layer=None):
        """Logits of one token; layer: the per-layer function (self._layer, or a compiled copy of it)."""
        torch = self.torch
        layer = layer or self._layer
        h = self.embed[token]                                                # [1, hidden]
        mask = (self.slots <= pos)[None, None, None, :]                      # [1, 1, 1, capacity]
        for i, P in enumerate(self.layers):
            h = layer(P, self.k[i], self.v[i], h, pos, mask)
        logits = (self._rms(h, self.norm) @ self.head.T)[0]
        return logits if logits.dtype == torch.float64 else logits.float()

    def graphed(self, compile: bool = True):
        """gpt-fast's recipe on a GPU: the layer compiled by torch.compile (one compilation serves
        every layer: same shapes), the whole token step captured as one CUDA graph. Returns
        (replay, token, pos, logits): set token and pos (device tensors, shape [1]) in place, call
        replay(); logits is the graph's output buffer."""
        torch = self.torch
        layer = torch.compile(self._layer, dynamic=False) if compile else self._layer
        dev = self.embed.device
        token, pos = torch.zeros(1, dtype=torch.long, device=dev), torch.zeros(1, dtype=torch.long, device=dev)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                     # compile and warm up outside the capture
            for _ in range(3):
                self.step(token, pos, layer)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            logits = self.step(token, pos, layer)
        return g.replay, token, pos, logits

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


def weights_of(dec) -> dict:
    """The Hugging Face-named weights of an fp16 lab-08 `Decoder`, as views of its device arrays (no
    copy): the baselines run on the very bytes our decoder reads."""
    if dec.path != "float16" or dec.emulate:
        raise ValueError("weights_of: an fp16 decoder on the GPU")
    cfg, F = dec.cfg, dec.cfg.ffn
    qd, kd = cfg.q_dim, cfg.kv_dim
    W = {"model.embed_tokens.weight": dec.embed_w, "model.norm.weight": dec.norm}
    if not cfg.tied:
        W["lm_head.weight"] = dec.lm
    for i, L in enumerate(dec.layers):
        (qkv,), (gu,) = L["qkv"], L["gu"]
        W.update({lw(i, k): a for k, a in (
            ("input_layernorm", L["ln1"]), ("post_attention_layernorm", L["ln2"]),
            ("self_attn.q_proj", qkv[:qd]), ("self_attn.k_proj", qkv[qd:qd + kd]),
            ("self_attn.v_proj", qkv[qd + kd:]), ("self_attn.o_proj", L["o"][0]), ("mlp.gate_proj", gu[:F]),
            ("mlp.up_proj", gu[F:]), ("mlp.down_proj", L["down"][0]))})
        if cfg.qk_norm:
            W[lw(i, "self_attn.q_norm")], W[lw(i, "self_attn.k_norm")] = L["qn"], L["kn"]
        if cfg.qkv_bias:
            b = L["bias"]
            W.update({lw(i, "self_attn.q_proj.bias"): b[:qd], lw(i, "self_attn.k_proj.bias"): b[qd:qd + kd],
                      lw(i, "self_attn.v_proj.bias"): b[qd + kd:]})
    return W


def _hf_class(cfg: Config):
    """transformers' class for a config: Qwen3ForCausalLM, or Qwen2ForCausalLM (Qwen2.5)."""
    import transformers as tf
    return tf.Qwen3ForCausalLM if cfg.qk_norm else tf.Qwen2ForCausalLM


def _hf_config(cfg: Config):
    import transformers as tf
    kw = dict(vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.ffn,
              num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
              rms_norm_eps=cfg.eps, rope_theta=cfg.theta, tie_word_embeddings=cfg.tied, max_position_embeddings=4096)
    if cfg.qk_norm:
        return tf.Qwen3Config(head_dim=cfg.head_dim, attention_bias=cfg.qkv_bias, **kw)
    if cfg.head_dim * cfg.heads != cfg.hidden or not cfg.qkv_bias:
        raise ValueError(f"{cfg.name}: transformers' Qwen2 has head dim = hidden / heads and q/k/v biases")
    return tf.Qwen2Config(**kw)


def transformers_on_gpu(cfg: Config, W: dict, device="cuda"):
    """transformers' Qwen3ForCausalLM in fp16 on the GPU, its parameters the arrays of W (no copy:
    built on the meta device, then assigned), eager, as a user would run it. None without it."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        return None
    with torch.device("meta"):
        m = _hf_class(cfg)(_hf_config(cfg))
    sd = {k: torch.as_tensor(v, device=device) for k, v in W.items()}
    if cfg.tied:                             # assign=True would leave a tied head on the meta device: share the table
        sd.setdefault("lm_head.weight", sd["model.embed_tokens.weight"])
    m.load_state_dict(sd, strict=True, assign=True)
    with torch.device(device):               # the rotary angles are buffers, not weights: build them there
        m.model.rotary_emb = type(m.model.rotary_emb)(config=m.config)
    return m.eval()


def transformers_step(m, context: int):
    """(call, reset) for timing transformers' decode of one token at `context`: its KV cache is
    filled by one prefill of context - 1 tokens; call() decodes one more; reset() crops the cache
    back, so every timed call sees the same context."""
    import torch
    import transformers as tf
    ids = torch.randint(0, m.config.vocab_size, (1, context), device=m.device)
    cache = tf.DynamicCache()
    with torch.inference_mode():
        if context > 1:
            m(ids[:, :context - 1], past_key_values=cache, use_cache=True, logits_to_keep=1)

    def call():
        with torch.inference_mode():
            return m(ids[:, context - 1:], past_key_values=cache, use_cache=True).logits
    def reset():                             # crop(-n): drop the n newest tokens (transformers 4 and 5 alike)
        n = cache.get_seq_length() - (context - 1)
        if n > 0:
            cache.crop(-n)
    return call, reset


def transformers_model(cfg: Config, W: dict, directory=None):
    """transformers' Qwen3ForCausalLM with our weights, float64, its rotary angles in float64 (it
    computes them in float32); saved to `directory` (save_pretrained: the Hugging Face layout) when
    one is given. None where transformers is not installed."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        return None
    m = _hf_class(cfg)(_hf_config(cfg)).to(torch.float16).eval()
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


WIDE = Config("Qwen3-8B widths, 2 layers", hidden=4096, layers=2, heads=32, kv_heads=8, head_dim=128, ffn=12288,
              vocab=151936)


def gpu_check(cfg: Config = WIDE, seeds=(1, 2), length: int = 64, prompt: int = 8, n_new: int = 32):
    """Our fp16 GPU decoder against transformers' Qwen3ForCausalLM on the GPU, on the same weights (views), per seed:
    - teacher-forced: `length` tokens one at a time through our KV cache, all at once through transformers;
      the worst normwise relative error of the logits against twice decoder.error_bound(cfg) (each side is
      within it of the float64 model), and max |logit difference| below that bound x ||z||;
    - greedy: `n_new` tokens after `prompt`, our graph replays against `generate`: our argmax must equal
      theirs while their top-2 margin exceeds twice the measured max |difference| ('decided for' counts
      those steps, up to the first coin toss).
    Returns a table; raises AssertionError where a check fails."""
    import numpy as np
    import pandas as pd
    import torch
    from . import decoder as D
    bound = 2 * D.error_bound(cfg)
    rows = []
    for seed in seeds:
        dec = Decoder(cfg, None, "float16", capacity=length + n_new, seed=seed)
        m = transformers_on_gpu(cfg, weights_of(dec))
        if m is None:
            print_once("SKIPPED: transformers is not installed (KERNELLAB_EXTRAS=peers)")
            return None
        tokens = [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab, length)]
        ours = []
        dec.reset()
        for t in tokens:
            dec.feed(t)
            ours.append(dec.logits.get())
        ours = np.array(ours, np.float64)
        ids = torch.tensor([tokens], device="cuda")
        with torch.inference_mode():
            hf = m(ids).logits[0].double().cpu().numpy()
            hf_new = m.generate(ids[:, :prompt], max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                                attention_mask=torch.ones_like(ids[:, :prompt]))[0, prompt:].tolist()
            seq = torch.tensor([tokens[:prompt] + hf_new[:-1]], device="cuda")
            hz = m(seq).logits[0, prompt - 1:].double().cpu().numpy()      # transformers' logits on its own path
        err = np.array([D.rel_err(a, b) for a, b in zip(ours, hf)])
        new = dec.generate(tokens[:prompt], n_new)
        dec.reset()
        oz = []
        for t in tokens[:prompt] + hf_new[:-1]:                            # ours on transformers' path
            dec.feed(t)
            oz.append(dec.logits.get())
        diff = np.abs(np.array(oz, np.float64)[prompt - 1:] - hz).max(axis=1)
        margin = D.top2_margin(hz)
        decided = next((t for t in range(n_new) if margin[t] <= 2 * diff[t]), n_new)
        same = next((t for t, (a, b) in enumerate(zip(new, hf_new)) if a != b), n_new)
        absd = np.abs(ours - hf).max(axis=1)
        rows.append({"config": cfg.name, "seed": seed, "positions": length,
                     "worst logits rel err": err.max(), "bound (2 x fp16 storage)": bound,
                     "max |logit diff|": absd.max(),
                     "max |diff| / (bound x ||z||)": (absd / (bound * np.linalg.norm(hf, axis=1))).max(),
                     "greedy tokens equal": f"{same} of {n_new}", "decided steps": decided})
        del m, dec
        torch.cuda.empty_cache()
        assert err.max() < bound, (cfg.name, seed, err.max(), bound)
        assert same >= decided, (cfg.name, seed, new, hf_new, decided)
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()
    return pd.DataFrame(rows)
