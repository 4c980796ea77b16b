"""On a GPU: lab 08's steps 08-10, the GEMVs that build their own input (RMSNorm or SiLU x up in the prologue)
and add the residual in their epilogue, against float64 at irregular heights, widths up to past 48 KiB of shared
memory and hostile values; bad input is a ValueError before any launch; the token step with them is within the
fp16 bound of the float64 reference, agrees with the separate launches, and replays as a graph."""
import numpy as np
import pytest

from conftest import gpu, teacher_forced
from kernellab import decoder as D
from kernellab import gemv as G
from kernellab.core.pdl import supported as pdl_supported
from kernellab.decoder.fused import gemv_residual, norm_gemv, norm_logits, silu_gemv_residual
from kernellab.decoder.reference import ref_rmsnorm, ref_silu

pytestmark = gpu
EPS = 1e-6


def _inputs(K, M, values, seed=0):
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((K, M)) / np.sqrt(M)).astype(np.float16)
    a, b = rng.standard_normal(M) * 2, 1 + 0.1 * rng.standard_normal(M)
    h = rng.standard_normal(K) * 4
    if values == "large":                     # squares past fp16's range (summed in fp32)
        a = np.clip(a * 3e3, -65504, 65504)
    elif values == "hostile":                 # +-65504, a subnormal, zeros; h with +-65504
        a[: min(M, 4)] = [65504.0, -65504.0, 6e-8, 0.0][: min(M, 4)]
        h[0] = 65504.0
    return W, a.astype(np.float16), b.astype(np.float16), h.astype(np.float16)


def _x(kind, a, b):
    """The input vector each step forms as it reads (a, b), float64: the kernels keep it in fp32, unrounded."""
    with np.errstate(over="ignore", invalid="ignore"):
        if kind in ("norm", "logits"):
            return ref_rmsnorm(a, b, EPS)
        if kind == "silu":
            return ref_silu(a) * np.asarray(b, np.float64)
        return np.asarray(a, np.float64)


def _run(kind, W, a, b, h):
    import cupy
    dW, da, db, dh = (cupy.asarray(t) for t in (W, a, b, h))
    if kind == "norm":
        return norm_gemv(dW, da, db, cupy.empty(W.shape[0], cupy.float16), EPS).get()
    if kind == "logits":
        return norm_logits(dW, da, db, cupy.empty(W.shape[0], cupy.float32), EPS).get()
    if kind == "residual":
        return gemv_residual(dW, da, dh).get()
    return silu_gemv_residual(dW, da, db, dh).get()


@pytest.mark.parametrize("kind", ["norm", "logits", "residual", "silu"])
@pytest.mark.parametrize("K,M", [(1, 8), (7, 136), (33, 4096), (2113, 4096), (300, 12288), (64, 25600),
                                 (16385, 512)])
@pytest.mark.parametrize("values", ["randn", "large", "hostile"])
def test_fused_gemv_matches_float64(kind, K, M, values):
    W, a, b, h = _inputs(K, M, values, seed=K + M)
    x = _x(kind, a, b)
    y64 = np.asarray(W, np.float64) @ np.asarray(x, np.float64)
    tol = G.tolerance(W.astype(np.float32), np.clip(x, -3e38, 3e38).astype(np.float32))
    got = _run(kind, W, a, b, h).astype(np.float64)
    if kind in ("residual", "silu"):         # h + fp16(W x), rounded to fp16: the delta is what is checked
        want = (np.asarray(h, np.float64) + y64.astype(np.float16)).astype(np.float16).astype(np.float64)
        fin = np.isfinite(want)
        assert np.array_equal(got[~fin], want[~fin], equal_nan=True), (kind, K, M, values)   # inf, NaN as float64
        ulp = np.spacing(np.abs(want[fin]).astype(np.float16)).astype(np.float64)
        assert np.all(np.abs(got[fin] - want[fin]) <= 2 * ulp + tol["atol"] + 5e-3 * np.abs(y64[fin])), \
            (kind, K, M, values)
    else:
        rtol = 1e-3 if kind == "norm" else 1e-5      # fp16 out: one rounding (2^-11); fp32 logits
        np.testing.assert_allclose(got, y64, rtol=rtol, atol=tol["atol"] + 1e-5 * float(np.abs(y64).max()))


def test_residual_is_in_place_and_nan_propagates():
    import cupy
    W, a, b, h = _inputs(4096, 4096, "randn")
    dh = cupy.asarray(h)
    assert gemv_residual(cupy.asarray(W), cupy.asarray(a), dh) is dh
    a[5] = np.nan
    got = _run("norm", W, a, b, h)
    assert np.isnan(got).all()                # one NaN in h: its norm, so every row, is NaN (as float64)
    got = _run("silu", W, a, b, h)
    assert np.isnan(got).all()


def test_bad_input_is_a_value_error_before_launch():
    import cupy
    W = cupy.zeros((64, 4096), cupy.float16)
    x, y = cupy.zeros(4096, cupy.float16), cupy.zeros(64, cupy.float16)
    with pytest.raises(ValueError, match="multiple of 8"):
        norm_gemv(cupy.zeros((64, 100), cupy.float16), x[:100], x[:100], y)
    with pytest.raises(ValueError, match="aligned"):
        norm_gemv(W, cupy.zeros(4097, cupy.float16)[1:], x, y)
    with pytest.raises(ValueError, match="dtype"):
        norm_gemv(W.astype(cupy.float32), x, x, y)
    with pytest.raises(ValueError, match="shape"):
        gemv_residual(W, x[:2048], y)
    with pytest.raises(ValueError, match="float32"):
        norm_logits(W, x, x, y)
    with pytest.raises(ValueError, match="overlaps"):
        gemv_residual(W, x, x[:64])


def _forced(cfg, W, fuse):
    dec = D.Decoder(cfg, W, "float16", capacity=64)
    dec._rows_ok = True                        # steps 08-10 on a model too small to fill the GPU with rows
    dec.ops.fuse = D.engine.FUSE_SWAPS[fuse]
    return dec


@pytest.mark.parametrize("fuse", list(D.engine.FUSE_SWAPS))
def test_token_step_with_steps_08_to_10_against_float64(fuse):
    cfg = D.SMALL
    W = D.random_weights(cfg, seed=11)
    dec = _forced(cfg, W, fuse)
    prompt = [7, 100, 2048, 4095]
    e, _ = teacher_forced(dec, cfg, W, prompt, 12)
    assert e <= D.error_bound(cfg), (fuse, e)
    assert dec.generate(prompt, 12, use_graph=True) == dec.generate(prompt, 12, use_graph=False)


def test_qwen3_8b_widths_fused_by_default_and_equal_to_separate():
    cfg = D.replace(D.QWEN3_8B, layers=2)
    dec = D.Decoder(cfg, None, "float16", capacity=128)
    want = D.engine.FUSE_DEFAULT if pdl_supported() else "08 + 09"     # step 12 needs sm_90
    assert dec.fuse.__name__ == want, dec.fuse     # an 8B layer has rows enough on our GPUs
    logits = {}
    for fuse in ("08 + 09 + 10", "separate"):
        dec.ops, dec._graph = D.GpuOps("float16", {"fuse": fuse}), None
        dec.reset()
        for t in (3, 17, 99, 151935):
            dec.feed(t)
        logits[fuse] = dec.logits.get().astype(np.float64)
    assert D.rel_err(logits["08 + 09 + 10"], logits["separate"]) < 4 * D.error_bound(cfg)


@pytest.mark.skipif(not pdl_supported(), reason="step 12 (programmatic dependent launch) needs sm_90")
def test_step_12_graph_equals_eager_at_qwen3_8b_widths():
    """Step 12's GEMVs start before the kernel ahead ends: a load of x that the compiler or the read-only path
    moved above the wait gives other tokens (a first version did). The graph (PDL) must decode exactly what the
    eager step (plain launches) does, over many layers and positions, at the widths where the blocks overlap."""
    cfg = D.replace(D.QWEN3_8B, layers=6)
    dec = D.Decoder(cfg, None, "float16", capacity=256)
    assert "pdl" in dec.fuse
    prompt = [11, 200, 3071, 5]
    eager = dec.generate(prompt, 40, use_graph=False)
    eager_logits = dec.logits.get()
    assert dec.generate(prompt, 40, use_graph=True) == eager
    assert np.array_equal(dec.logits.get(), eager_logits)     # the same sums as steps 08 and 09: bit for bit
