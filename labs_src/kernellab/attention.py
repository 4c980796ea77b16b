"""Lab 07: attention, which is lab 01's online softmax done tile by tile.

Two families, one kernel file (kernels/attention.cu):

DECODE   Qwen3-8B decode attention: one new query token (32 heads x 128) against an fp16 KV cache
         of 8 KV heads (grouped-query attention, 4 query heads per KV head), length 1 .. 32768.
         Bound by the bytes of the cache: naive (3 launches) -> one block per head -> split-KV
         (flash decoding) + merge -> GQA -> TILE keys in flight and Little's-law chunking.
PREFILL  Qwen3-VL's ViT attention: 16 heads x 72, N tokens, non-causal. The report's cuBLAS path
         (scores in memory) -> one query row per block (online softmax, scores stay on the SM) ->
         tensor cores (mma.sync m16n8k16, FlashAttention-2 order, head dim padded to 80) ->
         cp.async double buffering -> a bank-conflict-free row stride.

Also: Qwen3's RoPE (theta 1e6, rotate-half) fused with the KV-cache append (rope_append), the
launchers lab 08's decoder calls (preallocated outputs, device-side length and position, so one
CUDA graph replays every token), float64 references, the merge rule on the host, and an Orin
model on paper.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .core.device import ORIN_PEAK_GBPS
from .core.device import ORIN_SMS as _ORIN_SMS
from .core.family import Family, Target
from .core.launch import host_or_device_index, launch, require, variant, workspace

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

# ---- decode: inputs, reference, bytes ------------------------------------------------------------


def dec_case_key(shape, dtype) -> str:
    return f"{shape[0]}x{shape[-1]}:{dtype}"


def make_decode(shape=(HQ, 4096), dtype="float16", values="randn", seed=0):
    """Host inputs of one decode step: q [32, 128], k and v caches [8, L, 128] (capacity L, every
    row valid), and the length as an int32 array of one element (the device-side length).
    shape = (32, L). values:
      randn     N(0, 1)
      large     q and k times 12: logits of hundreds (exp overflows fp32 without the max)
      constant  every key equal: a constant row of scores (the output is the mean of v)
      nan       a NaN in q of head 0, in k of KV head 7 at L // 2, in v of KV head 1 at the last
                key, dim 5 (NaN spreads as in the reference)."""
    hq, L = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((hq, D))
    k = rng.standard_normal((HKV, L, D))
    v = rng.standard_normal((HKV, L, D))
    if values == "large":
        q, k = q * 12.0, k * 12.0
    elif values == "constant" and L:
        k[:] = k[:, :1]
    elif values == "nan" and L:
        q[0, 3] = np.nan
        k[HKV - 1, L // 2, 7] = np.nan
        v[1, L - 1, 5] = np.nan
    return (q.astype(dtype), k.astype(dtype), v.astype(dtype), np.array([L], np.int32))


def reference_decode(q, k, v, lens):
    """softmax(q k^T / sqrt(128)) v in float64, each query head against its KV head (h // 4),
    over the first lens[0] keys, clamped to [0, capacity] as the kernels clamp a device-side length
    (no key: NaN, the empty softmax). Returns float32 [32, 128]."""
    L = min(max(int(np.asarray(lens).reshape(-1)[0]), 0), np.asarray(k).shape[1])
    qd = np.asarray(q, np.float64).reshape(HKV, GROUP, D)
    kd, vd = np.asarray(k, np.float64)[:, :L], np.asarray(v, np.float64)[:, :L]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = np.einsum("hgd,hld->hgl", qd, kd) * DEC_SCALE
        m = np.max(s, axis=-1, keepdims=True) if L else np.zeros(s.shape[:-1] + (1,))
        p = np.exp(s - m)
        o = np.einsum("hgl,hld->hgd", p, vd) / p.sum(-1, keepdims=True)
    return o.reshape(HQ, D).astype(np.float32)


def decode_bytes(q, k, v, lens, *_):
    """The whole KV cache (capacity rows; equal to the length in every timed case), q and o."""
    return int(k.nbytes + v.nbytes + 2 * q.nbytes)


# ---- decode: launchers ---------------------------------------------------------------------------

SPLIT_CHUNK = 256       # steps 03-04: a fixed chunk of keys per block (flash decoding's first cut)
MIN_CHUNK = 64          # step 05: no chunk shorter than this (the merge's bytes stay a few %)
DEC_THREADS = 128       # 4 warps = 8 half-warps per block
_SCRATCH: dict = {}     # (what, shape) -> device buffer, allocated once (graph-safe after warm-up)


def _scratch(what, shape, dtype=np.float32, only_one=False):
    """A device buffer kept for the next call (only_one: drop this buffer's other sizes first,
    for the prefill scores, which are gigabytes at large N)."""
    import cupy
    key = (what, tuple(shape), np.dtype(dtype).str, cupy.cuda.Device().id)
    buf = _SCRATCH.get(key)
    if buf is None:
        if only_one:
            for k in [k for k in _SCRATCH if k[0] == what]:
                del _SCRATCH[k]
        buf = _SCRATCH[key] = cupy.empty(shape, dtype)
        if not only_one:          # kept for good: a launch plan may replay launches that use it
            workspace(buf)
    return buf


def _dec_check(q, k, v, length, out):
    """Validate one decode call before any launch; returns (capacity, lens pointer arg, host length)."""
    require(q, "q", dtype="float16", shape=(HQ, D), align=16)
    require(k, "k_cache", dtype="float16", ndim=3, align=16)
    if k.shape[0] != HKV or k.shape[2] != D:
        raise ValueError(f"k_cache: expected shape [{HKV}, capacity, {D}], got {tuple(k.shape)}")
    require(v, "v_cache", dtype="float16", shape=k.shape, align=16)
    require(out, "out", dtype="float16", shape=(HQ, D), align=16)
    cap = k.shape[1]
    if isinstance(length, (int, np.integer)):
        if not 1 <= int(length) <= cap:
            raise ValueError(f"length: expected 1 <= length <= capacity ({cap}), got {int(length)}")
        return cap, np.uint64(0), int(length)
    require(length, "length", dtype="int32", shape=(1,))
    return cap, length, cap     # device-side length: the kernels read it (clamped to [0, capacity])


def _alloc_o(q, *_):
    import cupy
    require(q, "q", dtype="float16", shape=(HQ, D))       # a bad q is a ValueError, not an allocation
    return cupy.empty((HQ, D), cupy.float16)


def _naive(q, k, v, length, out=None):
    """Step 01: scores to memory, softmax in place, P.V: three launches."""
    out = _alloc_o(q) if out is None else out
    cap, lens, L = _dec_check(q, k, v, length, out)
    s = _scratch("scores", (HQ, cap))
    sl2 = DEC_SCALE * LOG2E
    launch(FAMILY, "attention_01_naive_scores", (-(-L // 8), HQ), (256,), (q, k, s, lens, L, cap, sl2))
    launch(FAMILY, "attention_01_naive_softmax", (HQ,), (256,), (s, lens, L, cap))
    launch(FAMILY, "attention_01_naive_pv", (HQ,), (D,), (s, v, out, lens, L, cap))
    return out


def chunks_for(step, length, sms=None, blocks_per_sm=None) -> int:
    """How many chunks each head's cache is cut into.
    02: 1 (one block per query head). 03, 04: ceil(length / SPLIT_CHUNK).
    05: Little's law. Each block keeps 128 threads x 4 keys x (K + V) x 16 B = 16 KiB in flight;
    one full wave of resident blocks (blocks per SM from the occupancy API x SMs) keeps the most
    bytes in flight the SMs can hold, so the chunks per KV head are floor(wave / 8 KV heads) (one
    block more than a wave would run alone in a second round, doubling the time), but no chunk
    shorter than MIN_CHUNK keys (each chunk costs a 2 KiB partial and a merge)."""
    if step == "02":
        return 1
    if step in ("03", "04"):
        return max(1, -(-length // SPLIT_CHUNK))
    wave = blocks_per_sm * sms
    return int(max(1, min(wave // HKV, -(-length // MIN_CHUNK))))


@functools.lru_cache(maxsize=None)
def _wave_05():
    """(SMs, resident blocks per SM) of step 05's kernel on this GPU (occupancy API)."""
    from .core.bench import blocks_per_sm
    from .core.build import kernel
    from .core.device import info
    smem = 8 * GROUP * (2 + D) * 4
    return info()["sms"], max(1, blocks_per_sm(kernel(FAMILY, "attention_05_decode_gqa_tile"), DEC_THREADS, smem))


def _split(kname, step, q, k, v, length, out):
    out = _alloc_o(q) if out is None else out
    cap, lens, L = _dec_check(q, k, v, length, out)
    group = GROUP if step in ("04", "05") else 1
    if step == "05":
        sms, bps = _wave_05()
        chunks = chunks_for("05", L, sms, bps)
    else:
        chunks = chunks_for(step, L)
    chunk_len = -(-L // chunks)
    chunks = -(-L // chunk_len)
    smem = 8 * group * (2 + D) * 4
    grid = (HQ // group, chunks)
    sl2 = DEC_SCALE * LOG2E
    if chunks == 1:
        po, pl = out, out          # unused: the kernel writes o itself
    else:
        po = _scratch("part_o", (HQ, chunks, D))
        pl = _scratch("part_lse", (HQ, chunks))
    launch(FAMILY, kname, grid, (DEC_THREADS,), (q, k, v, out, po, pl, lens, L, cap, sl2, chunk_len), smem)
    if chunks > 1:
        launch(FAMILY, "attention_03_decode_merge", (HQ,), (D,), (po, pl, out, chunks))
    return out


def _head(q, k, v, length, out=None):
    """Step 02: one block per query head, one pass, online softmax."""
    return _split("attention_02_decode_head", "02", q, k, v, length, out)


def _splitkv(q, k, v, length, out=None):
    """Step 03: one block per (query head, chunk of SPLIT_CHUNK keys), then the merge kernel."""
    return _split("attention_03_decode_split", "03", q, k, v, length, out)


def _gqa(q, k, v, length, out=None):
    """Step 04: one block per (KV head, chunk) serves its 4 query heads: the cache is read once."""
    return _split("attention_04_decode_gqa", "04", q, k, v, length, out)


def _gqa_tile(q, k, v, length, out=None):
    """Step 05: 4 keys' loads in flight per half-warp; chunks from SMs and length (Little's law);
    no merge launch when one chunk suffices. The step lab 08's decoder calls."""
    return _split("attention_05_decode_gqa_tile", "05", q, k, v, length, out)


def _dec_variant(fn):
    return variant(dtypes=("float16",), alloc_out=_alloc_o)(fn)


DEC_VARIANTS = {"01_naive": _dec_variant(_naive), "02_head": _dec_variant(_head),
                "03_split": _dec_variant(_splitkv), "04_gqa": _dec_variant(_gqa),
                "05_gqa_tile": _dec_variant(_gqa_tile)}
decode = DEC_VARIANTS["05_gqa_tile"]     # what lab 08 calls: decode(q, k_cache, v_cache, length, out=o)


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


def merge(part_o, part_lse, out=None):
    """Launch the lab's merge kernel (step 03's) on partials [H, C, 128] and [H, C]: out [H, 128]
    fp16. Used by the exercise as the step to time against."""
    import cupy
    require(part_o, "part_o", dtype="float32", ndim=3)
    H, C, d = part_o.shape
    if d != D:
        raise ValueError(f"part_o: expected [H, C, {D}], got {tuple(part_o.shape)}")
    require(part_lse, "part_lse", dtype="float32", shape=(H, C))
    out = cupy.empty((H, D), cupy.float16) if out is None else out
    require(out, "out", dtype="float16", shape=(H, D))
    launch(FAMILY, "attention_03_decode_merge", (H,), (D,), (part_o, part_lse, out, C))
    return out


# ---- RoPE + KV append -----------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def rope_table_host(capacity: int, theta: float = THETA):
    """cos, sin [capacity, 64] float32 of the angles pos * theta^(-i/64), computed in float64."""
    inv = theta ** (-np.arange(D // 2, dtype=np.float64) / (D // 2))
    ang = np.arange(capacity, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def rope_table(capacity: int, theta: float = THETA):
    """The cos/sin tables on the device (built once per capacity, outside any graph)."""
    import cupy
    key = ("rope", capacity, theta, cupy.cuda.Device().id)
    t = _SCRATCH.get(key)
    if t is None:
        c, s = rope_table_host(capacity, theta)
        t = _SCRATCH[key] = (cupy.asarray(c), cupy.asarray(s))
    return t


def reference_rope(x, pos, theta: float = THETA):
    """Rotate-half RoPE in float64 (Qwen3): x [..., 128] at position pos -> float64."""
    x = np.asarray(x, np.float64)
    inv = theta ** (-np.arange(D // 2, dtype=np.float64) / (D // 2))
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rope_append(q, k, v, k_cache, v_cache, pos, q_out, cos=None, sin=None):
    """q_out = RoPE(q); k_cache[:, pos] = RoPE(k); v_cache[:, pos] = v. One launch.
    q [32, 128], k and v [8, 128], caches [8, capacity, 128], all fp16. pos: a Python int
    (checked: 0 <= pos < capacity, else ValueError) or an int32 device array of one element
    (read by the kernel, so a CUDA graph replays every token; out of range writes nothing).
    cos/sin: rope_table(capacity) by default."""
    require(q, "q", dtype="float16", shape=(HQ, D))
    require(k, "k", dtype="float16", shape=(HKV, D))
    require(v, "v", dtype="float16", shape=(HKV, D))
    require(k_cache, "k_cache", dtype="float16", ndim=3)
    if k_cache.shape[0] != HKV or k_cache.shape[2] != D:
        raise ValueError(f"k_cache: expected shape [{HKV}, capacity, {D}], got {tuple(k_cache.shape)}")
    require(v_cache, "v_cache", dtype="float16", shape=k_cache.shape)
    require(q_out, "q_out", dtype="float16", shape=(HQ, D))
    cap = k_cache.shape[1]
    if cos is None:
        cos, sin = rope_table(cap)
    require(cos, "cos", dtype="float32", ndim=2)
    require(sin, "sin", dtype="float32", shape=cos.shape)
    if cos.shape[0] < cap or cos.shape[1] != D // 2:
        raise ValueError(f"cos/sin: expected [>= {cap}, {D // 2}], got {tuple(cos.shape)}")
    pptr, phost = host_or_device_index(pos, cap, "pos", "capacity")
    launch(FAMILY, "attention_06_rope_append", (HQ + HKV,), (D // 2,),
           (q, k, v, cos, sin, q_out, k_cache, v_cache, pptr, phost, cap, HQ, HKV))
    return q_out


# ---- decode baselines -----------------------------------------------------------------------------

def _torch():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def show_sdpa_backend(kind: str) -> None:
    """Print which backend torch's SDPA runs for the decode (Qwen3-8B, KV 4096) or prefill (ViT,
    N = 1024) shape; without a GPU, a loud skip (device.live_only)."""
    from .core.device import live_only, torch as _torch

    def ask():
        import cupy
        if _torch() is None:
            print("torch is not installed: no SDPA baseline here (the optional peers extra)")
            return
        if kind == "decode":
            q, k, v, lens = (cupy.asarray(a) for a in make_decode((HQ, 4096)))
            t = _dec_torch_views(q, k, v, lens)
            print("torch SDPA backend for decode:", sdpa_backend(*t[1:], enable_gqa=True))
        else:
            t = [_torch().from_dlpack(cupy.asarray(a)).unsqueeze(0) for a in make_prefill((PF_HEADS, 1024))]
            print("torch SDPA backend for the ViT shapes:", sdpa_backend(*t))
    live_only(f"asks torch which SDPA backend it runs for the {kind} shape.", ask)


def sdpa_backend(q, k, v, enable_gqa=False) -> str:
    """The backend torch's dispatcher picks for these tensors (torch._fused_sdp_choice)."""
    torch = _torch()
    try:
        from torch.nn.attention import SDPBackend
        i = torch._fused_sdp_choice(q, k, v, None, 0.0, False, enable_gqa=enable_gqa)
        return SDPBackend(i).name.lower()
    except Exception:
        return "default"


def _dec_torch_views(q, k, v, lens):
    torch = _torch()
    if torch is None:
        return None
    L = k.shape[1]
    qt = torch.from_dlpack(q).view(1, HQ, 1, D)
    kt = torch.from_dlpack(k).view(1, HKV, L, D)
    vt = torch.from_dlpack(v).view(1, HKV, L, D)
    return torch, qt, kt, vt


def _sdpa_decode(q, k, v, lens):
    t = _dec_torch_views(q, k, v, lens)
    if t is None:
        return None
    torch, qt, kt, vt = t
    F = torch.nn.functional
    return lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)


def _matmul_decode(q, k, v, lens):
    t = _dec_torch_views(q, k, v, lens)
    if t is None:
        return None
    torch, qt, kt, vt = t
    qg = qt.view(HKV, GROUP, D)
    kg, vg = kt[0], vt[0]

    def f():
        s = torch.matmul(qg, kg.transpose(1, 2)) * DEC_SCALE
        return torch.matmul(torch.softmax(s.float(), dim=-1).to(vg.dtype), vg)
    return f


def _graph_05(q, k, v, lens):
    """Step 05 captured once as a CUDA graph and replayed: the host pays one graph launch."""
    from .core.bench import graph
    o = _alloc_o(q)
    return graph(lambda: decode(q, k, v, lens, out=o))


def _floor_dec(q, k, v, lens):
    """The floor: lab 00's fastest reader over as many bytes as the KV cache (one launch, nothing
    computed). No decode kernel, which must read those bytes, can finish sooner on the GPU it runs on."""
    import cupy
    from .core.bench import read_floor
    return read_floor(cupy.empty(k.nbytes + v.nbytes, cupy.uint8))


SDPA_DEC = "torch SDPA (enable_gqa)"
TORCH_ATTN_KERNELS = "flash|fmha|sdpa|fprop|attn|attention"   # the first such kernel an SDPA call launches
MATMUL_DEC = "torch matmul-softmax-matmul"
GRAPH_DEC = "05_gqa_tile as a CUDA graph"
DEC_FLOOR = "read-only kernel (same cache bytes)"
DEC_BASELINES = {SDPA_DEC: _sdpa_decode, MATMUL_DEC: _matmul_decode, GRAPH_DEC: _graph_05, DEC_FLOOR: _floor_dec}

DEC_LENGTHS = (1, 16, 64, 256, 1024, 4096, 8192, 16384, 32768)
DEC_CHECK_LENGTHS = (1, 2, 3, 63, 127, 129, 1000, 4097, 16385)
DEC_CHECK_CASES = [((HQ, n), val) for n in DEC_CHECK_LENGTHS for val in ("randn", "large", "constant", "nan")]


# ---- results readers shared by targets and sentences -----------------------------------------------

def _rows(df, kind=None):
    if df is None or len(df) == 0:
        return df
    d = df[df["source"] == df["source"].iloc[0]]
    d = d[d["device"] == d["device"].iloc[0]]
    return d if kind is None else d[d["kind"] == kind]


def best_variant(df, case):
    """(name, median_us) of the fastest variant at one case, read from the data."""
    d = _rows(df, "variant")
    if d is None or len(d) == 0:
        return None, float("nan")
    d = d[d["case"] == case]
    if d.empty:
        return None, float("nan")
    r = d.loc[d["median_us"].idxmin()]
    return r["name"], float(r["median_us"])


def _t(df, name, case):
    d = _rows(df)
    if d is None or len(d) == 0:
        return float("nan")
    d = d[(d["name"] == name) & (d["case"] == case)]
    return float(d["median_us"].iloc[0]) if len(d) else float("nan")


def _worst(measures):
    """The Measured of least value (NaN ones skipped), band and all: the worst case of a target."""
    from .core.results import NAN
    ok = [m for m in measures if m.ok]
    return min(ok, key=lambda m: m.value) if ok else NAN


def dec_roof_fraction(df, min_len=4096, floor=False):
    """Worst (over lengths >= min_len) fraction of the read roof of the best variant (floor=True:
    of the read-only floor, the best any kernel reading the cache scores on the GPU that measured
    it), with its band (results.frac_band): a Measured, so the targets table applies the noise rule."""
    from .core.results import frac_band
    d = _rows(df, None if floor else "variant")
    if d is None or len(d) == 0:
        return _worst([])
    d = d[d["name"] == DEC_FLOOR] if floor else d
    out = []
    for case, g in d[d["cols"] >= min_len].groupby("case"):
        out.append(frac_band(df, str(g.loc[g["median_us"].idxmin(), "name"]), case, roof="read"))
    return _worst(out)


def dec_vs_sdpa(df):
    """Worst (over lengths) time(SDPA) / time(best variant), with its band (results.ratio_band)."""
    from .core.results import ratio_band
    d = _rows(df)
    if d is None or len(d) == 0:
        return _worst([])
    return _worst([ratio_band(df, best_variant(df, c)[0], SDPA_DEC, c) for c in d["case"].unique()
                   if best_variant(df, c)[0]])


def cache_bytes(length) -> int:
    """Bytes of the KV cache (K and V, fp16) at one length."""
    return 2 * HKV * length * D * 2


def gqa_vs_split(df):
    """Step 04 against step 03 per KV length, on the device of df's first rows: time(03)/time(04)
    with its noise verdict, the grid each launches (chunks_for: blocks computed, not measured), and
    the cache's bytes against that device's L2 (device.facts, its meta.json when recorded)."""
    import pandas as pd
    from .core.device import facts
    from .core.results import one_source, ratio_band, within_noise
    d = one_source(df)
    f = facts(d) if d is not None and len(d) else {}
    rows = []
    for n in DEC_LENGTHS:
        c = dec_case_key((HQ, n), "float16")
        m = ratio_band(d, "04_gqa", "03_split", c)
        if not m.ok:
            continue
        rows.append({"KV length": n, "cache (MB)": cache_bytes(n) / 1e6,
                     "L2 (MB)": f["l2_bytes"] / 1e6 if f.get("l2_bytes") else float("nan"),
                     "blocks 03": HQ * chunks_for("03", n), "blocks 04": HKV * chunks_for("04", n),
                     "SMs": f.get("sms"), "time(03) / time(04)": m.value,
                     "04 is": "within noise" if within_noise(m) else "faster" if m.value > 1 else "slower"})
    out = pd.DataFrame(rows)
    if len(out) and d is not None and len(d):
        out["device"] = d["device"].iloc[0]
    return out


def gqa_vs_split_text(df) -> str:
    """What the record says of step 04 against step 03, for df's first device: at which lengths it
    is slower, within noise and faster, the cache's bytes there against that GPU's L2, and the
    blocks each launches at 4096 keys (all from gqa_vs_split)."""
    from .core.results import source
    g = gqa_vs_split(df)
    if g.empty:
        return "`04_gqa` against `03_split`: not measured here and not recorded yet."

    def at(verdict):
        x = g[g["04 is"] == verdict]
        if x.empty:
            return f"{verdict} at none"
        keys = ", ".join(str(n) for n in x["KV length"])
        size = lambda mb: f"{mb * 1e3:.0f} kB" if mb < 1 else f"{mb:.1f} MB"   # noqa: E731
        lo, hi = x["cache (MB)"].min(), x["cache (MB)"].max()
        mb = size(lo) if lo == hi else f"{size(lo)}–{size(hi)}"
        return f"{verdict} at {len(x)} (KV length {keys}; cache {mb})"
    s = (f"On the {g['device'].iloc[0]}, over {len(g)} KV lengths `04_gqa` is " +
         "; ".join(at(v) for v in ("slower", "within noise", "faster")) + " than `03_split`")
    l2 = g["L2 (MB)"].iloc[0]
    if l2 == l2:
        s += f". That GPU's L2 holds {l2:.1f} MB"
    r = g[g["KV length"] == 4096]
    if len(r):
        r = r.iloc[0]
        s += (f"; at 4096 keys step 03 launches {r['blocks 03']} blocks and step 04 {r['blocks 04']}"
              + (f", on {r['SMs']} SMs" if r["SMs"] == r["SMs"] and r["SMs"] is not None else ""))
    return s + f" ({source(df)})."


def host_text(df) -> str:
    """Host time, kept apart from GPU time, for df's first device: one eager `05_gqa_tile` call's
    host_us over every length (split by whether it launches the merge too), its bare launches
    (bare_host_us), its GPU time (median_us), and the graph replay's host_us."""
    from .core.device import facts
    from .core.results import one_source, select, source
    d = one_source(df)
    e, g = select(d, name="05_gqa_tile"), select(d, name=GRAPH_DEC)
    if e is None or e.empty or "host_us" not in e or e["host_us"].isna().all():
        return "Host time of step 05: not measured here and not recorded yet."
    rng = lambda x: (f"{x.min():.1f}" if len(x) == 1 or x.min() == x.max()    # noqa: E731
                     else f"{x.min():.1f}–{x.max():.1f}")
    f = facts(d)
    try:
        per_sm = blocks_per_sm_on(f["arch"])
        e = e.assign(chunks=[chunks_for("05", int(n), f["sms"], per_sm) for n in e["cols"]])
    except Exception:                       # no arch known: no split by launches
        e = e.assign(chunks=float("nan"))
    n, over = len(e), e[e["host_us"] > e["median_us"]]
    s = (f"Host time is not GPU time. Eager, one `05_gqa_tile` call costs **{rng(e['host_us'])} µs** of host "
         f"time (`host_us`) over {n} KV lengths, against {rng(e['median_us'])} µs of GPU time (`median_us`); "
         f"the host time is the larger at {len(over)} of {n} lengths")
    one, two = e[e["chunks"] == 1], e[e["chunks"] > 1]
    if len(one) and len(two):
        s += (f". With one chunk (one launch: KV length {', '.join(str(int(x)) for x in one['cols'])}) "
              f"it costs {rng(one['host_us'])} µs; with the merge launch too ({len(two)} lengths) "
              f"{rng(two['host_us'])} µs, while the same launches as bare kernel calls (`bare_host_us`) cost "
              f"{rng(two['bare_host_us'])} µs: the rest is the Python launcher")
    if len(g) and not g["host_us"].isna().all():
        s += f". The graph replay costs {rng(g['host_us'])} µs of host time"
    return s + f" ({source(df)})."


def noisy_rows(df, spread=1.5):
    """Rows of df's first device whose p90/p10 exceeds `spread` (a wide band: too few or disturbed
    repetitions), to be named beside the table rather than read as a result."""
    from .core.results import one_source
    d = one_source(df)
    if d is None or d.empty:
        return d
    return d[d["p90_us"] / d["p10_us"] > spread]


def noisy_text(df, spread=1.5) -> str:
    """A note on the rows of noisy_rows, or '' when there are none."""
    from .core.results import source
    n = noisy_rows(df, spread)
    if n is None or n.empty:
        return ""
    rows = "; ".join(f"`{r['name']}` at `{r['case']}`: median {r['median_us']:.1f} µs, p10–p90 "
                     f"{r['p10_us']:.1f}–{r['p90_us']:.1f} µs" + (f" over {int(r['reps'])} repetitions"
                                                                   if r.get("reps") == r.get("reps") else "")
                     for _, r in n.iterrows())
    return (f"A noisy record, not a result: {rows} (p90/p10 above {spread:g}: a disturbed or cold start; "
            f"a ratio against it means little; re-record it with `make bench`) ({source(df)}).")


DECODE = Family(
    name="attention_decode", kernels=FAMILY, roof="read", variants=DEC_VARIANTS, reference=reference_decode,
    make_input=make_decode, bytes_moved=decode_bytes, check_cases=DEC_CHECK_CASES,
    record_cases=[((HQ, n), "float16") for n in DEC_LENGTHS], baselines=DEC_BASELINES,
    shapes={f"Qwen3-8B decode, KV length {n}": (HQ, n) for n in DEC_LENGTHS},
    default={"float16": "05_gqa_tile"}, case_key=dec_case_key, tolerance=_tolerance,
    limiters=tuple((name, (HQ, n), kernel) for n in (1024, 32768)
                   for name, kernel in (("05_gqa_tile", None), (SDPA_DEC, TORCH_ATTN_KERNELS))),
    targets=(Target("best step, worst fraction of the read roof at KV length >= 4096", dec_roof_fraction, 0.75,
                    floor=functools.partial(dec_roof_fraction, floor=True)),
             Target("time(torch SDPA) / time(best step), worst over every length", dec_vs_sdpa, 1.0)),
    about="Qwen3-8B decode attention: 32 q heads, 8 KV heads, head dim 128, fp16 cache")


# ---- prefill: inputs, reference, bytes, FLOPs ------------------------------------------------------

def pf_case_key(shape, dtype) -> str:
    return f"{shape[0]}x{shape[-1]}:{dtype}"


def make_prefill(shape=(PF_HEADS, 1024), dtype="float16", values="randn", seed=0):
    """Host q, k, v [heads, N, 72] fp16. shape = (heads, N). values as make_decode's (large: q
    and k times 12; constant: every key equal; nan: a NaN in q of head 0 row 0, in k of the last
    head at N // 2, in v of head 0 at the last key, dim 5)."""
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


def prefill_bytes(q, k, v, *_):
    """q, k and v read once, o written once."""
    return int(4 * q.nbytes)


def prefill_flops(N, heads=PF_HEADS, d=PF_D) -> float:
    """QK^T and PV: 2 x (2 N^2 d) per head (the exact head dim, not the padded one)."""
    return 4.0 * heads * N * N * d


def scores_bytes(N, heads=PF_HEADS) -> int:
    """What the cuBLAS path moves for the scores: S written and read (softmax), P written and read
    (P.V), fp16: 4 x heads x N^2 x 2 bytes."""
    return 4 * heads * N * N * 2


# ---- prefill: launchers --------------------------------------------------------------------------

def _pf_check(q, k, v, out):
    require(q, "q", dtype="float16", ndim=3, align=16)
    H, N, d = q.shape
    if d != PF_D:
        raise ValueError(f"q: expected [heads, N, {PF_D}], got {tuple(q.shape)}")
    require(k, "k", dtype="float16", shape=q.shape, align=16)
    require(v, "v", dtype="float16", shape=q.shape, align=16)
    require(out, "out", dtype="float16", shape=q.shape, align=16)
    return H, N


def _alloc_pf(q, *_):
    import cupy
    require(q, "q", dtype="float16", ndim=3)
    return cupy.empty_like(q)


INT32_ELEMS = 2 ** 31 - 64     # the most elements lab 05's softmax takes in one call


def _cublas_path(q, k, v, out=None):
    """The report's path (lab 06's): one cuBLAS strided-batched GEMM for QK^T (scale in alpha) into
    [H, N, N] fp16 scores, lab 05's softmax kernel into probabilities, one GEMM for P.V."""
    from . import vision as V
    from .vit_block import bgemm
    out = _alloc_pf(q) if out is None else out
    H, N = _pf_check(q, k, v, out)
    if H and N:
        s = _scratch("pf_scores", (H, N, N), np.float16, only_one=True)
        p = _scratch("pf_probs", (H, N, N), np.float16, only_one=True)
        bgemm(q, k, s, trans_b=True, alpha=PF_SCALE)
        per = max(1, INT32_ELEMS // (N * N))    # lab 05's softmax indexes with int32: a few heads per call
        for h in range(0, H, per):
            V.softmax(s[h:h + per], out=p[h:h + per])
        bgemm(p, v, out, trans_b=False)
    return out


def _need_sm80(step):
    from .core.device import info
    arch = info()["arch"]
    if int(arch.split("_")[1]) < 80:
        raise RuntimeError(f"step {step} needs sm_80 or newer (mma.sync m16n8k16, ldmatrix, cp.async); "
                           f"this GPU is {arch}: skip it")


PF_SMEM = {"attention_12_prefill_mma": 2 * 64 * 80 * 2, "attention_13_prefill_cp_async": 4 * 64 * 80 * 2,
           "attention_14_prefill_padded": 4 * 64 * 88 * 2, "attention_15_prefill_two_tiles": 4 * 64 * 88 * 2}


def _pf_launch(kname, q, k, v, out, block=128, rows=64):
    out = _alloc_pf(q) if out is None else out
    H, N = _pf_check(q, k, v, out)
    if H and N:
        smem = PF_SMEM.get(kname, 0)
        if smem:
            _need_sm80(kname[10:])
        grid = (N, H) if rows == 1 else (-(-N // rows), H)
        launch(FAMILY, kname, grid, (block,), (q, k, v, out, N, PF_SCALE * LOG2E), smem)
    return out


def _row(q, k, v, out=None):
    return _pf_launch("attention_11_prefill_row", q, k, v, out, rows=1)


def _mma(q, k, v, out=None):
    return _pf_launch("attention_12_prefill_mma", q, k, v, out)


def _cp_async(q, k, v, out=None):
    return _pf_launch("attention_13_prefill_cp_async", q, k, v, out)


def _padded(q, k, v, out=None):
    return _pf_launch("attention_14_prefill_padded", q, k, v, out)


def _two_tiles(q, k, v, out=None):
    return _pf_launch("attention_15_prefill_two_tiles", q, k, v, out, rows=128)


PF_VARIANTS = {
    "01_cublas": variant(dtypes=("float16",), alloc_out=_alloc_pf, overflow_safe=False, plan=False)(_cublas_path),
    "11_row": variant(dtypes=("float16",), alloc_out=_alloc_pf)(_row),
    "12_mma": variant(dtypes=("float16",), alloc_out=_alloc_pf, min_arch=80)(_mma),
    "13_cp_async": variant(dtypes=("float16",), alloc_out=_alloc_pf, min_arch=80)(_cp_async),
    "14_padded": variant(dtypes=("float16",), alloc_out=_alloc_pf, min_arch=80)(_padded),
    "15_two_tiles": variant(dtypes=("float16",), alloc_out=_alloc_pf, min_arch=80)(_two_tiles),
}
prefill = PF_VARIANTS["15_two_tiles"]


def _sdpa_prefill(q, k, v):
    torch = _torch()
    if torch is None:
        return None
    qt, kt, vt = (torch.from_dlpack(a).unsqueeze(0) for a in (q, k, v))
    F = torch.nn.functional
    return lambda: F.scaled_dot_product_attention(qt, kt, vt)


SDPA_PF = "torch SDPA"
PF_BASELINES = {SDPA_PF: _sdpa_prefill}
PF_NS = (64, 256, 1024, 4096, 16384)
PF_CHECK_CASES = [((2, n), val) for n in (1, 2, 3, 63, 127, 1000, 4097)
                  for val in ("randn", "large", "constant", "nan")]


def then(text: str, why: str) -> str:
    """A computed comparison sentence, with its explanation added only when it was measured."""
    return text if "not measured" in text else text + why


def prefill_compare(min_n=64, row_n=1024):
    """The prefill ladder at N >= min_n. Live, step 11 is timed at N = row_n only (it takes
    milliseconds beyond) and the cuBLAS path where its N^2 scores fit in half the free memory;
    without a GPU, every recorded row (make bench times every step at every N)."""
    import pandas as pd
    from .core import bench
    from .core.device import is_live
    cases = [c for c in PREFILL.record_cases if c[0][1] >= min_n]
    if not is_live():
        return bench.compare(PREFILL, cases, host=False)
    import cupy
    room = cupy.cuda.Device().mem_info[0] // 2
    held = lambda n: 2 * PF_HEADS * n * n * 2                      # noqa: E731  S and P, fp16, [H, N, N] each
    parts = [bench.compare(PREFILL, [c], host=False, names=[n for n in PF_VARIANTS if n != "11_row" and
                                                           (n != "01_cublas" or held(c[0][1]) < room)])
             for c in cases]
    parts.append(bench.compare(PREFILL, [c for c in cases if c[0][1] == row_n] or cases[:1], names=["11_row"],
                               baselines=False, host=False))
    for k in [k for k in _SCRATCH if k[0] in ("pf_scores", "pf_probs")]:
        del _SCRATCH[k]                                            # gigabytes at large N: not kept for later cells
    return pd.concat(parts, ignore_index=True)


def pf_vs_sdpa(N):
    """time(best variant) / time(SDPA) at N, with its band (<= 1.4 is the target)."""
    def measure(df):
        from .core.results import Measured, ratio_band
        c = pf_case_key((PF_HEADS, N), "float16")
        name = best_variant(df, c)[0]
        return ratio_band(df, SDPA_PF, name, c) if name else Measured(float("nan"), float("nan"), float("nan"))
    return measure


def pf_vs_cublas(df, min_n=1024):
    """Worst over N >= min_n of time(cuBLAS path) / time(best flash step, 11..15), with its band."""
    from .core.results import ratio_band
    d = _rows(df, "variant")
    if d is None or len(d) == 0:
        return _worst([])
    out = []
    for case in d[d["cols"] >= min_n]["case"].unique():
        g = d[(d["case"] == case) & (d["name"] != "01_cublas")]
        if len(g):
            out.append(ratio_band(df, str(g.loc[g["median_us"].idxmin(), "name"]), "01_cublas", case))
    return _worst(out)


PREFILL = Family(
    name="attention_prefill", kernels=FAMILY, variants=PF_VARIANTS, reference=reference_prefill,
    make_input=make_prefill, bytes_moved=prefill_bytes, check_cases=PF_CHECK_CASES,
    record_cases=[((PF_HEADS, n), "float16") for n in PF_NS], baselines=PF_BASELINES,
    shapes={f"ViT prefill, N = {n}": (PF_HEADS, n) for n in PF_NS},
    default={"float16": "15_two_tiles"}, case_key=pf_case_key, tolerance=_tolerance,
    limiters=tuple((name, (PF_HEADS, 4096), kernel) for name, kernel in
                   (("14_padded", None), ("15_two_tiles", None), (SDPA_PF, TORCH_ATTN_KERNELS))),
    targets=(Target("time(best step) / time(torch SDPA) at N = 4096", pf_vs_sdpa(4096), 1.4, below=True),
             Target("time(best step) / time(torch SDPA) at N = 16384", pf_vs_sdpa(16384), 1.4, below=True),
             Target("time(cuBLAS path) / time(best flash step), worst at N >= 1024", pf_vs_cublas, 1.0)),
    about="Qwen3-VL ViT prefill attention: 16 heads x 72, non-causal")


# ---- what limits them: sentences from the recorded Nsight Compute readings (results.limiters) -----------

NO_COUNTERS = "*No Nsight Compute readings recorded yet (`make ncu` on a GPU with ncu): no counter-based verdict.*"


def _stall(lim, col):
    st = lim.loc[[i for i in lim.index if i.startswith("stall:")], col]
    return st.idxmax()[7:], float(st.max())


def prefill_limits_text(lim, n=4096) -> str:
    """What limits the prefill steps and SDPA at N = n, read from results.limiters(PREFILL)."""
    c = f"{PF_HEADS}x{n}:float16"
    a, b, t = (f"{x} @ {c}" for x in ("14_padded", "15_two_tiles", SDPA_PF))
    if lim is None or not {a, b, t} <= set(lim.columns):
        return NO_COUNTERS
    v = lambda row, col: float(lim.loc[row, col])            # noqa: E731
    tp, sm, occ = "tensor pipe busy (%)", "shared memory busy (%)", "achieved occupancy (%)"
    stall, per = _stall(lim, b)
    return (f"At N = {n}, in `14_padded` shared memory is busy **{v(sm, a):.0f}%** of the time and the tensor "
            f"pipe **{v(tp, a):.0f}%**: reading the fragments takes longer than using them. In `15_two_tiles`, "
            f"where each fragment feeds twice the mma's, shared memory falls to **{v(sm, b):.0f}%** and the tensor "
            f"pipe rises to **{v(tp, b):.0f}%**; SDPA's kernel keeps it at **{v(tp, t):.0f}%**. No unit is "
            f"saturated in step 15: it is held by latency. It runs at {v(occ, b):.0f}% occupancy "
            f"({v('registers per thread', b):.0f} registers a thread), its issue slots are busy "
            f"{v('issue slots busy (%)', b):.0f}% of the cycles, and its warps wait most on *{stall}* ({per:.2f} "
            f"cycles per issued instruction): one warp's mma → softmax → mma chain, with too few warps beside "
            f"it to fill the gaps. SDPA's kernel launches {v('grid size', t):.0f} blocks at {v(occ, t):.0f}% "
            f"occupancy and keeps the tensor pipe busier while issuing in fewer cycles "
            f"({v('issue slots busy (%)', t):.0f}%): more work per instruction, and its stalls overlapped.")


def decode_limits_text(lim, long=32768, short=1024) -> str:
    """What limits step 05 and SDPA at a long and a short KV length, from results.limiters(DECODE)."""
    col = lambda name, n: f"{name} @ {HQ}x{n}:float16"            # noqa: E731
    cols = [col(x, n) for x in ("05_gqa_tile", SDPA_DEC) for n in (long, short)]
    if lim is None or not set(cols) <= set(lim.columns):
        return NO_COUNTERS
    v = lambda row, name, n: float(lim.loc[row, col(name, n)])     # noqa: E731
    dr, iss, tp = "DRAM throughput (% of peak)", "issue slots busy (%)", "tensor pipe busy (%)"
    return (f"At KV length {long}, `05_gqa_tile` keeps DRAM **{v(dr, '05_gqa_tile', long):.0f}%** busy and "
            f"SDPA **{v(dr, SDPA_DEC, long):.0f}%**. Ours issues an instruction in **{v(iss, '05_gqa_tile', long):.0f}%** "
            f"of the cycles, SDPA's kernel in **{v(iss, SDPA_DEC, long):.0f}%**: our half-warps reduce every key's "
            f"dot product with shuffles and accumulate P·V with FP32 FMAs, while SDPA runs both on the tensor "
            f"cores (tensor pipe {v(tp, SDPA_DEC, long):.0f}% busy; ours {v(tp, '05_gqa_tile', long):.1f}%). "
            f"At length {short} neither is near a roof: DRAM **{v(dr, '05_gqa_tile', short):.0f}%** (ours) and "
            f"**{v(dr, SDPA_DEC, short):.0f}%** (SDPA) over {v('duration (ns)', '05_gqa_tile', short) / 1e3:.1f} and "
            f"{v('duration (ns)', SDPA_DEC, short) / 1e3:.1f} µs: a few µs of launch, ramp and one pass of "
            f"latency, with {v('grid size', '05_gqa_tile', short):.0f} and {v('grid size', SDPA_DEC, short):.0f} blocks.")


def limits_list(lim_dec, lim_pf, long=32768, n=4096) -> str:
    """The counter-based entries of "What limits each step" (decode 05 at a long cache, prefill 14
    and 15 at N = n), each read from the recorded Nsight Compute readings (results.limiters)."""
    tp, sm, occ, iss, dr = ("tensor pipe busy (%)", "shared memory busy (%)", "achieved occupancy (%)",
                            "issue slots busy (%)", "DRAM throughput (% of peak)")
    out = []
    d5 = f"05_gqa_tile @ {HQ}x{long}:float16"
    if lim_dec is not None and d5 in getattr(lim_dec, "columns", ()):
        v = lambda row: float(lim_dec.loc[row, d5])               # noqa: E731
        stall, per = _stall(lim_dec, d5)
        out.append(f"* **Decode 04–05**, at KV length {long}: DRAM {v(dr):.0f}% busy, issue slots {v(iss):.0f}%, "
                   f"at {v(occ):.0f}% occupancy ({v('registers per thread'):.0f} registers a thread); its top stall "
                   f"is *{stall}* ({per:.2f} cycles per instruction). No unit is above "
                   f"{max(v(dr), v(iss)):.0f}% busy: read as too few warps to hide the loads' latency while each "
                   f"key costs CUDA-core instructions (dot products, shuffles, rescales). Tensor cores for the "
                   f"4-head GQA group (as FlashInfer does) are the next step to try, not measured here.")
    else:
        out.append("* **Decode 04–05**: " + NO_COUNTERS)
    c = f"{PF_HEADS}x{n}:float16"
    a, b = f"14_padded @ {c}", f"15_two_tiles @ {c}"
    if lim_pf is not None and {a, b} <= set(getattr(lim_pf, "columns", ())):
        v = lambda row, col: float(lim_pf.loc[row, col])          # noqa: E731
        why = ("shared memory is the busier unit: the `ldmatrix` fragment reads, not the `mma.sync` issue, "
               "set the pace" if v(sm, a) > v(tp, a) else "the tensor pipe is the busier unit: `mma.sync` issue "
               "sets the pace")
        stall, per = _stall(lim_pf, b)
        out.append(f"* **Prefill 13–14**, read at step 14, N = {n}: shared memory {v(sm, a):.0f}% busy against "
                   f"the tensor pipe's {v(tp, a):.0f}%: {why}.")
        out.append(f"* **Prefill 15**: no unit above {max(v(sm, b), v(tp, b), v(iss, b)):.0f}% busy, "
                   f"{v(occ, b):.0f}% occupancy ({v('registers per thread', b):.0f} registers a thread), "
                   f"top stall *{stall}*: latency, one warp's mma → softmax → mma chain with too "
                   f"few warps beside it.")
    else:
        out.append("* **Prefill 13–15**: " + NO_COUNTERS)
    src = lim_pf if lim_pf is not None else lim_dec
    return "\n".join(out) + ("\n\n(Nsight Compute readings of one GPU: the tables above name it.)" if src is not None else "")


# ---- lab 06's block, with its attention both ways ---------------------------------------------------

BLOCK_NS = (1024, 4096)
CUBLAS_BLOCK = "our block, cuBLAS + softmax attention (lab 06)"
FLASH_BLOCK = "our block, flash attention (lab 07)"
SDPA_BLOCK = "torch eager block (SDPA)"


def block_rows(ns=BLOCK_NS, seed=0) -> list:
    """Lab 06's ViT block timed both ways, its cuBLAS + softmax attention and prefill's default
    flash step in its place (vit_block.Block(attention=...)), beside torch's eager block with
    SDPA, on the same weights and input: GPU time, L2 flushed."""
    from . import vit_block as vb
    from .core import bench
    rows = []
    for n in ns:
        gh, gw = vb.grid_for(n)
        for name, att in ((CUBLAS_BLOCK, None), (FLASH_BLOCK, prefill)):
            b = vb.Block(gh, gw, seed=seed, attention=att)
            rows.append({"case": f"N={n}:float16", "cols": n, "name": name, "kind": "variant",
                         **bench.time_fn(lambda: vb.run(b.ops)).row()})
        tb = vb.torch_block(b.W, b.x, gh, gw, sdpa=True)
        if tb is not None:
            rows.append({"case": f"N={n}:float16", "cols": n, "name": SDPA_BLOCK, "kind": "baseline",
                         **bench.time_fn(tb).row()})
        del b, tb
    return rows


def block_compare(ns=BLOCK_NS):
    """block_rows live, or the recorded rows (attention_block.csv), or a loud skip."""
    from .core.results import live_or_recorded
    return live_or_recorded("attention_block", "lab 06's block with each attention beside torch's block with SDPA",
                            lambda: block_rows(ns))


def block_vs_torch(df, n=4096):
    from .core.results import ratio_band
    return ratio_band(df, FLASH_BLOCK, SDPA_BLOCK, f"N={n}:float16")


BLOCK = Family(
    name="attention_block", kernels=FAMILY, record=block_compare,
    targets=(Target("time(torch SDPA block) / time(our block with flash attention) at N = 4096", block_vs_torch, 1.0),),
    about="lab 06's ViT block with lab 07's flash attention in place of cuBLAS + softmax, against torch + SDPA")

FAMILIES = [DECODE, PREFILL, BLOCK]


# ---- an Orin on paper (a model, not a measurement) ------------------------------------------------

ORIN_BOARD = "agx"                       # the AGX Orin of the seeds
ORIN_SMS = _ORIN_SMS[ORIN_BOARD]         # the datasheet figures, kept in one place: kernellab.device
ORIN_GBPS = ORIN_PEAK_GBPS[ORIN_BOARD]


def blocks_per_sm_on(arch: str, threads: int = 128) -> int:
    """Step 05's resident blocks per SM on `arch`, from its ptxas register count (no GPU needed)."""
    from .core.build import occupancy
    occ = occupancy(FAMILY, "05_decode_gqa_tile", threads)
    return int(occ.loc[occ["arch"] == arch, "blocks/SM"].iloc[0])


def orin_decode_model(lengths=DEC_LENGTHS, read_fraction=0.75, gbps=ORIN_GBPS):
    """Predicted µs per decode attention call on an AGX Orin if the kernel reaches `read_fraction`
    of the datasheet bandwidth: bytes / (fraction x GB/s). A model, labelled so."""
    import pandas as pd
    per_sm = blocks_per_sm_on("sm_87")
    rows = []
    for n in lengths:
        b = 2 * HKV * n * D * 2 + 2 * HQ * D * 2
        rows.append({"KV length": n, "MiB read": b / 2**20,
                     "model µs (Orin AGX)": b / (read_fraction * gbps * 1e3),
                     f"chunks (step 05's rule, {ORIN_SMS} SMs x {per_sm} blocks)": chunks_for("05", n, ORIN_SMS, per_sm)})
    df = pd.DataFrame(rows)
    df["source"] = f"model: {read_fraction:.2f} x {gbps:g} GB/s (datasheet), {ORIN_SMS} SMs; not a measurement"
    return df
