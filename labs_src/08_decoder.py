# %% [markdown]
# # Lab 08: a Qwen3 decoder, end to end, from the course's kernels
#
# Every seed report ends the same way: with the engine's **tokens per second**. Qwen3-8B decodes
# at about 10 tokens/s in fp16 on the Orin, its AWQ build at about the same speed, and each
# report's optimisations move that figure by a few percent. So the question the seeds answer,
# and this lab asks again, is: **how fast can this chip decode, and which kernel matters?**
#
# A decode step at batch 1 is a chain of matrix-vector products: every weight of the model is
# read once per token, and almost nothing is reused. So before timing anything, count the bytes.
# Then build the decoder from the kernels of labs 02, 04 and 07, plus the four small kernels
# still missing, check it against a float64 reference, and time one token.
#
# **In this lab you will**
# * count the bytes a token must read (every weight once, the KV cache, the logits) for fp16,
#   W8A16 and int4, and turn them into the tokens/s a GPU's bandwidth allows;
# * run a float64 reference of Qwen3 (one layer, a token step with a KV cache, greedy decoding),
#   check its KV cache against the whole sequence at once, and derive the error fp16 storage allows;
# * write the missing kernels: SiLU × up, the per-head q/k RMSNorm, the embedding row from a
#   device-side token id, and a greedy argmax with numpy's tie rules;
# * assemble the token step so that one CUDA graph replays every token, and see where its time goes;
# * put an Orin on paper beside the seeds' own tokens/s;
# * fuse SiLU × up into the down GEMV yourself.
#
# **Prerequisites:** lab 00 (roofs), lab 02 (fused add + RMSNorm), lab 04 (GEMV, quantised
# weights, the logits head), lab 07 (RoPE, KV cache, decode attention). **Expected time:** 60 minutes.

# %%
import numpy as np
import pandas as pd

import kernellab as kl
from kernellab.core import build, results
from kernellab import decoder as D
kl.banner()

# %% [markdown]
# ## Part 1: the bytes of one token
# Qwen3-8B: hidden 4096, 36 layers, 32 query heads and 8 KV heads of 128, FFN 12288, a vocabulary
# of 151936 and an untied LM head. In each layer the decoder runs four GEMVs: q, k and v fused into
# one matrix, the o projection, gate and up fused into one matrix, and down. One token must read
# every one of those weights once, the LM head, one row of the embedding, the KV cache up to the
# current length, and write and read the logits. The model below counts exactly that, and the
# quantised paths count lab 04's own formats (int8 with an fp32 scale per 128 weights; int4 with
# an fp16 scale and a uint8 zero per 128).

# %%
cfg = D.QWEN3_8B
table = D.bytes_table(cfg, contexts=(1, 512, 4096))
table.round(4)

# %%
D.say_bytes(cfg)


# %% [markdown]
# A GPU that reads at R GB/s can therefore decode at most R / (GB per token) tokens per second,
# whatever its kernels. That ceiling is the yardstick for the rest of the lab: a token step is
# judged by the fraction of the read roof it reaches (bytes per token ÷ (time × read roof)).
#
# ### What the seeds measured
# The seeds report Qwen3-8B's decode speed on their Orin (from `docs/claims.csv`). Below the table, what this lab's
# bytes model makes of their best figures: a model of what the seeds' engines moved, not a measurement. Where seed
# 002's own GEMV time allows fewer tokens/s than the seeds report, their kernel times and their tokens/s cannot both
# hold for this model on one bandwidth; this lab does not reconcile them, and quotes each as the seed wrote it.

# %%
seeds = D.seed_figures()
seeds

# %%
D.say_seeds(seeds)


# %% [markdown]
# ## Part 2: the float64 reference
# Qwen3's decoder layer, for one token at position $p$:
#
# $$x = \mathrm{RMSNorm}(h),\ q, k, v = W_{qkv} x,\ q, k = \mathrm{RoPE}_p(\mathrm{RMSNorm}_{head}(q, k)),\
# o = \mathrm{attn}(q, K_{\le p}, V_{\le p}),\ h \mathrel{+}= W_o o,$$
# $$x = \mathrm{RMSNorm}(h),\ h \mathrel{+}= W_{down}\,(\mathrm{SiLU}(W_{gate} x) \odot W_{up} x).$$
#
# The per-head RMSNorm of q and k (`q_norm`, `k_norm`) is what Qwen3 adds to the usual
# Llama-style layer. The reference runs it in float64 on a small config: Qwen3-8B's heads
# (32 × 128, 8 KV heads, which lab 07's kernels are written for), a residual width of 512 and 4
# layers, with random weights from a fixed seed.

# %%
small = D.SMALL
W = D.random_weights(small, seed=0)
prompt = [11, 200, 3071, 5]
new, logits = D.reference_generate(small, W, prompt, 6)
print(f"{small.name}: prompt {prompt} -> greedy tokens {new}")

# %% [markdown]
# ### Against a real client: transformers
# A reference we wrote ourselves could share our misreadings of the model. transformers'
# `Qwen3ForCausalLM`, loaded with the same random weights, is the model as its authors ship it.
# Both run in float64 (transformers normalises in float32, so agreement reads ~1e-7), at two
# seeds and two configs: the teacher-forced logits over 24 positions, and 12 greedy tokens.
# Without transformers (the optional `peers` extra) the cell says so; `tests/test_decoder.py`
# also checks the checkpoint loader against transformers' own `save_pretrained`.

# %%
from kernellab import torch_decoder as T

hf = [t for t in (T.transformers_check(c) for c in (D.TINY, small)) if t is not None]
pd.concat(hf, ignore_index=True) if hf else None

# %% [markdown]
# The KV cache is an optimisation, not a different model: decoding one token at a time against
# the cache must give the logits that the whole sequence gives at once (causal attention over a
# matrix of scores, the way a prefill computes it).

# %%
full = D.reference_sequence(small, W, prompt + new[:-1])
kl.say(f"KV-cache decode vs the whole sequence at once: max |difference| of the logits "
       f"**{np.abs(full - logits).max():.1e}** (float64 rounding), over {full.shape[0]} positions.")

# %% [markdown]
# ### How far may fp16 storage move the logits?
# The GPU stores every intermediate tensor in fp16 and sums in fp32. Each store rounds with a
# relative error of at most $u = 2^{-11}$; with RMSNorm'd inputs and unit-scale weights each of
# those errors reaches the logits with a gain of about 1, so the logits' normwise relative error
# is at most (stores on the path) × $u$: lab 06's argument, applied per layer. The reference can
# emulate the rounding (`fp16_storage=True`), which checks that argument on these weights.

# %%
new16, logits16 = D.reference_generate(small, W, prompt, 6, fp16_storage=True)

# %%
D.say_fp16_storage(small, new, logits, new16, logits16)


# %% [markdown]
# ## Part 3: the kernels still missing
# Everything heavy is already in the course: the GEMVs (lab 04), the fused residual add + RMSNorm
# (lab 02), RoPE with the KV-cache append and decode attention (lab 07). Four small kernels
# remain. Each moves kilobytes, so each only has to be correct on every size and value, move 16
# bytes per load where it can, and take whatever changes per token from device memory, so a
# CUDA graph can replay it.
#
# ### SiLU × up
# Between the gate/up GEMV and the down GEMV. 8 elements per thread, one 16-byte load of each
# input; a scalar tail for the last n % 8, and a scalar path for misaligned bases.

# %%
build.show("decoder", "01_silu_mul")
kl.check.variants(D.SILU_MUL)

# %% [markdown]
# ### The per-head q/k RMSNorm
# 40 rows of 128 (32 query heads, 8 key heads), one warp per row: the sum of squares is one warp
# butterfly, with no shared memory and no barrier.

# %%
build.show("decoder", "02_head_norm")
kl.check.variants(D.HEAD_NORM)

# %% [markdown]
# The token step runs this norm fused with lab 07's RoPE and KV-cache append: one launch a layer in place
# of two (`decoder_07_qk_norm_rope`, below). `tests/test_fused.py` checks it against float64 on the CPU;
# the Amdahl table below times the token both ways.

# %%
build.show("decoder", "07_qk_norm_rope")

# %% [markdown]
# ### GEMVs that build their own input (steps 08–12)
# Lab 04's step 27 gives every row a warp, and each warp reads the whole input vector. So the
# producers of that vector can move into the GEMV itself. Step 08 forms RMSNorm(h)·w as it reads
# h: the warp sums h² on the way and scales its dot product once at the end. Step 09 adds the
# residual in the epilogue, in place (h += W·x), so no separate add is needed before the next norm.
# Together they take the two fused add + RMSNorm launches out of every layer.
#
# Step 10 also moves SiLU(gate)·up into the down GEMV. Every warp then pays for the exponentials
# of the whole vector. Step 11 reads the o projection's weights into L2 on a second stream while
# attention runs.
#
# Step 12 changes how the GEMVs are launched, not what they compute. Between two kernels the
# weight stream stops: a kernel starts only after the one ahead has finished. But a GEMV's
# weights depend on nothing earlier in the token; only its x does. With programmatic dependent
# launch (sm_90, `kernellab/core/pdl.py`) the GEMV may start while the kernel ahead still runs.
# It issues its first weight loads, then waits (`griddepcontrol.wait`) before it reads x. The
# token step launches this way only inside its CUDA graph. The Amdahl table below times each
# change alone, and `tests/test_gpu_fused_gemv.py` checks every step against float64.

# %%
build.show("decoder", "08_norm_gemv")
build.show("decoder", "11_l2_prefetch")
build.show("decoder", "12_pdl_norm_gemv")

# %% [markdown]
# ### The embedding row, from a device-side token id
# The token comes from the previous step's argmax, in device memory. An id outside the vocabulary
# cannot raise from inside a graph, so the kernel writes a row of NaN instead of reading out of
# bounds. From Python, a bad id is a `ValueError` before any launch.

# %%
build.show("decoder", "03_embed")
kl.check.variants(D.EMBED)

# %% [markdown]
# ### Greedy argmax, with numpy's rules
# `numpy.argmax` returns the first NaN if there is one, and otherwise the lowest index of the
# largest value (so −0.0 and +0.0 tie, and a row of −∞ gives 0). The kernels compare (value, index)
# pairs in exactly that order. Because it is a strict total order, the answer does not depend on
# which threads, warps and blocks meet first. Pass 1 spreads the logits over many blocks; pass 2
# reduces their pairs in one block, writes the token, and moves the position and length on by one.

# %%
build.show("decoder", "04_argmax_blocks")
build.show("decoder", "05_argmax_final")
kl.check.variants(D.ARGMAX)
print("pass-1 blocks for Qwen3's vocabulary:", D.argmax_blocks(cfg.vocab))

# %% [markdown]
# ## Part 4: one token on the GPU
# `Decoder.step` is the whole token, launch by launch. With the separate launches the residual stream
# ping-pongs between two buffers (each fused add + RMSNorm reads one and writes the other), the quantised paths convert
# their fp32 GEMV outputs with lab 04's conversion step, and the token, the position and the
# length stay on the device. So `Decoder.graph()` captures one step, and each replay decodes the
# next token.

# %%
build.show_python(D.Decoder.step)

# %% [markdown]
# On the fp16 path, when every weight has enough rows to fill the GPU, the step is `_step_fused`.
# It keeps one residual stream h: step 09 adds into it, and step 08 normalises it inside the QKV,
# gate/up and logits GEMVs.

# %%
build.show_python(D.Decoder._step_fused)

# %% [markdown]
# Before any GPU runs it, the same `step` can run on NumPy: `Decoder(..., emulate=True)` passes
# every call through `NumpyOps`, which does what each launcher does (fp16 tensors, fp32 logits,
# float64 arithmetic). That checks the wiring (the views into the QKV and gate/up outputs, the
# residual stream, the position, length, token and history on the "device") against the
# float64 reference with fp16 storage. It does not check the kernels: Part 3 and the GPU tests do.

# %%
emu = D.Decoder(small, W, "float16", capacity=16, emulate=True)
emu_new = emu.generate(prompt, 6, use_graph=False)
emu_z = []
emu.reset()
for t in prompt + new16[:-1]:
    emu.feed(t)
    emu_z.append(emu.logits.copy())
kl.say(f"The emulated token step generates {emu_new} ({'the same tokens as' if emu_new == new16 else 'NOT the tokens of'} "
       f"the fp16-storage reference); its logits differ from the reference's by **{D.rel_err(emu_z, logits16):.1e}** "
       f"(normwise, relative: the fp32 rounding of the logits).")

# %% [markdown]
# ### On the GPU, against transformers at Qwen3-8B's widths
# The float64 checks above run at small widths. At the real widths (hidden 4096, FFN 12288,
# vocabulary 151936; 2 layers, so it fits any GPU with 8 GB), our fp16 step meets transformers'
# `Qwen3ForCausalLM` in fp16 on the same device and the same weights (views of our arrays), at two
# seeds. Each computes the float64 model within `error_bound` of the exact logits, so the two may
# differ by twice that: the teacher-forced logits over 64 positions are held to it. Greedy tokens
# must agree for as long as transformers' top-2 margin exceeds twice the measured difference of
# the logits at that step ("decided steps"); after that, either token is a fair answer.

# %%
kl.device.live_only("compares our GPU decoder's logits and greedy tokens with transformers' on the GPU",
                    lambda: T.gpu_check(T.WIDE, seeds=(1, 2)))

# %% [markdown]
# ### Tokens per second, eager and graph-replayed, against torch
# On a GPU this times the Qwen3-8B token step (random weights drawn on the device) on the fp16,
# W8A16 and int4 paths at contexts 1 and 512 (`make bench` also records 4096), eager and as one
# CUDA graph, and sets the bytes model against the time: the fraction of the read roof the step
# reaches. In the same run, on the same fp16 weights (views, not copies), two torch decoders:
# * `torch.compile decoder (graph)`: a compact Qwen3 in torch (`kernellab.torch_decoder`, checked
#   against the float64 reference, which transformers checks in turn), its layer compiled by
#   `torch.compile` and the whole token captured as one CUDA graph with a static KV cache: the
#   recipe of gpt-fast;
# * `transformers (eager)`: `Qwen3ForCausalLM` as a user runs it.
#
# The same run also times the **Amdahl table's swaps** (below). On a GPU with too little memory for
# 36 layers, pass `layers=` to run fewer (the row says how many) and read the result per layer.

# %%
tps = D.measure_tokens_per_s(cfg=cfg, paths=D.PATHS, contexts=(1, 512), swaps=D.SWAPS)
results.table(tps, ["case", "name", "layers run", "median_us", "p10_us", "p90_us", "host_us", "tokens/s", "frac_read"])

# %%
D.say_tokens(tps)

# %% [markdown]
# Lab 04 times each GEMV alone, at the shapes it records (not the fused QKV 6144×4096 and gate/up
# 24576×4096), while the token's floor reads every weight array, scales and zeros included, in one graph: the two
# fractions are not of the same launches. Fewer bytes per GEMV also make the fixed launch and ramp cost of each of a
# token's launches weigh more (their count is at the end of the lab). The paths against each other: the targets table below.
#
# Now the two torch decoders, on the same fp16 weights, timed in one run beside our graph-replayed step:

# %%
tb = T.measure_baselines(cfg=cfg, contexts=(1, 512))
results.table(tb, ["case", "name", "median_us", "p10_us", "p90_us", "host_us", "tokens/s", "frac_read"])

# %%
D.say_vs_torch(tb, T.TORCH_COMPILED, T.TRANSFORMERS)


# %% [markdown]
# The targets for the token step, judged by the one rule from the results above. The
# column "at the floor" is the same figure with the **read-only floor** in place of the step: one
# CUDA graph of lab 00's fastest reader over each of the token's weight arrays, computing nothing
# (and, against the torch decoders, our step at the read roof: their rows come from another run,
# which times no floor). It is the best any decoder could score
# on this GPU: a target the floor misses is out of reach here, whatever the kernels, and is given as
# our step's fraction of the floor beside the roof figure, not as "missed". So how far a target over
# transformers can go is set by transformers' own speed on that GPU and host.

# %%
D.targets_table(tps, tb, T.BASELINES)

# %% [markdown]
# ### Amdahl, end to end
# Each lab made one op faster. What does that do to a token? Each row below runs the whole
# graph-replayed token step (context 512) twice, with one op run by an earlier step of its lab
# ("before") and by a later one ("after"), and nothing else changed. The gain is time(before) /
# time(after) of the whole token: Amdahl's law says it is small wherever the op's share of the
# token is small, however much faster the kernel got. Where a seed claims an end-to-end gain for
# the same change, the claims table below judges it with this measurement, never with a kernel ratio.

# %%
swaps, e2e = D.amdahl(tps)
swaps

# %% [markdown]
# The same in one picture: each path's tokens/s beside its read-only floor and the torch decoders on the
# fp16 weights, and each swap's end-to-end gain (a gain near 1.0 is Amdahl's law at work).

# %%
D.plot_tokens(tps, tb, swaps)

# %% [markdown]
# ### Where the gap to the floor goes
# Each row below replays the token with one non-GEMV op left out. That is for timing only: the
# tokens come out wrong. The time each op costs, as a share of the gap between the token and its
# read-only floor, shows what is worth fusing, overlapping or making faster. The last row leaves
# out all three, so what remains is the GEMVs alone against their floor.

# %%
D.gap(tps)

# %% [markdown]
# The seeds' claims about the decoder, each judged by the one rule where this lab measures it, or
# with the reason it cannot be (most need the seeds' whole engine on an Orin):

# %%
claims = D.claims_table(tps, e2e, D.FAMILIES)
results.claims_brief(claims)                  # every claim with its reason in full: claims


# %% [markdown]
# ### Where a token's time goes
# One eager step of a 2-layer Qwen3-8B-shaped decoder, each launch timed on its own with CUDA
# events. The per-layer ops repeat in every layer, so 36 layers take 18 times the per-layer rows.

# %%
per_op = kl.device.live_only(
    "times each launch of one token step (2 layers of Qwen3-8B's shape, context 512) with CUDA events, "
    "and groups them by kernel (the GEMVs' share against the other kernels' own run time).",
    lambda: pd.DataFrame(D.breakdown(cfg, "float16", 512, layers=2)).groupby("kernel")["us"].agg(["count", "sum"])
    .sort_values("sum", ascending=False))
per_op

# %% [markdown]
# ### The prompt in one pass: prefill
# Feeding a prompt one token at a time costs one token step per prompt token: at 4096 tokens that is
# 4096 steps. `Decoder.prefill` runs the whole prompt at once, so its weights are read once for all
# tokens and the work is matrix-matrix (`kernellab/decoder/prefill.py`):
# * the Q, K, V, o, gate, up and down projections of every token are **GEMMs** (cuBLAS, fp16 in,
#   fp32 accumulation: lab 04's prefill route);
# * lab 07's **step 07** rotates every token's q and k and writes k and v into the KV cache, one launch;
# * lab 07's **step 16** is the flash attention of step 14 made **causal** (token *i* sees tokens
#   0..*i*; a block skips the tiles past its last row), **grouped** (query head *h* reads KV head
#   *h* / group) and at head dim 128, reading K and V straight from the cache;
# * the last token's final norm, logits and argmax are those its token step would give, so
#   decoding goes on from there with the graph-replayed token step.
#
# A GPU test (`tests/test_gpu_models.py`) checks that prefill leaves the same cache and logits as
# feeding the prompt token by token, at the widths of every Qwen3 size and Qwen2.5-7B. Below: the
# time to the first token of Qwen3-8B (fp16, random weights) at prompts of 16, 512 and 4096
# tokens, beside transformers' own prefill on the same weights (SDPA attention, a fresh cache,
# `logits_to_keep=1`: what its `generate` does first), in one run.

# %%
pt = T.measure_prefill()
results.table(pt, ["case", "name", "median_us", "p10_us", "p90_us", "host_us", "tflops"])

# %%
results.targets(T.PREFILL.targets, pt)                 # the tables' ratios, judged by the noise rule

# %% [markdown]
# ### Every Qwen3 size, and Qwen2.5-7B
# Nothing above is written for one model. `Config.from_hf` reads any dense Qwen3 or Qwen2.5
# `config.json`; lab 07's decode attention and RoPE are compiled for each model's head layout (the
# GQA group, 1 to 8 query heads per KV head, and head dim 64 or 128, passed as `-D` defines: Qwen3-14B
# has 40 query heads over 8, Qwen2.5-7B 28 over 4, a group of 7); Qwen2.5's q/k/v biases go through
# lab 03's add and its missing q/k norm is skipped. `tests/test_gpu_models.py` checks every size at
# its real widths (2 layers) against transformers. Below, on the record: tokens/s of the whole model
# at context 512 per path, its fraction of the read roof, the read-only floor of its weights (the
# most any decoder could do on this GPU), and transformers (eager, fp16) on the same weights.

# %%
sz = T.measure_sizes()
T.sizes_table(sz)

# %% [markdown]
# Which one fits **your** GPU? `decoder.choose` counts the bytes of each size and path (weights as the
# course stores them, the KV cache at the context, the workspaces and a margin) against the free memory
# (on a Jetson, the memory shared with the CPU), and picks the largest Qwen3 that fits on its most precise
# path; `Decoder` refuses a choice that does not fit before allocating anything, with the numbers. Set
# `KERNELLAB_MEMORY_CAP=8GB` to see what an 8 GB board would get.

# %%
D.fit.need_table(ctx=4096)

# %%
if kl.is_live():
    pick_cfg, pick_path, why = D.choose(ctx=4096)
    results.say(f"On this GPU: **{pick_cfg.name}, {pick_path}**. {why}")
else:
    for gb in (8, 16, 24, 80):
        pick_cfg, pick_path, why = D.choose(free=gb * 10**9, ctx=4096, staged=False)
        results.say(f"With {gb} GB free: **{pick_cfg.name}, {pick_path}**. {why}")

# %% [markdown]
# ### A prompt in, text out
# `decoder.open_model(directory)` loads a local Qwen3 or Qwen2.5 checkpoint (its `config.json`,
# `*.safetensors` and `tokenizer.json`); `decoder.generate` takes a string, prefills it, and streams
# the answer as it is decoded: greedy, or sampled on the GPU (temperature, top-k, top-p; a seed
# makes it reproducible; `kernels/decoder.cu`'s `decoder_06_sample_*` kernels), stopping at the
# model's end-of-sequence token. Set `KERNELLAB_CHECKPOINT` to a checkpoint directory to talk to
# a real model; without one, the cell runs random weights with a tokenizer built here (the words
# are nonsense, the pipeline is the real one), and says how to get a checkpoint. Without a GPU it
# runs the same calls through the NumPy emulation of the token step.

# %%
import os
from pathlib import Path
ckpt = Path(os.environ.get("KERNELLAB_CHECKPOINT", "~/models/Qwen3-0.6B")).expanduser()
if kl.is_live() and (ckpt / "tokenizer.json").exists():
    dec, tok, eos = D.open_model(ckpt, capacity=1024)
    D.generate(dec, tok, "Explain what a GEMV is in one sentence.", 64, temperature=0.7, top_k=20, top_p=0.8,
               seed=0, stream=print, eos_ids=eos, chat=True)
else:
    print(D.CHECKPOINT_NOTE)
    tcfg = D.replace(D.SMALL if kl.is_live() else D.TINY, vocab=512)     # the demo tokenizer's 512 ids
    tdec = D.Decoder(tcfg, D.random_weights(tcfg, seed=0), capacity=256, emulate=not kl.is_live())
    D.generate(tdec, D.demo_tokenizer(512), "Hello, world!", 24, temperature=0.8, top_k=40, seed=0,
               stream=print, eos_ids=[])

# %% [markdown]
# ## Part 5: an Orin on paper (a model, not a measurement)
# An AGX Orin reads at most its datasheet's bandwidth. The model divides that, and 0.75 of it (the
# fraction of the read roof this lab's token step aims for), by the bytes per token, per path and context.

# %%
orin = D.orin_model(cfg, contexts=(1, 512, 4096), fractions=(1.0, 0.75))
orin.round(2)

# %%
D.say_orin(orin, seeds)

# %% [markdown]
# ## Other GPUs: every record side by side
# The sentences above speak of one GPU: this one when it is live, else the reference record. Every
# other record (and this GPU, when live) is set side by side here: each path's graph-replayed token
# step by context, its read-only floor, and the two torch decoders on the same fp16 weights, in
# tokens/s and as a fraction of each GPU's read roof.

# %%
from kernellab.attention import other_gpus        # results.device_table, saying which records kept older rows
ours = [D.step_name(p, "graph") for p in D.PATHS] + [D.floor_name(p) for p in D.PATHS]
other_gpus(pd.concat([tps, tb[~tb["name"].isin(ours)]], ignore_index=True), roof="read",
           value="tokens/s", names=ours + [T.TORCH_COMPILED, T.TRANSFORMERS])


# %% [markdown]
# ## Exercise: fuse SiLU × up into the down GEMV
# The MLP's last two launches are SiLU × up (which writes the product to memory) and the down GEMV
# (which reads it back). Write one kernel that does both: $y_k = \sum_j W_{kj}\,\mathrm{SiLU}(g_j)\,u_j$,
# with $W$ [K, F] fp16 (row-major), gate and up [F] fp16, and y [K] fp32. Use one block of 256
# threads per row, accumulate in fp32, and finish with a warp shuffle and a shared-memory step.
# It is graded against float64 and timed against the lab's two launches.

# %%
GRADE = dict(
    make_input=D.make_silu_down,
    reference=D.reference_silu_down,
    tolerance=D.silu_down_tolerance(*D.make_silu_down()),
    grid=lambda W, g, u: (W.shape[0],), block=(256,),
    scalars=lambda W, g, u: W.shape,                            # K, F
    ptx_must_contain=["ex2.approx",                             # SiLU's expf
                      "shfl.sync", "st.shared", ("bar.sync", "barrier.sync"), "ld.shared"],   # the reduction
    step=("SiLU x up, then lab 04's fp32-out GEMV", D.silu_down_step),
)

# %% tags=["exercise"]
EXERCISE = r"""
#include <cuda_fp16.h>
extern "C" __global__ void silu_down(const __half* W, const __half* gate, const __half* up, float* y,
                                     int K, int F) {
    const int row = blockIdx.x;
    float s = 0.0f;
    TODO;   // for j = threadIdx.x, j < F, j += blockDim.x:
            //     s += W[row * F + j] * SiLU(gate[j]) * up[j]      (SiLU(g) = g / (1 + expf(-g)), in fp32)
    TODO;   // reduce s over the block (warp shuffle, then one value per warp in shared memory)
    if (threadIdx.x == 0) y[row] = s;
}
"""

# %%
kl.check.grade_exercise(EXERCISE, "silu_down", **GRADE)

# %% tags=["solution"]
SOLUTION = r"""
#include <cuda_fp16.h>
extern "C" __global__ void silu_down(const __half* W, const __half* gate, const __half* up, float* y,
                                     int K, int F) {
    __shared__ float part[32];
    const int row = blockIdx.x;
    const __half* w = W + (size_t)row * F;
    float s = 0.0f;
    for (int j = threadIdx.x; j < F; j += blockDim.x) {
        const float g = __half2float(gate[j]);
        s = fmaf(__half2float(w[j]), g / (1.0f + expf(-g)) * __half2float(up[j]), s);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) y[row] = s;
    }
}
"""
kl.check.grade_exercise(SOLUTION, "silu_down", strict=True, **GRADE)

# %% [markdown]
# ## What limits a token
# * **The bytes.** A batch-1 token reads every weight once, so no kernel makes it faster than
#   bytes ÷ read roof. The GEMVs carry nearly all of those bytes; the four kernels of Part 3 move
#   kilobytes.
# * **The launches.** Eager, each launch of a token costs host time and may leave a gap on the GPU;
#   one CUDA graph replay removes the host side (the count is below).
# * **Quantisation** cuts the weight bytes (Part 1), but only a step whose time is set by those
#   bytes gets faster: the seeds' AWQ engine, at a small fraction of the bandwidth, shows the
#   opposite case.

# %%
D.say_launches(cfg)
