"""Lab 06, measured: the block's error against float64, its GPU time against torch, the per-op
breakdown, eager against CUDA-graph launches (live, or the recorded rows), the checks, the tower's work
and an Orin model on paper, the tables and the targets, and record() for make bench."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import vision as V
from ..vision.report import REPORT_PATCHES  # noqa: F401  (the face's, and lab 09's: the reports' image)
from ..core import bench, results
from ..core.device import ORIN_PEAK_GBPS, is_live, torch as _torch
from ..core.family import Family, Target
from ..core.results import NAN, Measured, devices, live_or_recorded, one_source, ratio as _ratio, ratio_band, select
from .engine import Block, Merger, Tower, graph, run, torch_block
from .reference import FAMILY  # noqa: F401  (core.fingerprint reads the kernels' family here)
from .reference import (HEAD_DIM, HEADS, HIDDEN, LAYERS, MERGE_IN, MERGE_OUT, MERGER_PLAN, MLP, NAME,
                        PATCH_DIM, QKV, error_bound, reference_block, reference_merger, rel_err, validate)

# ---- measurements (live) or recorded rows (compile-only) ------------------------------------------

COLUMNS = ["lab", "section", "case", "N", "name", "kind", "median_us", "p10_us", "p90_us", "reps", "host_us",
           "value", "unit", "device", "date", "source"]
GRIDS = {64: (8, 8), 256: (16, 16), 1024: (32, 32), 4096: (64, 64)}


def grid_for(n):
    """A square patch grid for N tokens (N = 64, 256, 1024, 4096, ...)."""
    if n in GRIDS:
        return GRIDS[n]
    s = int(round(math.sqrt(n)))
    if s * s != n:
        raise ValueError(f"N = {n}: give a grid (grid_h, grid_w) with grid_h x grid_w = N")
    return s, s


def _frame(rows):
    """Rows of one section as a frame with every column of the recorded file."""
    import pandas as pd
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df:
            df[c] = np.nan
    df["lab"] = NAME
    return df[[c for c in COLUMNS if c not in ("device", "date", "source")]]


def _row(section, n, name, kind, t=None, **kw):
    return {"section": section, "case": f"N={n}:float16", "N": n, "name": name, "kind": kind, **(t or {}), **kw}


def _live_or_recorded(section, what, measure):
    return live_or_recorded(NAME, what, lambda: _frame(measure()), section=section)


def _torch_blocks(b, gh, gw):
    """(name, call) of the torch eager block on b's weights and input, without and with SDPA (none without torch)."""
    for nm, sd in (("torch eager block", False), ("torch eager block (SDPA)", True)):
        tb = torch_block(b.W, b.x, gh, gw, sdpa=sd)
        if tb is not None:
            yield nm, tb


def accuracy(ns=(1024, 4096), seed=0):
    """Normwise relative error against a float64 reference (CuPy float64 on the GPU, the same
    code as the NumPy reference) of our block and of the torch eager block, with the bound."""
    def measure():
        import cupy
        rows = []
        for n in ns:
            gh, gw = grid_for(n)
            b = Block(gh, gw, seed=seed)
            want = reference_block(b.x, b.W, gh, gw)
            rows.append(_row("accuracy", n, "block (lab kernels + cuBLAS)", "variant",
                             value=rel_err(b(), want), unit="rel err vs float64"))
            rows += [_row("accuracy", n, nm, "baseline", value=rel_err(cupy.asarray(tb()), want),
                          unit="rel err vs float64") for nm, tb in _torch_blocks(b, gh, gw)]
            rows.append(_row("accuracy", n, "bound", "bound", value=error_bound(), unit="rel err vs float64"))
            del b, want
        return rows
    return _live_or_recorded("accuracy", "the block's error against float64 at N = " + ", ".join(map(str, ns)), measure)


def block_times(ns=(256, 1024, 4096), seed=0):
    """GPU time (L2 flushed, launches hidden) of our block, the torch eager block, the torch
    block with SDPA, and the attention alone (ours vs F.scaled_dot_product_attention)."""
    def measure():
        rows = []
        for n in ns:
            gh, gw = grid_for(n)
            b = Block(gh, gw, seed=seed)
            b()
            rows.append(_row("block", n, "block (lab kernels + cuBLAS)", "variant", bench.time_fn(lambda: run(b.ops)).row()))  # noqa: F821
            rows += [_row("block", n, nm, "baseline", bench.time_fn(tb).row()) for nm, tb in _torch_blocks(b, gh, gw)]
            att = b.ops[4:7]                 # QK^T -> softmax -> P.V, as BLOCK_PLAN orders them
            rows.append(_row("block", n, "attention: cuBLAS + softmax kernel", "variant", bench.time_fn(lambda: run(att)).row()))
            torch = _torch()
            if torch is not None:
                import torch.nn.functional as F
                q, k, v = (torch.from_dlpack(t).unsqueeze(0) for t in (b.ws.q, b.ws.k, b.ws.v))
                rows.append(_row("block", n, "torch F.scaled_dot_product_attention", "baseline",
                                 bench.time_fn(lambda: F.scaled_dot_product_attention(q, k, v)).row()))
            del b
        return rows
    return _live_or_recorded("block", "the block's GPU time against torch at N = " + ", ".join(map(str, ns)), measure)


def _block_and_tower(n, layers, seed):
    """('block', a Block) then ('tower (L layers)', a Tower) at N = n, each built when reached."""
    yield "block", Block(*grid_for(n), seed=seed)
    yield f"tower ({layers} layers)", Tower(*grid_for(n), layers, seed=seed)


def breakdown(ns=(256, 1024, 4096), layers=LAYERS, seed=0, reps=5):
    """Per-op GPU µs and host µs of one block and of the whole tower at each N, and the wall time
    of an eager launch (launch gaps included)."""
    def measure():
        rows = []
        for n in ns:
            for what, obj in _block_and_tower(n, layers, seed):
                g, h = bench.split([o.fn for o in obj.ops], reps=reps)
                for o, gu, hu in zip(obj.ops, g, h):
                    rows.append(_row("breakdown", n, o.name, o.kind, {"median_us": gu, "host_us": hu},
                                     value=gu, unit=what))
                w = bench.wall(obj, reps=max(5, reps))
                rows.append(_row("breakdown", n, "eager wall", "wall", w, value=w["median_us"], unit=what))
                g = graph(obj.ops)           # the one GPU time of the sequence: replayed by one launch, so
                t = bench.time_fn(g, reps=max(5, reps)).row()     # the spacer surely hides it
                rows.append(_row("breakdown", n, "GPU time (launches hidden)", "gpu", t, value=t["median_us"], unit=what))
                del obj, g
        return rows
    return _live_or_recorded("breakdown", "the per-op GPU and host time of a block and the tower", measure)


def graphs(ns=(256, 1024, 4096), layers=LAYERS, seed=0, reps=10):
    """Wall time from idle (launches included) of the eager block / tower and of its CUDA-graph
    replay, and the GPU time of each (spacer: launches hidden)."""
    def measure():
        rows = []
        for n in ns:
            for what, obj in _block_and_tower(n, layers, seed):
                g = graph(obj.ops)
                for nm, fn in (("eager", obj), ("graph replay", g)):
                    w = bench.wall(fn, reps=reps)
                    rows.append(_row("graph", n, f"{what}: {nm}", "variant", w, value=w["median_us"], unit="wall us"))
                    t = bench.time_fn(fn, reps=reps).row()
                    rows.append(_row("graph", n, f"{what}: {nm} (GPU time)", "variant", t,
                                     value=t["median_us"], unit="gpu us"))
                del g, obj
        return rows
    return _live_or_recorded("graph", "eager vs CUDA-graph launches of a block and the tower", measure)


def _check(what, x, grid_h, grid_w, run, want, bound, done):
    """Run `what` on x (NumPy fp16) on the GPU against its float64 reference want(): one line with the
    normwise relative error and `bound`, CheckError beyond it; compile-only, what a GPU would do."""
    from ..core.check import CheckError
    validate(x, grid_h, grid_w)
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU the {what} runs on these {x.shape[0]} tokens and its output is "
              f"compared with the float64 reference (bound {bound:.1e}).")
        return None
    import cupy
    e = rel_err(run(cupy.asarray(x))().get(), want())
    if not e <= bound:
        raise CheckError(f"{what} at grid {grid_h}x{grid_w}: normwise relative error {e:.2e} > bound {bound:.2e}")
    print(f"{what}, grid {grid_h}x{grid_w} (N = {x.shape[0]}): OK  normwise rel err {e:.1e} <= bound {bound:.1e} {done}")
    return e


def check_block(x, W, grid_h, grid_w, want=None):
    """Our block (its BLOCK_PLAN launches) on x against the float64 reference (want, if given)."""
    return _check("block", x, grid_h, grid_w, lambda xd: Block(grid_h, grid_w, W=W, x=xd),
                  lambda: reference_block(x, W, grid_h, grid_w) if want is None else want, error_bound(),
                  "(lab 05's kernels + cuBLAS vs float64)")


def check_merger(x, M, grid_h, grid_w):
    """The merger against its float64 reference (bound: its 7 fp16 stages)."""
    return _check("merger", x, grid_h, grid_w, lambda xd: Merger(grid_h, grid_w, M=M, x=xd),
                  lambda: reference_merger(x, M, grid_h, grid_w), error_bound(len(MERGER_PLAN)),
                  f"([N, {HIDDEN}] -> [N/4, {MERGE_OUT}])")


def pick(df, n=None, **eq):
    """The rows of one device and source (results.one_source), optionally at N."""
    return one_source(select(df, **({"N": n} if n is not None else {}), **eq))


def ratio(df, fast, slow, n):
    """time(slow) / time(fast) at N (results.ratio)."""
    return _ratio(df, fast, slow, f"N={n}:float16")


def check_graph_replay(grid_h=8, grid_w=8, seed=0) -> float:
    """Replaying the captured block gives the eager block's output (relative difference)."""
    import cupy
    b = Block(grid_h, grid_w, seed=seed)
    want = b().copy()
    b.output.fill(0)
    g = graph(b.ops)
    b.output.fill(0)
    g()
    cupy.cuda.Device().synchronize()
    return rel_err(b.output, want.astype(cupy.float64))


# ---- the tower's work: FLOPs and bytes, and Orin on paper -----------------------------------------

def work(n, layers=LAYERS, mergers=4):
    """FLOPs and DRAM bytes (weights once, activations written and read once, fp16) of the tower at
    N tokens: the model behind the Orin estimate."""
    gemm_block = 2 * n * HIDDEN * (QKV + HIDDEN + 2 * MLP)
    attn = 2 * 2 * HEADS * n * n * HEAD_DIM
    w_block = 2 * (QKV * HIDDEN + HIDDEN * HIDDEN + 2 * MLP * HIDDEN)
    act_block = 2 * n * (HIDDEN * 10 + QKV * 3 + MLP * 4) + 2 * HEADS * n * n * 4   # incl. scores r/w
    m = n // 4
    gemm_merge = 2 * m * MERGE_IN * (MERGE_IN + MERGE_OUT)
    w_merge = 2 * MERGE_IN * (MERGE_IN + MERGE_OUT)
    act_merge = 2 * (n * HIDDEN * 3 + m * MERGE_IN * 8 + m * MERGE_OUT * 3)
    patch = 2 * n * PATCH_DIM * HIDDEN
    flops = layers * (gemm_block + attn) + mergers * gemm_merge + patch
    nbytes = layers * (w_block + act_block) + mergers * (w_merge + act_merge) + 2 * (HIDDEN * PATCH_DIM + n * (PATCH_DIM + 3 * HIDDEN))  # noqa: E501
    return {"flops": flops, "bytes": nbytes}


# AGX Orin 64 GB (datasheet): GPU 170 sparse INT8 TOPS = 85 dense; fp16 dense tensor = half of INT8.
ORIN_FP16_TFLOPS = 42.5
ORIN_SMS = 16


def orin_model(ns=(1024, 4096), board="agx"):
    """Orin on paper (a MODEL, not a measurement): time >= max(FLOPs / fp16 tensor peak,
    bytes / LPDDR5 peak), tokens/s <= N / time."""
    rows = []
    for n in ns:
        w = work(n)
        t_c = w["flops"] / (ORIN_FP16_TFLOPS * 1e12)
        t_m = w["bytes"] / (ORIN_PEAK_GBPS[board] * 1e9)
        rows.append({"N": n, "GFLOP": w["flops"] / 1e9, "GB moved": w["bytes"] / 1e9,
                     "compute-bound ms": 1e3 * t_c, "memory-bound ms": 1e3 * t_m,
                     "bound": "compute" if t_c > t_m else "memory",
                     "model tokens/s (upper bound)": n / max(t_c, t_m),
                     "assumes": f"Orin {board.upper()}: {ORIN_SMS} SMs, {ORIN_FP16_TFLOPS} fp16 TFLOPS, "
                                f"{ORIN_PEAK_GBPS[board]} GB/s"})
    return pd.DataFrame(rows)


# the reports' ViT figures on an Orin, each beside the model at an N: (what, tokens/s, N)
REPORTED = (("the matmul report's ViT prefill after its change (seed 002)", 676, 1024),
            ("the matmul report's ViT prefill before its change (seed 002)", 385, 1024),
            ("the vision report's 474.16 ms ViT encode of its image's patches (seed 000)", REPORT_PATCHES / 0.47416,
             REPORT_PATCHES))


def orin_vs_reports(orin):
    """REPORTED beside orin_model's ceiling at its N: how far below the Orin's roofs the engine's ViT ran."""
    ceiling = orin.set_index("N")["model tokens/s (upper bound)"]
    return pd.DataFrame([{"reported": what, "tokens/s": t, "at N": n, "model ceiling": ceiling[n],
                          "ceiling / reported": ceiling[n] / t} for what, t, n in REPORTED]).round(1)


def tokens_per_s(gt):
    """Tokens/s of the tower from graph_table(gr, bd): N / wall time of one forward, eager and replay."""
    d = gt[gt["what"].str.startswith("tower")] if gt is not None and len(gt) else pd.DataFrame(columns=["what", "N"])
    return pd.DataFrame([{"N": int(r["N"]), "launch": nm, "ms per forward": r[c] / 1e3, "tokens/s": r["N"] / (r[c] * 1e-6),
                          "merged tokens/s": r["N"] / 4 / (r[c] * 1e-6), "device": r["device"], "source": r["source"]}
                         for _, r in d.iterrows() for nm, c in (("eager", "eager wall us"), ("graph replay", "graph wall us"))])


def _band(g, **eq):             # (median, p10, p90, host µs) of the one row of g matching eq, or None
    g = select(g, **eq)
    return tuple(float(g[c].iloc[0]) for c in ("median_us", "p10_us", "p90_us", "host_us")) if len(g) else None


def shares(bd):
    """From ONE breakdown run, per (N, what): the GPU time (graph replay behind a spacer) split into cuBLAS GEMMs
    and lab kernels by the per-op events' shares (scaled to it: the events also catch host gaps), the launch gaps
    (eager wall - GPU time, never clamped), the eager wall, the host µs to issue it; `disagree`: GPU band above the wall's."""
    if bd is None or bd.empty:
        return pd.DataFrame(columns=["N", "what", "gemm_us", "kernel_us", "gpu_us", "gap_us", "wall_us", "host_us", "device"])
    rows = []
    for (n, what, dev, src), g in bd.groupby(["N", "unit", "device", "source"], sort=False):
        gem, ker = (g[g["kind"] == k]["median_us"].sum() for k in ("gemm", "kernel"))
        w, t, ev = _band(g, kind="wall"), _band(g, kind="gpu"), gem + ker
        gpu = t[0] if t else ev
        f = gpu / ev if ev > gpu > 0 else 1.0
        rows.append({"N": int(n), "what": what, "gemm_us": gem * f, "kernel_us": ker * f, "gpu_us": gpu, "events_us": ev,
                     "gap_us": w[0] - gpu, "wall_us": w[0], "host_us": w[3], "disagree": bool(t and t[1] > w[2]),
                     "device": dev, "source": src, "date": g["date"].iloc[0]})
    return pd.DataFrame(rows)


def shares_table(sh):
    """shares() to read, with the launch gaps' share of the eager wall (launch-bound from 50%), cuBLAS's share of the
    GPU time, and GPU / events: the scale from the per-op events to the GPU time (per_op's GPU column)."""
    if sh.empty:
        return sh
    gaps = (100 * sh["gap_us"] / sh["wall_us"]).round(1)
    return sh.drop(columns=["date"]).round(1).assign(**{
        "gaps % of wall": gaps, "launch-bound (gaps >= 50%)": np.where(gaps >= 50, "yes", "no"),
        "cuBLAS % of GPU": (100 * sh["gemm_us"] / sh["gpu_us"]).round(1),
        "GPU / events": (sh["gpu_us"] / sh["events_us"]).clip(upper=1.0).round(2)}).rename(columns={
        "gemm_us": "GEMM GPU us", "kernel_us": "kernel GPU us", "gpu_us": "GPU us (replay)", "gap_us": "launch gaps us",
        "events_us": "per-op events us (incl. host gaps)", "wall_us": "eager wall us", "host_us": "host us to issue"})


def per_op(bd, sh):
    """Per step of a tower forward on the device on screen: its events summed (host gaps included), launches, host µs
    per launch, and GPU µs: the events scaled by GPU / events of shares_table."""
    d = pick(bd)
    if d is None or d.empty:
        return d
    d = d[d["unit"].str.startswith("tower") & d["kind"].isin(["gemm", "kernel"])]
    f = pick(sh).set_index(["N", "what"])
    f = (f["gpu_us"] / f["events_us"]).clip(upper=1.0)
    per = d.groupby(["N", "unit", "name", "kind"], sort=False).agg(
        events_us=("median_us", "sum"), launches=("median_us", "size"), host_us_per_launch=("host_us", "median")).reset_index()
    per["GPU us (scaled to the replay)"] = per["events_us"] * [f[(n, u)] for n, u in zip(per["N"], per["unit"])]
    return (per.sort_values(["N", "GPU us (scaled to the replay)"], ascending=[True, False]).round(1)
            .rename(columns={"events_us": "events us (incl. host gaps)"}).drop(columns=["unit"]))


def plot_breakdown(bd, name="06_vit_breakdown"):
    """Stacked bars per (what, N): GEMMs, lab kernels and launch gaps as % of the eager wall (they sum to it), the
    times written on each bar; where the GPU time reads above the wall, the gap bar is 0 and the note says so."""
    from ..core import plot
    s = shares(bd)
    s = s.assign(gap_bar=s["gap_us"].clip(lower=0)) if len(s) else s
    return plot.stacked_shares(
        s, {"gemm_us": ("cuBLAS GEMMs (GPU time)", "#3a78b5"), "kernel_us": ("lab kernels (GPU time)", "#e3873a"),
            "gap_bar": ("launch gaps (eager wall - GPU time)", "#bbbbbb")},
        [f"{r.what}, N={r.N}" for r in s.itertuples()],
        [f"eager wall {r.wall_us / 1e3:.2f} ms, GPU {r.gpu_us / 1e3:.2f} ms, host {r.host_us / 1e3:.2f} ms"
         + (" (GPU above wall: timings disagree, gap drawn as 0)" if r.gap_us < 0 else "") for r in s.itertuples()],
        "% of the eager launch's wall time (GPU time + launch gaps)", "Where a ViT block's and the tower's time goes", name)


def graph_table(gr, bd=None):
    """Per device and (what, N), ONE reading of each quantity: eager wall from idle, host µs to issue it and GPU time
    (graph replay behind a spacer) from the breakdown run bd, replay wall from the graph run, speed-up with its
    p10-p90 band; then the graph run's second readings and why they differ where they lie outside the bands."""
    rows = []
    for d in (p for p in devices(gr) if p is not None and len(p)):
        dev, src = d["device"].iloc[0], d["source"].iloc[0]
        b = bd[(bd["device"] == dev) & (bd["source"] == src)] if bd is not None and len(bd) else d.iloc[:0]
        for n in sorted(set(d["N"])):
            for what in dict.fromkeys(nm.split(": ")[0] for nm in d["name"]):
                e2, g, ev, g2 = (_band(d, N=n, name=f"{what}: {k}") for k in
                                 ("eager", "graph replay", "eager (GPU time)", "graph replay (GPU time)"))
                e, gpu = _band(b, N=n, unit=what, kind="wall") or e2, _band(b, N=n, unit=what, kind="gpu") or g2
                if not (e and g):
                    continue
                apart, why = lambda a, c: a[1] > c[2] or c[1] > a[2], []   # p10-p90 bands that do not overlap
                if e2 and e2 is not e and apart(e, e2):
                    why.append(f"the graph run's eager wall {e2[0]:.0f} µs lies outside this one's band: its host issued the "
                               f"launches in {e2[3]:.0f} µs, against {e[3]:.0f} (a wall from idle follows the host's pace)")
                if g2 and g2 is not gpu and apart(gpu, g2):
                    wide = (g2[2] - g2[1]) / max(gpu[2] - gpu[1], 1e-9)
                    why.append(f"the graph run's replay GPU time {g2[0]:.0f} µs is {100 * (g2[0] / gpu[0] - 1):+.1f}% off, outside both "  # noqa: E501
                               "bands: the same method on another run" + (f" (its band {wide:.0f}× as wide)" if wide >= 3 else ""))  # noqa: E501
                if ev and e2 and ev[2] >= e2[3] > gpu[0]:
                    why.append(f"the eager launches timed behind a spacer read {ev[0]:.0f} µs, about the host's {e2[3]:.0f} µs "
                               f"to issue them: the spacer did not hide them, so that reading is host time, not GPU time")
                elif ev and ev[1] > gpu[2]:
                    why.append(f"the eager launches timed behind a spacer read {ev[0]:.0f} µs: GPU time + the gaps between eager kernels")  # noqa: E501
                rows.append({"what": what, "N": int(n), "eager wall us": e[0], "host us to issue": e[3], "GPU us (replay)": gpu[0],  # noqa: E501
                             "graph wall us": g[0], "graph speedup (wall)": e[0] / g[0], "speedup p10": e[1] / g[2],
                             "speedup p90": e[2] / g[1], "launch-bound?": "yes" if e[0] > 1.2 * gpu[0] else "no",
                             "eager wall us (graph run)": e2 and e2[0], "eager behind spacer us (graph run)": ev and ev[0],
                             "replay GPU us (graph run)": g2 and g2[0], "why they differ": "; ".join(why) or "-",
                             "device": dev, "source": src, "date": d["date"].iloc[0]})
    return pd.DataFrame(rows)


def _graph_speedup(df, what="block", n=256):
    gt = graph_table(df[df["section"] == "graph"], df[df["section"] == "breakdown"]) if len(df) else df
    sel = gt[(gt["what"] == what) & (gt["N"] == n)] if len(gt) else gt
    return Measured(*(float(sel[c].iloc[0]) for c in ("graph speedup (wall)", "speedup p10", "speedup p90"))) if len(sel) else NAN


TARGETS = (
    Target("our block >= 1.0x a torch eager block of the same math, N=4096",
           lambda df: ratio_band(df, "block (lab kernels + cuBLAS)", "torch eager block", "N=4096:float16"), 1.0),
    Target("our block >= 1.0x the torch block with SDPA, N=4096",
           lambda df: ratio_band(df, "block (lab kernels + cuBLAS)", "torch eager block (SDPA)", "N=4096:float16"), 1.0),
    Target("CUDA-graph block >= 1.3x the eagerly launched block (wall time), N=256", _graph_speedup, 1.3),
)


# ---- make bench -------------------------------------------------------------------------------------

RECORD_NS = (256, 1024, 4096)


def record():
    """Everything lab 06 shows, measured once (< ~1.5 min on an H200), for vit_block.csv."""
    import pandas as pd
    parts = [accuracy(), block_times(RECORD_NS), breakdown(RECORD_NS, reps=3), graphs(RECORD_NS, reps=5)]
    return pd.concat(parts, ignore_index=True)


# The block is not a ladder: a Family that records itself.
VIT_BLOCK = Family(name=NAME, kernels="vision", record=record, shapes={f"N={n}": (n, HIDDEN) for n in RECORD_NS},
                   targets=TARGETS, uses=tuple(V.FAMILIES),
                   about="lab 06: Qwen3-VL's vision tower from lab 05's kernels and cuBLAS")


# The sentences under the lab's tables. Each reads the frames on screen through results' functions
# (every number and verdict computed, none typed in); a notebook cell is one call.
def say_drawings(as_report, as_model, tanh_erf) -> None:
    """How far the main merger's output moves between the report's drawing and the model's, against
    the merger's fp16 bound and the tanh/erf GELU gap (tanh_erf: vision.gelu_tanh_vs_erf())."""
    d = rel_err(as_report, as_model)
    results.say(f"The main merger's output moves by **{d:.1e}** (normwise, relative) between the drawings, "
                f"{d / error_bound(len(MERGER_PLAN)):.2f}× the fp16 storage bound of the merger alone: the tanh and "
                f"erf GELUs differ by at most {tanh_erf['max_abs_diff']:.1e} (at x = {tanh_erf['at_x']:.2f}).")


def speed_pairs(bt, ns=RECORD_NS) -> None:
    """Per N, our block against the torch eager block with and without SDPA, and our attention against SDPA, judged
    by the noise rule (results.pairs); the two blocks' targets are the targets table's."""
    results.pairs(one_source(bt), [(what, fast, slow, f"N={n}:float16") for what, fast, slow in (
        ("ours vs torch eager", "block (lab kernels + cuBLAS)", "torch eager block"),
        ("ours vs torch + SDPA", "block (lab kernels + cuBLAS)", "torch eager block (SDPA)"),
        ("our attention vs SDPA", "attention: cuBLAS + softmax kernel", "torch F.scaled_dot_product_attention"))
        for n in ns], "the block's GPU time")


def say_amdahl(bd) -> None:
    """For the device on screen: the lab kernels' share f of the tower's GPU time at the largest N, what the report's
    s (claim vit_block-004, docs/claims.csv) asks of them (s = 1 + f·(r − 1)), and the 1/(1 − f) bound."""
    cf = results.claims_file()
    s_claim = float(cf.set_index("id").loc["vit_block-004", "claimed"]) if len(cf) else float("nan")

    def said(p) -> str:
        t = shares(p)
        t = t[t["what"].str.startswith("tower")].sort_values("N").iloc[-1]
        f = t.kernel_us / t.gpu_us
        return (f"At N = {t.N} the lab's kernels hold **{100 * f:.0f}%** of the tower's GPU time (the per-op events sum to "
                f"{t.events_us / t.gpu_us:.2f}× the replay's GPU time, so the shares are close). The report's "
                f"{s_claim:.3f}× (claim vit_block-004) from the kernels alone then needs them to have taken "
                f"**{1 + (s_claim - 1) / f:.2f}×** as long before the change, and no kernel work at all could give at "
                f"most {1 / (1 - f):.2f}×. A bound from this GPU and N, not the engine's measurement on an Orin "
                f"({results.source(p)}).")
    if not bd.empty:
        results.each_device(bd, said)
