"""Lab 08's sentences and picture, computed from the results on screen (live or recorded): which
steps the token ran, what holds the GEMVs back, the launches' share, eager vs graph, plot_tokens."""
from __future__ import annotations

from .. import gemv as G
from .config import Config, PATHS, QWEN3_8B
from .engine import GpuOps
from .measure import ctx_case, floor_name, step_name


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
    from ..core.results import one_source
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
    from ..core.results import one_source, pick, source
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
    from ..core.results import source
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
    from ..core.device import load_recorded
    from ..core.results import MISSING, one_source
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
    from ..core.device import load_recorded
    from ..core.results import MISSING, one_source, pick
    from ..measuring import ROOF_QUANTITIES as QUANTITIES
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
    from ..core.results import source
    from ..core.results import MISSING
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

