"""Lab 07's problem: the shapes and constants (Qwen3-8B decode, Qwen3-VL ViT prefill), the inputs
of every check and record case, and the float64 references the steps are checked against (decode,
the split-KV merge, RoPE, prefill). No GPU and no launcher here: steps.py launches, report.py reads."""
from __future__ import annotations

import functools
import math

import numpy as np

FAMILY = "attention"
HQ, HKV, D = 32, 8, 128          # Qwen3-8B: query heads, KV heads, head dim
GROUP = HQ // HKV                # query heads per KV head
THETA = 1_000_000.0              # Qwen3's rope_theta
DEC_SCALE = 1.0 / math.sqrt(D)
PF_HEADS, PF_D, PF_DP = 16, 72, 80   # ViT: heads, head dim, head dim padded to the mma's k
PF_SCALE = 1.0 / math.sqrt(PF_D)
LOG2E = 1.4426950408889634
TOL = (1e-2, 2e-3)               # (rtol, atol) for fp16 outputs: P or O rounded to fp16 (2^-11)


def _tolerance(*inputs) -> dict:
    """The checks' tolerance: fp16 P and O (rounded to fp16, 2^-11), whatever the inputs."""
    return {"rtol": TOL[0], "atol": TOL[1]}

# ---- decode: inputs, reference -----------------------------------------------------------------


def dec_case_key(shape, dtype) -> str:
    """'32x4096:float16' (Qwen3-8B's heads), or '28x4096/4x128:float16' for another head layout."""
    return f"{shape[0]}x{shape[1]}" + (f"/{shape[2]}x{shape[3]}" if len(shape) > 2 else "") + f":{dtype}"


def dec_layout(shape) -> tuple:
    """(query heads, length, KV heads, head dim) of a decode shape (hq, L) or (hq, L, hkv, d)."""
    hq, L, hkv, d = (*shape, HKV, D)[:4] if len(shape) == 2 else shape
    return int(hq), int(L), int(hkv), int(d)


def make_decode(shape=(HQ, 4096), dtype="float16", values="randn", seed=0):
    """Host inputs of one decode step: q [32, 128], k and v caches [8, L, 128] (capacity L, every
    row valid), and the length as an int32 array of one element (the device-side length).
    shape = (32, L). values:
      randn     N(0, 1)
      large     q and k times 12: logits of hundreds (exp overflows fp32 without the max)
      constant  every key equal: a constant row of scores (the output is the mean of v)
      nan       a NaN in q of head 0, in k of KV head 7 at L // 2, in v of KV head 1 at the last
                key, dim 5 (NaN spreads as in the reference)."""
    hq, L, hkv, d = dec_layout(shape)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((hq, d))
    k = rng.standard_normal((hkv, L, d))
    v = rng.standard_normal((hkv, L, d))
    if values == "large":
        q, k = q * 12.0, k * 12.0
    elif values == "constant" and L:
        k[:] = k[:, :1]
    elif values == "nan" and L:
        q[0, 3] = np.nan
        k[hkv - 1, L // 2, 7] = np.nan
        v[min(1, hkv - 1), L - 1, 5] = np.nan
    return (q.astype(dtype), k.astype(dtype), v.astype(dtype), np.array([L], np.int32))


def reference_decode(q, k, v, lens):
    """softmax(q k^T / sqrt(d)) v in float64, each query head against its KV head (h // group),
    over the first lens[0] keys, clamped to [0, capacity] as the kernels clamp a device-side length
    (no key: NaN, the empty softmax). Returns float32 [hq, d] (Qwen3-8B: [32, 128])."""
    hkv, cap, d = np.asarray(k).shape
    hq = np.asarray(q).shape[0]
    L = min(max(int(np.asarray(lens).reshape(-1)[0]), 0), cap)
    qd = np.asarray(q, np.float64).reshape(hkv, hq // hkv, d)
    kd, vd = np.asarray(k, np.float64)[:, :L], np.asarray(v, np.float64)[:, :L]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = np.einsum("hgd,hld->hgl", qd, kd) / math.sqrt(d)
        m = np.max(s, axis=-1, keepdims=True) if L else np.zeros(s.shape[:-1] + (1,))
        p = np.exp(s - m)
        o = np.einsum("hgl,hld->hgd", p, vd) / p.sum(-1, keepdims=True)
    return o.reshape(hq, d).astype(np.float32)


DEC_LENGTHS = (1, 16, 64, 256, 1024, 4096, 8192, 16384, 32768)
DEC_CHECK_LENGTHS = (1, 2, 3, 63, 127, 129, 1000, 4097, 16385)
# Other head layouts (query heads, KV heads, head dim): Qwen3-0.6B / 1.7B (16 / 8 of 128), Qwen3-14B
# (40 / 8), Qwen3-32B (64 / 8), Qwen2.5-7B (28 / 4: a group of 7), Qwen2.5-0.5B (14 / 2 of 64), and
# multi-head attention at head dim 64 (a group of 1). The kernels are specialised per layout (-D).
DEC_LAYOUTS = ((16, 8, 128), (40, 8, 128), (64, 8, 128), (28, 4, 128), (14, 2, 64), (8, 8, 64))
DEC_CHECK_CASES = [((HQ, n), val) for n in DEC_CHECK_LENGTHS for val in ("randn", "large", "constant", "nan")] + \
    [((hq, n, hkv, d), val) for hq, hkv, d in DEC_LAYOUTS for n in (1, 129, 4097) for val in ("randn", "nan")]


def merge_reference(part_o, part_lse):
    """The merge in float64 (what attention_03_decode_merge computes): lab 01's combine rule.
    part_o [H, C, D] (each chunk's normalised output), part_lse [H, C] (base-2 log-sum-exp)."""
    po, pl = np.asarray(part_o, np.float64), np.asarray(part_lse, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        M = np.max(pl, axis=1, keepdims=True)
        w = np.exp2(pl - np.where(np.isneginf(M), 0.0, M))
        return (np.einsum("hc,hcd->hd", w, po) / w.sum(1)[:, None]).astype(np.float32)


def make_partials(shape=(HQ, 64), seed=0, values="randn"):
    """Host partials of a split-KV decode for the merge exercise: part_o [H, C, 128] float32 and
    part_lse [H, C] float32 (base 2), from a real attention problem cut into C chunks of 16 keys,
    so the merge of them is the attention output. values='empty' marks every 3rd chunk empty
    (lse = -inf, o = 0), as a chunk past the length is."""
    H, C = shape
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((H, C, 16)) * 3.0
    vv = rng.standard_normal((H, C, 16, D))
    m = s.max(-1)
    p = np.exp2(s - m[..., None])
    l = p.sum(-1)
    po = np.einsum("hcj,hcjd->hcd", p, vv) / l[..., None]
    lse = m + np.log2(l)
    if values == "empty":
        po[:, ::3] = 0.0
        lse[:, ::3] = -np.inf
    return po.astype(np.float32), lse.astype(np.float32)


# ---- RoPE --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def rope_table_host(capacity: int, theta: float = THETA, d: int = D):
    """cos, sin [capacity, d / 2] float32 of the angles pos * theta^(-2i/d), computed in float64."""
    inv = theta ** (-np.arange(d // 2, dtype=np.float64) / (d // 2))
    ang = np.arange(capacity, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def reference_rope(x, pos, theta: float = THETA):
    """Rotate-half RoPE in float64 (Qwen3, Qwen2.5): x [..., d] at position pos -> float64."""
    x = np.asarray(x, np.float64)
    h = x.shape[-1] // 2
    inv = theta ** (-np.arange(h, dtype=np.float64) / h)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


# ---- prefill: inputs, reference --------------------------------------------------------------------

def pf_case_key(shape, dtype) -> str:
    return f"{shape[0]}x{shape[-1]}:{dtype}"


def make_prefill(shape=(PF_HEADS, 1024), dtype="float16", values="randn", seed=0):
    """Host q, k, v [heads, N, 72] fp16. shape = (heads, N). values as make_decode's (nan: a NaN in q of head 0
    row 0, in k of the last head at N // 2, in v of head 0 at the last key, dim 5)."""
    H, N = shape
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((H, N, PF_D)) for _ in range(3))
    if values == "large":
        q, k = q * 12.0, k * 12.0
    elif values == "constant" and N:
        k[:] = k[:, :1]
    elif values == "nan" and N:
        q[0, 0, 3] = np.nan
        k[H - 1, N // 2, 7] = np.nan
        v[0, N - 1, 5] = np.nan
    return tuple(a.astype(dtype) for a in (q, k, v))


def reference_prefill(q, k, v, rows=512):
    """softmax(q k^T / sqrt(72)) v per head in float64 (in blocks of query rows), float32 out."""
    qd, kd, vd = (np.asarray(a, np.float64) for a in (q, k, v))
    H, N, _ = qd.shape
    o = np.empty((H, N, PF_D), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for h in range(H):
            for r in range(0, N, rows):
                s = qd[h, r:r + rows] @ kd[h].T * PF_SCALE
                p = np.exp(s - s.max(-1, keepdims=True))
                o[h, r:r + rows] = (p @ vd[h]) / p.sum(-1, keepdims=True)
    return o


PF_NS = (64, 256, 1024, 4096, 16384)
PF_CHECK_CASES = [((2, n), val) for n in (1, 2, 3, 63, 127, 1000, 4097)
                  for val in ("randn", "large", "constant", "nan")]
