# %% [markdown]
# # Lab 02: RMSNorm, before and after
#
# RMSNorm rescales each token's hidden vector to unit root-mean-square, then applies a learned
# per-channel weight:
#
# $$y_i = \frac{x_i}{\sqrt{\frac{1}{C}\sum_j x_j^2 + \varepsilon}}\; w_i$$
#
# Qwen3-8B runs it over the hidden vector 73 times per generated token: before attention and
# before the FFN in each of 36 layers, plus once at the end. Each layer also normalises every
# head of q and k (Qwen3's `q_norm` and `k_norm`, over 128-wide head vectors): 72 more RMSNorm
# calls, not counted in the 73. It does ~3 FLOP per element and moves every byte once, so
# it is **memory-bound**. The lab follows the RMSNorm report ([seed 003](../docs/sources.md#003)), which rewrote six
# kernels of an Orin inference engine. Each kernel comes in its "before" form and its "after"
# form, and the report's claims are checked against the GPU the results come from (yours live, or the recorded one):
#
# | step | kernel (seed name) | data path | what changes |
# |---|---|---|---|
# | 01 | `row_rmsnorm_f32` before | fp32 x, fp32 w | `cub::BlockReduce`, plain pointers |
# | 02 | `row_rmsnorm_f32` after | fp32 x, fp32 w | warp shuffles, `__restrict__`, unroll, `__ldg` |
# | 03 | `row_rmsnorm_f32_fp16w` before | fp32 x, fp16 w | weight as 4 scalar 16-bit loads |
# | 04 | `row_rmsnorm_f32_fp16w` after | fp32 x, fp16 w | weight as one 64-bit `uint2`, plus step 02's four changes |
# | 05 | `row_rmsnorm_pure_fp16` before | fp16 x, fp16 w | `half2` loads (4 bytes) |
# | 06 | `row_rmsnorm_pure_fp16` after | fp16 x, fp16 w | `uint4` loads (16 bytes), plus step 02's four changes |
# | 07 | step 06 without `__ldg`, then without `__restrict__` | fp16 | measures each claim alone |
# | 08 | beyond the seed: one pass | fp32 or fp16 | the row read once, kept in registers |
# | 09 | beyond the seed: fused residual add | fp32 or fp16 | `h = x + r; y = rmsnorm(h)` in one launch |
#
# Steps 02, 04 and 06 each make several changes at once; the ablation section times each change
# alone (`rmsnorm.ABLATION`) before the lab credits any of them.
#
# The seed's single-row kernels (decode, grid 1) and its `_dim` kernels (prefill, one block per
# row) share one body here: a 1-D `x` of shape `(hidden,)` launches one block, a 2-D `x` of
# shape `(rows, hidden)` launches `rows` blocks.

# %% [markdown]
# **In this lab you will** follow a real engine's RMSNorm rewrite step by step, test each of
# its claims (CUB vs warp shuffles, `half2` vs `uint4`, `__ldg`) on your GPU, see why one row
# (decode) is launch-bound while 8192 rows (prefill) are bandwidth-bound, go one step past the
# report (read the row once, fuse the residual add) and write the fused kernel yourself.
#
# **Prerequisites:** labs 00 and 01 (roofs, warp shuffles, 16-byte loads).
# **Expected time:** 75 minutes. Source: the RMSNorm report, summarised in
# [docs/sources.md](../docs/sources.md#003).

# %%
import numpy as np
import pandas as pd

import kernellab as kl
from kernellab.core import bench, build, plot, results
from kernellab import rmsnorm, rmsnorm_report as report
from kernellab.core.ncu import ncu
from kernellab.core.check import variants as check_variants
from kernellab.core.device import ORIN_PEAK_GBPS, ORIN_SMS

kl.banner()

# %% [markdown]
# ## The reference, and what it does with hostile rows
# `rmsnorm.reference` computes in float64 with ε = 10⁻⁶ (Qwen's `rms_norm_eps`). Its semantics,
# which every kernel below must match:
# * an all-zero row gives exactly 0: ε keeps $1/\sqrt{0 + \varepsilon}$ finite, and 0 × anything is 0;
# * a NaN anywhere makes the whole row NaN (it poisons the sum of squares);
# * a ±inf makes the mean inf, so the scale is 0: finite elements give 0 and the inf itself gives
#   inf × 0 = NaN;
# * the sum of squares is kept in fp32 even for fp16 data: 65504² overflows fp16.

# %%
x, w = rmsnorm.make_input((5, 8), "float16", "hostile")
with np.printoptions(precision=3, linewidth=110):
    print("x (fp16, hostile rows):\n", x)
    print("reference:\n", rmsnorm.reference(x, w))

# %% [markdown]
# ## Step 01: the seed's starting point
# fp32 in and out, `float4` loads already, and a `cub::BlockReduce<float, 128>` for the sum of
# squares, followed by a broadcast through shared memory. The row is read twice: once for the
# sum, once to scale it (that second read mostly hits L1). Note the `vec_ok` guard: the seed's
# `_dim` kernel issued `float4` loads from every row start, which is a misaligned-address fault
# (and a dead CUDA context) as soon as the hidden size is not a multiple of 4. Here the launcher
# checks the alignment and the kernel falls back to scalar loads.

# %%
build.show("rmsnorm", "01_f32_cub")

# %%
check_variants(rmsnorm, ["01_f32_cub"])

# %% [markdown]
# ## Step 02: warp shuffles, `__restrict__`, unrolling, `__ldg`
# The seed's four general changes: a warp-shuffle reduction (16 bytes of shared memory for the
# four warp partials); `__restrict__`, so the compiler may reorder loads; a compile-time stride
# with `#pragma unroll`, so several `float4` loads are in flight per thread; and `__ldg` for
# the weight, which every row rereads. The seed credits "the reduction" with the gain; four
# changes in one step cannot say which one earned it, so the ablation section below undoes
# each one alone (`rmsnorm.ABLATION`: step 02's body with one switch off). The compile-time stride
# and its `#pragma unroll 4` are timed as one change; the cell after the kernel builds the file
# without the pragma and compares the instructions, step by step: where they are the same, the
# compiler unrolls by itself once the stride is known, and the stride alone is what the timing sees.
# Where they differ, the pragma is a change of its own: `06_ablate_runtime_stride` undoes it
# together with the stride.

# %%
build.show("rmsnorm", "02_f32_shfl")
print("\n".join(build.ptx("rmsnorm", "02_f32_shfl", grep=r"shfl\.sync")[:3]))

# %%
pd.Series({st: rmsnorm.unroll_pragma_changes(st) for st in ("02_f32_shfl", "04_f32_fp16w_uint2", "06_fp16_uint4")},
          name="instructions change without `#pragma unroll 4` (-DRMS_NO_UNROLL_PRAGMA, sm_90)")

# %%
check_variants(rmsnorm, ["02_f32_shfl"])

# %% [markdown]
# ### Claim check from the compiler: shared memory and registers
# The report says the shuffle cut shared memory from "~512 bytes of TempStorage" to 16 bytes,
# and registers went from 20 to 40 "with occupancy unaffected". ptxas tells us what this CUB
# really reserves, and the occupancy calculation tells us whether 40 registers cost anything.
# (CUB's default `BLOCK_REDUCE_WARP_REDUCTIONS` needs one float per warp plus a little bookkeeping.)

# %%
info = build.ptxas_info("rmsnorm")
info[info.kernel.isin(["rmsnorm_01_f32_cub", "rmsnorm_02_f32_shfl"])]

# %%
report.say_cub_smem(info)

# %% [markdown]
# Whether the extra registers leave occupancy "unaffected" is arithmetic: registers per thread ×
# 128 threads per block, against the SM's 65,536 registers, its thread limit and its block limit.
# The table does it for both archs from the ptxas numbers above (and, on a GPU, with the
# occupancy API):

# %%
pd.concat([build.occupancy("rmsnorm", k, threads=128) for k in ("01_f32_cub", "02_f32_shfl")])

# %% [markdown]
# ## Decode vs prefill: one row is one block is one SM
# During decode, each RMSNorm sees one token: one row of 4096, one block of 128 threads, **one
# SM**; every other SM sits idle. The row is a few KB (computed below), which the GPU's DRAM
# could stream in a fraction of a microsecond. What sets the time is **latency × bytes in
# flight** (Little's law, lab 00): one block can only ask for as many bytes as its threads have
# loads outstanding, and each batch of loads costs a full DRAM round trip. A thread whose loop
# keeps one 4-byte load in flight needs many round trips for its share of the row; one that keeps
# four 16-byte loads in flight needs one. The timing section puts that count beside the measured
# times. Prefill has hundreds of rows: every SM has work, and bandwidth matters.

# %%
report.say_bytes_per_call()

# %% [markdown]
# ## Steps 03–04: fp32 activations with an fp16 weight
# The AWQ models keep activations in fp32 and the RMSNorm weight in fp16. Before, each `float4`
# of `x` paired with four scalar 16-bit weight loads; after, one 64-bit `uint2` brings all four
# (`ld.global.nc.v2.u32` in the PTX). That is not the only change: step 04 also makes step 02's
# four (warp shuffles, the compile-time stride with unrolling, `__ldg`, `__restrict__`). Its body
# has a switch for each of the five, and `04_ablate_scalar_w` is step 04 with only the weight's
# width undone; the ablation section times it and the other four alone.

# %%
build.show("rmsnorm", "03_f32_fp16w_cub")
build.show("rmsnorm", "04_f32_fp16w_uint2")
print("step 03 weight loads:", build.ptx("rmsnorm", "03_f32_fp16w_cub", grep=r"ld\.global\.u16")[:2])
print("step 04 weight loads:", build.ptx("rmsnorm", "04_f32_fp16w_uint2", grep=r"ld\.global\.nc\.v2")[:2])

# %%
build.show("rmsnorm", "04_ablate_scalar_w")
check_variants(rmsnorm, ["03_f32_fp16w_cub", "04_f32_fp16w_uint2"])
check_variants(rmsnorm.ABLATION, [n for n in rmsnorm.ABLATION_STEPS if n.startswith("04_ablate")])

# %% [markdown]
# ## Steps 05–06: pure fp16, from `half2` to `uint4`
# The seed's largest win, which it credits to the load width: fp16 data read 2 halves (4 bytes)
# per load instruction before, and 8 halves (16 bytes, one `uint4`) after. Step 06 changes four
# more things, the same four as step 02 (warp shuffles, the compile-time stride with unrolling,
# `__ldg`, `__restrict__`), so the pair alone cannot say what the width is worth. Step 06's body
# has a switch for each change: `06_ablate_half2` is step 06 with only the width undone
# (`06_ablate_cub` and `06_ablate_runtime_stride` undo the reduction and the loop; step 07 below
# undoes `__ldg` and `__restrict__`). The ablation section times each alone.

# %%
build.show("rmsnorm", "05_fp16_half2_cub")
build.show("rmsnorm", "06_fp16_uint4")

# %%
for step in ("05_fp16_half2_cub", "06_fp16_uint4"):
    loads = build.ptx("rmsnorm", step, grep=r"ld\.global")
    print(f"{step}: {len(loads)} global loads in the PTX, e.g. {loads[0]}")

# %%
build.show("rmsnorm", "06_ablate_half2")
check_variants(rmsnorm, ["05_fp16_half2_cub", "06_fp16_uint4"])
check_variants(rmsnorm.ABLATION, [n for n in rmsnorm.ABLATION_STEPS if n.startswith("06_ablate")])

# %% [markdown]
# ## Step 07: what are `__ldg` and `__restrict__` worth?
# The report credits `__ldg` with keeping the shared weight out of L1. One change at a time:
# `07_fp16_restrict_no_ldg` is step 06 without the `__ldg` calls (`__restrict__` kept), and
# `07_fp16_uint4_no_ldg` drops `__restrict__` as well. The PTX shows what each did: with
# `const __restrict__` pointers the compiler may choose the read-only path (`ld.global.nc`) by
# itself; with plain pointers it cannot, and every load is `ld.global`.

# %%
build.show("rmsnorm", "07_fp16_restrict_no_ldg")
build.show("rmsnorm", "07_fp16_uint4_no_ldg")
for step in ("06_fp16_uint4", "07_fp16_restrict_no_ldg", "07_fp16_uint4_no_ldg"):
    loads = build.ptx("rmsnorm", step, grep=r"ld\.global")
    print(f"{step:<24}: {sum('.nc' in l for l in loads)} of {len(loads)} global loads use the read-only path (.nc)")

# %%
check_variants(rmsnorm, ["07_fp16_restrict_no_ldg", "07_fp16_uint4_no_ldg"])

# %% [markdown]
# ## Step 08 (beyond the seed): read the row once
# Steps 02–07 read `x` twice and count on L1 to serve the second read. At prefill sizes many
# blocks share an SM's L1 and some second reads miss. Step 08 keeps each thread's slice of the
# row in registers as raw 16-byte words, so `x` crosses the memory bus exactly once. It also loads
# the weight before the reduction, so the weight's latency overlaps the barrier. The launcher
# sizes the block to the row: a single decode row gets one 16-byte load per thread (short
# dependency chains); a prefill batch gets 4 per thread in smaller blocks (more blocks per SM).

# %%
build.show("rmsnorm", "08_f32_onepass")

# %%
check_variants(rmsnorm, ["08_onepass"])

# %% [markdown]
# ## What the compiler made of each step
# Registers, spills and shared memory, for Orin (sm_87) and Hopper (sm_90):

# %%
build.ptxas_info("rmsnorm")

# %% [markdown]
# ## Timing: the seed's batches at hidden 4096, three data paths
# Every variant and baseline runs on the same inputs in the same process, with the L2 flushed
# before each repetition. GB/s counts one read of `x`, one write of `y` and one read of the
# weight. The baselines are `torch.nn.functional.rms_norm`, a CuPy composite
# (`x * rsqrt(mean(x²) + eps) * w`, several kernels), and a floor: a device-to-device memcpy of
# `x` into `y`, the same bytes with no arithmetic at all. The memcpy does not read the weight,
# so its GB/s counts only x and y (`rmsnorm.memcpy_counts_its_own_bytes`).

# %%
res = rmsnorm.memcpy_counts_its_own_bytes(bench.compare(rmsnorm, rmsnorm.RECORD_CASES))
abl = bench.compare(rmsnorm.ABLATION, rmsnorm.ABLATION.record_cases)   # the ablations, in their own run
results.table(res)

# %% [markdown]
# Host time, what the CPU pays to issue one call (not GPU time), against `torch`'s RMSNorm:

# %%
results.each_device(res, lambda part: results.host_text(part, rmsnorm.RMSNORM.default["float16"], "torch"))

# %%
for path in rmsnorm.PATHS:
    plot.sweep(results.select(res, dtype=path, cols=4096), f"02_rmsnorm_batches_{path}", x="rows",
               title=f"RMSNorm {path}, hidden 4096: GB/s vs batch (rows)")

# %% [markdown]
# Small batches sit far below the roof: a handful of blocks cannot fill the GPU. Compare those
# cases in time, not GB/s:

# %%
small = results.select(res, dtype="float16", rows=[1, 4, 16, 64])
plot.bars(small, "02_rmsnorm_decode_fp16", title="RMSNorm fp16, hidden 4096, small batches", value="median_us")

# %% [markdown]
# ### One row: round trips, not launches
# For a single row, the model counts how many DRAM round trips the first pass needs: each thread
# has `loads per thread` loads to make and keeps `loads in flight per thread` of them
# outstanding (the load width and the loop's unrolling, read from the kernel; the widths are
# checked against the PTX in `tests/test_compile.py`). Beside it, the measured time.
# In the model each round trip of a pass costs one DRAM latency, and the kernel makes two passes with a
# block reduction after each; at one row a call moves only a few KiB, so the model leaves bandwidth out,
# and both steps pay one launch.
# But steps 05 and 06 differ in five things and the model covers two (the width and the unrolled
# loop): the table after the line times each alone at this row (the ablation section, at more rows).

# %%
one_rows = []
for step, v in rmsnorm.RMSNORM.variants.items():
    for path in v.dtypes:
        itemsize = np.dtype(rmsnorm.PATHS[path][0]).itemsize
        t = results.pick(res, step, "median_us", case=rmsnorm.case_key((1, 4096), path))
        one_rows.append({"step": step, "path": path, **rmsnorm.round_trips(step, 4096, itemsize), "median_us": t})
rt = pd.DataFrame(one_rows)
rt

# %%
report.say_round_trips(res, abl, rt)

# %% [markdown]
# ## The targets
# * **Bandwidth**: fp16 at 8192 × 4096 (64 MiB in, 64 MiB out), as a fraction of the copy roof.
# * **Against torch**: step 08 vs `F.rms_norm` at 1 × 4096 (decode) and 512 × 4096 (prefill).
# * **Decode**: a single row, in units of an empty kernel launch timed the same way.
# * **Every hidden size** (the issue's, at ≥ 0.90): the worst fraction of the copy roof over hidden
#   1024…16384 at 8192 rows (the section after this one shows each size), and the worst fraction of
#   the memcpy floor there (≥ 0.95): the memcpy's time over the fastest step's, judged with both bands.
#
# Far past L2 the copy roof is measured with far more traffic than this case moves, where one
# launch is noise; here one launch is a visible share (the numbers are computed below). The memcpy floor
# makes the same point from the other side: the ratio of its time to step 08's is how close step
# 08 comes to merely moving the bytes. The report states no threshold for the first four, so the
# table says "no threshold" rather than met or missed.

# %%
report.say_launch_share(res)

# %%
print(results.speedup(results.select(res, rows=8192), "08_onepass", "memcpy x -> y (floor)").round(3))
results.select(res, name="08_onepass", rows=8192)[["case", "median_us", "p10_us", "p90_us", "frac_copy"]].round(3)

# %%
results.speedup(res, "08_onepass", "torch rms_norm").round(2)

# %%
one = results.select(res, name="08_onepass", rows=1)
one = one.assign(empty_launch_us=one["device"].map({p["device"].iloc[0]: rmsnorm.launch_us(p) for p in results.devices(one)}))
one.assign(launches=one["median_us"] / one["empty_launch_us"])[
    ["case", "median_us", "empty_launch_us", "launches", "device", "source"]].round(2)

# %%
results.targets(rmsnorm.RMSNORM.targets, res)      # the hidden-size target too: res holds that sweep

# %% [markdown]
# ### Every hidden size
# Qwen models use hidden sizes from 1024 to 16384 (and the FFN's 12288 is normalised nowhere, but
# a learner's model may differ). At 8192 rows each, the fastest step per hidden size and data type,
# against the copy roof and torch: step 08 sizes its block to the row (`onepass_threads`), so the
# same kernel serves every width. The first target's "at the floor" (above) is a memcpy of the same
# bytes: a small case (8192 × 1024 fp16 is 16 MiB each way) pays the launch and the ramp too.

# %%
hid = bench.compare(rmsnorm, rmsnorm.HIDDEN_SWEEP, names=["06_fp16_uint4", "08_onepass"],
                    baselines=["torch rms_norm", "memcpy x -> y (floor)"])
rmsnorm.hidden_table(hid)

# %% [markdown]
# ## Ablation: each bundled step's changes, one at a time
# Steps 02, 04 and 06 each make several changes at once (`rmsnorm.ABLATION_PAIRS` lists them).
# Each ablation row is the "after" step with one change undone (same launcher, same inputs, same
# run); its time over the step's is what that change is worth given the others. The "before" step
# (every change undone) is in the table too. One table per data path, with the times divided by
# the "after" step's: a value below 1 means the step is faster *without* that change. The seed credits
# the reduction for 01 → 02 and the load width for 03 → 04 and 05 → 06; the lines below each table say,
# for every recorded shape, what each of those changes buys on its own and where it loses.

# %%
results.ablation(abl, [(f"{before} → {after} ({path})", path, before, after, changes)
                       for path, (before, after, changes) in rmsnorm.ABLATION_PAIRS.items()], rmsnorm.ABLATION_STEPS)

# %% [markdown]
# ## Seed claim vs measured
# Each row divides the time of the "before" kernel by the time of the "after" kernel, at the
# seed's shape (1 × 4096 unless stated), on the GPU of the record, not the seed's Orin. A
# faster GPU can change which effect matters: read the last column. The seed (docs/sources.md,
# seed 003) measured on a Jetson Orin (sm_87) with the SM count of an AGX Orin; the boards, from
# their datasheets (`kernellab.device`):

# %%
pd.DataFrame({"SMs": ORIN_SMS, "peak GB/s": ORIN_PEAK_GBPS}).rename_axis("Orin board")

# %%
claims = results.claims("02_rmsnorm", [abl, res], rmsnorm.FAMILIES)
kl.say(results.claims_summary(claims))
claims

# %% [markdown]
# The ablation section splits 05 → 06 (the width, the loop, the reduction, `__ldg`, `__restrict__`)
# at four shapes. Below, 05 → 06, `__ldg` alone and `__restrict__` alone at every recorded fp16 shape.
# Where the PTX counts of step 07 show the same `ld.global.nc` loads with and without `__ldg`, the
# compiler already chose the read-only path itself, so an explicit `__ldg` should change nothing.

# %%
results.each_device(res, report.ldg_said)

# %% [markdown]
# ## Step 09 (beyond the seed): fuse the residual add
# In a decoder layer, every RMSNorm follows a residual add: `h = x + r` (kept for the next
# residual), then `y = rmsnorm(h)`. Separately that is 3 + 2 = 5 passes over memory and 2
# launches; fused it is 4 passes (read x, read r, write h, write y) and 1 launch. So the best
# possible gain is 1.25× when bandwidth rules, and up to 2× when launches rule (decode).
# Serving engines ship this kernel (vLLM's `fused_add_rms_norm`); here it is step 08's body
# with the add in front. `h` is rounded to the data type before the sum of squares, exactly as
# the separate kernels would see it.

# %%
build.show("rmsnorm", "09_fused_add_fp16")

# %%
check_variants(rmsnorm.FUSED)

# %%
fres = bench.compare(rmsnorm.FUSED, rmsnorm.FUSED.record_cases)
results.table(fres)

# %%
plot.bars(results.select(fres, dtype="float16"), "02_fused_add_rmsnorm_fp16", value="median_us",
          title="residual add + RMSNorm, fp16, hidden 4096: separate vs fused")
results.speedup(fres, "02_fused", "01_separate").round(2)

# %% [markdown]
# ## Nsight Compute, for the seed's metrics
# The report's numbers (duration, registers, grid and block size, achieved occupancy) come
# from `ncu`. `bench.ncu` runs one variant once under Nsight Compute, where `ncu` is installed and
# profiling is allowed, and otherwise prints the command to run.

# %%
ncu(rmsnorm, "08_onepass", (8192, 4096), "float16")

# %% [markdown]
# ## Explore: from decode to prefill, with sliders
# Move the number of rows from 1 (decode: one token) to 8192 (prefill) and pick a data path:
# every step of that path and the baselines at that size. The line under the table gives the
# fastest step and its time in empty-kernel launches, computed from the rows shown (measured now,
# or recorded).

# %%
from kernellab import explore
explore.rmsnorm(rows=1, path="float16")

# %% [markdown]
# ## Progress: the fp16 ladder against the copy roof
# Each step's GB/s as a fraction of the copy roof, beside the baselines (hatched), for the
# seed's pure-fp16 path at prefill size (8192 × 4096).

# %%
plot.progress(res, "02_rmsnorm_progress", case=rmsnorm.case_key((8192, 4096), "float16"),
              title="RMSNorm fp16 8192 x 4096: the ladder")

# %% [markdown]
# ## Exercise: fuse the residual add into RMSNorm
# The stub below is a plain fp32 RMSNorm, one block per row, with a correct block reduction.
# Change it so that it also takes the residual `r`, forms `h = x + r`, writes `h`, and normalises
# `h`: one launch instead of two. The grading cell compiles it for sm_87 and sm_90, checks that
# the PTX really reads the residual and writes `h` (the `[..._param_1]` and `[..._param_3]`
# parameter loads), and on a GPU compares both outputs with NumPy and times your kernel against
# step 09's fused kernel on the same input. Until it is done it prints **NOT YET** and the lab
# goes on.

# %%
GRADE = dict(
    make_input=lambda: rmsnorm.FUSED.make_input((515, 4097), "float32"),   # x, r, w
    reference=rmsnorm.FUSED.reference,                                      # (h, y)
    grid=lambda x, r, w: (x.shape[0],), block=(256,),
    scalars=lambda x, r, w: (x.shape[1], rmsnorm.EPS),
    ptx_must_contain=["[fused_add_rmsnorm_param_1]", "[fused_add_rmsnorm_param_3]"],
    step=("step 09 (02_fused)", rmsnorm.FUSED.variants["02_fused"]),
)

# %% tags=["exercise"]
EXERCISE = r"""
#include "common.cuh"
extern "C" __global__ void fused_add_rmsnorm(const float* x, const float* r, const float* w,
                                             float* h, float* y, int C, float eps) {
    __shared__ float scratch[33];
    const float* xr = x + (size_t)blockIdx.x * C;
    float* yr = y + (size_t)blockIdx.x * C;
    TODO;   // form h = x + r, store it to h, and normalise h instead of x
    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) ss += xr[i] * xr[i];
    const float inv = rsqrtf(block_reduce_sum(ss, scratch) / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x) yr[i] = inv * xr[i] * w[i];
}
"""

# %%
kl.check.grade_exercise(EXERCISE, "fused_add_rmsnorm", **GRADE)

# %% tags=["solution"]
SOLUTION = r"""
#include "common.cuh"
extern "C" __global__ void fused_add_rmsnorm(const float* x, const float* r, const float* w,
                                             float* h, float* y, int C, float eps) {
    __shared__ float scratch[33];
    const size_t base = (size_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        const float v = x[base + i] + r[base + i];
        h[base + i] = v;                    // kept for the next residual
        ss += v * v;
    }
    const float inv = rsqrtf(block_reduce_sum(ss, scratch) / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        y[base + i] = inv * h[base + i] * w[i];   // this thread wrote h[base + i]
}
"""
kl.check.grade_exercise(SOLUTION, "fused_add_rmsnorm", strict=True, **GRADE)

# %% [markdown]
# ## What to remember
# * RMSNorm is memory-bound at prefill: count bytes, then make each load instruction move 16 of them.
# * At decode, one row is one block is one SM: in the model the time is DRAM round trips, set by the
#   bytes each thread keeps in flight (load width × loads outstanding), plus one launch. Wider loads
#   and unrolled loops cut round trips; the ablations say how much of the seed's before → after each
#   one buys on your GPU, and the reduction is timed alone as well.
# * A step that changes four or five things needs an ablation before a verdict: measure each change
#   alone (the ablation tables), then credit it.
# * Check a report's claims on your GPU, one change at a time: the claims table and the ablation
#   lines say which hold; with `__restrict__` the compiler already uses the read-only path, so what
#   an explicit `__ldg` adds is small and shape-dependent (its ablation line says where, per GPU).
# * Fusing the residual add saves a pass and a launch: up to 1.25× on bandwidth, more at decode.
