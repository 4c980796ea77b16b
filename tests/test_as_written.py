"""Everywhere (no GPU needed): labs 04 and 05's "the report's kernels as it writes them" sections. Each
kernel as written is a step of its family beside the course's step, the change between them shows in the
PTX, the tables read the reference record by the noise rule, and a fraction whose roof its own row
raised says so (issue 34, item 5; truth review, lab 05)."""
import re

import pandas as pd
import pytest

from kernellab import build, gemv, vision
from kernellab.core import bench, device, results

H100 = "NVIDIA H100 80GB HBM3"
LINES = re.compile(r"^\d+(-\d+)?(, \d+(-\d+)?)*$")


def test_gemv_rows_name_steps_of_one_family_with_the_seed_lines():
    fams = {f.name: f for f in gemv.FAMILIES}
    for kern, lines, w, c, change, fam, dt, shape in gemv.AS_WRITTEN:
        f = fams[fam]
        assert w in f.variants and c in f.variants, (w, c)
        assert dt in f.variants[w].dtypes and dt in f.variants[c].dtypes, (w, c, dt)
        assert LINES.match(lines), lines
        assert "// Why:" in build.step_source("gemv", f"gemv_{w}"), w


def test_vision_rows_name_steps_of_their_ops_with_the_seed_lines():
    fams = {f.op: f for f in vision.FAMILIES if hasattr(f, "op")}
    for kern, lines, w, wop, c, cop, change in vision.AS_WRITTEN:
        assert w in fams[wop].variants and c in fams[cop].variants, (w, c)
        assert LINES.match(lines), lines
        assert "// Why:" in build.step_source("vision", f"vision_{w}"), w


def test_the_change_between_each_kernel_as_written_and_the_courses_shows_in_the_ptx():
    t = gemv.as_written_ptx()
    assert len(t) == len(gemv.AS_WRITTEN)
    assert (t["count as written"] != t["count in the course's"]).all(), t


def _recorded_h100(frames):
    return [f[f["device"] == H100] for f in frames]


def test_the_tables_read_the_reference_record_by_the_noise_rule():
    if not (device.REFERENCE / "nvidia-h100-80gb-hbm3").exists():
        pytest.skip("no H100 reference record")
    aw = [bench.compare(f, gemv.as_written_cases(f.name), names=gemv.as_written_names(f.name), baselines=False)
          for f in (gemv.GEMV, gemv.LOGITS, gemv.BATCHED, gemv.CONVERT)]
    t = gemv.as_written(_recorded_h100(aw))
    assert len(t) == len(gemv.AS_WRITTEN) <= results.MAX_ROWS
    assert set(t["noise rule"]) <= {"within noise", "course's faster", "course's slower"}, t
    ratio = (t["as written µs"] / t["course's µs"]).round(2)
    assert ((ratio - t["as written / course's"]).abs() <= 0.011).all(), t
    fr = [bench.compare(f, f.record_cases) for f in (vision.TRANSPOSE, vision.SPLIT_ROPE, vision.TRANSPOSE_TOKEN_HEAD,
                                                      vision.SPLIT_ROPE_F16)]
    v = vision.as_written(_recorded_h100(fr))
    assert len(v) == 2 * len(vision.AS_WRITTEN) <= results.MAX_ROWS
    assert "not recorded here yet" not in set(v["noise rule"]), v
    claims = vision.as_written_claims(pd.concat(_recorded_h100(fr), ignore_index=True))
    for how in claims["how"]:          # both sides of each pair are the report's kernels as written
        pair = set(how.split(" at ")[0].split(" vs "))
        assert pair <= {row[2] for row in vision.AS_WRITTEN}, how


def test_a_fraction_is_said_to_be_one_by_construction_only_where_its_row_raised_the_roof():
    for meta in device.recorded_meta().values():
        by = meta.get("roofs_raised_by", {}).get("copy_gbps")
        if not by:
            continue
        name, case = re.match(r"^\S+\.csv (.+) at (\S+)$", by).groups()
        part = pd.DataFrame({"device": [meta["device"]], "source": ["recorded"], "date": [meta.get("roofs_date", "?")]})
        assert "by construction" in vision.raised_note(part, name, case)
        assert vision.raised_note(part, name + "_other", case) == ""
        assert vision.raised_note(part.assign(source="live"), name, case) == ""
        said = vision.raised_said(part)
        assert by in said and ("No row of this lab set it" in said) != by.startswith("vision.csv ")
