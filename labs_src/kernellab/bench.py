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
    return cupy.empty(nbytes // 4, cupy.float32)


def flush_l2() -> None:
    """Evict L2 by writing a buffer of at least twice its size."""
    _flush_buffer().fill(0)


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


# ---- roofs ------------------------------------------------------------------------------------

def _roof_elems() -> int:
    import cupy
    l2 = info()["l2_bytes"] or (4 << 20)
    want = max(8 * l2, 256 << 20)                      # well past L2
    free = cupy.cuda.Device().mem_info[0]
    return int(min(want, free // 6)) // 16 * 4         # float count, multiple of 4


def _grid(n4: int, threads=256) -> int:
    return int(min((n4 + threads - 1) // threads, info()["sms"] * 32))


@functools.lru_cache(maxsize=None)
def roofs() -> dict:
    """Copy roof (read + write bytes), read roof (streaming sum), empty-kernel launch time,
    measured once per process on this device."""
    import cupy
    n = _roof_elems()
    src = cupy.ones(n, cupy.float32)
    dst = cupy.empty_like(src)
    part = cupy.empty(info()["sms"] * 32, cupy.float32)
    n4 = np.int64(n // 4)
    copy_k = build.kernel("measure", "measure_01_copy")
    read_k = build.kernel("measure", "measure_02_read")
    empty_k = build.kernel("measure", "measure_00_empty")
    g = _grid(n // 4)
    t_copy = time_fn(lambda: copy_k((g,), (256,), (src, dst, n4)))
    t_memcpy = time_fn(lambda: dst.data.copy_from_device_async(src.data, src.nbytes))
    t_read = time_fn(lambda: read_k((g,), (256,), (src, part, n4)))
    t_empty = time_fn(lambda: empty_k((1,), (32,), ()), reps=200)   # timed exactly like every kernel
    copy_best = min(t_copy.median_us, t_memcpy.median_us)
    return {
        "copy_gbps": 2 * src.nbytes / copy_best / 1e3,
        "read_gbps": src.nbytes / t_read.median_us / 1e3,
        "launch_us": t_empty.median_us,
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
                  "bytes", "gbps", "frac_copy", "frac_read", "device", "date", "source"]


def compare(family, cases, names=None, baselines=True, reps=None):
    """Time variants (and baselines) of a family on cases = [(shape, dtype), ...].

    Live: measured now, in this process, on identical inputs. Compile-only: the recorded
    rows for the same cases, from figures/reference/<device>/<lab>.csv, marked 'recorded'.
    Returns a pandas DataFrame with one row per (case, name)."""
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
            rows.append({"lab": family.NAME, "case": key, "name": nm, "kind": "baseline" if is_base else "variant",
                         "dtype": dt, "rows": shape[0] if len(shape) > 1 else 1, "cols": shape[-1], **res})
        del args, out
    df = pd.DataFrame(rows)
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


TABLE_COLUMNS = ["case", "name", "median_us", "p10_us", "p90_us", "gbps", "frac_copy", "frac_read",
                 "device", "date", "source"]


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

def fundamentals():
    """Roofs, launch overhead, warm vs flushed L2, the CPU-timer pitfall and the FMA peak,
    as a table of (quantity, value, unit). Compile-only: the recorded table."""
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
    r = roofs()
    rows = [("copy roof", r["copy_gbps"], "GB/s"), ("read roof", r["read_gbps"], "GB/s"),
            ("empty kernel launch", r["launch_us"], "us")]
    # Warm vs flushed: a copy whose buffers (in + out) fill an eighth of L2.
    n = max((info()["l2_bytes"] or (4 << 20)) // 32 // 4 * 4, 1 << 16)
    src, dst = cupy.ones(n, cupy.float32), cupy.empty(n, cupy.float32)
    copy_k = build.kernel("measure", "measure_01_copy")
    g = _grid(n // 4)
    call = lambda: copy_k((g,), (256,), (src, dst, np.int64(n // 4)))  # noqa: E731
    warm, cold = time_fn(call, flush=False), time_fn(call, flush=True)
    rows += [("L2-resident copy, warm (no flush)", 2 * src.nbytes / warm.median_us / 1e3, "GB/s"),
             ("L2-resident copy, L2 flushed", 2 * src.nbytes / cold.median_us / 1e3, "GB/s"),
             ("L2-resident copy size", 2 * src.nbytes / 2**20, "MiB")]
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
    rows += [(f"{2 * bsrc.nbytes / 2**20:.0f} MiB copy: perf_counter, no sync", t_nosync * 1e6, "us"),
             (f"{2 * bsrc.nbytes / 2**20:.0f} MiB copy: perf_counter + sync", t_sync * 1e6, "us"),
             (f"{2 * bsrc.nbytes / 2**20:.0f} MiB copy: CUDA events (median)", ev.median_us, "us")]
    # FMA peak for the roofline.
    fma = build.kernel("measure", "measure_03_fma")
    out = cupy.empty(1, cupy.float32)
    blocks, iters = info()["sms"] * 8, 4096
    t = time_fn(lambda: fma((blocks,), (256,), (out, np.int32(iters), np.float32(0.999), np.float32(0.001))),
                flush=False)
    rows.append(("fp32 FMA peak", blocks * 256 * iters * 8 * 2 / t.median_us / 1e3, "GFLOP/s"))
    df = pd.DataFrame(rows, columns=["quantity", "value", "unit"])
    df["device"], df["date"], df["source"] = info()["name"], now(), "live"
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
