"""Lab 09's stage table and its sentences, from vlm_stages.csv (live or recorded), its targets, and the Orin on paper."""
from __future__ import annotations

from .. import vision as V
from ..core import results
from ..core.family import Family, Target
from .stages import CASE, HF, LAB08, NAME, NEW, OURS, QWEN3_VL_8B, ROOF, STAGES, measure_stages, name


def _ratio(slow: str, fast: str):
    return lambda df: results.ratio_band(df, fast, slow, CASE)


TARGETS = (
    Target("to the first token (448x448 image + 32 tokens), transformers / ours", _ratio(name(HF, "to first token"),
                                                                                          name(OURS, "to first token")), 1.0),
    Target("decode tokens/s, ours / lab 08's token step at the same context", _ratio(LAB08, name(OURS, "decode")), 1.0),
    Target("decode, fraction of the read roof's tokens/s",
           lambda df: results.pick(df, name(OURS, "decode"), "frac_read", case=CASE), None),
)

STAGES_FAMILY = Family(name=NAME, kernels="decoder", roof="read", record=lambda: measure_stages(), targets=TARGETS,
                       uses=tuple(V.FAMILIES),     # the tower runs lab 05's public calls (their default steps)
                       about="lab 09: Qwen3-VL-8B fp16, one 448x448 image + 32 tokens, then 128 tokens: every stage, "
                             "ours beside transformers on the same weights")


def stage_table(df):
    """The stages side by side on the device on screen: ours and transformers' time (ms; decode: per token),
    transformers / ours, ours' host ms, and what the stage reaches of its roof."""
    import pandas as pd
    part = results.one_source(df)
    if part is None or not len(part):
        return pd.DataFrame()
    roof = results.pick(part, ROOF, "tflops", case=CASE)
    out = []
    for st in STAGES:
        ours, hf = name(OURS, st), name(HF, st)
        o, h = (results.pick(part, n, "median_us", case=CASE) for n in (ours, hf))
        if o != o and h != h:
            continue
        m = results.ratio_band(part, ours, hf, CASE)
        ft, fr = (results.pick(part, ours, c, case=CASE) for c in ("frac_tensor", "frac_read"))
        reach = (f"{ft:.2f} of the tensor roof ({roof:.0f} TFLOP/s)" if ft == ft else
                 f"{fr:.2f} of the read roof" if fr == fr else "host only (no GPU roof)")
        out.append({"stage": st + (" (per token)" if st == "decode" else ""), "ours ms": o / 1e3,
                    "transformers ms": h / 1e3, "transformers / ours": results.times(part, ours, hf, CASE)
                    if m.ok else "", "ours host ms": results.pick(part, ours, "host_us", case=CASE) / 1e3,
                    "ours reaches": reach})
    return pd.DataFrame(out)


def _first_token(d) -> str:
    n = results.pick(d, name(OURS, "prefill"), "tokens", case=CASE)
    return (results.compare_text(d, name(OURS, "to first token"), name(HF, "to first token"), CASE)
            + f" (tower, scatter, prefill and the first token's logits; {n:.0f} prompt tokens)")


def _decode(d) -> str:
    o, lab8, hf = (results.pick(d, n, "tokens/s", case=CASE) for n in (name(OURS, "decode"), LAB08, name(HF, "decode")))
    fr = results.pick(d, name(OURS, "decode"), "frac_read", case=CASE)
    return results.unless_missing(o, (
        f"Decode runs **{o:.0f} tokens/s** ({fr:.2f} of what the read roof allows at this context); "
        + results.compare_text(d, name(OURS, "decode"), LAB08, CASE) + " (the same token step: a text prompt would "
        "give the same speed); " + results.unless_missing(hf, f"transformers' generate decodes {hf:.0f} tokens/s")))


def say_stages(df) -> None:
    """Two lines on the device on screen: to the first token against transformers, and the decode's speed."""
    results.each_device(df, lambda d: _first_token(d) + ". " + _decode(d) + f" ({results.source(d)}).")


def orin_on_paper(patches: int = 784, context: int = 300):
    """The seeds' Orin AGX on paper (MODELS, not measurements): (lab 06's tower model at this lab's image and at the
    seeds' image (--max-pixel 500000), lab 08's bytes model for one fp16 decode token at `context`)."""
    from ..decoder import orin_model
    from ..vit_block.report import REPORT_PATCHES
    from ..vit_block.report import orin_model as tower_model
    d = orin_model(QWEN3_VL_8B.text, contexts=(context,), fractions=(1.0, 0.75))
    return tower_model(ns=(patches, REPORT_PATCHES)), d[d["path"] == "float16"].reset_index(drop=True)


# ---- the seeds' Qwen3-VL end-to-end claims (seed 000, section 5.1), judged from the stage table ------------------

SEED_VIT_SPEEDUP = 552.44 / 474.16        # seed 000 line 432: its ViT encode before / after (vit_block-004)


@results.claim_measure("vlm-002")
def _decode_unchanged(part):
    """000:435 'Qwen3-VL decode 9.73 -> 9.74 tok/s (unchanged)' by a change of the vision kernels alone: the decode
    after an image prompt is lab 08's token step, so its time against lab 08's at the same context is the test."""
    m = results.ratio_band(part, name(OURS, "decode"), LAB08, CASE) if part is not None else results.NAN
    return m, results.verdict(m, 1.001, "end-to-end", "end-to-end"), (f"{m.value:.3f} (VL decode / text decode)"
                                                                       if m.ok else None)


@results.claim_measure("vlm-003")
def _total_amdahl(part):
    """000:436 'Qwen3-VL total 28162.83 -> 28056.48 ms (-0.4%)' when only the ViT got 1.165x faster: Amdahl on this
    run's stage shares (preprocess + to first token + 127 decode steps), with the seed's own ViT ratio."""
    if part is None or not len(part):
        return results.NAN, "not measured (nothing recorded)", None
    t = {st: results.pick(part, name(OURS, st), "median_us", case=CASE) for st in ("preprocess", "tower",
                                                                                 "to first token", "decode")}
    total = t["preprocess"] + t["to first token"] + (NEW - 1) * t["decode"]
    share = t["tower"] / total
    v = 1 / (1 - share * (1 - 1 / SEED_VIT_SPEEDUP))
    m = results.Measured(v, v, v)
    return m, results.verdict(m, 1.004, "end-to-end", "end-to-end"), f"{v:.4f} (tower {share:.1%} of the total)"


FAMILIES = [STAGES_FAMILY]
