"""On a GPU: lab 08's Decoder at the widths of every Qwen3 size and of Qwen2.5-7B (2 layers each, a
smaller vocabulary), against transformers on a checkpoint this test writes with save_pretrained and
reads back with the lab's loader (Config.from_hf, load_checkpoint): teacher-forced logits within the
derived fp16 bound, greedy tokens equal while the top-2 margin decides them, the quantised paths
against the float64 reference on their dequantised weights, and the prefill equal to feeding the
prompt token by token."""
import dataclasses

import numpy as np
import pytest

from conftest import gpu, teacher_forced
from kernellab import decoder as D

pytestmark = gpu

# (name, hidden, heads, KV heads, head dim, FFN, tied, Qwen2.5): the published config.json widths
WIDTHS = [("Qwen3-0.6B", 1024, 16, 8, 128, 3072, True, False), ("Qwen3-1.7B", 2048, 16, 8, 128, 6144, True, False),
          ("Qwen3-4B", 2560, 32, 8, 128, 9728, True, False), ("Qwen3-8B", 4096, 32, 8, 128, 12288, False, False),
          ("Qwen3-14B", 5120, 40, 8, 128, 17408, False, False), ("Qwen2.5-7B", 3584, 28, 4, 128, 18944, False, True)]


def _cfg(name, hidden, heads, kv, hd, ffn, tied, qwen2, layers=2, vocab=8192):
    return D.Config(f"{name} widths, {layers} layers", hidden=hidden, layers=layers, heads=heads, kv_heads=kv,
                    head_dim=hd, ffn=ffn, vocab=vocab, tied=tied, qkv_bias=qwen2, qk_norm=not qwen2)


def _checkpoint(tmp_path, cfg, seed):
    """Our random weights written by transformers' save_pretrained, read back by the lab's loader."""
    pytest.importorskip("transformers")
    from kernellab.torch_decoder import transformers_model
    W = D.random_weights(cfg, seed=seed)
    transformers_model(cfg, W, directory=tmp_path)
    got_cfg, got = D.load_checkpoint(tmp_path)
    assert dataclasses.replace(got_cfg, name=cfg.name) == cfg
    for k, v in W.items():
        assert np.array_equal(got[k].view(np.uint16), v.view(np.uint16)), k
    return got_cfg, got


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("width", WIDTHS, ids=[w[0] for w in WIDTHS])
def test_every_size_against_transformers(tmp_path, width, seed):
    """fp16: teacher-forced logits within 2x the derived bound of transformers' on the GPU, greedy
    tokens equal while decided (torch_decoder.gpu_check asserts both); the checkpoint round trip."""
    from kernellab.torch_decoder import gpu_check
    cfg = _cfg(*width)
    _checkpoint(tmp_path, cfg, seed)
    table = gpu_check(cfg, seeds=(seed,), length=48, prompt=8, n_new=32)
    assert table is not None and len(table) == 1
    print(table.to_string())


@pytest.mark.parametrize("path", ["w8a16", "int4"])
@pytest.mark.parametrize("width", [WIDTHS[0], WIDTHS[5]], ids=["Qwen3-0.6B", "Qwen2.5-7B"])
def test_quantised_paths_against_their_dequantised_weights(width, path):
    """The quantised token step against the float64 reference on the weights it multiplies by."""
    from test_decoder import _reference_weights
    cfg = _cfg(*width, vocab=4096)
    W = D.random_weights(cfg, seed=3)
    dec = D.Decoder(cfg, W, path, capacity=64)
    Wref = _reference_weights(dec, W)
    e, _ = teacher_forced(dec, cfg, Wref, [7, 100, 2048, 4095], 12)
    assert e <= D.error_bound(cfg), (path, e, D.error_bound(cfg))


@pytest.mark.parametrize("width", [WIDTHS[0], WIDTHS[3], WIDTHS[5]], ids=["Qwen3-0.6B", "Qwen3-8B", "Qwen2.5-7B"])
@pytest.mark.parametrize("n", [1, 37, 300])
def test_prefill_equals_feeding_the_prompt(width, n):
    """Decoder.prefill leaves the same KV cache (to fp16 rounding) and last logits (within the bound)
    as feeding the prompt one token at a time, and generation goes on from it to the same tokens
    while decided."""
    cfg = _cfg(*width, vocab=4096)
    dec = D.Decoder(cfg, None, "float16", capacity=n + 16, seed=5)
    prompt = [int(t) for t in np.random.default_rng(n).integers(0, cfg.vocab, n)]
    dec.reset()
    for t in prompt:
        dec.feed(t)
    z_feed, k_feed = dec.logits.get(), dec.k_cache[:, :, :n].get().astype(np.float64)
    tok_feed = dec.generate(prompt, 8, use_prefill=False)
    dec.reset()
    dec.prefill(prompt)
    z_pre, k_pre = dec.logits.get(), dec.k_cache[:, :, :n].get().astype(np.float64)
    assert dec.state.get().tolist() == [n, n + 1]
    e = D.rel_err(z_pre, z_feed)
    assert e <= 2 * D.error_bound(cfg), (e, D.error_bound(cfg))
    assert D.rel_err(k_pre, k_feed) <= 2 * D.error_bound(cfg)
    tok_pre = dec.generate(prompt, 8)
    margin = D.top2_margin(z_feed[None])[0]
    if margin > 2 * np.abs(z_pre - z_feed).max():
        assert tok_pre[0] == tok_feed[0]
    print(f"{cfg.name}, prompt {n}: logits rel err prefill vs feed {e:.1e}; tokens {tok_pre} vs {tok_feed}")


def test_prefill_refuses_what_it_cannot_run():
    cfg = _cfg(*WIDTHS[0], vocab=4096)
    dec = D.Decoder(cfg, None, "int4", capacity=16)
    with pytest.raises(ValueError, match="int4 path"):
        dec.prefill([1, 2, 3])
    dec = D.Decoder(cfg, None, "float16", capacity=16)
    with pytest.raises(ValueError, match="capacity"):
        dec.prefill(list(range(17)))
    with pytest.raises(ValueError, match="token ids"):
        dec.prefill([1, cfg.vocab])


def test_prefill_with_its_own_embeddings_and_angles_is_the_plain_prefill():
    """The vision-language inputs of prefill (lab 09): the prompt's embedding rows passed as embeds, and
    the plain positions' angles passed as a per-token table, give the plain prefill's logits bit for bit;
    DeepStack features of zeros change nothing, and non-zero ones change only what follows them."""
    import cupy
    cfg = _cfg(*WIDTHS[0], vocab=4096)
    dec = D.Decoder(cfg, None, "float16", capacity=64, seed=2)
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab, 40)]
    dec.prefill(prompt)
    plain = dec.logits.get()
    from kernellab import attention as A
    cos, sin = (cupy.asarray(t[:40]) for t in A.rope_table_host(64, cfg.theta, cfg.head_dim))
    emb = dec.embed_w[cupy.asarray(prompt)]
    rows = cupy.arange(5, 15, dtype=cupy.int32)
    zeros = [cupy.zeros((10, cfg.hidden), cupy.float16)] * 2
    dec.prefill(prompt, embeds=emb, rope=(cos, sin), deepstack=(rows, zeros))
    assert np.array_equal(dec.logits.get(), plain)
    feats = [cupy.full((10, cfg.hidden), 0.5, cupy.float16)] * 2
    dec.prefill(prompt, embeds=emb, rope=(cos, sin), deepstack=(rows, feats))
    assert not np.array_equal(dec.logits.get(), plain)
    with pytest.raises(ValueError, match="deepstack"):
        dec.prefill(prompt, deepstack=(rows, [cupy.zeros((9, cfg.hidden), cupy.float16)]))


@pytest.mark.parametrize("delta", [0, 7, -13])
def test_rope_delta_shifts_the_decoders_own_table(delta):
    cfg = _cfg(*WIDTHS[0], vocab=4096)
    dec = D.Decoder(cfg, None, "float16", capacity=48, seed=2)
    other = D.Decoder(cfg, None, "float16", capacity=48, seed=3)
    dec.set_rope_delta(delta)
    half = cfg.head_dim // 2
    inv = cfg.theta ** (-np.arange(half) / half)
    ang = (np.arange(48) + delta)[:, None] * inv[None, :]
    np.testing.assert_allclose(dec.cos.get(), np.cos(ang), atol=2e-7)
    np.testing.assert_allclose(dec.sin.get(), np.sin(ang), atol=2e-7)
    np.testing.assert_allclose(other.cos.get(), np.cos(np.arange(48)[:, None] * inv[None, :]), atol=2e-7)


def test_an_8gb_learner_gets_a_model_that_runs(monkeypatch):
    """KERNELLAB_MEMORY_CAP=8GB simulates an 8 GB GPU: fit.choose picks a model and path, says why, and that
    decoder (random weights drawn on the GPU, the real widths and layers) runs token steps; a choice that
    does not fit is refused before any allocation, with the numbers."""
    from kernellab.decoder import fit
    monkeypatch.setenv("KERNELLAB_MEMORY_CAP", "8GB")
    cfg, path, why = fit.choose(ctx=1024, staged=False)
    print(cfg.name, path, why)
    assert "GB" in why
    dec = D.Decoder(cfg, None, path, capacity=1024)
    toks = dec.generate([1, 2, 3], 4, use_prefill=False)
    assert len(toks) == 4 and all(0 <= t < cfg.vocab for t in toks)
    dec = None
    with pytest.raises(ValueError, match="GB"):
        D.Decoder(fit.MODELS["Qwen3-14B"], None, "float16", capacity=1024)
