"""Sliders instead of code: ipywidgets explorers over a family's steps (explore.softmax, explore.rmsnorm).
Live, each change measures the chosen point now; compile-only, the recorded rows nearest the sliders.
Without a Jupyter kernel or ipywidgets, the table for the default values and why there are no sliders."""
from __future__ import annotations

import os

import numpy as np

from .core import bench
from .core.device import is_live, load_recorded, provenance
from .core.frame import ipython
from .core.results import say, source

# source, device and date are said once, in the line above the table (provenance)
COLUMNS = ["case", "name", "kind", "median_us", "gbps", "frac_copy"]
_MEASURED: dict = {}


def point(family, shape, dtype, names=None, baselines=True):
    """(frame, note) for one (shape, dtype): measured now (live) or the nearest recorded case (log rows, cols)."""
    from .core.family import of
    family = of(family)
    names = list(family.variants) if names is None else list(names)
    if is_live():
        key = (family.name, tuple(shape), dtype, tuple(names), str(baselines))
        if key not in _MEASURED:        # a point measured once per session (sliders come back)
            _MEASURED[key] = bench.compare(family, [(tuple(shape), dtype)], names=names, baselines=baselines)
        return _MEASURED[key], f"measured in this session at {family.case_key(shape, dtype)}"
    rec = load_recorded(family.name)
    if rec.empty:
        return rec, f"no recorded {family.name} results (make bench records them on a GPU)"
    rec = rec[rec["dtype"] == dtype]
    if rec.empty:
        return rec, f"nothing recorded for {dtype}"
    rec = rec[rec["device"] == rec["device"].iloc[0]]     # one device: a sentence speaks of the tables' first record
    dist = (np.log2(rec["rows"].clip(lower=1)) - np.log2(max(shape[0], 1))) ** 2 + \
           (np.log2(rec["cols"].clip(lower=1)) - np.log2(max(shape[-1], 1))) ** 2
    case = rec.loc[dist.idxmin(), "case"]
    keep = names + (list(family.baselines) if baselines is True else list(baselines or []))
    df = rec[(rec["case"] == case) & rec["name"].isin(keep)].reset_index(drop=True)
    asked = family.case_key(shape, dtype)
    note = f"RECORDED, nearest recorded case {case}" + ("" if case == asked else f" (you asked {asked})")
    return df, note


def _show(df, note):
    from IPython.display import display
    print(f"{note}; {provenance(df)}")
    if not df.empty:
        display(df[[c for c in COLUMNS if c in df]].round(3))


def _widgets():
    """(ipywidgets, "") where the sliders can work, else (None, why not); KERNELLAB_NO_WIDGETS=1 (as in nbval)
    means none: a waiting widget can stall a headless run."""
    try:
        import ipywidgets as w
    except ImportError:
        return None, "ipywidgets is not installed (`make lab` installs it)"
    if os.environ.get("KERNELLAB_NO_WIDGETS") or getattr(ipython(), "kernel", None) is None:
        return None, "not running in a Jupyter kernel"
    return w, ""


def _static(render, why: str, **defaults) -> None:
    """No widgets: the table for the default values, once, and why there are no sliders."""
    render(**defaults)
    print(f"(no sliders: {why}; the table above is for the default values)")


def _interactive(w, controls: dict, render) -> None:
    """The controls above one Output, re-rendered on every change; None, so the cell shows nothing more."""
    from IPython.display import display
    out = w.Output()

    def update(_=None):
        with out:
            out.clear_output(wait=True)
            render(**{k: c.value for k, c in controls.items()})
    for c in controls.values():
        c.observe(update, names="value")
    display(w.VBox([w.HTML("<b>Move the controls</b>: the table below follows them."),
                    w.HBox(list(controls.values())), out]))
    update()


# ---- softmax ---------------------------------------------------------------------------------

def _softmax_steps(width: int) -> list[str]:
    """The steps with that load width: 8 the fp16 steps, 4 the float4 (`vec4`) steps, 1 the scalar fp32 ones."""
    from . import softmax
    return [n for n, v in softmax.SOFTMAX.variants.items()
            if "check.register" not in (v.__doc__ or "")          # a learner's own kernel: unknown width
            and (8 if "float16" in v.dtypes else 4 if "vec4" in n else 1) == width]


def softmax(cols: int = 4096, width: int = 4, step: str | None = None):
    """Row length (32 ... 65536, 2^25 elements in all), vector width and step -> time and GB/s, with baselines."""
    from . import softmax as sm

    def render(cols, width, step):
        steps = _softmax_steps(width)
        step = step if step in steps else steps[-1]
        dtype = "float16" if width == 8 else "float32"
        df, note = point(sm, (sm.SWEEP_TOTAL // cols, cols), dtype, names=[step])
        _show(df, note)
        t = dict(zip(df["name"], df["median_us"]))
        best = min((b for b in sm.SOFTMAX.baselines if b in t), key=t.get, default=None)
        if step in t and best:
            say(f"`{step}` ({width}-wide loads, {dtype}): **{t[best] / t[step]:.2f}×** the fastest baseline here "
                f"({best}, {source(df)}).")

    w, why = _widgets()
    if w is None:
        return _static(render, why, cols=cols, width=width, step=step)
    lengths = [2 ** k for k in range(5, 17)]
    c_cols = w.SelectionSlider(options=lengths, value=min(lengths, key=lambda c: abs(np.log2(c / cols))),
                               description="row length")
    c_width = w.ToggleButtons(options=[1, 4, 8], value=width, description="vector width")
    c_step = w.Dropdown(options=_softmax_steps(width), value=step if step in _softmax_steps(width)
                        else _softmax_steps(width)[-1], description="step")

    def follow(change):
        c_step.options = _softmax_steps(change["new"])
    c_width.observe(follow, names="value")
    return _interactive(w, {"cols": c_cols, "width": c_width, "step": c_step}, render)


# ---- RMSNorm ---------------------------------------------------------------------------------

def rmsnorm(rows: int = 1, path: str = "float16", hidden: int = 4096):
    """Rows from decode (1) to prefill (8192) and a data path -> every step of that path and the baselines."""
    from . import rmsnorm as rn

    def render(rows, path):
        names = [n for n, v in rn.RMSNORM.variants.items() if path in v.dtypes]
        df, note = point(rn, (rows, hidden), path, names=names)
        _show(df, note)
        v = df[df["kind"] == "variant"] if not df.empty else df
        if not v.empty:
            b = v.loc[v["median_us"].idxmin()]
            launch = bench.roof_values(df).get("launch_us")
            launches = f", **{b['median_us'] / launch:.1f}** empty-kernel launches" if launch else ""
            say(f"Fastest step at {b['case']}: `{b['name']}`{launches} ({source(df)}).")

    w, why = _widgets()
    if w is None:
        return _static(render, why, rows=rows, path=path)
    opts = [1, 4, 16, 64, 512, 8192]
    c_rows = w.SelectionSlider(options=opts, value=min(opts, key=lambda r: abs(np.log2(r / max(rows, 1)))),
                               description="rows")
    c_path = w.ToggleButtons(options=["float32", "f32_fp16w", "float16"], value=path, description="data path")
    return _interactive(w, {"rows": c_rows, "path": c_path}, render)
