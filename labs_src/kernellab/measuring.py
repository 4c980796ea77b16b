"""Lab 00, measuring: the device's fundamentals, measured or recorded; one Family, MEASURING."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from . import add
from .core import build
from .core.bench import (LAUNCHES, MEASURE, _grid, _roof_elems, end_to_end_us, graph, host_us, resident_grid, roofs,
                         time_fn)
from .core.device import info
from .core.results import (HOLD, NAN, Measured, claim_measure, devices, live_or_recorded, quantity_verdict,
                           verdict)
from .core.family import Family


INFLIGHT_BYTES = (4, 8, 16, 32, 64, 128)    # the measure_05_inflight_<B>B kernels
CHAIN = 8                                    # launches in the chain that lab 00 captures as a graph
CHASE_HOPS = 4096


def _chase_ns(nbytes: int, flush: bool) -> float:
    """ns per hop of a pointer chase over a random cycle through nbytes (an index per 128-byte line, so every
    hop touches a new line); two chain lengths are timed and subtracted, so launch costs cancel."""
    import cupy
    lines = max(nbytes // 128, 2 * CHASE_HOPS + 1)
    perm = cupy.random.RandomState(0).permutation(lines).astype(cupy.uint32)
    nxt = cupy.zeros(lines * 32, cupy.uint32)
    nxt[perm * 32] = cupy.roll(perm, -1) * 32
    out = cupy.empty(1, cupy.uint32)
    k = build.kernel("measure", "measure_04_chase")
    start = np.uint32(int(perm[0]) * 32)
    t = {h: time_fn(lambda h=h: k((1,), (1,), (nxt, out, np.int32(h), start)), reps=10, flush=flush).median_us
         for h in (CHASE_HOPS, 2 * CHASE_HOPS)}
    return (t[2 * CHASE_HOPS] - t[CHASE_HOPS]) / CHASE_HOPS * 1e3


def _rate(kernel: str, args, per_thread_ops: float, iters: int) -> float:
    """Operations per second (G/s) of a register-only throughput kernel launched over every SM."""
    k = build.kernel("measure", kernel)
    blocks = resident_grid(k)
    t = time_fn(lambda: k((blocks,), (256,), (*args[:1], np.int32(iters), *args[1:])), flush=False)
    return blocks * 256 * iters * per_thread_ops / t.median_us / 1e3


def fundamentals():
    """Everything lab 00 measures as (quantity, value, unit); the read roof's bytes in flight derived per
    device (a roof raised after the recording would otherwise leave a row that no longer matches it)."""
    return derive_inflight(live_or_recorded("measuring", "every row of this table", _fundamentals))


INFLIGHT_ALL = "bytes in flight for the read roof, all SMs"
INFLIGHT_SM = "bytes in flight for the read roof, per SM"


def derive_inflight(fund):
    """fund with INFLIGHT_ALL and INFLIGHT_SM set, per device, to read roof x DRAM latency (KiB) and per SM."""
    if fund is None or fund.empty or "quantity" not in fund:
        return fund
    fund = fund.copy()
    for part in devices(fund):
        need = value(part, "read roof") * value(part, "DRAM latency (pointer chase)") / 2**10
        for q, val in ((INFLIGHT_ALL, need), (INFLIGHT_SM, need / value(part, "SMs"))):
            at = part.index[part["quantity"] == q]
            if len(at) and not np.isnan(val):
                fund.loc[at, "value"] = val
    return fund


# The roofs and launch costs, by the quantity that states each in lab 00's table; the recorded
# table is the device record's source for them (core.store.stated_roofs)
ROOF_QUANTITIES = {
    "copy_gbps": "copy roof", "copy_kernel_gbps": "copy roof: copy kernel", "copy_memcpy_gbps": "copy roof: cudaMemcpy",
    "copy_near_l2_gbps": "copy roof: best near L2's size", "copy_2r1w_gbps": "copy roof: 2 reads + 1 write stream",
    "copy_micro_gbps": "copy roof: best micro-benchmark",
    "read_gbps": "read roof", "read_micro_gbps": "read roof: best micro-benchmark",
    "read_sum_gbps": "read roof: streaming sum (measure_02_read)",
    "launch_us": "empty kernel launch", "launch_b2b_us": f"empty kernel: {LAUNCHES} back to back, per launch",
    "launch_graph_us": f"empty kernel: CUDA graph of {LAUNCHES}, per launch",
    "host_launch_us": "host: one RawKernel launch call", "host_graph_us": f"host: one graph launch ({LAUNCHES} kernels)"}


def _fundamentals():
    import pandas as pd
    import cupy
    d = info()
    r = roofs()
    rows = [("SMs", d["sms"], "count"), ("SM clock", d["sm_clock_mhz"] or float("nan"), "MHz"),
            ("L2 size", (d["l2_bytes"] or 0) / 2**20, "MiB"),
            *[(q, r[k], "us" if k.endswith("_us") else "GB/s") for k, q in ROOF_QUANTITIES.items()]]
    # A chain of small launches (CHAIN residual adds, fp16, 4096 wide: one decode step's worth),
    # launched one by one and replayed as one CUDA graph: GPU time, host time, end to end.
    a, b = (cupy.asarray(v) for v in add.make_input((4096,), "float16"))
    h = cupy.empty_like(a)
    step = add.ADD.variants[add.ADD.default["float16"]]

    def chain():
        for _ in range(CHAIN):
            step(a, b, out=h)  # noqa: F821
    gc = graph(chain)
    rows += [(f"{CHAIN} small launches: GPU time (events)", time_fn(chain, flush=False).median_us, "us"),
             (f"{CHAIN} small launches: host time", host_us(chain), "us"),
             (f"{CHAIN} small launches: end to end", end_to_end_us(chain), "us"),
             (f"{CHAIN} small launches as a graph: GPU time (events)", time_fn(gc, flush=False).median_us, "us"),
             (f"{CHAIN} small launches as a graph: host time", host_us(gc), "us"),
             (f"{CHAIN} small launches as a graph: end to end", end_to_end_us(gc), "us")]
    del a, b, h, gc
    # Warm vs flushed: a copy whose buffers (in + out) fill a quarter of L2.
    n = max((d["l2_bytes"] or (4 << 20)) // 32 // 4 * 4, 1 << 16)
    src, dst = cupy.ones(n, cupy.float32), cupy.empty(n, cupy.float32)
    copy_k = build.kernel("measure", "measure_01_copy")
    g = _grid(n // 4)
    call = lambda: copy_k((g,), (256,), (src, dst, np.int64(n // 4)))  # noqa: E731, F821
    warm, cold = time_fn(call, flush=False), time_fn(call, flush=True)
    rows += [("L2-resident copy, warm (no flush)", 2 * src.nbytes / warm.median_us / 1e3, "GB/s"),
             ("L2-resident copy, L2 flushed", 2 * src.nbytes / cold.median_us / 1e3, "GB/s"),
             ("L2-resident copy size", 2 * src.nbytes / 2**20, "MiB")]
    del src, dst
    # CPU timers: without a sync they time the launch, not the kernel.
    big = _roof_elems()
    bsrc, bdst = cupy.ones(big, cupy.float32), cupy.empty(big, cupy.float32)
    bg = _grid(big // 4)
    bcall = lambda: copy_k((bg,), (256,), (bsrc, bdst, np.int64(big // 4)))  # noqa: E731, F821
    bcall()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter(); bcall(); t_nosync = time.perf_counter() - t0  # noqa: E702
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter(); bcall(); cupy.cuda.Device().synchronize(); t_sync = time.perf_counter() - t0  # noqa: E702
    ev = time_fn(bcall, flush=True)
    mib = f"{2 * bsrc.nbytes / 2**20:.0f} MiB copy"
    rows += [(f"{mib}: perf_counter, no sync", t_nosync * 1e6, "us"),
             (f"{mib}: perf_counter + sync", t_sync * 1e6, "us"),
             (f"{mib}: CUDA events (median)", ev.median_us, "us")]
    del bdst
    # Little's law: latency (pointer chase), then read bandwidth against bytes in flight per thread.
    dram_ns = _chase_ns(max(4 * (d["l2_bytes"] or 0), 256 << 20), flush=True)
    l2_ns = _chase_ns(max((d["l2_bytes"] or (4 << 20)) // 4, 1 << 20), flush=False)
    need = r["read_gbps"] * dram_ns          # GB/s x ns = bytes in flight
    rows += [("DRAM latency (pointer chase)", dram_ns, "ns"), ("L2 latency (pointer chase)", l2_ns, "ns"),
             (INFLIGHT_ALL, need / 2**10, "KiB"), (INFLIGHT_SM, need / d["sms"] / 2**10, "KiB")]
    part = cupy.empty(1, cupy.float32)
    threads_sm = []
    for b in INFLIGHT_BYTES:
        k = build.kernel("measure", f"measure_05_inflight_{b}B")
        grid = resident_grid(k)
        threads_sm.append(grid // d["sms"] * 256)
        per = min(b, 16) // 4                                    # floats per element of the kernel's type
        t = time_fn(lambda k=k, grid=grid, per=per: k((grid,), (256,), (bsrc, part, np.int64(big // per))))  # noqa: F821
        rows.append((f"read with {b} B in flight per thread", bsrc.nbytes / t.median_us / 1e3, "GB/s"))
    rows.append(("threads per SM in the sweep", min(threads_sm), "count"))
    del bsrc
    # Compute ceilings for the roofline.
    out = cupy.empty(1, cupy.float32)
    per = MEASURE                # per loop trip: FMA_CHAINS FMAs, EX2_CHAINS ex2, 16 x ISSUE_REPEAT instructions
    fma = _rate("measure_03_fma", (out, np.float32(0.999), np.float32(0.001)), per["FMA_CHAINS"], 4096)
    ex2 = _rate("measure_06_ex2", (out, np.float32(0.5)), per["EX2_CHAINS"], 4096)
    mix = _rate("measure_07_issue", (out, np.float32(0.999), np.float32(0.001), np.uint32(7), np.uint32(5)),
                16 * per["ISSUE_REPEAT"], 1024)                    # loop control not counted
    rows += [("fp32 FMA peak", 2 * fma, "GFLOP/s"), ("FFMA instructions", fma, "G instr/s"),
             ("ex2.approx (SFU) throughput", ex2, "G ex2/s"),
             ("FFMA + INT32 mix instructions", mix, "G instr/s"),
             ("instruction issue ceiling", max(fma, mix), "G instr/s")]
    rows += _micro_rows()
    return pd.DataFrame(rows, columns=["quantity", "value", "unit"])


# ---- the seeds' micro-claims: latencies in cycles, FMUL vs FFMA issue, a smaller grid -----------------
# Each is recorded as its median with the ends of its p10-p90 band (`<quantity>: p10`, `: p90`), so the
# claims rows that read them (below) are judged noise-aware, like every ratio.

LATENCY_OPS = {"fmaf": 0, "multiply then add": 1, "shuffle": 2, "shared-memory load": 3, "__syncthreads": 4,
               "integer modulo": 5}                      # measure_11_latency's `op`
LAT_N, LAT_REPS, LAT_MOD = 1024, 11, 7
GRID_ELEMS = 1 << 21           # seed 004's 2M elements: the copy whose grid shrinks 2x and 4x


def latency_quantity(name: str) -> str:
    return f"latency: {name} (dependent chain)"


def _band_rows(quantity: str, m: Measured, unit: str) -> list:
    return [(quantity, m.value, unit), (f"{quantity}: p10", m.lo, unit), (f"{quantity}: p90", m.hi, unit)]


def band_value(fund, quantity: str) -> Measured:
    """A quantity recorded with its band (_band_rows) as a Measured (NaN where absent)."""
    return Measured(*(value(fund, q) for q in (quantity, f"{quantity}: p10", f"{quantity}: p90")))


def _latency_cycles(op: int) -> Measured:
    """Cycles per operation of measure_11_latency's chain `op`: (cycles of 2n - cycles of n) / n on
    one block (256 threads for __syncthreads, else one warp), over LAT_REPS runs."""
    import cupy
    threads = 256 if op == LATENCY_OPS["__syncthreads"] else 32
    k = build.kernel("measure", "measure_11_latency")
    out, cyc = cupy.empty(1, cupy.float32), cupy.zeros(threads, cupy.int64)

    def cycles(n):
        k((1,), (threads,), (out, cyc, np.int32(op), np.int32(n), np.float32(0.999), np.float32(0.001),
                             np.uint32(LAT_MOD)))
        return float(cyc[0].get())        # .get() waits for the kernel
    cycles(LAT_N)                          # warm the instruction cache
    per = [(cycles(2 * LAT_N) - cycles(LAT_N)) / LAT_N for _ in range(LAT_REPS)]
    return Measured(float(np.median(per)), float(np.percentile(per, 10)), float(np.percentile(per, 90)))


def _rate_band(kernel: str, args, per_thread_ops: float, iters: int) -> Measured:
    """_rate with its band: G operations/s at the median, p90 (low) and p10 (high) times."""
    k = build.kernel("measure", kernel)
    blocks = resident_grid(k)
    t = time_fn(lambda: k((blocks,), (256,), (*args[:1], np.int32(iters), *args[1:])), flush=False)
    ops = blocks * 256 * iters * per_thread_ops / 1e3
    return Measured(ops / t.median_us, ops / t.p90_us, ops / t.p10_us)


def _ratio(slow, fast) -> Measured:
    """time(slow) / time(fast) of two Timings, with the band's ends (p10 / p90 .. p90 / p10)."""
    return Measured(slow.median_us / fast.median_us, slow.p10_us / fast.p90_us, slow.p90_us / fast.p10_us)


def _micro_rows() -> list:
    import cupy
    rows = []
    for name, op in LATENCY_OPS.items():
        rows += _band_rows(latency_quantity(name), _latency_cycles(op), "cycles")
    out = cupy.empty(1, cupy.float32)
    fma = _rate_band("measure_03_fma", (out, np.float32(0.999), np.float32(0.001)), MEASURE["FMA_CHAINS"], 4096)
    mul = _rate_band("measure_12_fmul", (out, np.float32(0.999)), MEASURE["FMA_CHAINS"], 4096)
    rows += _band_rows("FMUL / FFMA instruction rate", Measured(mul.value / fma.value, mul.lo / fma.hi,
                                                                 mul.hi / fma.lo), "ratio")
    src, dst = cupy.ones(GRID_ELEMS, cupy.float32), cupy.empty(GRID_ELEMS, cupy.float32)
    copy_k, n4 = build.kernel("measure", "measure_01_copy"), GRID_ELEMS // 4
    full = n4 // 256                       # one float4 per thread
    t = {b: time_fn(lambda b=b: copy_k((b,), (256,), (src, dst, np.int64(n4))), flush=True)
         for b in (full, full // 2, full // 4)}
    for f in (2, 4):
        rows += _band_rows(grid_quantity(f), _ratio(t[full], t[full // f]), "ratio")
    return rows


def grid_quantity(f: int) -> str:
    return (f"copy of {GRID_ELEMS // 2**20}M floats: time at {GRID_ELEMS // 4 // 256} blocks / time at "
            f"{GRID_ELEMS // 4 // 256 // f} (grid-stride)")


def recorded_value(quantity: str, df) -> float:
    """One quantity of lab 00's recorded table for the device the rows of `df` come from (NaN when none)."""
    from .core.device import load_recorded
    rec = load_recorded("measuring")
    if rec.empty or df is None or not len(df):
        return float("nan")
    return value(rec[rec["device"] == df["device"].iloc[0]], quantity)


def value(fund, quantity: str, default=float("nan")) -> float:
    """One value of a fundamentals() table by its quantity (NaN when that row is absent)."""
    if fund is None or fund.empty:
        return default
    v = fund.loc[fund["quantity"] == quantity, "value"]
    return float(v.iloc[0]) if len(v) else default


def little(fund, bytes_per_thread, threads_per_sm=None) -> float:
    """Little's law's GB/s: min(read roof, bytes in flight on all SMs / DRAM latency)."""
    thr = value(fund, "threads per SM in the sweep") if threads_per_sm is None else threads_per_sm
    inflight_all = bytes_per_thread * thr * value(fund, "SMs")
    return min(value(fund, "read roof"), inflight_all / value(fund, "DRAM latency (pointer chase)"))


def sweep_fraction(fund, bytes_per_thread) -> float:
    """The read roof's fraction the sweep reached at `bytes_per_thread` (log2-interpolated): little()'s measured twin."""
    pts = [(np.log2(b), value(fund, f"read with {b} B in flight per thread")) for b in INFLIGHT_BYTES]
    pts = [(x, y) for x, y in pts if not np.isnan(y)]
    if not pts:
        return float("nan")
    xs, ys = zip(*pts)
    return float(np.interp(np.log2(bytes_per_thread), xs, ys)) / value(fund, "read roof")


def inflight(fund):
    """The bytes-in-flight sweep beside Little's law's prediction, per device of `fund`."""
    rows = []
    for part in devices(fund) if fund is not None and not fund.empty else []:
        thr, roof = value(part, "threads per SM in the sweep"), value(part, "read roof")
        for b in INFLIGHT_BYTES:
            gbps, pred = value(part, f"read with {b} B in flight per thread"), little(part, b, thr)
            if not np.isnan(gbps):
                rows.append({"B in flight per thread": b, "KiB in flight per SM": b * thr / 2**10, "GB/s": gbps,
                             "fraction of read roof": gbps / roof, "Little's law predicts GB/s": pred,
                             "measured / predicted": gbps / pred, **part.iloc[0][["device", "date", "source"]]})
    return pd.DataFrame(rows)


def first_within(sweep, fraction: float = 0.9):
    """The smallest bytes in flight per thread at which one device's sweep reaches `fraction` of its read roof."""
    reach = sweep[sweep["fraction of read roof"] >= fraction]
    return None if reach.empty else float(reach["B in flight per thread"].iloc[0])


MEASURING = Family(name="measuring", kernels="measure", record=fundamentals,
                   about="lab 00: roofs, launch costs, latency, bytes in flight, compute ceilings")
FAMILIES = [MEASURING]


# ---- the seed claims lab 00 measures (docs/claims.csv rows with how `lab:...`) -----------------------
# Latencies are recorded in ns (pointer chase); the seeds state cycles, so they are converted with the
# SM clock the record states (the boost clock: a chase that ran slower would read fewer cycles).

def _cycles(part, quantity: str) -> float:
    return value(part, quantity) * value(part, "SM clock") / 1e3


@claim_measure("measuring-005")
def _dram_latency_cycles(part):
    """001:53 'global memory latency ~400-800 cycles': the pointer chase over DRAM, in cycles."""
    return quantity_verdict(_cycles(part, "DRAM latency (pointer chase)"), 400, 800, "cycles")


@claim_measure("measuring-006")
def _l2_latency_and_size(part):
    """001:54 'L2 latency ~200 cycles, size ~40-100 MB': the L2 pointer chase in cycles (a '~200'
    holds from 200 / HOLD to 200 x HOLD) and the L2 size the record states (MiB -> MB)."""
    lat = quantity_verdict(_cycles(part, "L2 latency (pointer chase)"), 200 / HOLD, 200 * HOLD, "cycles")
    size = quantity_verdict(value(part, "L2 size") * 2**20 / 1e6, 40, 100, "MB")
    if not (lat[0].ok and size[0].ok):
        return NAN, "not measured (nothing recorded)", None
    v = lat[1] if lat[1] != "holds" else size[1]
    return lat[0], v, f"latency {lat[2]}; size {size[2]}"


FMA_ROWS, FMA_LEN = 512, 4096      # dot products of the GEMV's length (4096), many rows


def fma_errors(rows: int = FMA_ROWS, n: int = FMA_LEN, seed: int = 0) -> tuple:
    """Per row: (abs error of `sum = a*b + sum` rounded twice, abs error of fmaf(a, b, sum) rounded
    once), both against the float64 dot product, for float32 dot products of length n (NumPy, IEEE
    float32: the same roundings a GPU makes; fmaf is emulated as the float64 a*b + sum rounded to
    float32, exact but for rare double-rounding ties). No GPU needed: the claim is about arithmetic."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, rows)).astype(np.float32)
    b = rng.standard_normal((n, rows)).astype(np.float32)
    sep = np.zeros(rows, np.float32)
    fma = np.zeros(rows, np.float32)
    for k in range(n):
        sep = (a[k] * b[k]).astype(np.float32) + sep
        fma = (a[k].astype(np.float64) * b[k] + fma).astype(np.float32)
    exact = np.einsum("kr,kr->r", a.astype(np.float64), b.astype(np.float64))
    return np.abs(sep - exact), np.abs(fma - exact)


def _fma_precision(part, groups: int = 16):
    """FMA 'improves precision' (one rounding instead of two): the ratio of the rms errors, separate
    over fused (> 1: fmaf is the more precise), with a p10-p90 band over 16 groups of rows, judged by
    the one rule with no number claimed (a band that holds 1 is 'within noise')."""
    sep, fma = fma_errors()
    rms = lambda e: np.sqrt(np.mean(e ** 2, axis=-1))   # noqa: E731
    per = rms(sep.reshape(groups, -1)) / rms(fma.reshape(groups, -1))
    m = Measured(float(rms(sep) / rms(fma)), float(np.percentile(per, 10)), float(np.percentile(per, 90)))
    return m, verdict(m), (f"rms error {rms(sep):.3g} -> {rms(fma):.3g}: x{m.value:.2f} [{m.lo:.2f}-{m.hi:.2f}] "
                           f"(float32 dots of {FMA_LEN}, NumPy)")


claim_measure("measuring-011")(_fma_precision)
claim_measure("measuring-012")(_fma_precision)


# The micro-claims, from the rows _micro_rows records (a record made before them: NOT_YET).
NOT_YET = "not measured yet: this record predates lab 00's micro-benchmark (make bench measuring records it)"

def _lat(part, name: str) -> Measured:
    return band_value(part, latency_quantity(name))


def _over(a: Measured, b: Measured) -> Measured:
    """a / b with the band's ends (a.lo / b.hi .. a.hi / b.lo)."""
    return Measured(a.value / b.value, a.lo / b.hi, a.hi / b.lo)


def _judged(m: Measured, claimed, shown: str):
    return (m, verdict(m, claimed), shown) if m.ok else (NAN, NOT_YET, None)


def _cycles_shown(m: Measured) -> str:
    return f"{m.value:.1f} [{m.lo:.1f}-{m.hi:.1f}] cycles"


@claim_measure("measuring-001")
def _fma_latency(part):
    """000:98 'FMA cuts latency from 2 cycles to 1': a multiply then an add over an FMA, each a chain."""
    fma, two = _lat(part, "fmaf"), _lat(part, "multiply then add")
    return _judged(_over(two, fma), 2.0, f"mul + add {_cycles_shown(two)}, fmaf {_cycles_shown(fma)}")


@claim_measure("measuring-002")
def _fmul_vs_ffma(part):
    """000:98 'FMA throughput equals plain multiply throughput': FMUL over FFMA instructions per second."""
    m = band_value(part, "FMUL / FFMA instruction rate")
    return _judged(m, 1.0, f"FMUL / FFMA rate {m.value:.3f} [{m.lo:.3f}-{m.hi:.3f}]")


def _quantities(*parts):
    """The first verdict that is not 'holds' among quantity_verdict results (all hold: holds)."""
    if not all(p[0].ok for p in parts):
        return NAN, NOT_YET, None
    v = next((p[1] for p in parts if p[1] != "holds"), "holds")
    return parts[0][0], v, "; ".join(p[2] for p in parts)


@claim_measure("measuring-003")
def _sync_and_shuffle(part):
    """000:110 'a __syncthreads round ~5 cycles, a shuffle round 1': each '~x' holds from x / HOLD to x * HOLD."""
    sync, shfl = _lat(part, "__syncthreads"), _lat(part, "shuffle")
    return _quantities(quantity_verdict(sync.value, 5 / HOLD, 5 * HOLD, "cycles per __syncthreads"),
                       quantity_verdict(shfl.value, 1 / HOLD, 1 * HOLD, "cycles per shuffle"))


@claim_measure("measuring-007")
def _smem_latency(part):
    """001:55 'shared memory latency ~20-50 cycles': a dependent chain of shared-memory loads (registers,
    the other half of the claim, are what every chain's operands already are)."""
    smem = _lat(part, "shared-memory load")
    return _quantities(quantity_verdict(smem.value, 20, 50, "cycles per shared-memory load"))


@claim_measure("measuring-008")
def _shuffle_vs_smem(part):
    """003:57 'a shuffle ~1 cycle vs 20+ through shared memory': a shared-memory load's latency over a
    shuffle's (claimed 20)."""
    smem, shfl = _lat(part, "shared-memory load"), _lat(part, "shuffle")
    return _judged(_over(smem, shfl), 20.0, f"shared load {_cycles_shown(smem)}, shuffle {_cycles_shown(shfl)}")


@claim_measure("measuring-010")
def _modulo(part):
    """004:266 'integer modulo costs ~20+ cycles': a chain of u % m + 1 with m known only at run time."""
    mod = _lat(part, "integer modulo")
    return _quantities(quantity_verdict(mod.value, 20 / HOLD, float("inf"), "cycles per u % m + 1"))


def _grid_claim(part, f: int, seed_says: str):
    m = band_value(part, grid_quantity(f))
    return _judged(m, None, f"{m.value:.2f} [{m.lo:.2f}-{m.hi:.2f}] ({seed_says})")


claim_measure("measuring-004")(lambda part: _grid_claim(part, 4, "the same copy, a 4x smaller grid"))
claim_measure("measuring-009")(lambda part: _grid_claim(part, 2, "the same copy, half the grid"))


SOFTMAX_FLOP_PER_BYTE = 5 / 8    # 001:389: ~5 FLOP per element over 4 bytes read + 4 written


@claim_measure("measuring-013")
def _softmax_below_ridge(part):
    """001:389 'softmax's 0.625 FLOP/byte is far below the ridge (A100: 12.5, 20x)': this GPU's ridge
    (fp32 FMA peak over the copy roof, which counts the read and the written bytes as softmax's 8 do)
    over softmax's intensity, judged against the seed's 20x."""
    ridge = value(part, "fp32 FMA peak") / value(part, "copy roof")
    m = Measured(ridge / SOFTMAX_FLOP_PER_BYTE, ridge / SOFTMAX_FLOP_PER_BYTE, ridge / SOFTMAX_FLOP_PER_BYTE)
    return _judged(m, 20.0, f"ridge {ridge:.1f} FLOP/B = {m.value:.1f}x softmax's 0.625")
