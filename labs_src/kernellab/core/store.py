"""The device record, figures/reference/<device>/ (a CSV per record and a meta.json): read, written, its roofs
settled, its fractions derived (the one writer of gbps, frac_copy, frac_read), its stale rows marked."""
from __future__ import annotations

import functools
import json

import pandas as pd

from . import fingerprint as fp
from .device import (REFERENCE, TIMING_RULES, info, is_live, jetson_clocks, need_gpu, now, provenance,  # noqa: F401
                     recorded_meta, slug, versions)
from .family import REGISTRY
from .frame import print_once, renamed, select


# ---- files: figures/reference/<device-slug>/<record>.csv + meta.json -------------------------------

def save_recorded(lab: str, df, extra_meta: dict | None = None):
    """Write the live results of one record for this device, with its meta.json."""
    need_gpu("save_recorded")
    d = info()
    folder = REFERENCE / d["slug"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{lab}.csv"
    df.to_csv(path, index=False, float_format="%.6g")
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.update({"device": d["name"], "arch": d["arch"], "sms": d["sms"], "l2_bytes": d["l2_bytes"],
                 "jetson": d["jetson"], "sm_clock_mhz": d["sm_clock_mhz"], **versions()})
    if d["jetson"]:                     # power mode and clocks: a Jetson's numbers mean little without them
        meta["jetson_clocks"] = jetson_clocks()
    meta.setdefault("labs", {})[lab] = {"date": now(), "rows": len(df), "timing": TIMING_RULES}
    meta.update(extra_meta or {})
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return path


def read_csv(path):
    """One recorded CSV, its rows under today's names (frame.RENAMED; the file is never rewritten by hand)."""
    return renamed(pd.read_csv(path))


def load_recorded(lab: str):
    """Every recorded row of one record, across devices, tagged source='recorded'."""
    frames = []
    for slug_, meta in recorded_meta().items():
        path = REFERENCE / slug_ / f"{lab}.csv"
        if path.exists():
            date = meta.get("labs", {}).get(lab, {}).get("date", "?")
            frames.append(read_csv(path).assign(device=meta["device"], date=date, source="recorded"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# ---- fractions: one writer ------------------------------------------------------------------------

def derive(df, roofs: dict, roof="copy"):
    """gbps and the fraction of the roof that applies ("copy", "read", "both", or one per row); the other NaN."""
    if "bytes" in df and "median_us" in df:
        roof = pd.Series(roof, index=df.index) if isinstance(roof, str) else roof
        gbps = df["bytes"] / df["median_us"] / 1e3
        df["gbps"] = gbps
        moves = ~df["name"].astype(str).str.contains("compute only") if "name" in df else True
        df["frac_copy"] = (gbps / roofs["copy_gbps"]).where(roof.isin(["copy", "both"]) & moves)
        df["frac_read"] = (gbps / roofs["read_gbps"]).where(roof.isin(["read", "both"]) & moves)
    return df


def row_roofs(name: str, df):
    """The roof that applies to each row of a recorded CSV: its family's (told apart by the case key's op)."""
    fams = REGISTRY.get(name, [])
    by_op = {f.op: f.roof for f in fams if f.op}
    default = fams[0].roof if fams else "copy"
    return df["case"].astype(str).str.split(":").str[0].map(lambda op: by_op.get(op, default))


def recorded_roofs(df=None) -> dict:
    """The roofs of the device record of df (df=None: the device with the most labs), with device, source, date."""
    metas = [m for m in recorded_meta().values() if "roofs" in m]
    if df is not None and len(df) and "device" in df:
        metas = [m for m in metas if m["device"] == df["device"].iloc[0]]
    metas.sort(key=lambda m: -len(m.get("labs", {})))
    return {**metas[0]["roofs"], "device": metas[0]["device"], "source": "recorded",
            "date": metas[0].get("roofs_date", "?")} if metas else {}


def stated_roofs(folder, roofs: dict, quantities: dict) -> tuple[dict, str | None]:
    """(`roofs` updated by lab 00's recorded table's quantities, that table's name)."""
    for path in sorted(folder.glob("*.csv")):
        m = pd.read_csv(path)
        if "quantity" in m and set(quantities.values()) & set(m["quantity"]):
            v = dict(zip(m["quantity"], m["value"]))
            return {**roofs, **{k: float(v[q]) for k, q in quantities.items() if q in v}}, path.stem
    return roofs, None


def settle(folder, quantities: dict, base: dict | None = None) -> dict:
    """One device record's roofs, each raised to the fastest row judged against it, then every fraction derived."""
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    roofs, table = stated_roofs(folder, {**(base or {}), **(meta.get("roofs") or {})}, quantities)   # base: this run's
    if table:
        meta["roofs_date"] = meta["labs"][table]["date"]
    # start from what the micro-benchmarks measured (so a roof comes back down when the kernel that
    # raised it is re-recorded slower); a record from before those rows: its components, or as stated
    parts = [roofs[k] for k in ("copy_kernel_gbps", "copy_memcpy_gbps", "copy_2r1w_gbps", "copy_near_l2_gbps")
             if k in roofs]
    roofs["copy_gbps"] = roofs.get("copy_micro_gbps") or (max(parts) if parts else roofs["copy_gbps"])
    roofs["read_gbps"] = roofs.get("read_micro_gbps") or roofs["read_gbps"]
    frames = {c: pd.read_csv(c) for c in sorted(folder.glob("*.csv"))}
    frames = {c: d for c, d in frames.items() if {"bytes", "median_us", "name", "case"} <= set(d)}
    raised = {}
    for c, d in frames.items():
        roof = row_roofs(c.stem, d)
        g = (d["bytes"] / d["median_us"] / 1e3)[~d["name"].astype(str).str.contains("compute only")]
        for kind in ("copy", "read"):
            gk, key = g[roof[g.index] == kind], f"{kind}_gbps"
            if len(gk) and gk.max() > roofs[key] * (1 - 1e-5):     # at it (an earlier settle raised it) or above
                r = d.loc[gk.idxmax()]
                roofs[key], raised[key] = max(roofs[key], float(gk.max())), f"{c.name} {r['name']} at {r['case']}"
    meta["roofs"], meta["roofs_raised_by"] = roofs, raised
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    if table:
        m_path = folder / f"{table}.csv"
        m = pd.read_csv(m_path)
        m = m[~m["quantity"].str.contains(": raised to ")]
        for key, label in (("copy_gbps", "copy roof"), ("read_gbps", "read roof")):
            m.loc[m["quantity"] == label, "value"] = roofs[key]
            if key in raised:
                at = m.index[m["quantity"] == label]
                row = pd.DataFrame([{"quantity": f"{label}: raised to {raised[key]}", "value": roofs[key],
                                     "unit": "GB/s", **({FP: m.loc[at[0], FP]}      # what timed its roof
                                                        if len(at) and FP in m else {})}])
                m = pd.concat([m.loc[:at[0]], row, m.loc[at[0] + 1:]] if len(at) else [m, row], ignore_index=True)
        m.to_csv(m_path, index=False, float_format="%.6g")
    for c, d in frames.items():
        derive(d, roofs, row_roofs(c.stem, d)).to_csv(c, index=False, float_format="%.6g")
    return raised


# ---- frames: the live / recorded switch, written once ---------------------------------------------

def recorded(lab: str, what: str, **eq):
    """The recorded rows of `lab` (matching eq) and a line saying so, or an empty frame and what a GPU would measure."""
    rec = select(load_recorded(lab), **eq) if eq else load_recorded(lab)
    if rec is None or rec.empty:
        print_once(f"SKIPPED (compile-only): nothing recorded for {lab} yet (`make bench` on a GPU records it); "
                   f"on a GPU this measures {what} live.")
        return pd.DataFrame()
    print_once(f"RECORDED results (not measured now): {provenance(rec)}")
    return mark_stale(lab, rec.reset_index(drop=True))


def mark_stale(lab: str, rec):
    """Recorded rows whose fingerprint differs from today's get a `note`, and one line says why they are kept."""
    notes = note(lab, rec)
    if any(notes):
        rec = rec.assign(note=notes)
        steps = sorted({n.rsplit(" of ", 1)[1] for n in notes if n})
        why = "; ".join(sorted({kept_reason(slug(d)) for d in rec.loc[rec["note"] != "", "device"]} - {""}))
        print_once(f"STALE: {sum(map(bool, notes))} recorded rows ran an earlier version of the code "
                   f"({', '.join(steps[:6])}{' ...' if len(steps) > 6 else ''}): marked in the `note` column"
                   + (f" (kept because: {why})" if why else "; `make bench` on that GPU re-records them") + ".")
    return rec


def live_or_recorded(lab: str, what: str, measure, **eq):
    """The one switch: live, measure() tagged with this device and date; compile-only, recorded(lab, what, **eq)."""
    if not is_live():
        return recorded(lab, what, **eq)
    got = measure()
    df = got if isinstance(got, pd.DataFrame) else pd.DataFrame(got)
    df["device"], df["date"], df["source"] = info()["name"], now(), "live"
    return df


# ---- fingerprints: a record knows what it timed ------------------------------------------------------

FP, STEPS = "fingerprint", "steps"       # the record's columns


def _families(stem: str) -> list:
    return REGISTRY.get(stem, [])


@functools.lru_cache(maxsize=None)
def expected(stem: str, name: str) -> tuple[str, str]:
    """Today's (fingerprint, steps) of row `name` of record `stem`; ('', '') with no family loaded."""
    fams = _families(stem)
    for f in fams:
        if name in f.variants:
            return fp.of(f.variants[name], f.kernels), ""
        if name in f.baselines:
            return fp.of(f.baselines[name], f.kernels), ""
    for f in fams:
        got = f.steps(name) if f.steps else None
        if got:
            engine, steps = got
            return fp.composite(engine, steps), fp.step_names(steps)
    for f in fams:
        if f.record is not None:     # with the default steps of the families its record's public calls run
            used = [f"{u.op or u.name}.{d}=" + (fp.of(u.variants[d], u.kernels) if d in u.variants else "missing")
                    for u in f.uses for d in dict.fromkeys(u.default.values())]
            return (fp.digest(fp.of(f.record, f.kernels), *used) if used else fp.of(f.record, f.kernels)), ""
    if fams:     # a row of a ladder that is none of its steps: the whole family
        return fp.digest(*(fp.of(v, f.kernels) for f in fams for v in (*f.variants.values(), *f.baselines.values()))), ""
    return "", ""


def row_names(df):
    """The column that names a record's rows ('name'; lab 00's table: 'quantity')."""
    return df["name" if "name" in df else "quantity"].astype(str)


def stamp(stem: str, df):
    """The record's frame with today's fingerprint (and, for composite rows, the steps) of each row."""
    got = [expected(stem, n) for n in row_names(df)]
    df[FP] = [g[0] for g in got]
    if any(g[1] for g in got):
        df[STEPS] = [g[1] for g in got]
    return df


def stale(stem: str, df):
    """True for the rows whose recorded fingerprint differs from today's (none without a loaded family)."""
    names = row_names(df)
    if not _families(stem):
        return pd.Series(False, index=df.index)
    today = names.map(lambda n: expected(stem, n)[0])
    rec = df[FP].astype(str) if FP in df else pd.Series("", index=df.index)
    return (rec != today) & (today != "")


def kept_reason(slug: str) -> str:
    """Why a device record keeps stale rows (meta.json `stale_kept`), or ''."""
    path = REFERENCE / slug / "meta.json"
    return json.loads(path.read_text()).get("stale_kept", "") if path.exists() else ""


def stale_rows(slug: str | None = None) -> list:
    """[(device slug, record, row name, case)] of every stale recorded row (of loaded families)."""
    out = []
    for folder in sorted(REFERENCE.glob(slug or "*")):
        for csv in sorted(folder.glob("*.csv")):
            df = read_csv(csv)
            if "name" not in df and "quantity" not in df:
                continue
            s = stale(csv.stem, df)
            names, cases = row_names(df), df["case"].astype(str) if "case" in df else pd.Series("", index=df.index)
            out += [(folder.name, csv.stem, names[i], cases[i]) for i in df.index[s]]
    return out


def note(stem: str, df) -> list:
    """Per row, '' or 'recorded with an earlier version of step NN' (what the reader shows)."""
    s = stale(stem, df)
    return ["recorded with an earlier version of " + (f"step {n}" if n[:2].isdigit() else repr(n)) if st else ""
            for n, st in zip(row_names(df), s)]
