"""Lab 08's new kernels (kernels/decoder.cu): SiLU x up, per-head q/k RMSNorm, the embedding row from
a device-side token id, the greedy argmax (numpy.argmax's order); launchers with input checks, their
inputs and float64 references, one Family per op (SILU_MUL, HEAD_NORM, EMBED, ARGMAX) with check
cases, and the exercise's two-launch step (SiLU x up, then the down GEMV)."""
from __future__ import annotations

import math

import numpy as np

from .. import attention as A
from .. import gemv as G
from ..core.family import Family
from ..core.launch import aligned, host_or_device_index, int32_size, launch, require, variant
from .config import FAMILY, NAME
from .reference import ref_rmsnorm, ref_silu


# ---- the new kernels: launchers ----------------------------------------------------------------------------

THREADS = 256
ARGMAX_THREADS = 256
ARGMAX_MAX_BLOCKS = 256      # the first pass's blocks (and pairs) at most: the second pass is one block
_scratch = A._scratch      # one cache of reused device buffers (graph-safe after the eager call)


def _alloc_like(x, *_):
    import cupy
    require(x, "gate", dtype="float16", ndim=1)
    return cupy.empty(x.shape, cupy.float16)


@variant(dtypes=("float16",), alloc_out=_alloc_like)
def silu_mul(gate, up, out=None):
    """out = SiLU(gate) * up, fp16 [n] each (gate and up may be views into one [2n] GEMV output)."""
    require(gate, "gate", dtype="float16", ndim=1)
    n = int32_size(gate.shape[0])
    require(up, "up", dtype="float16", shape=(n,))
    if out is None:
        out = _alloc_like(gate)
    require(out, "out", dtype="float16", shape=(n,))
    if n:
        ok = int(aligned(16, gate, up, out))
        launch(FAMILY, "decoder_01_silu_mul", (-(-n // (THREADS * 8)),), (THREADS,), (gate, up, out, n, ok))
    return out


def _alloc_qk(q, k, *_):
    import cupy
    require(q, "q", dtype="float16", ndim=2)
    require(k, "k", dtype="float16", ndim=2)
    return cupy.empty(q.shape, cupy.float16), cupy.empty(k.shape, cupy.float16)


@variant(dtypes=("float16",), alloc_out=_alloc_qk)
def head_norm(q, k, wq, wk, out=None, eps=1e-6):
    """(RMSNorm(q rows) * wq, RMSNorm(k rows) * wk): q [nq, d], k [nk, d], wq, wk [d], fp16;
    out = (q_out, k_out) shaped like q and k."""
    require(q, "q", dtype="float16", ndim=2)
    nq, d = q.shape
    require(k, "k", dtype="float16", ndim=2)
    if k.shape[1] != d:
        raise ValueError(f"k: expected [nk, {d}] (q's head dim), got {tuple(k.shape)}")
    require(wq, "q_norm weight", dtype="float16", shape=(d,))
    require(wk, "k_norm weight", dtype="float16", shape=(d,))
    qo, ko = _alloc_qk(q, k) if out is None else out
    require(qo, "out[0] (q)", dtype="float16", shape=q.shape)
    require(ko, "out[1] (k)", dtype="float16", shape=k.shape)
    rows = nq + k.shape[0]
    int32_size(rows * d)
    if rows and d:
        launch(FAMILY, "decoder_02_head_norm", (-(-rows // 4),), (128,), (q, k, wq, wk, qo, ko, nq, k.shape[0], d, eps))
    return qo, ko


def _alloc_row(table, *_):
    import cupy
    require(table, "table", dtype="float16", ndim=2)
    return cupy.empty((table.shape[1],), cupy.float16)


@variant(dtypes=("float16",), alloc_out=_alloc_row)
def embed(table, token, out=None):
    """out = table[token]: table [vocab, hidden] fp16; token a Python int (checked: 0 <= token <
    vocab, else ValueError) or an int32 device array of one element (read by the kernel, so a
    CUDA graph replays every token; an id out of range gives a row of NaN, never a wild read)."""
    require(table, "table", dtype="float16", ndim=2)
    V, H = table.shape
    int32_size(V), int32_size(H)         # int32 ids and columns; the row offset is 64-bit in the kernel
    tptr, thost = host_or_device_index(token, V, "token", "vocab")
    out = _alloc_row(table) if out is None else out
    require(out, "out", dtype="float16", shape=(H,))
    if H:
        ok = int(H % 8 == 0 and aligned(16, table, out))
        launch(FAMILY, "decoder_03_embed", (-(-H // (THREADS * 8)),), (THREADS,), (table, tptr, thost, out, V, H, ok))
    return out


def argmax_blocks(n: int) -> int:
    """The first pass's blocks for n logits: one per 2048 (8 per thread), at most ARGMAX_MAX_BLOCKS."""
    return max(1, min(ARGMAX_MAX_BLOCKS, -(-n // (ARGMAX_THREADS * 8))))


def _alloc_token(x, *_):
    import cupy
    return cupy.empty((1,), cupy.int32)


def token_args(x, token, state=None, history=None):
    """Checks the logits (fp32 [n], n >= 1), token (int32 [1]) and the optional state (int32 [2]) and
    history (int32 [m]) of argmax_into / sample_into; returns (n, state pointer, history pointer, m)."""
    require(x, "logits", dtype="float32", ndim=1)
    n = int32_size(x.shape[0])
    if n == 0:
        raise ValueError("logits: an empty array has no token")
    require(token, "token", dtype="int32", shape=(1,))
    cap, sptr, hptr = 0, np.uint64(0), np.uint64(0)
    if state is not None:
        require(state, "state", dtype="int32", shape=(2,))
        sptr = state
        if history is not None:
            require(history, "history", dtype="int32", ndim=1)
            hptr, cap = history, history.shape[0]
    return n, sptr, hptr, cap


def argmax_into(x, token, state=None, history=None):
    """token[0] = numpy.argmax(x) (x fp32 [n], n >= 1; token int32 [1]). With state (int32 [2]:
    position, length) the second pass also writes history[position] = token (when position <
    len(history)) and adds 1 to both: the token step's bookkeeping, inside its last launch."""
    n, sptr, hptr, cap = token_args(x, token, state, history)
    blocks = argmax_blocks(n)
    pv = _scratch("argmax_v", (ARGMAX_MAX_BLOCKS,), np.float32)
    pi = _scratch("argmax_i", (ARGMAX_MAX_BLOCKS,), np.int32)
    launch(FAMILY, "decoder_04_argmax_blocks", (blocks,), (ARGMAX_THREADS,), (x, n, pv, pi, int(aligned(16, x))))
    launch(FAMILY, "decoder_05_argmax_final", (1,), (ARGMAX_THREADS,), (pv, pi, blocks, token, sptr, hptr, cap))
    return token


@variant(dtypes=("float32",), alloc_out=_alloc_token)
def argmax(x, out=None):
    """numpy.argmax of fp32 logits [n] into an int32 [1] on the device (two launches)."""
    require(x, "logits", dtype="float32", ndim=1)
    return argmax_into(x, _alloc_token(x) if out is None else out)


# ---- the new kernels: inputs, references, families ------------------------------------------------------------

def _key(op):
    return lambda shape, dtype="float16": f"{op}:{'x'.join(map(str, shape))}:{dtype}"


def _silu_input(shape, dtype="float16", values="randn", seed=0):
    """(gate, up) fp16 [n]. large: gate and up ~ N(0, 1) x 300 (products overflow fp16 to inf, as in
    float64 rounded to fp16); hostile: NaN, +-inf, +-65504 and a subnormal in gate and up."""
    (n,) = shape
    rng = np.random.default_rng(seed)
    g, u = rng.standard_normal(n) * 3, rng.standard_normal(n)
    if values == "large":
        g, u = g * 100, u * 300
    elif values == "hostile":
        for j, (a, b) in enumerate([(np.nan, 1.0), (1.0, np.nan), (np.inf, 2.0), (-np.inf, 2.0), (65504.0, 65504.0),
                                    (-65504.0, 3.0), (6e-8, 1.0), (-30.0, np.inf), (20.0, 0.0), (np.inf, 0.0)]):
            if j < n:
                g[j], u[j] = a, b
    return g.astype(np.float16), u.astype(np.float16)


def reference_silu_mul(gate, up):
    """SiLU(gate) * up = gate / (1 + e^-gate) * up in float64, rounded once to fp16."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (ref_silu(gate) * np.asarray(up, np.float64)).astype(np.float16)


def _head_norm_input(shape, dtype="float16", values="randn", seed=0):
    """(q [nq, d], k [nk, d], wq [d], wk [d]) fp16 from shape (nq, nk, d). large: q, k x 3e3
    (squares past fp16, not fp32); hostile: a NaN row, a +inf, a zero row, +-65504."""
    nq, nk, d = shape
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((nq, d)) * 2, rng.standard_normal((nk, d)) * 2
    wq, wk = 1 + 0.1 * rng.standard_normal(d), 1 + 0.1 * rng.standard_normal(d)
    if values == "large":
        q, k = q * 3e3, k * 3e3
        q, k = np.clip(q, -65504, 65504), np.clip(k, -65504, 65504)
    elif values == "hostile":
        for a in (q, k):
            rows = a.shape[0]
            if rows > 0:
                a[0, d // 2] = np.nan
            if rows > 1:
                a[1, 0] = np.inf
            if rows > 2:
                a[2] = 0.0
            if rows > 3:
                a[3, 0], a[3, -1] = 65504.0, -65504.0
    return q.astype(np.float16), k.astype(np.float16), wq.astype(np.float16), wk.astype(np.float16)


def reference_head_norm(q, k, wq, wk, eps=1e-6):
    """Each row of q and k RMSNorm'd in float64 with its weight, rounded once to fp16."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (ref_rmsnorm(q, wq, eps).astype(np.float16), ref_rmsnorm(k, wk, eps).astype(np.float16))


def _embed_input(shape, dtype="float16", values="randn", seed=0):
    """(table [vocab, hidden] fp16, token int32 [1]). values: randn (a random id), first (0),
    last (vocab - 1), hostile (the row holds NaN, +-inf, +-65504), out_of_range (id = vocab: the
    kernel writes a NaN row), negative (id = -1: a NaN row)."""
    V, H = shape
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((V, H)).astype(np.float16)
    tok = {"first": 0, "last": V - 1, "out_of_range": V, "negative": -1}.get(values, int(rng.integers(V)))
    if values == "hostile":
        for j, val in enumerate((np.nan, np.inf, -np.inf, 65504.0, -65504.0)):
            if j < H:
                table[tok, j] = val
    return table, np.array([tok], np.int32)


def reference_embed(table, token):
    """table[token], or a row of NaN for an id outside [0, vocab) (what the kernel writes)."""
    V, H = table.shape
    t = int(np.asarray(token).reshape(-1)[0])
    return table[t].copy() if 0 <= t < V else np.full(H, np.nan, np.float16)


def _argmax_input(shape, dtype="float32", values="randn", seed=0):
    """(logits fp32 [n],). values: randn; ties (the max at 3 indices: the lowest wins); last (the
    max at n - 1, in the tail); nan (NaN at two places: the first wins, as numpy.argmax); inf (+inf
    twice, -inf elsewhere around it); neg_inf (every value -inf: index 0); constant (all equal: 0);
    zeros (-0.0 before +0.0: equal, the lower index)."""
    (n,) = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    spots = sorted(set(int(i) for i in rng.integers(0, n, 3)))
    if values == "ties":
        x[spots] = x.max() + 1
    elif values == "last":
        x[-1] = x.max() + 1
    elif values == "nan":
        x[spots[-1]] = np.nan
        x[spots[0]] = np.nan
    elif values == "inf":
        x[:] = -np.inf
        x[spots] = np.inf
    elif values == "neg_inf":
        x[:] = -np.inf
    elif values == "constant":
        x[:] = 1.5
    elif values == "zeros":
        x[:] = -1.0
        x[spots[0]] = -0.0
        x[spots[-1]] = 0.0
    return (x,)


def reference_argmax(x):
    """numpy.argmax (the first NaN if any; else the lowest index of the largest value), int32 [1]."""
    return np.array([np.argmax(np.asarray(x))], np.int32)


SILU_MUL = Family(
    name=NAME, kernels=FAMILY, op="silu_mul", case_key=_key("silu_mul"), make_input=_silu_input,
    reference=reference_silu_mul, bytes_moved=lambda g, u, *_: 3 * g.nbytes,
    variants={"01_silu_mul": silu_mul}, default={"float16": "01_silu_mul"},
    shapes={"Qwen3-8B FFN 12288": (12288,)}, record_cases=[((12288,), "float16")],
    check_cases=[((n,), v) for n in (1, 7, 8, 9, 31, 1023, 12288, 12291, 65537) for v in ("randn", "large", "hostile")],
    about="SiLU(gate) x up, fp16, 8 elements per thread with a scalar tail")
HEAD_NORM = Family(
    name=NAME, kernels=FAMILY, op="head_norm", case_key=_key("head_norm"), make_input=_head_norm_input,
    reference=reference_head_norm, bytes_moved=lambda q, k, wq, wk, *_: 2 * (q.nbytes + k.nbytes) + wq.nbytes + wk.nbytes,
    variants={"02_head_norm": head_norm}, default={"float16": "02_head_norm"},
    shapes={"Qwen3-8B q/k heads": (32, 8, 128)}, record_cases=[((32, 8, 128), "float16")],
    check_cases=[(s, v) for s in ((32, 8, 128), (1, 1, 128), (5, 3, 128), (4, 2, 16), (3, 1, 31), (2, 2, 257))
                 for v in ("randn", "large", "hostile")],
    about="Qwen3's per-head RMSNorm of q and k, one warp per head")
EMBED = Family(
    name=NAME, kernels=FAMILY, op="embed", case_key=_key("embed"), make_input=_embed_input,
    reference=reference_embed, bytes_moved=lambda t, tok, *_: 2 * t.shape[1] * t.itemsize + 4,
    variants={"03_embed": embed}, default={"float16": "03_embed"},
    shapes={"Qwen3-8B embedding row": (151936, 4096)}, record_cases=[((4096, 4096), "float16")],
    check_cases=[(s, v) for s in ((1, 1), (7, 9), (300, 4096), (64, 4100), (1000, 1023))
                 for v in ("randn", "first", "last", "hostile", "out_of_range", "negative")],
    about="one embedding row from a device-side token id")
ARGMAX = Family(
    name=NAME, kernels=FAMILY, op="argmax", case_key=_key("argmax"), make_input=_argmax_input,
    reference=reference_argmax, bytes_moved=lambda x, *_: x.nbytes + 4,
    tolerance=lambda *_: {"rtol": 0.0, "atol": 1e-9},      # an index is exact
    variants={"04_argmax": variant(dtypes=("float32",), alloc_out=_alloc_token)(argmax.fn)},
    default={"float32": "04_argmax"}, roof="read",
    shapes={"Qwen3 vocabulary": (151936,)}, record_cases=[((151936,), "float32")],
    check_cases=[((n,), v) for n in (1, 3, 4, 5, 1023, 2049, 151936, 151937, 600_001)
                 for v in ("randn", "ties", "last", "nan", "inf", "neg_inf", "constant", "zeros")],
    about="greedy argmax over fp32 logits: numpy.argmax's order, two passes")
OPS = [SILU_MUL, HEAD_NORM, EMBED, ARGMAX]           # the new kernels; the face's FAMILIES adds the token step (measure.DECODER)



# ---- the exercise: SiLU x up fused into the down GEMV ------------------------------------------------------------

EX_SHAPE = (2048, 6144)      # the down projection (K rows, F = the FFN width), a narrower Qwen3


def make_silu_down(shape=EX_SHAPE, seed=0):
    """(W_down [K, F] fp16, gate [F] fp16, up [F] fp16) for the exercise."""
    K, F = shape
    rng = np.random.default_rng(seed)
    W = (rng.standard_normal((K, F), dtype=np.float32) / math.sqrt(F)).astype(np.float16)
    return W, (rng.standard_normal(F) * 2).astype(np.float16), rng.standard_normal(F).astype(np.float16)


def reference_silu_down(W, gate, up):
    """y = W_down . (SiLU(gate) * up) in float64 (the product not rounded), fp32 [K]."""
    return (np.asarray(W, np.float64) @ (ref_silu(gate) * np.asarray(up, np.float64))).astype(np.float32)


def silu_down_tolerance(W, gate, up) -> dict:
    """Lab 04's GEMV bound (fp32 sums of F terms) on the fused product, plus fp32 SiLU's own error."""
    m = (ref_silu(gate) * np.asarray(up, np.float64)).astype(np.float32)
    t = G.tolerance(np.asarray(W, np.float32), m)
    return {"rtol": 1e-4, "atol": 4 * t["atol"]}


def silu_down_step(W, gate, up):
    """The lab's two launches the exercise replaces: SiLU x up (step 01, fp16 out), then lab 04's
    fp16-in fp32-out GEMV (its default logits step); buffers kept between calls."""
    K, F = W.shape
    m = _scratch("ex_m", (F,), np.float16)
    y = _scratch("ex_y", (K,), np.float32)
    silu_mul(gate, up, out=m)
    return G.LOGITS.variants[G.LOGITS.default["fp16_f32out"]](W, m, out=y)

