"""Lab 08's baselines on the record (make bench), on the same weights as our decoder, in one run:
decoder_torch.csv (our token step beside the torch.compile decoder and transformers), decoder_prefill.csv
(time to the first token beside transformers' prefill) and decoder_sizes.csv (every Qwen3 size and
Qwen2.5-7B per path). The models themselves are in torch_models.py (re-exported here: the names lab 08
and a saved notebook read as torch_decoder.X)."""
from __future__ import annotations

import numpy as np

from .core.family import Family, Target
from .core.results import one_source, pick, print_once, ratio_band
from .decoder import QWEN3_8B, RECORD_CONTEXTS, Config, Decoder, ctx_case, step_name, token_steps
from .torch_models import (  # noqa: F401
    WIDE, TorchQwen3, gpu_check, transformers_check, transformers_model, transformers_on_gpu, transformers_step,
    weights_of)


# ---- the baselines, timed beside our token step (make bench: decoder_torch.csv) ------------------------------------

NAME = "decoder_torch"
TORCH_COMPILED = "torch.compile decoder (graph)"   # TorchQwen3, gpt-fast style
TRANSFORMERS = "transformers (eager)"              # Qwen3ForCausalLM, fp16, as a user runs it
OURS = step_name("float16", "graph")


def baseline_rows(cfg: Config = QWEN3_8B, contexts=(1, 512), layers: int | None = None, reps: int = 20) -> list:
    """Live, in one run on one set of fp16 weights (the torch models read them as views): our graph-replayed token
    step, the torch decoder compiled and captured as one CUDA graph (gpt-fast's recipe), and transformers, eager,
    each timed by bench.wall. A baseline that is not installed, or fails, prints why; the others are kept."""
    from dataclasses import replace
    import cupy
    from .core.bench import roof_values, wall
    from .decoder import _row, step_rows
    read = roof_values().get("read_gbps", float("nan"))
    cfg = replace(cfg, layers=layers) if layers else cfg
    dec = Decoder(cfg, None, "float16", capacity=max(contexts) + 8)
    rows = step_rows(dec, contexts, reps, modes=("graph",))
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed (KERNELLAB_EXTRAS=peers): no torch baselines")
        return rows
    W = weights_of(dec)
    for n in contexts:
        try:
            m = TorchQwen3(cfg, W, capacity=n + 8)
            replay, _, pos, _ = m.graphed()
            pos.fill_(n - 1)
            rows.append(_row(cfg, TORCH_COMPILED, "float16", n, "graph", wall(replay, reps=reps, flush=False), reps, read))
        except Exception as e:                       # noqa: BLE001  (one baseline never stops the others)
            print(f"{TORCH_COMPILED} at context {n} failed: {type(e).__name__}: {e}")
        m = replay = None
        torch.cuda.empty_cache()
    m = transformers_on_gpu(cfg, W)
    if m is None:
        print_once("SKIPPED: transformers is not installed (KERNELLAB_EXTRAS=peers)")
    for n in contexts if m is not None else ():
        try:
            call, reset = transformers_step(m, n)
            r = max(5, reps // 4)
            rows.append(_row(cfg, TRANSFORMERS, "float16", n, "eager", wall(call, reps=r, flush=False, before=reset), r, read))
        except Exception as e:                       # noqa: BLE001
            print(f"{TRANSFORMERS} at context {n} failed: {type(e).__name__}: {e}")
    del m, dec
    torch.cuda.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()
    for r in rows:
        r["lab"] = NAME
    return rows


def measure_baselines(**kw):
    """baseline_rows live, or the recorded rows (decoder_torch.csv), or a loud skip: the one switch."""
    from .core.results import live_or_recorded
    return live_or_recorded(NAME, "our fp16 token step beside a torch.compile'd torch decoder and transformers' "
                            "Qwen3ForCausalLM, on the same weights, in one run", lambda: baseline_rows(**kw))


VS_COMPILED = 1.3       # issue 38: the token step at least 1.3x the torch.compile decoder, at contexts 1, 512 and 4096


def _vs(name, context=512, floor=False):
    """time(baseline) / time(our step) at `context`; floor=True: with our step at the read roof
    (its time x its fraction of the roof): the most any decoder could score against this baseline."""
    def m(df):
        if not floor:
            return ratio_band(df, OURS, name, ctx_case(context))
        at_roof = pick(df, OURS, "median_us", case=ctx_case(context)) * pick(df, OURS, "frac_read", case=ctx_case(context))
        return pick(df, name, "median_us", case=ctx_case(context)) / at_roof
    return m


BASELINES = Family(
    name=NAME, kernels="decoder", roof="read", record=lambda: measure_baselines(contexts=RECORD_CONTEXTS),
    steps=token_steps,
    targets=(*(Target(f"fp16 token step (graph) vs the torch.compile decoder, tokens/s, context {n}",
                      _vs(TORCH_COMPILED, n), VS_COMPILED, floor=_vs(TORCH_COMPILED, n, floor=True)) for n in (1, 512, 4096)),
             Target("fp16 token step (graph) vs transformers eager, tokens/s, context 512", _vs(TRANSFORMERS), 10.0,
                    floor=_vs(TRANSFORMERS, floor=True))),
    about="lab 08: the Qwen3-8B fp16 token step against torch.compile (gpt-fast style) and transformers, same weights")


# ---- time to first token: our prefill beside transformers' (make bench: decoder_prefill.csv) ------------------------

PREFILL_NAME = "decoder_prefill"
OURS_PREFILL = "our prefill (GEMMs + causal flash)"
TRANSFORMERS_PREFILL = "transformers (sdpa) prefill"
PROMPTS = (16, 512, 4096)


def prefill_rows(cfg: Config = QWEN3_8B, prompts=PROMPTS, reps: int = 10) -> list:
    """Live, in one run on one set of fp16 weights: the time to the first token of a prompt of n tokens (bench.wall),
    our Decoder.prefill (the logits of the last token and its argmax) and transformers' forward with a fresh cache
    and logits_to_keep=1 (what its generate does first), SDPA attention."""
    import cupy
    from .attention import causal_flops
    from .core.bench import wall
    dec = Decoder(cfg, None, "float16", capacity=max(prompts) + 8)
    W = weights_of(dec)
    params = sum(int(np.prod(a.shape)) for k, a in W.items() if "embed_tokens" not in k)
    rows = []

    def row(name, n, t):
        fl = 2.0 * params * n + cfg.layers * causal_flops(n, cfg.heads, cfg.head_dim)
        return {"lab": PREFILL_NAME, "case": f"prompt {n}", "name": name, "kind": "e2e", "dtype": "float16",
                "context": n, "layers run": cfg.layers, "median_us": t["median_us"], "p10_us": t["p10_us"],
                "p90_us": t["p90_us"], "reps": reps, "host_us": t["host_us"], "tflops": fl / t["median_us"] / 1e6}
    ids = {n: np.random.default_rng(n).integers(0, cfg.vocab, n) for n in prompts}
    for n in prompts:
        rows.append(row(OURS_PREFILL, n, wall(lambda: dec.prefill(ids[n]), reps=reps, flush=False)))
    try:
        import torch
        import transformers as tf
    except ImportError:
        print("SKIPPED: torch / transformers are not installed (KERNELLAB_EXTRAS=peers): no transformers prefill")
        return rows
    m = transformers_on_gpu(cfg, W)
    for n in prompts:
        tid = torch.from_numpy(ids[n])[None].cuda()

        def call():
            with torch.inference_mode():
                m(tid, past_key_values=tf.DynamicCache(), use_cache=True, logits_to_keep=1)
        try:
            rows.append(row(TRANSFORMERS_PREFILL, n, wall(call, reps=reps, flush=False)))
        except Exception as e:                       # noqa: BLE001
            print(f"{TRANSFORMERS_PREFILL} at prompt {n} failed: {type(e).__name__}: {e}")
    m = dec = None
    torch.cuda.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def measure_prefill(**kw):
    """prefill_rows live, or the recorded rows (decoder_prefill.csv), or a loud skip."""
    from .core.results import live_or_recorded
    return live_or_recorded(PREFILL_NAME, "time to the first token: our prefill beside transformers' (sdpa), on the "
                            "same fp16 weights, in one run", lambda: prefill_rows(**kw))


def _ttft_vs(n):
    return lambda df: ratio_band(df, OURS_PREFILL, TRANSFORMERS_PREFILL, f"prompt {n}")


PREFILL = Family(
    name=PREFILL_NAME, kernels="attention", record=lambda: measure_prefill(),
    targets=tuple(Target(f"time to first token, transformers (sdpa) / ours, prompt {n}", _ttft_vs(n), 1.0)
                  for n in PROMPTS),
    about="Qwen3-8B fp16 time to the first token: prompts of 16, 512 and 4096 tokens")


# ---- every size: tokens/s per model and path (make bench: decoder_sizes.csv) ---------------------------------------

SIZES_NAME = "decoder_sizes"


def size_name(model: str, what: str) -> str:
    return f"{model}: {what}"


def size_rows(models=None, paths=("float16", "w8a16", "int4"), context: int = 512, reps: int = 10) -> list:
    """Live, per model (decoder.fit.MODELS: every Qwen3 size and Qwen2.5-7B that fits this GPU) and path: our
    graph-replayed token step at `context` and its read-only floor; on the fp16 weights, in the same run,
    transformers eager. Random weights drawn on the GPU; a model that does not fit is skipped with the
    numbers (decoder.fit.check_fits)."""
    import cupy
    from .core.bench import roof_values, wall
    from .decoder import floor_name, floor_rows, step_rows
    from .decoder.fit import MODELS, check_fits
    read = roof_values().get("read_gbps", float("nan"))
    rows = []
    for model, cfg in (models or MODELS).items():
        for path in paths:
            try:
                check_fits(cfg, path, context + 8)
            except ValueError as e:
                print(f"{model} {path}: skipped, {e}")
                continue
            dec = Decoder(cfg, None, path, capacity=context + 8)
            got = step_rows(dec, (context,), reps, modes=("graph",), name=size_name(model, f"{path} (graph)"))
            got += floor_rows(dec, context, reps)
            got[-1]["name"] = size_name(model, floor_name(path))
            if path == "float16":
                got += _peer_rows(cfg, dec, model, context, reps, read, wall)
            for r in got:
                r.update(lab=SIZES_NAME, model=model)
            rows += got
            dec = None
            cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _peer_rows(cfg, dec, model, context, reps, read, wall) -> list:
    """transformers eager on `dec`'s fp16 weights (the torch.compile decoder is timed at 8B only: its
    compile takes about a minute per model)."""
    try:
        import torch
    except ImportError:
        print_once("SKIPPED: torch is not installed (KERNELLAB_EXTRAS=peers): no transformers per size")
        return []
    from .decoder import _row
    m, rows = transformers_on_gpu(cfg, weights_of(dec)), []
    if m is not None:
        call, reset = transformers_step(m, context)
        r = max(5, reps // 4)
        rows.append(_row(cfg, size_name(model, TRANSFORMERS), "float16", context, "eager",
                         wall(call, reps=r, flush=False, before=reset), r, read))
    m = None
    torch.cuda.empty_cache()
    return rows


def measure_sizes(**kw):
    """size_rows live, or the recorded rows (decoder_sizes.csv), or a loud skip."""
    from .core.results import live_or_recorded
    return live_or_recorded(SIZES_NAME, "every Qwen3 size and Qwen2.5-7B: our token step per path beside its floor, "
                            "transformers and the torch.compile decoder, in one run", lambda: size_rows(**kw))


def sizes_table(sz):
    """One row per (model, path) of the device on screen: tokens/s of our graph step, its fraction of the
    read roof, its floor's tokens/s (the most any decoder could do here), and transformers' tokens/s."""
    import pandas as pd
    d = one_source(sz) if sz is not None and len(sz) else None
    rows = []
    for model in (dict.fromkeys(d["model"]) if d is not None and len(d) else ()):
        m = d[d["model"] == model]
        for path in dict.fromkeys(m["path"].dropna()):
            ours = size_name(model, f"{path} (graph)")
            if ours in set(m["name"]):
                rows.append({"model": model, "path": path, "tokens/s": pick(m, ours, "tokens/s"),
                             "frac_read": pick(m, ours, "frac_read"),
                             "floor tokens/s": pick(m, size_name(model, f"{path} read-only floor (graph)"), "tokens/s"),
                             "transformers tokens/s (fp16)": pick(m, size_name(model, TRANSFORMERS), "tokens/s"),
                             "device": d["device"].iloc[0], "source": d["source"].iloc[0]})
    return pd.DataFrame(rows)


SIZES = Family(name=SIZES_NAME, kernels="decoder", roof="read", record=lambda: measure_sizes(),
               about="tokens/s of every Qwen3 size and Qwen2.5-7B per path, context 512")

FAMILIES = [BASELINES, PREFILL, SIZES]
