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

