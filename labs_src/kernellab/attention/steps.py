"""Lab 07's steps, the Python mirror of kernels/attention.cu: the launchers, their Variants
(DEC_VARIANTS, PF_VARIANTS; decode and prefill, the steps lab 08's decoder calls), the split-KV merge,
RoPE + KV append, and the torch baselines. Shapes and references: reference.py."""
from __future__ import annotations

import functools

import numpy as np

from ..core.launch import host_or_device_index, launch, require, variant, workspace
from .reference import (D, DEC_SCALE, FAMILY, GROUP, HKV, HQ, LOG2E, PF_D, PF_HEADS, PF_SCALE, THETA,
                        make_decode, make_prefill, rope_table_host)

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


MAX_GROUP = 8           # query heads per KV head the decode kernels hold in registers (Qwen3-32B's 64 / 8)
HEAD_DIMS = (64, 128)   # head dims the decode kernels are written for (a key row = 8 or 16 lanes x 16 B)


def layout_reason(hq: int, hkv: int, d: int) -> str | None:
    """Why the decode kernels cannot run hq query heads over hkv KV heads of head dim d (None: they can)."""
    if d not in HEAD_DIMS:
        return f"head dim {d}: the decode kernels take {' or '.join(map(str, HEAD_DIMS))}"
    if hkv < 1 or hq % hkv:
        return f"{hq} query heads over {hkv} KV heads: query heads must be a multiple of KV heads"
    if not 1 <= hq // hkv <= MAX_GROUP:
        return f"a GQA group of {hq // hkv} query heads per KV head: the decode kernels hold 1 to {MAX_GROUP}"
    return None


def specialise(hq: int, hkv: int, d: int) -> tuple:
    """The -D options of the decode kernels for a head layout: () for Qwen3-8B's (the .cu defaults)."""
    group = hq // hkv
    return () if (group, d) == (GROUP, D) else (f"-DDEC_GROUP={group}", f"-DDEC_D={d}")


def _dec_check(q, k, v, length, out):
    """Validate one decode call before any launch; returns (capacity, lens pointer arg, host length,
    head layout (hq, hkv, d))."""
    require(q, "q", dtype="float16", ndim=2, align=16)
    hq, d = q.shape
    require(k, "k_cache", dtype="float16", ndim=3, align=16)
    if k.shape[2] != d:
        raise ValueError(f"k_cache: expected shape [KV heads, capacity, {d}] (q's head dim), got {tuple(k.shape)}")
    why = layout_reason(hq, k.shape[0], d)
    if why:
        raise ValueError(f"q {tuple(q.shape)}, k_cache {tuple(k.shape)}: {why}")
    require(v, "v_cache", dtype="float16", shape=k.shape, align=16)
    require(out, "out", dtype="float16", shape=(hq, d), align=16)
    cap, lay = k.shape[1], (hq, k.shape[0], d)
    if isinstance(length, (int, np.integer)):
        if not 1 <= int(length) <= cap:
            raise ValueError(f"length: expected 1 <= length <= capacity ({cap}), got {int(length)}")
        return cap, np.uint64(0), int(length), lay
    require(length, "length", dtype="int32", shape=(1,))
    return cap, length, cap, lay     # device-side length: the kernels read it (clamped to [0, capacity])


def _alloc_o(q, *_):
    import cupy
    require(q, "q", dtype="float16", ndim=2)       # a bad q is a ValueError, not an allocation
    return cupy.empty(q.shape, cupy.float16)


def _naive(q, k, v, length, out=None):
    """Step 01: scores to memory, softmax in place, P.V: three launches."""
    out = _alloc_o(q) if out is None else out
    cap, lens, L, (hq, hkv, d) = _dec_check(q, k, v, length, out)
    ex = specialise(hq, hkv, d)
    s = _scratch("scores", (hq, cap))
    sl2 = LOG2E / d ** 0.5
    launch(FAMILY, "attention_01_naive_scores", (-(-L // 8), hq), (256,), (q, k, s, lens, L, cap, sl2), extra=ex)
    launch(FAMILY, "attention_01_naive_softmax", (hq,), (256,), (s, lens, L, cap), extra=ex)
    launch(FAMILY, "attention_01_naive_pv", (hq,), (d,), (s, v, out, lens, L, cap), extra=ex)
    return out


def chunks_for(step, length, sms=None, blocks_per_sm=None, kv_heads=HKV) -> int:
    """How many chunks each head's cache is cut into.
    02: 1 (one block per query head). 03, 04: ceil(length / SPLIT_CHUNK).
    05: Little's law. Each block keeps 128 threads x 4 keys x (K + V) x 16 B = 16 KiB in flight;
    one full wave of resident blocks (blocks per SM from the occupancy API x SMs) keeps the most
    bytes in flight the SMs can hold, so the chunks per KV head are floor(wave / KV heads) (one
    block more than a wave would run alone in a second round, doubling the time), but no chunk
    shorter than MIN_CHUNK keys (each chunk costs a 2 KiB partial and a merge)."""
    if step == "02":
        return 1
    if step in ("03", "04"):
        return max(1, -(-length // SPLIT_CHUNK))
    wave = blocks_per_sm * sms
    return int(max(1, min(wave // kv_heads, -(-length // MIN_CHUNK))))


def _smem(group: int, d: int) -> int:
    """Shared memory of the block merge: (row groups of DEC_THREADS) x group x (m, l, d accumulators) fp32."""
    return DEC_THREADS // (d // 8) * group * (2 + d) * 4


@functools.lru_cache(maxsize=None)
def _wave_05(extra=(), group=GROUP, d=D):
    """(SMs, resident blocks per SM) of step 05's kernel, as specialised, on this GPU (occupancy API)."""
    from ..core.bench import blocks_per_sm
    from ..core.build import kernel
    from ..core.device import info
    from ..core.launch import specialised
    k = specialised(FAMILY, "attention_05_decode_gqa_tile", extra) if extra else \
        kernel(FAMILY, "attention_05_decode_gqa_tile")
    return info()["sms"], max(1, blocks_per_sm(k, DEC_THREADS, _smem(group, d)))


def _split(kname, step, q, k, v, length, out):
    out = _alloc_o(q) if out is None else out
    cap, lens, L, (hq, hkv, d) = _dec_check(q, k, v, length, out)
    ex = specialise(hq, hkv, d)
    group = hq // hkv if step in ("04", "05") else 1
    if step == "05":
        sms, bps = _wave_05(ex, hq // hkv, d)
        chunks = chunks_for("05", L, sms, bps, hkv)
    else:
        chunks = chunks_for(step, L)
    chunk_len = -(-L // chunks)
    chunks = -(-L // chunk_len)
    grid = (hq // group, chunks)
    sl2 = LOG2E / d ** 0.5
    if chunks == 1:
        po, pl = out, out          # unused: the kernel writes o itself
    else:
        po = _scratch("part_o", (hq, chunks, d))
        pl = _scratch("part_lse", (hq, chunks))
    launch(FAMILY, kname, grid, (DEC_THREADS,), (q, k, v, out, po, pl, lens, L, cap, sl2, chunk_len),
           _smem(group, d), extra=ex)
    if chunks > 1:
        launch(FAMILY, "attention_03_decode_merge", (hq,), (d,), (po, pl, out, chunks), extra=ex)
    return out


def _head(q, k, v, length, out=None):
    """Step 02: one block per query head, one pass, online softmax."""
    return _split("attention_02_decode_head", "02", q, k, v, length, out)


def _splitkv(q, k, v, length, out=None):
    """Step 03: one block per (query head, chunk of SPLIT_CHUNK keys), then the merge kernel."""
    return _split("attention_03_decode_split", "03", q, k, v, length, out)


def _gqa(q, k, v, length, out=None):
    """Step 04: one block per (KV head, chunk) serves its group of query heads: the cache is read once."""
    return _split("attention_04_decode_gqa", "04", q, k, v, length, out)


def _gqa_tile(q, k, v, length, out=None):
    """Step 05: 4 keys' loads in flight per row group; chunks from SMs and length (Little's law);
    no merge launch when one chunk suffices. The step lab 08's decoder calls."""
    return _split("attention_05_decode_gqa_tile", "05", q, k, v, length, out)


def _dec_variant(fn):
    return variant(dtypes=("float16",), alloc_out=_alloc_o)(fn)


DEC_VARIANTS = {"01_naive": _dec_variant(_naive), "02_head": _dec_variant(_head),
                "03_split": _dec_variant(_splitkv), "04_gqa": _dec_variant(_gqa),
                "05_gqa_tile": _dec_variant(_gqa_tile)}
decode = DEC_VARIANTS["05_gqa_tile"]     # what lab 08 calls: decode(q, k_cache, v_cache, length, out=o)


# ---- step 06: flash decoding in one launch ---------------------------------------------------------

FLASH_KERNEL = "attention_06_decode_gqa_flash"   # (the launcher names it as a literal: its fingerprint finds it)
FLASH_MIN_CHUNK = 32    # step 06: no chunk shorter than this many keys (2 stages of 16: one round trip;
                        # each chunk adds a 2 KiB partial per KV head to the merge)
FLASH_PER_SM = 2        # step 06: blocks per SM the chunk count aims at (at most as many as fit: occupancy)
FLASH_MAX_CHUNKS = 256  # the kernel's DFL_MAX_CHUNKS: the merge keeps a weight per chunk in shared memory
FLASH_SPLIT_FROM = 160  # step 06: one chunk below this many keys (the merge costs more than a chunk saves;
                        # scripts/decode_sweep.py's split tunings chose it)


def flash_chunks(length, kv_heads, sms, resident, min_chunk=FLASH_MIN_CHUNK, per_sm=FLASH_PER_SM,
                 split_from=FLASH_SPLIT_FROM) -> int:
    """Step 06's grid: chunks per KV head. As many as keep min(per_sm, resident) blocks on each of the
    SMs (a wave, not more: a block beyond it would run alone in a second round), but no chunk shorter
    than min_chunk keys (floor(length / min_chunk) chunks at most), and one below split_from keys. The
    kernel applies the same rule to the length it reads on the device, at most this many chunks: a graph
    launched for the capacity runs a shorter length on fewer chunks."""
    if int(length) < split_from:
        return 1
    by_len = max(1, int(length) // min_chunk)
    by_sms = max(1, min(per_sm, resident) * sms // kv_heads)
    return int(max(1, min(by_len, by_sms, FLASH_MAX_CHUNKS)))


@functools.lru_cache(maxsize=None)
def _wave_06(extra=()):
    """(SMs, resident blocks per SM) of step 06's kernel, as specialised, on this GPU (occupancy API;
    its shared memory is static, so the API counts it)."""
    from ..core.bench import blocks_per_sm
    from ..core.build import kernel
    from ..core.device import info
    from ..core.launch import specialised
    k = specialised(FAMILY, FLASH_KERNEL, extra) if extra else kernel(FAMILY, FLASH_KERNEL)
    return info()["sms"], max(1, blocks_per_sm(k, DEC_THREADS, 0))


def _done_counters(kv_heads: int):
    """Step 06's counters, one per KV head: zero when made, and set back to zero by the last block of
    each launch, so every launch (and every replay of a CUDA graph) finds them at zero."""
    import cupy
    key = ("flash_done", kv_heads, cupy.cuda.Device().id)
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = _SCRATCH[key] = workspace(cupy.zeros(kv_heads, cupy.uint32))
    return buf


def flash(q, k, v, length, out=None, min_chunk=FLASH_MIN_CHUNK, per_sm=FLASH_PER_SM, tune=(), merge_launch=False,
          split_from=FLASH_SPLIT_FROM):
    """Step 06's launcher with its knobs: min_chunk, per_sm and split_from (the chunk rule, flash_chunks) and tune,
    -D options of the kernel's build (-DDFL_TILE=32, -DDFL_STAGES=3: keys a stage, stages; -DDFL_ASYNC=0,
    -DDFL_EARLY=0: ablations). merge_launch=True: the ablation of the one launch, step 03's merge kernel
    after the chunks. Same arguments, checks and errors as step 05's; one launch at every length."""
    out = _alloc_o(q) if out is None else out
    cap, lens, L, (hq, hkv, d) = _dec_check(q, k, v, length, out)
    if int(min_chunk) < 1 or int(per_sm) < 1 or int(split_from) < 0:
        raise ValueError(f"min_chunk, per_sm >= 1 and split_from >= 0 expected, got {min_chunk}, {per_sm}, {split_from}")
    ex = specialise(hq, hkv, d) + tuple(tune) + (("-DDFL_ONE_LAUNCH=0",) if merge_launch else ())
    sms, resident = _wave_06(ex)
    chunks = flash_chunks(L, hkv, sms, resident, int(min_chunk), int(per_sm), int(split_from))
    if chunks == 1:
        po, pl = out, out          # unused: the kernel writes o itself
    else:
        po = _scratch("flash_o", (hq, chunks, d))
        pl = _scratch("flash_lse", (hq, chunks))
    launch(FAMILY, "attention_06_decode_gqa_flash", (hkv, chunks), (DEC_THREADS,),
           (q, k, v, out, po, pl, _done_counters(hkv), lens, L, cap, LOG2E / d ** 0.5, int(min_chunk), int(split_from)),
           extra=ex)
    if merge_launch and chunks > 1:
        launch(FAMILY, "attention_03_decode_merge", (hq,), (d,), (po, pl, out, chunks), extra=specialise(hq, hkv, d))
    return out


def _gqa_flash(q, k, v, length, out=None):
    """Step 06: step 05's blocks with K and V staged through shared memory by cp.async, the chunk count
    read from the length on the device, and the merge done by each KV head's last block: one launch."""
    return flash(q, k, v, length, out)


DEC_VARIANTS["06_gqa_flash"] = _dec_variant(_gqa_flash)


def merge(part_o, part_lse, out=None):
    """Launch the lab's merge kernel (step 03's) on partials [H, C, d] and [H, C]: out [H, d] fp16
    (d = 128, or 64). Used by the exercise as the step to time against."""
    import cupy
    require(part_o, "part_o", dtype="float32", ndim=3)
    H, C, d = part_o.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"part_o: expected [H, C, d] with d in {HEAD_DIMS}, got {tuple(part_o.shape)}")
    require(part_lse, "part_lse", dtype="float32", shape=(H, C))
    out = cupy.empty((H, d), cupy.float16) if out is None else out
    require(out, "out", dtype="float16", shape=(H, d))
    launch(FAMILY, "attention_03_decode_merge", (H,), (d,), (part_o, part_lse, out, C),
           extra=() if d == D else (f"-DDEC_D={d}",))
    return out


# ---- RoPE + KV append -----------------------------------------------------------------------------

def rope_table(capacity: int, theta: float = THETA, d: int = D):
    """The cos/sin tables [capacity, d / 2] on the device (built once per capacity, outside any graph)."""
    import cupy
    key = ("rope", capacity, theta, d, cupy.cuda.Device().id)
    t = _SCRATCH.get(key)
    if t is None:
        c, s = rope_table_host(capacity, theta, d)
        t = _SCRATCH[key] = (cupy.asarray(c), cupy.asarray(s))
    return t


def rope_args(q, k, v, k_cache, v_cache, q_out, cos, sin):
    """(hq, hkv, d, capacity, cos, sin) of a RoPE + cache-append call (rope_append, lab 08's qk_norm_rope), its
    arguments checked before any launch; cos/sin None: rope_table(capacity, d=d)."""
    require(q, "q", dtype="float16", ndim=2)
    hq, d = q.shape
    require(k, "k", dtype="float16", ndim=2)
    hkv = k.shape[0]
    require(k, "k", dtype="float16", shape=(hkv, d))
    require(v, "v", dtype="float16", shape=(hkv, d))
    why = layout_reason(hq, hkv, d)
    if why:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}: {why}")
    require(k_cache, "k_cache", dtype="float16", ndim=3)
    if k_cache.shape[0] != hkv or k_cache.shape[2] != d:
        raise ValueError(f"k_cache: expected shape [{hkv}, capacity, {d}], got {tuple(k_cache.shape)}")
    require(v_cache, "v_cache", dtype="float16", shape=k_cache.shape)
    require(q_out, "q_out", dtype="float16", shape=(hq, d))
    cap = k_cache.shape[1]
    if cos is None:
        cos, sin = rope_table(cap, d=d)
    require(cos, "cos", dtype="float32", ndim=2)
    require(sin, "sin", dtype="float32", shape=cos.shape)
    if cos.shape[0] < cap or cos.shape[1] != d // 2:
        raise ValueError(f"cos/sin: expected [>= {cap}, {d // 2}], got {tuple(cos.shape)}")
    return hq, hkv, d, cap, cos, sin


def rope_append(q, k, v, k_cache, v_cache, pos, q_out, cos=None, sin=None):
    """q_out = RoPE(q); k_cache[:, pos] = RoPE(k); v_cache[:, pos] = v. One launch.
    q [hq, d], k and v [hkv, d], caches [hkv, capacity, d], all fp16 (Qwen3-8B: 32 and 8 heads of
    128; d = 64 or 128). pos: a Python int (checked: 0 <= pos < capacity, else ValueError) or an
    int32 device array of one element (read by the kernel, so a CUDA graph replays every token;
    out of range writes nothing). cos/sin: rope_table(capacity, d=d) by default."""
    hq, hkv, d, cap, cos, sin = rope_args(q, k, v, k_cache, v_cache, q_out, cos, sin)
    pptr, phost = host_or_device_index(pos, cap, "pos", "capacity")
    launch(FAMILY, "attention_06_rope_append", (hq + hkv,), (d // 2,),
           (q, k, v, cos, sin, q_out, k_cache, v_cache, pptr, phost, cap, hq, hkv),
           extra=() if d == D else (f"-DDEC_D={d}",))
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
    from ..core.device import live_only, torch as _torch

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
    from ..core.bench import graph
    o = _alloc_o(q)
    return graph(lambda: decode(q, k, v, lens, out=o))


def _floor_dec(q, k, v, lens):
    """The floor: lab 00's fastest reader over as many bytes as the KV cache (one launch, nothing
    computed). No decode kernel, which must read those bytes, can finish sooner on the GPU it runs on."""
    import cupy
    from ..core.bench import read_floor
    return read_floor(cupy.empty(k.nbytes + v.nbytes, cupy.uint8))


SDPA_DEC = "torch SDPA (enable_gqa)"
TORCH_ATTN_KERNELS = "flash|fmha|sdpa|fprop|attn|attention"   # the first such kernel an SDPA call launches
MATMUL_DEC = "torch matmul-softmax-matmul"
GRAPH_DEC = "05_gqa_tile as a CUDA graph"
DEC_FLOOR = "read-only kernel (same cache bytes)"
DEC_BASELINES = {SDPA_DEC: _sdpa_decode, MATMUL_DEC: _matmul_decode, GRAPH_DEC: _graph_05, DEC_FLOOR: _floor_dec}


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
    from .. import vision as V
    from ..vit_block import bgemm
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
    from ..core.device import info
    arch = info()["arch"]
    if int(arch.split("_")[1]) < 80:
        raise RuntimeError(f"step {step} needs sm_80 or newer (mma.sync m16n8k16, ldmatrix, cp.async); "
                           f"this GPU is {arch}: skip it")


PF_SMEM = {"attention_12_prefill_mma": 2 * 64 * 80 * 2, "attention_13_prefill_cp_async": 4 * 64 * 80 * 2,
           "attention_14_prefill_padded": 4 * 64 * 88 * 2, "attention_15_prefill_two_tiles": 4 * 64 * 88 * 2,
           "attention_13_ablate_one_stage": 2 * 64 * 80 * 2, "attention_13_ablate_reg_stages": 4 * 64 * 80 * 2}


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
