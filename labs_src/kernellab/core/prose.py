"""Tables and sentences from results frames, and `say`, through which every computed sentence is shown."""
from __future__ import annotations

import re

import pandas as pd

from .frame import best, cases, devices, ipython, one_source, print_once, select, short_device, source, sweep_best
from .verdict import OUTCOMES, frac_band, ratio, ratio_band, target_outcome, within_noise

MAX_ROWS = 40       # a table longer than this shows the fastest step per case instead (the frame stays one call away)


def table(df, columns=None, roof: str = "copy", full: bool = False):
    """The device on screen's rows, rounded, lean (vs_prev: time(previous row)/time(this row)) or `columns`."""
    if df is None or df.empty:
        print("(no results: nothing measured here and nothing recorded)")
        return df
    if full:
        return df
    d = one_source(df).copy()
    if roof == "copy" and "frac_copy" in d and d["frac_copy"].isna().all() and "frac_read" in d:
        roof = "read"                  # a family judged against the read roof has no copy fraction
    steps = {"case", "name", "kind", "median_us"} <= set(d) and len(best(d)) > 0    # steps to pick a fastest from
    if len(d) > MAX_ROWS and steps:
        print_once(f"{len(d)} rows on {short_device(d['device'].iloc[0]) if 'device' in d else 'this device'}: "
                   f"below, the fastest step of each case; every row: results.table(frame, full=True).")
        return brief(d, roof)
    if columns is None:
        if f"frac_{roof}" in d:
            d[f"of {roof} roof"] = d[f"frac_{roof}"]
        if "median_us" in d:
            keys = [c for c in ("case",) if c in d]
            d["vs_prev"] = d.groupby(keys, sort=False)["median_us"].shift(1) / d["median_us"]
        columns = ["case", "name", "median_us", "p10_us", "p90_us", f"of {roof} roof", "vs_prev", "note"]
    cols = [c for c in columns if c in d and c not in ("device", "date", "source")]
    out = d[list(dict.fromkeys(cols))].round(3).reset_index(drop=True)
    if len(out) > MAX_ROWS:               # a screen holds MAX_ROWS rows (notebooks/conftest.py checks it)
        print_once(f"{len(out)} rows: the first {MAX_ROWS} below; every row: results.table(frame, full=True).")
        return out.head(MAX_ROWS)
    return out


FLOOR_NAMES = r"floor|read-only kernel|memcpy|plain copy"
LIBRARY_NAMES = r"torch|cublas|cupy"


def sweep_table(df, keys, torch_name: str, floor: str):
    """Per case of a sweep: the fastest step, its µs and copy roof fraction, torch's and the floor's time / its."""
    b = sweep_best(df, keys)
    out = b.reset_index()[["case", "name", "median_us", "frac_copy"]] if len(b) else b
    if len(b):
        out["torch / best"] = [ratio(df, n, torch_name, c) for c, n in zip(b.index, b["name"])]
        out["of floor"] = [ratio(df, n, floor, c) for c, n in zip(b.index, b["name"])]
    return out.round(3)


def brief(df, roof: str = "copy"):
    """Per case: the fastest step, its µs, fractions of the roof and floor, and the fastest library's time / its."""
    d = one_source(df)
    rows = []
    for case, r in best(d).iterrows():
        at = d[d["case"] == case]
        row = {"case": case, "fastest step": r["name"], "µs": r["median_us"]}
        if f"frac_{roof}" in at:
            row[f"of {roof} roof"] = r.get(f"frac_{roof}", float("nan"))
        fl = at[(at["kind"] == "baseline") & at["name"].astype(str).str.contains(FLOOR_NAMES, case=False)]
        if len(fl):
            row["of floor"] = float(fl["median_us"].min()) / r["median_us"]
        libs = at[(at["kind"] == "baseline") & at["name"].astype(str).str.contains(LIBRARY_NAMES, case=False)]
        if len(libs):
            lib = libs.loc[libs["median_us"].idxmin()]
            row["fastest library"], row["library / step"] = lib["name"], lib["median_us"] / r["median_us"]
        rows.append(row)
    return pd.DataFrame(rows).round(3)


def ptxas_brief(info, full: bool = False):
    """build.ptxas_info's frame, one row per kernel: a column per arch only where the archs differ,
    kernels that differ only by a template size (`_2`, `_4`, `_8`) in one row as a range, all-zero columns
    said once instead of shown. full=True: the frame."""
    if full or info is None or info.empty:
        return info
    d = info.copy()
    d["kernel"] = [re.sub(r"_(\d+)$", r"_{\1}", k) for k in d["kernel"]]
    d["group"] = [re.sub(r"_\{\d+\}$", "", k) for k in d["kernel"]]
    sizes = d.groupby("group")["kernel"].agg(lambda ks: sorted({re.search(r"\{(\d+)\}$", k).group(1)
                                                                 for k in ks if k.endswith("}")}, key=int))
    qty = [c for c in ("registers", "spill_stores", "spill_loads", "stack_bytes", "smem_bytes", "barriers") if c in d]
    zero = [c for c in qty if (d[c] == 0).all()]
    archs = list(dict.fromkeys(d["arch"]))

    def span(v):
        lo, hi = int(v.min()), int(v.max())
        return f"{lo}" if lo == hi else f"{lo}–{hi}"
    rows = []
    for g, at in d.groupby("group", sort=False):
        row = {"kernel": g + (f"_{{{','.join(sizes[g])}}}" if sizes[g] else "")}
        for c in qty:
            if c in zero:
                continue
            per = {a: span(at.loc[at["arch"] == a, c]) for a in archs if (at["arch"] == a).any()}
            same = all((d.loc[d["arch"] == archs[0]].groupby("group")[c].agg(span)
                        == d.loc[d["arch"] == a].groupby("group")[c].agg(span)).all() for a in archs[1:])
            if same:
                row[c] = per[archs[0]]
            else:
                row.update({f"{c} {a}": v for a, v in per.items()})
        rows.append(row)
    out = pd.DataFrame(rows).sort_values("kernel", kind="stable").reset_index(drop=True)
    if zero:
        print(f"{', '.join(zero)}: 0 for every kernel on {', '.join(archs)} (not shown)")
    print(f"{len(info)} kernel builds in {len(out)} rows (a template size in braces shares a row; a range is "
          "lowest–highest over those sizes); every build: build.ptxas_info(...).")
    return out


def claims_brief(table, full: bool = False):
    """A claims table (results.claims) in at most MAX_ROWS rows: every claim judged or measured here a
    row each; those with a stated reason one row per reason, with their ids; still too long, the most common
    verdict folded the same way. full=True: the table itself."""
    if full or table is None or table.empty or "verdict" not in table or len(table) <= MAX_ROWS:
        return table
    ids = table["id"].astype(str) if "id" in table else table.index.astype(str)
    v = table["verdict"].astype(str)
    measured = table.get("measured", pd.Series("-", index=table.index)).astype(str)
    shown = v.isin(OUTCOMES) | ~measured.isin(["-", "", "nan"])
    reason = v.where(shown, [re.split(r"\s*[(:;]", r, maxsplit=1)[0].strip() for r in v])
    groups = list(dict.fromkeys(reason[~shown]))
    keep = shown.copy()
    while keep.sum() + len(groups) > MAX_ROWS and keep.any():
        common = reason[keep].value_counts().index[0]       # fold the most common verdict into one row
        keep &= reason != common
        groups.insert(0, common)

    def folded(r):
        at = reason == r
        vals = pd.to_numeric(measured[at].str.rstrip("x×"), errors="coerce").dropna()
        rng = "" if vals.empty else (f"{vals.min():.2f}" if f"{vals.min():.2f}" == f"{vals.max():.2f}"
                                     else f"{vals.min():.2f}–{vals.max():.2f}")
        return {"id": f"{int(at.sum())} claim{'s' * (int(at.sum()) > 1)}", "claim": ", ".join(ids[at]),
                "measured": rng, "verdict": r}
    out = pd.concat([table[keep], pd.DataFrame([folded(r) for r in groups])], ignore_index=True).fillna("")
    print(f"{len(table)} claims in {len(out)} rows: those judged or measured here a row each"
          + (f" (except those {' or '.join(repr(g) for g in groups if g in set(reason[shown]))}: one row per verdict)"
             if any(g in set(reason[shown]) for g in groups) else "")
          + "; the rest one row per reason, with their ids. Every claim, its reason in full: the claims frame itself.")
    return out


HOST_TARGET = 1.1      # a default step's host µs per call, at most this times torch's call for the same operation


def host_text(df, step: str, against: str = "torch") -> str:
    """Host time per call of `step` against the fastest `against` baseline, and above HOST_TARGET x, why."""
    d = one_source(df)
    if d is None or d.empty or "host_us" not in d:
        return f"Host time of `{step}`: not measured here and not recorded yet."
    ours = d[d["name"] == step].set_index("case")
    base = d[(d["kind"] == "baseline") & d["name"].astype(str).str.contains(against)]
    if ours.empty or base.empty or ours["host_us"].isna().all():
        return f"Host time of `{step}` against {against}: not measured here and not recorded yet ({source(df)})."
    theirs = base.groupby("case")["host_us"].min()
    both = ours.join(theirs.rename("theirs"), how="inner").dropna(subset=["host_us", "theirs"])
    r = both["host_us"] / both["theirs"]
    med = lambda c: float(both[c].median())      # noqa: E731
    s = (f"Host time per call (what the CPU pays to issue it, not GPU time): `{step}` **{med('host_us'):.1f} µs**, "
         f"{against}'s call {med('theirs'):.1f} µs (medians over {len(both)} case{'s' * (len(both) > 1)}), "
         + (f"{r.min():.2f}× {against}'s" if f"{r.min():.2f}" == f"{r.max():.2f}" else
            f"{r.min():.2f}–{r.max():.2f}× {against}'s, median {r.median():.2f}×"))
    if r.median() <= HOST_TARGET:
        return s + f": within the {HOST_TARGET}× target ({source(df)})."
    bare = both["bare_host_us"] / both["theirs"] if "bare_host_us" in both else None
    if bare is not None and not bare.isna().all():
        s += (f", above the {HOST_TARGET}× target. Measured reason: the same launches as bare CuPy kernel calls "
              f"(`bare_host_us`, no checks) already cost {float(bare.median()):.2f}× {against}'s whole call; a "
              f"Python launcher cannot go below that, and its checks and plan lookup add "
              f"{med('host_us') - float(both['bare_host_us'].median()):.1f} µs. A CUDA graph replay (lab 08) "
              f"issues a whole chain for one launch's host cost")
    return s + f" ({source(df)})."


def summary(df, step: str, against: str, prov: bool = True) -> str:
    """One sentence: the range of time(against)/time(step) over the cases, and where it loses or is within noise."""
    got = [(c, m) for c in cases(df, step) if (m := ratio_band(df, step, against, c)).ok]
    if not got:
        dev = df["device"].iloc[0] if df is not None and len(df) and "device" in df else None
        live = "source" in df and (df["source"] == "live").any() if df is not None else False
        return (f"`{step}` vs `{against}`: not recorded on {dev} yet." if dev and not live else
                f"`{step}` vs `{against}`: not measured here and not recorded yet.")
    vals = [m.value for _, m in got]
    lose = [c for c, m in got if m.value < 1 and not within_noise(m)]
    noise = [c for c, m in got if within_noise(m)]
    lo, hi = f"{min(vals):.2f}", f"{max(vals):.2f}"
    rng = f"{lo}×" if lo == hi else f"{lo}–{hi}×"
    s = f"`{step}` against `{against}`: {rng} (time of `{against}` / time of `{step}`) over {len(got)} case(s)"
    if lose:
        s += f"; slower at {', '.join(f'`{c}`' for c in lose)}"
    if noise and len(noise) == len(got) and len(got) > 1:
        s += "; within noise at every case"
    elif noise:
        s += f"; within noise at {', '.join(f'`{c}`' for c in noise)}"
    if not lose and not noise:
        s += "; faster at every case"
    return s + (f" ({source(df)})." if prov else ".")


def ablation(df, pairs, about=None) -> None:
    """Per (title, dtype, before, after, [(change, with, without)]): times over after's, a `summary` per change."""
    from IPython.display import display
    for title, dtype, before, after, changes in pairs:
        names = list(dict.fromkeys(n for n in [before, after] + [k for _, w, wo in changes for k in (w, wo)] if n))
        sel = select(df, name=names, **({"dtype": dtype} if dtype else {}))
        parts = [a for a in devices(sel) if a is not None and len(a) and after in set(a["name"])]
        if not parts:
            print(f"{title}: not recorded yet; the ablation is timed live on a GPU (make bench records it).")
        for a in devices(select(df, **({"dtype": dtype} if dtype else {}))):
            if a is not None and len(a) and "device" in a and after not in set(a["name"]) and parts:
                print(f"{title}: not recorded on {a['device'].iloc[0]} yet.")
        if len(parts) > 1:         # one device speaks: the other records' kernels are side by side in device_table
            print_once(f"{title}: the ablation of {short_device(parts[0]['device'].iloc[0])}; "
                       + ", ".join(short_device(a['device'].iloc[0]) for a in parts[1:])
                       + " recorded it too (results.ablation on that device's rows shows it).")
        for a in parts[:1]:
            at = a.pivot_table(index="name", columns="case", values="median_us")
            at = at[sorted(at.columns, key=lambda c: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(c))])]
            at = at.loc[[n for n in names if n in at.index]] / at.loc[after]     # cases in number order, not text
            if about:
                at.insert(0, "what it is", [about.get(n, "") for n in at.index])
            display(at.round(2).rename_axis(f"{title}: time / {after}'s ({source(a)})"))
            alone = [(what, w, wo) for what, w, wo in changes if (w, wo) != (after, before)]
            head = (f"**{title}**, every change together: " + summary(a, after, before, prov=False)) if before \
                else f"**{title}**."
            say(head + (f" Each change alone ({source(a)}):\n" + "".join(f"\n- {what}: " + summary(a, w, wo, prov=False)
                                                                          for what, w, wo in alone) if alone else
                        f" Its one change is {changes[0][0]} ({source(a)})."))


def pairs(df, rows, title: str) -> None:
    """A table of pairs judged by the noise rule, for one device's frame: rows (what, step, against, case[, the
    report's figure]); `against` is the step before or a library."""
    from IPython.display import display
    out = []
    for what, fast, slow, case, *said in rows:
        m = ratio_band(df, fast, slow, case)
        out.append({"pair": what, "step": fast, "against": slow, "case": case,
                    "time against / step": round(m.value, 2) if m.ok else float("nan"),
                    "verdict": "not recorded yet" if not m.ok else "within noise" if within_noise(m)
                    else "faster" if m.value > 1 else "slower", **({"the report": said[0]} if said else {})})
    display(pd.DataFrame(out).set_index("pair").rename_axis(f"{title} ({source(df)})"))


def times(df, fast: str, slow: str, case: str, slow_case: str | None = None) -> str:
    """time(slow)/time(fast): '**1.23×**', '1.02× (within noise)', or '*(not recorded yet)*'."""
    m = ratio_band(df, fast, slow, case, slow_case)
    if not m.ok:
        return "*(not recorded yet)*"
    return f"{m.value:.2f}× (within noise)" if within_noise(m) else f"**{m.value:.2f}×**"


def compare_text(df, fast: str, slow: str, case: str) -> str:
    """'`fast` is r× faster than `slow` at `case`', judged by the noise rule."""
    m = ratio_band(df, fast, slow, case)
    if not m.ok:
        return f"`{fast}` vs `{slow}` at `{case}`: not measured here and not recorded yet"
    if within_noise(m):
        return f"`{fast}` and `{slow}` are within noise of each other at `{case}` (ratio {m.value:.2f})"
    word, shown = ("faster", m.value) if m.value > 1 else ("slower", 1 / m.value)
    return f"`{fast}` is **{shown:.2f}×** {word} than `{slow}` at `{case}`"


def say(md: str) -> None:
    """Show a computed sentence (Markdown in a notebook, text elsewhere); a provenance after a finished clause joins it."""
    md = re.sub(r"\.\s+\(((?:recorded|live) on [^()]*)\)\.?", r" (\1).", md)
    if ipython() is not None:
        from IPython.display import Markdown, display
        display(Markdown(md))
        return
    print(md)


def each_device(df, sentence, *others, then: str = "") -> None:
    """say(sentence(part, *others)) for the device on screen, the other frames cut to that device; then `then`."""
    part = one_source(df)
    dev = part["device"].iloc[0] if part is not None and len(part) and "device" in part else None
    say(sentence(part, *[o if dev is None or o is None or "device" not in o else o[o["device"] == dev]
                         for o in others]))
    if then:
        say(then)


def device_table(df, roof: str = "copy", names=None, value: str = "median_us"):
    """Every record side by side, a row per case of the fastest step on screen (or of `names`, with `value`)."""
    parts = [p for p in devices(df) if p is not None and len(p)]
    if not parts or "kind" not in parts[0]:
        print("(nothing to compare: one device or no results)")
        return pd.DataFrame()
    if names is None:
        keys = [(case, r["name"]) for case, r in best(parts[0]).iterrows()]
    else:
        keys = [(c, n) for n in names for c in dict.fromkeys(parts[0].loc[parts[0]["name"] == n, "case"])]
    unit = {"median_us": "µs"}.get(value, value)
    rows = []
    for case, name in keys:
        row = {"case": case, "step": name}
        for p in parts:
            lab = short_device(p["device"].iloc[0]) + ("" if p["source"].iloc[0] == "recorded" else " (live)")
            at = p[(p["case"] == case) & (p["name"] == name)]
            row[f"{lab} {unit}"] = float(at[value].iloc[0]) if len(at) and value in at else float("nan")
            if f"frac_{roof}" in at:
                row[f"{lab} of {roof} roof"] = float(at[f"frac_{roof}"].iloc[0]) if len(at) else float("nan")
            if names is None:
                libs = p[(p["case"] == case) & (p["kind"] == "baseline")
                         & p["name"].astype(str).str.contains(LIBRARY_NAMES, case=False)]
                row[f"{lab} library µs"] = float(libs["median_us"].min()) if len(libs) else float("nan")
        rows.append(row)
    print_once("Every record side by side (" + "; ".join(f"{short_device(p['device'].iloc[0])}: {p['source'].iloc[0]} "
                                                          f"{p['date'].iloc[0]}" for p in parts) + ").")
    return pd.DataFrame(rows).round(3)


MISSING = "*Not measured here, and not recorded yet: a GPU (or `make bench`) fills this in.*"


def unless_missing(value, text: str, missing: str = MISSING) -> str:
    """`text` when `value` was measured (a number, not NaN), else the line saying why there is none."""
    return text if value is not None and value == value else missing


def roof_text(df, name: str, case: str, target: float | None = None, roof: str = "copy") -> str:
    """'`name` reaches f of the copy roof at `case`' (and the target's outcome)."""
    m = frac_band(df, name, case, roof)
    if not m.ok:
        return f"`{name}` at `{case}`: not measured here and not recorded yet"
    t = "" if target is None else f" (target {target:.2f}: **{target_outcome(m, target)}**)"
    return f"`{name}` reaches **{m:.2f}** of the {roof} roof at `{case}`{t}"
