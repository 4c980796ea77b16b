"""python -m kernellab.record [lab ...] (`make bench`): measure each lab's families on this GPU into
figures/reference/<device>/<name>.csv + meta.json, each row stamped with its code's fingerprint; a family key
(vision:layernorm) records that family alone. Then (and with --rederive alone) core.store.settle: the roofs,
lab 00's raised to any kernel that beat them, and every fraction derived from them."""
from __future__ import annotations

import sys

from .core import bench, progress, store
from .core.device import REFERENCE, info, is_live, now
from .core.store import save_recorded
from .labs import LABS, families, family_named


def settle(folder, base: dict | None = None) -> dict:
    """core.store.settle of `folder`, every lab's families loaded first (each CSV derived against its own
    family's roof, also after a run of some labs)."""
    from .measuring import ROOF_QUANTITIES
    list(families())
    return store.settle(folder, ROOF_QUANTITIES, base)


def summary(fam, df) -> None:
    """Per case: the fastest step, its fraction of the roof, its ratio to each baseline."""
    from .core.results import best
    for case, row in best(df).iterrows():
        at = df[df["case"] == case]
        vs = ", ".join(f"{t / row['median_us']:.2f}x vs {b}" for b, t in
                       zip(at[at["kind"] == "baseline"]["name"], at[at["kind"] == "baseline"]["median_us"]))
        print(f"  {case:<22} fastest {row['name']}: {row[f'frac_{fam.roof}']:.2f} of {fam.roof} roof; {vs}")


def _other_ops(fam):
    """The rows of this device's record of `fam.name` that are not `fam`'s op (what a one-op run keeps)."""
    import pandas as pd
    path = REFERENCE / info()["slug"] / f"{fam.name}.csv"
    if not path.exists():
        return pd.DataFrame()
    df = store.read_csv(path)
    return df[df["case"].astype(str).str.split(":").str[0] != fam.op].reset_index(drop=True)


def main(labs) -> int:
    import pandas as pd
    if labs[:1] == ["--rederive"]:          # every recorded device: its roofs, then every fraction from them
        for meta_path in sorted(REFERENCE.glob("*/meta.json")):
            raised = settle(meta_path.parent)
            print(f"re-derived {meta_path.parent.name}'s fractions from its roofs"
                  + "".join(f"; {k} raised to {v}" for k, v in raised.items()))
        return 0
    if not is_live():
        print("kernellab.record needs a CUDA GPU: recorded results are measured, never typed in.")
        return 2
    labs = labs or LABS
    meta_path = REFERENCE / info()["slug"] / "meta.json"
    saved = {}    # families sharing a name (vision's ops) are written into one CSV
    for lab in labs:
        fams = list(families([lab])) if lab in LABS else [family_named(lab)]
        for fam in fams:                # one op of a shared record (vision:layernorm): the other ops' rows kept
            if lab not in LABS and fam.op and fam.name not in saved:
                saved[fam.name] = _other_ops(fam)
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
