"""Lab 08's measurements (a GPU; loud skips, none): the token step's rows per path and context, its read-only
floor, the Amdahl table's swaps and skips, the Family DECODER, and a per-launch breakdown."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import gemv as G
from ..core.family import Family, Target
from ..core.results import frac_band, live_or_recorded, pick, ratio_band
from .bytes_model import bytes_per_token
from .config import Config, DECODER_NAME, FAMILY, PATHS, QWEN3_8B
from .engine import FUSE_SWAPS, Decoder, GpuOps


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
    """Live: the decoder's token step at each context, eager and/or graph-replayed (bench.wall: CUDA events around
    one call started on an idle GPU, and the host's µs to issue it)."""
    from ..core.bench import roof_values, wall
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
    """Live: the floor of a token on this path and GPU: one CUDA graph of lab 00's fastest reader over each of the
    token's weight arrays in the step's order, nothing computed. No token step that must read those weights once
    can be faster here; the row's bytes are the step's, so its frac_read is the most the step's could be."""
    from ..core.bench import graph, read_floor, roof_values, wall
    arrays = [a for L in dec.layers for key in ("qkv", "o", "gu", "down") for a in G.read_by(L[key])] + [dec.lm]
    calls = [c for c in (read_floor(a) for a in arrays) if c is not None]
    g = graph(lambda: [c() for c in calls])
    t = wall(g, reps=reps, flush=False)
    return [_row(dec.cfg, floor_name(dec.path), dec.path, context, "graph", t, reps,
                 roof_values().get("read_gbps", float("nan")))]


def tokens_per_s(cfg: Config = QWEN3_8B, paths=("float16",), contexts=(1, 512), layers: int | None = None,
                 reps: int = 20, swaps=()):
    """Live: step_rows at each path and context (an eager step's launch gaps count, as they do in a decode loop),
    each path's floor_rows, and on the same decoders the Amdahl table's `swaps` (swap_rows) and skip_rows. layers:
    fewer layers than cfg on a GPU with too little memory (the rows say how many; the bytes are that many layers')."""
    import cupy
    rows = []
    run_cfg = replace(cfg, layers=layers) if layers else cfg
    for path in paths:
        dec = Decoder(run_cfg, None, path, capacity=max(contexts) + 8)
        rows += step_rows(dec, contexts, reps)
        rows += floor_rows(dec, SWAP_CONTEXT if SWAP_CONTEXT in contexts else max(contexts), reps)
        rows += swap_rows(dec, [sw for sw in swaps if sw.path == path], reps=reps)
        if swaps and path == "float16":
            rows += skip_rows(dec, reps=reps)
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
    Swap("fp16 GEMV: seed 002's v2, before -> after (lab 04)", "float16", "gemv", "32_fp16_v2_plain", "33_fp16_v2_ldg",
         "decoder-015"),
    Swap("fp16 GEMV: lab 04's first fp16 step -> the step the token runs", "float16", "gemv", "09_fp16_half2", "27_fp16_rows"),
    Swap("decode attention: split-KV -> GQA with bytes in flight (lab 07)", "float16", "decode", "03_split", "05_gqa_tile"),
    Swap("q/k head norm + RoPE + cache append: two launches -> one fused (lab 08)", "float16", "qk_rope", "separate",
         "07_qk_norm_rope"),
    Swap("int4 GEMV: lab 04's AWQ step -> its mma step", "int4", "gemv", "26_int4_awq", "28_int4_mma"),
    Swap("steps 08 + 09: RMSNorm inside the next GEMV, the residual add in the GEMV's epilogue (lab 08)",
         "float16", "fuse", "separate", "08 + 09"),
    Swap("step 08 alone: RMSNorm inside the GEMV (the residual add already in the epilogue)", "float16", "fuse",
         "09 alone", "08 + 09"),
    Swap("step 09 alone: the residual add in the GEMV's epilogue (then lab 02's RMSNorm)", "float16", "fuse",
         "separate", "09 alone"),
    Swap("step 10: SiLU x up inside the down GEMV as well", "float16", "fuse", "08 + 09", "08 + 09 + 10"),
    Swap("step 11: the o projection's weights read into L2 on a second stream while attention runs", "float16",
         "fuse", "08 + 09", "08 + 09 + 11"),
    Swap("decode attention: two launches -> one (step 06, each KV head's last block merges; lab 07)", "float16",
         "decode", "05_gqa_tile", "06_gqa_flash"),
    Swap("step 12: the GEMVs launched as programmatic dependents (sm_90): their weights stream before the kernel "
         "ahead ends", "float16", "fuse", "08 + 09", "08 + 09 + 12"),
)


# where the token's gap to its floor goes: the graph-replayed step with these ops left out (timing only)
SKIPS = ("decode", "qk_rope", "silu_mul", "decode + qk_rope + silu_mul")


def skip_name(path: str, ops: str) -> str:
    return f"{path} (graph), without {ops}"


def skip_rows(dec, skips=SKIPS, context: int = SWAP_CONTEXT, reps: int = 20) -> list:
    """Live: the graph-replayed token step with each of `skips` left out (its launches not made: the tokens are
    wrong, the time is what the rest costs), on the same decoder, at one context."""
    return _timed_with(dec, [(skip_name(dec.path, ops), {op: "skipped" for op in ops.split(" + ")}) for ops in skips],
                       context, reps)


def gap(df, path: str = "float16", context: int = SWAP_CONTEXT):
    """Where the token's gap to its read-only floor goes, from the frame on screen: per left-out op, the token's
    time without it, what it costs (µs a token) and its share of the gap (step - floor). A DataFrame."""
    import pandas as pd
    case = ctx_case(context)
    step, floor = (pick(df, n, "median_us", case=case) for n in (step_name(path, "graph"), floor_name(path)))
    rows = [{"left out": ops, "token µs": t, "cost µs": step - t, "share of the gap": (step - t) / (step - floor)}
            for ops in SKIPS for t in [pick(df, skip_name(path, ops), "median_us", case=case)]]
    return pd.DataFrame(rows + [{"left out": "(the floor: every GEMV weight read, nothing computed)", "token µs": floor,
                                 "cost µs": step - floor, "share of the gap": 1.0}])


def swap_rows(dec, swaps, context: int = SWAP_CONTEXT, reps: int = 20) -> list:
    """Live: for each swap, the graph-replayed token step with the op run by its before step and by its after
    step (GpuOps' swap), on the same decoder, at one context; a row two swaps share is timed once."""
    from ..core.pdl import supported
    swaps = [sw for sw in swaps if supported() or not (sw.op == "fuse" and "pdl" in FUSE_SWAPS[sw.after])]  # sm_90
    runs = {sw.name(w): {sw.op: getattr(sw, w)} for sw in swaps for w in ("before", "after")}
    return _timed_with(dec, list(runs.items()), context, reps)


def _timed_with(dec, runs, context: int, reps: int) -> list:
    """Live: for each (row name, GpuOps swap) of `runs`, the graph-replayed token step on the same decoder with
    that swap, at one context; the decoder's own ops are put back afterwards."""
    rows, keep = [], dec.ops
    try:
        for name, swap in runs:
            dec.ops, dec._graph = GpuOps(dec.path, swap), None
            rows += step_rows(dec, [context], reps, modes=("graph",), name=name)
    finally:
        dec.ops, dec._graph = keep, None
    return rows


def amdahl(df, swaps=SWAPS, context: int = SWAP_CONTEXT):
    """The Amdahl table from the frame on screen: per swap, the token's time with the before and the after step,
    and the end-to-end gain with its band. Returns (table, {claim id: Measured}) for results.claims."""
    import pandas as pd
    rows, measured = [], {}
    for sw in swaps:
        b, a = (pick(df, sw.name(w), "median_us", case=ctx_case(context)) for w in ("before", "after"))
        if a != a:              # not timed here (step 12 below sm_90, or a record older than the swap)
            continue
        m = ratio_band(df, sw.name("after"), sw.name("before"), ctx_case(context))
        if sw.claim and m.ok:
            measured[sw.claim] = m
        rows.append({"swap": sw.what, "before": sw.before, "after": sw.after, "token ms (before)": b / 1e3,
                     "token ms (after)": a / 1e3, "end-to-end gain": m.value, "seed claim": sw.claim or "-"})
    return pd.DataFrame(rows).round(3), measured


RECORD_PATHS, RECORD_CONTEXTS = PATHS, (1, 512, 4096)


def measure_tokens_per_s(**kw):
    """tokens/s live (tokens_per_s), or recorded rows from decoder.csv, or a loud skip: the one switch."""
    return live_or_recorded(DECODER_NAME, "tokens/s of the Qwen3-8B token step, eager and CUDA-graphed, "
                            "with the fraction of the read roof the bytes model implies",
                            lambda: tokens_per_s(**kw))


def _record():
    """make bench: every path at every context, all 36 layers of Qwen3-8B, and the Amdahl table's swaps (the
    torch baselines: torch_decoder, on the same weights)."""
    return measure_tokens_per_s(cfg=QWEN3_8B, paths=RECORD_PATHS, contexts=RECORD_CONTEXTS, swaps=SWAPS)


def _frac(path, context, mode="graph", floor=False):
    """A target's measure: the step's fraction of the read roof at one context, with its band
    (floor=True: the read-only floor's, the most the step's could be)."""
    return lambda df: frac_band(df, floor_name(path) if floor else step_name(path, mode), ctx_case(context), roof="read")


def _speedup(path, context, mode="graph", floor=False):
    """time(fp16 step) / time(path's step); floor=True: the same of the two read-only floors."""
    name = floor_name if floor else (lambda p: step_name(p, mode))
    return lambda df: ratio_band(df, name(path), name("float16"), ctx_case(context))


def _of_floor(path, context):
    """time(read-only floor) / time(step) on one path, with its band: how close the step is to its floor."""
    return lambda df: ratio_band(df, step_name(path, "graph"), floor_name(path), ctx_case(context))


def token_steps(name: str):
    """What a decoder.csv row named `name` runs today (Family.steps): (engine, {op: launcher}) of a token
    step on a path (with a swap's op run by its step), the read-only floor's code, or None."""
    for path in PATHS:
        if name in (step_name(path, "eager"), step_name(path, "graph")):
            ops = GpuOps(path)
        elif name == floor_name(path):
            return [floor_rows], {}
        elif name.startswith(skip_name(path, "")):
            ops = GpuOps(path, {op: "skipped" for op in name[len(skip_name(path, "")):].split(" + ")})
        elif name.startswith(f"{path} (graph), ") and " = " in name:
            op, step = name[len(f"{path} (graph), "):].split(" = ", 1)
            ops = GpuOps(path, {op: step})
        else:
            continue
        return [Decoder, step_rows], {op: getattr(ops, op) for op in GpuOps.OPS}
    return None


DECODER = Family(
    name=DECODER_NAME, kernels=FAMILY, record=_record, roof="read", steps=token_steps,
    shapes={"Qwen3-8B, batch 1": (QWEN3_8B.hidden, QWEN3_8B.layers)},
    targets=(Target("fp16 token step (graph), fraction of the read roof at context 512", _frac("float16", 512), 0.75,
                    floor=_frac("float16", 512, floor=True)),
             Target("int4 vs fp16 tokens/s (graph), context 512", _speedup("int4", 512), 2.0,
                    floor=_speedup("int4", 512, floor=True)),
             Target("W8A16 vs fp16 tokens/s (graph), context 512", _speedup("w8a16", 512), 1.5,
                    floor=_speedup("w8a16", 512, floor=True)),
             Target("host µs per token (graph replay), context 512",
                    lambda df: pick(df, step_name("float16", "graph"), "host_us", case=ctx_case(512)), 50.0, below=True,
                    unit="µs"),
             # issue 38 (the frontier): the fp16 step at 0.90 of the read roof at every context, each path at 0.85
             # (fp16: 0.94) of its own read-only floor (the floor is recorded at context 512)
             *(Target(f"fp16 token step (graph), fraction of the read roof at context {n} (issue 38)",
                      _frac("float16", n), 0.90, floor=_frac("float16", 512, floor=True)) for n in (1, 4096)),
             Target("fp16 token step (graph), fraction of the read roof at context 512 (issue 38)",
                    _frac("float16", 512), 0.90, floor=_frac("float16", 512, floor=True)),
             *(Target(f"{p} token step (graph), fraction of its read-only floor at context 512 (issue 38)",
                      _of_floor(p, 512), t) for p, t in (("float16", 0.94), ("int4", 0.85), ("w8a16", 0.85)))),
    about="lab 08: the Qwen3-8B token step, eager and as one CUDA graph, per weight path and context")


def breakdown(cfg: Config = QWEN3_8B, path: str = "float16", context: int = 512, layers: int = 2):
    """Live: one eager step's launches, each timed alone between CUDA events (launch gaps not included), on
    `layers` layers of cfg (the per-layer ops are the same in every layer). A list of rows."""
    import cupy
    from ..core.launch import record_launches
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

