"""Lines of the package (labs_src/kernellab/**/*.py) and of the notebooks' code (the code cells of
labs_src/NN_*.py, jupytext percent: cell markers and blank lines not counted) at a revision and today,
and, today, the lines of what implements a feature the revision did not have (NEW). The difference
for the same features is (today - NEW) - then: issue 33 asks for it to be -600 or less.

    .venv/bin/python scripts/linecount.py [--then cc36223] [--now HEAD]

A NEW entry is a path (a file, or a folder: every .py below it) or path::name,name (those top-level
definitions, decorators included)."""
from __future__ import annotations

import argparse
import ast
import re
import subprocess

PKG, LABS = "labs_src/kernellab/", re.compile(r"^labs_src/\d\d_\w+\.py$")
K, LAB = "labs_src/kernellab/", "labs_src/"
NEW = {   # what implements a feature cc36223 did not have: one line of why each
    LAB + "09_vlm.py": "lab 09 (Qwen3-VL end to end), a new notebook",
    K + "vlm/": "lab 09's package: preprocessing, M-RoPE, weights, the VLM engine, stages, text (issue 37)",
    K + "decoder/prefill.py": "the prompt in one pass: prefill GEMMs, RoPE + KV write, causal attention",
    K + "attention/causal.py": "lab 07's causal grouped prefill attention (step 16) for the prefill",
    K + "decoder/sample.py": "GPU sampling: temperature, top-k, top-p kernels, their reference and family",
    K + "decoder/text.py": "tokenizer, chat format, streaming generate (issue 36 item 3)",
    K + "decoder/fused.py": "the fused q/k head norm + RoPE + KV append step, decoder_07 (issue 38)",
    K + "attention/ablation.py": "lab 07's one-change-per-step ablations of decode 04 -> 05, prefill 12 -> 13",
    K + "decoder/fit.py": "lab 08 fits the learner's GPU: sizes 0.6B-14B, bytes per path, check_fits (issue 36 item 4)",
    K + "vision/seed.py": "the seed's layout kernels in the seed's forms: steps 32-35 (issue 34 item 5)",
    K + "vision/reference.py::rope_tables_f16,_rotate_full,_sr16_ref,_sr16_input,ref_transpose_token_head,_th_input":
        "the float64 references and inputs of those seed-form kernels (issue 34 item 5)",
    K + "core/emulate.py": "compile-only grading runs the learner's kernel on the CPU (issue 35 item 5)",
    K + "core/fingerprint.py": "records know what they timed: fingerprints of kernel slices and launchers",
    K + "core/progress.py": "make bench / make drift progress bars",
    K + "drift.py": "make drift: the defaults and end-to-end rows re-timed live as a user calls them",
    K + "core/store.py::mark_stale,_families,expected,row_names,stamp,stale,kept_reason,stale_rows,note":
        "the stale-row side of the device record (fingerprints compared, stale_kept reasons)",
    K + "gemv/report.py::AS_WRITTEN,AS_WRITTEN_PTX,as_written_cases,as_written_names,as_written_ptx,as_written,"
        "check_as_written,as_written_claims": "lab 04 shows the report's GEMV kernels as written (issue 34 item 5)",
    K + "vision/report.py::_WALK,AS_WRITTEN,REPORT_PATCHES,_as_written_families,check_as_written,as_written,"
        "as_written_claims,say_as_written,raised_note,raised_said":
        "lab 05 shows the report's kernels as written (issue 34 item 5)",
    K + "gemv/prose.py::say_as_written": "lab 04's sentence on the report's GEMV kernels as written (issue 34 item 5)",
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
    K + "decoder/report.py::growth_text,contexts_text,token_fraction":
        "lab 08's token against its floor at every context and torch.compile at 1.3x (issue 38 items 1, 5)",
    K + "labs.py::_common_case,_vs_library,HEADLINE_VS_LIBRARY,HEADLINE_DIGITS,headline_table,table_sha1":
        "the headline like for like (issue 34 item 9): one case on every device, labs 06/07/09 against torch, its table",
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


def defined_lines(src: str, names: set) -> int:
    """Lines of the top-level definitions (def, class, NAME = ...) named, decorators included."""
    n = 0
    for node in ast.parse(src).body:
        targets = [node.name] if hasattr(node, "name") else \
            [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
        if set(targets) & names:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            n += node.end_lineno - first + 1
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--then", default="cc36223")
    ap.add_argument("--now", default="HEAD")
    a = ap.parse_args()
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
