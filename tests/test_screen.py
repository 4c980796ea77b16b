"""What a learner sees without a GPU (issue 35): tables of at most 40 rows by default, the full frame one
call away; one sentence per fact (the device on screen); plots whose values span orders of magnitude on
a log axis or a panel per regime. The notebooks themselves are checked while nbval runs them
(notebooks/conftest.py: no table over 40 rows, no sentence said again for another device, in labs 01,
04, 07 and 08); these tests check the functions those cells call, and the checker itself."""
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernellab.core import plot, results

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("nb_screen", ROOT / "notebooks" / "conftest.py")
screen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(screen)


def test_the_notebook_checker_sees_long_tables_and_per_device_sentences():
    long = pd.DataFrame({"a": range(41)})._repr_html_()
    assert screen.table_rows(long) == [41]
    assert screen.screen_problems([{"data": {"text/html": long}}], {})
    ok = pd.DataFrame({"a": range(40)})._repr_html_()
    assert not screen.screen_problems([{"data": {"text/html": ok}}], {})
    seen = {}
    one = "`03_split` is **10.23×** faster than `02_head` at `32x4096:float16` (recorded on NVIDIA H100 80GB HBM3, 2026-11-23)."
    two = "`03_split` is **10.03×** faster than `02_head` at `32x4096:float16` (recorded on NVIDIA H200, 2026-11-23)."
    assert not screen.screen_problems([{"data": {"text/markdown": one}}], seen)
    assert screen.screen_problems([{"data": {"text/markdown": two}}], seen)
    other = "`05_gqa` is **1.2×** faster than `03_split` at `32x4096:float16` (recorded on NVIDIA H100 80GB HBM3, 2026-11-23)."
    assert not screen.screen_problems([{"data": {"text/markdown": other}}], seen)


def test_ptxas_brief_is_one_row_per_kernel_within_a_screen():
    from kernellab.core import build
    info = build.ptxas_info("softmax")
    brief = results.ptxas_brief(info)
    assert len(info) > results.MAX_ROWS >= len(brief)
    assert {"registers sm_87", "registers sm_90"} <= set(brief.columns)
    row = brief[brief["kernel"] == "softmax_01_naive"].iloc[0]
    want = info[info["kernel"] == "softmax_01_naive"].set_index("arch")["registers"]
    assert (row["registers sm_87"], row["registers sm_90"]) == (str(want["sm_87"]), str(want["sm_90"]))
    assert results.ptxas_brief(info, full=True) is info


def _claims(n_judged, n_reason):
    rows = [{"id": f"x-{i:03d}", "claim": f"claim {i}", "seed says": "1.5", "measured": f"{1 + i / 100:.2f}",
             "verdict": "within noise" if i % 2 else "holds", "how": "ratio"} for i in range(n_judged)]
    rows += [{"id": f"y-{i:03d}", "claim": f"claim {i}", "seed says": "1.1", "measured": "-",
              "verdict": ("needs the whole engine (seed 002)" if i % 3 else "slip in the seed: a typo"), "how": "-"}
             for i in range(n_reason)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("judged, reason", [(2, 47), (41, 9), (39, 1), (80, 0)])
def test_claims_brief_fits_a_screen_and_keeps_every_id(judged, reason):
    t = _claims(judged, reason)
    b = results.claims_brief(t)
    assert len(b) <= results.MAX_ROWS
    text = " ".join(b["id"].astype(str)) + " " + " ".join(b["claim"].astype(str))
    assert all(i in text for i in t["id"])                 # no claim vanishes: its id is on screen
    assert results.claims_brief(t, full=True) is t
    holds = t[t["verdict"] == "holds"]
    if len(holds) and len(b[b["verdict"] == "holds"]) == len(holds):      # shown a row each: their numbers too
        assert set(holds["measured"]) <= set(b["measured"])


def test_best_per_length_speaks_of_the_device_on_screen():
    from kernellab import softmax
    from kernellab.core import bench
    swb = bench.compare(softmax, [(s, dt) for dt in ("float32", "float16") for s in softmax.SWEEP],
                        names=["05_online_vec4", "07_fp16_pipelined", "09_dispatch", "10_cluster"],
                        baselines=["torch.softmax", "memcpy x -> y (floor)"])
    if swb is None or swb.empty:
        pytest.skip("nothing recorded")
    b = softmax.best_per_length(swb)
    assert len(b) <= results.MAX_ROWS and "device" not in b
    assert len(softmax.best_per_length(swb, full=True)) == len(b) * len(results.devices(swb))


def test_device_table_with_names_sets_each_device_side_by_side():
    def part(dev, scale):
        return pd.DataFrame([{"device": dev, "source": "recorded", "date": "2026-11-26", "case": c, "name": n,
                              "kind": "e2e", "median_us": 1.0, "tokens/s": scale * v, "frac_read": 0.5}
                             for c in ("context 1", "context 512") for n, v in (("a", 10.0), ("b", 20.0))])
    df = pd.concat([part("NVIDIA H100 80GB HBM3", 1.0), part("NVIDIA H200", 2.0)], ignore_index=True)
    t = results.device_table(df, roof="read", names=["b", "a"], value="tokens/s")
    assert list(t["step"]) == ["b", "b", "a", "a"]
    assert list(t["H100 tokens/s"]) == [20.0, 20.0, 10.0, 10.0] and list(t["H200 tokens/s"]) == [40.0, 40.0, 20.0, 20.0]


def _frame(rows):
    return pd.DataFrame([{"device": "NVIDIA H100 80GB HBM3", "source": "recorded", "date": "2026-11-26", **r}
                         for r in rows])


def test_plots_over_orders_of_magnitude_use_a_log_axis_or_a_panel_each():
    sw = _frame([{"name": n, "kind": "variant", "cols": c, "gbps": g * c / (c + 4096.0), "case": str(c)}
                 for n, g in (("a", 3000.0), ("b", 1500.0)) for c in (32, 256, 4096, 65536)])
    fig = plot.sweep(sw, "test_span_sweep")
    assert fig.axes[0].get_yscale() == "log"             # 32 columns at a few GB/s beside 65536 at 3 TB/s
    near = sw.assign(gbps=sw["gbps"].clip(lower=1000))
    assert plot.sweep(near, "test_span_sweep_lin").axes[0].get_yscale() == "linear"
    bars = _frame([{"name": n, "kind": "variant", "case": c, "median_us": t * f}
                   for c, t in (("N=4096", 500.0), ("N=16384", 20000.0)) for n, f in (("a", 1.0), ("b", 0.5))])
    fig = plot.bars(bars, "test_span_bars", value="median_us")
    assert len(fig.axes) == 2                             # a panel per regime, each with its own axis
    one = _frame([{"name": n, "kind": "variant", "case": "N=4096", "median_us": t}
                  for n, t in (("slow", 20000.0), ("fast", 100.0))])
    assert plot.bars(one, "test_span_bars_log", value="median_us").axes[0].get_yscale() == "log"
    fig = plot.tokens({"float16": 160.0, "int4": 320.0}, {"float16": 196.0, "int4": 473.0},
                      {"transformers (eager)": 5.0}, {"swap": 1.02}, "test_span_tokens")
    assert fig.axes[0].get_yscale() == "log"
    assert plot.span([1, 2, np.nan, 0, 31]) == 31.0
