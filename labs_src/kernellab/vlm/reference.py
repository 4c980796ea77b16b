"""Lab 09's float64 reference of Qwen3-VL, in NumPy, from the course's own references:

    pixel_values -> lab 06's tower, image by image (vit_block.reference_tower in Qwen3-VL's drawing: the main
    merger's features and one DeepStack merger's per DeepStack block) -> the image features replace the image
    tokens' embedding rows (lab 05's ref_replace_image_tokens) -> the text decoder (lab 08's Qwen3 layer, with
    each token's own M-RoPE angles instead of positions 0 .. T-1; after layer i < number of DeepStack features
    the image tokens' hidden states get DeepStack feature i added, as Qwen3VLTextModel._deepstack_process)
    -> final RMSNorm -> logits.

reference_generate: greedy decoding after the prompt, each new token at position slot + rope delta (the
whole sequence recomputed per token: no cache to get wrong)."""
from __future__ import annotations

import math

import numpy as np

from .. import vision as V
from .. import vit_block as VB
from ..decoder.config import Config
from ..decoder.reference import ref_rmsnorm, ref_silu
from ..decoder.weights import layer_shapes, lm_head, lw
from .positions import decode_positions, get_rope_index, mrope_table
from .preprocess import split_patches


def ref_mrope(x, cos, sin):
    """Rotate-half RoPE of x [T, heads, d] with per-token tables cos, sin [T, d / 2], float64."""
    x = np.asarray(x, np.float64)
    c, s = np.asarray(cos, np.float64)[:, None, :], np.asarray(sin, np.float64)[:, None, :]
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def reference_layer(cfg: Config, W: dict, i: int, h, cos, sin):
    """Decoder layer i over the whole prompt at once, float64: h [T, hidden] -> h; causal grouped attention,
    token t rotated by its own row of cos, sin [T, head_dim / 2]."""
    T, hd, g = h.shape[0], cfg.head_dim, cfg.heads // cfg.kv_heads
    P = {k: np.asarray(W[lw(i, k)], np.float64) for k in layer_shapes(cfg)}
    x = ref_rmsnorm(h, P["input_layernorm"], cfg.eps)
    q, k, v = (x @ P[f"self_attn.{n}_proj"].T + (P[f"self_attn.{n}_proj.bias"] if cfg.qkv_bias else 0.0) for n in "qkv")
    q, k, v = q.reshape(T, cfg.heads, hd), k.reshape(T, cfg.kv_heads, hd), v.reshape(T, cfg.kv_heads, hd)
    if cfg.qk_norm:
        q, k = ref_rmsnorm(q, P["self_attn.q_norm"], cfg.eps), ref_rmsnorm(k, P["self_attn.k_norm"], cfg.eps)
    q, k = ref_mrope(q, cos, sin), ref_mrope(k, cos, sin)
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + np.triu(np.full((T, T), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    o = np.einsum("hts,shd->thd", p / p.sum(-1, keepdims=True), v).reshape(T, -1)
    h = h + o @ P["self_attn.o_proj"].T
    x = ref_rmsnorm(h, P["post_attention_layernorm"], cfg.eps)
    return h + (ref_silu(x @ P["mlp.gate_proj"].T) * (x @ P["mlp.up_proj"].T)) @ P["mlp.down_proj"].T


def reference_text(cfg: Config, W: dict, embeds, cos, sin, deepstack=None, hidden=False):
    """The language model on input embeddings, float64: embeds [T, hidden]; cos, sin [T, head_dim / 2] (each
    token's M-RoPE angles); deepstack (rows, [features [len(rows), hidden]]): after layer i < len(features),
    h[rows] += features[i]. Returns the logits [T, vocab] (hidden=True: the final-normed states instead)."""
    h = np.asarray(embeds, np.float64).copy()
    T = h.shape[0]
    for a in (cos, sin):
        if np.shape(a) != (T, cfg.head_dim // 2):
            raise ValueError(f"cos/sin: expected [{T}, {cfg.head_dim // 2}], got {np.shape(a)}")
    rows, feats = deepstack if deepstack is not None else (np.zeros(0, np.int64), [])
    rows = np.asarray(rows, np.int64)
    if len(feats) > cfg.layers:
        raise ValueError(f"deepstack: {len(feats)} feature sets for {cfg.layers} layers")
    for j, f in enumerate(feats):
        if np.shape(f) != (len(rows), cfg.hidden):
            raise ValueError(f"deepstack features {j}: expected [{len(rows)}, {cfg.hidden}], got {np.shape(f)}")
    for i in range(cfg.layers):
        h = reference_layer(cfg, W, i, h, cos, sin)
        if i < len(feats):
            h[rows] += np.asarray(feats[i], np.float64)
    x = ref_rmsnorm(h, W["model.norm.weight"], cfg.eps)
    return x if hidden else x @ np.asarray(lm_head(cfg, W), np.float64).T


def reference_vision(pixel_values, image_grid_thw, vision_W, deepstack=VB.DEEPSTACK):
    """Lab 06's float64 tower (Qwen3-VL's drawing), image by image (each image attends only to itself and has
    its own position grid and rotary): (features [sum tokens, 4096], [DeepStack features, one per block in
    deepstack, same shape]), images concatenated in order."""
    main, deep = [], []
    for p, (t, gh, gw) in zip(split_patches(pixel_values, image_grid_thw), np.asarray(image_grid_thw).reshape(-1, 3)):
        if t != 1:
            raise ValueError(f"grid t = {t}: one temporal patch per image")
        m, d = VB.reference_tower(np.asarray(p), vision_W, int(gh), int(gw), model="qwen3-vl", deepstack=tuple(deepstack))
        main.append(m)
        deep.append(d)
    feats = np.concatenate(main) if main else np.zeros((0, VB.MERGE_OUT))
    return feats, [np.concatenate([d[j] for d in deep]) for j in range(len(deep[0]))] if deep else []


def image_rows(input_ids, image_token_id: int) -> np.ndarray:
    """The prompt rows of the image tokens, in order (where the features go)."""
    return np.flatnonzero(np.asarray(input_ids).reshape(-1) == image_token_id)


def scatter_image_features(embeds, input_ids, features, image_token_id: int):
    """A float64 copy of embeds [T, hidden] with the image tokens' rows replaced by features, in order
    (lab 05's ref_replace_image_tokens; transformers' masked_scatter)."""
    rows = image_rows(input_ids, image_token_id)
    if len(rows) != len(features):
        raise ValueError(f"{len(rows)} image tokens in the prompt, {len(features)} image features")
    return V.ref_replace_image_tokens(embeds, features, rows)


def reference_vlm(vcfg, vision_W, text_W, input_ids, pixel_values=None, image_grid_thw=None, vision_out=None):
    """The whole model on one prompt, float64: a dict with logits [T, vocab], positions [3, T], delta (the
    rope delta), embeds (after the scatter), features and deep (the tower's outputs), rows (image tokens'),
    cos, sin (float64 [T, head_dim / 2]). vision_out: (features, deep) computed before (reuse across prompts)."""
    cfg = vcfg.text
    ids = np.asarray(input_ids, np.int64).reshape(-1)
    if ids.min() < 0 or ids.max() >= cfg.vocab:
        raise ValueError(f"token ids must be in [0, {cfg.vocab}), got {ids.min()} .. {ids.max()}")
    embeds = np.asarray(text_W["model.embed_tokens.weight"], np.float64)[ids]
    rows = image_rows(ids, vcfg.image_token_id)
    feats, deep = np.zeros((0, cfg.hidden)), []
    if pixel_values is not None or vision_out is not None:
        feats, deep = vision_out if vision_out is not None else reference_vision(pixel_values, image_grid_thw, vision_W,
                                                                                 vcfg.deepstack)
        embeds = scatter_image_features(embeds, ids, feats, vcfg.image_token_id)
    elif len(rows):
        raise ValueError(f"{len(rows)} image tokens but no pixel_values")
    pos, delta = get_rope_index(ids, image_grid_thw, vcfg.image_token_id, vcfg.merge)
    cos, sin = mrope_table(pos, cfg.head_dim, cfg.theta, vcfg.mrope_section, dtype=np.float64)
    logits = reference_text(cfg, text_W, embeds, cos, sin, (rows, deep) if len(rows) else None)
    return {"logits": logits, "positions": pos, "delta": delta, "embeds": embeds, "features": feats, "deep": deep,
            "rows": rows, "cos": cos, "sin": sin}


def reference_generate(vcfg, vision_W, text_W, input_ids, pixel_values=None, image_grid_thw=None, n_new: int = 8,
                       vision_out=None):
    """Greedy decoding in float64: (the n_new new tokens, the logits [n_new, vocab] that chose them). The
    prompt's positions are M-RoPE's; new token k sits in slot T + k at position T + k + delta on all three
    axes (transformers' rope_deltas); its embedding is its row (no image)."""
    cfg = vcfg.text
    out = reference_vlm(vcfg, vision_W, text_W, input_ids, pixel_values, image_grid_thw, vision_out)
    ids = list(np.asarray(input_ids, np.int64).reshape(-1))
    T, delta = len(ids), out["delta"]
    E = np.asarray(text_W["model.embed_tokens.weight"], np.float64)
    embeds, pos, deep = out["embeds"], out["positions"], (out["rows"], out["deep"]) if len(out["rows"]) else None
    new, logits = [], [out["logits"][-1]]
    while True:
        new.append(int(np.argmax(logits[-1])))
        if len(new) == n_new:
            break
        embeds = np.concatenate([embeds, E[new[-1]][None]])
        pos = np.concatenate([pos, decode_positions(T + len(new) - 1, 1, delta)], axis=1)
        cos, sin = mrope_table(pos, cfg.head_dim, cfg.theta, vcfg.mrope_section, dtype=np.float64)
        logits.append(reference_text(cfg, text_W, embeds, cos, sin, deep)[-1])
    return new, np.array(logits)


def fp16_bound(vcfg) -> float:
    """How far an fp16 pipeline's last logits may sit from float64's (relative), first order: the text model's
    fp16 storage bound (lab 08's error_bound) plus the tower's per stage (lab 06's) for each block and merger,
    twice (two fp16 implementations against the float64 one)."""
    from .. import decoder as D
    from .. import vit_block as VB
    return 2 * (D.error_bound(vcfg.text) + VB.error_bound() * (vcfg.vision_depth + 1 + len(vcfg.deepstack)))
