"""Lab 08's fused q/k head norm + RoPE + KV append (decoder/fused.py, decoder_07_qk_norm_rope): on the CPU, three
blocks of the launch emulated (core.emulate, every CUDA thread a CPU thread) against float64 (head norm, then
rotate-half RoPE at the position, then the cache rows); on the GPU (tests/test_gpu_fused.py) the whole launch,
against float64 and against the two launches it replaces."""
import numpy as np
import pytest

from kernellab.core import build, emulate
from kernellab.decoder import reference_head_norm
from kernellab.decoder.reference import ref_rope

THETA = 1e6


def inputs(hq, hkv, d, cap, values="randn", seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float16) for n in (hq, hkv, hkv))
    if values == "large":                      # sums of squares past fp16's range: the norm runs in fp32
        q *= np.float16(300)
        k *= np.float16(300)
    elif values == "hostile":                  # a zero head (rsqrt(eps)), a head of one huge value
        q[0] = 0
        k[-1] = 0
        k[-1, 3] = np.float16(60000)
    wq, wk = (rng.uniform(0.5, 1.5, d).astype(np.float16) for _ in range(2))
    half = d // 2
    ang = np.arange(cap)[:, None] * THETA ** (-np.arange(half) / half)
    return q, k, v, wq, wk, np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def reference(q, k, v, wq, wk, pos):
    qn, kn = reference_head_norm(q, k, wq, wk, 1e-6)
    qn, kn = np.asarray(qn, np.float16), np.asarray(kn, np.float16)       # step 02 stores fp16
    return ref_rope(qn, pos, THETA), ref_rope(kn, pos, THETA), v


@pytest.mark.parametrize("layout", [(32, 8, 128), (28, 4, 128), (14, 2, 64)], ids=["Qwen3-8B", "group 7", "d 64"])
@pytest.mark.parametrize("values", ["randn", "large", "hostile"])
def test_emulated_blocks_match_float64(layout, values):
    if emulate.compiler() is None:
        pytest.skip("no C++ compiler for the CPU emulation")
    hq, hkv, d = layout
    cap, pos = 64, 37
    q, k, v, wq, wk, cos, sin = inputs(hq, hkv, d, cap, values)
    qo = np.zeros((hq, d), np.float16)
    kc, vc = np.zeros((hkv, cap, d), np.float16), np.zeros((hkv, cap, d), np.float16)
    pos_dev = np.array([pos], np.int32)
    src = '#include "common.cuh"\n' + build.step_source("decoder", "07_qk_norm_rope")
    out, blocks = emulate.run(src, "decoder_07_qk_norm_rope", [q, k, v, wq, wk, cos, sin, qo, kc, vc, pos_dev],
                              [0, cap, hq, hkv, d, 1e-6], (hq + hkv,), (d // 2,), blocks=(0, 1, -1))
    want_q, want_k, want_v = reference(q, k, v, wq, wk, pos)
    got_q, got_k, got_v = out[7], out[8][:, pos], out[9][:, pos]
    np.testing.assert_allclose(got_q[:2].astype(np.float64), want_q[:2], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got_k[-1].astype(np.float64), want_k[-1], rtol=2e-3, atol=2e-3)
    assert (got_v[-1] == want_v[-1]).all()
    assert not out[8][:, :pos].any() and not out[8][:, pos + 1:].any()      # one cache row written, no other
