"""Lab 08's compiled baseline: a compact Qwen3 decoder in torch, gpt-fast style.

One token per call at batch 1, a static KV cache (every tensor keeps its shape from call to call,
the position lives in a device tensor), so `torch.compile(step, mode="reduce-overhead")` captures
the whole step as CUDA graphs. It reads the same weights as lab 08's decoder (the Hugging Face
names, decoder.weight_shapes), so the two can be timed on identical weights in one run. Its
correctness is checked against the float64 reference (decoder.reference_step), which transformers'
Qwen3ForCausalLM checks in turn (tests/test_decoder.py). torch is optional (the `peers` extra):
nothing here is imported by the labs unless they ask for this baseline."""
from __future__ import annotations

import numpy as np

from .core.family import Family, Target
from .core.results import print_once
from .decoder import LAYER_KEYS, QWEN3_8B, RECORD_CONTEXTS, Config, Decoder, ctx_case, lm_head, lw, step_name, token_steps


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
    """Our fp16 GPU decoder against transformers' Qwen3ForCausalLM on the GPU, on the very same
    weights (drawn on the device, read by transformers as views), per seed:

    - teacher-forced: a `length`-token sequence fed one token at a time through our KV cache, and
      the whole sequence at once through transformers; the worst normwise relative error of the
      logits over the positions, against the derived bound. Each side is within
      decoder.error_bound(cfg) of the float64 model, so they are within twice that of each other;
      the max |logit difference| at a position is then below bound x ||z|| there (its elementwise form).
    - greedy: `n_new` tokens from the first `prompt` tokens, ours (graph replays) and transformers'
      `generate`. At step t our argmax must equal transformers' while transformers' top-2 margin
      exceeds twice the measured max |difference| of the logits there (then no rounding can swap
      the two tokens). 'decided for' counts those steps, up to the first one that is a coin toss.
    Returns a table, and raises AssertionError where a check fails (the test calls this)."""
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


# ---- the baselines, timed beside our token step (make bench: decoder_torch.csv) ------------------------------------

NAME = "decoder_torch"
TORCH_COMPILED = "torch.compile decoder (graph)"   # TorchQwen3, gpt-fast style
TRANSFORMERS = "transformers (eager)"              # Qwen3ForCausalLM, fp16, as a user runs it
OURS = step_name("float16", "graph")


def baseline_rows(cfg: Config = QWEN3_8B, contexts=(1, 512), layers: int | None = None, reps: int = 20) -> list:
    """Live, in one run on one set of fp16 weights (drawn on the GPU; the torch models read them as
    views, no copy): our graph-replayed token step, the compact torch decoder compiled by
    torch.compile and captured as one CUDA graph (gpt-fast's recipe; its static cache holds
    context + 8 positions), and transformers' Qwen3ForCausalLM, eager, each timed like our step
    (bench.wall). A baseline that is not installed, or fails, prints why; the others are kept."""
    from dataclasses import replace
    import cupy
    from .core.bench import roof_values, wall
    from .decoder import _row, step_rows
    read = roof_values().get("read_gbps", float("nan"))
    cfg = replace(cfg, layers=layers) if layers else cfg
    dec = Decoder(cfg, None, "float16", capacity=max(contexts) + 8)
    rows = step_rows(dec, contexts, reps, modes=("graph",))
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed (KERNELLAB_EXTRAS=peers): no torch baselines")
        return rows
    W = weights_of(dec)
    for n in contexts:
        try:
            m = TorchQwen3(cfg, W, capacity=n + 8)
            replay, _, pos, _ = m.graphed()
            pos.fill_(n - 1)
            rows.append(_row(cfg, TORCH_COMPILED, "float16", n, "graph", wall(replay, reps=reps, flush=False), reps, read))
        except Exception as e:                       # noqa: BLE001  (one baseline never stops the others)
            print(f"{TORCH_COMPILED} at context {n} failed: {type(e).__name__}: {e}")
        m = replay = None
        torch.cuda.empty_cache()
    m = transformers_on_gpu(cfg, W)
    if m is None:
        print_once("SKIPPED: transformers is not installed (KERNELLAB_EXTRAS=peers)")
    for n in contexts if m is not None else ():
        try:
            call, reset = transformers_step(m, n)
            r = max(5, reps // 4)
            rows.append(_row(cfg, TRANSFORMERS, "float16", n, "eager", wall(call, reps=r, flush=False, before=reset), r, read))
        except Exception as e:                       # noqa: BLE001
            print(f"{TRANSFORMERS} at context {n} failed: {type(e).__name__}: {e}")
    del m, dec
    torch.cuda.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()
    for r in rows:
        r["lab"] = NAME
    return rows


def measure_baselines(**kw):
    """baseline_rows live, or the recorded rows (decoder_torch.csv), or a loud skip: the one switch."""
    from .core.results import live_or_recorded
    return live_or_recorded(NAME, "our fp16 token step beside a torch.compile'd torch decoder and transformers' "
                            "Qwen3ForCausalLM, on the same weights, in one run", lambda: baseline_rows(**kw))


def _vs(name, context=512, floor=False):
    """time(baseline) / time(our step) at `context`; floor=True: with our step at the read roof
    (its time x its fraction of the roof): the most any decoder could score against this baseline."""
    from .core.results import pick, ratio_band

    def m(df):
        if not floor:
            return ratio_band(df, OURS, name, ctx_case(context))
        at_roof = pick(df, OURS, "median_us", case=ctx_case(context)) * pick(df, OURS, "frac_read", case=ctx_case(context))
        return pick(df, name, "median_us", case=ctx_case(context)) / at_roof
    return m


BASELINES = Family(
    name=NAME, kernels="decoder", roof="read", record=lambda: measure_baselines(contexts=RECORD_CONTEXTS),
    steps=token_steps,
    targets=(Target("fp16 token step (graph) vs the torch.compile decoder, tokens/s, context 512", _vs(TORCH_COMPILED), 1.0,
                    floor=_vs(TORCH_COMPILED, floor=True)),
             Target("fp16 token step (graph) vs transformers eager, tokens/s, context 512", _vs(TRANSFORMERS), 10.0,
                    floor=_vs(TRANSFORMERS, floor=True))),
    about="lab 08: the Qwen3-8B fp16 token step against torch.compile (gpt-fast style) and transformers, same weights")


# ---- time to first token: our prefill beside transformers' (make bench: decoder_prefill.csv) ------------------------

PREFILL_NAME = "decoder_prefill"
OURS_PREFILL = "our prefill (GEMMs + causal flash)"
TRANSFORMERS_PREFILL = "transformers (sdpa) prefill"
PROMPTS = (16, 512, 4096)


def prefill_rows(cfg: Config = QWEN3_8B, prompts=PROMPTS, reps: int = 10) -> list:
    """Live, in one run on one set of fp16 weights: the time to the first token of a prompt of n tokens,
    our Decoder.prefill (the logits of the last token and its argmax) and transformers' forward with
    a fresh cache and logits_to_keep=1 (what its generate does first), SDPA attention; bench.wall
    (CUDA events from an idle GPU, and the host's µs to issue it). Prefill FLOPs: 2 x parameters x n
    plus the causal attention's."""
    import cupy
    from .attention import causal_flops
    from .core.bench import wall
    dec = Decoder(cfg, None, "float16", capacity=max(prompts) + 8)
    W = weights_of(dec)
    params = sum(int(np.prod(a.shape)) for k, a in W.items() if "embed_tokens" not in k)
    rows = []

    def row(name, n, t):
        fl = 2.0 * params * n + cfg.layers * causal_flops(n, cfg.heads, cfg.head_dim)
        return {"lab": PREFILL_NAME, "case": f"prompt {n}", "name": name, "kind": "e2e", "dtype": "float16",
                "context": n, "layers run": cfg.layers, "median_us": t["median_us"], "p10_us": t["p10_us"],
                "p90_us": t["p90_us"], "reps": reps, "host_us": t["host_us"], "tflops": fl / t["median_us"] / 1e6}
    ids = {n: np.random.default_rng(n).integers(0, cfg.vocab, n) for n in prompts}
    for n in prompts:
        rows.append(row(OURS_PREFILL, n, wall(lambda: dec.prefill(ids[n]), reps=reps, flush=False)))
    try:
        import torch
        import transformers as tf
    except ImportError:
        print("SKIPPED: torch / transformers are not installed (KERNELLAB_EXTRAS=peers): no transformers prefill")
        return rows
    m = transformers_on_gpu(cfg, W)
    for n in prompts:
        tid = torch.from_numpy(ids[n])[None].cuda()

        def call():
            with torch.inference_mode():
                m(tid, past_key_values=tf.DynamicCache(), use_cache=True, logits_to_keep=1)
        try:
            rows.append(row(TRANSFORMERS_PREFILL, n, wall(call, reps=reps, flush=False)))
        except Exception as e:                       # noqa: BLE001
            print(f"{TRANSFORMERS_PREFILL} at prompt {n} failed: {type(e).__name__}: {e}")
    m = dec = None
    torch.cuda.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def measure_prefill(**kw):
    """prefill_rows live, or the recorded rows (decoder_prefill.csv), or a loud skip."""
    from .core.results import live_or_recorded
    return live_or_recorded(PREFILL_NAME, "time to the first token: our prefill beside transformers' (sdpa), on the "
                            "same fp16 weights, in one run", lambda: prefill_rows(**kw))


def say_ttft(pt) -> None:
    """One line per device on screen: our time to the first token against transformers' at each prompt
    length, and the tensor-core rate our prefill reached at the longest."""
    from .core import results

    def said(d):
        parts = [results.compare_text(d, OURS_PREFILL, TRANSFORMERS_PREFILL, f"prompt {n}") for n in PROMPTS]
        rate = results.pick(d, OURS_PREFILL, "tflops", case=f"prompt {PROMPTS[-1]}")
        return ("; ".join(parts) + ". " + results.unless_missing(
            rate, f"At {PROMPTS[-1]} tokens our prefill runs **{rate:.0f} TFLOP/s** (GEMMs and attention)")
            + f" ({results.source(d)}).")
    results.each_device(pt, said)


def _ttft_vs(n):
    def m(df):
        from .core.results import ratio_band
        return ratio_band(df, OURS_PREFILL, TRANSFORMERS_PREFILL, f"prompt {n}")
    return m


PREFILL = Family(
    name=PREFILL_NAME, kernels="attention", record=lambda: measure_prefill(),
    targets=tuple(Target(f"time to first token, transformers (sdpa) / ours, prompt {n}", _ttft_vs(n), 1.0)
                  for n in PROMPTS),
    about="Qwen3-8B fp16 time to the first token: prompts of 16, 512 and 4096 tokens")

FAMILIES = [BASELINES, PREFILL]
