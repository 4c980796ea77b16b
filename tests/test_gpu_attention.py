"""On a GPU: every attention step against the float64 reference on awkward lengths and hostile
values, against torch SDPA, the merge kernel, RoPE + KV append, the device-side length in a CUDA
graph, and input errors raised before any launch."""
import numpy as np
import pytest

from conftest import dev as _dev, gpu
from kernellab import attention as A
from kernellab.core.check import check

pytestmark = gpu


@pytest.mark.parametrize("fam", A.FAMILIES, ids=lambda f: f.name)
def test_every_step_matches_the_reference(fam, capsys):
    from kernellab.core.check import variants
    variants(fam)
    out = capsys.readouterr().out
    assert out.count("cases OK") + out.count("SKIPPED: needs sm_") == len(fam.variants), out


@pytest.mark.parametrize("name", ["03_split", "05_gqa_tile"])
def test_decode_long_hostile(name):
    for values in ("large", "nan"):
        host = A.make_decode((A.HQ, 32768), values=values, seed=3)
        got = A.DEC_VARIANTS[name](*_dev(host))
        check(got, A.reference_decode(*host), rtol=A.TOL[0], atol=A.TOL[1], quiet=True)


def test_prefill_16385_best_step():
    import cupy
    from kernellab.core.device import info
    if int(info()["arch"][3:]) < 80:
        pytest.skip("needs sm_80")
    host = A.make_prefill((1, 16385), values="large", seed=1)
    got = A.prefill(*_dev(host))
    check(got, A.reference_prefill(*host, rows=2048), rtol=A.TOL[0], atol=A.TOL[1], quiet=True)
    cupy.cuda.Device().synchronize()


def test_decode_agrees_with_torch_sdpa():
    torch = pytest.importorskip("torch")
    host = A.make_decode((A.HQ, 4097))
    q, k, v, lens = _dev(host)
    want = A._sdpa_decode(q, k, v, lens)()
    got = torch.from_dlpack(A.decode(q, k, v, lens)).view(1, A.HQ, 1, A.D)
    assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=2e-3)


def test_prefill_agrees_with_torch_sdpa():
    torch = pytest.importorskip("torch")
    q, k, v = _dev(A.make_prefill((A.PF_HEADS, 1000)))
    want = A._sdpa_prefill(q, k, v)()[0]
    for name in ("11_row", "14_padded"):
        got = torch.from_dlpack(A.PF_VARIANTS[name](q, k, v))
        assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=2e-3), name


def test_merge_kernel():
    for values in ("randn", "empty"):
        po, pl = A.make_partials((A.HQ, 37), values=values)
        got = A.merge(*_dev((po, pl)))
        check(got, A.merge_reference(po, pl), rtol=A.TOL[0], atol=A.TOL[1], quiet=True)


def test_device_length_in_a_cuda_graph():
    """One captured graph of step 05 (chunks from the capacity) replays for every length: the
    kernel reads the length on the device."""
    import cupy
    from kernellab.core.bench import graph
    cap = 3000
    host = A.make_decode((A.HQ, cap), seed=5)
    q, k, v, _ = _dev(host)
    lens = cupy.array([1], cupy.int32)
    o = cupy.empty((A.HQ, A.D), cupy.float16)
    g = graph(lambda: A.decode(q, k, v, lens, out=o))
    for n in (1, 2, 129, 2999, 3000):
        lens[...] = n
        g()
        check(o, A.reference_decode(*host[:3], np.array([n])), rtol=A.TOL[0], atol=A.TOL[1], quiet=True)


def test_rope_append():
    import cupy
    rng = np.random.default_rng(0)
    cap = 40000
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((A.HQ, A.D), (A.HKV, A.D), (A.HKV, A.D)))
    kc = cupy.zeros((A.HKV, cap, A.D), cupy.float16)
    vc = cupy.zeros_like(kc)
    qo = cupy.empty((A.HQ, A.D), cupy.float16)
    dq, dk, dv = _dev((q, k, v))
    for pos in (0, 1, 4097, cap - 1):
        A.rope_append(dq, dk, dv, kc, vc, pos, qo)
        check(qo, A.reference_rope(q, pos), rtol=A.TOL[0], atol=A.TOL[1], quiet=True)
        check(kc[:, pos], A.reference_rope(k, pos), rtol=A.TOL[0], atol=A.TOL[1], quiet=True)
        assert (vc[:, pos].get() == v).all()
    p = cupy.array([123], cupy.int32)          # device-side position
    A.rope_append(dq, dk, dv, kc, vc, p, qo)
    check(kc[:, 123], A.reference_rope(k, 123), rtol=A.TOL[0], atol=A.TOL[1], quiet=True)
    p[...] = cap                               # out of range on the device: nothing is written
    before = kc.copy()
    A.rope_append(dq, dk, dv, kc, vc, p, qo)
    assert (kc == before).all()
    with pytest.raises(ValueError, match="pos"):
        A.rope_append(dq, dk, dv, kc, vc, cap, qo)
    with pytest.raises(ValueError, match="pos"):
        A.rope_append(dq, dk, dv, kc, vc, -1, qo)


def test_bad_input_is_a_value_error():
    import cupy
    q, k, v, lens = _dev(A.make_decode((A.HQ, 64)))
    step = A.decode
    with pytest.raises(ValueError, match="q"):
        step(q.astype(cupy.float32), k, v, lens)
    with pytest.raises(ValueError, match="k_cache"):
        step(q, k[:, :, :64], v, lens)                 # another head dim than q's
    with pytest.raises(ValueError, match="v_cache"):
        step(q, k[:4], v, lens)                        # 4 KV heads are a layout (a group of 8), but not v's
    with pytest.raises(ValueError, match="multiple"):
        step(q[:30], k, v, lens)                       # 30 query heads over 8 KV heads
    with pytest.raises(ValueError, match="contiguous"):
        step(q, k[:, ::2], v[:, ::2], lens)
    with pytest.raises(ValueError, match="length"):
        step(q, k, v, 65)
    with pytest.raises(ValueError, match="length"):
        step(q, k, v, 0)
    with pytest.raises(ValueError, match="length"):
        step(q, k, v, lens.astype(cupy.int64))
    with pytest.raises(ValueError, match="aligned"):
        step(q, cupy.empty(8 * 64 * 128 + 1, cupy.float16)[1:].reshape(8, 64, 128), v, lens)
    pq, pk, pv = _dev(A.make_prefill((2, 64)))
    with pytest.raises(ValueError, match="72"):
        A.prefill(pq[..., :64].copy(), pk, pv)
    with pytest.raises(ValueError, match="k"):
        A.prefill(pq, pk[:1], pv)
    assert int(step(q, k, v, 64).shape[0]) == A.HQ      # an int length is fine
