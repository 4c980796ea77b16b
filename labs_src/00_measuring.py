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
from kernellab.core import bench, build, launch, plot, results
from kernellab import measuring, measuring_report as report, rmsnorm
kl.banner()

# %% [markdown]
# ## 1. The kernels that measure the device
# Small kernels in `kernels/measure.cu` measure the device itself. The first does nothing at all:

# %%
build.show("measure", "00_empty")

# %% [markdown]
# The copy roof: a grid-stride copy with 16-byte loads. It reads *n* × 4 bytes and writes
# *n* × 4 bytes, and we count both. A softmax, an add or an RMSNorm reads its input once and
# writes its output once, so this is its ceiling. A roof is the best this device can do, so
# `bench.roofs` keeps the fastest of several movers: this kernel, `cudaMemcpy`, and a stream that
# reads two bytes for each one it writes (an add's mix), each far past L2 and again at buffers of
# ½, 1 and 2 L2s (near L2's size some written bytes are still in L2 when the clock stops, so a
# writer there beats one far past it), each from its fastest tenth of repetitions (p10). Where a
# lab's recorded kernel still runs faster, `make bench` raises the roof to it and says which
# kernel did: a fraction above 1 would mean the roof was wrong.

# %%
build.show("measure", "01_copy")

# %% [markdown]
# The read roof: a streaming sum. Kernels whose output is tiny next to their input (GEMV,
# reductions) are judged against this one. Each thread issues eight independent 16-byte
# loads before it adds any of them up: section 4 shows why that matters (a version with one
# load at a time measured *less* than the copy roof, so it was no ceiling at all). Like the
# copy roof, the read roof is the best of several readers, each reading as many bytes as the copy
# moves: this sum, the widest readers of section 4's sweep (32–128 B in flight per thread), and a
# reader with 256 B in flight per thread, as many as lab 04's fastest GEMV asks for, and one that
# reads in a GEMV's order (a warp per contiguous 8 KiB piece, the grid covering the data once,
# where the others stride over the whole buffer from a resident grid). A roof must be a ceiling for
# every reader the course judges against it.

# %%
build.show("measure", "02_read")
build.show("measure", "08_read_256B")
build.show("measure", "10_read_rows")

# %% [markdown]
# The compute ceiling for the roofline: independent chains of fused multiply-adds, in registers.

# %%
build.show("measure", "03_fma")

# %% [markdown]
# ## 2. The numbers
# `measuring.fundamentals()` measures everything this lab talks about, in one process: the roofs,
# what a launch costs, an L2-resident copy timed warm and flushed, the CPU-timer pitfall,
# the latency of DRAM and L2, the bytes-in-flight sweep, the compute ceilings and the micro-benchmarks
# behind the seeds' claims in cycles (the last section).
#
# How `bench` times (read `kernellab/bench.py`, it is short):
# * **CUDA events** around each call, not a CPU clock;
# * **L2 flushed** before every repetition by *reading* a buffer of at least 2× the L2. Reading, not
#   writing: a flush that writes leaves L2 full of dirty lines, and the next timed kernel would pay
#   for writing them back to DRAM. A read flush pays that write-back itself and leaves L2 clean;
# * a **spacer** kernel, longer than the host's cost of one call, queued before each start
#   event, so the events see the GPU's time even when Python queues work slower than the GPU
#   runs it (section 3 measures both sides);
# * **warm-up** first, then the **median** with p10/p90 over 10–100 repetitions;
# * **unique bytes**: GB/s counts each input read once and each output written once.

# %%
fund = measuring.fundamentals()
each = results.each_device               # a sentence per recorded device: each(fund, lambda part: ...)
fund

# %%
each(fund, report.roofs_said)

# %% [markdown]
# **A fraction above 1.** Later labs divide each kernel's GB/s by a roof. A fraction a little
# above 1 is either noise (the kernel's p10–p90 band reaches below the roof: two medians of
# the same bytes differ by about a percent run to run), or a sign that the roof kernel is not
# the best way to move those bytes on this device: then the *roof* is wrong, and the fix is a
# better roof kernel (that is how `measure_02_read` got its eight loads in flight), never a
# claim that a kernel beat the hardware.
#
# **Why flush L2.** The L2-resident copy was timed twice on the same buffers:
# a quarter of the L2 in all (the table's rows `L2-resident copy`), warm and flushed.

# %%
each(fund, report.warm_said)

# %% [markdown]
# A benchmark that repeats one small input without flushing measures the cache, not the kernel.
# Triton's `do_bench` flushes too (by writing a buffer); `cupyx.profiler.benchmark` does not. In a
# decoder, though, a small weight *is* in L2 from one token to the next: that is why `bench.compare`
# also reports `warm_us` for shapes of ≤ 64 rows that fit in L2.
#
# **The CPU-timer pitfall.** A kernel launch returns as soon as the work is queued: around one
# large copy, `perf_counter()` without a synchronize times the launch, with one the copy plus a host
# round trip; CUDA events time the GPU's own work.

# %%
fund[fund["quantity"].str.contains("perf_counter|CUDA events")][["quantity", "value", "unit", "device"]]

# %% [markdown]
# ## 3. What a launch costs: host time and GPU time
# A launch costs twice. The **host** (Python, CuPy, the driver) spends microseconds *queuing*
# it; the **GPU** spends microseconds starting it. The two overlap: while the GPU runs one
# kernel, the host queues the next. So a stream of launches goes at the pace of the slower
# side, and the two must be measured separately:
# * *one empty launch between two events*: what the old yardstick measured; it includes the
#   event records around a lone launch;
# * *100 empty launches back to back in one event pair*: the GPU's own cost per launch;
# * *the same 100 launches captured once as a CUDA graph and replayed*;
# * *host µs per call*: `bench.host_us` (perf_counter over many calls; launches are
#   asynchronous, so this is the cost of queuing, not of running).

# %%
fund[fund["quantity"].str.contains("empty kernel|host: one")][["quantity", "value", "unit", "device"]]

# %% [markdown]
# So a chain of small kernels is **host-bound** whenever queuing one costs more than running
# it. A decode step is such a chain. Here: 8 residual adds of one 4096-wide fp16 row (lab 03's
# best step), launched one by one, then captured once and replayed as a graph with the
# kernellab helper (it wraps CuPy's stream capture):
# ```python
# g = bench.graph(lambda: [step(a, b, out=h) for _ in range(8)])   # captured once (out= given: no allocation)
# g()                                                              # replays all 8 launches: one host call
# ```
# Lab 06 uses the same helper for a whole ViT block.
# End to end a graph can take less than its event-timed GPU time: back to back, one replay's
# start overlaps the end of the one before, while each event-timed replay starts from an idle
# stream and pays its whole ramp-up.

# %%
fund[fund["quantity"].str.contains("small launches")][["quantity", "value", "unit"]]

# %%
each(fund, report.chain_said)

# %% [markdown]
# **Why the spacer.** `bench.time_fn` reports the GPU's time. If the host were still queuing
# when the start event fired, the events would time the host instead, and every launch-bound
# kernel would look as slow as Python. The spacer (a register-only kernel longer than the
# host's cost of the call) keeps the GPU busy until the whole call is queued. The host's cost
# is then reported on its own: `bench.compare` has a `host_us` column (and `bare_host_us`,
# the same launches made as bare `RawKernel` calls), and a decode-size row gets `warm_us` too.
#
# How the launchers keep their host cost near a bare call: the first call with given buffers
# validates everything (dtypes, shapes, strides, alignment, overlaps) and launches; its
# *launch plan* (kernel, grid, block, packed arguments) is kept, keyed by what decided it (each
# array's address, shape, layout and dtype, every other argument's value). A call with the same
# key (a decoder reuses its buffers every token) replays the plan as bare `RawKernel` calls:
# the checks would pass again, so they are not repeated. New buffers take the full path. A call
# with the very same array objects as the previous call skips even building the key (identity
# through weak references, plus shape and dtype) and hands CuPy the arrays themselves.
# Here for one decode row of RMSNorm (lab 02), beside torch:

# %%
one = bench.compare(rmsnorm, [((1, 4096), "float16")], names=[rmsnorm.RMSNORM.default["float16"]],
                    baselines=[b for b in rmsnorm.RMSNORM.baselines if b.startswith("torch")])
results.table(one, ["case", "name", "median_us", "warm_us", "host_us", "bare_host_us", "device", "source"])

# %%
each(one, report.host_said)

# %% [markdown]
# ## 4. Little's law: latency × bytes in flight = bandwidth
# A load takes a while to come back (its **latency**), and memory delivers bandwidth only for
# the loads that are in flight. Little's law ties them together:
#
# > bytes in flight = bandwidth × latency
#
# To measure latency, one thread follows a random chain of pointers: each load's address is
# the previous load's value, so exactly one load is ever in flight and the time per hop *is*
# the latency. Over a buffer much larger than L2 (flushed first) that is DRAM; over one that
# fits in L2 (warmed first), L2.

# %%
build.show("measure", "04_chase")

# %%
each(fund, report.latency_said)

# %% [markdown]
# The sweep below changes one thing: the bytes each thread keeps in flight (4 B = one `float`,
# 8 B = `float2`, 16 B = `float4`, then 2, 4 and 8 independent `float4` loads), with every
# SM full of threads. Little's law predicts each point from the latency just measured.

# %%
build.show("measure", "05_inflight_4B")
build.show("measure", "05_inflight_64B")

# %%
sweep = measuring.inflight(fund)      # one block of rows per recorded device
sweep.round(3)

# %%
import matplotlib.pyplot as plt

if sweep.empty:
    print("SKIPPED: no bytes-in-flight sweep in these results (recorded before it existed); "
          "a GPU measures it live.")
else:
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for i, part in enumerate(results.devices(sweep)):
        dev, c = part["device"].iloc[0], f"C{i}"
        ax.plot(part["KiB in flight per SM"], part["GB/s"], "o-", color=c, label=f"measured (read), {dev}")
        ax.plot(part["KiB in flight per SM"], part["Little's law predicts GB/s"], "s--", color=c, alpha=0.6,
                label=f"Little's law: min(roof, in flight / DRAM latency), {dev}")
        ax.axhline(measuring.value(fund[fund["device"] == dev], "read roof"), color=c, lw=1, ls=":",
                   label=f"read roof, {dev}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("KiB in flight per SM (bytes per thread × threads per SM)")
    ax.set_ylabel("GB/s")
    ax.set_title("Bandwidth needs bytes in flight\n" + "; ".join(results.source(p) for p in results.devices(sweep)),
                 fontsize=10)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.show()
    each(sweep, report.sweep_said)

# %% [markdown]
# Where the table's `measured / predicted` is below 1, the measurement falls short of the model: the chase
# measured the latency of an idle memory system, and under load requests queue, so the latency a
# streaming kernel sees is longer. Budget more bytes in flight than the idle-latency estimate.

# %% [markdown]
# **Predict the ladder before timing it.** Every later lab has steps that differ in the bytes
# each thread loads at once. Lab 03's fp16 adds load two inputs per thread: one `__half` each
# (4 B in flight per thread), a `half2` each (8 B), or 8 halves each (32 B). `measuring.little`
# turns that into a prediction from the idle latency (the model above, full SMs), and
# `measuring.sweep_fraction` reads what the measured sweep reached with as many bytes in flight:

# %%
each(fund, report.little_said)

# %% [markdown]
# One decode row is the extreme case: a single block of 128 threads on one SM. Its time is
# not "launch overhead": it is *round trips*. A thread waits one DRAM latency for each batch of
# loads it keeps in flight, so a row takes ceil(loads per thread / loads in flight) round trips
# per pass over it (`rmsnorm.round_trips`, the model lab 02 uses too). For lab 02's fp16 RMSNorm
# over one 4096-wide row (8 KiB of x):

# %%
each(fund, report.trips_said)

# %% [markdown]
# Lab 02 times the whole kernel beside this count: two passes over the row, the block reductions
# between them, the write and the launch come on top.
#
# ## 5. Reading `ptxas -v`
# The compiler reports, per kernel and per architecture, the registers per thread, spill
# bytes (registers that did not fit and went to local memory: slow), static shared memory
# and barriers. `build.ptxas_info` parses it; no GPU is needed. The PTX and the numbers come
# from exactly the options CuPy's `RawModule` compiles with (CuPy adds `-ftz=true`, for one),
# so what you read is the binary that is timed.

# %%
build.ptxas_info("measure")

# %% [markdown]
# Registers decide **occupancy**: an SM has 65,536 registers, allocated per warp in chunks of
# 256. A 256-thread block of a kernel that uses 64 registers needs 16,384 registers, so 4 such
# blocks fit (32 warps). `build.occupancy` does that arithmetic from ptxas for both arches,
# and, on a GPU, asks `cudaOccupancyMaxActiveBlocksPerMultiprocessor` for this device.
# Occupancy matters here because resident threads are what hold bytes in flight.

# %%
build.occupancy("measure", "02_read", threads=256)

# %%
occ = build.occupancy("softmax", "05_online_vec4", threads=1024)
occ

# %% [markdown]
# The softmax kernel of lab 01 keeps its part of a row in registers; lab 01 measures what that costs.

# %%
report.say_softmax_registers(occ)

# %% [markdown]
# ## 6. The device's roofline, with more than one ceiling
# Attainable FLOP/s = min(peak FLOP/s, arithmetic intensity × bandwidth). But not every
# operation is an FMA. Softmax's `exp` becomes `ex2.approx`, which runs on the
# **special-function unit** (SFU), a unit with far fewer lanes per SM than the FMA pipes. And
# every instruction, whatever its unit, must be **issued**: each SM's schedulers issue a
# bounded number per clock. Two more kernels measure those ceilings, like the FMA peak:

# %%
build.show("measure", "06_ex2")
build.show("measure", "07_issue")

# %%
each(fund, report.ceilings_said)

# %% [markdown]
# A kernel that spends more instructions per element than that (loads, converts, max, exp, sums,
# shuffles, stores) is issue-bound.
#
# On the plot the x axis is operations per byte moved, read in the unit of each ceiling: FLOP
# for the FMA roof, ex2 for the SFU roof, instructions for the issue roof. Softmax at fp32
# does about 5 FLOP (1 ex2) per 8 bytes; counted in instructions it sits much further right.

# %%
plot.device_roofline(fund, [("softmax fp32", 5 / 8), ("add fp32", 1 / 12), ("GEMV fp16", 1.0),
                           ("GEMM 4096³ fp32", 2 * 4096**3 / (3 * 4 * 4096**2))],
                     ceilings=("ex2.approx (SFU) throughput", "instruction issue ceiling"))

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


@launch.variant()
def roof_copy(x, out=None):
    """Section 1's measure_01_copy on x (its n // 4 float4s), grid as bench sizes it."""
    n4 = x.size // 4
    launch.launch("measure", "measure_01_copy", min(-(-n4 // 256), 32 * kl.device.info()["sms"]), 256,
                 (x, out, np.int64(n4)))
    return out


GRADE = dict(
    make_input=lambda: np.random.default_rng(0).standard_normal(2 ** 24 + 3).astype(np.float32),
    reference=lambda x: x.copy(),
    grid=lambda x: (4 * kl.device.info()["sms"],), block=(256,),
    scalars=lambda x: (np.int64(x.size),),                   # long long n
    ptx_must_contain=["ld.global.nc.v4.f32", "st.global.v4.f32"],   # float4 loads and stores
    step=("the copy roof kernel measure_01_copy", roof_copy),
)

# %% tags=["exercise"]
EXERCISE = r"""
extern "C" __global__ void my_copy(const float* src, float* dst, long long n) {
    TODO;   // float4 loads and stores in a grid-stride loop, then a scalar tail for n % 4
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
# ## Seed claims vs measured here
# The seeds state a few fundamentals in cycles ("an FMA takes 1 cycle, a multiply and an add 2",
# "a shuffle round 1 cycle", "shared memory 20-50", "a `__syncthreads` round about 5", "an integer
# modulo 20+") and in words ("FMA improves precision", "a smaller grid lowers the launch overhead").
# Two more kernels measure them. `measure_11_latency` runs one **dependent chain** of one operation
# between two `clock64()` reads, so each operation waits for the one before it: cycles per operation
# are its latency (the host runs a chain and one twice as long and takes the difference, so the clock
# reads cancel). `measure_12_fmul` is the FMA-peak kernel of section 1 (`measure_03_fma`) with a multiply in place of the
# FMA. A copy of 2M floats (seed 004's size) is then timed with the whole grid, half of it and a quarter.

# %%
build.show("measure", "11_latency")
build.show("measure", "12_fmul")

# %%
report.say_micro(fund)

# %% [markdown]
# The table judges each claim this lab measures by the course's one rule: a latency against the
# stated range (DRAM and L2 in ns from the pointer chase above, times the SM clock the record states;
# the chains above in cycles), a ratio of two measured quantities against the claimed ratio, FMA
# precision by the error of float32 dot products against float64 (NumPy: the claim is about IEEE
# arithmetic, not a kernel), and softmax's 0.625 FLOP per byte against this GPU's ridge point (the FMA
# peak over the copy roof). These figures come from the record's GPU, not from the seeds' Jetson Orin,
# whose cycles may differ; the conditions column says which.

# %%
claims = results.claims("00_measuring", fund)
kl.say(results.claims_summary(claims))
claims

# %% [markdown]
# ## What to remember
# * Report **GB/s of unique bytes** and the **fraction of the copy roof**, never a bare time.
# * Flush L2, time with events, take medians, compare with a baseline *in the same run*.
# * Speedups are ratios on one device; absolute times do not carry across machines.
# * GPU time and host time are different quantities: a chain of small launches goes at the
#   pace of the slower side. Report both; capture a chain as a CUDA graph (`bench.graph`).
# * Bandwidth = bytes in flight / latency (Little's law): count the bytes each thread keeps in
#   flight, and predict a step's fraction of the roof before timing it.
# * A roof is a ceiling: a fraction above 1 is noise or a roof kernel that is not the best.
# * `exp` is not one FLOP: the SFU and instruction issue are ceilings too.
