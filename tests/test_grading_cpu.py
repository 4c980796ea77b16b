"""Compile-only grading runs the learner's kernel on the CPU (core/emulate.py), so without a GPU a wrong
kernel is told NOT YET by its answer, not only by its PTX (issue 35):
* a kernel with no reduction at all, or one that loses 7 of 8 warps, is NOT YET even when the grade
  asks for no PTX at all (the answer is wrong);
* a kernel whose PTX has everything but whose arithmetic is wrong is NOT YET;
* a correct kernel is CHECKED ON THE CPU, also when the stub's TODO comments are still above its code;
* a kernel that reads past an array's end, or hangs at a shuffle only some lanes reach, is told so and
  the notebook's kernel survives (the emulation runs in a subprocess).
Skipped where no C++ compiler is installed (the grader then says NOT CHECKED, tests/test_grading.py)."""
import numpy as np
import pytest

from kernellab.core import check, emulate
from test_grading import LOOP, MERGE, REDUCE_08, compile_only, exercise, grade

needs_cxx = pytest.mark.skipif(emulate.compiler() is None, reason="no C++ compiler for the CPU emulation")
pytestmark = [compile_only, needs_cxx]


def grade_without_ptx(lab, src, kernel, capsys):
    g = dict(exercise(lab)["GRADE"], ptx_must_contain=())
    capsys.readouterr()
    assert check.grade_exercise(src, kernel, **g) is None
    return capsys.readouterr().out


@pytest.mark.parametrize("kind", ["none", "warp_only", "shared_only"])
def test_08_no_block_reduction_is_not_yet_by_its_answer(kind, capsys):
    out = grade_without_ptx("08", LOOP.replace("REDUCE", REDUCE_08[kind]), "silu_down", capsys)
    assert out.splitlines()[-1].startswith("NOT YET: your silu_down (blocks 0, 1, "), out
    assert "run on the CPU: no GPU here" in out


def test_08_correct_kernel_is_checked_on_the_cpu(capsys):
    out = grade("08", LOOP.replace("REDUCE", REDUCE_08["full"]), capsys)      # the stub's TODO comments kept
    assert "NOT YET" not in out and "CHECKED ON THE CPU (no GPU here): blocks 0, 1, 2047" in out, out


@pytest.mark.parametrize("wrong", ["a / (w + 1.0f)", "a / w * 0.5f", "a / (float)C"])
def test_07_wrong_merge_with_the_right_ptx_is_not_yet(wrong, capsys):
    out = grade("07", MERGE.replace("OUT", wrong), capsys)
    assert "its PTX has `ex2.approx`" in out and "NOT YET: your merge_chunks (blocks 0, 1, 31" in out, out


def test_01_max_reduction_with_a_sum_is_not_yet(capsys):
    ns = exercise("01")
    wrong = ns["SOLUTION"].replace("v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));",
                                   "v += __shfl_xor_sync(0xffffffffu, v, offset);")
    assert wrong != ns["SOLUTION"]
    out = grade("01", wrong, capsys)
    assert "NOT YET: your softmax_warp_rows (blocks" in out, out


def test_04_one_accumulator_is_not_yet_by_its_answer(capsys):
    """Lab 04's stub with its marker deleted keeps one accumulator and skips three chunks of every four:
    its PTX has the 16-byte loads, its answer is wrong."""
    ns = exercise("04")
    out = grade("04", ns["EXERCISE"].replace("TODO;", "     "), capsys)
    assert "NOT YET: your logits_ilp (blocks" in out, out


def test_a_kernel_that_writes_nothing_is_not_yet(capsys):
    src = exercise("07")["SOLUTION"].replace("o[h * 128 + d] = a / w;", "if (C < 0) o[h * 128 + d] = a / w;")
    out = grade("07", src, capsys)
    assert "NOT YET" in out and "wrote nothing to its output" in out, out


def test_out_of_bounds_and_divergent_shuffles_are_reported_not_fatal():
    x = np.zeros(64, np.float32)
    y = np.zeros(64, np.float32)
    crash = r'''extern "C" __global__ void k(const float* x, float* y, int n) {
        y[threadIdx.x] = x[threadIdx.x + (1LL << 40)]; }'''
    with pytest.raises(emulate.Failed, match="crashed on the CPU"):
        emulate.run(crash, "k", [x, y], [64], (1,), (64,))
    diverge = r'''extern "C" __global__ void k(const float* x, float* y, int n) {
        float v = x[threadIdx.x];
        if (threadIdx.x == 0) v += __shfl_xor_sync(0xffffffffu, v, 1);   // lane 0 alone at a shuffle
        __syncthreads();                                                  // the others wait here for it
        y[threadIdx.x] = v; }'''
    with pytest.raises(emulate.Failed, match="did not all reach the same shuffle"):
        emulate.run(diverge, "k", [x, y], [64], (1,), (64,))


def test_emulated_fp16_and_shuffles_match_numpy():
    """The shim's pieces against NumPy: half conversions round to nearest even (subnormals, inf, NaN),
    a butterfly sum over a warp, a block reduction through shared memory with __syncthreads."""
    v = np.array([0.1, -2.5, 65504.0, 70000.0, 1e-7, 6.1e-5, np.inf, -np.inf, 3.14159, 2049.0] * 4, np.float32)
    out = np.zeros(v.size, np.float16)
    src = r'''#include <cuda_fp16.h>
    extern "C" __global__ void k(const float* x, __half* y, int n) {
        const int i = threadIdx.x; if (i < n) y[i] = __float2half(x[i]); }'''
    (_, got), _ = emulate.run(src, "k", [v, out], [v.size], (1,), (64,))
    with np.errstate(over="ignore"):
        want = v.astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    x = np.arange(96, dtype=np.float32)
    y = np.zeros(2, np.float32)
    red = r'''extern "C" __global__ void k(const float* x, float* y, int n) {
        __shared__ float part[32];
        float s = x[blockIdx.x * 48 + (threadIdx.x < 48 ? threadIdx.x : 0)] * (threadIdx.x < 48);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
        __syncthreads();
        if (threadIdx.x == 0) y[blockIdx.x] = part[0] + part[1]; }'''
    (_, got), blocks = emulate.run(red, "k", [x, y], [96], (2,), (64,))
    assert blocks == [(0, 0, 0), (1, 0, 0)]
    assert np.array_equal(got, x.reshape(2, 48).sum(1))
