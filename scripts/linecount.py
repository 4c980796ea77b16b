"""Lines of the package (labs_src/kernellab/**/*.py) and of the notebooks' code (the code cells of
labs_src/NN_*.py, jupytext percent: cell markers and blank lines not counted) at a revision and today,
and, today, the lines of what implements a feature the revision did not have (NEW). The difference
for the same features is (today - NEW) - then: issue 33 asks for it to be -600 or less.

    .venv/bin/python scripts/linecount.py [--then cc36223] [--now HEAD] [--parts]

--parts: where the difference sits: the import lines and faces of the package's files that are not wholly NEW,
the top-level definitions whose names are new and not listed NEW (mostly the sentence code that left the
notebooks), and the change of the definitions both revisions have.

A NEW entry is a path (a file, or a folder: every .py below it) or path::name,name (those top-level
definitions, decorators included)."""
from __future__ import annotations

import argparse
import ast
import re
import subprocess
from collections import Counter

PKG, LABS = "labs_src/kernellab/", re.compile(r"^labs_src/\d\d_\w+\.py$")
K, LAB = "labs_src/kernellab/", "labs_src/"
NEW = {   # what implements a feature cc36223 did not have: one line of why each
    LAB + "09_vlm.py": "lab 09 (Qwen3-VL end to end), a new notebook",
    K + "vlm/": "lab 09's package: preprocessing, M-RoPE, weights, the VLM engine, stages, text (issue 37)",
    K + "decoder/prefill.py": "the prompt in one pass: prefill GEMMs, RoPE + KV write, causal attention",
    K + "attention/causal.py": "lab 07's causal grouped prefill attention (step 16) for the prefill",
    K + "decoder/sample.py": "GPU sampling: temperature, top-k, top-p kernels, their reference and family",
    K + "decoder/text.py": "tokenizer, chat format, streaming generate (issue 36 item 3)",
    K + "decoder/fused.py": "the fused q/k head norm + RoPE + KV append step and the fused GEMV steps 08-12 (issue 38)",
    K + "attention/ablation.py": "lab 07's one-change-per-step ablations of decode 04 -> 05, prefill 12 -> 13",
    K + "decoder/fit.py": "lab 08 fits the learner's GPU: sizes 0.6B-14B, bytes per path, check_fits (issue 36 item 4)",
    K + "vision/seed.py": "the seed's layout kernels in the seed's forms: steps 32-35 (issue 34 item 5)",
    K + "vision/reference.py::rope_tables_f16,_sr16_ref,_sr16_input,ref_transpose_token_head,_th_input":
        "the float64 references and inputs of those seed-form kernels (issue 34 item 5)",
    K + "core/emulate.py": "compile-only grading runs the learner's kernel on the CPU (issue 35 item 5)",
    K + "core/fingerprint.py": "records know what they timed: fingerprints of kernel slices and launchers",
    K + "core/progress.py": "make bench / make drift progress bars",
    K + "drift.py": "make drift: the defaults and end-to-end rows re-timed live as a user calls them",
    K + "core/store.py::mark_stale,_families,expected,row_names,stamp,stale,kept_reason,stale_rows,note":
        "the stale-row side of the device record (fingerprints compared, stale_kept reasons)",
    K + "gemv/report.py::AS_WRITTEN,AS_WRITTEN_PTX,as_written_cases,as_written_names,as_written_ptx,as_written,"
        "check_as_written,as_written_claims": "lab 04 shows the report's GEMV kernels as written (issue 34 item 5)",
    K + "vision/report.py::_WALK,AS_WRITTEN,_as_written_families,check_as_written,as_written,"
        "as_written_claims,say_as_written,raised_note,raised_said":
        "lab 05 shows the report's kernels as written (issue 34 item 5)",
    K + "gemv/report.py::say_as_written": "lab 04's sentence on the report's GEMV kernels as written (issue 34 item 5)",
    K + "measuring.py::LATENCY_OPS,GRID_ELEMS,latency_quantity,_band_rows,band_value,_latency_cycles,_rate_band,"
        "_ratio,_micro_rows,grid_quantity,NOT_YET,_lat,_over,_judged,_cycles_shown,_fma_latency,_fmul_vs_ffma,"
        "_quantities,_sync_and_shuffle,_smem_latency,_shuffle_vs_smem,_modulo,_grid_claim,SOFTMAX_FLOP_PER_BYTE,"
        "_softmax_below_ridge,_cycles,_dram_latency_cycles,_l2_latency_and_size,FMA_ROWS,fma_errors,_fma_precision":
        "lab 00 measures the seeds' cycle and latency claims: micro-benchmarks and claim measures (issue 34 items 3, 4)",
    K + "measuring_report.py::micro_said,say_micro": "lab 00's sentence on those micro-benchmarks (issue 34 item 3)",
    K + "softmax/report.py::_naive_f32,_safe_f32,HOSTILE_ROWS,_exp89,_safe_fixes,_combine_never_overflows,"
        "_register_claims": "lab 01's seed claims measured by the lab (claims rows `lab:`, issue 34 item 4)",
    K + "core/verdict.py::CLAIM_MEASURES,claim_measure,quantity_verdict,checked,_lab_measure":
        "claims a lab measures itself (`lab:` rows: a quantity against a claimed range, a check; issue 34 item 4)",
    K + "decoder/claims_check.py": "the seeds' Qwen model facts checked against the configs lab 08 runs (issue 34)",
    K + "core/prose.py::HOST_TARGET,host_text": "host time per call against torch's, with the measured reason (bare launches)",
    K + "core/prose.py::ptxas_brief,claims_brief": "lean screens (issue 35): the ptxas and claims tables folded to a screen",
    K + "core/pdl.py": "lab 08 step 12: programmatic dependent launch through cuLaunchKernelEx (issue 38)",
    K + "attention/prose.py::decode06_limits_text,causal_limits_text":
        "lab 07's counters of decode step 06 and causal step 16 where they miss (issue 38 item 5)",
    K + "attention/report.py::dec_of_floor": "decode attention judged against its floor (issue 38 item 2)",
    K + "softmax/report.py::worst_of_floor,narrow_limits_text":
        "softmax against its floor at every width, and its narrow rows' counters (issue 38 items 4, 5)",
    K + "rmsnorm.py::worst_hidden_of_floor": "RMSNorm against its floor at every hidden size (issue 38 item 4)",
    K + "vision/ln_sweep.py": "LayerNorm at every hidden size against a memcpy of its bytes (issue 38 item 4)",
    K + "vision/steps.py::ln_row_block": "lab 05 step 36: LayerNorm a block a row for long rows (issue 38 item 4)",
    K + "vision/report.py::say_beyond": "lab 05 steps 38, 39 (the exact GELU) against the steps they change (issue 38)",
    K + "vision/report.py::_limit_families,_ncu_device,vision_limits_text,say_vision_limits,limit_bullet,on_ncu_device":
        "lab 05's counters of the vision kernels short of their floor (issue 38 items 4, 5)",
    K + "decoder/report.py::growth_text,contexts_text":
        "lab 08's token against its floor at every context and torch.compile at 1.3x (issue 38 items 1, 5)",
    K + "labs.py::_common_case,_vs_library,HEADLINE_VS_LIBRARY,HEADLINE_DIGITS,headline_table,table_sha1":
        "the headline like for like (issue 34 item 9): one case on every device, labs 06/07/09 against torch, its table",
    K + "attention/steps.py::FLASH_KERNEL,FLASH_MIN_CHUNK,FLASH_PER_SM,FLASH_MAX_CHUNKS,FLASH_SPLIT_FROM,flash_chunks,_wave_06,"
        "_done_counters,flash,_gqa_flash":
        "lab 07 decode step 06: flash decoding in one launch, its chunk rule, counters and tunings (faaa513)",
    K + "attention/prose.py::DEC_SAID": "decode step 06 said against SDPA beside step 05 (issue 38, bcc90bc)",
    K + "attention/steps.py::MAX_GROUP,HEAD_DIMS,layout_reason,specialise":
        "decode attention and RoPE for any head layout: GQA 1-8, head dim 64/128 (issue 36 item 1, a433ab9, 69bbc50)",
    K + "attention/reference.py::dec_layout,DEC_LAYOUTS":
        "the decode references and check cases for other head layouts (issue 36 item 1, a433ab9)",
    K + "attention/stale.py": "stale-row notes: sentences and side-by-side tables say a row ran an earlier version "
        "of its step (issue 34 third truth pass, e7030db, 3135bc5, d61875e)",
    K + "attention/prose.py::causal_text": "causal step 16 against SDPA (is_causal) by the noise rule (2b61604)",
    K + "attention/prose.py::credit_text": "each change of decode 04->05 / prefill 12->13 credited from its ablation "
        "(issue 34 item 1, 2b61604)",
    K + "attention/report.py::floor_outcome,targets_vs_floor":
        "targets judged against the measured floor too: 'out of reach here', fraction of the floor (issue 34, 2b61604)",
    K + "attention/report.py::fp32_peak_gflops,row_step_text":
        "step 11's TFLOP/s against lab 00's recorded fp32 FMA peak (2b61604)",
    K + "attention/prose.py::attention_share_text":
        "whether the ViT block's lead over torch comes from flash attention or its other kernels (2b61604)",
    K + "core/launch.py::_SPECIALISED,specialised":
        "kernels compiled with extra -D options, per head layout (issue 36 item 1, 69bbc50)",
    K + "core/check.py::_UNWRITTEN,_on_cpu":
        "compile-only grading runs the learner's kernel on the CPU: the grading side of core/emulate.py "
        "(issue 35 item 5, 2a0493a)",
    K + "core/verdict.py::NOT_COMPARABLE,_conditions":
        "claims like for like: the conditions column, 'not comparable here' (issue 34 items 4, 6, 8; 889224c)",
    K + "core/family.py::FLOOR_TARGET": "the 0.95-of-floor target of every memory-bound kernel (issue 38 item 4, "
        "a887524/ba9a979)",
    K + "core/family.py::REGISTRY": "families by record name, read by fingerprint/store for stale rows (cdd465a)",
    K + "core/plot.py::tokens": "lab 08's picture: tokens/s per path against its floor and torch, and the Amdahl "
        "gains (d60c377)",
    K + "decoder/config.py::TINY_QWEN2,QWEN25_7B": "lab 08 runs Qwen2.5 (issue 36 item 1, 7030f1e)",
    K + "decoder/engine.py::TOKEN_DECODE": "the token's decode is lab 07's new step 06 (d05b94a)",
    K + "decoder/engine.py::Fuse,FUSE_ALL,FUSE_DEFAULT,FUSE_SWAPS":
        "the fused GEMV steps 08-12 as the token step's choice and its Amdahl swaps (issue 38, 9ed4a36, 6a97bb1)",
    K + "decoder/engine.py::SKIPPED,skipped": "an op left out of the token step: where the gap to the floor "
        "goes (9ed4a36)",
    K + "decoder/measure.py::SKIPS,skip_name,skip_rows,gap":
        "the 'without <op>' rows: the token's gap to its floor measured by leaving ops out (9ed4a36)",
    K + "decoder/report.py::GAP_WHAT,gap_text": "lab 08's sentence on those rows (d05b94a)",
    K + "decoder/measure.py::_of_floor": "each path's token against its own read-only floor, a target "
        "(issue 38, d5b2700)",
    K + "decoder/engine.py::_fits": "Decoder checks the fit before allocating (issue 36 item 4, 4abb103)",
    K + "decoder/measure.py::token_steps": "Family.steps of the token records: what a decoder.csv row runs, for "
        "its fingerprint (cdd465a)",
    K + "decoder/report.py::ran,ran_text": "lab 08 names the steps the record ran (its steps column, e8a979f)",
    K + "decoder/report.py::fused_gemvs": "names lab 08's fused GEMV steps a record ran (3135bc5)",
    K + "decoder/report.py::context_text": "each torch baseline's time per token from context 1 to 4096 beside its "
        "host share (issue 34 item 7, db4889f)",
    K + "decoder/report.py::plot_tokens": "lab 08's picture from the frames on screen (d60c377)",
    K + "torch_decoder.py::SIZES_NAME,size_name,size_rows,_peer_rows,measure_sizes,sizes_table,_one_device,SIZES":
        "decoder_sizes: every Qwen3 size and Qwen2.5-7B per path against its floor and transformers "
        "(issue 36 item 6; 607c255, 3773aae)",
    K + "torch_decoder.py::PREFILL_NAME,OURS_PREFILL,TRANSFORMERS_PREFILL,PROMPTS,prefill_rows,measure_prefill,"
        "_ttft_vs,PREFILL": "time to first token on the record: our prefill against transformers' "
        "(d949f98, 0479652)",
    K + "torch_models.py::_hf_class": "transformers' Qwen2ForCausalLM for Qwen2.5 checks (issue 36 item 1, 7030f1e)",
    K + "vision/reference.py::LN_VEC,LN36_VPT,LN36_THREADS,LN_SWEEP":
        "lab 05 step 36 and the LayerNorm sweep at hidden 1024..16384 (issue 38 item 4, 2bcc665)",
    K + "vision/steps.py::_warp_vec8": "step 36's step-03 launch for the rows step 03 holds (2bcc665/80ce6e6)",
    K + "vision/layout.py::tr_input_half2": "step 31: the seed's transpose before as written (issue 34 item 5, "
        "ca8b6bc)",
    K + "vision/report.py::_TABLES,_INVERSE,_shape": "helpers of lab 05's report's-kernels-as-written "
        "(issue 34 item 5, 5b92153)",
    K + "vision/report.py::SAME_BYTES_AS_FLOOR": "the vision limit bullets' kernels judged against the copy of "
        "their bytes (issue 38 items 4, 5; 5c1f507)",
    K + "gemv/report.py::REPORT_OWN": "the report's own steps for lab 04's as-written claims (issue 34 item 5, b67ba0c)",
    K + "gemv/report.py::default_said": "truth review: at how many shapes the int4/W8A16 defaults beat the step "
        "before beyond noise (b67ba0c)",
    K + "softmax/report.py::LIMIT_NARROW": "the narrow fp16 rows whose counters narrow_limits_text reads "
        "(issue 38 item 5, 9834cde)",
    K + "core/check.py::PTX_MEANS,_needles,_say_needle,_COMMENT_OR_LITERAL,_TODO,code_only,todo_lines":
        "compile-only grading names a missing instruction and what it means, takes alternatives, and reads a TODO "
        "in the code, not in a comment (issue 35 item 5, d81bc31)",
    K + "gemv/steps.py::pack,unpack,read_by": "the producer lays the tile-major weights out once (at cc36223 the "
        "step repacked them inside every timed call): the fast path is the path a user calls (cdd465a)",
    K + "gemv/layout.py::untile": "pack's inverse, for the decoder's swaps to the quantiser's layout (cdd465a)",
    K + "decoder/engine.py::_unpacked": "a swap of the Amdahl table to a step that reads the quantiser's arrays "
        "unpacks the decoder's packed weights once (cdd465a)",
    K + "decoder/report.py::_Counting,token_ops": "launches per token counted from today's token step (Decoder.step "
        "run on NumPy), where cc36223 had a hand formula (issue 34 third truth pass, e7030db)",
    K + "record.py::_other_ops": "make bench LABS_TO_RECORD=vision:layernorm records one op of a shared record (80ce6e6)",
}


def git(*args) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def files(rev: str) -> list[str]:
    return [p for p in git("ls-tree", "-r", "--name-only", rev, "labs_src").split() if p.endswith(".py")]


def text(rev: str, path: str) -> str:
    return git("show", f"{rev}:{path}")


def code_lines(src: str) -> int:
    """Non-blank lines of a jupytext percent source's code cells (markdown cells and markers left out)."""
    n, code = 0, False
    for line in src.splitlines():
        if line.startswith("# %%"):
            code = "[markdown]" not in line and "[md]" not in line
        elif code and line.strip():
            n += 1
    return n


def _span(node) -> int:
    """Lines of a top-level definition, its decorators included."""
    return node.end_lineno - min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) + 1


def defined_lines(src: str, names: set) -> int:
    """Lines of the top-level definitions (def, class, NAME = ...) named, decorators included."""
    n = 0
    for node in ast.parse(src).body:
        targets = [node.name] if hasattr(node, "name") else \
            [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
        if set(targets) & names:
            n += _span(node)
    return n


def totals(rev: str) -> tuple[int, int]:
    pkg = sum(len(text(rev, p).splitlines()) for p in files(rev) if p.startswith(PKG))
    nb = sum(code_lines(text(rev, p)) for p in files(rev) if LABS.match(p))
    return pkg, nb


def new_lines(rev: str) -> list[tuple[str, int, str]]:
    have, rows = files(rev), []
    for spec, why in NEW.items():
        path, _, names = spec.partition("::")
        if names:
            n = defined_lines(text(rev, path), set(names.split(","))) if path in have else 0
        else:
            n = sum(code_lines(text(rev, p)) if LABS.match(p) else len(text(rev, p).splitlines())
                    for p in have if p == path or (path.endswith("/") and p.startswith(path)))
        rows.append((spec.split("::")[0] + ("::…" if names else ""), n, why))
    return rows


def _walk(rev: str, skip=()):
    """(path, module AST) of each package file at rev, those under a `skip` spec left out."""
    for p in files(rev):
        if p.startswith(PKG) and not any(p == w or (w.endswith("/") and p.startswith(w)) for w in skip):
            yield p, ast.parse(text(rev, p))


def _defs(rev: str) -> dict:
    """{(path, name): lines} of every top-level def and class at rev, decorators included."""
    return {(p, n.name): _span(n)
            for p, tree in _walk(rev) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def parts(then: str, now: str) -> None:
    wholly = [s for s in NEW if "::" not in s]
    for rev, skip in ((then, ()), (now, wholly)):
        trees = list(_walk(rev, skip))
        imports = sum(n.end_lineno - n.lineno + 1 for _, t in trees for n in t.body
                      if isinstance(n, (ast.Import, ast.ImportFrom)))
        faces = sum(len(text(rev, p).splitlines()) for p, _ in trees if p.endswith("/__init__.py") and p.count("/") > 2)
        print(f"{rev}: {len(trees)} package files (not wholly NEW), {imports:,} import lines, faces {faces:,} lines")
    listed = {(spec.partition("::")[0], n) for spec in NEW if "::" in spec for n in spec.partition("::")[2].split(",")}
    a, b = _defs(then), _defs(now)
    old_names = {n for _, n in a}
    fresh = sum(v for (p, n), v in b.items() if n not in old_names and (p, n) not in listed
                and not any(p == w or (w.endswith("/") and p.startswith(w)) for w in wholly))
    by_a, by_b = Counter(), Counter()
    for (_, n), v in a.items():
        by_a[n] += v
    for (_, n), v in b.items():
        by_b[n] += v
    both = set(by_a) & set(by_b)
    grew = sum(max(0, by_b[n] - by_a[n]) for n in both)
    shrank = sum(max(0, by_a[n] - by_b[n]) for n in both)
    print(f"defs and classes named anew, not NEW: {fresh:,} lines; the {len(both)} names both have: "
          f"+{grew:,} / -{shrank:,} ({grew - shrank:+,})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--then", default="cc36223")
    ap.add_argument("--now", default="HEAD")
    ap.add_argument("--parts", action="store_true")
    a = ap.parse_args()
    if a.parts:
        return parts(a.then, a.now)
    (p0, n0), (p1, n1) = totals(a.then), totals(a.now)
    rows = new_lines(a.now)
    new = sum(n for _, n, _ in rows)
    print(f"{'':28}{a.then:>10}{a.now:>10}")
    print(f"{'package (kernellab/**/*.py)':28}{p0:>10,}{p1:>10,}")
    print(f"{'notebooks (code cells)':28}{n0:>10,}{n1:>10,}")
    print(f"{'together':28}{p0 + n0:>10,}{p1 + n1:>10,}")
    print(f"\nnew since {a.then} ({a.now}):")
    for path, n, why in rows:
        print(f"  {n:>6,}  {path:44} {why}")
    print(f"  {new:>6,}  in all")
    same = p1 + n1 - new
    print(f"\nthe same features: {same:,} lines at {a.now} against {p0 + n0:,} at {a.then}: {same - p0 - n0:+,}")


if __name__ == "__main__":
    main()
