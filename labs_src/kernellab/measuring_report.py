"""Measuring (lab 00): the sentences under the lab's tables. Each reads the frames on screen through
measuring's and results' functions (every number and verdict computed, none typed in); a notebook
cell is one call. `*_said(part, ...)` returns one device's Markdown (for results.each_device);
`say_*(frame)` prints."""
from __future__ import annotations

from . import rmsnorm, softmax
from .core import results
from .measuring import CHAIN, INFLIGHT_ALL, INFLIGHT_SM, first_within, little, sweep_fraction, value

# Lab 03's fp16 add steps and the bytes each thread keeps in flight (two inputs per thread).
ADD_STEPS = {"08_vec_fp16_scalar (2 × 2 B)": 4, "03_fp16_half2 (2 × 4 B)": 8, "04_fp16_vec8 (2 × 16 B)": 32}
# Lab 02's fp16 steps whose round trips over one 4096-wide row are counted.
TRIP_STEPS = ("05_fp16_half2_cub", "06_fp16_uint4")
PRED = "Little's law predicts GB/s"


def roofs_said(part) -> str:
    """The copy roof and its movers, the read roof, any raise, and whether reading beats copying."""
    v = lambda q: value(part, q)   # noqa: E731  this device's number
    copy, read = v("copy roof"), v("read roof")
    near, raised = v("copy roof: best near L2's size"), part[part["quantity"].str.contains(": raised to ")]["quantity"].tolist()
    return (f"Copy roof **{copy:,.0f} GB/s**: far past L2 the copy kernel moves {v('copy roof: copy kernel'):,.0f}, "
            f"cudaMemcpy {v('copy roof: cudaMemcpy'):,.0f} and the 2-reads-1-write stream "
            f"{v('copy roof: 2 reads + 1 write stream'):,.0f}; the best of them near L2's size moves "
            f"{near:,.0f}. Read roof **{read:,.0f} GB/s** ({results.source(part)}). " +
            (f"A lab's kernel beat the micro-benchmarks in the recorded run, so the roof was raised to it: "
             f"{'; '.join(raised)}. " if raised else "") +
            f"Far past L2, reading alone moves {read / v('copy roof: copy kernel'):.2f}× the bytes per second "
            "of the copy kernel" + (": reading is at least as fast as reading and writing, as a ceiling must be."
                                    if read >= 0.99 * v("copy roof: copy kernel") else
                                    ": the read roof is *below* a copy here, so it is not yet a ceiling on this "
                                    "device (more bytes in flight, section 4, is the first thing to try)."))


def warm_said(part) -> str:
    """The L2-resident copy, warm against flushed."""
    v = lambda q: value(part, q)   # noqa: E731
    warm, cold = v("L2-resident copy, warm (no flush)"), v("L2-resident copy, L2 flushed")
    return (f"A {v('L2-resident copy size'):.3g} MiB copy (a quarter of the {v('L2 size'):.0f} MiB L2) reaches "
            f"**{warm:,.0f} GB/s warm** and **{cold:,.0f} GB/s flushed**: {warm / cold:.2f}× "
            f"{'faster' if warm > cold else 'slower'} when its input is already in L2 ({results.source(part)}).")


def chain_said(part) -> str:
    """The chain of CHAIN small launches, one by one and as a graph: which side bounds it, and the gain."""
    n, v = CHAIN, (lambda q: value(part, q))
    gpu1, host1, e2e1 = (v(f"{n} small launches: {w}") for w in ("GPU time (events)", "host time", "end to end"))
    gpu2, host2, e2e2 = (v(f"{n} small launches as a graph: {w}") for w in ("GPU time (events)", "host time",
                                                                             "end to end"))
    return (f"One by one, the {n} launches take the GPU {gpu1:.1f} µs and the host {host1:.1f} µs; end to end "
            f"they take {e2e1:.1f} µs per chain, about the slower of the two: this chain is "
            f"**{'host' if host1 > gpu1 else 'GPU'}-bound**. As one graph the host spends {host2:.1f} µs, and the "
            f"chain takes {e2e2:.1f} µs end to end: **{e2e1 / e2e2:.2f}×** {'faster' if e2e1 > e2e2 else 'slower'} "
            f"({results.source(part)})."
            + (f" End to end ({e2e2:.1f} µs) is below the graph's event-timed GPU time ({gpu2:.1f} µs): "
               "back to back, one replay's start overlaps the end of the one before, while each "
               "event-timed replay starts from an idle stream and pays its whole ramp-up."
               if e2e2 < gpu2 else ""))


def host_said(part) -> str:
    """Lab 02's best fp16 step on one decode row: GPU time, host time against a bare call, and torch's host time."""
    best = rmsnorm.RMSNORM.default["float16"]
    torch_name = next((b for b in rmsnorm.RMSNORM.baselines if b.startswith("torch")), "")
    ours, bare_, gpu = (results.pick(part, best, c) for c in ("host_us", "bare_host_us", "median_us"))
    return (f"Step {best}: the GPU needs {gpu:.1f} µs, the host {ours:.1f} µs to queue it, "
            f"{ours / bare_:.2f}× a bare `RawKernel` call of the same kernel ({bare_:.1f} µs); {torch_name} costs "
            f"the host {results.pick(part, torch_name, 'host_us'):.1f} µs ({results.source(part)}).")


def latency_said(part) -> str:
    """DRAM and L2 latency, and the bytes in flight the read roof needs (Little's law), per SM and per thread."""
    v = lambda q: value(part, q)   # noqa: E731
    dram, l2, read = v("DRAM latency (pointer chase)"), v("L2 latency (pointer chase)"), v("read roof")
    need, need_sm = v(INFLIGHT_ALL), v(INFLIGHT_SM)   # the table's rows: read roof x latency
    thr = v("threads per SM in the sweep")
    return (f"DRAM latency **{dram:.0f} ns**, L2 latency **{l2:.0f} ns** ({results.source(part)}). To read at the "
            f"roof ({read:,.0f} GB/s) the device must keep {read:,.0f} GB/s × {dram:.0f} ns = "
            f"**{need:,.0f} KiB** in flight (the table's row \"{INFLIGHT_ALL}\"): "
            f"**{need_sm:.1f} KiB per SM**, or {need_sm * 1024 / thr:.0f} bytes per thread with {thr:.0f} "
            f"threads resident per SM.")


def sweep_said(part, f) -> str:
    """One device's bytes-in-flight sweep against its lab 00 record f: ends, first within 10%, vs the model."""
    roof = value(f, "read roof")
    first, last, at = part.iloc[0], part.iloc[-1], first_within(part, 0.9)
    return (f"With {first['B in flight per thread']:.0f} B in flight per thread the read reaches "
            f"{first['fraction of read roof']:.2f} of the roof (Little's law predicted "
            f"{first[PRED] / roof:.2f}); with "
            f"{last['B in flight per thread']:.0f} B, {last['fraction of read roof']:.2f}. "
            + (f"It first gets within 10% of the roof at {at:.0f} B per thread." if at is not None
               else "No point of the sweep gets within 10% of the roof.")
            + f" Across the sweep, measured / predicted stays between {part['measured / predicted'].min():.2f} "
            f"and {part['measured / predicted'].max():.2f} ({results.source(part)}).")


def say_sweep(sweep, fund) -> None:
    """The sweep's sentence (sweep_said), and, where it falls short of the model, why; nothing without a sweep."""
    if sweep.empty:
        return
    results.each_device(sweep, sweep_said, fund)
    if sweep["measured / predicted"].min() < 0.95:
        results.say("Below the roof the measurement falls short of the model: the chase measured the latency of an "
                    "idle memory system, and under load requests queue, so the latency a streaming kernel sees is "
                    "longer. Budget more bytes in flight than the idle-latency estimate.")


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
    """Lab 01's softmax kernel: its registers per thread from ptxas (occ, build.occupancy's frame), the
    share of an SM's registers a 1024-thread block takes, and how many such blocks fit."""
    vec = softmax.VEC_PER_THREAD
    byarch = occ[occ["source"] == "ptxas -v"]
    regs = ", ".join(f"{r.registers} on {r.arch}" for r in byarch.itertuples())
    share = ", ".join(f"{r.registers * r.threads / 65536:.0%} on {r.arch}" for r in byarch.itertuples())
    blocks = sorted(set(byarch["blocks/SM"]))
    results.say(f"The softmax kernel of lab 01 keeps its part of a row in registers: {vec} `float4` = {4 * vec} "
                f"floats per thread. ptxas gives it **registers per thread: {regs}** (the table above); a block of "
                f"1024 threads takes {share} of an SM's 65,536 registers, so "
                f"{' or '.join(str(b) for b in blocks)} such block{'' if blocks == [1] else 's'} "
                f"fit{'s' if blocks == [1] else ''} on an SM. Lab 01 measures what that costs.")


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
