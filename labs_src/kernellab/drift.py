"""python -m kernellab.drift [lab ...]: on a GPU with a record (figures/reference/<device>/), time
what a user calls today and set it against what the record says, so a record can never drift from
the code beside it unnoticed. `make drift` runs this; the live suite runs it too (tests/test_gpu_drift.py).

It times, as a user calls them (bench.compare: the step itself, with the family's arguments):
  * each ladder family's default step (Family.default, per dtype) at one recorded case: the largest;
  * the end-to-end rows: lab 08's token step per path at context 512 (graph-replayed, Qwen3-8B), and
    lab 06's ViT block and tower at N = 1024 (graph replay).
It prints live against recorded, each with its p10-p90 band, and fails (exit 1) on a row whose live
median is beyond LIMIT x its recorded one and whose band lies wholly above the recorded band."""
from __future__ import annotations

import sys

from .core import bench, progress
from .core.device import info, is_live, load_recorded
from .labs import LABS, families

LIMIT = 1.25
E2E_LABS = ("decoder", "vit_block")
CONTEXT = 512
VIT_N = 1024


def _largest(rec, step, dtype):
    """The recorded row of `step` at its largest case of `dtype` (by bytes, else by case), or None."""
    r = rec[(rec["name"] == step) & (rec["dtype"].astype(str) == dtype)] if "dtype" in rec else rec[rec["name"] == step]
    if r.empty:
        return None
    return r.sort_values([c for c in ("bytes", "case") if c in r]).iloc[-1]


def ladder_pairs(labs, device):
    """[(family, shape, dtype, step, recorded row)] for each default step with a row on `device`."""
    out = []
    for fam in families(labs):
        if not fam.variants or not fam.default:
            continue
        rec = load_recorded(fam.name)
        if rec.empty:
            continue
        rec = rec[rec["device"] == device]
        for dt, step in fam.default.items():
            if step not in fam.variants:
                continue
            row = _largest(rec, step, dt)
            if row is None:
                continue
            shape = next((s for s, d in fam.record_cases if d == dt and fam.case_key(s, d) == row["case"]), None)
            if shape is not None:
                out.append((fam, shape, dt, step, row))
    return out


def _row(what, case, live, rec):
    ratio = live["median_us"] / rec["median_us"]
    beyond = ratio > LIMIT and live["p10_us"] > rec["p90_us"]
    print(f"  {what} @ {case}: live {live['median_us']:.2f} µs, recorded {rec['median_us']:.2f} µs, "
          f"live/recorded {ratio:.3f}{' DRIFT' if beyond else ''}", flush=True)      # as it goes: a long run shows its rows
    return {"what": what, "case": case, "live µs": live["median_us"], "live p10-p90": f"{live['p10_us']:.1f}-{live['p90_us']:.1f}",  # noqa: E501
            "recorded µs": rec["median_us"], "recorded p10-p90": f"{rec['p10_us']:.1f}-{rec['p90_us']:.1f}",
            "live/recorded": ratio, "verdict": "DRIFT" if beyond else ("within noise" if live["p10_us"] <= rec["p90_us"]
                                                                       and live["p90_us"] >= rec["p10_us"] else "ok")}


def ladders(labs, device) -> list:
    rows = []
    pairs = ladder_pairs(labs, device)
    with progress.bar("make drift: steps", len(pairs)) as bar:
        for fam, shape, dt, step, rec in pairs:
            bar.step(f"{fam.name} {step} {rec['case']}")
            live = bench.compare(fam, [(shape, dt)], names=[step], baselines=False, host=True)
            if len(live):
                rows.append(_row(f"{fam.name}: {step}", rec["case"], live.iloc[0], rec))
    return rows


def end_to_end(labs, device) -> list:
    rows = []
    todo = [lab for lab in E2E_LABS if lab in labs]
    with progress.bar("make drift: end to end", 3 * ("decoder" in todo) + ("vit_block" in todo)) as bar:
        if "decoder" in todo:
            from . import decoder as D
            rec = load_recorded(D.DECODER_NAME)
            rec = rec[(rec["device"] == device) & (rec["case"] == D.ctx_case(CONTEXT))]
            for path in D.PATHS:
                bar.step(f"Qwen3-8B {path} token step, context {CONTEXT}")
                name = D.step_name(path, "graph")
                r = rec[rec["name"] == name]
                if r.empty:
                    continue
                dec = D.Decoder(D.QWEN3_8B, None, path, capacity=CONTEXT + 8)
                live = D.step_rows(dec, [CONTEXT], modes=("graph",))[0]
                del dec
                import cupy
                cupy.get_default_memory_pool().free_all_blocks()
                rows.append(_row(f"decoder: {name}", D.ctx_case(CONTEXT), live, r.iloc[0]))
        if "vit_block" in todo:
            from . import vit_block as VB
            bar.step(f"ViT block and tower, N = {VIT_N}")
            rec = load_recorded(VB.VIT_BLOCK.name)
            rec = rec[(rec["device"] == device) & (rec["section"] == "graph") & (rec["N"] == VIT_N)]
            live = VB.graphs(ns=(VIT_N,))
            for _, lr in live.iterrows():
                r = rec[rec["name"] == lr["name"]]
                if len(r) and "graph replay" in lr["name"]:
                    rows.append(_row(f"vit_block: {lr['name']}", f"N={VIT_N}", lr, r.iloc[0]))
    return rows


def main(labs) -> int:
    import pandas as pd
    if not is_live():
        print("kernellab.drift needs a CUDA GPU: it times today's code against this GPU's record.")
        return 2
    labs = labs or LABS
    device = info()["name"]
    if not (load_recorded("measuring")["device"] == device).any() if len(load_recorded("measuring")) else True:
        print(f"no record for {device} under figures/reference/: nothing to compare (`make bench` records one).")
        return 0
    rows = ladders(labs, device) + end_to_end(labs, device)
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.max_colwidth", 60):
        print(df.round(3).to_string(index=False) if len(df) else "(nothing recorded to compare)")
    bad = df[df["verdict"] == "DRIFT"] if len(df) else df
    print(f"drift: {len(df)} rows on {device}; {len(bad)} beyond {LIMIT}x their record with bands apart"
          + ("" if bad.empty else ": " + "; ".join(bad["what"])))
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
