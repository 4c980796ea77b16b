"""Lab 08's bytes model: the bytes one token must move per path and context, the tokens/s an Orin's datasheet
bandwidth would allow for them (a model), and the seeds' own tokens/s (docs/claims.csv)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import gemv as G
from ..core.device import ORIN_PEAK_GBPS
from ..core.results import claims_file
from .config import Config, PATHS, QWEN3_8B


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
    return tokens_s * bytes_per_token(cfg, path, context)["total"] / (ORIN_PEAK_GBPS[board] * 1e9)


def seed_gemv_gbps(claim_id: str = "gemv-005") -> tuple:
    """(GB/s, ms, shape) that seed 002's own pure-fp16 GEMV time implies (docs/claims.csv, its 'after'
    time): the matrix, x and y in fp16 over that time; (NaN, NaN, '') when the row is absent."""
    c = claims_file()
    r = c[c["id"] == claim_id] if len(c) else c
    m = re.search(r"(\d+)x(\d+): [\d.]+ -> ([\d.]+) ms", r["claim"].iloc[0]) if len(r) else None
    if not m:
        return float("nan"), float("nan"), ""
    rows, cols, ms = int(m.group(1)), int(m.group(2)), float(m.group(3))
    return (rows * cols + rows + cols) * 2 / (ms * 1e6), ms, f"{rows}×{cols}"
