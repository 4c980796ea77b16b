"""Everywhere (no GPU needed): the GEMV references, the int8/int4 quantisers, the M-scaled
tolerance (large enough for fp32 summation, small enough to catch a dropped term), the int32
offset table, the launch-shape helpers, and the PTX that each step's lesson points at."""
import numpy as np
import pytest

from kernellab import build, gemv


def test_reference_matches_blas_on_finite_inputs():
    for path in ("float32", "float16", "f32_fp16w", "int8", "w8a16", "int4"):
        host = gemv.make_input((37, 1031), path, seed=1)
        want = gemv.dense_weight(*host) @ host[-1].astype(np.float64)
        got = gemv.reference(*host)
        assert got.dtype == np.dtype(gemv.PATHS[path][2])
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3 if path == "float16" else 1e-6,
                                   atol=1e-2 if path == "float16" else 1e-9)


def test_reference_propagates_nan_and_inf_like_ieee():
    W, x = gemv.make_input((6, 9), "float32", "hostile")
    y = gemv.reference(W, x)
    assert np.isnan(y[0]) and np.isinf(y[1]) and np.isnan(y[2])      # NaN; +-inf; inf + -inf
    assert np.isnan(y[5])                                             # inf * 0 (BLAS could skip x == 0)
    assert np.isfinite(y[3]) and np.isfinite(y[4])


def test_int8_quantiser_is_symmetric_per_group():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((5, 300)).astype(np.float32)
    W[2, 130:140] = 0.0
    W[3, 256:] = 0.0                                  # an all-zero group gets scale 1, q = 0
    q, s = gemv.quantize_int8(W)
    assert q.dtype == np.int8 and q.shape == W.shape and s.shape == (5, 3) and s.dtype == np.float32
    assert np.abs(q).max() <= 127 and (q[3, 256:] == 0).all() and s[3, 2] == 1.0
    err = np.abs(gemv.dequantize_int8(q, s) - W)
    assert (err <= np.repeat(s, 128, axis=1)[:, :300] / 2 + 1e-6).all()  # half a step at most
    for k in range(5):                               # the largest |w| of each group maps to +-127
        for g in range(3):
            blk = W[k, g * 128:(g + 1) * 128]
            if np.abs(blk).max() > 0:
                assert np.abs(q[k, g * 128:(g + 1) * 128]).max() == 127


def test_int4_quantiser_packs_two_per_byte_with_zero_points():
    rng = np.random.default_rng(1)
    for M in (1, 7, 128, 257):
        W = rng.standard_normal((4, M)).astype(np.float32)
        p, s, z = gemv.quantize_int4(W)
        G = -(-M // 128)
        assert p.shape == (4, -(-M // 2)) and p.dtype == np.uint8
        assert s.shape == z.shape == (4, G) and s.dtype == np.float16 and z.dtype == np.uint8 and z.max() <= 15
        q = gemv.unpack_int4(p, M)
        assert q.max() <= 15 and ((p & 0xF) == gemv.unpack_int4(p, 2 * p.shape[1])[:, 0::2]).all()
        err = np.abs(gemv.dequantize_int4(p, s, z, M) - W)
        step = np.repeat(s.astype(np.float64), 128, axis=1)[:, :M]
        assert (err <= step * 0.5 + 1e-3 * step + 1e-6).all()


def test_interleave_int4_puts_each_warps_kilobyte_in_lane_order():
    """Step 36's layout: Wi[T, q, h, 4g + t] is the 16 bytes lane (g, t) reads of row 16T + g + 8h in
    group q; Mi[T, q, g] packs both rows' scales (fp16) and zero points (u8); rows past K are zero."""
    for K, M in ((999, 4096), (16, 128), (3, 256)):
        W, s, z, _ = gemv.make_input((K, M), "int4", seed=K)
        Wi, Mi = gemv.interleave_int4(W, s, z)
        T, G = -(-K // 16), M // 128
        assert Wi.shape == (T, G, 2, 32, 16) and Mi.shape == (T, G, 8, 8) and Wi.dtype == Mi.dtype == np.uint8
        Wp = np.zeros((16 * T, M // 2), np.uint8)
        Wp[:K] = W
        for T_, q, lane, h in ((0, 0, 0, 0), (T - 1, G - 1, 31, 1), (T // 2, G // 2, 13, 1)):
            g, t, r = lane >> 2, lane & 3, 16 * T_ + (lane >> 2) + 8 * h
            assert (Wi[T_, q, h, lane] == Wp[r, 64 * q + 16 * t:64 * q + 16 * t + 16]).all()
            if r < K:
                assert Mi[T_, q, g, 2 * h:2 * h + 2].view(np.float16)[0] == s.reshape(K, G)[r, q]
                assert Mi[T_, q, g, 4 + h] == z.reshape(K, G)[r, q]
        if K % 16:                      # the last tile's rows past K: zero bytes, never stored by the kernel
            r = 16 * (T - 1) + 15
            assert not Wi[T - 1, :, 1, 4 * 7:].any() and (r >= K)
    W, s, x = gemv.make_input((33, 256), "w8a16")
    Wi, Mi = gemv.interleave_w8a16(W, s)        # step 37: two 64-column halves per group, fp32 scales
    assert Wi.shape == (3, 2, 4, 32, 16) and Mi.shape == (3, 2, 8, 2) and Mi.dtype == np.float32
    for T_, q, c, h, lane in ((0, 0, 0, 0, 0), (1, 1, 1, 1, 31), (2, 0, 1, 0, 6)):
        g, t, r = lane >> 2, lane & 3, 16 * T_ + (lane >> 2) + 8 * h
        want = W[r].view(np.uint8)[128 * q + 64 * c + 16 * t:][:16] if r < 33 else np.zeros(16, np.uint8)
        assert (Wi[T_, q, 2 * c + h, lane] == want).all()
        assert r >= 33 or Mi[T_, q, g, h] == s.reshape(33, 2)[r, q]


def test_quantisation_error_against_fp32_is_small_and_ordered():
    """int8 is about 16x closer to the fp32 result than int4 (127 vs 7.5 steps per half range)."""
    host = gemv.make_input((256, 4096), "float32", seed=2)
    y = gemv.reference(*host).astype(np.float64)
    e8 = np.abs(gemv.reference(*gemv.make_input((256, 4096), "int8", seed=2)) - y).max() / np.abs(y).max()
    e4 = np.abs(gemv.reference(*gemv.make_input((256, 4096), "int4", seed=2)) - y).max() / np.abs(y).max()
    assert e8 < 0.02 and e8 * 4 < e4 < 0.5


def _fp32_blocked_sum(W, x, lanes=32):
    """What a kernel does: fp32 products summed in `lanes` fp32 chains, then a tree."""
    p = (W.astype(np.float32) * x.astype(np.float32)).astype(np.float32)
    K, M = p.shape
    acc = np.zeros((K, lanes), np.float32)
    for j in range(0, M, lanes):
        blk = p[:, j:j + lanes]
        acc[:, :blk.shape[1]] += blk
    return acc.sum(axis=1, dtype=np.float32)


def test_tolerance_covers_fp32_summation_and_catches_a_dropped_term():
    for M in (31, 1023, 4097):
        W, x = gemv.make_input((64, M), "float32", seed=M)
        tol = gemv.tolerance(W, x)
        want = gemv.reference(W, x).astype(np.float64)
        got = _fp32_blocked_sum(W, x)
        assert np.abs(got - want).max() <= tol["atol"]
        dropped = got - W[:, M // 2] * x[M // 2]           # a kernel that skips one element
        assert (np.abs(dropped - want) > tol["atol"] + tol["rtol"] * np.abs(want)).mean() > 0.5


def test_int32_offsets_table():
    t = gemv.int32_offsets().set_index("shape")
    logits = t.loc["logits_151936x4096"]
    assert logits["elements fit int32"] and logits["fp16 bytes fit int32"] and not logits["fp32 bytes fit int32"]
    wide = t.loc["vocab_152064x14336 (wider model)"]
    assert not wide["elements fit int32"] and wide["int32 wraps to"] < 0


def test_fast_threads_fill_the_sms():
    assert gemv.fast_threads(512, 4096, 8, 1, 4, sms=132) == 128       # few rows: split each row 4 warps wide
    assert gemv.fast_threads(151936, 4096, 8, 1, 4, sms=132) == 32     # many rows: a warp per row
    assert gemv.fast_threads(4096, 64, 8, 1, 4, sms=132) == 32         # a short row cannot be split further
    w = gemv.waves(4096, 8, 256, 132, 8)
    assert w["blocks"] == 512 and w["waves"] == round(512 / 1056, 2)


def test_bytes_moved_counts_each_input_once():
    W, x = gemv.make_input((64, 256), "float16")
    assert gemv.bytes_moved(W, x) == 64 * 256 * 2 + 256 * 2 + 64 * 2
    q, s, z, x4 = gemv.make_input((64, 256), "int4")
    assert gemv.bytes_moved(q, s, z, x4) == 64 * 128 + 64 * 2 * 2 + 64 * 2 + 256 * 2 + 64 * 4
    assert gemv.LOGITS.bytes_moved(W, x) == 64 * 256 * 2 + 256 * 2 + 64 * 4
    X, W2 = gemv.BATCHED.make_input((3, 64, 256), "f32_fp16w")
    assert gemv.BATCHED.bytes_moved(X, W2) == 3 * 256 * 4 + 64 * 256 * 2 + 3 * 64 * 4


def test_every_kernel_has_a_launcher():
    launched = {f"gemv_{gemv.KERNEL_OF.get(nm, nm).removesuffix('_stream')}" for fam in gemv.FAMILIES for nm in fam.variants}
    assert set(build.steps("gemv")) == launched
    for fam in gemv.FAMILIES:
        for dt, best in fam.default.items():
            assert dt in fam.variants[best].dtypes


def test_compile_only_checks_say_skipped(capsys, monkeypatch):
    import kernellab.core.check as c
    import kernellab.gemv as g
    monkeypatch.setattr(c, "is_live", lambda: False)
    g.check_variants(names=["22_fp16_fast"], cases=[((3, 31), "randn")])
    assert "SKIPPED (compile-only)" in capsys.readouterr().out


@pytest.mark.parametrize("arch", build.ARCHS)
def test_ptx_shows_each_steps_change(arch):
    ptx = lambda step, pat: build.ptx("gemv", step, arch, grep=pat)   # noqa: E731
    # sdata[tid] is private to its thread: the compiler keeps it in a register inside the loop, so
    # step 01 has only the extra stores before and after the loop, not one per element.
    assert len(ptx("01_f32_sdata", r"ld\.shared")) == len(ptx("02_f32_register", r"ld\.shared"))
    assert len(ptx("01_f32_sdata", r"st\.shared")) > len(ptx("02_f32_register", r"st\.shared"))
    assert not ptx("02_f32_register", r"\.v4\.") and ptx("03_f32_float4", r"ld\.global\.v4\.f32")
    assert not ptx("03_f32_float4", r"ld\.global\.nc") and ptx("04_f32_ldg", r"ld\.global\.nc\.v4\.f32")
    assert ptx("03_f32_float4", r"fma\.rn") and ptx("04_f32_ldg", r"fma\.rn")   # NVRTC contracts a*b+c anyway
    assert not ptx("05_int8_scalar", r"\.v4\.") and ptx("06_int8_char4", r"ld\.global\.nc\.v4\.s8")
    assert not ptx("09_fp16_half2", r"\.v4\.") and ptx("10_fp16_v2", r"ld\.global\.nc\.v4\.u32")
    assert ptx("07_f32_fp16w_warp", r"ld\.global\.nc\.v2\.u32")
    assert ptx("11_fp16_f32out_half2", r"mul\.lo\.s32") and not ptx("12_fp16_f32out_ilp", r"mul\.lo\.s32")
    for step in ("22_fp16_fast", "23_fp16_f32out_fast", "24_f32_fast", "25_int8_fast", "26_int4_awq"):
        assert ptx(step, r"ld\.global\.nc\.L1::no_allocate\.L2::cache_hint\.v4\.u32"), step   # streamed weights
        assert ptx(step, r"createpolicy\.fractional\.L2::evict_first"), step
    assert ptx("25_int8_fast", r"prmt\.b32") and ptx("26_int4_awq", r"prmt\.b32")
    assert ptx("10_fp16_v2", r"shfl\.sync\.bfly") and ptx("22_fp16_fast", r"shfl\.sync\.bfly")
    assert ptx("17_batched_fp16_float4", r"ld\.global\.nc\.v4\.u32") and not ptx("16_batched_fp16_half2", r"\.v4\.")
    assert ptx("19_f32_to_f16_x4", r"ld\.global\.nc\.v4\.f32") and ptx("18_f32_to_f16_x2", r"ld\.global\.nc\.v2\.f32")


def test_sdata_and_block_reduce_shared_memory():
    info = build.ptxas_info("gemv").set_index(["kernel", "arch"])["smem_bytes"]
    for arch in build.ARCHS:
        assert info["gemv_01_f32_sdata", arch] > info["gemv_02_f32_register", arch] + 500   # sdata[128]
        assert info["gemv_10_fp16_v2", arch] == 0                                          # shuffles only
        # the report's pairs: its befores carry sdata[128] beside CUB's TempStorage, its afters do not
        for before, after in (("30_f32_sdata_float4", "04_f32_ldg"), ("31_int8_sdata", "06_int8_char4"),
                              ("34_batched_f32_sdata", "13_batched_f32")):
            assert info[f"gemv_{before}", arch] >= info[f"gemv_{after}", arch] + 4 * 128, (before, arch)
        assert info["gemv_32_fp16_v2_plain", arch] == info["gemv_33_fp16_v2_ldg", arch] == 0


# The report's before -> after pairs (seed 002, sections 2.1-2.3 and 2.6), as lab 04 now runs them.
SEED_PAIRS = {"float32": ("30_f32_sdata_float4", "04_f32_ldg"), "int8": ("31_int8_sdata", "06_int8_char4"),
              "float16": ("32_fp16_v2_plain", "33_fp16_v2_ldg"), "batched": ("34_batched_f32_sdata", "13_batched_f32")}


@pytest.mark.parametrize("arch", build.ARCHS)
def test_ptx_shows_the_reports_pairs(arch):
    """What each of the report's before -> after pairs changes, in the PTX (the whole kernel, CUB's
    BlockReduce included, so the counts compare before with after, never with zero)."""
    n = lambda step, pat: len(build.ptx("gemv", step, arch, grep=pat))   # noqa: E731
    for before, after in (SEED_PAIRS["float32"], SEED_PAIRS["batched"]):
        # the before already reads float4, through the ordinary path; the after through the read-only one
        assert n(before, r"ld\.global\.v4\.f32") and not n(before, r"ld\.global\.nc")
        assert n(after, r"ld\.global\.nc\.v4\.f32")
        # sdata: one __syncthreads more, sdata[tid] stored before it and loaded again after it
        assert n(before, r"bar\.sync") == n(after, r"bar\.sync") + 1, (before, after)
        assert n(before, r"ld\.shared") > n(after, r"ld\.shared") and n(before, r"st\.shared") > n(after, r"st\.shared")
    before, after = SEED_PAIRS["int8"]
    assert n(before, r"bar\.sync") == n("05_int8_scalar", r"bar\.sync") + 1        # 31 -> 05: only sdata
    assert n(before, r"ld\.shared") > n("05_int8_scalar", r"ld\.shared")
    assert not n(before, r"\.v[24]\.") and n(before, r"ld\.global\.s8") and n(after, r"ld\.global\.nc\.v4\.s8")
    before, after = SEED_PAIRS["float16"]
    # v2 before and after both load 16 bytes per lane; only the after goes through ld.global.nc (__ldg)
    assert n(before, r"ld\.global\.v4\.u32") and not n(before, r"ld\.global\.nc")
    assert n(after, r"ld\.global\.nc\.v4\.u32") and not n(after, r"ld\.global\.v4")
    # fmaf: the befores add a group of products to the sum (sum += a*b + c*d ...), which NVRTC
    # contracts into a MUL, FMAs and an ADD; the afters' chained fmaf are FMAs only
    mul = r"^mul(\.rn)?(\.ftz)?\.f32"
    for b, a in (SEED_PAIRS["float32"], SEED_PAIRS["batched"], SEED_PAIRS["float16"]):
        assert n(b, mul) and not n(a, mul) and n(a, r"^fma\.rn") > n(b, r"^fma\.rn"), (b, a)
    for step in (before, after):                        # the report's 5 rounds of __shfl_down_sync
        assert n(step, r"shfl\.sync\.down") == 5 and not n(step, r"bar\.sync")


def test_gemmex_route_is_a_batched_baseline():
    assert gemv.GEMMEX in gemv.BATCHED.BASELINES
    from kernellab.core import cublas
    assert callable(cublas.gemm_f32out)


def test_compute_only_build_compiles_without_spills():
    """gemv.COMPUTE_ONLY times gemv.cu built with -DGEMV_COMPUTE_ONLY; that build must compile for
    every arch with the quantised steps' weight loads gone and no spills."""
    import re
    for arch in build.ARCHS:
        ptx, log = build.nvrtc_compile(build.source("gemv"), arch, "gemv_compute_only.cu", ("-DGEMV_COMPUTE_ONLY",))
        assert "spill stores" in log and not re.search(r"[1-9]\d* bytes spill", log), log
        for k in ("gemv_25_int8_fast", "gemv_28_int4_mma", "gemv_29_int8_w8a16"):
            assert f".entry {k}(" in ptx


# ---- the report's kernels as the report writes them (issue 34 item 5) ---------------------------
# step -> (its family, the course's step that now follows it: one change apart)
AS_WRITTEN = {"38_int8_char4_scale4": ("GEMV", "06_int8_char4"), "39_fp16_f32out_v2": ("LOGITS", "12_fp16_f32out_ilp"),
              "40_batched_f16w_sdata": ("BATCHED", "14_batched_f16w_half2"),
              "41_batched_fp16_sdata": ("BATCHED", "16_batched_fp16_half2"),
              "42_f32_to_f16_x2_plain": ("CONVERT", "18_f32_to_f16_x2"),
              "43_f16_to_f32_x2_plain": ("CONVERT", "20_f16_to_f32_x2")}


def test_the_reports_versions_are_steps_just_before_the_courses():
    for step, (fam, course) in AS_WRITTEN.items():
        names = list(getattr(gemv, fam).variants)
        assert names.index(step) + 1 == names.index(course), (step, names)
        assert getattr(gemv, fam).variants[step].dtypes == getattr(gemv, fam).variants[course].dtypes
        assert "// Why:" in build.step_source("gemv", f"gemv_{step}")


@pytest.mark.parametrize("arch", build.ARCHS)
def test_ptx_of_the_reports_versions(arch):
    n = lambda step, pat: len(build.ptx("gemv", step, arch, grep=pat))   # noqa: E731
    # 38: the report's "look up 4 scales" per char4 is 4 scale loads per 4-byte weight load (the tail
    # loads one scale and one x per element); the course's 06 loads one scale per char4
    v4 = n("38_int8_char4_scale4", r"ld\.global\.nc\.v4\.s8")
    assert v4 and n("38_int8_char4_scale4", r"ld\.global\.nc\.f32") - 2 * n("38_int8_char4_scale4", r"ld\.global\.nc\.s8") \
        == 4 * v4
    v4 = n("06_int8_char4", r"ld\.global\.nc\.v4\.s8")
    assert v4 and n("06_int8_char4", r"ld\.global\.nc\.f32") - 2 * n("06_int8_char4", r"ld\.global\.s8") == v4
    # ... and otherwise 06's: a register sum (CUB's barrier only, one fewer than the report's before 31)
    assert n("38_int8_char4_scale4", r"bar\.sync") == n("06_int8_char4", r"bar\.sync") == n("31_int8_sdata", r"bar\.sync") - 1
    # 39: the 4 accumulators share one 16-byte load of w and of x per lane per trip; 12 gives each its own
    loads = {s: n(s, r"ld\.global\.nc\.v4\.u32") for s in ("33_fp16_v2_ldg", "39_fp16_f32out_v2", "12_fp16_f32out_ilp")}
    assert loads["39_fp16_f32out_v2"] == loads["33_fp16_v2_ldg"] < loads["12_fp16_f32out_ilp"], loads
    assert not n("39_fp16_f32out_v2", r"mul\.lo\.s32") and n("11_fp16_f32out_half2", r"mul\.lo\.s32")   # int64 offset
    # 40, 41: the report's batched befores: ordinary loads, sdata[256] + a __syncthreads() before CUB, and
    # a*b + c (a MUL); the course's befores 14, 16 already had __ldg, the register sum and fmaf
    mul = r"^mul(\.rn)?(\.ftz)?\.f32"
    for before, course in (("40_batched_f16w_sdata", "14_batched_f16w_half2"),
                           ("41_batched_fp16_sdata", "16_batched_fp16_half2")):
        assert not n(before, r"ld\.global\.nc") and n(course, r"ld\.global\.nc"), before
        assert n(before, r"bar\.sync") == n(course, r"bar\.sync") + 1, before
        assert n(before, r"st\.shared") > n(course, r"st\.shared") and n(before, mul) and not n(course, mul), before
        assert not n(before, r"\.v4\."), before                          # still 4-byte (half2) weight loads
    # 42, 43: the report's conversion befores read through the ordinary path; 18, 20 through __ldg
    assert n("42_f32_to_f16_x2_plain", r"ld\.global\.v2\.f32") and not n("42_f32_to_f16_x2_plain", r"ld\.global\.nc")
    assert n("18_f32_to_f16_x2", r"ld\.global\.nc\.v2\.f32")
    assert n("43_f16_to_f32_x2_plain", r"ld\.global\.(u32|b32)") and not n("43_f16_to_f32_x2_plain", r"ld\.global\.nc")
    assert n("20_f16_to_f32_x2", r"ld\.global\.nc\.(u32|b32)")


def test_the_reports_batched_befores_carry_sdata_beside_cubs_storage():
    info = build.ptxas_info("gemv").set_index(["kernel", "arch"])["smem_bytes"]
    for arch in build.ARCHS:
        for before, course in (("40_batched_f16w_sdata", "14_batched_f16w_half2"),
                               ("41_batched_fp16_sdata", "16_batched_fp16_half2")):
            assert info[f"gemv_{before}", arch] >= info[f"gemv_{course}", arch] + 4 * 256, (before, arch)
        assert info["gemv_38_int8_char4_scale4", arch] == info["gemv_06_int8_char4", arch]


# The new kernels run on the CPU (core.emulate: every block of the grid), against the family's float64
# reference and tolerance. CUB does not build as C++: its BlockReduce is replaced by a shared-memory sum.
FAKE_CUB = r"""
namespace cub { template <class T, int N> struct BlockReduce {
    struct TempStorage { T v[N]; }; TempStorage& s;
    BlockReduce(TempStorage& t) : s(t) {}
    T Sum(T x) { s.v[threadIdx.x] = x; __syncthreads(); T r = 0;
                 if (threadIdx.x == 0) for (int i = 0; i < N; ++i) r += s.v[i];
                 __syncthreads(); return r; } }; }
"""


def _emulate(steps, kernel, arrays, scalars, grid, block):
    from kernellab.core import emulate
    if emulate.compiler() is None:
        pytest.skip("no C++ compiler: the CPU emulation cannot run the kernels")
    text = build.source("gemv")
    src = text[:text.index("// === ")].replace("#include <cub/block/block_reduce.cuh>", FAKE_CUB)
    src += "".join(build.step_source("gemv", f"gemv_{s}") for s in dict.fromkeys(steps))
    return emulate.run(src, f"gemv_{kernel}", arrays, scalars, grid, block, list(range(int(np.prod(grid)))))[0]


def _launch_on_cpu(step, host):
    """step's kernel on the CPU with the launch its launcher makes (NumPy bases are aligned)."""
    if step == "38_int8_char4_scale4":
        (W, s, x), (K, M) = host, host[0].shape
        return _emulate([step], step, [W, s, x, np.zeros(K, np.float32)], [K, M, int(M % 4 == 0)], (K,), (128,))[3]
    if step == "39_fp16_f32out_v2":
        (W, x), (K, M) = host, host[0].shape
        return _emulate([step], step, [W, x, np.zeros(K, np.float32)], [K, M, int(M % 8 == 0)], (-(-K // 8),), (256,))[2]
    if step.startswith(("40", "41")):
        (X, W), (N, M), K = host, host[0].shape, host[1].shape[0]
        Y = np.zeros((N, K), np.float32 if X.dtype == np.float32 else np.float16)
        return _emulate(["40_batched_f16w_sdata", step], step, [X, W, Y], [N, K, M, int(M % 2 == 0)], (K, N), (256,))[2]
    (a,) = host
    b = np.zeros(a.shape, np.float16 if a.dtype == np.float32 else np.float32)
    return _emulate([step], step, [a, b], [a.size, 1], (-(-a.size // 512),), (256,))[1]


CPU_CASES = {"38_int8_char4_scale4": [((3, 1023), "randn"), ((3, 4096), "hostile"), ((33, 4100), "large"), ((3, 7), "hostile")],
             "39_fp16_f32out_v2": [((3, 4096), "hostile"), ((33, 1023), "randn"), ((9, 4104), "large"), ((3, 1), "randn")],
             "40_batched_f16w_sdata": [((3, 33, 4100), "randn"), ((2, 5, 7), "hostile"), ((1, 3, 1), "randn")],
             "41_batched_fp16_sdata": [((3, 33, 1023), "randn"), ((2, 5, 4100), "hostile"), ((1, 3, 8), "randn")],
             "42_f32_to_f16_x2_plain": [((4097,), "randn"), ((5,), "hostile"), ((1024,), "large")],
             "43_f16_to_f32_x2_plain": [((4097,), "randn"), ((5,), "hostile"), ((1024,), "large")]}


@pytest.mark.parametrize("step", sorted(CPU_CASES))
def test_the_reports_versions_on_the_cpu_match_the_reference(step):
    from kernellab import check
    f = getattr(gemv, AS_WRITTEN[step][0])
    dtype = f.variants[step].dtypes[0]
    for i, (shape, values) in enumerate(CPU_CASES[step]):
        host = f.make_input(shape, dtype, values, seed=i)
        tol = f.tolerance(*host) if f.tolerance else {}
        check.check(_launch_on_cpu(step, host), f.reference(*host), name=f"{step} {shape} {values}", quiet=True, **tol)


def test_the_reports_versions_define_only_their_kernels():
    """The fingerprint links a slice to every slice that defines a word it uses: a Why comment whose
    parenthesis is read as a definition would tie every other step's fingerprint to the new slice."""
    from kernellab.core import fingerprint
    defines = fingerprint._file("gemv")[2]
    for step in AS_WRITTEN:
        want = {f"gemv_{step}"} | ({"cub_sum256_seed"} if step.startswith("40") else set())
        assert defines[f"gemv_{step}"] == want, (step, defines[f"gemv_{step}"])
