"""The device record knows what it timed: every recorded row carries the fingerprint of the code
that ran (core.fingerprint), written by `make bench`; here today's fingerprint of a row is
computed, and the rows whose code has moved on since are found (stale). A device record may keep
stale rows only for a reason its meta.json states (`stale_kept`: e.g. no such GPU at hand); the
reader marks them, and tests/test_records.py fails on any other."""
from __future__ import annotations

import functools
import json

from . import fingerprint as fp
from .device import REFERENCE
from .family import REGISTRY

FP, STEPS = "fingerprint", "steps"       # the record's columns


def _families(stem: str) -> list:
    return REGISTRY.get(stem, [])


@functools.lru_cache(maxsize=None)
def expected(stem: str, name: str) -> tuple[str, str]:
    """Today's (fingerprint, steps) of the row `name` of record `stem`: a step or a baseline of a
    family recorded there, a composite row (Family.steps: its engine and the steps it runs), or,
    for a family that records itself, everything its record function runs; ('', '') when no family
    of that record is loaded."""
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
        if f.record is not None:
            return fp.of(f.record, f.kernels), ""
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
    """A boolean Series: the rows whose recorded fingerprint differs from today's (a row recorded
    before fingerprints were: stale). All False when no family of this record is loaded."""
    import pandas as pd
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
    import pandas as pd
    out = []
    for folder in sorted(REFERENCE.glob(slug or "*")):
        for csv in sorted(folder.glob("*.csv")):
            df = pd.read_csv(csv)
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
