"""On a GPU: lab 09's pipeline (vlm.VLM: lab 06's tower per image, lab 05's scatter, lab 08's prefill with the
M-RoPE table and DeepStack, the rope delta, lab 08's token step) against vlm.reference_vlm / reference_generate,
the float64 pipeline that tests/test_vlm.py holds to transformers' Qwen3VLForConditionalGeneration (to ~1e-6).
Qwen3-VL's structure, small: the tower at Qwen3-VL-8B's widths with 2 blocks and a DeepStack merger after each;
the text model with Qwen3-VL-8B's heads (4096 wide, 32 / 8 heads of 128, theta 5e6), 2 layers, FFN 512, 512 ids."""
import numpy as np
import pytest

from conftest import gpu
from kernellab import decoder as D
from kernellab import vlm as M

pytestmark = gpu
VOCAB = 512


def _rgb(h, w, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / 7 + c) * np.cos(y / 11 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def model():
    text = D.Config("Qwen3-VL-8B heads, 2 layers", hidden=4096, layers=2, heads=32, kv_heads=8, head_dim=128,
                    ffn=512, vocab=VOCAB, theta=5e6)
    vc = M.VLMConfig(text=text, vision_depth=2, deepstack=(0, 1), image_token_id=VOCAB - 3,
                     vision_start_id=VOCAB - 2, vision_end_id=VOCAB - 1)
    return vc, M.random_vision(vc, seed=1), D.random_weights(text, seed=2)


def _prompt(vc, grids, seed=0):
    rng = np.random.default_rng(seed)
    ids = list(rng.integers(0, 500, 5))
    for n in M.image_tokens(grids):
        ids += [vc.vision_start_id] + [vc.image_token_id] * n + [vc.vision_end_id] + list(rng.integers(0, 500, 6))
    return np.array(ids)


bound = M.fp16_bound


@pytest.mark.parametrize("sizes", [[(256, 256)], [(256, 384)], [(256, 256), (288, 224)]],
                         ids=["square", "non-square", "two images"])
def test_pipeline_against_the_float64_model(model, sizes):
    vc, vW, tW = model
    pv, grid = M.preprocess([_rgb(h, w, k) for k, (h, w) in enumerate(sizes)])
    ids = _prompt(vc, grid)
    ref = M.reference_vlm(vc, vW, tW, ids, pv, grid)
    gpu = M.VLM(vc, vW, tW, capacity=len(ids) + 16)
    delta = gpu.prefill(ids, pv, grid)
    assert delta == ref["delta"]
    got = gpu.dec.logits.get().astype(np.float64)
    e = D.rel_err(got, ref["logits"][-1])
    print(f"{sizes}: {len(ids)} tokens, last logits rel err {e:.2e} (bound {bound(vc):.2e})")
    assert e <= bound(vc), (e, bound(vc))
    new = gpu.generate(ids, pv, grid, 8)
    ref_new, ref_z = M.reference_generate(vc, vW, tW, ids, pv, grid, n_new=8)
    diff = np.abs(got - ref["logits"][-1]).max()
    for t in range(8):                   # equal while the float64 model's top-2 margin decides them
        if D.top2_margin(ref_z[t][None])[0] <= 4 * diff:
            break
        assert new[t] == ref_new[t], (t, new, ref_new)


def test_decode_table_is_the_shifted_one(model):
    vc, vW, tW = model
    pv, grid = M.preprocess([_rgb(256, 256)])
    ids = _prompt(vc, grid)
    gpu = M.VLM(vc, vW, tW, capacity=len(ids) + 16)
    delta = gpu.prefill(ids, pv, grid)
    assert delta < 0
    c, s = M.shifted_table(gpu.dec.capacity, delta, vc.text.head_dim, vc.text.theta)
    np.testing.assert_allclose(gpu.dec.cos.get(), c, atol=2e-7)
    np.testing.assert_allclose(gpu.dec.sin.get(), s, atol=2e-7)
    with pytest.raises(ValueError, match="image tokens"):
        gpu.prefill(ids, None, None)


# ---- against transformers itself: a checkpoint written by save_pretrained, read by both ----------------------------

@pytest.fixture(scope="module", params=[11, 12], ids=["seed 11", "seed 12"])
def checkpoint(model, request, tmp_path_factory):
    """Qwen3-VL's structure, small (the `model` fixture's shape), random weights of one seed, written by
    transformers' save_pretrained; (our VLM from vlm.load_checkpoint, transformers' model in float64 on the GPU)."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from kernellab.vlm.stages import hf_config
    vc = model[0]
    sd = {**M.vision_state_dict(M.random_vision(vc, seed=request.param)),
          **M.text_state_dict(D.random_weights(vc.text, seed=request.param + 100))}
    m = tf.Qwen3VLForConditionalGeneration(hf_config(vc))
    m.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in sd.items()}, strict=True)
    path = tmp_path_factory.mktemp(f"qwen3vl-{request.param}")
    m.save_pretrained(path)
    del m, sd
    hf = tf.Qwen3VLForConditionalGeneration.from_pretrained(path, dtype=torch.float64).to("cuda").eval()
    vc2, vW, tW = M.load_checkpoint(path)
    return M.VLM(vc2, vW, tW, capacity=512), hf


@pytest.mark.parametrize("sizes", [[(256, 256)], [(256, 384)], [(256, 256), (288, 224)]],
                         ids=["square", "non-square", "two images"])
def test_against_transformers(checkpoint, sizes):
    """Logits after the prefill within the derived fp16 bound of transformers' float64 ones, and 32 greedy tokens
    equal to its generate's while its top-2 margin decides them."""
    import torch
    from kernellab.vlm.stages import hf_inputs
    gpu, hf = checkpoint
    vc = gpu.vcfg
    pv, grid = M.preprocess([_rgb(h, w, k + 3) for k, (h, w) in enumerate(sizes)])
    ids = _prompt(vc, grid, seed=len(sizes))
    kw = hf_inputs(hf, ids, pv, grid)
    kw["pixel_values"] = kw["pixel_values"].double()
    with torch.inference_mode():
        want = hf(**kw).logits[0, -1].double().cpu().numpy()
        out = hf.generate(**kw, max_new_tokens=32, min_new_tokens=32, do_sample=False, output_logits=True,
                          return_dict_in_generate=True, pad_token_id=0)
    gpu.prefill(ids, pv, grid)
    got = gpu.dec.logits.get().astype(np.float64)
    e = D.rel_err(got, want)
    print(f"{sizes}: {len(ids)} tokens, last logits rel err vs transformers {e:.2e} (bound {bound(vc):.2e})")
    assert e <= bound(vc), (e, bound(vc))
    new = gpu.generate(ids, pv, grid, 32)
    want_new = out.sequences[0, len(ids):].tolist()
    diff = np.abs(got - want).max()
    for t in range(32):
        if D.top2_margin(out.logits[t].double().cpu().numpy())[0] <= 4 * diff:
            break
        assert new[t] == want_new[t], (t, new, want_new)


def test_answer_streams_text(checkpoint, tmp_path):
    """An image file and a question in, the streamed answer out (greedy, the demo tokenizer: the wiring)."""
    from PIL import Image

    from kernellab.decoder.text import demo_tokenizer
    from kernellab.vlm.text import answer, chat_ids
    gpu, _ = checkpoint
    tok = demo_tokenizer(500)
    path = tmp_path / "image.png"
    Image.fromarray(_rgb(200, 300)).save(path)
    seen = []
    g = answer(gpu, tok, str(path), "What is in the picture?", max_new_tokens=12, stream=seen.append, eos_ids=[])
    assert g.finish == "length" and len(g.ids) == 12 and "".join(seen) == g.text
    pv, grid = M.preprocess(str(path))
    ids = chat_ids(tok, gpu.vcfg, "What is in the picture?", grid)
    assert ids.count(gpu.vcfg.image_token_id) == M.image_tokens(grid)[0]
    assert gpu.generate(ids, pv, grid, 12) == g.ids
    with pytest.raises(ValueError, match="max_new_tokens"):
        answer(gpu, tok, str(path), "x", max_new_tokens=0)
