"""python -m kernellab.record [lab ...]: measure each lab's families on this GPU and write
figures/reference/<device>/<name>.csv + meta.json, the device record. `make bench` runs this.

Every row carries the fingerprint of the code it timed (core.store.stamp; composite rows also the
steps they ran), so a test can tell when the code moved on and the record did not.
The device record (meta.json) holds the roofs, the launch costs and the SM count, and every
recorded fraction (frac_copy, frac_read) is derived from its roofs (settle, after every run):
  * the roofs are those the recorded roof table states (lab 00's, from the run that recorded
    it); a partial run (LABS_TO_RECORD=...) without it reuses them, so one device never has two;
  * a roof that a recorded kernel beat is raised to that kernel's rate (a roof is a ceiling).
python -m kernellab.record --rederive re-derives every recorded fraction from meta.json's roofs."""
from __future__ import annotations

import json
import sys

from .core import bench, progress, store
from .core.device import REFERENCE, info, is_live, now, save_recorded
from .labs import LABS, families


def derive(df, roofs: dict, roof="copy"):
    """gbps and the fraction of the one roof that applies (frac_copy or frac_read) of every row
    with bytes and a time (none for a compute-only row: it reads no weights), from the given roofs; roof: "copy", "read", or one per row (row_roofs).
    The other fraction is NaN: the copy roof is no ceiling for a kernel that writes ~nothing, nor
    the read roof for one that writes (near L2's size its writes can still sit in L2 when the end
    event fires)."""  # noqa: E501
    if "bytes" in df and "median_us" in df:
        import pandas as pd
        roof = pd.Series(roof, index=df.index) if isinstance(roof, str) else roof
        gbps = df["bytes"] / df["median_us"] / 1e3
        df["gbps"] = gbps
        moves = ~df["name"].astype(str).str.contains("compute only")   # weights from registers: no bytes read
        df["frac_copy"] = (gbps / roofs["copy_gbps"]).where((roof == "copy") & moves)
        df["frac_read"] = (gbps / roofs["read_gbps"]).where((roof == "read") & moves)
    return df


def row_roofs(name: str, df):
    """The roof that applies to each row of a recorded CSV: its family's. Families that share a
    CSV (vision's ops, the decoder's new kernels) are told apart by the op their case key names."""
    fams = [f for f in families() if f.name == name]
    by_op = {f.op: f.roof for f in fams if f.op}
    default = fams[0].roof if fams else "copy"
    return df["case"].astype(str).str.split(":").str[0].map(lambda op: by_op.get(op, default))


def stated_roofs(folder, roofs: dict) -> tuple[dict, str | None]:
    """The device record's roofs: those a recorded table states by quantity (lab 00's
    ROOF_QUANTITIES rows, from the run that recorded that table) over `roofs`, so a later partial
    run cannot leave a second roof beside them; and the name of the table that states them."""
    import pandas as pd
    from .measuring import ROOF_QUANTITIES
    for path in sorted(folder.glob("*.csv")):
        m = pd.read_csv(path)
        if "quantity" in m and set(ROOF_QUANTITIES.values()) & set(m["quantity"]):
            v = dict(zip(m["quantity"], m["value"]))
            return {**roofs, **{k: float(v[q]) for k, q in ROOF_QUANTITIES.items() if q in v}}, path.stem
    return roofs, None


def settle(folder, base: dict | None = None) -> dict:
    """One device record in `folder`: lab 00's roofs (measuring.csv), each raised to the fastest
    recorded row judged against it where a lab's kernel ran faster than the micro-benchmarks (a
    roof is a ceiling: a fraction above 1 would mean the roof was wrong), written into meta.json
    and measuring.csv, which name the row that set it; then every recorded fraction derived."""
    import pandas as pd
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    roofs, table = stated_roofs(folder, {**(base or {}), **(meta.get("roofs") or {})})   # base: this run's
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
                                     "unit": "GB/s", **({store.FP: m.loc[at[0], store.FP]}      # what timed its roof
                                                        if len(at) and store.FP in m else {})}])
                m = pd.concat([m.loc[:at[0]], row, m.loc[at[0] + 1:]] if len(at) else [m, row], ignore_index=True)
        m.to_csv(m_path, index=False, float_format="%.6g")
    for c, d in frames.items():
        derive(d, roofs, row_roofs(c.stem, d)).to_csv(c, index=False, float_format="%.6g")
    return raised


def rederive() -> int:
    """Every recorded device: settle() its record (roofs, then every fraction from them)."""
    for meta_path in sorted(REFERENCE.glob("*/meta.json")):
        raised = settle(meta_path.parent)
        print(f"re-derived {meta_path.parent.name}'s fractions from its roofs"
              + "".join(f"; {k} raised to {v}" for k, v in raised.items()))
    return 0


def summary(fam, df) -> None:
    """Per case: the fastest step (from the data), its fraction of the copy roof, its ratio to
    each baseline."""
    from .core.results import best
    top = best(df)
    for case, row in top.iterrows():
        at = df[df["case"] == case]
        vs = ", ".join(f"{t / row['median_us']:.2f}x vs {b}" for b, t in
                       zip(at[at["kind"] == "baseline"]["name"], at[at["kind"] == "baseline"]["median_us"]))
        print(f"  {case:<22} fastest {row['name']}: {row[f'frac_{fam.roof}']:.2f} of {fam.roof} roof; {vs}")


def main(labs) -> int:
    import pandas as pd
    if labs[:1] == ["--rederive"]:
        return rederive()
    if not is_live():
        print("kernellab.record needs a CUDA GPU: recorded results are measured, never typed in.")
        return 2
    labs = labs or LABS
    meta_path = REFERENCE / info()["slug"] / "meta.json"
    saved = {}    # families sharing a name (vision's ops) are written into one CSV
    for lab in labs:
        fams = list(families([lab]))
        items = sum(1 if f.record is not None else len(f.record_cases) * (len(f.variants) + len(f.baselines))
                    for f in fams)
        with progress.bar(f"make bench: {lab}", items) as bar:
            for fam in fams:
                if fam.record is not None:
                    bar.step(f"{fam.name} (its own record)")
                df = fam.record() if fam.record is not None else bench.compare(fam, fam.record_cases)
                df = store.stamp(fam.name, df.drop(columns=["device", "date", "source"]))   # what each row timed
                saved[fam.name] = pd.concat([saved[fam.name], df], ignore_index=True) if fam.name in saved else df
                path = save_recorded(fam.name, saved[fam.name])
                print(f"recorded {len(df)} rows -> {path}")
                if fam.variants:
                    summary(fam, df)
    raised = settle(meta_path.parent, dict(bench.roofs()))    # roofs, then every fraction, from one record
    print("".join(f"roof {k} raised to {v}\n" for k, v in raised.items()) + f"device: {info()['name']}, {now()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
