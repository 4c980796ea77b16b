"""Honest timing: CUDA events, L2 flushed before every repetition, medians with p10/p90,
GB/s of unique bytes against roofs measured on this device in this process."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np

from . import build
from .device import info, is_live, load_recorded, need_gpu, now


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    reps: int


@functools.lru_cache(maxsize=None)
def _flush_buffer():
    import cupy
    nbytes = max(2 * (info()["l2_bytes"] or 0), 16 << 20)   # at least 2x L2
    return cupy.zeros(nbytes // 4, cupy.float32)            # written once, here


@functools.lru_cache(maxsize=None)
def _flush_launch():
    import cupy
    read = build.kernel("measure", "measure_02_read")
    buf = _flush_buffer()
    grid = resident_grid(read)
    return read, (grid,), (256,), (buf, cupy.empty(grid, cupy.float32), np.int64(buf.size // 4))


def flush_l2() -> None:
    """Evict L2 by READING a buffer of at least twice its size. Every line the previous call
    left behind, its dirty output lines included, is written back during the flush, and L2 is
    left holding clean lines. Writing the buffer instead would leave L2 full of dirty lines
    whose write-back the next timed call would pay for (a few microseconds: a visible share of
    a small kernel's time)."""
    k, grid, block, args = _flush_launch()
    k(grid, block, args)


def _keep_busy(us: float = 20.0) -> None:
    """About `us` microseconds of register-only work that touches no buffer. Queued before each
    timed call, it keeps the GPU busy while Python queues the start event and the launches, so
    the events time the kernels and not the host's launch path."""
    fma = build.kernel("measure", "measure_03_fma")
    iters = int(min(1 << 20, max(256, 8192 * us / _busy_us_per_8192())))
    fma((info()["sms"],), (128,), (_flush_buffer(), np.int32(iters), np.float32(1.0), np.float32(0.0)))


@functools.lru_cache(maxsize=None)
def _busy_us_per_8192() -> float:
    import cupy
    fma = build.kernel("measure", "measure_03_fma")
    s, e = cupy.cuda.Event(), cupy.cuda.Event()
    args = (_flush_buffer(), np.int32(8192), np.float32(1.0), np.float32(0.0))
    fma((info()["sms"],), (128,), args)
    s.record()
    fma((info()["sms"],), (128,), args)
    e.record()
    e.synchronize()
    return max(cupy.cuda.get_elapsed_time(s, e) * 1e3, 1.0)


def time_fn(fn, *, reps: int | None = None, warmup: int = 3, flush: bool = True,
            budget_s: float = 0.25) -> Timing:
    """Median/p10/p90 of `fn()` in microseconds, from CUDA events around each call.
    Nothing is allocated inside the timed region; `fn` must be a bound zero-arg call.
    flush=True evicts L2 before every repetition; flush=False keeps the caches warm. Either way
    a spacer kernel longer than the host's cost of one call precedes the start event, so the
    time is the GPU's (a slow host would otherwise show up as kernel time for small calls)."""
    need_gpu("timing")
    import cupy
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    fn()                                   # the host's cost of queuing one call
    host_us = (time.perf_counter() - t0) * 1e6
    cupy.cuda.Device().synchronize()
    if reps is None:   # aim for ~budget_s of kernel time, 10..100 repetitions
        t0 = time.perf_counter()
        if flush:
            flush_l2()
        fn()
        cupy.cuda.Device().synchronize()
        once = max(time.perf_counter() - t0, 1e-6)
        reps = int(min(100, max(10, budget_s / once)))
    starts = [cupy.cuda.Event() for _ in range(reps)]
    ends = [cupy.cuda.Event() for _ in range(reps)]
    for s, e in zip(starts, ends):
        if flush:
            flush_l2()
        _keep_busy(2 * host_us + 10)       # the GPU stays busy until every launch of fn is queued
        s.record()
        fn()
        e.record()
    ends[-1].synchronize()
    t = np.array([cupy.cuda.get_elapsed_time(s, e) * 1e3 for s, e in zip(starts, ends)])
    return Timing(float(np.median(t)), float(np.percentile(t, 10)), float(np.percentile(t, 90)), reps)


# ---- host time, bare launches and CUDA graphs -----------------------------------------------------

def host_us(fn, calls: int = 30, batches: int = 3) -> float:
    """Host (CPU) microseconds per call of `fn`: perf_counter around `calls` back-to-back calls,
    the best of `batches` batches (host noise only ever adds), garbage collection paused. Launches are asynchronous, so this
    is the Python + driver cost of *queuing* one call, not the GPU's time; the GPU is synchronized
    before each batch so that a full launch queue never blocks the host."""
    need_gpu("host timing")
    import gc
    import cupy
    fn()
    best = float("inf")
    was = gc.isenabled()
    gc.disable()                   # as timeit does: a collection is nobody's launch cost
    try:
        for _ in range(batches):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, time.perf_counter() - t0)
    finally:
        if was:
            gc.enable()
    cupy.cuda.Device().synchronize()
    return best / calls * 1e6


def end_to_end_us(fn, calls: int = 100) -> float:
    """Wall microseconds per call of `calls` back-to-back calls, synchronized once at the end,
    with no spacer: what a caller (a decoding engine, do_bench without a flush) sees. Per call
    that is about max(host time, GPU time): whichever side is slower sets the pace."""
    need_gpu("timing")
    import cupy
    fn()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def launches(fn) -> list:
    """The kernel launches one call of `fn` makes through build.launch, as
    [(RawKernel, grid, block, packed args, shared memory bytes)]."""
    return build.record_launches(fn)


def bare(fn):
    """A zero-argument call that makes exactly the launches `fn` makes, as bare RawKernel calls
    (arguments packed once): the floor a launcher's host cost is compared with. None when `fn`
    launches nothing through build.launch (a library baseline)."""
    recs = launches(fn)
    if not recs:
        return None
    if len(recs) == 1:
        k, g, b, a, sm = recs[0]
        return (lambda: k(g, b, a)) if not sm else (lambda: k(g, b, a, shared_mem=sm))

    def run():
        for k, g, b, a, sm in recs:
            k(g, b, a, shared_mem=sm)
    return run


class Graph:
    """A sequence of launches captured once into a CUDA graph (CuPy stream capture) and
    replayed with one call: the host pays for one graph launch instead of one launch per
    kernel, and the GPU runs the kernels back to back. `fn` must not allocate (pass out=
    buffers): the graph replays into the memory it was captured with."""

    def __init__(self, fn, warmup: bool = True):
        need_gpu("capturing a CUDA graph")
        import cupy
        self.fn, self.stream = fn, cupy.cuda.Stream(non_blocking=True)
        pool = cupy.get_default_memory_pool()
        with self.stream:
            if warmup:                   # compiles kernels and grows the memory pool outside the capture
                fn()
                self.stream.synchronize()
            before = pool.used_bytes()
            self.stream.begin_capture()
            try:
                res = fn()
                grew = pool.used_bytes() > before
                del res
            finally:
                self._graph = self.stream.end_capture()
        if grew:
            raise ValueError("graph(fn): fn allocated memory during capture; give every call its out= "
                             "buffer so the replay writes where the capture did")

    def __call__(self):
        import cupy
        self._graph.launch(cupy.cuda.get_current_stream())


def graph(fn, warmup: bool = True) -> Graph:
    """Capture the launches of one call of `fn` as a CUDA graph; calling the result replays them."""
    return Graph(fn, warmup)


# ---- roofs ------------------------------------------------------------------------------------

def _roof_elems() -> int:
    import cupy
    l2 = info()["l2_bytes"] or (4 << 20)
    want = max(8 * l2, 256 << 20)                      # well past L2
    free = cupy.cuda.Device().mem_info[0]
    return int(min(want, free // 6)) // 16 * 4         # float count, multiple of 4


def _grid(n4: int, threads=256) -> int:
    return int(min((n4 + threads - 1) // threads, info()["sms"] * 32))


def blocks_per_sm(fn, threads: int, smem: int = 0) -> int:
    """How many blocks of `threads` threads of kernel `fn` one SM holds at once (the occupancy
    API: registers, shared memory and threads decide)."""
    import cupy
    return int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, smem))


def resident_grid(fn, threads: int = 256) -> int:
    """Blocks that fill every SM exactly once (blocks per SM x SMs): a grid-stride kernel
    launched with this many blocks keeps every resident thread busy."""
    return max(1, blocks_per_sm(fn, threads)) * info()["sms"]


LAUNCHES = 100     # empty launches per event pair (back to back) and per graph


@functools.lru_cache(maxsize=None)
def roofs() -> dict:
    """Measured once per process on this device:
    copy roof (read + write bytes; the best of a copy kernel and cudaMemcpy), read roof
    (the best of a streaming sum and the widest bytes-in-flight readers, over as many bytes as
    the copy moves), and what an empty launch costs: alone
    between two events (launch_us), per launch when LAUNCHES run back to back in one event
    pair (launch_b2b_us), per launch replayed from a CUDA graph (launch_graph_us), and on the
    host per call (host_launch_us, host_graph_us for one graph of LAUNCHES kernels)."""
    import cupy
    n = _roof_elems()
    src = cupy.ones(n, cupy.float32)
    dst = cupy.empty_like(src)
    n4 = np.int64(n // 4)
    copy_k = build.kernel("measure", "measure_01_copy")
    read_k = build.kernel("measure", "measure_02_read")
    empty_k = build.kernel("measure", "measure_00_empty")
    g = _grid(n // 4)
    t_copy = time_fn(lambda: copy_k((g,), (256,), (src, dst, n4)))
    t_memcpy = time_fn(lambda: dst.data.copy_from_device_async(src.data, src.nbytes))
    # The read roof reads as many bytes as the copy moves (so launch and tail costs weigh the
    # same), and is the best of the streaming sum and the sweep's widest readers.
    del dst
    rsrc = cupy.ones(2 * n, cupy.float32)
    rn4 = np.int64(2 * n // 4)
    reads = {}
    for name in ("measure_02_read", *(f"measure_05_inflight_{b}B" for b in INFLIGHT_BYTES if b >= 32)):
        k = build.kernel("measure", name)
        gr = resident_grid(k)
        part = cupy.empty(gr, cupy.float32)
        t = time_fn(lambda k=k, gr=gr, part=part: k((gr,), (256,), (rsrc, part, rn4)))
        reads[name] = rsrc.nbytes / t.median_us / 1e3
    del rsrc
    one = lambda: empty_k((1,), (32,), ())      # noqa: E731

    def many():
        for _ in range(LAUNCHES):
            empty_k((1,), (32,), ())
    t_empty = time_fn(one, reps=200)                 # timed exactly like every kernel
    t_b2b = time_fn(many, reps=20, flush=False)
    gm = graph(many)
    t_graph = time_fn(gm, reps=20, flush=False)
    copy_best = min(t_copy.median_us, t_memcpy.median_us)
    return {
        "copy_gbps": 2 * src.nbytes / copy_best / 1e3,
        "copy_kernel_gbps": 2 * src.nbytes / t_copy.median_us / 1e3,
        "copy_memcpy_gbps": 2 * src.nbytes / t_memcpy.median_us / 1e3,
        "read_gbps": max(reads.values()),
        "read_sum_gbps": reads["measure_02_read"],
        "launch_us": t_empty.median_us,
        "launch_b2b_us": t_b2b.median_us / LAUNCHES,
        "launch_graph_us": t_graph.median_us / LAUNCHES,
        "host_launch_us": host_us(one, calls=LAUNCHES),
        "host_graph_us": host_us(gm, calls=10),
        "roof_bytes": int(src.nbytes),
    }


def roof_values() -> dict:
    """The roofs to draw: live ones, or those recorded with the first recorded device."""
    if is_live():
        return {**roofs(), "device": info()["name"], "source": "live", "date": now()}
    from .device import recorded_meta
    for meta in recorded_meta().values():
        if "roofs" in meta:
            return {**meta["roofs"], "device": meta["device"], "source": "recorded",
                    "date": meta.get("roofs_date", "?")}
    return {}


def measure(fn, nbytes: int, **kw) -> dict:
    """Time fn and express it as GB/s of unique bytes and fractions of the two roofs."""
    t = time_fn(fn, **kw)
    r = roofs()
    gbps = nbytes / t.median_us / 1e3
    return {"median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us, "reps": t.reps,
            "bytes": int(nbytes), "gbps": gbps, "frac_copy": gbps / r["copy_gbps"],
            "frac_read": gbps / r["read_gbps"]}


# ---- side-by-side comparison of a family's variants and baselines -----------------------------

RESULT_COLUMNS = ["lab", "case", "name", "kind", "dtype", "rows", "cols", "median_us", "p10_us", "p90_us", "reps",
                  "bytes", "gbps", "frac_copy", "frac_read", "warm_us", "host_us", "bare_host_us",
                  "device", "date", "source"]
WARM_ROWS = 64     # decode-size shapes (<= this many rows, and fitting in L2) are also timed warm


def _wants_warm(shape, nbytes) -> bool:
    rows = shape[0] if len(shape) > 1 else 1
    return rows <= WARM_ROWS and nbytes <= (info()["l2_bytes"] or 0)


def compare(family, cases, names=None, baselines=True, reps=None, host=True):
    """Time variants (and baselines) of a family on cases = [(shape, dtype), ...].

    Live: measured now, in this process, on identical inputs. Compile-only: the recorded
    rows for the same cases, from figures/reference/<device>/<lab>.csv, marked 'recorded'.
    Returns a pandas DataFrame with one row per (case, name):
      median_us, p10_us, p90_us   GPU time with L2 flushed before every repetition (events + spacer)
      gbps, frac_copy, frac_read  unique bytes per second, and as fractions of the two roofs
      warm_us                     GPU time without the flush (inputs L2-resident, as in a decoder),
                                  for shapes of <= WARM_ROWS rows whose bytes fit in L2; else NaN
      host_us                     host (CPU) µs to queue one call (bench.host_us)
      bare_host_us                the same for bare RawKernel calls making the same launches
                                  (variants only; host_us / bare_host_us is the launcher's overhead)"""
    import pandas as pd
    names = list(family.VARIANTS) if names is None else list(names)
    base = list(family.BASELINES) if baselines is True else list(baselines or [])
    keys = [family.case_key(shape, dt) for shape, dt in cases]
    if not is_live():
        rec = load_recorded(family.NAME)
        if rec.empty:
            print(f"SKIPPED (compile-only): no recorded {family.NAME} results yet; "
                  "on a GPU this times every variant and baseline (make bench records them).")
            return pd.DataFrame(columns=RESULT_COLUMNS)
        rec = rec[rec["case"].isin(keys) & rec["name"].isin(names + base)]
        dev = ", ".join(f"{d} ({dt})" for d, dt in rec[["device", "date"]].drop_duplicates().values)
        print(f"RECORDED results (not measured now), from: {dev}")
        return rec.reset_index(drop=True)
    import cupy
    rows = []
    for (shape, dt), key in zip(cases, keys):
        args = [cupy.asarray(a) for a in family.make_input(shape, dt, "randn")]
        nbytes = family.bytes_moved(*args)
        warm = _wants_warm(shape, nbytes)
        out = None
        for nm in names + base:
            is_base = nm in family.BASELINES
            if is_base:
                fn = family.BASELINES[nm](*args)
                if fn is None:
                    continue
            else:
                v = family.VARIANTS[nm]
                if dt not in v.dtypes:
                    continue
                out = v.alloc_out(*args)
                fn = functools.partial(v, *args, out=out)
            res = measure(fn, nbytes, reps=reps)
            res["warm_us"] = time_fn(fn, reps=reps, flush=False).median_us if warm else float("nan")
            res["host_us"] = host_us(fn) if host else float("nan")
            b = None if (is_base or not host) else bare(fn)
            res["bare_host_us"] = host_us(b) if b is not None else float("nan")
            rows.append({"lab": family.NAME, "case": key, "name": nm, "kind": "baseline" if is_base else "variant",
                         "dtype": dt, "rows": shape[0] if len(shape) > 1 else 1, "cols": shape[-1], **res})
        del args, out
    df = pd.DataFrame(rows, columns=[c for c in RESULT_COLUMNS if c not in ("device", "date", "source")])
    df["device"] = info()["name"]
    df["date"] = now()
    df["source"] = "live"
    return df


def select(df, **eq):
    """Rows of df whose columns equal the given values, or are in a given list (an empty
    frame stays empty)."""
    for k, v in eq.items():
        if df.empty or k not in df:
            return df.iloc[0:0]
        df = df[df[k].isin(v) if isinstance(v, (list, tuple, set)) else df[k] == v]
    return df


def pick(df, name: str, column: str, **eq) -> float:
    """One number of a results frame: `column` of the row named `name` (and matching eq, e.g.
    case=...), or NaN when that row or column is absent (an older recording)."""
    if df is None or df.empty or column not in df:
        return float("nan")
    d = select(df, name=name, **eq)
    return float(d[column].iloc[0]) if len(d) else float("nan")


def ratio(df, fast: str, slow: str, case: str) -> float:
    """time(slow) / time(fast) at one case (> 1: `fast` is faster), from the rows pick() reads;
    NaN when either is absent (not measured, or not in an older recording)."""
    return pick(df, slow, "median_us", case=case) / pick(df, fast, "median_us", case=case)


TABLE_COLUMNS = ["case", "name", "median_us", "p10_us", "p90_us", "gbps", "frac_copy", "frac_read",
                 "warm_us", "host_us", "device", "date", "source"]


def table(df, columns=TABLE_COLUMNS):
    """The standard columns of a results frame, rounded for reading."""
    return df[[c for c in columns if c in df]].round(3)


def speedup(df, num: str, den: str, by="case"):
    """time(den) / time(num) per case: > 1 means `num` is faster. Ratios, never absolute times."""
    import pandas as pd
    if df.empty:
        return pd.Series(dtype=float, name=f"{num} vs {den}")
    t = df.pivot_table(index=[by, "device", "source"], columns="name", values="median_us")
    if num not in t or den not in t:
        return pd.Series(dtype=float)
    return (t[den] / t[num]).dropna().rename(f"{num} vs {den}")


# ---- lab 00: the device's fundamentals, measured (or recorded) -----------------------------

INFLIGHT_BYTES = (4, 8, 16, 32, 64, 128)    # the measure_05_inflight_<B>B kernels
CHAIN = 8                                    # launches in the chain that lab 00 captures as a graph
CHASE_HOPS = 4096


def _chase_ns(nbytes: int, flush: bool) -> float:
    """ns per hop of a pointer chase over a random cycle through nbytes (one 4-byte index per
    128-byte line, so every hop touches a new line). Two chain lengths are timed and
    subtracted, so launch and spacer costs cancel."""
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
    """Everything lab 00 measures, as a table of (quantity, value, unit): the roofs, what a
    launch costs (alone, back to back, from a graph, on the host), warm vs flushed L2, the
    CPU-timer pitfall, DRAM and L2 latency (pointer chase), the bytes-in-flight sweep
    (Little's law), and the compute ceilings (FMA, SFU ex2, instruction issue).
    Compile-only: the recorded table."""
    import pandas as pd
    if not is_live():
        rec = load_recorded("measuring")
        if rec.empty:
            print("SKIPPED (compile-only): nothing recorded yet; a GPU measures every row live.")
        else:
            print("RECORDED results (not measured now), from: " +
                  ", ".join(f"{d} ({t})" for d, t in rec[["device", "date"]].drop_duplicates().values))
        return rec
    import cupy
    d = info()
    r = roofs()
    rows = [("SMs", d["sms"], "count"), ("SM clock", d["sm_clock_mhz"] or float("nan"), "MHz"),
            ("L2 size", (d["l2_bytes"] or 0) / 2**20, "MiB"),
            ("copy roof", r["copy_gbps"], "GB/s"), ("copy roof: copy kernel", r["copy_kernel_gbps"], "GB/s"),
            ("copy roof: cudaMemcpy", r["copy_memcpy_gbps"], "GB/s"), ("read roof", r["read_gbps"], "GB/s"),
            ("read roof: streaming sum (measure_02_read)", r["read_sum_gbps"], "GB/s"),
            ("empty kernel launch", r["launch_us"], "us"),
            (f"empty kernel: {LAUNCHES} back to back, per launch", r["launch_b2b_us"], "us"),
            (f"empty kernel: CUDA graph of {LAUNCHES}, per launch", r["launch_graph_us"], "us"),
            ("host: one RawKernel launch call", r["host_launch_us"], "us"),
            (f"host: one graph launch ({LAUNCHES} kernels)", r["host_graph_us"], "us")]
    # A chain of small launches (CHAIN residual adds, fp16, 4096 wide: one decode step's worth),
    # launched one by one and replayed as one CUDA graph: GPU time, host time, end to end.
    from . import add
    a, b = (cupy.asarray(v) for v in add.make_input((4096,), "float16"))
    h = cupy.empty_like(a)
    step = add.VARIANTS[add.BEST["float16"]]

    def chain():
        for _ in range(CHAIN):
            step(a, b, out=h)
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
    call = lambda: copy_k((g,), (256,), (src, dst, np.int64(n // 4)))  # noqa: E731
    warm, cold = time_fn(call, flush=False), time_fn(call, flush=True)
    rows += [("L2-resident copy, warm (no flush)", 2 * src.nbytes / warm.median_us / 1e3, "GB/s"),
             ("L2-resident copy, L2 flushed", 2 * src.nbytes / cold.median_us / 1e3, "GB/s"),
             ("L2-resident copy size", 2 * src.nbytes / 2**20, "MiB")]
    del src, dst
    # CPU timers: without a sync they time the launch, not the kernel.
    big = _roof_elems()
    bsrc, bdst = cupy.ones(big, cupy.float32), cupy.empty(big, cupy.float32)
    bg = _grid(big // 4)
    bcall = lambda: copy_k((bg,), (256,), (bsrc, bdst, np.int64(big // 4)))  # noqa: E731
    bcall()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter(); bcall(); t_nosync = time.perf_counter() - t0
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter(); bcall(); cupy.cuda.Device().synchronize(); t_sync = time.perf_counter() - t0
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
             ("bytes in flight for the read roof, all SMs", need / 2**10, "KiB"),
             ("bytes in flight for the read roof, per SM", need / d["sms"] / 2**10, "KiB")]
    part = cupy.empty(1, cupy.float32)
    threads_sm = []
    for b in INFLIGHT_BYTES:
        k = build.kernel("measure", f"measure_05_inflight_{b}B")
        grid = resident_grid(k)
        threads_sm.append(grid // d["sms"] * 256)
        per = min(b, 16) // 4                                    # floats per element of the kernel's type
        t = time_fn(lambda k=k, grid=grid, per=per: k((grid,), (256,), (bsrc, part, np.int64(big // per))))
        rows.append((f"read with {b} B in flight per thread", bsrc.nbytes / t.median_us / 1e3, "GB/s"))
    rows.append(("threads per SM in the sweep", min(threads_sm), "count"))
    del bsrc
    # Compute ceilings for the roofline.
    out = cupy.empty(1, cupy.float32)
    fma = _rate("measure_03_fma", (out, np.float32(0.999), np.float32(0.001)), 8, 4096)   # 8 FMA per trip
    ex2 = _rate("measure_06_ex2", (out, np.float32(0.5)), 8, 4096)                         # 8 ex2 per trip
    mix = _rate("measure_07_issue", (out, np.float32(0.999), np.float32(0.001), np.uint32(7), np.uint32(5)),
                64, 1024)                                          # 64 instructions per trip (loop control not counted)
    rows += [("fp32 FMA peak", 2 * fma, "GFLOP/s"), ("FFMA instructions", fma, "G instr/s"),
             ("ex2.approx (SFU) throughput", ex2, "G ex2/s"),
             ("FFMA + INT32 mix instructions", mix, "G instr/s"),
             ("instruction issue ceiling", max(fma, mix), "G instr/s")]
    df = pd.DataFrame(rows, columns=["quantity", "value", "unit"])
    df["device"], df["date"], df["source"] = d["name"], now(), "live"
    return df


def value(fund, quantity: str, default=float("nan")) -> float:
    """One value of a fundamentals() table by its quantity (NaN when that row is absent, e.g.
    in a table recorded before it was measured)."""
    if fund is None or fund.empty:
        return default
    v = fund.loc[fund["quantity"] == quantity, "value"]
    return float(v.iloc[0]) if len(v) else default


def little(fund, bytes_per_thread, threads_per_sm=None) -> float:
    """Little's law's predicted GB/s for a streaming kernel that keeps `bytes_per_thread` in
    flight in each of `threads_per_sm` resident threads (default: the sweep's), on the device
    of `fund`: min(read roof, bytes in flight on all SMs / DRAM latency)."""
    thr = value(fund, "threads per SM in the sweep") if threads_per_sm is None else threads_per_sm
    inflight_all = bytes_per_thread * thr * value(fund, "SMs")
    return min(value(fund, "read roof"), inflight_all / value(fund, "DRAM latency (pointer chase)"))


def sweep_fraction(fund, bytes_per_thread) -> float:
    """The fraction of the read roof that the measured bytes-in-flight sweep reached with
    `bytes_per_thread` in flight per thread (interpolated on log2 of the bytes, clamped to the
    sweep's ends): the measured counterpart of little()."""
    pts = [(np.log2(b), value(fund, f"read with {b} B in flight per thread")) for b in INFLIGHT_BYTES]
    pts = [(x, y) for x, y in pts if not np.isnan(y)]
    if not pts:
        return float("nan")
    xs, ys = zip(*pts)
    return float(np.interp(np.log2(bytes_per_thread), xs, ys)) / value(fund, "read roof")


def inflight(fund):
    """The bytes-in-flight sweep of fundamentals() next to Little's law's prediction:
    predicted GB/s = min(read roof, bytes in flight on all SMs / DRAM latency)."""
    import pandas as pd
    if fund is None or fund.empty:
        return pd.DataFrame()
    thr, roof = value(fund, "threads per SM in the sweep"), value(fund, "read roof")
    rows = []
    for b in INFLIGHT_BYTES:
        gbps = value(fund, f"read with {b} B in flight per thread")
        if np.isnan(gbps):
            continue
        per_sm = b * thr
        pred = little(fund, b, thr)
        rows.append({"B in flight per thread": b, "KiB in flight per SM": per_sm / 2**10, "GB/s": gbps,
                     "fraction of read roof": gbps / roof, "Little's law predicts GB/s": pred,
                     "measured / predicted": gbps / pred})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["device"], df["date"], df["source"] = (fund[c].iloc[0] for c in ("device", "date", "source"))
    return df


def claims(df, rows):
    """The 'seed claim vs measured here' table.
    rows: [(claim, seed_says, faster, slower, case_key)]; measured = time(slower)/time(faster)."""
    import pandas as pd
    out = []
    for claim, seed, fast, slow, case in rows:
        d = select(df, case=case)
        for (dev, src), g in (d.groupby(["device", "source"]) if not d.empty else []):
            t = dict(zip(g["name"], g["median_us"]))
            ratio = t[slow] / t[fast] if fast in t and slow in t else float("nan")
            out.append({"claim": claim, "seed says": seed, "measured here": f"{ratio:.2f}x",
                        "comparison": f"{fast} vs {slow} at {case}", "source": f"{src}: {dev}"})
        if d.empty:
            out.append({"claim": claim, "seed says": seed, "measured here": "not measured",
                        "comparison": f"{fast} vs {slow} at {case}", "source": "-"})
    return pd.DataFrame(out)


# ---- Nsight Compute, where it is installed and allowed ------------------------------------------

NCU_METRICS = {
    "gpu__time_duration.sum": "duration",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput (% of peak)",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": "L2 throughput (% of peak)",
    "launch__grid_size": "grid size",
    "launch__block_size": "block size",
    "launch__registers_per_thread": "registers per thread",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy (%)",
}


def family_named(name: str):
    """A family (module or namespace) by its NAME, e.g. 'bias_add'."""
    from .record import LABS, families
    for fam in families([lab for lab in LABS if lab != "measuring"]):
        if fam.NAME == name:
            return fam
    raise ValueError(f"no family named {name!r}")


def ncu(family, name: str, shape, dtype: str, kernel: str | None = None, metrics=NCU_METRICS,
        timeout: int = 300):
    """Collect the seed's Nsight Compute metrics for one launch of one variant, in a child
    process under `ncu`. kernel: a regex for the kernel to profile (default: the family's
    kernel with the variant's step number, e.g. ^add_07_). Returns a table, or prints the
    command to run where ncu is missing, there is no GPU, or profiling is not permitted."""
    import os
    import shutil
    import subprocess
    import sys
    import pandas as pd
    kname = "regex:" + (kernel or f"^{family.FAMILY}_{name[:2]}_")
    script = (f"import cupy; from kernellab.bench import family_named; f = family_named({family.NAME!r}); "
              f"a = [cupy.asarray(v) for v in f.make_input({tuple(shape)!r}, {dtype!r})]; "
              f"f.VARIANTS[{name!r}](*a); cupy.cuda.Device().synchronize()")
    exe = shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if os.path.exists(p)), None)
    cmd = [exe or "ncu", "--metrics", ",".join(metrics), "--kernel-name", kname, "--launch-count", "1",
           "--csv", sys.executable, "-c", script]
    shown = "PYTHONPATH=labs_src " + " ".join(cmd[:8]) + f" {sys.executable} -c \"{script}\""
    if not is_live() or exe is None:
        why = "no GPU here" if not is_live() else "ncu is not installed (it ships with the CUDA toolkit)"
        print(f"SKIPPED ({why}). On a GPU machine with Nsight Compute, run:\n  {shown}")
        return None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(build.ROOT / "labs_src"),
                                                                      os.environ.get("PYTHONPATH")]))}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"ncu did not finish in {timeout} s. Run it by hand:\n  {shown}")
        return None
    rows = [l for l in p.stdout.splitlines() if l.startswith('"')]
    if p.returncode or len(rows) < 2:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-6:])
        print(f"ncu could not profile here (exit {p.returncode}):\n{tail}\n"
              f"Profiling may need admin rights (ERR_NVGPUCTRPERM: see NVIDIA's note on GPU performance "
              f"counters). The command:\n  {shown}")
        return None
    import io
    df = pd.read_csv(io.StringIO("\n".join(rows)))
    df = df[["Kernel Name", "Metric Name", "Metric Unit", "Metric Value"]]
    df.insert(2, "meaning", df["Metric Name"].map(metrics))
    return df.reset_index(drop=True)
