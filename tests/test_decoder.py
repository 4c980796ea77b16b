"""Everywhere (no GPU): lab 08's float64 reference decoder (one layer against a direct transcription,
the KV cache against the whole sequence at once, greedy generation, the fp16-storage error bound),
the safetensors loader on checkpoints the tests write, the bytes-per-token model, the new kernels'
references and families, their PTX claims, and the input checks that need no GPU."""
import json
import math

import numpy as np
import pytest

from kernellab import attention as A
from kernellab import decoder as D
from kernellab import gemv as G
from kernellab import rmsnorm as R
from kernellab.core import build
from kernellab.core.device import ORIN_PEAK_GBPS, is_live

CFG = D.TINY


@pytest.fixture(scope="module")
def tiny():
    return D.random_weights(CFG, seed=3)


# ---- configs and weights -----------------------------------------------------------------------------------

def test_qwen3_8b_config_and_parameter_count():
    c = D.QWEN3_8B
    assert (c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.ffn, c.vocab) == (4096, 36, 32, 8, 128, 12288, 151936)
    assert c.eps == 1e-6 and c.theta == 1e6 and not c.tied
    n = sum(math.prod(s) for s in D.weight_shapes(c).values())
    assert 8.18e9 < n < 8.20e9, n            # Qwen3-8B: 8.19 B parameters with its untied head
    assert c.gpu_reason() is None and D.SMALL.gpu_reason() is None
    assert "head dim 16" in D.TINY.gpu_reason()
    q2 = D.QWEN25_7B                          # Qwen2.5-7B: 7.62 B parameters (its model card), a GQA group of 7
    n2 = sum(math.prod(s) for s in D.weight_shapes(q2).values())
    assert 7.60e9 < n2 < 7.63e9, n2
    assert q2.gpu_reason() is None and q2.family == "qwen2" and not q2.qk_norm


def test_config_from_hf(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000, "tie_word_embeddings": False}))
    got = D.Config.from_hf(tmp_path, name="Qwen3-8B")
    assert got == D.QWEN3_8B
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="missing key"):
        D.Config.from_hf(tmp_path)
    qwen25 = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
              "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "tie_word_embeddings": False, "use_sliding_window": False, "rope_scaling": None}
    (tmp_path / "config.json").write_text(json.dumps(qwen25))
    assert D.Config.from_hf(tmp_path, name="Qwen2.5-7B") == D.QWEN25_7B      # head dim 3584 / 28 = 128, biases
    for bad, what in (({"model_type": "qwen3_moe"}, "model_type"), ({"rope_scaling": {"type": "yarn"}}, "rope_scaling"),
                      ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "rope_scaling"),
                      ({"use_sliding_window": True}, "sliding")):
        (tmp_path / "config.json").write_text(json.dumps({**qwen25, **bad}))
        with pytest.raises(ValueError, match=what):
            D.Config.from_hf(tmp_path)


def test_random_weights_are_deterministic_fp16_and_hf_shaped(tiny):
    again = D.random_weights(CFG, seed=3)
    assert set(tiny) == set(D.weight_shapes(CFG)) and "lm_head.weight" in tiny
    for name, shape in D.weight_shapes(CFG).items():
        assert tiny[name].shape == shape and tiny[name].dtype == np.float16
        np.testing.assert_array_equal(tiny[name], again[name])
    assert not np.array_equal(tiny["lm_head.weight"], D.random_weights(CFG, seed=4)["lm_head.weight"])
    assert "model.layers.1.self_attn.q_norm.weight" in tiny
    assert "lm_head.weight" not in D.weight_shapes(D.replace(CFG, tied=True))


# ---- the float64 reference -----------------------------------------------------------------------------------

def _direct_layer(cfg, W, i, h, K, V, pos):
    """One layer transcribed directly from Qwen3's modeling code, loop by loop (no shared helpers):
    h [H]; K, V: lists of the previous positions' rotated keys / values per KV head."""
    f = lambda k: np.asarray(W[f"model.layers.{i}.{k}.weight"], np.float64)   # noqa: E731
    eps, hd = cfg.eps, cfg.head_dim

    def norm(x, w):
        return w * (x / math.sqrt(sum(t * t for t in x) / len(x) + eps))

    def rope(x):
        out = np.empty(hd)
        for j in range(hd // 2):
            a = pos / cfg.theta ** (2 * j / hd)
            out[j] = x[j] * math.cos(a) - x[j + hd // 2] * math.sin(a)
            out[j + hd // 2] = x[j + hd // 2] * math.cos(a) + x[j] * math.sin(a)
        return out
    x = norm(h, f("input_layernorm"))
    q = f("self_attn.q_proj") @ x
    k = f("self_attn.k_proj") @ x
    v = f("self_attn.v_proj") @ x
    outs = []
    for kv in range(cfg.kv_heads):
        kh = rope(norm(k[kv * hd:(kv + 1) * hd], f("self_attn.k_norm")))
        K[kv].append(kh)
        V[kv].append(v[kv * hd:(kv + 1) * hd])
    for hq in range(cfg.heads):
        qh = rope(norm(q[hq * hd:(hq + 1) * hd], f("self_attn.q_norm")))
        kv = hq // (cfg.heads // cfg.kv_heads)
        s = np.array([qh @ kk for kk in K[kv]]) / math.sqrt(hd)
        p = np.exp(s - s.max())
        outs.append(sum(pj * vj for pj, vj in zip(p / p.sum(), V[kv])))
    h = h + f("self_attn.o_proj") @ np.concatenate(outs)
    x = norm(h, f("post_attention_layernorm"))
    g, u = f("mlp.gate_proj") @ x, f("mlp.up_proj") @ x
    return h + f("mlp.down_proj") @ (g / (1 + np.exp(-g)) * u)


def test_one_layer_against_a_direct_transcription(tiny):
    cache = D.Cache(CFG, 6)
    K = [[] for _ in range(CFG.kv_heads)]
    V = [[] for _ in range(CFG.kv_heads)]
    rng = np.random.default_rng(0)
    for pos in range(5):
        h = rng.standard_normal(CFG.hidden)
        cache.pos = pos
        got = D.reference_layer(CFG, tiny, 1, h, cache)
        want = _direct_layer(CFG, tiny, 1, h, K, V, pos)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cfg,n", [(D.TINY, 9), (D.SMALL, 3)], ids=["tiny", "small"])
def test_kv_cache_decode_equals_the_whole_sequence(cfg, n):
    W = D.random_weights(cfg, seed=1)
    tokens = np.random.default_rng(2).integers(0, cfg.vocab, n)
    full = D.reference_sequence(cfg, W, tokens)
    cache = D.Cache(cfg, n)
    inc = np.array([D.reference_step(cfg, W, t, cache) for t in tokens])
    np.testing.assert_allclose(inc, full, rtol=1e-10, atol=1e-10)
    assert cache.pos == n


def test_greedy_generation_is_the_argmax_of_its_own_sequence(tiny):
    prompt = [5, 1, 77]
    new, logits = D.reference_generate(CFG, tiny, prompt, 6)
    assert len(new) == 6 and logits.shape == (len(prompt) + 5, CFG.vocab)
    full = D.reference_sequence(CFG, tiny, prompt + new[:-1])
    np.testing.assert_allclose(logits, full, rtol=1e-10, atol=1e-10)
    assert new == [int(np.argmax(z)) for z in full[len(prompt) - 1:]]
    again, _ = D.reference_generate(CFG, tiny, prompt, 6)
    assert again == new


@pytest.mark.parametrize("cfg", [D.TINY, D.SMALL], ids=["tiny", "small"])
def test_fp16_storage_stays_inside_the_error_bound(cfg):
    """The emulation of the GPU's fp16 stores moves the logits by less than error_bound (the bound
    the GPU test holds the kernels to), and the tokens agree wherever the margin allows."""
    W = D.random_weights(cfg, seed=5)
    prompt = [1, 2, 3, 4]
    n64, z64 = D.reference_generate(cfg, W, prompt, 6)
    n16, z16 = D.reference_generate(cfg, W, prompt, 6, fp16_storage=True)
    e = D.rel_err(z16, z64)
    assert 0 < e < D.error_bound(cfg) / 4, (e, D.error_bound(cfg))
    err = np.abs(z16 - z64).max(axis=1)
    margin = D.top2_margin(z64)
    for t, (a, b) in enumerate(zip(n64, n16)):
        if margin[len(prompt) - 1 + t] <= 2 * err[len(prompt) - 1 + t]:
            break
        assert a == b, t


def test_rope_matches_lab07_and_keeps_lengths():
    x = np.random.default_rng(0).standard_normal((3, A.D))
    for pos in (0, 1, 77, 4095):
        np.testing.assert_allclose(D.ref_rope(x, pos, A.THETA), A.reference_rope(x, pos), rtol=1e-12, atol=1e-12)
    y = D.ref_rope(x[:, :16], 9, 1e4)
    np.testing.assert_allclose(np.hypot(y[:, :8], y[:, 8:]), np.hypot(x[:, :8], x[:, 8:16]), rtol=1e-12)
    np.testing.assert_allclose(D.ref_rope(x, 0, A.THETA), x)


def test_reference_step_rejects_bad_tokens_and_a_full_cache(tiny):
    cache = D.Cache(CFG, 1)
    for bad in (-1, CFG.vocab):
        with pytest.raises(ValueError, match="token"):
            D.reference_step(CFG, tiny, bad, cache)
    D.reference_step(CFG, tiny, 0, cache)
    with pytest.raises(ValueError, match="full"):
        D.reference_step(CFG, tiny, 0, cache)
    with pytest.raises(ValueError, match="prompt"):
        D.reference_generate(CFG, tiny, [], 2)


def test_top2_margin_and_rel_err():
    assert D.top2_margin(np.array([[1.0, 3.0, 2.5], [0.0, 0.0, -1.0]])).tolist() == [0.5, 0.0]
    assert D.rel_err([3.0, 4.0], [3.0, 4.0]) == 0 and D.rel_err([0.0, 0.0], [3.0, 4.0]) == 1.0
    assert D.error_bound(D.QWEN3_8B) == (D.STAGES_PER_LAYER * 36 + 2) * 2.0 ** -11


# ---- safetensors ------------------------------------------------------------------------------------------------

def _bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even (what torch's .to(bfloat16) does)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _checkpoint(tmp_path, W, shards=2, bf16=()):
    names = sorted(W)
    for s in range(shards):
        part = {n: W[n] for n in names[s::shards]}
        D.write_safetensors(tmp_path / f"model-{s + 1:05d}-of-{shards:05d}.safetensors", part,
                            metadata={"format": "pt"}, codes={n: "BF16" for n in part if n in bf16})
    return tmp_path


def test_safetensors_round_trip_names_shapes_dtypes_values(tmp_path):
    rng = np.random.default_rng(0)
    t = {"a.f16": rng.standard_normal((3, 5)).astype(np.float16), "b.f32": rng.standard_normal(7).astype(np.float32),
         "c.i8": rng.integers(-128, 127, (2, 2, 3)).astype(np.int8), "d.u8": np.arange(5, dtype=np.uint8),
         "e.i64": np.array([1, -2**40], np.int64), "f.scalar": np.array(2.5, np.float64),
         "g.empty": np.zeros((0, 4), np.float16)}
    p = D.write_safetensors(tmp_path / "x.safetensors", t, metadata={"format": "pt"})
    raw = p.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    assert n % 8 == 0 and header["__metadata__"] == {"format": "pt"}
    ends = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:])) and ends[-1][1] == len(raw) - 8 - n
    got = D.read_safetensors(p)
    assert set(got) == set(t)
    for k, v in t.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        np.testing.assert_array_equal(got[k], v)


def test_safetensors_matches_the_library_when_installed(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    t = {"w": np.arange(12, dtype=np.float16).reshape(3, 4), "b": np.ones(3, np.float32)}
    st.save_file(t, str(tmp_path / "lib.safetensors"))
    for k, v in D.read_safetensors(tmp_path / "lib.safetensors").items():
        np.testing.assert_array_equal(v, t[k])
    D.write_safetensors(tmp_path / "ours.safetensors", t)
    for k, v in st.load_file(str(tmp_path / "ours.safetensors")).items():
        np.testing.assert_array_equal(v, t[k])


def test_checkpoint_loader_round_trip_with_bf16_shards(tmp_path, tiny):
    W = dict(tiny)
    W["model.rotary_emb.inv_freq"] = np.ones(8, np.float32)               # a buffer the decoder ignores
    bf = {n for n in W if n.endswith("mlp.up_proj.weight")}
    Wst = {n: (_bf16_bits(a.astype(np.float32)) if n in bf else a) for n, a in W.items()}
    _checkpoint(tmp_path, Wst, shards=3, bf16=bf)
    cfg, got = D.load_checkpoint(tmp_path, CFG)
    assert cfg is CFG and set(got) == set(D.weight_shapes(CFG))
    for n, a in got.items():
        assert a.dtype == np.float16 and a.shape == D.weight_shapes(CFG)[n]
        want = D.bf16_to_f32(Wst[n]).astype(np.float16) if n in bf else tiny[n]
        np.testing.assert_array_equal(a, want)
    assert np.abs(got[next(iter(bf))].astype(np.float32) - tiny[next(iter(bf))].astype(np.float32)).max() < 0.05
    # the loaded weights run through the reference like the originals
    a, _ = D.reference_generate(CFG, got, [1, 2], 3)
    assert len(a) == 3


def test_checkpoint_loader_reads_config_json(tmp_path, tiny):
    c = CFG
    (tmp_path / "config.json").write_text(json.dumps({
        "hidden_size": c.hidden, "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads, "head_dim": c.head_dim, "intermediate_size": c.ffn,
        "vocab_size": c.vocab, "rms_norm_eps": c.eps, "rope_theta": c.theta, "tie_word_embeddings": False}))
    _checkpoint(tmp_path, tiny, shards=1)
    cfg, got = D.load_checkpoint(tmp_path)
    assert D.replace(cfg, name=c.name) == c and len(got) == len(tiny)


def test_checkpoint_loader_errors(tmp_path, tiny):
    with pytest.raises(ValueError, match="no .safetensors"):
        D.load_checkpoint(tmp_path, CFG)
    W = dict(tiny)
    del W["model.layers.1.self_attn.k_norm.weight"]
    _checkpoint(tmp_path, W, shards=1)
    with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.1\.self_attn\.k_norm\.weight'"):
        D.load_checkpoint(tmp_path, CFG)
    W = dict(tiny)
    W["model.layers.0.mlp.down_proj.weight"] = W["model.layers.0.mlp.down_proj.weight"].T.copy()
    _checkpoint(tmp_path, W, shards=1)
    with pytest.raises(ValueError, match=r"down_proj.weight .*expected shape \[64, 96\].*got \[96, 64\]"):
        D.load_checkpoint(tmp_path, CFG)
    _checkpoint(tmp_path, tiny, shards=1)
    D.write_safetensors(tmp_path / "extra.safetensors", {"model.norm.weight": tiny["model.norm.weight"]})
    with pytest.raises(ValueError, match="in both"):
        D.load_checkpoint(tmp_path, CFG)


def test_malformed_safetensors_are_value_errors(tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(b"\x01\x00")
    with pytest.raises(ValueError, match="too short"):
        D.read_safetensors(p)
    p.write_bytes((1000).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="past the end"):
        D.read_safetensors(p)
    h = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    p.write_bytes(len(h).to_bytes(8, "little") + h + b"\0" * 6)
    with pytest.raises(ValueError, match="needs 8 bytes"):
        D.read_safetensors(p)
    h = json.dumps({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}).encode()
    p.write_bytes(len(h).to_bytes(8, "little") + h + b"\0")
    with pytest.raises(ValueError, match="dtype"):
        D.read_safetensors(p)


# ---- the bytes-per-token model -----------------------------------------------------------------------------------

def test_bytes_per_token_fp16_is_every_weight_once():
    c = D.QWEN3_8B
    b = D.bytes_per_token(c, "float16", 1)
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 12288 * 4096
    assert b["layer weights"] == 36 * layer * 2
    assert b["LM head"] == 151936 * 4096 * 2 and b["embedding row"] == 4096 * 2
    assert b["KV cache"] == 36 * 2 * 8 * 128 * 2 and b["logits"] == 8 * 151936
    assert b["total"] == sum(v for k, v in b.items() if k != "total")
    assert 15.1e9 < b["total"] < 15.2e9        # the 15.1 GB per token
    per_ctx = D.bytes_per_token(c, "float16", 513)["total"] - D.bytes_per_token(c, "float16", 512)["total"]
    assert per_ctx == 36 * 2 * 1024 * 2          # K and V of one more position in every layer


@pytest.mark.parametrize("path,per_row", [("w8a16", lambda M: M + 4 * -(-M // 128)),
                                          ("int4", lambda M: -(-M // 2) + 3 * -(-M // 128))])
def test_bytes_per_token_quantised_paths_use_lab04s_formats(path, per_row):
    c = D.QWEN3_8B
    got = D.bytes_per_token(c, path, 1)
    want = sum(K * per_row(M) for K, M in D.linears(c).values()) * c.layers
    assert got["layer weights"] == want
    assert got["LM head"] == D.bytes_per_token(c, "float16", 1)["LM head"]
    assert got["total"] < D.bytes_per_token(c, "float16", 1)["total"]
    q = G.quantize_int8(np.ones((3, 300), np.float32)) if path == "w8a16" else G.quantize_int4(np.ones((3, 300), np.float32))
    assert sum(a.nbytes for a in q) == 3 * per_row(300)


def test_bytes_model_errors_and_table():
    with pytest.raises(ValueError, match="path"):
        D.bytes_per_token(D.QWEN3_8B, "int3")
    with pytest.raises(ValueError, match="context"):
        D.bytes_per_token(D.QWEN3_8B, "float16", 0)
    t = D.bytes_table(D.QWEN3_8B, (1, 4096))
    assert len(t) == 6 and (t.groupby("path")["total"].diff().dropna() > 0).all()


def test_orin_model_and_the_seeds_figures():
    m = D.orin_model(D.QWEN3_8B, contexts=(512,), fractions=(1.0,))
    bw = ORIN_PEAK_GBPS["agx"]
    for _, r in m.iterrows():
        assert r.iloc[3] == pytest.approx(bw * 1e9 / D.bytes_per_token(D.QWEN3_8B, r["path"], 512)["total"])
    assert m["source"].str.contains("model").all() and m["source"].str.contains("not a measurement").all()
    s = D.seed_figures()
    fp16, awq = s[s["model"].str.contains("fp16")], s[s["model"].str.contains("AWQ")]
    assert len(fp16) == 3 and len(awq) == 3
    assert 10.21 in fp16["tokens/s after"].tolist() and fp16["seed"].tolist() == ["000", "002", "003"]
    assert awq["tokens/s before"].min() == 9.2 and awq["tokens/s after"].max() == 9.888
    f = D.seed_read_fraction(10.21)
    assert f == pytest.approx(10.21 * D.bytes_per_token()["total"] / (bw * 1e9)) and 0 < f < 1


# ---- the new kernels: references, families, PTX, input checks ------------------------------------------------------

def test_families_are_ops_of_one_record():
    keys = set()
    assert D.FAMILIES == [*D.OPS, D.DECODER] and D.DECODER.record is not None and not D.DECODER.variants
    for fam in D.OPS:
        assert fam.name == D.NAME and fam.kernels == "decoder" and fam.op
        for shape, dt in fam.record_cases:
            assert fam.case_key(shape, dt).startswith(fam.op + ":")
        keys.add(fam.op)
        steps = {f"decoder_{s}" for s in fam.variants}
        assert steps <= set(build.steps("decoder")) | {"decoder_04_argmax"}, steps
    assert len(keys) == len(D.OPS)


@pytest.mark.parametrize("fam", D.OPS, ids=lambda f: f.op)
def test_every_check_case_has_a_reference(fam):
    for i, (shape, values) in enumerate(fam.check_cases):
        host = fam.make_input(shape, next(iter(fam.default)), values, seed=i)
        want = fam.reference(*host)
        for w in (want if isinstance(want, tuple) else (want,)):
            assert isinstance(w, np.ndarray)


@pytest.mark.parametrize("fam", D.OPS, ids=lambda f: f.op)
def test_check_variants_runs_or_skips_loudly(fam, capsys):
    from kernellab.core.check import variants
    if is_live():
        pytest.skip("live: tests/test_gpu_decoder.py runs the kernels")
    variants(fam)
    out = capsys.readouterr().out
    assert out.count("SKIPPED (compile-only)") == len(fam.variants)
    assert f"ran on {len(fam.check_cases)} cases" in out


def test_silu_mul_reference_semantics():
    g, u = D._silu_input((10,), values="hostile")
    y = D.reference_silu_mul(g, u)
    assert y.dtype == np.float16
    assert np.isnan(y[[0, 1, 3, 9]]).all()                   # NaN in, -inf * sigmoid, inf * 0
    assert y[2] == np.inf and y[4] == np.inf and y[8] == 0 and 0 <= y[6] < 1e-7
    assert y[7] == -np.inf                                    # SiLU(-30) = -2.8e-12, times +inf
    gg = np.linspace(-6, 6, 13)
    np.testing.assert_allclose(D.ref_silu(gg), gg * (1 / (1 + np.exp(-gg))), rtol=1e-12)


def test_head_norm_reference_is_lab02s_rmsnorm_per_row():
    q, k, wq, wk = D._head_norm_input((5, 3, 128), values="hostile")
    qo, ko = D.reference_head_norm(q, k, wq, wk)
    np.testing.assert_array_equal(qo, R.reference(q, wq))
    np.testing.assert_array_equal(ko, R.reference(k, wk))
    assert np.isnan(qo[0]).all() and np.isnan(qo[1, 0]) and (qo[1, 1:] == 0).all() and (qo[2] == 0).all()


def test_embed_reference_and_out_of_range_rows():
    t, tok = D._embed_input((7, 9), values="last")
    np.testing.assert_array_equal(D.reference_embed(t, tok), t[6])
    for v in ("out_of_range", "negative"):
        t, tok = D._embed_input((7, 9), values=v)
        assert np.isnan(D.reference_embed(t, tok)).all()


def _am_better(va, ia, vb, ib):
    """decoder.cu's am_better, line by line."""
    na, nb = va != va, vb != vb
    if na or nb:
        return na and (not nb or ia < ib)
    return va > vb or (va == vb and ia < ib)


@pytest.mark.parametrize("values", ["randn", "ties", "last", "nan", "inf", "neg_inf", "constant", "zeros"])
def test_argmax_order_is_numpys_in_any_reduction_order(values):
    """The kernels' comparison, applied in a shuffled order and as a tree (as blocks and warps meet),
    always gives numpy.argmax: the order is a strict total order on (value, index)."""
    (x,) = D._argmax_input((257,), values=values, seed=7)
    want = int(D.reference_argmax(x)[0])
    rng = np.random.default_rng(0)
    for _ in range(5):
        best = (-np.inf, 2 ** 31 - 1)
        for j in rng.permutation(len(x)):
            if _am_better(float(x[j]), int(j), *best):
                best = (float(x[j]), int(j))
        assert best[1] == want
    pairs = [(float(v), j) for j, v in enumerate(x)] + [(-np.inf, 2 ** 31 - 1)] * 31
    while len(pairs) > 1:
        pairs = [a if _am_better(*a, *b) else b for a, b in zip(pairs[::2], pairs[1::2])] + \
            ([pairs[-1]] if len(pairs) % 2 else [])
    assert pairs[0][1] == want


def test_argmax_blocks_arithmetic():
    assert D.argmax_blocks(1) == 1 and D.argmax_blocks(2048) == 1 and D.argmax_blocks(2049) == 2
    assert D.argmax_blocks(151936) == 75 and D.argmax_blocks(10 ** 7) == D.ARGMAX_MAX_BLOCKS


@pytest.mark.parametrize("arch", build.ARCHS)
def test_decoder_ptx_shows_the_claims(arch):
    assert build.ptx("decoder", "01_silu_mul", arch, grep=r"ld\.global\.nc\.v4\.u32")
    assert build.ptx("decoder", "02_head_norm", arch, grep=r"shfl\.sync\.bfly")
    assert not build.ptx("decoder", "02_head_norm", arch, grep=r"bar\.sync|st\.shared")
    assert build.ptx("decoder", "03_embed", arch, grep=r"ld\.global\.nc\.v4\.u32")
    assert build.ptx("decoder", "04_argmax_blocks", arch, grep=r"ld\.global\.nc\.v4\.f32")
    assert build.ptx("decoder", "04_argmax_blocks", arch, grep=r"shfl\.sync\.bfly")


def test_launchers_reject_host_arrays_before_any_launch():
    g = np.zeros(8, np.float16)
    with pytest.raises(ValueError, match="cupy.ndarray"):
        D.silu_mul(g, g)
    with pytest.raises(ValueError, match="cupy.ndarray"):
        D.silu_mul(g, g, out=g.copy())
    with pytest.raises(ValueError, match="cupy.ndarray"):
        D.head_norm(np.zeros((2, 8), np.float16), np.zeros((1, 8), np.float16), g, g)
    with pytest.raises(ValueError, match="cupy.ndarray"):
        D.embed(np.zeros((4, 8), np.float16), 3)
    with pytest.raises(ValueError, match="cupy.ndarray"):
        D.argmax(np.zeros(5, np.float32))


def test_decoder_needs_a_gpu_and_lab07s_heads():
    from kernellab.core.device import NoGPU
    if is_live():
        with pytest.raises(ValueError, match="head dim 16"):
            D.Decoder(D.TINY)
    else:
        with pytest.raises(NoGPU):
            D.Decoder(D.SMALL)


def test_live_sections_skip_loudly_without_a_gpu(capsys):
    if is_live():
        pytest.skip("live")
    df = D.measure_tokens_per_s()
    out = capsys.readouterr().out
    assert "SKIPPED (compile-only)" in out or "RECORDED" in out
    assert df is not None


def test_sentences_from_a_results_frame():
    import pandas as pd
    from kernellab.core.results import MISSING
    assert D.tokens_text(pd.DataFrame()) == MISSING
    df = pd.DataFrame([{"case": D.ctx_case(512), "name": D.step_name(p, m), "path": p, "context": 512, "mode": m,
                        "layers run": 36, "median_us": us, "p10_us": us * 0.99, "p90_us": us * 1.01, "host_us": h,
                        "frac_read": f, "device": "GPU X", "date": "2026-01-01", "source": "recorded"}
                       for p, m, us, f, h in (("float16", "eager", 9000.0, 0.5, 900.0), ("float16", "graph", 6000.0, 0.75, 20.0),
                                              ("int4", "graph", 2500.0, 0.6, 20.0), ("w8a16", "graph", 5000.0, 0.5, 20.0))])
    s = D.tokens_text(df)
    assert "**1.50×** as fast as eager (band 1.47–1.53)" in s and "20 µs per replay against 900 µs" in s and "GPU X" in s, s
    from kernellab.core.results import targets
    t = targets(D.DECODER.targets, df).set_index("target")["outcome"].tolist()
    assert t[:4] == ["within noise", "met", "missed", "met"], t
    assert t[4:] == ["not measured"] * 2 + ["missed"] + ["not measured"] * 3, t    # issue 38's: 0.75 < 0.90; no floor rows
    fl = pd.DataFrame([{**df.iloc[0].to_dict(), "name": D.floor_name(p), "median_us": us, "p10_us": us, "p90_us": us,
                        "frac_read": f} for p, us, f in (("float16", 5000.0, 0.9), ("int4", 2000.0, 0.8))])
    floors = targets(D.DECODER.targets, pd.concat([df, fl], ignore_index=True))["at the floor"].tolist()
    assert floors[:2] == ["0.90", "2.50"], floors
    from kernellab import torch_decoder as T
    assert targets(T.BASELINES.targets, df)["outcome"].tolist() == ["not measured"] * 4   # 1.3x at 1, 512, 4096
    base = pd.DataFrame([{**df.iloc[0].to_dict(), "name": n, "median_us": us, "p10_us": us * 0.99, "p90_us": us * 1.01}
                         for n, us in ((T.TORCH_COMPILED, 5400.0), (T.TRANSFORMERS, 90000.0))])
    assert targets(T.BASELINES.targets, pd.concat([df, base]))["outcome"].tolist() == \
        ["not measured", "missed", "not measured", "met"]         # 5400 / 6000 < 1.3; rows at context 512 only
    # issue 38's sentences: what a longer cache adds to both decoders, judged equal within the rows' noise
    from kernellab.decoder.report import contexts_text, growth_text
    grow = pd.DataFrame([{**df.iloc[0].to_dict(), "case": D.ctx_case(n), "context": n, "name": nm, "median_us": us,
                          "p10_us": us - 5, "p90_us": us + 5}
                         for nm, n, us in ((D.step_name("float16", "graph"), 1, 5600.0), (T.TORCH_COMPILED, 1, 7300.0),
                                           (D.step_name("float16", "graph"), 4096, 6040.0),
                                           (T.TORCH_COMPILED, 4096, 7745.0))])
    g = growth_text(grow, D.step_name("float16", "graph"), T.TORCH_COMPILED)
    assert "**440 µs**" in g and "**445 µs**" in g and "the same within the rows' noise" in g, g
    g = growth_text(grow.assign(median_us=grow["median_us"].where(grow["name"] != T.TORCH_COMPILED, 0) +
                                [0, 7300.0, 0, 7900.0]), D.step_name("float16", "graph"), T.TORCH_COMPILED)
    assert "less in ours by 160 µs" in g, g
    assert growth_text(grow[grow["context"] == 1], D.step_name("float16", "graph"), T.TORCH_COMPILED) == ""
    c = contexts_text(pd.concat([grow, fl.iloc[:1].assign(case=D.ctx_case(512))], ignore_index=True))
    assert "**0.89** of it at context 1" in c and "**0.83** of it at context 4096" in c, c     # 5000 / 5600, 5000 / 6040
    # the Amdahl table: time(before) / time(after) of the whole token, and the seed claim it judges
    sw = D.SWAPS[0]
    rows = pd.DataFrame([{**df.iloc[0].to_dict(), "name": sw.name(w), "median_us": us, "p10_us": us * 0.999,
                          "p90_us": us * 1.001} for w, us in (("before", 6060.0), ("after", 6000.0))])
    table, measured = D.amdahl(rows, swaps=[sw])
    assert abs(table["end-to-end gain"].iloc[0] - 1.01) < 1e-9 and abs(measured[sw.claim].value - 1.01) < 1e-9
    # int4: per layer 2 add + RMSNorm, 4 GEMVs + 4 conversions, the q/k norm + RoPE + append, SiLU x up, attention's 2
    from kernellab.decoder.report import qk_fused
    assert D.launches_per_token(D.QWEN3_8B, "int4", attention_launches=2) == 36 * (13 + (1 if qk_fused("int4") else 2)) + 5
    assert D.launches_per_token(D.QWEN3_8B, "float16") <= D.launches_per_token(D.QWEN3_8B, "int4") - 36 * 4


def test_exercise_reference_and_tolerance():
    W, g, u = D.make_silu_down((64, 300))
    y = D.reference_silu_down(W, g, u)
    assert y.shape == (64,) and y.dtype == np.float32
    m = D.ref_silu(g.astype(np.float64)) * u
    np.testing.assert_allclose(y, W.astype(np.float64) @ m, rtol=1e-6, atol=1e-6)
    t = D.silu_down_tolerance(W, g, u)
    assert 0 < t["atol"] < 1e-3


# ---- the token step's wiring, run on NumPy through the same Decoder.step -------------------------------------------

def _reference_weights(dec, W):
    """The weights the decoder multiplies by, in the reference's layout (dequantised on W8A16/int4)."""
    cfg, out = dec.cfg, dict(W)
    for i in range(cfg.layers):
        qkv, gu = dec.dense(i, "qkv"), dec.dense(i, "gu")
        q, k = cfg.q_dim, cfg.kv_dim
        out[D.lw(i, "self_attn.q_proj")], out[D.lw(i, "self_attn.k_proj")] = qkv[:q], qkv[q:q + k]
        out[D.lw(i, "self_attn.v_proj")] = qkv[q + k:]
        out[D.lw(i, "self_attn.o_proj")] = dec.dense(i, "o")
        out[D.lw(i, "mlp.gate_proj")], out[D.lw(i, "mlp.up_proj")] = gu[:cfg.ffn], gu[cfg.ffn:]
        out[D.lw(i, "mlp.down_proj")] = dec.dense(i, "down")
    return out


@pytest.mark.parametrize("cfg,path", [(D.TINY, "float16"), (D.TINY, "w8a16"), (D.TINY, "int4"), (D.SMALL, "float16"),
                                      (D.TINY_QWEN2, "float16"), (D.TINY_QWEN2, "int4")],
                         ids=["tiny-fp16", "tiny-w8a16", "tiny-int4", "small-fp16", "qwen2-fp16", "qwen2-int4"])
def test_emulated_token_step_is_the_fp16_storage_reference(cfg, path):
    """Decoder.step's calls and buffers (views into the QKV and gate/up outputs, the residual
    ping-pong, the device-side position/length/token/history) run through NumpyOps give the float64
    reference with fp16 storage: to fp32 rounding on fp16 (the same rounding points), and within the
    bound on the quantised paths (their fp32 -> fp16 conversion rounds twice)."""
    W = D.random_weights(cfg, seed=4)
    dec = D.Decoder(cfg, W, path, capacity=16, emulate=True)
    Wref = W if path == "float16" else _reference_weights(dec, W)
    prompt = [3, 1, 4, 1]
    n16, z16 = D.reference_generate(cfg, Wref, prompt, 6, fp16_storage=True)
    dec.reset()
    got = []
    for t in prompt + n16[:-1]:
        dec.feed(t)
        got.append(dec.logits.copy())
    assert dec.state.tolist() == [9, 10] and dec.history[:9].tolist() == [int(np.argmax(z)) for z in got]
    e = D.rel_err(np.array(got), z16)
    assert e < (1e-6 if path == "float16" else D.error_bound(cfg) / 4), e
    assert dec.generate(prompt, 6, use_graph=False) == n16
    assert dec.history[len(prompt) - 1 + 6:].tolist() == [-1] * (16 - len(prompt) - 5)


def test_emulated_decoder_guards(tiny):
    with pytest.raises(ValueError, match="host weights"):
        D.Decoder(CFG, None, emulate=True)
    with pytest.raises(ValueError, match="path"):
        D.Decoder(CFG, tiny, "int3", emulate=True)
    with pytest.raises(ValueError, match="missing"):
        D.Decoder(CFG, {k: v for k, v in tiny.items() if "norm" not in k}, emulate=True)
    dec = D.Decoder(CFG, tiny, capacity=4, emulate=True)
    with pytest.raises(ValueError, match="fit"):
        dec.generate([1, 2, 3], 3, use_graph=False)
    with pytest.raises(ValueError, match="token"):
        dec.feed(CFG.vocab)
    with pytest.raises(ValueError, match="CUDA graph"):
        dec.generate([1], 2, use_graph=True)
    with pytest.raises(ValueError, match="pos"):
        dec.at(4)
    dec.reset()
    for _ in range(4):
        dec.feed(1)
    with pytest.raises(ValueError, match="full"):
        dec.feed(1)


@pytest.mark.parametrize("seed", [1, 2])
def test_reference_decoder_and_loader_match_transformers_qwen3(tmp_path, seed):
    """A real client: transformers' Qwen3ForCausalLM with our random weights writes a checkpoint
    (save_pretrained: the Hugging Face layout); load_checkpoint reads it back bit for bit, and the
    float64 reference's teacher-forced logits equal transformers' float64 forward on it (its RMSNorm
    is float32: 2^-24 per norm), and greedy generation gives the same tokens. Runs where
    transformers is installed (the `peers` extra)."""
    pytest.importorskip("transformers")
    from kernellab.torch_decoder import transformers_check, transformers_model
    cfg, W = D.TINY, D.random_weights(D.TINY, seed=seed)
    transformers_model(cfg, W, directory=tmp_path)
    cfg2, W2 = D.load_checkpoint(tmp_path)
    assert (cfg2.hidden, cfg2.layers, cfg2.heads, cfg2.kv_heads, cfg2.head_dim, cfg2.ffn, cfg2.vocab, cfg2.theta) == \
        (cfg.hidden, cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn, cfg.vocab, cfg.theta)
    assert all(np.array_equal(W2[k], W[k]) for k in W)
    t = transformers_check(cfg, seeds=(seed,))
    assert t["logits rel err"].iloc[0] < 1e-6 and t["greedy tokens equal"].iloc[0] == "12 of 12"


def test_torch_baseline_decoder_matches_the_reference():
    """Lab 08's compiled baseline (torch_decoder.TorchQwen3, gpt-fast style: static cache, masked
    attention over every slot) in float64 on the CPU: each step's logits equal the float64
    reference's, and greedy generation gives the same tokens. Skipped without torch."""
    torch = pytest.importorskip("torch")
    from kernellab.torch_decoder import TorchQwen3
    cfg, W = D.TINY, D.random_weights(D.TINY, seed=4)
    m = TorchQwen3(cfg, W, device="cpu", dtype=torch.float64, capacity=32)
    cache = D.Cache(cfg, 32)
    for p, t in enumerate(np.random.default_rng(4).integers(0, cfg.vocab, 10)):
        want = D.reference_step(cfg, W, int(t), cache)
        got = m.step(torch.tensor([int(t)]), torch.tensor([p])).numpy()
        assert D.rel_err(got, want) < 1e-12, p
    prompt = [3, 14, 15, 92]
    assert m.generate(prompt, 6) == D.reference_generate(cfg, W, prompt, 6)[0]
    with pytest.raises(ValueError, match="capacity"):
        m.generate(prompt, 40)
    # fp16, as it runs on a GPU: inside the fp16 storage bound lab 08 derives for its own step
    m16, cache = TorchQwen3(cfg, W, device="cpu", dtype=torch.float16, capacity=32), D.Cache(cfg, 32)
    for p, t in enumerate(prompt):
        want = D.reference_step(cfg, W, t, cache)
        assert D.rel_err(m16.step(torch.tensor([t]), torch.tensor([p])).numpy(), want) < D.error_bound(cfg)
