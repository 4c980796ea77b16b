"""Everywhere (no GPU, no network): lab 08's text in and out. The sampling kernels compile for every learner
GPU and, run on the CPU by core.emulate (every block of every launch), give the float64 reference's token on
the check cases; the reference itself (greedy = argmax, top-k 1 = argmax, a seed reproduces, the draws over
many seeds follow softmax(x / T) cut to top-k / top-p, chi-square); the input checks; the demo tokenizer,
the streaming of split UTF-8, the end-of-sequence ids; and generate() on the NumPy-emulated decoder."""
import importlib
import json
import math

import numpy as np
import pytest

from kernellab import decoder as D
from kernellab.core import build
from kernellab.core.device import is_live

S = importlib.import_module("kernellab.decoder.sample")     # the module (D.sample is its launcher)

LEARNER_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90")
KERNELS = ("decoder_06_sample_init", "decoder_06_sample_radix", "decoder_06_sample_parts", "decoder_06_sample_final")


# ---- the kernels: compiled for every learner GPU, and run on the CPU -------------------------------------------------

@pytest.mark.parametrize("arch", LEARNER_ARCHS)
def test_sampling_kernels_compile_for_every_learner_gpu_without_spills(arch):
    info = build.ptxas_info("decoder", archs=(arch,))
    mine = info[info.kernel.isin(KERNELS)]
    assert set(mine.kernel) == set(KERNELS), mine
    assert (mine.spill_stores == 0).all() and (mine.spill_loads == 0).all(), mine
    assert build.ptx("decoder", "06_sample_radix", arch, grep=r"atom\.shared\.add\.u64")      # integer masses
    assert build.ptx("decoder", "06_sample_radix", arch, grep=r"atom\.global\.add\.u64")
    assert not build.ptx("decoder", "06_sample_radix", arch, grep=r"atom\.\w+\.add\.f32")     # no float atomics
    assert build.ptx("decoder", "06_sample_final", arch, grep=r"shfl\.sync\.up")


def test_sampling_steps_are_marked_and_launched_in_order():
    assert set(KERNELS) <= set(build.steps("decoder"))
    assert S.sample_launches(151936, 0.0) == ["decoder_04_argmax_blocks", "decoder_05_argmax_final"]
    assert S.sample_launches(151936, 1.0, top_k=1) == S.sample_launches(10, 0.0)
    assert len(S.sample_launches(151936, 0.7)) == 4
    assert len(S.sample_launches(151936, 0.7, top_k=20)) == 8 and len(S.sample_launches(10, 0.7, top_k=20)) == 4
    assert len(S.sample_launches(151936, 0.7, top_k=20, top_p=0.8)) == 12
    assert S.chunk_of(151936) == 2048 and -(-(2 ** 31 - 64) // S.chunk_of(2 ** 31 - 64)) <= S.MAX_PARTS


_PRELUDE = r"""
#include <cmath>
inline unsigned long long __float2ull_rn(float x) { return x <= 0.f ? 0ull : (unsigned long long)std::nearbyint((double)x); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
#include "common.cuh"
"""
_WRAP = r"""
void emu_blocks(const float* x, float* pv, int* pi, int n, int ok) { decoder_04_argmax_blocks(x, n, pv, pi, ok); }
void emu_init(const float* pv, const int* pi, SampleCtl* c, int parts) { decoder_06_sample_init(pv, pi, parts, c); }
void emu_radix(const float* x, SampleCtl* c, int n, float t, int phase, int shift, unsigned k, float p) {
    decoder_06_sample_radix(x, n, c, t, phase, shift, k, p); }
void emu_parts(const float* x, const SampleCtl* c, unsigned long long* pm, unsigned int* pt, int n, int chunk, float t) {
    decoder_06_sample_parts(x, n, chunk, c, t, pm, pt); }
void emu_final(const float* x, const SampleCtl* c, const unsigned long long* pm, const unsigned int* pt, int* token,
               int* state, int* history, int n, int chunk, int parts, float t, unsigned long long seed, int pos, int cap) {
    decoder_06_sample_final(x, n, chunk, parts, c, t, pm, pt, seed, pos, token, state, history, cap); }
"""


def _emulated_sample(x, knobs):
    """sample_into's launches, each kernel's every block run on the CPU by core.emulate (the emulator takes
    the arrays first: thin wrappers reorder the arguments); returns (token, state, history)."""
    from kernellab.core import emulate
    text = build.source("decoder")
    src = _PRELUDE + text[text.index("// The argmax order"):text.index("// === decoder_08_norm_gemv")] + _WRAP  # the
    # sampling kernels (the fused GEMVs after them use inline PTX, which the emulator cannot build)
    T, k, p, seed, pos = (float(v) for v in knobs)
    k, seed, pos, n = int(k), int(seed), int(pos), x.size
    t32, p32 = float(np.float32(T)), float(np.float32(p))
    k = k if 0 < k < n else 0
    blocks, chunk = D.argmax_blocks(n), S.chunk_of(n)
    parts = -(-n // chunk)

    def run(name, arrays, scalars, grid):
        return emulate.run(src, name, arrays, scalars, (grid,), (256,), list(range(grid)))[0]

    _, pv, pi = run("emu_blocks", [x, np.zeros(256, np.float32), np.zeros(256, np.int32)], [n, 0], blocks)
    ctl = run("emu_init", [pv, pi, np.zeros(512, np.uint64)], [blocks], 1)[2]
    for phase, on in ((0, k > 0), (1, p32 < 1)):
        for shift in ((24, 16, 8, 0) if on else ()):
            ctl = run("emu_radix", [x, ctl], [n, t32, phase, shift, k, p32], blocks)[1]
    _, _, pm, pt = run("emu_parts", [x, ctl, np.zeros(1024, np.uint64), np.zeros(1024, np.uint32)], [n, chunk, t32], parts)
    out = run("emu_final", [x, ctl, pm, pt, np.zeros(1, np.int32), np.array([pos, pos + 1], np.int32),
                            np.full(pos + 2, -1, np.int32)], [n, chunk, parts, t32, seed, 0, pos + 2], 1)
    return out[4], out[5], out[6]


def _cases():
    cases = [(i, s, v) for i, (s, v) in enumerate(S.SAMPLE.check_cases)
             if s[0] in (5, 2049) and v not in ("greedy", "topk1")]      # greedy is argmax_into (test_decoder)
    return cases + [(500 + j, (9001,), v) for j, v in enumerate(("both", "ties_p", "hot"))]


@pytest.mark.parametrize("i, shape, values", _cases(), ids=lambda c: str(c))
def test_sampling_kernels_on_the_cpu_give_the_references_token(i, shape, values):
    """The kernels' CUDA C run on the CPU (core.emulate: every block of every launch, in launch order) pick
    exactly the float64 reference's token, and keep argmax's bookkeeping (history[pos], pos + 1, length + 1)."""
    from kernellab.core import emulate
    if emulate.compiler() is None:
        pytest.skip("no C++ compiler: the CPU emulation cannot run the kernels")
    x, knobs = S._sample_input(shape, "float32", values, seed=i)
    want = int(S.reference_sample(x, knobs)[0])
    tok, state, hist = _emulated_sample(x, knobs)
    pos = int(knobs[4])
    assert int(tok[0]) == want, (shape, values, int(tok[0]), want)
    assert list(state) == [pos + 1, pos + 2] and hist[pos] == want


# ---- the reference ---------------------------------------------------------------------------------------------------

def test_splitmix64_is_the_published_generator():
    assert S.splitmix64(0) == 0xE220A8397B1DCDAF           # splitmix64's first output from state 0
    assert S.draw(7, 3) == S.draw(7, 3) != S.draw(7, 4) != S.draw(8, 3)
    assert 0 <= S.uniform(2 ** 64 - 1, 2 ** 31 - 1) < 1


@pytest.mark.parametrize("values", ["randn", "ties", "nan", "inf", "neg_inf", "huge", "zeros", "flat"])
def test_greedy_and_top_k_1_are_the_argmax(values):
    x, _ = S._sample_input((257,), values=values, seed=3)
    want = int(np.argmax(x))
    for u in (0.0, 0.3, 0.999999):
        assert S.sample_reference(x, 0.0, 0, 1.0, u) == want
        assert S.sample_reference(x, 1.7, 1, 0.5, u) == want
        assert S.sample_reference(x, 5.0, 0, 1e-9, u) == want            # the nucleus of one token
    assert S.distribution(x, 0.0, 7, 0.3)[want] == 1.0


def test_hostile_logits():
    x = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    assert S.sample_reference(x, 1.0, 0, 1.0, 0.5) == 1                 # a NaN: numpy.argmax's (the first NaN)
    x = np.full(6, -np.inf, np.float32)
    assert S.sample_reference(x, 1.0, 0, 0.9, 0.5) == 0
    x = np.array([0.0, np.inf, 5.0, np.inf, -np.inf], np.float32)      # the +inf logits share the mass
    np.testing.assert_allclose(S.distribution(x, 1.0, 0, 1.0), [0, 0.5, 0, 0.5, 0])
    x = np.array([2.0, 5.0, 5.0, 5.0, 1.0], np.float32)                # ties: the lower indices first
    np.testing.assert_allclose(S.distribution(x, 1.0, 2, 1.0), [0, 0.5, 0.5, 0, 0])
    x = np.array([-0.0, 0.0, -1.0], np.float32)                        # -0 == +0
    np.testing.assert_allclose(S.distribution(x, 1.0, 1 + 1, 1.0), [0.5, 0.5, 0])
    x = np.array([3e38, -3e38, 1.0], np.float32)
    assert S.sample_reference(x, 1.0, 0, 1.0, 0.99) == 0


def test_a_seed_reproduces_and_check_cases_keep_their_margin():
    for i, (shape, values) in enumerate(S.SAMPLE.check_cases):
        x, knobs = S._sample_input(shape, "float32", values, seed=i)
        again = S._sample_input(shape, "float32", values, seed=i)
        np.testing.assert_array_equal(knobs, again[1])
        np.testing.assert_array_equal(S.reference_sample(x, knobs), S.reference_sample(*again))
        T, k, p, seed, pos = knobs
        assert S.margin(x, T, int(k), p, S.uniform(int(seed), int(pos))) >= S.MARGIN


@pytest.mark.parametrize("T, k, p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.9, 8, 0.7), (2.0, 3, 0.5)])
def test_draws_over_many_seeds_follow_the_cut_softmax(T, k, p):
    """20000 seeds at one position: the counts match softmax(x / T) over the top-k / top-p set (chi-square
    within 6 standard deviations of its mean) and nothing outside the set is ever drawn."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(24) * 1.5).astype(np.float32)
    x[[3, 9]] = x.max() + 0.5                                        # a tie at the top
    prob = S.distribution(x, T, k, p)
    kept = prob > 0
    want_kept = min(k, 24) if k else 24
    assert kept.sum() <= want_kept and math.isclose(prob.sum(), 1.0)
    z = np.exp((x.astype(np.float64) - x.max()) / np.float32(T))
    if p == 1.0:                                                     # no top-p: the top-k softmax itself
        order = np.lexsort((np.arange(24), -x.astype(np.float64)))[:want_kept]
        np.testing.assert_allclose(prob[order], z[order] / z[order].sum(), rtol=1e-12)
    n = 20000
    counts = np.bincount([S.sample_reference(x, T, k, p, S.uniform(s, 0)) for s in range(n)], minlength=24)
    assert counts[~kept].sum() == 0
    e = n * prob[kept]
    chi2 = float(((counts[kept] - e) ** 2 / e).sum())
    df = int(kept.sum()) - 1
    assert chi2 <= df + 6 * math.sqrt(2 * max(df, 1)), (chi2, df)


def test_top_p_keeps_the_shortest_prefix_that_reaches_p():
    x = np.log(np.array([0.1, 0.4, 0.2, 0.3])).astype(np.float32)    # sorted: 0.4, 0.3, 0.2, 0.1
    np.testing.assert_allclose(S.distribution(x, 1.0, 0, 0.65), [0, 4 / 7, 0, 3 / 7], rtol=1e-6)
    np.testing.assert_allclose(S.distribution(x, 1.0, 0, 0.35), [0, 1, 0, 0])
    np.testing.assert_allclose(S.distribution(x, 1.0, 2, 0.99), [0, 4 / 7, 0, 3 / 7], rtol=1e-6)


# ---- argument checks -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, what", [({"temperature": -1.0}, "temperature"), ({"temperature": math.nan}, "temperature"),
                                      ({"temperature": math.inf}, "temperature"), ({"temperature": 1e-50}, "temperature"),
                                      ({"top_k": -1}, "top_k"), ({"top_k": 2.5}, "top_k"), ({"top_p": 0.0}, "top_p"),
                                      ({"top_p": 1.5}, "top_p"), ({"top_p": math.nan}, "top_p"), ({"seed": -1}, "seed"),
                                      ({"seed": 2 ** 64}, "seed")])
def test_bad_parameters_are_refused_before_any_launch(kw, what):
    with pytest.raises(ValueError, match=what):
        D.Sampling(**kw)
    with pytest.raises(ValueError, match=what):
        D.sample(np.zeros(4, np.float32), **kw)


def test_launchers_reject_host_arrays_and_bad_positions():
    with pytest.raises(ValueError, match="cupy.ndarray"):
        D.sample(np.zeros(5, np.float32), temperature=0.8)
    with pytest.raises(ValueError, match="cupy.ndarray"):
        D.sample_into(np.zeros(5, np.float32), np.zeros(1, np.int32), temperature=0.8)
    if is_live():
        import cupy
        with pytest.raises(ValueError, match="float32"):
            D.sample(cupy.zeros(5, cupy.float16))
        with pytest.raises(ValueError, match="position"):
            D.sample(cupy.zeros(5, cupy.float32), position=-1)
        with pytest.raises(ValueError, match="empty"):
            D.sample(cupy.zeros(0, cupy.float32))


def test_sample_family_runs_or_skips_loudly(capsys):
    from kernellab.core.check import variants
    if is_live():
        pytest.skip("live: tests/test_gpu_decoder_text.py runs the kernels")
    variants(S.SAMPLE)
    out = capsys.readouterr().out
    assert "SKIPPED (compile-only)" in out and f"ran on {len(S.SAMPLE.check_cases)} cases" in out


# ---- text ----------------------------------------------------------------------------------------------------------

CFG = D.replace(D.TINY, vocab=512)         # the demo tokenizer needs 259 ids at least


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("tokenizers")
    return D.demo_tokenizer(512)


@pytest.fixture(scope="module")
def dec(tok):
    return D.Decoder(CFG, D.random_weights(CFG, seed=4), capacity=96, emulate=True)


def test_demo_tokenizer_round_trips_any_text(tok):
    assert tok.get_vocab_size() <= CFG.vocab
    for t in D.text.SPECIAL_TOKENS:
        assert tok.token_to_id(t) is not None
    for text in ("Hello, world!", "café naïve Grüße 你好 🙂", "tabs\tand\nnewlines", "ü" * 9, "never seen: ქართული ✓"):
        assert tok.decode(D.encode(tok, text)) == text
    ids = D.encode(tok, "hi", chat=True)
    assert ids[0] == tok.token_to_id("<|im_start|>") and tok.token_to_id("<|im_end|>") in ids
    with pytest.raises(ValueError, match="vocab_size"):
        D.demo_tokenizer(100)


def test_stream_waits_for_whole_utf8_characters(tok):
    text = "a你好🙂é b"
    ids = D.encode(tok, text)
    pieces = []
    s = D.TextStream(tok, pieces.append)
    for i in ids:
        s.push(i)
    s.finish()
    assert "".join(pieces) == text == s.text
    assert all("\ufffd" not in p for p in pieces)
    assert len(ids) > len(pieces)               # some characters' bytes spanned several tokens


def test_stream_emits_a_dangling_partial_character_at_the_end(tok):
    ids = D.encode(tok, "🙂")
    assert len(ids) > 1
    s = D.TextStream(tok)
    assert s.push(ids[0]) == ""
    assert s.finish().endswith("\ufffd")


def test_eos_ids_from_the_checkpoint_files(tmp_path, tok):
    assert D.eos_ids(tmp_path, tok) == D.default_eos(tok) == [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 7}))
    assert D.eos_ids(tmp_path) == [7]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    assert D.eos_ids(tmp_path) == [151645, 151643]
    tok.save(str(tmp_path / "tokenizer.json"))
    assert D.load_tokenizer(tmp_path).encode("hello").ids == tok.encode("hello").ids
    with pytest.raises(ValueError, match="tokenizer.json"):
        D.load_tokenizer(tmp_path / "nowhere")


def test_generate_greedy_equals_the_decoders_own_generate(dec, tok):
    pieces = []
    g = D.generate(dec, tok, "Hello, world!", 16, stream=pieces.append, eos_ids=[])
    ids = D.encode(tok, "Hello, world!")
    assert g.ids == dec.generate(ids, 16, use_graph=False) and g.finish == "length"
    assert "".join(pieces) == g.text == tok.decode(g.ids)


def test_generate_samples_reproducibly_and_stops_at_eos(dec, tok):
    kw = dict(temperature=1.0, top_k=40, top_p=0.9, eos_ids=[])
    a = D.generate(dec, tok, "Hello", 12, seed=5, **kw)
    assert a == D.generate(dec, tok, "Hello", 12, seed=5, **kw)
    assert a.ids != D.generate(dec, tok, "Hello", 12, seed=6, **kw).ids
    assert a.ids != D.generate(dec, tok, "Hello", 12, eos_ids=[]).ids        # sampling is not greedy here
    # the first drawn token is the reference's draw on the prompt's last logits at its position
    ids = D.encode(tok, "Hello")
    dec.reset()
    for t in ids:
        dec.feed(t)
    assert a.ids[0] == S.sample_reference(dec.logits, 1.0, 40, 0.9, S.uniform(5, len(ids) - 1))
    stop = a.ids[3]
    b = D.generate(dec, tok, "Hello", 12, seed=5, **{**kw, "eos_ids": [stop]})
    assert b.finish == "eos" and b.ids == a.ids[:a.ids.index(stop)]
    c = D.generate(dec, tok, "Hello", 12, seed=5, chat=True, **kw)
    assert len(c.ids) == 12
    assert dec.ops.argmax.__func__ is D.NumpyOps.argmax                     # the swap is undone


def test_generate_checks_its_arguments(dec, tok):
    for kw, what in (({"max_new_tokens": 0}, "max_new_tokens"), ({"top_p": 2.0}, "top_p"),
                     ({"max_new_tokens": 1000}, "KV cache"), ({"prompt": ""}, "no tokens"), ({"prompt": [1, 2]}, "str")):
        args = {"prompt": "hi", "max_new_tokens": 4, **kw}
        with pytest.raises(ValueError, match=what):
            D.generate(dec, tok, **args)
    small = D.Decoder(D.TINY, D.random_weights(D.TINY, seed=1), capacity=16, emulate=True)
    with pytest.raises(ValueError, match="vocabulary"):
        D.generate(small, tok, "Hello, world!", 2)
