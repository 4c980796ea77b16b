"""Measured values with their p10-p90 bands, the one verdict rule (`verdict`; docs/design.md, "Results,
sentences and verdicts"), targets, and the seed's claims (docs/claims.csv) judged by it."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from . import build
from .device import ROOT, provenance
from .frame import devices, one_source, pick, print_once, short_device, source

HOLD = 1.5              # in log terms: a claimed 2x holds from 1.59x to 2.83x


@dataclass(frozen=True)
class Measured:
    """A measured value with its noise band: lo and hi computed from the ends of the p10-p90 bands."""
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
    """time(slow) / time(fast) at one case (> 1: `fast` is faster), with its band; slow_case: slow's case."""
    f, s = band(df, fast, case), band(df, slow, slow_case or case)
    if not (f.ok and s.ok):
        return NAN
    lo = s.lo / f.hi if f.hi == f.hi and s.lo == s.lo else s.value / f.value
    hi = s.hi / f.lo if f.lo == f.lo and s.hi == s.hi else s.value / f.value
    return Measured(s.value / f.value, lo, hi)


def worst_ratio(df, top, slow: str) -> Measured:
    """The worst time(slow) / time(step) over `top` (a best() frame), with its band; NAN where none is timed."""
    r = [m for m in (ratio_band(df, n, slow, c) for c, n in zip(top.index, top["name"])) if m.ok]
    return min(r, key=lambda m: m.value) if r else NAN


def ratio(df, fast: str, slow: str, case: str, slow_case: str | None = None) -> float:
    """ratio_band's value (NaN when either time is absent)."""
    return ratio_band(df, fast, slow, case, slow_case).value


def frac_band(df, name: str, case: str, roof: str = "copy") -> Measured:
    """The fraction of a roof of one row, with its band (at p90 and p10 time)."""
    f, t = pick(df, name, f"frac_{roof}", case=case), band(df, name, case)
    return Measured(f, f * t.value / t.hi, f * t.value / t.lo) if f == f and t.ok else Measured(f, f, f)


def within_noise(m: Measured, at: float = 1.0) -> bool:
    """True when `at` lies inside the band (at = 1: the two times' bands overlap)."""
    return m.lo == m.lo and m.hi == m.hi and min(m.lo, m.hi) <= at <= max(m.lo, m.hi)


def verdict(m: Measured, claimed: float | None = None, kind: str = "kernel",
            measured_kind: str = "kernel") -> str:
    """The one verdict rule on m = time(before)/time(after) against the claimed ratio (None: no number)."""
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


def targets(targets, df):
    """The targets table of the device on screen, each other record in columns `... on <GPU>`."""
    rows = []
    as_m = lambda v: v if isinstance(v, Measured) else Measured(float(v), float("nan"), float("nan"))  # noqa: E731
    parts, floors = devices(df), any(t.floor is not None for t in targets)
    for t in targets:
        m = as_m(t.measure(parts[0]))
        row = {"target": t.what, "measured": f"{m.value:.2f}" if m.ok else "-",
               "threshold": "-" if t.threshold is None else f"{'<=' if t.below else '>='} {t.threshold:g}",
               "outcome": target_outcome(m, t.threshold, t.below)}
        if floors:                       # the same figure with the floor in place of our step
            fl = as_m(t.floor(parts[0])) if t.floor is not None else None
            row["at the floor"] = f"{fl.value:.2f}" if fl is not None and fl.ok else "-"
        for part in parts[1:]:
            dev = short_device(part["device"].iloc[0])
            o = as_m(t.measure(part))
            row[f"measured on {dev}"] = f"{o.value:.2f}" if o.ok else "-"
            row[f"outcome on {dev}"] = target_outcome(o, t.threshold, t.below)
        rows.append(row)
    if len(rows):
        print_once(f"Targets: {provenance(df)}")
    out = pd.DataFrame(rows)
    if len(parts) > 1 and parts[0] is not None and "device" in parts[0]:
        out.attrs["device"] = short_device(parts[0]["device"].iloc[0])
    return out


def targets_met(tg) -> str:
    """'k of n targets met' on each device of the table."""
    n = len(tg)
    said = [f"{int((tg['outcome'] == 'met').sum())} of {n} targets met"
            + (f" on {tg.attrs['device']}" if tg.attrs.get("device") else "")]
    said += [f"{int((tg[c] == 'met').sum())} of {n} on {c[len('outcome on '):]}" for c in tg
             if str(c).startswith("outcome on ")]
    return "; ".join(said)


def claims_file():
    """docs/claims.csv: every claim of the seed reports, one row each (empty frame if absent)."""
    path = ROOT / "docs" / "claims.csv"
    return pd.read_csv(path, dtype=str, keep_default_na=False) if path.exists() else pd.DataFrame()


CLAIM_ARCH = "sm_87"     # compiler counts are read for the seeds' GPU (Jetson Orin), compiled offline
CLAIM_ARCH_FALLBACK = "sm_90"   # for a step that needs a newer GPU than the Orin (e.g. clusters)


def _count(kernels: str, step: str, how: str, arch: str = CLAIM_ARCH) -> float:
    """What a `ptx:<text>` or `ptxas:<what>[@threads]` claim counts in one step's kernel compiled for arch."""
    if how.startswith(("ptxas:blocks_per_sm@", "ptxas:occupancy@")):   # from ptxas -v and the arch's SM limits
        what, threads = how.split(":", 1)[1].split("@")
        occ = build.occupancy(kernels, step, int(threads))
        r = occ[(occ.arch == arch) & (occ.source == "ptxas -v")]
        return float(r["blocks/SM" if what == "blocks_per_sm" else "occupancy"].iloc[0])
    if how in ("ptxas:registers", "ptxas:smem"):         # ptxas -v: registers, static shared memory bytes
        info = build.ptxas_info(kernels, (arch,))
        r = info[info.kernel == build.full_name(kernels, step)]
        return float(r["registers" if how == "ptxas:registers" else "smem_bytes"].iloc[0])
    texts = how.split(":", 1)[1].split("|")   # PTX instructions (any of); .ftz (CuPy's -ftz=true) is ignored
    return float(sum(any(t in line.replace(".ftz", "") for t in texts) for line in build.ptx(kernels, step, arch)))


def _counted(r, kernels: str) -> tuple:
    """(Measured after/before, verdict, shown) of a ptx/ptxas claim, compiled for sm_87 (else sm_90)."""
    for arch in (CLAIM_ARCH, CLAIM_ARCH_FALLBACK):
        try:
            after = _count(kernels, r.fast, r.how, arch)
            before = _count(kernels, r.slow, r.how, arch) if r.slow else float("nan")
            break
        except Exception:         # no such step, or a step that does not compile for this arch
            continue
    else:
        return NAN, "not measured (no such step)", "-"
    if before != before and r.claimed not in ("", ">", "<", "0"):   # one step's count against the claimed count
        c = float(r.claimed)
        v = "holds" if after == c else "smaller than claimed" if after < c else "larger than claimed"
        return Measured(after, after, after), v, f"{after:g} in {r.fast} ({arch})"
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
    """(Measured, verdict, shown) of an `ncu:<metric>` claim: after/before for a counter, before/after for a duration."""
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
    if before != before:                     # a reading of one step: a count claimed exactly, else shown
        raw = getattr(r, "claimed", "")
        v = "reading" if claimed is None and raw != "0" else (
            "holds" if after == (0.0 if raw == "0" else claimed) else "refuted")
        return Measured(after, after, after), v, f"{after:g} in {r.fast}{on}"
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


def limiters(family, quiet: bool = False):
    """The recorded ncu readings of family.limiters: a row per counter, a column per '<name> @ <case>' (or None)."""
    from .device import load_recorded
    from .ncu import LIMITER_METRICS
    rec = load_recorded("ncu")
    keys = [(name, family.case_key(shape, dt)) for name, shape, dt, _ in family.limiter_cases()]
    rec = rec[(rec["family"] == family.name) & rec["metric"].isin(list(LIMITER_METRICS))] if len(rec) else rec
    rec = rec[[k in keys for k in zip(rec["name"], rec["case"])]] if len(rec) else rec
    if rec.empty:
        if not quiet:
            print(f"No Nsight Compute readings of {family.name}'s limiters recorded yet: `make ncu` on a GPU with ncu.")
        return None
    rec = one_source(rec)
    if not quiet:
        print(f"Nsight Compute, one launch each, at the clocks it locks by default (its durations are not the timed "
          f"rows'): {provenance(rec)}")
    def table(values):
        t = rec.pivot_table(index="metric", columns=["name", "case"], values=values, sort=False)
        t = t.reindex([m for m in LIMITER_METRICS if m in t.index])
        t.index = [LIMITER_METRICS[m] for m in t.index]
        t.columns = [f"{n} @ {c}" for n, c in t.columns]
        return t[[f"{n} @ {c}" for n, c in keys if f"{n} @ {c}" in t.columns]].round(2)
    out = table("value")
    for k in ("lo", "hi"):        # repeated readings (make ncu --repeat N): their band, for core.ncu.limiter
        if k in rec and rec[k].notna().any():
            out.attrs[k] = table(k)
    return out


CLAIM_MEASURES: dict = {}      # claim id -> measure(frame) -> (Measured, verdict, shown): rows with how `lab:<name>`


def claim_measure(cid: str):
    """Register the measure of a claims row whose `how` is `lab:<name>`: frame -> (Measured, verdict, shown)."""
    def reg(fn):
        CLAIM_MEASURES[cid] = fn
        return fn
    return reg


def quantity_verdict(value: float, lo: float, hi: float, unit: str = "") -> tuple:
    """(Measured, verdict, shown) of a quantity against a claimed range [lo, hi] ('~x': x / HOLD .. x * HOLD)."""
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
    """docs/claims.csv's rows of `lab` judged by the one rule (df: a frame or a list of runs), a column per other device."""
    runs = [f for f in (df if isinstance(df, (list, tuple)) else [df]) if f is not None and len(f)]
    df = pd.concat(runs, ignore_index=True) if runs else None
    devs = list(dict.fromkeys(one_source(f)["device"].iloc[0] for f in runs)) if runs and "device" in df else []
    others = [d for d in dict.fromkeys(df["device"]) if d not in devs[:1]] if devs else []

    def ratio_on(rs, r, claimed):       # (Measured, verdict) of a ratio row: from the frame of the family the
        both = [f for f in rs if all(pick(f, n, "median_us", case=r.case) == pick(f, n, "median_us", case=r.case)
                                     for n in (r.fast, r.slow))]        # row names, else the first with both times
        both = sorted(both, key=lambda f: "lab" not in f or not (f["lab"] == r.family).all())
        if not both:                    # the family another lab records (lab 06's row on lab 07's prefill)
            from .device import load_recorded
            rec = load_recorded(r.family)
            dev = rs[0]["device"].iloc[0] if rs and "device" in rs[0] else None
            rec = rec[rec["device"] == dev] if dev is not None and len(rec) and (rec["device"] == dev).any() else rec
            both = [rec] if len(rec) else []
        m = ratio_band(both[0] if both else (rs[0] if rs else df), r.fast, r.slow, r.case)
        return m, verdict(m, claimed, r.kind)
    kernels = {f.name: f.kernels for f in families}
    rows = []
    cf = claims_file()
    for r in (cf[cf["lab"] == lab].itertuples() if not cf.empty else []):
        claimed = float(r.claimed) if r.claimed not in ("", ">", "<", "0") else None
        shown, extra = None, {}
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
        if r.reason.startswith(NOT_COMPARABLE):   # measured, but at a scale or on a device that decides it
            v, extra = r.reason, {k: f"{x.split(': ', 1)[0]}: {NOT_COMPARABLE}" for k, x in extra.items()}
        rows.append({"id": r.id, "claim": r.claim, "seed says": f"{claimed:g}" if claimed else "-",
                     "measured": shown or (f"{m.value:.2f}" if m.ok else "-"), "verdict": v,
                     "how": f"{r.fast} vs {r.slow} at {r.case}" if r.how == "ratio" else (r.how or "-"),
                     "conditions": _conditions(r, shown, devs), **extra})
    out = pd.DataFrame(rows)
    for d in others:                  # a PTX count or a stated reason is the same on every device
        if f"on {d}" in out:
            out[f"on {d}"] = out[f"on {d}"].fillna("(as above)")
    if len(out):                      # the judged rows first: a long table shows them in its head
        out = out.iloc[(~out["verdict"].isin(OUTCOMES)).argsort(kind="stable")].reset_index(drop=True)
        print(f"Seed claims of {lab} ({len(out)}): " + (source(df) if df is not None and len(df) else
                                                         "counts from the compiled kernels (no timings needed)"))
    return out


NOT_COMPARABLE = "not comparable here"


def _conditions(r, shown, devs) -> str:
    """Like for like: where and at what the seed measured, against where and at what this row is."""
    seed = "seed: Jetson Orin (sm_87, 16 SMs)"
    if r.how.startswith(("ptx:", "ptxas:")):
        arch = "sm_90" if shown and "(sm_90)" in str(shown) else CLAIM_ARCH
        return f"{seed}; here: compiled for {arch}" + (" (the seed's arch)" if arch == CLAIM_ARCH else "")
    if r.how == "ratio" or r.how.startswith(("ncu:", "e2e", "lab:")):
        dev = short_device(devs[0]) if devs else "the record on screen"
        at = f" at {r.case}" if r.case else ""
        return f"{seed}; here: {dev}{at}"
    return "-"


OUTCOMES = ("holds", "smaller than claimed", "larger than claimed", "refuted", "within noise",
            "more", "fewer", "no change")


def claims_summary(table) -> str:
    """One sentence over a claims table: how many claims, judged, and of each outcome."""
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


def speedup(df, num: str, den: str, by="case"):
    """time(den) / time(num) per case and device: > 1 means `num` is faster."""
    if df is None or df.empty:
        return pd.Series(dtype=float, name=f"{num} vs {den}")
    t = df.pivot_table(index=[by, "device", "source"], columns="name", values="median_us")
    if num not in t or den not in t:
        return pd.Series(dtype=float)
    return (t[den] / t[num]).dropna().rename(f"{num} vs {den}")


def claim_rows(df, rows):
    """A claims table from rows [(claim, seed_says, fast, slow, case)] ('1.6x' in seed_says: the claimed ratio)."""
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
