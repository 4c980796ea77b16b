"""On a GPU: decode attention step 06 (attention_06_decode_gqa_flash) under a few tunings, beside step 05,
torch SDPA (enable_gqa) and the read-only floor (a reader of the same cache bytes), at lab 07's lengths
(Qwen3-8B: 32 query heads, 8 KV heads, head dim 128, fp16, batch 1), in one table, to choose step 06's
defaults (issue 38 item 2: >= 1.0x SDPA at every length, >= 0.90 of the floor at KV >= 4096).

    PYTHONPATH=labs_src .venv/bin/python scripts/decode_sweep.py [--tunings default,mc64,...] [--lengths 1,16,...]
                                                                [--warm] [--host] [--csv sweep.csv]

Every contender is first checked against the float64 reference at every length (a wrong tuning is
dropped, loudly), then timed with core.bench.time_fn: CUDA events, a spacer, L2 flushed before every
repetition (--warm: not flushed, the cache L2-resident where it fits). Each tuning is a Variant (launch
plans), called as lab 07 calls a step. The table gives median GPU µs; under it, per tuning, the worst
time(SDPA) / time(06) over the lengths and the worst time(floor) / time(06) at KV >= 4096, with `~`
where the two p10-p90 bands overlap (within noise). --host adds a table of host µs per call
(core.bench.host_us); --csv keeps every timing (not a record: figures/reference/ is make bench's)."""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "labs_src"))

# name -> step 06's knobs (attention.steps.flash: min_chunk, per_sm, tune = -D options of the kernel)
TUNINGS = {
    "default": {},
    "mc64": {"min_chunk": 64},
    "mc128": {"min_chunk": 128},
    "mc256": {"min_chunk": 256},
    "sm1": {"per_sm": 1},
    "sm4": {"per_sm": 4},
    "t32s2": {"tune": ("-DDFL_TILE=32", "-DDFL_STAGES=2")},     # stages x keys x 512 B < 48 KiB (static)
    "s2": {"tune": ("-DDFL_STAGES=2",)},
    "s3": {"tune": ("-DDFL_STAGES=3",)},
    "s5": {"tune": ("-DDFL_STAGES=5",)},
    "mc64sm4": {"min_chunk": 64, "per_sm": 4},
    "mc16": {"min_chunk": 16},
    "t32sm4": {"tune": ("-DDFL_TILE=32", "-DDFL_STAGES=2"), "per_sm": 4},
    "mc64s5": {"min_chunk": 64, "tune": ("-DDFL_STAGES=5",)},   # a chunk of up to 64 keys copied before the length
    # the chunk rule's one-chunk threshold (the default: FLASH_SPLIT_FROM; 0: chunks from min_chunk keys on)
    "split0": {"split_from": 0},
    "split96": {"split_from": 96},
    "split128": {"split_from": 128},
    "split192": {"split_from": 192},
    "split256": {"split_from": 256},
    # ablations of the default, one idea off each
    "no_async": {"tune": ("-DDFL_ASYNC=0",)},             # plain 16-byte loads and stores, not cp.async
    "no_early": {"tune": ("-DDFL_EARLY=0",)},             # chunk 0 waits for the device-side length too
    "merge_launch": {"merge_launch": True},               # step 03's merge kernel after the chunks
}
PICK = "default,mc64,mc128,mc256,sm1,sm4,t32s2,s2,s5,mc64s5,no_async,no_early,merge_launch"


def _tuned(name, knobs):
    """Step 06 with these knobs as a Variant: validated once, then replayed from its launch plan."""
    from kernellab.attention import steps as S

    def launcher(q, k, v, length, out=None):
        return S.flash(q, k, v, length, out, **knobs)
    launcher.__name__ = f"flash_{name}"
    return S._dec_variant(launcher)


def _band(t):
    return t.p10_us, t.p90_us


def _ratio(base, t):
    """time(base) / time(t) with '~' where their p10-p90 bands overlap."""
    (b0, b1), (t0, t1) = _band(base), _band(t)
    return f"{base.median_us / t.median_us:.2f}" + ("~" if b0 <= t1 and t0 <= b1 else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tunings", default=PICK, help=f"comma-separated, of: {', '.join(TUNINGS)}")
    ap.add_argument("--lengths", default=None, help="comma-separated KV lengths (default: lab 07's)")
    ap.add_argument("--warm", action="store_true", help="time without flushing L2")
    ap.add_argument("--host", action="store_true", help="also host µs per call (a second table)")
    ap.add_argument("--csv", default=None, help="also write every timing (median, p10, p90, host) to this CSV")
    a = ap.parse_args(argv)
    import cupy
    import pandas as pd
    from kernellab import attention as A
    from kernellab.core import bench
    from kernellab.core.check import CheckError, check
    from kernellab.core.device import info, is_live, now
    if not is_live():
        sys.exit("decode_sweep: needs a CUDA GPU (it times kernels)")
    names = [t for t in a.tunings.split(",") if t]
    bad = [t for t in names if t not in TUNINGS]
    if bad:
        sys.exit(f"decode_sweep: unknown tunings {bad}; known: {', '.join(TUNINGS)}")
    lengths = [int(x) for x in a.lengths.split(",")] if a.lengths else list(A.DEC_LENGTHS)
    steps = {"05": A.DEC_VARIANTS["05_gqa_tile"], **{f"06:{t}": _tuned(t, TUNINGS[t]) for t in names}}
    base = {"floor": A._floor_dec, "SDPA": A._sdpa_decode}
    dropped, rows, hrows, times, hosts = set(), [], [], {}, {}
    for n in lengths:
        host = A.make_decode((A.HQ, n), seed=n)
        q, k, v, lens = (cupy.asarray(x) for x in host)
        want = A.reference_decode(*host)
        row, hrow = {"length": n}, {"length": n}
        for nm, make in base.items():
            fn = make(q, k, v, lens)
            if fn is not None:
                t = times[nm, n] = bench.time_fn(fn, flush=not a.warm)
                row[nm] = t.median_us
        for nm, step in steps.items():
            if nm in dropped:
                continue
            out = cupy.empty((A.HQ, A.D), cupy.float16)
            fn = functools.partial(step, q, k, v, lens, out=out)
            try:
                fn()
                check(out, want, name=f"{nm} at {n}", rtol=A.TOL[0], atol=A.TOL[1], quiet=True)
            except CheckError as e:
                print(f"DROPPED {nm}: {e}")
                dropped.add(nm)
                continue
            t = times[nm, n] = bench.time_fn(fn, flush=not a.warm)
            row[nm] = t.median_us
            if a.host:
                hrow[nm] = hosts[nm, n] = bench.host_us(fn)
        if a.host and "SDPA" in row:
            hrow["SDPA"] = hosts["SDPA", n] = bench.host_us(base["SDPA"](q, k, v, lens))
        rows.append(row)
        hrows.append(hrow)
        del q, k, v, lens
    df = pd.DataFrame(rows).set_index("length")
    print(f"decode attention, Qwen3-8B layout, median GPU µs ({'warm' if a.warm else 'L2 flushed'}), "
          f"{info()['name']}, {now()}")
    print(df.to_string(float_format=lambda x: f"{x:.1f}"))
    if a.host:
        print("\nhost µs per call (core.bench.host_us: the steps as Variants, replayed from their launch plans)")
        print(pd.DataFrame(hrows).set_index("length").to_string(float_format=lambda x: f"{x:.1f}"))
    if a.csv:
        pd.DataFrame([{"length": n, "name": nm, **t.row(), "host_us": hosts.get((nm, n), float("nan")),
                       "device": info()["name"], "date": now(), "flushed": not a.warm}
                      for (nm, n), t in times.items()]).to_csv(a.csv, index=False)
        print(f"written: {a.csv}")
    print("\nper contender: worst time(SDPA)/time(it) over the lengths; worst time(floor)/time(it) at KV >= 4096"
          " (`~`: p10-p90 bands overlap)")
    for nm in steps:
        if nm in dropped:
            continue
        vs = [(times["SDPA", n].median_us / times[nm, n].median_us, n) for n in lengths if ("SDPA", n) in times]
        fl = [(times["floor", n].median_us / times[nm, n].median_us, n) for n in lengths
              if n >= 4096 and ("floor", n) in times]
        line = f"  {nm:>10}:"
        if vs:
            r, n = min(vs)
            line += f" vs SDPA worst {_ratio(times['SDPA', n], times[nm, n])} at {n}"
        if fl:
            r, n = min(fl)
            line += f"; of the floor worst {_ratio(times['floor', n], times[nm, n])} at {n}"
        print(line)
    if dropped:
        print(f"dropped (wrong against the float64 reference): {', '.join(sorted(dropped))}")
    return df


if __name__ == "__main__":
    main()
