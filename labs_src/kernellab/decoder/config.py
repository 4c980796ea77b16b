"""Lab 08's Qwen3 shapes: Config (Config.from_hf reads a checkpoint's config.json), Qwen3-8B's
(QWEN3_8B), a small config with Qwen3-8B's heads that a GPU test runs end to end (SMALL), a tiny one
for the CPU tests (TINY), and the lab's record names and weight paths."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import attention as A
from .. import rmsnorm as R


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
    qkv_bias: bool = False       # Qwen2.5: q, k and v projections have biases
    qk_norm: bool = True         # Qwen3: RMSNorm of each q and k head before RoPE (Qwen2.5 has none)

    @property
    def family(self) -> str:
        return "qwen3" if self.qk_norm else "qwen2"

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def gpu_reason(self) -> str | None:
        """Why the GPU token step cannot run this config (None when it can): lab 07's decode attention
        and RoPE take GQA groups 1-8 at head dim 64 or 128 (specialised per layout); lab 02's kernels
        one eps; the GEMVs 16-byte rows."""
        why = A.layout_reason(self.heads, self.kv_heads, self.head_dim)
        if why:
            return f"{self.name}: {why}"
        if self.eps != R.EPS:
            return f"{self.name}: RMSNorm eps {self.eps:g}; lab 02's kernels use {R.EPS:g}"
        if self.hidden % 8 or self.ffn % 8:
            return f"{self.name}: hidden and FFN must be multiples of 8 (16-byte rows for the GEMVs)"
        return None

    @classmethod
    def from_hf(cls, directory, name=None) -> "Config":
        """A Config from a Hugging Face checkpoint's config.json: Qwen3 (model_type qwen3: q/k norm, no
        biases unless attention_bias) or Qwen2 / Qwen2.5 (qwen2: q/k/v biases, no q/k norm). Anything
        the token step does not compute (another model type, rope scaling, a sliding window) is a
        ValueError naming it, before any weight is read."""
        path = Path(directory) / "config.json"
        if not path.exists():
            raise ValueError(f"{path}: no config.json in the checkpoint directory")
        c = json.loads(path.read_text())
        kind = c.get("model_type", "qwen3")
        if kind not in ("qwen3", "qwen2"):
            raise ValueError(f"{path}: model_type {kind!r}; lab 08 runs dense Qwen3 (qwen3) and Qwen2.5 (qwen2)")
        rope = c.get("rope_parameters") or {}          # transformers 5 keeps rope_theta and the rope type here
        for r in (c.get("rope_scaling"), rope):
            if r and r.get("rope_type", r.get("type", "default")) != "default":
                raise ValueError(f"{path}: rope_scaling {r}; lab 08's RoPE is the plain one")
        if c.get("use_sliding_window"):
            raise ValueError(f"{path}: use_sliding_window is on; lab 08's attention reads the whole cache")
        try:
            heads = int(c["num_attention_heads"])
            return cls(name=name or c.get("_name_or_path") or Path(directory).name, hidden=int(c["hidden_size"]),
                       layers=int(c["num_hidden_layers"]), heads=heads,
                       kv_heads=int(c.get("num_key_value_heads", heads)),
                       head_dim=int(c.get("head_dim") or c["hidden_size"] // heads),
                       ffn=int(c["intermediate_size"]), vocab=int(c["vocab_size"]),
                       eps=float(c.get("rms_norm_eps", 1e-6)), theta=float(c.get("rope_theta") or rope.get("rope_theta", 1e6)),
                       tied=bool(c.get("tie_word_embeddings", False)),
                       qkv_bias=kind == "qwen2" or bool(c.get("attention_bias", False)), qk_norm=kind == "qwen3")
        except KeyError as e:
            raise ValueError(f"{path}: missing key {e.args[0]!r}") from None


QWEN3_8B = Config("Qwen3-8B", hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, ffn=12288, vocab=151936)
SMALL = Config("small: Qwen3-8B's heads, hidden 512, 4 layers", hidden=512, layers=4, heads=32, kv_heads=8,
               head_dim=128, ffn=1536, vocab=4096)
TINY = Config("tiny (CPU tests)", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=96, vocab=101)
TINY_QWEN2 = Config("tiny Qwen2.5-style (CPU tests)", hidden=64, layers=2, heads=6, kv_heads=2, head_dim=16, ffn=96,
                    vocab=101, tied=True, qkv_bias=True, qk_norm=False)
QWEN25_7B = Config("Qwen2.5-7B", hidden=3584, layers=28, heads=28, kv_heads=4, head_dim=128, ffn=18944, vocab=152064,
                   qkv_bias=True, qk_norm=False)

