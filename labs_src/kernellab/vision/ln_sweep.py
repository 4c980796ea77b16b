"""LayerNorm at every hidden size (issue 38 item 4): 8192 rows of 1024 to 16384 halves, the fastest step
against a memcpy of the same bytes timed in the same run (its floor), the sweep's table, its one sentence,
its targets and the Nsight Compute readings of step 36 where it is furthest from that floor."""
from __future__ import annotations

from ..core import results
from ..core.bench import MEMCPY
from ..core.family import FLOOR_TARGET, Target
from .reference import LN_SWEEP
from .report import limit_bullet, on_ncu_device
from .steps import LAYERNORM

KEYS = [LAYERNORM.case_key(s, p) for s, p in LN_SWEEP]
TORCH = "torch F.layer_norm"


def table(df):
    """Per hidden size: the fastest step, its fraction of the copy roof, torch's time over its time and the
    memcpy's time over its time (its fraction of the floor)."""
    return results.sweep_table(df, KEYS, TORCH, MEMCPY)


def worst_of_floor(df):
    """The worst time(memcpy) / time(fastest step) over the sweep, with its band."""
    return results.worst_ratio(df, results.sweep_best(df, KEYS), MEMCPY)


def text(df) -> str:
    """The sweep in one line: where the fastest step is furthest from its floor, and step 36 (a block a row,
    the row read once) against step 03 (a warp a row, re-reading what its registers do not hold) at the
    widest row, by the noise rule."""
    w = worst_of_floor(df)
    if not w.ok:
        return "LayerNorm at hidden 1024–16384 is not measured here and not recorded yet (`make bench`)."
    top = results.sweep_best(df, KEYS)
    at = min(top.index, key=lambda c: results.ratio(df, top.loc[c, "name"], MEMCPY, c))
    return (f"At 8192 rows the fastest step is furthest from its floor at `{at}`: **{w.value:.2f}** of the "
            f"memcpy's speed (band {w.lo:.2f}–{w.hi:.2f}; target ≥ {FLOOR_TARGET:g}: "
            f"{results.target_outcome(w, FLOOR_TARGET)}). At the widest row, "
            + results.compare_text(df, "36_layernorm_row_block", "03_layernorm_warp_vec8", KEYS[-1]) + ".")


def say(df) -> None:
    results.say(text(df))


def limits_text(lim, res=None) -> str:
    """One bullet per recorded reading of step 36 on the sweep (results.limiters(LAYERNORM)): its fractions of
    the copy roof and of the memcpy of the same bytes, its counters and the one counter rule's verdict."""
    d = on_ncu_device(res)
    cols = [(n, LAYERNORM.case_key(s, p)) for n, s, p, _ in LAYERNORM.limiter_cases()]
    return "\n".join(limit_bullet(lim, n, c, d, lambda d, s, c: results.ratio_band(d, s, MEMCPY, c),
                                  f"`{MEMCPY}`") for n, c in cols if c in KEYS)


def say_limits(res=None) -> None:
    results.say(limits_text(results.limiters(LAYERNORM), res))


TARGETS = [
    Target("LayerNorm: the fastest step, worst fraction of the copy roof at 8192 rows, hidden 1024..16384",
           lambda df: results.sweep_worst_frac(df, KEYS), 0.90, unit="",
           floor=lambda df: results.sweep_worst_frac(df, KEYS, "baseline", [MEMCPY])),
    Target("LayerNorm: the fastest step, worst fraction of its memcpy floor at 8192 rows, hidden 1024..16384",
           worst_of_floor, FLOOR_TARGET),
]
