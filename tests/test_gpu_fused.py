"""On a GPU: lab 08's fused q/k head norm + RoPE + KV append (decoder_07_qk_norm_rope) over the whole launch,
against float64 and against the two launches it replaces (step 02's head_norm, lab 07's rope_append), at host
and device-side positions; out-of-range positions write nothing; bad input is a ValueError before any launch;
and the token step with it equals the token step with the two launches (the Amdahl table's swap)."""
import numpy as np
import pytest

from conftest import dev as _dev, gpu
from kernellab import decoder as D
from kernellab.decoder.fused import FUSED, SEPARATE, qk_norm_rope, separate
from test_fused import inputs, reference

pytestmark = gpu


@pytest.mark.parametrize("layout", [(32, 8, 128), (40, 8, 128), (28, 4, 128), (14, 2, 64), (16, 16, 64)])
@pytest.mark.parametrize("values", ["randn", "large", "hostile"])
def test_whole_launch_matches_float64_and_the_two_launches(layout, values):
    import cupy
    hq, hkv, d = layout
    cap = 300
    q, k, v, wq, wk, cos, sin = inputs(hq, hkv, d, cap, values, seed=hq)
    dq, dk, dv, dwq, dwk, dcos, dsin = _dev((q, k, v, wq, wk, cos, sin))
    outs = {}
    for name, fn in ((FUSED, qk_norm_rope), (SEPARATE, separate)):
        kc, vc = cupy.zeros((hkv, cap, d), cupy.float16), cupy.zeros((hkv, cap, d), cupy.float16)
        qo = cupy.empty((hq, d), cupy.float16)
        scratch = (cupy.empty((hq, d), cupy.float16), cupy.empty((hkv, d), cupy.float16))
        for pos in (0, 7, cap - 1):
            fn(dq, dk, dv, dwq, dwk, kc, vc, pos, qo, dcos, dsin, scratch=scratch)
        outs[name] = qo.get(), kc.get(), vc.get()
    want_q, want_k, _ = reference(q, k, v, wq, wk, cap - 1)
    for name, (qo, kc, vc) in outs.items():
        np.testing.assert_allclose(qo.astype(np.float64), want_q, rtol=2e-3, atol=2e-3, err_msg=name)
        np.testing.assert_allclose(kc[:, cap - 1].astype(np.float64), want_k, rtol=2e-3, atol=2e-3, err_msg=name)
        assert (vc[:, 7] == v).all() and not kc[:, 1:7].any()
    # against the two launches: the same rounding points; only the order of the sum of squares differs
    np.testing.assert_allclose(outs[FUSED][0].astype(np.float32), outs[SEPARATE][0].astype(np.float32), rtol=2e-3,
                               atol=1e-3)


def test_device_position_and_out_of_range_and_bad_input():
    import cupy
    hq, hkv, d, cap = 32, 8, 128, 64
    q, k, v, wq, wk, cos, sin = inputs(hq, hkv, d, cap)
    dq, dk, dv, dwq, dwk, dcos, dsin = _dev((q, k, v, wq, wk, cos, sin))
    kc, vc = cupy.zeros((hkv, cap, d), cupy.float16), cupy.zeros((hkv, cap, d), cupy.float16)
    qo = cupy.empty((hq, d), cupy.float16)
    p = cupy.array([41], cupy.int32)
    qk_norm_rope(dq, dk, dv, dwq, dwk, kc, vc, p, qo, dcos, dsin)
    np.testing.assert_allclose(kc[:, 41].get().astype(np.float64), reference(q, k, v, wq, wk, 41)[1], rtol=2e-3,
                               atol=2e-3)
    p[...] = cap                                   # out of range on the device: nothing is written
    before = kc.copy()
    qk_norm_rope(dq, dk, dv, dwq, dwk, kc, vc, p, qo, dcos, dsin)
    assert (kc == before).all()
    with pytest.raises(ValueError, match="pos"):
        qk_norm_rope(dq, dk, dv, dwq, dwk, kc, vc, cap, qo, dcos, dsin)
    e = lambda *s: cupy.zeros(s, cupy.float16)      # noqa: E731  (head dim 96: no decode kernel takes it)
    with pytest.raises(ValueError, match="head dim"):
        qk_norm_rope(e(hq, 96), e(hkv, 96), e(hkv, 96), e(96), e(96), e(hkv, cap, 96), e(hkv, cap, 96), 1, e(hq, 96),
                     dcos[:, :48].copy(), dsin[:, :48].copy())
    with pytest.raises(ValueError, match="q_norm weight"):
        qk_norm_rope(dq, dk, dv, dwq[:64], dwk, kc, vc, 1, qo, dcos, dsin)
    with pytest.raises(ValueError, match="cos"):
        qk_norm_rope(dq, dk, dv, dwq, dwk, kc, vc, 1, qo, dcos[:10], dsin[:10])


def test_token_step_fused_equals_separate():
    cfg = D.SMALL
    dec = D.Decoder(cfg, D.random_weights(cfg, seed=4), "float16", capacity=64)
    logits = {}
    for which in (FUSED, SEPARATE):
        dec.ops, dec._graph = D.GpuOps("float16", {"qk_rope": which}), None
        dec.reset()
        for t in (3, 17, 99, 5):
            dec.feed(t)
        logits[which] = dec.logits.get().astype(np.float64)
    assert D.rel_err(logits[FUSED], logits[SEPARATE]) < 1e-3
