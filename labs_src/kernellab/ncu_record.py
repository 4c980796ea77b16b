"""python -m kernellab.ncu_record (make ncu): one launch under ncu per `ncu:<metric>` claim of docs/claims.csv
(jobs) and per family limiter (LIMITER_METRICS), into figures/reference/<device>/ncu.csv. `--limiters`: only those.
`--repeat=N`: each launch N times, the median kept with `lo` and `hi`. `--only=KEY[,KEY...]`: those families'
limiters only. `--missing`: only launches this device has no readings of. Partial runs keep the other readings."""
from __future__ import annotations

import sys

from .core.device import info, is_live, load_recorded, save_recorded
from .core.ncu import LIMITER_METRICS, ncu
from .core.results import claims_file
from .labs import families, family_named, key

REPEAT = 3              # readings per launch: the median is recorded, with its lowest and highest


def shape_of(fam, case: str):
    """(shape, dtype) of the family's cases and shapes whose case key is `case`."""
    dtypes = {dt for _, dt in fam.record_cases} or {"float32", "float16"}
    cands = list(fam.record_cases) + [(s, dt) for s in (fam.shapes or {}).values() for dt in dtypes]
    cands += [(s, dt) for s, _ in fam.check_cases for dt in dtypes]
    for shape, dt in cands:
        if fam.case_key(shape, dt) == case:
            return shape, dt
    raise ValueError(f"{fam.name}: no shape of the family has the case key {case!r}")


def _key(family: str, case: str) -> str:
    """The family's key: 'name:op' where the family has ops and the case names one, else 'name'."""
    k = f"{family}:{case.split(':')[0]}"
    return k if any(key(f) == k for f in families()) else family


def jobs(claims=None) -> dict:
    """{(family key, step, case): set of metrics} over the claims measured by ncu."""
    cf = claims_file() if claims is None else claims
    out: dict = {}
    for r in cf[cf["how"].str.startswith("ncu:")].itertuples():
        fam = _key(r.family, r.case)
        for step in filter(None, (r.slow, r.fast)):
            out.setdefault((fam, step, r.case), set()).add(r.how.split(":", 1)[1])
    return out


def limiter_jobs(only=None) -> list:
    """[(family, step or baseline, shape, dtype, kernel regex)] of every family's limiters (or `only`'s)."""
    fams = list(families()) if only is None else [family_named(k) for k in only]
    return [(f, name, shape, dt, kernel) for f in fams for name, shape, dt, kernel in f.limiter_cases()]


def main(argv=None) -> int:
    import pandas as pd
    argv = sys.argv[1:] if argv is None else argv
    if not is_live():
        print("kernellab.ncu_record needs a CUDA GPU and Nsight Compute: readings are measured, never typed in.")
        return 2
    only = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--only=")), None)
    partial = "--limiters" in argv or only is not None
    todo = [] if partial else [(family_named(k), step, *shape_of(family_named(k), case), None, metrics)
                                            for (k, step, case), metrics in sorted(jobs().items())]
    todo += [(f, name, shape, dt, kernel, LIMITER_METRICS) for f, name, shape, dt, kernel in limiter_jobs(only)]
    if "--missing" in argv:                      # only the launches this device has no readings of
        old = load_recorded("ncu")
        mine = old[old["device"] == info()["name"]] if len(old) else old
        have = set(zip(mine["family"], mine["name"], mine["case"])) if len(mine) else set()
        todo = [t for t in todo if (t[0].name, t[1], t[0].case_key(t[2], t[3])) not in have]
        partial = True
    repeat = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--repeat=")), REPEAT))
    rows, failed = [], []
    try:
        for fam, step, shape, dt, kernel, metrics in todo:
            k, case = key(fam), fam.case_key(shape, dt)
            seen: dict = {}
            for _ in range(repeat):                  # repeated readings: the band core.ncu.limiter reads
                df = ncu(fam, step, shape, dt, kernel=kernel, metrics={m: m for m in sorted(metrics)})
                if df is None:
                    break
                for r in df.itertuples():
                    try:
                        seen.setdefault((r[2], r[4]), []).append(float(str(r[5]).replace(",", "")))
                    except ValueError:               # 'n/a': this metric has no reading on this GPU
                        failed.append(f"{k} {step} {case} {r[2]} ({r[5]})")
            if not seen:
                failed.append(f"{k} {step} {case}")
                continue
            for (metric, unit), vals in seen.items():
                vals = sorted(vals)
                rows.append({"family": fam.name, "name": step, "case": case, "metric": metric, "unit": unit,
                             "value": vals[len(vals) // 2], "lo": vals[0], "hi": vals[-1]})
            print(f"ncu: {k} {step} {case}: {len(seen)} metrics x {repeat} readings")
    except KeyboardInterrupt:                    # a time limit (timeout -s INT): keep what was read, and the rest
        print(f"interrupted after {len(rows)} readings: recording them beside this device's other readings")
        partial = True
    if rows:
        new = pd.DataFrame(rows)
        if partial:                              # keep this device's other readings
            old = load_recorded("ncu")
            old = old[old["device"] == info()["name"]] if len(old) else old
            if len(old):
                mine = set(zip(new["family"], new["name"], new["case"]))
                keep = [t not in mine for t in zip(old["family"], old["name"], old["case"])]
                new = pd.concat([old.loc[keep].reindex(columns=new.columns), new], ignore_index=True)
        print(f"recorded {len(rows)} readings -> {save_recorded('ncu', new)}")
    if failed:
        print(f"not recorded ({len(failed)}): " + "; ".join(failed))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
