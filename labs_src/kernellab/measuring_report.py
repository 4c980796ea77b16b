"""Measuring (lab 00): the tables and lines under the lab's cells, computed from the frames on screen."""
from __future__ import annotations

from . import rmsnorm, softmax
from .core import results
from .measuring import CHAIN, INFLIGHT_SM, first_within, little, sweep_fraction, value

# Lab 03's fp16 add steps and the bytes each thread keeps in flight (two inputs per thread).
ADD_STEPS = {"08_vec_fp16_scalar (2 × 2 B)": 4, "03_fp16_half2 (2 × 4 B)": 8, "04_fp16_vec8 (2 × 16 B)": 32}
# Lab 02's fp16 steps whose round trips over one 4096-wide row are counted.
TRIP_STEPS = ("05_fp16_half2_cub", "06_fp16_uint4")


def roofs_said(part) -> str:
    """Whether the read roof is a ceiling: far past L2, reading alone against the copy kernel."""
    r = value(part, "read roof") / value(part, "copy roof: copy kernel")
    raised = part["quantity"].str.contains(": raised to ").any()
    return (f"Far past L2, reading alone moves **{r:.2f}×** the bytes per second of the copy kernel: "
            + ("the read roof is a ceiling" if r >= 0.99 else "the read roof is *below* a copy here, not yet a ceiling "
               "(more bytes in flight, section 4, is the first thing to try)")
            + ("; the `raised to` rows name the lab kernels that beat the micro-benchmarks" if raised else "")
            + f" ({results.source(part)}).")


def warm_said(part) -> str:
    """The L2-resident copy, warm against flushed."""
    r = value(part, "L2-resident copy, warm (no flush)") / value(part, "L2-resident copy, L2 flushed")
    return (f"The L2-resident copy is **{r:.2f}×** {'faster' if r > 1 else 'slower'} warm than flushed "
            f"({results.source(part)}).")


def chain_said(part) -> str:
    """The chain of CHAIN small launches: which side bounds it one by one, and what a graph gains end to end."""
    v = lambda w: value(part, f"{CHAIN} small launches{w}")   # noqa: E731
    gain = v(": end to end") / v(" as a graph: end to end")
    return (f"One by one the chain is **{'host' if v(': host time') > v(': GPU time (events)') else 'GPU'}-bound**; "
            f"as one graph it is **{gain:.2f}×** {'faster' if gain > 1 else 'slower'} end to end "
            f"({results.source(part)}).")


def host_said(part) -> str:
    """Lab 02's best fp16 step on one decode row: its host call against a bare `RawKernel` call."""
    best = rmsnorm.RMSNORM.default["float16"]
    r = results.pick(part, best, "host_us") / results.pick(part, best, "bare_host_us")
    return f"Step {best}'s host call costs **{r:.2f}×** a bare `RawKernel` call of the same kernel ({results.source(part)})."


def latency_said(part) -> str:
    """The bytes in flight per thread the read roof needs (the table's per-SM row over the sweep's threads)."""
    thr = value(part, "threads per SM in the sweep")
    return (f"Reading at the roof needs **{value(part, INFLIGHT_SM) * 1024 / thr:.0f} bytes in flight per thread** "
            f"with {thr:.0f} threads resident per SM (the row \"{INFLIGHT_SM}\", {results.source(part)}).")


def sweep_said(part) -> str:
    """One device's bytes-in-flight sweep: its first point against Little's law, and the first within 10% of the roof."""
    at, first = first_within(part, 0.9), part.iloc[0]
    return (f"With {first['B in flight per thread']:.0f} B in flight per thread the read reaches "
            f"{first['fraction of read roof']:.2f} of the roof where Little's law predicts "
            f"{first['fraction of read roof'] / first['measured / predicted']:.2f}; "
            + (f"it first gets within 10% of the roof at **{at:.0f} B**" if at is not None else
               "no point gets within 10% of the roof") + f" ({results.source(part)}).")


def little_said(part) -> str:
    """Lab 03's fp16 add steps: Little's law's prediction and the measured sweep's fraction at their bytes in flight."""
    roof = value(part, "read roof")
    return "; ".join(f"add {step}: Little's law predicts {little(part, b) / roof:.2f} of the read roof, "
                     f"the measured sweep reached {sweep_fraction(part, b):.2f} with {b} B in flight "
                     "per thread" for step, b in ADD_STEPS.items()) + f" ({results.source(part)})."


def trips_said(part) -> str:
    """Lab 02's fp16 steps over one 4096-wide row: round trips of the first pass × DRAM latency."""
    dram, said = value(part, "DRAM latency (pointer chase)"), []
    for step in TRIP_STEPS:
        m = rmsnorm.round_trips(step, 4096, 2)
        trips = m["round trips (first pass)"]
        said.append(f"rmsnorm {step}: {m['loads per thread']} loads per thread, {m['loads in flight per thread']} "
                    f"in flight: {trips} round trip(s) × {dram:.0f} ns ≈ **{trips * dram / 1e3:.2f} µs** for the "
                    "first pass")
    return "; ".join(said) + f" ({results.source(part)})."


def say_softmax_registers(occ) -> None:
    """Lab 01's softmax kernel: floats per thread, its block's share of an SM's registers, blocks that fit."""
    byarch = occ[occ["source"] == "ptxas -v"]
    share = ", ".join(f"{r.registers * r.threads / 65536:.0%} on {r.arch}" for r in byarch.itertuples())
    results.say(f"{softmax.VEC_PER_THREAD} `float4` = {4 * softmax.VEC_PER_THREAD} floats per thread in registers: a "
                f"block of 1024 threads takes {share} of an SM's 65,536 registers, so "
                f"{' or '.join(map(str, sorted(set(byarch['blocks/SM']))))} such block(s) fit on an SM.")


def ceilings_said(part) -> str:
    """The SFU, FFMA and issue ceilings per SM per clock, and the margins they leave softmax at the copy roof."""
    v = lambda q: value(part, q)   # noqa: E731
    sms, clk, copy = v("SMs"), v("SM clock"), v("copy roof")
    ex2, ffma, issue = v("ex2.approx (SFU) throughput"), v("FFMA instructions"), v("instruction issue ceiling")
    per_clk = lambda g: g * 1e9 / (sms * clk * 1e6)   # noqa: E731  per SM per clock, at the nominal clock
    return (f"Per SM per clock (at the nominal {clk:,.0f} MHz): **{per_clk(ex2):.1f} ex2**, {per_clk(ffma):.0f} "
            f"FFMA, and an issue ceiling of **{per_clk(issue):.0f} instructions** (the FFMA + INT32 mix issued "
            f"{v('FFMA + INT32 mix instructions') / ffma:.2f}× as many instructions per second as FFMA alone). "
            f"At the copy roof, fp32 softmax (8 B per element: read once, write once) streams {copy / 8:,.0f} G "
            f"elements/s, and the SFU can take {ex2:,.0f} G ex2/s: {ex2 / (copy / 8):.1f}× more than one exp per "
            f"element needs. In fp16 (4 B per element) the margin is {ex2 / (copy / 4):.1f}×. Instruction issue "
            f"allows **{issue / (copy / 8):.0f} instructions per element** in fp32 and "
            f"**{issue / (copy / 4):.0f} in fp16** before instructions, not DRAM, set the time "
            f"({results.source(part)}).")


def micro_said(part) -> str:
    """Lab 00's micro-benchmarks for the seeds' cycle claims, one device: each chain's cycles per
    operation with its band, FMUL against FFMA, and the copy with a smaller grid; or that the record
    predates them."""
    from .measuring import LATENCY_OPS, band_value, grid_quantity, latency_quantity
    lat = {n: band_value(part, latency_quantity(n)) for n in LATENCY_OPS}
    if not all(m.ok for m in lat.values()):
        return (f"This record has no micro-benchmarks yet ({results.source(part)}): it was made before lab 00 "
                "measured them; `make bench measuring` adds them, and the claims table below says so row by row.")
    cyc = ", ".join(f"{f'`{n}`' if '_' in n else n} **{m.value:.1f}** ({m.lo:.1f}–{m.hi:.1f})" for n, m in lat.items())
    mul = band_value(part, "FMUL / FFMA instruction rate")
    grid = {f: band_value(part, grid_quantity(f)) for f in (2, 4)}      # time(full grid) / time(1/f of it)
    grids = " and ".join(f"{1 / grid[f].value:.2f}× ({1 / grid[f].hi:.2f}–{1 / grid[f].lo:.2f}) the time with 1/{f} "
                         "of the grid" for f in (2, 4))
    return (f"Cycles per operation of one dependent chain, median of the runs (p10–p90): {cyc}. FMUL issues at "
            f"{mul.value:.2f}× the FFMA rate ({mul.lo:.2f}–{mul.hi:.2f}). The same copy of 2M floats takes {grids}"
            + f" ({results.source(part)}).")


def say_micro(fund) -> None:
    """micro_said for every device on screen."""
    results.each_device(fund, micro_said)
