"""The steps of every layer's per-row and element-wise ops: LayerNorm, GELU (tanh and erf),
bias + GELU, bias + residual (and the QKV bias), softmax over score rows. Each op: its launchers
(the Python mirror of kernels/vision.cu), its baselines, its Family, and its public call (the
family's best step, what lab 06 builds the ViT block from). Also the helpers every step module
of this lab shares (_key, _resident, _tt, FP16, _op, _best; _torch_baseline from core.device)."""
from __future__ import annotations

import functools

import numpy as np

from ..core.bench import MEMCPY, memcpy
from ..core.build import define
from ..core.device import torch as _torch, torch_baseline as _torch_baseline
from ..core.family import Family
from ..core.launch import aligned, int32_size as _size_ok, launch, out_like, require, variant
from .reference import (
    BG_U, EPS, F16, FAMILY, HEADS, HIDDEN, LN36_THREADS, LN36_VPT, LN_BLOCK, LN_CASES, LN_SWEEP, LN_VEC, MERGE, MLP, NAME,
    SM_U, SR2_TILE, SR2_U, SR_TILE, TOKENS, TR_TILE,
    _bias_gelu_input, _bias_res_input, _cast, _gelu_input, _ln_input, _qkv_input, _sx_input, ref_bias_add_residual,
    ref_bias_gelu, ref_gelu, ref_gelu_erf, ref_layernorm, ref_softmax)

# vision.cu is compiled with these constants of reference.py (-D; its #ifndef defaults agree: tests/test_constants.py)
DEFINES = define(FAMILY, LN_BLOCK=LN_BLOCK, LN36_VPT=LN36_VPT, LN36_THREADS=LN36_THREADS,
                 SR_TILE=SR_TILE, SR2_TILE=SR2_TILE, SR2_U=SR2_U, TR_TILE=TR_TILE,
                 BG_U=BG_U, SM_U=SM_U)


# ---- shared by this lab's steps ------------------------------------------------------------------

def _key(op):
    return lambda shape, dtype="float16": f"{op}:{'x'.join(map(str, shape))}:{dtype}"


@functools.lru_cache(maxsize=None)
def _resident(kernel_name, threads=256):
    """Blocks that fill every SM once for one of this family's kernels (bench.resident_grid)."""
    from ..core.bench import resident_grid
    from ..core.build import kernel
    return resident_grid(kernel(FAMILY, kernel_name), threads)


def _tt(*arrays):
    torch = _torch()
    return [torch.from_dlpack(a) for a in arrays]


FP16 = ("float16",)


def _op(**kw) -> Family:
    """One of the vision report's ops: a family recorded into vision.csv at its seed shapes, in fp16."""
    kw.setdefault("record_cases", [(s, "float16") for s in kw["shapes"].values()])
    return Family(name=NAME, kernels=FAMILY, **kw)


def _best(fam):
    return fam.variants[fam.default["float16"]]


# ---- LayerNorm with bias: x [N, C] -> [N, C] ----

def _ln_check(x, weight, bias, out):
    require(x, "x", dtype="float16", ndim=2)
    C = x.shape[1]
    for nm, a in (("weight", weight), ("bias", bias)):
        require(a, nm, dtype="float16", ndim=1)
        if a.shape[0] != C:
            raise ValueError(f"{nm}: expected length {C} (the hidden size of x), got {a.shape[0]}")
    out_ = out_like(out, x)
    _size_ok(x.size)
    return out_, x.shape[0], C


def _ln_launch(kernel, width=None, rows=1, threads=LN_BLOCK, smem=0):
    """The launch of steps 01-03 and the ablation on checked arguments: a block of `threads` per `rows` rows.
    width: None (no vec argument), 0 (the kernel's scalar-load path), or the bytes per load where C and
    alignment allow."""
    def go(x, weight, bias, out_, R, C):
        if R and C:
            vec = () if width is None else (int(bool(width) and C % (width // 2) == 0
                                                 and aligned(width, x, weight, bias, out_)),)
            launch(FAMILY, f"vision_{kernel}", (-(-R // rows),), (threads,), (x, weight, bias, out_, R, C, EPS, *vec),
                   smem=smem)
        return out_
    return go


def _ln_step(kernel, doc=None, **kw):
    """Steps 01-03 and the ablation: the arguments checked (_ln_check), then _ln_launch's launch."""
    go = _ln_launch(kernel, **kw)

    def run(x, weight, bias, out=None):
        return go(x, weight, bias, *_ln_check(x, weight, bias, out))
    run.__name__, run.__doc__ = kernel, doc
    return variant(dtypes=FP16)(run)


ln_scalar_tree = _ln_step("01_layernorm_scalar_tree", smem=2 * LN_BLOCK * 4)
ln_half2_shfl = _ln_step("02_layernorm_half2_shfl", width=4)
ln_shfl_scalar_loads = _ln_step("02_layernorm_half2_shfl", width=0, doc=(
    "Ablation: step 02's kernel with its scalar-load path (vec = 0): the shuffle reduction, static shared "
    "memory and fma of step 02, with step 01's 2-byte loads."))
_WARP_VEC8 = dict(width=16, rows=4, threads=128)
ln_warp_vec8 = _ln_step("03_layernorm_warp_vec8", **_WARP_VEC8)
_warp_vec8 = _ln_launch("03_layernorm_warp_vec8", **_WARP_VEC8)     # step 36's launch for the rows step 03 holds


@variant(dtypes=FP16)
def ln_row_block(x, weight, bias, out=None):
    """Step 36: a row longer than step 03's registers hold (C > 32 x 8 x LN_VEC) gets a block sized so
    each thread holds at most LN36_VPT 16-byte vectors, so the row is read once; every other row
    (the tower's 1152, odd or misaligned rows, rows beyond the block's registers) takes step 03."""
    out_, R, C = _ln_check(x, weight, bias, out)
    if R and 256 * LN_VEC < C <= 8 * LN36_VPT * LN36_THREADS and C % 8 == 0 and aligned(16, x, weight, bias, out_):
        launch(FAMILY, "vision_36_layernorm_row_block", (R,), (32 * -(-C // (256 * LN36_VPT)),),
               (x, weight, bias, out_, C, EPS))
        return out_
    return _warp_vec8(x, weight, bias, out_, R, C)


@_torch_baseline
def _ln_torch(torch, tx, tw, tb):
    F = torch.nn.functional
    return lambda: F.layer_norm(tx, (tx.shape[-1],), tw, tb, EPS)


def _ln_cupy(x, w, b):
    """CuPy composite: mean and variance in float32, then the affine map (allocates temporaries)."""
    import cupy

    def run():
        xf = x.astype(cupy.float32)
        m = xf.mean(axis=1, keepdims=True)
        v = ((xf - m) ** 2).mean(axis=1, keepdims=True)
        return ((xf - m) * cupy.reciprocal(cupy.sqrt(v + EPS)) * w + b).astype(cupy.float16)
    return run


LAYERNORM = _op(
    op="layernorm", case_key=_key("layernorm"),
    limiters=(("03_layernorm_warp_vec8", (16384, 1152), r"^vision_03_layernorm_warp_vec8$"),
              ("36_layernorm_row_block", (8192, 16384), r"^vision_36_layernorm_row_block$"),
              ("36_layernorm_row_block", (8192, 2048), r"^vision_36_layernorm_row_block$"),
              ("36_layernorm_row_block", (8192, 1024), r"^vision_03_layernorm_warp_vec8$")),   # step 03's launch
    make_input=_ln_input,
    reference=_cast(ref_layernorm), bytes_moved=lambda x, w, b, *_: 2 * x.nbytes + w.nbytes + b.nbytes,
    variants={"01_layernorm_scalar_tree": ln_scalar_tree, "02_ablate_scalar_loads": ln_shfl_scalar_loads,
              "02_layernorm_half2_shfl": ln_half2_shfl, "03_layernorm_warp_vec8": ln_warp_vec8,
              "36_layernorm_row_block": ln_row_block},
    default={"float16": "36_layernorm_row_block"},
    baselines={"torch F.layer_norm": _ln_torch, "cupy composite (LayerNorm)": _ln_cupy, MEMCPY: memcpy},
    shapes={f"vit_{n}x1152": (n, HIDDEN) for n in TOKENS},
    record_cases=LN_CASES + LN_SWEEP,
    check_cases=[(s, v) for s in [(1, 1), (3, 31), (2, 1023), (5, 1152), (64, 1152), (3, 1288), (2, 4097),
                                  (0, 8), (3, 2056), (2, 16384), (1, 32768), (1, 32776)]
                 for v in ("randn", "large", "hostile")],
)


def layernorm(x, weight, bias, eps=EPS, out=None):
    """LayerNorm with bias over the last axis: x [N, C] fp16, weight/bias [C] fp16 -> [N, C] fp16,
    (x - mean) / sqrt(var + eps) * weight + bias, statistics in fp32 (reference: ref_layernorm).
    Only the tower's eps (1e-6) is compiled into the launchers' calls; another eps is a ValueError."""
    if eps != EPS:
        raise ValueError(f"eps: the vision kernels use the tower's eps = {EPS}, got {eps}")
    return _best(LAYERNORM)(x, weight, bias, out=out)


# ---- GELU (tanh approximation) and bias + GELU ----

def _elementwise_n(x):
    _size_ok(x.size)
    return x.size


def _gelu_step(name, V):
    def run(x, out=None):
        require(x, "x", dtype="float16")
        out_ = out_like(out, x)
        n = _elementwise_n(x)
        if n:
            vec = int(aligned(4 if V == 2 else 16, x, out_))
            launch(FAMILY, f"vision_{name}", (-(-n // (256 * V)),), (256,), (x, out_, n, vec))
        return out_
    run.__name__ = name
    return variant(dtypes=FP16)(run)


def _bias_gelu_step(name, V, per_thread=1):
    def run(x, bias, out=None):
        require(x, "x", dtype="float16", ndim=2)
        require(bias, "bias", dtype="float16", ndim=1)
        if bias.shape[0] != x.shape[1]:
            raise ValueError(f"bias: expected length {x.shape[1]} (the columns of x), got {bias.shape[0]}")
        out_ = out_like(out, x)
        n = _elementwise_n(x)
        if n:
            C = x.shape[1]
            vec = int(C % V == 0 and aligned(4 if V == 2 else 16, x, bias, out_))
            launch(FAMILY, f"vision_{name}", (-(-n // (256 * V * per_thread)),), (256,), (x, bias, out_, n, C, vec))
        return out_
    run.__name__ = name
    return variant(dtypes=FP16)(run)


@_torch_baseline
def _gelu_torch(torch, tx):
    return lambda: torch.nn.functional.gelu(tx, approximate="tanh")


@_torch_baseline
def _bias_gelu_torch(torch, tx, tb):
    tmp = torch.empty_like(tx)
    return lambda: torch.nn.functional.gelu(torch.add(tx, tb, out=tmp), approximate="tanh")


def _gelu_cupy(x, b=None):
    """CuPy composite of the tanh formula in float32 (allocates temporaries)."""
    import cupy

    def run():
        v = x.astype(cupy.float32) if b is None else x.astype(cupy.float32) + b
        return (0.5 * v * (1 + cupy.tanh(0.7978845608 * (v + 0.044715 * v * v * v)))).astype(cupy.float16)
    return run


_ELT_SHAPES = [(1, 1), (3, 7), (2, 31), (5, 1152), (7, 4304), (64, 4304), (3, 4301), (0, 8)]
GELU = _op(
    op="gelu", case_key=_key("gelu"), make_input=_gelu_input,
    reference=_cast(ref_gelu), bytes_moved=lambda x, *_: 2 * x.nbytes,
    variants={"04_gelu_half2": _gelu_step("04_gelu_half2", 2), "05_gelu_vec8": _gelu_step("05_gelu_vec8", 8),
              "06_gelu_vec8_exp": _gelu_step("06_gelu_vec8_exp", 8)},
    default={"float16": "06_gelu_vec8_exp"},
    baselines={"torch F.gelu(tanh)": _gelu_torch, "cupy composite (GELU)": _gelu_cupy},
    shapes={f"mlp_{n}x4304": (n, MLP) for n in TOKENS},
    check_cases=[(s, v) for s in _ELT_SHAPES for v in ("randn", "large", "hostile")],
)
@_torch_baseline
def _gelu_erf_torch(torch, tx):
    return lambda: torch.nn.functional.gelu(tx)


GELU_ERF = _op(
    op="gelu_erf", case_key=_key("gelu_erf"),
    limiters=(("39_gelu_erfc_poly", (4096, 4608), r"^vision_39_gelu_erfc_poly$"),
              ("30_gelu_erf_vec8", (4096, 4608), r"^vision_30_gelu_erf_vec8$"),
              ("38_gelu_erf_vec8_x2", (4096, 4608), r"^vision_38_gelu_erf_vec8_x2$")),
    make_input=_gelu_input,
    reference=_cast(ref_gelu_erf), bytes_moved=lambda x, *_: 2 * x.nbytes,
    variants={"30_gelu_erf_vec8": _gelu_step("30_gelu_erf_vec8", 8),
              "38_gelu_erf_vec8_x2": _gelu_step("38_gelu_erf_vec8_x2", 8 * BG_U),    # BG_U vectors a thread
              "39_gelu_erfc_poly": _gelu_step("39_gelu_erfc_poly", 8 * BG_U)},
    default={"float16": "39_gelu_erfc_poly"},      # lab 05 times it against steps 38 and 30 (say_beyond)
    baselines={"torch F.gelu (erf)": _gelu_erf_torch},
    shapes={f"merger_{n // 4}x4608": (n // 4, MERGE * MERGE * HIDDEN) for n in TOKENS},
    check_cases=[(s, v) for s in _ELT_SHAPES for v in ("randn", "large", "hostile")],
    about="lab 06: the exact (erf) GELU of Qwen3-VL's mergers",
)
BIAS_GELU = _op(
    op="bias_gelu", case_key=_key("bias_gelu"), make_input=_bias_gelu_input,
    reference=_cast(ref_bias_gelu), bytes_moved=lambda x, b, *_: 2 * x.nbytes + b.nbytes,
    variants={"07_bias_gelu_half2": _bias_gelu_step("07_bias_gelu_half2", 2),
              "08_bias_gelu_vec8": _bias_gelu_step("08_bias_gelu_vec8", 8),
              "09_bias_gelu_vec8_exp": _bias_gelu_step("09_bias_gelu_vec8_exp", 8),
              "25_bias_gelu_vec8_x2": _bias_gelu_step("25_bias_gelu_vec8_x2", 8, BG_U)},
    default={"float16": "25_bias_gelu_vec8_x2"},
    baselines={"torch F.gelu(tanh)(x + b)": _bias_gelu_torch, "cupy composite (bias+GELU)": _gelu_cupy},
    shapes={f"mlp_{n}x4304": (n, MLP) for n in TOKENS},
    check_cases=[(s, v) for s in _ELT_SHAPES for v in ("randn", "large", "hostile")],
)


def gelu(x, out=None):
    """GELU with the tanh approximation (ref_gelu), any fp16 shape (contiguous)."""
    return _best(GELU)(x, out=out)


def gelu_erf(x, out=None):
    """The exact GELU, x Phi(x) (ref_gelu_erf): Qwen3-VL's mergers. Any fp16 shape (contiguous)."""
    return _best(GELU_ERF)(x, out=out)


def bias_gelu(x, bias, out=None):
    """gelu_tanh(x + bias[col]): x [N, C] fp16, bias [C] fp16 (ref_bias_gelu). The sum stays in fp32."""
    return _best(BIAS_GELU)(x, bias, out=out)


# ---- bias + residual (and the QKV-bias form without residual) ----

_NULL = np.uint64(0)


def _bias_res_check(x, bias, residual, out):
    require(x, "x", dtype="float16", ndim=2)
    require(bias, "bias", dtype="float16", ndim=1)
    if bias.shape[0] != x.shape[1]:
        raise ValueError(f"bias: expected length {x.shape[1]} (the columns of x), got {bias.shape[0]}")
    if residual is not None:
        require(residual, "residual", dtype="float16", shape=x.shape)
    out_ = out_like(out, x)
    return out_, _elementwise_n(x), x.shape[1]


def _bias_res_scalar(x, bias, residual=None, out=None):
    out_, n, C = _bias_res_check(x, bias, residual, out)
    if n:
        launch(FAMILY, "vision_10_bias_residual_scalar", (-(-n // 256),), (256,),
               (x, bias, _NULL if residual is None else residual, out_, n, C))
    return out_


def _bias_res_vec8(x, bias, residual=None, out=None):
    out_, n, C = _bias_res_check(x, bias, residual, out)
    if n:
        arrs = (x, bias, out_) + (() if residual is None else (residual,))
        vec = int(C % 8 == 0 and aligned(16, *arrs))
        launch(FAMILY, "vision_11_bias_residual_vec8", (-(-n // 2048),), (256,),
               (x, bias, _NULL if residual is None else residual, out_, n, C, vec))
    return out_


def _with_residual(fn, name):
    def run(x, bias, residual, out=None):
        return fn(x, bias, residual, out=out)
    run.__name__ = name
    return variant(dtypes=FP16)(run)


def _without_residual(fn, name):
    def run(x, bias, out=None):
        return fn(x, bias, None, out=out)
    run.__name__ = name
    return variant(dtypes=FP16)(run)


@_torch_baseline
def _bias_res_torch(torch, tx, tb, tr):
    to = torch.empty_like(tx)
    return lambda: torch.add(torch.add(tx, tr, out=to), tb, out=to)


def _bias_res_cupy(x, b, r):
    import cupy
    o = cupy.empty_like(x)
    return lambda: cupy.add(cupy.add(x, r, out=o), b, out=o)


@_torch_baseline
def _qkv_torch(torch, tx, tb):
    to = torch.empty_like(tx)
    return lambda: torch.add(tx, tb, out=to)


def _qkv_cupy(x, b):
    import cupy
    o = cupy.empty_like(x)
    return lambda: cupy.add(x, b, out=o)


_BR_SHAPES = [(1, 1), (3, 31), (5, 1152), (7, 3456), (64, 1152), (2, 4301), (33, 4304), (0, 8)]
BIAS_RESIDUAL = _op(
    op="bias_residual", case_key=_key("bias_residual"), make_input=_bias_res_input,
    reference=_cast(lambda x, b, r: ref_bias_add_residual(x, b, r)),
    bytes_moved=lambda x, b, r, *_: 3 * x.nbytes + b.nbytes,
    variants={"10_bias_residual_scalar": _with_residual(_bias_res_scalar, "10_bias_residual_scalar"),
              "11_bias_residual_vec8": _with_residual(_bias_res_vec8, "11_bias_residual_vec8")},
    default={"float16": "11_bias_residual_vec8"},
    baselines={"torch.add x2 (bias+residual)": _bias_res_torch, "cupy + x2 (bias+residual)": _bias_res_cupy},
    shapes={f"vit_{n}x1152": (n, HIDDEN) for n in TOKENS},
    check_cases=[(s, v) for s in _BR_SHAPES for v in ("randn", "large", "hostile")],
)
QKV_BIAS = _op(
    op="qkv_bias", case_key=_key("qkv_bias"), make_input=_qkv_input,
    reference=_cast(lambda x, b: ref_bias_add_residual(x, b)),
    bytes_moved=lambda x, b, *_: 2 * x.nbytes + b.nbytes,
    variants={"10_bias_residual_scalar": _without_residual(_bias_res_scalar, "10_bias_residual_scalar"),
              "11_bias_residual_vec8": _without_residual(_bias_res_vec8, "11_bias_residual_vec8")},
    default={"float16": "11_bias_residual_vec8"},
    baselines={"torch.add (QKV bias)": _qkv_torch, "cupy + (QKV bias)": _qkv_cupy},
    shapes={f"qkv_{n}x3456": (n, 3 * HIDDEN) for n in TOKENS},
    check_cases=[(s, v) for s in _BR_SHAPES + [(9, 3456)] for v in ("randn", "large", "hostile")],
)


def bias_add_residual(x, bias, residual=None, out=None):
    """x + bias[col] (+ residual): x [N, C], bias [C], residual [N, C] or None (the QKV-bias form),
    summed in fp32 as (x + residual) + bias and rounded once to fp16 (ref_bias_add_residual).
    out may be x or residual (element-wise, in place is safe)."""
    return _bias_res_vec8(x, bias, residual, out=out)


# ---- Softmax over attention score rows [..., N] ----

def _sx_check(x, out):
    require(x, "scores", dtype="float16", ndim=(1, 2, 3))
    _size_ok(x.size)
    C = x.shape[-1] if x.ndim else 0
    R = x.size // C if C else 0
    if R > 2 ** 31 - 1:
        raise ValueError(f"{R} rows: at most 2**31 - 1 per call")
    return out_like(out, x), R, C


@variant(dtypes=FP16)
def sx_half2(x, out=None):
    out_, R, C = _sx_check(x, out)
    if R and C:
        vec = int(C % 2 == 0 and aligned(4, x, out_))
        launch(FAMILY, "vision_23_softmax_half2_shfl", (R,), (256,), (x, out_, R, C, vec))
    return out_


LAB01_SOFTMAX = "lab01_best_fp16"     # lab 01's best fp16 step (softmax.SOFTMAX.default["float16"])


def _sx_lab01(x, out=None):
    from .. import softmax as sm
    return sm.SOFTMAX.variants[sm.SOFTMAX.default["float16"]](x, out=out)


@_torch_baseline
def _sx_torch(torch, tx):
    return lambda: torch.softmax(tx, dim=-1)


def _sx_variants():
    from .. import softmax as sm
    lab01 = variant(dtypes=FP16)(_sx_lab01)
    best = sm.SOFTMAX.default["float16"]
    lab01.__doc__ = f"lab 01's best fp16 step ({best}): " + (sm.SOFTMAX.variants[best].__doc__ or "")
    return {"23_softmax_half2_shfl": sx_half2, LAB01_SOFTMAX: lab01}


SOFTMAX = _op(
    op="softmax", case_key=_key("softmax"), make_input=_sx_input,
    reference=lambda x: ref_softmax(x).astype(F16), bytes_moved=lambda x, *_: 2 * x.nbytes,
    variants=_sx_variants(),
    default={"float16": "23_softmax_half2_shfl"},
    baselines={"torch.softmax": _sx_torch},
    shapes={f"attn_16x{n}x{n}": (HEADS * n, n) for n in (1024, 4096)},
    check_cases=[(s, v) for s in [(1, 1), (3, 31), (1, 33), (3, 1023), (5, 4097), (16, 1024), (2, 0)]
                 for v in ("randn", "large", "hostile")],
)


def softmax(scores, out=None):
    """Softmax over the last axis of fp16 scores [..., N] (the report's half2 + shuffle kernel),
    fp32 max and sum (ref_softmax). No scale: apply 1/sqrt(head_dim) in the QK^T GEMM's alpha."""
    return _best(SOFTMAX)(scores, out=out)
