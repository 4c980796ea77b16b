"""python -m kernellab.record [lab ...]: measure each lab's families on this GPU and write
figures/reference/<device>/<name>.csv + meta.json, the device record. `make bench` runs this.

The device record (meta.json) holds the roofs, the launch costs and the SM count, and every
recorded fraction (frac_copy, frac_read) is derived from its roofs:
  * a run that records lab 00 (measuring) measures the roofs and writes them;
  * a partial run (LABS_TO_RECORD=...) without lab 00 reuses the recorded roofs: it re-derives
    the fractions of the rows it writes from them, so one device never has two roofs.
python -m kernellab.record --rederive re-derives every recorded fraction from meta.json's roofs."""
from __future__ import annotations

import json
import sys

from .core import bench
from .core.device import REFERENCE, info, is_live, now, save_recorded
from .labs import LABS, families


def derive(df, roofs: dict, roof: str = "copy"):
    """gbps and the fraction of the one roof that applies (frac_copy or frac_read) of every row
    with bytes and a time, from the given roofs. The other fraction is NaN: the copy roof is no
    ceiling for a kernel that writes ~nothing, nor the read roof for one that writes (near L2's
    size its writes can still sit in L2 when the end event fires)."""
    if "bytes" in df and "median_us" in df:
        gbps = df["bytes"] / df["median_us"] / 1e3
        df["gbps"] = gbps
        df["frac_copy"] = gbps / roofs["copy_gbps"] if roof == "copy" else float("nan")
        df["frac_read"] = gbps / roofs["read_gbps"] if roof == "read" else float("nan")
    return df


def lab00_roofs(folder, roofs: dict) -> dict:
    """The device record's roofs: lab 00's recorded copy and read roofs (measuring.csv) where the
    folder has them, so a later partial run cannot leave a second roof beside them."""
    import pandas as pd
    path = folder / "measuring.csv"
    if path.exists():
        m = pd.read_csv(path)
        v = dict(zip(m["quantity"], m["value"]))
        pairs = (("copy_gbps", "copy roof"), ("read_gbps", "read roof"), ("launch_us", "empty kernel launch"),
                 ("read_sum_gbps", "read roof: streaming sum (measure_02_read)"),
                 ("copy_kernel_gbps", "copy roof: copy kernel"), ("copy_memcpy_gbps", "copy roof: cudaMemcpy"),
                 ("copy_2r1w_gbps", "copy roof: 2 reads + 1 write stream"),
                 ("copy_near_l2_gbps", "copy roof: best near L2's size"),
                 ("launch_b2b_us", "empty kernel: 100 back to back, per launch"),
                 ("launch_graph_us", "empty kernel: CUDA graph of 100, per launch"),
                 ("host_launch_us", "host: one RawKernel launch call"),
                 ("host_graph_us", "host: one graph launch (100 kernels)"))
        roofs = {**roofs, **{k: float(v[q]) for k, q in pairs if q in v}}
    return roofs


def settle(folder) -> dict:
    """One device record in `folder`: lab 00's roofs (measuring.csv), each raised to the fastest
    recorded row judged against it where a lab's kernel ran faster than the micro-benchmarks (a
    roof is a ceiling: a fraction above 1 would mean the roof was wrong), written into meta.json
    and measuring.csv, which name the row that set it; then every recorded fraction derived."""
    import pandas as pd
    roof_of = {f.name: f.roof for f in families()}
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    roofs = lab00_roofs(folder, meta["roofs"])
    frames = {c: pd.read_csv(c) for c in sorted(folder.glob("*.csv"))}
    frames = {c: d for c, d in frames.items() if {"bytes", "median_us", "name"} <= set(d)}
    raised = {}
    for c, d in frames.items():
        key = f"{roof_of.get(c.stem, 'copy')}_gbps"
        g = (d["bytes"] / d["median_us"] / 1e3)[~d["name"].astype(str).str.contains("compute only")]
        if len(g) and g.max() > roofs[key]:
            r = d.loc[g.idxmax()]
            roofs[key], raised[key] = float(g.max()), f"{c.name} {r['name']} at {r['case']}"
    meta["roofs"], meta["roofs_raised_by"] = roofs, raised
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    m_path = folder / "measuring.csv"
    if m_path.exists():
        m = pd.read_csv(m_path)
        m = m[~m["quantity"].str.contains(": raised to ")]
        for key, label in (("copy_gbps", "copy roof"), ("read_gbps", "read roof")):
            m.loc[m["quantity"] == label, "value"] = roofs[key]
            if key in raised:
                at = m.index[m["quantity"] == label]
                row = pd.DataFrame([{"quantity": f"{label}: raised to {raised[key]}", "value": roofs[key],
                                     "unit": "GB/s"}])
                m = pd.concat([m.loc[:at[0]], row, m.loc[at[0] + 1:]] if len(at) else [m, row], ignore_index=True)
        m.to_csv(m_path, index=False, float_format="%.6g")
    for c, d in frames.items():
        derive(d, roofs, roof_of.get(c.stem, "copy")).to_csv(c, index=False, float_format="%.6g")
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
    recorded = json.loads(meta_path.read_text()).get("roofs") if meta_path.exists() else None
    recorded = lab00_roofs(meta_path.parent, recorded) if recorded else None
    if "measuring" in labs or recorded is None:
        roofs, meta = bench.roofs(), {"roofs": dict(bench.roofs()), "roofs_date": now()}
        print("roofs: measured in this run, written to the device record")
    else:
        roofs, meta = recorded, {}
        print(f"roofs: reused from {meta_path} (this run does not record lab 00)")
    saved = {}    # families sharing a name (vision's ops) are written into one CSV
    for fam in families(labs):
        df = fam.record() if fam.record is not None else bench.compare(fam, fam.record_cases)
        df = derive(df.drop(columns=["device", "date", "source"]), roofs, fam.roof)
        saved[fam.name] = pd.concat([saved[fam.name], df], ignore_index=True) if fam.name in saved else df
        path = save_recorded(fam.name, saved[fam.name], meta)
        print(f"recorded {len(df)} rows -> {path}")
        if fam.variants:
            summary(fam, df)
    raised = settle(meta_path.parent)
    print("".join(f"roof {k} raised to {v}\n" for k, v in raised.items()) + f"device: {info()['name']}, {now()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
