"""python -m kernellab.record [lab ...]: measure each lab's standard benchmark set on this
GPU and write figures/reference/<device>/<lab>.csv + meta.json. `make bench` runs this."""
from __future__ import annotations

import sys

from . import bench
from .device import info, is_live, now, save_recorded


def _family_cases(fam):
    shapes = list(dict.fromkeys(fam.SWEEP + list(fam.SHAPES.values())))   # sweep and seed shapes overlap
    return [(s, dt) for dt in ("float32", "float16") for s in shapes]


def summary(fam, df) -> None:
    """Per case: the best variant's fraction of the copy roof and its ratio to each baseline."""
    for case, g in df.groupby("case", sort=False):
        dt = case.split(":")[-1]
        best = fam.BEST.get(dt)
        t = dict(zip(g["name"], g["median_us"]))
        if best not in t:
            continue
        fc = float(g[g["name"] == best]["frac_copy"].iloc[0])
        vs = ", ".join(f"{t[b] / t[best]:.2f}x vs {b}" for b in fam.BASELINES if b in t)
        print(f"  {case:<22} {best}: {fc:.2f} of copy roof; {vs}")


def main(labs) -> int:
    if not is_live():
        print("kernellab.record needs a CUDA GPU: recorded results are measured, never typed in.")
        return 2
    import importlib
    labs = labs or ["measuring", "softmax"]
    meta = {"roofs": {k: v for k, v in bench.roofs().items()}, "roofs_date": now()}
    for lab in labs:
        if lab == "measuring":
            df = bench.fundamentals()
        else:
            fam = importlib.import_module(f"kernellab.{lab}")
            df = bench.compare(fam, _family_cases(fam))
        df = df.drop(columns=["device", "date", "source"])
        path = save_recorded(lab, df, meta)
        print(f"recorded {len(df)} rows -> {path}")
        if lab != "measuring":
            summary(fam, df)
    print(f"device: {info()['name']}, {now()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
