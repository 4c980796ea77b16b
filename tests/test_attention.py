"""Everywhere (no GPU): lab 07's references, the merge rule, the chunking rule, input errors, and
the attention kernels' compile (sm_75 .. sm_90, no spills) and PTX claims."""
import re

import numpy as np
import pytest

from kernellab import attention as A
from kernellab.core import build


def _naive_decode(q, k, v, L):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    o = np.empty((A.HQ, A.D))
    for h in range(A.HQ):
        s = k[h // A.GROUP, :L] @ q[h] / np.sqrt(A.D)
        p = np.exp(s - s.max())
        o[h] = p @ v[h // A.GROUP, :L] / p.sum()
    return o


@pytest.mark.parametrize("L", [1, 2, 3, 63, 127])
@pytest.mark.parametrize("values", ["randn", "large", "constant", "nan"])
def test_decode_reference(L, values):
    host = A.make_decode((A.HQ, L), values=values)
    got = A.reference_decode(*host)
    want = _naive_decode(*host[:3], L)
    assert got.shape == (A.HQ, A.D) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if values == "nan":        # q head 0; k of KV head 7 (query heads 28..31); v column 5 of KV head 1
        assert np.isnan(got[0]).all() and np.isnan(got[28:]).all() and np.isnan(got[4:8, 5]).all()
        assert not np.isnan(got[4:8, 6]).any()
    else:
        assert np.isfinite(got).all()
    if values == "constant":
        np.testing.assert_allclose(got[:4], np.broadcast_to(np.asarray(host[2], np.float64)[0, :L].mean(0), (4, A.D)), atol=1e-6)


def test_decode_reference_uses_the_length_only():
    q, k, v, _ = A.make_decode((A.HQ, 100))
    np.testing.assert_allclose(A.reference_decode(q, k, v, np.array([40])),
                               A.reference_decode(q, k[:, :40], v[:, :40], np.array([40])))


@pytest.mark.parametrize("N", [1, 2, 63, 130])
@pytest.mark.parametrize("values", ["randn", "large", "nan"])
def test_prefill_reference(N, values):
    q, k, v = A.make_prefill((2, N), values=values)
    got = A.reference_prefill(q, k, v, rows=7)      # row blocks do not change the answer
    qd, kd, vd = (np.asarray(a, np.float64) for a in (q, k, v))
    with np.errstate(invalid="ignore"):
        s = np.einsum("hnd,hmd->hnm", qd, kd) / np.sqrt(A.PF_D)
        p = np.exp(s - s.max(-1, keepdims=True))
        want = np.einsum("hnm,hmd->hnd", p, vd) / p.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.isfinite(got).all() == (values != "nan")


def test_merge_of_chunks_is_the_whole_attention():
    """Lab 01's combine rule on vectors: attention over chunks, merged by (o_c, lse_c), is the
    attention over the whole sequence."""
    rng = np.random.default_rng(1)
    s = rng.standard_normal((3, 100)) * 5
    v = rng.standard_normal((3, 100, A.D))
    full = np.einsum("hj,hjd->hd", np.exp(s - s.max(1, keepdims=True)), v) / \
        np.exp(s - s.max(1, keepdims=True)).sum(1)[:, None]
    cuts = [0, 7, 8, 50, 100]
    po = np.zeros((3, len(cuts) - 1, A.D))
    lse = np.zeros((3, len(cuts) - 1))
    for c, (a, b) in enumerate(zip(cuts, cuts[1:])):
        sc = s[:, a:b] * np.log2(np.e)                     # base 2, as the kernels
        m = sc.max(1)
        p = np.exp2(sc - m[:, None])
        po[:, c] = np.einsum("hj,hjd->hd", p, v[:, a:b]) / p.sum(1)[:, None]
        lse[:, c] = m + np.log2(p.sum(1))
    np.testing.assert_allclose(A.merge_reference(po, lse), full, rtol=1e-5, atol=1e-6)


def test_merge_reference_with_empty_chunks():
    po, pl = A.make_partials((4, 9), values="empty")
    full = A.merge_reference(po, pl)
    keep = [c for c in range(9) if c % 3]
    np.testing.assert_allclose(full, A.merge_reference(po[:, keep], pl[:, keep]), rtol=1e-6)
    assert np.isnan(A.merge_reference(np.zeros((1, 2, A.D)), np.full((1, 2), -np.inf))).all()


def test_chunk_rule():
    assert A.chunks_for("02", 32768) == 1
    assert A.chunks_for("03", 257) == 2
    # step 05: never more blocks than one resident wave, never chunks shorter than MIN_CHUNK
    for sms, bps in ((132, 2), (16, 2), (80, 3)):
        for L in (1, 64, 65, 4096, 32768):
            c = A.chunks_for("05", L, sms, bps)
            assert 1 <= c and c * A.HKV <= max(A.HKV, sms * bps)
            assert c == 1 or -(-L // c) >= A.MIN_CHUNK // 2


def test_rope_reference():
    x = np.random.default_rng(0).standard_normal((3, A.D))
    np.testing.assert_allclose(A.reference_rope(x, 0), x)
    y = A.reference_rope(x, 12345)
    np.testing.assert_allclose(np.linalg.norm(y[:, :64] ** 2 + y[:, 64:] ** 2), np.linalg.norm(
        x[:, :64] ** 2 + x[:, 64:] ** 2), rtol=1e-12)          # each (i, i + 64) pair is rotated
    c, s = A.rope_table_host(20000)
    assert c.shape == (20000, 64) and c.dtype == np.float32
    np.testing.assert_allclose(c[12345], np.cos(12345 * A.THETA ** (-np.arange(64) / 64)), atol=1e-7)


def test_bytes_and_flops():
    q, k, v, lens = A.make_decode((A.HQ, 4096))
    assert A.decode_bytes(q, k, v, lens) == 2 * 8 * 4096 * 128 * 2 + 2 * 32 * 128 * 2
    assert A.prefill_bytes(*A.make_prefill((16, 64))) == 4 * 16 * 64 * 72 * 2
    assert A.prefill_flops(4096) == 4 * 16 * 4096 ** 2 * 72
    assert A.scores_bytes(4096) == 4 * 16 * 4096 ** 2 * 2


def test_families_are_complete():
    for fam in (A.DECODE, A.PREFILL):              # the ladders (A.BLOCK is a measured set: lab 06's block both ways)
        assert fam.kernels == "attention" and fam.variants and fam.reference and fam.make_input
        assert fam.record_cases and fam.check_cases and fam.targets and fam.baselines
        for shape, dt in fam.record_cases:
            assert fam.case_key(shape, dt) == f"{shape[0]}x{shape[1]}:{dt}"
    assert A.BLOCK.record and A.BLOCK.targets and not A.BLOCK.variants
    lens = {shape[1] for shape, _ in A.DECODE.check_cases}
    assert {1, 2, 3, 63, 127, 4097, 16385} <= lens
    layouts = {A.dec_layout(shape)[::2] + (A.dec_layout(shape)[3],) for shape, _ in A.DECODE.check_cases}
    assert {(16, 8, 128), (40, 8, 128), (28, 4, 128), (14, 2, 64), (32, 8, 128)} <= layouts


def test_decode_layouts_the_kernels_take_and_refuse():
    """GQA groups 1-8 at head dim 64 and 128 run (specialised by -D); anything else is a clear reason."""
    assert A.layout_reason(32, 8, 128) is None and A.specialise(32, 8, 128) == ()
    assert A.specialise(28, 4, 128) == ("-DDEC_GROUP=7", "-DDEC_D=128")
    assert A.specialise(14, 2, 64) == ("-DDEC_GROUP=7", "-DDEC_D=64")
    for hq, hkv, d in A.DEC_LAYOUTS:
        assert A.layout_reason(hq, hkv, d) is None
    assert "head dim 96" in A.layout_reason(32, 8, 96)
    assert "multiple" in A.layout_reason(30, 8, 128)
    assert "group of 16" in A.layout_reason(64, 4, 128)


@pytest.mark.parametrize("hq,hkv,d", [(28, 4, 128), (14, 2, 64), (8, 8, 64)])
def test_decode_reference_of_any_layout_is_per_head_attention(hq, hkv, d):
    """The float64 reference at a GQA group of 7 (and 1) is each query head's softmax against its KV head."""
    q, k, v, lens = A.make_decode((hq, 37, hkv, d), seed=3)
    assert q.shape == (hq, d) and k.shape == (hkv, 37, d) and lens[0] == 37
    o = A.reference_decode(q, k, v, lens)
    g = hq // hkv
    for h in (0, hq - 1):
        qq, kk, vv = (np.asarray(a, np.float64) for a in (q[h], k[h // g], v[h // g]))
        s = kk @ qq / np.sqrt(d)
        p = np.exp(s - s.max())
        np.testing.assert_allclose(o[h], (p / p.sum()) @ vv, rtol=1e-6, atol=1e-6)
    assert A.dec_case_key((hq, 37, hkv, d), "float16") == f"{hq}x37/{hkv}x{d}:float16"


def test_rope_reference_at_head_dim_64():
    x = np.random.default_rng(0).standard_normal((3, 64))
    c, s = A.rope_table_host(9, d=64)
    assert c.shape == (9, 32)
    y = A.reference_rope(x, 8)
    np.testing.assert_allclose(y[:, :32], x[:, :32] * c[8] - x[:, 32:] * s[8], rtol=1e-6, atol=1e-6)


def test_bad_input_is_a_value_error_without_a_gpu():
    q, k, v, lens = A.make_decode((A.HQ, 8))
    with pytest.raises(ValueError, match="cupy"):
        A.decode(q, k, v, lens)
    with pytest.raises(ValueError, match="cupy"):
        A.prefill(*A.make_prefill((1, 8)))


def test_orin_model_is_labelled():
    df = A.orin_decode_model()                   # no record given: no fraction to model with, and it says so
    assert df["source"].str.contains("model").all() and df["source"].str.contains("not a measurement").all()
    assert df[[c for c in df.columns if c.startswith("what bounds")][0]].eq("not recorded").all()


# ---- compile and PTX --------------------------------------------------------------------------

ARCHS = ("sm_75", "sm_80", "sm_87", "sm_89", "sm_90")
_FN = re.compile(r"Compiling entry function '(\w+)'")


@pytest.mark.parametrize("arch", ARCHS)
def test_compiles_without_spills_on_every_arch(arch):
    _, log = build.nvrtc_compile(build.source("attention"), arch, "attention.cu")
    kernels = set(re.findall(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)',
                             build.source("attention")))
    assert kernels == set(build.steps("attention"))
    assert kernels <= set(_FN.findall(log))
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert all(a == "0" and b == "0" for a, b in spills), log


def test_ptx_shows_each_steps_claim():
    p = lambda step, pat, arch="sm_90": build.ptx("attention", step, arch, grep=pat)  # noqa: E731
    for step in ("12_prefill_mma", "13_prefill_cp_async", "14_prefill_padded"):
        assert p(step, r"mma\.sync\.aligned\.m16n8k16") and p(step, r"ldmatrix")
        assert not p(step, r"mma\.sync", "sm_75")           # guarded: nothing below sm_80
    assert not p("12_prefill_mma", r"cp\.async") and p("13_prefill_cp_async", r"cp\.async")
    assert not p("11_prefill_row", r"mma")
    for step in ("02_decode_head", "05_decode_gqa_tile"):
        assert p(step, r"ld\.global\.nc\.v4")                 # 16 bytes per load
        assert p(step, r"shfl\.sync\.bfly")
    assert p("03_decode_merge", r"ex2\.approx")


def test_limiter_readings_make_sentences():
    """The recorded Nsight Compute limiter readings (make ncu --limiters) are read by results.limiters,
    one column per launch the families name, and the lab's sentences quote them (not the
    no-readings line) on the device that has them."""
    from kernellab.core import results
    from kernellab.core.ncu import LIMITER_METRICS
    from kernellab import softmax
    for fam, text in ((A.PREFILL, A.prefill_limits_text), (A.DECODE, A.decode_limits_text),
                      (softmax.SOFTMAX, softmax.long_limits_text)):
        lim = results.limiters(fam)
        if lim is None:
            assert "No Nsight Compute readings" in text(None)
            continue
        assert len(lim.columns) == len(fam.limiters)
        assert set(lim.index) <= set(LIMITER_METRICS.values())
        s = text(lim)
        assert s != A.NO_COUNTERS and "%" in s
    assert A.prefill_limits_text(None) == A.NO_COUNTERS


# ---- targets and sentences read from a results frame (synthetic, no GPU) --------------------------

def _frame(rows, device="GPU A"):
    import pandas as pd
    df = pd.DataFrame(rows)
    df["device"], df["source"], df["date"] = device, "recorded", "2026-01-01"
    df["p10_us"], df["p90_us"] = df["median_us"] * 0.98, df["median_us"] * 1.02
    return df


def _dec_frame(t03=10.0, t04=8.0, t_sdpa=9.0, device="GPU A"):
    rows = []
    for n in (4096, 32768):
        c = A.dec_case_key((A.HQ, n), "float16")
        for name, t, kind in (("03_split", t03, "variant"), ("04_gqa", t04, "variant"),
                              (A.SDPA_DEC, t_sdpa, "baseline"), (A.DEC_FLOOR, 5.0, "baseline")):
            rows.append({"case": c, "cols": n, "name": name, "kind": kind, "median_us": t * n / 4096,
                         "frac_read": 4.0 / (t * n / 4096)})
    return _frame(rows, device)


def test_targets_return_measured_bands():
    """Every target measure returns a results.Measured with its band, so the targets table applies the
    noise rule (a threshold inside the band: 'within noise', never 'met' or 'missed')."""
    from kernellab.core import results
    dec = _dec_frame()
    for t in A.DECODE.targets:
        m = t.measure(dec)
        assert isinstance(m, results.Measured) and m.ok and m.lo <= m.value <= m.hi
        if t.floor is not None:
            assert isinstance(t.floor(dec), results.Measured)
    m = A.dec_vs_sdpa(_dec_frame(t04=9.0, t_sdpa=9.05))
    assert results.target_outcome(m, 1.0) == "within noise"
    rows = []
    for n in (1024, 4096, 16384):
        c = A.pf_case_key((A.PF_HEADS, n), "float16")
        for name, t, kind in (("01_cublas", 30.0, "variant"), ("15_two_tiles", 10.0, "variant"),
                              (A.SDPA_PF, 7.0, "baseline")):
            rows.append({"case": c, "cols": n, "name": name, "kind": kind, "median_us": t * n})
    pf = _frame(rows)
    for t in A.PREFILL.targets:
        assert isinstance(t.measure(pf), results.Measured) and t.measure(pf).ok
    assert abs(A.pf_vs_cublas(pf).value - 3.0) < 1e-9
    tg = results.targets(A.DECODE.targets, dec)
    assert set(tg["outcome"]) <= {"met", "missed", "within noise"}


def test_gqa_vs_split_reads_the_data_per_device():
    """Step 04 against 03: the verdict comes from the frame, the blocks from the chunk rule, and each
    device's sentence speaks of its own rows."""
    import pandas as pd
    from kernellab.core import results
    df = pd.concat([_dec_frame(t03=10.0, t04=8.0, device="GPU A"), _dec_frame(t03=8.0, t04=10.0, device="GPU B")],
                   ignore_index=True)
    a, b = (A.gqa_vs_split(p) for p in results.devices(df))
    assert set(a["04 is"]) == {"faster"} and set(b["04 is"]) == {"slower"}
    assert (a["blocks 03"] == 4 * a["blocks 04"]).all()
    assert list(a["blocks 03"]) == [A.HQ * A.chunks_for("03", n) for n in (4096, 32768)]
    ta, tb = (A.gqa_vs_split_text(p) for p in results.devices(df))
    assert "GPU A" in ta and "faster at 2" in ta and "GPU B" in tb and "slower at 2" in tb


def test_orin_facts_come_from_the_device_tables():
    from kernellab.core.device import ORIN_PEAK_GBPS, ORIN_SMS
    assert A.ORIN_SMS == ORIN_SMS[A.ORIN_BOARD] and A.ORIN_GBPS == ORIN_PEAK_GBPS[A.ORIN_BOARD]


def test_limits_list_without_readings_says_so():
    assert A.limits_list(None, None).count(A.NO_COUNTERS) == 2


@pytest.mark.parametrize("extra", [("-DDEC_GROUP=7", "-DDEC_D=128"), ("-DDEC_GROUP=7", "-DDEC_D=64"),
                                   ("-DDEC_GROUP=8", "-DDEC_D=128"), ("-DDEC_GROUP=1", "-DDEC_D=64")])
def test_decode_kernels_compile_for_every_layout(extra):
    """Every specialisation the decoder asks for compiles for sm_87 (the Orin) with no spill of the step-05
    accumulators into local memory beyond what ptxas reports (shown, not hidden)."""
    from kernellab.core import build
    ptx, log = build.compiled("attention", "sm_87", extra)
    assert ".entry attention_05_decode_gqa_tile" in ptx and ".entry attention_06_rope_append" in ptx
    assert "error" not in log.lower()


@pytest.mark.parametrize("shape", [(32, 9, 8, 128), (28, 7, 4, 128), (14, 5, 2, 64)])
def test_causal_prefill_reference_is_decode_at_every_position(shape):
    """Row t of the causal prefill (query heads over KV heads) is one decode step at length t + 1."""
    q, k, v = A.make_causal(shape, seed=5)
    o = A.reference_causal(q, k, v)
    for t in range(shape[1]):
        want = A.reference_decode(q[t], k, v, np.array([t + 1], np.int32))
        np.testing.assert_allclose(o[t], want, rtol=1e-6, atol=1e-6)
    assert A.PREFILL_CAUSAL in A.FAMILIES and A.PREFILL_CAUSAL.default == {"float16": "16_causal"}
    assert A.causal_flops(4096) == 2.0 * 32 * 128 * 4096 * 4097


def test_causal_prefill_kernels_compile_and_use_the_tensor_cores():
    from kernellab.core import build
    for extra in ((), ("-DDEC_GROUP=7", "-DDEC_D=64")):
        ptx, _ = build.compiled("attention", "sm_80", extra)
        body = ptx.split(".entry attention_16_prefill_causal")[1].split(".entry")[0]
        assert "mma.sync.aligned.m16n8k16" in body and "cp.async" in body and "ldmatrix" in body
        assert ".entry attention_07_rope_prefill" in ptx


# ---- the ablations of the two bundled steps (decode 04 -> 05, prefill 12 -> 13) ---------------------------

def test_ablations_are_families_of_one_change_each():
    """Every ablation key reads NN_ablate_what, every kernel or launcher an ablation pair names is a variant
    of its family (so the GPU tests check it against float64 and make bench records it), and the families
    are in FAMILIES."""
    for which, fam in (("decode", A.DEC_ABLATION), ("prefill", A.PF_ABLATION)):
        assert fam in A.FAMILIES and fam.check_cases and fam.record_cases and not fam.baselines
        title, dtype, before, after, changes = A.ABLATION_PAIRS[which]
        named = {before, after} | {n for _, w, wo in changes for n in (w, wo)}
        assert named == set(fam.variants), which
        for n in fam.variants:
            assert re.fullmatch(r"\d\d_[a-z0-9_]+", n) and ("ablate" not in n or re.match(r"\d\d_ablate_", n))
            assert n in A.ABLATION_STEPS
    assert A.DEC_ABLATION.variants["05_gqa_tile"] is A.DECODE.variants["05_gqa_tile"]
    assert A.PF_ABLATION.variants["13_cp_async"] is A.PREFILL.variants["13_cp_async"]


def test_ablation_kernels_differ_from_their_step_by_one_change():
    """The PTX shows each prefill ablation's one change: one stage waits for all its copies (wait_group 0),
    two stages keep one in flight (wait_group 1), and the register stages use no cp.async at all; the
    decode ablation without prefetch has step 05's 16-byte loads, in the same count per tile."""
    p = lambda step, pat, arch="sm_90": build.ptx("attention", step, arch, grep=pat)  # noqa: E731
    assert p("13_prefill_cp_async", r"cp\.async\.wait_group 1") and not p("13_prefill_cp_async", r"wait_group 0")
    assert p("13_ablate_one_stage", r"cp\.async\.wait_group 0") and not p("13_ablate_one_stage", r"wait_group 1")
    assert not p("13_ablate_reg_stages", r"cp\.async") and p("13_ablate_reg_stages", r"mma\.sync\.aligned\.m16n8k16")
    for step in ("13_ablate_one_stage", "13_ablate_reg_stages"):
        assert not p(step, r"mma\.sync", "sm_75")
    for step in ("05_ablate_no_prefetch", "05_ablate_tile1"):
        assert p(step, r"ld\.global\.nc\.v4") and p(step, r"shfl\.sync\.bfly")
    assert len(p("05_ablate_tile1", r"ld\.global\.nc\.v4")) == len(p("04_decode_gqa", r"ld\.global\.nc\.v4"))


def test_ablation_launchers_use_the_grid_of_their_rule():
    """05_ablate_chunks runs step 05's kernel on step 04's grid; the other decode ablations on step 05's."""
    from kernellab.attention import ablation as ab
    from kernellab.core import fingerprint as fp
    assert fp.kernels_of(A.DEC_ABLATION.variants["05_ablate_chunks"], "attention")[-1] == "attention_05_decode_gqa_tile"
    assert fp.kernels_of(A.DEC_ABLATION.variants["05_ablate_tile1"], "attention")[-1] == "attention_05_ablate_tile1"
    assert ab.PF_ABLATION_VARIANTS["12_mma"] is A.PF_VARIANTS["12_mma"]
    for k in ("attention_13_ablate_one_stage", "attention_13_ablate_reg_stages"):
        assert A.PF_SMEM[k] == (2 if "one_stage" in k else 4) * 64 * 80 * 2


def test_ablation_sentences_say_when_not_recorded():
    """Before make bench records an ablation, its credit sentence says so (never a crash, never a credit)."""
    for which in ("decode", "prefill"):
        s = A.credit_text(None, which)
        assert "not recorded yet" in s and "neither change is credited" in s
    rows = []
    for n in (256, 32768):
        c = A.dec_case_key((A.HQ, n), "float16")
        for name, t in (("04_gqa", 30.0), ("05_ablate_tile1", 20.0), ("05_ablate_no_prefetch", 15.0),
                        ("05_ablate_chunks", 25.0), ("05_gqa_tile", 10.0)):
            rows.append({"case": c, "cols": n, "name": name, "kind": "variant", "median_us": t})
    s = A.credit_text(_frame(rows), "decode")
    assert "2.50×" in s and "1.50×" in s and "GPU A" in s      # 05_ablate_chunks / 05; 30 / 20 (04 over 05_ablate_tile1)


def test_targets_against_the_floor():
    """A target the floor misses too is 'out of reach here', with the step's fraction of the floor."""
    from kernellab.core.results import Measured
    m, fl = Measured(0.27, 0.26, 0.28), Measured(0.52, 0.51, 0.53)
    assert A.floor_outcome(m, fl, 0.75).startswith("out of reach here") and "0.52 of the floor" in A.floor_outcome(m, fl, 0.75)
    assert A.floor_outcome(m, Measured(0.9, 0.89, 0.91), 0.75) == "missed"
    assert A.floor_outcome(Measured(0.8, 0.79, 0.81), fl, 0.75) == "met"
    tg = A.targets_vs_floor(A.DECODE.targets, _dec_frame())
    assert "of the floor" in tg and len(tg) == len(A.DECODE.targets)


def test_orin_model_states_the_premise_it_measured():
    """The Orin model's fraction and each length's bound come from the record on screen (a synthetic one)."""
    rows = []
    for n in A.DEC_LENGTHS:
        c = A.dec_case_key((A.HQ, n), "float16")
        rows += [{"case": c, "cols": n, "name": "05_gqa_tile", "kind": "variant", "median_us": 10.0, "frac_read": 0.6},
                 {"case": c, "cols": n, "name": A.DEC_FLOOR, "kind": "baseline", "median_us": 5.0,
                  "frac_read": 0.9 if n >= 4096 else 0.1}]
    df = A.orin_decode_model(_frame(rows))
    col = [c for c in df.columns if c.startswith("what bounds the floor")][0]
    assert df[col].str.startswith("bytes").sum() == sum(n >= 4096 for n in A.DEC_LENGTHS)
    assert "0.60" in df["source"].iloc[0]
