"""RMSNorm (lab 02): the sentences under the lab's tables. Each reads the frames on screen through
results' functions (every number and verdict computed, none typed in); a notebook cell is one call.
`*_said(part, ...)` returns one device's Markdown (for results.each_device); `say_*(frame)` prints."""
from __future__ import annotations

from . import rmsnorm
from .core import bench, build, results
from .core.device import ORIN_PEAK_GBPS, ORIN_SMS
from .measuring import recorded_value

UNROLL_STEPS = ("02_f32_shfl", "04_f32_fp16w_uint2", "06_fp16_uint4")


def say_unroll_pragma() -> None:
    """Whether building without `#pragma unroll 4` changes the instructions of steps 02, 04 and 06."""
    results.say("Built without `#pragma unroll 4` (`-DRMS_NO_UNROLL_PRAGMA`, sm_90): " + "; ".join(
        f"step {st[:2]} compiles to " + ("different instructions (the pragma is a change of its own here: "
                                         "`06_ablate_runtime_stride` undoes it together with the stride)"
                                         if rmsnorm.unroll_pragma_changes(st) else "the same instructions")
        for st in UNROLL_STEPS) + ".")


def say_cub_smem(info) -> None:
    """CUB's block reduction against the shuffle version: shared memory and registers per arch, from
    ptxas (info, build.ptxas_info's frame), set against the report's "~512 bytes"."""
    i = info.set_index(["kernel", "arch"])
    results.say("From ptxas: " + "; ".join(
        f"{a}: CUB's reduction takes {i.loc[('rmsnorm_01_f32_cub', a), 'smem_bytes']} B of shared memory and "
        f"{i.loc[('rmsnorm_01_f32_cub', a), 'registers']} registers, the shuffle version "
        f"{i.loc[('rmsnorm_02_f32_shfl', a), 'smem_bytes']} B and {i.loc[('rmsnorm_02_f32_shfl', a), 'registers']} "
        "registers" for a in build.ARCHS) + ". CUB's default `BLOCK_REDUCE_WARP_REDUCTIONS` needs one float per "
        "warp plus a little bookkeeping, so the report's \"~512 bytes\" does not match this CUB.")


def say_bytes_per_call() -> None:
    """The bytes one 1 × 4096 call moves on each data path (x, y and the weight)."""
    for path in rmsnorm.PATHS:
        x1, w1 = rmsnorm.make_input((1, 4096), path)
        results.say(f"1 × 4096, {path}: x {x1.nbytes // 1024} KiB + y {x1.nbytes // 1024} KiB + weight "
                    f"{w1.nbytes // 1024} KiB = **{rmsnorm.bytes_moved(x1, w1) // 1024} KiB** per call.")


def round_trips_said(r, a, rt) -> str:
    """One device's timings (r) and ablations (a) beside the round-trip table rt: step 05 against 06 at one
    row, µs per extra round trip against lab 00's DRAM latency, and each of step 06's changes alone."""
    def _n(step, path="float16"):
        return int(rt[(rt.step == step) & (rt.path == path)]["round trips (first pass)"].iloc[0])

    def _t(step, path="float16"):
        return results.pick(r, step, "median_us", case=rmsnorm.case_key((1, 4096), path))
    one16 = rmsnorm.case_key((1, 4096), "float16")
    t05, t06 = _t("05_fp16_half2_cub"), _t("06_fp16_uint4")
    if not (t05 == t05 and t06 == t06):
        return "Not recorded yet: on a GPU the times go beside the round trips."
    per_rt = (t05 - t06) / (_n("05_fp16_half2_cub") - _n("06_fp16_uint4"))
    dram = recorded_value("DRAM latency (pointer chase)", r)
    return (f"At 1 × 4096 fp16, step 05 needs {_n('05_fp16_half2_cub')} round trips per pass and step 06 "
            f"{_n('06_fp16_uint4')}; measured, {t05:.1f} µs against {t06:.1f} µs ({t05 / t06:.2f}×), or "
            f"{per_rt:.2f} µs per extra round trip ({results.source(r)}), "
            + (f"{per_rt * 1e3 / dram:.1f}× lab 00's DRAM latency of {dram:.0f} ns on the same device: each round "
               "trip of a pass costs a latency, and the kernel makes two passes with a block reduction after each. "
               if dram == dram else "(lab 00 has no recorded latency for this device to set it against). ") +
            "Neither kernel is near any bandwidth limit, and both pay one launch; in the model the difference "
            "is how many bytes each thread keeps in flight. But steps 05 and 06 differ in five things, and the "
            "model covers two of them (the width and the unrolled loop): the ablations, timed alone, say how "
            "much each buys at this row. " + results.compare_text(a, "06_fp16_uint4", "06_ablate_half2", one16)
            + " (the width alone); " + results.compare_text(a, "06_fp16_uint4", "06_ablate_runtime_stride", one16)
            + " (the loop alone); " + results.compare_text(a, "06_fp16_uint4", "06_ablate_cub", one16)
            + f" (the reduction alone). In fp32, steps 01 and 02 differ in loads in flight (1 vs 4 per thread) "
            f"and three other changes: {_t('01_f32_cub', 'float32'):.1f} against {_t('02_f32_shfl', 'float32'):.1f} "
            "µs; the ablation section splits them too.")


def say_round_trips(res, abl, rt) -> None:
    """round_trips_said for the device on screen (its timings res and ablations abl; the table rt)."""
    results.each_device(res, lambda r, a: round_trips_said(r, a, rt), abl)


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


def say_orin_boards() -> None:
    """The seed's device: the AGX Orin's SMs and peak, and the smaller boards' (kernellab.device's tables)."""
    results.say(f"The seed (docs/sources.md, seed 003) measured on a Jetson Orin (sm_87) with the SM count of an AGX "
                f"Orin: {ORIN_SMS['agx']} SMs and a peak of {ORIN_PEAK_GBPS['agx']:g} GB/s (the board tables in "
                f"`kernellab.device`); the smaller Orin boards have {min(ORIN_SMS.values())} SMs and "
                f"{min(ORIN_PEAK_GBPS.values()):g}–{sorted(ORIN_PEAK_GBPS.values())[-2]:g} GB/s.")


def width_said(part, ab) -> str:
    """One device's timings and ablations: steps 05 → 06 and the width alone."""
    return ("Steps 05 → 06 (five changes; the seed measured 2.13× for one row and credits the load width): "
            + results.summary(part, "06_fp16_uint4", "05_fp16_half2_cub", prov=False) + " The width alone "
            "(`06_ablate_half2`, step 06 with half2 accesses): "
            + (results.summary(ab, "06_fp16_uint4", "06_ablate_half2", prov=False) if len(ab) else
               "no ablation recorded on this device.")
            + f" The ablation section gives the other four changes alone ({results.source(part)}).")


def ldg_said(part) -> str:
    """`__ldg` alone and `__restrict__` alone, and at which shapes an explicit `__ldg` is beyond the noise."""
    cs = results.cases(part, "07_fp16_restrict_no_ldg")
    ldg = [results.ratio_band(part, "06_fp16_uint4", "07_fp16_restrict_no_ldg", c) for c in cs]
    apart = [f"`{c}`" for c, m in zip(cs, ldg) if m.ok and not results.within_noise(m)]
    return ("`__ldg` alone (step 06 against `07_fp16_restrict_no_ldg`): "
            + results.summary(part, "06_fp16_uint4", "07_fp16_restrict_no_ldg", prov=False)
            + " `__restrict__` alone (`07_fp16_restrict_no_ldg` against `07_fp16_uint4_no_ldg`): "
            + results.summary(part, "07_fp16_restrict_no_ldg", "07_fp16_uint4_no_ldg", prov=False)
            + " With `__restrict__` the compiler already chose the read-only path itself (the PTX counts above), "
            + ("so an explicit `__ldg` changes nothing measurable at any recorded shape" if all(
               results.within_noise(m) for m in ldg if m.ok) else
               f"yet an explicit `__ldg` changes the time beyond the noise at {', '.join(apart)}: the same load path "
               "in the PTX counts does not give the same time there")
            + f" ({results.source(part)}).")


def say_width_ldg(res, abl) -> None:
    """width_said (with the ablations abl) and ldg_said for the device on screen."""
    results.each_device(res, width_said, abl)
    results.each_device(res, ldg_said)
