"""Everywhere (no GPU needed): the measuring machinery of lab 00 and every timing.
The teaching compile uses CuPy's own flags; the roof kernels keep many bytes in flight;
the bytes-in-flight model and the sanitizer's case selection are plain arithmetic."""
import re
import uuid

import numpy as np
import pandas as pd
import pytest

from kernellab import bench, build, launch, measuring, sanitize
from kernellab.labs import ladders


def _cupy_nvrtc_options(arch="90"):
    """The options CuPy's RawModule hands to NVRTC, captured at the NVRTC call (no GPU needed:
    the device queries are answered for `arch`, the compile itself is stopped)."""
    import cupy.cuda.compiler as C
    from cupy._core import core

    class Captured(Exception):
        pass

    got = {}

    class FakeProgram:
        def __init__(self, *a, **k):
            pass

        def compile(self, options=(), log_stream=None):
            got["options"] = tuple(options)
            raise Captured

    saved = {k: getattr(C, k) for k in ("_NVRTCProgram", "_preprocess", "_get_arch_for_options_for_nvrtc")}
    C._NVRTCProgram = FakeProgram
    C._preprocess = lambda *a, **k: ""
    C._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{arch}", "cubin")
    try:
        src = f'// {uuid.uuid4()}\nextern "C" __global__ void k() {{}}\n'   # never a cache hit
        core.compile_with_cache(src, build._options(), arch=arch, prepend_cupy_headers=False)
    except Captured:
        pass
    finally:
        for k, v in saved.items():
            setattr(C, k, v)
    assert "options" in got, "could not capture CuPy's NVRTC options (CuPy's internals changed?)"
    return got["options"]


def test_teaching_compile_uses_rawmodules_flags():
    """Finding 11: the PTX shown must be the PTX of the binary that is timed."""
    cupy_opts = _cupy_nvrtc_options("90")
    ours = build.nvrtc_options("sm_90")
    assert "-ftz=true" in cupy_opts
    codegen = [o for o in cupy_opts if not o.startswith(("-I", "-arch", "--pch"))]
    missing = [o for o in codegen if o not in ours]
    assert not missing, f"CuPy compiles RawModules with {missing}; build.nvrtc_options lacks them"
    assert "-arch=sm_90" in cupy_opts and "--gpu-architecture=sm_90" in ours


def test_ptx_shown_is_flush_to_zero():
    """-ftz=true reaches the PTX: fp32 arithmetic in the softmax kernels carries .ftz."""
    lines = build.ptx("softmax", "05_online_vec4", "sm_90", grep=r"\.f32")
    assert any(".ftz" in l for l in lines), "no .ftz.f32 instruction: the PTX was compiled without -ftz=true"


@pytest.mark.parametrize("arch", build.ARCHS)
def test_read_roof_keeps_many_loads_in_flight(arch):
    """Finding 7: the read roof issues several independent 16-byte loads before using any."""
    loads = build.ptx("measure", "02_read", arch, grep=r"ld\.global\.nc\.v4\.f32")
    assert len(loads) >= 8, f"{len(loads)} 16-byte loads in measure_02_read"


@pytest.mark.parametrize("nbytes", measuring.INFLIGHT_BYTES)
def test_inflight_sweep_kernels_load_what_they_say(nbytes):
    width = {4: r"ld\.global\.cg\.f32", 8: r"ld\.global\.cg\.v2\.f32"}.get(nbytes, r"ld\.global\.cg\.v4\.f32")
    loads = build.ptx("measure", f"05_inflight_{nbytes}B", "sm_90", grep=width)
    per_trip = max(1, nbytes // 16)
    assert len(loads) >= per_trip, f"{nbytes} B: {len(loads)} loads of the expected width"


def test_sfu_and_chase_kernels():
    assert build.ptx("measure", "06_ex2", "sm_90", grep=r"ex2\.approx\.ftz\.f32")
    assert build.ptx("measure", "04_chase", "sm_90", grep=r"ld\.global\.cg\.u32")


def test_kernel_args_pack_like_the_kernels_declare():
    a = launch.kernel_args((3, True, 2.5, np.float64(1.5), np.int64(7), np.float32(1)))
    assert [type(x) for x in a] == [np.int32, np.int32, np.float32, np.float32, np.int64, np.float32]
    assert launch._dims(5) == (5,) and launch._dims((2, np.int64(3))) == (2, 3)
    assert type(launch._dims((2, np.int64(3)))[1]) is int


def _fund(**over):
    q = {"SMs": 100, "threads per SM in the sweep": 2048, "DRAM latency (pointer chase)": 500.0,
         "read roof": 3000.0, **{f"read with {b} B in flight per thread": 100.0 * b for b in measuring.INFLIGHT_BYTES}}
    q.update(over)
    df = pd.DataFrame({"quantity": list(q), "value": list(q.values()), "unit": ""})
    df["device"], df["date"], df["source"] = "test", "2026-01-01", "recorded"
    return df


def test_littles_law_prediction():
    t = measuring.inflight(_fund())
    assert list(t["B in flight per thread"]) == list(measuring.INFLIGHT_BYTES)
    # 4 B x 2048 threads x 100 SMs / 500 ns = 1638.4 GB/s; from 8 B on the roof (3000) caps it
    assert t["Little's law predicts GB/s"].iloc[0] == pytest.approx(4 * 2048 * 100 / 500)
    assert t["Little's law predicts GB/s"].iloc[-1] == 3000.0
    assert measuring.value(_fund(), "no such row") != measuring.value(_fund(), "no such row")   # NaN
    assert measuring.inflight(pd.DataFrame()).empty
    assert measuring.sweep_fraction(_fund(), 16) == pytest.approx(1600 / 3000)
    assert measuring.sweep_fraction(_fund(), 12) == pytest.approx(np.interp(np.log2(12), [3, 4], [800, 1600]) / 3000)
    assert measuring.sweep_fraction(_fund(), 1) == pytest.approx(400 / 3000)      # clamped to the first point


def test_result_columns_carry_warm_and_host_time():
    for c in ("warm_us", "host_us", "bare_host_us"):
        assert c in bench.RESULT_COLUMNS
    assert bench.WARM_ROWS == 64


def test_fundamentals_recorded_have_the_rows_labs_read():
    if bench.is_live():
        pytest.skip("live: tests/test_gpu_measure.py measures them")
    fund = measuring.fundamentals()
    if fund.empty:
        pytest.skip("nothing recorded")
    for q in ("copy roof", "read roof", "empty kernel launch", "fp32 FMA peak"):
        assert q in set(fund["quantity"]), q


def test_sanitize_cases_are_small_and_awkward():
    fams = ladders()
    assert fams
    for fam in fams:
        cs = sanitize.cases(fam)
        assert 1 <= len(cs) <= sanitize.PER_FAMILY, fam.name
        for shape, values in cs:
            n = int(np.prod(shape))
            assert 0 < n <= sanitize.MAX_ELEMS
            assert (shape, values) in [(tuple(s), v) for s, v in fam.check_cases]


def test_makefile_has_sanitize():
    text = (build.ROOT / "Makefile").read_text()
    assert re.search(r"^sanitize:", text, re.M) and "kernellab.sanitize" in text


def test_plan_keys_and_clear_plans():
    """Launch plans (launch.Variant): scalars are keyed by value and marked as such; an
    unhashable argument makes the key unusable (the full path runs); clear_plans empties all."""
    k1 = launch._plan_key((3, 1e-6), None)
    assert k1 == launch._plan_key((3, 1e-6), None) and k1 != launch._plan_key((4, 1e-6), None)
    with pytest.raises(TypeError):
        {}.get(launch._plan_key(([1, 2],), None))
    from kernellab import add
    v = add.ADD.variants["02_f32_float4"]
    v._plans["fake"] = lambda: None
    launch.clear_plans()
    assert not v._plans


def test_settle_gives_one_roof_raised_to_a_faster_kernel_and_is_idempotent(tmp_path):
    """record.settle: the roofs come from the recorded roof table; a recorded kernel faster than
    a roof raises it (named in meta.json and the table); every fraction is then <= 1; settling
    twice changes nothing."""
    import json
    import pandas as pd
    from kernellab import record
    from kernellab.measuring import ROOF_QUANTITIES
    pd.DataFrame([{"quantity": q, "value": 100.0, "unit": "GB/s"} for q in ROOF_QUANTITIES.values()]
                 ).to_csv(tmp_path / "measuring.csv", index=False)
    (tmp_path / "meta.json").write_text(json.dumps({"device": "X", "roofs": {"copy_gbps": 1.0, "read_gbps": 1.0},
                                                    "labs": {"measuring": {"date": "d0"}}}))
    rows = [{"case": "c", "name": n, "bytes": 1e6 * gbps, "median_us": 1e3} for n, gbps in (("a", 90.0), ("b", 125.0))]
    pd.DataFrame(rows).to_csv(tmp_path / "add.csv", index=False)        # a copy-roof family
    pd.DataFrame(rows).to_csv(tmp_path / "gemv.csv", index=False)       # a read-roof family
    raised = record.settle(tmp_path)
    assert set(raised) == {"copy_gbps", "read_gbps"} and "add.csv b at c" in raised["copy_gbps"]
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["roofs"]["copy_gbps"] == pytest.approx(125.0) and meta["roofs_date"] == "d0"
    add, gemv = pd.read_csv(tmp_path / "add.csv"), pd.read_csv(tmp_path / "gemv.csv")
    assert add["frac_copy"].max() == pytest.approx(1.0) and add["frac_read"].isna().all()
    assert gemv["frac_read"].tolist() == pytest.approx([0.72, 1.0]) and gemv["frac_copy"].isna().all()
    m = pd.read_csv(tmp_path / "measuring.csv")
    assert m.loc[m["quantity"] == "copy roof", "value"].item() == pytest.approx(125.0)
    assert m["quantity"].str.contains("copy roof: raised to add.csv b at c").any()
    before = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert record.settle(tmp_path) == raised
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == before
    # the kernel that raised a roof re-recorded slower: the roof comes back to the micro-benchmarks'
    for name in ("add.csv", "gemv.csv"):
        pd.DataFrame([dict(rows[0]), dict(rows[1], bytes=1e6 * 95.0)]).to_csv(tmp_path / name, index=False)
    assert record.settle(tmp_path) == {}
    assert json.loads((tmp_path / "meta.json").read_text())["roofs"]["copy_gbps"] == pytest.approx(100.0)
    # families sharing a CSV (the decoder's new kernels): each row gets its own family's roof
    pd.DataFrame([{"case": "silu_mul:12288:float16", "name": "01_silu_mul", "bytes": 1e6 * 50, "median_us": 1e3},
                  {"case": "argmax:151936:float32", "name": "04_argmax", "bytes": 1e6 * 60, "median_us": 1e3}]
                 ).to_csv(tmp_path / "decoder_ops.csv", index=False)
    record.settle(tmp_path)
    ops = pd.read_csv(tmp_path / "decoder_ops.csv")
    assert ops["frac_copy"].notna().tolist() == [True, False] and ops["frac_read"].notna().tolist() == [False, True]


@pytest.mark.parametrize("arch", ["sm_87", "sm_90"])
def test_latency_and_fmul_kernels_time_what_they_say(arch):
    """measure_11_latency's chains are the operations lab 00's micro-claims name (an FMA; a multiply
    and an add the compiler did not fuse; a shuffle; a volatile shared-memory load; a barrier; an
    unsigned remainder), between two clock64 reads; measure_12_fmul multiplies and never fuses."""
    ptx = "\n".join(build.ptx("measure", "11_latency", arch)).replace(".ftz", "")
    for op in ("fma.rn.f32", "mul.rn.f32", "add.rn.f32", "shfl.sync.bfly", "ld.volatile.shared.u32", "bar.sync",
               "rem.u32"):
        assert op in ptx, f"measure_11_latency ({arch}): no {op}"
    assert ptx.count("%clock64") == 2
    mul = "\n".join(build.ptx("measure", "12_fmul", arch)).replace(".ftz", "")
    assert "mul.f32" in mul and "fma.rn.f32" not in mul
