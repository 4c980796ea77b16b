"""The labs and their families: the one list every tool over all labs reads, and the README's headline figure."""
from __future__ import annotations

import importlib

LABS = ["measuring", "softmax", "rmsnorm", "add", "gemv", "vision", "vit_block", "attention", "decoder",
        "torch_decoder",     # lab 08's torch baselines: a module of their own (torch is optional)
        "vlm"]               # lab 09's stage table (ours beside transformers)


def families(labs=None):
    """Every Family of the given lab modules (default: all), in lab order."""
    for lab in (LABS if labs is None else labs):
        yield from importlib.import_module(f"kernellab.{lab}").FAMILIES


def ladders(labs=None):
    """The families that are ladders of steps (they have variants to check, time and sanitize)."""
    return [f for f in families(labs) if f.variants]


def key(fam) -> str:
    """A family's unique key: its record name, and its op where several share one record ('vision:layernorm')."""
    return f"{fam.name}:{fam.op}" if fam.op else fam.name


def family_named(name: str):
    """A family by its key (labs.key) or record name, e.g. 'bias_add' or 'vision:gelu'."""
    for fam in families():
        if key(fam) == name or fam.name == name:
            return fam
    raise ValueError(f"no family named {name!r}")


# ---- the README's headline figure, from the recorded results --------------------------------------

QUANTISED = ("int8", "int4", "w8a16")    # judged against a reader of their own (fewer) weight bytes


# Lab 08's first family is a token step's ops (SiLU x up, an argmax: a few KB each, launch-bound, not
# a ladder against a ceiling); lab 08's own figure is the whole token step, judged by its targets.
HEADLINE_SKIP = {"decoder", "torch_decoder"}
# Families drawn beside each lab's first, where no roof applies (compute-bound: attention prefill on the
# tensor cores, lab 06's whole block, lab 09's image + question to the first token): their bar is the speed
# against the fastest torch call of the same case, time(torch) / time(ours), torch at 100%. {family: (our rows'
# name prefix or None for the ladder's steps, the library rows' name prefix)}.
HEADLINE_VS_LIBRARY = {"attention_prefill": (None, "torch"), "vit_block": ("block (lab kernels", "torch eager block"),
                       "vlm_stages": ("ours: to first token", "transformers (sdpa): to first token")}


def _common_case(rec, dt, vs=None):
    """The largest case of dtype dt timed on every device that recorded it (for a HEADLINE_VS_LIBRARY
    family: with both of its bars), so every panel draws the same shape."""
    g = rec[(rec["dtype"] == dt) if "dtype" in rec else slice(None)]
    g = g[g["median_us"].notna()]
    devs = list(dict.fromkeys(g["device"]))
    key = ["bytes", "case"] if "bytes" in g else ["N", "case"] if "N" in g else ["case"]
    for case in reversed(list(dict.fromkeys(g.sort_values(key)["case"]))):
        at = [g[(g["device"] == d) & (g["case"] == case)] for d in devs]
        if all(len(a) for a in at) and (vs is None or all(_vs_library(a, *vs) for a in at)):
            return case
    return None


def _vs_library(at, ours_prefix, lib_prefix):
    """Rows (name, kind, frac) for a family without a roof: our fastest against torch's, torch = 1."""
    from .core.results import best
    libs = at[(at["kind"] == "baseline") & at["name"].astype(str).str.startswith(lib_prefix)]
    mine = (at[at["kind"] == "variant"] if ours_prefix is None else
            at[(at["kind"] == "variant") & at["name"].astype(str).str.startswith(ours_prefix)])
    if libs.empty or mine.empty:
        return []
    lib = libs.loc[libs["median_us"].idxmin()]
    top = best(mine).reset_index().iloc[0] if ours_prefix is None else mine.loc[mine["median_us"].idxmin()]
    return [(top, float(lib["median_us"]) / float(top["median_us"])), (lib, 1.0)]


def headline_rows():
    """Per recorded device and lab, at the lab's largest case of each dtype recorded on every device: the
    fastest step and the fastest torch/cuBLAS baseline, each as a fraction of the family's ceiling (its
    read-only floor for the quantised GEMVs, else the family's `roof`); where no roof applies
    (HEADLINE_VS_LIBRARY), their speed against the fastest torch call."""
    import pandas as pd
    from .core.device import load_recorded
    from .core.results import best, one_source
    rows = []
    fams = []
    for lab in LABS:
        if lab in HEADLINE_SKIP:
            continue
        mod = importlib.import_module(f"kernellab.{lab}")
        fams.append(next(iter(mod.FAMILIES)))
        fams += [f for f in mod.FAMILIES if f.name in HEADLINE_VS_LIBRARY and f is not fams[-1]]
    for fam in fams:
        rec = load_recorded(fam.name)
        vs = HEADLINE_VS_LIBRARY.get(fam.name)
        if (not fam.variants and vs is None) or rec.empty:
            continue
        for dt in dict.fromkeys(rec["dtype"] if "dtype" in rec else [None]):
            case = _common_case(rec, dt, vs)
            if case is None:
                continue
            for dev, g in rec[rec["case"] == case].groupby("device", sort=False):
                at = one_source(g)
                if vs is not None:
                    picks = [(r, f, "the fastest torch call's time (no roof applies)") for r, f in _vs_library(at, *vs)]
                else:
                    top = best(at)
                    libs = at[(at["kind"] == "baseline") & at["name"].str.contains("torch|cublas", case=False)]
                    floor = at[at["name"].str.startswith("read-only kernel")]
                    picks = [(r, float(floor["median_us"].min()) / float(r["median_us"]), "its read-only floor")
                             if len(floor) and dt in QUANTISED else (r, float(r[f"frac_{fam.roof}"]), f"the {fam.roof} roof")
                             for r in [top.reset_index().iloc[0]] + ([libs.loc[libs["median_us"].idxmin()]] if len(libs) else [])]
                for r, frac, ceiling in picks:
                    rows.append({"device": dev, "date": r["date"], "family": fam.name, "case": case, "name": r["name"],
                                 "kind": r["kind"], "frac": frac, "ceiling": ceiling})
    return pd.DataFrame(rows)


HEADLINE_DIGITS = 4


def headline_table():
    """The table the headline figure draws (figures/headline.csv; tests/test_records.py checks it)."""
    return headline_rows().round(HEADLINE_DIGITS)


def headline(name: str = "headline"):
    """The fastest step of each lab beside the fastest torch/cuBLAS baseline, as a fraction of the
    ceiling that applies to it, one panel per recorded device: drawn from figures/reference/
    (recorded), never live; the table it draws is written beside it (figures/<name>.csv)."""
    import numpy as np
    from .core import plot
    from .core.device import FIGURES
    rows = headline_table()
    if rows.empty:
        print("(no recorded results under figures/reference/: run `make bench` on a GPU)")
        return None
    FIGURES.mkdir(exist_ok=True)
    rows.to_csv(FIGURES / f"{name}.csv", index=False)
    devs = list(dict.fromkeys(rows["device"]))
    groups = list(dict.fromkeys(zip(rows["family"], rows["case"])))
    fig, axes = plot.plt.subplots(1, len(devs), figsize=(3.9 * len(devs) + 1.6, 0.45 * len(groups) + 1.8),
                                  dpi=plot.DPI, sharey=True, squeeze=False)
    y, h = np.arange(len(groups))[::-1], 0.38
    for ax, dev in zip(axes[0], devs):
        d = rows[rows["device"] == dev]
        for yy, (fam, case) in zip(y, groups):
            g = d[(d["family"] == fam) & (d["case"] == case)]
            for off, kind, color in ((h / 2, "variant", "#3a78b5"), (-h / 2, "baseline", "#bbbbbb")):
                r = g[g["kind"] == kind]
                if r.empty:
                    continue
                r = r.iloc[0]
                ax.barh(yy + off, 100 * r["frac"], h, color=color, edgecolor="k", lw=0.3,
                        label={"variant": "fastest step of the lab", "baseline": "fastest torch / cuBLAS"}[kind]
                        if (fam, case) == groups[0] else None)
                ax.annotate(f"{r['name']} {100 * r['frac']:.0f}%", (100 * r["frac"], yy + off), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=8)
        ax.axvline(100, color="k", ls="--", lw=1)
        ax.set_xlim(0, max(170, 125 * float(rows["frac"].max())))     # a relative speed (no roof) may pass 100%
        ax.set_ylim(-1.4, len(groups) - 0.5)     # a free row at the bottom for the legend
        ax.set_title(f"recorded on {dev}\n{', '.join(sorted(set(d['date'])))}", fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    ceil = dict(zip(zip(rows["family"], rows["case"]), rows["ceiling"]))
    axes[0][0].set_yticks(y, [f"{fam} {case}\nvs {ceil[(fam, case)]}" for fam, case in groups], fontsize=8)
    axes[0][0].legend(loc="lower right", fontsize=8, frameon=False)
    fig.supxlabel("% of the ceiling that applies (100% = the measured ceiling)", fontsize=9)
    fig.suptitle("CUDA Kernel Labs: the fastest step of each lab vs the library (make bench, make headline)",
                 fontsize=10)
    fig.tight_layout()
    return plot._save(fig, name, {"Description": f"table sha1 {table_sha1(rows)}"})


def table_sha1(rows) -> str:
    """The hash of a drawn table (its CSV text), written into the PNG that draws it."""
    import hashlib
    return hashlib.sha1(rows.to_csv(index=False).encode()).hexdigest()


def main(argv=None) -> int:
    """python -m kernellab.labs headline: figures/headline.png from the recorded results."""
    import sys
    import matplotlib
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["headline"]:
        print("usage: python -m kernellab.labs headline")
        return 2
    matplotlib.use("Agg")
    headline()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
