"""Lab 08's sentences and picture, computed from the results on screen (live or recorded): which
steps the token ran, what holds the GEMVs back, the launches' share, eager vs graph, plot_tokens."""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace

import numpy as np

from .. import gemv as G
from ..core import results, store
from ..core.device import load_recorded
from ..core.results import MISSING, one_source, pick, ratio_band, select, source, within_noise
from .bytes_model import bytes_per_token, seed_gemv_gbps, seed_read_fraction
from .config import TINY, Config, PATHS, QWEN3_8B
from .reference import STAGES_PER_LAYER, error_bound, rel_err, top2_margin
from .engine import TOKEN_DECODE, GpuOps
from .fused import qk_norm_rope
from .measure import DECODER, SKIPS, ctx_case, floor_name, skip_name, step_name
from ..attention import targets_vs_floor
from ..attention.stale import each_device, stale_names


# ---- sentences computed from the results on screen -------------------------------------------------------------

def qk_fused(path: str = "float16") -> bool:
    """Whether today's token step runs the q/k head norm, RoPE and the cache append as one launch (lab 08's)."""
    return GpuOps(path).qk_rope is qk_norm_rope


class _Counting:
    """A token step's ops, each call counted by name (Decoder.step's own sequence, run on NumPy)."""

    def __init__(self, ops):
        self.__dict__.update(ops=ops, n=Counter())

    def __getattr__(self, op):
        f = getattr(self.ops, op)
        if not callable(f) or op.startswith("_"):
            return f

        def counted(*a, **kw):
            self.n[op] += 1
            return f(*a, **kw)
        return counted


@functools.lru_cache(maxsize=None)
def token_ops(cfg: Config = QWEN3_8B, path: str = "float16") -> dict:
    """{op: calls} one token step of `cfg` on `path` makes, counted on a tiny model of cfg's layer kind at 1 and 2
    layers and scaled to cfg's layers: computed from today's code, so it follows the step as it changes."""
    from .engine import Decoder
    from .weights import random_weights
    got = []
    for layers in (1, 2):
        c = replace(TINY, layers=layers, qk_norm=cfg.qk_norm, qkv_bias=cfg.qkv_bias)
        dec = Decoder(c, random_weights(c, seed=0), path, capacity=4, emulate=True)
        dec.ops = _Counting(dec.ops)
        dec.step()
        got.append(dec.ops.n)
    one, two = got
    return {op: one[op] + (cfg.layers - 1) * (two[op] - one[op]) for op in two}


def launches_per_token(cfg: Config = QWEN3_8B, path: str = "float16", attention_launches: int | None = None) -> int:
    """Kernel launches one eager token step makes: one per op call of token_ops, but for the ops in `per`."""
    if attention_launches is None:      # decode: 1 launch with step 06 (it merges in the same launch), else 2 (+ merge)
        from ..attention import DEC_VARIANTS
        attention_launches = 1 if GpuOps(path).decode is DEC_VARIANTS.get("06_gqa_flash") else 2
    per = {"argmax": 2, "decode": attention_launches, "qk_rope": 1 if qk_fused(path) else 2}
    return sum(n * per.get(op, 1) for op, n in token_ops(cfg, path).items())


def ran(df, path: str) -> dict:
    """{op: step} that the token step on `path` ran in the frame's first device's rows (its `steps`
    column, written by make bench, or today's GpuOps for a live frame): what a sentence names."""
    d = one_source(df) if df is not None and len(df) else None
    if d is not None and "steps" in d:
        r = d[(d["name"] == step_name(path, "graph")) & d["steps"].notna()]
        if len(r):
            return dict(p.split("=", 1) for p in str(r["steps"].iloc[0]).split("; ") if "=" in p)
    ops = GpuOps(path)
    from ..core.fingerprint import step_name as _name
    return {op: _name(getattr(ops, op)) for op in GpuOps.OPS}


def plot_tokens(tps, tb, swaps, context: int = 512):
    """Lab 08's picture from the frames on screen (the device on screen): tokens/s per path against its
    read-only floor and the torch baselines, and the Amdahl table's end-to-end gains."""
    from ..core import plot
    d = one_source(tps)
    if d is None or d.empty:
        print("(no data for plot 08_tokens)")
        return None
    case = ctx_case(context)
    rows = {p: pick(d, step_name(p, "graph"), "tokens/s", case=case) for p in PATHS}
    floors = {p: pick(d, floor_name(p), "tokens/s", case=case) for p in PATHS}
    t = one_source(tb) if tb is not None and len(tb) else None
    t = t[t["device"] == d["device"].iloc[0]] if t is not None and "device" in t else t
    base = {nm: pick(t, nm, "tokens/s", case=case) for nm in ([] if t is None else t["name"].unique()) if "token step" not in nm}
    gains = dict(zip(swaps["swap"], swaps["end-to-end gain"])) if swaps is not None and len(swaps) else {}
    return plot.tokens({k: v for k, v in rows.items() if v == v}, floors, base, gains, "08_tokens",
                       "Qwen3-8B token step, batch 1", source(d))


def fused_gemvs(r: dict):
    """The name of lab 08's fused GEMV steps a token step ran (its `fuse`), or None where it ran lab 04's GEMVs."""
    f = str(r.get("fuse", "") or "")
    return None if f in ("", "separate", "()") else f


def ran_text(df) -> str:
    """Which GEMV and attention steps each path's token step ran, as the frame's rows say (a record
    names them; a live run is today's code)."""
    parts = [f"{p}: lab 08's fused steps `{fused_gemvs(r)}`" if fused_gemvs(r) else f"{p}: `{r.get('gemv', '?')}`"
             for p in PATHS for r in [ran(df, p)]]
    dec = ran(df, "float16").get("decode", "?")
    return (f"The token steps timed here ran the GEMV steps {', '.join(parts)}, and decode attention "
            f"`{dec}` ({source(df)}).")


TOKEN_GEMV_CASES = {"4096x4096": "o 4096×4096", "12288x4096": "12288×4096 (half the fused gate/up)",
                    "4096x12288": "down 4096×12288", "151936x4096": "the LM head 151936×4096"}


def gemv_limits(df) -> str:
    """What holds each path's GEMVs back, from lab 04's record (gemv.csv) of the device on screen at the token's
    own shapes (TOKEN_GEMV_CASES): the read-only floor's fraction of the read roof, the GEMV's of that floor."""
    rec = load_recorded(G.GEMV.name)
    dev = one_source(df)["device"].iloc[0] if df is not None and len(df) else None
    rec = rec[rec["device"] == dev] if dev is not None and len(rec) else rec
    parts = []
    for path in PATHS if len(rec) else ():
        r = ran(df, path)
        if fused_gemvs(r):
            parts.append(f"{path}: lab 08's fused steps `{fused_gemvs(r)}`, not in lab 04's record")
            continue
        step = r.get("gemv", G.GEMV.default[path])       # the GEMV step the token's record ran
        d = rec[(rec["dtype"] == path) & rec["case"].isin([f"{c}:{path}" for c in TOKEN_GEMV_CASES])]
        fl, st = d[d["name"] == G.FLOOR].set_index("case"), d[d["name"] == step]
        of = (fl["median_us"] / st.set_index("case")["median_us"]).dropna()
        if len(of):
            old = " (lab 04's rows of it ran an earlier version)" if any(store.note(G.GEMV.name, st)) else ""
            parts.append(f"{path}: the floor over its bytes **{fl['frac_read'].min():.2f}–{fl['frac_read'].max():.2f}** "
                         f"of the read roof, `{step}`{old} **{of.min():.2f}–{of.max():.2f}** of that floor")
    return (f"Lab 04's record at the token's shapes ({', '.join(TOKEN_GEMV_CASES.values())}): " + "; ".join(parts)
            + f" (gemv.csv, recorded on {rec['device'].iloc[0]}).") if parts else MISSING


# the token step's ops that read no weight matrix (token_ops' names), as a sentence lists them
OTHER_OPS = {"fused": "add + RMSNorm", "norm": "RMSNorm", "bias_add": "the q/k/v bias", "head_norm": "the q/k norm",
             "qk_rope": "the q/k norm with RoPE and the cache append", "rope_append": "RoPE and the cache append",
             "decode": "attention", "silu_mul": "SiLU × up", "embed": "the embedding", "argmax": "the argmax",
             "conv": "the fp32 -> fp16 conversions"}


def launch_share(df, cfg: Config = QWEN3_8B, context: int = 512) -> str:
    """The fp16 token's launches beyond its read-only floor's (one reader per weight array) at lab 00's cost per
    launch inside a CUDA graph (measuring.csv, the device on screen): their share of the replayed token."""
    from ..measuring import ROOF_QUANTITIES as QUANTITIES
    rec, d = load_recorded("measuring"), one_source(df)
    if rec.empty or d is None or not len(d):
        return MISSING
    rec = rec[rec["device"] == d["device"].iloc[0]]
    per = rec.loc[rec["quantity"] == QUANTITIES["launch_graph_us"], "value"]
    t = pick(d, step_name("float16", "graph"), "median_us", case=ctx_case(context))
    f = pick(d, "float16 read-only floor (graph)", "median_us", case=ctx_case(context))
    extra = launches_per_token(cfg, "float16") - (4 * cfg.layers + 1)
    if per.empty or t != t:
        return MISSING
    cost = extra * float(per.iloc[0])
    gap = f"{t - f:.0f} µs ({(t - f) / t:.0%} of the token)" if f == f and t > f else ""
    if step_name("float16", "graph") in stale_names(d):     # today's launches against an earlier step's time: not set
        return ((f"The recorded fp16 token's gap to its read-only floor is {gap}. " if gap else "") + "It ran an earlier "
                "version of the token step, so today's launches and kernels are not set against its time here "
                "(`make bench` on that GPU records today's).")
    said = (f"Beside the {4 * cfg.layers + 1} weight reads of the floor, an fp16 token makes **{extra}** launches "
            f"more ({', '.join(OTHER_OPS[op] for op in token_ops(cfg, 'float16') if op in OTHER_OPS)}); at lab 00's "
            f"{float(per.iloc[0]):.2f} µs per launch inside a graph ({rec['device'].iloc[0]}), their launches cost "
            f"about **{cost / t:.0%}** of the token.")
    if gap:
        said += (f" The whole gap to the floor is {gap}: those launches "
                 f"are {min(cost / (t - f), 1):.0%} of it; the rest, {max(t - f - cost, 0):.0f} µs, is the other "
                 f"kernels' own run time and each GEMV's distance from its floor. " + gap_text(d, context))
    return said


def tokens_text(df, context: int = 512) -> str:
    """The fp16 graph-replayed token against the eager one at `context` by the noise rule, and the host's µs per
    token of each (their times: the table on screen), or the line saying nothing is measured or recorded yet."""
    d, case = select(df, path="float16", context=context), ctx_case(context)
    graph, eager = step_name("float16", "graph"), step_name("float16", "eager")
    hg, he = (pick(d, n, "host_us", case=case) for n in (graph, eager))
    m = ratio_band(d, graph, eager, case)
    if hg != hg or he != he or not m.ok:
        return MISSING
    return (f"Replayed as one CUDA graph, the fp16 token at context {context} is {results.times(d, graph, eager, case)} "
            f"as fast as eager (band {m.lo:.2f}–{m.hi:.2f}), and the host pays {hg:.0f} µs per replay against {he:.0f} µs "
            f"per eager token ({source(df)}).")


# ---- the notebook's sentences, one call a cell (each reads the frames and arrays on screen) ------------------

def say_bytes(cfg: Config = QWEN3_8B, context: int = 512, long: int = 4096) -> None:
    """The bytes table in one line: what int4 weights save at `context`, and the KV cache's growth to `long`."""
    b16, b4, bl = (bytes_per_token(cfg, p, n) for p, n in (("float16", context), ("int4", context), ("float16", long)))
    results.say(f"At context {context} int4 weights cut an fp16 token's bytes **{b16['total'] / b4['total']:.2f}×** (the "
                f"fp16 LM head is then {b4['LM head'] / b4['total']:.0%} of them); the KV cache grows by "
                f"{(bl['KV cache'] - b16['KV cache']) / (long - context) / 1e3:.0f} kB per token of context, "
                f"{bl['KV cache'] / bl['total']:.1%} of an fp16 token at {long}.")


def seed_span(seeds) -> tuple:
    """The seeds' tokens/s (seed_figures): (fp16's best 'after', AWQ lowest, AWQ highest)."""
    awq = seeds[seeds["model"].str.contains("AWQ")][["tokens/s before", "tokens/s after"]]
    return seeds[seeds["model"].str.contains("fp16")]["tokens/s after"].max(), awq.min().min(), awq.max().max()


def say_seeds(seeds) -> None:
    """The seeds' best figures (seed_figures) as fractions of the Orin AGX's datasheet bandwidth, by this lab's
    bytes model, and the tokens/s that seed 002's own GEMV time allows."""
    best, _, hi = seed_span(seeds)
    results.say(f"With this lab's bytes model, {best:.2f} fp16 tokens/s is **{seed_read_fraction(best):.2f}** of the "
                f"Orin AGX's datasheet bandwidth. {hi:.2f} AWQ tokens/s is **{seed_read_fraction(hi, 'int4'):.2f}** of "
                f"it if the weights are int4, and **{seed_read_fraction(hi, 'w8a16'):.2f}** if they are int8, as seed 002 "
                f"says its AWQ kernel is: {seed_read_fraction(best) / seed_read_fraction(hi, 'w8a16'):.1f}× less of the "
                "bandwidth than the fp16 engine at best.")
    gbps, ms, shape = seed_gemv_gbps()
    if gbps == gbps:
        need = bytes_per_token(QWEN3_8B, "float16", 1)["total"] / (gbps * 1e6)     # ms per token at that rate
        results.say(f"Seed 002's own {shape} fp16 GEMV time ({ms:g} ms, the figure lab 04 quotes) is **{gbps:.0f} "
                    f"GB/s**; at that rate a {bytes_per_token(QWEN3_8B)['total'] / 1e9:.2f} GB fp16 token (context 1) "
                    f"needs at least {need:.0f} ms: at most **{1e3 / need:.1f}** tokens/s, "
                    f"{'below' if 1e3 / need < seeds[['tokens/s before', 'tokens/s after']].min().min() else 'not below'} every "
                    "figure of the table.")


def say_fp16_storage(cfg: Config, new, logits, new16, logits16) -> None:
    """fp16 storage against the float64 reference: the logits' error beside error_bound, the greedy tokens, the margin."""
    e16, margin = rel_err(logits16, logits), top2_margin(logits)
    results.say(f"fp16 storage moves the logits by **{e16:.1e}** (normwise, relative); the bound is "
                f"**{error_bound(cfg):.1e}** ({STAGES_PER_LAYER} stores per layer × {cfg.layers} layers + 2, × 2^-11). "
                f"The greedy tokens {'agree' if new16 == new else 'differ'} ({new16}). A greedy step may flip only "
                f"where the top-2 margin is below twice the logit error; the smallest margin in these steps is "
                f"{margin.min():.3f}, the largest logit error {np.abs(logits16 - logits).max():.1e}.")


def gap_text(d, context: int = 512) -> str:
    """Where the fp16 token's gap to its read-only floor goes, measured: the graph-replayed token with each non-GEMV
    op left out (measure.skip_rows, timing only), its cost by the noise rule; '' where those rows are not recorded."""
    case, step = ctx_case(context), step_name("float16", "graph")
    t, f = (pick(d, n, "median_us", case=case) for n in (step, floor_name("float16")))
    cost = {ops: t - pick(d, skip_name("float16", ops), "median_us", case=case) for ops in SKIPS}
    if any(v != v for v in cost.values()) or not f == f or t <= f:
        return ""
    what = {"decode": "decode attention", "qk_rope": "the q/k norm + RoPE + append", "silu_mul": "SiLU × up"}
    parts = []
    for ops in SKIPS[:-1]:
        m = ratio_band(d, skip_name("float16", ops), step, case)
        parts.append(f"{what.get(ops, ops)} " + ("within noise of nothing" if within_noise(m) else
                                                 f"**{cost[ops]:.0f} µs** ({cost[ops] / (t - f):.0%})"))
    alone = t - cost[SKIPS[-1]]
    roof, floor_roof = (pick(d, n, "frac_read", case=case) for n in (skip_name("float16", SKIPS[-1]), floor_name("float16")))
    return (f"Measured by leaving each op out of the replayed token (timing only; the tokens are then wrong), "
            f"the gap of {t - f:.0f} µs splits into " + ", ".join(parts) + f". With all three left out the token is the "
            f"GEMVs alone: {alone:.0f} µs, **{f / alone:.2f}** of the floor and **{roof:.2f}** of the read roof (the "
            f"floor itself is {floor_roof:.2f}), so the GEMVs' own distance from their "
            f"floors is {alone - f:.0f} µs ({(alone - f) / (t - f):.0%} of the gap) and the three ops together "
            f"{cost[SKIPS[-1]]:.0f} µs ({cost[SKIPS[-1]] / (t - f):.0%}). A target above that fraction of the floor "
            "needs those ops overlapped with the weight stream, not made faster alone.")


def contexts_text(d, cfg: Config = QWEN3_8B, floor_at: int = 512) -> str:
    """The fp16 token against its floor at each context on screen (one device), and what the longer cache adds: the
    token's growth from its shortest to its longest context beside its decode attention's, timed alone with L2
    flushed (as a long cache meets it in a token) in lab 07's record (attention_decode)."""
    step = step_name("float16", "graph")
    f = pick(d, floor_name("float16"), "median_us", case=ctx_case(floor_at))
    rows = select(d, name=step)
    ctxs = sorted(int(c) for c in rows["context"].dropna()) if rows is not None and "context" in rows else []
    if f != f or not ctxs:
        return ""
    t = {n: pick(d, step, "median_us", case=ctx_case(n)) for n in ctxs}
    of = {n: results.ratio(d, step, floor_name("float16"), ctx_case(n), slow_case=ctx_case(floor_at)) for n in ctxs}
    said = ("In the tokens/s run the floor reads the weights only, so one floor serves every context: the fp16 token "
            "is " + ", ".join(f"**{of[n]:.2f}** of it at context {n}" for n in ctxs) + ".")
    short, long = ctxs[0], ctxs[-1]
    dev, calls = d["device"].iloc[0], token_ops(cfg, "float16").get("decode", 0)
    rec = select(load_recorded("attention_decode"), device=dev)      # its decode's GPU time alone (L2 flushed)
    att = {n: pick(select(rec, case=f"32x{n}:float16"), TOKEN_DECODE, "median_us") for n in (short, long)}
    grow, agrow = t[long] - t[short], calls * (att[long] - att[short])
    if long > short and agrow == agrow and grow > 0:
        said += (f" From context {short} to {long} the token grows by {grow:.0f} µs; its {calls} calls of "
                 f"`{TOKEN_DECODE}`, timed alone (L2 flushed) at those lengths in lab 07's record, grow by "
                 f"{agrow:.0f} µs, **{agrow / grow:.0%}** of it: decode attention's reads of the longer cache are "
                 f"{'most' if agrow >= grow / 2 else 'part'} of what a long context adds.")
    return said[:-1] + f" ({source(d)})."


def say_tokens(tps, context: int = 512) -> None:
    """The tokens/s table's sentences: the steps each path ran, graph against eager, what holds the GEMVs back,
    and the launches' share of a token (the paths against each other: the targets table)."""
    steps = [step_name(p, "graph") for p in PATHS]                 # what ran_text, tokens_text ... read
    each_device(tps, lambda d: ran_text(d), names=steps)
    each_device(tps, lambda d: tokens_text(d, context), names=[step_name("float16", m) for m in ("graph", "eager")])
    each_device(tps, gemv_limits, names=steps)
    each_device(tps, launch_share, names=[step_name("float16", "graph"), floor_name("float16")])
    each_device(tps, contexts_text, names=[step_name("float16", "graph"), floor_name("float16")])


def targets_table(tps, tb, baselines):
    """DECODER's targets on tps and the torch decoders' (baselines) on tb, judged by attention.targets_vs_floor."""
    import pandas as pd
    return pd.concat([targets_vs_floor(DECODER.targets, tps), targets_vs_floor(baselines.targets, tb)],
                     ignore_index=True)


def say_vs_torch(tb, *bases) -> None:
    """How the torch baselines' time per token, and our ratio to them, move with the context, one device (the
    ratios at each context, with how far the read roof would let them go: the targets table)."""
    each_device(tb, lambda d: context_text(d, bases[-1]))
    each_device(tb, lambda d: growth_text(d, step_name("float16", "graph"), bases[0]))


def growth_text(d, ours: str, base: str, short: int = 1, long: int = 4096) -> str:
    """Why our ratio to `base` moves with the context, on one device: what each token gains in µs from context
    `short` to `long`, judged equal when the difference is within the four rows' p10-p90 half-bands added up
    ('' where a row is missing)."""
    row = lambda name, n, col="median_us": results.pick(d, name, col, case=ctx_case(n))   # noqa: E731
    a0, a1, b0, b1 = (row(x, n) for x in (ours, base) for n in (short, long))
    if any(v != v for v in (a0, a1, b0, b1)):
        return ""
    noise = sum((row(x, n, "p90_us") - row(x, n, "p10_us")) / 2 for x in (ours, base) for n in (short, long))
    ga, gb = a1 - a0, b1 - b0
    how = ("the same within the rows' noise" if abs(ga - gb) <= noise else
           f"{'less' if ga < gb else 'more'} in ours by {abs(ga - gb):.0f} µs (beyond the rows' noise of {noise:.0f} µs)")
    return (f"In the run that times both decoders, from context {short} to {long} our token grows by **{ga:.0f} µs** "
            f"and `{base}`'s by **{gb:.0f} µs**: {how}. What the longer cache adds to both moves the ratio from "
            f"{b0 / a0:.2f}× to {b1 / a1:.2f}× ({source(d)}).")


def context_text(d, name: str, short: int = 1, long: int = 4096) -> str:
    """How `name`'s time per token moves from context `short` to `long` on one device, by the noise rule, beside
    its host time as a share of its time: a baseline whose host time is all of its time is set by the host's
    dispatch of each op, not by the cache's bytes ('' when either context is not measured)."""
    m = results.ratio_band(d, name, name, ctx_case(long), slow_case=ctx_case(short))
    rows = one_source(select(d, name=name))
    if not m.ok or rows is None or "host_us" not in rows or rows["host_us"].isna().all():
        return ""
    share = (rows["host_us"] / rows["median_us"]).dropna()
    long_us = results.pick(d, name, "median_us", case=ctx_case(long))
    up = m.value >= 1                                                  # slower at the short context
    r, lo, hi = (m.value, m.lo, m.hi) if up else (1 / m.value, 1 / m.hi, 1 / m.lo)
    how = ("within noise of each other" if results.within_noise(m) else
           f"**{r:.2f}×** as long at context {short if up else long}")
    why = ("the host's dispatch of each eager op sets it, not the cache's bytes, so it need not grow with the context"
           if share.min() >= 0.9 else "the GPU's work sets it, not the host")
    return (f"`{name}` takes {m.value * long_us / 1e3:.1f} ms a token at context {short} and {long_us / 1e3:.1f} ms "
            f"at {long}: {how} (band {lo:.2f}–{hi:.2f}). Its host time is {share.min():.2f}–{share.max():.2f} of its "
            f"time at every context: {why} ({source(d)}).")


def claims_table(tps, measured, families):
    """The seeds' claims judged on the tokens/s frame (results.claims): the summary said, the table returned."""
    claims = results.claims("08_decoder", [tps], families, measured=measured)
    results.say(results.claims_summary(claims))
    return claims


def say_orin(orin, seeds, context: int = 512, fraction: float = 0.75) -> None:
    """The seeds' measured tokens/s (seed_span) against the Orin model on screen (orin_model) at `fraction` of the
    datasheet bandwidth and `context`, fp16 and int4: what bytes alone predict and what was measured."""
    col = [c for c in orin.columns if c.startswith(f"tokens/s at {fraction:.2f}")][0]
    o16, o4 = (orin.loc[(orin["path"] == p) & (orin["context"] == context), col].iloc[0] for p in ("float16", "int4"))
    best, lo, hi = seed_span(seeds)
    results.say(f"Against the model at {fraction:g} of the datasheet bandwidth and context {context}, the seeds measured "
                f"{best:.2f} fp16 tokens/s ({best / o16:.2f}× the model's figure) and {lo:.2f}–{hi:.2f} AWQ ({hi / o4:.2f}× "
                f"its int4 figure at best). Bytes alone predict AWQ **{o4 / o16:.2f}×** as fast as fp16; the seeds "
                f"measured it **{hi / best:.2f}×** as fast.")


def say_launches(cfg: Config = QWEN3_8B) -> None:
    """How many launches one eager token makes on the fp16 and int4 paths (launches_per_token)."""
    results.say(f"One eager Qwen3-8B token is **{launches_per_token(cfg, 'float16')}** launches in fp16 and "
                f"**{launches_per_token(cfg, 'int4')}** on the int4 path (each quantised GEMV adds lab 04's fp32 -> "
                f"fp16 conversion); as a CUDA graph it is one replay.")
