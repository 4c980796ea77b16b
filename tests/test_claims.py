"""Everywhere (CPU, no GPU): docs/claims.csv, every claim of the five seed reports, is well formed.

One row per claim. A row is either measured here (`how`: a ratio of two recorded variants, a PTX
count, a ptxas figure, an Nsight Compute metric, or an end-to-end measurement) or carries a
stated reason why not. Ratio rows must name a family / slow / fast / case that a recorded CSV
under figures/reference/<device>/ holds; PTX, ptxas and ncu rows must name variants that the
family records. Where the seed reports sit beside the clone (../shared/seeds, as in CI), every
seed / line must point at an existing, non-blank line of the seed file.
"""
import csv
import math
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "docs" / "claims.csv"
SEEDS = ROOT.parent / "shared" / "seeds"

COLUMNS = ["id", "seed", "line", "lab", "kind", "claim", "before", "after", "claimed", "family", "slow", "fast",
           "case", "how", "reason"]
KINDS = {"kernel", "end-to-end", "counter", "structure", "fact"}
TOPIC = {"00_measuring": "measuring", "01_softmax": "softmax", "02_rmsnorm": "rmsnorm", "03_add": "add",
         "04_gemv": "gemv", "05_vision": "vision", "06_vit_block": "vit_block", "07_attention": "attention",
         "08_decoder": "decoder", "09_vlm": "vlm"}                # lab -> id prefix
PREFIXES = set(TOPIC.values())
LABS = set(TOPIC)
SEED_IDS = {"000", "001", "002", "003", "004"}
REASONS = ("needs an Orin", "needs the whole engine", "slip in the seed", "not measured yet: ", "cannot be decided here: ",
           "not comparable here: ")
HOW = re.compile(r"^(ratio|e2e|lab:[a-z0-9_]+|ptx:\S+|ptxas:(registers|smem|blocks_per_sm@\d+|occupancy@\d+)"
                 r"|ncu:[a-z0-9_]+__[A-Za-z0-9_.]+)$")
MEASURED = ("ratio", "ptx:", "ptxas:", "ncu:")          # a row that names the variants it is measured on


def _rows():
    with open(CLAIMS, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


from kernellab.core.frame import RENAMED  # noqa: E402


def _recorded():
    """{family: {(name, case)}} over every recorded results CSV (any device)."""
    out = {}
    for path in sorted((ROOT / "figures" / "reference").glob("*/*.csv")):
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not {"lab", "name", "case"} <= set(reader.fieldnames or ()):
                continue                      # e.g. measuring.csv: quantity, value, unit
            for r in reader:                  # under today's names (core.frame.RENAMED, as every reader sees them)
                out.setdefault(r["lab"], set()).add((RENAMED.get(r["name"], r["name"]), r["case"]))
    return out


def _measured(r):
    return r["how"].startswith(MEASURED)


def test_header_and_ids():
    header, rows = _rows()
    assert header == COLUMNS, f"docs/claims.csv header: {header}"
    ids = [r["id"] for r in rows]
    dup = [i for i, c in Counter(ids).items() if c > 1]
    assert not dup, f"duplicate ids: {dup}"
    bad = [i for i in ids if not re.fullmatch(r"[a-z_]+-\d{3}", i) or i.rsplit("-", 1)[0] not in PREFIXES]
    assert not bad, f"ids must be <topic>-NNN with topic in {sorted(PREFIXES)}: {bad}"
    assert len(rows) >= 210, f"{len(rows)} claims: the audit of issue 18 counted 210"


def test_values_are_from_the_allowed_sets():
    _, rows = _rows()
    for r in rows:
        where = f"{r['id']}:"
        assert r["seed"] in SEED_IDS, f"{where} seed {r['seed']!r}"
        assert r["line"].isdigit() and int(r["line"]) >= 1, f"{where} line {r['line']!r}"
        assert r["lab"] in LABS, f"{where} lab {r['lab']!r}"
        assert r["id"].rsplit("-", 1)[0] == TOPIC[r["lab"]], f"{where} the id's prefix is not lab {r['lab']}'s topic"
        assert r["kind"] in KINDS, f"{where} kind {r['kind']!r}"
        assert r["claim"].strip(), f"{where} empty claim"
        if r["claimed"] in (">", "<", "0"):     # a count claim's direction: more, fewer, none in the after step
            assert r["how"].startswith(("ptx:", "ptxas:")) or (r["claimed"] == "0" and r["how"].startswith("ncu:")), \
                f"{where}: a direction is for PTX/ptxas counts (and 'none' for an ncu count)"
        elif r["claimed"]:
            v = float(r["claimed"])
            assert math.isfinite(v) and v > 0, f"{where} claimed {r['claimed']!r}"
        assert not r["how"] or HOW.match(r["how"]), f"{where} how {r['how']!r}"


def test_every_claim_is_measured_or_has_a_reason():
    _, rows = _rows()
    for r in rows:
        where = f"{r['id']}:"
        assert r["how"] or r["reason"], f"{where} neither a measurement nor a reason"
        if r["reason"]:
            assert r["reason"].startswith(REASONS), f"{where} reason must start with one of {REASONS}: {r['reason']!r}"
        if _measured(r):
            assert not r["reason"] or r["reason"].startswith("not comparable here: "), \
                f"{where} measured ({r['how']}) but has a reason (only 'not comparable here: ' may stand beside one)"
            assert r["family"] and r["fast"], f"{where} {r['how']} needs a family and the variant it reads"
        else:
            assert not (r["family"] or r["slow"] or r["fast"] or r["case"]), \
                f"{where} names variants but is not measured on them (how = {r['how']!r})"
        if r["how"] == "ratio":
            assert r["slow"] and r["case"] and r["slow"] != r["fast"], f"{where} a ratio needs slow, fast and case"
        if r["how"].startswith("ncu:"):
            assert r["case"], f"{where} an ncu reading needs the case to launch"
        if r["how"].startswith(("ptx:", "ptxas:")):
            assert not r["case"], f"{where} a compiler count has no case"
        if r["how"].startswith("lab:"):
            assert not r["reason"], f"{where} measured by its lab module ({r['how']}) but has a reason"
        if r["how"] == "e2e":
            assert r["kind"] == "end-to-end" and r["reason"], f"{where} e2e rows say what would measure them"


def test_measured_rows_name_recorded_variants():
    _, rows = _rows()
    rec = _recorded()
    assert rec, "no recorded results under figures/reference/*/"
    missing = []
    for r in rows:
        if not _measured(r):
            continue
        fam = rec.get(r["family"], set())
        names = {n for n, _ in fam}
        for nm in (r["slow"], r["fast"]):
            if not nm:
                continue
            if r["case"] and (nm, r["case"]) not in fam:
                missing.append(f"{r['id']}: {r['family']} / {nm} / {r['case']}")
            elif not r["case"] and nm not in names:
                missing.append(f"{r['id']}: {r['family']} / {nm}")
    assert not missing, "not in any recorded CSV:\n  " + "\n  ".join(missing)


def test_seed_lines_exist():
    if not SEEDS.is_dir():
        pytest.skip(f"the seed reports are not beside the clone ({SEEDS})")
    files = {p.name[:3]: p.read_text(encoding="utf-8").splitlines() for p in SEEDS.glob("0*.txt")}
    assert set(files) >= SEED_IDS, f"seed files found: {sorted(files)}"
    _, rows = _rows()
    bad = [f"{r['id']}: {r['seed']}:{r['line']}" for r in rows
           if int(r["line"]) > len(files[r["seed"]]) or not files[r["seed"]][int(r["line"]) - 1].strip()]
    assert not bad, "seed / line is not a non-blank line of the seed file:\n  " + "\n  ".join(bad)


def test_counts():
    """Prints the counts (pytest -s shows them) and holds the floor of issue 18: >= 110 measured."""
    _, rows = _rows()
    measured = [r for r in rows if _measured(r)]
    reasons = [r for r in rows if r["reason"]]
    print(f"\nclaims: {len(rows)} rows; measured here (ratio / ptx / ptxas / ncu): {len(measured)}; "
          f"end-to-end (e2e): {sum(r['how'] == 'e2e' for r in rows)}; with a reason: {len(reasons)}")
    print("by kind:", dict(Counter(r["kind"] for r in rows)))
    print("by how:", dict(Counter((r["how"].split(":")[0] or "-") for r in rows)))
    print("reasons:", dict(Counter(next(p for p in REASONS if r["reason"].startswith(p)).rstrip(": ")
                                   for r in reasons)))
    print("by seed:", dict(sorted(Counter(r["seed"] for r in rows).items())))
    assert len(measured) >= 110, f"only {len(measured)} claims are measured (issue 18 asks for >= 110)"


# ---- the counts the README states, recomputed from docs/claims.csv and the records ----------------

README = ROOT / "README.md"
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def verdict_counts() -> dict:
    """{device: rows with a verdict}: every lab's claims table (results.claims) over the recorded frames
    of the families its ratio rows name, cut to one device; a verdict is one of results.OUTCOMES. An
    ncu row counts only on the device whose readings it shows, an e2e row only through lab 08's
    end-to-end swaps (decoder.amdahl), a `lab:` row through the measure its lab module registers."""
    import sys
    sys.path.insert(0, str(ROOT / "labs_src"))
    from kernellab import add, attention, gemv, measuring, rmsnorm, softmax, vision, vit_block, vlm  # noqa: F401
    from kernellab import decoder as D
    from kernellab.core import results
    from kernellab.core.device import load_recorded
    fams = {"00_measuring": (), "01_softmax": softmax.FAMILIES, "02_rmsnorm": rmsnorm.FAMILIES,
            "03_add": add.FAMILIES, "04_gemv": gemv.FAMILIES, "05_vision": vision.FAMILIES,
            "06_vit_block": vit_block.FAMILIES, "07_attention": attention.FAMILIES, "08_decoder": D.FAMILIES,
            "09_vlm": vlm.FAMILIES}
    own = {"00_measuring": ["measuring"], "09_vlm": [vlm.STAGES_FAMILY.name]}     # labs whose claims read their own record
    _, rows = _rows()
    missing = sorted(r["id"] for r in rows if r["how"].startswith("lab:") and r["id"] not in results.CLAIM_MEASURES)
    assert not missing, f"rows measured by a lab module with no registered measure: {missing}"
    out = {}
    for dev in (H100, H200):
        n = 0
        for lab, families in fams.items():
            names = own.get(lab) or sorted({r["family"] for r in rows if r["lab"] == lab and r["how"] == "ratio"})
            frames = [f[f["device"] == dev] for f in map(load_recorded, names) if len(f)]
            frames = [f for f in frames if len(f)]
            measured = D.amdahl(load_recorded("decoder").query("device == @dev"))[1] if lab == "08_decoder" else None
            t = results.claims(lab, frames, families, measured=measured)
            if len(t):
                shown = t["measured"].astype(str)
                n += int((t["verdict"].isin(results.OUTCOMES) & ~shown.str.contains(r"\(ncu on ")).sum())
        out[dev] = n
    return out


def test_readme_counts():
    """The README's claims sentence states the rows and the rows with a verdict per record: a stale
    count fails here."""
    _, rows = _rows()
    text = " ".join(README.read_text(encoding="utf-8").split())
    m = re.search(r"(\d+) claim rows, (\d+) with a verdict on the H100 record and (\d+) on the H200 record", text)
    assert m, "README.md: the claims sentence ('N claim rows, X with a verdict on the H100 record and Y on the H200 record')"
    got = verdict_counts()
    print(f"\nrows {len(rows)}; with a verdict: {got}")
    assert int(m.group(1)) == len(rows), f"README says {m.group(1)} claim rows; docs/claims.csv has {len(rows)}"
    assert (int(m.group(2)), int(m.group(3))) == (got[H100], got[H200]), \
        f"README says {m.group(2)} / {m.group(3)} with a verdict; recomputed {got[H100]} (H100) / {got[H200]} (H200)"


def test_one_limiter_rule():
    """core.ncu.limiter is the one rule: a unit whose band reaches SATURATED limits; otherwise the top
    stall does, with ties inside the noise named; the same evidence gives the same verdict (lab 07's
    steps 14 and 15 both read from the record)."""
    import sys
    sys.path.insert(0, str(ROOT / "labs_src"))
    from kernellab.core.ncu import SATURATED, limiter
    busy = {"DRAM throughput (% of peak)": SATURATED - 1, "stall: waiting on memory": 2.0}
    assert limiter(busy).kind == "unit"                        # within the noise of saturation
    assert limiter({**busy, "DRAM throughput (% of peak)": 50.0}).what == "waiting on memory"
    tie = limiter({"shared memory busy (%)": 56.0, "stall: fixed latency": 1.0, "stall: __syncthreads": 0.95})
    assert tie.kind == "latency" and tie.tied == ("__syncthreads",)
    same = {"shared memory busy (%)": 56.0, "tensor pipe busy (%)": 33.0, "stall: fixed latency": 1.74}
    assert limiter(same) == limiter(dict(same))
    from kernellab import attention as A
    from kernellab.core import results
    from kernellab.core.ncu import limiter_of
    lim = results.limiters(A.PREFILL)
    if lim is not None:
        k14, k15 = (limiter_of(lim, c).kind for c in lim.columns if c.startswith(("14_", "15_")))
        assert k14 == k15 == "latency", "lab 07's steps 14 and 15: the record shows no unit near saturation"


def test_no_bar_past_the_roof():
    """The README's promise, for every record: no recorded fraction of a roof is above 1, and each
    device's roofs are at least every reader and copier lab 00 recorded beside them (meta.json)."""
    import json
    import pandas as pd
    bad = []
    for meta in sorted((ROOT / "figures" / "reference").glob("*/meta.json")):
        roofs = json.loads(meta.read_text()).get("roofs") or {}
        for kind in ("read", "copy"):
            parts = {k: v for k, v in roofs.items() if k.startswith(kind + "_") and k.endswith("_gbps")}
            low = [k for k, v in parts.items() if v > roofs.get(f"{kind}_gbps", float("inf")) * (1 + 1e-6)]
            bad += [f"{meta.parent.name}: {kind}_gbps below {k}" for k in low]
        for path in sorted(meta.parent.glob("*.csv")):
            d = pd.read_csv(path)
            for c in ("frac_read", "frac_copy"):
                if c in d and d[c].max() > 1 + 1e-6:
                    bad.append(f"{meta.parent.name}/{path.name}: {c} {d[c].max():.4f}")
    assert not bad, "a bar past 100% would be possible:\n  " + "\n  ".join(bad)


def test_occupancy_counts_judge_a_claimed_count():
    """`ptxas:blocks_per_sm@T` / `ptxas:occupancy@T` read build.occupancy (ptxas -v and the arch's SM
    limits) for the seeds' sm_87; a claimed count of one step holds only when equal, else it is smaller
    or larger than claimed (rmsnorm-016, rmsnorm-035, add-065)."""
    import sys
    from types import SimpleNamespace
    sys.path.insert(0, str(ROOT / "labs_src"))
    from kernellab.core import build
    from kernellab.core.verdict import _counted
    occ = build.occupancy("rmsnorm", "02_f32_shfl", 128)
    blocks = float(occ[(occ.arch == "sm_87") & (occ.source == "ptxas -v")]["blocks/SM"].iloc[0])
    row = lambda how, claimed: SimpleNamespace(fast="02_f32_shfl", slow="", how=how, claimed=claimed,  # noqa: E731
                                               kind="counter")
    m, v, shown = _counted(row("ptxas:blocks_per_sm@128", f"{blocks:g}"), "rmsnorm")
    assert (m.value, v) == (blocks, "holds") and "sm_87" in shown
    assert _counted(row("ptxas:blocks_per_sm@128", f"{blocks + 1:g}"), "rmsnorm")[1] == "smaller than claimed"
    assert _counted(row("ptxas:blocks_per_sm@128", f"{blocks - 1:g}"), "rmsnorm")[1] == "larger than claimed"
    m, v, _ = _counted(row("ptxas:occupancy@128", "1"), "rmsnorm")
    assert 0 < m.value <= 1 and v == ("holds" if m.value == 1 else "smaller than claimed")


def test_lab00_micro_claims_read_what_the_record_writes():
    """Lab 00's micro-claims (measuring-001..004, 007..010) are judged from the rows _micro_rows
    records, by name: a synthetic record with known cycles gives the verdicts the rule gives, and a
    record made before the micro-benchmarks says so instead of judging."""
    import sys
    sys.path.insert(0, str(ROOT / "labs_src"))
    import pandas as pd
    from kernellab import measuring as M
    from kernellab.core.results import CLAIM_MEASURES, Measured
    band = lambda q, v, unit="cycles": M._band_rows(q, Measured(v, v * 0.98, v * 1.02), unit)  # noqa: E731
    cyc = {"fmaf": 4.0, "multiply then add": 8.0, "shuffle": 23.0, "shared-memory load": 30.0,
           "__syncthreads": 20.0, "integer modulo": 10.0}
    rows = [r for n, v in cyc.items() for r in band(M.latency_quantity(n), v)]
    rows += band("FMUL / FFMA instruction rate", 1.0, "ratio")
    rows += band(M.grid_quantity(4), 0.8, "ratio") + band(M.grid_quantity(2), 1.3, "ratio")
    rows += [("fp32 FMA peak", 60000.0, "GFLOP/s"), ("copy roof", 3000.0, "GB/s")]
    part = pd.DataFrame(rows, columns=["quantity", "value", "unit"])
    got = {i: CLAIM_MEASURES[i](part)[1] for i in ("measuring-001", "measuring-002", "measuring-003",
                                                   "measuring-004", "measuring-007", "measuring-008",
                                                   "measuring-009", "measuring-010", "measuring-013")}
    assert got == {"measuring-001": "holds",                 # 8 / 4 = 2, as claimed
                   "measuring-002": "within noise",          # a band that holds 1
                   "measuring-003": "larger than claimed",   # 20 cycles per barrier against ~5
                   "measuring-004": "refuted",               # the smaller grid slower
                   "measuring-007": "holds",                 # 30 in 20-50
                   "measuring-008": "smaller than claimed",  # 30 / 23 = 1.3 against a claimed 20
                   "measuring-009": "holds",
                   "measuring-010": "smaller than claimed",  # 10 < 20 / HOLD
                   "measuring-013": "holds"}, got
    old = part[~part["quantity"].str.startswith(("latency", "FMUL", "copy of"))]
    assert CLAIM_MEASURES["measuring-001"](old)[1].startswith("not measured yet")
    assert CLAIM_MEASURES["measuring-007"](old)[1].startswith("not measured yet")
