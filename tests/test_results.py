"""Everywhere: the one results reader and the one verdict rule (kernellab.core.results)."""
import math

import pandas as pd
import pytest

from kernellab.core import results as R
from kernellab.core.family import Target
from kernellab.core.results import Measured

CASE = "512x4096:float16"


def frame(rows, source="recorded", device="GPU X"):
    df = pd.DataFrame(rows, columns=["case", "name", "kind", "median_us", "p10_us", "p90_us", "frac_copy", "frac_read"])
    df["device"], df["date"], df["source"] = device, "2026-01-01", source
    return df


def m(v, lo=None, hi=None):
    return Measured(v, v if lo is None else lo, v if hi is None else hi)


@pytest.mark.parametrize("measured,claimed,kind,want", [
    (m(1.9, 1.8, 2.0), 2.0, "kernel", "holds"),                       # within a factor 1.5 of the gain, in log terms
    (m(1.2, 1.15, 1.25), 4.0, "kernel", "smaller than claimed"),       # the "4x from float4" shape of shortfall
    (m(1.5, 1.45, 1.55), 1.08, "kernel", "larger than claimed"),       # int8: claimed 1.08x, measured far more
    (m(0.8, 0.78, 0.82), 1.6, "kernel", "refuted"),                    # the change goes the other way
    (m(1.12, 0.95, 1.3), 1.6, "kernel", "within noise"),               # p10-p90 bands overlap: no verdict on the median
    (m(1.47, 1.4, 1.5), 1.756, "end-to-end", "not measured here (end to end)"),   # a kernel ratio never judges e2e
    (m(1.3, 1.25, 1.35), 1.3, "end-to-end", "not measured here (end to end)"),
    (m(1.3), None, "kernel", "holds"),                                # no number claimed: the claim is a gain
    (m(0.28, 0.275, 0.281), None, "kernel", "refuted"),
    (Measured(float("nan"), float("nan"), float("nan")), 2.0, "kernel", "not measured"),
])
def test_verdict_rule(measured, claimed, kind, want):
    assert R.verdict(measured, claimed, kind) == want


def test_end_to_end_judged_by_an_end_to_end_measurement():
    assert R.verdict(m(1.7, 1.65, 1.75), 1.756, "end-to-end", measured_kind="end-to-end") == "holds"


def test_hold_factor_in_log_terms():
    lo, hi = 2 ** (1 / R.HOLD), 2 ** R.HOLD
    assert R.verdict(m(lo * 1.001), 2.0) == "holds" and R.verdict(m(lo * 0.99), 2.0) == "smaller than claimed"
    assert R.verdict(m(hi * 0.999), 2.0) == "holds" and R.verdict(m(hi * 1.01), 2.0) == "larger than claimed"


def test_ratio_band_from_p10_p90():
    df = frame([(CASE, "slow", "variant", 20.0, 19.0, 21.0, 0.4, 0.4),
                (CASE, "fast", "variant", 10.0, 9.5, 10.5, 0.8, 0.8)])
    r = R.ratio_band(df, "fast", "slow", CASE)
    assert r.value == 2.0 and math.isclose(r.lo, 19 / 10.5) and math.isclose(r.hi, 21 / 9.5)
    assert R.ratio(df, "fast", "slow", CASE) == 2.0
    assert math.isnan(R.ratio(df, "fast", "absent", CASE))


def test_frac_band_and_ablations_are_not_steps():
    df = frame([("a", "01", "variant", 10.0, 8.0, 12.5, 0.5, 0.5), ("a", "ablate_01", "variant", 1.0, 1, 1, 0, 0)])
    fb = R.frac_band(df, "01", "a")
    assert fb.value == 0.5 and math.isclose(fb.lo, 0.4) and math.isclose(fb.hi, 0.625)
    assert R.fastest(df, "a") == "01"


def test_best_is_read_from_the_data_per_case():
    df = frame([("a", "01", "variant", 5.0, 5, 5, 0, 0), ("a", "02", "variant", 4.0, 4, 4, 0, 0),
                ("b", "01", "variant", 3.0, 3, 3, 0, 0), ("b", "02", "variant", 4.0, 4, 4, 0, 0),
                ("b", "torch", "baseline", 1.0, 1, 1, 0, 0)])
    top = R.best(df)
    assert top.loc["a", "name"] == "02" and top.loc["b", "name"] == "01"


def test_summary_names_every_case_and_where_it_loses():
    df = frame([("c1", "new", "variant", 10.0, 9.9, 10.1, 0, 0), ("c1", "old", "variant", 20.0, 19.9, 20.1, 0, 0),
                ("c2", "new", "variant", 10.0, 9.9, 10.1, 0, 0), ("c2", "old", "variant", 8.0, 7.9, 8.1, 0, 0),
                ("c3", "new", "variant", 10.0, 9.0, 11.0, 0, 0), ("c3", "old", "variant", 10.2, 9.0, 11.0, 0, 0)])
    s = R.summary(df, "new", "old")
    assert "0.80–2.00×" in s and "slower at `c2`" in s and "within noise at `c3`" in s and "3 case(s)" in s
    assert s.count("recorded on GPU X") == 1


def test_targets_outcomes():
    df = frame([(CASE, "ours", "variant", 10.0, 9.9, 10.1, 0.95, 0.9), (CASE, "torch", "baseline", 9.0, 8.9, 9.1, 0, 0)])
    ts = [Target("fraction", lambda d: R.pick(d, "ours", "frac_copy", case=CASE), 0.9),
          Target("vs torch", lambda d: R.ratio_band(d, "ours", "torch", CASE), 1.0),
          Target("no threshold", lambda d: 1.0, None),
          Target("absent", lambda d: R.ratio_band(d, "ours", "nope", CASE), 1.0)]
    got = list(R.targets(ts, df)["outcome"])
    assert got == ["met", "missed", "no threshold", "not measured"]


def test_table_is_lean_with_provenance_once(capsys):
    df = frame([(CASE, "01", "variant", 20.0, 19.0, 21.0, 0.4, 0.4), (CASE, "02", "variant", 10.0, 9.5, 10.5, 0.8, 0.8)])
    t = R.table(df)
    assert list(t.columns) == ["case", "name", "median_us", "p10_us", "p90_us", "of copy roof", "vs_prev"]
    assert t["vs_prev"].iloc[1] == 2.0
    assert "GPU X" not in capsys.readouterr().out       # provenance is said once, by the measuring call
    read = R.table(df.assign(frac_copy=float("nan")))
    assert "of read roof" in read.columns


def test_claims_file_is_judged_by_the_rule():
    from kernellab import vision
    from kernellab.core.device import load_recorded
    rec = load_recorded("vision")
    if rec.empty:
        pytest.skip("nothing recorded")
    t = R.claims("05_vision", rec, vision.FAMILIES)
    assert len(t) and t["verdict"].str.len().min() > 0
    assert set(t["verdict"]) & set(R.OUTCOMES)
    # the RoPE "FMA saves an instruction" claim: the PTX has as many f32 arithmetic instructions after
    rope = t[t["id"] == "vision-035"]
    before, after = rope["measured"].iloc[0].split(" -> ")        # "10 -> 10 (sm_87)": read for the seed's GPU
    assert list(rope["verdict"]) == ["refuted"] and before.split()[0] == after.split()[0] and "sm_87" in after
    # a structure claim on one step: the 16-byte loads are there
    assert (t[t["how"] == "ptx:ld.global.nc.v4"]["verdict"] == "holds").all()


def test_every_ncu_claim_maps_to_a_recordable_launch():
    """make ncu (kernellab.ncu_record) finds, for every claim measured by ncu, the family, both
    steps and the shape of its case: nothing fails on the GPU host for want of a name."""
    from kernellab import ncu_record
    from kernellab.labs import family_named
    jobs = ncu_record.jobs()
    assert len(jobs) >= 20
    for (key, step, case), metrics in jobs.items():
        fam = family_named(key)
        assert step in fam.variants, (key, step)
        shape, dt = ncu_record.shape_of(fam, case)
        assert fam.case_key(shape, dt) == case and metrics


def test_every_limiter_launch_is_recordable_and_only_keeps_its_order():
    """Every family's limiters name a step or a baseline with a kernel regex (ncu() refuses anything else),
    and `make ncu NCU_ARGS=--only=A,B` profiles exactly those families' launches, A's first."""
    from kernellab import ncu_record
    from kernellab.labs import key
    every = ncu_record.limiter_jobs()
    assert len(every) >= 20
    for fam, name, shape, dt, kernel in every:
        assert name in fam.variants or (name in fam.baselines and kernel), (key(fam), name)
        assert fam.case_key(shape, dt)
    only = ncu_record.limiter_jobs(["softmax", "attention_prefill_causal"])
    assert [key(f) for f, *_ in only] == ["softmax"] * 5 + ["attention_prefill_causal"] * 2


def test_ncu_claims_are_judged_from_the_recorded_readings(monkeypatch):
    """results.claims reads ncu.csv: after/before for a counter, before/after for a duration, a
    single step's reading shown as such, and 'not measured yet' where nothing is recorded."""
    import types
    import pandas as pd
    from kernellab.core import device
    rec = pd.DataFrame([("add", "01_f32_scalar", "2097152:float32", "launch__grid_size", 4096.0),
                        ("add", "02_f32_float4", "2097152:float32", "launch__grid_size", 2048.0),
                        ("add", "01_f32_scalar", "2097152:float32", "gpu__time_duration.sum", 30.0),
                        ("add", "02_f32_float4", "2097152:float32", "gpu__time_duration.sum", 20.0)],
                       columns=["family", "name", "case", "metric", "value"]).assign(device="X", source="recorded", date="d")
    row = lambda how, claimed, slow="01_f32_scalar": types.SimpleNamespace(          # noqa: E731
        how=how, fast="02_f32_float4", slow=slow, case="2097152:float32", kind="kernel")
    monkeypatch.setattr(device, "load_recorded", lambda lab: rec if lab == "ncu" else pd.DataFrame())
    m, v, shown = R._ncu_reading(row("ncu:launch__grid_size", 0.5), 0.5, None)
    assert (round(m.value, 3), v, shown) == (0.5, "holds", "4096 -> 2048")
    m, v, _ = R._ncu_reading(row("ncu:gpu__time_duration.sum", 1.5), 1.5, None)
    assert (m.value, v) == (1.5, "holds")                                   # before/after for a duration
    assert R._ncu_reading(row("ncu:launch__grid_size", None), None, None)[1] == "fewer"
    assert R._ncu_reading(row("ncu:launch__grid_size", None, slow=""), None, None)[1] == "reading"
    monkeypatch.setattr(device, "load_recorded", lambda lab: pd.DataFrame())
    assert R._ncu_reading(row("ncu:launch__grid_size", 0.5), 0.5, None)[1].startswith("not measured yet")


def test_one_sentence_per_fact_and_other_devices_side_by_side(capsys):
    """A sentence speaks of the device on screen (the first record: the reference), once; the other
    records appear in device_table, side by side; a long table becomes one row per case."""
    import pandas as pd
    df = pd.DataFrame({"name": ["a", "a"], "case": ["c", "c"], "kind": ["variant", "variant"], "median_us": [1.0, 2.0],
                       "p10_us": [0.9, 1.9], "p90_us": [1.1, 2.1], "frac_copy": [0.5, 0.25],
                       "device": ["NVIDIA GPU A", "NVIDIA GPU B 80GB X"], "date": ["d", "d"], "source": ["recorded", "recorded"]})
    R.each_device(df, lambda d: f"{d['device'].iloc[0]}: {d['median_us'].iloc[0]:g}")
    out = capsys.readouterr().out
    assert "GPU A: 1" in out and "GPU B" not in out
    t = R.device_table(df)
    assert list(t.columns[:3]) == ["case", "step", "GPU A µs"] and "GPU B of copy roof" in t.columns
    assert float(t["GPU B µs"].iloc[0]) == 2.0
    n = R.MAX_ROWS + 5
    big = pd.DataFrame({"name": ["s1", "s2", "torch x"] * n, "case": [f"c{i // 3}" for i in range(3 * n)],
                        "kind": ["variant", "variant", "baseline"] * n, "median_us": [2.0, 1.0, 1.5] * n,
                        "frac_copy": [0.4, 0.8, 0.5] * n, "device": "D", "date": "d", "source": "recorded"})
    b = R.table(big)
    assert len(b) == n and set(b["fastest step"]) == {"s2"} and float(b["library / step"].iloc[0]) == 1.5


def test_claims_tables_judge_a_ratio_on_every_recorded_device():
    """A claims table over a frame with two devices: every ratio row carries the other device's
    'measured: verdict', and every row of every kind is judged (an ncu or PTX row included)."""
    from kernellab import add
    from kernellab.core.device import load_recorded
    rec, brec = load_recorded("add"), load_recorded("bias_add")
    if rec.empty or rec["device"].nunique() < 2:
        pytest.skip("needs two recorded devices")
    t = R.claims("03_add", [rec, brec], add.FAMILIES)
    col = next(c for c in t.columns if c.startswith("on "))
    ratios = t[t["how"].str.contains(" vs ")]
    assert len(ratios) and ratios[col].str.contains(": ").all()
    assert t["verdict"].notna().all() and len(t) == len(R.claims_file().query("lab == '03_add'"))
