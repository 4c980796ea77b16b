"""Honest timing: CUDA events, L2 flushed before every repetition, medians with p10/p90,
GB/s of unique bytes against roofs measured on this device in this process."""
from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass

import numpy as np

from . import build, store
from .build import _grid, blocks_per_sm, resident_grid, waves  # noqa: F401  (bench.waves etc. stay importable)
from .device import info, is_live, need_gpu, now, release_cached
from .family import of

# kernels/measure.cu (the roofs, the flush, the spacer; lab 00's micro-benchmarks) is compiled with these
# (-D; its #ifndef defaults agree: tests/test_constants.py): loads in flight per thread of the read roof,
# independent chains of the FMA and ex2 ceilings, repeats of the issue ceiling's 16 instructions per trip
MEASURE = build.define("measure", READ_UNROLL=8, FMA_CHAINS=8, EX2_CHAINS=8, ISSUE_REPEAT=4)


@dataclass
class Timing:
    median_us: float
    p10_us: float
    p90_us: float
    reps: int

    def row(self) -> dict:
        return asdict(self)


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
    return functools.partial(read, (grid,), (256,), (buf, cupy.empty(grid, cupy.float32), np.int64(buf.size // 4)))


def flush_l2() -> None:
    """Evict L2 by READING twice its size: a written buffer would leave dirty lines whose write-back (µs)
    the next timed call pays for."""
    _flush_launch()()


def _keep_busy(us: float = 20.0) -> None:
    """About `us` µs of GPU work queued before a timed call, so the events time the kernels, not the host."""
    fma = build.kernel("measure", "measure_03_fma")
    per = _busy_us_per_8192()
    args = (_flush_buffer(), None, np.float32(1.0), np.float32(0.0))
    while us > 0:
        piece = min(us, PIECE_US)
        iters = int(max(256, 8192 * piece / per))
        fma((info()["sms"],), (128,), (args[0], np.int32(iters), *args[2:]))
        us -= piece


PIECE_US = 200.0


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
    """Median/p10/p90 µs of `fn()` from CUDA events, L2 flushed before each (flush=False: warm), behind a spacer."""
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
    return _stats([cupy.cuda.get_elapsed_time(s, e) * 1e3 for s, e in zip(starts, ends)])


# ---- host time, bare launches and CUDA graphs -----------------------------------------------------

def host_us(fn, calls: int = 30, batches: int = 3) -> float:
    """Host µs to *queue* one call of `fn`: the best of `batches` (noise only adds), gc paused, the GPU idle first."""
    need_gpu("host timing")
    import gc
    import cupy
    fn()
    best = float("inf")
    was, _ = gc.isenabled(), gc.disable()        # as timeit does: a collection is nobody's launch cost
    try:
        for _ in range(batches):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, time.perf_counter() - t0)
    finally:
        gc.enable() if was else None
    cupy.cuda.Device().synchronize()
    return best / calls * 1e6


def end_to_end_us(fn, calls: int = 100) -> float:
    """Wall µs per call of back-to-back calls, no spacer: what a caller sees, about max(host, GPU time)."""
    need_gpu("timing")
    import cupy
    fn()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


ROWS_READER = "measure_10_read_rows"      # a warp per 8 KiB piece, the grid covering the data once (a GEMV's order)
FLOOR_READERS = ("measure_05_inflight_64B", "measure_05_inflight_128B", "measure_08_read_256B", ROWS_READER)


def _reader_call(name, buf, n16):
    """One of lab 00's readers over n16 float4 of buf (ROWS_READER: a 256-thread block per 8 x 8 KiB)."""
    import cupy
    k = build.kernel("measure", name)
    grid = -(-n16 // (8 * 512)) if name == ROWS_READER else resident_grid(k)
    part = cupy.empty(grid, cupy.float32)
    return lambda: k((grid,), (256,), (buf, part, np.int64(n16)))


def read_floor(buf):
    """A call that only reads the device array `buf` (16-byte aligned): the fastest of FLOOR_READERS; None if empty."""
    n16 = buf.nbytes // 16
    return min((_reader_call(name, buf, n16) for name in FLOOR_READERS),
               key=lambda c: time_fn(c, reps=5).median_us) if n16 else None


def wall(fn, reps: int = 20, flush: bool = True, before=None) -> dict:
    """GPU and host µs of `fn` launched from idle (no spacer); before(): untimed set-up before each call."""
    need_gpu("timing")
    import cupy
    before = before or (lambda: None)
    for _ in range(2):                 # warm-up
        before(), fn()
    t, host = [], []
    for _ in range(reps):
        before()
        if flush:
            flush_l2()
        cupy.cuda.Device().synchronize()
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        h0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - h0) * 1e6)
        e.record()
        e.synchronize()
        t.append(cupy.cuda.get_elapsed_time(s, e) * 1e3)
    return {**_stats(t).row(), "host_us": float(np.median(host))}


def split(fns, reps: int = 5):
    """(gpu, host): median µs per call of `fns`, events between consecutive calls, all behind a spacer."""
    need_gpu("timing")
    import cupy
    _ = [f() for f in fns]                    # warm-up
    cupy.cuda.Device().synchronize()
    h0 = time.perf_counter()
    _ = [f() for f in fns]
    host_total = (time.perf_counter() - h0) * 1e6
    cupy.cuda.Device().synchronize()
    gpu, host = np.zeros((reps, len(fns))), np.zeros((reps, len(fns)))
    for r in range(reps):
        flush_l2()
        ev = [cupy.cuda.Event() for _ in range(len(fns) + 1)]
        _keep_busy(2 * host_total + 50)
        ev[0].record()
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            host[r, i] = (time.perf_counter() - t0) * 1e6
            ev[i + 1].record()
        ev[-1].synchronize()
        gpu[r] = [cupy.cuda.get_elapsed_time(a, b) * 1e3 for a, b in zip(ev[:-1], ev[1:])]
    return np.median(gpu, axis=0), np.median(host, axis=0)


def _stats(t) -> Timing:
    t = np.asarray(t)
    return Timing(float(np.median(t)), float(np.percentile(t, 10)), float(np.percentile(t, 90)), len(t))


def bare(fn):
    """The launches `fn` makes as bare RawKernel calls (a launcher's host-cost floor); None for a library call."""
    from .launch import record_launches
    recs = record_launches(fn)
    if not recs:
        return None
    if len(recs) == 1:                  # no loop around a single launch: the floor stays a floor
        k, g, b, a, sm = recs[0]
        return (lambda: k(g, b, a)) if not sm else (lambda: k(g, b, a, shared_mem=sm))

    def run():
        for k, g, b, a, sm in recs:
            k(g, b, a, shared_mem=sm)
    return run


class Graph:
    """The launches of fn() as a CUDA graph, replayed with one call into the memory they were captured with."""

    def __init__(self, fn, warmup: bool = True):
        need_gpu("capturing a CUDA graph")
        import cupy
        self.fn, self.stream = fn, cupy.cuda.Stream(non_blocking=True)
        pool = cupy.get_default_memory_pool()
        # The warm-up runs fn on a non-blocking stream, which does not wait for work already queued on the
        # default stream: an eager run of the same launches still in flight (lab 09's tower: run once, then
        # captured) would race with it over the same buffers. So everything queued so far finishes first.
        cupy.cuda.Device().synchronize()
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


graph = Graph      # graph(fn): capture one call's launches; calling the result replays them


def _roof_elems() -> int:
    import cupy
    l2 = info()["l2_bytes"] or (4 << 20)
    want = max(8 * l2, 256 << 20)                      # well past L2
    free = cupy.cuda.Device().mem_info[0]
    return int(min(want, free // 6)) // 16 * 4         # float count, multiple of 4


LAUNCHES = 100     # empty launches per event pair (back to back) and per graph


@functools.lru_cache(maxsize=None)
def roofs() -> dict:
    """Measured once per process, each from its p10 time (a roof is a ceiling): the copy roof (a copy kernel,
    cudaMemcpy, a 2-reads-1-write stream, near_l2), the read roof (the best reader over as many bytes), and
    an empty launch's cost: alone, back to back, from a graph, and on the host."""
    import cupy
    n = _roof_elems()
    src = cupy.ones(n, cupy.float32)
    dst = cupy.empty_like(src)
    n4 = np.int64(n // 4)
    copy_k = build.kernel("measure", "measure_01_copy")
    empty_k = build.kernel("measure", "measure_00_empty")
    g = _grid(n // 4)
    t0 = time.perf_counter()      # clocks up before the first roof: a cold GPU fakes a several-fold slower roof
    while time.perf_counter() - t0 < 0.3:
        for _ in range(20):
            copy_k((g,), (256,), (src, dst, n4))
        cupy.cuda.Device().synchronize()
    t_copy = time_fn(lambda: copy_k((g,), (256,), (src, dst, n4)))  # noqa: F821
    t_memcpy = time_fn(lambda: dst.data.copy_from_device_async(src.data, src.nbytes))  # noqa: F821
    # 2 reads : 1 write (a residual add's mix): DRAM reads cost less than writes, so this moves more
    # bytes per second than a 1:1 copy; the copy roof is the best of the mixes (a ceiling for all).
    out = cupy.empty(n // 2, cupy.float32)
    mix_k = build.kernel("measure", "measure_09_stream_2r1w")
    h4 = np.int64(n // 8)
    t_mix = time_fn(lambda: mix_k((_grid(n // 8),), (256,), (src, dst, out, h4)))  # noqa: F821
    mix_gbps = 3 * out.nbytes / t_mix.p10_us / 1e3
    del out
    # the read roof reads as many bytes as the copy moves (launch and tail costs weigh the same)
    del dst
    rsrc = cupy.ones(2 * n, cupy.float32)
    rn4 = np.int64(2 * n // 4)
    reads = {}
    for name in ("measure_02_read", *(f"measure_05_inflight_{b}B" for b in (32, 64, 128)), "measure_08_read_256B",
                 ROWS_READER):
        t = time_fn(_reader_call(name, rsrc, int(rn4)))
        reads[name] = rsrc.nbytes / t.p10_us / 1e3
    del rsrc
    one = lambda: empty_k((1,), (32,), ())      # noqa: E731

    def many():
        for _ in range(LAUNCHES):
            empty_k((1,), (32,), ())
    t_empty = time_fn(one, reps=200)                 # timed exactly like every kernel
    t_b2b = time_fn(many, reps=20, flush=False)
    gm = graph(many)
    t_graph = time_fn(gm, reps=20, flush=False)
    copy_best = min(t_copy.p10_us, t_memcpy.p10_us)
    near = near_l2(copy_k, mix_k, src, info()["l2_bytes"] or (4 << 20))
    return {
        "copy_gbps": max(2 * src.nbytes / copy_best / 1e3, mix_gbps, near),
        "copy_near_l2_gbps": near,
        "copy_micro_gbps": max(2 * src.nbytes / copy_best / 1e3, mix_gbps, near),   # stays when a record raises copy_gbps
        "copy_2r1w_gbps": mix_gbps,
        "copy_kernel_gbps": 2 * src.nbytes / t_copy.p10_us / 1e3,
        "copy_memcpy_gbps": 2 * src.nbytes / t_memcpy.p10_us / 1e3,
        "read_gbps": max(reads.values()),
        "read_micro_gbps": max(reads.values()),
        "read_sum_gbps": reads["measure_02_read"],
        "launch_us": t_empty.median_us,
        "launch_b2b_us": t_b2b.median_us / LAUNCHES,
        "launch_graph_us": t_graph.median_us / LAUNCHES,
        "host_launch_us": host_us(one, calls=LAUNCHES),
        "host_graph_us": host_us(gm, calls=10),
        "roof_bytes": int(src.nbytes),
    }


def near_l2(copy_k, mix_k, src, l2: int) -> float:
    """The best copy or 2r1w stream over 1/2, 1, 2 L2s (writes may sit in L2 at the end event: faster there)."""
    best = 0.0
    for k in (min(src.size // 3, int(f * l2) // 4) // 16 * 16 for f in (0.5, 1, 2)):
        a, b, c, k4 = src[:k], src[k:2 * k], src[2 * k:3 * k], np.int64(k // 4)
        for nbytes, fn in ((2 * a.nbytes, lambda: copy_k((_grid(k // 4),), (256,), (a, b, k4))),
                           (2 * a.nbytes, lambda: b.data.copy_from_device_async(a.data, a.nbytes)),
                           (3 * a.nbytes, lambda: mix_k((_grid(k // 4),), (256,), (a, b, c, k4)))):
            best = max(best, nbytes / time_fn(fn).p10_us / 1e3)
    return best


def roof_values(df=None) -> dict:
    """The roofs of a results frame's device: live ones for live rows, else store.recorded_roofs(df)."""
    if is_live() and (df is None or not len(df) or (df["source"] == "live").any()):
        return {**roofs(), "device": info()["name"], "source": "live", "date": now()}
    return store.recorded_roofs(df)


# ---- side-by-side comparison of a family's variants and baselines -----------------------------

RESULT_COLUMNS = ["lab", "case", "name", "kind", "dtype", "rows", "cols", "median_us", "p10_us", "p90_us", "reps",
                  "bytes", "gbps", "frac_copy", "frac_read", "warm_us", "host_us", "bare_host_us",
                  "device", "date", "source"]
WARM_ROWS = 64     # decode-size shapes (<= this many rows, and fitting in L2) are also timed warm


def compare(family, cases, names=None, baselines=True, reps=None, host=True):
    """Time a family's variants and baselines on cases = [(shape, dtype), ...] (compile-only: the recorded rows):
    RESULT_COLUMNS (a reads_back step: its launches alone timed; warm_us: WARM_ROWS' shapes only, else NaN)."""
    import pandas as pd
    family = of(family)
    names = list(family.variants) if names is None else list(names)
    base = list(family.baselines) if baselines is True else list(baselines or [])
    keys = [family.case_key(shape, dt) for shape, dt in cases]
    if not is_live():
        rec = store.recorded(family.name, "every variant and baseline", case=keys, name=names + base)
        return rec if len(rec) else pd.DataFrame(columns=RESULT_COLUMNS)
    import cupy
    from .progress import current
    rows = []
    bar = current()            # make bench / make drift: a progress bar per lab (a notebook has none)
    for (shape, dt), key in zip(cases, keys):
        args = [cupy.asarray(a) for a in family.make_input(shape, dt, "randn")]
        nbytes = family.bytes_moved(*args)
        rows_n = shape[0] if len(shape) > 1 else 1
        warm = rows_n <= WARM_ROWS and nbytes <= (info()["l2_bytes"] or 0)
        out = None
        for nm in names + base:
            if bar is not None:
                bar.step(f"{key} {nm}")
            is_base = nm in family.baselines
            if is_base:
                fn = family.baselines[nm](*args)
                if fn is None:
                    continue
            else:
                v = family.variants[nm]
                if dt not in v.dtypes or not v.runs_here():
                    continue
                out = v.alloc_out(*args)
                fn = functools.partial(v, *args, out=out)     # the call a user makes, as it is made
            gpu = (bare(fn) if not is_base and v.reads_back else None) or fn
            res = {**time_fn(gpu, reps=reps).row(), "bytes": int(nbytes)}     # fractions: store.derive, below
            res["warm_us"] = time_fn(gpu, reps=reps, flush=False).median_us if warm else float("nan")
            res["host_us"] = host_us(fn) if host else float("nan")
            b = None if (is_base or not host) else bare(fn)
            res["bare_host_us"] = host_us(b) if b is not None else float("nan")
            rows.append({"lab": family.name, "case": key, "name": nm, "kind": "baseline" if is_base else "variant",
                         "dtype": dt, "rows": rows_n, "cols": shape[-1], **res})
        del args, out
    release_cached()
    df = pd.DataFrame(rows, columns=[c for c in RESULT_COLUMNS if c not in ("device", "date", "source")])
    store.derive(df, roofs(), family.roof)          # gbps and the one fraction that applies
    print(f"LIVE: measured now on {info()['name']}, {now()}")
    df["device"], df["date"], df["source"] = info()["name"], now(), "live"
    return df


MEMCPY = "memcpy x -> y (floor)"      # the name families give the memcpy baseline


def memcpy(x, *_):
    """Baseline factory: cudaMemcpyAsync of x's bytes, the floor of a kernel reading x and writing a same-size y."""
    import cupy
    y = cupy.empty_like(x)
    return lambda: y.data.copy_from_device_async(x.data, x.nbytes)
