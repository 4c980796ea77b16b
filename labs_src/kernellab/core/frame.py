"""Reading results frames, live or recorded (bench.compare's: a row per case and name), so that cells never
branch on the mode; and today's names of recorded rows."""
from __future__ import annotations

from .device import TIMING_RULES, provenance, recorded_meta


def select(df, **eq):
    """Rows whose columns equal the given values, or are in a given list (a missing column selects nothing)."""
    for k, v in eq.items():
        if df is None or df.empty or k not in df:
            return df.iloc[0:0] if df is not None else df
        df = df[df[k].isin(v) if isinstance(v, (list, tuple, set)) else df[k] == v]
    return df


def one_source(df):
    """The rows of the first (device, source) present: a sentence speaks of one device."""
    if df is None or df.empty or not {"device", "source"} <= set(df):
        return df
    first = df.iloc[0]
    return df[(df["device"] == first["device"]) & (df["source"] == first["source"])]


def source(df) -> str:
    """The provenance of one_source(df)."""
    return provenance(one_source(df))


def pick(df, name: str, column: str, **eq) -> float:
    """One number: `column` of the row `name` (matching eq) of the first device present; NaN when absent."""
    d = one_source(select(df, name=name, **eq))
    if d is None or d.empty or column not in d:
        return float("nan")
    return float(d[column].iloc[0])


def cases(df, name: str | None = None) -> list:
    """The cases of a frame (of one step), in the frame's order."""
    d = df if name is None else select(df, name=name)
    return [] if d is None or d.empty else list(dict.fromkeys(d["case"]))


def fastest(df, case: str, kind: str = "variant") -> str | None:
    """The name of the fastest row of `kind` at one case, or None."""
    b = best(select(df, case=case), kind)
    return b.loc[case, "name"] if case in b.index else None


def best(df, kind: str = "variant", names=None):
    """Per case, the fastest row of `kind` (names: only these; ablations left out), indexed by case."""
    d = one_source(select(df, kind=kind))
    if d is not None and len(d):
        d = d[~d["name"].str.contains(r"(?:^|_)ablate_")]   # an ablation row is not a step of the ladder
    if names is not None:
        d = select(d, name=list(names))
    if d is None or d.empty:
        import pandas as pd
        return pd.DataFrame(columns=["name", "median_us"])
    idx = d.groupby("case", sort=False)["median_us"].idxmin()
    return d.loc[idx.values].set_index("case")


def sweep_best(df, keys, kind: str = "variant", names=None):
    """best() over a sweep's cases (`keys`) only."""
    b = best(df, kind, names)
    return b[b.index.isin(list(keys))] if len(b) else b


def sweep_worst_frac(df, keys, kind: str = "variant", names=None, roof: str = "copy") -> float:
    """The worst fraction of a roof of sweep_best over a sweep's cases; NaN when the frame has none."""
    b = sweep_best(df, keys, kind, names)
    return float(b[f"frac_{roof}"].min()) if len(b) else float("nan")


def devices(df) -> list:
    """The frame split by (device, source), in order."""
    if df is None or df.empty or not {"device", "source"} <= set(df):
        return [df]
    return [g for _, g in df.groupby(["device", "source"], sort=False)]


def timing_rules(df, lab: str) -> int:
    """The device.TIMING_RULES a frame was timed under (a record older than the field: 1)."""
    if df is None or df.empty or "source" not in df or df["source"].iloc[0] == "live":
        return TIMING_RULES
    meta = next((m for m in recorded_meta().values() if m.get("device") == df["device"].iloc[0]), {})
    return int(meta.get("labs", {}).get(lab, {}).get("timing", 1))


_SAID: list = [None, set()]      # the cell being run (IPython's execution count), the lines it printed


def ipython():
    """The IPython shell this runs in, or None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def print_once(line: str) -> None:
    """Print a provenance or skip line once per notebook cell (outside IPython, always)."""
    ip = ipython()
    if ip is not None:
        if _SAID[0] != ip.execution_count:           # a new cell
            _SAID[:] = [ip.execution_count, set()]
        if line in _SAID[1]:
            return
        _SAID[1].add(line)
    print(line)


# ---- names a recorded row may carry ---------------------------------------------------------------

# Rows recorded under a name since renamed: old -> new, applied by store.read_csv (the files stay as recorded).
RENAMED = {
    "ablate_07_no_prefetch": "07_ablate_no_prefetch",      # softmax
    "04_two_exp": "04_ablate_two_exp",                      # softmax_ablation
    "05_no_vec_loads": "05_ablate_no_vec_loads",
    "05_no_ex2": "05_ablate_no_ex2",
    "05_no_reg_cache": "05_ablate_no_reg_cache",
    "05_block_256": "05_ablate_block_256",
    "ablate_04_plain": "04_ablate_plain",                   # add
    "ablate_06_plain": "06_ablate_plain",                   # bias_add
    "ablate_02_scalar_loads": "02_ablate_scalar_loads",     # vision
    "ablate_18_block128": "18_ablate_block128",
    "ablate_19_scalar_v": "19_ablate_scalar_v",
    "ablate_26_resident_grid": "26_ablate_resident_grid",
}


_WARNED: set = set()


def old_name(old: str, new: str) -> None:
    """Warn once that a saved notebook used an old spelling (compat.py's names, RENAMED's steps)."""
    import warnings
    if old not in _WARNED:
        _WARNED.add(old)
        warnings.warn(f"{old} is now {new}; it still works here. `make reset LAB=NN` gives today's notebook "
                      "(your copy moves to old/).", FutureWarning, stacklevel=3)


def step_name(family, name: str) -> str:
    """Today's name of a step a saved notebook names (RENAMED), warned once; else the name as given."""
    if name not in family.variants and RENAMED.get(name) in family.variants:
        old_name(repr(name), repr(RENAMED[name]))
        return RENAMED[name]
    return name


def renamed(df):
    """A frame's `name` column under today's names (RENAMED)."""
    if df is not None and "name" in df and df["name"].isin(list(RENAMED)).any():
        df = df.assign(name=df["name"].replace(RENAMED))
    return df


def short_device(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100': a device label that fits a column."""
    import re
    return re.sub(r"^NVIDIA\s+|\s+\d+GB.*$", "", str(name)).strip() or str(name)
