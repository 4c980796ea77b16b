"""The exercises' graders without a GPU (check.grade_exercise in compile-only mode): a stub is told
NOT YET by the `TODO;` in its code (never by a TODO in a comment), a kernel that lacks what the
exercise asks for is told NOT YET by its PTX, and a finished kernel runs on the CPU (core/emulate.py: a
few blocks, every CUDA thread a CPU thread) and is told CHECKED ON THE CPU or NOT YET by its answer (see
tests/test_grading_cpu.py), or, where no C++ compiler is installed, NOT CHECKED (no GPU), which names what
was checked. Each lab's GRADE, stub and solution are taken from labs_src/NN_*.py itself.
On a GPU the same kernels are run and compared with NumPy instead (the last tests)."""
import functools
import re
from pathlib import Path

import pytest

import kernellab as kl
from kernellab import check
from conftest import gpu

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted(p.name[:2] for p in (ROOT / "labs_src").glob("0*_*.py"))
KERNEL = {"00": "my_copy", "01": "softmax_warp_rows", "02": "fused_add_rmsnorm", "03": "add_f32_vec4",
          "04": "logits_ilp", "05": "bias_residual_vec8", "06": "merger_bias_gelu", "07": "merge_chunks",
          "08": "silu_down", "09": "mrope_table"}
compile_only = pytest.mark.skipif(kl.is_live(), reason="compile-only grading (no GPU)")


def _cells(path):
    """(header, source) of each jupytext percent cell."""
    out, head, cur = [], None, []
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("# %%"):
            if head is not None:
                out.append((head, "".join(cur)))
            head, cur = line, []
        else:
            cur.append(line)
    out.append((head, "".join(cur)))
    return out


@functools.lru_cache(maxsize=None)
def exercise(lab):
    """The lab's namespace after its imports and its exercise section (GRADE, EXERCISE, SOLUTION),
    without running its grading calls."""
    cs = _cells(next((ROOT / "labs_src").glob(f"{lab}_*.py")))
    ns = {}
    exec(next(s for h, s in cs if h and "[markdown]" not in h), ns)     # the imports
    start = max(i for i, (h, s) in enumerate(cs) if "[markdown]" in h and "## Exercise" in s)
    for h, s in cs[start:]:
        if "[markdown]" in h:
            continue
        exec("".join(ln for ln in s.splitlines(keepends=True) if "grade_exercise(" not in ln), ns)
        if "solution" in h:
            return ns
    raise AssertionError(f"lab {lab}: no solution cell after its exercise")


def grade(lab, src, capsys):
    ns = exercise(lab)
    capsys.readouterr()
    assert check.grade_exercise(src, KERNEL[lab], **ns["GRADE"]) is None
    return capsys.readouterr().out


def CHECKED_OR_NOT(out):
    """A correct kernel without a GPU: checked on the CPU (a C++ compiler here), else NOT CHECKED."""
    from kernellab.core import emulate
    return "CHECKED ON THE CPU (no GPU here)" in out if emulate.compiler() else "NOT CHECKED (no GPU)" in out


def without_todo(src):
    """The stub with its `TODO;` marker statements deleted (their comments kept): what a learner
    who deletes the marker and writes nothing gets."""
    return re.sub(r"\bTODO;", "     ", src)


# ---- the TODO looks at code, not comments ------------------------------------------------------------

def test_todo_lines_look_at_code_only():
    src = ('\n    // TODO: a comment\n    TODO;   // the marker\n    /* TODO\n  TODO */ x = 1;\n'
           '    const char* s = "TODO"; char c = \'"\'; int TODO_count = 0;\n    y = TODO ;\n')
    assert check.todo_lines(src) == [3, 7]
    assert check.code_only(src).count("\n") == src.count("\n")
    assert check.todo_lines("// TODO: all done\n/* TODO */") == []


def test_every_stub_marks_its_todo_in_code():
    for lab in LABS:
        ns = exercise(lab)
        assert check.todo_lines(ns["EXERCISE"]), f"lab {lab}: the stub has no `TODO;` in its code"
        assert not check.todo_lines(ns["SOLUTION"]), f"lab {lab}: the solution has a TODO in its code"


# ---- every lab: stub -> NOT YET, solution -> NOT CHECKED -----------------------------------------------

@pytest.mark.parametrize("lab", LABS)
def test_stub_is_not_yet(lab, capsys):
    out = grade(lab, exercise(lab)["EXERCISE"], capsys)
    assert out.startswith("NOT YET: the stub still has its TODO in the code (line"), out


@compile_only
@pytest.mark.parametrize("lab", [lab for lab in LABS if lab != "04"])
def test_stub_without_its_todo_is_not_yet_by_its_ptx(lab, capsys):
    """Deleting the marker does not pass: the stub's kernel lacks the PTX the exercise asks for.
    (Lab 04's stub already has its 16-byte loads; only running it tells its one accumulator apart.)"""
    ns = exercise(lab)
    assert ns["GRADE"].get("ptx_must_contain"), f"lab {lab}: GRADE checks no PTX"
    out = grade(lab, without_todo(ns["EXERCISE"]), capsys)
    assert out.startswith("NOT YET: the sm_87 PTX has no "), out


@compile_only
@pytest.mark.parametrize("lab", LABS)
def test_solution_is_checked_on_the_cpu_or_not_checked_and_says_what_was(lab, capsys, monkeypatch):
    """With a C++ compiler, the solution's first, second and last blocks run on the CPU and match NumPy
    (lab 00's grid is sized from the GPU's SM count: NOT CHECKED); without one, NOT CHECKED names what
    was checked."""
    from kernellab.core import emulate
    ns = exercise(lab)
    capsys.readouterr()
    assert check.grade_exercise(ns["SOLUTION"], KERNEL[lab], strict=True, **ns["GRADE"]) is None
    out = capsys.readouterr().out
    assert "NOT YET" not in out
    for alts in check._needles(ns["GRADE"].get("ptx_must_contain", ())):
        assert f"`{alts[0]}`" in out
    if emulate.compiler() and lab != "00":
        assert "CHECKED ON THE CPU (no GPU here): blocks 0, 1, " in out and "match NumPy" in out, out
    else:
        assert "NOT CHECKED (no GPU): checked here: no TODO left in the code" in out, out
    monkeypatch.setattr(emulate, "compiler", lambda: None)            # a machine without g++ or clang++
    assert check.grade_exercise(ns["SOLUTION"], KERNEL[lab], strict=True, **ns["GRADE"]) is None
    out = capsys.readouterr().out
    assert "NOT CHECKED (no GPU): checked here: no TODO left in the code" in out, out
    assert "Not checked: whether it computes the right answer" in out


# ---- lab 08: fuse SiLU x up into the down GEMV ---------------------------------------------------------

LOOP = r"""
#include <cuda_fp16.h>
extern "C" __global__ void silu_down(const __half* W, const __half* gate, const __half* up, float* y,
                                     int K, int F) {
    __shared__ float part[32];
    const int row = blockIdx.x;
    float s = 0.0f;
    // TODO: for j = threadIdx.x, j < F, j += blockDim.x:
    //       s += W[row * F + j] * SiLU(gate[j]) * up[j]      (SiLU(g) = g / (1 + expf(-g)), in fp32)
    for (int j = threadIdx.x; j < F; j += blockDim.x) {
        const float g = __half2float(gate[j]);
        s += __half2float(W[(size_t)row * F + j]) * (g / (1.0f + expf(-g))) * __half2float(up[j]);
    }
    // TODO: reduce s over the block (warp shuffle, then one value per warp in shared memory)
    REDUCE
}
"""
REDUCE_08 = {
    "none": "if (threadIdx.x == 0) y[row] = s;",
    "warp_only": "for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
                 "    if (threadIdx.x == 0) y[row] = s;                    // 7 of 8 warps lost",
    "shared_only": "part[threadIdx.x >> 5] = s;                            // no shuffle: lane 31 wins\n"
                   "    __syncthreads();\n"
                   "    if (threadIdx.x == 0) { float t = 0.0f; for (int w = 0; w < 8; ++w) t += part[w]; y[row] = t; }",
    "full": "for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);\n"
            "    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;\n"
            "    __syncthreads();\n"
            "    if (threadIdx.x < 32) {\n"
            "        s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;\n"
            "        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);\n"
            "        if (threadIdx.x == 0) y[row] = s;\n"
            "    }",
}


@compile_only
@pytest.mark.parametrize("kind, missing", [("none", "`shfl.sync`"), ("warp_only", "`st.shared`"),
                                           ("shared_only", "`shfl.sync`")])
def test_08_kernel_without_the_block_reduction_is_not_yet(kind, missing, capsys):
    out = grade("08", LOOP.replace("REDUCE", REDUCE_08[kind]), capsys)
    assert out.startswith(f"NOT YET: the sm_87 PTX has no {missing}"), out


@compile_only
def test_08_correct_kernel_under_todo_comments_is_not_checked(capsys):
    out = grade("08", LOOP.replace("REDUCE", REDUCE_08["full"]), capsys)
    assert "NOT YET" not in out and CHECKED_OR_NOT(out), out


@compile_only
def test_08_solution_written_into_the_stub_is_not_checked(capsys):
    """The learner replaces each `TODO;` by code and keeps the stub's comment lines."""
    stub = exercise("08")["EXERCISE"]
    body = LOOP.replace("REDUCE", REDUCE_08["full"])
    loop = body[body.index("    for (int j"):body.index("    // TODO: reduce")]
    mine = (stub.replace("    const int row", "    __shared__ float part[32];\n    const int row")
                .replace("    TODO;   // for j", "    // for j", 1)
                .replace("    TODO;   // reduce", loop + "    // reduce", 1)
                .replace("    if (threadIdx.x == 0) y[row] = s;", "    " + REDUCE_08["full"]))
    assert "TODO;" not in mine and "// reduce s over the block" in mine
    out = grade("08", mine, capsys)
    assert "NOT YET" not in out and CHECKED_OR_NOT(out), out


# ---- lab 07: the split-KV merge -------------------------------------------------------------------------

MERGE = r"""
extern "C" __global__ void merge_chunks(const float* part_o, const float* part_lse, float* o, int C) {
    const int h = blockIdx.x, d = threadIdx.x;
    const float* lse = part_lse + h * C;
    // TODO: M = the largest lse of this head (an empty chunk's lse is -inf)
    float M = -__int_as_float(0x7f800000);
    for (int c = 0; c < C; ++c) M = lse[c] > M ? lse[c] : M;
    // TODO: w_c = exp2f(lse[c] - M); o = sum_c w_c * part_o[(h * C + c) * 128 + d] / sum_c w_c
    float w = 0.0f, a = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float e = exp2f(lse[c] - M);
        w += e;
        a += e * part_o[((size_t)h * C + c) * 128 + d];
    }
    o[h * 128 + d] = OUT;
}
"""


@compile_only
def test_07_merge_without_the_division_is_not_yet(capsys):
    out = grade("07", MERGE.replace("OUT", "a"), capsys)          # sum_c w_c o_c, never divided by sum_c w_c
    assert out.startswith("NOT YET: the sm_87 PTX has no `div.rn.`"), out


@compile_only
def test_07_merge_without_weights_is_not_yet(capsys):
    src = MERGE[:MERGE.index("    // TODO: M")] + "    o[h * 128 + d] = part_o[(size_t)h * C * 128 + d];   // chunk 0\n}\n"
    out = grade("07", src, capsys)
    assert out.startswith("NOT YET: the sm_87 PTX has no `ex2.approx`"), out


@compile_only
@pytest.mark.parametrize("out_expr", ["a / w", "a * (1.0f / w)", "__fdividef(a, w)"])
def test_07_correct_merge_under_todo_comments_is_not_checked(out_expr, capsys):
    out = grade("07", MERGE.replace("OUT", out_expr), capsys)
    assert "NOT YET" not in out and CHECKED_OR_NOT(out), out


# ---- on a GPU the answer itself is checked --------------------------------------------------------------

@gpu
def test_08_on_a_gpu_the_lost_warps_are_not_yet_and_the_full_reduction_passes(capsys):
    """On a GPU a wrong kernel is told by its answer (here one that lost 7 of 8 warps, which its PTX
    alone already flags), and the correct one passes."""
    ns = exercise("08")
    G = dict(ns["GRADE"], ptx_must_contain=())
    assert check.grade_exercise(LOOP.replace("REDUCE", REDUCE_08["warp_only"]), "silu_down", **G) is None
    assert "NOT YET" in capsys.readouterr().out
    assert check.grade_exercise(LOOP.replace("REDUCE", REDUCE_08["full"]), "silu_down", strict=True,
                                **ns["GRADE"]) is not None


def test_a_grade_written_before_the_needles_still_grades():
    """A learner's saved notebook from before the PTX needles passes no ptx_must_contain (or an empty one):
    the grader checks what it can and never trips over the missing needle."""
    from kernellab.core import check
    assert check._needles(()) == [] and check._needles("") == [] and check._needles(None) == []
    assert check._needles("shfl.sync") == [("shfl.sync",)] and check._needles(("a", "b")) == [("a", "b")]
