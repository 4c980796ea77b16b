# %% [markdown]
# # Lab 00: measuring a GPU honestly
#
# Every later lab asks one question of each kernel: *how close is it to what this GPU can
# possibly do?* To answer it we need three numbers measured on the device itself, and a
# timing method that does not lie. This lab builds both.
#
# **Two modes.** With a CUDA GPU every cell runs live. Without one (CI, a laptop) the
# kernels still compile for `sm_87` (Jetson Orin) and `sm_90` (Hopper) and every timing
# cell shows *recorded* results, labelled with the device and date they came from.

# %% [markdown]
# **In this lab you will** measure the three numbers every later lab is judged against (the
# copy roof, the read roof, the cost of a launch), see why a CPU timer lies about GPU work,
# read `ptxas -v` (registers, spills, shared memory), place kernels on this device's roofline,
# and write a copy kernel that reaches the copy roof.
#
# **Prerequisites:** Python and NumPy; C syntax; what a CUDA grid, block and thread are
# (NVIDIA's *CUDA C++ Programming Guide*, chapter 2, is enough). No GPU needed: without one,
# the timing cells show recorded results. **Expected time:** 45 minutes.
#
# The source reports these labs are built on are summarised in
# [docs/sources.md](../docs/sources.md).

# %%
import kernellab as kl
from kernellab import bench, build, plot

kl.banner()

# %% [markdown]
# ## 1. The kernels that measure the device
# Three tiny kernels live in `kernels/measure.cu`. The first does nothing at all:

# %%
build.show("measure", "00_empty")

# %% [markdown]
# The copy roof: a grid-stride copy with 16-byte loads. It reads *n* × 4 bytes and writes
# *n* × 4 bytes, and we count both. A softmax, an add or an RMSNorm reads its input once and
# writes its output once, so this is its ceiling.

# %%
build.show("measure", "01_copy")

# %% [markdown]
# The read roof: a streaming sum. Kernels whose output is tiny next to their input (GEMV,
# reductions) are judged against this one.

# %%
build.show("measure", "02_read")
build.show("measure", "03_fma")

# %% [markdown]
# ## 2. The numbers
# `bench.fundamentals()` measures everything this lab talks about, in one process:
# the two roofs, the launch overhead of the empty kernel, an L2-resident copy timed
# warm and flushed, the CPU-timer pitfall, and the fp32 FMA peak for the roofline.
#
# How `bench` times (read `kernellab/bench.py`, it is short):
# * **CUDA events** around each call, not a CPU clock;
# * **L2 flushed** before every repetition by writing a buffer of at least 2× the L2;
# * a **spacer** kernel, longer than the host's cost of one call, queued before each start event:
#   on a slow host, Python's launch path could otherwise take longer than the flush and show up
#   in the events as kernel time (a multi-launch call would look slower than it is);
# * **warm-up** first, then the **median** with p10/p90 over 10–100 repetitions;
# * **unique bytes**: GB/s counts each input read once and each output written once.

# %%
fund = bench.fundamentals()
fund

# %% [markdown]
# **Launch overhead.** The empty kernel's time is the floor under any kernel. A decode-time
# RMSNorm over one 4096-wide row moves 16 KB: at 3 TB/s that is 5 ns of data, so its time is
# all launch. For such kernels the lesson is fusion (fewer launches), not faster loads.
#
# **Why flush L2.** The L2-resident copy was timed twice on the same buffers. Warm, its input
# is already in L2 and it reports more GB/s than the same kernel flushed, which pays for DRAM
# (at this small size both are also held back by the launch ramp, so neither reaches the
# copy roof). A benchmark that repeats one small input without flushing measures the cache,
# not the kernel.
# Triton's `do_bench` flushes the same way; `cupyx.profiler.benchmark` does not.
#
# **The CPU-timer pitfall.** A kernel launch returns as soon as the work is queued.
# `perf_counter()` around a launch without a synchronize measures the launch (microseconds),
# not the copy; with a synchronize it also includes the host round trip. Events recorded on
# the stream measure the GPU's own time.

# %% [markdown]
# ## 3. Reading `ptxas -v`
# The compiler reports, per kernel and per architecture, the registers per thread, spill
# bytes (registers that did not fit and went to local memory: slow), static shared memory
# and barriers. `build.ptxas_info` parses it; no GPU is needed.

# %%
build.ptxas_info("measure")

# %% [markdown]
# Registers decide **occupancy**: an SM has 65,536 registers, allocated per warp in chunks of
# 256. A 256-thread block of a kernel that uses 64 registers needs 16,384 registers, so 4 such
# blocks fit (32 warps). `build.occupancy` does that arithmetic from ptxas for both arches,
# and, on a GPU, asks `cudaOccupancyMaxActiveBlocksPerMultiprocessor` for this device.

# %%
build.occupancy("measure", "02_read", threads=256)

# %%
build.occupancy("softmax", "05_online_vec4", threads=1024)

# %% [markdown]
# The softmax kernel of lab 01 caches a whole row in registers (over 48 per thread). At 1024
# threads that is most of the register file: one block per SM. Lab 01 measures what that costs.
#
# ## 4. This device's roofline
# Attainable FLOP/s = min(peak FLOP/s, arithmetic intensity × bandwidth). Softmax does about
# 5 FLOP per element on 8 bytes (fp32 read + write): 0.6 FLOP/byte, far left of the ridge.
# It is memory-bound on every GPU ever made, so bytes, not FLOPs, are what we optimise.

# %%
plot.device_roofline(fund, [("softmax fp32", 5 / 8), ("add fp32", 1 / 12), ("GEMV fp16", 1.0),
                           ("GEMM 4096³ fp32", 2 * 4096**3 / (3 * 4 * 4096**2))])

# %% [markdown]
# ## Exercise: your own copy kernel, against the copy roof
# Write a grid-stride copy of `n` floats that reaches the copy roof: `float4` loads and stores
# (16 bytes per instruction, `ld.global.nc.v4.f32` in the PTX: use `const float* __restrict__`
# or `__ldg`) and a scalar tail for the last `n % 4` floats. The grid is fixed at 4 blocks of
# 256 threads per SM, so each thread must loop (*grid-stride*): the stub below copies one
# float per thread and stops short. The grading cell compiles your code for sm_87 and sm_90,
# looks for the 16-byte load in the PTX, and on a GPU checks n = 2²⁴ + 3 floats and times your
# kernel against the roof kernel `measure_01_copy` of section 1 on the same input. Until it is
# done it prints **NOT YET** and the lab goes on. (CuPy allocations are 256-byte aligned, so
# reinterpreting the base pointers as `float4*` is safe here.)

# %%
import numpy as np


@build.variant()
def roof_copy(x, out=None):
    """Section 1's measure_01_copy on x (its n // 4 float4s), grid as bench sizes it."""
    n4 = x.size // 4
    build.launch("measure", "measure_01_copy", min(-(-n4 // 256), 32 * kl.device.info()["sms"]), 256,
                 (x, out, np.int64(n4)))
    return out


GRADE = dict(
    make_input=lambda: np.random.default_rng(0).standard_normal(2 ** 24 + 3).astype(np.float32),
    reference=lambda x: x.copy(),
    grid=lambda x: (4 * kl.device.info()["sms"],), block=(256,),
    scalars=lambda x: (np.int64(x.size),),                   # long long n
    ptx_must_contain="ld.global.nc.v4.f32",
    step=("the copy roof kernel measure_01_copy", roof_copy),
)

# %% tags=["exercise"]
EXERCISE = r"""
extern "C" __global__ void my_copy(const float* src, float* dst, long long n) {
    // TODO: float4 loads and stores in a grid-stride loop, then a scalar tail for n % 4
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
"""

# %%
kl.check.grade_exercise(EXERCISE, "my_copy", **GRADE)

# %% tags=["solution"]
SOLUTION = r"""
extern "C" __global__ void my_copy(const float* __restrict__ src, float* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long n4 = n / 4;
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* d4 = reinterpret_cast<float4*>(dst);
    for (long long i = t; i < n4; i += stride) d4[i] = __ldg(s4 + i);   // 16 bytes per load
    for (long long i = 4 * n4 + t; i < n; i += stride) dst[i] = src[i];  // the tail: n % 4 floats
}
"""
kl.check.grade_exercise(SOLUTION, "my_copy", strict=True, **GRADE)

# %% [markdown]
# ## What to remember
# * Report **GB/s of unique bytes** and the **fraction of the copy roof**, never a bare time.
# * Flush L2, time with events, take medians, compare with a baseline *in the same run*.
# * Speedups are ratios on one device; absolute times do not carry across machines.
