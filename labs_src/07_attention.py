# %% [markdown]
# # Lab 07: attention, which is lab 01's softmax done tile by tile
#
# Attention is $o = \mathrm{softmax}(q K^\top / \sqrt{d})\,V$. Lab 01 computed a softmax over a row
# that sits in memory. In attention the row is a row of scores $q \cdot k_j$, and nobody needs it
# afterwards: it is only there to weight the values. Lab 01's **online softmax** keeps a running
# max $m$ and a running sum $d$, and rescales when $m$ grows. Add a running *vector*
# $a = \sum_j e^{s_j - m} v_j$ and rescale it the same way. Then the scores never have to exist
# all at once: K and V stream past in tiles. That is all flash attention is.
#
# The update, for a new score $s$ with value row $v$ (lab 01's, plus one line):
#
# $$m' = \max(m, s),\quad d' = d\,e^{m - m'} + e^{s - m'},\quad a' = a\,e^{m - m'} + e^{s - m'}\,v,\qquad o = a / d.$$
#
# Two partial results $(m_1, d_1, a_1)$ and $(m_2, d_2, a_2)$ combine with the same rule
# (lab 01's `(m, d)` merge). That is what lets many blocks share one row (flash *decoding*).
#
# The inference engine in the seeds spends its time in attention twice:
# * **LLM decode** (Qwen3-8B): each new token reads the whole KV cache once. At long contexts the
#   kernel is bound by the cache's bytes (at short ones by launch and ramp: the read-only floor below
#   measures where), and the ladder is about getting those bytes in flight (lab 00's Little's law).
# * **ViT prefill** (Qwen3-VL's vision tower, 16 heads × 72, N tokens): lab 06 writes the N × N
#   scores to memory between two cuBLAS GEMMs. A flash kernel keeps them on the SM, and at large N
#   its work is tensor-core FLOPs and the softmax between them (what actually holds each step back
#   is measured below, from the hardware counters).
#
# **In this lab you will** build decode attention from three launches down to one pass with
# split-KV, GQA and enough bytes in flight; merge partial softmaxes with lab 01's rule (and write
# that merge yourself); rotate q and k with Qwen3's RoPE while appending to the KV cache; write
# flash attention on tensor cores (`mma.sync`) with cp.async double buffering, a padded row stride
# for `ldmatrix` and more query rows per warp; take the two steps that bundle changes apart with
# ablations; measure each step against torch's `scaled_dot_product_attention` in the same run; read
# from the hardware counters what still holds the best steps back; put flash attention into lab 06's
# ViT block; and run the causal prefill a decoder's prompt needs.
#
# **Prerequisites:** lab 00 (roofs, Little's law), lab 01 (online softmax), lab 06 (the cuBLAS
# attention path). **Expected time:** 75 minutes.

# %%
import numpy as np
import pandas as pd

import kernellab as kl
from kernellab import attention as A
from kernellab.core import bench, build, plot, results
kl.banner()

# %% [markdown]
# ## Part 1: decode attention (Qwen3-8B)
# One token's query, 32 heads × 128, against a cache of 8 KV heads × L × 128 in fp16. Query
# head $h$ reads KV head $h / 4$ (grouped-query attention). The float64 reference is the
# formula. Its NaN semantics are the ones every kernel below must match: a NaN in a query row
# poisons that head, a NaN in a key poisons the 4 heads that read it, and a NaN in a value poisons
# one column of those heads.

# %%
host = A.make_decode((A.HQ, 63), values="nan")
ref = A.reference_decode(*host)
print("heads with NaN outputs:", sorted(set(np.argwhere(np.isnan(ref))[:, 0].tolist())))
print("columns with NaN in heads 4-7:", sorted(set(np.argwhere(np.isnan(ref[4:8]))[:, 1].tolist())))
big = A.make_decode((A.HQ, 63), values="large")
s = big[0][0].astype(np.float64) @ big[1][0].astype(np.float64).T * A.DEC_SCALE
print(f"'large' scores reach {np.abs(s).max():.0f}: exp overflows float32 above 88, so every step subtracts the max")

# %% [markdown]
# ### Step 01: naive, three launches
# Scores to memory (one warp per key), a safe softmax in place, then P·V. It is correct, but the
# scores make a round trip through DRAM, and the last kernel has only 32 blocks (one per head),
# each walking the whole cache alone.

# %%
for k in ("01_naive_scores", "01_naive_softmax", "01_naive_pv"):
    build.show("attention", k)

# %%
kl.check.variants(A.DECODE, ["01_naive"])

# %% [markdown]
# ### Step 02: one block per query head, one pass
# Lab 01's online softmax with a vector accumulator. A row of K is 256 bytes, which is 16 lanes × 16
# bytes, so a half-warp owns a key: each lane holds 8 dims of q, the dot product is finished with
# 4 shuffles, and each lane keeps 8 dims of the accumulator. At the end the block's 8 half-warps
# merge their $(m, d, a)$ with the combine rule. The scores never leave the registers. But there
# are only 32 blocks.

# %%
build.show("attention", "02_decode_head")
kl.check.variants(A.DECODE, ["02_head"])

# %% [markdown]
# ### Step 03: split-KV (flash decoding) and the merge
# Cut each head's cache into chunks, one block per (head, chunk), so every SM has work. Each
# block writes its chunk's normalised output $o_c$ and its log-sum-exp $\mathrm{lse}_c = m_c +
# \log_2 d_c$. The merge kernel is lab 01's combine rule on vectors:
#
# $$M = \max_c \mathrm{lse}_c,\quad w_c = 2^{\mathrm{lse}_c - M},\quad o = \sum_c w_c\, o_c \Big/ \sum_c w_c .$$
#
# The host can check this with NumPy before any GPU is involved: the merged chunks give the
# attention over the whole row.

# %%
rng = np.random.default_rng(0)
sc, vals = rng.standard_normal((1, 200)) * 4, rng.standard_normal((1, 200, A.D))
whole = (np.exp(sc - sc.max()) @ vals[0]) / np.exp(sc - sc.max()).sum()
cuts = [0, 13, 64, 200]
po, lse = np.zeros((1, 3, A.D)), np.zeros((1, 3))
for c, (a, b) in enumerate(zip(cuts, cuts[1:])):
    x = sc[:, a:b] * np.log2(np.e)
    p = np.exp2(x - x.max())
    po[0, c], lse[0, c] = p @ vals[0, a:b] / p.sum(), x.max() + np.log2(p.sum())
print(f"merged chunks vs the whole row: max abs difference {np.abs(A.merge_reference(po, lse) - whole).max():.1e}")

# %%
build.show("attention", "03_decode_split")
build.show("attention", "03_decode_merge")
kl.check.variants(A.DECODE, ["03_split"])

# %% [markdown]
# ### Step 04: GQA, with one block per KV head
# Steps 02 and 03 read each KV head once per query head, which is 4 times. Here one block serves the 4
# query heads of its group, so each KV head is loaded by one block, not four: a quarter of the DRAM
# traffic wherever step 03's repeated reads would not be served by L2. The price: registers (4 heads ×
# 8 accumulator dims per lane), and a quarter as many blocks, each doing 4 heads' work. Which side
# wins depends on the length; the time section below shows it per length.

# %%
build.show("attention", "04_decode_gqa")
kl.check.variants(A.DECODE, ["04_gqa"])

# %% [markdown]
# ### Step 05: more bytes in flight, and a new chunk rule
# Lab 00's Little's law: bandwidth = bytes in flight / latency. Step 04 has one K and one V load
# per half-warp in flight, and then it waits. Step 05 changes two things at once, as the course first
# wrote it:
# * **the kernel**: it issues 4 keys' loads at once (rescaling once per tile of 4, not per key) and
#   prefetches the next 4 while it computes;
# * **the chunk rule**: steps 03 and 04 cut the cache into 256-key chunks; step 05 takes one resident
#   wave of blocks (the SM count times the blocks per SM ptxas allows), with chunks of at least 64
#   keys. Wherever that wave holds more blocks than step 04's 256-key chunks give (the cell below prints
#   step 05's chunks on this GPU), it launches more blocks than step 04, which can matter as much as the
#   bytes in flight (step 03 against 02 shows what blocks are worth).
#
# Which change buys what is measured below by an ablation, not assumed. (The shared launcher of
# steps 02 to 05 skips the merge launch whenever one chunk suffices; that is not new in step 05.)

# %%
build.show("attention", "05_decode_gqa_tile")
kl.check.variants(A.DECODE, ["05_gqa_tile"])
for k in ("05_ablate_no_prefetch", "05_ablate_tile1"):       # the ablation kernels, timed below
    build.show("attention", k)
kl.check.variants(A.DEC_ABLATION, [n for n in A.DEC_ABLATION.variants if "ablate" in n])
f = kl.device.facts()       # the GPU here when live, else the first recorded device (named below)
per_sm = A.blocks_per_sm_on(f["arch"]) if f else 0
print(f"chunks per KV head (step 05's rule) on the {f.get('device')}: {f.get('sms')} SMs x {per_sm} blocks per SM "
      f"(ptxas, {f.get('arch')}):", {n: A.chunks_for("05", n, f["sms"], per_sm) for n in (64, 1024, 4096, 32768)} if f else {})

# %% [markdown]
# ### Step 06: one launch, with the merge done by each KV head's last block
# Steps 03 to 05 merge the chunks with a second launch. At short lengths that launch and its round
# trip are a large part of the whole call. Step 06 does it in one launch:
# * each block owns one (KV head, chunk) for the whole GQA group and copies K and V into shared
#   memory with 16-byte `cp.async`, several stages deep;
# * the number of chunks comes from the device-side length, so one CUDA graph replays every length;
#   below `FLASH_SPLIT_FROM` keys (`attention/steps.py`) it is one chunk, with no merge at all: the
#   threshold was chosen with `scripts/decode_sweep.py`, which times the rule with it and without it
#   (`split0`) at lengths between the lab's;
# * the last block of each KV head to finish (a fence and an atomic counter, reset for the next
#   launch) merges the partials.
#
# The table below times it beside step 05 and SDPA. Lab 08's token step runs it.

# %%
build.show("attention", "06_decode_gqa_flash")
kl.check.variants(A.DECODE, ["06_gqa_flash"])

# %% [markdown]
# ### Time: the decode ladder against torch, same inputs, same run
# Bytes are the whole KV cache plus q and o. The baselines are torch SDPA with `enable_gqa`
# (its backend is named below), a plain torch matmul-softmax-matmul, and step 05 captured as a
# CUDA graph. `median_us` is GPU time with L2 flushed; `warm_us` is the GPU time with the cache
# L2-resident (short lengths only); `host_us` is host time, what one call costs the CPU to issue (a
# different clock: it is not added to the GPU time). At short lengths a call moves kilobytes; the
# read-only floor (a kernel that only reads the same bytes) says how fast any kernel could be there.

# %%
dec = bench.compare(A.DECODE, A.DECODE.record_cases)
results.table(dec, ["case", "name", "median_us", "p10_us", "p90_us", "frac_read", "warm_us", "host_us"], roof="read")

# %%
A.say_noisy(dec)


# %%
A.show_sdpa_backend("decode")

# %% [markdown]
# Below: the ladder's pairs, each judged by the noise rule (time against / step: above 1, the step is
# faster than the step before or the library it is set against); then the read roof against its floor, where the floor's own fraction is what launch and
# ramp leave of the roof on a few µs of data (where the floor misses 0.75, no decode kernel can reach it);
# then step 06 against SDPA at every length, and the host time per call (where `host_us` exceeds
# `bare_host_us`, the rest is the Python launcher).

# %%
A.say_decode(dec)


# %% [markdown]
# ### Step 05, one change at a time
# Each ablation kernel is step 05 with one change undone, timed with the same inputs in its own run
# (`A.DEC_ABLATION`): `05_ablate_chunks` is step 05's kernel on step 04's grid, `05_ablate_no_prefetch`
# drops the prefetch, `05_ablate_tile1` is step 04's body on step 05's grid (with step 05's launch
# bounds). In the table a value above 1 means slower than step 05: that change was worth that much,
# given the others.

# %%
abl_dec = bench.compare(A.DEC_ABLATION, A.DEC_ABLATION.record_cases)
results.ablation(abl_dec, [A.ABLATION_PAIRS["decode"]], A.ABLATION_STEPS)

# %% [markdown]
# ### Step 04 against step 03, length by length
# Step 04 changes one thing: one block serves the 4 query heads of a KV head. The table sets, per
# length and per recorded device, the time ratio beside the two things that change with it: the
# blocks each step launches (computed from the chunk rule, not measured) and the cache's bytes
# against that GPU's L2 (its record).

# %%
pd.concat([A.gqa_vs_split(part) for part in results.devices(dec)], ignore_index=True).round(2)

# %%
A.each_device(dec, A.gqa_vs_split_text)


# %% [markdown]
# Read the table as a hypothesis, not a measurement of its cause (no L2 counter of steps 03 and 04 is
# recorded): while the cache fits in L2, step 03's four reads of a KV head mostly come from L2, so
# step 04 saves little DRAM traffic, while it launches a quarter of the blocks, each doing four heads'
# work. Once the cache outgrows L2, each of step 03's extra reads goes to DRAM, and the saved bytes
# decide.

# %%
sw = dec[dec["name"] != "01_naive"].assign(**{"KV length (cached keys)": lambda d: d["cols"]}) if len(dec) else dec
plot.sweep(sw, "07_decode_sweep", x="KV length (cached keys)",
           title="decode attention: GB/s of the KV cache against its length")
plot.progress(dec, "07_decode_progress", roof="read", case=A.dec_case_key((A.HQ, 32768), "float16"))

# %% [markdown]
# ### What holds decode back: the counters
# Nsight Compute reads the hardware counters of one launch (`make ncu`, recorded on a GPU that
# allows it; the table names that GPU): how busy DRAM, the issue slots and the tensor pipe are, and
# why warps wait. Step 05 beside torch SDPA's kernel, at a long and a short cache; then step 06, the
# decode lab 08 calls, beside SDPA's kernel at a short cache (64 keys) and at the shortest cache the
# floor target covers (4096 keys). Where the issue slots of step 05 are much busier than SDPA's, look in
# the kernel: our half-warps reduce every key's dot product with shuffles and accumulate P·V with FP32
# FMAs (the `tensor pipe busy (%)` row shows how much each kernel uses the tensor pipe instead).

# %%
lim_dec = results.limiters(A.DECODE)
lim_dec

# %%
results.say(A.decode_limits_text(lim_dec))
results.say(A.decode06_limits_text(lim_dec))


# %% [markdown]
# ### RoPE and the KV-cache append, one launch
# Before attention, Qwen3 rotates q and k by the token's position (rotate-half; dims $i$ and
# $i + 64$ turn by the angle $p\,\theta^{-i/64}$, $\theta = 10^6$) and appends k and v to the cache.
# `rope_append` does all three in one kernel, with cos/sin from a table built once in float64. It
# reads the position on the device when given a device array, so one captured CUDA graph serves
# every token (lab 08's decoder relies on it). A position outside the cache is a `ValueError` when
# given from Python. From the device it writes nothing.

# %%
build.show("attention", "06_rope_append")
x = np.random.default_rng(1).standard_normal((2, A.D))
y = A.reference_rope(x, 1000)
print("RoPE keeps each (i, i + 64) pair's length:",
      np.allclose(np.hypot(x[:, :64], x[:, 64:]), np.hypot(y[:, :64], y[:, 64:])))

# %% [markdown]
# ## Part 2: ViT prefill (16 heads × 72, non-causal)
# ### Step 01: the report's path, with the scores in memory
# One cuBLAS batched GEMM writes $S = QK^\top$ (fp16, $16 N^2$ values), lab 05's softmax reads it and
# writes P, and a second GEMM reads P. Count the bytes:

# %%
qkvo = lambda n: 4 * A.PF_HEADS * n * A.PF_D * 2                     # q, k, v read once, o written once (fp16)
pd.DataFrame([{"N": n, "q, k, v, o (MiB)": qkvo(n) / 2**20, "scores S and P, written and read (MiB)":
               A.scores_bytes(n) / 2**20, "scores / (q, k, v, o)": A.scores_bytes(n) / qkvo(n)} for n in A.PF_NS]).round(1)

# %% [markdown]
# The score bytes grow as $N^2$ while q, k, v and o grow as $N$, so the path is bound by the scores: the
# last column is the traffic a fused kernel removes.

# %% [markdown]
# ### Step 11: fused, one query row per block
# The online softmax over K/V tiles, with the scores kept on the SM. It is the algorithm in thirty
# lines, and it is slow: CUDA cores do every multiply-add, and each K/V row is re-read by every
# query row.

# %%
build.show("attention", "11_prefill_row")

# %% [markdown]
# ### Step 12: tensor cores, in FlashAttention-2's order
# A block of 4 warps owns 64 query rows and streams 64-key tiles of K and V through shared memory.
# Each warp computes its 16 × 64 block of $S$ with `mma.sync.m16n8k16`, updates its rows' $(m, d)$
# in registers, rescales its O accumulator, and feeds $P$ straight back into the tensor cores: the
# accumulator layout of $S$ *is* the A-operand layout of $P$. Head dim 72 is not a multiple of 16,
# so it is padded to 80 with zeros in Q and K (the padded dot products are exact). The padding
# costs $80/72 = 1.11\times$ the tensor-core work, and the FLOP/s below count only the 72 real dims.

# %%
build.show("attention", "12_prefill_mma")

# %% [markdown]
# ### Step 13: cp.async double buffering, and step 14: a padded row stride
# Step 13 copies tile $t + 1$ into a second buffer with `cp.async` (no register round trip)
# while the tensor cores work on tile $t$. That is two changes: `cp.async`, and a second buffer
# stage; two ablation kernels take them apart (`13_ablate_one_stage`: cp.async into one stage;
# `13_ablate_reg_stages`: two stages filled through registers), timed below. Step 14 changes only
# the shared-memory row stride. `ldmatrix` reads 8 rows of 16 bytes per phase. With 160-byte rows,
# rows $r$ and $r + 4$ share banks (2-way conflicts). With 176-byte rows the 8 rows land on 8
# distinct bank groups. That is the bank arithmetic of `ldmatrix`'s reads; the counters below still
# count bank conflicts in step 14, from shared-memory accesses this lab does not separate (the copies
# into the tiles, the zeroed pad columns).

# %%
build.show("attention", "13_prefill_cp_async")
for k in ("13_ablate_one_stage", "13_ablate_reg_stages"):    # the ablation kernels, timed below
    build.show("attention", k)
build.show("attention", "14_prefill_padded")
print("shared memory per block (bytes):", A.PF_SMEM)

# %% [markdown]
# ### Step 15: two query tiles per warp
# In step 14 every K or V fragment a warp reads from shared memory (one `ldmatrix.x4`, 512 bytes)
# feeds two `mma`s. Step 15 changes one thing: each warp owns two 16-row query tiles (the block
# 128 rows), so every fragment feeds four, and shared memory is read half as often per FLOP. The
# price is registers: two sets of accumulators, so fewer warps fit on an SM, and half as many
# blocks at small N. The counters below say which side wins.

# %%
build.show("attention", "15_prefill_two_tiles")

# %%
kl.check.variants(A.PREFILL)
kl.check.variants(A.PF_ABLATION, [n for n in A.PF_ABLATION.variants if "ablate" in n])

# %% [markdown]
# ### Time: the prefill ladder against torch SDPA
# The same Q, K and V for every step. FLOP/s count $4 \cdot 16 \cdot N^2 \cdot 72$ (QKᵀ and PV).
# Torch SDPA is the library baseline: what torch's best attention kernel reaches on these shapes
# (not a ceiling: a step may match or beat it). Live, the notebook times step 11 at N = 1024 only
# (it takes milliseconds beyond) and the cuBLAS path where its N² scores fit in half the GPU's free
# memory (at N = 16384 they are 17 GB); `make bench` records every step at every N, and without a
# GPU the table shows that record.

# %%
pf = A.prefill_compare()
if len(pf):
    pf["TFLOP/s"] = A.prefill_flops(pf["cols"]) / pf["median_us"] / 1e6
results.table(pf, ["case", "name", "median_us", "p10_us", "p90_us", "TFLOP/s"])

# %%
A.show_sdpa_backend("prefill")

# %%
A.say_prefill(pf)


# %% [markdown]
# ### Step 13, one change at a time
# Each ablation kernel is step 13 with one change undone, in its own run (`A.PF_ABLATION`). Above 1:
# slower than step 13, so that change was worth that much, given the other.

# %%
abl_pf = bench.compare(A.PF_ABLATION, A.PF_ABLATION.record_cases)
results.ablation(abl_pf, [A.ABLATION_PAIRS["prefill"]], A.ABLATION_STEPS)

# %% [markdown]
# The bars leave out `11_row` (one query row per block, CUDA cores): it takes so much longer than the
# others (the table above has its times) that on a shared axis every other bar would be invisible.

# %%
plot.bars(pf[(pf["cols"] >= 4096) & (pf["name"] != "11_row")] if len(pf) else pf, "07_prefill_bars",
          value="median_us", title="ViT prefill attention: time per call (lower is better; 11_row left out)")

# %% [markdown]
# ### What holds the prefill back: the counters
# Step 14 against step 15 against SDPA's kernel, one launch each at N = 4096, under Nsight Compute.
# Where the rule reads latency in steps 14 and 15, the likely mechanism (not isolated here) is one
# warp's mma → softmax → mma chain, with too few warps beside it to fill the gaps.

# %%
lim_pf = results.limiters(A.PREFILL)
lim_pf

# %%
results.say(A.prefill_limits_text(lim_pf))


# %% [markdown]
# ### Lab 06's block, with flash attention
# Lab 06 builds the ViT block the report's way: QKᵀ by cuBLAS, lab 05's softmax, then P·V by
# cuBLAS, with the $16 N^2$ scores in memory. `vit_block.Block(..., attention=A.prefill)` puts the
# default flash step in their place (one launch instead of three). Both blocks are timed beside
# torch's eager block with SDPA, on the same weights and input.

# %%
blk = A.block_compare()
results.table(blk, ["case", "name", "median_us", "p10_us", "p90_us"])

# %%
A.say_block(blk, pf)


# %% [markdown]
# ## Part 3: the causal prefill of a decoder's prompt (step 16)
# Lab 08's decoder runs a whole prompt in one pass. Its attention is causal (token $i$ sees tokens
# $0..i$), grouped (32 query heads over 8 KV heads) and at head dim 128, with K and V already in the KV
# cache. Step 16 is step 14's kernel with those changes; step 07 rotates every prompt token's q and k and
# writes k and v to the cache in one launch. Step 16 is checked against float64 here, and timed against
# torch SDPA (`is_causal=True, enable_gqa=True`) on the same tensors.

# %%
build.show("attention", "16_prefill_causal")
build.show("attention", "07_rope_prefill")
kl.check.variants(A.PREFILL_CAUSAL)

# %%
cz = bench.compare(A.PREFILL_CAUSAL, A.PREFILL_CAUSAL.record_cases)
if len(cz):
    cz["TFLOP/s"] = A.causal_flops(cz["cols"]) / cz["median_us"] / 1e6
results.table(cz, ["case", "name", "median_us", "p10_us", "p90_us", "TFLOP/s"])

# %%
A.each_device(cz, A.causal_text)

# %% [markdown]
# What holds step 16 back, from the counters of one launch at N = 4096 beside SDPA's causal kernel:

# %%
lim_cz = results.limiters(A.PREFILL_CAUSAL)
results.say(A.causal_limits_text(lim_cz))

# %% [markdown]
# ## Targets
# Each speed target is judged against the roof and, where the lab measured one, against the floor:
# the same figure with a read-only kernel over the same bytes in place of our step. A target the floor
# misses too is out of reach on that GPU: it is given as our step's fraction of the floor, not as
# "missed". The prefill targets have no floor (`-`): they are bound by FLOPs, not bytes.

# %%
A.targets_vs_floor([*A.DECODE.targets, *A.PREFILL.targets, *A.PREFILL_CAUSAL.targets, *A.BLOCK.targets],
                   pd.concat([dec, pf, cz, blk], ignore_index=True))

# %% [markdown]
# ## An Orin on paper (a model, not a measurement)
# Decode attention reads the whole cache per token. Where its bytes bound it, its time is bytes /
# bandwidth: the table takes the fraction of the read roof the best step reached at the longest length
# on the record on screen, times the Orin's datasheet bandwidth. Where that record's read-only floor was
# bound by launch and ramp instead, the bytes-only time is only a lower bound, and the table says so.
# Step 05's rule gives the chunk count for the Orin's SMs (and the blocks per SM ptxas allows on sm_87).
# The datasheet figures (`kernellab.device.ORIN_SMS`, `ORIN_PEAK_GBPS`) are named in the table's `source`.

# %%
A.orin_decode_model(dec)

# %% [markdown]
# ## Other GPUs: every record side by side
# The sentences above speak of one GPU: this one when it is live, else the reference record. Every
# other record (and this GPU, when live) is set side by side here, case by case: the fastest step on
# the GPU on screen, its time and fraction of the roof on each GPU, and the fastest library call's time.

# %%
A.other_gpus(dec, roof="read")

# %% [markdown]
# ## Exercise: write the split-KV merge
# Write the kernel that merges a head's chunk partials: `part_o` [H, C, 128] float32 (each
# chunk's normalised output), `part_lse` [H, C] float32 (each chunk's base-2 log-sum-exp; an empty
# chunk has $-\infty$ and zeros). Write `o` [H, 128] float32. Use one block per head and one thread
# per output column. Use the combine rule of step 03: $M = \max_c \mathrm{lse}_c$, $w_c =
# 2^{\mathrm{lse}_c - M}$, $o = \sum_c w_c o_c / \sum_c w_c$. It is graded against float64 on 32 heads ×
# 64 chunks, a third of them empty, and timed against the lab's merge kernel.

# %%
GRADE = dict(
    make_input=lambda: A.make_partials((A.HQ, 64), values="empty"),
    reference=A.merge_reference,
    grid=lambda po, pl: (po.shape[0],), block=(A.D,),
    scalars=lambda po, pl: (po.shape[1],),                       # C, the chunk count
    ptx_must_contain=["ex2.approx", ("div.rn.", "div.full.", "div.approx.", "rcp.")],   # the weights, / sum w_c
    step=("step 03's merge kernel", A.merge),
    tolerance={"rtol": 1e-4, "atol": 1e-6},   # fp32: a value near 0 is judged on its absolute error
)

# %% tags=["exercise"]
EXERCISE = r"""
extern "C" __global__ void merge_chunks(const float* part_o, const float* part_lse, float* o, int C) {
    const int h = blockIdx.x, d = threadIdx.x;
    const float* lse = part_lse + h * C;
    TODO;   // M = the largest lse of this head (an empty chunk's lse is -inf)
    TODO;   // w_c = exp2f(lse[c] - M); o = sum_c w_c * part_o[(h * C + c) * 128 + d] / sum_c w_c
    o[h * 128 + d] = 0.0f;
}
"""

# %%
kl.check.grade_exercise(EXERCISE, "merge_chunks", **GRADE)

# %% tags=["solution"]
SOLUTION = r"""
extern "C" __global__ void merge_chunks(const float* part_o, const float* part_lse, float* o, int C) {
    const int h = blockIdx.x, d = threadIdx.x;
    const float* lse = part_lse + h * C;
    float M = -__int_as_float(0x7f800000);
    for (int c = 0; c < C; ++c) M = fmaxf(M, lse[c]);
    float w = 0.0f, a = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float e = exp2f(lse[c] - M);      // an empty chunk: exp2(-inf) = 0
        w += e;
        a += e * part_o[((size_t)h * C + c) * 128 + d];
    }
    o[h * 128 + d] = a / w;
}
"""
kl.check.grade_exercise(SOLUTION, "merge_chunks", strict=True, **GRADE)

# %% [markdown]
# ## What limits each step
# * **Decode 01**: the scores' round trip and three launches, then 32 blocks walking the cache alone.
# * **Decode 02**: one block per query head, 32 blocks: on a GPU with more SMs than that, SMs idle
#   (step 03 against 02, above, measures what more blocks are worth).
# * **Decode 03**: four reads of each KV head (one per query head of its group), which would cost DRAM
#   traffic once the cache outgrows L2: the hypothesis step 04 against 03 tests above, beside the
#   cache's bytes and the L2 (no L2 counter is recorded).
# * **Decode 04–05**: two changes, each credited only by its ablation (above, given the other); the
#   counters' verdict is above too. Each key costs CUDA-core instructions (dot products, shuffles,
#   rescales): tensor cores for the 4-head GQA group (as FlashInfer does) are the next step to try,
#   not measured here.
# * **Prefill 01**: the $N^2$ bytes of the scores. **12 → 13**: its ablation, above. **11**: below.
#   **13–15**: the counters' verdicts above. Hopper's asynchronous `wgmma` (which FlashAttention-3
#   issues) is not used here: one candidate for the remaining gap to torch SDPA, not measured here;
#   the backend torch picked is named above on a GPU (`show_sdpa_backend`).

# %%
A.say_limits(pf)
