"""GEMV family (seed 002, the matmul report): y[K] = W[K, M] . x[M], W row-major, fp32 accumulation.

A "dtype" here names a data path, as the report's kernels do:
  float32      fp32 W, fp32 x -> fp32 y                       (matmul_kernel_cu_fp32)
  int8         int8 W + fp32 scale per 128 along M, fp32 x -> fp32 y   (matmul_kernel_cu_fp32int8)
  f32_fp16w    fp16 W, fp32 x -> fp32 y                       (optimized::gemv_fp16_*)
  float16      fp16 W, fp16 x -> fp16 y                       (gemv_pure_fp16_kernel_v2)
  int4         AWQ-style: 2 weights per byte, fp16 scale + uint8 zero per 128, fp16 x -> fp32 y
The logits head (fp16 in, fp32 out) is the family LOGITS, the prefill kernels BATCHED
(Y[N, K] = X[N, M] . W^T), the fp32 <-> fp16 conversions CONVERT; FAMILIES lists all four.
"""
from __future__ import annotations

import sys

import numpy as np

from .core.results import fastest, pick, ratio, ratio_band
from .core.device import torch as torch_module
from .core.family import Family, Target
from .core.launch import derived, launch, variant
from .core.launch import aligned, out_like, require
from .core.device import info, is_live

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
    """N(0, 1) in float32. Tall matrices repeat a 2048-row block (generating 600M normals on the
    host would take longer than every kernel in the lab): fine for timing and for checks."""
    if len(shape) == 2 and shape[0] > 2 * tile_rows:
        base = rng.standard_normal((tile_rows, shape[1]), dtype=np.float32)
        return np.resize(base, shape)
    return rng.standard_normal(shape, dtype=np.float32)


def quantize_int8(W, group=GROUP):
    """Symmetric per-group int8: for each row and each group of `group` columns, scale =
    max|w| / 127, q = round(w / scale) in [-127, 127]. Returns (q int8 [K, M], scales fp32 [K, G])."""
    W = np.asarray(W, np.float32)
    K, M = W.shape
    G = -(-M // group)
    pad = np.zeros((K, G * group), np.float32)
    pad[:, :M] = W
    g = pad.reshape(K, G, group)
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
    W = np.asarray(W, np.float32)
    K, M = W.shape
    G = -(-M // group)
    pad = np.zeros((K, G * group), np.float32)
    pad[:, :M] = W
    if G * group > M:                      # padding must not widen a group's range: repeat its last value
        pad[:, M:] = W[:, -1:]
    g = pad.reshape(K, G, group)
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
    """Rows 0-5 of W: a NaN; a +inf; +inf and -inf (NaN); the largest value; an fp16 subnormal-sized
    value; an inf meeting x == 0 (inf * 0 = NaN)."""
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


# ---- launchers ----------------------------------------------------------------------------------

def validate(args, path):
    """Check dtypes, shapes and contiguity of one path's inputs before any launch; returns (K, M)."""
    wdt, xdt, _ = PATHS[path]
    want = {"float32": 2, "f32_fp16w": 2, "float16": 2, "fp16_f32out": 2, "int8": 3, "w8a16": 3, "int4": 4}[path]
    if len(args) != want:
        raise ValueError(f"{path} GEMV: expected {want} arrays "
                         f"({'W, x' if want == 2 else 'W, scales, x' if want == 3 else 'packed W, scales, zeros, x'}),"
                         f" got {len(args)}")
    W, x = args[0], args[-1]
    require(W, "W", dtype=wdt, ndim=2)
    require(x, "x", dtype=xdt, ndim=1)
    K, M = W.shape[0], x.shape[0]
    width = -(-M // 2) if path == "int4" else M
    if W.shape[1] != width:
        raise ValueError(f"W and x disagree: x has M = {M} elements, so W must be (K, {width})"
                         f"{' (two int4 weights per byte)' if path == 'int4' else ''}; got W {tuple(W.shape)}")
    if K > INT32_MAX or M > INT32_MAX:
        raise ValueError(f"K = {K}, M = {M}: the kernels take int32 sizes (at most {INT32_MAX})")
    G = -(-M // GROUP)
    if path in ("int8", "w8a16"):
        require(args[1], "scales", dtype="float32", ndim=(1, 2))
    if path == "int4":
        require(args[1], "scales", dtype="float16", ndim=(1, 2))
        require(args[2], "zeros", dtype="uint8", ndim=(1, 2))
    for a, nm in zip(args[1:-1], ("scales", "zeros")):
        if a.size != K * G:
            raise ValueError(f"{nm}: expected K x ceil(M/{GROUP}) = {K} x {G} = {K * G} values "
                             f"(one per row per group of {GROUP}), got {a.size}")
    return K, M


def _vec_ok(row_bytes, wbytes, W, xbytes, x) -> int:
    """A row starts on a wbytes boundary and both bases are aligned for the vector loads."""
    return int(row_bytes % wbytes == 0 and aligned(wbytes, W) and aligned(xbytes, x))


def _finish(K, M, out_, launch_fn):
    if K and M:
        launch_fn()
    elif K:
        out_.fill(0)          # an empty dot product is 0
    return out_


def _alloc(path):
    def alloc(*args):
        import cupy
        return cupy.empty((args[0].shape[0],), PATHS[path][2])
    return alloc


def _step(name, path, kind, wvec=16, xvec=16, int32=False):
    """A launcher for one kernel. kind: 'block128' (the seed's 128-thread block per row),
    'block256' (256 threads per row), 'warp' (a warp per row, 8 rows per block)."""
    wbytes = np.dtype(PATHS[path][0]).itemsize
    threads = {"block128": 128, "block256": 256, "warp": 256}[kind]

    def run(*args, out=None):
        K, M = validate(args, path)
        if int32 and K * M > INT32_MAX:
            raise ValueError(f"{name} indexes W with an int32 row offset (row * M): K x M = {K * M} "
                             f"elements is past 2^31 - 1 and would wrap; use step 12 (int64 offsets)")
        out_ = out_like(out, args[-1], "out", shape=(K,), dtype=PATHS[path][2])
        vec = () if wvec is None else (_vec_ok(M * wbytes, wvec, args[0], xvec, args[-1]),)
        grid = (-(-K // WARP_ROWS),) if kind == "warp" else (K,)
        return _finish(K, M, out_, lambda: launch(FAMILY, f"gemv_{name}", grid, (threads,),
                                                  (*args, out_, K, M, *vec)))
    run.__name__ = name
    return variant(dtypes=(path,), alloc_out=_alloc(path))(run)


# The fast template (steps 22-26): (vector width in elements, rows per group R, loads in flight U).
FAST = {"22_fp16_fast": ("float16", 8, 1, 4), "23_fp16_f32out_fast": ("fp16_f32out", 8, 1, 4),
        "24_f32_fast": ("float32", 4, 1, 4), "25_int8_fast": ("int8", 16, 2, 2), "26_int4_awq": ("int4", 32, 2, 2)}
FAST_G: dict = {}           # name -> forced threads per row (for experiments); default: fast_threads()
FAST_STREAM: dict = {}      # name -> forced 0/1 for the L2 evict-first weight loads (experiments, tests)


def fast_threads(K, M, vec, R, U, sms=None, warps_per_sm=48) -> int:
    """Threads per row G (32..256) for the fast template: the smallest power of two that gives
    the grid at least `warps_per_sm` warps per SM, while each thread still has U vectors to load."""
    sms = sms or info()["sms"]
    G, nv = 32, M // vec
    while G < 256 and (K / R) * G / 32 < sms * warps_per_sm and nv >= 2 * G * U:
        G *= 2
    return G


def _fast(name, stream=0, threads=None):
    """Launcher for a step of the fast template. stream=1 loads the weights with the L2 evict-first
    policy (the ablation variant 22_fp16_fast_stream); the default is plain __ldg. threads: G fixed
    (the ablation 22_ablate_g32: a warp per row, as step 10); default: fast_threads()."""
    path, vec, R, U = FAST[name]

    def run(*args, out=None):
        K, M = validate(args, path)
        out_ = out_like(out, args[-1], "out", shape=(K,), dtype=PATHS[path][2])
        G = threads or FAST_G.get(name) or fast_threads(K, M, vec, R, U)
        row_bytes = -(-M // 2) if path == "int4" else M * args[0].itemsize
        xvec = 16 * (4 if path == "int8" else 1)
        ok = int(row_bytes % 16 == 0 and aligned(16, args[0]) and aligned(xvec if path != "int4" else 16, args[-1]))
        rows_per_block = R * 256 // G
        st = FAST_STREAM.get(name, stream)
        return _finish(K, M, out_, lambda: launch(FAMILY, f"gemv_{name}", (-(-K // rows_per_block),), (256,),
                                                  (*args, out_, K, M, G, ok, st)))
    run.__name__ = f"{name}_stream" if stream else name if threads is None else f"{name}_g{threads}"
    # the L2 evict-first policy (createpolicy, .L2::cache_hint) needs sm_80
    return variant(dtypes=(path,), alloc_out=_alloc(path), min_arch=80 if stream else None)(run)


ROWS_MIN_WARPS_PER_SM = 16   # step 27 gives a warp per row; fewer rows than this per SM: step 22's split rows


def _rows(name, two_rows=None):
    """Step 27: a warp per row (R = 1, U = 16), or R = 2 rows per warp (U = 8) for tall matrices
    and rows narrower than 4096; matrices too short to give every SM ROWS_MIN_WARPS_PER_SM warps
    run step 22's kernel (split rows), which can. two_rows=False: never 2 rows (an ablation)."""
    split = _fast("22_fp16_fast")

    def run(*args, out=None):
        K, M = validate(args, "float16")
        if K < ROWS_MIN_WARPS_PER_SM * info()["sms"]:
            return split(*args, out=out)
        out_ = out_like(out, args[-1], "out", shape=(K,), dtype=PATHS["float16"][2])
        r2 = (M < 4096 or K >= 16384) if two_rows is None else two_rows
        vec = _vec_ok(M * 2, 16, args[0], 16, args[-1])
        return _finish(K, M, out_, lambda: launch(FAMILY, f"gemv_{name}", (-(-K // (WARP_ROWS * (1 + r2))),),
                                                  (256,), (*args, out_, K, M, vec, int(r2))))
    run.__name__ = name
    return variant(dtypes=("float16",), alloc_out=_alloc("float16"))(run)


TILE_SPLIT: dict = {}       # (step, K, M) -> warps per 16-row tile in steps 28/29 (tests, experiments)


def tile_split(name, K, M) -> int:
    """Warps per 16-row tile for steps 28 and 29: the most (up to 16, at most one per group of
    128 columns) for which every tile's block is resident at once, by the occupancy API. More
    warps per tile put more of each row's loads in flight; a second wave would leave its last
    blocks running alone while most SMs idle. Computed once per shape."""
    key = (name, K, M)
    S = TILE_SPLIT.get(key)
    if S is None:
        from .core.bench import blocks_per_sm
        from .core.build import kernel
        k = kernel(FAMILY, f"gemv_{name}")
        tiles, sms = -(-K // 16), info()["sms"]
        fits = [n for n in range(1, min(16, -(-M // GROUP)) + 1) if blocks_per_sm(k, 32 * n) * sms >= tiles]
        S = TILE_SPLIT[key] = max(fits, default=1)
    return S


def _int4_mma(name, split=None, tiles="28_int4_mma"):
    """Step 28: tensor cores, 16 rows per block, tile_split warps per tile; needs M % 128 == 0 and
    16-byte aligned bases, otherwise it runs step 26 (same inputs, same result to rounding).
    Ablations keep step 28's tile_split, or a fixed `split`; step 35 takes its own (`tiles`)."""
    cores = _fast("26_int4_awq")

    def run(*args, out=None):
        K, M = validate(args, "int4")
        W, x = args[0], args[-1]
        if M % GROUP or not (aligned(16, W) and aligned(16, x)):
            return cores(*args, out=out)
        out_ = out_like(out, x, "out", shape=(K,), dtype=PATHS["int4"][2])
        S = split or tile_split(tiles, K, M)
        return _finish(K, M, out_, lambda: launch(FAMILY, f"gemv_{name}", (-(-K // 16),), (S * 32,),
                                                  (*args, out_, K, M, S)))
    run.__name__ = name
    return variant(dtypes=("int4",), alloc_out=_alloc("int4"), min_arch=80)(run)


def _tile_major(W, scales, zeros=None):
    """The offline layout of steps 36 and 37 (done once, as engines repack weights at load time;
    NumPy or CuPy in, the same out). W [K, G * B] bytes (B = 64: int4, 128: int8), M % 128 == 0 ->
      Wi [T, G, 2B/64, 32, 16] uint8, T = ceil(K/16) tiles: Wi[T, q, 2c + h, 4g + t] = the 16 bytes at
         64c + 16t of row 16T + g + 8h's group q: the bytes a warp reads for tile T and group q, in
         the order its 32 lanes read them, so each 16-byte load of a warp is one contiguous 512-byte run;
      Mi [T, G, 8, 2 x]: for rows g and g + 8 of tile T, group q, their scales (and for int4 their zero
         points after them, then 2 bytes of padding): one 8-byte load per lane. Rows past K are zero."""
    xp = np if isinstance(W, np.ndarray) else __import__("cupy")
    K, G = W.shape[0], scales.size // max(W.shape[0], 1)
    T, C = -(-K // 16), W.shape[1] // (64 * G)
    pad = lambda a, dt: xp.concatenate([xp.asarray(a, dt).reshape(K, -1), xp.zeros((T * 16 - K, a.size // K), dt)])  # noqa: E731
    tile = lambda a: pad(a, a.dtype).reshape(T, 2, 8, G).transpose(0, 3, 2, 1)      # noqa: E731   [T, G, g, h]
    Wi = xp.ascontiguousarray(pad(W.view(xp.uint8), xp.uint8).reshape(T, 2, 8, G, C, 4, 16)
                              .transpose(0, 3, 4, 1, 2, 5, 6)).reshape(T, G, 2 * C, 32, 16)
    if zeros is None:                                                  # W8A16: fp32 scales, [T, G, 8, 2]
        return Wi, xp.ascontiguousarray(tile(xp.asarray(scales, xp.float32)))
    Mi = xp.zeros((T, G, 8, 8), xp.uint8)
    Mi[..., 0:4] = xp.ascontiguousarray(tile(xp.asarray(scales, xp.float16))).view(xp.uint8).reshape(T, G, 8, 4)
    Mi[..., 4:6] = tile(xp.asarray(zeros, xp.uint8))
    return Wi, Mi


def interleave_int4(W, scales, zeros):
    """Step 36's layout of int4 weights (packed W [K, M/2], scales and zeros [K, G]): _tile_major."""
    return _tile_major(W, scales, zeros)


def interleave_w8a16(W, scales):
    """Step 37's layout of int8 weights (W [K, M], fp32 scales [K, G]): _tile_major."""
    return _tile_major(W, scales)


def untile(Wi, K):
    """The inverse of _tile_major's weight layout: Wi [T, G, 2C, 32, 16] -> the row-major bytes [K, G * 64C]
    (uint8: view as int8 for W8A16). NumPy or CuPy, as given."""
    xp = np if isinstance(Wi, np.ndarray) else __import__("cupy")
    T, Gn, C2 = Wi.shape[:3]
    return xp.ascontiguousarray(Wi.reshape(T, Gn, C2 // 2, 2, 8, 4, 16).transpose(0, 3, 4, 1, 2, 5, 6)
                                .reshape(T * 16, -1)[:K])


_TILED: dict = {}      # id(W) -> (weak references to the weight arrays, their _tile_major repack)


def tiles(*weights):
    """Steps 36 / 37's layout of one matrix's quantised weights (int4: packed, scales, zeros; W8A16:
    q, scales): (Wi, Mi), repacked on the first call and kept while those arrays live, so the next
    call with the same arrays (by identity, through weak references) costs a dictionary lookup.
    An engine repacks once at load time (pack()) and keeps only the repacked arrays; this cache is
    for the call a learner makes with the quantiser's arrays. Changing a weight array in place
    leaves its old repack here: make a new array (or call forget(W))."""
    import weakref
    key = id(weights[0])
    hit = _TILED.get(key)
    if hit is not None and len(hit[0]) == len(weights) and all(r() is a for r, a in zip(hit[0], weights)):
        return hit[1]
    packed = _tile_major(*weights)
    if not isinstance(packed[0], np.ndarray):
        derived(*packed)                  # a launch plan may replay them for these very arrays (core.launch)
    drop = lambda _, k=key: _TILED.pop(k, None)          # noqa: E731   any of them freed: the entry goes
    _TILED[key] = (tuple(weakref.ref(a, drop) for a in weights), packed)
    return packed


def forget(W) -> None:
    """Drop the cached repack of W (after changing W in place)."""
    _TILED.pop(id(W), None)


def pack(path, *weights):
    """The arrays a path's default step (BEST) reads, made once: for int4 / W8A16 whose BEST reads the
    tile-major layout, (Wi, Mi, scales[, zeros]) for M % 128 == 0 (else the quantiser's arrays, which
    the step runs through its fallback); for every other path, the weights as they are."""
    if path not in ("int4", "w8a16") or not BEST[path].endswith("_tiles"):
        return weights
    W, sc = weights[0], weights[1]
    K, M = W.shape[0], (W.shape[1] * 2 if path == "int4" else W.shape[1])
    if not K or M % GROUP or sc.shape != (K, M // GROUP):
        return weights
    return (*_tile_major(*weights), *weights[1:])


def unpack(*weights):
    """pack()'s inverse: the quantiser's arrays (or the weights as they are when they were not packed)."""
    if weights and weights[0].ndim == 5:
        return (untile(weights[0], weights[2].shape[0]).view(np.int8 if weights[1].dtype == np.float32 else np.uint8),
                *weights[2:])
    return weights


def read_by(weights) -> tuple:
    """The arrays of a path's weights that its default step reads: pack()'s Wi and Mi (the scales and
    zeros beside them are for unpack), or every array."""
    return tuple(weights[:2]) if weights and weights[0].ndim == 5 else tuple(weights)


def _tiles(name, path):
    """Steps 36 (int4) and 37 (W8A16), and their ablations: steps 28 and 29 over _tile_major's layout.
    Called like steps 28 / 29 (the quantiser's arrays), the step reads their repack from tiles(): made
    on the first call with those arrays, a lookup after. Called with pack()'s arrays (Wi, Mi, *the
    path's arrays but W, x), the step reads them as they are (what an engine does). Where step 28 / 29
    would take their fallback (M % 128, unaligned bases), the step runs step 28 / 29."""
    before, step = ("28_int4_mma", "36_int4_tiles") if path == "int4" else ("29_int8_w8a16", "37_w8a16_tiles")
    raw = 4 if path == "int4" else 3

    def run(*args, out=None):
        if len(args) == raw:
            K, M = validate(args, path)
            W, x = args[0], args[-1]
            if M % GROUP or not K or not M or not (aligned(16, W) and aligned(16, x)):
                return VARIANTS[before](*args, out=out)          # the fallback: step 28 / 29 itself
            args = (*tiles(*args[:-1]), *args[1:])
        elif len(args) != raw + 1:
            raise ValueError(f"step {name}: expected the {path} arrays or gemv.pack's (Wi, Mi, ...) and x, "
                             f"got {len(args)} arrays")
        Wi, Mi, sc, x = args[0], args[1], args[2], args[-1]
        require(x, "x", dtype="float16", ndim=1)
        M = x.shape[0]
        G = M // GROUP
        K = sc.size // max(G, 1)
        T = -(-K // 16)
        require(Wi, "Wi", dtype="uint8", ndim=5)
        require(Mi, "Mi", dtype="uint8" if path == "int4" else "float32", ndim=4)
        want = ((T, G, 2 if path == "int4" else 4, 32, 16), (T, G, 8, 8 if path == "int4" else 2))
        if M % GROUP or (Wi.shape, Mi.shape) != want or any(a.size != K * G for a in args[2:-1]):
            raise ValueError(f"step {name}: Wi {tuple(Wi.shape)}, Mi {tuple(Mi.shape)} do not match x (M = {M}) and "
                             f"scales ({K} rows): make them with gemv.pack('{path}', ...)")
        if not (aligned(16, Wi) and aligned(16, x) and aligned(8, Mi)):
            raise ValueError(f"step {name}: Wi and x must start on 16-byte boundaries, Mi on 8")
        out_ = out_like(out, x, "out", shape=(K,), dtype=PATHS[path][2])
        S = tile_split(step, K, M)                           # an ablation keeps its step's split
        kargs = (Wi, Mi, *args[2:], out_, K, M, S) if path == "int4" else \
            (Wi, sc if name.endswith("ablate_meta") else Mi, x, out_, K, M, S, 1)
        return _finish(K, M, out_, lambda: launch(FAMILY, f"gemv_{name}", (T,), (S * 32,), kargs))
    run.__name__ = name
    return variant(dtypes=(path,), alloc_out=_alloc(path), min_arch=80)(run)


def _w8a16(name, split=None):
    """Step 29: int8 weights, fp16 x, on the tensor cores; 16 rows per block, tile_split warps per
    tile. M % 128 != 0 or a misaligned base: the kernel's plain loop (vec_ok = 0). Ablations keep
    step 29's tile_split, or a fixed `split`."""
    def run(*args, out=None):
        K, M = validate(args, "w8a16")
        W, x = args[0], args[-1]
        out_ = out_like(out, x, "out", shape=(K,), dtype=PATHS["w8a16"][2])
        vec = int(M % GROUP == 0 and aligned(16, W) and aligned(16, x))
        S = split or tile_split("29_int8_w8a16", K, M)
        return _finish(K, M, out_, lambda: launch(FAMILY, f"gemv_{name}", (-(-K // 16),), (S * 32,),
                                                  (*args, out_, K, M, S, vec)))
    run.__name__ = name
    return variant(dtypes=("w8a16",), alloc_out=_alloc("w8a16"), min_arch=80)(run)


VARIANTS = {
    "01_f32_sdata": _step("01_f32_sdata", "float32", "block128", wvec=None),
    "02_f32_register": _step("02_f32_register", "float32", "block128", wvec=None),
    "03_f32_float4": _step("03_f32_float4", "float32", "block128"),
    "30_f32_sdata_float4": _step("30_f32_sdata_float4", "float32", "block128"),   # the report's before of 04
    "04_f32_ldg": _step("04_f32_ldg", "float32", "block128"),
    "31_int8_sdata": _step("31_int8_sdata", "int8", "block128", wvec=None),        # the report's before of 06
    "05_int8_scalar": _step("05_int8_scalar", "int8", "block128", wvec=None),
    "06_int8_char4": _step("06_int8_char4", "int8", "block128", wvec=4),
    "07_f32_fp16w_warp": _step("07_f32_fp16w_warp", "f32_fp16w", "warp", wvec=8),
    "08_f32_fp16w_block": _step("08_f32_fp16w_block", "f32_fp16w", "block256", wvec=8),
    "09_fp16_half2": _step("09_fp16_half2", "float16", "warp", wvec=4, xvec=4),
    "32_fp16_v2_plain": _step("32_fp16_v2_plain", "float16", "warp"),      # the report's v2 before
    "33_fp16_v2_ldg": _step("33_fp16_v2_ldg", "float16", "warp"),          # the report's v2 after
    "10_fp16_v2": _step("10_fp16_v2", "float16", "warp"),
    "22_fp16_fast": _fast("22_fp16_fast"),
    "22_fp16_fast_stream": _fast("22_fp16_fast", stream=1),   # step 22 + the L2 evict-first policy (ablation)
    "24_f32_fast": _fast("24_f32_fast"),
    "25_int8_fast": _fast("25_int8_fast"),
    "26_int4_awq": _fast("26_int4_awq"),
    "27_fp16_rows": _rows("27_fp16_rows"),
    "28_int4_mma": _int4_mma("28_int4_mma"),
    "29_int8_w8a16": _w8a16("29_int8_w8a16"),
    "35_int4_pipelined": _int4_mma("35_int4_pipelined", tiles="35_int4_pipelined"),
    "36_int4_tiles": _tiles("36_int4_tiles", "int4"),
    "37_w8a16_tiles": _tiles("37_w8a16_tiles", "w8a16"),
}
BEST = {"float32": "24_f32_fast", "int8": "25_int8_fast", "f32_fp16w": "08_f32_fp16w_block",
        "float16": "27_fp16_rows", "int4": "36_int4_tiles",
        "w8a16": "37_w8a16_tiles"}

DISPATCH_M = 2048           # the report's threshold between steps 07 and 08


def f32_fp16w_dispatch(W, x, out=None, threshold=DISPATCH_M):
    """The report's MatmulLayer::forward for fp32 input x fp16 weight: M >= threshold -> the
    block-per-row kernel (step 08), else the warp-per-row kernel (step 07)."""
    name = "08_f32_fp16w_block" if x.shape[0] >= threshold else "07_f32_fp16w_warp"
    return VARIANTS[name](W, x, out=out)


# ---- baselines: cuBLAS through CuPy, torch when present ------------------------------------------

def _cublas(*args):
    path = _path_of(args)
    if path not in ("float32", "float16"):
        return None
    import cupy
    W, x = args
    y = cupy.empty((W.shape[0],), W.dtype)
    return lambda: cupy.matmul(W, x, out=y)


def _torch_mv(*args):
    if _path_of(args) not in ("float32", "float16"):
        return None
    torch = torch_module()
    if torch is None:
        return None
    W, x = (torch.from_dlpack(a) for a in args)
    y = torch.empty(W.shape[0], dtype=W.dtype, device=W.device)
    return lambda: torch.mv(W, x, out=y)


def _torch_linear(*args):
    if _path_of(args) != "float16":
        return None
    torch = torch_module()
    if torch is None:
        return None
    W, x = (torch.from_dlpack(a) for a in args)
    x2 = x.view(1, -1)
    return lambda: torch.nn.functional.linear(x2, W)


FLOOR = "read-only kernel (same weight bytes)"


def _read_floor(*args):
    """The floor of any GEMV of these inputs: lab 00's fastest reader over the weight's own bytes
    (bench.read_floor; 256 B in flight per thread is what step 27 asks for)."""
    from .core.bench import read_floor
    return read_floor(args[0]) if aligned(16, args[0]) else None


COMPUTE_ONLY = "same kernel, weights from registers (compute only)"


def _compute_only(*args):
    """The best quantised step (int8 25, int4 36, W8A16 37) built with -DGEMV_COMPUTE_ONLY: its
    weight words come from registers, not memory; scales, zeros and x are still read and every
    instruction still runs (the answer is meaningless). Its time is what the instructions alone
    cost; FLOOR is what the bytes alone cost; a kernel nears the larger only by overlapping them.
    The step's own launches (grid, block, split, fallback) are recorded once and replayed."""
    from .core.build import module
    from .core.launch import record_launches
    path = _path_of(args)
    if path not in ("int8", "int4", "w8a16") or not args[0].shape[0] or not args[-1].shape[0]:
        return None
    step = BEST[path]
    if not VARIANTS[step].runs_here():         # an sm_80 step on an older GPU: no baseline either
        return None
    mod = module(FAMILY, ("-DGEMV_COMPUTE_ONLY",))
    v = VARIANTS[step]
    args = (*pack(path, *args[:-1]), args[-1])          # steps 36 / 37: on the repacked arrays an engine keeps
    recs = record_launches(lambda: v(*args), keep_result=True)
    runs = [(mod.get_function(k.name), g, b, a, sm) for k, g, b, a, sm in recs]
    keep = recs.result, args    # the arrays the recorded arguments point to stay allocated

    def run():
        for k, g, b, a, sm in runs:
            k(g, b, a, shared_mem=sm)
        return keep[0]
    return run


BASELINES = {"cuBLAS (cupy.matmul)": _cublas, "torch.mv (cuBLAS)": _torch_mv, "torch F.linear": _torch_linear,
             FLOOR: _read_floor, COMPUTE_ONLY: _compute_only}

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


def _cublas_f16out(W, x):
    import cupy
    y = cupy.empty((W.shape[0],), W.dtype)
    return lambda: cupy.matmul(W, x, out=y)


LOGITS = Family(
    roof="read",
    name="gemv_logits", kernels=FAMILY, case_key=case_key, make_input=_logits_input,
    reference=_logits_reference, bytes_moved=_logits_bytes,
    tolerance=lambda W, x: tolerance(W, x, out_dtype="float32"),
    variants={"11_fp16_f32out_half2": _step("11_fp16_f32out_half2", "fp16_f32out", "warp", wvec=4, xvec=4, int32=True),
              "12_fp16_f32out_ilp": _step("12_fp16_f32out_ilp", "fp16_f32out", "warp"),
              "23_fp16_f32out_fast": _fast("23_fp16_f32out_fast")},
    default={"fp16_f32out": "23_fp16_f32out_fast"},
    baselines={"cuBLAS (cupy.matmul, fp16 out)": _cublas_f16out},
    shapes={"logits_151936x4096": (151936, 4096), "qwen3_gate_up_12288x4096": (12288, 4096),
            "qwen3_down_4096x12288": (4096, 12288)},
    check_cases=[c for c in CHECK_CASES if c[0][1] in (1, 8, 31, 4097, 4100)] + [((151936, 64), "randn")],
    record_cases=[(s, "fp16_f32out") for s in (QO, KV, UP, DOWN, VOCAB)],
)


def int32_offsets(shapes=None):
    """Where row * M (the element offset of the last row) leaves int32, per shape and weight dtype:
    the element offset, and the byte offset for fp16 and fp32 weights."""
    import pandas as pd
    shapes = shapes or {**SHAPES, "vocab_152064x14336 (wider model)": (152064, 14336)}
    rows = []
    for nm, (K, M) in shapes.items():
        last = (K - 1) * M
        rows.append({"shape": nm, "K": K, "M": M, "(K-1)*M": last, "elements fit int32": last <= INT32_MAX,
                     "fp16 bytes fit int32": 2 * last <= INT32_MAX, "fp32 bytes fit int32": 4 * last <= INT32_MAX,
                     "int32 wraps to": int(np.array([last]).astype(np.int64).astype(np.int32)[0])})
    return pd.DataFrame(rows)


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
    ydt = BPATHS[{("float32", "float32"): "float32", ("float32", "float16"): "f32_fp16w",
                  ("float16", "float16"): "float16"}[(str(X.dtype), str(W.dtype))]][2]
    Y = np.empty((X.shape[0], W.shape[0]), np.float64)
    for n, xr in enumerate(X64):
        Y[n] = _rowdot(W64, xr)
    with np.errstate(over="ignore"):
        return Y.astype(ydt)


def _batched_tolerance(X, W):
    t = [tolerance(W.astype(np.float32), xr.astype(np.float32)) for xr in X] or [{"atol": 1e-30}]
    atol = max(d["atol"] for d in t)
    return {"rtol": 5e-3 if X.dtype == np.float16 else 1e-5, "atol": atol}


def _batched_bytes(X, W, *_):
    return X.nbytes + W.nbytes + X.shape[0] * W.shape[0] * (2 if X.dtype == np.float16 else 4)


def _bvalidate(X, W, path):
    xdt, wdt, _ = BPATHS[path]
    require(X, "X", dtype=xdt, ndim=2)
    require(W, "W", dtype=wdt, ndim=2)
    if X.shape[1] != W.shape[1]:
        raise ValueError(f"X and W disagree: X has M = {X.shape[1]} columns, W has {W.shape[1]}")
    N, K = X.shape[0], W.shape[0]
    if N > 65535:
        raise ValueError(f"N = {N} tokens: the grid's y dimension holds at most 65535; split the batch")
    return N, K, X.shape[1]


def _bstep(name, path, threads, wvec, xvec):
    def run(X, W, out=None):
        N, K, M = _bvalidate(X, W, path)
        out_ = out_like(out, X, "out", shape=(N, K), dtype=BPATHS[path][2])
        ok = int((M * W.itemsize) % wvec == 0 and (M * X.itemsize) % xvec == 0 and aligned(wvec, W)
                 and aligned(xvec, X))
        if N and K and M:
            launch(FAMILY, f"gemv_{name}", (K, N), (threads,), (X, W, out_, N, K, M, ok))
        elif N and K:
            out_.fill(0)
        return out_
    run.__name__ = name
    return variant(dtypes=(path,), alloc_out=lambda X, W: __import__("cupy").empty((X.shape[0], W.shape[0]),
                                                                                     BPATHS[path][2]))(run)


# ---- conversions: fp32 <-> fp16, the two ends of the report's cuBLAS route ---------------------

CONV = {"18_f32_to_f16_x2": ("float32", "float16", 2), "19_f32_to_f16_x4": ("float32", "float16", 4),
        "20_f16_to_f32_x2": ("float16", "float32", 2), "21_f16_to_f32_x4": ("float16", "float32", 4)}


def _conv_variant(name):
    src, dst, per = CONV[name]

    def run(a, out=None):
        require(a, "a", dtype=src)
        out_ = out_like(out, a, "out", shape=a.shape, dtype=dst)
        n = a.size
        if n:
            # the vector path loads per x src and stores per x dst: each base aligned to its own width
            ok = int(aligned(per * a.itemsize, a) and aligned(per * out_.itemsize, out_))
            launch(FAMILY, f"gemv_{name}", (-(-n // (256 * per)),), (256,), (a, out_, np.int64(n), ok))
        return out_
    run.__name__ = name
    return variant(dtypes=("f32_to_f16" if src == "float32" else "f16_to_f32",),
                   alloc_out=lambda a: __import__("cupy").empty(a.shape, dst))(run)


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


def _cupy_astype(a):
    import cupy
    o = cupy.empty(a.shape, cupy.float16 if a.dtype == cupy.float32 else cupy.float32)
    return lambda: cupy.copyto(o, a, casting="same_kind" if a.dtype == cupy.float32 else "safe")


CONVERT_SHAPES = {"prefill_512x4096": (512 * 4096,), "prefill_512x12288": (512 * 12288,)}
CONVERT = Family(
    name="gemv_convert", kernels=FAMILY, case_key=case_key, make_input=_conv_input, reference=_conv_reference,
    bytes_moved=lambda a, *_: a.nbytes + a.size * (2 if a.dtype == np.float32 else 4),
    variants={nm: _conv_variant(nm) for nm in CONV},
    default={"f32_to_f16": "19_f32_to_f16_x4", "f16_to_f32": "21_f16_to_f32_x4"},
    baselines={"cupy copyto (cast)": _cupy_astype},
    shapes=CONVERT_SHAPES,
    record_cases=[(s, dt) for dt in ("f32_to_f16", "f16_to_f32") for s in CONVERT_SHAPES.values()],
    check_cases=[((n,), v) for n in (1, 3, 5, 4097, 512 * 4096 + 3) for v in ("randn", "large", "hostile")],
)


def _hgemm_route(X, W):
    """The report's route for fp32 tokens x fp16 weight at batch >= 8: X -> fp16 (step 19),
    cublasHgemm (cupy.matmul on fp16, tensor cores), Y -> fp32 (step 21). Scratch allocated here."""
    if X.dtype != np.float32 or W.dtype != np.float16:
        return None
    import cupy
    X16 = cupy.empty(X.shape, cupy.float16)
    Y16 = cupy.empty((X.shape[0], W.shape[0]), cupy.float16)
    Y = cupy.empty((X.shape[0], W.shape[0]), cupy.float32)
    to16, to32 = CONVERT.VARIANTS["19_f32_to_f16_x4"], CONVERT.VARIANTS["21_f16_to_f32_x4"]

    def f():
        to16(X, out=X16)
        cupy.matmul(X16, W.T, out=Y16)
        return to32(Y16, out=Y)
    return f


GEMMEX = "cuBLAS GemmEx route (f16 in, f32 out)"


def _gemmex_route(X, W):
    """The report's BatchedMatmulLayer route for fp16 tokens x fp16 weight -> fp32 out (the
    fp16-input, fp32-output prefill): one cublasGemmEx with fp16 A and B, fp32 C and fp32
    accumulation (tensor cores), beside the Hgemm route. Its output is fp32: twice the output bytes
    of the fp16 path's steps, as in the engine. Scratch allocated here."""
    if X.dtype != np.float16 or W.dtype != np.float16:
        return None
    import cupy
    from .core.cublas import gemm_f32out
    Y = cupy.empty((X.shape[0], W.shape[0]), cupy.float32)
    return lambda: gemm_f32out(X, W, Y)


def _bcublas(X, W):
    if X.dtype != W.dtype:
        return None
    import cupy
    Y = cupy.empty((X.shape[0], W.shape[0]), X.dtype)
    return lambda: cupy.matmul(X, W.T, out=Y)


def _btorch(X, W):
    if X.dtype != W.dtype:
        return None
    torch = torch_module()
    if torch is None:
        return None
    tX, tW = torch.from_dlpack(X), torch.from_dlpack(W)
    return lambda: torch.nn.functional.linear(tX, tW)


BATCH_TOKENS = [1, 2, 4, 8, 16, 32, 128, 512]
VIT = (1024, 1152, 1152)      # Qwen3-VL ViT: 1024 patch tokens, hidden 1152


def crossover_cases(tokens=BATCH_TOKENS, shapes=((4096, 4096), (12288, 4096)), path="float16"):
    """Tokens 1..512 at the given (K, M): the custom batched kernels against cuBLAS."""
    return [((n, k, m), path) for k, m in shapes for n in tokens]


BATCHED_CASES = {"float16": crossover_cases(), "f32_fp16w": crossover_cases(shapes=((4096, 4096),), path="f32_fp16w"),
                 "float32": [((n, 4096, 4096), "float32") for n in (1, 8, 64)], "vit": [(VIT, "float16")]}
BATCHED = Family(
    roof="read",
    name="gemv_batched", kernels=FAMILY, case_key=case_key, make_input=_batched_input,
    reference=_batched_reference, bytes_moved=_batched_bytes, tolerance=_batched_tolerance,
    variants={"34_batched_f32_sdata": _bstep("34_batched_f32_sdata", "float32", 128, 16, 16),   # the report's before of 13
              "13_batched_f32": _bstep("13_batched_f32", "float32", 128, 16, 16),
              "14_batched_f16w_half2": _bstep("14_batched_f16w_half2", "f32_fp16w", 256, 4, 8),
              "15_batched_f16w_half2x2": _bstep("15_batched_f16w_half2x2", "f32_fp16w", 256, 8, 16),
              "16_batched_fp16_half2": _bstep("16_batched_fp16_half2", "float16", 256, 4, 4),
              "17_batched_fp16_float4": _bstep("17_batched_fp16_float4", "float16", 256, 16, 16)},
    default={"float32": "13_batched_f32", "f32_fp16w": "15_batched_f16w_half2x2", "float16": "17_batched_fp16_float4"},
    baselines={"cuBLAS (cupy.matmul)": _bcublas, "cuBLAS Hgemm route (f32->f16, Hgemm, f16->f32)": _hgemm_route,
               GEMMEX: _gemmex_route, "torch F.linear": _btorch},
    shapes={"prefill_512x4096x4096": (512, 4096, 4096), "vit_1024x1152x1152": (1024, 1152, 1152)},
    check_cases=[((n, k, m), v) for (n, k, m) in [(1, 3, 7), (3, 33, 31), (8, 33, 1023), (9, 17, 4100), (2, 5, 8)]
                 for v in ("randn", "hostile")] + [((0, 4, 8), "randn"), ((3, 4, 0), "randn")],
    record_cases=[c for cs in BATCHED_CASES.values() for c in cs],
)






def check_variants(family=None, names=None, cases=None) -> None:
    """check.variants (the family's M-scaled tolerance applies there); the main GEMV family by default."""
    from .core.check import variants
    variants(family or GEMV, names, cases)


def waves(K, rows_per_block, threads, sms, blocks_per_sm) -> dict:
    """How a GEMV grid fills the GPU (bench.waves), and the warps each SM gets on average."""
    from .core.bench import waves as _waves
    blocks = -(-K // rows_per_block)
    return {**_waves(blocks, sms, blocks_per_sm), "warps per SM (avg)": round(blocks * threads / 32 / sms, 1)}


def orin_model(shapes=None, gbps=None, frac=0.85):
    """Jetson Orin on paper (a MODEL, not a measurement): time = unique bytes / (frac x roof) for
    the fp16 and int8/int4 paths, and the rows each of its 16 SMs gets."""
    import pandas as pd
    from .core.device import ORIN_PEAK_GBPS
    gbps = gbps or ORIN_PEAK_GBPS
    shapes = shapes or {k: v for k, v in SHAPES.items()}
    rows = []
    for nm, (K, M) in shapes.items():
        b16 = 2 * K * M + 2 * M + 2 * K
        b8 = K * M + 4 * K * -(-M // GROUP) + 4 * M + 4 * K
        b4 = K * -(-M // 2) + 3 * K * -(-M // GROUP) + 2 * M + 4 * K
        for board, bw in gbps.items():
            rows.append({"shape": nm, "board": f"Orin {board}", "roof GB/s": bw, "rows per SM (16 SMs)": round(K / 16, 1),
                         "fp16 µs (model)": b16 / (frac * bw) / 1e3, "int8 µs (model)": b8 / (frac * bw) / 1e3,
                         "int4 µs (model)": b4 / (frac * bw) / 1e3})
    return pd.DataFrame(rows)


# ---- the targets, read from the results on screen ----------------------------------------

def time_us(df, name, case) -> float:
    """The median µs of one row of a results frame (NaN when absent)."""
    return pick(df, name, "median_us", case=case)


def _vs(slow_case, fast_case=None, slow=None, fast=None, floor=False):
    """A target's measure: time(slow at slow_case) / time(fast at fast_case), each side the named
    row or, by default, the fastest of our steps there (read from the data); floor=True puts the
    read-only floor in place of the fast side: the best any kernel could score."""
    def m(df):
        fc = fast_case or slow_case
        f = FLOOR if floor else fast or fastest(df, fc)
        sl = slow or fastest(df, slow_case)
        return ratio_band(df, f, sl, fc, slow_case) if f and sl else float("nan")
    return m


def _frac_read(case, floor=False):
    def m(df):
        name = FLOOR if floor else fastest(df, case)
        return pick(df, name, "frac_read", case=case) if name else float("nan")
    return m


def _targets():
    k = case_key
    cub = "cuBLAS (cupy.matmul)"
    out = [Target(f"fastest fp16 vs cuBLAS, {s[0]}x{s[1]}", _vs(k(s, "float16"), slow=cub),
                  1.3 if s == (4096, 4096) else 1.0, floor=_vs(k(s, "float16"), slow=cub, floor=True))
           for s in TARGET_SHAPES]
    out += [Target(f"fastest fp16, fraction of the read roof, {s[0]}x{s[1]}", _frac_read(k(s, "float16")), 0.9,
                   floor=_frac_read(k(s, "float16"), floor=True)) for s in TARGET_SHAPES[1:]]
    out += [Target(f"{path} vs our fastest fp16, {s[0]}x{s[1]}", _vs(k(s, "float16"), k(s, path)), need,
                   floor=_vs(k(s, "float16"), k(s, path), floor=True))
            for path, need in (("int8", 1.6), ("w8a16", 1.6), ("int4", 2.5))
            for s, _ in CASES[path] if (s, "float16") in CASES["float16"]]
    out += [Target(f"fastest {path}, fraction of its read-only floor, {s[0]}x{s[1]}", _vs(k(s, path), slow=FLOOR), need)
            for path, need, shapes in (("int4", 0.9, (UP, DOWN, UP25)), ("w8a16", 0.95, [s for s, _ in CASES["w8a16"]]))
            for s in shapes]
    out.append(Target("fastest int4 vs our fastest fp16, 151936x4096 (the logits head)",
                      _vs(k(VOCAB, "float16"), k(VOCAB, "int4")), 3.0, floor=_vs(k(VOCAB, "float16"), k(VOCAB, "int4"), floor=True)))  # noqa: E501
    c = k((4096, 4096), "float32")
    out.append(Target("fp32 GEMV vs cuBLAS sgemv, 4096x4096", _vs(c, slow=cub), 1.0, floor=_vs(c, slow=cub, floor=True)))
    return tuple(out)


def targets(df):
    """The lab's targets (GEMV.targets) judged by the one rule, with the figure at the floor."""
    from .core.results import targets as judge
    return judge(GEMV.targets, df)


# ---- small readers of a results frame, for the lab's sentences ----------------------------------

def ladder(df, names, cases=None):
    """The ladder table: each step's speed-up over the step before it (and the last over the
    first), per case. A column isolates one change only where the pair makes one; the bundled
    pairs (ABLATION_PAIRS) are taken apart by the ablation family."""
    import pandas as pd
    from .core.results import source
    if df is None or df.empty:
        return pd.DataFrame()
    print(f"Speed-ups, time(before) / time(after): {source(df)}")
    cases = cases or list(dict.fromkeys(df["case"]))
    out = {}
    for a, b in zip(names, names[1:]):
        out[f"{b} vs {a}"] = [ratio(df, b, a, c) for c in cases]
    out[f"{names[-1]} vs {names[0]}"] = [ratio(df, names[-1], names[0], c) for c in cases]
    return pd.DataFrame(out, index=cases).round(2)


def first_win(df, challenger: str, incumbent: str, cases) -> tuple:
    """The first case (in order) where `challenger` is faster than `incumbent` beyond the noise
    (the one rule: their p10-p90 bands do not overlap), with the ratio, or (None, nan)."""
    from .core.results import within_noise
    for c in cases:
        m = ratio_band(df, challenger, incumbent, c)
        if m.ok and m.value > 1 and not within_noise(m):
            return c, m.value
    return None, float("nan")


def loop_instructions(step: str, arch: str = "sm_90") -> dict:
    """For a step of the fast template: PTX instructions in its main (largest) loop and the weight
    bytes one thread loads per trip, i.e. the instructions per byte that dequantisation costs
    (PTX, before ptxas, without moves: a guide, not a SASS count)."""
    import re
    from .core.build import ptx
    lines = ptx(FAMILY, step, arch)
    marks = [i for i, l in enumerate(lines) if re.match(r"\$L__BB\d+_\d+:", l)] + [len(lines)]
    body = max((lines[a:b] for a, b in zip(marks, marks[1:])), key=len)
    real = [l for l in body if l and not l.startswith(("$", "//", ".loc", "{", "}", "mov.", "@"))
            and not l.startswith(".reg")]
    _, vec, R, U = FAST[step]
    wbytes = 16 * R * U
    return {"step": step, "instructions per trip": len(real), "weight bytes per trip": wbytes,
            "instructions per weight byte": round(len(real) / wbytes, 2) if wbytes else float("nan")}


def warm_vs_flushed(name, cases, family=None):
    """Live only: one variant's GPU time with L2 flushed (DRAM) and warm (no flush: whatever of W and
    x fits stays in L2), per case. An engine decoding a large model streams every weight from DRAM
    (the flushed figure); x, a few KB written by the previous kernel, is in L2 either way."""
    import pandas as pd
    fam = family or sys.modules[__name__]
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU this times {name} flushed and warm at {[s for s, _ in cases]}.")
        return pd.DataFrame()
    import cupy
    from .core.bench import time_fn
    rows = []
    for shape, dt in cases:
        args = [cupy.asarray(a) for a in fam.make_input(shape, dt)]
        v = fam.VARIANTS[name]
        out = v.alloc_out(*args)
        f = lambda: v(*args, out=out)   # noqa: E731
        fl, wm = time_fn(f).median_us, time_fn(f, flush=False).median_us
        rows.append({"case": case_key(shape, dt), "weight MiB": args[0].nbytes / 2 ** 20,
                     "weight fits in L2": args[0].nbytes <= (info()["l2_bytes"] or 0),
                     "flushed µs": fl, "warm µs": wm, "flushed / warm": fl / wm})
    return pd.DataFrame(rows).round(2)


GEMV = Family(
    name=NAME, kernels=FAMILY, variants=VARIANTS, reference=reference, make_input=make_input,
    bytes_moved=bytes_moved, check_cases=CHECK_CASES, baselines=BASELINES, shapes=SHAPES, default=BEST,
    case_key=case_key, record_cases=RECORD_CASES, tolerance=tolerance, roof="read", targets=_targets(),
    about="lab 04: GEMV, the matmul report's kernels before/after and beyond")


# ---- ablations: each bundled pair of the ladder, one change at a time -----------------------------
# Steps 03 -> 04, 05 -> 06, 09 -> 10, 10 -> 22, 22 -> 27, 26 -> 28 and 25 -> 29 each make several
# changes at once. Each ablation kernel is the "after" step with ONE change undone (same launcher,
# same inputs, same run): time(ablation) / time(after) is what that change is worth given the others.
# ABLATION_PAIRS: (title, data path, before, after, [(the change, the kernel with it, without it)]),
# read by results.ablation for the lab's tables and sentences.
ABLATION_PAIRS = [
    ("03 → 04", "float32", "03_f32_float4", "04_f32_ldg", [
        ("the fmaf chain", "04_f32_ldg", "04_ablate_no_fmaf"),
        ("`__ldg`", "04_f32_ldg", "04_ablate_no_ldg"),
        ("`__restrict__`", "04_ablate_no_ldg", "04_ablate_plain"),
        ("`#pragma unroll 4` (with everything else undone: step 03 is 04_ablate_plain without fmaf and the pragma)",
         "04_ablate_plain", "03_f32_float4")]),
    ("05 → 06", "int8", "05_int8_scalar", "06_int8_char4", [
        ("the char4 + float4 loads", "06_int8_char4", "06_ablate_bytewise"),
        ("one scale per 4 elements", "06_int8_char4", "06_ablate_scale_each"),
        ("the fmaf chain", "06_int8_char4", "06_ablate_no_fmaf"),
        ("`__ldg`", "06_int8_char4", "06_ablate_no_ldg"),
        ("`__restrict__`", "06_ablate_no_ldg", "06_ablate_plain")]),
    ("09 → 10", "float16", "09_fp16_half2", "10_fp16_v2", [
        ("16-byte loads, given 4 loads in flight", "10_fp16_v2", "10_ablate_half2"),
        ("4 loads in flight, given 16-byte loads", "10_fp16_v2", "10_ablate_one_load"),
        ("16-byte loads, given 1 load in flight", "10_ablate_one_load", "09_fp16_half2")]),
    ("10 → 22", "float16", "10_fp16_v2", "22_fp16_fast", [
        ("G threads per row (split rows)", "22_fp16_fast", "22_ablate_g32"),
        ("the template's loop at a warp per row", "22_ablate_g32", "10_fp16_v2")]),
    ("22 → 27", "float16", "22_fp16_fast", "27_fp16_rows", [
        ("16 loads in flight per lane", "27_fp16_rows", "27_ablate_u4"),
        ("`L1::no_allocate` weight loads", "27_fp16_rows", "27_ablate_l1"),
        ("two rows per warp on tall matrices", "27_fp16_rows", "27_ablate_one_row"),
        ("a warp per row, at step 22's 4 loads in flight", "27_ablate_u4", "22_fp16_fast")]),
    ("26 → 28", "int4", "26_int4_awq", "28_int4_mma", [
        ("the tensor cores", "28_int4_mma", "28_ablate_cuda_cores"),
        ("several warps per 16-row tile", "28_int4_mma", "28_ablate_split1"),
        ("16-row tiles with LOP3 dequantisation, both on CUDA cores", "28_ablate_cuda_cores", "26_int4_awq")]),
    ("28 → 35", "int4", "28_int4_mma", "35_int4_pipelined", [
        ("the software pipeline", "35_int4_pipelined", "28_int4_mma")]),
    ("28 → 36", "int4", "28_int4_mma", "36_int4_tiles", [
        ("the packed scales and zero points (1 load, not 4)", "36_int4_tiles", "36_ablate_meta"),
        ("the weights in load order (contiguous 512-byte runs)", "36_ablate_meta", "28_int4_mma")]),
    ("25 → 29 (W8A16: fp16 activations, a path of its own)", "w8a16", None, "29_int8_w8a16", [
        ("the tensor cores", "29_int8_w8a16", "29_ablate_cuda_cores"),
        ("the software pipeline", "29_int8_w8a16", "29_ablate_no_pipeline"),
        ("several warps per 16-row tile", "29_int8_w8a16", "29_ablate_split1")]),
    ("29 → 37", "w8a16", "29_int8_w8a16", "37_w8a16_tiles", [
        ("the packed scales (1 load, not 2)", "37_w8a16_tiles", "37_ablate_meta"),
        ("the weights in load order (contiguous 512-byte runs)", "37_ablate_meta", "29_int8_w8a16")]),
]
ABLATION_STEPS = {   # name -> what it is, for the lab's tables (the steps themselves: their own names)
    "04_ablate_no_fmaf": "step 04 with a*b + c*d + ... added to the sum (no fmaf chain)",
    "04_ablate_no_ldg": "step 04 without __ldg (__restrict__ kept)",
    "04_ablate_plain": "step 04 without __ldg and __restrict__",
    "06_ablate_bytewise": "step 06 loading single bytes and floats (no char4 / float4)",
    "06_ablate_scale_each": "step 06 looking the scale up per element",
    "06_ablate_no_fmaf": "step 06 with a*b + c*d + ... (no fmaf chain)",
    "06_ablate_no_ldg": "step 06 without __ldg (__restrict__ kept)",
    "06_ablate_plain": "step 06 without __ldg and __restrict__",
    "10_ablate_half2": "step 10 with 4-byte half2 loads (4 in flight)",
    "10_ablate_one_load": "step 10 with one 16-byte load in flight (one accumulator)",
    "22_ablate_g32": "step 22 with G = 32 (a warp per row, as step 10)",
    "27_ablate_u4": "step 27 with 4 loads in flight per lane (step 22's)",
    "27_ablate_l1": "step 27 with plain __ldg weight loads (L1 allocated)",
    "27_ablate_one_row": "step 27 with one row per warp everywhere",
    "28_ablate_cuda_cores": "step 28 with the multiply-add on CUDA cores (fp32 FMA)",
    "28_ablate_split1": "step 28 with one warp per 16-row tile",
    "36_ablate_meta": "step 36 with the scales and zero points read from their [K, G] arrays",
    "37_ablate_meta": "step 37 with the scales read from their [K, G] array",
    "29_ablate_cuda_cores": "step 29 with the multiply-add on CUDA cores (fp32 FMA)",
    "29_ablate_no_pipeline": "step 29 without the software pipeline",
    "29_ablate_split1": "step 29 with one warp per 16-row tile",
}
_ABLATION_VARIANTS = {
    **{n: _step(n, "float32", "block128") for n in ("04_ablate_no_fmaf", "04_ablate_no_ldg", "04_ablate_plain")},
    **{n: _step(n, "int8", "block128", wvec=4) for n in ("06_ablate_bytewise", "06_ablate_scale_each",
                                                         "06_ablate_no_fmaf", "06_ablate_no_ldg", "06_ablate_plain")},
    "10_ablate_half2": _step("10_ablate_half2", "float16", "warp", wvec=4, xvec=4),
    "10_ablate_one_load": _step("10_ablate_one_load", "float16", "warp"),
    "22_ablate_g32": _fast("22_fp16_fast", threads=32),
    "27_ablate_u4": _rows("27_ablate_u4"),
    "27_ablate_l1": _rows("27_ablate_l1"),
    "27_ablate_one_row": _rows("27_fp16_rows", two_rows=False),
    "28_ablate_cuda_cores": _int4_mma("28_ablate_cuda_cores"),
    "28_ablate_split1": _int4_mma("28_int4_mma", split=1),
    "36_ablate_meta": _tiles("36_ablate_meta", "int4"),
    "37_ablate_meta": _tiles("37_ablate_meta", "w8a16"),
    "29_ablate_cuda_cores": _w8a16("29_ablate_cuda_cores"),
    "29_ablate_no_pipeline": _w8a16("29_ablate_no_pipeline"),
    "29_ablate_split1": _w8a16("29_int8_w8a16", split=1),
}
KERNEL_OF = {"22_ablate_g32": "22_fp16_fast", "27_ablate_one_row": "27_fp16_rows",   # ablations of a launch
             "28_ablate_split1": "28_int4_mma", "29_ablate_split1": "29_int8_w8a16"}   # parameter: the kernel they run
_ABL_NAMES = list(dict.fromkeys(n for _, _, b, a, ch in ABLATION_PAIRS for n in [b, a] + [k for _, w, wo in ch for k in (w, wo)] if n))  # noqa: E501
_ABL_SHAPES = {"float32": (QO, UP), "int8": (QO, UP), "float16": (KV, QO, UP, DOWN, VOCAB), "int4": (QO, UP, DOWN),
               "w8a16": (QO, UP, DOWN)}
ABLATION = Family(
    name="gemv_ablation", kernels=FAMILY, variants={n: {**VARIANTS, **_ABLATION_VARIANTS}[n] for n in _ABL_NAMES},
    reference=reference, make_input=make_input, bytes_moved=bytes_moved, tolerance=tolerance, roof="read",
    case_key=case_key, default={}, baselines={}, shapes=SHAPES,
    check_cases=[c for c in CHECK_CASES if c[0][1] in (7, 31, 4097, 4096, 4100)],
    record_cases=[(s, p) for p, shapes in _ABL_SHAPES.items() for s in shapes],
    about="lab 04's ablations: each bundled step's changes one at a time")


def unroll_pragma_changes(step, arch="sm_90") -> bool:
    """Whether the seed's `#pragma unroll 4` changes a step's instructions (steps 04 and 06): its PTX
    against the build with -DGEMV_NO_UNROLL_PRAGMA."""
    from .core import build
    return build.define_changes_ptx(FAMILY, step, "GEMV_NO_UNROLL_PRAGMA", arch)


FAMILIES = [GEMV, LOGITS, BATCHED, CONVERT, ABLATION]
