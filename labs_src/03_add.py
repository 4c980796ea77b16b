# %% [markdown]
# # Lab 03: adds, before and after
#
# The simplest kernel there is, and one of the most called: Qwen3-8B runs a residual add
# (`out = a + b`) 72 times per token. Qwen2 adds a bias to every Q, K and V projection, and
# Qwen3-VL's DeepStack adds vision features into a slice of the hidden states. An add does one
# FLOP per 12 bytes (fp32): it can only ever be as fast as memory. How fast memory is for a
# kernel depends on how many bytes it keeps **in flight**: by Little's law (lab 00), bandwidth =
# bytes in flight ÷ latency, so a thread that asks for 2 bytes at a time gets a fraction of what
# one asking for 16 gets. Every step here changes the bytes in flight per thread (the load width)
# or the instructions per byte.
#
# The add report ([seed 004](../docs/sources.md#004)) rewrote four kernels; each comes in its before and after form:
#
# | step | kernel (seed name) | what changes |
# |---|---|---|
# | 01 → 02 | `add_kernel_cu_fp32` | 1 float per thread, block 512 → `float4`, block 256 |
# | 03 → 04 | `add_kernel_cu_fp16_impl` | `half2` (4 bytes) → 8 halves (16 bytes) |
# | 05 → 06 → 07 | `broadcast_add_bias_fp16_kernel` | `idx % cols` on a 1-D grid → 2-D grid → 2-D + 8-wide |
# | 08 → 04 | `add_vec_fp16_kernel` | 1 half per thread → 8-wide (its after-form is step 04's code) |
# | 09 | DeepStack `add_cu` | in-place add into a row slice, with a validating launcher |
#
# Every vectorised kernel has a scalar tail, and its launcher checks alignment: a size that
# is not a multiple of the vector width, or a base that is not 16-byte aligned, still works.

# %% [markdown]
# **In this lab you will** take the simplest kernel there is to the copy roof: 16-byte loads
# with a scalar tail and an alignment check, the cost of an integer modulo in a broadcast,
# an in-place slice add with its bounds checked before launch, and which of a report's changes
# really produced its win. You will vectorise an add yourself.
#
# **Prerequisites:** lab 00 (the copy roof). **Expected time:** 45 minutes.
# Source: the add report, summarised in [docs/sources.md](../docs/sources.md#004).

# %%
import numpy as np

import kernellab as kl
from kernellab.core import bench, build, plot, results
from kernellab import add, add_report as report
from kernellab.core.ncu import ncu
from kernellab.core.check import variants as check_variants

kl.banner()

# %% [markdown]
# ## The reference and hostile values
# `add.reference` adds in float64 and rounds once to the input type, which is exactly what one
# fp32 or fp16 add instruction does. Hostile inputs mix ±inf (inf + -inf = NaN), NaN, the
# largest finite value (65504 + 65504 = inf in fp16) and the smallest subnormal. CuPy compiles
# with `-ftz=true`, so fp32 subnormals flush to zero: the checks' absolute tolerance (1e-30)
# allows for that, fp16 keeps its subnormals.

# %%
a, b = add.make_input((14,), "float16", "hostile")
with np.printoptions(precision=4, linewidth=110):
    print("a        :", a)
    print("b        :", b)
    print("reference:", add.reference(a, b))

# %% [markdown]
# ## Steps 01–02: fp32, one float per thread → `float4`
# Before: each thread computes an index, checks it, and issues three 4-byte memory instructions
# for 12 bytes. After: one `float4` per operand, a quarter of the memory instructions and of the
# threads for the same bytes. The tail (the last `n % 4` elements) and any misaligned call go
# through the scalar branch.

# %%
build.show("add", "01_f32_scalar")
build.show("add", "02_f32_float4")

# %% [markdown]
# ### Same bytes, fewer instructions
# The PTX makes the difference visible: step 01 loads with `ld.global.f32`, step 02 with
# `ld.global.nc.v4.f32`. Per 16 bytes of each operand, step 01 needs 4 load instructions and
# step 02 needs 1.

# %%
for step in ("01_f32_scalar", "02_f32_float4"):
    print(step, build.ptx("add", step, grep=r"(ld|st)\.global"))

# %%
check_variants(add, ["01_f32_scalar", "02_f32_float4"])

# %% [markdown]
# ### Grid size and the last wave
# The seed counts blocks: 4096 → 2048 for fp32 at 2M elements. What matters is how those blocks
# fill the GPU: a **wave** is one block on every slot of every SM, and the last wave of a launch
# may be partly empty (the tail effect). The table counts waves for a 16-SM Orin (sm_87) and for
# the GPU of the results on screen (its SM count from the device record), and how full the last
# one is. Blocks per SM come from ptxas and the per-SM limits. A launch of about one wave or less
# leaves the tail effect and the ramp-up as a large share of its time.

# %%
import pandas as pd

N = 4096 * 512
here = kl.device.facts()        # the GPU of the results on screen (live, or the recorded device)
from kernellab.core.device import ORIN_SMS   # the Orin boards' SM counts (datasheets); the seed's board: an AGX

rows = []
for step, block, per in [("01_f32_scalar", 512, 1), ("02_f32_float4", 256, 4), ("03_fp16_half2", 256, 2),
                         ("04_fp16_vec8", 256, 8), ("08_vec_fp16_scalar", 256, 1)]:
    occ = build.occupancy("add", step, threads=block)
    for arch, sms in [("sm_87", ORIN_SMS["agx"])] + [(a, here["sms"]) for a in [here.get("arch")] if a in build.ARCHS]:
        per_sm = int(occ[(occ.arch == arch) & (occ.source == "ptxas -v")]["blocks/SM"].iloc[0])
        rows.append({"step": step, "GPU": f"{arch}, {sms} SMs", **add.waves(N, block, per, sms, per_sm)})
pd.DataFrame(rows)

# %% [markdown]
# ## Steps 03–04 and 08: fp16
# `half2` moves 4 bytes per load; `uint4` moves 16 (8 halves, reinterpreted in registers as 4
# `half2` for 4 `__hadd2`). Step 08 is the seed's `add_vec_fp16_kernel` before: one half
# (2 bytes) per thread. Its after-form is the same code as step 04.

# %%
build.show("add", "03_fp16_half2")
build.show("add", "04_fp16_vec8")
build.show("add", "08_vec_fp16_scalar")

# %%
check_variants(add, ["03_fp16_half2", "04_fp16_vec8", "08_vec_fp16_scalar"])

# %% [markdown]
# ## Timing: sizes from one token to 64M elements
# Every variant and baseline (`cupy.add` and `torch.add`, both writing into a preallocated
# output) runs on the same inputs in the same process. GB/s counts two reads and one write.
# Small sizes are a few waves of blocks or less: the L2 is flushed before every repetition, so the
# data still comes from DRAM, and the time is a few DRAM round trips plus one launch, not
# bandwidth (the bytes-in-flight table below).

# %%
res = bench.compare(add, add.RECORD_CASES)
results.table(res)

# %%
for dt in ("float32", "float16"):
    plot.sweep(results.select(res, dtype=dt), f"03_add_sweep_{dt}", title=f"element-wise add, {dt}: GB/s vs elements")

# %% [markdown]
# At 64M elements (256 MiB per fp32 operand, far past L2) the targets are ≥ 0.95 of the copy roof
# and ≥ 0.97× `torch.add`:

# %%
big = results.select(res, cols=2 ** 26)
results.targets(add.ADD.targets, big)

# %% [markdown]
# Host time is another figure: what the CPU pays to issue one call, measured with the GPU idle
# (`host_us`), beside the same launches made as bare CuPy kernel calls (`bare_host_us`).

# %%
results.each_device(big, lambda part: results.host_text(part, "04_fp16_vec8", "torch.add"))

# %% [markdown]
# ### Steps 03 → 04 and 08 → 04: the width, or the qualifiers?
# Step 04 changes two things from step 03 (and from step 08): the load width, and `__restrict__` +
# `__ldg`. `04_ablate_plain` is step 04 with plain pointers and loads, so each is timed alone, at
# every size of the sweep above.

# %%
build.show("add", "04_ablate_plain")

# %%
results.each_device(res, report.width_said)

# %% [markdown]
# ### Bytes in flight per thread, and what they buy
# Every step reads its operands with one load per operand per thread; only the width differs.
# With the blocks that fit on an SM (from ptxas), that is the bytes in flight per SM. Beside it,
# the measured fraction of the copy roof at 64M elements, where every byte comes from DRAM.
# Then, from lab 00's record of the same GPU, what its measured read sweep reached with those bytes
# in flight per thread, and what Little's law predicts with the idle (pointer-chase) latency. Same
# bytes; where the `threads per SM` column is the same for the fp16 steps, what differs is how many bytes
# each thread has asked for when it waits (and, with it, the load instructions per byte). Where Little's
# law with the idle latency predicts more than the sweep measured (the line under the table says), the
# reason is lab 00's: under load the latency is longer than the idle pointer chase.

# %%
fund = kl.device.load_recorded("measuring")   # lab 00's records: the bytes-in-flight sweep and the DRAM latency
inflight = report.inflight_table(big, fund)
inflight.round(3)

# %%
report.say_inflight(big, inflight)

# %% [markdown]
# ## The broadcast bias add: is the modulo really the cost?
# `out[r, c] = m[r, c] + bias[c]`. The seed's before-kernel runs a 1-D grid and recovers the
# column with `idx % cols`; its after-kernel uses a 2-D grid (`blockIdx.y` is the row) **and**
# 8-wide loads, and credits the win to removing the modulo. Step 06 separates the two: a 2-D
# grid with scalar loads. It also adds `__restrict__` and `__ldg`; `06_ablate_plain` is step 06
# without them, so the grid, the qualifiers and the width are each timed alone. In the PTX, step 05 has a `rem.s32` per element (ptxas expands it into
# ~20 integer instructions: there is no hardware divide); steps 06 and 07 have none.

# %%
build.show("add", "05_bias_mod")
build.show("add", "06_bias_2d")
build.show("add", "07_bias_2d_vec8")
for step in ("05_bias_mod", "06_bias_2d", "07_bias_2d_vec8"):
    print(step, "remainder/divide instructions in the PTX:", build.ptx("add", step, grep=r"rem\.|div\."))

# %%
check_variants(add.BIAS)

# %%
bres = bench.compare(add.BIAS, add.BIAS.record_cases)
results.each_device(bres, lambda part: results.host_text(part, add.BIAS.default["float16"], "torch"))
results.table(bres)

# %% [markdown]
# Across column counts at a fixed 2²⁵ elements: the modulo's cost is the 05 → `06_ablate_plain`
# ratio, the qualifiers' is `06_ablate_plain` → 06, the vector width's is 06 → 07. Column counts that are not a multiple of 8 (4099) cannot use
# aligned 16-byte row starts, so step 07 falls back to coalesced scalars there.

# %%
sweep = results.select(bres, kind="variant", case=[add.BIAS.case_key(s, "float16") for s in add.BIAS_SWEEP])
plot.sweep(sweep, "03_bias_modulo_sweep", title="broadcast bias add, fp16, 2^25 elements: GB/s vs cols")
report.bias_table(sweep)

# %% [markdown]
# On a GPU with a different balance of integer throughput to bandwidth (an Orin), the ratios can
# differ: read them there before crediting either change.

# %%
results.each_device(sweep, report.bias_said)

# %% [markdown]
# ## DeepStack: add into a slice of rows, in place
# Qwen3-VL adds vision features into the hidden states of the visual tokens only:
# `x[row0 : row0 + k, :] += feats`. The seed does it on raw pointers. Here the launcher
# validates the slice before anything runs (rows inside the tensor, matching columns and dtype,
# no overlap between source and destination), then launches on the slice's base. The kernel
# reads and writes `x` through one pointer, so `x` gets neither `__restrict__` nor `__ldg`.

# %%
build.show("add", "09_rows_inplace")

# %%
rng = np.random.default_rng(0)
hidden = rng.standard_normal((24, 4096)).astype(np.float16)
feats = rng.standard_normal((6, 4096)).astype(np.float16)
want = add.rows_reference(hidden, feats, 9)
print("NumPy: rows changed:", np.flatnonzero((want != hidden).any(axis=1)).tolist())


def deepstack_add():
    import cupy
    h = cupy.asarray(hidden)
    add.add_into_rows(h, cupy.asarray(feats), 9)
    kl.check.check(h, want, name="add_into_rows rows 9..14")
    for bad in [(h, cupy.asarray(feats), 20), (h, h[0:6], 9)]:
        try:
            add.add_into_rows(*bad)
        except ValueError as e:
            print("ValueError before launch:", e)


kl.device.live_only("adds feats into rows 9..14 in place, checks the whole tensor against NumPy, and shows "
                    "the ValueErrors for a slice past the end and an overlapping source.", deepstack_add)

# %% [markdown]
# ## Nsight Compute, for the seed's metrics
# The report's tables (DRAM/L2 throughput, grid size, achieved occupancy) come from `ncu`.
# `bench.ncu` profiles one launch of one variant in a child process, where `ncu` is installed and
# profiling is allowed, and otherwise prints the command to run yourself.

# %%
ncu(add.BIAS, "05_bias_mod", (512, 4096), "float16")

# %%
ncu(add.BIAS, "07_bias_2d_vec8", (512, 4096), "float16")

# %% [markdown]
# ## Seed claim vs measured
# Each row divides the time of the slower kernel by the faster one, at the seed's sizes (2M
# elements; 512 × 4096 for the bias) and at 64M elements. The seed's Orin claims are about
# ncu throughput percentages; the ratio of times is what they imply for a user.

# %%
claims = results.claims("03_add", [res, bres], add.FAMILIES)
kl.say(results.claims_summary(claims))
claims

# %% [markdown]
# ## Progress: both ladders against the copy roof
# Each step's GB/s as a fraction of the copy roof, beside the baselines (hatched): the fp16 add
# at 64M elements, and the broadcast bias add at 16384 × 4096 fp16.

# %%
plot.progress(res, "03_add_progress", case=add.case_key((2 ** 26,), "float16"),
              title="add fp16, 64M elements: the ladder")
plot.progress(bres, "03_bias_progress", case=add.BIAS.case_key((16384, 4096), "float16"),
              title="bias add fp16 16384 x 4096: the ladder")

# %% [markdown]
# ## Other GPUs: every record side by side
# The sentences above speak of one GPU: this one when it is live, else the reference record. Every
# other record (and this GPU, when live) is set side by side here, case by case: the fastest step on
# the GPU on screen, its time and fraction of the roof on each GPU, and the fastest library call's time.

# %%
results.device_table(res, roof="copy")

# %% [markdown]
# ## Exercise: vectorise the fp32 add
# The stub is step 01: one float per thread. Make each thread handle 4 floats with one `float4`
# load per operand and one `float4` store, and keep it correct for any `n`: the last thread's
# partial group of 4 needs a scalar tail. The grading cell compiles it for sm_87 and sm_90,
# requires a 128-bit load in the PTX, and on a GPU checks n = 1,000,003 against NumPy (a
# size with a tail) and times your kernel against step 02 on the same input. The grid is one
# thread per 4 elements, so the stub covers only a quarter of the array and fails the check on
# purpose: it prints **NOT YET** and the lab goes on.

# %%
GRADE = dict(
    make_input=lambda: add.make_input((1_000_003,), "float32"),      # a, b
    reference=add.reference,
    grid=lambda a, b: (-(-a.size // (256 * 4)),), block=(256,),      # one thread per 4 elements
    scalars=lambda a, b: (a.size,),
    ptx_must_contain=[("ld.global.nc.v4.f32", "ld.global.v4.f32"), "st.global.v4.f32"],   # float4 in and out
    step=("step 02_f32_float4", add.ADD.variants["02_f32_float4"]),
)

# %% tags=["exercise"]
EXERCISE = r"""
extern "C" __global__ void add_f32_vec4(const float* a, const float* b, float* out, int n) {
    TODO;   // 4 elements per thread: one float4 load per operand, one float4 store, a scalar tail
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""

# %%
kl.check.grade_exercise(EXERCISE, "add_f32_vec4", **GRADE)

# %% tags=["solution"]
SOLUTION = r"""
extern "C" __global__ void add_f32_vec4(const float* __restrict__ a, const float* __restrict__ b,
                                        float* __restrict__ out, int n) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(a + i));
        const float4 y = __ldg(reinterpret_cast<const float4*>(b + i));
        *reinterpret_cast<float4*>(out + i) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    } else {
        for (int j = i; j < n; ++j) out[j] = a[j] + b[j];   // the tail: fewer than 4 left
    }
}
"""
kl.check.grade_exercise(SOLUTION, "add_f32_vec4", strict=True, **GRADE)

# %% [markdown]
# ## What to remember
# * An add is pure memory traffic, and memory delivers bytes in flight ÷ latency (Little's law):
#   the levers are bytes in flight per thread (16-byte loads) and instructions per byte (no
#   per-element divide).
# * A measured ratio beats a profiler percentage: check which change produced the win (vector
#   width or modulo) before you credit it.
# * Vector paths need a scalar tail and an alignment check; a slice add needs its bounds checked
#   before launch. A fault inside a kernel kills the whole CUDA context.
# * Big launches reach the copy roof; small ones pay a few DRAM round trips and a launch,
#   whatever the kernel: compare them in µs (and as a CUDA graph, lab 00), not in GB/s.
