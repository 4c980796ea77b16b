"""GPU only: every GEMV, logits, batched and conversion variant against its float64 NumPy reference
on awkward shapes x hostile values with the M-scaled tolerance; K = 151936 and K x M past 2^31;
misaligned bases and odd M take the scalar fallback; bad input raises ValueError before a launch."""
import numpy as np
import pytest

from conftest import gpu
from kernellab import check, gemv

pytestmark = gpu
FAMILIES = {f.NAME: f for f in gemv.FAMILIES}
PARAMS = [(fam, nm, dt) for fam, f in FAMILIES.items() for nm, v in f.VARIANTS.items() for dt in v.dtypes]
M_SIZES = [1, 7, 8, 31, 1023, 4097, 4100]
K_SIZES = [1, 3, 33, 4097]
CASES = {
    "gemv": [(k, m) for m in M_SIZES for k in (1, 3, 33)] + [(4097, m) for m in (8, 1023, 4100)] + [(4097, 4097)],
    "gemv_logits": [(k, m) for m in M_SIZES for k in (3, 33)] + [(4097, 4100)],
    "gemv_batched": [(n, k, m) for n in (1, 3, 9) for k in (1, 33) for m in (1, 7, 31, 1023, 4100)],
    "gemv_convert": [(n,) for n in (1, 2, 3, 5, 7, 4097, 2 ** 20 + 3)],
    # the ablations: tails and fallbacks, and 4096-wide rows for the vector / tensor-core paths (M % 128 == 0;
    # 4097 rows: step 27's own kernel, not step 22's short-matrix fallback)
    "gemv_ablation": [(k, m) for m in (7, 31, 4100) for k in (3, 33)] + [(33, 4096), (4097, 4096), (4097, 1023)],
}


def _gpu(host):
    import cupy
    return [cupy.asarray(a) for a in host]


def _check(f, got, host, name):
    tol = f.tolerance(*host) if f.tolerance else {}
    check.check(got, f.reference(*host), name=name, quiet=True, **tol)


@pytest.mark.parametrize("values", ["randn", "large", "hostile"])
@pytest.mark.parametrize("fam,name,dtype", PARAMS, ids=["-".join(p) for p in PARAMS])
def test_variant_matches_reference(fam, name, dtype, values):
    f = FAMILIES[fam]
    for i, shape in enumerate(CASES[fam]):
        host = f.make_input(shape, dtype, values, seed=i)
        _check(f, f.VARIANTS[name](*_gpu(host)), host, f"{fam} {name} {dtype} {shape} {values}")


def test_logits_at_vocab_151936():
    host = gemv.LOGITS.make_input((151936, 4096), "fp16_f32out", "randn", seed=3)
    want, tol, dev = gemv.LOGITS.reference(*host), gemv.LOGITS.tolerance(*host), _gpu(host)
    for name, v in gemv.LOGITS.variants.items():
        check.check(v(*dev), want, name=name, quiet=True, **tol)


def test_past_int32_elements_int64_offsets_are_right_and_int32_step_refuses():
    """K x M > 2^31 elements (5 GB of fp16): the int64-offset kernels get the last rows right;
    the int32-offset step refuses before launching (it would read from a wrapped offset)."""
    import cupy
    K, M = 151936, 16384
    if cupy.cuda.Device().mem_info[0] < 8 * K * M // 2 + (2 << 30):
        pytest.skip("needs ~6 GB of free GPU memory")
    W = cupy.empty((K, M), cupy.float16)
    rng = cupy.random.default_rng(0)
    for r in range(0, K, 16384):                       # fill in slices: no 10 GB fp32 temporary
        W[r:r + 16384] = rng.standard_normal((min(16384, K - r), M), dtype=cupy.float32).astype(cupy.float16)
    x = rng.standard_normal(M, dtype=cupy.float32).astype(cupy.float16)
    rows = np.r_[0:4, K - 64:K]                        # the last rows sit past 2^31 elements
    assert (K - 64) * M > gemv.INT32_MAX
    host = (W[rows].get(), x.get())
    for name in ("39_fp16_f32out_v2", "12_fp16_f32out_ilp", "23_fp16_f32out_fast"):
        y = gemv.LOGITS.variants[name](W, x)
        check.check(y[rows], gemv.LOGITS.reference(*host), name=name, quiet=True, **gemv.LOGITS.tolerance(*host))
    y16 = gemv.GEMV.variants["22_fp16_fast"](W, x)
    check.check(y16[rows], gemv.reference(*host), name="22_fp16_fast", quiet=True, **gemv.tolerance(*host))
    with pytest.raises(ValueError, match="int32"):
        gemv.LOGITS.variants["11_fp16_f32out_half2"](W, x)
    del W
    cupy.get_default_memory_pool().free_all_blocks()


def test_misaligned_bases_and_odd_m_take_the_scalar_fallback():
    import cupy
    for path in ("float32", "float16", "f32_fp16w", "int8", "w8a16", "int4"):
        for K, M in ((33, 4096), (33, 4095), (5, 1025)):
            host = gemv.make_input((K, M), path, "randn", seed=M)
            dev = _gpu(host)
            x = host[-1]
            big = cupy.asarray(np.concatenate([np.zeros(1, x.dtype), x]))
            dev[-1] = big[1:]                          # x one element off its 16-byte alignment
            for nm, v in gemv.GEMV.variants.items():
                if path in v.dtypes:
                    _check(gemv, v(*dev), host, f"{nm} misaligned x {K}x{M}")
                    _check(gemv, v(*_gpu(host)), host, f"{nm} {K}x{M}")


def test_f32_fp16w_dispatch_picks_the_reports_kernel():
    for M in (1024, 2048, 4100):
        host = gemv.make_input((33, M), "f32_fp16w")
        _check(gemv, gemv.f32_fp16w_dispatch(*_gpu(host)), host, f"dispatch M={M}")


def test_every_fast_config_is_correct():
    """The launcher picks the threads per row G; every G the template allows must be right."""
    try:
        for name, (path, vec, R, U) in gemv.FAST.items():
            f = gemv.LOGITS if path == "fp16_f32out" else gemv
            v = f.VARIANTS[name]
            for G in (32, 64, 128, 256):
                gemv.FAST_G[name] = G
                for st in (0, 1):                      # plain __ldg and the L2 evict-first loads
                    gemv.FAST_STREAM[name] = st
                    for shape in ((5, 4100), (67, 1023), (2, 8192)):
                        host = f.make_input(shape, path, "randn", seed=G)
                        _check(f, v(*_gpu(host)), host, f"{name} G={G} stream={st} {shape}")
    finally:
        gemv.FAST_G.clear()
        gemv.FAST_STREAM.clear()


def test_every_tile_split_is_correct():
    """Steps 28 and 29 take any number of warps per 16-row tile (the launcher picks one per shape):
    every count from 1 to 16 must be right, with group counts that do not divide evenly."""
    try:
        for name, path in (("28_int4_mma", "int4"), ("29_int8_w8a16", "w8a16"), ("36_int4_tiles", "int4"),
                           ("37_w8a16_tiles", "w8a16")):
            for shape in ((33, 4096), (19, 1408), (16, 128)):
                for values in ("randn", "hostile"):
                    host = gemv.make_input(shape, path, values, seed=shape[1])
                    for S in range(1, 17):
                        gemv.TILE_SPLIT[(name, *shape)] = S
                        _check(gemv, gemv.GEMV.variants[name](*_gpu(host)), host, f"{name} split={S} {shape} {values}")
    finally:
        gemv.TILE_SPLIT.clear()


@pytest.mark.parametrize("name,path", [("36_int4_tiles", "int4"), ("37_w8a16_tiles", "w8a16")])
def test_tiles_on_packed_weights_cache_and_bad_packed_input(name, path):
    """Steps 36 and 37 called on gemv.pack's arrays (what an engine keeps) and on the quantiser's
    arrays (repacked once, then looked up by identity) match the reference; the second call with the
    same arrays reuses the repack, a new array gets its own; unpack inverts pack; packed arrays that do
    not match x, or an 8-byte-misaligned Mi, are a ValueError before any launch."""
    import cupy
    v = gemv.GEMV.variants[name]
    for shape in ((33, 4096), (4097, 4096), (19, 1408), (16, 128)):
        for values in ("randn", "hostile"):
            host = gemv.make_input(shape, path, values, seed=shape[0])
            dev = _gpu(host)
            args = (*gemv.pack(path, *dev[:-1]), dev[-1])
            assert len(args) == len(host) + 1
            _check(gemv, v(*args), host, f"{name} packed {shape} {values}")
            for a, b in zip(gemv.unpack(*args[:-1]), dev[:-1]):
                assert a.dtype == b.dtype and bool((a.view(cupy.uint8) == b.view(cupy.uint8)).all()), \
                    f"unpack(pack(w)) != w at {shape}"
            _check(gemv, v(*dev), host, f"{name} first call {shape} {values}")
            first = gemv.tiles(*dev[:-1])
            _check(gemv, v(*dev), host, f"{name} cached {shape} {values}")
            assert gemv.tiles(*dev[:-1]) is first, "the repack is made once per weight array"
            fresh = _gpu(host)
            assert gemv.tiles(*fresh[:-1]) is not first
    Wi, Mi, *rest = gemv.pack(path, *_gpu(gemv.make_input((33, 256), path))[:-1])
    x = _gpu(gemv.make_input((33, 256), path))[-1]
    rest = [*rest, x]
    skew = cupy.zeros(Mi.nbytes + 4, cupy.uint8)[4:].view(Mi.dtype).reshape(Mi.shape)
    for bad, what in (((Wi[:1], Mi, *rest), "do not match"), ((Wi, Mi, *rest[:-1], rest[-1][:128]), "do not match"),
                      ((Wi, skew, *rest), "boundaries"), ((Wi, Mi, *rest[:-2], rest[-1]), None)):
        with pytest.raises(ValueError, match=what):
            v(*bad)


@pytest.mark.parametrize("name,path", [("36_int4_tiles", "int4"), ("37_w8a16_tiles", "w8a16")])
def test_a_cached_repack_never_serves_another_array(name, path):
    """Called with the quantiser's arrays and out=, the step replays a launch plan for the very same
    objects; freed and reallocated (the pool hands back the same addresses), new weights of the same
    shape get their own repack and the right answer."""
    v = gemv.GEMV.variants[name]
    for seed in range(3):
        host = gemv.make_input((64, 4096), path, seed=seed)
        dev = _gpu(host)
        out = v.alloc_out(*dev)
        for _ in range(3):
            v(*dev, out=out)
        _check(gemv, out, host, f"{name} seed {seed}, third call")
        del dev, out


def test_empty_shapes():
    import cupy
    for nm, v in gemv.GEMV.variants.items():
        path = v.dtypes[0]
        W, x = gemv.make_input((4, 8), path)[0], gemv.make_input((4, 8), path)[-1]  # noqa: F841
        host = gemv.make_input((0, 8), path)
        assert v(*_gpu(host)).shape == (0,)
        host = gemv.make_input((3, 0), path) if path not in ("int8", "int4") else None
        if host:
            assert float(abs(v(*_gpu(host))).max()) == 0.0
    assert gemv.BATCHED.VARIANTS["17_batched_fp16_float4"](cupy.zeros((0, 8), cupy.float16),
                                                           cupy.zeros((4, 8), cupy.float16)).shape == (0, 4)


def test_bad_input_raises_before_launch():
    import cupy
    f16, f32 = cupy.float16, cupy.float32
    W16, x16 = cupy.zeros((4, 256), f16), cupy.zeros(256, f16)
    W32, x32 = cupy.zeros((4, 256), f32), cupy.zeros(256, f32)
    q8, s8 = cupy.zeros((4, 256), cupy.int8), cupy.zeros((4, 2), f32)
    q4, s4, z4 = cupy.zeros((4, 128), cupy.uint8), cupy.zeros((4, 2), f16), cupy.zeros((4, 2), cupy.uint8)
    V = gemv.GEMV.variants
    bad = [
        (V["22_fp16_fast"], (W32, x16), "dtype"),
        (V["22_fp16_fast"], (W16, x32), "dtype"),
        (V["24_f32_fast"], (W32.astype(cupy.float64), x32), "dtype"),
        (V["22_fp16_fast"], (W16, cupy.zeros(255, f16)), "disagree"),
        (V["10_fp16_v2"], (cupy.zeros(256, f16), x16), "2-D"),
        (V["04_f32_ldg"], (cupy.zeros((256, 4), f32).T, cupy.zeros(256, f32)), "contiguous"),
        (V["22_fp16_fast"], (W16, cupy.zeros(512, f16)[::2]), "contiguous"),
        (V["25_int8_fast"], (q8, cupy.zeros((4, 3), f32), x32), r"4 x 2 = 8"),
        (V["06_int8_char4"], (q8, cupy.zeros(7, f32), x32), "scales"),
        (V["25_int8_fast"], (q8, s8.astype(f16), x32), "dtype"),
        (V["25_int8_fast"], (q8, x32), "expected 3 arrays"),
        (V["26_int4_awq"], (q4, s4, z4, cupy.zeros(250, f16)), "disagree"),
        (V["26_int4_awq"], (q4, s4, cupy.zeros((4, 3), cupy.uint8), x16), "zeros"),
        (V["26_int4_awq"], (q4, s4.astype(f32), z4, x16), "dtype"),
        (V["08_f32_fp16w_block"], (W16, x16), "dtype"),
        (V["22_fp16_fast"], (W16.get(), x16), "cupy.ndarray"),
        (gemv.BATCHED.VARIANTS["17_batched_fp16_float4"], (cupy.zeros((3, 255), f16), W16), "disagree"),
        (gemv.BATCHED.VARIANTS["15_batched_f16w_half2x2"], (cupy.zeros((3, 256), f16), W16), "dtype"),
        (gemv.CONVERT.variants["19_f32_to_f16_x4"], (x16,), "dtype"),
        # the report's befores (steps 30-34)
        (V["30_f32_sdata_float4"], (W32, x16), "dtype"),
        (V["30_f32_sdata_float4"], (W32, cupy.zeros(255, f32)), "disagree"),
        (V["31_int8_sdata"], (q8, cupy.zeros(7, f32), x32), "scales"),
        (V["31_int8_sdata"], (q8, s8, x16), "dtype"),
        (V["32_fp16_v2_plain"], (W16, cupy.zeros(512, f16)[::2]), "contiguous"),
        (V["33_fp16_v2_ldg"], (cupy.zeros(256, f16), x16), "2-D"),
        (gemv.BATCHED.VARIANTS["34_batched_f32_sdata"], (cupy.zeros((3, 256), f16), W32), "dtype"),
        (gemv.BATCHED.VARIANTS["34_batched_f32_sdata"], (cupy.zeros((3, 255), f32), W32), "disagree"),
    ]
    for fn, args, match in bad:
        with pytest.raises(ValueError, match=match):
            fn(*args)
    with pytest.raises(ValueError, match="shape"):
        V["22_fp16_fast"](W16, x16, out=cupy.empty(5, f16))
    with pytest.raises(ValueError, match="dtype"):
        V["22_fp16_fast"](W16, x16, out=cupy.empty(4, f32))
    cupy.cuda.Device().synchronize()                  # the context is still healthy
    check.check(V["22_fp16_fast"](W16, x16), np.zeros(4, np.float16), quiet=True)


def test_hgemm_route_matches_reference():
    for n in (1, 8, 9):
        host = gemv.BATCHED.make_input((n, 33, 4100), "f32_fp16w", seed=n)
        f = gemv.BATCHED.BASELINES["cuBLAS Hgemm route (f32->f16, Hgemm, f16->f32)"](*_gpu(host))
        # x is rounded to fp16 on the way in: compare with the reference of the rounded tokens
        X16 = host[0].astype(np.float16).astype(np.float32)
        tol = gemv.BATCHED.tolerance(X16, host[1])
        check.check(f(), gemv.BATCHED.reference(X16, host[1]), quiet=True,
                    rtol=5e-3, atol=tol["atol"] + 1e-3 * float(np.abs(X16).max()) * 4100 ** 0.5)


def test_gemmex_route_matches_reference():
    """The report's fp16-in, fp32-out prefill route (one cublasGemmEx, fp32 C): against the float64
    reference of the same fp16 inputs, with the fp32 output kept (no rounding to fp16)."""
    for n in (1, 8, 9):
        host = gemv.BATCHED.make_input((n, 33, 4100), "float16", seed=n)
        f = gemv.BATCHED.BASELINES[gemv.GEMMEX](*_gpu(host))
        got = f()
        assert got.dtype == np.float32 and got.shape == (n, 33)
        want = np.asarray(host[0], np.float64) @ np.asarray(host[1], np.float64).T
        tol = gemv.BATCHED.tolerance(host[0].astype(np.float32), host[1].astype(np.float32))
        check.check(got, want.astype(np.float32), quiet=True, rtol=1e-5, atol=tol["atol"] * 4)
    assert gemv.BATCHED.BASELINES[gemv.GEMMEX](*_gpu(gemv.BATCHED.make_input((2, 4, 8), "f32_fp16w"))) is None


def test_the_reports_pairs_agree_on_the_reports_shapes():
    """Each of the report's before/after pairs (steps 30 -> 04, 31 -> 06, 32 -> 33, 34 -> 13) at a
    shape of its table, and with M % 8 != 0 (the befores' scalar tails)."""
    pairs = [("30_f32_sdata_float4", "04_f32_ldg", "float32"), ("31_int8_sdata", "06_int8_char4", "int8"),
             ("32_fp16_v2_plain", "33_fp16_v2_ldg", "float16")]
    for before, after, path in pairs:
        for shape in ((512, 4096), (37, 4101)):
            host = gemv.make_input(shape, path, "randn", seed=7)
            for nm in (before, after):
                _check(gemv, gemv.GEMV.variants[nm](*_gpu(host)), host, f"{nm} {shape}")
    for shape in ((8, 512, 4096), (3, 37, 4101)):
        host = gemv.BATCHED.make_input(shape, "float32", seed=7)
        for nm in ("34_batched_f32_sdata", "13_batched_f32"):
            _check(gemv.BATCHED, gemv.BATCHED.VARIANTS[nm](*_gpu(host)), host, f"{nm} {shape}")


def test_the_reports_versions_as_written():
    """Issue 34 item 5: the report's kernels as it writes them (38 int8 after, 39 logits after, 40/41 batched
    befores, 42/43 conversion befores), each beside the step of its pair, at a shape of the report's table and
    with odd sizes (the scalar tails), on misaligned bases (the fallbacks), and refusing bad input before a launch."""
    import cupy
    fams = {"GEMV": gemv.GEMV, "LOGITS": gemv.LOGITS, "BATCHED": gemv.BATCHED, "CONVERT": gemv.CONVERT}
    runs = [("GEMV", "int8", ("31_int8_sdata", "38_int8_char4_scale4", "06_int8_char4"), ((512, 4096), (37, 4101))),
            ("LOGITS", "fp16_f32out", ("11_fp16_f32out_half2", "39_fp16_f32out_v2", "12_fp16_f32out_ilp"),
             ((4096, 12288), (37, 4101))),
            ("BATCHED", "f32_fp16w", ("40_batched_f16w_sdata", "14_batched_f16w_half2", "15_batched_f16w_half2x2"),
             ((8, 512, 4096), (3, 37, 4101))),
            ("BATCHED", "float16", ("41_batched_fp16_sdata", "16_batched_fp16_half2", "17_batched_fp16_float4"),
             ((8, 512, 1152), (3, 37, 4101))),
            ("CONVERT", "f32_to_f16", ("42_f32_to_f16_x2_plain", "18_f32_to_f16_x2", "19_f32_to_f16_x4"),
             ((512 * 4096,), (4097,))),
            ("CONVERT", "f16_to_f32", ("43_f16_to_f32_x2_plain", "20_f16_to_f32_x2", "21_f16_to_f32_x4"),
             ((512 * 4096,), (4097,)))]
    for fam, dt, steps, shapes in runs:
        f = fams[fam]
        for shape in shapes:
            host = f.make_input(shape, dt, "randn", seed=7)
            for nm in steps:
                _check(f, f.variants[nm](*_gpu(host)), host, f"{fam} {nm} {shape}")
            dev = _gpu(host)
            last = dev[-1].ravel()
            big = cupy.concatenate([cupy.zeros(1, last.dtype), last])      # the last input one element off
            dev[-1] = big[1:].reshape(dev[-1].shape)
            for nm in steps:
                _check(f, f.variants[nm](*dev), host, f"{fam} {nm} {shape} misaligned")
        for nm in steps[:2]:
            with pytest.raises(ValueError):
                f.variants[nm](*[a.astype(cupy.float64) for a in _gpu(f.make_input(shapes[1], dt))])
