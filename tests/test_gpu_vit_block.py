"""GPU only: lab 06's block, merger and tower (lab 05's kernels + cuBLAS) against the float64
reference, the CUDA-graph replay against the eager launch, the torch eager block, bad input."""
import numpy as np
import pytest

from conftest import gpu
from kernellab import vit_block as vb

pytestmark = gpu


def _cupy():
    import cupy
    return cupy


def test_gemm_matches_float64_and_checks_shapes():
    cp = _cupy()
    rng = np.random.default_rng(1)
    a = cp.asarray(rng.standard_normal((37, 72)).astype(np.float16))
    w = cp.asarray(rng.standard_normal((45, 72)).astype(np.float16))
    out = cp.empty((37, 45), cp.float16)
    vb.gemm(a, w, out)
    assert vb.rel_err(out, a.astype(cp.float64) @ w.astype(cp.float64).T) < 2 * vb.U_FP16
    with pytest.raises(ValueError, match="w: expected shape"):
        vb.gemm(a, w[:, :70].copy(), out)
    with pytest.raises(ValueError, match="out"):
        vb.gemm(a, w, cp.empty((37, 44), cp.float16))


@pytest.mark.parametrize("trans_b", [True, False])
def test_bgemm_matches_cupy_matmul(trans_b):
    cp = _cupy()
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((3, 37, 72)).astype(np.float16))
    b = cp.asarray(rng.standard_normal((3, 41, 72) if trans_b else (3, 72, 41)).astype(np.float16))
    out = cp.empty((3, 37, 41), cp.float16)
    vb.bgemm(a, b, out, trans_b=trans_b, alpha=0.5)
    want = 0.5 * (a.astype(cp.float64) @ (b.astype(cp.float64).transpose(0, 2, 1) if trans_b else b.astype(cp.float64)))
    assert vb.rel_err(out, want) < 2 * vb.U_FP16


@pytest.mark.parametrize("grid", [(8, 8), (6, 10), (2, 2), (2, 34), (16, 6)], ids=str)
def test_block_matches_float64(grid):
    cp = _cupy()
    W = vb.make_layer(1)
    x = vb.make_input(*grid, seed=sum(grid))
    got = vb.Block(*grid, W=W, x=cp.asarray(x))()
    err = vb.rel_err(got.get(), vb.reference_block(x, W, *grid))
    assert err < vb.error_bound(), f"normwise rel err {err:.2e} > bound {vb.error_bound():.2e}"


@pytest.mark.parametrize("grid", [(8, 8), (2, 34), (32, 34)], ids=str)
def test_block_with_flash_attention_matches_float64(grid):
    """Lab 07's flash step in the block (Block(attention=...)): one fused op in place of three,
    the same bound against float64, and the same ops count minus two."""
    from kernellab.core.device import info
    if int(info()["arch"][3:]) < 80:
        pytest.skip("the flash step needs sm_80")
    from kernellab import attention as A
    cp = _cupy()
    W = vb.make_layer(3)
    x = vb.make_input(*grid, seed=7)
    b = vb.Block(*grid, W=W, x=cp.asarray(x), attention=A.prefill)
    assert len(b.ops) == len(vb.BLOCK_PLAN) - 2
    err = vb.rel_err(b().get(), vb.reference_block(x, W, *grid))
    assert err < vb.error_bound(), f"normwise rel err {err:.2e} > bound {vb.error_bound():.2e}"


def test_block_hostile_and_nan_tokens():
    cp = _cupy()
    W = vb.make_layer(2)
    x = vb.make_input(4, 4, "hostile")
    got = vb.Block(4, 4, W=W, x=cp.asarray(x))().get()
    want = vb.reference_block(x, W, 4, 4)
    assert np.isfinite(got).all()
    assert vb.rel_err(got, want) < vb.error_bound()
    for t in range(1, 16):   # every token, not only the 60000 one that dominates the norm
        assert vb.rel_err(got[t:t + 1], want[t:t + 1]) < vb.error_bound(), t
    x = vb.make_input(4, 4, "nan")
    assert np.isnan(vb.Block(4, 4, W=W, x=cp.asarray(x))().get()).all()


@pytest.mark.parametrize("grid", [(8, 8), (4, 6), (2, 2)], ids=str)
def test_merger_matches_float64(grid):
    cp = _cupy()
    M = vb.make_merger(1)
    x = vb.make_input(*grid, seed=3)
    got = vb.Merger(*grid, M=M, x=cp.asarray(x))()
    assert got.shape == (grid[0] * grid[1] // 4, vb.MERGE_OUT)
    assert vb.rel_err(got.get(), vb.reference_merger(x, M, *grid)) < vb.error_bound(len(vb.MERGER_PLAN))


def test_small_tower_matches_float64():
    cp = _cupy()
    W = vb.weights(layers=2, seed=4)
    patches = vb.make_input(4, 6, seed=5, width=vb.PATCH_DIM)
    t = vb.Tower(4, 6, layers=2, W=W, patches=cp.asarray(patches))
    want, _ = vb.reference_tower(patches, W, 4, 6)
    err = vb.rel_err(t().get(), want)
    assert err < vb.error_bound(2 * vb.STAGES + len(vb.MERGER_PLAN) + 3), err


def test_graph_replay_equals_eager():
    assert vb.check_graph_replay(8, 8) < 1e-3


def test_graph_of_a_small_tower_equals_eager():
    cp = _cupy()
    t = vb.Tower(4, 4, layers=2)
    want = t().copy()
    g = vb.graph(t.ops)
    t.output.fill(0)
    g()
    cp.cuda.Device().synchronize()
    assert vb.rel_err(t.output, want.astype(cp.float64)) < 1e-3


def test_torch_blocks_match_float64():
    pytest.importorskip("torch")
    cp = _cupy()
    b = vb.Block(16, 16, seed=6)
    want = vb.reference_block(b.x, b.W, 16, 16)
    assert vb.rel_err(b(), want) < vb.error_bound()
    for sdpa in (False, True):
        got = cp.asarray(vb.torch_block(b.W, b.x, 16, 16, sdpa=sdpa)())
        assert vb.rel_err(got, want) < vb.error_bound(), sdpa


def test_bad_input_raises_before_launch():
    cp = _cupy()
    with pytest.raises(ValueError, match="hidden size 1152"):
        vb.Block(4, 4, x=cp.zeros((16, 1024), cp.float16))
    with pytest.raises(ValueError, match="N must equal"):
        vb.Block(4, 4, x=cp.zeros((15, 1152), cp.float16))
    with pytest.raises(ValueError, match="dtype"):
        vb.Block(4, 4, x=cp.zeros((16, 1152), cp.float32))
    with pytest.raises(ValueError, match="even grid"):
        vb.Merger(3, 4)
    with pytest.raises(ValueError, match="even grid"):
        vb.Tower(5, 4, layers=1)
    with pytest.raises(ValueError, match="qkv_w expected shape"):
        W = vb.make_layer(0)
        W["qkv_w"] = W["qkv_w"][:1152]
        vb.Block(2, 2, W=W)
    cp.cuda.Device().synchronize()


def test_small_tower_in_qwen3_vls_drawing_matches_float64():
    """The GPU tower with Qwen3-VL's mergers (a DeepStack merger after block 8 that normalises the
    merged 4608 after the shuffle; the erf GELU in every merger) against the float64 reference
    in the same drawing."""
    cp = _cupy()
    W = vb.weights(layers=9, seed=4, model="qwen3-vl")
    patches = vb.make_input(4, 4, seed=5, width=vb.PATCH_DIM)
    t = vb.Tower(4, 4, layers=9, W=W, patches=cp.asarray(patches), model="qwen3-vl")
    main = t().get()
    want, deep = vb.reference_tower(patches, W, 4, 4, model="qwen3-vl")
    bound = vb.error_bound(9 * vb.STAGES + len(vb.MERGER_PLAN) + 3)
    assert vb.rel_err(main, want) < bound
    assert len(t.deep) == 1 and vb.rel_err(t.deep[0].get(), deep[0]) < bound
    with pytest.raises(ValueError, match="model must be one of"):
        vb.Tower(4, 4, layers=1, model="qwen3")
