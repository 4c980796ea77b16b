"""The few figure kinds. Every figure names its device, says live or recorded with the
date, and is saved under figures/."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .bench import roof_values
from .device import FIGURES


def _provenance(df) -> str:
    if df is None or df.empty:
        return "no data"
    parts = [f"{src} on {dev}, {date}" for src, dev, date in
             df[["source", "device", "date"]].drop_duplicates().values]
    return "; ".join(parts)


def _save(fig, name: str):
    FIGURES.mkdir(exist_ok=True)
    path = FIGURES / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.show()
    plt.close(fig)
    return path


def _roofs(ax, df):
    r = roof_values()
    src = set(df["source"]) if not df.empty else set()
    if r and (r["source"] in src or not src):
        ax.axhline(r["copy_gbps"], color="k", ls="--", lw=1, label=f"copy roof {r['copy_gbps']:.0f} GB/s")
        ax.axhline(r["read_gbps"], color="gray", ls=":", lw=1, label=f"read roof {r['read_gbps']:.0f} GB/s")


def _loglog(fig, ax, name, xlabel, ylabel, title, provenance):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n{provenance}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, name)


def sweep(df, name: str, x: str = "cols", title: str = "", logy=False):
    """GB/s against size, one line per (variant or baseline, device), roofs drawn."""
    if df.empty:
        print(f"(no data for plot {name})")
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    multi = df["device"].nunique() > 1
    for (nm, dev, src), g in df.groupby(["name", "device", "source"], sort=False):
        g = g.sort_values(x)
        style = "--" if (g["kind"].iloc[0] == "baseline") else "-"
        label = nm + (f" [{src} {dev}]" if multi else "")
        ax.plot(g[x], g["gbps"], style, marker="o", ms=3, label=label)
    _roofs(ax, df)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel({"cols": "columns (row length, or elements for 1-D data)", "rows": "rows (batch)"}.get(x, x))
    ax.set_ylabel("GB/s (unique bytes read + written)")
    ax.set_title(f"{title}\n{_provenance(df)}", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    return _save(fig, name)


def bars(df, name: str, title: str = "", value: str = "gbps"):
    """One bar per variant/baseline per case: GB/s (or median_us), roofs drawn for GB/s."""
    if df.empty:
        print(f"(no data for plot {name})")
        return None
    cases = list(dict.fromkeys(df["case"]))
    names = list(dict.fromkeys(df["name"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names) * len(cases) / 2 + 3), 4.5))
    w = 0.8 / len(names)
    for i, nm in enumerate(names):
        vals = [df[(df["case"] == c) & (df["name"] == nm)][value].median() for c in cases]
        kind = df[df["name"] == nm]["kind"].iloc[0]
        ax.bar(np.arange(len(cases)) + i * w, vals, w, label=nm, hatch="//" if kind == "baseline" else None)
    if value == "gbps":
        _roofs(ax, df)
    ax.set_xticks(np.arange(len(cases)) + 0.4 - w / 2, cases, fontsize=8)
    ax.set_ylabel({"gbps": "GB/s (unique bytes)", "median_us": "median time (µs)"}.get(value, value))
    ax.set_title(f"{title}\n{_provenance(df)}", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, name)


def roofline(points, name: str, peak_gflops: float, copy_gbps: float, title: str = "", provenance: str = ""):
    """Attainable GFLOP/s = min(peak, AI x bandwidth), with kernels placed as points.
    points: [(label, flop_per_byte, gflops_or_None)]."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ai = np.logspace(-2, 3, 200)
    ax.plot(ai, np.minimum(peak_gflops, ai * copy_gbps), "k-", label="roof")
    ax.axvline(peak_gflops / copy_gbps, color="gray", ls=":", lw=1,
               label=f"ridge {peak_gflops / copy_gbps:.1f} FLOP/B")
    for label, x, y in points:
        yy = y if y is not None else min(peak_gflops, x * copy_gbps)
        ax.plot([x], [yy], "o")
        ax.annotate(label, (x, yy), fontsize=8, xytext=(4, -10), textcoords="offset points")
    return _loglog(fig, ax, name, "arithmetic intensity (FLOP per byte moved)", "GFLOP/s", title, provenance)


def error_vs_fp64(sizes, errors: dict, name: str, title: str = "", provenance: str = ""):
    """Max relative error against a float64 reference, per method, across sizes (measured live)."""
    if not errors:
        print(f"(no error measurements for plot {name})")
        return None
    if not provenance:
        from .device import info, now
        provenance = f"live on {info()['name']}, {now()}"
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, errs in errors.items():
        ax.plot(sizes, np.maximum(errs, 1e-18), marker="o", label=label)
    return _loglog(fig, ax, name, "row length", "max relative error vs float64", title, provenance)


def device_roofline(fund, kernels, name="00_roofline"):
    """The roofline of the device in `fund` (bench.fundamentals()), with `kernels` placed by
    arithmetic intensity: [(label, flop_per_byte)]."""
    if fund is None or fund.empty:
        print("SKIPPED: no measured or recorded fundamentals to draw a roofline from.")
        return None
    vals = dict(zip(fund["quantity"], fund["value"]))
    prov = f"{fund['source'].iloc[0]} on {fund['device'].iloc[0]}, {fund['date'].iloc[0]}"
    return roofline([(k, ai, None) for k, ai in kernels], name, vals["fp32 FMA peak"], vals["copy roof"],
                    title="Roofline (fp32 CUDA cores)", provenance=prov)
