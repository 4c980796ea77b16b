"""Lab 08's prefill: the whole prompt in one pass, so the time to the first token is a few GEMMs and one
attention per layer rather than N token steps.

    embedding rows (a gather) -> per layer: RMSNorm (lab 02) -> Q, K, V GEMMs (cuBLAS, fp16 in, fp32
    accumulation: the prefill route of lab 04) [+ q/k/v biases] [-> q/k head norm (lab 08)] -> RoPE of
    every token and its KV-cache write (lab 07 step 07) -> causal grouped flash attention from the cache
    (lab 07 step 16) -> o GEMM -> add (lab 03) -> RMSNorm -> gate, up GEMMs -> SiLU x up (lab 08) ->
    down GEMM -> add; then the last token's final norm -> logits GEMV -> argmax, exactly as its token
    step would, so decoding goes on from there (graph replays).

The GEMMs read the fp16 path's weights; the W8A16 and int4 paths keep only packed weights for the GEMVs,
so their prompt goes through the token step (Decoder.feed), and `prefill` says so instead of
dequantising in secret."""
from __future__ import annotations

import numpy as np


def _buffers(dec, n: int) -> dict:
    """The prefill's [n, ...] workspaces, kept for the next prompt of the same length."""
    import cupy
    ws = getattr(dec, "_prefill_ws", None)
    if ws is None or ws["n"] != n:
        cfg = dec.cfg
        e = lambda *s: cupy.empty(s, cupy.float16)   # noqa: E731
        ws = dec._prefill_ws = {"n": n, "h": e(n, cfg.hidden), "h2": e(n, cfg.hidden), "x": e(n, cfg.hidden),
                                "a": e(n, cfg.hidden), "q": e(n, cfg.q_dim), "k": e(n, cfg.kv_dim),
                                "v": e(n, cfg.kv_dim), "qn": e(n, cfg.q_dim), "kn": e(n, cfg.kv_dim),
                                "o": e(n, cfg.q_dim), "g": e(n, cfg.ffn), "u": e(n, cfg.ffn), "m": e(n, cfg.ffn)}
    return ws


def why_not(dec) -> str | None:
    """Why `dec` cannot prefill (None: it can)."""
    if dec.emulate:
        return "an emulated decoder has no prefill (it checks the token step's wiring): feed the prompt"
    if dec.path != "float16":
        return (f"prefill multiplies by the fp16 weights (cuBLAS GEMMs); the {dec.path} path keeps only its packed "
                "GEMV weights, so its prompt runs through the token step (Decoder.feed), one token at a time")
    from ..core.device import info
    if int(info()["arch"].split("_")[1]) < 80:
        return f"lab 07's causal prefill kernel needs sm_80 (mma.sync); this GPU is {info()['arch']}: feed the prompt"
    return None


def prefill(dec, tokens, embeds=None, rope=None, deepstack=None) -> None:
    """Run the prompt `tokens` (positions 0 .. N-1) through `dec` in one pass: the KV cache holds every
    prompt token, dec.logits the last one's logits, dec.token its argmax, and the device-side position
    and length are where the token step after the prompt's last token leaves them. Asynchronous.

    A vision-language prompt (lab 09) passes what its image adds:
      embeds     [N, hidden] fp16 on the device: the prompt's input embeddings (image features already
                 placed at the image tokens) instead of the embedding rows of `tokens`;
      rope       (cos, sin) [N, head_dim / 2] fp32 on the device: each token's own angles (Qwen3-VL's
                 multimodal positions) instead of positions 0 .. N-1;
      deepstack  (rows, [features]) : an int32 device array of the image tokens' rows and one
                 [len(rows), hidden] fp16 array per early layer, added to those rows' hidden states
                 after that layer (Qwen3-VL's DeepStack)."""
    import cupy
    from .. import add as ADD
    from .. import attention as A
    from .. import rmsnorm as R
    from ..core.cublas import gemm
    from .steps import head_norm, silu_mul
    why = why_not(dec)
    if why:
        raise ValueError(why)
    from ..core.launch import require
    tokens = np.asarray(tokens).reshape(-1)
    cfg, n = dec.cfg, int(tokens.size)
    if not 1 <= n <= dec.capacity:
        raise ValueError(f"prefill: expected 1 <= prompt length <= capacity ({dec.capacity}), got {n}")
    if tokens.min() < 0 or tokens.max() >= cfg.vocab:
        raise ValueError(f"prefill: token ids must be in [0, {cfg.vocab}), got {tokens.min()} .. {tokens.max()}")
    if embeds is not None:
        require(embeds, "embeds", dtype="float16", shape=(n, cfg.hidden))
    cos, sin = dec.cos, dec.sin
    if rope is not None:
        cos, sin = rope
        require(cos, "rope cos", dtype="float32", shape=(n, cfg.head_dim // 2))
        require(sin, "rope sin", dtype="float32", shape=(n, cfg.head_dim // 2))
    rows, feats = deepstack if deepstack is not None else (None, ())
    if deepstack is not None:
        require(rows, "deepstack rows", dtype="int32", ndim=1)
        if len(feats) > cfg.layers:
            raise ValueError(f"deepstack: {len(feats)} feature sets for {cfg.layers} layers")
        for j, f in enumerate(feats):
            require(f, f"deepstack features {j}", dtype="float16", shape=(rows.shape[0], cfg.hidden))
    ws = _buffers(dec, n)
    rms = R.RMSNORM.variants[R.RMSNORM.default["float16"]]
    add = ADD.ADD.variants[ADD.ADD.default["float16"]]
    hq, hkv, d, qd, kd, F = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.q_dim, cfg.kv_dim, cfg.ffn
    h, h2, x, a = ws["h"], ws["h2"], ws["x"], ws["a"]
    if embeds is None:
        cupy.take(dec.embed_w, cupy.asarray(tokens.astype(np.int32)), axis=0, out=h)  # the prompt's embedding rows
    else:
        h[...] = embeds
    for i, L in enumerate(dec.layers):
        rms(h, L["ln1"], out=x)
        (W,) = L["qkv"]
        q, k, v = ws["q"], ws["k"], ws["v"]
        gemm(x, W[:qd], q)
        gemm(x, W[qd:qd + kd], k)
        gemm(x, W[qd + kd:], v)
        if "bias" in L:                                  # Qwen2.5: broadcast over the prompt's rows (CuPy)
            b = L["bias"]
            q += b[:qd]
            k += b[qd:qd + kd]
            v += b[qd + kd:]
        if "qn" in L:
            q, k = head_norm(q.reshape(n * hq, d), k.reshape(n * hkv, d), L["qn"], L["kn"],
                             out=(ws["qn"].reshape(n * hq, d), ws["kn"].reshape(n * hkv, d)))
        q3 = q.reshape(n, hq, d)
        if rope is None:
            A.rope_prefill(q3, k.reshape(n, hkv, d), v.reshape(n, hkv, d), dec.kc[i], dec.vc[i], 0, cos, sin)
        else:                            # a table of the prompt's own rows: the kernel reads row p0 + t = t
            A.rope_prefill(q3, k.reshape(n, hkv, d), v.reshape(n, hkv, d), dec.kc[i], dec.vc[i], 0, *_padded(cos, sin, dec))
        A.prefill_causal(q3, dec.kc[i], dec.vc[i], 0, out=ws["o"].reshape(n, hq, d))
        gemm(ws["o"], L["o"][0], a)
        add(h, a, out=h2)
        rms(h2, L["ln2"], out=x)
        (GU,) = L["gu"]
        gemm(x, GU[:F], ws["g"])
        gemm(x, GU[F:], ws["u"])
        silu_mul(ws["g"].reshape(-1), ws["u"].reshape(-1), out=ws["m"].reshape(-1))
        gemm(ws["m"], L["down"][0], a)
        add(h2, a, out=h)
        if i < len(feats):               # DeepStack: this layer's visual features join the image tokens' rows
            h[rows] += feats[i]
    rms(h[n - 1:], dec.norm, out=x[n - 1:])
    dec.at(n - 1)                                         # the last prompt token's step: position n - 1
    dec.history.fill(-1)
    dec.ops.logits(dec.lm, x[n - 1], out=dec.logits)
    dec.ops.argmax(dec.logits, dec.token, dec.state, dec.history)
    dec.host_pos = n


def _padded(cos, sin, dec):
    """A per-token table as tall as the cache (rope_prefill checks rows >= capacity; rows past N unread)."""
    import cupy
    n = cos.shape[0]
    if n >= dec.capacity:
        return cos, sin
    pad = lambda t: cupy.concatenate([t, cupy.zeros((dec.capacity - n, t.shape[1]), t.dtype)])   # noqa: E731
    return pad(cos), pad(sin)
