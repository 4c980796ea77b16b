"""Everywhere (no GPU): the records know what they timed, and what is drawn from them is current.

* Every recorded row carries the fingerprint of the code it timed (core.store); a row whose step
  (kernel slice and what it uses, compile options, launcher) has changed since is stale. A device
  record may keep stale rows only with a reason in its meta.json (`stale_kept`).
* Changing one character of one step's kernel changes that step's fingerprint and no other file's.
* figures/headline.csv is the table `make headline` draws, and it equals what today's records give;
  figures/headline.png was drawn from that very table (its PNG text holds the table's hash)."""
import shutil

import pandas as pd
import pytest

from kernellab import labs
from kernellab.core import fingerprint as fp
from kernellab.core import store
from kernellab.core.device import FIGURES, REFERENCE

FAMILIES = list(labs.families())          # every lab's families, registered for core.store


def _lab_of(record: str) -> str:
    for lab in labs.LABS:
        if any(f.name == record for f in labs.families([lab])):
            return lab
    return record


@pytest.mark.parametrize("slug", sorted(p.name for p in REFERENCE.iterdir() if (p / "meta.json").exists()))
def test_every_recorded_row_was_timed_by_todays_code(slug):
    rows = store.stale_rows(slug)
    if not rows:
        return
    if store.kept_reason(slug):            # stated in meta.json: the reader marks these rows
        return
    by_record = {}
    for _, record, name, case in rows:
        by_record.setdefault(record, []).append(f"{name} @ {case}" if case else name)
    lines = [f"  {rec}.csv: {len(v)} rows, e.g. {'; '.join(sorted(set(v))[:3])}" for rec, v in sorted(by_record.items())]
    cmd = f"LABS_TO_RECORD='{' '.join(sorted({_lab_of(r) for r in by_record}))}' make bench"
    pytest.fail(f"{slug}: {len(rows)} recorded rows were timed by code that has changed since (or carry no "
                f"fingerprint):\n" + "\n".join(lines) + f"\nre-record them on that GPU: {cmd}\n(or, when no such "
                "GPU is at hand, state why in its meta.json as \"stale_kept\": the labs then mark those rows)")


def test_one_character_of_a_kernel_changes_its_steps_fingerprint(tmp_path, monkeypatch):
    from kernellab import gemv, softmax
    before = {n: store.expected("gemv", n)[0] for n in ("36_int4_tiles", "28_int4_mma", "27_fp16_rows")}
    other = store.expected("softmax", "04_online")[0]
    shutil.copytree(fp.KERNELS, tmp_path / "kernels")
    src = (tmp_path / "kernels" / "gemv.cu").read_text()
    body = src.index("// === gemv_36_int4_tiles ===")
    i = src.index("int4_tiles_body<true>", body)
    (tmp_path / "kernels" / "gemv.cu").write_text(src[:i] + "int4_tiles_body<1>" + src[i + len("int4_tiles_body<true>"):])
    monkeypatch.setattr(fp, "KERNELS", tmp_path / "kernels")
    for f in (fp._file, fp.markers, fp.kernel, store.expected):
        f.cache_clear()
    try:
        after = {n: store.expected("gemv", n)[0] for n in before}
        assert after["36_int4_tiles"] != before["36_int4_tiles"], "a changed kernel must change its step's fingerprint"
        assert after["27_fp16_rows"] == before["27_fp16_rows"], "an unrelated step of the same file must not change"
        assert store.expected("softmax", "04_online")[0] == other
        df = pd.DataFrame({"name": ["36_int4_tiles", "27_fp16_rows"], "fingerprint": [before["36_int4_tiles"],
                                                                                      before["27_fp16_rows"]]})
        assert list(store.stale("gemv", df)) == [True, False]
        assert store.note("gemv", df)[0] == "recorded with an earlier version of step 36_int4_tiles"
    finally:
        monkeypatch.undo()
        for f in (fp._file, fp.markers, fp.kernel, store.expected):
            f.cache_clear()
    assert gemv.GEMV.variants and softmax.SOFTMAX.variants


def test_comments_neither_define_nor_use(tmp_path, monkeypatch):
    """A slice's comments are prose: a word a comment says ("three times (...)") is not a name the slice
    defines, nor one it uses, so a slice depends on another only through its code."""
    shutil.copytree(fp.KERNELS, tmp_path / "kernels")
    cu = tmp_path / "kernels" / "demo.cu"
    cu.write_text("// === demo_a ===\n// the row is read three times (once per pass) {\n"
                  "__device__ float helper(float x) { return x; }\n"
                  "// === demo_b ===\n// calls helper (in a comment only)\nextern \"C\" __global__ void demo_b() {}\n"
                  "// === demo_c ===\nextern \"C\" __global__ void demo_c(float* y) { y[0] = helper(1.f); }\n")
    monkeypatch.setattr(fp, "KERNELS", tmp_path / "kernels")
    for f in (fp._file, fp.markers, fp.kernel):
        f.cache_clear()
    try:
        defines = fp._file("demo")[2]
        assert defines["demo_a"] == {"helper"}, "only code defines names"
        b, c = fp.kernel("demo", "demo_b"), fp.kernel("demo", "demo_c")
        cu.write_text(cu.read_text().replace("return x;", "return 2.f * x;"))
        for f in (fp._file, fp.markers, fp.kernel):
            f.cache_clear()
        assert fp.kernel("demo", "demo_b") == b, "a comment naming helper is not a use of it"
        assert fp.kernel("demo", "demo_c") != c, "a call of helper in code is"
    finally:
        monkeypatch.undo()
        for f in (fp._file, fp.markers, fp.kernel):
            f.cache_clear()


def test_a_launcher_change_changes_the_fingerprint(monkeypatch):
    """The launcher's code and the constants it names count: a different group size is another step."""
    from kernellab import gemv
    before = fp.of(gemv.GEMV.variants["36_int4_tiles"], "gemv")
    monkeypatch.setattr(gemv, "GROUP", 64)
    assert fp.of(gemv.GEMV.variants["36_int4_tiles"], "gemv") != before


def test_composite_rows_name_the_steps_they_run():
    """A decoder row's steps are what Decoder runs today (gemv.GEMV.default of its path), so changing a default
    makes its recorded rows stale."""
    from kernellab import decoder as D
    from kernellab import gemv
    for path in D.PATHS:
        got, steps = store.expected("decoder", D.step_name(path, "graph"))
        assert f"gemv={gemv.GEMV.default[path]}" in steps and "decode=" in steps and got


def test_headline_table_matches_todays_records():
    path = FIGURES / "headline.csv"
    assert path.exists(), "figures/headline.csv is missing: run `make headline`"
    today = labs.headline_table()
    have = pd.read_csv(path)
    assert today.to_csv(index=False) == have.round(labs.HEADLINE_DIGITS).to_csv(index=False), (
        "figures/headline.csv differs from what today's records give: run `make headline` and commit "
        "figures/headline.png and figures/headline.csv")


def test_headline_png_was_drawn_from_that_table():
    from PIL import Image
    have = pd.read_csv(FIGURES / "headline.csv")
    text = Image.open(FIGURES / "headline.png").text.get("Description", "")
    assert text == f"table sha1 {labs.table_sha1(have)}", (
        "figures/headline.png was not drawn from figures/headline.csv: run `make headline`")


def test_settling_a_record_in_a_fresh_process_keeps_every_fraction():
    """record.settle (after every `make bench`, also one that recorded a single lab) derives each CSV's fractions
    against its own family's roof: in a fresh process that has loaded no lab yet, settling a copy of the H100
    record changes no file but meta.json's."""
    import filecmp
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path
    src = REFERENCE / "nvidia-h100-80gb-hbm3"
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / src.name
        shutil.copytree(src, dst)
        code = f"import pathlib; from kernellab.record import settle; settle(pathlib.Path({str(dst)!r}))"
        subprocess.run([sys.executable, "-c", code], check=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "labs_src")})
        changed = [p.name for p in sorted(src.glob("*.csv")) if not filecmp.cmp(p, dst / p.name, shallow=False)]
    assert not changed, f"settle rewrote {changed}: a family's roof was not known when its fractions were derived"


def test_a_new_default_in_a_used_family_makes_the_rows_that_call_it_stale():
    """Lab 06's tower calls lab 05's public calls (Family.uses): a new default step there changes the fingerprint
    of every vit_block row, so the record cannot silently keep rows timed with the old step."""
    from kernellab import vision as V
    before = store.expected("vit_block", "any row")
    old = V.GELU_ERF.default["float16"]
    V.GELU_ERF.default["float16"] = next(n for n in V.GELU_ERF.variants if n != old)
    try:
        store.expected.cache_clear()
        assert store.expected("vit_block", "any row") != before
    finally:
        V.GELU_ERF.default["float16"] = old
        store.expected.cache_clear()
    assert store.expected("vit_block", "any row") == before


def test_a_step_that_calls_another_familys_default_goes_stale_when_that_default_changes():
    """Lab 05's `lab01_best_fp16` step runs lab 01's default fp16 softmax: a new default there is a new
    step here (core.fingerprint follows a family a launcher names to its default steps)."""
    from kernellab import softmax as S
    from kernellab import vision as V
    assert V.LAB01_SOFTMAX in V.SOFTMAX.variants
    before = store.expected("vision", V.LAB01_SOFTMAX)[0]
    old = S.SOFTMAX.default["float16"]
    S.SOFTMAX.default["float16"] = next(n for n in S.SOFTMAX.variants if n != old)
    try:
        store.expected.cache_clear()
        assert store.expected("vision", V.LAB01_SOFTMAX)[0] != before
    finally:
        S.SOFTMAX.default["float16"] = old
        store.expected.cache_clear()
    assert store.expected("vision", V.LAB01_SOFTMAX)[0] == before


def test_a_torch_baseline_depends_on_none_of_our_steps_and_a_dangling_default_does_not_crash():
    """`torch.softmax` names an attribute, not lab 05's `softmax`: a new default there leaves the torch row
    alone. A default that names no step (a learner's kernel unregistered) changes the hash, without a crash."""
    from kernellab import vision as V
    torch_softmax = V.SOFTMAX.baselines["torch.softmax"]
    before, old = fp.of(torch_softmax, "vision"), V.SOFTMAX.default["float16"]
    caller = fp.of(V.softmax, "vision")
    try:
        V.SOFTMAX.default["float16"] = "gone"
        assert fp.of(torch_softmax, "vision") == before
        assert fp.of(V.softmax, "vision") != caller
    finally:
        V.SOFTMAX.default["float16"] = old
    assert fp.of(V.softmax, "vision") == caller


def test_a_one_op_record_keeps_the_other_ops_rows(monkeypatch):
    """`make bench LABS_TO_RECORD=vision:layernorm` re-times one op of vision.csv: the rows it starts from are every
    other op's, unchanged."""
    from kernellab import record, vision
    monkeypatch.setattr(record, "info", lambda: {"slug": "nvidia-h100-80gb-hbm3"})
    full = store.read_csv(REFERENCE / "nvidia-h100-80gb-hbm3" / "vision.csv")
    kept = record._other_ops(vision.LAYERNORM)
    ln = full["case"].str.startswith("layernorm:")
    assert ln.any() and len(kept) == (~ln).sum() and not kept["case"].str.startswith("layernorm:").any()
    pd.testing.assert_frame_equal(kept, full[~ln].reset_index(drop=True))


def test_restamp_rewrites_every_record_byte_for_byte_but_its_fingerprints():
    """scripts/restamp.py writes a record file only through csv's reader and writer: every recorded CSV
    must come back byte for byte from that round trip (else restamp would change more than fingerprints)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("restamp", REFERENCE.parents[1] / "scripts" / "restamp.py")
    restamp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(restamp)
    for p in sorted(REFERENCE.glob("*/*.csv")):
        assert restamp.rows_of(p.read_bytes().decode()) is not None, f"{p} does not round-trip through csv"
    assert restamp.rows_of('a,b\n1,"x\r\ny"\n') is not None and restamp.rows_of("a,b\r\n1,2\r\n") is None
