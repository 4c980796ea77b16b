"""Lab 08 on the learner's own GPU: the real Qwen sizes (MODELS), the bytes each needs on each path
(need: weights as the decoder stores them, the KV cache, the workspace, a stated margin), the memory
a device has free (free_memory: a discrete GPU's cudaMemGetInfo, an integrated GPU's share of the
CPU's memory), the largest model and path that fit (choose) and the refusal of one that does not,
with the numbers, before anything is allocated (check_fits).

The rule of choose(): the LARGEST Qwen3 size that fits on any path, then on that size the MOST PRECISE
path that fits (float16, then W8A16, then int4). A bigger model in int4 beats a smaller one in fp16:
at a like number of bytes per token it is the better model, and bytes are what a token step costs.

GB here is 1e9 bytes, GiB 2^30 (nvidia-smi's MiB are 2^20; an "80GB" card has 80 GiB)."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import gemv as G
from .config import PATHS, QWEN25_7B, QWEN3_8B, Config
from .weights import layer_shapes, weight_shapes


# ---- the models: the published config.json of each checkpoint ---------------------------------------------
# hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
# vocab_size, rms_norm_eps, rope_theta, tie_word_embeddings of (sources: tests/test_decoder_fit.py):
#   https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json     https://huggingface.co/Qwen/Qwen3-1.7B/blob/main/config.json
#   https://huggingface.co/Qwen/Qwen3-4B/blob/main/config.json       https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
#   https://huggingface.co/Qwen/Qwen3-14B/blob/main/config.json      https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
# Every Qwen3 size: head_dim 128, 8 KV heads, vocab 151936, eps 1e-6, rope_theta 1e6, q/k norm, no biases.

QWEN3_0_6B = Config("Qwen3-0.6B", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072, vocab=151936,
                    tied=True)
QWEN3_1_7B = Config("Qwen3-1.7B", hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=6144, vocab=151936,
                    tied=True)
QWEN3_4B = Config("Qwen3-4B", hidden=2560, layers=36, heads=32, kv_heads=8, head_dim=128, ffn=9728, vocab=151936,
                  tied=True)
QWEN3_14B = Config("Qwen3-14B", hidden=5120, layers=40, heads=40, kv_heads=8, head_dim=128, ffn=17408, vocab=151936)

QWEN3 = (QWEN3_0_6B, QWEN3_1_7B, QWEN3_4B, QWEN3_8B, QWEN3_14B)     # the sizes choose() picks from, smallest first
MODELS = {c.name: c for c in (*QWEN3, QWEN25_7B)}                  # + Qwen2.5-7B (q/k/v biases, no q/k norm)

GB = 1e9
MARGIN_BYTES = 512 * 2 ** 20     # the CUDA context's libraries on a shared-memory device, cuBLAS's handle and
MARGIN_FRACTION = 0.05           # workspace, compiled modules, CuPy's pool rounding and fragmentation: 512 MiB + 5%
CAP_ENV = "KERNELLAB_MEMORY_CAP"
MEMINFO = Path("/proc/meminfo")
TEGRA_RELEASE = Path("/etc/nv_tegra_release")


def param_count(cfg: Config) -> int:
    """Every parameter the checkpoint holds (weight_shapes: the embedding, each layer, the final norm,
    an untied LM head; a tied head is the embedding, counted once)."""
    return sum(math.prod(s) for s in weight_shapes(cfg).values())


def non_embedding_params(cfg: Config) -> int:
    """param_count less the embedding and an untied LM head (the model cards' "Non-Embedding" count)."""
    return param_count(cfg) - cfg.vocab * cfg.hidden * (1 if cfg.tied else 2)


# ---- bytes: weights as the decoder stores them, the KV cache, the workspace ---------------------------------

def linear_bytes(path: str, K: int, M: int) -> int:
    """Device bytes of one [K, M] GEMV weight on `path`, as Decoder._linear stores it: fp16 (2 B each);
    or lab 04's quantiser's arrays (W8A16: int8 + one fp32 scale per row per group of G.GROUP; int4: two
    weights a byte + an fp16 scale and a uint8 zero per group) and, where gemv.pack lays them out for a
    tile-major best step (M a multiple of the group), its tiles Wi (rows padded to 16) and Mi (the
    scales [and zeros] again, 8 bytes a row a group) beside the quantiser's scales (and zeros)."""
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    if path == "float16":
        return 2 * K * M
    g = -(-M // G.GROUP)
    row = M if path == "w8a16" else -(-M // 2)                  # int8, or two int4 weights a byte
    side = K * g * (4 if path == "w8a16" else 2 + 1)            # fp32 scales; or fp16 scales + uint8 zeros
    if not (G.BEST[path].endswith("_tiles") and K and M % G.GROUP == 0):
        return K * row + side
    T = -(-K // 16)                                             # gemv.pack: Wi [T*16 rows] and Mi [T, g, 8, 8 B]
    return T * 16 * row + 64 * T * g + side


def _fused(cfg: Config) -> dict:
    """The decoder's fused GEMV weights {name: (K, M)} (Decoder._linear: q|k|v and gate|up stacked)."""
    s = layer_shapes(cfg)
    return {"qkv": (cfg.q_dim + 2 * cfg.kv_dim, cfg.hidden), "o": s["self_attn.o_proj"],
            "gate_up": (2 * cfg.ffn, cfg.hidden), "down": s["mlp.down_proj"]}


def weight_bytes(cfg: Config, path: str = "float16") -> int:
    """Device bytes of every weight on `path` (Decoder.__init__): each layer's four GEMV weights on the
    path (linear_bytes), its norms (and Qwen3's q/k norms, Qwen2.5's q/k/v biases) in fp16; the
    embedding in fp16 on every path, the LM head fp16 on every path (the embedding itself when tied);
    the final norm."""
    per_layer = sum(linear_bytes(path, K, M) for K, M in _fused(cfg).values())
    per_layer += 2 * 2 * cfg.hidden                                          # input + post-attention norms
    per_layer += 2 * 2 * cfg.head_dim if cfg.qk_norm else 0                  # q_norm, k_norm
    per_layer += 2 * (cfg.q_dim + 2 * cfg.kv_dim) if cfg.qkv_bias else 0     # the q|k|v bias
    table = 2 * cfg.vocab * cfg.hidden
    return cfg.layers * per_layer + table * (1 if cfg.tied else 2) + 2 * cfg.hidden


def kv_bytes(cfg: Config, ctx: int) -> int:
    """The KV cache for ctx positions: K and V, fp16, every layer: 2 x layers x kv_heads x head_dim x ctx x 2 B."""
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * int(ctx) * 2


def workspace_bytes(cfg: Config, path: str, ctx: int, prompt: int | None = None) -> int:
    """The decoder's buffers beside weights and cache (Decoder.__init__ and decoder/prefill.py):
    the token step's fp16 vectors (residual ping-pong, q|k|v, gate|up, SiLU x up, q/k norm, RoPE and
    attention outputs), the quantised paths' fp32 GEMV outputs, the fp32 logits, the history, two
    cos/sin tables (the decoder's own and lab 07's cached one), decode attention's split-KV partials at
    their worst (one chunk per position), and on the fp16 path the prefill's [prompt, ...] buffers
    (prompt defaults to ctx: the longest prompt the cache holds)."""
    H, F, q, kv, hd = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim, cfg.head_dim
    qkv = q + 2 * kv
    step = 2 * (5 * H + qkv * (2 if cfg.qkv_bias else 1) + 3 * F + 3 * q + kv)
    if path != "float16":
        step += 4 * (qkv + H + 2 * F)
    step += 4 * cfg.vocab + 4 * int(ctx) + 12 + 2 * (2 * int(ctx) * (hd // 2) * 4)
    step += 4 * cfg.heads * int(ctx) * (hd + 1)
    n = int(ctx if prompt is None else prompt)
    pre = 2 * n * (4 * H + 3 * q + 3 * kv + 3 * F) if path == "float16" else 0
    return step + pre


def staging_bytes(cfg: Config, path: str) -> int:
    """Host memory a checkpoint's loading holds at its peak, which a shared-memory (integrated) GPU pays
    beside the device copy: load_checkpoint keeps every weight in fp16 on the host until Decoder has
    copied them, plus the larger of its float32 conversion of the largest tensor and, on a quantised path,
    the quantiser's float32 copies of the largest fused matrix (about 20 B an element). A model of the
    loader as it is; a loader that streams tensor by tensor would need only the transients."""
    largest = max(math.prod(s) for s in weight_shapes(cfg).values())
    fused = max(K * M for K, M in _fused(cfg).values())
    return 2 * param_count(cfg) + max(4 * largest, (20 if path != "float16" else 2) * fused)


def need(cfg: Config, path: str = "float16", ctx: int = 4096, prompt: int | None = None, staged: bool = False) -> dict:
    """The bytes `cfg` on `path` with a ctx-position KV cache needs, by part: weights, KV cache,
    workspace, host staging (staged=True: a shared-memory device loading a checkpoint), the margin
    (MARGIN_BYTES + MARGIN_FRACTION of the rest) and the total."""
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    if int(ctx) < 1:
        raise ValueError(f"ctx: expected >= 1 position, got {ctx}")
    parts = {"weights": weight_bytes(cfg, path), "KV cache": kv_bytes(cfg, ctx),
             "workspace": workspace_bytes(cfg, path, ctx, prompt)}
    if staged:
        parts["host staging"] = staging_bytes(cfg, path)
    parts["margin"] = MARGIN_BYTES + int(MARGIN_FRACTION * sum(parts.values()))
    parts["total"] = sum(parts.values())
    return parts


def need_table(models=None, ctx: int = 4096, staged: bool = False):
    """need() of every model and path in GB, one row each (a DataFrame)."""
    import pandas as pd
    rows = []
    for c in (models or MODELS.values()):
        for p in PATHS:
            b = need(c, p, ctx, staged=staged)
            rows.append({"model": c.name, "path": p, "context": ctx, **{k: v / GB for k, v in b.items()}})
    return pd.DataFrame(rows)


# ---- free memory --------------------------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_bytes(text, what: str = CAP_ENV) -> int:
    """'8GB' -> 8e9 bytes: a number (decimals allowed) and an optional unit, B, KB/MB/GB/TB (powers of
    1000; K/M/G/T alone mean the same) or KiB/MiB/GiB/TiB (powers of 1024); a bare number is bytes."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{what}: expected a size such as 8GB, 7.5GiB, 512MiB or a number of bytes, got {text!r}")
        value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{what}: expected a size > 0, got {text!r}")
    return int(value)


def memory_cap(cap=None):
    """(bytes, where) of the smaller of the cap argument and KERNELLAB_MEMORY_CAP; (None, '') when neither."""
    caps = []
    if cap is not None:
        caps.append((parse_bytes(cap, "cap"), "cap="))
    env = os.environ.get(CAP_ENV, "").strip()
    if env:
        caps.append((parse_bytes(env), f"{CAP_ENV}={env}"))
    return min(caps) if caps else (None, "")


def _gpu() -> bool:
    from ..core.device import is_live
    return is_live()


def _integrated() -> bool:
    """An integrated GPU (cudaDevAttrIntegrated; a Jetson's /etc/nv_tegra_release): its memory is the CPU's."""
    try:
        import cupy
        if cupy.cuda.Device(0).attributes.get("Integrated"):
            return True
    except Exception:
        pass
    return TEGRA_RELEASE.exists()


def _mem_get_info() -> int:
    import cupy
    return int(cupy.cuda.runtime.memGetInfo()[0])


def _mem_available() -> int:
    """MemAvailable of /proc/meminfo (free plus reclaimable page cache: what a new allocation can get), bytes."""
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", MEMINFO.read_text(), re.M)
    if not m:
        raise ValueError(f"{MEMINFO}: no MemAvailable line")
    return int(m.group(1)) * 1024


@dataclass(frozen=True)
class Memory:
    """What this device can give the decoder: free bytes (None: no GPU), its kind ('discrete', 'shared':
    an integrated GPU on the CPU's memory, 'none') and where the number came from."""
    free: int | None
    kind: str
    source: str


def device_memory(cap=None) -> Memory:
    """The usable bytes on this device: a discrete GPU's free memory (cudaMemGetInfo); an integrated GPU's
    (a Jetson's) /proc/meminfo MemAvailable, since the GPU allocates from the CPU's memory; no GPU: None.
    A cap (the argument or KERNELLAB_MEMORY_CAP, e.g. '8GB'; the smaller wins) lowers it, to simulate a
    smaller GPU."""
    limit, where = memory_cap(cap)
    if not _gpu():
        return Memory(None, "none", "no CUDA GPU here")
    if _integrated():
        free, kind = _mem_available(), "shared"
        source = "MemAvailable in /proc/meminfo (an integrated GPU shares the CPU's memory)"
    else:
        free, kind, source = _mem_get_info(), "discrete", "the GPU's free memory (cudaMemGetInfo)"
    if limit is not None and limit < free:
        free, source = limit, f"capped by {where} ({source}: {free / GB:.1f} GB)"
    return Memory(free, kind, source)


def free_memory(cap=None) -> int | None:
    """device_memory(cap).free: usable bytes, or None without a GPU."""
    return device_memory(cap).free


# ---- choosing, and refusing -----------------------------------------------------------------------------------

def _resolve(free, cap, staged):
    """(free bytes, where from, staged) for choose / check_fits: given, or measured on this device."""
    if free is not None:
        return parse_bytes(free, "free"), "given", bool(staged)
    mem = device_memory(cap)
    return mem.free, mem.source, (mem.kind == "shared") if staged is None else bool(staged)


def _model(m) -> Config:
    if isinstance(m, Config):
        return m
    if m in MODELS:
        return MODELS[m]
    raise ValueError(f"model: expected a Config or one of {list(MODELS)}, got {m!r}")


def fits(free: int, ctx: int = 4096, models=QWEN3, paths=PATHS, staged: bool = False) -> list:
    """[(cfg, path, need total)] of every model and path that fits `free` bytes, in choose()'s order of
    preference: the largest model first, then float16, W8A16, int4. Configs the GPU kernels cannot run
    (Config.gpu_reason) are left out."""
    out = []
    for c in sorted(models, key=param_count, reverse=True):
        if c.gpu_reason():
            continue
        for p in paths:
            t = need(c, p, ctx, staged=staged)["total"]
            if t <= free:
                out.append((c, p, t))
    return out


def _gb(b) -> str:
    return f"{b / GB:.2f} GB" if b < GB else f"{b / GB:.1f} GB"


def _parts(b: dict) -> str:
    return ", ".join(f"{k} {_gb(v)}" for k, v in b.items() if k != "total")


def choose(free=None, ctx: int = 4096, prefer=None, cap=None, staged=None) -> tuple:
    """(Config, path, reason) of the largest Qwen3 size that fits, on the most precise path that fits it
    (float16 > W8A16 > int4): free bytes (None: this device's, device_memory), a KV cache of ctx positions.
    prefer: a path (the largest size on that path), or a model name / Config (its most precise path that
    fits). staged: count the host copy of a checkpoint's loading (None: on a shared-memory device).
    Without a GPU (and no free given): the smallest model in fp16, and the reason says nothing was measured.
    Nothing fits: ValueError with the smallest need."""
    free, source, staged = _resolve(free, cap, staged)
    models, paths = QWEN3, PATHS
    if prefer in PATHS:
        paths = (prefer,)
    elif prefer is not None:
        models = (_model(prefer),)
    if free is None:
        c, p = min(models, key=param_count), paths[0]
        return c, p, (f"{c.name} {p}: {source}, so nothing was measured; it needs {_gb(need(c, p, ctx)['total'])} "
                      f"with a {ctx}-token KV cache")
    ok = fits(free, ctx, models, paths, staged)
    if not ok:
        c = min(models, key=param_count)
        small = min(need(c, p, ctx, staged=staged)["total"] for p in paths)
        raise ValueError(f"nothing fits: {_gb(free)} free ({source}); the smallest choice, {c.name} on "
                         f"{'/'.join(paths)}, needs {_gb(small)} with a {ctx}-token KV cache (a shorter ctx needs less)")
    c, p, t = ok[0]
    rule = "the largest Qwen3 that fits, on its most precise path that fits" if prefer is None else \
        (f"the largest Qwen3 that fits on {p}" if prefer in PATHS else f"{c.name}'s most precise path that fits")
    b = need(c, p, ctx, staged=staged)
    why = [f"{c.name} ({param_count(c) / 1e9:.2f} B parameters) on {p}, {rule}: it needs {_gb(t)} with a "
           f"{ctx}-token KV cache ({_parts(b)}); {_gb(free)} is free ({source})."]
    order = [(m, q) for m in sorted(models, key=param_count, reverse=True) if not m.gpu_reason() for q in paths]
    i = next(i for i, (m, q) in enumerate(order) if m is c and q == p)
    if i:
        m, q = order[i - 1]
        why.append(f"One step up, {m.name} {q}, needs {_gb(need(m, q, ctx, staged=staged)['total'])}.")
    return c, p, " ".join(why)


def check_fits(cfg: Config, path: str = "float16", ctx: int = 4096, free=None, cap=None, staged=None) -> dict:
    """need(cfg, path, ctx) when it fits the free memory (free: bytes, or None: this device's); a
    ValueError with the numbers (needed, free, and the largest choice that would fit) when it does not,
    before anything is allocated. Without a GPU (and no free given) nothing is checked."""
    free, source, staged = _resolve(free, cap, staged)
    b = need(cfg, path, ctx, staged=staged)
    if free is None or b["total"] <= free:
        return b
    msg = (f"{cfg.name} {path} with a {ctx}-token KV cache needs {_gb(b['total'])} ({_parts(b)}); "
           f"{_gb(free)} is free ({source}): it does not fit.")
    same = fits(free, ctx, (cfg,), PATHS, staged) if not cfg.gpu_reason() else []
    if same:
        msg += f" {cfg.name} fits on {same[0][1]} ({_gb(same[0][2])})."
    ok = fits(free, ctx, QWEN3, PATHS, staged)
    msg += (f" The largest that fits: {ok[0][0].name} {ok[0][1]} ({_gb(ok[0][2])})." if ok else
            " No Qwen3 size fits at this context.")
    lo, hi = 0, int(ctx)                                        # the longest KV cache that fits beside it
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if need(cfg, path, mid, staged=staged)["total"] <= free else (lo, mid - 1)
    if lo:
        msg += f" {cfg.name} {path} fits with a KV cache of at most {lo} tokens."
    raise ValueError(msg)
