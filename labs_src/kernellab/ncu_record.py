"""python -m kernellab.ncu_record (make ncu): the seeds' Nsight Compute readings, recorded.

Every claim of docs/claims.csv measured by `ncu:<metric>` names a family, its before and after
steps and a case. For each (family, step, case) this runs one launch of that step under ncu
(core.ncu, a child process) with every metric those claims ask for, and writes the readings to
figures/reference/<device>/ncu.csv (family, name, case, metric, unit, value), which the labs'
claims tables read (results.claims) without a GPU. Needs a GPU and ncu with access to the
performance counters (the H100 host has both)."""
from __future__ import annotations

import sys

from .core.device import is_live, save_recorded
from .core.ncu import ncu
from .core.results import claims_file
from .labs import family_named


def shape_of(fam, case: str):
    """(shape, dtype) whose case key is `case`, from the family's record and check cases and named
    shapes; ValueError if none is."""
    dtypes = {dt for _, dt in fam.record_cases} or {"float32", "float16"}
    cands = list(fam.record_cases) + [(s, dt) for s in (fam.shapes or {}).values() for dt in dtypes]
    cands += [(s, dt) for s, _ in fam.check_cases for dt in dtypes]
    for shape, dt in cands:
        if fam.case_key(shape, dt) == case:
            return shape, dt
    raise ValueError(f"{fam.name}: no shape of the family has the case key {case!r}")


def _key(family: str, case: str) -> str:
    """The family's key: 'name:op' where the family has ops and the case names one, else 'name'."""
    try:
        family_named(f"{family}:{case.split(':')[0]}")
        return f"{family}:{case.split(':')[0]}"
    except ValueError:
        return family


def jobs(claims=None) -> dict:
    """{(family key, step, case): set of metrics} over the claims measured by ncu."""
    cf = claims_file() if claims is None else claims
    out: dict = {}
    for r in cf[cf["how"].str.startswith("ncu:")].itertuples():
        fam = _key(r.family, r.case)
        for step in filter(None, (r.slow, r.fast)):
            out.setdefault((fam, step, r.case), set()).add(r.how.split(":", 1)[1])
    return out


def main() -> int:
    import pandas as pd
    if not is_live():
        print("kernellab.ncu_record needs a CUDA GPU and Nsight Compute: readings are measured, never typed in.")
        return 2
    rows, failed = [], []
    for (key, step, case), metrics in sorted(jobs().items()):
        fam = family_named(key)
        shape, dt = shape_of(fam, case)
        df = ncu(fam, step, shape, dt, metrics={m: m for m in sorted(metrics)})
        if df is None:
            failed.append(f"{key} {step} {case}")
            continue
        for r in df.itertuples():
            try:
                value = float(str(r[5]).replace(",", ""))
            except ValueError:                   # 'n/a': this metric has no reading on this GPU
                failed.append(f"{key} {step} {case} {r[2]} ({r[5]})")
                continue
            rows.append({"family": fam.name, "name": step, "case": fam.case_key(shape, dt), "metric": r[2],
                         "unit": r[4], "value": value})
        print(f"ncu: {key} {step} {case}: {len(df)} readings")
    if rows:
        print(f"recorded {len(rows)} readings -> {save_recorded('ncu', pd.DataFrame(rows))}")
    if failed:
        print(f"not recorded ({len(failed)}): " + "; ".join(failed))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
