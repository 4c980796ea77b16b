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
    """gbps, frac_copy and frac_read of every row with bytes and a time, from the given roofs; a
    family judged against the read roof gets no copy fraction (that roof does not apply to it)."""
    if "bytes" in df and "median_us" in df:
        gbps = df["bytes"] / df["median_us"] / 1e3
        df["gbps"] = gbps
        df["frac_copy"] = gbps / roofs["copy_gbps"] if roof == "copy" else float("nan")
        df["frac_read"] = gbps / roofs["read_gbps"]
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


def rederive() -> int:
    """Every CSV of every recorded device: fractions from that device's roofs (lab 00's, written
    back into meta.json), each family against the roof that applies to it."""
    import pandas as pd
    from .labs import families
    roof_of = {f.name: f.roof for f in families()}
    for meta_path in sorted(REFERENCE.glob("*/meta.json")):
        meta = json.loads(meta_path.read_text())
        meta["roofs"] = lab00_roofs(meta_path.parent, meta["roofs"])
        meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        for csv in sorted(meta_path.parent.glob("*.csv")):
            df = pd.read_csv(csv)
            if "frac_read" in df:
                derive(df, meta["roofs"], roof_of.get(csv.stem, "copy")).to_csv(csv, index=False, float_format="%.6g")
                print(f"re-derived {csv.relative_to(REFERENCE)} from {meta_path.parent.name}'s roofs")
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
        print(f"  {case:<22} fastest {row['name']}: {row['frac_copy']:.2f} of copy roof; {vs}")


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
    print(f"device: {info()['name']}, {now()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
