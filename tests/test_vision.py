"""Everywhere (no GPU needed): the vision references and their properties (token order, 2-D
rotary, bilinear tables, GELU tanh vs erf), bad input caught before any launch, and what the
compiler made of each vision step (vector widths, barriers, shuffles, FMAs)."""
import numpy as np
import pytest

from kernellab import build, vision as v
from kernellab.core import fingerprint


def test_window_order_is_a_permutation_of_the_grid_in_2x2_windows():
    pos = v.window_positions(6, 8)
    assert sorted(map(tuple, pos)) == [(r, c) for r in range(6) for c in range(8)]
    for m in range(len(pos) // 4):          # every 4 consecutive tokens: one 2x2 window
        w = pos[4 * m:4 * m + 4]
        assert (w[:, 0] // 2 == w[0, 0] // 2).all() and (w[:, 1] // 2 == w[0, 1] // 2).all()
        assert [tuple(p - w[0]) for p in w] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_spatial_merge_reference_concatenates_each_window():
    gh, gw, C = 4, 6, 5
    x = np.random.default_rng(0).standard_normal((gh * gw, C))
    pos = v.window_positions(gh, gw)
    raster = np.empty((gh, gw, C))
    raster[pos[:, 0], pos[:, 1]] = x
    merged = v.ref_spatial_merge(x, gh, gw)
    for m, (r, c) in enumerate(pos[::4]):
        want = np.concatenate([raster[r, c], raster[r, c + 1], raster[r + 1, c], raster[r + 1, c + 1]])
        np.testing.assert_array_equal(merged[m], want)


@pytest.mark.parametrize("grid", [(3, 4), (4, 5), (0, 2), (2.0, 2)])
def test_odd_or_bad_grids_raise(grid):
    with pytest.raises(ValueError, match="grid_h|grid_w"):
        v.window_positions(*grid)
    with pytest.raises(ValueError, match="grid_h|grid_w"):
        v.spatial_merge(np.zeros((12, 8), np.float16), *grid)
    with pytest.raises(ValueError, match="grid_h|grid_w"):
        v.split_rope_transpose(np.zeros((12, 3456), np.float16), *grid)


def test_token_count_and_head_dim_mismatches_raise():
    with pytest.raises(ValueError, match="grid_h \\* grid_w"):
        v.ref_spatial_merge(np.zeros((12, 8)), 2, 2)
    with pytest.raises(ValueError, match="grid_h \\* grid_w"):
        v.ref_split_rope_transpose(np.zeros((12, 3456)), 2, 2)
    with pytest.raises(ValueError, match="multiple of 48"):
        v._head_dim(3457, 16)
    with pytest.raises(ValueError, match="head_dim % 4"):
        v._head_dim(3 * 16 * 6, 16)
    with pytest.raises(ValueError, match="cupy.ndarray"):
        v.layernorm(np.zeros((2, 1152), np.float16), np.zeros(1152, np.float16), np.zeros(1152, np.float16))


def test_rope_angles_follow_qwen_vision_rotary():
    a = v.rope_angles(4, 6)
    pos = v.window_positions(4, 6)
    inv = 10000.0 ** (-np.arange(18) * 2 / 36)          # VisionRotaryEmbedding(36): 18 frequencies
    np.testing.assert_allclose(a[:, :18], pos[:, :1] * inv)
    np.testing.assert_allclose(a[:, 18:], pos[:, 1:] * inv)
    cos, sin = v.rope_tables(4, 6)
    assert cos.dtype == np.float32 and cos.shape == (24, 36)
    np.testing.assert_allclose(cos, np.cos(a), atol=1e-7)


def test_rope_reference_rotates_half_and_keeps_norms():
    gh, gw, H, D = 4, 4, 2, 8
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal((gh * gw, 3 * H * D))
    q, k, vv = v.ref_split_rope_transpose(qkv, gh, gw, heads=H)
    parts = qkv.reshape(-1, 3, H, D)
    assert q.shape == k.shape == vv.shape == (H, gh * gw, D)
    np.testing.assert_array_equal(vv, parts[:, 2].transpose(1, 0, 2))   # V: only transposed
    np.testing.assert_allclose(q[:, 0], parts[0, 0])                    # token 0 at (0, 0): angle 0
    half = D // 2                                                       # each (d, d + D/2) pair: a rotation
    np.testing.assert_allclose(q[..., :half] ** 2 + q[..., half:] ** 2,
                               (parts[:, 0, :, :half] ** 2 + parts[:, 0, :, half:] ** 2).transpose(1, 0, 2))
    a = v.rope_angles(gh, gw, D)
    t = 5
    x1, x2 = parts[t, 0, 0, :half], parts[t, 0, 0, half:]
    np.testing.assert_allclose(q[0, t], np.concatenate([x1 * np.cos(a[t]) - x2 * np.sin(a[t]),
                                                        x2 * np.cos(a[t]) + x1 * np.sin(a[t])]))


def test_rope_scores_depend_only_on_relative_position():
    # the point of RoPE: <rot(q, p1), rot(k, p2)> depends on p1 - p2 only
    gh = gw = 8
    D = 72
    rng = np.random.default_rng(2)
    qv, kv = rng.standard_normal(D), rng.standard_normal(D)
    N = gh * gw
    qkv = np.zeros((N, 3 * D))
    qkv[:, :D], qkv[:, D:2 * D] = qv, kv
    q, k, _ = v.ref_split_rope_transpose(qkv, gh, gw, heads=1)
    pos = {tuple(p): i for i, p in enumerate(v.window_positions(gh, gw))}
    s1 = q[0, pos[(3, 5)]] @ k[0, pos[(1, 2)]]
    s2 = q[0, pos[(6, 4)]] @ k[0, pos[(4, 1)]]          # the same offset (2, 3)
    s3 = q[0, pos[(6, 4)]] @ k[0, pos[(4, 2)]]          # another offset
    assert abs(s1 - s2) < 1e-9 and abs(s1 - s3) > 1e-6


def test_pos_interpolation_tables():
    idx, w = v.interp_tables(48, 48)                    # the table's own grid: the identity
    pos = v.window_positions(48, 48)
    np.testing.assert_allclose(w[:, 0], 1.0)
    np.testing.assert_array_equal(idx[:, 0], pos[:, 0] * 48 + pos[:, 1])
    idx, w = v.interp_tables(28, 40)
    np.testing.assert_allclose(w.sum(1), 1.0)
    assert idx.min() >= 0 and idx.max() < 48 * 48 and (w >= 0).all()
    table = np.random.default_rng(3).standard_normal((48 * 48, 4))
    same = v.ref_pos_embed_interpolate(table, 48, 48)
    np.testing.assert_allclose(same, table[pos[:, 0] * 48 + pos[:, 1]])
    corners = v.ref_pos_embed_interpolate(table, 2, 2)  # align-corners: the 4 corners of the grid
    np.testing.assert_allclose(corners, table[[0, 47, 47 * 48, 48 * 48 - 1]])


def test_gelu_tanh_vs_erf_difference_is_below_fp16_resolution():
    d = v.gelu_tanh_vs_erf()
    assert 1e-4 < d["max_abs_diff"] < 1e-3
    assert d["max_abs_diff"] < d["fp16_spacing_there"]
    x = np.array([-np.inf, -3.0, 0.0, 1.0, np.inf, np.nan])
    g = v.ref_gelu(x)
    assert np.isnan(g[0]) and g[2] == 0 and g[4] == np.inf and np.isnan(g[5])
    np.testing.assert_allclose(v.ref_gelu_erf(np.array([1.0])), 0.8413447460685429)


def test_references_on_small_cases():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 16)) * 5 + 2
    y = v.ref_layernorm(x, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(y.mean(1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(1), 1, rtol=1e-4)
    b = rng.standard_normal(16)
    np.testing.assert_allclose(v.ref_bias_add_residual(x, b, x), 2 * x + b)
    np.testing.assert_allclose(v.ref_bias_gelu(x, b), v.ref_gelu(x + b))
    o = rng.standard_normal((4, 5, 6))
    np.testing.assert_array_equal(v.ref_transpose_head_token(o)[2], o[:, 2].reshape(-1))
    s = v.ref_softmax(rng.standard_normal((2, 3, 7)))
    np.testing.assert_allclose(s.sum(-1), 1)
    emb = rng.standard_normal((6, 4))
    got = v.ref_replace_image_tokens(emb, np.ones((2, 4)), np.array([1, 4]))
    assert (got[[1, 4]] == 1).all() and (got[[0, 2, 3, 5]] == emb[[0, 2, 3, 5]]).all()
    w = rng.standard_normal((5, 16))
    np.testing.assert_allclose(v.ref_patch_embed(x, w, b[:5]), x @ w.T + b[:5])


def test_every_family_has_the_api_and_its_references_run():
    names = set()
    for f in v.FAMILIES:
        if f in v.ABLATION:             # the ablations: their own record, no default step
            assert f.NAME == "vision_ablation" and f.OP.startswith("ablate_") and not f.BEST
        else:
            assert f.NAME == "vision" and f.BEST["float16"] in f.VARIANTS
        for nm in f.VARIANTS:      # its own kernel, or (an ablation of a launch parameter) the kernels it launches
            assert nm.startswith("lab01") or f"vision_{nm}" in build.steps("vision") or \
                ("_ablate_" in nm and fingerprint.kernels_of(f.variants[nm], "vision")), nm
        keys = [f.case_key(s, dt) for s, dt in f.RECORD_CASES]
        assert all(k.startswith(f.OP + ":") for k in keys)
        names |= set(f.BASELINES)
        shape, values = f.CHECK_CASES[0]
        f.reference(*f.make_input(shape, "float16", values))
    assert any("torch" in b for b in names) and any("cuBLAS" in b for b in names)


# ---- the compiler's view -------------------------------------------------------------------------

VEC8 = ["03_layernorm_warp_vec8", "05_gelu_vec8", "06_gelu_vec8_exp", "08_bias_gelu_vec8",
        "09_bias_gelu_vec8_exp", "11_bias_residual_vec8", "17_spatial_merge_vec8", "19_split_rope_fma",
        "20_split_rope_vec", "22_transpose_vec8", "24_replace_image_tokens", "25_bias_gelu_vec8_x2",
        "26_spatial_merge_stream", "27_split_rope_tile", "28_transpose_tile", "29_transpose_input_order"]


@pytest.mark.parametrize("arch", build.ARCHS)
@pytest.mark.parametrize("step", VEC8)
def test_vec8_steps_use_16_byte_loads(step, arch):
    assert build.ptx("vision", step, arch, grep=r"ld\.global\.nc\.v4\.u32"), step


@pytest.mark.parametrize("step", ["01_layernorm_scalar_tree", "10_bias_residual_scalar", "12_patch_embed_scalar",
                                  "16_spatial_merge_scalar", "18_split_rope_scalar"])
def test_scalar_steps_have_no_vector_loads(step):
    assert not build.ptx("vision", step, grep=r"ld\.global.*\.v[248]\.")


def test_barriers_and_shuffles_of_the_layernorm_steps():
    bars = {s: len(build.ptx("vision", s, grep=r"bar\.sync")) for s in
            ("01_layernorm_scalar_tree", "02_layernorm_half2_shfl", "03_layernorm_warp_vec8")}
    assert bars == {"01_layernorm_scalar_tree": 9, "02_layernorm_half2_shfl": 2, "03_layernorm_warp_vec8": 0}
    assert not build.ptx("vision", "01_layernorm_scalar_tree", grep=r"shfl\.sync")
    for s in ("02_layernorm_half2_shfl", "03_layernorm_warp_vec8", "23_softmax_half2_shfl"):
        assert build.ptx("vision", s, grep=r"shfl\.sync\.bfly"), s
    info = build.ptxas_info("vision").set_index(["kernel", "arch"])["smem_bytes"]
    assert info["vision_02_layernorm_half2_shfl", "sm_90"] == 256      # static float2[32]
    assert info["vision_03_layernorm_warp_vec8", "sm_90"] == 0


def test_half2_steps_use_4_byte_loads():
    for s in ("02_layernorm_half2_shfl", "04_gelu_half2", "07_bias_gelu_half2", "13_patch_embed_half2_fma",
              "21_transpose_half2", "23_softmax_half2_shfl"):
        assert build.ptx("vision", s, grep=r"ld\.global(\.nc)?\.(u32|b32)"), s


def test_fma_claims_are_visible_in_ptx():
    # the compiler contracts a * b + c on its own: the "before" bilinear mix already has its FMAs
    steps = ("14_pos_interp_mul_add", "15_pos_interp_fma")
    fma = {s: len(build.ptx("vision", s, grep=r"^fma\.rn(\.ftz)?\.f32")) for s in steps}
    mul = {s: len(build.ptx("vision", s, grep=r"^mul(\.rn)?(\.ftz)?\.f32")) for s in steps}
    assert fma == {s: 3 for s in steps} and mul == {s: 1 for s in steps}
    # and gelu_approx's x + 0.044715 x^3 is an FMA before the seed wrote __fmaf_rn
    assert build.ptx("vision", "04_gelu_half2", grep=r"^fma\.rn(\.ftz)?\.f32.*0f3D372713")
    assert build.ptx("vision", "06_gelu_vec8_exp", grep=r"ex2\.approx")


def _walk(order, H, N, D, threads=32, vec=8):
    """The half-element offsets that threads 0..threads-1 of the first block read and write in a
    transpose [H, N, D] -> [N, H * D] (the index math of vision_22 / vision_29, in NumPy)."""
    P = D // vec
    item = np.arange(threads)
    c, rest = item % P, item // P
    if order == "output":                     # step 22: item -> (t, h, c)
        h, t = rest % H, rest // H
    else:                                     # step 29: item -> (h, t, c)
        t, h = rest % N, rest // N
    return (h * N + t) * D + vec * c, (t * H + h) * D + vec * c


def _runs(offsets, vec=8):
    """Contiguous runs in a warp's 16-byte accesses (1 = one stream)."""
    o = np.sort(offsets)
    return int(1 + (np.diff(o) != vec).sum())


def test_transpose_walks_input_order_vs_output_order():
    """Step 29 walks the input in order (the seed's section 4.4): a warp reads one contiguous run and
    its writes jump each time the token moves on; step 22 walks the output in order: the writes are
    one run and the reads jump each time the head moves on. Same loads, same grid (the PTX has the
    same memory instructions)."""
    H, N, D = v.HEADS, 1024, v.HEAD_DIM
    rd, wr = _walk("input", H, N, D)
    assert _runs(rd) == 1 and _runs(wr) == -(-32 // (D // 8))       # 32 threads over runs of 9: 4 runs
    rd, wr = _walk("output", H, N, D)
    assert _runs(wr) == 1 and _runs(rd) == -(-32 // (D // 8))
    mem = lambda s: sorted(l.split()[0] for l in build.ptx("vision", s, grep=r"^(ld|st)\.global"))   # noqa: E731
    assert mem("29_transpose_input_order") == mem("22_transpose_vec8")


# ---- ablations (issue 17): each bundled pair, one change at a time ------------------------------

def test_ablation_pairs_name_recorded_families_and_real_steps():
    kinds = set()
    for label, (fam, before, after, changes) in v.ABLATION_PAIRS.items():
        assert fam in v.FAMILIES and {before, after} <= set(fam.variants), label
        for what, with_it, without in changes:
            assert {with_it, without} <= set(fam.variants) and with_it == after, (label, what)
            kinds.add(without)
        assert set(fam.variants) <= set(v.ABLATION_STEPS) or fam is v.GELU, label
    assert len(v.ABLATION_STEPS) == len(set(v.ABLATION_STEPS))
    assert sum(len(f.RECORD_CASES) for f in v.ABLATION) <= 12
    assert len({f.OP for f in v.ABLATION}) == len(v.ABLATION) and not {f.OP for f in v.ABLATION} & \
        {f.OP for f in v.FAMILIES if f not in v.ABLATION}


def test_the_fmaf_rewrite_of_the_gelu_steps_is_no_change_in_the_ptx():
    """gelu_approx's __fmaf_rn (steps 05 and 08) compiles to the same f32 arithmetic as a * b + c:
    nvcc contracts it by itself, so 04 -> 05 and 07 -> 08 change only the width. Step 19's explicit
    fma(a, c, -(b * s)) does change its arithmetic (a neg and an fma for a sub and a mul)."""
    for arch in build.ARCHS:
        assert not v.fmaf_changes("05_gelu_vec8", arch) and not v.fmaf_changes("08_bias_gelu_vec8", arch)
        assert v.fmaf_changes("19_split_rope_fma", arch)


def test_rope_fma_saves_no_ptx_instruction():
    """The seed: fma(q1, cos, -(q2 sin)) 'saves an instruction'. In the PTX both steps have the same
    number of f32 arithmetic instructions: 18 already has an FMA per pair (contracted), 19 trades a
    sub and a mul for a neg and an fma."""
    o18, o19 = v.f32_ops("18_split_rope_scalar"), v.f32_ops("19_split_rope_fma")
    assert o18 == {"fma": 2, "mul": 6, "sub": 2} and o19 == {"fma": 4, "mul": 4, "neg": 2}
    assert sum(o18.values()) == sum(o19.values())
    assert v.f32_ops("04_gelu_half2")["fma"] > 0 and "sub" not in v.f32_ops("05_gelu_vec8")


@pytest.mark.parametrize("arch", build.ARCHS)
def test_each_ablation_differs_from_its_step_in_its_switch(arch):
    ptx = lambda s, pat: build.ptx("vision", s, arch, grep=pat)   # noqa: E731
    n = lambda s, pat: len(ptx(s, pat))                          # noqa: E731
    ld16 = r"ld\.global\.nc\.v4\.u32"
    # 25: two vectors (4 16-byte loads) vs one (2); unsigned vs signed remainder for the bias column
    assert n("25_bias_gelu_vec8_x2", ld16) == 2 * n("25_ablate_one_vector", ld16) == 4
    assert ptx("25_bias_gelu_vec8_x2", r"rem\.u32") and not ptx("25_bias_gelu_vec8_x2", r"rem\.s32")
    assert ptx("25_ablate_signed_index", r"rem\.s32") and n("25_ablate_signed_index", ld16) == 4
    # 27 and 28: 3 loads in flight vs 1; 32-bit vs 64-bit division; shared memory or none
    for step in ("27_split_rope_tile", "28_transpose_tile"):
        nn = step[:2]
        assert n(step, r"ld\.global\.nc\.v4") == 3 * n(f"{nn}_ablate_one_in_flight", r"ld\.global\.nc\.v4")
        assert ptx(f"{nn}_ablate_index64", r"div\.s64") and not ptx(step, r"div\.s64")
        assert ptx(f"{nn}_ablate_tile8", r"shl\.b32.*, 3;") and ptx(step, r"shl\.b32.*, 4;")
    assert ptx("28_transpose_tile", r"bar\.sync") and not ptx("28_ablate_no_smem", r"bar\.sync|st\.shared")
    assert ptx("27_ablate_one_pass", r"%nctaid\.z") and not ptx("27_split_rope_tile", r"%nctaid\.z")



# ---- the seed's kernels in the seed's forms (issue 34 item 5) -------------------------------------

def test_the_seeds_forms_are_steps_of_their_families():
    t = list(v.TRANSPOSE.variants)
    assert t[:4] == ["31_transpose_input_half2", "29_transpose_input_order", "21_transpose_half2", "22_transpose_vec8"]
    assert list(v.TRANSPOSE_TOKEN_HEAD.variants) == ["32_transpose_token_head_half2", "33_transpose_token_head_vec8"]
    assert list(v.SPLIT_ROPE_F16.variants) == ["34_split_rope_scalar_f16tab", "35_split_rope_fma_f16tab"]
    for f in (v.TRANSPOSE_TOKEN_HEAD, v.SPLIT_ROPE_F16):
        assert f in v.FAMILIES and f.name == "vision" and f.op not in {g.op for g in v.FAMILIES if g is not f}
    for s in ("31_transpose_input_half2", "32_transpose_token_head_half2", "33_transpose_token_head_vec8",
              "34_split_rope_scalar_f16tab", "35_split_rope_fma_f16tab"):
        assert "// Why:" in build.step_source("vision", f"vision_{s}")


def test_the_seeds_fp16_tables_and_their_reference():
    """rope_tables_f16: [N, D] fp16, the D/2 angles written twice, each the fp32 table's value rounded to
    fp16; with such tables the full-table reference is the half-table reference on the same values."""
    c32, s32 = v.rope_tables(4, 6, 12)
    c16, s16 = v.rope_tables_f16(4, 6, 12)
    assert c16.shape == s16.shape == (24, 12) and c16.dtype == np.float16
    assert (c16[:, :6] == c16[:, 6:]).all() and (c16[:, :6] == c32.astype(np.float16)).all()
    assert (s16[:, 6:] == s32.astype(np.float16)).all()
    qkv, c, s = v.SPLIT_ROPE_F16.make_input((4, 6, 2, 12), "float16", "hostile", seed=3)
    assert c.dtype == np.float16 and c.shape == (24, 12)
    got = v._sr16_ref(qkv, c, s)
    want = v._split_rope_ref(qkv, c[:, :6].astype(np.float64), s[:, :6].astype(np.float64), 2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # a table whose halves differ: out[d + D/2] takes cos/sin[d + D/2], as the seed's kernel reads them
    c2, s2 = c.astype(np.float64), s.astype(np.float64)
    c2[:, 6:], s2[:, 6:] = 0.5, 0.25
    q = v._sr16_ref(qkv, c2, s2)[0]
    x = qkv.astype(np.float64).reshape(24, 3, 2, 12)[:, 0]
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(q[:, :, 6:], (x[..., 6:] * 0.5 + x[..., :6] * 0.25).transpose(1, 0, 2))


def test_transpose_token_head_reference_inverts_transpose_head_token():
    (x,) = v.TRANSPOSE_TOKEN_HEAD.make_input((7, 3, 10), "float16", "hostile")
    o = v.ref_transpose_token_head(x)
    assert o.shape == (3, 7, 10)
    back = v.ref_transpose_head_token(o).reshape(7, 3, 10)
    np.testing.assert_array_equal(back.view(np.uint64), x.astype(np.float64).view(np.uint64))


@pytest.mark.parametrize("arch", build.ARCHS)
def test_ptx_of_the_seeds_forms(arch):
    ptx = lambda s, pat: build.ptx("vision", s, arch, grep=pat)   # noqa: E731
    mem = lambda s: [ln.split()[0] for ln in ptx(s, r"^(ld|st)\.global")]   # noqa: E731
    # 31 -> 29 and 32 -> 33: 4-byte (half2) loads, then 16-byte ones (with the 2- and 1-half fallbacks)
    for half2, vec8 in (("31_transpose_input_half2", "29_transpose_input_order"),
                        ("32_transpose_token_head_half2", "33_transpose_token_head_vec8")):
        assert not ptx(half2, r"\.v4\.") and ptx(half2, r"ld\.global(\.nc)?\.(u32|b32)"), half2
        assert ptx(vec8, r"ld\.global\.nc\.v4\.u32") and ptx(vec8, r"st\.global\.v4\.u32"), vec8
    assert sorted(mem("31_transpose_input_half2")) == sorted(mem("21_transpose_half2"))   # same loads, another walk
    # 34, 35: the seed's fp16 tables, 4 halves per pair (cos[d], sin[d], cos[d + D/2], sin[d + D/2]); 18, 19 read
    # one fp32 cos and sin per pair
    for s16, s32 in (("34_split_rope_scalar_f16tab", "18_split_rope_scalar"), ("35_split_rope_fma_f16tab", "19_split_rope_fma")):
        assert not ptx(s16, r"ld\.global(\.nc)?\.f32") and len(ptx(s32, r"ld\.global(\.nc)?\.f32")) >= 2, s16
        assert len(ptx(s16, r"ld\.global(\.nc)?\.(u16|b16)")) >= len(ptx(s32, r"ld\.global(\.nc)?\.(u16|b16)")) + 4, s16
    assert ptx("35_split_rope_fma_f16tab", r"ld\.global\.nc\.v4\.u32") and not ptx("34_split_rope_scalar_f16tab", r"\.v4\.")


def test_the_seeds_rope_fma_is_step_19s_arithmetic():
    """35 makes 19's change of arithmetic over 34 (fma(a, c, -(b s)): a neg and an fma for a sub and a mul)."""
    assert v.f32_ops("34_split_rope_scalar_f16tab") == v.f32_ops("18_split_rope_scalar")
    assert v.f32_ops("35_split_rope_fma_f16tab") == v.f32_ops("19_split_rope_fma")


def test_the_seeds_transpose_before_walks_as_its_after():
    """Step 31 walks (h, t, c) in input order as step 29, at 2 halves: two warps (64 threads, 36 per
    head row of 72) read one run and write two (the token moves on); step 21's output order the reverse."""
    H, N, D = v.HEADS, 1024, v.HEAD_DIM
    rd, wr = _walk("input", H, N, D, threads=64, vec=2)
    assert _runs(rd, vec=2) == 1 and _runs(wr, vec=2) == 2
    rd, wr = _walk("output", H, N, D, threads=64, vec=2)
    assert _runs(wr, vec=2) == 1 and _runs(rd, vec=2) == 2


# The seed's forms run on the CPU (core.emulate: every block of the grid) against the family's reference.
def _emulate(step, arrays, scalars, grid, block):
    from kernellab.core import emulate
    if emulate.compiler() is None:
        pytest.skip("no C++ compiler: the CPU emulation cannot run the kernels")
    text = build.source("vision")
    src = text[:text.index("// === ")] + build.step_source("vision", f"vision_{step}")
    return emulate.run(src, f"vision_{step}", arrays, scalars, grid, block, list(range(int(np.prod(grid)))))[0]


def _on_cpu(step, host):
    """step's kernel on the CPU with its launcher's launch (NumPy bases are aligned)."""
    if step.startswith(("34", "35")):
        qkv, c, s = host
        N, D = c.shape
        H = qkv.shape[1] // (3 * D)
        outs = [np.zeros((H, N, D), np.float16) for _ in range(3)]
        extra = [int(D % 8 == 0)] if step.startswith("35") else []
        return tuple(_emulate(step, [qkv, c, s, *outs], [N, H, D, *extra], (H, N), (64 if step.startswith("34") else 128,))[3:])
    (x,) = host
    if step.startswith("31"):
        H, N, D = x.shape
        out = np.zeros((N, H * D), np.float16)
    else:
        N, H, D = x.shape
        out = np.zeros((H, N, D), np.float16)
    vec = (8 if D % 8 == 0 else 2 if D % 2 == 0 else 1) if step.startswith("33") else int(D % 2 == 0)
    per = vec if step.startswith("33") else 2
    return _emulate(step, [x, out], [H, N, D, vec], (max(1, -(-H * N * -(-D // per) // 256)),), (256,))[1]


SEED_FORMS = {"31_transpose_input_half2": "TRANSPOSE", "32_transpose_token_head_half2": "TRANSPOSE_TOKEN_HEAD",
              "33_transpose_token_head_vec8": "TRANSPOSE_TOKEN_HEAD", "34_split_rope_scalar_f16tab": "SPLIT_ROPE_F16",
              "35_split_rope_fma_f16tab": "SPLIT_ROPE_F16"}


@pytest.mark.parametrize("step", sorted(SEED_FORMS))
def test_the_seeds_forms_on_the_cpu_match_the_reference(step):
    from kernellab import check
    f = getattr(v, SEED_FORMS[step])
    cases = [(s, val) for s, val in f.check_cases if np.prod(s) and np.prod(s) <= 40000][:8]
    assert len(cases) >= 4
    for i, (shape, values) in enumerate(cases):
        host = f.make_input(shape, "float16", values, seed=i)
        for g, w in check._pairs(_on_cpu(step, host), f.reference(*host)):
            check.check(g, w, name=f"{step} {shape} {values}", quiet=True)


def test_the_seeds_forms_define_only_their_kernels():
    """A Why comment's parenthesis read as a definition would tie every vision step's fingerprint to the new slice."""
    defines = fingerprint._file("vision")[2]
    for step in SEED_FORMS:
        assert defines[f"vision_{step}"] == {f"vision_{step}"}, (step, defines[f"vision_{step}"])


def test_the_limiters_of_the_kernels_short_of_their_floor_make_one_bullet_each():
    """With the recorded Nsight Compute readings, vision_limits_text names each of the five steps with its
    counters and the one rule's verdict (not the no-readings line); the floor's fraction only beside the steps
    that move the floor copy's bytes; with none recorded, the no-readings line alone."""
    import pandas as pd
    from kernellab.core import bench, results
    fams = v.report._limit_families()
    steps = [f.limiters[0][0] for f in fams]
    assert v.vision_limits_text(None) == v.NO_COUNTERS
    assert v.vision_limits_text([None] * len(fams)) == v.NO_COUNTERS
    lims = [results.limiters(f) for f in fams]
    if all(t is None for t in lims):
        pytest.skip("no vision limiter readings recorded")
    res = pd.concat([bench.compare(f, f.record_cases) for f in (*fams, v.SPATIAL_MERGE)], ignore_index=True)
    s = v.vision_limits_text(lims, res)
    assert v.NO_COUNTERS not in s and "%" in s and s.count("\n* ") == len(fams) - 1
    for step, line in zip(steps, s.splitlines()):
        assert f"`{step}`" in line and "occupancy" in line
        assert ("its floor" in line) == (step in v.report.SAME_BYTES_AS_FLOOR), line
    # the floor holds for a step only where its bytes are the floor copy's (LayerNorm adds its weights)
    d = results.one_source(res[res["device"] == v.report._ncu_device()])
    floor = results.pick(d, v.report.FLOOR_COPY, "bytes", case=v.SPATIAL_MERGE.case_key((max(v.TOKENS), 1152)))
    for f in fams:
        step, shape, dt, _ = f.limiter_cases()[0]
        b = results.pick(d, step, "bytes", case=f.case_key(shape, dt))
        assert (abs(b / floor - 1) < 1e-3) == (step in v.report.SAME_BYTES_AS_FLOOR), (step, b, floor)


def test_the_layernorm_sweep_reads_its_worst_floor_fraction_and_step_36_against_03():
    """ln_sweep.text names the hidden size where the fastest step is furthest from the memcpy of its bytes and
    judges it by the noise rule (missed at 0.5 of the floor, met at 1.0); the table has a row per size; with no
    rows, it says the sweep is not recorded. On the recorded frame the same calls run."""
    import pandas as pd
    from kernellab.core import bench
    S = v.ln_sweep
    rows = []
    for i, k in enumerate(S.KEYS):
        slow = 2.0 if i == 2 else 1.0                                # hidden 4096: the step takes twice the memcpy's time
        for nm, kind, t in (("03_layernorm_warp_vec8", "variant", 25.0), ("36_layernorm_row_block", "variant", 10 * slow),
                            (bench.MEMCPY, "baseline", 10.0), (S.TORCH, "baseline", 30.0)):
            rows.append((k, nm, kind, t, t * 0.99, t * 1.01, 0.9 / slow, 0.9 / slow))
    df = pd.DataFrame(rows, columns=["case", "name", "kind", "median_us", "p10_us", "p90_us", "frac_copy", "frac_read"])
    df["device"], df["date"], df["source"] = "GPU X", "2026-01-01", "recorded"
    s = S.text(df)
    assert f"`{S.KEYS[2]}`: **0.50**" in s and "missed" in s and "faster than `03_layernorm_warp_vec8`" in s, s
    assert len(S.table(df)) == len(S.KEYS) and S.worst_of_floor(df).value == pytest.approx(0.5)
    df.loc[df["name"] == "36_layernorm_row_block", "median_us"] = 10.0
    assert "met" in S.text(df) and "missed" not in S.text(df)
    assert "not recorded yet" in S.text(df.iloc[:0])
    rec = bench.compare(v.LAYERNORM, v.LN_SWEEP)
    assert len(S.table(rec)) == (len(S.KEYS) if len(rec) else 0) and S.text(rec)


def test_pairs_rows_name_recorded_steps_at_recorded_cases(monkeypatch):
    # the tables that replaced the sentences under each kernel's timings: every row finds both times in the record
    import pandas as pd
    from kernellab.core import device, results
    shown = []
    monkeypatch.setattr(results, "pairs", lambda d, rows, title: shown.append((title, rows, d)))
    rec = pd.concat([device.load_recorded("vision"), device.load_recorded("vision_ablation")], ignore_index=True)
    for kernel in v.PAIRS:
        v.pairs(kernel, rec)
    for title, rows, d in shown:
        assert rows and all(results.ratio_band(d, a, b, c).ok for _, a, b, c, *_ in rows), title
    assert len(shown) == len(v.PAIRS) == 10
