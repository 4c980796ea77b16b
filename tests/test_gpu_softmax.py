"""GPU only: every softmax variant against the float64 reference on irregular shapes and
hostile values; bad input raises before launch; the naive step really overflows."""
import zlib

import numpy as np
import pytest

from conftest import gpu
from kernellab import check, softmax

pytestmark = gpu
SHAPES = [(1, c) for c in (1, 31, 33, 1023, 4097, 65537)] + [(3, c) for c in (1, 31, 33, 1023, 4097, 65537)] \
    + [(5, 1024), (7, 32768), (2, 40000), (5, 262144), (777, 16400)]   # last: more rows than step 11's clusters


# every step of the lab, every row of the step-05 ablation table, and the short-row family (step 08)
ALL = {**softmax.SOFTMAX.variants, **softmax.ABLATION.variants, **softmax.SHORT.variants}


def _run(name, x):
    import cupy
    return ALL[name](cupy.asarray(x))


@pytest.mark.parametrize("values", ["randn", "large", "hostile"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", list(ALL))
def test_variant_matches_reference(name, shape, values):
    v = ALL[name]
    if not v.accepts((shape, values)):
        pytest.skip("not overflow-safe by design (see test_naive_overflows), or a row longer than step 08 "
                    "takes (see test_safe_v1_takes_rows_up_to_1024)")
    for dt in v.dtypes:
        # a seed fixed by the case (hash() of a str changes with every process: a flaky test)
        (x,) = softmax.make_input(shape, dt, values, seed=zlib.crc32(repr((shape, values)).encode()) % 1000)
        check.check(_run(name, x), softmax.reference(x), name=f"{name} {shape} {values} {dt}", quiet=True,
                    **softmax.tolerance(x, serial=name == "01_naive"))


def test_naive_overflows_at_89():
    (x,) = softmax.make_input((2, 64), values="large")
    got = _run("01_naive", x).get()
    assert np.isnan(got).all() and np.isfinite(softmax.reference(x)).all()


@pytest.mark.parametrize("name", list(ALL))
def test_empty_inputs(name):
    import cupy
    v = ALL[name]
    for shape in [(0, 7), (3, 0)]:
        out = v(cupy.zeros(shape, v.dtypes[0]))
        assert out.shape == shape


def test_unaligned_and_odd_lengths_use_the_fallback():
    import cupy
    (x,) = softmax.make_input((4, 1027))
    big = cupy.asarray(np.concatenate([[0.0], x.ravel()]).astype(np.float32))
    view = big[1:].reshape(4, 1027)                       # base 4 bytes off 16-byte alignment
    check.check(softmax.online_vec4(view), softmax.reference(x), quiet=True)
    (h,) = softmax.make_input((4, 1024), "float16")
    hb = cupy.asarray(np.concatenate([[0], h.ravel()]).astype(np.float16))
    check.check(softmax.fp16_vec8(hb[1:].reshape(4, 1024)), softmax.reference(h), quiet=True)
    check.check(softmax.fp16_pipelined(hb[1:].reshape(4, 1024)), softmax.reference(h), quiet=True)


@pytest.mark.parametrize("values", ["randn", "hostile"])
@pytest.mark.parametrize("shape", [(20000, 1024), (3000, 4096), (2001, 2048), (40, 40000)], ids=str)
def test_pipelined_walks_more_rows_than_resident_blocks(shape, values):
    """Step 07's grid holds only the blocks that fit at once: each walks many rows, loading the
    next before finishing this one. Many more rows than resident blocks exercise that loop
    (and rows too long for the registers go to step 06)."""
    (x,) = softmax.make_input(shape, "float16", values, seed=3)
    check.check(_run("07_fp16_pipelined", x), softmax.reference(x), name=f"07 {shape} {values}", quiet=True)


def test_one_exp_online_keeps_the_semantics_of_two_exp():
    """The one-exp update and the first two-exp version agree on every hostile row."""
    for shape in [(5, 4097), (6, 33), (5, 1)]:
        (x,) = softmax.make_input(shape, values="hostile", seed=1)
        a, b = _run("04_online", x).get(), _run("04_ablate_two_exp", x).get()
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("name", list(ALL))
def test_bad_input_raises_before_launch(name):
    import cupy
    v = ALL[name]
    good = v.dtypes[0]
    wrong = "float64" if good == "float32" else "float32"
    with pytest.raises(ValueError, match="dtype"):
        v(cupy.zeros((2, 8), wrong))
    with pytest.raises(ValueError, match="2-D"):
        v(cupy.zeros((2, 2, 8), good))
    with pytest.raises(ValueError, match="contiguous"):
        v(cupy.zeros((8, 4), good).T)
    with pytest.raises(ValueError, match="shape"):
        v(cupy.zeros((2, 8), good), out=cupy.zeros((2, 9), good))
    cupy.cuda.Device().synchronize()   # the context is still healthy


@pytest.mark.parametrize("values", ["randn", "large", "hostile"])
def test_safe_v1_takes_rows_up_to_1024(values):
    """Step 08 (the tutorial's safe_v1): one element per thread, block = C rounded up to a power of
    two, so every C from 1 to 1024 (padding lanes, a single warp, a full block) matches; C = 1025
    raises ValueError before any launch and leaves the context healthy."""
    import cupy
    for C in (1, 2, 31, 32, 33, 100, 255, 256, 257, 513, 1000, 1023, 1024):
        (x,) = softmax.make_input((6, C), "float32", values, seed=C)
        check.check(_run("08_safe_v1", x), softmax.reference(x), name=f"08 C={C} {values}", quiet=True)
    with pytest.raises(ValueError, match="C <= block size"):
        softmax.safe_v1(cupy.zeros((2, 1025), cupy.float32))
    cupy.cuda.Device().synchronize()


def test_short_family_checks_pass():
    from kernellab.core.check import variants
    variants(softmax.SHORT)
