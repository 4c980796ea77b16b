"""python -m kernellab.record [lab ...]: measure each lab's standard benchmark set on this
GPU and write figures/reference/<device>/<family>.csv + meta.json. `make bench` runs this.
A lab module may hold several families (FAMILIES, e.g. add and bias_add), each with its
RECORD_CASES; the default is its sweep and seed shapes in fp32 and fp16."""
from __future__ import annotations

import sys

from . import bench
from .device import info, is_live, now, save_recorded

LABS = ["measuring", "softmax", "rmsnorm", "add", "gemv", "vision", "vit_block"]


def families(labs):
    """Every family of the given lab modules (a module may hold several: its FAMILIES)."""
    import importlib
    for lab in labs:
        mod = importlib.import_module(f"kernellab.{lab}")
        yield from getattr(mod, "FAMILIES", [mod])


def _family_cases(fam):
    if hasattr(fam, "RECORD_CASES"):
        return fam.RECORD_CASES
    shapes = list(dict.fromkeys(fam.SWEEP + list(fam.SHAPES.values())))   # sweep and seed shapes overlap
    return [(s, dt) for dt in ("float32", "float16") for s in shapes]


def summary(fam, df, launch_us) -> None:
    """Per case: the best variant's fraction of the copy roof, its ratio to each baseline, its
    host cost against a bare RawKernel call, and for a single row its time in empty-kernel
    launches (launch_us: the GPU's cost of one launch back to back)."""
    for case, g in df.groupby("case", sort=False):
        dt = case.split(":")[-1]
        best = fam.BEST.get(dt)
        t = dict(zip(g["name"], g["median_us"]))
        if best not in t:
            continue
        fc = float(g[g["name"] == best]["frac_copy"].iloc[0])
        vs = ", ".join(f"{t[b] / t[best]:.2f}x vs {b}" for b in fam.BASELINES if b in t)
        one = f", {t[best] / launch_us:.2f} empty launches" if case.startswith("1x") else ""
        row = g[g["name"] == best].iloc[0]
        host = (f"; host {row['host_us']:.1f} us = {row['host_us'] / row['bare_host_us']:.2f}x bare"
                if "bare_host_us" in g and row["bare_host_us"] == row["bare_host_us"] else "")
        print(f"  {case:<22} {best}: {fc:.2f} of copy roof; {vs}{one}{host}")


def main(labs) -> int:
    import pandas as pd
    if not is_live():
        print("kernellab.record needs a CUDA GPU: recorded results are measured, never typed in.")
        return 2
    meta = {"roofs": {k: v for k, v in bench.roofs().items()}, "roofs_date": now()}
    saved = {}    # families sharing a NAME (vision's ops) are written into one CSV
    for lab in labs or LABS:
        for fam in ([None] if lab == "measuring" else families([lab])):
            df = (bench.fundamentals() if fam is None else fam.record() if hasattr(fam, "record")
                  else bench.compare(fam, _family_cases(fam)))    # a lab that is not a ladder records itself
            df = df.drop(columns=["device", "date", "source"])
            key = lab if fam is None else fam.NAME
            saved[key] = pd.concat([saved[key], df], ignore_index=True) if key in saved else df
            path = save_recorded(key, saved[key], meta)
            print(f"recorded {len(df)} rows -> {path}")
            if fam is not None:
                summary(fam, df, meta["roofs"].get("launch_b2b_us", meta["roofs"]["launch_us"]))
    print(f"device: {info()['name']}, {now()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
