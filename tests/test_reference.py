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
    for name, fn in softmax.VARIANTS.items():
        with pytest.raises(ValueError, match="cupy.ndarray"):
            fn(np.zeros((2, 8), np.float32))


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
