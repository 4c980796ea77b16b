"""Lab 08's float64 reference in NumPy: one layer, one token's step with a KV cache, greedy generation,
and the whole sequence at once (no cache) to check the cache against; with fp16_storage=True it
rounds every tensor the GPU stores in fp16; error_bound(cfg): the bound that rounding gives."""
from __future__ import annotations

import math

import numpy as np

from .config import Config, U_FP16
from .weights import layer_shapes, lm_head, lw


def _r16(a):
    """Round to fp16 and back: what storing a tensor in fp16 does to it."""
    with np.errstate(over="ignore"):
        return np.asarray(a).astype(np.float16).astype(np.float64)


def ref_rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis, float64."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * np.asarray(w, np.float64)


def rope_angles(pos, head_dim, theta):
    """cos, sin of pos * theta^(-i / (head_dim/2)), i < head_dim / 2 (Qwen3's rotate-half RoPE)."""
    inv = theta ** (-np.arange(head_dim // 2, dtype=np.float64) / (head_dim // 2))
    ang = np.multiply.outer(np.asarray(pos, np.float64), inv)
    return np.cos(ang), np.sin(ang)


def ref_rope(x, pos, theta):
    """Rotate-half RoPE of x [..., head_dim] at position(s) pos (a scalar, or one per row of a
    [T, heads, head_dim] array), float64."""
    x = np.asarray(x, np.float64)
    hd = x.shape[-1]
    c, s = rope_angles(pos, hd, theta)
    if np.ndim(pos):                       # [T, half] -> [T, 1, half]
        c, s = c[:, None, :], s[:, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def ref_silu(g):
    with np.errstate(over="ignore", invalid="ignore"):
        g = np.asarray(g, np.float64)
        return g / (1.0 + np.exp(-g))


class Cache:
    """The float64 reference's KV cache: k, v [layers, kv_heads, capacity, head_dim] and the next token's position."""

    def __init__(self, cfg: Config, capacity: int):
        self.k = np.zeros((cfg.layers, cfg.kv_heads, capacity, cfg.head_dim))
        self.v = np.zeros_like(self.k)
        self.pos = 0


def _mv(W, x):
    """W @ x with W fp16 (or any dtype) and x float64, in float64."""
    return np.asarray(W, np.float64) @ x


def reference_layer(cfg: Config, W: dict, i: int, h, cache: Cache, fp16_storage=False):
    """Layer i of one token's step in float64: h [hidden] -> h; appends k, v at cache.pos.
    fp16_storage rounds every tensor the GPU stores in fp16 (the emulation behind error_bound)."""
    r = _r16 if fp16_storage else (lambda a: a)
    g = cfg.heads // cfg.kv_heads
    pos = cache.pos
    x = r(ref_rmsnorm(h, W[lw(i, "input_layernorm")], cfg.eps))
    q, k, v = (r(_mv(W[lw(i, f"self_attn.{n}_proj")], x)) for n in "qkv")
    if cfg.qkv_bias:                 # Qwen2.5: the GEMV's fp16 output, then + bias (stored again)
        q, k, v = (r(a + np.asarray(W[lw(i, f"self_attn.{n}_proj.bias")], np.float64)) for a, n in zip((q, k, v), "qkv"))
    q, k, v = q.reshape(cfg.heads, cfg.head_dim), k.reshape(cfg.kv_heads, cfg.head_dim), v.reshape(cfg.kv_heads, cfg.head_dim)
    if cfg.qk_norm:
        q = r(ref_rmsnorm(q, W[lw(i, "self_attn.q_norm")], cfg.eps))
        k = r(ref_rmsnorm(k, W[lw(i, "self_attn.k_norm")], cfg.eps))
    q, k = r(ref_rope(q, pos, cfg.theta)), r(ref_rope(k, pos, cfg.theta))
    cache.k[i, :, pos], cache.v[i, :, pos] = k, v
    K, V = cache.k[i, :, :pos + 1], cache.v[i, :, :pos + 1]          # [kv, L, hd]
    s = np.einsum("hgd,hld->hgl", q.reshape(cfg.kv_heads, g, cfg.head_dim), K) / math.sqrt(cfg.head_dim)
    p = np.exp(s - s.max(-1, keepdims=True))
    o = r(np.einsum("hgl,hld->hgd", p / p.sum(-1, keepdims=True), V).reshape(-1))
    h = r(h + r(_mv(W[lw(i, "self_attn.o_proj")], o)))
    x = r(ref_rmsnorm(h, W[lw(i, "post_attention_layernorm")], cfg.eps))
    gate, up = r(_mv(W[lw(i, "mlp.gate_proj")], x)), r(_mv(W[lw(i, "mlp.up_proj")], x))
    m = r(ref_silu(gate) * up)
    return r(h + r(_mv(W[lw(i, "mlp.down_proj")], m)))


def reference_step(cfg: Config, W: dict, token: int, cache: Cache, fp16_storage=False):
    """One token's step in float64: the logits [vocab] after `token` at position cache.pos (then
    cache.pos moves on by one)."""
    if not 0 <= int(token) < cfg.vocab:
        raise ValueError(f"token {token}: expected 0 <= token < vocab ({cfg.vocab})")
    if cache.pos >= cache.k.shape[2]:
        raise ValueError(f"the cache is full ({cache.k.shape[2]} positions)")
    r = _r16 if fp16_storage else (lambda a: a)
    h = np.asarray(W["model.embed_tokens.weight"][int(token)], np.float64)
    for i in range(cfg.layers):
        h = reference_layer(cfg, W, i, h, cache, fp16_storage)
    x = r(ref_rmsnorm(h, W["model.norm.weight"], cfg.eps))
    cache.pos += 1
    return _mv(lm_head(cfg, W), x)


def reference_generate(cfg: Config, W: dict, prompt, n_new: int, fp16_storage=False):
    """Greedy generation in float64: the prompt is fed one token at a time (teacher forcing), then
    each argmax is fed back. Returns (the n_new new tokens, the logits [len(prompt) + n_new - 1,
    vocab] of every step; row t predicts the token at position t + 1)."""
    prompt = [int(t) for t in prompt]
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    cache = Cache(cfg, len(prompt) + n_new)
    logits = [reference_step(cfg, W, t, cache, fp16_storage) for t in prompt]
    new = []
    while len(new) < n_new:
        new.append(int(np.argmax(logits[-1])))
        if len(new) < n_new:
            logits.append(reference_step(cfg, W, new[-1], cache, fp16_storage))
    return new, np.array(logits)


def reference_sequence(cfg: Config, W: dict, tokens):
    """The whole sequence at once, no cache: causal attention over [T] tokens as a matrix (the way
    a prefill, or transformers' forward, computes it). Returns the logits [T, vocab], float64;
    row t must equal reference_step's logits at position t."""
    tokens = np.asarray(tokens, np.int64)
    T, hd, g = len(tokens), cfg.head_dim, cfg.heads // cfg.kv_heads
    pos = np.arange(T)
    h = np.asarray(W["model.embed_tokens.weight"], np.float64)[tokens]                # [T, H]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(cfg.layers):
        P = {k: np.asarray(W[lw(i, k)], np.float64) for k in layer_shapes(cfg)}
        x = ref_rmsnorm(h, P["input_layernorm"], cfg.eps)
        q, k, v = (x @ P[f"self_attn.{n}_proj"].T + (P[f"self_attn.{n}_proj.bias"] if cfg.qkv_bias else 0.0)
                   for n in "qkv")
        q, k, v = q.reshape(T, cfg.heads, hd), k.reshape(T, cfg.kv_heads, hd), v.reshape(T, cfg.kv_heads, hd)
        if cfg.qk_norm:
            q, k = ref_rmsnorm(q, P["self_attn.q_norm"], cfg.eps), ref_rmsnorm(k, P["self_attn.k_norm"], cfg.eps)
        q, k = ref_rope(q, pos, cfg.theta), ref_rope(k, pos, cfg.theta)
        k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)                           # GQA: [T, heads, hd]
        s = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("hts,shd->thd", p / p.sum(-1, keepdims=True), v).reshape(T, -1)
        h = h + o @ P["self_attn.o_proj"].T
        x = ref_rmsnorm(h, P["post_attention_layernorm"], cfg.eps)
        h = h + (ref_silu(x @ P["mlp.gate_proj"].T) * (x @ P["mlp.up_proj"].T)) @ P["mlp.down_proj"].T
    x = ref_rmsnorm(h, W["model.norm.weight"], cfg.eps)
    return x @ np.asarray(lm_head(cfg, W), np.float64).T


STAGES_PER_LAYER = 11     # fp16 stores on a layer's path: x, qkv, q/k norm, rope, o, o-proj, h, x, gate/up, silu*up, down + h


def error_bound(cfg: Config) -> float:
    """First-order bound on the normwise relative error of the logits when every stored tensor is
    rounded to fp16 (fp32 accumulation inside each kernel): each store adds a relative error of
    at most u = 2^-11, and with RMSNorm'd inputs and unit-scale weights each stage carries its
    error to the logits with a gain of about 1, so ||z - z64|| / ||z64|| <= stages x u, stages =
    STAGES_PER_LAYER x layers + 2 (the final norm, the embedding row). Lab 06's argument, per layer.
    The CPU tests check the fp16-storage emulation stays inside it; the GPU test holds the kernels
    to it."""
    return (STAGES_PER_LAYER * cfg.layers + 2) * U_FP16


def rel_err(got, want) -> float:
    """||got - want|| / ||want||, float64."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(g - w) / np.linalg.norm(w))


def top2_margin(logits) -> np.ndarray:
    """Per row: the largest logit minus the second largest (a greedy step whose margin is below
    the error in the logits may pick either token)."""
    z = np.sort(np.asarray(logits, np.float64), axis=-1)
    return z[..., -1] - z[..., -2]

