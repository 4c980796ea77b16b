"""Lab 09's stage table (make bench: vlm_stages.csv): one 448 x 448 image and a 32-token question through
Qwen3-VL-8B in fp16, then 128 new tokens; ours (lab 06's tower, lab 05's scatter, lab 08's prefill and token
step) beside transformers' Qwen3VLForConditionalGeneration (SDPA) on the very same weights (random, drawn on
the GPU; transformers' tensors are views of ours), in one run.

Each stage is timed as a user calls it: bench.wall (CUDA events around the call from an idle GPU, and the
host's µs to issue it). Stages and what each is set against:
  preprocess      host: vlm.preprocess (PIL + NumPy) / transformers' PIL image processor; no GPU roof
  tower           lab 06's tower / transformers' model.visual: TFLOP/s, a fraction of the tensor roof
  scatter         the prompt's embedding rows + lab 05's scatter: bytes / the read roof
  prefill         lab 08's prefill with the M-RoPE table and DeepStack, to the first token's logits and argmax
  to first token  all of the above but preprocess, one call (VLM.prefill) / transformers' forward with
                  logits_to_keep=1 (what its generate does first): the issue's target, <= 1.0x transformers
  decode          127 graph-replayed token steps after the prompt (tokens/s), against the read roof's
                  tokens/s at that context, lab 08's token step at the same context, and transformers'
                  generate (128 new tokens less 1, per token)
The tensor roof is measured in the same run: the best of cuBLAS fp16 GEMMs 8192^3 (what a dense stage
could reach at most on this GPU; a fraction above 1 would mean the roof is wrong)."""
from __future__ import annotations

import numpy as np

from ..decoder.config import Config
from .weights import VLMConfig

NAME = "vlm_stages"
IMAGE, QUESTION, NEW = (448, 448), 32, 128
CASE = f"{IMAGE[0]}x{IMAGE[1]} image + {QUESTION} tokens"
OURS, HF = "ours", "transformers (sdpa)"
STAGES = ("preprocess", "tower", "scatter", "prefill", "to first token", "decode")
LAB08 = "lab 08 token step (graph)"
ROOF = "tensor roof: cuBLAS fp16 GEMM 8192^3"
# Qwen3-VL-8B-Instruct's config.json: the text model (Qwen3-8B's layer) and lab 06's tower, 27 blocks.
QWEN3_VL_8B = VLMConfig(
    text=Config("Qwen3-VL-8B (text)", hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, ffn=12288,
                vocab=151936, theta=5e6),
    vision_depth=27, deepstack=(8, 16, 24))


def name(who: str, stage: str) -> str:
    return f"{who}: {stage}"


def prompt(vcfg: VLMConfig, n_image: int, seed: int = 0) -> np.ndarray:
    """<|vision_start|>, n_image image tokens, <|vision_end|>, then QUESTION random text ids."""
    q = np.random.default_rng(seed).integers(0, min(vcfg.image_token_id, vcfg.text.vocab - 3), QUESTION)
    return np.array([vcfg.vision_start_id] + [vcfg.image_token_id] * n_image + [vcfg.vision_end_id] + list(q))


def test_image(h: int = IMAGE[0], w: int = IMAGE[1], seed: int = 0) -> np.ndarray:
    """A smooth RGB uint8 image with noise (the tests' drawing)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / 7 + c) * np.cos(y / 11 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


def hf_image_processor():
    """transformers' PIL image processor with Qwen3-VL's settings (5.x: Qwen2VLImageProcessorPil; 4.57: the
    slow Qwen2VLImageProcessor, which is PIL's): the one vlm.preprocess matches byte for byte."""
    from .preprocess import IMAGE_MEAN, IMAGE_STD, MAX_PIXELS, MERGE, MIN_PIXELS, PATCH, TEMPORAL
    try:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as Proc
    except ImportError:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor as Proc
    return Proc(patch_size=PATCH, temporal_patch_size=TEMPORAL, merge_size=MERGE, image_mean=list(IMAGE_MEAN),
                image_std=list(IMAGE_STD), size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS})


def hf_config(vcfg: VLMConfig):
    """transformers' Qwen3VLConfig of vcfg (lab 06's widths for the tower)."""
    import transformers as tf
    from .. import vit_block as VB
    t = vcfg.text
    rope = {"rope_type": "default", "rope_theta": t.theta, "mrope_section": list(vcfg.mrope_section),
            "mrope_interleaved": True}
    text = dict(vocab_size=t.vocab, hidden_size=t.hidden, intermediate_size=t.ffn, num_hidden_layers=t.layers,
                num_attention_heads=t.heads, num_key_value_heads=t.kv_heads, head_dim=t.head_dim, rms_norm_eps=t.eps,
                rope_parameters=rope, rope_theta=t.theta, rope_scaling=rope)
    vision = dict(depth=vcfg.vision_depth, hidden_size=VB.HIDDEN, num_heads=VB.HEADS, intermediate_size=VB.MLP,
                  out_hidden_size=t.hidden, deepstack_visual_indexes=list(vcfg.deepstack))
    return tf.Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=vcfg.image_token_id,
                            video_token_id=vcfg.image_token_id + 1, vision_start_token_id=vcfg.vision_start_id,
                            vision_end_token_id=vcfg.vision_end_id, tie_word_embeddings=t.tied)


def transformers_vlm(vlm):
    """transformers' Qwen3VLForConditionalGeneration in fp16 on the GPU, SDPA, its parameters views of `vlm`'s
    device arrays (built on the GPU, then assigned: no second copy is kept). None without transformers."""
    try:
        import torch
        import transformers as tf
    except ImportError:
        return None
    from ..torch_models import weights_of
    from .weights import text_state_dict, vision_state_dict
    cls = tf.Qwen3VLForConditionalGeneration
    with torch.device("cuda"):
        try:
            m = cls._from_config(hf_config(vlm.vcfg), dtype=torch.float16, attn_implementation="sdpa")
        except TypeError:                       # transformers 4.x spells it torch_dtype
            m = cls._from_config(hf_config(vlm.vcfg), torch_dtype=torch.float16, attn_implementation="sdpa")
    sd = {**vision_state_dict(vlm.vision), **text_state_dict(weights_of(vlm.dec))}
    m.load_state_dict({k: torch.as_tensor(v, device="cuda") for k, v in sd.items()}, strict=True, assign=True)
    torch.cuda.empty_cache()
    return m.eval()


def hf_inputs(m, ids, pv, grid) -> dict:
    """The forward's / generate's inputs on the GPU (mm_token_type_ids where this transformers takes them)."""
    import inspect

    import torch
    kw = {"input_ids": torch.tensor(ids, device="cuda")[None], "attention_mask": torch.ones(1, len(ids), device="cuda",
          dtype=torch.long), "pixel_values": torch.from_numpy(pv).to("cuda", torch.float16),
          "image_grid_thw": torch.from_numpy(np.asarray(grid)).cuda()}
    if "mm_token_type_ids" in inspect.signature(m.forward).parameters:
        kw["mm_token_type_ids"] = (kw["input_ids"] == m.config.image_token_id).long()
    return kw


def _row(who, stage, t, reps, **kw) -> dict:
    kind = {OURS: "variant", HF: "baseline"}.get(who, "e2e")     # the headline draws ours against transformers
    return {"lab": NAME, "case": CASE, "name": name(who, stage), "who": who, "stage": stage, "kind": kind,
            "median_us": t["median_us"], "p10_us": t["p10_us"], "p90_us": t["p90_us"], "reps": reps,
            "host_us": t["host_us"], **kw}


def host_time(fn, reps: int) -> dict:
    """Host-only work (no GPU): perf_counter µs, median and p10/p90 of reps after one warm-up."""
    import time
    fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e6)
    q = np.percentile(t, [50, 10, 90])
    return {"median_us": q[0], "p10_us": q[1], "p90_us": q[2], "host_us": q[0]}


def tensor_roof(reps: int = 10) -> dict:
    """The best fp16 tensor-core rate this GPU gives a plain GEMM: cuBLAS (CuPy's matmul) at 8192^3."""
    import cupy
    from ..core.bench import wall
    a = cupy.random.standard_normal((8192, 8192), dtype=cupy.float32).astype(cupy.float16)
    t = wall(lambda: a @ a, reps=reps, flush=False)
    return {**t, "tflops": 2 * 8192 ** 3 / t["p10_us"] / 1e6}


def _flops(vcfg: VLMConfig, n_patches: int, T: int) -> dict:
    """The tower's FLOPs (lab 06's work model) and the prefill's: 2 x the layers' parameters per token, the causal
    attention, and the LM head for the last token only (as both sides compute it)."""
    from ..attention import causal_flops
    from ..vit_block.report import work
    t = vcfg.text
    layer = t.hidden * (t.q_dim + 2 * t.kv_dim) + t.q_dim * t.hidden + 3 * t.hidden * t.ffn
    return {"tower": work(n_patches, layers=vcfg.vision_depth, mergers=1 + len(vcfg.deepstack))["flops"],
            "prefill": 2.0 * t.layers * layer * T + t.layers * causal_flops(T, t.heads, t.head_dim) + 2.0 * t.vocab * t.hidden}


def stage_rows(vcfg: VLMConfig = QWEN3_VL_8B, reps: int = 10, seed: int = 0) -> list:
    """Live, in one run: every stage of ours and of transformers on the same random fp16 weights (see the module's
    docstring), the decode per token, lab 08's token step at the decode's middle context, and the tensor roof."""
    import cupy
    from .. import vit_block as VB
    from ..core.bench import roof_values, wall
    from ..decoder import bytes_per_token, step_rows
    from .engine import VLM
    from .preprocess import image_tokens, preprocess
    from .weights import random_vision
    read = roof_values().get("read_gbps", float("nan"))
    img = test_image()
    pv, grid = preprocess(img)
    ids = prompt(vcfg, image_tokens(grid)[0], seed)
    T, cfg = len(ids), vcfg.text
    vlm = VLM(vcfg, random_vision(vcfg, seed, xp=cupy), None, capacity=T + NEW + 8)
    fl, roof = _flops(vcfg, int(np.prod(grid[0])), T), tensor_roof()
    rows = [{**_row(ROOF, "tensor roof", roof, 10, tflops=roof["tflops"]), "name": ROOF}]
    rows.append(_row(OURS, "preprocess", host_time(lambda: preprocess(img), reps), reps))
    feats, deep = vlm.encode(pv, grid)
    t = wall(lambda: vlm.encode(pv, grid), reps=reps, flush=False)
    rows.append(_row(OURS, "tower", t, reps, tflops=fl["tower"] / t["median_us"] / 1e6))
    t = wall(lambda: vlm.embed(ids, feats), reps=reps, flush=True)
    nbytes = 2 * 2 * T * cfg.hidden + 2 * 2 * feats.shape[0] * cfg.hidden
    rows.append(_row(OURS, "scatter", t, reps, bytes=nbytes, frac_read=nbytes / t["median_us"] / 1e3 / read))
    emb, rows_img = vlm.embed(ids, feats)
    t = wall(lambda: vlm.text_prefill(ids, emb, rows_img, deep, grid), reps=reps, flush=False)
    rows.append(_row(OURS, "prefill", t, reps, tflops=fl["prefill"] / t["median_us"] / 1e6))
    t = wall(lambda: vlm.prefill(ids, pv, grid), reps=reps, flush=False)
    rows.append(_row(OURS, "to first token", t, reps, tflops=(fl["tower"] + fl["prefill"]) / t["median_us"] / 1e6))
    rows += _decode_rows(vlm, ids, pv, grid, reps, read)
    mid = T + NEW // 2
    lab08 = step_rows(vlm.dec, (mid,), reps, modes=("graph",), name=LAB08)[0]
    rows.append(_row(LAB08, "decode", lab08, reps, context=mid, **{"tokens/s": 1e6 / lab08["median_us"]}) | {"name": LAB08})
    rows += _hf_rows(vlm, img, ids, pv, grid, fl, reps)
    for r in rows:
        if r["stage"] == "decode":
            b = bytes_per_token(cfg, "float16", mid)["total"]
            r.update(bytes=b, frac_read=b / r["median_us"] / 1e3 / read)
        if "tflops" in r and r["stage"] != "tensor roof":
            r["frac_tensor"] = r["tflops"] / roof["tflops"]
        r.update(tokens=T, image_tokens=len(feats), model=vcfg.text.name.removesuffix(" (text)"))
    vlm = feats = deep = None
    VB.engine._gpu_weights.cache_clear()
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _decode_rows(vlm, ids, pv, grid, reps, read) -> list:
    """Ours: NEW - 1 graph-replayed token steps after the prompt, per token (the first step eager, as generate)."""
    T, dec = len(ids), vlm.dec
    vlm.prefill(ids, pv, grid)
    dec.step()
    run = dec.graph()
    t = wall_steps(lambda: [run() for _ in range(NEW - 1)], before=lambda: dec.at(T), reps=max(3, reps // 3))
    dec._graph = None
    return [_row(OURS, "decode", t, max(3, reps // 3), context=T + NEW // 2, **{"tokens/s": 1e6 / t["median_us"]})]


def wall_steps(fn, before, reps: int, n: int = NEW - 1) -> dict:
    """bench.wall of a call that runs n tokens, per token."""
    from ..core.bench import wall
    t = wall(fn, reps=reps, flush=False, before=before)
    return {k: v / n for k, v in t.items()}


def _hf_rows(vlm, img, ids, pv, grid, fl, reps) -> list:
    """transformers on the same weights: its image processor (host), its tower, its forward to the first token
    (logits_to_keep=1), and its generate's decode per token ((time of NEW new tokens - time of 1) / (NEW - 1))."""
    from ..core.bench import wall
    from ..core.results import print_once
    try:
        import torch
        from PIL import Image
    except ImportError as e:
        print_once(f"SKIPPED: {e.name} is not installed (KERNELLAB_EXTRAS=peers): no transformers stages")
        return []
    m = transformers_vlm(vlm)
    rows, proc, pil = [], hf_image_processor(), Image.fromarray(img)
    rows.append(_row(HF, "preprocess", host_time(lambda: proc(images=[pil], return_tensors="pt"), reps), reps))
    kw = hf_inputs(m, ids, pv, grid)
    with torch.inference_mode():
        t = wall(lambda: m.model.visual(kw["pixel_values"], kw["image_grid_thw"]), reps=reps, flush=False)
        rows.append(_row(HF, "tower", t, reps, tflops=fl["tower"] / t["median_us"] / 1e6))
        t = wall(lambda: m(**kw, use_cache=True, logits_to_keep=1), reps=reps, flush=False)
        rows.append(_row(HF, "to first token", t, reps, tflops=(fl["tower"] + fl["prefill"]) / t["median_us"] / 1e6))
        gen = {n: wall(lambda n=n: m.generate(**kw, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0),
                       reps=2, flush=False) for n in (1, NEW)}
    per = {k: (gen[NEW][k] - gen[1][k]) / (NEW - 1) for k in ("median_us", "p10_us", "p90_us", "host_us")}
    per["p10_us"], per["p90_us"] = sorted((per["p10_us"], per["p90_us"]))
    rows.append(_row(HF, "decode", per, 2, context=len(ids) + NEW // 2, **{"tokens/s": 1e6 / per["median_us"]}))
    m = None
    torch.cuda.empty_cache()
    return rows


def measure_stages(**kw):
    """stage_rows live, or the recorded rows (vlm_stages.csv), or a loud skip."""
    from ..core.results import live_or_recorded
    return live_or_recorded(NAME, "lab 09's stages, ours beside transformers on the same Qwen3-VL-8B fp16 weights, in "
                            "one run", lambda: stage_rows(**kw))
