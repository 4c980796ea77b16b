"""GEMV's inputs, quantisers, float64 references, shapes and cases; a "dtype" is a data path (PATHS)."""
from __future__ import annotations

import numpy as np

NAME = "gemv"
FAMILY = "gemv"
GROUP = 128                 # quantisation group along M (INT8_GROUP in gemv.cu)
WARP_ROWS = 8               # rows per 256-thread block of the warp-per-row kernels
INT32_MAX = 2 ** 31 - 1

# path -> (weight dtype, x dtype, y dtype)
PATHS = {"float32": ("float32", "float32", "float32"), "int8": ("int8", "float32", "float32"),
         "f32_fp16w": ("float16", "float32", "float32"), "float16": ("float16", "float16", "float16"),
         "int4": ("uint8", "float16", "float32"), "fp16_f32out": ("float16", "float16", "float32"),
         "w8a16": ("int8", "float16", "float32")}     # int8 weights, fp16 activations (step 29)

# The report's table: (K, M) = (output rows, input length).
SHAPES = {
    "qwen3_qo_4096x4096": (4096, 4096),
    "qwen3_kv_512x4096": (512, 4096),
    "qwen3_gate_up_12288x4096": (12288, 4096),
    "qwen3_down_4096x12288": (4096, 12288),
    "qwen25_qkv_3584x3584": (3584, 3584),
    "qwen25_gate_up_18944x3584": (18944, 3584),
    "qwen25_down_3584x18944": (3584, 18944),
    "logits_151936x4096": (151936, 4096),
}
TARGET_SHAPES = [(4096, 4096), (12288, 4096), (4096, 12288), (18944, 3584), (151936, 4096)]

CHECK_M = [1, 7, 8, 31, 1023, 4097, 4100, 4096]     # 4096: the vector paths of steps 27-28 (M % 128 == 0)
CHECK_K = [1, 3, 33, 4097]
CHECK_CASES = [((k, m), v) for m in CHECK_M for k in (3, 33) for v in ("randn", "large", "hostile")] \
    + [((k, 1023), "randn") for k in CHECK_K] + [((4097, 4100), "hostile"), ((4097, 1023), "randn"), ((4097, 4096), "hostile"), ((4097, 4096), "randn")]  # noqa: E501


def case_key(shape, dtype) -> str:
    return f"{'x'.join(map(str, shape))}:{dtype}"


# ---- inputs, quantisers, references ----------------------------------------------------------

def _randn(rng, shape, tile_rows=2048):
    """N(0, 1) float32; tall matrices repeat a 2048-row block (600M normals on the host would outlast the lab)."""
    if len(shape) == 2 and shape[0] > 2 * tile_rows:
        base = rng.standard_normal((tile_rows, shape[1]), dtype=np.float32)
        return np.resize(base, shape)
    return rng.standard_normal(shape, dtype=np.float32)


def _grouped(W, group, edge=False):
    """(W fp32 [K, M] as [K, G, group], K, M, G): the last group padded with 0, or (edge) each row's last value."""
    W = np.asarray(W, np.float32)
    K, M = W.shape
    G = -(-M // group)
    return np.pad(W, ((0, 0), (0, G * group - M)), mode="edge" if edge else "constant").reshape(K, G, group), K, M, G


def quantize_int8(W, group=GROUP):
    """Symmetric per-group int8, scale = max|w| / 127 per row and group: (q int8 [K, M], scales fp32 [K, G])."""
    g, K, M, G = _grouped(W, group)
    amax = np.abs(g).max(axis=2)
    scales = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(g / scales[:, :, None]), -127, 127).astype(np.int8)
    return np.ascontiguousarray(q.reshape(K, G * group)[:, :M]), scales


def dequantize_int8(q, scales, group=GROUP):
    """w = q * scale of its group, in float64."""
    K, M = q.shape
    return q.astype(np.float64) * np.repeat(np.asarray(scales, np.float64), group, axis=1)[:, :M]


def quantize_int4(W, group=GROUP):
    """AWQ-style asymmetric per-group int4: scale = (max - min) / 15 (rounded to fp16), zero
    z = round(-min / scale) in [0, 15], q = clip(round(w / scale) + z, 0, 15); w ~ (q - z) * scale.
    Two weights per byte, the even column in the low nibble. Returns (packed uint8 [K, ceil(M/2)],
    scales fp16 [K, G], zeros uint8 [K, G])."""
    g, K, M, G = _grouped(W, group, edge=True)   # padding must not widen a group's range: repeat its last value
    lo, hi = np.minimum(g.min(axis=2), 0), np.maximum(g.max(axis=2), 0)
    s = ((hi - lo) / 15.0).astype(np.float16).astype(np.float32)
    s = np.where(s > 0, s, 1.0).astype(np.float32)
    z = np.clip(np.rint(-lo / s), 0, 15)
    q = np.clip(np.rint(g / s[:, :, None]) + z[:, :, None], 0, 15).astype(np.uint8).reshape(K, G * group)[:, :M]
    if M % 2:
        q = np.concatenate([q, np.zeros((K, 1), np.uint8)], axis=1)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(packed), s.astype(np.float16), z.astype(np.uint8)


def unpack_int4(packed, M):
    q = np.empty((packed.shape[0], packed.shape[1] * 2), np.uint8)
    q[:, 0::2], q[:, 1::2] = packed & 0xF, packed >> 4
    return q[:, :M]


def dequantize_int4(packed, scales, zeros, M, group=GROUP):
    """w = (q - z) * scale, in float64."""
    q = unpack_int4(packed, M).astype(np.float64)
    z = np.repeat(zeros.astype(np.float64), group, axis=1)[:, :M]
    s = np.repeat(scales.astype(np.float64), group, axis=1)[:, :M]
    return (q - z) * s


def _hostile_float(W, x, top):
    """Rows 0-5 of W: NaN; +inf; +inf and -inf; the largest value; an fp16-subnormal-sized value; inf meeting x == 0."""
    K, M = W.shape
    for r, c, v in ((0, 0, np.nan), (1, min(1, M - 1), np.inf), (2, 0, np.inf), (2, M - 1, -np.inf),
                    (3, M // 3, top), (3, 0, -top), (4, M - 1, 6e-8)):
        if r < K:
            W[r, c] = v
    if K > 5 and M > 3:
        W[5, M - 2] = np.inf
        x[M - 2] = 0.0


def make_input(shape, dtype="float32", values="randn", seed=0):
    """Host inputs of one data path (see PATHS), deterministic:
      float paths -> (W, x); int8 -> (q, scales, x); int4 -> (packed, scales, zeros, x).
    randn: W, x ~ N(0, 1) (quantised paths quantise that W). large: fp32 W * 1e15, fp16 W * 2e4
    (fp16 sums overflow to inf, as NumPy's do), quantised x * 1e30 (int8) / 6e4 (int4).
    hostile: NaN, +-inf, inf - inf, extremes and inf * 0 in W (float paths); in the quantised
    paths a NaN scale, a huge scale, and an inf and a 0 in x."""
    K, M = shape
    wdt, xdt, _ = PATHS[dtype]
    rng = np.random.default_rng(seed)
    W = _randn(rng, (K, M))
    x = rng.standard_normal(M, dtype=np.float32)
    if dtype in ("int8", "int4", "w8a16"):
        if values == "large":
            x = x * 1e30 if dtype == "int8" else np.clip(x * 1e4, -65504, 65504)
        if dtype != "int4":
            q, s = quantize_int8(W)
            out = [q, s]
        else:
            q, s, z = quantize_int4(W)
            out = [q, s, z]
        if values == "hostile":
            s[0, 0] = np.nan
            if K > 1:
                s[1, -1] = 65504 if dtype == "int4" else 1e30
            x[M // 2] = np.inf
            if M > 2:
                x[0] = 0.0
        return (*out, x.astype(xdt))
    if values == "large":
        W *= 1e15 if wdt == "float32" else 2e4
        W = np.clip(W, -65504, 65504) if wdt == "float16" else W
    elif values == "hostile":
        W = np.array(W, copy=True)
        _hostile_float(W, x, 1e30 if wdt == "float32" else 65504.0)
    return W.astype(wdt), x.astype(xdt)


def _path_of(args) -> str:
    """The data path of a tuple of inputs (host or device arrays)."""
    if len(args) == 4:
        return "int4"
    if len(args) == 3:
        return "w8a16" if str(args[2].dtype) == "float16" else "int8"
    wdt, xdt = str(args[0].dtype), str(args[1].dtype)
    return {("float32", "float32"): "float32", ("float16", "float32"): "f32_fp16w",
            ("float16", "float16"): "float16"}[(wdt, xdt)]


def dense_weight(*args) -> np.ndarray:
    """The float64 weight the kernels multiply by: W itself, or the dequantised weight."""
    path = _path_of(args)
    if path in ("int8", "w8a16"):
        return dequantize_int8(args[0], args[1])
    if path == "int4":
        return dequantize_int4(args[0], args[1], args[2], args[3].shape[0])
    return np.asarray(args[0], np.float64)


def _rowdot(W64, x64, absolute=False, chunk=1 << 22):
    """sum_j W[k, j] x[j] in float64 with IEEE inf/NaN semantics (products, then sums: BLAS may
    skip x == 0 and so lose inf * 0 = NaN), in row blocks to bound memory."""
    K, M = W64.shape
    out = np.empty(K, np.float64)
    step = max(1, chunk // max(M, 1))
    with np.errstate(invalid="ignore", over="ignore"):
        for r in range(0, K, step):
            p = W64[r:r + step] * x64
            if absolute:
                p = np.abs(np.where(np.isfinite(p), p, 0.0))
            out[r:r + step] = p.sum(axis=1)
    return out


def _ydtype(args):
    return PATHS[_path_of(args)][2]


def reference(*args):
    """y = W . x in float64 (the dequantised W for int8/int4), rounded once to the path's y dtype."""
    W64 = dense_weight(*args)
    with np.errstate(over="ignore"):
        return _rowdot(W64, np.asarray(args[-1], np.float64)).astype(_ydtype(args))


def tolerance(*args, out_dtype=None) -> dict:
    """rtol/atol for one case. Each kernel sums in fp32 with >= 32 partial sums per row, so a lane's
    chain is <= ceil(M/32) terms, plus <= 8 levels of reduction and 2 roundings of dequantisation:
    |y - y_ref| <= n u sum_j |w_j x_j|, n = ceil(M/32) + 10, u = 2^-24 (the standard bound for
    blocked summation). atol is that bound for the worst row; rtol covers the output rounding."""
    W64 = dense_weight(*args)
    M = W64.shape[1]
    mag = _rowdot(W64, np.asarray(args[-1], np.float64), absolute=True)
    n = -(-M // 32) + 10
    atol = float(n * 2.0 ** -24 * (mag.max() if mag.size else 0.0)) + 1e-30
    ydt = np.dtype(out_dtype or _ydtype(args))
    return {"rtol": 5e-3 if ydt == np.float16 else 1e-5, "atol": atol}


def bytes_moved(*args):
    """Unique bytes: every input (weight, scales, zeros, x) once, plus y."""
    K = args[0].shape[0]
    return sum(int(a.nbytes) for a in args) + K * np.dtype(_ydtype(args)).itemsize


# The cases each part of the lab times (and make bench records): the report's table, in (K, M).
QO, KV, UP, DOWN = (4096, 4096), (512, 4096), (12288, 4096), (4096, 12288)
Q25, UP25, DOWN25, VOCAB = (3584, 3584), (18944, 3584), (3584, 18944), (151936, 4096)
CASES = {
    "float32": [(s, "float32") for s in (QO, KV, UP, Q25)],
    "int8": [(s, "int8") for s in (QO, KV, UP, DOWN, Q25, UP25, DOWN25)],
    "f32_fp16w": [((4096, m), "f32_fp16w") for m in (256, 512, 1024, 2048, 4096, 8192, 16384)],
    "float16": [(s, "float16") for s in (QO, UP, DOWN, UP25, VOCAB, KV, DOWN25)],
    "int4": [(s, "int4") for s in (QO, UP, DOWN, UP25, VOCAB)],
    "w8a16": [(s, "w8a16") for s in (QO, UP, DOWN, UP25, VOCAB)],
}
RECORD_CASES = [c for cs in CASES.values() for c in cs]


# ---- the logits head: fp16 in, fp16 weight, fp32 out ---------------------------------------------

def _logits_input(shape, dtype="fp16_f32out", values="randn", seed=0):
    return make_input(shape, "float16", values, seed)


def _logits_reference(W, x):
    """The logits in float64, rounded once to fp32."""
    with np.errstate(over="ignore"):
        return _rowdot(np.asarray(W, np.float64), np.asarray(x, np.float64)).astype(np.float32)


def _logits_bytes(W, x, *_):
    return W.nbytes + x.nbytes + W.shape[0] * 4


# ---- prefill: Y[N, K] = X[N, M] . W[K, M]^T ------------------------------------------------------

BPATHS = {"float32": ("float32", "float32", "float32"), "f32_fp16w": ("float32", "float16", "float32"),
          "float16": ("float16", "float16", "float16")}


def _batched_input(shape, dtype="float16", values="randn", seed=0):
    """shape = (N tokens, K, M): (X [N, M], W [K, M])."""
    N, K, M = shape
    xdt, wdt, _ = BPATHS[dtype]
    W, x = make_input((K, M), "float32" if wdt == "float32" else "float16", values, seed)
    X = np.resize(np.random.default_rng(seed + 1).standard_normal(min(N, 64) * M, dtype=np.float32), (N, M))
    if N:
        X[0] = x
    return X.astype(xdt), W.astype(wdt)


def _batched_reference(X, W):
    W64, X64 = np.asarray(W, np.float64), np.asarray(X, np.float64)
    Y = np.empty((X.shape[0], W.shape[0]), np.float64)
    for n, xr in enumerate(X64):
        Y[n] = _rowdot(W64, xr)
    with np.errstate(over="ignore"):
        return Y.astype(X.dtype)        # each path's y dtype is its x dtype (BPATHS)


def _batched_tolerance(X, W):
    t = [tolerance(W.astype(np.float32), xr.astype(np.float32)) for xr in X] or [{"atol": 1e-30}]
    atol = max(d["atol"] for d in t)
    return {"rtol": 5e-3 if X.dtype == np.float16 else 1e-5, "atol": atol}


def _batched_bytes(X, W, *_):
    return X.nbytes + W.nbytes + X.shape[0] * W.shape[0] * (2 if X.dtype == np.float16 else 4)


# ---- conversions: fp32 <-> fp16, the two ends of the report's cuBLAS route ---------------------

def _conv_input(shape, dtype="f32_to_f16", values="randn", seed=0):
    src = "float32" if dtype == "f32_to_f16" else "float16"
    a = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    if values == "large":
        a *= 3e4
    elif values == "hostile" and a.size:
        for k, v in enumerate([np.inf, -np.inf, np.nan, 65519.0, 65520.0, 1e-6, 6e-8, 1e5]):
            a[k % a.size] = v
    with np.errstate(over="ignore"):
        return (a.astype(src),)


def _conv_reference(a):
    with np.errstate(over="ignore"):
        return a.astype(np.float16 if a.dtype == np.float32 else np.float32)
