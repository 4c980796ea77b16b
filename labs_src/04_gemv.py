# %% [markdown]
# # Lab 04: GEMV and the matmul paths
#
# Decoding one token of an LLM is a chain of matrix–vector products: every projection computes
# $y = W x$ with the token's activation $x$, so **every weight of the model is read once per
# token**. Each weight is used for one multiply-add, so a GEMV does 2 FLOP per weight
# (1 FLOP per byte of fp16): far left of any GPU's ridge point. One number decides
# decode speed: how close the GEMV gets to the **read roof**.
#
# This lab follows the matmul report (seed 002, OrinMLLM's `matmul_kernel.cu`), kernel by
# kernel, before and after, and then goes past it. Convention (the report's):
# $y[K] = W[K, M]\cdot x[M]$, W row-major, one output row per block or warp, M = input length.
#
# The report's dispatch (`MatmulLayer::forward` and `BatchedMatmulLayer::forward`), as a table,
# with the steps of this lab that implement each kernel: the report's before → after **as the report
# writes them**, then the course's own steps where they differ (each a step of its own, after the
# report's; the section "The report's kernels as it writes them" sets each beside the course's):
#
# | phase | input × weight → output | report's kernel | as written | the course's |
# |---|---|---|---|---|
# | decode | fp32 × fp32 → fp32 | `matmul_kernel_cu_fp32<128,1>` | 30 → 04 | 01 → 02 → 03 → 04 |
# | decode | fp32 × int8 (+ scale / 128) → fp32 | `matmul_kernel_cu_fp32int8<128,1>` | 31 → 38 | 05 → 06 |
# | decode | fp32 × fp16 → fp32, M < 2048 | `optimized::gemv_fp16_optimized<8,4>` | 07 | |
# | decode | fp32 × fp16 → fp32, M ≥ 2048 | `optimized::gemv_fp16_bandwidth_optimized<256,1>` | 08 | |
# | decode | fp16 × fp16 → fp16 | `gemv_pure_fp16_kernel_v2<32,8>` | 32 → 33 | 09 → 10 |
# | decode (logits) | fp16 × fp16 → fp32 | `gemv_fp16_input_fp16_weight_fp32_output<8,4>` | 11 → 39 | 12 |
# | prefill | fp32 × fp32 | `batched_matmul_kernel_cu_fp32<128>` | 34 → 13 | |
# | prefill | fp32 × fp16, batch ≥ 8 | `fp32_to_fp16` → `cublasHgemm` → `fp16_to_fp32` | 19, cuBLAS, 21 | |
# | prefill | fp32 × fp16, fallback | `batched_matmul_fp16_weight_kernel<256>` | 40 → 15 | 14 → 15 |
# | prefill | fp16 × fp16 | `cublasHgemm`, fallback `batched_gemm_pure_fp16_kernel<256>` | cuBLAS, 41 → 17 | 16 → 17 |
# | — | conversions | `fp32_to_fp16_kernel`, `fp16_to_fp32_kernel` | 42 → 19, 43 → 21 | 18 → 19, 20 → 21 |
# | beyond | fp16 × fp16, every SM busy | (not in the report) | 22, 23 (logits), 24 (fp32) |
# | beyond | fp32 × int8 at 16 bytes per load | (not in the report) | 25 |
# | beyond | fp16 × int4 (AWQ style) | (not in the report) | 26, 28 (tensor cores), 35 (pipelined), 36 (offline tile layout) |
# | beyond | fp16 × int8 (W8A16), tensor cores | (not in the report) | 29, 37 (offline tile layout) |
# | beyond | fp16 × fp16, a warp per row asking for its whole row | (not in the report) | 27 (K ≥ 16 × the SMs; else 22) |

# %% [markdown]
# **In this lab you will** check a production engine's GEMV rewrites claim by claim; see why a
# GEMV is limited by *bytes in flight per SM* and by *how rows fill the SMs* (waves), not by
# arithmetic; quantise weights to int8 and int4 and pay for it in instructions per byte; find
# where cuBLAS's tensor cores overtake a GEMV-per-token kernel in prefill; predict a Jetson
# Orin from first principles; and add instruction-level parallelism to a GEMV yourself.
#
# **Prerequisites:** labs 00 (roofs, Little's law), 01 (warp shuffles, 16-byte loads) and 02
# (block reductions). **Expected time:** 2 hours. Source: the matmul report, summarised in
# [docs/sources.md](../docs/sources.md#002).

# %%
import numpy as np
import pandas as pd

import kernellab as kl
from kernellab.core import bench, build, plot, results
from kernellab import gemv, measuring
from kernellab.core.ncu import NCU_METRICS as ncu_metrics, ncu

kl.banner()

# %% [markdown]
# ## The reference, hostile values and a tolerance that scales with M
# `gemv.reference` multiplies in float64 (elementwise products, then sums, so that `inf * 0`
# is NaN as IEEE says; a BLAS may skip `x == 0` and lose it) and rounds once to the output type.
# The quantised paths use the dequantised weight, so the check measures the kernel, not the
# quantiser. Hostile rows: a NaN; an inf; `+inf` and `-inf` in one row (NaN); the largest value;
# an inf meeting `x == 0`.
#
# A GEMV row is a sum of M products, computed in fp32 in some order. A correct kernel is only
# close to the float64 answer: the standard bound for a sum split over ≥ 32 parallel partial
# sums (lanes) is $|\hat y - y| \le n\,u \sum_j |w_j x_j|$ with $u = 2^{-24}$ and
# $n = \lceil M/32 \rceil + 10$ (the longest chain, the reduction levels, the dequantisation).
# The checks use exactly that bound: it grows with M, and it is still small enough that a kernel
# that drops one element fails (a CPU test proves both).

# %%
W, x = gemv.make_input((6, 9), "float16", "hostile")
with np.printoptions(precision=3, linewidth=120):
    print("W =\n", W, "\nx =", x, "\nreference y =", gemv.reference(W, x))
bound = pd.DataFrame([{"M": m, "n = ceil(M/32) + 10": -(-m // 32) + 10,
                       "bound / sum|w x|": (-(-m // 32) + 10) * 2.0 ** -24} for m in (31, 1023, 4097, 18944)])
bound

# %% [markdown]
# ## The shapes, and where an int32 row offset breaks
# Qwen3-8B: q/o 4096×4096, kv K=512, FFN gate/up K=12288 (M=4096), down M=12288; Qwen2.5-7B:
# 3584×3584, 18944×3584, 3584×18944; the logits head K=151936 (the vocabulary), M=4096.
# The report switched the logits kernel to an `int64_t` row offset "so that `row * M` cannot
# overflow int32 at a large vocabulary". The table computes the offset of the last row:

# %%
off = gemv.int32_offsets()
off

# %% [markdown]
# At the logits shape the table says whether the last row's offset fits int32 as an element index, and as
# a byte offset of fp16 and of fp32 weights; its last row is a wider model's. Step 11 keeps the int32
# offset and its launcher refuses K × M ≥ 2³¹; steps 12 and 23 use `size_t`, and a GPU test runs them at
# 151936 × 16384 (2.5 G elements) and checks the last rows.


# %% [markdown]
# ## Steps 01–04: the fp32 GEMV, one change at a time
# The report's `matmul_kernel_cu_fp32<128,1>`: one 128-thread block per row, CUB's
# `BlockReduce` at the end. It lists four changes together and measured **1.60×**; here each is
# its own step, so the ablation table below says what each one bought:
# 01 `sdata[tid]` accumulator, scalar loads → 02 a register sum → 03 `float4` loads →
# 04 `__ldg` + `__restrict__` + `fmaf` (the report's after-kernel).

# %%
build.show("gemv", "30_f32_sdata_float4")
build.show("gemv", "01_f32_sdata")
build.show("gemv", "04_f32_ldg")

# %% [markdown]
# Step 30 is the report's "before" as the report writes it: float4 loads (plain, not `__ldg`), the
# sum through `sdata[tid]`, a `__syncthreads` and CUB; 30 → 04 is exactly the report's four
# changes. Steps 01–03 take them one at a time, starting from scalar loads (the course's ladder).
# The compiler already did part of the work. `sdata[threadIdx.x]` is private to one thread, so
# NVRTC keeps it in a register inside the loop (step 01 has no shared-memory access per element,
# only the stores before and after). NVRTC also contracts `a*b + c` into `fma` by default
# (`--fmad=true`), but not all of it: step 03's `sum += a.x*b.x + a.y*b.y + …` becomes one
# multiply, three FMAs and an add per float4, where step 04's `fmaf` chain is four FMAs (the PTX
# counts below and in the claims table).

# %%
PATTERNS = {"ld.shared": r"ld\.shared", "st.shared": r"st\.shared", "scalar ld.global": r"ld\.global(\.nc)?\.f32",
            "ld.global(.nc).v4": r"ld\.global(\.nc)?\.v4", "ld.global.nc": r"ld\.global\.nc", "fma": r"fma\.rn"}
pd.DataFrame({step: {k: len(build.ptx("gemv", step, grep=v)) for k, v in PATTERNS.items()}
              for step in ("30_f32_sdata_float4", "01_f32_sdata", "02_f32_register", "03_f32_float4", "04_f32_ldg")}).T

# %%
F32_STEPS = ["30_f32_sdata_float4", "01_f32_sdata", "02_f32_register", "03_f32_float4", "04_f32_ldg", "24_f32_fast"]
gemv.check_variants(names=F32_STEPS)

# %%
f32 = bench.compare(gemv, gemv.CASES["float32"], names=F32_STEPS)
results.table(f32)

# %%
gemv.ladder(f32, ["01_f32_sdata", "02_f32_register", "03_f32_float4", "04_f32_ldg"])

# %%
results.pairs(f32, *gemv.PAIRS["f32"])


# %% [markdown]
# ## Steps 05–06: int8 weights with one scale per 128
# Quantising halves the bytes of fp16 (a quarter of fp32). The report's scheme: per row, per
# group of 128 along M, a symmetric scale $s = \max|w| / 127$ and $q = \mathrm{round}(w/s)$.
# `gemv.quantize_int8` is that quantiser in NumPy; its error against the fp32 GEMV is measured
# here, on the host, next to the AWQ-style int4 of step 26:

# %%
Wf, xf = gemv.make_input((512, 4096), "float32", seed=7)
y32 = gemv.reference(Wf, xf).astype(np.float64)
q8, s8 = gemv.quantize_int8(Wf)
p4, s4, z4 = gemv.quantize_int4(Wf)
err = {"int8 (symmetric, 127 steps)": gemv.reference(q8, s8, xf), "int4 (asymmetric, 15 steps)":
       gemv.reference(p4, s4, z4, xf.astype(np.float16))}
pd.DataFrame([{"weights": k, "max |y - y_fp32| / max |y_fp32|": np.abs(v - y32).max() / np.abs(y32).max(),
               "rms error / rms y": np.sqrt(np.mean((v - y32) ** 2) / np.mean(y32 ** 2))} for k, v in err.items()])

# %% [markdown]
# Step 31 is the report's before as it is written: one byte and one float per load, the group's
# scale looked up per element, the sum through `sdata` shared memory. Step 38 is its after as it is
# written: a `char4` and a `float4` per load, and for each 4 elements "look up 4 scales" (seed 002,
# line 216), each `__ldg(&scales[base_idx / group_size])`, trusting L1 to serve the repeats. 31 → 38
# is the report's own pair. The course's steps take it apart: 05 is step 31 with a register sum, and
# 06 is step 38 looking the scale up **once per 4 elements** (38 → 06 is that one change; the ablations
# below time 05 → 06's others). The weight load is still only 4 bytes per instruction, and each int8
# needs an int-to-float conversion (`I2F`, a slow conversion pipe): both matter later (step 25).

# %%
build.show("gemv", "31_int8_sdata")
build.show("gemv", "38_int8_char4_scale4")
build.show("gemv", "06_int8_char4")

# %%
gemv.check_variants(names=["31_int8_sdata", "38_int8_char4_scale4", "05_int8_scalar", "06_int8_char4", "25_int8_fast"])

# %%
i8 = bench.compare(gemv, gemv.CASES["int8"],
                   names=["31_int8_sdata", "38_int8_char4_scale4", "05_int8_scalar", "06_int8_char4", "25_int8_fast"])
results.table(i8)

# %%
gemv.ladder(i8, ["05_int8_scalar", "06_int8_char4", "25_int8_fast"])

# %%
results.pairs(i8, *gemv.PAIRS["int8"])


# %% [markdown]
# ## Steps 07–08: fp32 activations × fp16 weights, and the report's M = 2048 switch
# The report runs two kernels for this path and switches on the input length M:
# a warp per row (`gemv_fp16_optimized<8,4>`, 8 rows per 256-thread block) below 2048, a
# 256-thread block per row (`gemv_fp16_bandwidth_optimized<256,1>`) at or above it. A warp per
# row has few loads in flight per row but no block reduction; a block per row has 8× the
# threads on a row, and pays a barrier. Where the two cross depends on the GPU: measure it.

# %%
build.show("gemv", "07_f32_fp16w_warp")
build.show("gemv", "08_f32_fp16w_block")

# %%
gemv.check_variants(names=["07_f32_fp16w_warp", "08_f32_fp16w_block"])

# %%
fw = bench.compare(gemv, gemv.CASES["f32_fp16w"], names=["07_f32_fp16w_warp", "08_f32_fp16w_block"])
fw_cases = [gemv.case_key(s, d) for s, d in gemv.CASES["f32_fp16w"]]
pd.DataFrame({"warp/row (07) µs": [gemv.time_us(fw, "07_f32_fp16w_warp", c) for c in fw_cases],
              "block/row (08) µs": [gemv.time_us(fw, "08_f32_fp16w_block", c) for c in fw_cases],
              "08 vs 07": [results.ratio(fw, "08_f32_fp16w_block", "07_f32_fp16w_warp", c) for c in fw_cases]},
             index=fw_cases).round(2)

# %%
plot.sweep(fw, "04_gemv_f16w_dispatch", x="cols",
           title="fp32 x fp16-weight GEMV, K = 4096: warp per row vs block per row, by M")

# %%
gemv.switches(fw, "f16w")


# %% [markdown]
# **What it predicts for an Orin, as a model.** The warp kernel loses once a row is long
# enough that a block's 8 warps could have 8× the bytes in flight on it; the number of rows
# that keeps every SM busy is what changes between GPUs. With K = 4096 rows and 8 rows per
# block, the warp kernel launches 512 blocks, many per SM on an Orin's few SMs (its datasheet, in
# the table below) and fewer on the GPU of the results on screen (its device record). By Little's
# law an SM needs (bandwidth per SM × latency) bytes in flight, and the table below divides each
# memory's bandwidth by its SMs: where an Orin SM's share is the smaller, fewer bytes in flight
# per SM already reach its roof, and the model predicts that the warp kernel stays competitive up
# to an M at least as large on Orin as on the GPU on screen; a switch at 2048 would then be early
# rather than late for Orin. Only an Orin can confirm it: the sweep above is the measurement to
# run there.

# %%
from kernellab.core.device import ORIN_PEAK_GBPS, ORIN_SMS

roof = bench.roof_values(f32)
per_sm = pd.DataFrame([{"GPU": f"Orin {k} (datasheet)", "SMs": ORIN_SMS[k], "GB/s": v, "GB/s per SM": v / ORIN_SMS[k]}
                       for k, v in ORIN_PEAK_GBPS.items()])
if roof and (n_sm := kl.device.facts().get("sms")):
    per_sm.loc[len(per_sm)] = {"GPU": f"{roof['device']} (read roof, {roof['source']})", "SMs": n_sm,
                               "GB/s": roof["read_gbps"], "GB/s per SM": roof["read_gbps"] / n_sm}
per_sm.round(1)

# %% [markdown]
# ## Steps 09–10: the pure fp16 GEMV, v1 → v2
# The fp16 models' decode kernel. v1 reads a `half2` (4 bytes) per lane per load; v2
# (`gemv_pure_fp16_kernel_v2<32,8>`) reads a `float4` (8 halves, 16 bytes) and keeps **4
# accumulators**, so each lane has 4 independent 16-byte loads in flight instead of a chain.
# Both accumulate in fp32. The report's own before/after pair is inside v2: step 32 is v2 as the
# report's "before" (plain loads, `a*b + c`, no remainder path; its four accumulators each take one
# `half2` of a single 16-byte load) and step 33 its "after" (`__ldg` on both operands, `fmaf`, the
# remainder path). Steps 09 → 10 are the course's v1 → v2, where v2 keeps four loads in flight: two
# changes, the load width and the loads in flight per lane, which the ablation section below times apart.

# %%
build.show("gemv", "32_fp16_v2_plain")
build.show("gemv", "33_fp16_v2_ldg")
build.show("gemv", "09_fp16_half2")
build.show("gemv", "10_fp16_v2")

# %%
F16_STEPS = ["32_fp16_v2_plain", "33_fp16_v2_ldg", "09_fp16_half2", "10_fp16_v2", "22_fp16_fast", "22_fp16_fast_stream",
             "27_fp16_rows"]
gemv.check_variants(names=F16_STEPS)

# %%
f16 = bench.compare(gemv, gemv.CASES["float16"], names=F16_STEPS)
results.table(results.select(f16, name=["09_fp16_half2", "10_fp16_v2", "cuBLAS (cupy.matmul)", "torch.mv (cuBLAS)"]))

# %%
results.pairs(f16, *gemv.PAIRS["fp16_v2"])


# %% [markdown]
# ## Steps 11–12: the logits head (fp16 in, fp32 out) and its int64 offset
# The report's pair as it writes it, 11 → 39: `half2` and an int32 offset → a `float4` (8 halves) per
# lane per load whose 4 `half2` feed 4 accumulators ("8 elements × 32 lanes = 256 elements" a trip, seed
# 002 line 249) and an `int64_t` offset: three changes in one step, which the lab does not take apart
# for this path (for the fp16 path, the ablation of 09 → 10 below times the load width and the loads in
# flight apart). Step 12, the course's, makes one change to 39: each accumulator gets a 16-byte load of
# its own, so a lane has 4 loads in flight. The checks include K = 151936 rows (at a short M: the full
# 151936 × 4096 check runs in the GPU tests).

# %%
build.show("gemv", "11_fp16_f32out_half2")
build.show("gemv", "39_fp16_f32out_v2")

# %%
gemv.check_variants(gemv.LOGITS)

# %%
lg = bench.compare(gemv.LOGITS, gemv.LOGITS.record_cases)
results.table(lg)

# %%
gemv.ladder(lg, ["11_fp16_f32out_half2", "39_fp16_f32out_v2", "12_fp16_f32out_ilp", "23_fp16_f32out_fast"])

# %% [markdown]
# ## Step 22: beyond the report, every SM busy
# A GEMV moves bytes; bandwidth = bytes in flight / latency (Little's law, lab 00). Step 10 gives
# each row one warp and each lane 4 loads of 16 bytes: 2 KiB in flight per row. At 4096 rows a
# GPU with over a hundred SMs gets a few dozen warps per SM, fine; at the kv projection's 512 rows
# it gets an eighth of that, far too few bytes in flight, and the GPU idles (the table below
# computes both for the SM count of the results on screen). Step 22 lets **G threads share a row**
# (G = 32…256: split-K inside a block, the partial sums reduced through shared memory) and
# picks G so the grid has ≥ 48 warps per SM, keeping 4 independent 16-byte loads per thread.
# The same template (one `Path` per data type) serves the logits head (23), fp32 (24), int8 (25)
# and int4 (26).

# %%
build.show("gemv", "22_fp16_fast")

# %%
sms_here = kl.device.facts(f16).get("sms") or ORIN_SMS["agx"]   # the device of the results on screen
pd.DataFrame([{"shape": f"{k}x{m}", "SMs": sms_here, "step 10 warps per SM": round(k / sms_here, 1),
               "step 22 threads per row G": gemv.fast_threads(k, m, 8, 1, 4, sms=sms_here),
               "step 22 warps per SM": round(k * gemv.fast_threads(k, m, 8, 1, 4, sms=sms_here) / 32 / sms_here, 1),
               f"on an AGX Orin ({ORIN_SMS['agx']} SMs): G": gemv.fast_threads(k, m, 8, 1, 4, sms=ORIN_SMS["agx"])}
              for k, m in [gemv.KV, gemv.QO, gemv.UP, gemv.DOWN, gemv.UP25, gemv.VOCAB]])

# %%
gemv.ladder(f16, ["09_fp16_half2", "10_fp16_v2", "22_fp16_fast"])

# %%
results.say(results.summary(f16, "22_fp16_fast", "10_fp16_v2") + " Against cuBLAS: "
            + results.summary(f16, "22_fp16_fast", "cuBLAS (cupy.matmul)", prov=False))


# %% [markdown]
# ### An experiment: how the weights pass through L2
# Every weight is read once per token, so caching it in L2 is useless; worse, each weight line
# that enters L2 evicts something, and if that something is *dirty* (written by an earlier
# kernel and not yet in DRAM) it is written back first, so DRAM moves more bytes than the GEMV
# reads. In an engine, L2 holds dirty activations and KV-cache lines from the previous kernels.
# `22_fp16_fast_stream` is step 22 with its weights loaded under an **L2 evict-first policy**
# (`createpolicy.fractional.L2::evict_first` and `ld.global.nc.L1::no_allocate.L2::cache_hint`):
# new weight lines replace earlier weight lines, not what other kernels left. The benchmark's
# flush reads a buffer and leaves L2 *clean*, so here the policy has no dirty lines to spare:
# the table shows what it costs or gains on its own. (After a flush that *writes* a buffer,
# L2 is full of dirty lines, and the policy saves their write-backs: an experiment worth running.)
# Step 22 keeps plain `__ldg`; an engine whose L2 holds dirty lines can measure the policy in place.

# %%
gemv.ladder(f16, ["10_fp16_v2", "22_fp16_fast", "22_fp16_fast_stream"])

# %%
results.pairs(f16, *gemv.PAIRS["evict_first"])


# %% [markdown]
# **Warm vs flushed.** The timings above flush L2 before every call, because an engine decoding an
# 8B model streams 16 GB of weights per token: no weight is in L2 when its GEMV runs. The input
# x (a few KB, written by the previous kernel) is in L2 in an engine and costs nothing either way.
# Without the flush, a weight matrix that fits in L2 is read from L2: faster, and not what decode
# sees.

# %%
gemv.warm_vs_flushed("22_fp16_fast", [(gemv.KV, "float16"), (gemv.QO, "float16"), (gemv.UP, "float16")])

# %% [markdown]
# ## Step 27: a warp per row with the whole row asked for, and the floor
# Step 22 fills the SMs with warps by splitting rows; each thread asks for 4 loads and then waits
# for them before asking for more. Step 27 goes back to a warp per row (step 10's layout) and has
# each lane ask for **16 loads of 16 bytes before doing any arithmetic**: a 4096-wide fp16 row is
# 512 such loads, so the warp requests its whole row at once. The loads skip L1
# (`ld.global.nc.L1::no_allocate`: no weight byte is read twice). Tall matrices give a warp 2 rows
# (8 loads each). Where the rows are too few to give every SM 16 warps (the kv projection), the
# launcher runs step 22's kernel. That is four changes; the ablation section below times each
# alone, and only its lines say which one pays.
#
# How fast *can* it be? The last row of the next table is a **floor**: the fastest of lab 00's
# readers (64, 128 or 256 bytes in flight per thread over the whole buffer, or a warp per 8 KiB
# piece as a GEMV reads) reading the weight's own bytes and doing nothing else, timed like every
# kernel here (flushed L2, the same fixed launch cost). A GEMV
# that finished sooner, beyond the noise, would prove the floor wrong; the sentence under the
# table checks that on the results on screen.

# %%
build.show("gemv", "27_fp16_rows")

# %%
gemv.ladder(f16, ["10_fp16_v2", "22_fp16_fast", "27_fp16_rows", gemv.FLOOR])

# %%
results.each_device(f16, gemv.floor_text)


# %%
plot.progress(f16, "04_gemv_progress", case=gemv.case_key(gemv.UP, "float16"), roof="read",
              title="fp16 GEMV 12288 x 4096 (FFN gate/up): the ladder against the read roof")

# %% [markdown]
# ## Steps 25–28: int8 at 16 bytes per load, and AWQ-style int4 on CUDA cores, then tensor cores
# Step 25 loads 16 int8 weights per instruction (all in one scale group), and converts them
# without `I2F`: the bytes `0x4B0000qq` are the float $2^{23} + q$, so a byte permute (`PRMT`)
# and one subtraction give q exactly. Each group of threads computes 2 rows, so each `float4`
# of x read from L1 serves two rows. Step 26 stores two 4-bit weights per byte with a fp16
# scale and a zero point per 128 (`w = (q - z) s`, as AWQ does) and uses the same trick.
#
# Fewer bytes, more instructions: the PTX of each step's main loop says how many instructions
# one weight byte costs (a GEMV that needs more instructions per byte than the SM can issue per
# byte of bandwidth stops being memory-bound).
#
# Step 28 moves int4's multiply-adds to the **tensor cores**: `mma.sync.m16n8k16` multiplies 16
# rows × 16 columns of fp16 weights by x (in all 8 columns of the n = 8 tile) and accumulates in
# fp32, one instruction per warp. What is left on the CUDA cores is turning nibbles into fp16,
# two weights per instruction: `LOP3 (w & 0x000f000f) | 0x64006400` is the fp16 pair
# {1024 + q0, 1024 + q4}, and one `HSUB2` of 1024 + z leaves q − z exactly. The pairs come out in
# the order {q0, q4}, {q1, q5}, …; a dot product may add in any order, so x is permuted the same
# way (byte permutes shared by 16 rows). Each group of 128 columns runs into a fresh accumulator
# and is scaled in fp32. Step 28 also changes the layout (16-row tiles, several warps per tile):
# the ablation section below times the tensor cores and the warps per tile apart, so the lab
# credits each only as far as its own line says.
#
# Step 35 changes one thing in step 28: each warp issues the loads of its **next** group of 128
# columns (weights, scales and zero points) before it dequantises and multiplies the current one
# (step 29's software pipeline). The price is registers: two groups' loads live at once, so fewer
# warps fit on an SM, and `gemv.tile_split` gives each tile fewer warps. Step 28 is its ablation; the
# table below says at which shapes the overlap is worth more than the warps it costs.
#
# Step 36 changes where the bytes lie, not what is done with them. In step 28 a warp reads one group
# of a tile with two loads: in the first, lane (g, t) takes bytes 16t… of row g, so the load touches
# 8 rows, 64 bytes in each (the second does the same for rows g + 8), and each lane makes 4 more small
# loads for its two rows' scales and zero points. Engines repack quantised weights once, at load time
# (Marlin does), into the order the kernel reads them: `gemv.interleave_int4` (below) lays each tile's
# groups out as the 1 KiB the warp reads, in lane order, so every 16-byte load of the warp is one
# contiguous 512-byte run and a tile's groups follow each other; the scales and zero points of rows g
# and g + 8 sit in 8 bytes of their own, one load per lane. The kernel's arithmetic is step 28's, line
# for line (the shared `int4_group`). Called with step 28's arguments (the quantiser's arrays), step 36
# repacks them on its first call and keeps the repack while those arrays live (`gemv.tiles`): every
# later call with the same arrays, the call the timings below make, costs a lookup. An engine repacks
# once at load time (`gemv.pack`) and keeps only the repacked arrays (lab 08 does). The ablation `36_ablate_meta` keeps the scales and zero points where step 28 has them, so the
# ablation section times the two halves of the layout apart.

# %%
build.show("gemv", "26_int4_awq")
build.show("gemv", "28_int4_mma")
build.show("gemv", "35_int4_pipelined")
build.show("gemv", "36_int4_tiles")
build.show_python(gemv.interleave_int4)

# %%
li = pd.DataFrame([gemv.loop_instructions(s) for s in ("24_f32_fast", "22_fp16_fast", "25_int8_fast", "26_int4_awq")])
fund = measuring.fundamentals()                      # lab 00's measurements (live, or as recorded)
issue = measuring.value(fund, "instruction issue ceiling")          # G instructions (per thread) per second
li["issue-bound GB/s"] = (issue / li["instructions per weight byte"]).round(0)
li["read roof GB/s"] = round(measuring.value(fund, "read roof"), 0)
li["issue binds before the bytes"] = li["issue-bound GB/s"] < li["read roof GB/s"]
li.rename_axis(f"lab 00's issue ceiling: {issue:,.0f} G instructions/s ({results.source(fund)})")

# %% [markdown]
# A PTX count is a guide to the instructions, not a count of them: ptxas adds address arithmetic and
# may fold moves, and the loads themselves compete for the L1 (step 25 reads 4 bytes of fp32 x per
# weight byte). The compute-only build below measures the instructions of the default int8, int4 and
# W8A16 steps directly (its table names them), and its verdict is the one to keep; a step without such
# a build keeps its cap here as a model.


# %% [markdown]
# Nsight Compute says where the tensor-core int4 kernel's time goes (where `ncu` is installed and profiling
# is permitted; otherwise the cell prints the command): how busy the issue slots are, how many
# warps are resident (registers limit them) and how much of DRAM's bandwidth it uses.

# %%
ncu(gemv, "28_int4_mma", gemv.UP, "int4",
          metrics={**ncu_metrics, "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue slots busy (%)",
                   "smsp__warps_eligible.avg.per_cycle_active": "eligible warps per scheduler per cycle"})

# %%
gemv.check_variants(names=["26_int4_awq", "28_int4_mma", "35_int4_pipelined", "36_int4_tiles"])

# %%
i4 = bench.compare(gemv, gemv.CASES["int4"], names=["26_int4_awq", "28_int4_mma", "35_int4_pipelined", "36_int4_tiles"])
dec = pd.concat([f32, i8, f16, i4])
gemv.int4_table(f16, i8, i4)

# %%
results.each_device(i4, lambda part: results.summary(part, "35_int4_pipelined", "28_int4_mma") + " "
                    + results.summary(part, "36_int4_tiles", "28_int4_mma", prov=False))


# %% [markdown]
# ## Step 29: int8 weights, fp16 activations, on the tensor cores (W8A16)
# The report's int8 kernel takes fp32 x, so every weight needs a float conversion and an FMA on the
# CUDA cores (step 25). Most engines pass fp16 activations between layers; with fp16 x, int8 weights
# can go through the tensor cores like step 28's int4. An int8 q is an exact fp16, made two at a
# time: a byte permute puts 0x64 above q ^ 0x80, which is the fp16 1024 + q + 128, and one `HSUB2`
# of 1152 leaves q. The checks include M = 4096 (the tensor-core path) and the odd widths, where
# the kernel runs a plain loop.
#
# Two things keep its loads coming. **Software pipelining**: each warp issues the loads of its
# next group of 128 columns (weights, scales and x) before it computes the current one, so its
# tensor-core work overlaps its next trip to memory (two register buffers; the loop is unrolled
# by 2 so each buffer keeps its own registers). **One wave**: `gemv.tile_split` gives each
# 16-row tile as many warps (up to 16) as still let every tile's block be resident at once, by
# the occupancy API; with one more, the last blocks would run as a second wave on a mostly idle
# GPU. Step 28 uses the same rule. The table shows the choice for each shape on the GPU at hand.
#
# Step 37 is step 36's change made to step 29: the same body reads `gemv.interleave_w8a16`'s layout,
# where the 2 KiB a warp reads for a tile and group lie in lane order (4 contiguous 512-byte runs) and
# the fp32 scales of rows g and g + 8 sit in 8 bytes (one load per lane, not two). Its ablation
# `37_ablate_meta` keeps the scales in their [K, G] array.

# %%
build.show("gemv", "29_int8_w8a16")
build.show("gemv", "37_w8a16_tiles")

# %%
gemv.check_variants(names=["29_int8_w8a16", "37_w8a16_tiles"])

# %%
def waves(step, k, m):
    s_ = gemv.tile_split(step, k, m)
    blocks = bench.blocks_per_sm(build.kernel("gemv", f"gemv_{step}"), 32 * s_) * sms_here
    return {f"{step[:2]}: warps per tile": s_, f"{step[:2]}: waves": round(-(-k // 16) / blocks, 2)}


kl.device.live_only("shows the warps per tile each shape gets and its waves (the split asks this GPU's "
                    "occupancy API; compile-only mode has none to ask).",
                    lambda: pd.DataFrame([{"shape": f"{k}x{m}", "16-row tiles": -(-k // 16), **waves("28_int4_mma", k, m),
                                           **waves("29_int8_w8a16", k, m)} for (k, m), _ in gemv.CASES["w8a16"]]))

# %%
w8 = bench.compare(gemv, gemv.CASES["w8a16"], names=["29_int8_w8a16", "37_w8a16_tiles"])
dec = pd.concat([dec, w8])
gemv.w8a16_table(f16, i8, w8)

# %%
results.each_device(w8, lambda part: results.summary(part, "37_w8a16_tiles", "29_int8_w8a16"))

# %%
results.each_device(i4, gemv.default_said, w8)


# %% [markdown]
# ### What limits the quantised steps: bytes, or instructions?
# Two measurements bracket the best int8, int4 and W8A16 steps. The **floor** reads the weight's bytes and does nothing
# else: the cost of the bytes alone. **Compute only** is the same kernel built with
# `-DGEMV_COMPUTE_ONLY`, which takes each weight word from a register instead of memory (scales,
# zeros and x are still read, every instruction still runs; the launches are the step's own): the
# cost of the instructions alone.
# A kernel can approach the larger of the two only if it overlaps them perfectly.

# %%
lim = gemv.limits_table(i8, i4, w8)
lim.drop(columns="device")

# %%
pd.crosstab(lim["step"], lim["instructions vs bytes"]).rename_axis(f"step ({', '.join(lim['device'].unique())})")

# %% [markdown]
# Whatever exceeds 1.00× in the last column is what the kernel fails to hide of one cost behind the
# other: the overlap of memory and compute, its occupancy, or the loads of scales and x that both
# builds make (Nsight Compute's issue and DRAM figures above, for step 28, show how to tell).


# %% [markdown]
# ## Prefill: the batched kernels, the conversions, and where cuBLAS takes over
# In prefill N tokens share each weight. The report's custom batched kernels give each
# (row, token) pair a block, so every token re-reads the whole weight (from L2 where it fits);
# cuBLAS runs a GEMM on tensor cores. The report routes fp32-activation / fp16-weight prefill
# to cuBLAS from a batch of 8: convert the tokens to fp16 (step 19), `cublasHgemm`, convert
# back (step 21).

# %%
build.show("gemv", "34_batched_f32_sdata")      # the report's batched fp32 "before" (-> step 13)
build.show("gemv", "17_batched_fp16_float4")
build.show("gemv", "19_f32_to_f16_x4")

# %%
gemv.check_variants(gemv.BATCHED)
gemv.check_variants(gemv.CONVERT)

# %%
cv = bench.compare(gemv.CONVERT, gemv.CONVERT.record_cases)
results.table(cv)

# %%
xo = bench.compare(gemv.BATCHED, gemv.BATCHED_CASES["float16"],
                   names=["41_batched_fp16_sdata", "16_batched_fp16_half2", "17_batched_fp16_float4"], host=False)
for k, m in ((4096, 4096), (12288, 4096)):
    plot.sweep(xo[xo["case"].str.contains(f"x{k}x{m}:")] if not xo.empty else xo, f"04_gemv_crossover_{k}x{m}",
               x="rows", title=f"prefill fp16 {k} x {m}: batched GEMV kernels vs cuBLAS, by tokens (GB/s)")

# %%
gemv.switches(xo, "fp16")


# %%
xw = bench.compare(gemv.BATCHED, gemv.BATCHED_CASES["f32_fp16w"],
                   names=["40_batched_f16w_sdata", "14_batched_f16w_half2", "15_batched_f16w_half2x2"], host=False)
gemv.switches(xw, "f32_fp16w")

# %% [markdown]
# ## Ablations: each bundled step, one change at a time
# Several steps above make more than one change: 03 → 04 (`__restrict__`, `__ldg`, `fmaf`, and a
# `#pragma unroll 4` of the course's: the report's text names no unroll), 05 → 06 (the same four plus the `char4`/`float4` width and one scale
# per 4 elements), 09 → 10 (load width and loads in flight), 10 → 22 (threads per row and the
# template's loop), 22 → 27 (loads in flight, the L1 policy, rows per warp), 26 → 28 (tensor cores,
# LOP3 dequantisation, 16-row tiles with several warps each), 25 → 29 (fp16 activations, tensor
# cores, a software pipeline, the tiles), and the layouts of 28 → 36 and 29 → 37 (the weights in load
# order, the packed scales). Each ablation kernel is the "after" step with **one**
# change undone, same launcher, same inputs, same run (`gemv.ABLATION`). In each table a value
# below 1 means the step is faster *without* that change. Some changes need no timing: the PTX
# says whether they change any instruction at all.

# %%
pd.DataFrame({step: {"#pragma unroll 4 changes the PTX": gemv.unroll_pragma_changes(step),
                     "ld.global.nc with __ldg": len(build.ptx("gemv", step, grep=r"ld\.global\.nc")),
                     "ld.global.nc without __ldg (__restrict__ kept)":
                         len(build.ptx("gemv", step[:2] + "_ablate_no_ldg", grep=r"ld\.global\.nc")),
                     "ld.global.nc without __ldg and __restrict__":
                         len(build.ptx("gemv", step[:2] + "_ablate_plain", grep=r"ld\.global\.nc"))}
              for step in ("04_f32_ldg", "06_int8_char4")}).T

# %% [markdown]
# Where the first column is False, the `#pragma unroll 4` of steps 04 and 06 (the course's; the report's
# text names no unroll) changes nothing in the PTX: given the compile-time stride the compiler unrolls the
# same way without it, so no timing can credit it; where True, the ablation of 03 → 04 counts it with step
# 03's form. `__restrict__` on `const` pointers is what lets the compiler use the read-only path
# (`ld.global.nc`) by itself; the table counts those loads with and without `__ldg`.

# %%
gemv.check_variants(gemv.ABLATION, [n for n in gemv.ABLATION.variants if "ablate" in n])

# %%
abl = bench.compare(gemv.ABLATION, gemv.ABLATION.record_cases)
results.ablation(abl, gemv.ABLATION_PAIRS, gemv.ABLATION_STEPS)

# %% [markdown]
# ## The report's kernels as it writes them, beside the course's
# Where the course's step differs from the report's kernel, the report's version is a step of its own,
# written as the report writes it (its section and lines of seed 002 below), and the course's comes
# after it. Steps 30, 31 and 33 were shown above; here are the rest: the int8 after with its 4 scale
# lookups (38), the logits after whose 4 accumulators share one load (39), the batched befores with
# ordinary loads, `sdata` and `a*b + c` (40, 41), and the conversion befores without `__ldg` (42, 43).
# The PTX table counts, for the report's GPU (sm_87), the instruction that each change touches; the
# check runs each pair on its family's awkward cases; the timing sets each beside the course's at the
# report's own shape, on one GPU, judged by the noise rule.

# %%
for step in ("40_batched_f16w_sdata", "41_batched_fp16_sdata", "42_f32_to_f16_x2_plain", "43_f16_to_f32_x2_plain"):
    build.show("gemv", step)

# %%
gemv.as_written_ptx()

# %%
gemv.check_as_written()

# %%
aw = [bench.compare(f, gemv.as_written_cases(f.name), names=gemv.as_written_names(f.name), baselines=False)
      for f in (gemv.GEMV, gemv.LOGITS, gemv.BATCHED, gemv.CONVERT)]
aw_tab = gemv.as_written(aw)
aw_tab

# %%
aw_claims = gemv.as_written_claims([f32, i8, f16, lg, *aw])      # the claims that time the report's pairs
aw_claims

# %%
gemv.say_as_written(aw_tab, aw, aw_claims)

# %% [markdown]
# ## The seed's claims, measured
# Every speed-up of the report's kernel table, measured (live, or as recorded) with the same before/after pair.
# The report measured on an Orin (an AGX has 16 SMs by its datasheet; "~100 GB/s" in the report's own words): a
# ratio that shrinks here says the
# change mattered for *that* memory system, or was absorbed by the compiler.

# %%
vit = bench.compare(gemv.BATCHED, gemv.BATCHED_CASES["vit"], names=["16_batched_fp16_half2", "17_batched_fp16_float4"],
                    host=False)
xf = bench.compare(gemv.BATCHED, gemv.BATCHED_CASES["float32"], host=False)    # the seed's batched fp32 pair (34 -> 13)
claims = results.claims("04_gemv", [f32, i8, fw, f16, lg, i4, w8, cv, xo, xw, xf, vit, abl, *aw], gemv.FAMILIES)
kl.say(results.claims_summary(claims))
results.claims_brief(claims)                  # every claim with its reason in full: claims

# %% [markdown]
# ## Jetson Orin on paper (a model, not a measurement)
# A GEMV at the roof takes (unique bytes) / (bandwidth). The table predicts each shape on the
# Orin boards from their datasheet LPDDR5 peak at 85 % efficiency, and, for comparison, at the
# report's own "~100 GB/s". The report's own Orin times of its after-kernels at 4096×4096
# (fp16 in / fp32 out 0.288 ms, fp32 0.576 ms, int8 0.362 ms) give the bandwidth each achieved,
# bytes / time, computed here with this lab's byte counts:

# %%
gemv.say_seed_times()


# %%
gemv.orin_model().round(1)

# %% [markdown]
# ## Other GPUs: every record side by side
# The sentences above speak of one GPU: this one when it is live, else the reference record. Every
# other record (and this GPU, when live) is set side by side here, case by case: the fastest step on
# the GPU on screen, its time and fraction of the roof on each GPU, and the fastest library call's time.

# %%
results.device_table(pd.concat([f16, i4, w8], ignore_index=True), roof="read")

# %% [markdown]
# ## Exercise: four accumulators
# The stub is step 12's kernel (fp16 in, fp32 logits out, a warp per row, `float4` loads) with
# one accumulator, and its loop is unfinished: it only handles every fourth 16-byte chunk.
# Complete the loop with **four independent accumulators** `s0..s3` for the chunks at
# `i`, `i + 32`, `i + 64`, `i + 96`, so each lane has four loads in flight. The grading cell
# compiles your kernel for sm_87 and sm_90, checks it against NumPy (inputs ≥ 0, so the fp32
# default tolerance is fair) and times it against step 12 on the same inputs. Until the loop is
# right it prints **NOT YET** and the lab goes on.

# %%
def _nonneg(shape=(8192, 4096)):
    W, x = gemv.LOGITS.make_input(shape, "fp16_f32out", seed=11)
    return np.abs(W), np.abs(x)


GRADE = dict(
    make_input=_nonneg,
    reference=gemv.LOGITS.reference,
    grid=lambda W, x: ((W.shape[0] + 7) // 8,), block=(256,),
    scalars=lambda W, x: (W.shape[0], W.shape[1]),
    ptx_must_contain="ld.global.nc.v4.u32",
    step=("step 12_fp16_f32out_ilp", gemv.LOGITS.variants["12_fp16_f32out_ilp"]),
)

# %% tags=["exercise"]
EXERCISE = r"""
#include <cuda_fp16.h>
__device__ float dot8(uint4 w, uint4 x, float s) {         // 8 halves x 8 halves, fp32 sum (given)
    const __half2* a = reinterpret_cast<const __half2*>(&w);
    const __half2* b = reinterpret_cast<const __half2*>(&x);
    for (int j = 0; j < 4; ++j) {
        const float2 p = __half22float2(a[j]), q = __half22float2(b[j]);
        s = fmaf(p.x, q.x, fmaf(p.y, q.y, s));
    }
    return s;
}
extern "C" __global__ void logits_ilp(const __half* __restrict__ W, const __half* __restrict__ x,
                                      float* __restrict__ y, int K, int M) {
    const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= K) return;
    const uint4* w8 = reinterpret_cast<const uint4*>(W + (size_t)row * M);
    const uint4* x8 = reinterpret_cast<const uint4*>(x);
    const int n8 = M / 8;                                     // M % 8 == 0 here
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int i = lane;
    for (; i + 96 < n8; i += 128) {
        s0 = dot8(__ldg(w8 + i), __ldg(x8 + i), s0);
        TODO;   // s1, s2, s3 for the chunks at i + 32, i + 64 and i + 96
    }
    for (; i < n8; i += 32) s0 = dot8(__ldg(w8 + i), __ldg(x8 + i), s0);   // the last chunks
    float s = (s0 + s1) + (s2 + s3);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[row] = s;
}
"""

# %%
kl.check.grade_exercise(EXERCISE, "logits_ilp", **GRADE)

# %% tags=["solution"]
SOLUTION = EXERCISE.replace(
    "        TODO;   // s1, s2, s3 for the chunks at i + 32, i + 64 and i + 96\n",
    "        s1 = dot8(__ldg(w8 + i + 32), __ldg(x8 + i + 32), s1);\n"
    "        s2 = dot8(__ldg(w8 + i + 64), __ldg(x8 + i + 64), s2);\n"
    "        s3 = dot8(__ldg(w8 + i + 96), __ldg(x8 + i + 96), s3);\n")
kl.check.grade_exercise(SOLUTION, "logits_ilp", strict=True, **GRADE)

# %% [markdown]
# ## Closing note: the targets, as measured
# Each target of this lab with the figure measured (or recorded) above and a verdict. The column
# **at the floor** is the same figure computed with the read-only floor (a kernel that only reads
# the weight's bytes) in place of ours: a yardstick for what moving the bytes alone scores on that
# GPU (a kernel of ours can beat it by a little: the floor is the fastest of three readers, not a
# proof). Where it is well below the target, a faster GEMV will not meet it; fewer bytes can. What
# limits the missed ones, as measured in this lab:
# * **a fixed cost per kernel**: the time of an empty kernel, timed like every kernel here
#   (computed below), is a visible share of a GEMV of a few tens of µs (the table above), and the floor pays it too;
# * **how the rows fill the SMs**: the short kv projection (512 rows) leaves the SMs underfed
#   whatever each warp asks for (step 27's ablation: 16 loads in flight per lane buy nothing over 4);
# * **instructions per byte** for int8 and int4, and how well a kernel overlaps them with its bytes:
#   the loop-instruction table and Nsight Compute's issue-slot figure above, and for the best int8,
#   int4 and W8A16 steps the compute-only build against the floor (the instructions alone against the
#   bytes alone, with the noise verdict of each shape). The int8/int4 ratios also include that fixed
#   cost, paid once per kernel whatever the bytes.

# %%
tg = gemv.targets(dec)
tg

# %%
kl.say(f"{results.targets_met(tg)}.")
results.each_device(f16, gemv.launch_share)


# %% [markdown]
# ## What to remember
# * A GEMV reads every weight once: its speed is bytes / bandwidth, and the work is to keep
#   enough 16-byte loads in flight on every SM (rows × threads per row × loads per thread).
# * Check claims one change at a time: the compiler had already done some of the report's
#   changes (`sdata` in a register, `a*b + c` as `fma`).
# * Quantisation trades bytes for instructions: int8 halves the bytes, int4 halves them again, and
#   each pays for it in dequantisation instructions. Where those take longer than the bytes (the
#   compute-only measurement), fewer bytes buy less than their share of time.
# * In prefill, a GEMV per token re-reads the weights; a tensor-core GEMM overtakes it after a
#   few tokens, and the crossover is a property of the GPU: measure it.
