"""Everywhere: the NumPy references and the checker are right, so GPU checks can be trusted."""
import numpy as np
import pytest

from kernellab import check, softmax


def test_softmax_reference_matches_definition():
    (x,) = softmax.make_input((3, 17))
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(softmax.reference(x), e / e.sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(softmax.reference(x).sum(1), 1.0, rtol=1e-6)


def test_softmax_reference_survives_large_values_where_naive_overflows():
    (x,) = softmax.make_input((2, 40), values="large")
    assert (x >= 89).any()
    ref = softmax.reference(x)
    assert np.isfinite(ref).all()
    np.testing.assert_allclose(ref.sum(1), 1.0, rtol=1e-5)
    assert np.isnan(softmax.reference_naive(x)).all()


def test_softmax_reference_hostile_semantics():
    (x,) = softmax.make_input((5, 9), values="hostile")
    ref = softmax.reference(x)
    assert np.isfinite(ref[0]).all() and ref[0, 4] == pytest.approx(1.0)   # 1e4 dominates
    assert (ref[1, ::7] == 0).all() and np.isfinite(ref[1]).all()          # -inf elements -> 0
    assert np.isnan(ref[2]).all()                                          # all -inf -> NaN
    assert np.isnan(ref[3]).all() and np.isnan(ref[4]).all()               # NaN / +inf -> NaN row


def test_softmax_reference_fp16_extremes_and_empty():
    (x,) = softmax.make_input((5, 16), "float16", values="hostile")
    assert x.dtype == np.float16 and x[0].max() == np.float16(65504)
    ref = softmax.reference(x)
    assert ref.dtype == np.float16 and ref[0, 8] == np.float16(1.0)
    for shape in [(0, 5), (2, 0)]:
        assert softmax.reference(softmax.make_input(shape)[0]).shape == shape


def test_check_passes_and_prints_one_line(capsys):
    want = np.array([1.0, np.nan, np.inf, -np.inf, 0.5], np.float32)
    check.check(want.copy(), want, name="same")
    assert capsys.readouterr().out.count("\n") == 1


@pytest.mark.parametrize("got", [[1.0, 2.0, 3.01], [1.0, np.nan, 3.0], [1.0, 2.0, np.inf], [1.0, 2.0]])
def test_check_raises_on_mismatch(got):
    want = np.array([1.0, 2.0, 3.0], np.float32)
    with pytest.raises(check.CheckError):
        check.check(np.array(got, np.float32), want)


def test_check_reports_worst_index():
    want = np.zeros((4, 4), np.float32)
    got = want.copy()
    got[2, 3] = 1.0
    with pytest.raises(check.CheckError, match=r"\(2, 3\)"):
        check.check(got, want)


def test_fp16_tolerance_is_looser_than_fp32():
    want = np.array([1.0], np.float64)
    check.check(np.array([1.001], np.float16), want, quiet=True)
    with pytest.raises(check.CheckError):
        check.check(np.array([1.001], np.float32), want, quiet=True)


def test_launchers_reject_host_arrays_before_launch():
    for name, fn in {**softmax.SOFTMAX.variants, **softmax.SHORT.variants}.items():
        with pytest.raises(ValueError, match="cupy.ndarray"):
            fn(np.zeros((2, 8), np.float32))


def test_short_row_family_holds_only_rows_step_08_takes():
    """softmax.SHORT (step 08, the tutorial's safe_v1, beside the steps it is timed against): every
    case it checks or records has C <= 1024, step 08 accepts exactly those, and the references run."""
    v = softmax.SHORT.variants["08_safe_v1"]
    assert all(s[-1] <= softmax.SAFE_V1_MAX_BLOCK for s, _ in softmax.SHORT.RECORD_CASES + softmax.SHORT.check_cases)
    assert v.accepts(((4, 1024), "hostile")) and not v.accepts(((4, 1025), "randn"))
    assert not any(v is f for f in softmax.SOFTMAX.variants.values())      # the main family's cases reach 151936
    for shape, values in softmax.SHORT.check_cases:
        (x,) = softmax.SHORT.make_input(shape, "float32", values)
        assert softmax.SHORT.reference(x).shape == x.shape


def test_gemv_seed_befores_have_the_references_of_their_paths():
    """Steps 30-34 (the matmul report's befores) take the same inputs as their afters."""
    from kernellab import gemv
    for before, after in (("30_f32_sdata_float4", "04_f32_ldg"), ("31_int8_sdata", "06_int8_char4"),
                          ("32_fp16_v2_plain", "33_fp16_v2_ldg")):
        assert gemv.GEMV.variants[before].dtypes == gemv.GEMV.variants[after].dtypes
    assert gemv.BATCHED.VARIANTS["34_batched_f32_sdata"].dtypes == gemv.BATCHED.VARIANTS["13_batched_f32"].dtypes


def test_rmsnorm_reference_matches_definition_and_semantics():
    from kernellab import rmsnorm
    x, w = rmsnorm.make_input((5, 33), "float32", "hostile")
    ref = rmsnorm.reference(x, w)
    xd = x[0].astype(np.float64)
    np.testing.assert_allclose(ref[0], xd / np.sqrt(np.mean(xd * xd) + rmsnorm.EPS) * w, rtol=1e-6)
    assert (ref[1] == 0).all()                                      # all-zero row -> 0
    assert np.isnan(ref[2]).all()                                   # NaN -> NaN row
    assert np.isnan(ref[3, 11]) and (np.delete(ref[3], 11) == 0).all()   # +inf: inf * 0 = NaN, rest 0
    for path in rmsnorm.PATHS:
        x, w = rmsnorm.make_input((3, 8), path)
        assert rmsnorm.reference(x, w).dtype == x.dtype and (x.dtype, w.dtype) == tuple(map(np.dtype, rmsnorm.PATHS[path]))


def test_fused_reference_is_add_then_rmsnorm():
    from kernellab import rmsnorm
    x, r, w = rmsnorm.FUSED.make_input((3, 40), "float16", "randn")
    h, y = rmsnorm.FUSED.reference(x, r, w)
    assert h.dtype == np.float16 and (h == (x.astype(np.float32) + r).astype(np.float16)).all()
    np.testing.assert_array_equal(y, rmsnorm.reference(h, w))


def test_add_references_and_hostile_values():
    from kernellab import add
    a, b = add.make_input((50,), "float16", "hostile")
    ref = add.reference(a, b)
    assert np.isnan(ref).any() and np.isinf(a).any() and (np.abs(a) == 65504).any()
    a, b = add.make_input((50,), "float16", "large")
    assert np.isinf(add.reference(a, b)).any()                     # fp16 sums overflow, as they must
    m, bias = add.BIAS.make_input((4, 10), "float16")
    np.testing.assert_array_equal(add.BIAS.reference(m, bias), (m.astype(np.float32) + bias).astype(np.float16))
    x = np.ones((6, 4), np.float16)
    out = add.rows_reference(x, np.full((2, 4), 2, np.float16), 3)
    assert (out[3:5] == 3).all() and (out[:3] == 1).all() and (out[5] == 1).all() and (x == 1).all()


def test_dram_passes_model():
    """Re-reads are free while the rows in flight fit in L1 (per SM) or L2 (all SMs); otherwise
    every pass crosses DRAM, and the copy-roof bound is 2 / passes."""
    L1, L2 = 256 << 10, 60 << 20
    small = softmax.dram_passes(4096, 4, 8, 132, L1, L2)            # 16 KiB rows, 128 KiB per SM
    assert small["re-reads from"] == "L1" and small["DRAM passes (model)"] == 2 and small["bound (2 / DRAM passes)"] == 1
    mid = softmax.dram_passes(8192, 4, 8, 132, L1, L2)              # 256 KiB per SM: L1 is full (smem too)
    assert mid["re-reads from"] == "L2" and mid["DRAM passes (model)"] == 2
    big = softmax.dram_passes(16384, 4, 8, 132, L1, L2)             # 66 MiB on the GPU > L2
    assert big["re-reads from"] == "DRAM" and big["DRAM passes (model)"] == 4 and big["bound (2 / DRAM passes)"] == 0.5
    assert softmax.dram_passes(16384, 4, 8, 132, L1, L2, reads=2)["DRAM passes (model)"] == 3
    assert softmax.dram_passes(16384, 4, 8, 16, 192 << 10, 4 << 20)["re-reads from"] == "DRAM"   # an Orin-sized L2


def test_passes_table_reads_a_recorded_frame():
    import pandas as pd
    from kernellab.device import recorded_meta
    meta = next(iter(recorded_meta().values()), None)
    if meta is None:
        pytest.skip("no recorded device")
    df = pd.DataFrame([{"name": "03_warp_shuffle", "dtype": "float32", "rows": 8192, "cols": 4096, "frac_copy": 0.8,
                        "device": meta["device"], "source": "recorded", "date": "?"}])
    t = softmax.passes_table(df)
    assert len(t) == 1 and t["passes implied (2 / fraction)"].iloc[0] == pytest.approx(2.5)
    assert softmax.passes_table(df.iloc[0:0]).empty


def test_round_trips_model():
    from kernellab import rmsnorm
    before = rmsnorm.round_trips("05_fp16_half2_cub", 4096, 2)     # 4-byte loads, one in flight
    after = rmsnorm.round_trips("06_fp16_uint4", 4096, 2)          # 16-byte loads, four in flight
    assert before["round trips (first pass)"] == 16 and after["round trips (first pass)"] == 1
    assert after["bytes in flight per row"] == 16 * before["bytes in flight per row"]
    assert rmsnorm.round_trips("08_onepass", 4096, 2)["threads per row"] == 512   # decode: one load per thread
    assert rmsnorm.round_trips("08_onepass", 4096, 2, R=512, sms=132)["threads per row"] == 128


def test_add_bytes_in_flight():
    from kernellab import add
    assert [add.in_flight(s, 8)["bytes in flight per thread"] for s in
            ("08_vec_fp16_scalar", "03_fp16_half2", "04_fp16_vec8")] == [4, 8, 32]
    assert add.in_flight("04_fp16_vec8", 8)["KiB in flight per SM"] == 32 * 256 * 8 / 1024


def test_memcpy_floor_counts_only_its_bytes():
    import pandas as pd
    from kernellab import rmsnorm
    df = pd.DataFrame([{"name": rmsnorm.MEMCPY, "dtype": "float16", "cols": 4096, "bytes": 3 * 8192,
                        "median_us": 1.0, "gbps": 3 * 8192 / 1e3, "frac_copy": 0.3, "frac_read": 0.3},
                       {"name": "06_fp16_uint4", "dtype": "float16", "cols": 4096, "bytes": 3 * 8192,
                        "median_us": 1.0, "gbps": 3 * 8192 / 1e3, "frac_copy": 0.3, "frac_read": 0.3}])
    out = rmsnorm.memcpy_counts_its_own_bytes(df)
    assert out["bytes"].tolist() == [2 * 8192, 3 * 8192]
    assert out["gbps"].iloc[0] == pytest.approx(2 * 8192 / 1e3) and out["frac_copy"].iloc[0] == pytest.approx(0.2)
    assert df["bytes"].iloc[0] == 3 * 8192                          # the input frame is untouched


@pytest.mark.parametrize("dt", ["float32", "float16"])
def test_softmax_dispatch_covers_every_row(dt):
    """Step 09's geometry holds a whole row (lanes x loads x elements per 16-byte load >= C, lanes a
    power of two <= 32) or sends it on; step 10's clusters hold a row in 2, 4 or 8 blocks of at most
    the kernel's threads, chunks 16-byte aligned, and refuse rows past what 8 blocks hold."""
    from kernellab import softmax as S
    w = 8 if dt == "float16" else 4
    for C in list(range(1, 300)) + [511, 512, 513, 1023, 1024, 1025, 2048]:
        g = S.rows_per_warp_geometry(C, dt)
        if g is not None:
            lpr, nv = g
            assert lpr & (lpr - 1) == 0 and lpr <= 32 and lpr * nv * w >= C
            assert nv <= (1 if dt == "float16" else S.RPW_REGS)
    for C in (16385, 32768, 65536, 65537, 151936, 262144):
        cs, threads, chunk = S.cluster_geometry(C, dt)
        assert cs in (2, 4, 8) and chunk % 8 == 0 and cs * chunk >= C
        assert threads * S.CLUSTER_ELEMS[dt] >= chunk and threads <= S.CLUSTER_THREADS[dt][-1]
    assert S.cluster_geometry(2 ** 18 + 1, dt) is None
