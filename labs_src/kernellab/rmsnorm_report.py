"""RMSNorm (lab 02): the tables and lines under the lab's cells, computed from the frames on screen."""
from __future__ import annotations

from . import rmsnorm
from .core import bench, results
from .measuring import recorded_value

def say_cub_smem(info) -> None:
    """CUB's shared memory from ptxas (info, build.ptxas_info's frame) against the report's "~512 bytes"."""
    cub = sorted(set(info.loc[info["kernel"] == "rmsnorm_01_f32_cub", "smem_bytes"]))
    near = all(512 / results.HOLD <= b <= 512 * results.HOLD for b in cub)
    results.say(f"CUB's reduction reserves {' or '.join(map(str, cub))} B of shared memory (the table above): the "
                f"report's \"~512 bytes\" {'matches' if near else 'does not match'} this CUB.")


def say_bytes_per_call() -> None:
    """The bytes one 1 × 4096 call moves on each data path (x, y and the weight)."""
    for path in rmsnorm.PATHS:
        x1, w1 = rmsnorm.make_input((1, 4096), path)
        results.say(f"1 × 4096, {path}: x {x1.nbytes // 1024} KiB + y {x1.nbytes // 1024} KiB + weight "
                    f"{w1.nbytes // 1024} KiB = **{rmsnorm.bytes_moved(x1, w1) // 1024} KiB** per call.")


def round_trips_said(r, rt) -> str:
    """Steps 05 and 06 at one fp16 row, and the µs per extra round trip against lab 00's DRAM latency."""
    one16 = rmsnorm.case_key((1, 4096), "float16")
    n05, n06 = (int(rt[(rt.step == s) & (rt.path == "float16")]["round trips (first pass)"].iloc[0])
                for s in ("05_fp16_half2_cub", "06_fp16_uint4"))
    t05, t06 = (results.pick(r, s, "median_us", case=one16) for s in ("05_fp16_half2_cub", "06_fp16_uint4"))
    if not (t05 == t05 and t06 == t06):
        return "Not recorded yet: on a GPU the times go beside the round trips."
    per_rt, dram = (t05 - t06) / (n05 - n06), recorded_value("DRAM latency (pointer chase)", r)
    return (f"At 1 × 4096 fp16, step 06 is {results.times(r, '06_fp16_uint4', '05_fp16_half2_cub', one16)} faster than "
            f"step 05 with {n05 - n06} fewer round trips per pass: **{per_rt:.2f} µs** per round trip, "
            + (f"{per_rt * 1e3 / dram:.1f}× lab 00's DRAM latency of {dram:.0f} ns" if dram == dram else
               "(lab 00 has no recorded latency for this device)") + f" ({results.source(r)}).")


def say_round_trips(res, abl, rt) -> None:
    """round_trips_said on the device on screen, then the ablations of 05 -> 06 and 01 -> 02 at one row."""
    results.each_device(res, round_trips_said, rt)
    one16, one32 = (rmsnorm.case_key((1, 4096), p) for p in ("float16", "float32"))
    results.pairs(abl, [(f"the {what} alone", "06_fp16_uint4", f"06_ablate_{k}", one16) for what, k in (
        ("width", "half2"), ("loop", "runtime_stride"), ("reduction", "cub"))]
        + [("all five changes (05 → 06)", "06_fp16_uint4", "05_fp16_half2_cub", one16),
           ("fp32: all four changes (01 → 02)", "02_f32_shfl", "01_f32_cub", one32)], "One row")


def say_launch_share(res) -> None:
    """Lab 00's copy roof buffers against 8192 × 4096 fp16, its time at the roof, and one launch's share of it."""
    roof = bench.roof_values(res)
    b = results.pick(res, "08_onepass", "bytes", case=rmsnorm.case_key((8192, 4096), "float16"))
    if roof:
        results.say(f"Lab 00's copy micro-benchmark moves {2 * roof['roof_bytes'] / 2**20:.0f} MiB (read + write) far "
                    f"past L2, and buffers of ½ to 2 L2s near it; 8192 × 4096 fp16 moves {b / 2**20:.0f} MiB, "
                    f"{b / roof['copy_gbps'] / 1e3:.1f} µs at the roof, and one empty launch measured the same way "
                    f"takes {roof['launch_us']:.2f} µs, {roof['launch_us'] / (b / roof['copy_gbps'] / 1e3):.0%} of that "
                    f"({roof['source']} on {roof['device']}, {roof['date']}).")


def ldg_said(part) -> str:
    """Steps 05 -> 06 over every fp16 shape: `__ldg` alone and `__restrict__` alone, by the noise rule."""
    cs = results.cases(part, "07_fp16_restrict_no_ldg")
    ldg = [results.ratio_band(part, "06_fp16_uint4", "07_fp16_restrict_no_ldg", c) for c in cs]
    apart = [f"`{c}`" for c, m in zip(cs, ldg) if m.ok and not results.within_noise(m)]
    return (" ".join(f"{what}: " + results.summary(part, *p, prov=False) for what, p in (
        ("05 → 06", ("06_fp16_uint4", "05_fp16_half2_cub")), ("`__ldg` alone", ("06_fp16_uint4", "07_fp16_restrict_no_ldg")),
        ("`__restrict__` alone", ("07_fp16_restrict_no_ldg", "07_fp16_uint4_no_ldg"))))
            + (f" `__ldg` is beyond the noise at {', '.join(apart)}, though the load path in the PTX counts is the same"
               if apart else " `__ldg` is within noise everywhere: `__restrict__` already gave the read-only path")
            + f" ({results.source(part)}).")
