"""Lab 08's checks of the seeds' model facts (docs/claims.csv rows with how `lab:...`): each claimed
dimension or per-token count against the config lab 08 runs (config.QWEN3_8B, config.QWEN25_7B, the
checkpoints' config.json), a check that runs, 'holds' or 'refuted' (results.checked); the same on every
device, since no timing enters it."""
from __future__ import annotations

from ..core.results import checked, claim_measure
from .config import QWEN25_7B, QWEN3_8B


def _dims(c, claimed) -> tuple:
    got = (c.hidden, c.ffn, c.vocab, c.kv_heads * c.head_dim)
    return checked(got == claimed, f"{c.name}: dim {got[0]}, FFN {got[1]}, vocab {got[2]}, kv_dim {got[3]} "
                                   f"({c.kv_heads} KV heads x {c.head_dim}) in the config lab 08 runs")


claim_measure("decoder-026")(lambda part: _dims(QWEN3_8B, (4096, 12288, 151936, 512)))
claim_measure("decoder-045")(lambda part: _dims(QWEN25_7B, (3584, 18944, 152064, 512)))


@claim_measure("decoder-029")
def _rmsnorm_calls(part):
    """003:178 'RMSNorm runs 73 times per step in Qwen3-8B (36 x 2 + 1), 57 in Qwen2.5-7B': two row norms
    per layer and the final norm (Qwen3's per-head q/k norms are another op)."""
    n = {c.name: 2 * c.layers + 1 for c in (QWEN3_8B, QWEN25_7B)}
    return checked(tuple(n.values()) == (73, 57), "; ".join(f"{k}: {v} row RMSNorms per token" for k, v in n.items()))


@claim_measure("decoder-043")
def _residual_adds(part):
    """004:362 'Qwen3-8B calls the residual add 72 times per token (36 layers x 2)'."""
    n = 2 * QWEN3_8B.layers
    return checked(n == 72, f"{QWEN3_8B.name}: {QWEN3_8B.layers} layers x 2 residual connections = {n} per token")
