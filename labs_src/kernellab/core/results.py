"""The one reader of results frames (live or recorded), and the one place that turns them into
sentences and verdicts.

A results frame has one row per (case, name): median_us, p10_us, p90_us (GPU time, L2 flushed),
bytes, gbps, frac_copy, frac_read, warm_us, host_us, and device, date, source ('live' or
'recorded'). `bench.compare` makes one live; without a GPU it returns the recorded rows. Cells
never branch on the mode: they call the functions here, which read whatever frame they are given.

The verdict rule, for claims, targets and sentences alike (`verdict`, `judge`):
  * noise-aware: where the p10-p90 bands of the two times overlap, the verdict is "within noise",
    whatever the medians say;
  * magnitude-aware: the measured ratio is set against the claimed one. "holds" when the measured
    gain is within a factor HOLD of the claimed gain, counted in log terms (log m / log c in
    [1/HOLD, HOLD]: a claimed 2x holds from 1.59x to 2.83x); "smaller than claimed" and "larger
    than claimed" outside it; "refuted" when the measured change goes the other way;
  * kind-aware: a kernel ratio never judges an end-to-end claim: that needs an end-to-end
    measurement, or it is "not measured here (end to end)";
  * a target with no threshold is "no threshold", never "missed".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .device import provenance, slug

HOLD = 1.5              # the factor, in log terms, within which a measured gain matches a claimed one


# ---- reading a frame --------------------------------------------------------------------------

def select(df, **eq):
    """Rows of df whose columns equal the given values, or are in a given list (an empty frame
    stays empty; a missing column selects nothing)."""
    for k, v in eq.items():
        if df is None or df.empty or k not in df:
            return df.iloc[0:0] if df is not None else df
        df = df[df[k].isin(v) if isinstance(v, (list, tuple, set)) else df[k] == v]
    return df


def one_source(df):
    """The rows of the first (device, source) present: a frame may hold several recorded devices,
    and a sentence speaks of one."""
    if df is None or df.empty or not {"device", "source"} <= set(df):
        return df
    first = df.iloc[0]
    return df[(df["device"] == first["device"]) & (df["source"] == first["source"])]


def source(df) -> str:
    """Where a sentence's numbers come from: the provenance of the one (device, source) that
    pick() reads (a frame may hold several recorded devices; the tables show them all)."""
    return provenance(one_source(df))


def pick(df, name: str, column: str, **eq) -> float:
    """One number: `column` of the row named `name` (matching eq, e.g. case=...), from the first
    device present; NaN when absent (not measured, or an older recording)."""
    d = one_source(select(df, name=name, **eq))
    if d is None or d.empty or column not in d:
        return float("nan")
    return float(d[column].iloc[0])


@dataclass(frozen=True)
class Measured:
    """A measured value with its noise band: lo and hi are the value computed from the ends of
    the p10-p90 bands (for a ratio of times: p10(slow)/p90(fast) and p90(slow)/p10(fast))."""
    value: float
    lo: float
    hi: float

    @property
    def ok(self) -> bool:
        return self.value == self.value

    def __format__(self, spec):
        return format(self.value, spec or ".2f")


NAN = Measured(float("nan"), float("nan"), float("nan"))


def band(df, name: str, case: str) -> Measured:
    """The median time of `name` at `case` with its p10-p90 band (µs)."""
    return Measured(*(pick(df, name, c, case=case) for c in ("median_us", "p10_us", "p90_us")))


def ratio_band(df, fast: str, slow: str, case: str, slow_case: str | None = None) -> Measured:
    """time(slow) / time(fast) at one case (> 1: `fast` is faster), with its band; slow_case: the
    slow side at another case (an int4 step against the fp16 step of the same shape)."""
    f, s = band(df, fast, case), band(df, slow, slow_case or case)
    if not (f.ok and s.ok):
        return NAN
    lo = s.lo / f.hi if f.hi == f.hi and s.lo == s.lo else s.value / f.value
    hi = s.hi / f.lo if f.lo == f.lo and s.hi == s.hi else s.value / f.value
    return Measured(s.value / f.value, lo, hi)


def ratio(df, fast: str, slow: str, case: str, slow_case: str | None = None) -> float:
    """time(slow) / time(fast) at one case (> 1: `fast` is faster; slow_case: the slow side at
    another case); NaN when either is absent."""
    return ratio_band(df, fast, slow, case, slow_case).value


def cases(df, name: str | None = None) -> list:
    """The cases of a frame (of one step), in the frame's order."""
    d = df if name is None else select(df, name=name)
    return [] if d is None or d.empty else list(dict.fromkeys(d["case"]))


def fastest(df, case: str, kind: str = "variant") -> str | None:
    """The name of the fastest row of `kind` at one case (best(), for one case), or None."""
    b = best(select(df, case=case), kind)
    return b.loc[case, "name"] if case in b.index else None


def best(df, kind: str = "variant", names=None):
    """Per case, the fastest row of `kind` ('variant' or 'baseline'; names: only these), read
    from the data, never from a hard-coded label: a frame indexed by case with name, median_us,
    and the fraction columns."""
    d = one_source(select(df, kind=kind))
    if d is not None and len(d):
        d = d[~d["name"].str.contains(r"(?:^|_)ablate_")]   # an ablation row is not a step of the ladder
    if names is not None:
        d = select(d, name=list(names))
    if d is None or d.empty:
        import pandas as pd
        return pd.DataFrame(columns=["name", "median_us"])
    idx = d.groupby("case", sort=False)["median_us"].idxmin()
    return d.loc[idx.values].set_index("case")


# ---- verdicts ------------------------------------------------------------------------------------

def within_noise(m: Measured, at: float = 1.0) -> bool:
    """True when `at` lies inside the band: the two times' p10-p90 bands overlap (at = 1), or a
    target's threshold lies inside the measured band."""
    return m.lo == m.lo and m.hi == m.hi and min(m.lo, m.hi) <= at <= max(m.lo, m.hi)


def verdict(m: Measured, claimed: float | None = None, kind: str = "kernel",
            measured_kind: str = "kernel") -> str:
    """The one verdict rule (see the module's doc). m: measured time(before)/time(after);
    claimed: the claimed ratio (None: no number claimed); kind: the claim's kind ('kernel',
    'end-to-end', ...); measured_kind: what m is a ratio of."""
    if kind == "end-to-end" and measured_kind != "end-to-end":
        return "not measured here (end to end)"
    if not m.ok:
        return "not measured"
    if within_noise(m):
        return "within noise"
    if claimed is None or claimed != claimed:   # no number claimed: the claim is that the after is faster
        return "holds" if m.value > 1 else "refuted"
    if claimed == 1 or m.value == 1:  # a claimed "no change" (bands apart: refuted), or no change measured
        return "holds" if claimed == m.value else "refuted"
    if (m.value > 1) != (claimed > 1):
        return "refuted"
    q = math.log(m.value) / math.log(claimed)
    return "holds" if 1 / HOLD <= q <= HOLD else "smaller than claimed" if q < 1 else "larger than claimed"


def target_outcome(m: Measured, threshold: float | None, below: bool = False) -> str:
    """met / missed / within noise / no threshold / not measured, for a target on value m."""
    if threshold is None:
        return "no threshold"
    if not m.ok:
        return "not measured"
    if within_noise(m, threshold):
        return "within noise"
    return "met" if (m.value <= threshold if below else m.value >= threshold) else "missed"


def devices(df) -> list:
    """The frame split by (device, source), in order: a recorded frame may hold several devices,
    and a table or sentence that judges speaks of one at a time."""
    if df is None or df.empty or not {"device", "source"} <= set(df):
        return [df]
    return [g for _, g in df.groupby(["device", "source"], sort=False)]


def timing_rules(df, lab: str) -> int:
    """The bench rules (device.TIMING_RULES) a frame was timed under: live, the current ones; a
    record, those written beside it (1: older than the field)."""
    from .device import TIMING_RULES, recorded_meta
    if df is None or df.empty or "source" not in df or df["source"].iloc[0] == "live":
        return TIMING_RULES
    meta = next((m for m in recorded_meta().values() if m.get("device") == df["device"].iloc[0]), {})
    return int(meta.get("labs", {}).get(lab, {}).get("timing", 1))


def each_device(df, sentence, *others) -> None:
    """Say sentence(part, *others_part) of the device on screen: the live GPU's rows, or without one the
    reference record's (the first recorded device: the H100), the other frames cut to the same device.
    One sentence per fact: the other records are set side by side in the lab's comparison table
    (device_table), never in a second copy of every sentence. (The name says what it once did: a saved
    notebook keeps calling it.) sentence: frames -> Markdown (its provenance included, e.g. via source(part))."""
    part = one_source(df)
    dev = part["device"].iloc[0] if part is not None and len(part) and "device" in part else None
    say(sentence(part, *[o if dev is None or o is None or "device" not in o else o[o["device"] == dev]
                         for o in others]))


def short_device(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100': a device label that fits a column."""
    import re
    return re.sub(r"^NVIDIA\s+|\s+\d+GB.*$", "", str(name)).strip() or str(name)


def device_table(df, roof: str = "copy"):
    """Every record (and the live GPU) side by side, one row per case: the fastest step on the device on
    screen and, per device, that step's µs and its fraction of the roof that applies there, and the
    fastest library baseline's µs: the one place a lab sets GPUs against each other."""
    import pandas as pd
    parts = [p for p in devices(df) if p is not None and len(p)]
    if not parts or "kind" not in parts[0]:
        print("(nothing to compare: one device or no results)")
        return pd.DataFrame()
    top = best(parts[0])
    rows = []
    for case, r in top.iterrows():
        row = {"case": case, "step": r["name"]}
        for p in parts:
            lab = short_device(p["device"].iloc[0]) + ("" if p["source"].iloc[0] == "recorded" else " (live)")
            at = p[(p["case"] == case) & (p["name"] == r["name"])]
            row[f"{lab} µs"] = float(at["median_us"].iloc[0]) if len(at) else float("nan")
            if f"frac_{roof}" in at:
                row[f"{lab} of {roof} roof"] = float(at[f"frac_{roof}"].iloc[0]) if len(at) else float("nan")
            libs = p[(p["case"] == case) & (p["kind"] == "baseline")
                     & p["name"].astype(str).str.contains(LIBRARY_NAMES, case=False)]
            row[f"{lab} library µs"] = float(libs["median_us"].min()) if len(libs) else float("nan")
        rows.append(row)
    print_once("Every record side by side (" + "; ".join(f"{short_device(p['device'].iloc[0])}: {p['source'].iloc[0]} "
                                                          f"{p['date'].iloc[0]}" for p in parts) + ").")
    return pd.DataFrame(rows).round(3)


def targets(targets, df):
    """The targets table: what, measured (with its band), threshold, outcome; one block of rows per
    device on screen (with a device column when there are several), provenance printed once."""
    import pandas as pd
    rows = []
    as_m = lambda v: v if isinstance(v, Measured) else Measured(float(v), float("nan"), float("nan"))  # noqa: E731
    parts, floors = devices(df), any(t.floor is not None for t in targets)
    for part in parts:
        for t in targets:
            m = as_m(t.measure(part))
            row = {"target": t.what, "measured": f"{m.value:.2f}" if m.ok else "-",
                   "threshold": "-" if t.threshold is None else f"{'<=' if t.below else '>='} {t.threshold:g}",
                   "outcome": target_outcome(m, t.threshold, t.below)}
            if floors:                       # the same figure with the floor in place of our step
                fl = as_m(t.floor(part)) if t.floor is not None else None
                row["at the floor"] = f"{fl.value:.2f}" if fl is not None and fl.ok else "-"
            if len(parts) > 1:
                row["device"] = part["device"].iloc[0]
            rows.append(row)
    if len(rows):
        print_once(f"Targets: {provenance(df)}")
    return pd.DataFrame(rows)


def targets_met(tg) -> str:
    """'k of n targets met' for a targets table, per device where it holds several."""
    parts = tg.groupby("device", sort=False) if "device" in tg else [(None, tg)]
    return "; ".join(f"{int((g['outcome'] == 'met').sum())} of {len(g)} targets met" + (f" on {d}" if d else "")
                     for d, g in parts)


# ---- the claims file ------------------------------------------------------------------------------

def claims_file():
    """docs/claims.csv: every claim of the seed reports, one row each (empty frame if absent)."""
    import pandas as pd
    from .device import ROOT
    path = ROOT / "docs" / "claims.csv"
    if not path.exists():
        return pd.DataFrame()
    return pd.read_csv(path, dtype=str, keep_default_na=False)


CLAIM_ARCH = "sm_87"     # compiler counts are read for the seeds' GPU (Jetson Orin), compiled offline
CLAIM_ARCH_FALLBACK = "sm_90"   # for a step that needs a newer GPU than the Orin (e.g. clusters)


def _count(kernels: str, step: str, how: str, arch: str = CLAIM_ARCH) -> float:
    """What a `ptx:<text>` or `ptxas:registers` claim counts in one step's compiled kernel (arch)."""
    from . import build
    if how in ("ptxas:registers", "ptxas:smem"):         # ptxas -v: registers, static shared memory bytes
        info = build.ptxas_info(kernels, (arch,))
        r = info[info.kernel == (step if step.startswith(kernels + "_") else f"{kernels}_{step}")]
        col = "registers" if how == "ptxas:registers" else "smem_bytes"
        if not len(r):
            raise ValueError(f"no kernel for step {step}")
        return float(r[col].iloc[0])
    texts = how.split(":", 1)[1].split("|")   # PTX instructions (any of); .ftz (CuPy's -ftz=true) is ignored
    return float(sum(any(t in line.replace(".ftz", "") for t in texts) for line in build.ptx(kernels, step, arch)))


def _counted(r, kernels: str) -> tuple:
    """(Measured after/before, verdict, 'before -> after (arch)') of a ptx/ptxas claim, from the
    compiled kernels (no GPU needed), for the seeds' sm_87; a step that needs a newer GPU, sm_90."""
    for arch in (CLAIM_ARCH, CLAIM_ARCH_FALLBACK):
        try:
            after = _count(kernels, r.fast, r.how, arch)
            before = _count(kernels, r.slow, r.how, arch) if r.slow else float("nan")
            break
        except Exception:         # no such step, or a step that does not compile for this arch
            continue
    else:
        return NAN, "not measured (no such step)", "-"
    if before != before:          # a structure claim about one step: the instruction is there (or, "0", not)
        ok = after == 0 if r.claimed == "0" else after > 0
        return Measured(after, after, after), "holds" if ok else "refuted", f"{after:g} in {r.fast} ({arch})"
    m = Measured(after / before if before else 1.0 if after == before else float("inf"), float("nan"), float("nan"))
    shown = f"{before:g} -> {after:g} ({arch})"
    if r.claimed in (">", "<", "0"):    # the claim gives a direction, not a number
        ok = after > before if r.claimed == ">" else after < before if r.claimed == "<" else after == 0
        return m, "holds" if ok else "refuted", shown
    if r.claimed:
        c = float(r.claimed)
        return m, "refuted" if (m.value == 1) != (c == 1) else verdict(m, c, r.kind), shown
    # no number claimed: say which way the count moved (a reading, not a verdict)
    return m, "more" if after > before else "fewer" if after < before else "no change", shown


def _ncu_reading(r, claimed, df) -> tuple:
    """(Measured, verdict, shown) of a claim measured by `ncu:<metric>`, from the recorded Nsight
    Compute readings (ncu.csv, make ncu) of the device on screen: after/before for a counter,
    before/after for a duration (as the seeds give it); no readings: not measured."""
    from .device import load_recorded
    rec = load_recorded("ncu")
    dev = one_source(df)["device"].iloc[0] if df is not None and len(df) and "device" in df else None
    if rec.empty:
        return NAN, "not measured yet: Nsight Compute readings are recorded by `make ncu` on a GPU with ncu", None
    other = dev is not None and dev not in set(rec["device"])   # e.g. an H200 on screen: ncu ran on the H100
    rec = rec[rec["device"] == (rec["device"].iloc[0] if other or dev is None else dev)]
    on = f" (ncu on {rec['device'].iloc[0]})" if other else ""
    metric = r.how.split(":", 1)[1]
    val = lambda step: pick(rec, step, "value", case=r.case, metric=metric) if step else float("nan")   # noqa: E731
    after, before = val(r.fast), val(r.slow)
    if after != after:
        return NAN, "not measured yet: no recorded reading of this step", None
    if before != before:                     # a reading of one step: shown, not a ratio
        return Measured(after, after, after), "reading", f"{after:g} in {r.fast}{on}"
    shown = f"{before:g} -> {after:g}{on}"
    if before == after:
        return Measured(1.0, 1.0, 1.0), "no change" if claimed is None else ("holds" if claimed == 1 else "refuted"), shown
    if 0 in (before, after):
        return NAN, "more" if after > before else "fewer", shown
    m = before / after if metric.startswith("gpu__time_duration") else after / before
    m = Measured(m, float("nan"), float("nan"))
    if claimed is None:
        return m, "more" if after > before else "fewer", shown
    return m, verdict(m, claimed, r.kind), shown


def limiters(family):
    """What limits each launch the family names in `limiters`, from the recorded Nsight Compute
    readings (ncu.csv, `make ncu`): one row per counter (core.ncu.LIMITER_METRICS, in its order),
    one column per '<step or baseline> @ <case>'; the provenance printed once. None (and a line
    saying so) where nothing is recorded. ncu reads one device's counters; the table names it."""
    from .device import load_recorded
    from .ncu import LIMITER_METRICS
    rec = load_recorded("ncu")
    keys = [(name, family.case_key(shape, dt)) for name, shape, dt, _ in family.limiter_cases()]
    rec = rec[(rec["family"] == family.name) & rec["metric"].isin(list(LIMITER_METRICS))] if len(rec) else rec
    rec = rec[[k in keys for k in zip(rec["name"], rec["case"])]] if len(rec) else rec
    if rec.empty:
        print(f"No Nsight Compute readings of {family.name}'s limiters recorded yet: `make ncu` on a GPU with ncu.")
        return None
    rec = one_source(rec)
    print(f"Nsight Compute, one launch each: {provenance(rec)}")
    t = rec.pivot_table(index="metric", columns=["name", "case"], values="value", sort=False)
    t = t.reindex([m for m in LIMITER_METRICS if m in t.index])
    t.index = [LIMITER_METRICS[m] for m in t.index]
    t.columns = [f"{n} @ {c}" for n, c in t.columns]
    return t[[f"{n} @ {c}" for n, c in keys if f"{n} @ {c}" in t.columns]].round(2)


CLAIM_MEASURES: dict = {}      # claim id -> measure(frame) -> (Measured, verdict, shown): rows with how `lab:<name>`


def claim_measure(cid: str):
    """Register the measure of a claims row whose `how` is `lab:<name>`: a function of the frame on
    screen (one device's rows; None compile-only with nothing recorded) that returns (Measured,
    verdict, shown), its verdict from `verdict`, `quantity_verdict` or `checked`. A lab module
    registers its own (e.g. lab 00's latencies from measuring.csv), so every table that lists the
    row judges it the same way."""
    def reg(fn):
        CLAIM_MEASURES[cid] = fn
        return fn
    return reg


def quantity_verdict(value: float, lo: float, hi: float, unit: str = "") -> tuple:
    """(Measured, verdict, shown) of a measured quantity against a claimed range [lo, hi] (a claimed
    '~x' is given as x / HOLD .. x * HOLD): holds inside it, else smaller / larger than claimed."""
    if value != value:
        return NAN, "not measured (nothing recorded)", None
    v = "holds" if lo <= value <= hi else "smaller than claimed" if value < lo else "larger than claimed"
    return Measured(value, value, value), v, f"{value:.4g} {unit} (claimed {lo:.4g}-{hi:.4g})".replace("  ", " ")


def checked(ok: bool, shown: str) -> tuple:
    """(Measured, verdict, shown) of a correctness claim: a check that ran, 'holds' or 'refuted'."""
    return Measured(float(ok), float(ok), float(ok)), "holds" if ok else "refuted", shown


def _lab_measure(r, part) -> tuple:
    fn = CLAIM_MEASURES.get(r.id)
    if fn is None:
        return NAN, "not measured here (its lab module is not imported)", None
    return fn(part)


def claims(lab: str, df, families=(), measured=None):
    """The lab's 'seed claim vs measured here' table: docs/claims.csv filtered to `lab`, each row
    judged by the one rule: how = ratio, time(slow)/time(fast) at case from the frame on screen;
    ptx:<text> / ptxas:registers, the count in the compiled kernels of the lab's `families` (after /
    before); e2e, an end-to-end measurement from `measured` ({claim id: Measured or float}), never a
    kernel ratio; otherwise the row's stated reason. df: a frame, or a list of frames (one per
    timing run): a ratio takes both its times from the first run that has both. Where the frames hold
    several devices (recorded), a ratio row also gets a column per other device, "measured: verdict",
    so a verdict that differs between GPUs shows in the table."""
    import pandas as pd
    runs = [f for f in (df if isinstance(df, (list, tuple)) else [df]) if f is not None and len(f)]
    df = pd.concat(runs, ignore_index=True) if runs else None
    devs = list(dict.fromkeys(one_source(f)["device"].iloc[0] for f in runs)) if runs and "device" in df else []
    others = [d for d in dict.fromkeys(df["device"]) if d not in devs[:1]] if devs else []

    def ratio_on(rs, r, claimed):       # (Measured, verdict) of a ratio row: from the frame of the family the
        both = [f for f in rs if all(pick(f, n, "median_us", case=r.case) == pick(f, n, "median_us", case=r.case)
                                     for n in (r.fast, r.slow))]        # row names, else the first with both times
        both = sorted(both, key=lambda f: "lab" not in f or not (f["lab"] == r.family).all())
        m = ratio_band(both[0] if both else (rs[0] if rs else df), r.fast, r.slow, r.case)
        return m, verdict(m, claimed, r.kind)
    kernels = {f.name: f.kernels for f in families}
    rows = []
    cf = claims_file()
    for r in (cf[cf["lab"] == lab].itertuples() if not cf.empty else []):
        claimed = float(r.claimed) if r.claimed not in ("", ">", "<", "0") else None
        shown = None
        extra = {}
        if r.how == "ratio":
            m, v = ratio_on(runs, r, claimed)
            for d in others:
                md, vd = ratio_on([f[f["device"] == d] for f in runs if (f["device"] == d).any()], r, claimed)
                extra[f"on {d}"] = f"{md.value:.2f}: {vd}" if md.ok else "-"
        elif r.how.startswith(("ptx:", "ptxas:")) and r.family in kernels:
            m, v, shown = _counted(r, kernels[r.family])
        elif r.how.startswith("ncu:"):
            m, v, shown = _ncu_reading(r, claimed, df)
            extra = {f"on {d}": "(Nsight Compute ran on one device: the reading above)" for d in others}
        elif r.how.startswith("lab:"):
            m, v, shown = _lab_measure(r, one_source(df) if df is not None else None)
            for d in others:
                md, vd, sd = _lab_measure(r, df[df["device"] == d])
                extra[f"on {d}"] = f"{sd or '-'}: {vd}"
        elif measured and r.id in measured and isinstance(measured[r.id], tuple):
            m, v, shown = measured[r.id]
        elif measured and r.id in measured:
            m = measured[r.id] if isinstance(measured[r.id], Measured) else Measured(float(measured[r.id]), *[NAN.lo] * 2)
            v = verdict(m, claimed, r.kind, "end-to-end" if r.how == "e2e" else "kernel")
        else:
            m = NAN
            v = "not measured here (end to end)" if r.kind == "end-to-end" else (r.reason or "not measured here")
        if not m.ok and r.reason and v.startswith("not measured"):
            v = r.reason
        rows.append({"id": r.id, "claim": r.claim, "seed says": f"{claimed:g}" if claimed else "-",
                     "measured": shown or (f"{m.value:.2f}" if m.ok else "-"), "verdict": v,
                     "how": f"{r.fast} vs {r.slow} at {r.case}" if r.how == "ratio" else (r.how or "-"), **extra})
    out = pd.DataFrame(rows)
    for d in others:                  # a PTX count or a stated reason is the same on every device
        if f"on {d}" in out:
            out[f"on {d}"] = out[f"on {d}"].fillna("(as above)")
    if len(out):                      # the judged rows first: a long table shows them in its head
        out = out.iloc[(~out["verdict"].isin(OUTCOMES)).argsort(kind="stable")].reset_index(drop=True)
        print(f"Seed claims of {lab} ({len(out)}): " + (source(df) if df is not None and len(df) else
                                                         "counts from the compiled kernels (no timings needed)"))
    return out


# ---- tables and sentences ---------------------------------------------------------------------------

MAX_ROWS = 40       # a table longer than this shows the fastest step per case instead (the frame stays one call away)


def table(df, columns=None, roof: str = "copy", full: bool = False):
    """A results frame for reading, of the device on screen (the live GPU, or the reference record):
    the lean view (case, step, µs median and p10-p90, the fraction of the roof that applies,
    time(previous row)/time(this row) within a case) or the given columns, rounded. Longer than
    MAX_ROWS rows: the fastest step of each case, with its fraction of the roof and of the floor
    (brief()), and a line saying how to see every row. Provenance is said once, by the call that
    measured or read the frame; other records are set side by side by device_table. full=True:
    every row and column of every device."""
    if df is None or df.empty:
        print("(no results: nothing measured here and nothing recorded)")
        return df
    if full:
        return df
    d = one_source(df).copy()
    if roof == "copy" and "frac_copy" in d and d["frac_copy"].isna().all() and "frac_read" in d:
        roof = "read"                  # a family judged against the read roof has no copy fraction
    if len(d) > MAX_ROWS and {"case", "name", "kind", "median_us"} <= set(d):
        print_once(f"{len(d)} rows on {short_device(d['device'].iloc[0]) if 'device' in d else 'this device'}: "
                   f"below, the fastest step of each case; every row: results.table(frame, full=True).")
        return brief(d, roof)
    if columns is None:
        if f"frac_{roof}" in d:
            d[f"of {roof} roof"] = d[f"frac_{roof}"]
        if "median_us" in d:
            keys = [c for c in ("case",) if c in d]
            d["vs_prev"] = d.groupby(keys, sort=False)["median_us"].shift(1) / d["median_us"]
        columns = ["case", "name", "median_us", "p10_us", "p90_us", f"of {roof} roof", "vs_prev", "note"]
    cols = [c for c in columns if c in d and c not in ("device", "date", "source")]
    out = d[list(dict.fromkeys(cols))].round(3).reset_index(drop=True)
    if len(out) > MAX_ROWS:
        print_once(f"{len(out)} rows: the first {MAX_ROWS} below; every row: results.table(frame, full=True).")
        return out.head(MAX_ROWS)
    return out


FLOOR_NAMES = r"floor|read-only kernel|memcpy|plain copy"
LIBRARY_NAMES = r"torch|cublas|cupy"


def brief(df, roof: str = "copy"):
    """One row per case: the fastest step (read from the data), its µs and fraction of the roof, the
    floor's fraction where the frame has a floor (a read-only kernel or copy of the same bytes) and the
    step's fraction of that floor, and the fastest library baseline with time(library) / time(step)."""
    import pandas as pd
    d = one_source(df)
    top = best(d)
    rows = []
    for case, r in top.iterrows():
        at = d[d["case"] == case]
        row = {"case": case, "fastest step": r["name"], "µs": r["median_us"]}
        if f"frac_{roof}" in at:
            row[f"of {roof} roof"] = r.get(f"frac_{roof}", float("nan"))
        fl = at[(at["kind"] == "baseline") & at["name"].astype(str).str.contains(FLOOR_NAMES, case=False)]
        if len(fl):
            row["of floor"] = float(fl["median_us"].min()) / r["median_us"]
        libs = at[(at["kind"] == "baseline") & at["name"].astype(str).str.contains(LIBRARY_NAMES, case=False)]
        if len(libs):
            lib = libs.loc[libs["median_us"].idxmin()]
            row["fastest library"], row["library / step"] = lib["name"], lib["median_us"] / r["median_us"]
        rows.append(row)
    return pd.DataFrame(rows).round(3)


HOST_TARGET = 1.1      # a default step's host µs per call, at most this times torch's call for the same operation


def host_text(df, step: str, against: str = "torch") -> str:
    """Host time per call (not GPU time) of `step` against the fastest-to-issue baseline whose name has
    `against`, over the frame's cases (first device): the medians, the worst case, and where it is
    above HOST_TARGET x, the measured reason: the same launches as bare CuPy kernel calls
    (`bare_host_us`) against the baseline's whole call."""
    d = one_source(df)
    if d is None or d.empty or "host_us" not in d:
        return f"Host time of `{step}`: not measured here and not recorded yet."
    ours = d[d["name"] == step].set_index("case")
    base = d[(d["kind"] == "baseline") & d["name"].astype(str).str.contains(against)]
    if ours.empty or base.empty or ours["host_us"].isna().all():
        return f"Host time of `{step}` against {against}: not measured here and not recorded yet ({source(df)})."
    theirs = base.groupby("case")["host_us"].min()
    both = ours.join(theirs.rename("theirs"), how="inner").dropna(subset=["host_us", "theirs"])
    r = both["host_us"] / both["theirs"]
    med = lambda c: float(both[c].median())      # noqa: E731
    s = (f"Host time per call (what the CPU pays to issue it, not GPU time): `{step}` **{med('host_us'):.1f} µs**, "
         f"{against}'s call {med('theirs'):.1f} µs (medians over {len(both)} case{'s' * (len(both) > 1)}), "
         + (f"{r.min():.2f}× {against}'s" if f"{r.min():.2f}" == f"{r.max():.2f}" else
            f"{r.min():.2f}–{r.max():.2f}× {against}'s, median {r.median():.2f}×"))
    if r.median() <= HOST_TARGET:
        return s + f": within the {HOST_TARGET}× target ({source(df)})."
    bare = both["bare_host_us"] / both["theirs"] if "bare_host_us" in both else None
    if bare is not None and not bare.isna().all():
        s += (f", above the {HOST_TARGET}× target. Measured reason: the same launches as bare CuPy kernel calls "
              f"(`bare_host_us`, no checks) already cost {float(bare.median()):.2f}× {against}'s whole call; a "
              f"Python launcher cannot go below that, and its checks and plan lookup add "
              f"{med('host_us') - float(both['bare_host_us'].median()):.1f} µs. A CUDA graph replay (lab 08) "
              f"issues a whole chain for one launch's host cost")
    return s + f" ({source(df)})."


def summary(df, step: str, against: str, prov: bool = True) -> str:
    """One sentence about `step` against `against` over every case both have: the range of
    time(against)/time(step), and where it loses or is within noise. Provenance once."""
    got = []
    for c in cases(df, step):
        m = ratio_band(df, step, against, c)
        if m.ok:
            got.append((c, m))
    if not got:
        dev = df["device"].iloc[0] if df is not None and len(df) and "device" in df else None
        live = "source" in df and (df["source"] == "live").any() if df is not None else False
        return (f"`{step}` vs `{against}`: not recorded on {dev} yet." if dev and not live else
                f"`{step}` vs `{against}`: not measured here and not recorded yet.")
    vals = [m.value for _, m in got]
    lose = [c for c, m in got if m.value < 1 and not within_noise(m)]
    noise = [c for c, m in got if within_noise(m)]
    lo, hi = f"{min(vals):.2f}", f"{max(vals):.2f}"
    rng = f"{lo}×" if lo == hi else f"{lo}–{hi}×"
    s = f"`{step}` against `{against}`: {rng} (time of `{against}` / time of `{step}`) over {len(got)} case(s)"
    if lose:
        s += f"; slower at {', '.join(f'`{c}`' for c in lose)}"
    if noise and len(noise) == len(got) and len(got) > 1:
        s += "; within noise at every case"
    elif noise:
        s += f"; within noise at {', '.join(f'`{c}`' for c in noise)}"
    if not lose and not noise:
        s += "; faster at every case"
    return s + (f" ({source(df)})." if prov else ".")


def ablation(df, pairs, about=None) -> None:
    """The ablation of bundled steps, from one frame. pairs: (title, dtype, before, after, changes),
    changes a list of (the change, the kernel with it, the kernel without it). For each pair: one table
    per device on screen of every kernel's time over the after step's, per case (below 1: faster
    without that change), then one sentence per change over every case (`summary`), per device.
    `about`: name -> what the kernel is (kernels it does not describe are left as named)."""
    from IPython.display import display
    for title, dtype, before, after, changes in pairs:
        names = list(dict.fromkeys(n for n in [before, after] + [k for _, w, wo in changes for k in (w, wo)] if n))
        sel = select(df, name=names, **({"dtype": dtype} if dtype else {}))
        parts = [a for a in devices(sel) if a is not None and len(a) and after in set(a["name"])]
        if not parts:
            print(f"{title}: not recorded yet; the ablation is timed live on a GPU (make bench records it).")
        for a in devices(select(df, **({"dtype": dtype} if dtype else {}))):
            if a is not None and len(a) and "device" in a and after not in set(a["name"]) and parts:
                print(f"{title}: not recorded on {a['device'].iloc[0]} yet.")
        for a in parts:
            at = a.pivot_table(index="name", columns="case", values="median_us")
            at = at.loc[[n for n in names if n in at.index]] / at.loc[after]
            if about:
                at.insert(0, "what it is", [about.get(n, "") for n in at.index])
            display(at.round(2).rename_axis(f"{title}: time / {after}'s ({source(a)})"))
            alone = [(what, w, wo) for what, w, wo in changes if (w, wo) != (after, before)]
            head = (f"**{title}**, every change together: " + summary(a, after, before, prov=False)) if before \
                else f"**{title}**."
            say(head + (f" Each change alone ({source(a)}):\n" + "".join(f"\n- {what}: " + summary(a, w, wo, prov=False)
                                                                          for what, w, wo in alone) if alone else
                        f" Its one change is {changes[0][0]} ({source(a)})."))


def times(df, fast: str, slow: str, case: str, slow_case: str | None = None) -> str:
    """time(slow)/time(fast) as a short phrase judged by the noise rule: '**1.23×**', '1.02×
    (within noise)', or '*(not recorded yet)*'."""
    m = ratio_band(df, fast, slow, case, slow_case)
    if not m.ok:
        return "*(not recorded yet)*"
    return f"{m.value:.2f}× (within noise)" if within_noise(m) else f"**{m.value:.2f}×**"


def compare_text(df, fast: str, slow: str, case: str) -> str:
    """'`fast` is r× faster than `slow` at `case`', judged by the noise rule, or a note that it is
    not measured or recorded yet."""
    m = ratio_band(df, fast, slow, case)
    if not m.ok:
        return f"`{fast}` vs `{slow}` at `{case}`: not measured here and not recorded yet"
    if within_noise(m):
        return f"`{fast}` and `{slow}` are within noise of each other at `{case}` (ratio {m.value:.2f})"
    word, shown = ("faster", m.value) if m.value > 1 else ("slower", 1 / m.value)
    return f"`{fast}` is **{shown:.2f}×** {word} than `{slow}` at `{case}`"


def say(md: str) -> None:
    """Show a sentence computed from the results on screen (Markdown in a notebook, text
    elsewhere). Every sentence in a lab that quotes a number or gives a verdict goes through
    here, built from the measured or recorded frame, never typed for one device. A provenance that
    follows a finished clause joins it ("… case. (recorded on X)" reads "… case (recorded on X).")."""
    import re
    md = re.sub(r"\.\s+\(((?:recorded|live) on [^()]*)\)\.?", r" (\1).", md)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
        if get_ipython() is not None:
            display(Markdown(md))
            return
    except ImportError:
        pass
    print(md)


def speedup(df, num: str, den: str, by="case"):
    """time(den) / time(num) per case and device: > 1 means `num` is faster."""
    import pandas as pd
    if df is None or df.empty:
        return pd.Series(dtype=float, name=f"{num} vs {den}")
    t = df.pivot_table(index=[by, "device", "source"], columns="name", values="median_us")
    if num not in t or den not in t:
        return pd.Series(dtype=float)
    return (t[den] / t[num]).dropna().rename(f"{num} vs {den}")


def claim_rows(df, rows):
    """A claims table from rows given in a lab: [(claim, seed_says, fast, slow, case)], judged by
    the one rule (a seed_says of the form '1.6x' is the claimed ratio). docs/claims.csv and
    `claims(lab, df)` are the course's own list; this serves labs' extra rows."""
    import pandas as pd
    import re
    out = []
    for claim, seed, fast, slow, case in rows:
        m = ratio_band(df, fast, slow, case)
        c = re.match(r"\s*([0-9.]+)\s*[x×]", str(seed))
        out.append({"claim": claim, "seed says": seed, "measured": f"{m.value:.2f}x" if m.ok else "-",
                    "verdict": verdict(m, float(c.group(1)) if c else None),
                    "comparison": f"{fast} vs {slow} at {case}"})
    if out:
        print(source(df))
    return pd.DataFrame(out)



_SAID: list = [None, set()]      # the cell being run (IPython's execution count), the lines it printed


def print_once(line: str) -> None:
    """Print a provenance or skip line once per notebook cell: a cell that reads two frames of the
    same record says where they come from once. Outside IPython (tests, scripts) it always prints."""
    try:
        from IPython import get_ipython
        ip = get_ipython()
    except ImportError:
        ip = None
    if ip is not None:
        if _SAID[0] != ip.execution_count:           # a new cell
            _SAID[:] = [ip.execution_count, set()]
        if line in _SAID[1]:
            return
        _SAID[1].add(line)
    print(line)

# ---- the live / recorded switch: written once -------------------------------------------------------

def recorded(lab: str, what: str, **eq):
    """Compile-only: the recorded rows of `lab` (matching eq, e.g. section=..., case=[...]), with one
    line saying they are recorded and from where; or an empty frame and a line saying what a GPU
    would measure."""
    import pandas as pd
    from .device import load_recorded
    rec = select(load_recorded(lab), **eq) if eq else load_recorded(lab)
    if rec is None or rec.empty:
        print_once(f"SKIPPED (compile-only): nothing recorded for {lab} yet (`make bench` on a GPU records it); "
                   f"on a GPU this measures {what} live.")
        return pd.DataFrame()
    print_once(f"RECORDED results (not measured now): {provenance(rec)}")
    return mark_stale(lab, rec.reset_index(drop=True))


def mark_stale(lab: str, rec):
    """Recorded rows whose code has moved on since (core.store: their fingerprint differs from
    today's) get a `note` column, 'recorded with an earlier version of step NN', and one line says
    so with the reason the device record states for keeping them."""
    from .store import kept_reason, note
    notes = note(lab, rec)
    if any(notes):
        rec = rec.assign(note=notes)
        steps = sorted({n.rsplit(" of ", 1)[1] for n in notes if n})
        why = "; ".join(sorted({kept_reason(slug(d)) for d in rec.loc[rec["note"] != "", "device"]} - {""}))
        print_once(f"STALE: {sum(map(bool, notes))} recorded rows ran an earlier version of the code "
                   f"({', '.join(steps[:6])}{' ...' if len(steps) > 6 else ''}): marked in the `note` column"
                   + (f" (kept because: {why})" if why else "; `make bench` on that GPU re-records them") + ".")
    return rec


def frac_band(df, name: str, case: str, roof: str = "copy") -> Measured:
    """The fraction of a roof of one row, with its band (the fraction at p90 and at p10 time)."""
    f, t = pick(df, name, f"frac_{roof}", case=case), band(df, name, case)
    return Measured(f, f * t.value / t.hi, f * t.value / t.lo) if f == f and t.ok else Measured(f, f, f)


def live_or_recorded(lab: str, what: str, measure, **eq):
    """The one switch: live, measure() -> a list of row dicts (or a frame), tagged live with this
    device and date; compile-only, recorded(name, what, **eq)."""
    import pandas as pd
    from .device import info, is_live, now
    if not is_live():
        return recorded(lab, what, **eq)
    got = measure()
    df = got if isinstance(got, pd.DataFrame) else pd.DataFrame(got)
    df["device"], df["date"], df["source"] = info()["name"], now(), "live"
    return df


MISSING = "*Not measured here, and not recorded yet: a GPU (or `make bench`) fills this in.*"


def unless_missing(value, text: str, missing: str = MISSING) -> str:
    """`text` when `value` was measured (a number, not NaN), else the line saying why there is none."""
    return text if value is not None and value == value else missing


OUTCOMES = ("holds", "smaller than claimed", "larger than claimed", "refuted", "within noise",
            "more", "fewer", "no change")


def claims_summary(table) -> str:
    """One sentence over a claims table: how many claims, how many judged, and each outcome's count."""
    if table is None or table.empty:
        return "No seed claims listed for this lab."
    v = table["verdict"]
    judged = v[v.isin(OUTCOMES)]
    counts = ", ".join(f"{o} **{int((judged == o).sum())}**" for o in OUTCOMES if (judged == o).any())
    e2e = int(v.str.startswith("not measured here (end to end)").sum())
    differ = []
    for col in (c for c in table.columns if c.startswith("on ")):   # the other recorded devices
        other = table[col].astype(str).str.split(": ", n=1).str[-1]
        n = int(((other != v) & other.isin(OUTCOMES) & v.isin(OUTCOMES)).sum())
        differ.append(f"{col[3:]} gives another verdict for **{n}** of them (the column '{col}')")
    return (f"{len(table)} claims of the seed for this lab: **{len(judged)}** judged here ({counts or 'none yet'})"
            + (f"; {e2e} end-to-end claim{'s wait' if e2e > 1 else ' waits'} for an end-to-end measurement" if e2e else "")
            + f"; {len(table) - len(judged) - e2e} carry a stated reason (an Orin, the whole engine, a slip in the seed)"
            + "".join(f"; {d}" for d in differ) + ".")


def roof_text(df, name: str, case: str, target: float | None = None, roof: str = "copy") -> str:
    """'`name` reaches f of the copy roof at `case`' (and the target's outcome, by the one rule)."""
    m = frac_band(df, name, case, roof)
    f = m.value
    if f != f:
        return f"`{name}` at `{case}`: not measured here and not recorded yet"
    t = "" if target is None else f" (target {target:.2f}: **{target_outcome(m, target)}**)"
    return f"`{name}` reaches **{f:.2f}** of the {roof} roof at `{case}`{t}"
