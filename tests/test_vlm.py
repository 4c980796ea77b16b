"""Everywhere (no GPU): lab 09's CPU foundations. Preprocessing against transformers' image processor (PIL),
the NumPy bicubic against PIL, M-RoPE positions and tables against Qwen3VLModel.get_rope_index and
Qwen3VLTextRotaryEmbedding, the text reference against lab 08's, and the whole float64 reference against
Qwen3VLForConditionalGeneration in float64 on a checkpoint written by save_pretrained. The transformers
checks run where torch, transformers and Pillow are installed (the `peers` extra)."""
import inspect

import numpy as np
import pytest

from kernellab import attention as A
from kernellab import decoder as D
from kernellab import vlm as M


def _rgb(h, w, seed=0):
    """A smooth image with some noise (a resize of pure noise is all clipping)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / 7 + c) * np.cos(y / 11 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


# ---- preprocessing ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("hw", [(448, 448), (300, 500), (20, 4000), (5000, 3000), (100, 57), (33, 33)])
def test_smart_resize_rule(hw):
    h, w = M.smart_resize(*hw)
    assert h % 32 == 0 and w % 32 == 0 and M.MIN_PIXELS <= h * w <= M.MAX_PIXELS
    assert abs(np.log((h / w) / (hw[0] / hw[1]))) < 0.5          # the aspect kept, to the 32-pixel grid
    assert M.smart_resize(448, 448) == (448, 448) and M.smart_resize(200, 200) == (256, 256)
    with pytest.raises(ValueError, match="aspect ratio"):
        M.smart_resize(10, 2100)


def test_smart_resize_matches_transformers():
    pytest.importorskip("transformers")
    try:                                    # transformers 5 (the PIL processor's module needs no torchvision)
        from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as mod
    except ImportError:                     # 4.57
        from transformers.models.qwen2_vl import image_processing_qwen2_vl as mod
    for h, w in [(448, 448), (300, 500), (20, 4000), (5000, 3000), (100, 57), (1080, 1920), (70, 130)]:
        for lo, hi in [(M.MIN_PIXELS, M.MAX_PIXELS), (32 * 32, 64 * 32 * 32)]:
            assert M.smart_resize(h, w, 32, lo, hi) == tuple(mod.smart_resize(h, w, 32, lo, hi)), (h, w, lo, hi)


def test_patchify_order_is_merge_windows_and_inverts():
    x = np.random.default_rng(0).standard_normal((3, 64, 96)).astype(np.float32)
    p, gh, gw = M.patchify(x)
    assert p.shape == (gh * gw, M.PATCH_DIM) == (24, 1536)
    np.testing.assert_array_equal(M.unpatchify(p, gh, gw), x)
    # row 1 is the top-right patch of the first 2x2 window: rows 0..15, columns 16..31; frames equal
    r = p[1].reshape(3, 2, 16, 16)
    np.testing.assert_array_equal(r[:, 0], x[:, :16, 16:32])
    np.testing.assert_array_equal(r[:, 1], r[:, 0])
    np.testing.assert_array_equal(p[2].reshape(3, 2, 16, 16)[:, 0], x[:, 16:32, :16])   # bottom-left
    assert M.image_tokens([[1, gh, gw]]) == [6]


def test_resize_numpy_is_pils_resample():
    """Each of PIL's passes is reproduced byte for byte; with both sides changing, Pillow picks which pass
    runs first, and one of the two orders is PIL's result exactly."""
    Image = pytest.importorskip("PIL.Image")
    for h, w, H, W in [(37, 53, 64, 37), (300, 200, 300, 96), (300, 200, 128, 200), (451, 613, 448, 608),
                       (300, 200, 128, 96), (20, 30, 320, 480), (5, 7, 3, 2), (1000, 17, 96, 32), (70, 130, 64, 128)]:
        img = _rgb(h, w, seed=h)
        want = np.asarray(Image.fromarray(img).resize((W, H), Image.Resampling.BICUBIC))
        got = [M.resize_numpy(img, H, W, order) for order in "hv"]
        assert any(np.array_equal(g, want) for g in got), (h, w, H, W)
        if h == H or w == W:
            assert all(np.array_equal(g, want) for g in got)
        np.testing.assert_array_equal(M.resize(img, H, W), want)


def _hf_processor():
    """transformers' PIL image processor with Qwen3-VL-8B-Instruct's settings (vlm.stages.hf_image_processor)."""
    pytest.importorskip("PIL")
    pytest.importorskip("torch")
    from kernellab.vlm.stages import hf_image_processor
    return hf_image_processor()


@pytest.mark.parametrize("hw", [(448, 448), (300, 500), (150, 90)], ids=["square", "non-square", "below min_pixels"])
def test_preprocess_matches_transformers_image_processor(hw):
    from PIL import Image
    proc = _hf_processor()
    img = _rgb(*hw, seed=hw[1])
    want = proc(images=[Image.fromarray(img)], return_tensors="np")
    pv, grid = M.preprocess(img)
    np.testing.assert_array_equal(grid, want["image_grid_thw"])
    assert pv.dtype == np.float32
    np.testing.assert_array_equal(pv, want["pixel_values"])           # exact: same PIL bytes, same float32 ops
    two = proc(images=[Image.fromarray(img), Image.fromarray(_rgb(64, 96))], return_tensors="np")
    pv2, grid2 = M.preprocess([img, _rgb(64, 96)])
    np.testing.assert_array_equal(pv2, two["pixel_values"])
    np.testing.assert_array_equal(grid2, two["image_grid_thw"])


# ---- M-RoPE positions ----------------------------------------------------------------------------------------

def _prompt(rng, grids, vcfg=None, text=(5, 4, 6)):
    """Token ids: text, then per image <vision_start> image tokens <vision_end> and more text."""
    img, vs, ve = (vcfg.image_token_id, vcfg.vision_start_id, vcfg.vision_end_id) if vcfg else (509, 510, 511)
    ids = list(rng.integers(0, 500, text[0]))
    for k, n in enumerate(M.image_tokens(grids)):
        ids += [vs] + [img] * n + [ve] + list(rng.integers(0, 500, text[1 + k % (len(text) - 1)]))
    return np.array(ids)


def test_rope_index_by_hand():
    ids = _prompt(np.random.default_rng(0), [[1, 4, 6]], text=(2, 2))
    pos, delta = M.get_rope_index(ids, [[1, 4, 6]], image_token_id=509)
    # 2 text + vision_start: 0 1 2; the image (2 x 3 merged) from 3; vision_end at 3 + max(2, 3) = 6
    np.testing.assert_array_equal(pos[:, 3:9], [[3] * 6, [3, 3, 3, 4, 4, 4], [3, 4, 5, 3, 4, 5]])
    np.testing.assert_array_equal(pos[:, 9:], [[6, 7, 8]] * 3)
    assert delta == 8 + 1 - 12
    with pytest.raises(ValueError, match="image tokens"):
        M.get_rope_index(ids, [[1, 4, 4]], image_token_id=509)


def test_section_rule_and_text_only_table_is_plain_rope():
    axes = M.section_axes()
    assert (np.bincount(axes) == [24, 20, 20]).all() and (axes[60:] == 0).all() and axes[:6].tolist() == [0, 1, 2] * 2
    pos, delta = M.get_rope_index(np.arange(40), None)
    assert delta == 0
    c, s = M.mrope_table(pos, theta=1e6)
    want = A.rope_table_host(40, 1e6, 128)
    np.testing.assert_array_equal(c, want[0])
    np.testing.assert_array_equal(s, want[1])
    # decode: row s of the shifted table is position s + delta
    c, s = M.shifted_table(16, 5, theta=1e6)
    np.testing.assert_array_equal(c, A.rope_table_host(21, 1e6, 128)[0][5:])


@pytest.fixture(scope="module")
def tiny_hf():
    """A tiny Qwen3VLModel (narrow widths: only its position code is used) with Qwen3-VL's head dim and M-RoPE."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    cfg = tf.Qwen3VLConfig(
        text_config=dict(vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=128,
                         rope_parameters={"rope_type": "default", "rope_theta": M.THETA, "mrope_section": [24, 20, 20],
                                          "mrope_interleaved": True}),
        vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32, out_hidden_size=64,
                           deepstack_visual_indexes=[0]),
        image_token_id=509, video_token_id=508, vision_start_token_id=510, vision_end_token_id=511)
    torch.manual_seed(0)
    return tf.Qwen3VLForConditionalGeneration(cfg).eval()


def _hf_rope_index(model, ids, grids, image_token_id):
    import torch
    kw = {"input_ids": torch.tensor(ids)[None], "image_grid_thw": torch.tensor(grids)}
    if "mm_token_type_ids" in inspect.signature(model.model.get_rope_index).parameters:     # transformers 5
        kw["mm_token_type_ids"] = torch.tensor((np.asarray(ids) == image_token_id).astype(np.int64))[None]
    pos, delta = model.model.get_rope_index(**kw)
    return pos[:, 0].numpy(), int(delta.reshape(-1)[0])


@pytest.mark.parametrize("grids", [[[1, 4, 4]], [[1, 4, 10]], [[1, 12, 6], [1, 6, 8]], [[1, 2, 2], [1, 8, 4], [1, 4, 4]]],
                         ids=["one image", "non-square", "two images", "three images"])
def test_rope_index_and_table_match_transformers(tiny_hf, grids):
    import torch
    ids = _prompt(np.random.default_rng(len(grids)), grids)
    want_pos, want_delta = _hf_rope_index(tiny_hf, ids, grids, 509)
    pos, delta = M.get_rope_index(ids, grids, image_token_id=509)
    np.testing.assert_array_equal(pos, want_pos)
    assert delta == want_delta < 0
    # the rotary table: transformers computes the angles in float32 (|angle| <= ~40 here: ~3e-6 apart)
    rot = tiny_hf.model.language_model.rotary_emb
    x = torch.zeros(1, len(ids), 64, dtype=torch.float64)
    cos_t, sin_t = (a[0, :, :64].numpy() for a in rot(x, torch.from_numpy(pos)[:, None, :]))
    cos, sin = M.mrope_table(pos, theta=M.THETA)
    assert cos.dtype == np.float32 and cos.shape == (len(ids), 64)
    assert np.abs(cos - cos_t).max() < 1e-5 and np.abs(sin - sin_t).max() < 1e-5
    # the test tells layouts apart: Qwen2-VL's chunked sections (t: 0..23, h: 24..43, w: 44..63) do not match
    chunked = np.repeat([0, 1, 2], [24, 20, 20])
    wrong = np.cos(pos.astype(np.float64)[chunked].T * M.THETA ** (-np.arange(64) / 64))
    assert np.abs(wrong - cos_t).max() > 0.1


# ---- the text decoder with M-RoPE and DeepStack ----------------------------------------------------------------

def test_text_reference_is_lab_08s_on_a_text_prompt():
    cfg = D.TINY
    W = D.random_weights(cfg, seed=3)
    tokens = np.random.default_rng(1).integers(0, cfg.vocab, 13)
    pos, _ = M.get_rope_index(tokens, None)
    cos, sin = M.mrope_table(pos, cfg.head_dim, cfg.theta, (4, 2, 2), dtype=np.float64)
    got = M.reference_text(cfg, W, np.asarray(W["model.embed_tokens.weight"], np.float64)[tokens], cos, sin)
    assert D.rel_err(got, D.reference_sequence(cfg, W, tokens)) < 1e-12


def test_deepstack_moves_only_image_rows_and_later():
    cfg = D.TINY
    W = D.random_weights(cfg, seed=4)
    rng = np.random.default_rng(2)
    T, rows = 12, np.array([4, 5, 6, 7])
    emb = rng.standard_normal((T, cfg.hidden))
    cos, sin = M.mrope_table(np.tile(np.arange(T), (3, 1)), cfg.head_dim, cfg.theta, (4, 2, 2), dtype=np.float64)
    base = M.reference_text(cfg, W, emb, cos, sin)
    zero = M.reference_text(cfg, W, emb, cos, sin, (rows, [np.zeros((4, cfg.hidden))] * 2))
    np.testing.assert_array_equal(zero, base)
    feats = [rng.standard_normal((4, cfg.hidden)) for _ in range(2)]
    deep = M.reference_text(cfg, W, emb, cos, sin, (rows, feats))
    moved = np.abs(deep - base).max(1) > 1e-9
    assert moved.tolist() == [t >= 4 for t in range(T)]            # causal: rows before the image are untouched
    with pytest.raises(ValueError, match="feature sets"):
        M.reference_text(cfg, W, emb, cos, sin, (rows, feats * 2))


# ---- the whole model against transformers ----------------------------------------------------------------------

VOCAB = 512


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Qwen3-VL's structure, small: the vision tower at Qwen3-VL-8B's widths (lab 06's: 1152 wide, 16 heads of 72,
    MLP 4304, out 4096), 2 blocks with a DeepStack merger after each; the text model with Qwen3-VL-8B's head layout
    (hidden 4096, 32 query and 8 KV heads of 128, M-RoPE [24, 20, 20], theta 5e6) but 2 layers, FFN 512 and a
    512-token vocabulary (the special tokens at its end). Weights: lab 06's and lab 08's random laws, written by
    save_pretrained in float32 (~1 GB) and read back by both sides: transformers in float64, the reference as
    stored."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    cfg = tf.Qwen3VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=4096, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                                          "mrope_interleaved": True}),
        vision_config=dict(depth=2, deepstack_visual_indexes=[0, 1], out_hidden_size=4096),
        image_token_id=VOCAB - 3, video_token_id=VOCAB - 4, vision_start_token_id=VOCAB - 2,
        vision_end_token_id=VOCAB - 1, tie_word_embeddings=False)
    vc = M.VLMConfig.from_dict(cfg.to_dict())
    sd = {**M.vision_state_dict(M.random_vision(vc, seed=1)), **M.text_state_dict(D.random_weights(vc.text, seed=2))}
    m = tf.Qwen3VLForConditionalGeneration(cfg)
    m.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in sd.items()}, strict=True)
    path = tmp_path_factory.mktemp("qwen3vl")
    m.save_pretrained(path)
    del m, sd
    hf = tf.Qwen3VLForConditionalGeneration.from_pretrained(path, dtype=torch.float64).eval()
    return (*M.load_checkpoint(path, dtype=None), hf)


def _hf_inputs(hf, ids, pv, grid, image_token_id):
    import torch
    kw = {"input_ids": torch.tensor(ids)[None], "pixel_values": torch.from_numpy(pv).double(),
          "image_grid_thw": torch.from_numpy(grid)}
    if "mm_token_type_ids" in inspect.signature(hf.forward).parameters:
        kw["mm_token_type_ids"] = torch.tensor((ids == image_token_id).astype(np.int64))[None]
    return kw


def test_checkpoint_maps_both_ways(checkpoint):
    vc, V, T, _ = checkpoint
    assert vc.deepstack == (0, 1) and vc.vision_depth == 2 and vc.text.hidden == 4096 and vc.text.kv_heads == 8
    assert len(V.mergers) == 3 and V.patch["w"].shape == (1152, 1536) and V.mergers[1]["ln_w"].shape == (4608,)
    assert set(T) == set(D.weight_shapes(vc.text))
    back = M.vision_weights(M.vision_state_dict(V), 2, 2)
    np.testing.assert_array_equal(back.layers[1]["fc2_w"], V.layers[1]["fc2_w"])
    with pytest.raises(ValueError, match="out_hidden_size"):
        M.VLMConfig.from_dict({"text_config": {"hidden_size": 4096}, "vision_config": {"out_hidden_size": 2048}})


@pytest.mark.parametrize("sizes", [[(64, 64)], [(70, 130)], [(70, 130), (64, 64)]],
                         ids=["square image", "non-square image", "two images"])
def test_reference_matches_transformers_qwen3_vl(checkpoint, sizes):
    """The float64 pipeline (our preprocessing -> lab 06's tower per image -> scatter -> text decoder with
    M-RoPE and DeepStack -> logits) against Qwen3VLForConditionalGeneration in float64 on the same
    pixel_values: transformers keeps its rotary angles and position-interpolation weights in float32, so the
    agreement is float32's (7e-7 measured), not float64's. Greedy tokens agree (the margins are far above it)."""
    import torch
    vc, V, T, hf = checkpoint
    pv, grid = M.preprocess([_rgb(*hw, seed=hw[0]) for hw in sizes], min_pixels=32 * 32)
    ids = _prompt(np.random.default_rng(len(sizes)), grid, vc)
    kw = _hf_inputs(hf, ids, pv, grid, vc.image_token_id)
    ref = M.reference_vlm(vc, V, T, ids, pv, grid)
    with torch.no_grad():
        out = hf(**kw)
        vis = hf.model.get_image_features(kw["pixel_values"], kw["image_grid_thw"])
    assert D.rel_err(np.concatenate([f.numpy().reshape(-1, vc.text.hidden) for f in vis.pooler_output]), ref["features"]) < 1e-5
    for j, d in enumerate(vis.deepstack_features):
        assert D.rel_err(np.concatenate([f.numpy().reshape(-1, vc.text.hidden) for f in d]), ref["deep"][j]) < 1e-5
    want = out.logits[0].numpy()
    assert ref["logits"].shape == want.shape == (len(ids), VOCAB)
    assert D.rel_err(ref["logits"], want) < 1e-5
    pos, delta = _hf_rope_index(hf, ids, grid, vc.image_token_id)
    np.testing.assert_array_equal(ref["positions"], pos)
    assert ref["delta"] == delta
    if len(sizes) == 2:                                     # decode after the prompt: the rope delta at work
        with torch.no_grad():
            gen = hf.generate(**kw, max_new_tokens=3, do_sample=False)[0, len(ids):].tolist()
        new, logits = M.reference_generate(vc, V, T, ids, n_new=3, image_grid_thw=grid,
                                           vision_out=(ref["features"], ref["deep"]))
        assert (D.top2_margin(logits) > 1e-3).all()
        assert new == gen
