"""Everywhere (no GPU): lab 08's fit to the learner's GPU (decoder/fit.py): the model table against the
published config.json of each checkpoint, parameter counts against the model cards, the bytes each path
stores (exactly what lab 04's quantisers and gemv.pack make), choose() under memory caps, check_fits'
refusal with the numbers, KERNELLAB_MEMORY_CAP, and the discrete / integrated / no-GPU branches of
device_memory (monkeypatched)."""
import math

import numpy as np
import pytest

from kernellab import decoder as D
from kernellab import gemv as G
from kernellab.decoder import fit as F

# The published config.json of each checkpoint (hidden_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, head_dim, intermediate_size, vocab_size, rms_norm_eps, rope_theta, tie_word_embeddings):
#   https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json
#   https://huggingface.co/Qwen/Qwen3-1.7B/blob/main/config.json
#   https://huggingface.co/Qwen/Qwen3-4B/blob/main/config.json
#   https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
#   https://huggingface.co/Qwen/Qwen3-14B/blob/main/config.json
#   https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json  (no head_dim key: hidden_size / heads = 128)
PUBLISHED = {
    "Qwen3-0.6B": dict(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072, vocab=151936, tied=True),
    "Qwen3-1.7B": dict(hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=6144, vocab=151936, tied=True),
    "Qwen3-4B": dict(hidden=2560, layers=36, heads=32, kv_heads=8, head_dim=128, ffn=9728, vocab=151936, tied=True),
    "Qwen3-8B": dict(hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, ffn=12288, vocab=151936, tied=False),
    "Qwen3-14B": dict(hidden=5120, layers=40, heads=40, kv_heads=8, head_dim=128, ffn=17408, vocab=151936, tied=False),
    "Qwen2.5-7B": dict(hidden=3584, layers=28, heads=28, kv_heads=4, head_dim=128, ffn=18944, vocab=152064, tied=False,
                       qkv_bias=True, qk_norm=False),
}
# The model cards' "Number of Parameters" and "Number of Parameters (Non-Embedding)", in billions:
#   https://huggingface.co/Qwen/Qwen3-0.6B  0.6 / 0.44      https://huggingface.co/Qwen/Qwen3-1.7B  1.7 / 1.4
#   https://huggingface.co/Qwen/Qwen3-4B    4.0 / 3.6       https://huggingface.co/Qwen/Qwen3-8B    8.2 / 6.95
#   https://huggingface.co/Qwen/Qwen3-14B  14.8 / 13.2      https://huggingface.co/Qwen/Qwen2.5-7B  7.61 / 6.53
CARDS = {"Qwen3-0.6B": (0.6, 0.44), "Qwen3-1.7B": (1.7, 1.4), "Qwen3-4B": (4.0, 3.6), "Qwen3-8B": (8.2, 6.95),
         "Qwen3-14B": (14.8, 13.2), "Qwen2.5-7B": (7.61, 6.53)}


@pytest.fixture(autouse=True)
def _no_cap(monkeypatch):
    monkeypatch.delenv(F.CAP_ENV, raising=False)


def _device(monkeypatch, free=None, integrated=False, meminfo=None, tmp_path=None):
    """Pretend to be a device: no GPU (free None), a discrete GPU with `free` bytes, or an integrated one
    whose /proc/meminfo says `meminfo` kB available."""
    monkeypatch.setattr(F, "_gpu", lambda: free is not None or integrated)
    monkeypatch.setattr(F, "_integrated", lambda: integrated)

    def no_cuda():
        raise AssertionError("an integrated GPU's free memory is MemAvailable, not cudaMemGetInfo")
    monkeypatch.setattr(F, "_mem_get_info", (lambda: int(free)) if not integrated else no_cuda)
    if meminfo is not None:
        p = tmp_path / "meminfo"
        p.write_text(f"MemTotal:        7999999 kB\nMemFree:          123456 kB\nMemAvailable:   {meminfo} kB\n")
        monkeypatch.setattr(F, "MEMINFO", p)


# ---- the model table ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(PUBLISHED))
def test_model_table_matches_the_published_config(name):
    c, want = F.MODELS[name], {"eps": 1e-6, "theta": 1e6, "qkv_bias": False, "qk_norm": True, **PUBLISHED[name]}
    assert c.name == name
    assert {k: getattr(c, k) for k in want} == want
    assert c.gpu_reason() is None, c.gpu_reason()          # every size runs on the course's kernels


def test_the_table_is_the_lab_configs():
    assert F.MODELS["Qwen3-8B"] == D.QWEN3_8B and F.MODELS["Qwen2.5-7B"] == D.QWEN25_7B
    assert [c.name for c in F.QWEN3] == ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B", "Qwen3-14B"]
    assert D.MODELS is F.MODELS and D.choose is F.choose and D.check_fits is F.check_fits


@pytest.mark.parametrize("name", list(CARDS))
def test_parameter_counts_match_the_model_cards(name):
    c = F.MODELS[name]
    total, non_emb = CARDS[name]
    n = F.param_count(c)
    assert abs(n / 1e9 / total - 1) < 0.03, (name, n)
    assert abs(F.non_embedding_params(c) / 1e9 / non_emb - 1) < 0.03, (name, F.non_embedding_params(c))
    assert n == sum(math.prod(s) for s in D.weight_shapes(c).values())


# ---- bytes ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["w8a16", "int4"])
@pytest.mark.parametrize("K,M", [(20, 256), (32, 384), (16, 200), (7, 128), (48, 1000), (1, 1)])
def test_linear_bytes_are_what_the_quantiser_and_pack_store(path, K, M):
    w = np.random.default_rng(K * M).standard_normal((K, M)).astype(np.float32)
    arrays = G.pack(path, *(G.quantize_int8(w) if path == "w8a16" else G.quantize_int4(w)))
    assert F.linear_bytes(path, K, M) == sum(a.nbytes for a in arrays)
    assert F.linear_bytes("float16", K, M) == 2 * K * M


def test_weight_kv_and_need():
    for c in F.MODELS.values():
        assert F.weight_bytes(c, "float16") == 2 * F.param_count(c)        # every weight fp16 on the fp16 path
        w8, w4 = F.weight_bytes(c, "w8a16"), F.weight_bytes(c, "int4")
        head = 2 * c.vocab * c.hidden * (1 if c.tied else 2)               # embedding and LM head stay fp16
        lin = F.weight_bytes(c, "float16") - head
        assert 0.5 < (w8 - head) / lin < 0.54 and 0.26 < (w4 - head) / lin < 0.29, (c.name, w8, w4)
    c = D.QWEN3_8B
    assert F.kv_bytes(c, 4096) == 2 * 36 * 8 * 128 * 4096 * 2
    b = F.need(c, "int4", 4096)
    assert b["total"] == sum(v for k, v in b.items() if k != "total")
    assert b["margin"] == F.MARGIN_BYTES + int(F.MARGIN_FRACTION * (b["weights"] + b["KV cache"] + b["workspace"]))
    assert F.need(c, "float16", 4096)["workspace"] > F.need(c, "float16", 4096, prompt=16)["workspace"]  # prefill
    s = F.need(c, "int4", 4096, staged=True)
    assert s["host staging"] >= 2 * F.param_count(c) and s["total"] > b["total"]
    with pytest.raises(ValueError, match="path"):
        F.need(c, "fp8")
    with pytest.raises(ValueError, match="ctx"):
        F.need(c, "int4", 0)


# ---- choose --------------------------------------------------------------------------------------------------

CAPS = {"4GB": ("Qwen3-1.7B", "w8a16"), "8GB": ("Qwen3-8B", "int4"), "16GB": ("Qwen3-14B", "int4"),
        "24GB": ("Qwen3-14B", "w8a16"), "80GB": ("Qwen3-14B", "float16")}


@pytest.mark.parametrize("cap", list(CAPS))
def test_choose_under_caps(cap, monkeypatch):
    c, p, why = F.choose(cap, ctx=4096)
    assert (c.name, p) == CAPS[cap], why
    need = F.need(c, p, 4096)["total"]
    assert need <= F.parse_bytes(cap)
    assert f"{need / 1e9:.1f} GB" in why and f"{F.parse_bytes(cap) / 1e9:.1f} GB is free" in why
    # the rule: nothing larger fits on any path, nothing more precise fits on this size
    bigger = [m for m in F.QWEN3 if F.param_count(m) > F.param_count(c)]
    assert all(F.need(m, q, 4096)["total"] > F.parse_bytes(cap) for m in bigger for q in D.PATHS)
    assert all(F.need(c, q, 4096)["total"] > F.parse_bytes(cap) for q in D.PATHS[:D.PATHS.index(p)])
    # the same through KERNELLAB_MEMORY_CAP on a big discrete GPU
    _device(monkeypatch, free=141e9)
    monkeypatch.setenv(F.CAP_ENV, cap)
    c2, p2, why2 = F.choose()
    assert (c2, p2) == (c, p) and F.CAP_ENV in why2


def test_choose_more_memory_never_a_smaller_model():
    sizes = [F.param_count(F.choose(f"{g}GB")[0]) for g in range(3, 100, 3)]
    assert sizes == sorted(sizes)


def test_choose_nothing_fits_and_prefer():
    with pytest.raises(ValueError, match=r"nothing fits: 1\.0 GB free.*Qwen3-0\.6B.*needs 1\.\d GB"):
        F.choose("1GB")
    c, p, _ = F.choose("8GB", prefer="float16")
    assert p == "float16" and c.name == "Qwen3-1.7B"
    c, p, why = F.choose("8GB", prefer="Qwen2.5-7B")
    assert (c.name, p) == ("Qwen2.5-7B", "int4") and "most precise path" in why
    assert F.choose("8GB", ctx=512)[0].name == "Qwen3-8B"
    with pytest.raises(ValueError, match="model"):
        F.choose("8GB", prefer="Llama-3-8B")


# ---- check_fits ------------------------------------------------------------------------------------------------

def test_check_fits_refuses_with_the_numbers():
    c = D.QWEN3_8B
    with pytest.raises(ValueError) as e:
        F.check_fits(c, "float16", 4096, free="16GB")
    msg = str(e.value)
    need = F.need(c, "float16", 4096)["total"]
    assert f"needs {need / 1e9:.1f} GB" in msg and "16.0 GB is free" in msg
    assert "Qwen3-8B fits on w8a16" in msg and "The largest that fits: Qwen3-14B int4" in msg
    with pytest.raises(ValueError, match=r"fits with a KV cache of at most \d+ tokens"):
        F.check_fits(F.MODELS["Qwen3-14B"], "float16", 4096, free="32GB")
    b = F.check_fits(c, "int4", 4096, free="8GB")              # fits: the breakdown
    assert b == F.need(c, "int4", 4096)


def test_check_fits_on_the_device_and_without_a_gpu(monkeypatch):
    _device(monkeypatch, free=10e9)
    with pytest.raises(ValueError, match=r"10\.0 GB is free \(the GPU's free memory"):
        F.check_fits(D.QWEN3_8B, "w8a16", 4096)
    assert F.check_fits(D.QWEN3_8B, "int4", 4096)["total"] < 10e9
    _device(monkeypatch, free=None)
    assert F.check_fits(F.MODELS["Qwen3-14B"], "float16", 4096)["total"] > 30e9   # nothing to check against


# ---- free memory, the cap ----------------------------------------------------------------------------------------

def test_parse_bytes():
    assert F.parse_bytes("8GB") == 8_000_000_000 == F.parse_bytes("8 gb") == F.parse_bytes("8G")
    assert F.parse_bytes("7.5GiB") == int(7.5 * 2 ** 30) and F.parse_bytes("512MiB") == 2 ** 29
    assert F.parse_bytes("1e9") == F.parse_bytes(1e9) == F.parse_bytes(" 1000000000 ") == 10 ** 9
    for bad in ("", "eight GB", "8XB", "-1GB", "0", "GB"):
        with pytest.raises(ValueError, match=F.CAP_ENV):
            F.parse_bytes(bad)


def test_the_smaller_cap_wins(monkeypatch):
    assert F.memory_cap() == (None, "")
    monkeypatch.setenv(F.CAP_ENV, "8GB")
    assert F.memory_cap() == (8e9, f"{F.CAP_ENV}=8GB")
    assert F.memory_cap("4GB") == (4e9, "cap=")
    assert F.memory_cap("16GB")[0] == 8e9
    monkeypatch.setenv(F.CAP_ENV, "lots")
    with pytest.raises(ValueError, match=F.CAP_ENV):
        F.memory_cap()


def test_discrete_gpu(monkeypatch):
    _device(monkeypatch, free=79e9)
    m = F.device_memory()
    assert (m.free, m.kind) == (79e9, "discrete") and "cudaMemGetInfo" in m.source
    assert F.free_memory(cap="8GB") == 8e9 and F.free_memory(cap="100GB") == 79e9
    monkeypatch.setenv(F.CAP_ENV, "24GB")
    assert F.free_memory() == 24e9 and F.free_memory(cap="16GB") == 16e9


def test_integrated_gpu_counts_the_cpu_memory(monkeypatch, tmp_path):
    _device(monkeypatch, integrated=True, meminfo=7_000_000, tmp_path=tmp_path)
    m = F.device_memory()
    assert (m.free, m.kind) == (7_000_000 * 1024, "shared") and "MemAvailable" in m.source
    assert F.free_memory(cap="4GB") == 4e9
    c, p, why = F.choose()
    assert "host staging" in why and "MemAvailable" in why     # a checkpoint's host copy shares this memory
    assert F.need(c, p, 4096, staged=True)["total"] <= m.free
    c2, p2, _ = F.choose(staged=False)                          # a loader without the host copy: a larger choice
    assert F.param_count(c2) >= F.param_count(c)


def test_integrated_detection(monkeypatch, tmp_path):
    tegra = tmp_path / "nv_tegra_release"
    monkeypatch.setattr(F, "TEGRA_RELEASE", tegra)
    import sys
    monkeypatch.setitem(sys.modules, "cupy", None)              # no CuPy: the Tegra file decides
    assert not F._integrated()
    tegra.write_text("# R36 (release), REVISION: 4.0\n")
    assert F._integrated()
    p = tmp_path / "meminfo"
    p.write_text("MemTotal: 1 kB\n")
    monkeypatch.setattr(F, "MEMINFO", p)
    with pytest.raises(ValueError, match="MemAvailable"):
        F._mem_available()


def test_no_gpu(monkeypatch):
    _device(monkeypatch, free=None)
    monkeypatch.setenv(F.CAP_ENV, "8GB")
    m = F.device_memory()
    assert m.free is None and m.kind == "none" and F.free_memory() is None
    c, p, why = F.choose()
    assert (c.name, p) == ("Qwen3-0.6B", "float16") and "no CUDA GPU" in why and "nothing was measured" in why
