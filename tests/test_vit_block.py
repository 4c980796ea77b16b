"""Everywhere (no GPU needed): lab 06's float64 references of the ViT block, merger and tower,
their properties, the error bound, the call counts against the report, and bad input."""
import numpy as np
import pytest

from kernellab import vit_block as vb


@pytest.fixture(scope="module")
def layer():
    return vb.make_layer(0)


@pytest.fixture(scope="module")
def merger():
    return vb.make_merger(0)


def test_block_reference_shape_scale_and_determinism(layer):
    x = vb.make_input(8, 8)
    y = vb.reference_block(x, layer, 8, 8)
    assert y.shape == (64, vb.HIDDEN) and y.dtype == np.float64 and np.isfinite(y).all()
    assert 0.3 < y.std() < 5                        # unit-scale weights keep unit-scale activations
    np.testing.assert_array_equal(y, vb.reference_block(x, layer, 8, 8))
    assert not np.allclose(y, x.astype(np.float64), atol=1e-2)   # the block does something


def test_block_is_the_identity_when_its_branches_are_zero(layer):
    W = dict(layer)
    for k in ("proj_w", "proj_b", "fc2_w", "fc2_b"):
        W[k] = np.zeros_like(W[k])
    x = vb.make_input(6, 10)
    np.testing.assert_array_equal(vb.reference_block(x, W, 6, 10), x.astype(np.float64))


def test_attention_mixes_tokens_and_mlp_does_not(layer):
    """Change one token: with attention on, every output token moves; with the attention
    branch zeroed (proj = 0) only that token moves."""
    x = vb.make_input(4, 4)
    x2 = x.copy()
    x2[5] += np.float16(1.0)
    moved = lambda W: np.abs(vb.reference_block(x2, W, 4, 4) - vb.reference_block(x, W, 4, 4)).max(1) > 1e-9  # noqa: E731
    assert moved(layer).all()
    W = dict(layer)
    W["proj_w"], W["proj_b"] = np.zeros_like(W["proj_w"]), np.zeros_like(W["proj_b"])
    assert moved(W).tolist() == [i == 5 for i in range(16)]


def test_rope_is_a_rotation_that_sees_only_relative_positions():
    rng = np.random.default_rng(0)
    gh, gw = 6, 10
    cos, sin = vb.rope_cos_sin(gh, gw)
    where = {tuple(p): t for t, p in enumerate(vb.positions(gh, gw).tolist())}
    t = rng.standard_normal((vb.HEADS, gh * gw, vb.HEAD_DIM))
    rt = vb.ref_rope(t, cos, sin)
    np.testing.assert_allclose(np.linalg.norm(rt, axis=-1), np.linalg.norm(t, axis=-1), rtol=1e-12)
    # the same q and k vectors at positions shifted together by (1, 2) give the same score
    q, k = rng.standard_normal(vb.HEAD_DIM), rng.standard_normal(vb.HEAD_DIM)
    tok = lambda r, c: where[(r, c)]  # noqa: E731
    score = lambda a, b: vb.ref_rope(q, cos[a], sin[a]) @ vb.ref_rope(k, cos[b], sin[b])  # noqa: E731
    assert score(tok(0, 0), tok(2, 3)) == pytest.approx(score(tok(1, 2), tok(3, 5)), rel=1e-12)
    assert abs(score(tok(0, 0), tok(2, 3)) - score(tok(0, 0), tok(3, 2))) > 1e-6   # rows and columns differ
    # token 0 sits at position (0, 0): not rotated
    np.testing.assert_allclose(rt[:, 0], t[:, 0], rtol=1e-12)


def test_softmax_reference_rows_sum_to_one():
    s = np.random.default_rng(1).standard_normal((3, 5, 7)) * 30
    p = vb.ref_softmax(s)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-12)
    assert (p >= 0).all()


def test_gelu_reference_is_the_tanh_approximation():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(vb.ref_gelu(x), want, rtol=1e-15)


def test_fp16_storage_error_is_inside_the_bound(layer):
    """The emulation of what the GPU stores (every intermediate rounded to fp16) lands inside the
    first-order bound, and is not zero (the bound is not vacuous)."""
    assert vb.STAGES == 14
    for gh, gw in [(8, 8), (2, 6)]:
        x = vb.make_input(gh, gw, seed=gh)
        e = vb.rel_err(vb.reference_block(x, layer, gh, gw, fp16_storage=True), vb.reference_block(x, layer, gh, gw))
        assert 1e-5 < e < vb.error_bound(), e


def test_hostile_tokens_stay_finite_and_nan_spreads_everywhere(layer):
    x = vb.make_input(4, 4, "hostile")
    assert np.abs(x[0]).max() == np.float16(60000) and (x[1] == 0).all()
    y = vb.reference_block(x, layer, 4, 4)
    assert np.isfinite(y).all()
    y = vb.reference_block(vb.make_input(4, 4, "nan"), layer, 4, 4)
    assert np.isnan(y).all()                         # one NaN key poisons every query's softmax row


def test_merge_index_is_the_2x2_window_gather():
    gh, gw = 4, 6
    idx, pos = vb.merge_index(gh, gw), vb.positions(gh, gw)
    assert idx.shape == (6, 4)
    assert sorted(idx.ravel().tolist()) == list(range(24))
    windows = set()
    for m in range(6):
        (r, c) = pos[idx[m, 0]]
        assert r % 2 == 0 and c % 2 == 0
        assert pos[idx[m]].tolist() == [[r, c], [r, c + 1], [r + 1, c], [r + 1, c + 1]]
        windows.add((r, c))
    assert len(windows) == 6


def test_merger_reference_shape_and_merge(merger):
    x = vb.make_input(4, 6)
    y = vb.reference_merger(x, merger, 4, 6)
    assert y.shape == (6, vb.MERGE_OUT) and np.isfinite(y).all()
    # fp16 storage emulation stays in the same first-order bound (7 stages)
    e = vb.rel_err(vb.reference_merger(x, merger, 4, 6, fp16_storage=True), y)
    assert e < vb.error_bound(len(vb.MERGER_PLAN))


def test_position_interpolation_hits_the_table_on_its_own_grid():
    P = vb.make_patch(0)
    pos = P["pos"].astype(np.float64)
    t = pos.reshape(48, 48, -1)
    rc = vb.positions(48, 48)
    np.testing.assert_allclose(vb.ref_pos_interpolate(pos, 48, 48), t[rc[:, 0], rc[:, 1]], rtol=1e-12)
    got = vb.ref_pos_interpolate(pos, 4, 4)[3]          # token 3: position (1, 1), at 47/3 = 15.67
    d = 47 / 3 - 15
    want = (1 - d) ** 2 * t[15, 15] + (1 - d) * d * (t[15, 16] + t[16, 15]) + d * d * t[16, 16]
    assert vb.positions(4, 4)[3].tolist() == [1, 1]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_small_tower_reference():
    W = vb.weights(layers=2)
    assert len(W.mergers) == 1                    # no DeepStack block among the first two
    patches = vb.make_input(4, 4, width=vb.PATCH_DIM)
    out, deep = vb.reference_tower(patches, W, 4, 4)
    assert out.shape == (4, vb.MERGE_OUT) and deep == [] and np.isfinite(out).all()


def test_call_counts_match_the_report():
    cc = vb.call_counts().set_index("kernel")
    for k in ["layernorm_with_bias_fp16_kernel", "bias_gelu_fp16_kernel", "fused_split_rope_transpose_kernel",
              "vision_softmax_fp16_kernel", "transpose_head_token_kernel", "gelu_fp16_kernel",
              "spatial_merge_fp16_kernel", "pos_embed_interpolate_fp16_kernel"]:
        assert cc.loc[k, "here"] == cc.loc[k, "report"] == vb.REPORT_COUNTS[k]
    assert cc.loc["layernorm_with_bias_fp16_kernel", "here"] == 58
    assert cc.loc["bias_add_residual_fp16_kernel", "here"] == 89 + 1        # the patch bias + position add
    assert cc.loc["cublasHgemm", "here"] == 27 * 4 + 4 * 2 + 1
    assert len(vb.tower_plan()) == 3 + 27 * 15 + 4 * 7


@pytest.mark.parametrize("shape, grid, match", [
    ((64, 1024), (8, 8), "hidden size 1152"),
    ((64,), (8, 8), "hidden size 1152"),
    ((63, 1152), (8, 8), "N must equal grid_h x grid_w"),
    ((35, 1152), (5, 7), "even grid_h and grid_w"),
    ((36, 1152), (2, 18), None),
    ((0, 1152), (0, 4), "must be >= 1"),
])
def test_bad_input_raises_value_error(shape, grid, match):
    if match is None:
        assert vb.validate(np.zeros(shape, np.float16), *grid) == grid
        return
    with pytest.raises(ValueError, match=match):
        vb.validate(np.zeros(shape, np.float16), *grid)


def test_references_validate_too(layer, merger):
    with pytest.raises(ValueError, match="N must equal"):
        vb.reference_block(vb.make_input(4, 4), layer, 4, 6)
    with pytest.raises(ValueError, match="even"):
        vb.reference_merger(vb.make_input(3, 4), merger, 3, 4)
    bad = dict(layer)
    bad["qkv_w"] = bad["qkv_w"][:, :100]
    with pytest.raises(ValueError, match="qkv_w expected shape"):
        vb.reference_block(vb.make_input(2, 2), bad, 2, 2)
    with pytest.raises(ValueError, match="patches"):
        vb.reference_patch(vb.make_input(2, 2), vb.make_patch(0), 2, 2)   # 1152 wide, not 1536


def test_orin_model_is_labelled_and_scales():
    m = vb.orin_model((1024, 4096))
    assert (m["model tokens/s (upper bound)"] > 0).all() and m["assumes"].str.contains("GB/s").all()
    w1, w4 = vb.work(1024), vb.work(4096)
    assert 4 < w4["flops"] / w1["flops"] < 16          # linear GEMMs + quadratic attention


def test_grid_for():
    assert vb.grid_for(4096) == (64, 64) and vb.grid_for(400) == (20, 20)
    with pytest.raises(ValueError):
        vb.grid_for(300)


def test_block_pieces_agree_with_lab_05s_references():
    """The block's reference uses lab 05's conventions: same rotary (window order, row then column
    frequencies), same 2x2 merge, same position interpolation, LayerNorm and GELU."""
    from kernellab import vision as V
    rng = np.random.default_rng(3)
    gh, gw = 4, 6
    qkv = rng.standard_normal((gh * gw, vb.QKV))
    cos, sin = vb.rope_cos_sin(gh, gw)
    q, k, v = qkv.reshape(-1, 3, vb.HEADS, vb.HEAD_DIM).transpose(1, 2, 0, 3)
    rq, rk, rv = V.ref_split_rope_transpose(qkv, gh, gw)
    np.testing.assert_allclose(vb.ref_rope(q, cos, sin), rq, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vb.ref_rope(k, cos, sin), rk, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(v, rv)
    x = rng.standard_normal((gh * gw, vb.HIDDEN))
    np.testing.assert_array_equal(x[vb.merge_index(gh, gw)].reshape(-1, vb.MERGE_IN), V.ref_spatial_merge(x, gh, gw))
    pos = vb.make_patch(0)["pos"].astype(np.float64)
    np.testing.assert_allclose(vb.ref_pos_interpolate(pos, gh, gw), V.ref_pos_embed_interpolate(pos, gh, gw),
                               rtol=1e-12)
    w, b = rng.standard_normal(vb.HIDDEN), rng.standard_normal(vb.HIDDEN)
    np.testing.assert_allclose(vb.ref_layernorm(x, w, b), V.ref_layernorm(x, w, b), rtol=1e-12)
    np.testing.assert_allclose(vb.ref_gelu(x), V.ref_gelu(x), rtol=1e-12)


def test_lab_05s_public_api_is_what_the_block_calls():
    """The launchers the block is built from keep the names and out= arguments it passes."""
    import inspect
    from kernellab import vision as V
    need = {"layernorm": {"x", "weight", "bias", "out"}, "bias_add_residual": {"x", "bias", "residual", "out"},
            "bias_gelu": {"x", "bias", "out"}, "gelu": {"x", "out"}, "softmax": {"scores", "out"},
            "split_rope_transpose": {"qkv", "grid_h", "grid_w", "out"}, "transpose_head_token": {"o", "out"},
            "spatial_merge": {"x", "grid_h", "grid_w", "out"},
            "pos_embed_interpolate": {"pos_table", "grid_h", "grid_w", "out"}}
    for name, params in need.items():
        assert params <= set(inspect.signature(getattr(V, name)).parameters), name
    assert vb.REPORT_COUNTS["layernorm_with_bias_fp16_kernel"] == 58


@pytest.mark.parametrize("postshuffle", [False, True], ids=["main merger", "DeepStack merger"])
def test_merger_reference_matches_transformers_qwen3_vl(postshuffle):
    """The float64 merger reference in Qwen3-VL's form (erf GELU; a DeepStack merger normalises
    after the 2x2 shuffle, over 4608) against transformers' Qwen3VLVisionPatchMerger loaded with
    the same weights, in float64. Runs where transformers is installed (the `peers` extra)."""
    torch = pytest.importorskip("torch")
    qv = pytest.importorskip("transformers.models.qwen3_vl.modeling_qwen3_vl")
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    cfg = Qwen3VLVisionConfig(hidden_size=vb.HIDDEN, spatial_merge_size=2, out_hidden_size=vb.MERGE_OUT)
    M = vb.make_merger(3, postshuffle=postshuffle)
    m = qv.Qwen3VLVisionPatchMerger(cfg, use_postshuffle_norm=postshuffle).double().eval()
    with torch.no_grad():
        for mod, w, b in ((m.norm, "ln_w", "ln_b"), (m.linear_fc1, "fc1_w", "fc1_b"), (m.linear_fc2, "fc2_w", "fc2_b")):
            mod.weight.copy_(torch.from_numpy(M[w].astype(np.float64)))
            mod.bias.copy_(torch.from_numpy(M[b].astype(np.float64)))
        x = vb.make_input(4, 6, seed=5)                       # tokens in merge-window order, as the model has them
        want = m(torch.from_numpy(x.astype(np.float64))).numpy()
    got = vb.reference_merger(x, M, 4, 6, postshuffle=postshuffle, gelu="erf")
    assert got.shape == want.shape == (6, vb.MERGE_OUT)
    assert vb.rel_err(got, want) < 1e-12
    # the report's drawing (LN over 1152 first, tanh GELU) is a different function of the same input
    if not postshuffle:
        assert vb.rel_err(vb.reference_merger(x, M, 4, 6), want) > 1e-6


def test_tower_reference_in_both_drawings():
    """model="qwen3-vl" gives the DeepStack mergers a 4608-wide norm and every merger the erf GELU;
    the report's drawing stays the default."""
    W = vb.weights(layers=9, seed=1, model="qwen3-vl")
    assert W.mergers[0]["ln_w"].shape == (vb.HIDDEN,) and W.mergers[1]["ln_w"].shape == (vb.MERGE_IN,)
    p = vb.make_input(4, 4, seed=2, width=vb.PATCH_DIM)
    main, deep = vb.reference_tower(p, W, 4, 4, model="qwen3-vl")
    assert main.shape == (4, vb.MERGE_OUT) and len(deep) == 1 and np.isfinite(deep[0]).all()
    with pytest.raises(ValueError, match="model must be one of"):
        vb.reference_tower(p, W, 4, 4, model="qwen3")
    with pytest.raises(ValueError, match="merger"):             # a 1152-wide norm cannot normalise after the shuffle
        vb.reference_merger(vb.make_input(4, 4), vb.make_merger(0), 4, 4, postshuffle=True)


def test_tower_reference_matches_transformers_qwen3_vl_vision_model():
    """A short tower (2 blocks, a DeepStack merger after block 0) of the float64 reference in
    Qwen3-VL's drawing against transformers' Qwen3VLVisionModel with the same weights, in float64:
    patch embedding (its Conv3d as one GEMM), interpolated position embedding, 2-D rotary, blocks,
    the main merger and the DeepStack merger. transformers keeps its rotary tables, their
    application and its interpolation weights in float32, so the bound is float32's, not float64's.
    The report's drawing of the main merger (tanh GELU) is a different function of the same weights."""
    torch = pytest.importorskip("torch")
    qv = pytest.importorskip("transformers.models.qwen3_vl.modeling_qwen3_vl")
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    gh, gw, depth = 4, 6, 2
    cfg = Qwen3VLVisionConfig(depth=depth, deepstack_visual_indexes=[0], out_hidden_size=vb.MERGE_OUT)
    cfg._attn_implementation = "sdpa"
    m = qv.Qwen3VLVisionModel(cfg).double().eval()
    W = vb.weights(layers=depth, mergers=2, seed=1, model="qwen3-vl")
    f = lambda a: torch.from_numpy(np.asarray(a, np.float64))     # noqa: E731
    sd = {"patch_embed.proj.weight": f(W.patch["w"]).reshape(vb.HIDDEN, 3, 2, 16, 16),
          "patch_embed.proj.bias": f(W.patch["b"]), "pos_embed.weight": f(W.patch["pos"])}
    names = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "qkv", "attn.proj": "proj", "mlp.linear_fc1": "fc1",
             "mlp.linear_fc2": "fc2"}
    for i, L in enumerate(W.layers):
        sd.update({f"blocks.{i}.{hf}.{wb}": f(L[f"{ours}_{wb[0]}"]) for hf, ours in names.items() for wb in ("weight", "bias")})
    for pre, M in (("merger.", W.mergers[0]), ("deepstack_merger_list.0.", W.mergers[1])):
        sd.update({f"{pre}{hf}.{wb}": f(M[f"{ours}_{wb[0]}"]) for hf, ours in
                   (("norm", "ln"), ("linear_fc1", "fc1"), ("linear_fc2", "fc2")) for wb in ("weight", "bias")})
    m.load_state_dict(sd, strict=True)
    patches = vb.make_input(gh, gw, seed=2, width=vb.PATCH_DIM)
    with torch.no_grad():
        out = m(f(patches), grid_thw=torch.tensor([[1, gh, gw]]))
    main, deep = vb.reference_tower(patches, W, gh, gw, model="qwen3-vl", deepstack=(0,))
    assert vb.rel_err(main, out.pooler_output.numpy()) < 1e-5
    assert vb.rel_err(deep[0], out.deepstack_features[0].numpy()) < 1e-5
    # the main merger has the same weights in both drawings: the tanh GELU alone moves its output by
    # well over the agreement above (2e-4 measured, about a dozen fp16 roundings)
    report = vb.reference_tower(patches, vb.weights(layers=depth, mergers=2, seed=1), gh, gw, deepstack=(0,))[0]
    assert vb.rel_err(report, out.pooler_output.numpy()) > 5e-5
