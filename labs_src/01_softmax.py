# %% [markdown]
# # Lab 01: the softmax ladder
#
# Softmax turns a row of scores into probabilities: $y_i = e^{x_i} / \sum_j e^{x_j}$.
# It sits in every attention layer and at the end of every LLM (a 151,936-wide logits row
# for Qwen). It does ~5 FLOP per element and moves 8 bytes (fp32 in + out): it is
# **memory-bound**, so the goal is simple to state: read the row once, write it once, at
# the copy roof from lab 00.
#
# We climb the tutorial's ladder (seed 001), one kernel per step, each checked against
# NumPy on awkward shapes and hostile values, then timed against `torch.softmax`,
# `cupyx.scipy.special.softmax` and a CuPy composite, in the same run.
#
# | step | kernel | passes over memory | what it fixes |
# |---|---|---|---|
# | 01 | naive | 2 reads + 1 write, one thread sums | nothing: overflows at x ≥ 89 |
# | 02 | safe, shared-memory tree | 3 reads + 1 write | overflow; parallel reduction |
# | 03 | warp shuffle (+ warp per row) | 3 reads + 1 write | barriers, idle lanes |
# | 04 | online (m, d) | 2 reads + 1 write | one statistics pass instead of two |
# | 05 | online + float4, row in registers | 1 read + 1 write | load instructions, re-reads |
# | 06 | fp16 in/out, 8 halves per load | 1 read + 1 write, half the bytes | bytes |

# %% [markdown]
# **In this lab you will** make a memory-bound kernel correct (overflow, NaN, ±inf, empty rows)
# before fast; replace shared-memory trees with warp shuffles; derive and use online softmax;
# read 16 bytes per load with a scalar fallback; measure each step against the copy roof and
# torch; add a variant of your own to the ladder; and write a warp reduction.
#
# **Prerequisites:** lab 00 (the roofs, how `bench` times). **Expected time:** 90 minutes.
# Source: the softmax tutorial, summarised in [docs/sources.md](../docs/sources.md#001).

# %%
import numpy as np

import kernellab as kl
from kernellab import bench, build, plot, softmax
from kernellab.check import variants as check_variants, run_variant

kl.banner()

# %% [markdown]
# ## The reference, and what "correct" means on hostile rows
# `softmax.reference` computes in float64 and subtracts the row max. Its semantics are the
# ones torch and NumPy share, and every safe kernel below must match them exactly:
# * a NaN or a +inf anywhere in a row makes the whole row NaN;
# * an all `-inf` row gives NaN (0/0); `-inf` elements elsewhere give exactly 0;
# * an empty input gives an empty output, with no launch.

# %%
(x,) = softmax.make_input((5, 8), values="hostile")
with np.printoptions(precision=3, suppress=True, linewidth=110):
    print("input:\n", x)
    print("reference:\n", softmax.reference(x))

# %% [markdown]
# ## Step 01: the naive kernel
# The formula, translated word for word (the tutorial's `softmax_naive_kernel`): one
# thread sums $e^{x_j}$ over the whole row while the rest of the block waits.

# %%
build.show("softmax", "01_naive")

# %% [markdown]
# Two things are wrong. It is serial (one thread walks the row). And $e^{89} \approx 4.5
# \times 10^{38}$ is already above the largest float32 ($3.4 \times 10^{38}$): one score of
# 89 or more makes the sum `inf` and the row `inf/inf = NaN`. The NumPy lines below compute
# the same formula in float32; on a GPU the kernel's own output follows.

# %%
(big,) = softmax.make_input((1, 6), values="large")
print("scores          :", big[0])
print("safe (float64)  :", softmax.reference(big)[0])
print("naive (float32) :", softmax.reference_naive(big)[0])
got = run_variant(softmax, "01_naive", big)
if got is not None:
    print("naive on the GPU:", got[0])

# %%
check_variants(softmax, ["01_naive"])

# %% [markdown]
# ## Step 02: safe softmax with a shared-memory tree
# Softmax is shift-invariant: $e^{x_i}/\sum e^{x_j} = e^{x_i - M}/\sum e^{x_j - M}$. With
# $M = \max x$ every exponent is ≤ 0, so nothing overflows. The price is a third pass:
# find the max, sum the exponentials, write the output. Each reduction is a tree in
# shared memory with a `__syncthreads()` per level.

# %%
build.show("softmax", "02_safe_smem")

# %%
check_variants(softmax, ["02_safe_smem"])

# %% [markdown]
# ## Step 03: warp shuffles
# Threads of a warp can read each other's registers: `__shfl_xor_sync` swaps values between
# lanes whose ids differ in one bit (a butterfly). Five rounds reduce 32 values, with no
# shared memory and no barrier. Only the 8 warp results of a 256-thread block go through
# shared memory: 2 barriers per reduction instead of 9. The helpers live in
# `kernels/common.cuh` and every later lab reuses them.

# %%
build.show("softmax", "03_warp_shuffle")
print("\n".join(build.ptx("softmax", "03_warp_shuffle", grep=r"shfl\.sync")[:5]))

# %% [markdown]
# For short rows (attention over a few hundred keys), a whole block per row wastes threads.
# One **warp per row** needs no shared memory and no barrier at all:

# %%
build.show("softmax", "03_warp_per_row")

# %%
check_variants(softmax, ["03_warp_shuffle", "03_warp_per_row"])

# %% [markdown]
# ## Step 04: online softmax
# The max pass exists only to fix the reference point of the exponentials. Keep instead a
# running max $m_k$ and a running sum $d_k = \sum_{i \le k} e^{x_i - m_k}$. When $x_{k+1}$
# arrives, $m_{k+1} = \max(m_k, x_{k+1})$ and
#
# $$d_{k+1} = \sum_{i \le k+1} e^{x_i - m_{k+1}} = \Big(\sum_{i \le k} e^{x_i - m_k}\Big) e^{m_k - m_{k+1}} + e^{x_{k+1} - m_{k+1}} = d_k\, e^{m_k - m_{k+1}} + e^{x_{k+1} - m_{k+1}}.$$
#
# The same rule merges two partial states $(m_A, d_A)$ and $(m_B, d_B)$ of different threads:
# $m = \max(m_A, m_B)$, $d = d_A e^{m_A - m} + d_B e^{m_B - m}$. It is associative, so the
# warp and block reductions carry (m, d) pairs. Result: one statistics pass instead of two,
# 2 reads + 1 write. One care point: a state whose max is still `-inf` must contribute 0,
# not $e^{-\infty - (-\infty)}$ = NaN; `md_combine` guards it.

# %%
build.show("softmax", "04_online")

# %%
check_variants(softmax, ["04_online"])

# %% [markdown]
# ## Step 05: float4 loads, and the row in registers
# Step 04 still issues one 4-byte load per element and reads the row twice. Two changes:
# * `float4` loads move 16 bytes per instruction (`ld.global.nc.v4.f32`): a quarter of the
#   load instructions for the same bytes;
# * when the row fits in the block's registers (8 float4 per thread, up to 32,768 floats at
#   1024 threads), it is loaded **once**, reduced, and written from registers: 1 read + 1 write.
#   Each thread overwrites its x with $e = e^{x - m_{local}}$, the row merges the threads'
#   $(m_{local}, d_{local})$ once, and the output is $e \cdot e^{m_{local} - M} / D$: one
#   exponential per element, computed as `ex2.approx((x - m) · log₂e)` (2 instructions
#   instead of ~10 for `expf`, relative error ~2⁻²²). With bytes at their minimum, the
#   instruction count is what is left to cut;
# * short rows get a warp each (8 rows per block): no shared memory, no barrier.
#
# A row whose length is not a multiple of 4 cannot be read with aligned 16-byte loads from
# every row start, so the launcher passes `vec_ok = 0` and the kernel uses scalar loads for
# the same elements. Longer rows stream twice; the second read mostly hits L2.

# %%
build.show("softmax", "05_online_vec4")
v4 = build.ptx("softmax", "05_online_vec4", grep=r"ld\.global\.nc\.v4")
s1 = build.ptx("softmax", "04_online", grep=r"ld\.global")
print(f"step 05: {len(v4)} ld.global.nc.v4.f32 in its PTX, e.g. {v4[0]}")
print(f"step 04: only scalar loads, e.g. {s1[0]}")

# %%
check_variants(softmax, ["05_online_vec4"])

# %% [markdown]
# ## Step 06: fp16 in and out
# Inference keeps activations in fp16: half the bytes, so half the time for a memory-bound
# kernel, provided every load still moves 16 bytes. One `uint4` carries 8 halves; the math
# stays in fp32 (summing thousands of exponentials in fp16 would lose most of the bits).

# %%
build.show("softmax", "06_fp16_vec8")

# %%
check_variants(softmax, ["06_fp16_vec8"])

# %% [markdown]
# ## What the compiler made of each step
# Registers, spills and shared memory per kernel, for Orin (sm_87) and Hopper (sm_90).
# Steps 05 and 06 hold the row in registers (the most registers per thread): no spills, but at 1024
# threads that is the whole register file, one block per SM.

# %%
build.ptxas_info("softmax")

# %% [markdown]
# ## Timing at the target shapes
# Three shapes: square (4096 × 4096), long rows (1024 × 32768) and short rows
# (32768 × 1024), each ≥ 64 MiB of input. Every variant and baseline runs on the same
# inputs in the same process; GB/s counts one read of the input and one write of the output.

# %%
TARGETS = [softmax.SHAPES["square_4096"], softmax.SHAPES["long_rows_1024x32768"],
           softmax.SHAPES["short_rows_32768x1024"]]
res = bench.compare(softmax, [(s, "float32") for s in TARGETS] + [(s, "float16") for s in TARGETS])
bench.table(res)

# %%
plot.bars(bench.select(res, dtype="float32"), "01_softmax_targets_fp32", title="softmax fp32 at the target shapes")
plot.bars(bench.select(res, dtype="float16"), "01_softmax_targets_fp16", title="softmax fp16 at the target shapes")

# %% [markdown]
# Speedups of the best steps over `torch.softmax` (ratios of medians; > 1 means faster):

# %%
import pandas as pd

pd.concat([bench.speedup(res, "05_online_vec4", "torch.softmax"),
           bench.speedup(res, "06_fp16_vec8", "torch.softmax")], axis=1).round(2)

# %% [markdown]
# ## Sweep: row length 32 … 65536 at a fixed 2²⁵ elements
# Short rows are many small blocks; long rows are few large ones. Watch where each step
# falls off: the naive kernel degrades linearly with row length (one thread), the
# block-per-row kernels waste threads on short rows, and step 05 leaves registers for
# streaming beyond 32,768.

# %%
sw = bench.compare(softmax, [(s, "float32") for s in softmax.SWEEP])
plot.sweep(sw, "01_softmax_sweep_fp32", title="softmax fp32, 2^25 elements, GB/s vs row length", logy=True)

# %% [markdown]
# ## The seed's shapes
# Vision attention scores (16 heads × 1024 × 1024) and one Qwen logits row of 151,936.
# The logits row is the lesson in the last line: **one row is one block is one SM**. However
# good the kernel, a single row uses 1/132 of an H100; the fix is to split the row across
# blocks (a two-kernel or cluster reduction), which is an exercise for the ambitious.

# %%
seed = bench.compare(softmax, [(softmax.SHAPES["vision_attention_16x1024x1024"], "float32"),
                               (softmax.SHAPES["vision_attention_16x1024x1024"], "float16"),
                               (softmax.SHAPES["logits_151936"], "float32")])
bench.table(seed)

# %% [markdown]
# ## Seed claim vs measured here
# The tutorial argues qualitatively; here are its claims as measured ratios (time of the
# slower step over time of the faster, at 4096 × 4096 fp32 unless stated).
#
# Read the first row with care. On the recorded H200, step 04 was *slower* than step 03
# although it reads the row once less: its per-element (m, d) update costs two `expf` and two
# branches per element, and at ~4 TB/s that arithmetic, not memory, sets the time. The saved
# pass only pays once the exponentials are cheap, which is what step 05 does (one `ex2.approx`
# per element). A claim about bytes holds only while bytes are the bottleneck.

# %%
sq, lg = softmax.case_key(TARGETS[0], "float32"), softmax.case_key(TARGETS[1], "float32")
bench.claims(res, [
    ("online softmax saves a memory pass (3 reads -> 2)", "fewer passes, lower bandwidth pressure",
     "04_online", "03_warp_shuffle", sq),
    ("warp shuffle beats the shared-memory tree", "fewer __syncthreads, no bank conflicts",
     "03_warp_shuffle", "02_safe_smem", sq),
    ("float4 + register cache beats scalar loads", "1/4 the load instructions; single pass",
     "05_online_vec4", "04_online", sq),
    ("same, long rows", "single pass where the row fits", "05_online_vec4", "04_online", lg),
    ("parallel reduction beats one thread summing", "naive is unusable", "02_safe_smem", "01_naive", sq),
])

# %% [markdown]
# ## Accuracy: error against float64
# Fast is worthless if wrong. Relative error of each step's fp32 output against the float64
# reference, as rows grow. The serial sum of step 01 accumulates error with the row length;
# tree and shuffle reductions add in a balanced order; step 05's `ex2.approx` costs a few
# ulps and stays far below the 1e-4 the checks allow.

# %%
SIZES = [2 ** k for k in range(5, 17, 2)]
errs = kl.check.error_sweep(softmax, ["01_naive", "03_warp_shuffle", "04_online", "05_online_vec4"], SIZES)
plot.error_vs_fp64(SIZES, errs, "01_softmax_error", title="softmax fp32: max relative error vs float64")

# %% [markdown]
# ## Explore: row length, vector width and step, with sliders
# Pick a row length (at 2²⁵ elements in all), a load width (1: the scalar steps 01–04, 4: step
# 05's `float4`, 8: step 06's 8 halves) and a step. On a GPU each change is measured now;
# without one the nearest recorded point is shown, labelled recorded.

# %%
from kernellab import explore

explore.softmax(cols=1024, width=4)

# %% [markdown]
# ## Progress: the whole ladder against the copy roof
# Each step's GB/s as a fraction of the copy roof (what a kernel that reads its input once
# and writes its output once can reach), beside the library baselines (hatched), at
# 4096 × 4096 fp32.

# %%
plot.progress(res, "01_softmax_progress", case=sq, title="softmax fp32 4096 x 4096: the ladder")

# %% [markdown]
# ## Add your own variant
# `kl.check.register(family, name, source, kernel_name, grid=..., block=..., scalars=...)` puts
# a kernel of yours into the family beside the lab's steps. The same harness then checks it on
# the awkward shapes and hostile values (`check.variants`) and times it against the steps and
# baselines (`bench.compare`). The kernel takes the family's inputs, then the output, then
# `scalars(*inputs)`. Running the cell again replaces your variant; `kl.check.unregister(softmax,
# "07_mine")` removes it.
#
# The example below asks a question the ladder leaves open: step 03's *warp per row* with
# step 04's *online* (m, d), so short rows need one statistics pass instead of two. Change it
# and run the three cells again.

# %%
MINE = r"""
#define NEG_INF (-__int_as_float(0x7f800000))
extern "C" __global__ void softmax_mine(const float* __restrict__ x, float* __restrict__ y, int R, int C) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y, lane = threadIdx.x;
    if (row >= R) return;
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;
    float m = NEG_INF, d = 0.0f;
    for (int i = lane; i < C; i += 32) {              // online (m, d): one statistics pass
        const float v = xr[i];
        if (v == NEG_INF) continue;                   // adds exp(-inf) = 0
        const float m2 = fmaxf(m, v);
        d = (m == NEG_INF ? 0.0f : d * expf(m - m2)) + expf(v - m2);
        m = m2;
    }
    for (int o = 16; o > 0; o >>= 1) {               // merge the lanes' states
        const float mo = __shfl_xor_sync(0xffffffffu, m, o), dO = __shfl_xor_sync(0xffffffffu, d, o);
        const float mm = fmaxf(m, mo);
        d = (m == NEG_INF ? 0.0f : d * expf(m - mm)) + (mo == NEG_INF ? 0.0f : dO * expf(mo - mm));
        m = mm;
    }
    for (int i = lane; i < C; i += 32) yr[i] = expf(xr[i] - m) / d;
}
"""
kl.check.register(softmax, "07_mine", MINE, "softmax_mine",
                  grid=lambda x: ((x.shape[0] + 7) // 8,), block=(32, 8), scalars=lambda x: x.shape)
check_variants(softmax, ["07_mine"])

# %%
SHORT = [((32768, 1024), "float32"), ((65536, 256), "float32")]
mine = bench.compare(softmax, SHORT, names=["03_warp_per_row", "04_online", "07_mine"])
bench.table(mine)

# %%
r = bench.speedup(mine, "07_mine", "03_warp_per_row")
kl.say("No timing of `07_mine` here: a kernel of yours has no recorded results, so it is timed "
       "only live, on a GPU." if r.empty else
       "; ".join(f"at {case}, `07_mine` is **{v:.2f}×** step 03_warp_per_row "
                 f"({'faster' if v > 1 else 'slower'})" for (case, _, _), v in r.items())
       + f" ({kl.provenance(mine)}).")

# %% [markdown]
# ## Exercise: a warp per row, with your own `warp_reduce_max`
# Fill in the butterfly: five rounds of `__shfl_xor_sync` with offsets 16, 8, 4, 2, 1,
# keeping the max, so that *every* lane ends with the warp's max. The kernel around it is a
# whole softmax with one warp per row (like step 03's `03_warp_per_row`); its sum is given.
# The grading cell compiles your code for sm_87 and sm_90, looks for `shfl.sync.bfly` in the
# PTX, and on a GPU checks it against NumPy (hostile rows included) and times it against
# step 03 on the same input. Until it is done it prints **NOT YET** and the lab goes on.

# %%
GRADE = dict(
    make_input=lambda: softmax.make_input((16387, 128), "float32", "hostile"),
    reference=softmax.reference,
    grid=lambda x: ((x.shape[0] + 3) // 4,), block=(32, 4),            # 4 rows (warps) per block
    scalars=lambda x: x.shape,                                         # R, C
    ptx_must_contain="shfl.sync.bfly",
    step=("step 03_warp_per_row", softmax.VARIANTS["03_warp_per_row"]),
)

# %% tags=["exercise"]
EXERCISE = r"""
__device__ float warp_reduce_max(float v) {
    // TODO: five butterfly rounds with __shfl_xor_sync (offsets 16, 8, 4, 2, 1), keeping the max
    return v;
}
__device__ float warp_sum_all(float v) {      // given: shuffle down to lane 0, then broadcast
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}
extern "C" __global__ void softmax_warp_rows(const float* x, float* y, int R, int C) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y, lane = threadIdx.x;
    if (row >= R) return;                     // whole warps leave together
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;
    float m = -__int_as_float(0x7f800000);    // -inf
    for (int i = lane; i < C; i += 32) m = fmaxf(m, xr[i]);
    m = warp_reduce_max(m);
    float d = 0.0f;
    for (int i = lane; i < C; i += 32) d += expf(xr[i] - m);
    d = warp_sum_all(d);
    for (int i = lane; i < C; i += 32) yr[i] = expf(xr[i] - m) / d;
}
"""

# %%
kl.check.grade_exercise(EXERCISE, "softmax_warp_rows", **GRADE)

# %% tags=["solution"]
SOLUTION = r"""
__device__ float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ float warp_sum_all(float v) {      // given: shuffle down to lane 0, then broadcast
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}
extern "C" __global__ void softmax_warp_rows(const float* x, float* y, int R, int C) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y, lane = threadIdx.x;
    if (row >= R) return;                     // whole warps leave together
    const float* xr = x + (size_t)row * C;
    float* yr = y + (size_t)row * C;
    float m = -__int_as_float(0x7f800000);    // -inf
    for (int i = lane; i < C; i += 32) m = fmaxf(m, xr[i]);
    m = warp_reduce_max(m);
    float d = 0.0f;
    for (int i = lane; i < C; i += 32) d += expf(xr[i] - m);
    d = warp_sum_all(d);
    for (int i = lane; i < C; i += 32) yr[i] = expf(xr[i] - m) / d;
}
"""
kl.check.grade_exercise(SOLUTION, "softmax_warp_rows", strict=True, **GRADE)

# %% [markdown]
# ## What to remember
# * Correct first: subtract the max; match NumPy on NaN, ±inf and empty rows.
# * Passes over memory set the time of a memory-bound kernel: 3R+1W → 2R+1W → 1R+1W.
# * Reductions belong in registers (shuffles), with one small cross-warp step.
# * 16-byte loads, with a scalar fallback for lengths and alignments that do not allow them.
# * One block per row stops scaling when there are fewer rows than SMs (the logits row).
