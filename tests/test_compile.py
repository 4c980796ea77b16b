"""Everywhere (no GPU needed): every kernel compiles for sm_87 and sm_90 with no spills,
follows the naming/marker conventions, and the PTX shows what each lesson claims."""
import re

import pytest

from kernellab import build

FAMILIES = sorted(p.stem for p in build.KERNELS.glob("*.cu"))


@pytest.mark.parametrize("family", FAMILIES)
def test_compiles_without_spills(family):
    info = build.ptxas_info(family)
    kernels = set(re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)', build.source(family)))
    assert kernels, f"{family}.cu has no kernels"
    for arch in build.ARCHS:
        got = set(info[info.arch == arch].kernel)
        assert kernels <= got, f"{arch}: no ptxas info for {kernels - got}"
    spills = info[(info.spill_stores > 0) | (info.spill_loads > 0)]
    assert spills.empty, f"spills:\n{spills}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_kernel_has_a_marker_and_a_why(family):
    src = build.source(family)
    kernels = re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)', src)
    assert set(kernels) == set(build.steps(family)), "every kernel needs exactly one // === marker ==="
    for k in kernels:
        assert re.fullmatch(rf"{family}_\d\d_\w+", k), k
        assert "// Why:" in build.step_source(family, k), f"{k} has no '// Why:' comment"


VECTOR_STEPS = [("softmax", "05_online_vec4", r"ld\.global\.nc\.v4\.f32"),
                ("softmax", "06_fp16_vec8", r"ld\.global\.nc\.v4\.u32"),
                ("measure", "01_copy", r"ld\.global\.nc\.v4\.f32"),
                ("rmsnorm", "02_f32_shfl", r"ld\.global\.nc\.v4\.f32"),
                ("rmsnorm", "04_f32_fp16w_uint2", r"ld\.global\.nc\.v2\.u32"),
                ("rmsnorm", "06_fp16_uint4", r"ld\.global\.nc\.v4\.u32"),
                ("rmsnorm", "07_fp16_uint4_no_ldg", r"ld\.global\.v4\.u32"),
                ("rmsnorm", "08_fp16_onepass", r"ld\.global\.nc\.v4\.u32"),
                ("rmsnorm", "09_fused_add_fp16", r"ld\.global\.nc\.v4\.u32"),
                ("add", "02_f32_float4", r"ld\.global\.nc\.v4\.f32"),
                ("add", "04_fp16_vec8", r"ld\.global\.nc\.v4\.u32"),
                ("add", "07_bias_2d_vec8", r"ld\.global\.nc\.v4\.u32"),
                ("add", "09_rows_inplace", r"ld\.global\.v4\.u32")]
SHUFFLE_STEPS = [("softmax", s) for s in ("03_warp_shuffle", "03_warp_per_row", "04_online",
                                          "05_online_vec4", "06_fp16_vec8")] + \
    [("rmsnorm", s) for s in ("02_f32_shfl", "04_f32_fp16w_uint2", "06_fp16_uint4", "08_f32_onepass",
                              "08_fp16_onepass", "09_fused_add_fp16")]


@pytest.mark.parametrize("arch", build.ARCHS)
@pytest.mark.parametrize("family,step,pattern", VECTOR_STEPS)
def test_vector_steps_use_128bit_loads(family, step, pattern, arch):
    assert build.ptx(family, step, arch, grep=pattern), f"{step}: no 128-bit global load in {arch} PTX"


@pytest.mark.parametrize("arch", build.ARCHS)
@pytest.mark.parametrize("family,step", SHUFFLE_STEPS)
def test_shuffle_steps_use_shfl_sync(family, step, arch):
    assert build.ptx(family, step, arch, grep=r"shfl\.sync\.bfly"), f"{step}: no shfl.sync.bfly"


@pytest.mark.parametrize("family,step", [("softmax", "04_online"), ("add", "01_f32_scalar"),
                                         ("add", "05_bias_mod"), ("add", "06_bias_2d"), ("add", "08_vec_fp16_scalar")])
def test_scalar_steps_have_no_vector_loads(family, step):
    assert not build.ptx(family, step, grep=r"\.v[248]\.")


def test_seed_claims_visible_in_the_compiler_output():
    # __ldg / __restrict__: step 06 reads through the read-only path, step 07 does not.
    assert not build.ptx("rmsnorm", "07_fp16_uint4_no_ldg", grep=r"ld\.global\.nc")
    # the 1-D bias add pays a remainder per element; the 2-D grids do not.
    assert build.ptx("add", "05_bias_mod", grep=r"rem\.")
    assert not build.ptx("add", "06_bias_2d", grep=r"rem\.|div\.")
    assert not build.ptx("add", "07_bias_2d_vec8", grep=r"rem\.|div\.")
    # warp shuffles need less shared memory than cub::BlockReduce; the in-place add reads x (which it
    # writes) through the ordinary path, and only feats through the read-only one.
    info = build.ptxas_info("rmsnorm").set_index(["kernel", "arch"])["smem_bytes"]
    assert info["rmsnorm_02_f32_shfl", "sm_87"] == 16 < info["rmsnorm_01_f32_cub", "sm_87"]
    assert len(build.ptx("add", "09_rows_inplace", grep=r"ld\.global\.nc\.v4")) == 1


def test_new_steps_show_their_claims_in_the_ptx():
    # step 07 reads 16 bytes per load through the read-only path, like step 06
    assert build.ptx("softmax", "07_fp16_pipelined", grep=r"ld\.global\.nc\.v4\.u32")
    # the one-exp online update: fewer ex2 than the first, two-exp version, and no more than
    # step 03 has exponentials in its sum and output passes plus reductions
    n_ex2 = {s: len(build.ptx("softmax", s, grep=r"ex2\.approx")) for s in
             ("03_warp_shuffle", "04_online", "04_ablate_two_exp")}
    assert n_ex2["04_online"] < n_ex2["04_ablate_two_exp"], n_ex2
    # the ablation kernels differ from step 05 in exactly their switch
    assert build.ptx("softmax", "05_online_vec4", grep=r"ex2\.approx\.ftz")
    assert build.ptx("softmax", "05_ablate_stream", grep=r"ld\.global\.nc\.v4\.f32")
    # the interleaved tree indexes shared memory with 2*stride*t: a multiply (shl) by the stride
    assert build.ptx("softmax", "02_safe_interleaved", grep=r"st\.shared")
    # __restrict__ alone lets the compiler use the read-only path; plain pointers do not
    assert build.ptx("rmsnorm", "07_fp16_restrict_no_ldg", grep=r"ld\.global\.nc")
    assert not build.ptx("rmsnorm", "02_ablate_plain", grep=r"ld\.global\.nc")
    assert build.ptx("rmsnorm", "02_ablate_no_ldg", grep=r"ld\.global\.nc")


def _load_widths(family, step):
    """Byte widths of the global loads in a step's PTX (v4.u32 = 16, v2.u32 = 8, b32/f32 = 4, ...)."""
    bits = {"8": 1, "16": 2, "32": 4, "64": 8}
    out = set()
    for line in build.ptx(family, step, grep=r"ld\.global"):
        m = re.search(r"ld\.global(?:\.nc)?(?:\.v(\d))?\.[a-z]+(\d+)", line)
        if m:
            out.add(int(m.group(1) or 1) * bits[m.group(2)])
    return out


@pytest.mark.parametrize("family,loads", [("rmsnorm", "LOADS"), ("add", "LOADS")])
def test_bytes_in_flight_tables_match_the_ptx(family, loads):
    """The load widths that labs 02/03 use for their bytes-in-flight tables are in the PTX."""
    import importlib
    table = getattr(importlib.import_module(f"kernellab.{family}"), loads)
    for step, (width, *_) in table.items():
        kname = step if step != "08_onepass" else "08_fp16_onepass"
        assert width in _load_widths(family, kname), (step, width, _load_widths(family, kname))


def test_step_source_and_errors():
    assert build.step_source("softmax", "04_online").startswith("// === softmax_04_online ===")
    with pytest.raises(ValueError, match="no step"):
        build.step_source("softmax", "99_nothing")
    with pytest.raises(ValueError, match="no kernel family"):
        build.source("nope")


def test_broken_source_raises_compile_error():
    with pytest.raises(build.CompileError, match="failed to compile"):
        build.nvrtc_compile('extern "C" __global__ void k() { undefined_thing(); }', "sm_90")


def test_occupancy_from_ptxas():
    occ = build.occupancy("softmax", "05_online_vec4", threads=1024)
    row = occ[(occ.source == "ptxas -v") & (occ.arch == "sm_90")].iloc[0]
    assert row["blocks/SM"] == 1 and row["limited by"] == "registers"
