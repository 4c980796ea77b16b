"""Lab 08: a Qwen3 decoder that generates tokens with the course's kernels.

What is here, in the order the lab uses it:

Config          Qwen3-8B's shape (QWEN3_8B), a small config with Qwen3-8B's heads that a GPU test
                runs end to end (SMALL), and a tiny one for the CPU tests (TINY); Config.from_hf
                reads a checkpoint's config.json.
weights         random_weights(cfg, seed): the Hugging Face names and layouts, fp16, from a fixed
                seed (NumPy); load_checkpoint(dir, cfg): a real checkpoint's safetensors, parsed
                here with NumPy (8-byte header length, JSON header, raw little-endian tensors).
reference       float64 NumPy: one layer, one token's step with a KV cache, greedy generation,
                and the whole sequence at once (no cache) to check the cache against; with
                fp16_storage=True it rounds every tensor the GPU stores in fp16 (the error bound).
bytes model     bytes_per_token(cfg, path, context): every weight once, the KV cache to the
                current length, the logits; fp16, W8A16 and int4 (the byte counts of lab 04's
                quantisers); orin_model(): those bytes over an Orin's datasheet bandwidth, a
                model, beside the seeds' own tokens/s (seed_figures(), from docs/claims.csv).
new kernels     kernels/decoder.cu: SiLU x up, per-head q/k RMSNorm, the embedding row from a
                device-side token id, the greedy argmax (numpy.argmax's order); launchers with input
                checks, and one Family per op (SILU_MUL, HEAD_NORM, EMBED, ARGMAX) with check cases.
Decoder         the token step on a GPU: embedding -> per layer (lab 02's fused add + RMSNorm,
                lab 04's GEMVs, q/k norm, lab 07's RoPE + KV append and decode attention, SiLU x
                up) -> final norm -> lab 04's logits GEMV -> argmax; the position, the length and
                the token live in device memory, so one CUDA graph replays every token.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import attention as A
from . import gemv as G
from . import rmsnorm as R
from .core.family import Family, Target
from .core.launch import aligned, host_or_device_index, int32_size, launch, require, variant

FAMILY = "decoder"
NAME = "decoder_ops"          # the new kernels' record (their families are ops of one file, as vision's)
DECODER_NAME = "decoder"     # the token step's record: figures/reference/<device>/decoder.csv
U_FP16 = 2.0 ** -11          # unit roundoff of fp16 storage
PATHS = ("float16", "w8a16", "int4")


# ---- the config -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """A Qwen3 decoder's shape. Qwen3 decouples the attention width (heads x head_dim) from the
    residual width (hidden); every norm is RMSNorm with eps; RoPE is rotate-half with base theta."""
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    eps: float = 1e-6
    theta: float = 1_000_000.0
    tied: bool = False           # Qwen3-8B: an untied LM head (its own 151936 x 4096 matrix)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def gpu_reason(self) -> str | None:
        """Why the GPU token step cannot run this config (None when it can): lab 07's decode
        attention and RoPE kernels are written for Qwen3-8B's 32 query heads and 8 KV heads of 128."""
        if (self.heads, self.kv_heads, self.head_dim) != (A.HQ, A.HKV, A.D):
            return (f"{self.name}: {self.heads} query heads / {self.kv_heads} KV heads of {self.head_dim}; "
                    f"lab 07's attention kernels take {A.HQ} / {A.HKV} of {A.D}")
        if self.eps != R.EPS:
            return f"{self.name}: RMSNorm eps {self.eps:g}; lab 02's kernels use {R.EPS:g}"
        if self.hidden % 8 or self.ffn % 8:
            return f"{self.name}: hidden and FFN must be multiples of 8 (16-byte rows for the GEMVs)"
        return None

    @classmethod
    def from_hf(cls, directory, name=None) -> "Config":
        """A Config from a Hugging Face checkpoint's config.json (Qwen3's keys)."""
        path = Path(directory) / "config.json"
        if not path.exists():
            raise ValueError(f"{path}: no config.json in the checkpoint directory")
        c = json.loads(path.read_text())
        try:
            heads = int(c["num_attention_heads"])
            return cls(name=name or c.get("_name_or_path") or Path(directory).name, hidden=int(c["hidden_size"]),
                       layers=int(c["num_hidden_layers"]), heads=heads,
                       kv_heads=int(c.get("num_key_value_heads", heads)),
                       head_dim=int(c.get("head_dim") or c["hidden_size"] // heads),
                       ffn=int(c["intermediate_size"]), vocab=int(c["vocab_size"]),
                       eps=float(c.get("rms_norm_eps", 1e-6)), theta=float(c.get("rope_theta", 1e6)),
                       tied=bool(c.get("tie_word_embeddings", False)))
        except KeyError as e:
            raise ValueError(f"{path}: missing key {e.args[0]!r}") from None


QWEN3_8B = Config("Qwen3-8B", hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, ffn=12288, vocab=151936)
SMALL = Config("small: Qwen3-8B's heads, hidden 512, 4 layers", hidden=512, layers=4, heads=32, kv_heads=8,
               head_dim=128, ffn=1536, vocab=4096)
TINY = Config("tiny (CPU tests)", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=96, vocab=101)


# ---- weights: the Hugging Face names and layouts -------------------------------------------------------

LAYER_KEYS = ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.q_norm",
              "self_attn.k_norm", "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj",
              "mlp.up_proj", "mlp.down_proj")


def layer_shapes(cfg: Config) -> dict:
    """{key: shape} of one layer's weights (nn.Linear layout: [out, in])."""
    H, F, hd = cfg.hidden, cfg.ffn, cfg.head_dim
    return {"input_layernorm": (H,), "self_attn.q_proj": (cfg.q_dim, H), "self_attn.k_proj": (cfg.kv_dim, H),
            "self_attn.v_proj": (cfg.kv_dim, H), "self_attn.q_norm": (hd,), "self_attn.k_norm": (hd,),
            "self_attn.o_proj": (H, cfg.q_dim), "post_attention_layernorm": (H,), "mlp.gate_proj": (F, H),
            "mlp.up_proj": (F, H), "mlp.down_proj": (H, F)}


def lw(i: int, key: str) -> str:
    """The checkpoint name of layer i's weight `key`: model.layers.{i}.{key}.weight."""
    return f"model.layers.{i}.{key}.weight"


def weight_shapes(cfg: Config) -> dict:
    """{checkpoint name: shape} of every weight the decoder reads, in the Hugging Face layout."""
    out = {"model.embed_tokens.weight": (cfg.vocab, cfg.hidden)}
    for i in range(cfg.layers):
        out.update({lw(i, k): s for k, s in layer_shapes(cfg).items()})
    out["model.norm.weight"] = (cfg.hidden,)
    if not cfg.tied:
        out["lm_head.weight"] = (cfg.vocab, cfg.hidden)
    return out


def lm_head(cfg: Config, W: dict):
    return W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]


def random_weights(cfg: Config, seed: int = 0) -> dict:
    """Every weight of `cfg`, fp16, from a fixed seed: linear weights N(0, 1/fan_in) (outputs of
    unit scale), the embedding N(0, 1), norm weights 1 + N(0, 0.1^2). Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(cfg).items():
        x = rng.standard_normal(shape, dtype=np.float32)
        if len(shape) == 1:
            x = 1.0 + 0.1 * x
        elif not name.startswith("model.embed_tokens"):
            x *= 1.0 / math.sqrt(shape[1])
        out[name] = x.astype(np.float16)
    return out


# ---- safetensors, read and written with NumPy -------------------------------------------------------------

ST_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "U8": np.uint8,
             "I16": np.int16, "I32": np.int32, "I64": np.int64, "BF16": np.uint16, "BOOL": np.bool_}
_ST_NAMES = {np.dtype(v): k for k, v in ST_DTYPES.items() if k != "BF16"}


def bf16_to_f32(bits) -> np.ndarray:
    """bfloat16 (its raw uint16 bits) -> float32: the bits are the top half of a float32."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path) -> dict:
    """{name: array} of one .safetensors file, memory-mapped (nothing is read until used):
    8 bytes of little-endian header length N, N bytes of JSON header
    ({name: {dtype, shape, data_offsets: [begin, end]}}, offsets into the bytes after the header),
    then the raw little-endian tensors. BF16 tensors come back as their uint16 bits (bf16_to_f32).
    A malformed file is a ValueError naming the file and the tensor."""
    path = Path(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < 8:
        raise ValueError(f"{path}: {raw.size} bytes, too short for a safetensors header")
    n = int(np.frombuffer(raw[:8].tobytes(), "<u8")[0])
    if 8 + n > raw.size:
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({raw.size} bytes)")
    try:
        header = json.loads(raw[8:8 + n].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: the header is not JSON ({e})") from None
    body = raw[8 + n:]           # a view: only its size is used; tensors are views of the mapped file
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = ST_DTYPES.get(meta.get("dtype"))
        if dt is None:
            raise ValueError(f"{path}: tensor {name!r} has dtype {meta.get('dtype')!r}, not one of {sorted(ST_DTYPES)}")
        shape = tuple(int(s) for s in meta["shape"])
        b, e = (int(x) for x in meta["data_offsets"])
        want = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        if e - b != want or e > body.size or b < 0:
            raise ValueError(f"{path}: tensor {name!r} {meta['dtype']}{list(shape)} needs {want} bytes, "
                             f"its offsets [{b}, {e}) give {e - b} (file body {body.size} bytes)")
        count = want // np.dtype(dt).itemsize
        out[name] = (np.frombuffer(raw, np.dtype(dt).newbyteorder("<"), count, 8 + n + b).reshape(shape) if count
                     else np.zeros(shape, dt))
    return out


def write_safetensors(path, tensors: dict, metadata: dict | None = None, codes: dict | None = None) -> Path:
    """Write {name: array} as one .safetensors file (the format read_safetensors reads): tensors
    in name order, back to back, little-endian; the JSON header padded with spaces to a multiple of
    8 bytes, as the safetensors library writes it. codes={name: "BF16"} writes a uint16 array
    as bfloat16 bits (as Qwen3's own checkpoints are stored)."""
    path = Path(path)
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        a = np.asarray(tensors[name], order="C")          # (ascontiguousarray would make a scalar 1-D)
        code = (codes or {}).get(name) or _ST_NAMES.get(a.dtype.newbyteorder("="))
        if code is None:
            raise ValueError(f"{name}: dtype {a.dtype} has no safetensors code here")
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)            # back to back: the format allows no holes between tensors
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for blob in blobs:
            f.write(blob)
    return path


def load_checkpoint(directory, cfg: Config | None = None) -> tuple:
    """(cfg, weights) of a Hugging Face Qwen3 checkpoint in a local directory: config.json (when
    cfg is None) and every *.safetensors file in it (the shards of model.safetensors.index.json).
    Each weight the decoder reads is checked by name and shape and converted to fp16 (a bf16
    checkpoint's values above 65504 would become inf: the count is reported). A missing tensor,
    a wrong shape or a name in two shards is a ValueError; tensors the decoder does not read are
    ignored (rotary buffers, a tied lm_head)."""
    directory = Path(directory)
    cfg = cfg or Config.from_hf(directory)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory}: no .safetensors files")
    found, where = {}, {}
    for f in files:
        for name, a in read_safetensors(f).items():
            if name in found:
                raise ValueError(f"{name!r} is in both {where[name].name} and {f.name}")
            found[name], where[name] = a, f
    out, overflow = {}, 0
    for name, shape in weight_shapes(cfg).items():
        if name not in found:
            near = [n for n in found if n.split(".")[-2:] == name.split(".")[-2:]][:3]
            raise ValueError(f"{directory}: missing tensor {name!r} (expected {list(shape)} for {cfg.name})"
                             + (f"; similar names: {near}" if near else ""))
        a = found[name]
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"{name} in {where[name].name}: expected shape {list(shape)} for {cfg.name}, "
                             f"got {list(a.shape)}")
        f32 = bf16_to_f32(a) if a.dtype == np.uint16 else np.asarray(a, np.float32)
        with np.errstate(over="ignore"):
            h = f32.astype(np.float16)
        overflow += int(np.isinf(h).sum() - np.isinf(f32).sum())
        out[name] = h
    if overflow:
        print(f"load_checkpoint: {overflow} values beyond fp16's range became inf")
    return cfg, out


# ---- the float64 reference ------------------------------------------------------------------------------

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
    """The float64 reference's KV cache: k, v [layers, kv_heads, capacity, head_dim] and the
    position of the next token."""

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
    q = r(_mv(W[lw(i, "self_attn.q_proj")], x)).reshape(cfg.heads, cfg.head_dim)
    k = r(_mv(W[lw(i, "self_attn.k_proj")], x)).reshape(cfg.kv_heads, cfg.head_dim)
    v = r(_mv(W[lw(i, "self_attn.v_proj")], x)).reshape(cfg.kv_heads, cfg.head_dim)
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
    logits, new = [], []
    for t in prompt:
        logits.append(reference_step(cfg, W, t, cache, fp16_storage))
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
        P = {k: np.asarray(W[lw(i, k)], np.float64) for k in LAYER_KEYS}
        x = ref_rmsnorm(h, P["input_layernorm"], cfg.eps)
        q = (x @ P["self_attn.q_proj"].T).reshape(T, cfg.heads, hd)
        k = (x @ P["self_attn.k_proj"].T).reshape(T, cfg.kv_heads, hd)
        v = (x @ P["self_attn.v_proj"].T).reshape(T, cfg.kv_heads, hd)
        q = ref_rope(ref_rmsnorm(q, P["self_attn.q_norm"], cfg.eps), pos, cfg.theta)
        k = ref_rope(ref_rmsnorm(k, P["self_attn.k_norm"], cfg.eps), pos, cfg.theta)
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


# ---- the bytes-per-token model ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Q:
    """Bytes per row of a [K, M] weight on one path, from lab 04's quantisers' own outputs."""
    path: str

    def row_bytes(self, M: int) -> int:
        if self.path == "float16":
            return 2 * M
        w = np.zeros((1, M), np.float32)
        parts = G.quantize_int8(w) if self.path == "w8a16" else G.quantize_int4(w)
        return int(sum(a.nbytes for a in parts))


def linears(cfg: Config) -> dict:
    """{name: (K, M)} of one layer's GEMVs as the decoder runs them: q, k, v fused into one
    [q_dim + 2 kv_dim, hidden] matrix, gate and up fused into one [2 ffn, hidden]."""
    return {"qkv": (cfg.q_dim + 2 * cfg.kv_dim, cfg.hidden), "o": (cfg.hidden, cfg.q_dim),
            "gate_up": (2 * cfg.ffn, cfg.hidden), "down": (cfg.hidden, cfg.ffn)}


def bytes_per_token(cfg: Config = QWEN3_8B, path: str = "float16", context: int = 1) -> dict:
    """The bytes one token's step must move, by part: every layer's weights once (on `path`: fp16,
    or lab 04's int8 per-group W8A16 and AWQ-style int4 formats, counted from its quantisers), the
    norms' weights, one embedding row, the LM head (fp16 on every path, as AWQ checkpoints keep
    it), the KV cache to `context` (the current length: K and V, fp16, every layer), and the logits
    (fp32, written by the LM head and read by the argmax). Activations (tens of KB) are left out."""
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    if context < 1:
        raise ValueError(f"context: expected >= 1 (the token itself), got {context}")
    q = _Q(path)
    per_layer = sum(K * q.row_bytes(M) for K, M in linears(cfg).values())
    norms = 2 * (2 * cfg.hidden + 2 * cfg.head_dim)
    parts = {"layer weights": cfg.layers * per_layer, "norm weights": cfg.layers * norms + 2 * cfg.hidden,
             "embedding row": 2 * cfg.hidden, "LM head": 2 * cfg.vocab * cfg.hidden,
             "KV cache": cfg.layers * 2 * cfg.kv_dim * context * 2, "logits": 2 * 4 * cfg.vocab}
    parts["total"] = sum(parts.values())
    return parts


def bytes_table(cfg: Config = QWEN3_8B, contexts=(1, 512, 4096)):
    """bytes_per_token for every path and context, in GB (1e9 bytes), one row each."""
    import pandas as pd
    rows = []
    for path in PATHS:
        for n in contexts:
            b = bytes_per_token(cfg, path, n)
            rows.append({"path": path, "context": n, **{k: v / 1e9 for k, v in b.items()}})
    return pd.DataFrame(rows)


ORIN_BOARD = "agx"        # the 16-SM AGX Orin of the seeds (docs/sources.md: 204.8 GB/s)
SEED_ROWS = {"fp16": ("decoder-005", "decoder-015", "decoder-031"), "AWQ": ("decoder-007", "decoder-017", "decoder-033")}


def seed_figures():
    """The seeds' own Qwen3-8B decode tokens/s on the Orin, read from docs/claims.csv (rows
    SEED_ROWS): one row per claim with its before/after figures."""
    import pandas as pd
    from .core.results import claims_file
    c = claims_file()
    rows = []
    for kind, ids in SEED_ROWS.items():
        for rid in ids:
            r = c[c["id"] == rid]
            if r.empty:
                continue
            r = r.iloc[0]
            m = re.search(r"([0-9.]+)\s*->\s*([0-9.]+)\s*tok/s", r["claim"])
            if m:
                rows.append({"model": f"Qwen3-8B {kind}", "seed": r["seed"], "claim id": rid,
                             "tokens/s before": float(m.group(1)), "tokens/s after": float(m.group(2))})
    return pd.DataFrame(rows)


def orin_model(cfg: Config = QWEN3_8B, contexts=(1, 512, 4096), fractions=(1.0, 0.75), board=ORIN_BOARD):
    """An Orin on paper (a MODEL, not a measurement): tokens/s = fraction x the board's datasheet
    bandwidth / bytes per token, per path and context, for each fraction of that bandwidth a
    token step might reach (1.0: the datasheet ceiling, which no kernel reaches)."""
    import pandas as pd
    from .core.device import ORIN_PEAK_GBPS
    gbps = ORIN_PEAK_GBPS[board]
    rows = []
    for path in PATHS:
        for n in contexts:
            b = bytes_per_token(cfg, path, n)["total"]
            row = {"path": path, "context": n, "GB per token": b / 1e9}
            for f in fractions:
                row[f"tokens/s at {f:.2f} x {gbps:g} GB/s (model)"] = f * gbps * 1e9 / b
            rows.append(row)
    df = pd.DataFrame(rows)
    df["source"] = f"model: bytes / (fraction x {gbps:g} GB/s, Orin {board.upper()} datasheet); not a measurement"
    return df


def seed_read_fraction(tokens_s: float, path: str = "float16", context: int = 1, cfg: Config = QWEN3_8B,
                       board=ORIN_BOARD) -> float:
    """The fraction of the Orin's datasheet bandwidth a measured tokens/s implies on this model:
    tokens/s x bytes per token / bandwidth (a model of what the seed's engine moved)."""
    from .core.device import ORIN_PEAK_GBPS
    return tokens_s * bytes_per_token(cfg, path, context)["total"] / (ORIN_PEAK_GBPS[board] * 1e9)


# ---- the new kernels: launchers ----------------------------------------------------------------------------

THREADS = 256
ARGMAX_THREADS = 256
ARGMAX_MAX_BLOCKS = 256      # the first pass's blocks (and pairs) at most: the second pass is one block
_scratch = A._scratch      # one cache of reused device buffers (graph-safe after the eager call)


def _alloc_like(x, *_):
    import cupy
    require(x, "gate", dtype="float16", ndim=1)
    return cupy.empty(x.shape, cupy.float16)


@variant(dtypes=("float16",), alloc_out=_alloc_like)
def silu_mul(gate, up, out=None):
    """out = SiLU(gate) * up, fp16 [n] each (gate and up may be views into one [2n] GEMV output)."""
    require(gate, "gate", dtype="float16", ndim=1)
    n = int32_size(gate.shape[0])
    require(up, "up", dtype="float16", shape=(n,))
    if out is None:
        out = _alloc_like(gate)
    require(out, "out", dtype="float16", shape=(n,))
    if n:
        ok = int(aligned(16, gate, up, out))
        launch(FAMILY, "decoder_01_silu_mul", (-(-n // (THREADS * 8)),), (THREADS,), (gate, up, out, n, ok))
    return out


def _alloc_qk(q, k, *_):
    import cupy
    require(q, "q", dtype="float16", ndim=2)
    require(k, "k", dtype="float16", ndim=2)
    return cupy.empty(q.shape, cupy.float16), cupy.empty(k.shape, cupy.float16)


@variant(dtypes=("float16",), alloc_out=_alloc_qk)
def head_norm(q, k, wq, wk, out=None, eps=1e-6):
    """(RMSNorm(q rows) * wq, RMSNorm(k rows) * wk): q [nq, d], k [nk, d], wq, wk [d], fp16;
    out = (q_out, k_out) shaped like q and k."""
    require(q, "q", dtype="float16", ndim=2)
    nq, d = q.shape
    require(k, "k", dtype="float16", ndim=2)
    if k.shape[1] != d:
        raise ValueError(f"k: expected [nk, {d}] (q's head dim), got {tuple(k.shape)}")
    require(wq, "q_norm weight", dtype="float16", shape=(d,))
    require(wk, "k_norm weight", dtype="float16", shape=(d,))
    qo, ko = _alloc_qk(q, k) if out is None else out
    require(qo, "out[0] (q)", dtype="float16", shape=q.shape)
    require(ko, "out[1] (k)", dtype="float16", shape=k.shape)
    rows = nq + k.shape[0]
    int32_size(rows * d)
    if rows and d:
        launch(FAMILY, "decoder_02_head_norm", (-(-rows // 4),), (128,), (q, k, wq, wk, qo, ko, nq, k.shape[0], d, eps))
    return qo, ko


def _alloc_row(table, *_):
    import cupy
    require(table, "table", dtype="float16", ndim=2)
    return cupy.empty((table.shape[1],), cupy.float16)


@variant(dtypes=("float16",), alloc_out=_alloc_row)
def embed(table, token, out=None):
    """out = table[token]: table [vocab, hidden] fp16; token a Python int (checked: 0 <= token <
    vocab, else ValueError) or an int32 device array of one element (read by the kernel, so a
    CUDA graph replays every token; an id out of range gives a row of NaN, never a wild read)."""
    require(table, "table", dtype="float16", ndim=2)
    V, H = table.shape
    int32_size(V), int32_size(H)         # int32 ids and columns; the row offset is 64-bit in the kernel
    tptr, thost = host_or_device_index(token, V, "token", "vocab")
    out = _alloc_row(table) if out is None else out
    require(out, "out", dtype="float16", shape=(H,))
    if H:
        ok = int(H % 8 == 0 and aligned(16, table, out))
        launch(FAMILY, "decoder_03_embed", (-(-H // (THREADS * 8)),), (THREADS,), (table, tptr, thost, out, V, H, ok))
    return out


def argmax_blocks(n: int) -> int:
    """The first pass's blocks for n logits: one per 2048 (8 per thread), at most ARGMAX_MAX_BLOCKS."""
    return max(1, min(ARGMAX_MAX_BLOCKS, -(-n // (ARGMAX_THREADS * 8))))


def _alloc_token(x, *_):
    import cupy
    return cupy.empty((1,), cupy.int32)


def argmax_into(x, token, state=None, history=None):
    """token[0] = numpy.argmax(x) (x fp32 [n], n >= 1; token int32 [1]). With state (int32 [2]:
    position, length) the second pass also writes history[position] = token (when position <
    len(history)) and adds 1 to both: the token step's bookkeeping, inside its last launch."""
    require(x, "logits", dtype="float32", ndim=1)
    n = int32_size(x.shape[0])
    if n == 0:
        raise ValueError("logits: argmax of an empty array")
    require(token, "token", dtype="int32", shape=(1,))
    cap, sptr, hptr = 0, np.uint64(0), np.uint64(0)
    if state is not None:
        require(state, "state", dtype="int32", shape=(2,))
        sptr = state
        if history is not None:
            require(history, "history", dtype="int32", ndim=1)
            hptr, cap = history, history.shape[0]
    blocks = argmax_blocks(n)
    pv = _scratch("argmax_v", (ARGMAX_MAX_BLOCKS,), np.float32)
    pi = _scratch("argmax_i", (ARGMAX_MAX_BLOCKS,), np.int32)
    launch(FAMILY, "decoder_04_argmax_blocks", (blocks,), (ARGMAX_THREADS,), (x, n, pv, pi, int(aligned(16, x))))
    launch(FAMILY, "decoder_05_argmax_final", (1,), (ARGMAX_THREADS,), (pv, pi, blocks, token, sptr, hptr, cap))
    return token


@variant(dtypes=("float32",), alloc_out=_alloc_token)
def argmax(x, out=None):
    """numpy.argmax of fp32 logits [n] into an int32 [1] on the device (two launches)."""
    require(x, "logits", dtype="float32", ndim=1)
    return argmax_into(x, _alloc_token(x) if out is None else out)


# ---- the new kernels: inputs, references, families ------------------------------------------------------------

def _key(op):
    return lambda shape, dtype="float16": f"{op}:{'x'.join(map(str, shape))}:{dtype}"


def _silu_input(shape, dtype="float16", values="randn", seed=0):
    """(gate, up) fp16 [n]. large: gate and up ~ N(0, 1) x 300 (products overflow fp16 to inf, as in
    float64 rounded to fp16); hostile: NaN, +-inf, +-65504 and a subnormal in gate and up."""
    (n,) = shape
    rng = np.random.default_rng(seed)
    g, u = rng.standard_normal(n) * 3, rng.standard_normal(n)
    if values == "large":
        g, u = g * 100, u * 300
    elif values == "hostile":
        for j, (a, b) in enumerate([(np.nan, 1.0), (1.0, np.nan), (np.inf, 2.0), (-np.inf, 2.0), (65504.0, 65504.0),
                                    (-65504.0, 3.0), (6e-8, 1.0), (-30.0, np.inf), (20.0, 0.0), (np.inf, 0.0)]):
            if j < n:
                g[j], u[j] = a, b
    return g.astype(np.float16), u.astype(np.float16)


def reference_silu_mul(gate, up):
    """SiLU(gate) * up = gate / (1 + e^-gate) * up in float64, rounded once to fp16."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (ref_silu(gate) * np.asarray(up, np.float64)).astype(np.float16)


def _head_norm_input(shape, dtype="float16", values="randn", seed=0):
    """(q [nq, d], k [nk, d], wq [d], wk [d]) fp16 from shape (nq, nk, d). large: q, k x 3e3
    (squares past fp16, not fp32); hostile: a NaN row, a +inf, a zero row, +-65504."""
    nq, nk, d = shape
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((nq, d)) * 2, rng.standard_normal((nk, d)) * 2
    wq, wk = 1 + 0.1 * rng.standard_normal(d), 1 + 0.1 * rng.standard_normal(d)
    if values == "large":
        q, k = q * 3e3, k * 3e3
        q, k = np.clip(q, -65504, 65504), np.clip(k, -65504, 65504)
    elif values == "hostile":
        for a in (q, k):
            rows = a.shape[0]
            if rows > 0:
                a[0, d // 2] = np.nan
            if rows > 1:
                a[1, 0] = np.inf
            if rows > 2:
                a[2] = 0.0
            if rows > 3:
                a[3, 0], a[3, -1] = 65504.0, -65504.0
    return q.astype(np.float16), k.astype(np.float16), wq.astype(np.float16), wk.astype(np.float16)


def reference_head_norm(q, k, wq, wk, eps=1e-6):
    """Each row of q and k RMSNorm'd in float64 with its weight, rounded once to fp16."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (ref_rmsnorm(q, wq, eps).astype(np.float16), ref_rmsnorm(k, wk, eps).astype(np.float16))


def _embed_input(shape, dtype="float16", values="randn", seed=0):
    """(table [vocab, hidden] fp16, token int32 [1]). values: randn (a random id), first (0),
    last (vocab - 1), hostile (the row holds NaN, +-inf, +-65504), out_of_range (id = vocab: the
    kernel writes a NaN row), negative (id = -1: a NaN row)."""
    V, H = shape
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((V, H)).astype(np.float16)
    tok = {"first": 0, "last": V - 1, "out_of_range": V, "negative": -1}.get(values, int(rng.integers(V)))
    if values == "hostile":
        for j, val in enumerate((np.nan, np.inf, -np.inf, 65504.0, -65504.0)):
            if j < H:
                table[tok, j] = val
    return table, np.array([tok], np.int32)


def reference_embed(table, token):
    """table[token], or a row of NaN for an id outside [0, vocab) (what the kernel writes)."""
    V, H = table.shape
    t = int(np.asarray(token).reshape(-1)[0])
    return table[t].copy() if 0 <= t < V else np.full(H, np.nan, np.float16)


def _argmax_input(shape, dtype="float32", values="randn", seed=0):
    """(logits fp32 [n],). values: randn; ties (the max at 3 indices: the lowest wins); last (the
    max at n - 1, in the tail); nan (NaN at two places: the first wins, as numpy.argmax); inf (+inf
    twice, -inf elsewhere around it); neg_inf (every value -inf: index 0); constant (all equal: 0);
    zeros (-0.0 before +0.0: equal, the lower index)."""
    (n,) = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    spots = sorted(set(int(i) for i in rng.integers(0, n, 3)))
    if values == "ties":
        x[spots] = x.max() + 1
    elif values == "last":
        x[-1] = x.max() + 1
    elif values == "nan":
        x[spots[-1]] = np.nan
        x[spots[0]] = np.nan
    elif values == "inf":
        x[:] = -np.inf
        x[spots] = np.inf
    elif values == "neg_inf":
        x[:] = -np.inf
    elif values == "constant":
        x[:] = 1.5
    elif values == "zeros":
        x[:] = -1.0
        x[spots[0]] = -0.0
        x[spots[-1]] = 0.0
    return (x,)


def reference_argmax(x):
    """numpy.argmax (the first NaN if any; else the lowest index of the largest value), int32 [1]."""
    return np.array([np.argmax(np.asarray(x))], np.int32)


SILU_MUL = Family(
    name=NAME, kernels=FAMILY, op="silu_mul", case_key=_key("silu_mul"), make_input=_silu_input,
    reference=reference_silu_mul, bytes_moved=lambda g, u, *_: 3 * g.nbytes,
    variants={"01_silu_mul": silu_mul}, default={"float16": "01_silu_mul"},
    shapes={"Qwen3-8B FFN 12288": (12288,)}, record_cases=[((12288,), "float16")],
    check_cases=[((n,), v) for n in (1, 7, 8, 9, 31, 1023, 12288, 12291, 65537) for v in ("randn", "large", "hostile")],
    about="SiLU(gate) x up, fp16, 8 elements per thread with a scalar tail")
HEAD_NORM = Family(
    name=NAME, kernels=FAMILY, op="head_norm", case_key=_key("head_norm"), make_input=_head_norm_input,
    reference=reference_head_norm, bytes_moved=lambda q, k, wq, wk, *_: 2 * (q.nbytes + k.nbytes) + wq.nbytes + wk.nbytes,
    variants={"02_head_norm": head_norm}, default={"float16": "02_head_norm"},
    shapes={"Qwen3-8B q/k heads": (32, 8, 128)}, record_cases=[((32, 8, 128), "float16")],
    check_cases=[(s, v) for s in ((32, 8, 128), (1, 1, 128), (5, 3, 128), (4, 2, 16), (3, 1, 31), (2, 2, 257))
                 for v in ("randn", "large", "hostile")],
    about="Qwen3's per-head RMSNorm of q and k, one warp per head")
EMBED = Family(
    name=NAME, kernels=FAMILY, op="embed", case_key=_key("embed"), make_input=_embed_input,
    reference=reference_embed, bytes_moved=lambda t, tok, *_: 2 * t.shape[1] * t.itemsize + 4,
    variants={"03_embed": embed}, default={"float16": "03_embed"},
    shapes={"Qwen3-8B embedding row": (151936, 4096)}, record_cases=[((4096, 4096), "float16")],
    check_cases=[(s, v) for s in ((1, 1), (7, 9), (300, 4096), (64, 4100), (1000, 1023))
                 for v in ("randn", "first", "last", "hostile", "out_of_range", "negative")],
    about="one embedding row from a device-side token id")
ARGMAX = Family(
    name=NAME, kernels=FAMILY, op="argmax", case_key=_key("argmax"), make_input=_argmax_input,
    reference=reference_argmax, bytes_moved=lambda x, *_: x.nbytes + 4,
    tolerance=lambda *_: {"rtol": 0.0, "atol": 1e-9},      # an index is exact
    variants={"04_argmax": variant(dtypes=("float32",), alloc_out=_alloc_token)(argmax.fn)},
    default={"float32": "04_argmax"}, roof="read",
    shapes={"Qwen3 vocabulary": (151936,)}, record_cases=[((151936,), "float32")],
    check_cases=[((n,), v) for n in (1, 3, 4, 5, 1023, 2049, 151936, 151937, 600_001)
                 for v in ("randn", "ties", "last", "nan", "inf", "neg_inf", "constant", "zeros")],
    about="greedy argmax over fp32 logits: numpy.argmax's order, two passes")
OPS = [SILU_MUL, HEAD_NORM, EMBED, ARGMAX]           # the new kernels; FAMILIES (below) adds the token step


# ---- the token step on the GPU ----------------------------------------------------------------------------

def _gemv_step(path):
    """The lab 04 step a path's projections run: the default fp16 step, or the W8A16 / int4 steps
    (fp32 out, converted back to fp16 by lab 04's conversion step)."""
    return G.VARIANTS[G.BEST[path]]


class GpuOps:
    """The launchers a token step calls, on the GPU: the course's kernels (the best step of each
    lab), or with `swap` = {op: step name} some op run by another step of its lab (the Amdahl
    table): gemv (lab 04's steps), fused (lab 02's add + RMSNorm steps, or 'add + <RMSNorm step>':
    lab 03's add, then that RMSNorm step), decode (lab 07's decode steps)."""

    OPS = ("gemv", "conv", "fused", "logits", "embed", "head_norm", "silu_mul", "argmax", "rope_append", "decode")

    def __init__(self, path, swap: dict | None = None):
        self.gemv = _gemv_step(path)
        self.conv = G.CONVERT.variants[G.CONVERT.default["f32_to_f16"]]
        self.fused = R.FUSED.variants[R.FUSED.default["float16"]]
        self.logits = G.LOGITS.variants[G.LOGITS.default["fp16_f32out"]]
        self.embed, self.head_norm, self.silu_mul, self.argmax = embed, head_norm, silu_mul, argmax_into
        self.rope_append, self.decode = A.rope_append, A.decode
        for op, name in (swap or {}).items():
            setattr(self, op, _step_of(op, name))


def _unpacked(step):
    """A GEMV step that reads the quantiser's arrays, called with a decoder's packed weights (a swap of
    the Amdahl table): the arrays it reads are unpacked once per weight (kept while the swap runs)."""
    if step.__name__.endswith("_tiles"):
        return step
    raw: dict = {}

    def run(*args, out=None):
        w = raw.get(id(args[0]))
        if w is None:
            w = raw[id(args[0])] = G.unpack(*args[:-1])
        return step(*w, args[-1], out=out)
    run.__name__ = step.__name__
    return run


def _step_of(op: str, name: str):
    """The launcher of step `name` for one op of the token step (GpuOps' swap)."""
    if op == "gemv" and name in G.VARIANTS:
        return _unpacked(G.VARIANTS[name])
    if op == "decode" and name in A.DEC_VARIANTS:
        return A.DEC_VARIANTS[name]
    if op == "fused" and name in R.FUSED.variants:
        return R.FUSED.variants[name]
    if op == "fused" and name.startswith("add + ") and name[6:] in R.VARIANTS:
        from . import add
        norm = R.VARIANTS[name[6:]]

        def fused(x, res, w, out):
            add.VARIANTS[add.BEST["float16"]](x, res, out=out[0])
            return out[0], norm(out[0].reshape(1, -1), w, out=out[1].reshape(1, -1))
        return fused
    raise ValueError(f"no step {name!r} for the op {op!r} (gemv: lab 04's steps; decode: lab 07's; fused: "
                     f"lab 02's add + RMSNorm steps, or 'add + <an RMSNorm step>')")


class NumpyOps:
    """The same launchers' effects in NumPy, with the GPU's storage (fp16 tensors, fp32 logits) and
    float64 arithmetic: Decoder(..., emulate=True) runs Decoder.step's exact sequence of calls and
    buffers through these, so the step's wiring (views, the residual ping-pong, the device-side
    position, length, token and history) is checked without a GPU against the float64 reference
    with fp16 storage. It checks the wiring, not the kernels (tests/test_gpu_decoder.py does)."""

    def __init__(self, cfg: Config):
        self.cfg, self._dense = cfg, {}

    def _w(self, w, M):
        key = id(w[0])
        if key not in self._dense:
            w = G.unpack(*w)
            self._dense[key] = (np.asarray(w[0], np.float64) if len(w) == 1 else
                                G.dequantize_int8(*w) if len(w) == 2 else G.dequantize_int4(*w, M))
        return self._dense[key]

    def gemv(self, *args, out):
        *w, x = args
        with np.errstate(over="ignore", invalid="ignore"):
            out[...] = (self._w(w, x.shape[0]) @ np.asarray(x, np.float64)).astype(out.dtype)
        return out

    def conv(self, a, out):
        with np.errstate(over="ignore"):
            out[...] = a.astype(out.dtype)
        return out

    def fused(self, x, res, w, out):
        h, y = out
        with np.errstate(over="ignore"):
            h[...] = (np.asarray(x, np.float64) + res).astype(h.dtype)
            y[...] = ref_rmsnorm(h, w, self.cfg.eps).astype(y.dtype)
        return h, y

    def logits(self, W, x, out):
        return self.gemv(W, x, out=out)

    def embed(self, table, token, out):
        out[...] = reference_embed(table, token)
        return out

    def head_norm(self, q, k, wq, wk, out):
        qo, ko = out
        qo[...], ko[...] = reference_head_norm(q, k, wq, wk, self.cfg.eps)
        return qo, ko

    def silu_mul(self, gate, up, out):
        out[...] = reference_silu_mul(gate, up)
        return out

    def rope_append(self, q, k, v, k_cache, v_cache, pos, q_out, cos=None, sin=None):
        p = int(pos[0])
        if 0 <= p < k_cache.shape[1]:           # as the kernel: out of range writes nothing
            q_out[...] = ref_rope(q, p, self.cfg.theta).astype(np.float16)
            k_cache[:, p] = ref_rope(k, p, self.cfg.theta).astype(np.float16)
            v_cache[:, p] = v
        return q_out

    def decode(self, q, k_cache, v_cache, length, out):
        cfg = self.cfg
        L = min(max(int(length[0]), 0), k_cache.shape[1])
        K, V = np.asarray(k_cache[:, :L], np.float64), np.asarray(v_cache[:, :L], np.float64)
        qg = np.asarray(q, np.float64).reshape(cfg.kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim)
        s = np.einsum("hgd,hld->hgl", qg, K) / math.sqrt(cfg.head_dim)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[...] = np.einsum("hgl,hld->hgd", p / p.sum(-1, keepdims=True), V).reshape(out.shape).astype(out.dtype)
        return out

    def argmax(self, x, token, state=None, history=None):
        token[0] = int(np.argmax(x))
        if state is not None:
            p = int(state[0])
            if history is not None and 0 <= p < history.shape[0]:
                history[p] = token[0]
            state[0], state[1] = p + 1, state[1] + 1
        return token


class Decoder:
    """One Qwen3 decoder on the GPU, batch 1: weights, KV cache and workspace allocated once, then
    `step()` runs one token with the course's kernels and nothing else:

        embed -> per layer: fused add + RMSNorm (lab 02) -> QKV GEMV (lab 04) -> q/k head norm ->
        RoPE + KV append (lab 07) -> decode attention (lab 07) -> o GEMV -> fused add + RMSNorm ->
        gate/up GEMV -> SiLU x up -> down GEMV; then the final add + RMSNorm -> logits GEMV (lab 04,
        fp32 out) -> argmax (+ position, length and history moved on by one).

    The residual stream ping-pongs between two buffers (h_a, h_b): each fused add + RMSNorm reads
    the sublayer's output (`delta`) and one, writes the other. Layer 0 adds the embedding to zeros.
    `token`, `state` = [position, length] and `history` live on the device: nothing in a step
    depends on the host, so `graph()` captures one step and every replay decodes the next token.
    weights: a host dict (random_weights / load_checkpoint); None draws random weights on the GPU
    (the 8B shape: 16 GB of fp16, not worth a host round trip). path: float16, w8a16 or int4 (the
    quantised paths quantise with lab 04's quantisers, or draw random quantised weights).
    emulate=True: the same step on NumPy arrays through NumpyOps (no GPU; any head layout; host
    weights required), to check the wiring against the float64 reference."""

    def __init__(self, cfg: Config, weights: dict | None = None, path: str = "float16", capacity: int = 4096,
                 seed: int = 0, emulate: bool = False):
        if path not in PATHS:
            raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
        if emulate:
            if weights is None:
                raise ValueError("emulate=True needs host weights (random_weights or load_checkpoint)")
            xp, self.ops = np, NumpyOps(cfg)
        else:
            import cupy
            from .core.device import need_gpu
            need_gpu("the decoder's token step")
            if cfg.gpu_reason():
                raise ValueError(cfg.gpu_reason())
            xp, self.ops = cupy, GpuOps(path)
            self._rng = cupy.random.RandomState(seed)
        if cfg.layers < 1 or not 1 <= capacity <= 2 ** 20:
            raise ValueError(f"need >= 1 layer and 1 <= capacity <= 2^20; got {cfg.layers} layers, capacity {capacity}")
        self.cfg, self.path, self.capacity, self.xp, self.emulate = cfg, path, int(capacity), xp, emulate
        W = weights
        if W is not None:
            missing = [n for n in weight_shapes(cfg) if n not in W]
            if missing:
                raise ValueError(f"weights: missing {missing[:3]}{' ...' if len(missing) > 3 else ''}")
        H, F = cfg.hidden, cfg.ffn
        self.layers = []
        for i in range(cfg.layers):
            get = (lambda k, i=i: W[lw(i, k)]) if W is not None else None
            L = {"ln1": self._vec(get, "input_layernorm", H), "ln2": self._vec(get, "post_attention_layernorm", H),
                 "qn": self._vec(get, "self_attn.q_norm", cfg.head_dim), "kn": self._vec(get, "self_attn.k_norm", cfg.head_dim),
                 "qkv": self._linear(get, ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                 "o": self._linear(get, ("self_attn.o_proj",)), "gu": self._linear(get, ("mlp.gate_proj", "mlp.up_proj")),
                 "down": self._linear(get, ("mlp.down_proj",))}
            self.layers.append(L)
        self.norm = self._vec((lambda k: W[k]) if W is not None else None, "model.norm.weight", H)
        if W is not None:
            self.embed_w = xp.asarray(W["model.embed_tokens.weight"])
            self.lm = self.embed_w if cfg.tied else xp.asarray(W["lm_head.weight"])
        else:
            self.embed_w = self._randn((cfg.vocab, H), 1.0)
            self.lm = self.embed_w if cfg.tied else self._randn((cfg.vocab, H), 1 / math.sqrt(H))
        e = lambda *s: xp.zeros(s, xp.float16)   # noqa: E731
        self.k_cache = e(cfg.layers, cfg.kv_heads, self.capacity, cfg.head_dim)
        self.v_cache = e(cfg.layers, cfg.kv_heads, self.capacity, cfg.head_dim)
        self.kc = [self.k_cache[i] for i in range(cfg.layers)]
        self.vc = [self.v_cache[i] for i in range(cfg.layers)]
        qd, kd = cfg.q_dim, cfg.kv_dim
        self.delta, self.zeros, self.h_a, self.h_b, self.y = e(H), e(H), e(H), e(H), e(H)
        self.qkv, self.gu, self.m = e(qd + 2 * kd), e(2 * F), e(F)
        self.q = self.qkv[:qd].reshape(cfg.heads, cfg.head_dim)
        self.k = self.qkv[qd:qd + kd].reshape(cfg.kv_heads, cfg.head_dim)
        self.v = self.qkv[qd + kd:].reshape(cfg.kv_heads, cfg.head_dim)
        self.gate, self.up = self.gu[:F], self.gu[F:]
        self.qn, self.kn = e(cfg.heads, cfg.head_dim), e(cfg.kv_heads, cfg.head_dim)
        self.qr, self.o = e(cfg.heads, cfg.head_dim), e(cfg.heads, cfg.head_dim)
        self.o_flat = self.o.reshape(-1)
        # fp32 outputs of the quantised GEMVs, before lab 04's fp32 -> fp16 conversion step
        self.f32 = {id(b): xp.zeros(b.shape, xp.float32) for b in (self.qkv, self.delta, self.gu)} \
            if path != "float16" else {}
        self.logits = xp.zeros(cfg.vocab, xp.float32)
        self.token = xp.zeros(1, xp.int32)
        self.state = xp.zeros(2, xp.int32)
        self.pos, self.length = self.state[0:1], self.state[1:2]
        self.history = xp.full(self.capacity, -1, xp.int32)
        self.cos, self.sin = (None, None) if emulate else A.rope_table(self.capacity, cfg.theta)
        self._graph = None
        self.host_pos = 0
        self.reset()                     # position 0, length 1: a fresh decoder can feed() at once

    # -- weights on the device
    def _randn(self, shape, scale):
        import cupy
        return (self._rng.standard_normal(shape, dtype=cupy.float32) * scale).astype(cupy.float16)

    def _vec(self, get, key, n):
        if get is None:
            import cupy
            return (1.0 + 0.1 * self._rng.standard_normal((n,), dtype=cupy.float32)).astype(cupy.float16)
        return self.xp.asarray(np.asarray(get(key), np.float16))

    def _linear(self, get, keys):
        """One GEMV's weight, the keys' matrices stacked by rows, on this path: (W,) fp16, or lab
        04's quantised arrays (q int8, scales fp32) / (packed uint8, scales fp16, zeros uint8) in the
        layout the path's default step reads, made once here (gemv.pack: steps 36 / 37's tiles)."""
        shapes = [layer_shapes(self.cfg)[k] for k in keys]
        K, M = sum(s[0] for s in shapes), shapes[0][1]
        if get is not None:
            W = np.concatenate([np.asarray(get(k), np.float16) for k in keys], axis=0)
            if self.path == "float16":
                return (self.xp.asarray(W),)
            q = G.quantize_int8(W.astype(np.float32)) if self.path == "w8a16" else G.quantize_int4(W.astype(np.float32))
            return G.pack(self.path, *(self.xp.asarray(a) for a in q))
        import cupy
        if self.path == "float16":
            return (self._randn((K, M), 1 / math.sqrt(M)),)
        Gn = -(-M // G.GROUP)
        if self.path == "w8a16":          # random int8 weights: |w| up to 127 x scale
            q = self._rng.randint(-127, 128, (K, M)).astype(cupy.int8)
            return G.pack(self.path, q, cupy.full((K, Gn), 1 / (127 * math.sqrt(M / 3)), cupy.float32))
        packed = self._rng.randint(0, 256, (K, -(-M // 2))).astype(cupy.uint8)
        return G.pack(self.path, packed, cupy.full((K, Gn), 2 / (15 * math.sqrt(M / 3)), cupy.float16),
                      cupy.full((K, Gn), 8, cupy.uint8))

    def _host(self, a):
        return np.asarray(a) if self.emulate else a.get()

    def dense(self, i: int, key: str):
        """Layer i's GEMV weight (key: qkv, o, gu, down) as the float64 matrix the kernels multiply
        by: the fp16 matrix, or lab 04's dequantisation of the quantised one."""
        w = list(G.unpack(*(self._host(a) for a in self.layers[i][key])))
        if self.path == "float16":
            return w[0].astype(np.float64)
        if self.path == "w8a16":
            return G.dequantize_int8(*w)
        M = {"qkv": self.cfg.hidden, "gu": self.cfg.hidden, "o": self.cfg.q_dim, "down": self.cfg.ffn}[key]
        return G.dequantize_int4(*w, M)

    # -- one token
    def _proj(self, w, x, out):
        if self.path == "float16":
            self.ops.gemv(*w, x, out=out)
        else:
            f = self.f32[id(out)]
            self.ops.gemv(*w, x, out=f)
            self.ops.conv(f, out=out)

    def step(self):
        """Launch one token's step (asynchronous): the token in self.token at position state[0]."""
        ops = self.ops
        ops.embed(self.embed_w, self.token, out=self.delta)
        res = self.zeros
        for i, L in enumerate(self.layers):
            ops.fused(self.delta, res, L["ln1"], out=(self.h_b, self.y))
            self._proj(L["qkv"], self.y, self.qkv)
            ops.head_norm(self.q, self.k, L["qn"], L["kn"], out=(self.qn, self.kn))
            ops.rope_append(self.qn, self.kn, self.v, self.kc[i], self.vc[i], self.pos, self.qr, self.cos, self.sin)
            ops.decode(self.qr, self.kc[i], self.vc[i], self.length, out=self.o)
            self._proj(L["o"], self.o_flat, self.delta)
            ops.fused(self.delta, self.h_b, L["ln2"], out=(self.h_a, self.y))
            self._proj(L["gu"], self.y, self.gu)
            ops.silu_mul(self.gate, self.up, out=self.m)
            self._proj(L["down"], self.m, self.delta)
            res = self.h_a
        ops.fused(self.delta, res, self.norm, out=(self.h_b, self.y))
        ops.logits(self.lm, self.y, out=self.logits)
        ops.argmax(self.logits, self.token, self.state, self.history)

    def at(self, pos: int):
        """Set the device-side position to pos and the length to pos + 1 (the next step's token
        goes to position pos); the cache's rows below pos are whatever earlier steps left there."""
        if not 0 <= pos < self.capacity:
            raise ValueError(f"pos: expected 0 <= pos < capacity ({self.capacity}), got {pos}")
        self.state[...] = self.xp.asarray(np.array([pos, pos + 1], np.int32))
        self.host_pos = pos

    def reset(self):
        """Back to position 0 (the cache's old rows are never read: the length bounds attention)."""
        self.at(0)
        self.history.fill(-1)

    def feed(self, token: int):
        """Run one step on a given token (teacher forcing): the prompt, or a test's sequence."""
        if not 0 <= int(token) < self.cfg.vocab:
            raise ValueError(f"token: expected 0 <= token < vocab ({self.cfg.vocab}), got {token}")
        if self.host_pos >= self.capacity:
            raise ValueError(f"the KV cache is full ({self.capacity} positions)")
        self.token[...] = int(token)
        self.step()
        self.host_pos += 1

    def graph(self):
        """One step captured as a CUDA graph (after an eager step has run: plans and scratch exist)."""
        from .core.bench import graph
        if self.emulate:
            raise ValueError("an emulated decoder has no CUDA graph: use_graph=False")
        if self._graph is None:
            self._graph = graph(self.step, warmup=False)
        return self._graph

    def generate(self, prompt, n_new: int, use_graph: bool = True) -> list:
        """Greedy: the prompt fed eagerly one token at a time, then n_new - 1 more steps (graph
        replays, or eager); returns the n_new tokens (history, read once at the end)."""
        prompt = [int(t) for t in prompt]
        if not prompt or n_new < 1:
            raise ValueError("generate: a non-empty prompt and n_new >= 1")
        if len(prompt) + n_new - 1 > self.capacity:
            raise ValueError(f"{len(prompt)} + {n_new} tokens do not fit the KV cache ({self.capacity})")
        self.reset()
        for t in prompt:
            self.feed(t)
        run = self.graph() if use_graph else self.step
        for _ in range(n_new - 1):
            run()
        self.host_pos += n_new - 1
        start = len(prompt) - 1
        return [int(t) for t in self._host(self.history[start:start + n_new])]


# ---- live measurements (a GPU), loud skips (none) --------------------------------------------------------------

def step_name(path: str, mode: str) -> str:
    """The results-frame name of the token step on one path, eager or graph-replayed."""
    return f"{path} token step ({mode})"


def ctx_case(context: int) -> str:
    return f"context {context}"


def _row(cfg, name, path, n, mode, t, reps, read):
    """One results row of a token step's timing `t` (bench.wall) at context n."""
    us, b = t["median_us"], bytes_per_token(cfg, path, n)["total"]
    return {"lab": DECODER_NAME, "case": ctx_case(n), "name": name, "kind": "e2e", "dtype": path, "path": path,
            "context": n, "mode": mode, "layers run": cfg.layers, "median_us": us, "p10_us": t["p10_us"],
            "p90_us": t["p90_us"], "reps": reps, "host_us": t["host_us"], "tokens/s": 1e6 / us, "bytes": b,
            "gbps": b / us / 1e3, "frac_read": b / us / 1e3 / read}


def step_rows(dec, contexts, reps: int = 20, modes=("eager", "graph"), name: str | None = None) -> list:
    """Live: the decoder's token step at each context, eager and/or graph-replayed (bench.wall:
    CUDA events around one call started on an idle GPU, and the host's µs to issue it); the rows
    are named step_name(path, mode), or `name`."""
    from .core.bench import roof_values, wall
    read, rows = roof_values().get("read_gbps", float("nan")), []
    for n in contexts:
        dec.reset()
        dec.at(n - 1)
        dec.step()                                     # warm: plans, scratch, clocks
        fns = {"eager": dec.step, "graph": dec.graph()}
        for mode in modes:
            t = wall(fns[mode], reps=reps, flush=False, before=lambda: dec.at(n - 1))   # weights stream anyway
            rows.append(_row(dec.cfg, name or step_name(dec.path, mode), dec.path, n, mode, t, reps, read))
        dec._graph = None
    return rows


def floor_name(path: str) -> str:
    return f"{path} read-only floor (graph)"


def floor_rows(dec, context: int = 512, reps: int = 20) -> list:
    """Live: the floor of a token on this path and GPU: one CUDA graph of lab 00's fastest reader
    (bench.read_floor) over each of the token's weight arrays in the step's order (every layer's
    GEMV weights, scales and zeros, then the LM head), nothing computed. No token step that must
    read those weights once can be faster here; the row's bytes are the step's (bytes_per_token),
    so its frac_read is the most the step's could be."""
    from .core.bench import graph, read_floor, roof_values, wall
    arrays = [a for L in dec.layers for key in ("qkv", "o", "gu", "down") for a in G.read_by(L[key])] + [dec.lm]
    calls = [c for c in (read_floor(a) for a in arrays) if c is not None]
    g = graph(lambda: [c() for c in calls])
    t = wall(g, reps=reps, flush=False)
    return [_row(dec.cfg, floor_name(dec.path), dec.path, context, "graph", t, reps,
                 roof_values().get("read_gbps", float("nan")))]


def tokens_per_s(cfg: Config = QWEN3_8B, paths=("float16",), contexts=(1, 512), layers: int | None = None,
                 reps: int = 20, swaps=()):
    """Live: the token step's time at each path and context, eager and graph-replayed: GPU time
    between CUDA events around one call started on an idle GPU (so an eager step's launch gaps
    count, as they do in a decode loop), its p10/p90, the host time of one call (perf_counter, no
    sync: what the CPU pays per token), tokens/s, and the bytes model's bytes (record derives the
    fraction of the read roof from them). layers: fewer layers than cfg on a GPU with too little
    memory (the row says how many; the bytes are that many layers'). swaps: the Amdahl table's
    swaps (SWAPS), timed on the same decoders (`swap_rows`). A list of rows."""
    import cupy
    rows = []
    run_cfg = replace(cfg, layers=layers) if layers else cfg
    for path in paths:
        dec = Decoder(run_cfg, None, path, capacity=max(contexts) + 8)
        rows += step_rows(dec, contexts, reps)
        rows += floor_rows(dec, SWAP_CONTEXT if SWAP_CONTEXT in contexts else max(contexts), reps)
        rows += swap_rows(dec, [sw for sw in swaps if sw.path == path], reps=reps)
        del dec
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


@dataclass(frozen=True)
class Swap:
    """One row of the Amdahl table: the token step with one op run by an earlier step of its lab
    (before) and by a later one (after), all else equal; claim: the seed's end-to-end claim this
    swap measures (docs/claims.csv id), if any."""
    what: str
    path: str
    op: str
    before: str
    after: str
    claim: str = ""

    def name(self, which: str) -> str:
        return f"{self.path} (graph), {self.op} = {self.before if which == 'before' else self.after}"


SWAP_CONTEXT = 512
SWAPS = (
    Swap("RMSNorm: seed 003's fp16 kernel, before -> after (lab 02)", "float16", "fused",
         "add + 05_fp16_half2_cub", "add + 06_fp16_uint4", "decoder-031"),
    Swap("add + RMSNorm: two launches -> one fused (lab 02)", "float16", "fused", "01_separate", "02_fused"),
    Swap("fp16 GEMV: seed 002's v2, before -> after (lab 04)", "float16", "gemv", "32_fp16_v2_plain", "10_fp16_v2",
         "decoder-015"),
    Swap("fp16 GEMV: lab 04's first fp16 step -> its best", "float16", "gemv", "09_fp16_half2", "27_fp16_rows"),
    Swap("decode attention: split-KV -> GQA with bytes in flight (lab 07)", "float16", "decode", "03_split", "05_gqa_tile"),
    Swap("int4 GEMV: lab 04's AWQ step -> its mma step", "int4", "gemv", "26_int4_awq", "28_int4_mma"),
)


def swap_rows(dec, swaps, context: int = SWAP_CONTEXT, reps: int = 20) -> list:
    """Live: for each swap, the graph-replayed token step with the op run by its before step and by
    its after step (GpuOps' swap), on the same decoder, at one context. A list of rows (case: the
    context; name: Swap.name)."""
    rows, keep = [], dec.ops
    try:
        for sw in swaps:
            for which in ("before", "after"):
                dec.ops, dec._graph = GpuOps(dec.path, {sw.op: getattr(sw, which)}), None
                rows += step_rows(dec, [context], reps, modes=("graph",), name=sw.name(which))
    finally:
        dec.ops, dec._graph = keep, None
    return rows


def amdahl(df, swaps=SWAPS, context: int = SWAP_CONTEXT):
    """The Amdahl table from the frame on screen: per swap, the token's time with the before and
    the after step, and the end-to-end gain time(before) / time(after) with its band. Returns
    (table, {claim id: Measured}) for results.claims."""
    import pandas as pd
    from .core.results import pick, ratio_band
    rows, measured = [], {}
    for sw in swaps:
        b, a = (pick(df, sw.name(w), "median_us", case=ctx_case(context)) for w in ("before", "after"))
        m = ratio_band(df, sw.name("after"), sw.name("before"), ctx_case(context))
        if sw.claim and m.ok:
            measured[sw.claim] = m
        rows.append({"swap": sw.what, "before": sw.before, "after": sw.after, "token ms (before)": b / 1e3,
                     "token ms (after)": a / 1e3, "end-to-end gain": m.value, "seed claim": sw.claim or "-"})
    return pd.DataFrame(rows).round(3), measured


RECORD_PATHS, RECORD_CONTEXTS = PATHS, (1, 512, 4096)


def measure_tokens_per_s(**kw):
    """tokens/s live (tokens_per_s), or recorded rows from decoder.csv, or a loud skip: the one switch."""
    from .core.results import live_or_recorded
    return live_or_recorded(DECODER_NAME, "tokens/s of the Qwen3-8B token step, eager and CUDA-graphed, "
                            "with the fraction of the read roof the bytes model implies",
                            lambda: tokens_per_s(**kw))


def _record():
    """make bench: every path at every context, Qwen3-8B's shape (fewer layers if the GPU is short
    of memory is for a learner to choose; the recorder runs all 36) and the Amdahl table's swaps
    (the torch baselines are recorded by torch_decoder, on the same weights)."""
    return measure_tokens_per_s(cfg=QWEN3_8B, paths=RECORD_PATHS, contexts=RECORD_CONTEXTS, swaps=SWAPS)


def _frac(path, context, mode="graph", floor=False):
    """A target's measure: the step's fraction of the read roof at one context, with its band
    (floor=True: the read-only floor's, the most the step's could be)."""
    from .core.results import Measured, pick
    def m(df):
        name, case = floor_name(path) if floor else step_name(path, mode), ctx_case(context)
        f, t, lo, hi = (pick(df, name, c, case=case) for c in ("frac_read", "median_us", "p10_us", "p90_us"))
        return Measured(f, f * t / hi, f * t / lo) if f == f else Measured(f, f, f)
    return m


def _speedup(path, context, mode="graph", floor=False):
    """time(fp16 step) / time(path's step); floor=True: the same of the two read-only floors."""
    from .core.results import ratio_band
    name = floor_name if floor else (lambda p: step_name(p, mode))
    return lambda df: ratio_band(df, name(path), name("float16"), ctx_case(context))


def token_steps(name: str):
    """What a decoder.csv row named `name` runs today (Family.steps): (engine, {op: launcher}) of a token
    step on a path (with a swap's op run by its step), the read-only floor's code, or None."""
    for path in PATHS:
        if name in (step_name(path, "eager"), step_name(path, "graph")):
            ops = GpuOps(path)
        elif name == floor_name(path):
            return [floor_rows], {}
        elif name.startswith(f"{path} (graph), ") and " = " in name:
            op, step = name[len(f"{path} (graph), "):].split(" = ", 1)
            ops = GpuOps(path, {op: step})
        else:
            continue
        return [Decoder, step_rows], {op: getattr(ops, op) for op in GpuOps.OPS}
    return None


def _host(df):
    from .core.results import pick
    return pick(df, step_name("float16", "graph"), "host_us", case=ctx_case(512))


DECODER = Family(
    name=DECODER_NAME, kernels=FAMILY, record=_record, roof="read", steps=token_steps,
    shapes={"Qwen3-8B, batch 1": (QWEN3_8B.hidden, QWEN3_8B.layers)},
    targets=(Target("fp16 token step (graph), fraction of the read roof at context 512", _frac("float16", 512), 0.75,
                    floor=_frac("float16", 512, floor=True)),
             Target("int4 vs fp16 tokens/s (graph), context 512", _speedup("int4", 512), 2.0,
                    floor=_speedup("int4", 512, floor=True)),
             Target("W8A16 vs fp16 tokens/s (graph), context 512", _speedup("w8a16", 512), 1.5,
                    floor=_speedup("w8a16", 512, floor=True)),
             Target("host µs per token (graph replay), context 512", _host, 50.0, below=True, unit="µs")),
    about="lab 08: the Qwen3-8B token step, eager and as one CUDA graph, per weight path and context")
FAMILIES = [*OPS, DECODER]


def breakdown(cfg: Config = QWEN3_8B, path: str = "float16", context: int = 512, layers: int = 2):
    """Live: where one token's GPU time goes, per launch, from one eager step with a CUDA event
    around each launch (launch gaps included in the whole-step time, not in the per-op times). A
    list of rows; fewer layers than cfg (`layers`), the per-layer ops are the same in every layer."""
    import cupy
    from .core.launch import record_launches
    dec = Decoder(replace(cfg, layers=layers), None, path, capacity=context + 8)
    dec.at(context - 1)
    dec.step()
    dec.at(context - 1)
    recs = record_launches(dec.step)
    cupy.cuda.Device().synchronize()
    rows = []
    for k, g, b, a, sm in recs:
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        k(g, b, a, shared_mem=sm)
        e.record()
        e.synchronize()
        rows.append({"kernel": k.name, "us": cupy.cuda.get_elapsed_time(s, e) * 1e3})
    return rows


# ---- the exercise: SiLU x up fused into the down GEMV ------------------------------------------------------------

EX_SHAPE = (2048, 6144)      # the down projection (K rows, F = the FFN width), a narrower Qwen3


def make_silu_down(shape=EX_SHAPE, seed=0):
    """(W_down [K, F] fp16, gate [F] fp16, up [F] fp16) for the exercise."""
    K, F = shape
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((K, F), dtype=np.float32) / math.sqrt(F)).astype(np.float16)
    return W, (rng.standard_normal(F) * 2).astype(np.float16), rng.standard_normal(F).astype(np.float16)


def reference_silu_down(W, gate, up):
    """y = W_down . (SiLU(gate) * up) in float64 (the product not rounded), fp32 [K]."""
    return (np.asarray(W, np.float64) @ (ref_silu(gate) * np.asarray(up, np.float64))).astype(np.float32)


def silu_down_tolerance(W, gate, up) -> dict:
    """Lab 04's GEMV bound (fp32 sums of F terms) on the fused product, plus fp32 SiLU's own error."""
    m = (ref_silu(gate) * np.asarray(up, np.float64)).astype(np.float32)
    t = G.tolerance(np.asarray(W, np.float32), m)
    return {"rtol": 1e-4, "atol": 4 * t["atol"]}


def silu_down_step(W, gate, up):
    """The lab's two launches the exercise replaces: SiLU x up (step 01, fp16 out), then lab 04's
    fp16-in fp32-out GEMV (its default logits step); buffers kept between calls."""
    K, F = W.shape
    m = _scratch("ex_m", (F,), np.float16)
    y = _scratch("ex_y", (K,), np.float32)
    silu_mul(gate, up, out=m)
    return G.LOGITS.variants[G.LOGITS.default["fp16_f32out"]](W, m, out=y)


# ---- sentences computed from the results on screen -------------------------------------------------------------

def launches_per_token(cfg: Config = QWEN3_8B, path: str = "float16", attention_launches: int = 2) -> int:
    """Kernel launches one eager token step makes (the count Decoder.step issues): per layer 2 fused
    add + RMSNorm, 4 GEMVs (each + 1 conversion on a quantised path), the q/k norm, RoPE + append,
    SiLU x up, and decode attention (1, or 2 with its split-KV merge); then the embedding, the final
    norm, the logits GEMV and the 2 argmax passes."""
    per_layer = 2 + 4 * (1 if path == "float16" else 2) + 3 + attention_launches
    return cfg.layers * per_layer + 5


def ran(df, path: str) -> dict:
    """{op: step} that the token step on `path` ran in the frame's first device's rows (its `steps`
    column, written by make bench, or today's GpuOps for a live frame): what a sentence names."""
    from .core.results import one_source
    d = one_source(df) if df is not None and len(df) else None
    if d is not None and "steps" in d:
        r = d[(d["name"] == step_name(path, "graph")) & d["steps"].notna()]
        if len(r):
            return dict(p.split("=", 1) for p in str(r["steps"].iloc[0]).split("; ") if "=" in p)
    ops = GpuOps(path)
    from .core.fingerprint import step_name as _name
    return {op: _name(getattr(ops, op)) for op in GpuOps.OPS}


def plot_tokens(tps, tb, swaps, context: int = 512):
    """Lab 08's picture from the frames on screen (the device on screen): tokens/s per path against its
    read-only floor and the torch baselines, and the Amdahl table's end-to-end gains."""
    from .core import plot
    from .core.results import one_source, pick, source
    d = one_source(tps)
    if d is None or d.empty:
        print("(no data for plot 08_tokens)")
        return None
    case = ctx_case(context)
    rows = {p: pick(d, step_name(p, "graph"), "tokens/s", case=case) for p in PATHS}
    floors = {p: pick(d, floor_name(p), "tokens/s", case=case) for p in PATHS}
    base = {}
    t = one_source(tb) if tb is not None and len(tb) else None
    if t is not None:
        t = t[t["device"] == d["device"].iloc[0]] if "device" in t else t
        for nm in t["name"].unique():
            if "token step" not in nm:
                base[nm] = pick(t, nm, "tokens/s", case=case)
    gains = dict(zip(swaps["swap"], swaps["end-to-end gain"])) if swaps is not None and len(swaps) else {}
    return plot.tokens({k: v for k, v in rows.items() if v == v}, floors, base, gains, "08_tokens",
                       "Qwen3-8B token step, batch 1", source(d))


def ran_text(df) -> str:
    """Which GEMV and attention steps each path's token step ran, as the frame's rows say (a record
    names them; a live run is today's code)."""
    from .core.results import source
    parts = [f"{p}: `{r.get('gemv', '?')}`" for p in PATHS for r in [ran(df, p)]]
    dec = ran(df, "float16").get("decode", "?")
    return (f"The token steps timed here ran the GEMV steps {', '.join(parts)}, and decode attention "
            f"`{dec}` ({source(df)}).")


def gemv_limits(df) -> str:
    """What holds each path's GEMVs back, from lab 04's record (gemv.csv) of the device on screen:
    at the token's own GEMV shapes, the fraction of the read roof a read-only kernel over the
    path's weight bytes reaches (launch and ramp on tens of MB), and the fraction of that floor the
    path's GEMV reaches (for int4 and W8A16: their dequantisation instructions, lab 04). A line
    saying none is recorded otherwise."""
    from .core.device import load_recorded
    from .core.results import MISSING, one_source
    rec = load_recorded(G.NAME)
    dev = one_source(df)["device"].iloc[0] if df is not None and len(df) else None
    rec = rec[rec["device"] == dev] if dev is not None and len(rec) else rec
    if rec.empty:
        return MISSING
    parts = []
    for path in PATHS:
        step = ran(df, path).get("gemv", G.BEST[path])       # the GEMV step the token's record ran
        d = rec[(rec["dtype"] == path) & rec["case"].str.startswith(("12288x4096", "4096x12288", "18944x3584"))]
        fl, st = d[d["name"] == G.FLOOR], d[d["name"] == step]
        if fl.empty or st.empty:
            continue
        f = fl.set_index("case")
        r = (f["median_us"] / st.set_index("case")["median_us"]).dropna()
        parts.append(f"{path}: the read-only floor over its bytes reaches **{f['frac_read'].min():.2f}–"
                     f"{f['frac_read'].max():.2f}** of the read roof, and `{step}` (the step the token ran) "
                     f"**{r.min():.2f}–{r.max():.2f}** of that floor")
    return ("Lab 04 measured what holds each path's GEMVs back, at the FFN's shapes (" + "; ".join(parts) +
            f"; gemv.csv, recorded on {rec['device'].iloc[0]}). Fewer bytes per GEMV also mean the fixed launch and "
            f"ramp cost of each of a token's {launches_per_token(QWEN3_8B, 'int4')} launches weighs more.") if parts else MISSING


def launch_share(df, cfg: Config = QWEN3_8B, context: int = 512) -> str:
    """The launches the fp16 token step makes beyond its read-only floor's (one reader per weight
    array): at lab 00's per-launch cost inside a CUDA graph (measuring.csv, the device on screen),
    their share of the graph-replayed token. A line saying none is recorded otherwise."""
    from .core.device import load_recorded
    from .core.results import MISSING, one_source, pick
    from .measuring import ROOF_QUANTITIES as QUANTITIES
    rec, d = load_recorded("measuring"), one_source(df)
    if rec.empty or d is None or not len(d):
        return MISSING
    rec = rec[rec["device"] == d["device"].iloc[0]]
    per = rec.loc[rec["quantity"] == QUANTITIES["launch_graph_us"], "value"]
    t = pick(d, step_name("float16", "graph"), "median_us", case=ctx_case(context))
    extra = launches_per_token(cfg, "float16") - (4 * cfg.layers + 1)
    if per.empty or t != t:
        return MISSING
    return (f"Beside the {4 * cfg.layers + 1} weight reads of the floor, an fp16 token makes **{extra}** launches "
            f"more (norms, RoPE and the cache, attention, SiLU, the embedding, the argmax); at lab 00's "
            f"{float(per.iloc[0]):.2f} µs per launch inside a graph ({rec['device'].iloc[0]}), they cost about "
            f"**{extra * float(per.iloc[0]) / t:.0%}** of the token, on top of each GEMV's distance to its floor.")


def tokens_text(df, context: int = 512) -> str:
    """One sentence on the fp16 graph-replayed vs eager token time at `context`, from the frame on
    screen (live or recorded), or the line saying nothing is measured or recorded yet."""
    from .core.results import source
    from .core.results import MISSING
    if df is None or not len(df):
        return MISSING
    d = df[(df["path"] == "float16") & (df["context"] == context)]
    g, e = d[d["mode"] == "graph"], d[d["mode"] == "eager"]
    if g.empty or e.empty:
        return MISSING
    g, e = g.iloc[0], e.iloc[0]
    return (f"Graph-replayed, a token takes **{g['median_us'] / 1e3:.2f} ms** at context {context} "
            f"({1e6 / g['median_us']:.1f} tokens/s, **{g['frac_read']:.2f}** of the read roof, {int(g['layers run'])} layers); "
            f"eager it takes {e['median_us'] / 1e3:.2f} ms ({e['median_us'] / g['median_us']:.2f}× the graph), and the host "
            f"pays {e['host_us']:.0f} µs per eager token against {g['host_us']:.0f} µs per replay ({source(df)}).")
