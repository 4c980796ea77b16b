"""Lab 07's causal prefill, the one a decoder's prompt runs (lab 08's Decoder.prefill): step 16 (step 14's
flash kernel made causal, grouped and at head dim 128, reading K and V from the KV cache) and step 07
(RoPE of every prompt token and its KV-cache write, one launch); their float64 references, inputs,
the torch SDPA baseline (is_causal, enable_gqa) and the family (PREFILL_CAUSAL)."""
from __future__ import annotations

import functools
import math

import numpy as np

from ..core.family import Family, Target
from ..core.launch import launch, require, variant
from .reference import FAMILY, LOG2E, THETA, rope_table_host
from .steps import TORCH_ATTN_KERNELS, _need_sm80, layout_reason, rope_table, specialise

CAUSAL_ROWS = 64         # query rows per block (4 warps x 16)


def _smem(d: int) -> int:
    """2 stages x (K, V) x 64 keys x (d + 8) halves."""
    return 2 * 2 * 64 * (d + 8) * 2


@functools.lru_cache(maxsize=None)
def _kernel(extra: tuple, d: int):
    """Step 16's kernel, specialised, with its dynamic shared memory limit raised to what it uses."""
    from ..core.build import kernel
    from ..core.launch import specialised
    k = specialised(FAMILY, "attention_16_prefill_causal", extra) if extra else \
        kernel(FAMILY, "attention_16_prefill_causal")
    k.max_dynamic_shared_size_bytes = _smem(d)
    return k


def _cache_check(q, k_cache, v_cache, what="q"):
    require(q, what, dtype="float16", ndim=3, align=16)
    n, hq, d = q.shape
    require(k_cache, "k_cache", dtype="float16", ndim=3, align=16)
    hkv, cap, dk = k_cache.shape
    if dk != d:
        raise ValueError(f"k_cache: expected [KV heads, capacity, {d}] ({what}'s head dim), got {tuple(k_cache.shape)}")
    why = layout_reason(hq, hkv, d)
    if why:
        raise ValueError(f"{what} {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}: {why}")
    require(v_cache, "v_cache", dtype="float16", shape=k_cache.shape, align=16)
    return n, hq, hkv, d, cap


def prefill_causal(q, k_cache, v_cache, p0: int = 0, out=None):
    """Step 16: o[t, h] = softmax over keys j <= p0 + t of q[t, h] . k_cache[h // group, j] / sqrt(d),
    times v. q and o [N, query heads, d] (the GEMMs' layout), caches [KV heads, capacity, d] already
    holding positions 0 .. p0 + N - 1; fp16; d = 64 or 128. Needs sm_80 (mma.sync)."""
    import cupy
    n, hq, hkv, d, cap = _cache_check(q, k_cache, v_cache)
    if not 0 <= int(p0) or int(p0) + n > cap:
        raise ValueError(f"p0 {p0} + {n} tokens: expected 0 <= p0 and p0 + N <= capacity ({cap})")
    out = cupy.empty_like(q) if out is None else out
    require(out, "out", dtype="float16", shape=q.shape, align=16)
    if n:
        _need_sm80("16")
        ex = specialise(hq, hkv, d)
        _kernel(ex, d)                   # compiled, its shared-memory limit raised (once)
        args = (q, k_cache, v_cache, out, n, int(p0) + n, int(p0), hq // hkv, d, hq * d, cap * d, d, d, hq * d,
                LOG2E / math.sqrt(d))
        launch(FAMILY, "attention_16_prefill_causal", (-(-n // CAUSAL_ROWS), hq), (128,), args, _smem(d), extra=ex)
    return out


def rope_prefill(q, k, v, k_cache, v_cache, p0: int = 0, cos=None, sin=None, theta: float = THETA):
    """Step 07: q [N, query heads, d] rotated in place (RoPE at positions p0 .. p0 + N - 1), k [N, KV heads,
    d] rotated and written with v to the caches [KV heads, capacity, d] at those positions. One launch."""
    n, hq, hkv, d, cap = _cache_check(q, k_cache, v_cache)
    require(k, "k", dtype="float16", shape=(n, hkv, d))
    require(v, "v", dtype="float16", shape=(n, hkv, d))
    if not 0 <= int(p0) or int(p0) + n > cap:
        raise ValueError(f"p0 {p0} + {n} tokens: expected 0 <= p0 and p0 + N <= capacity ({cap})")
    if cos is None:
        cos, sin = rope_table(cap, theta, d)
    require(cos, "cos", dtype="float32", ndim=2)
    require(sin, "sin", dtype="float32", shape=cos.shape)
    if cos.shape[0] < cap or cos.shape[1] != d // 2:
        raise ValueError(f"cos/sin: expected [>= {cap}, {d // 2}], got {tuple(cos.shape)}")
    if n:
        launch(FAMILY, "attention_07_rope_prefill", (n, hq + hkv), (d // 2,),
               (q, k, v, cos, sin, k_cache, v_cache, n, int(p0), cap, hq, hkv),
               extra=() if d == 128 else (f"-DDEC_D={d}",))
    return q


# ---- the family: inputs, the float64 reference, the SDPA baseline -----------------------------------------

def make_causal(shape=(32, 1024), dtype="float16", values="randn", seed=0):
    """Host q [N, hq, d] and k, v caches [hkv, N, d] (every row a prompt token), p0 = 0.
    shape = (hq, N) (Qwen3-8B: 8 KV heads of 128) or (hq, N, hkv, d)."""
    hq, n, hkv, d = (*shape, 8, 128)[:4] if len(shape) == 2 else shape
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((n, hq, d)), rng.standard_normal((hkv, n, d)), rng.standard_normal((hkv, n, d))
    if values == "large":
        q, k = q * 12.0, k * 12.0
    elif values == "nan" and n > 2:
        k[0, n // 2, 3] = np.nan          # a NaN key: rows at or past it are NaN, earlier rows are not
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def reference_causal(q, k, v, p0: int = 0):
    """The causal grouped attention in float64, float32 out [N, hq, d]."""
    qd, kd, vd = (np.asarray(a, np.float64) for a in (q, k, v))
    n, hq, d = qd.shape
    g = hq // kd.shape[0]
    o = np.empty((n, hq, d), np.float32)
    mask = np.arange(p0 + n)[None, :] > (p0 + np.arange(n))[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        for h in range(hq):
            s = qd[:, h] @ kd[h // g, :p0 + n].T / math.sqrt(d)
            s[mask] = -np.inf
            p = np.exp(s - s.max(-1, keepdims=True))
            o[:, h] = (p @ vd[h // g, :p0 + n]) / p.sum(-1, keepdims=True)
    return o


def causal_case_key(shape, dtype) -> str:
    return f"{shape[0]}x{shape[1]}" + (f"/{shape[2]}x{shape[3]}" if len(shape) > 2 else "") + f":{dtype}"


def causal_bytes(q, k, v, *_):
    """q, k, v read once, o written once."""
    return int(2 * q.nbytes + k.nbytes + v.nbytes)


def causal_flops(n: int, hq: int = 32, d: int = 128) -> float:
    """QK^T and PV under the causal mask: 2 x 2 x hq x d x N (N + 1) / 2 multiply-adds."""
    return 2.0 * hq * d * n * (n + 1)


def _sdpa_causal(q, k, v):
    import torch
    qt = torch.from_dlpack(q).permute(1, 0, 2)[None]            # [1, hq, N, d]
    kt, vt = torch.from_dlpack(k)[None], torch.from_dlpack(v)[None]
    return lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)


@variant(dtypes=("float16",), alloc_out=lambda q, *_: __import__("cupy").empty_like(q))
def _step16(q, k, v, out=None):
    return prefill_causal(q, k, v, 0, out)


SDPA_CAUSAL = "torch SDPA (is_causal, enable_gqa)"
CAUSAL_NS = (1024, 4096, 16384)
CAUSAL_CHECK_CASES = [((hq, n, hkv, d), val) for hq, hkv, d in ((32, 8, 128), (28, 4, 128), (14, 2, 64))
                      for n in (1, 17, 64, 130, 1000) for val in ("randn", "large", "nan")]


def _vs_sdpa(n):
    """time(SDPA) / time(step 16) at N = n, with its band (the targets table applies the noise rule)."""
    def m(df):
        from ..core.results import ratio_band
        return ratio_band(df, "16_causal", SDPA_CAUSAL, causal_case_key((32, n), "float16"))
    return m


PREFILL_CAUSAL = Family(
    name="attention_prefill_causal", kernels=FAMILY, variants={"16_causal": _step16}, reference=reference_causal,
    make_input=make_causal, bytes_moved=causal_bytes, check_cases=CAUSAL_CHECK_CASES,
    record_cases=[((32, n), "float16") for n in CAUSAL_NS], baselines={SDPA_CAUSAL: _sdpa_causal},
    shapes={f"Qwen3-8B prompt, N = {n}": (32, n) for n in CAUSAL_NS},
    default={"float16": "16_causal"}, case_key=causal_case_key,
    limiters=(("16_causal", (32, 4096), None), (SDPA_CAUSAL, (32, 4096), TORCH_ATTN_KERNELS)),
    tolerance=lambda *a: {"rtol": 1e-2, "atol": 2e-3},
    targets=tuple(Target(f"time(torch SDPA) / time(step 16) at N = {n}", _vs_sdpa(n), 1.0) for n in CAUSAL_NS),
    about="Qwen3-8B causal prefill attention: 32 q heads over 8 KV heads of 128, K and V from the cache")

__all__ = ["CAUSAL_NS", "PREFILL_CAUSAL", "SDPA_CAUSAL", "causal_flops", "make_causal", "prefill_causal",
           "reference_causal", "rope_prefill", "rope_table_host"]
