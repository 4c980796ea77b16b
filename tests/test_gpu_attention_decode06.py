"""On a GPU: decode step 06 (attention_06_decode_gqa_flash: flash decoding in one launch) against the
float64 reference at irregular lengths, capacity above the length, hostile values and other head
layouts; one launch at every length; a CUDA graph captured once replaying every device-side length
(its counters set back to 0 by each launch, so replays agree); the sweep's tunings; torch SDPA; and
bad input as a ValueError before any launch."""
import functools

import numpy as np
import pytest

from conftest import dev as _dev, gpu
from kernellab import attention as A
from kernellab.attention import steps as S
from kernellab.core.check import check

pytestmark = gpu
STEP = "06_gqa_flash"
LENGTHS = (1, 2, 31, 257, 1000, 4097, 33000)
TUNINGS = ({"min_chunk": 32, "per_sm": 4}, {"min_chunk": 256, "per_sm": 1},
           {"tune": ("-DDFL_TILE=32", "-DDFL_STAGES=2")}, {"tune": ("-DDFL_STAGES=5",), "min_chunk": 64},
           {"tune": ("-DDFL_STAGES=2",), "min_chunk": 32, "per_sm": 4}, {"tune": ("-DDFL_ASYNC=0",)},
           {"tune": ("-DDFL_EARLY=0",)}, {"merge_launch": True}, {"merge_launch": True, "min_chunk": 16},
           {"split_from": 0}, {"split_from": 0, "merge_launch": True, "min_chunk": 16})


def _check(got, host, length, name, want=None):
    want = A.reference_decode(*host[:3], np.array([length])) if want is None else want
    check(got, want, name=name, rtol=A.TOL[0], atol=A.TOL[1], quiet=True)


@functools.lru_cache(maxsize=None)
def _large(n):
    """Host inputs ('large' values) of length n and their float64 reference, made once for every tuning."""
    host = A.make_decode((A.HQ, n), values="large", seed=n)
    return host, A.reference_decode(*host)


def _counters_at_zero():
    import cupy
    cupy.cuda.Device().synchronize()
    for key, buf in S._SCRATCH.items():
        if key[0] == "flash_done":
            assert not buf.get().any(), f"step 06's counters for {key[1]} KV heads did not end at 0"


@pytest.mark.parametrize("values", ["randn", "large", "nan", "constant"])
def test_every_length_with_capacity_above_it(values):
    """Capacity = length + 37, the rows past the length NaN keys and infinite values (a cache's unwritten
    rows): the kernel weighs only the first `length` keys, from a host int and from a device-side
    length, and makes one launch."""
    import cupy
    from kernellab.core.launch import record_launches
    step = A.DEC_VARIANTS[STEP]
    for n in LENGTHS:
        host = A.make_decode((A.HQ, n + 37), values=values, seed=n)
        host[1][:, n:], host[2][:, n:] = np.nan, np.inf
        q, k, v, _ = _dev(host)
        o = cupy.full((A.HQ, A.D), np.nan, cupy.float16)
        launches = record_launches(lambda: step(q, k, v, n, out=o))
        assert len(launches) == 1, (n, len(launches))
        _check(o, host, n, f"{STEP} L={n} cap={n + 37} {values} (host length)")
        o[...] = np.nan
        step(q, k, v, cupy.array([n], cupy.int32), out=o)
        _check(o, host, n, f"{STEP} L={n} cap={n + 37} {values} (device length)")
    _counters_at_zero()


def test_other_head_layouts():
    for hq, hkv, d in A.DEC_LAYOUTS:
        for n in (1, 257, 4097):
            host = A.make_decode((hq, n, hkv, d), values="nan", seed=hq + n)
            got = A.DEC_VARIANTS[STEP](*_dev(host))
            _check(got, host, n, f"{STEP} {hq}/{hkv}x{d} L={n}")
    _counters_at_zero()


def test_device_length_in_a_cuda_graph_replayed():
    """One graph captured at capacity 40000 (its grid from the capacity) replays every length: the
    kernel reads the length and cuts the chunks on the device. Each length is replayed three times with
    the output cleared in between: a counter left above 0 would leave the merge undone."""
    import cupy
    from kernellab.core.bench import graph
    cap = 40000
    host = A.make_decode((A.HQ, cap), seed=11)
    q, k, v, _ = _dev(host)
    lens = cupy.array([cap], cupy.int32)
    o = cupy.empty((A.HQ, A.D), cupy.float16)
    g = graph(lambda: A.DEC_VARIANTS[STEP](q, k, v, lens, out=o))
    for n in (*LENGTHS, cap, 1):
        lens[...] = n
        want = A.reference_decode(*host[:3], np.array([n]))
        for _ in range(3):
            o[...] = 0
            g()
            _check(o, host, n, f"{STEP} graph L={n}", want)
    lens[...] = cap + 5                          # past the capacity on the device: clamped, as 05 does
    g()
    _check(o, host, cap, f"{STEP} graph L={cap + 5} (clamped)")
    _counters_at_zero()


@pytest.mark.parametrize("knobs", TUNINGS, ids=lambda t: ",".join(f"{k}={v}" for k, v in t.items()))
def test_the_sweeps_tunings(knobs):
    """The tunings scripts/decode_sweep.py times compute the same (chunk rule, stage size, stages)."""
    import cupy
    for n in (1, 31, 1000, 33000):
        host, want = _large(n)
        q, k, v, lens = _dev(host)
        o = cupy.empty((A.HQ, A.D), cupy.float16)
        S.flash(q, k, v, lens, o, **knobs)
        _check(o, host, n, f"{STEP} {knobs} L={n}", want)
    _counters_at_zero()


def test_long_hostile_and_step_05_agree():
    for values in ("large", "nan"):
        host = A.make_decode((A.HQ, 32768), values=values, seed=3)
        args = _dev(host)
        got = A.DEC_VARIANTS[STEP](*args)
        _check(got, host, 32768, f"{STEP} 32768 {values}")
        check(got, A.DEC_VARIANTS["05_gqa_tile"](*args).get().astype(np.float32), rtol=A.TOL[0], atol=A.TOL[1],
              quiet=True)


def test_agrees_with_torch_sdpa():
    torch = pytest.importorskip("torch")
    host = A.make_decode((A.HQ, 4097))
    q, k, v, lens = _dev(host)
    want = A._sdpa_decode(q, k, v, lens)()
    got = torch.from_dlpack(A.DEC_VARIANTS[STEP](q, k, v, lens)).view(1, A.HQ, 1, A.D)
    assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=2e-3)


def test_bad_input_is_a_value_error():
    """Step 05's checks, before any launch (nothing is recorded), and the knobs' own."""
    import cupy
    from kernellab.core.launch import record_launches
    q, k, v, lens = _dev(A.make_decode((A.HQ, 64)))
    step = A.DEC_VARIANTS[STEP]
    bad = [((q.astype(cupy.float32), k, v, lens), "q"), ((q, k[:, :, :64], v, lens), "k_cache"),
           ((q, k[:4], v, lens), "v_cache"), ((q[:30], k, v, lens), "multiple"),
           ((q, k[:, ::2], v[:, ::2], lens), "contiguous"), ((q, k, v, 65), "length"), ((q, k, v, 0), "length"),
           ((q, k, v, lens.astype(cupy.int64)), "length"),
           ((q, cupy.empty(8 * 64 * 128 + 1, cupy.float16)[1:].reshape(8, 64, 128), v, lens), "aligned")]
    for args, what in bad:
        with pytest.raises(ValueError, match=what):
            assert not record_launches(lambda: step(*args))
    o = cupy.empty((A.HQ, A.D), cupy.float16)
    with pytest.raises(ValueError, match="out"):
        step(q, k, v, lens, out=o[:16])
    with pytest.raises(ValueError, match="min_chunk"):
        S.flash(q, k, v, lens, o, min_chunk=0)
    assert int(step(q, k, v, 64).shape[0]) == A.HQ      # an int length is fine
