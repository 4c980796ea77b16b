"""GEMV's steps: the launchers of kernels/gemv.cu, VARIANTS, BEST, pack / unpack, the baselines, LOGITS."""
from __future__ import annotations

import numpy as np

from ..core.build import define
from ..core.device import info, torch as torch_module
from ..core.family import Family
from ..core.launch import aligned, launch, out_like, require, variant
from .layout import _tile_major, tiles, untile
from .reference import (CHECK_CASES, DOWN, FAMILY, GROUP, INT32_MAX, KV, PATHS, QO, UP, VOCAB, WARP_ROWS, _logits_bytes,
                        _logits_input, _logits_reference, _path_of, case_key, tolerance)

SEED_BLOCK = 128        # the seed's block per row (kind 'block128')
# gemv.cu is compiled with these (-D; its #ifndef defaults agree: tests/test_constants.py)
DEFINES = define(FAMILY, SEED_BLOCK=SEED_BLOCK, INT8_GROUP=GROUP, WARP_ROWS=WARP_ROWS)


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
    """A launcher for one kernel: 'block128' / 'block256' threads per row, or 'warp' (a warp per row, 8 rows a block)."""
    wbytes = np.dtype(PATHS[path][0]).itemsize
    threads = {"block128": SEED_BLOCK, "block256": 256, "warp": 256}[kind]

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
    """Threads per row G (32..256): the smallest power of two giving `warps_per_sm` warps per SM, U vectors a thread."""
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
        from ..core.bench import blocks_per_sm
        from ..core.build import kernel
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
    "38_int8_char4_scale4": _step("38_int8_char4_scale4", "int8", "block128", wvec=4),   # the report's after
    "06_int8_char4": _step("06_int8_char4", "int8", "block128", wvec=4),                 # 38 + one scale per 4
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
    """The arrays of a path's weights its default step reads: pack()'s Wi and Mi, or every array."""
    return tuple(weights[:2]) if weights and weights[0].ndim == 5 else tuple(weights)


DISPATCH_M = 2048           # the report's threshold between steps 07 and 08


def f32_fp16w_dispatch(W, x, out=None, threshold=DISPATCH_M):
    """The report's MatmulLayer::forward: M >= threshold -> step 08 (block per row), else 07."""
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
    """The floor of any GEMV of these inputs: lab 00's fastest reader over the weight's own bytes (bench.read_floor)."""
    from ..core.bench import read_floor
    return read_floor(args[0]) if aligned(16, args[0]) else None


COMPUTE_ONLY = "same kernel, weights from registers (compute only)"


def _compute_only(*args):
    """The best quantised step (int8 25, int4 36, W8A16 37) built with -DGEMV_COMPUTE_ONLY: its
    weight words come from registers, not memory; scales, zeros and x are still read and every
    instruction still runs (the answer is meaningless). Its time is what the instructions alone
    cost; FLOOR is what the bytes alone cost; a kernel nears the larger only by overlapping them.
    The step's own launches (grid, block, split, fallback) are recorded once and replayed."""
    from ..core.build import module
    from ..core.launch import record_launches
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


# ---- the logits head: fp16 in, fp16 weight, fp32 out ---------------------------------------------

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
              "39_fp16_f32out_v2": _step("39_fp16_f32out_v2", "fp16_f32out", "warp"),    # the report's after
              "12_fp16_f32out_ilp": _step("12_fp16_f32out_ilp", "fp16_f32out", "warp"),  # 39 + 4 loads in flight
              "23_fp16_f32out_fast": _fast("23_fp16_f32out_fast")},
    default={"fp16_f32out": "23_fp16_f32out_fast"},
    baselines={"cuBLAS (cupy.matmul, fp16 out)": _cublas_f16out},
    shapes={"logits_151936x4096": (151936, 4096), "qwen3_gate_up_12288x4096": (12288, 4096),
            "qwen3_down_4096x12288": (4096, 12288)},
    check_cases=[c for c in CHECK_CASES if c[0][1] in (1, 8, 31, 4097, 4100)] + [((151936, 64), "randn")],
    record_cases=[(s, "fp16_f32out") for s in (QO, KV, UP, DOWN, VOCAB)],
)
