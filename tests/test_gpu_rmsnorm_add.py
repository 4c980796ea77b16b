"""GPU only: every RMSNorm, fused add+RMSNorm, add and bias-add variant against its NumPy
reference on awkward sizes x batches x hostile values; the DeepStack slice add; bad input
raises a ValueError before any launch and leaves the context healthy."""
import numpy as np
import pytest

from conftest import gpu
from kernellab import add, check, rmsnorm

pytestmark = gpu
HIDDEN = [1, 31, 1023, 1152, 3584, 4097]
BATCHES = [1, 3, 64, 512]
VALUES = ["randn", "large", "hostile"]
CASES = {
    "rmsnorm": [(b, c) for c in HIDDEN for b in BATCHES],
    "rmsnorm_ablation": [(b, c) for c in HIDDEN for b in BATCHES],
    "add_rmsnorm": [(b, c) for c in HIDDEN for b in BATCHES],
    "add": [(n,) for n in [1, 7, 8, 9, 31, 1023, 1152, 3584, 4097, 64 * 4097, 512 * 3584 + 3, 2 ** 20 + 5]],
    "bias_add": [(b, c) for c in HIDDEN + [8, 4096] for b in BATCHES] + [(70000, 16), (3, 151936)],
}
FAMILIES = {f.NAME: f for f in (rmsnorm, rmsnorm.FUSED, rmsnorm.ABLATION, add, add.BIAS)}
PARAMS = [(fam, nm, dt) for fam, f in FAMILIES.items() for nm, v in f.VARIANTS.items() for dt in v.dtypes]


def _gpu(host):
    import cupy
    return [cupy.asarray(a) for a in host]


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("fam,name,dtype", PARAMS, ids=["-".join(p) for p in PARAMS])
def test_variant_matches_reference(fam, name, dtype, values):
    f = FAMILIES[fam]
    for i, shape in enumerate(CASES[fam]):
        host = f.make_input(shape, dtype, values, seed=i)
        got = f.VARIANTS[name](*_gpu(host))
        for g, w in check._pairs(got, f.reference(*host)):
            check.check(g, w, name=f"{fam} {name} {dtype} {shape} {values}", quiet=True)


@pytest.mark.parametrize("name", list(rmsnorm.RMSNORM.variants))
def test_rmsnorm_single_row_is_1d_and_grid_1(name):
    v = rmsnorm.RMSNORM.variants[name]
    for dt in v.dtypes:
        x, w = rmsnorm.make_input((1, 4096), dt)
        got = v(*_gpu((x[0], w)))
        assert got.shape == (4096,)
        check.check(got, rmsnorm.reference(x[0], w), quiet=True)


@pytest.mark.parametrize("name", list(rmsnorm.RMSNORM.variants))
def test_rmsnorm_zero_row_is_zero_and_nan_propagates(name):
    v = rmsnorm.RMSNORM.variants[name]
    for dt in v.dtypes:
        x, w = rmsnorm.make_input((2, 1152), dt)
        x[0] = 0
        x[1, 5] = np.nan
        got = v(*_gpu((x, w))).get()
        assert (got[0] == 0).all()                 # 0 * rsqrt(0 + eps) * w: eps keeps it finite
        assert np.isnan(got[1]).all()


def test_misaligned_and_long_rows_take_the_fallbacks():
    import cupy
    for dt in ("float32", "float16"):
        x, w = rmsnorm.make_input((3, 1024), dt)
        big = cupy.asarray(np.concatenate([np.zeros(1, dt), x.ravel()]))
        view = big[1:].reshape(3, 1024)            # one element off 16-byte alignment
        for nm, v in rmsnorm.RMSNORM.variants.items():
            if dt in v.dtypes:
                check.check(v(view, cupy.asarray(w)), rmsnorm.reference(x, w), name=nm, quiet=True)
        a, b = add.make_input((4099,), dt)
        va = cupy.asarray(np.concatenate([np.zeros(1, dt), a]))[1:]
        for nm, v in add.ADD.variants.items():
            if dt in v.dtypes:
                check.check(v(va, cupy.asarray(b)), add.reference(a, b), name=nm, quiet=True)
    x, w = rmsnorm.make_input((2, 40000), "float16")   # longer than the registers hold
    check.check(rmsnorm.onepass(*_gpu((x, w))), rmsnorm.reference(x, w), quiet=True)


def test_empty_inputs_launch_nothing():
    import cupy
    assert rmsnorm.onepass(cupy.zeros((0, 64), cupy.float16), cupy.ones(64, cupy.float16)).shape == (0, 64)
    assert add.ADD.variants["04_fp16_vec8"](cupy.zeros(0, cupy.float16), cupy.zeros(0, cupy.float16)).size == 0
    assert add.BIAS.VARIANTS["07_bias_2d_vec8"](cupy.zeros((0, 8), cupy.float16),
                                                cupy.zeros(8, cupy.float16)).shape == (0, 8)


@pytest.mark.parametrize("cols", [4096, 1152, 4099, 3])
def test_add_into_rows_changes_only_the_slice(cols):
    import cupy
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((40, cols)).astype(np.float16)
    feats = rng.standard_normal((7, cols)).astype(np.float16)
    xd = cupy.asarray(x)
    add.add_into_rows(xd, cupy.asarray(feats), 11)
    check.check(xd, add.rows_reference(x, feats, 11), quiet=True)
    assert (xd.get()[:11] == x[:11]).all() and (xd.get()[18:] == x[18:]).all()


def test_add_into_rows_rejects_bad_slices():
    import cupy
    x = cupy.zeros((10, 64), cupy.float16)
    f = cupy.ones((3, 64), cupy.float16)
    for bad, match in [((x, f, 8), "outside"), ((x, f, -1), "outside"), ((x, cupy.ones((3, 65), cupy.float16), 0), "columns"),
                       ((x, f.astype(cupy.float32), 0), "dtype"), ((x, x[2:5], 0), "overlaps"),
                       ((x, f, 1.0), "int"), ((x, f, True), "int"), ((x[:, :32], f[:, :32], 0), "contiguous"),
                       ((x.get(), f, 0), "cupy.ndarray")]:
        with pytest.raises(ValueError, match=match):
            add.add_into_rows(*bad)
    assert float(x.sum()) == 0                     # nothing was written
    cupy.cuda.Device().synchronize()


def test_bad_input_raises_before_launch():
    import cupy
    f16, f32 = cupy.float16, cupy.float32
    x, w = cupy.zeros((4, 64), f16), cupy.ones(64, f16)
    bad = [
        (rmsnorm.onepass, (x.astype(cupy.float64), w), "dtype"),
        (rmsnorm.onepass, (cupy.zeros((2, 2, 64), f16), w), "1 or 2-D"),
        (rmsnorm.onepass, (x, cupy.ones(63, f16)), "length 64"),
        (rmsnorm.onepass, (x, cupy.ones(64, f32)), "dtype"),
        (rmsnorm.onepass, (cupy.zeros((64, 4), f16).T, cupy.ones(4, f16)), "contiguous"),
        (rmsnorm.fp16_uint4, (x.astype(f32), w), "dtype"),
        (rmsnorm.f32_fp16w_uint2, (x.astype(f32), w.astype(f32)), "dtype"),
        (rmsnorm.fused, (x, cupy.zeros((4, 63), f16), w), "shape"),
        (add.ADD.variants["02_f32_float4"], (cupy.zeros(8, f32), cupy.zeros(9, f32)), "shape"),
        (add.ADD.variants["04_fp16_vec8"], (cupy.zeros(8, f32), cupy.zeros(8, f32)), "dtype"),
        (add.ADD.variants["04_fp16_vec8"], (cupy.zeros((8, 8), f16)[:, ::2], cupy.zeros((8, 4), f16)), "contiguous"),
        (add.BIAS.VARIANTS["07_bias_2d_vec8"], (x, cupy.ones(63, f16)), "shape"),
        (add.BIAS.VARIANTS["05_bias_mod"], (cupy.zeros(64, f16), w), "2-D"),
    ]
    for fn, args, match in bad:
        with pytest.raises(ValueError, match=match):
            fn(*args)
    with pytest.raises(ValueError, match="shape"):
        rmsnorm.onepass(x, w, out=cupy.empty((4, 65), f16))
    cupy.cuda.Device().synchronize()   # the context is still healthy
    check.check(rmsnorm.onepass(x, w), np.zeros((4, 64), np.float16), quiet=True)
