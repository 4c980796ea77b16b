"""Lab 08's weights: the Hugging Face names and layouts, random_weights(cfg, seed) (fp16, from a fixed
seed, NumPy), and safetensors read and written with NumPy (8-byte header length, JSON header, raw
little-endian tensors); load_checkpoint(dir, cfg): a real checkpoint's weights, checked and in fp16."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .config import Config


# ---- weights: the Hugging Face names and layouts -------------------------------------------------------

LAYER_KEYS = ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.q_norm",
              "self_attn.k_norm", "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj",
              "mlp.up_proj", "mlp.down_proj")


def layer_shapes(cfg: Config) -> dict:
    """{key: shape} of one layer's weights (nn.Linear layout: [out, in]); Qwen3's q/k norms where the
    config has them, Qwen2.5's q/k/v biases (keys ending in .bias) where it has those."""
    H, F, hd = cfg.hidden, cfg.ffn, cfg.head_dim
    out = {"input_layernorm": (H,), "self_attn.q_proj": (cfg.q_dim, H), "self_attn.k_proj": (cfg.kv_dim, H),
           "self_attn.v_proj": (cfg.kv_dim, H)}
    if cfg.qkv_bias:
        out.update({"self_attn.q_proj.bias": (cfg.q_dim,), "self_attn.k_proj.bias": (cfg.kv_dim,),
                    "self_attn.v_proj.bias": (cfg.kv_dim,)})
    if cfg.qk_norm:
        out.update({"self_attn.q_norm": (hd,), "self_attn.k_norm": (hd,)})
    out.update({"self_attn.o_proj": (H, cfg.q_dim), "post_attention_layernorm": (H,), "mlp.gate_proj": (F, H),
                "mlp.up_proj": (F, H), "mlp.down_proj": (H, F)})
    return out


def lw(i: int, key: str) -> str:
    """The checkpoint name of layer i's weight `key`: model.layers.{i}.{key}.weight (a key ending in
    .bias names the bias itself: model.layers.{i}.self_attn.q_proj.bias)."""
    return f"model.layers.{i}.{key}" if key.endswith(".bias") else f"model.layers.{i}.{key}.weight"


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
    unit scale), the embedding N(0, 1), norm weights 1 + N(0, 0.1^2), biases N(0, 0.5^2).
    Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(cfg).items():
        x = rng.standard_normal(shape, dtype=np.float32)
        if name.endswith(".bias"):
            x = 0.5 * x                  # biases of the size Qwen2.5's have: a visible shift of q, k, v
        elif len(shape) == 1:
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
    """(cfg, weights) of a Hugging Face Qwen3 checkpoint in a local directory (config.json when cfg is None, every
    *.safetensors shard): each weight the decoder reads checked by name and shape and converted to fp16 (a bf16
    value above 65504 becomes inf: the count is reported); tensors the decoder does not read are ignored."""
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

