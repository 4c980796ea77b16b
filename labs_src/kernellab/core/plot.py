"""The few figure kinds, saved under figures/, each naming its device, live or recorded, and date: <= ~1000 px
wide, text >= 9 pt, legends outside the data, a line style and marker per line."""
from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import numpy as np

from .bench import roof_values
from .device import FIGURES, info, now, provenance
from .frame import ipython

DPI = 100
WIDTH = 7.0          # inches of axes + labels; a legend outside adds <= 2.5 in: <= ~1000 px
STYLE = {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 9,
         "xtick.labelsize": 9, "ytick.labelsize": 9, "figure.dpi": DPI, "savefig.dpi": DPI}
_VARIANT_STYLES = [(ls, mk) for ls in ("-", (0, (3, 1))) for mk in "os^vDPX<>h"]   # 20 before a repeat
_BASELINE_STYLES = [("--", "x"), (":", "+"), ("-.", "*"), ((0, (5, 1, 1, 1)), "1"), ((0, (1, 3)), "2")]


def _figure(w=WIDTH, h=4.0, **kw):
    with plt.rc_context(STYLE):
        return plt.subplots(figsize=(w, h), dpi=DPI, **kw)


def _legend_outside(ax, below=False, **kw):
    handles, labels = ax.get_legend_handles_labels()
    if handles and below:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09 - 0.3 / ax.figure.get_size_inches()[1]),
                  ncol=3, frameon=False, fontsize=9, **kw)
    elif handles:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False,
                  fontsize=9, **kw)


def _save(fig, name: str, metadata: dict | None = None):
    """Save figures/<name>.png (with PNG text `metadata`); show it in a notebook, else return the Figure."""
    FIGURES.mkdir(exist_ok=True)
    with plt.rc_context(STYLE):
        fig.savefig(FIGURES / f"{name}.png", dpi=DPI, bbox_inches="tight", metadata=metadata)
    if type(ipython()).__name__ == "ZMQInteractiveShell":      # a Jupyter kernel (JupyterLab, nbval)
        from IPython.display import display
        display(fig)
        plt.close(fig)
        return None
    plt.close(fig)
    return fig


def _title(ax, title, df=None, prov=None):
    text = f"{title}\n{prov if prov is not None else provenance(df)}"
    if isinstance(ax, plt.Figure):                  # several panels: one title over them all
        ax.suptitle(text, fontsize=10)
    else:
        ax.set_title(text, fontsize=10)


SPAN = 30.0          # values spanning more than this factor: a log axis, or a panel per regime (bars)


def span(values) -> float:
    """max / min of the positive, finite values (1.0 when there are fewer than two)."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=float)) if np.isfinite(x) and x > 0])
    return float(v.max() / v.min()) if v.size > 1 else 1.0


def _roofs(ax, df, horizontal=True):
    r = roof_values(df)
    src = set(df["source"]) if not df.empty else set()
    if r and (r["source"] in src or not src):
        line = ax.axhline if horizontal else ax.axvline
        line(r["copy_gbps"], color="k", ls="--", lw=1, label=f"copy roof {r['copy_gbps']:.0f} GB/s")
        line(r["read_gbps"], color="gray", ls=":", lw=1, label=f"read roof {r['read_gbps']:.0f} GB/s")


def _loglog(fig, ax, name, xlabel, ylabel, title, prov):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _title(ax, title, prov=prov)
    _legend_outside(ax)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, name)


def one_device(df):
    """The rows of one device: the live ones, else the first recorded device's."""
    dev, src = df[["device", "source"]].iloc[0]
    live = df[df["source"] == "live"]
    if len(live):
        dev, src = live[["device", "source"]].iloc[0]
    return df[(df["device"] == dev) & (df["source"] == src)]


def sweep(df, name: str, x: str = "cols", title: str = "", logy=False):
    """GB/s against size, a line per step (solid) or baseline (broken), roofs drawn."""
    if df.empty:
        print(f"(no data for plot {name})")
        return None
    df = one_device(df)
    fig, ax = _figure()
    vstyle, bstyle = itertools.cycle(_VARIANT_STYLES), itertools.cycle(_BASELINE_STYLES)
    colors = itertools.cycle(plt.get_cmap("tab10").colors)
    for nm, g in df.groupby("name", sort=False):
        g = g.sort_values(x)
        base = g["kind"].iloc[0] == "baseline"
        ls, mk = next(bstyle if base else vstyle)
        ax.plot(g[x], g["gbps"], linestyle=ls, marker=mk, ms=6 if base else 4, lw=1.6 if base else 1.3,
                color=next(colors), label=nm, zorder=3 if base else 2,
                mfc="none" if base else None)
    _roofs(ax, df)
    ax.set_xscale("log", base=2)
    if logy or span(df["gbps"]) > SPAN:      # short and long sizes differ by orders of magnitude: log GB/s
        ax.set_yscale("log")
    ax.set_xlabel({"cols": "columns (row length, or elements for 1-D data)", "rows": "rows (batch)"}.get(x, x))
    ax.set_ylabel("GB/s (unique bytes read + written)")
    _title(ax, title, df)
    _legend_outside(ax)
    ax.grid(alpha=0.3)
    return _save(fig, name)


def bars(df, name: str, title: str = "", value: str = "gbps"):
    """A bar per step per case (baselines hatched), GB/s or median_us; cases SPAN x apart get a panel each."""
    if df.empty:
        print(f"(no data for plot {name})")
        return None
    df = one_device(df)
    cases = list(dict.fromkeys(df["case"]))
    names = list(dict.fromkeys(df["name"]))
    vals = {c: [df[(df["case"] == c) & (df["name"] == nm)][value].median() for nm in names] for c in cases}
    tops = [max((v for v in vals[c] if v == v), default=float("nan")) for c in cases]
    groups = [[c] for c in cases] if len(cases) > 1 and span(tops) > SPAN else [cases]
    fig, axes = _figure(WIDTH, 4.2, ncols=len(groups), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    w = 0.8 / len(names)
    ylabel = {"gbps": "GB/s (unique bytes)", "median_us": "median time (µs)"}.get(value, value)
    for ax, group in zip(axes[0], groups):
        for i, nm in enumerate(names):
            kind = df[df["name"] == nm]["kind"].iloc[0]
            ax.bar(np.arange(len(group)) + i * w, [vals[c][i] for c in group], w, label=nm, color=colors[i % len(colors)],
                   hatch="//" if kind == "baseline" else None, edgecolor="k" if kind == "baseline" else None, lw=0.5)
        if value == "gbps":
            _roofs(ax, df)
        if span([v for c in group for v in vals[c]]) > SPAN:
            ax.set_yscale("log")
        ax.set_xticks(np.arange(len(group)) + 0.4 - w / 2, group, rotation=15 if len(group) > 3 else 0)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel(ylabel + (" (each case its own axis)" if len(groups) > 1 else ""))
    _title(axes[0][0] if len(groups) == 1 else fig, title, df)
    _legend_outside(axes[0][-1])
    if len(groups) > 1:
        fig.tight_layout()
    return _save(fig, name)


def progress(df, name: str, title: str = "", roof: str = "copy", case: str | None = None):
    """The end of a ladder: at one case (default: the first), each step's fraction of the roof."""
    if roof not in ("copy", "read"):
        raise ValueError(f"roof must be 'copy' or 'read', not {roof!r}")
    if df is None or df.empty:
        print(f"(no data for plot {name}: nothing measured or recorded for this case)")
        return None
    case = case if case is not None else df["case"].iloc[0]
    d = df[df["case"] == case]
    if d.empty:
        print(f"(no data for plot {name}: no rows for case {case})")
        return None
    d = rows = one_device(d)
    d = d.groupby("name", sort=False).agg(frac=(f"frac_{roof}", "median"), kind=("kind", "first")).reset_index()
    d = d.loc[list(d.index[d["kind"] != "baseline"]) + list(d.index[d["kind"] == "baseline"])]
    fig, ax = _figure(WIDTH, 0.32 * len(d) + 1.4)
    y = np.arange(len(d))[::-1]
    for yy, (nm, frac, kind) in zip(y, d[["name", "frac", "kind"]].values):
        base = kind == "baseline"
        ax.barh(yy, 100 * frac, color="#bbbbbb" if base else "#3a78b5", hatch="//" if base else None,
                edgecolor="k" if base else None, lw=0.5)
        ax.annotate(f"{100 * frac:.0f}%", (100 * frac, yy), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=9)
    ax.set_yticks(y, [f"{nm}" + ("  (baseline)" if k == "baseline" else "") for nm, k in d[["name", "kind"]].values])
    ax.axvline(100, color="k", ls="--", lw=1)
    ax.annotate(f"{roof} roof", (100, y.max() + 0.45), ha="center", va="bottom", fontsize=9)
    ax.set_ylim(-0.6, y.max() + 1.1)
    ax.set_xlim(0, max(110, 100 * d["frac"].max() * 1.15))
    ax.set_xlabel(f"% of the {roof} roof (GB/s of unique bytes / {roof} roof GB/s); {case}")
    ax.grid(alpha=0.3, axis="x")
    _title(ax, title or f"progress at {case}", prov=provenance(rows))
    return _save(fig, name)


def roofline(points, name: str, peak_gflops: float, copy_gbps: float, title: str = "", provenance: str = "",
             ceilings=()):
    """min(peak, AI x bandwidth) with points [(label, AI, gflops or None)] and ceilings [(label, G ops/s)] dashed."""
    fig, ax = _figure(WIDTH, 4.2)
    ai = np.logspace(-2, 3, 200)
    ax.plot(ai, np.minimum(peak_gflops, ai * copy_gbps), "k-", label="roof")
    for (clabel, cval), ls in zip(ceilings, itertools.cycle(["--", "-.", (0, (1, 1))])):
        ax.plot(ai, np.minimum(cval, ai * copy_gbps), color="tab:red", ls=ls, lw=1.2, label=clabel)
    ax.axvline(peak_gflops / copy_gbps, color="gray", ls=":", lw=1,
               label=f"ridge {peak_gflops / copy_gbps:.1f} FLOP/B")
    markers = itertools.cycle("osD^vPX")
    for label, x, yv in points:
        yy = yv if yv is not None else min(peak_gflops, x * copy_gbps)
        ax.plot([x], [yy], linestyle="none", marker=next(markers), label=label)
    return _loglog(fig, ax, name, "arithmetic intensity (FLOP per byte moved)", "GFLOP/s", title, provenance)


def error_vs_fp64(sizes, errors: dict, name: str, title: str = "", provenance: str = ""):
    """Max relative error against a float64 reference, per method, across sizes (measured live)."""
    if not errors:
        print(f"(no error measurements for plot {name})")
        return None
    if not provenance:
        provenance = f"live on {info()['name']}, {now()}"
    fig, ax = _figure(WIDTH, 3.8)
    styles = itertools.cycle(_VARIANT_STYLES)
    for label, errs in errors.items():
        ls, mk = next(styles)
        ax.plot(sizes, np.maximum(errs, 1e-18), linestyle=ls, marker=mk, label=label)
    return _loglog(fig, ax, name, "row length", "max relative error vs float64", title, provenance)


def device_roofline(fund, kernels, name="00_roofline", ceilings=()):
    """The roofline of the device in `fund` with `kernels` [(label, AI)]; ceilings: quantities of `fund`."""
    if fund is None or fund.empty:
        print("SKIPPED: no measured or recorded fundamentals to draw a roofline from.")
        return None
    fund = fund[(fund["device"] == fund["device"].iloc[0]) & (fund["source"] == fund["source"].iloc[0])]   # one device
    vals = dict(zip(fund["quantity"], fund["value"]))
    units = dict(zip(fund["quantity"], fund["unit"]))
    extra = [(f"{q}: {vals[q]:,.0f} {units[q]}", vals[q]) for q in ceilings if q in vals]
    prov = f"{fund['source'].iloc[0]} on {fund['device'].iloc[0]}, {fund['date'].iloc[0]}"
    return roofline([(k, ai, None) for k, ai in kernels], name, vals["fp32 FMA peak"], vals["copy roof"],
                    title="Roofline (fp32 CUDA cores)", provenance=prov, ceilings=extra)


def stacked_shares(df, columns: dict, labels, notes, xlabel: str, title: str, name: str):
    """A bar per row of df split into `columns` ({column: (label, colour)}) as % of their sum, notes after."""
    if df is None or df.empty:
        print(f"(no data for plot {name})")
        return None
    fig, ax = _figure(WIDTH, 0.45 * len(df) + 1.6)
    y = np.arange(len(df))[::-1]
    left = np.zeros(len(df))
    tot = np.maximum(sum(df[c].values for c in columns), 1e-9)
    for col, (label, color) in columns.items():
        frac = 100 * df[col].values / tot
        ax.barh(y, frac, left=left, color=color, label=label, edgecolor="k", lw=0.3)
        left += frac
    for yy, note in zip(y, notes):
        ax.annotate(note, (100, yy), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
    ax.set_yticks(y, labels)
    ax.set_xlim(0, 100)
    ax.set_xlabel(xlabel)
    _title(ax, title, df)
    _legend_outside(ax, below=True)
    return _save(fig, name)


def tokens(rows, floors, baselines, gains, name: str, title: str = "", prov: str = ""):
    """Lab 08's picture: tokens/s per weight path ({path: tokens/s}) beside its floor and the torch baselines
    ({label: tokens/s}); right, the end-to-end gain of each swap ({swap: gain}), 1.0 marked."""
    if not rows:
        print(f"(no data for plot {name})")
        return None
    fig, (a, b) = _figure(WIDTH * 1.25, 4.2, ncols=2, gridspec_kw={"width_ratios": [1.1, 1]})
    paths = list(rows)
    x = np.arange(len(paths))
    a.bar(x - 0.2, [rows[p] for p in paths], 0.4, color="#3a78b5", label="our token step (graph)")
    a.bar(x + 0.2, [floors.get(p, np.nan) for p in paths], 0.4, color="white", edgecolor="k", hatch="//",
          lw=0.5, label="read-only floor (same bytes)")
    for i, (lab, v) in enumerate(baselines.items()):
        a.bar(len(paths) + i, v, 0.5, color="#bbbbbb", edgecolor="k", lw=0.5,
              label="torch on the same fp16 weights" if i == 0 else None)
    a.set_xticks(list(x) + [len(paths) + i for i in range(len(baselines))],
                 paths + [k.replace(" decoder", "") for k in baselines], fontsize=8, rotation=25, ha="right")
    a.set_ylabel("tokens/s (batch 1)")
    a.grid(alpha=0.3, axis="y")
    every = [v for v in (*rows.values(), *floors.values(), *baselines.values()) if v == v]
    top = max(every or [1.0])
    if span(every) > SPAN:                     # transformers' eager tokens/s beside a floor: log axis
        a.set_yscale("log")
        a.set_ylim(min(every) / 2, 4 * top)
    else:
        a.set_ylim(0, 1.35 * top)              # room for the legend above the bars
    a.legend(fontsize=7, frameon=False, loc="upper left")
    a.set_title("tokens/s, context 512", fontsize=10)
    labels = list(gains)
    b.plot([gains[k] for k in labels], np.arange(len(labels))[::-1], "o", color="#2f7d32", ms=7)
    b.axvline(1.0, color="k", ls="--", lw=1)
    vals = [v for v in gains.values() if v == v] or [1.0]
    b.set_xlim(min(0.95, min(vals) - 0.02), max(1.05, max(vals) + 0.02))   # dots, not bars: no false zero
    b.set_yticks(np.arange(len(labels))[::-1], [k.split(" (lab")[0] for k in labels], fontsize=7)
    b.set_xlabel("end-to-end gain of the swap (time before / time after)")
    b.set_title("Amdahl: one op swapped, the whole token timed", fontsize=10)
    b.grid(alpha=0.3, axis="x")
    fig.suptitle(f"{title}\n{prov}", fontsize=10)
    fig.tight_layout()
    return _save(fig, name)
