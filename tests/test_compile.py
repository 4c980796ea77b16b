"""Everywhere (no GPU needed): every kernel compiles for sm_87 and sm_90 with no spills, and for
every GPU a learner may have (sm_75 T4 ... sm_90 Hopper) with no spills where its step runs;
kernels follow the naming/marker conventions, and the PTX shows what each lesson claims."""
import re

import pytest

from kernellab import build

FAMILIES = sorted(p.stem for p in build.KERNELS.glob("*.cu"))
KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+'
                       r'(?:KL_CLUSTER\s*\(\d+\)\s*)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)')
# Every architecture a learner may run the labs on: T4 (free notebook GPUs), A100, RTX 30xx,
# Jetson Orin, RTX 40xx / L4, H100/H200. build.ARCHS stays the teaching pair shown in the labs.
LEARNER_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90")
# Kernels that need a newer GPU than sm_75 (their variants carry the same min_arch): below it the
# instruction is compiled out behind `#if __CUDA_ARCH__ >= ...` and the kernel traps (never a
# silent wrong answer); the lab skips the step loudly before any launch.
#   mma.sync.m16n8k16 with fp16 inputs: sm_80. createpolicy / ld ... .L2::cache_hint: sm_80.
MIN_ARCH = {"gemv_28_int4_mma": "sm_80", "gemv_29_int8_w8a16": "sm_80", "gemv_35_int4_pipelined": "sm_80",
            "gemv_36_int4_tiles": "sm_80", "gemv_37_w8a16_tiles": "sm_80"}
# Kernels of thread-block clusters: their launchers never run them before sm_90 (no trap needed).
CLUSTER_MIN_ARCH = {k: "sm_90" for k in build.entries("softmax") if re.match(r"softmax_1[1-3]_", k)}
# Kernels whose default path runs everywhere but one option needs sm_80 (stream = 1: the L2
# evict-first weight loads of variant 22_fp16_fast_stream).
OPTION_MIN_ARCH = {k: "sm_80" for k in ("gemv_22_fp16_fast", "gemv_23_fp16_f32out_fast", "gemv_24_f32_fast",
                                        "gemv_25_int8_fast", "gemv_26_int4_awq")}


def _arch_num(arch):
    return int(arch.split("_")[1])


@pytest.mark.parametrize("arch", LEARNER_ARCHS)
@pytest.mark.parametrize("family", FAMILIES)
def test_compiles_for_every_learner_gpu(family, arch):
    """Every kernel of every family compiles for every learner arch (NVRTC, no GPU needed), with
    0 spills wherever the step is meant to run. A failure names the arch: a T4 learner would get
    no lab at all if one kernel of the family failed (one .cu is one module)."""
    info = build.ptxas_info(family, archs=(arch,))
    kernels = set(build.entries(family))
    assert kernels <= set(info.kernel), f"{arch}: no ptxas info for {kernels - set(info.kernel)}"
    need = {**MIN_ARCH, **CLUSTER_MIN_ARCH}
    runs_here = info[[_arch_num(arch) >= _arch_num(need.get(k, "sm_75")) for k in info.kernel]]
    spills = runs_here[(runs_here.spill_stores > 0) | (runs_here.spill_loads > 0)]
    assert spills.empty, f"{arch} spills:\n{spills[['kernel', 'registers', 'spill_stores', 'spill_loads']].to_string()}"


def test_min_arch_table_names_real_kernels():
    gemv = set(build.steps("gemv"))
    assert set(MIN_ARCH) <= gemv and set(OPTION_MIN_ARCH) <= gemv


@pytest.mark.parametrize("arch", LEARNER_ARCHS)
def test_below_min_arch_a_kernel_traps_and_never_runs_the_instruction(arch):
    """Below its minimum a guarded kernel holds a trap and none of the sm_80 instructions; at or
    above it the instruction is there, exactly as the teaching archs compile it."""
    for k, need in {**MIN_ARCH, **OPTION_MIN_ARCH}.items():
        step = k.removeprefix("gemv_")
        sm80 = build.ptx("gemv", step, arch, grep=r"mma\.sync|createpolicy|L2::cache_hint")
        trap = build.ptx("gemv", step, arch, grep=r"\btrap;")
        if _arch_num(arch) >= _arch_num(need):
            assert sm80 and not trap, (k, arch)
        else:
            assert trap and not sm80, (k, arch)


@pytest.mark.parametrize("arch", LEARNER_ARCHS)
def test_gemv_compute_only_build_compiles_for_every_learner_gpu(arch):
    ptx, log = build.nvrtc_compile(build.source("gemv"), arch, "gemv_compute_only.cu", ("-DGEMV_COMPUTE_ONLY",))
    assert "spill stores" in log and not re.search(r"[1-9]\d* bytes spill", log), log


@pytest.mark.parametrize("family", FAMILIES)
def test_compiles_without_spills(family):
    info = build.ptxas_info(family)
    kernels = set(build.entries(family))
    assert kernels, f"{family}.cu has no kernels"
    for arch in build.ARCHS:
        got = set(info[info.arch == arch].kernel)
        assert kernels <= got, f"{arch}: no ptxas info for {kernels - got}"
    spills = info[(info.spill_stores > 0) | (info.spill_loads > 0)]
    assert spills.empty, f"spills:\n{spills}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_kernel_has_a_marker_and_a_why(family):
    """Every compiled kernel has one marker: its own, or, for a kernel a macro stamps per cluster size
    (softmax_10_cluster_2, _4, _8), the marker of its step (softmax_10_cluster); every marker marks a kernel."""
    src = build.source(family)
    kernels = build.entries(family)
    assert {k for k in KERNEL_RE.findall(src) if k.startswith(family + "_")} <= set(kernels)
    marks = {k: build.marker_of(family, k) for k in kernels}
    assert set(marks.values()) == set(build.steps(family)), "every kernel needs exactly one // === marker ==="
    assert len(build.steps(family)) == len(set(build.steps(family))), "a marker appears twice"
    for k, m in marks.items():
        assert re.fullmatch(rf"{family}_\d\d_\w+", k), k
        assert m == k or f"{m}_" in k, (k, m)
        assert "// Why:" in build.step_source(family, k), f"{k} has no '// Why:' comment"


def test_cluster_kernels_are_stamped_from_one_macro():
    """softmax.cu's cluster steps: one marker and one KL_CLUSTER_KERNELS line per (step, dtype), three
    kernels (cluster sizes 2, 4, 8) each; the slice of a sized kernel is its step's."""
    stamped = re.findall(r"^KL_CLUSTER_KERNELS\((\w+),", build.source("softmax"), re.M)
    assert len(stamped) == 8 and set(stamped) <= set(build.steps("softmax"))
    entries = build.entries("softmax")
    for m in stamped:
        assert [k for k in entries if build.marker_of("softmax", k) == m] == [f"{m}_{cs}" for cs in (2, 4, 8)]
    assert build.step_source("softmax", "10_cluster_2") == build.step_source("softmax", "10_cluster")


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
                ("add", "09_rows_inplace", r"ld\.global\.v4\.u32"),
                # the seed's befores already load 16 bytes, through the ordinary path (no __ldg)
                ("gemv", "30_f32_sdata_float4", r"ld\.global\.v4\.f32"),
                ("gemv", "32_fp16_v2_plain", r"ld\.global\.v4\.u32"),
                ("gemv", "33_fp16_v2_ldg", r"ld\.global\.nc\.v4\.u32"),
                ("gemv", "34_batched_f32_sdata", r"ld\.global\.v4\.f32"),
                ("vision", "29_transpose_input_order", r"ld\.global\.nc\.v4\.u32")]
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


@pytest.mark.parametrize("arch", build.ARCHS)
def test_rmsnorm_ablations_of_steps_04_and_06_differ_from_the_step_in_their_switch(arch):
    """Steps 04 and 06 make five changes each; each ablation kernel undoes one, and the PTX shows it."""
    ptx = lambda step, pat: build.ptx("rmsnorm", step, arch, grep=pat)   # noqa: E731
    # the width: step 04's weight is one 64-bit load, its ablation's four 16-bit loads (as step 03's)
    assert ptx("04_f32_fp16w_uint2", r"ld\.global\.nc\.v2\.u32") and not ptx("04_ablate_scalar_w", r"\.v2\.u32")
    assert len(ptx("04_ablate_scalar_w", r"ld\.global\.nc\.b16")) > len(ptx("04_f32_fp16w_uint2", r"ld\.global\.nc\.b16"))
    # step 06 moves 16 bytes per access, its half2 ablation 4 (as step 05)
    assert ptx("06_fp16_uint4", r"st\.global\.v4\.u32") and not ptx("06_ablate_half2", r"\.v4\.")
    assert ptx("06_ablate_half2", r"ld\.global\.nc\.b32|ld\.global\.nc\.u32") and ptx("05_fp16_half2_cub", r"ld\.global\.(u32|b32)")  # noqa: E501
    for step in ("04", "06"):
        after = "04_f32_fp16w_uint2" if step == "04" else "06_fp16_uint4"
        # the reduction: CUB's kernels keep more shared memory than the shuffles' 16 bytes
        smem = build.ptxas_info("rmsnorm", archs=(arch,)).set_index("kernel")["smem_bytes"]
        assert smem[f"rmsnorm_{after}"] == 16 < smem[f"rmsnorm_{step}_ablate_cub"]
        # the loop: the runtime stride is not unrolled (fewer loads in the PTX)
        assert len(ptx(f"{step}_ablate_runtime_stride", r"ld\.global")) < len(ptx(after, r"ld\.global"))
    # the qualifiers: plain pointers lose the read-only path, __restrict__ alone keeps it
    assert ptx("04_ablate_no_ldg", r"ld\.global\.nc") and not ptx("04_ablate_plain", r"ld\.global\.nc")


@pytest.mark.parametrize("arch", build.ARCHS)
def test_rmsnorm_unroll_pragma_is_no_change_given_the_compile_time_stride(arch):
    """Steps 02 and 04 (and the runtime-stride ablations) compile to the same instructions without
    `#pragma unroll`: the compiler unrolls a loop with a compile-time stride by 4 by itself, so
    02_ablate_runtime_stride / 04_ablate_runtime_stride time the stride alone. Step 06's second loop
    is unrolled less without it: there the ablation undoes the stride and the pragma together, as
    lab 02 says."""
    from kernellab import rmsnorm
    for step in ("02_f32_shfl", "04_f32_fp16w_uint2", "02_ablate_runtime_stride", "04_ablate_runtime_stride",
                 "06_ablate_runtime_stride"):
        assert not rmsnorm.unroll_pragma_changes(step, arch), step
    assert rmsnorm.unroll_pragma_changes("06_fp16_uint4", arch)


@pytest.mark.parametrize("arch", ("sm_87", "sm_90"))
def test_gemv_ablations_change_what_they_say(arch):
    """Lab 04's ablation kernels: the seed's `#pragma unroll 4` is no change for steps 04 and 06;
    plain pointers lose the read-only path that __restrict__ alone keeps; the tensor-core steps'
    CUDA-core ablations have no mma; the one-load ablation of step 10 keeps 16-byte loads."""
    from kernellab import gemv

    def ptx(step, pat):
        return build.ptx("gemv", step, arch, grep=pat)
    for step in ("04_f32_ldg", "06_int8_char4"):
        assert not gemv.unroll_pragma_changes(step, arch), step
        assert ptx(step[:2] + "_ablate_no_ldg", r"ld\.global\.nc") and not ptx(step[:2] + "_ablate_plain", r"ld\.global\.nc")
    for step in ("28_int4_mma", "29_int8_w8a16", "29_ablate_no_pipeline"):
        assert ptx(step, r"mma\.sync"), step
    for step in ("28_ablate_cuda_cores", "29_ablate_cuda_cores"):
        assert not ptx(step, r"mma\.sync"), step
    assert ptx("10_ablate_one_load", r"ld\.global\.nc\.v4") and not ptx("10_ablate_half2", r"\.v4\.")
    assert ptx("27_fp16_rows", r"L1::no_allocate") and not ptx("27_ablate_l1", r"L1::no_allocate")
    assert not ptx("06_ablate_bytewise", r"ld\.global\.nc\.v4")


@pytest.mark.parametrize("arch", build.ARCHS)
def test_the_tutorials_safe_v1_reads_and_writes_the_row_once(arch):
    """softmax_08_safe_v1 (the tutorial's safe_v1, fixed): one global load and one global store per
    thread (the value and its exponential stay in registers), two trees in shared memory with a
    barrier per level (a loop: the level count is the block's); step 02 strides over the row three
    times (its loops unrolled: many loads). Its s_data is the tutorial's array, sized for 1024."""
    ptx = lambda step, pat: build.ptx("softmax", step, arch, grep=pat)   # noqa: E731
    assert len(ptx("08_safe_v1", r"^ld\.global")) == 1 and len(ptx("08_safe_v1", r"^st\.global")) == 1
    assert len(ptx("02_safe_smem", r"^ld\.global")) > 3
    assert ptx("08_safe_v1", r"bar\.sync") and ptx("08_safe_v1", r"ld\.shared") and not ptx("08_safe_v1", r"shfl")
    info = build.ptxas_info("softmax", archs=(arch,)).set_index("kernel")["smem_bytes"]
    assert info["softmax_08_safe_v1"] == 4 * 1024


def test_the_tutorials_printed_safe_v1_does_not_compile_and_the_fix_does():
    """The printed kernel indexes a scalar __shared__ float; step 08 is the two-line fix."""
    src = build.step_source("softmax", "08_safe_v1")
    assert "__shared__ float s_data[SAFE_V1_MAX_BLOCK];" in src and "s_data[0]" in src
    printed = ('extern "C" __global__ void k(float* o) { __shared__ float s_data; s_data[threadIdx.x] = 1.0f; '
               'o[0] = s_data; }')
    with pytest.raises(build.CompileError):
        build.nvrtc_compile(printed, "sm_90")


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


def test_make_tests_shared_compile_cache_gives_what_nvrtc_gives(tmp_path):
    """make test compiles each (source, arch, options) once for all its workers and notebooks
    (scripts/test.py cached_compile): a hit returns NVRTC's own PTX and ptxas log, other options
    or another arch are other entries, and a compile error raises every time and is not kept."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("test_run", Path(__file__).resolve().parents[1] / "scripts" / "test.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    calls = []

    def counting(*a, **k):
        calls.append(a[1:])
        return build.nvrtc_compile(*a, **k)
    cached = run.cached_compile(counting, tmp_path)
    src = build.source("add")
    first = cached(src, "sm_87", "add.cu")
    assert cached(src, "sm_87", "add.cu") == first and len(calls) == 1
    plain = build.nvrtc_compile(src, "sm_87", "add.cu")
    no_times = lambda log: re.sub(r"Compile time = [\d.]+ ms", "", log)     # noqa: E731
    assert first[0] == plain[0] and no_times(first[1]) == no_times(plain[1]) and "Used" in first[1]
    cached(src, "sm_87", "add.cu", ("-DKL_UNUSED=1",))
    cached(src, "sm_90", "add.cu")
    assert len(calls) == 3 and len(list(tmp_path.glob("*.json"))) == 3
    for _ in range(2):
        with pytest.raises(build.CompileError):
            cached('extern "C" __global__ void k() { undefined_thing(); }', "sm_90")
    assert len(calls) == 5 and len(list(tmp_path.glob("*.json"))) == 3
