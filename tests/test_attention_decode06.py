"""Everywhere (no GPU): decode step 06 (attention_06_decode_gqa_flash, flash decoding in one launch) run
on the CPU as written (core.emulate, every block of the grid, in order: the last block of each KV head
merges), against the float64 reference: one chunk and many, a device-side length shorter than the grid
was launched for, 0 and past the capacity, hostile values, another head layout; its counters end at 0.
Its chunk rule, its slice (it defines only its own names: no other step's fingerprint moves) and its
build for every learner GPU (no spills, cp.async from sm_80 on, plain copies below)."""
import re

import numpy as np
import pytest

from kernellab import attention as A
from kernellab import build
from kernellab.attention import steps as S
from kernellab.core import fingerprint as fp
from kernellab.core.check import check

STEP = S.FLASH_KERNEL
# What the emulator's shim lacks for this kernel: the L2 loads and the fast log2, as plain C++.
SHIM = ("template <class T> T __ldcg(const T* p) { return *p; }\ninline float __log2f(float x) { return log2f(x); }\n"
        "using std::isnan;\n")


def _slice():
    """attention.cu's preamble (the decode helpers) and step 06's slice: all the kernel uses."""
    text = build.source("attention")
    return text[:text.index("// === ")] + build.step_source("attention", STEP)


def _source(group, d, tune=()):
    lay = f"#define DEC_GROUP {group}\n#define DEC_D {d}\n" + "".join(f"#define {t[2:].replace('=', ' ')}\n" for t in tune)
    return SHIM + lay + _slice()


def _run(host, length, chunks, min_chunk, tune=(), every=False, split_from=0):
    """The kernel on the CPU on grid (KV heads, chunks), the length on the device (split_from 0: chunks from
    one key on, as min_chunk allows); returns (o, counters), or with every=True (o, partial outputs, partial
    lse, counters)."""
    from kernellab.core import emulate
    if emulate.compiler() is None:
        pytest.skip("no C++ compiler: the CPU emulation cannot run the kernel")
    q, k, v = host[:3]
    hq, d = q.shape
    hkv, cap = k.shape[:2]
    o = np.zeros((hq, d), np.float16)
    po = np.zeros((hq, chunks, d), np.float32)
    pl = np.zeros((hq, chunks), np.float32)
    done = np.zeros(hkv, np.uint32)
    lens = np.array([length], np.int32)
    got, _ = emulate.run(_source(hq // hkv, d, tune), STEP, [q, k, v, o, po, pl, done, lens],
                         [0, cap, A.LOG2E / d ** 0.5, min_chunk, split_from], (hkv, chunks), (S.DEC_THREADS,),
                         list(range(hkv * chunks)))
    return tuple(got[3:7]) if every else (got[3], got[6])


# (layout (hq, cap, hkv, d), values, device-side length, chunks of the grid, min_chunk)
CASES = [((8, 1, 2, 128), "randn", 1, 1, 64),
         ((8, 2, 2, 128), "large", 2, 4, 1),          # two chunks of one key each, merged
         ((8, 31, 2, 128), "nan", 31, 3, 8),
         ((8, 300, 2, 128), "randn", 257, 4, 64),     # capacity > length; 4 chunks of 65 keys, tiles with tails
         ((8, 300, 2, 128), "large", 100, 4, 32),     # a grid for the capacity: 3 chunks of 34, chunk 3 leaves
         ((8, 300, 2, 128), "randn", 300, 40, 4),     # 38 chunks of 8 keys: more weights than a warp's lanes
         ((8, 40, 2, 128), "randn", 0, 2, 16),        # no key: NaN, as the reference
         ((8, 40, 2, 128), "randn", 99, 3, 16),       # past the capacity: clamped to it
         ((14, 70, 2, 64), "nan", 70, 3, 16)]         # Qwen2.5-0.5B's layout: a group of 7, head dim 64


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][0]}x{c[0][1]}/{c[0][2]}x{c[0][3]}-{c[1]}-L{c[2]}-C{c[3]}")
def test_step_06_on_the_cpu_matches_the_reference(case):
    shape, values, length, chunks, min_chunk = case
    host = A.make_decode(shape, values=values, seed=len(A.DEC_LAYOUTS) + length)
    o, done = _run(host, length, chunks, min_chunk)
    check(o, A.reference_decode(*host[:3], np.array([length])), name=str(case), quiet=True, **A._tolerance())
    assert not done.any(), "the last block of each KV head sets its counter back to 0"


@pytest.mark.parametrize("length,chunks,min_chunk", [(5, 1, 64), (40, 1, 64), (40, 2, 16), (33, 3, 8)])
def test_rows_past_the_length_are_never_used(length, chunks, min_chunk):
    """Chunk 0 copies its first tiles before it knows the length: rows past it (here NaN keys, infinite
    values, as a cache's unwritten rows may hold) must weigh nothing."""
    q, k, v, _ = A.make_decode((8, 120, 2, 128), seed=length)
    k[:, length:], v[:, length:] = np.nan, np.inf
    o, _ = _run((q, k, v), length, chunks, min_chunk)
    check(o, A.reference_decode(q, k, v, np.array([length])), name=f"L={length}", quiet=True, **A._tolerance())


@pytest.mark.parametrize("case", [c for c in CASES if c[3] > 1 and c[2] in (0, 100, 300)], ids=lambda c: f"L{c[2]}-C{c[3]}")
def test_the_one_launch_ablation_on_the_cpu(case):
    """-DDFL_ONE_LAUNCH=0 (the sweep's merge_launch): every block writes its partial, a chunk past the
    length an empty one (lse -inf), and step 03's merge of them is the attention."""
    shape, values, length, chunks, min_chunk = case
    host = A.make_decode(shape, values=values, seed=len(A.DEC_LAYOUTS) + length)
    _, po, pl, done = _run(host, length, chunks, min_chunk, tune=("-DDFL_ONE_LAUNCH=0",), every=True)
    check(A.merge_reference(po, pl), A.reference_decode(*host[:3], np.array([length])), name=str(case), quiet=True,
          **A._tolerance())
    assert not done.any()


def _sweep_tunings():
    import importlib.util
    spec = importlib.util.spec_from_file_location("decode_sweep", build.KERNELS.parent / "scripts" / "decode_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.TUNINGS


@pytest.mark.parametrize("tune", sorted({t.get("tune", ()) for t in _sweep_tunings().values()}), ids=str)
def test_the_sweeps_tunings_on_the_cpu(tune):
    """Every stage shape scripts/decode_sweep.py times computes the same (7 tiles a chunk: the stages
    rotate), and builds for sm_80 and sm_90 with no spills."""
    host = A.make_decode((8, 200, 2, 128), values="randn", seed=1)
    o, _ = _run(host, 200, 2, 64, tune=tune)
    check(o, A.reference_decode(*host), name=str(tune), quiet=True, **A._tolerance())
    for arch in ("sm_80", "sm_90"):
        log = build.nvrtc_compile(_slice(), arch, "attention_06.cu", (*build.defines("attention"), *tune))[1]
        assert " 0 bytes spill stores, 0 bytes spill loads" in log.split(f"entry function '{STEP}'")[1], (arch, tune)


def test_below_split_from_one_chunk_on_a_grid_of_several():
    """A device-side length below split_from runs as one chunk on a grid launched for more (a graph made for
    the capacity): chunk 0 writes o alone (no partials written), the other blocks leave, the counters stay
    at 0; without the threshold the same call splits (3 chunks of 34 keys write partials)."""
    host = A.make_decode((8, 300, 2, 128), values="randn", seed=3)
    want = A.reference_decode(*host[:3], np.array([100]))
    for split_from, splits in ((160, False), (0, True)):
        o, po, _, done = _run(host, 100, 4, 32, every=True, split_from=split_from)
        check(o, want, name=f"L=100, split_from={split_from}", quiet=True, **A._tolerance())
        assert bool(po.any()) == splits and not done.any(), split_from


def test_chunk_rule():
    """A wave of min(per_sm, resident) blocks per SM at most, no chunk under min_chunk keys, one below
    split_from keys, at least 1, at most the kernel's cap; the kernel's own rule on the length it reads
    gives the same count."""
    sms, hkv = 132, 8
    assert S.flash_chunks(1, hkv, sms, 4) == 1 and S.flash_chunks(0, hkv, sms, 4) == 1
    split = S.FLASH_SPLIT_FROM
    assert S.flash_chunks(split - 1, hkv, sms, 4) == 1 < S.flash_chunks(split, hkv, sms, 4)
    assert S.flash_chunks(64, hkv, sms, 4, split_from=0) == 64 // S.FLASH_MIN_CHUNK      # the rule without it
    assert S.flash_chunks(4096, hkv, sms, 4, 128, 2) == 32 and S.flash_chunks(32768, hkv, sms, 4, 128, 2) == 33
    assert S.flash_chunks(32768, hkv, sms, 1, 128, 2) == 16          # only one block fits an SM
    assert S.flash_chunks(10 ** 7, 1, 10 ** 4, 8, 1, 8) == S.FLASH_MAX_CHUNKS
    for L in (1, 2, 31, 100, split - 1, split, 257, 1000, 4097, 33000):
        c = S.flash_chunks(L, hkv, sms, 4)
        n = 1 if L < split else max(1, min(c, L // S.FLASH_MIN_CHUNK))          # the kernel's rule
        chunk_len = -(-L // n)
        assert n == c and -(-L // chunk_len) <= c and (c == 1 or chunk_len >= S.FLASH_MIN_CHUNK)
    assert re.search(rf"#define DFL_MAX_CHUNKS {S.FLASH_MAX_CHUNKS}\b", build.source("attention"))


def test_step_06_is_registered_after_step_05_and_not_the_default():
    names = list(A.DEC_VARIANTS)
    assert names[-2:] == ["05_gqa_tile", "06_gqa_flash"] and A.DECODE.variants is A.DEC_VARIANTS
    assert A.DECODE.default == {"float16": "05_gqa_tile"} and A.decode is A.DEC_VARIANTS["05_gqa_tile"]
    # its kernel, and step 03's merge (the launcher's merge_launch ablation names it)
    assert fp.kernels_of(A.DEC_VARIANTS["06_gqa_flash"], "attention") == ["attention_03_decode_merge", STEP]


def test_step_06_defines_only_its_own_names():
    """The fingerprint ties a slice to every slice that defines a word it uses: step 06's slice defines
    only DFL_ / dfl_ names and its kernel, so no earlier step's fingerprint depends on it."""
    defines = fp._file("attention")[2][STEP]
    assert defines and all(re.match(r"(DFL_|dfl_)", n) or n == STEP for n in defines), sorted(defines)


def test_the_merge_issues_its_loads_together():
    """The last block's merge reads the chunks' partials from L2: 16 loads of 16 bytes a thread with no
    branch between them (a loop with a remainder put a branch after each load, one round trip each),
    and the 4 loads of the lse likewise."""
    lines = [ln for ln in build.ptx("attention", STEP, "sm_90") if not ln.startswith(".loc") and "inline asm" not in ln]
    for pat, n in ((r"ld\.global\.cg\.v4\.f32", 16), (r"ld\.global\.cg\.f32", 4)):
        at = [i for i, ln in enumerate(lines) if re.search(pat, ln)]
        assert len(at) == n and not [ln for ln in lines[at[0]:at[-1]] if re.search(r"\bbra\b", ln)], (pat, at)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_87", "sm_90"])
def test_step_06_builds_for_every_layout(arch):
    """Every head layout the checks run (DEC_LAYOUTS) builds with no spills; cp.async from sm_80 on,
    none below (plain 16-byte copies: the same result, slower)."""
    for hq, hkv, d in ((A.HQ, A.HKV, A.D), *A.DEC_LAYOUTS):
        ex = (*build.defines("attention"), *S.specialise(hq, hkv, d))
        ptx, log = build.nvrtc_compile(_slice(), arch, "attention_06.cu", ex)
        mine = log.split(f"Compiling entry function '{STEP}'")[1].split("Compiling entry")[0]
        assert re.search(r" 0 bytes spill stores, 0 bytes spill loads", mine), (arch, hq, hkv, d, mine)
        body = ptx.split(f".entry {STEP}(")[1].split(".entry")[0]
        assert ("cp.async.cg.shared.global" in body) == (int(arch[3:]) >= 80), (arch, hq, hkv, d)
        assert "atom.global.add" in body and "membar.gl" in body
