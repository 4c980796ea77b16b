"""Vision family (seed 000): the kernels of Qwen3-VL's vision tower (OrinMLLM's
vision_encoder_kernel.cu), each before -> after, with float64 NumPy references.

Dimensions (Qwen3-VL's ViT): hidden 1152, 16 heads x 72, MLP 4304, 27 layers, patch_dim 1536
(3 channels x 2 frames x 16 x 16), merger 4608 -> 4608 -> 4096, learned position grid 48 x 48.

Token order ("merge-window order", as Qwen2-VL / Qwen3-VL keep it): an image of grid_h x grid_w
patches (both even) is stored so that the four patches of every 2 x 2 window are consecutive
tokens. Token t sits at patch row r, column c with
    t = ((r // 2) * (grid_w // 2) + c // 2) * 4 + (r % 2) * 2 + (c % 2)
(`window_positions(grid_h, grid_w)` gives (r, c) per token). Hence the 2 x 2 spatial merge is
x.reshape(N / 4, 4 * C): merged row m is the concatenation of tokens 4m, 4m+1, 4m+2, 4m+3
(top-left, top-right, bottom-left, bottom-right of window m).

Public API (CuPy fp16 in and out; bad input raises ValueError before any launch):
    layernorm, gelu, bias_gelu, bias_add_residual, patch_embed, pos_embed_interpolate,
    spatial_merge, split_rope_transpose, transpose_head_token, softmax, replace_image_tokens,
    rope_tables
and a float64 reference for each, ref_<name> (NumPy in, float64 out), plus ref_gelu_erf.

For the lab and the harness, one family namespace per op (LAYERNORM, GELU, BIAS_GELU,
BIAS_RESIDUAL, QKV_BIAS, PATCH_EMBED, POS_INTERP, SPATIAL_MERGE, SPLIT_ROPE, TRANSPOSE, SOFTMAX,
REPLACE) with the family API (VARIANTS before -> after, BEST, BASELINES, ...), all in FAMILIES.
They share NAME = "vision" (one recorded vision.csv); their case keys start with the op.
"""
from __future__ import annotations

import functools
import re

import numpy as np

from .core.family import Family
from .core.launch import launch, variant
from .core.launch import aligned, in_range, int32_size as _size_ok, out_like, require
from .core.device import torch as _torch

NAME = "vision"
FAMILY = "vision"
HIDDEN, HEADS, HEAD_DIM, MLP, LAYERS = 1152, 16, 72, 4304, 27
PATCH_DIM = 1536                 # 3 channels x 2 frames x 16 x 16
MERGE = 2                        # spatial merge size: 2 x 2 patches -> one merged token
POS_SIDE = 48                    # learned position table: 48 x 48 = 2304 rows of 1152
EPS = 1e-6                       # the vision tower's LayerNorm eps
THETA = 10000.0                  # vision rotary base
LN_BLOCK = 256                   # LN_BLOCK in vision.cu (steps 01, 02)
SR_TILE = 8                      # SR_TILE in vision.cu (step 20: tokens per tile)
SR2_TILE = 16                    # SR2_TILE in vision.cu (step 27: tokens per block)
SR2_U = 3                        # SR2_U in vision.cu (step 27: items in flight per thread)
TR_TILE = 16                     # TR_TILE in vision.cu (step 28: tokens per block)
BG_U = 2                         # BG_U in vision.cu (step 25: vectors per thread)
SM_U = 4                         # SM_U in vision.cu (step 26: loads in flight per thread)
TOKENS = (4096, 16384)           # the lab's token counts
F16 = np.float16


# ---- token order, rotary tables, interpolation tables (NumPy, no GPU) ---------------------------

def _grid_ok(grid_h, grid_w):
    for nm, g in (("grid_h", grid_h), ("grid_w", grid_w)):
        if not isinstance(g, (int, np.integer)) or isinstance(g, bool) or g <= 0:
            raise ValueError(f"{nm}: expected a positive int, got {g!r}")
        if g % MERGE:
            raise ValueError(f"{nm} = {g}: expected an even number of patches (the 2x2 spatial merge "
                             f"and the merge-window token order need grid_h and grid_w divisible by 2)")
    return int(grid_h), int(grid_w)


def window_positions(grid_h, grid_w):
    """(row, col) of every token in merge-window order: int64 [grid_h * grid_w, 2]."""
    gh, gw = _grid_ok(grid_h, grid_w)
    r = np.arange(gh).reshape(gh // 2, 2, 1, 1)
    c = np.arange(gw).reshape(1, 1, gw // 2, 2)
    rows = np.broadcast_to(r, (gh // 2, 2, gw // 2, 2)).transpose(0, 2, 1, 3).reshape(-1)
    cols = np.broadcast_to(c, (gh // 2, 2, gw // 2, 2)).transpose(0, 2, 1, 3).reshape(-1)
    return np.stack([rows, cols], axis=1)


def rope_angles(grid_h, grid_w, head_dim=HEAD_DIM, theta=THETA):
    """float64 [N, head_dim / 2]: the rotation angle of pair (d, d + head_dim / 2) of every token.
    Qwen2/3-VL's VisionRotaryEmbedding(head_dim / 2): inv_freq[j] = theta^(-2j / (head_dim / 2)),
    j < head_dim / 4; angles[t, j] = row(t) * inv_freq[j] and angles[t, head_dim/4 + j] =
    col(t) * inv_freq[j] (row frequencies first, then column frequencies; head_dim 72: 18 + 18)."""
    if head_dim % 4:
        raise ValueError(f"head_dim = {head_dim}: the 2-D vision rotary needs head_dim % 4 == 0")
    q = head_dim // 4
    inv = theta ** (-np.arange(q, dtype=np.float64) * 2 / (head_dim // 2))
    pos = window_positions(grid_h, grid_w).astype(np.float64)
    return np.concatenate([pos[:, :1] * inv, pos[:, 1:] * inv], axis=1)


def rope_tables(grid_h, grid_w, head_dim=HEAD_DIM):
    """(cos, sin): float32 NumPy [N, head_dim / 2], what the RoPE kernels read (angle of pair d,
    from `rope_angles`). Rotate-half: for d < D/2, out[d] = x[d] cos - x[d + D/2] sin and
    out[d + D/2] = x[d + D/2] cos + x[d] sin (HF's q * cos + rotate_half(q) * sin with the angles
    repeated twice). ref_split_rope_transpose uses the float64 angles."""
    a = rope_angles(grid_h, grid_w, head_dim)
    return np.cos(a).astype(np.float32), np.sin(a).astype(np.float32)


def interp_tables(grid_h, grid_w, side=POS_SIDE):
    """Bilinear tables of Qwen3-VL's fast_pos_embed_interpolate, in merge-window token order:
    idx int32 [N, 4] (rows of the side x side table) and weights float64 [N, 4], for
    (floor_h, floor_w), (floor_h, ceil_w), (ceil_h, floor_w), (ceil_h, ceil_w). Positions are
    linspace(0, side - 1, grid) (align-corners), ceil = min(floor + 1, side - 1)."""
    gh, gw = _grid_ok(grid_h, grid_w)
    hs, ws = np.linspace(0, side - 1, gh), np.linspace(0, side - 1, gw)
    pos = window_positions(gh, gw)
    h, w = hs[pos[:, 0]], ws[pos[:, 1]]
    h0, w0 = np.floor(h).astype(np.int64), np.floor(w).astype(np.int64)
    h1, w1 = np.minimum(h0 + 1, side - 1), np.minimum(w0 + 1, side - 1)
    dh, dw = h - h0, w - w0
    idx = np.stack([h0 * side + w0, h0 * side + w1, h1 * side + w0, h1 * side + w1], axis=1)
    wts = np.stack([(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw], axis=1)
    return idx.astype(np.int32), wts


# ---- float64 references (NumPy in, float64 out; NaN/inf propagate as the formulas do) -----------

def _xp(a):
    """NumPy, or CuPy for a CuPy array: the references run in float64 on either (lab 06 runs them
    on the GPU for the whole tower)."""
    if type(a).__module__.startswith("cupy"):
        import cupy
        return cupy
    return np


def _f64(a):
    return _xp(a).asarray(a, np.float64)


def ref_layernorm(x, weight, bias, eps=EPS):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (var: the biased variance)."""
    xd = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        mean = xd.mean(axis=-1, keepdims=True)
        var = ((xd - mean) ** 2).mean(axis=-1, keepdims=True)
        return (xd - mean) / _xp(xd).sqrt(var + eps) * _f64(weight) + _f64(bias)


def ref_gelu(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    (torch's F.gelu(approximate="tanh"), what the vision tower uses)."""
    xd = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        return 0.5 * xd * (1.0 + _xp(xd).tanh(np.sqrt(2.0 / np.pi) * (xd + 0.044715 * xd ** 3)))


def ref_gelu_erf(x):
    """Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))."""
    xd = _f64(x)
    if _xp(xd) is not np:                       # CuPy: its own erf
        from cupyx.scipy.special import erf as cerf
        return 0.5 * xd * (1.0 + cerf(xd / np.sqrt(2.0)))
    from math import erf
    with np.errstate(invalid="ignore", over="ignore"):
        return 0.5 * xd * (1.0 + np.vectorize(erf, otypes=[np.float64])(xd / np.sqrt(2.0)))


def ref_bias_gelu(x, bias):
    """gelu_tanh(x + bias[col]), x [N, C], bias [C]."""
    return ref_gelu(_f64(x) + _f64(bias))


def ref_bias_add_residual(x, bias, residual=None):
    """x + bias[col] (+ residual), x [N, C]. residual None: the QKV-bias form."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = _f64(x) + _f64(bias)
        return out if residual is None else out + _f64(residual)


def ref_patch_embed(patches, weight, bias):
    """The Conv3d patch embedding as a matrix product: patches [N, K] @ weight[O, K]^T + bias [O]."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _f64(patches) @ _f64(weight).T + _f64(bias)


def ref_pos_embed_interpolate(pos_table, grid_h, grid_w):
    """Bilinear resampling of the learned side x side position grid pos_table [side^2, C] to
    grid_h x grid_w patches (align-corners, Qwen3-VL's fast_pos_embed_interpolate), rows in
    merge-window token order: [grid_h * grid_w, C]."""
    side = int(round(np.sqrt(pos_table.shape[0])))
    idx, wts = interp_tables(grid_h, grid_w, side)
    return np.einsum("nk,nkc->nc", wts, _f64(pos_table)[idx])


def ref_spatial_merge(x, grid_h, grid_w):
    """The 2 x 2 merge: [N, C] -> [N / 4, 4 C]; merged row m = tokens 4m .. 4m + 3 concatenated
    (in merge-window order these are the 4 patches of window m)."""
    gh, gw = _grid_ok(grid_h, grid_w)
    if x.shape[0] != gh * gw:
        raise ValueError(f"x has {x.shape[0]} tokens; expected grid_h * grid_w = {gh * gw}")
    return _f64(x).reshape(x.shape[0] // 4, 4 * x.shape[1])


def _rotate(x, cos, sin):
    """Rotate-half on the last axis with per-token cos/sin [N, D/2] (x: [N, H, D])."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _split_rope_ref(qkv, cos, sin, heads):
    N = qkv.shape[0]
    D = qkv.shape[1] // (3 * heads)
    parts = _f64(qkv).reshape(N, 3, heads, D)
    with np.errstate(invalid="ignore", over="ignore"):
        q, k = _rotate(parts[:, 0], cos, sin), _rotate(parts[:, 1], cos, sin)
    return tuple(np.ascontiguousarray(a.transpose(1, 0, 2)) for a in (q, k, parts[:, 2]))


def ref_split_rope_transpose(qkv, grid_h, grid_w, heads=HEADS):
    """qkv [N, 3 * H * D] (columns: Q heads, then K heads, then V heads, D per head) ->
    (q, k, v) each [H, N, D], with the 2-D vision rotary (rope_angles, float64) on q and k:
    for d < D/2: out[d] = x[d] cos(a_d) - x[d + D/2] sin(a_d), out[d + D/2] = x[d + D/2] cos(a_d)
    + x[d] sin(a_d)."""
    D = _head_dim(qkv.shape[1], heads)
    a = rope_angles(grid_h, grid_w, D)
    if a.shape[0] != qkv.shape[0]:
        raise ValueError(f"qkv has {qkv.shape[0]} tokens; expected grid_h * grid_w = {a.shape[0]}")
    return _split_rope_ref(qkv, np.cos(a), np.sin(a), heads)


def ref_transpose_head_token(o):
    """[H, N, D] -> [N, H * D]."""
    H, N, D = o.shape
    return _f64(o).transpose(1, 0, 2).reshape(N, H * D)


def ref_softmax(scores):
    """Softmax over the last axis, safe form, float64 (a NaN or +inf row, or an all -inf row, is NaN)."""
    xd = _f64(scores)
    if xd.size == 0:
        return xd
    with np.errstate(invalid="ignore", over="ignore"):
        e = _xp(xd).exp(xd - xd.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def ref_replace_image_tokens(text_emb, image_feats, positions):
    """A float64 copy of text_emb with rows positions[i] replaced by image_feats[i]; a position
    outside [0, rows) is skipped, as the kernel skips it."""
    out = _f64(text_emb).copy()
    pos = np.asarray(positions, np.int64)
    keep = (pos >= 0) & (pos < out.shape[0])
    out[pos[keep]] = _f64(image_feats)[keep]
    return out


# ---- shared input generation ------------------------------------------------------------------

def _act(shape, values, rng, shift=0, scale=1.0):
    """fp16 activations: N(0, scale); 'large' ~ N(0, 1e4) clipped to fp16's range; 'hostile' has
    +-inf, NaN, +-65504 and the smallest fp16 subnormal sprinkled in."""
    x = rng.standard_normal(shape) * scale
    if values == "large":
        x = np.clip(x * 1e4 / scale, -65504, 65504)
    elif values == "hostile" and x.size:
        f = x.reshape(-1)
        picks = [np.inf, -np.inf, np.nan, 65504.0, -65504.0, 6e-8]
        picks = picks[shift:] + picks[:shift]
        for k, v in enumerate(picks):
            f[(k * 7 + 3 * shift) % f.size::max(1, f.size // 2 + 1)] = v
    return x.astype(F16)


def _key(op):
    return lambda shape, dtype="float16": f"{op}:{'x'.join(map(str, shape))}:{dtype}"




@functools.lru_cache(maxsize=None)
def _resident(kernel_name, threads=256):
    """Blocks that fill every SM once for one of this family's kernels (bench.resident_grid)."""
    from .core.bench import resident_grid
    from .core.build import kernel
    return resident_grid(kernel(FAMILY, kernel_name), threads)


def _cast(fn):
    """A family reference: the float64 reference rounded once to fp16."""
    def ref(*a):
        with np.errstate(over="ignore", invalid="ignore"):
            r = fn(*a)
            return tuple(x.astype(F16) for x in r) if isinstance(r, tuple) else r.astype(F16)
    ref.__doc__ = fn.__doc__
    return ref


def _tt(*arrays):
    torch = _torch()
    return [torch.from_dlpack(a) for a in arrays]


FP16 = ("float16",)


# ================================================================================================
# LayerNorm with bias: x [N, C] -> [N, C]

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


@variant(dtypes=FP16)
def ln_scalar_tree(x, weight, bias, out=None):
    out_, R, C = _ln_check(x, weight, bias, out)
    if R and C:
        launch(FAMILY, "vision_01_layernorm_scalar_tree", (R,), (LN_BLOCK,), (x, weight, bias, out_, R, C, EPS),
               smem=2 * LN_BLOCK * 4)
    return out_


@variant(dtypes=FP16)
def ln_half2_shfl(x, weight, bias, out=None):
    out_, R, C = _ln_check(x, weight, bias, out)
    if R and C:
        vec = int(C % 2 == 0 and aligned(4, x, weight, bias, out_))
        launch(FAMILY, "vision_02_layernorm_half2_shfl", (R,), (LN_BLOCK,), (x, weight, bias, out_, R, C, EPS, vec))
    return out_


@variant(dtypes=FP16)
def ln_shfl_scalar_loads(x, weight, bias, out=None):
    """Ablation: step 02's kernel with its scalar-load path (vec = 0): the shuffle reduction,
    static shared memory and fma of step 02, with step 01's 2-byte loads."""
    out_, R, C = _ln_check(x, weight, bias, out)
    if R and C:
        launch(FAMILY, "vision_02_layernorm_half2_shfl", (R,), (LN_BLOCK,), (x, weight, bias, out_, R, C, EPS, 0))
    return out_


@variant(dtypes=FP16)
def ln_warp_vec8(x, weight, bias, out=None):
    out_, R, C = _ln_check(x, weight, bias, out)
    if R and C:
        vec = int(C % 8 == 0 and aligned(16, x, weight, bias, out_))
        launch(FAMILY, "vision_03_layernorm_warp_vec8", (-(-R // 4),), (128,), (x, weight, bias, out_, R, C, EPS, vec))
    return out_


def _ln_input(shape, dtype="float16", values="randn", seed=0):
    """x [N, C] (see _act), weight 1 + N(0, 0.1), bias N(0, 0.1). 'hostile' also makes row 1 constant
    (variance 0: the output is the bias) when there are 2 rows or more."""
    rng = np.random.default_rng(seed)
    x = _act(shape, values, rng)
    if values == "hostile" and shape[0] > 1:
        x[1] = 3.0
    w = (1 + 0.1 * rng.standard_normal(shape[1])).astype(F16)
    b = (0.1 * rng.standard_normal(shape[1])).astype(F16)
    return x, w, b


def _ln_torch(x, w, b):
    torch = _torch()
    if torch is None:
        return None
    tx, tw, tb = _tt(x, w, b)
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


def _op(**kw) -> Family:
    """One of the vision report's ops: a family recorded into vision.csv at its seed shapes, in fp16."""
    return Family(name=NAME, kernels=FAMILY, record_cases=[(s, "float16") for s in kw["shapes"].values()], **kw)


LAYERNORM = _op(
    op="layernorm", case_key=_key("layernorm"), make_input=_ln_input,
    reference=_cast(ref_layernorm), bytes_moved=lambda x, w, b, *_: 2 * x.nbytes + w.nbytes + b.nbytes,
    variants={"01_layernorm_scalar_tree": ln_scalar_tree, "ablate_02_scalar_loads": ln_shfl_scalar_loads,
              "02_layernorm_half2_shfl": ln_half2_shfl, "03_layernorm_warp_vec8": ln_warp_vec8},
    default={"float16": "03_layernorm_warp_vec8"},
    baselines={"torch F.layer_norm": _ln_torch, "cupy composite (LayerNorm)": _ln_cupy},
    shapes={f"vit_{n}x1152": (n, HIDDEN) for n in TOKENS},
    check_cases=[(s, v) for s in [(1, 1), (3, 31), (2, 1023), (5, 1152), (64, 1152), (3, 1288), (2, 4097),
                                  (0, 8)]
                 for v in ("randn", "large", "hostile")],
)


# ================================================================================================
# GELU (tanh approximation) and bias + GELU

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


def _gelu_input(shape, dtype="float16", values="randn", seed=0):
    """x ~ N(0, 2) (GELU's interesting range is -5..5), 'large'/'hostile' as _act."""
    return (_act(shape, values, np.random.default_rng(seed), scale=2.0),)


def _bias_gelu_input(shape, dtype="float16", values="randn", seed=0):
    rng = np.random.default_rng(seed)
    return _act(shape, values, rng, scale=2.0), _act(shape[-1:], "randn", rng, scale=0.5)


def _gelu_torch(x):
    torch = _torch()
    if torch is None:
        return None
    (tx,) = _tt(x)
    return lambda: torch.nn.functional.gelu(tx, approximate="tanh")


def _bias_gelu_torch(x, b):
    torch = _torch()
    if torch is None:
        return None
    tx, tb = _tt(x, b)
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
def _gelu_erf_torch(x):
    torch = _torch()
    if torch is None:
        return None
    (tx,) = _tt(x)
    return lambda: torch.nn.functional.gelu(tx)


GELU_ERF = _op(
    op="gelu_erf", case_key=_key("gelu_erf"), make_input=_gelu_input,
    reference=_cast(ref_gelu_erf), bytes_moved=lambda x, *_: 2 * x.nbytes,
    variants={"30_gelu_erf_vec8": _gelu_step("30_gelu_erf_vec8", 8)},
    default={"float16": "30_gelu_erf_vec8"},
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


# ================================================================================================
# bias + residual (and the QKV-bias form without residual)

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


def _bias_res_input(shape, dtype="float16", values="randn", seed=0):
    """x and residual on one scale (see _act), the bias N(0, 0.1) (hostile: with its own extremes)."""
    rng = np.random.default_rng(seed)
    x = _act(shape, values, rng)
    b = _act(shape[-1:], "hostile" if values == "hostile" else "randn", rng, shift=2, scale=0.1)
    r = _act(shape, values, rng, shift=1)
    return x, b, r


def _qkv_input(shape, dtype="float16", values="randn", seed=0):
    x, b, _ = _bias_res_input(shape, dtype, values, seed)
    return x, b


def _bias_res_torch(x, b, r):
    torch = _torch()
    if torch is None:
        return None
    tx, tb, tr = _tt(x, b, r)
    to = torch.empty_like(tx)
    return lambda: torch.add(torch.add(tx, tr, out=to), tb, out=to)


def _bias_res_cupy(x, b, r):
    import cupy
    o = cupy.empty_like(x)
    return lambda: cupy.add(cupy.add(x, r, out=o), b, out=o)


def _qkv_torch(x, b):
    torch = _torch()
    if torch is None:
        return None
    tx, tb = _tt(x, b)
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


# ================================================================================================
# Patch embedding: patches [N, K] @ weight [O, K]^T + bias [O]

def _pe_check(p, w, b, out):
    require(p, "patches", dtype="float16", ndim=2)
    require(w, "weight", dtype="float16", ndim=2)
    require(b, "bias", dtype="float16", ndim=1)
    N, K = p.shape
    if w.shape[1] != K:
        raise ValueError(f"weight: expected {K} columns (the patch_dim of patches), got shape {w.shape}")
    if b.shape[0] != w.shape[0]:
        raise ValueError(f"bias: expected length {w.shape[0]} (the rows of weight), got {b.shape[0]}")
    if N > 65535:
        raise ValueError(f"{N} patches: at most 65535 per call (grid.y); split the call")
    return out_like(out, p, shape=(N, w.shape[0])), N, w.shape[0], K


def _pe_alloc(p, w, b):
    import cupy
    return cupy.empty((p.shape[0], w.shape[0]), cupy.float16)


@variant(dtypes=FP16, alloc_out=_pe_alloc)
def pe_scalar(patches, weight, bias, out=None):
    out_, N, O, K = _pe_check(patches, weight, bias, out)
    if N and O:
        launch(FAMILY, "vision_12_patch_embed_scalar", (-(-O // 128), N), (128,), (patches, weight, bias, out_, N, O, K))
    return out_


@variant(dtypes=FP16, alloc_out=_pe_alloc)
def pe_half2_fma(patches, weight, bias, out=None):
    out_, N, O, K = _pe_check(patches, weight, bias, out)
    if N and O:
        vec = int(K % 2 == 0 and aligned(4, patches, weight))
        launch(FAMILY, "vision_13_patch_embed_half2_fma", (-(-O // 128), N), (128,),
               (patches, weight, bias, out_, N, O, K, vec))
    return out_


def _pe_input(shape, dtype="float16", values="randn", seed=0):
    """shape (N, K, O): patches [N, K] (pixel values, N(0, 1)), weight [O, K] N(0, 1/K)
    (a fixed-seed random Conv3d), bias [O] N(0, 0.02)."""
    N, K, O = shape
    rng = np.random.default_rng(seed)
    p = _act((N, K), values, rng)
    w = (rng.standard_normal((O, K)) / np.sqrt(max(K, 1))).astype(F16)
    b = (0.02 * rng.standard_normal(O)).astype(F16)
    return p, w, b


def _pe_cublas(p, w, b):
    import cupy
    o = cupy.empty((p.shape[0], w.shape[0]), cupy.float16)

    def run():
        cupy.matmul(p, w.T, out=o)
        return cupy.add(o, b, out=o)
    return run


def _pe_torch(p, w, b):
    torch = _torch()
    if torch is None:
        return None
    tp, tw, tb = _tt(p, w, b)
    return lambda: torch.nn.functional.linear(tp, tw, tb)


PATCH_EMBED = _op(
    op="patch_embed", case_key=_key("patch_embed"), make_input=_pe_input,
    reference=_cast(ref_patch_embed),
    bytes_moved=lambda p, w, b, *_: p.nbytes + w.nbytes + b.nbytes + p.shape[0] * w.shape[0] * 2,
    variants={"12_patch_embed_scalar": pe_scalar, "13_patch_embed_half2_fma": pe_half2_fma},
    default={"float16": "13_patch_embed_half2_fma"},
    baselines={"cuBLAS GEMM (cupy.matmul) + bias": _pe_cublas, "torch F.linear (cuBLAS)": _pe_torch},
    shapes={f"patches_{n}": (n, PATCH_DIM, HIDDEN) for n in (1024, 4096)},
    check_cases=[(s, v) for s in [(1, 1536, 1152), (3, 1536, 1152), (5, 31, 17), (7, 48, 64), (2, 1, 3),
                                  (0, 1536, 8)]
                 for v in ("randn", "large", "hostile")],
)


# ================================================================================================
# Position embedding: bilinear resampling of the learned 48 x 48 grid, in window order

def _pi_check(table, idx, wts, out):
    require(table, "pos_table", dtype="float16", ndim=2)
    require(idx, "idx", dtype="int32", ndim=2)
    require(wts, "wts", dtype="float32", shape=idx.shape)
    if idx.shape[1:] != (4,):
        raise ValueError(f"idx: expected shape (N, 4), got {idx.shape}")
    N, C = idx.shape[0], table.shape[1]
    if N > 65535:
        raise ValueError(f"{N} tokens: at most 65535 per call (grid.y); split the call")
    in_range(idx, table.shape[0], "idx (rows of pos_table)")
    return out_like(out, table, shape=(N, C)), N, C


def _pi_alloc(table, idx, wts):
    import cupy
    return cupy.empty((idx.shape[0], table.shape[1]), cupy.float16)


def _pi_step(name):
    def run(table, idx, wts, out=None):
        out_, N, C = _pi_check(table, idx, wts, out)
        if N and C:
            launch(FAMILY, f"vision_{name}", (-(-C // 256), N), (256,), (table, idx, wts, out_, N, C))
        return out_
    run.__name__ = name
    return variant(dtypes=FP16, alloc_out=_pi_alloc, plan=False, reads_back=True)(run)   # idx checked every call


def _pi_input(shape, dtype="float16", values="randn", seed=0):
    """shape (grid_h, grid_w, side, C): the learned table [side^2, C] (N(0, 0.02), 'large'/'hostile'
    as _act), and the interpolation tables (idx int32, weights float32) of interp_tables."""
    gh, gw, side, C = shape
    rng = np.random.default_rng(seed)
    scale = 1.0 if values == "randn" else 0.02
    table = _act((side * side, C), values, rng, scale=scale)
    idx, wts = interp_tables(gh, gw, side)
    return table, idx, wts.astype(np.float32)


def _pi_ref(table, idx, wts):
    return np.einsum("nk,nkc->nc", _f64(wts), _f64(table)[np.asarray(idx)])


def _pi_cupy(table, idx, wts):
    """CuPy composite: gather 4 rows per token, weight, sum (allocates temporaries)."""
    return lambda: (table[idx].astype("float32") * wts[:, :, None]).sum(axis=1).astype("float16")


POS_INTERP = _op(
    op="pos_interp", case_key=_key("pos_interp"), make_input=_pi_input,
    reference=_cast(_pi_ref),
    # unique bytes: the table rows actually used, the two small tables, the output
    bytes_moved=lambda t, i, w, *_: (len(np.unique(i.get() if hasattr(i, "get") else i)) * t.shape[1] * 2
                                     + i.nbytes + w.nbytes + i.shape[0] * t.shape[1] * 2),
    variants={"14_pos_interp_mul_add": _pi_step("14_pos_interp_mul_add"),
              "15_pos_interp_fma": _pi_step("15_pos_interp_fma")},
    default={"float16": "15_pos_interp_fma"},
    baselines={"cupy composite (gather + weighted sum)": _pi_cupy},
    shapes={"grid_64x64": (64, 64, POS_SIDE, HIDDEN), "grid_128x128": (128, 128, POS_SIDE, HIDDEN)},
    check_cases=[(s, v) for s in [(2, 2, POS_SIDE, HIDDEN), (28, 28, POS_SIDE, HIDDEN), (6, 10, POS_SIDE, HIDDEN),
                                  (96, 64, POS_SIDE, 31), (2, 4, 4, 31), (4, 2, 1, 5)]
                 for v in ("randn", "hostile")],
)


# ================================================================================================
# Spatial merge: [N, C] -> [N / 4, 4 C]

def _sm_check(x, out):
    require(x, "x", dtype="float16", ndim=2)
    N, C = x.shape
    if N % 4:
        raise ValueError(f"x has {N} tokens: the 2x2 merge needs a multiple of 4")
    _size_ok(x.size)
    return out_like(out, x, shape=(N // 4, 4 * C)), N // 4, C


def _sm_alloc(x):
    import cupy
    return cupy.empty((x.shape[0] // 4, 4 * x.shape[1]), cupy.float16)


@variant(dtypes=FP16, alloc_out=_sm_alloc)
def sm_scalar(x, out=None):
    out_, M, C = _sm_check(x, out)
    if M and C:
        launch(FAMILY, "vision_16_spatial_merge_scalar", (M, -(-4 * C // 256)), (256,), (x, out_, M, C))
    return out_


@variant(dtypes=FP16, alloc_out=_sm_alloc)
def sm_vec8(x, out=None):
    out_, M, C = _sm_check(x, out)
    if M and C:
        vec = int(C % 8 == 0 and aligned(16, x, out_))
        launch(FAMILY, "vision_17_spatial_merge_vec8", (M, -(-4 * C // (256 * 8))), (256,), (x, out_, M, C, vec))
    return out_


def _sm_stream(grid_of):
    def run(x, out=None):
        out_, M, C = _sm_check(x, out)
        if M and C:
            vec = int(C % 8 == 0 and aligned(16, x, out_))
            units = M * 4 * C // 8 if vec else M * 4 * C
            launch(FAMILY, "vision_26_spatial_merge_stream", (max(1, grid_of(units)),), (256,), (x, out_, M, C, vec))
        return out_
    run.__name__ = "sm_stream"
    return run


sm_stream = variant(dtypes=FP16, alloc_out=_sm_alloc)(_sm_stream(lambda units: -(-units // (256 * SM_U))))
sm_stream_resident = variant(dtypes=FP16, alloc_out=_sm_alloc)(
    _sm_stream(lambda units: min(_resident("vision_26_spatial_merge_stream"), -(-units // 256))))
sm_stream_resident.__doc__ = ("Ablation: step 26's kernel over the resident blocks only (one wave, grid-stride), "
                              "instead of a grid where every thread makes exactly one pass of SM_U loads.")


def _sm_cupy(x):
    """A copy of the reshaped view (x.reshape alone would be free: no bytes move)."""
    import cupy
    o = cupy.empty((x.shape[0] // 4, 4 * x.shape[1]), x.dtype)
    return lambda: cupy.copyto(o, x.reshape(o.shape))


def _sm_torch(x):
    torch = _torch()
    if torch is None:
        return None
    (tx,) = _tt(x)
    to = torch.empty((x.shape[0] // 4, 4 * x.shape[1]), dtype=tx.dtype, device=tx.device)
    return lambda: to.copy_(tx.view(to.shape))


SPATIAL_MERGE = _op(
    op="spatial_merge", case_key=_key("spatial_merge"),
    make_input=lambda shape, dtype="float16", values="randn", seed=0: (_act(shape, values, np.random.default_rng(seed)),),
    reference=_cast(lambda x: _f64(x).reshape(x.shape[0] // 4, 4 * x.shape[1])),
    bytes_moved=lambda x, *_: 2 * x.nbytes,
    variants={"16_spatial_merge_scalar": sm_scalar, "17_spatial_merge_vec8": sm_vec8,
              "ablate_26_resident_grid": sm_stream_resident, "26_spatial_merge_stream": sm_stream},
    default={"float16": "26_spatial_merge_stream"},
    baselines={"cupy copy (reshape)": _sm_cupy, "torch copy_ (view)": _sm_torch},
    shapes={f"vit_{n}x1152": (n, HIDDEN) for n in TOKENS},
    check_cases=[(s, v) for s in [(4, 1), (4, 31), (8, 1152), (64, 1152), (12, 4097), (0, 8)]
                 for v in ("randn", "hostile")],
)


# ================================================================================================
# Fused split + 2-D vision RoPE + transpose: qkv [N, 3 H D] -> q, k, v [H, N, D]

def _head_dim(cols, heads):
    if not isinstance(heads, (int, np.integer)) or heads <= 0:
        raise ValueError(f"heads: expected a positive int, got {heads!r}")
    if cols % (3 * heads):
        raise ValueError(f"qkv has {cols} columns: expected 3 * heads * head_dim (heads = {heads}); "
                         f"{cols} is not a multiple of {3 * heads}")
    D = cols // (3 * heads)
    if D % 4:
        raise ValueError(f"head_dim = {D}: the 2-D vision rotary needs head_dim % 4 == 0")
    return D


def _sr_check(qkv, cos, sin, out):
    require(qkv, "qkv", dtype="float16", ndim=2)
    require(cos, "cos", dtype="float32", ndim=2)
    require(sin, "sin", dtype="float32", shape=cos.shape)
    N = qkv.shape[0]
    if cos.shape[0] != N:
        raise ValueError(f"cos/sin: expected {N} rows (one per token of qkv), got {cos.shape[0]}")
    D = 2 * cos.shape[1]
    if D == 0 or qkv.shape[1] % (3 * D):
        raise ValueError(f"qkv has {qkv.shape[1]} columns: expected 3 * heads * head_dim with head_dim = "
                         f"2 * cos.shape[1] = {D}")
    H = qkv.shape[1] // (3 * D)
    _size_ok(qkv.size)
    if out is None:
        import cupy
        out = tuple(cupy.empty((H, N, D), cupy.float16) for _ in range(3))
    else:
        if len(out) != 3:
            raise ValueError("out: expected a tuple (q, k, v)")
        for nm, o in zip("qkv", out):
            require(o, f"out {nm}", dtype="float16", shape=(H, N, D))
    return out, N, H, D


def _sr_alloc(qkv, cos, sin):
    import cupy
    D = 2 * cos.shape[1]
    H = qkv.shape[1] // (3 * D)
    return tuple(cupy.empty((H, qkv.shape[0], D), cupy.float16) for _ in range(3))


def _grid_y(N):
    if N > 65535:
        raise ValueError(f"{N} tokens: steps 18 and 19 launch one block row per token (grid.y <= 65535)")


def _sr_seed_step(kernel, threads, vec, doc=None):
    """Steps 18-19 and their ablations: one block of `threads` per (head, token). vec: None for
    step 18's kernel (no vec argument), True for step 19's 16-byte V copy where D and alignment
    allow it, False for step 19's kernel copying V by halves."""
    def run(qkv, cos, sin, out=None):
        (q, k, v), N, H, D = _sr_check(qkv, cos, sin, out)
        _grid_y(N)
        if N:
            extra = () if vec is None else (int(vec and D % 8 == 0 and aligned(16, qkv, v)),)
            launch(FAMILY, f"vision_{kernel}", (H, N), (threads,), (qkv, cos, sin, q, k, v, N, H, D) + extra)
        return q, k, v
    run.__name__, run.__doc__ = kernel, doc
    return variant(dtypes=FP16, alloc_out=_sr_alloc)(run)


sr_scalar = _sr_seed_step("18_split_rope_scalar", 64, None)
sr_fma = _sr_seed_step("19_split_rope_fma", 128, True)
sr_scalar_128 = _sr_seed_step("18_split_rope_scalar", 128, None,
                              "Ablation: step 18's kernel launched with step 19's 128 threads (the block size alone).")
sr_fma_scalar_v = _sr_seed_step("19_split_rope_fma", 128, False,
                                "Ablation: step 19 with V copied by halves (vec = 0): block 128 and fma, no float4 V copy.")


@variant(dtypes=FP16, alloc_out=_sr_alloc)
def sr_vec(qkv, cos, sin, out=None):
    (q, k, v), N, H, D = _sr_check(qkv, cos, sin, out)
    if N:
        vec = int(D % 8 == 0 and aligned(16, qkv, cos, sin, q, k, v))
        items = -(-N // SR_TILE) * SR_TILE * 3 * H * (-(-D // 8))
        launch(FAMILY, "vision_20_split_rope_vec", (-(-items // 256),), (256,), (qkv, cos, sin, q, k, v, N, H, D, vec))
    return q, k, v


def _sr_tile(name, tile=SR2_TILE, one_pass=False, doc=None):
    """Step 27 and its ablations: a block per (tile of `tile` tokens, part); one_pass: grid.z blocks
    per (tile, part), so that each thread makes one pass of SR2_U items. Falls back to step 20 where
    D % 8 != 0 or a base is misaligned."""
    def run(qkv, cos, sin, out=None):
        (q, k, v), N, H, D = _sr_check(qkv, cos, sin, out)
        if N:
            if D % 8 == 0 and aligned(16, qkv, cos, sin, q, k, v):
                z = -(-(H * tile * (D // 8)) // (SR2_U * 256)) if one_pass else 1
                launch(FAMILY, f"vision_{name}", (-(-N // tile), 3, z), (256,), (qkv, cos, sin, q, k, v, N, H, D))
            else:
                sr_vec(qkv, cos, sin, out=(q, k, v))
        return q, k, v
    run.__name__, run.__doc__ = name, doc
    return variant(dtypes=FP16, alloc_out=_sr_alloc)(run)


sr_tile = _sr_tile("27_split_rope_tile", doc="Step 27: token tiles, 32-bit indices, 3 items in flight per thread.")


def _sr_input(shape, dtype="float16", values="randn", seed=0):
    """shape (grid_h, grid_w, heads, head_dim): qkv [N, 3 * heads * head_dim] (see _act) and the
    float32 rope_tables of the grid."""
    gh, gw, H, D = shape
    rng = np.random.default_rng(seed)
    qkv = _act((gh * gw, 3 * H * D), values, rng)
    cos, sin = rope_tables(gh, gw, D)
    return qkv, cos, sin


def _sr_ref(qkv, cos, sin):
    D = 2 * cos.shape[1]
    return _split_rope_ref(qkv, _f64(cos), _f64(sin), qkv.shape[1] // (3 * D))


def _sr_torch(qkv, cos, sin):
    """torch eager, HF's apply_rotary_pos_emb_vision style: split, rotate-half in float32,
    transpose to [H, N, D] (several kernels, temporaries)."""
    torch = _torch()
    if torch is None:
        return None
    tq, tc, ts = _tt(qkv, cos, sin)
    N, D = qkv.shape[0], 2 * cos.shape[1]
    H = qkv.shape[1] // (3 * D)
    c2, s2 = torch.cat([tc, tc], -1)[:, None, :], torch.cat([ts, ts], -1)[:, None, :]

    def run():
        q, k, v = tq.view(N, 3, H, D).unbind(1)
        out = []
        for x in (q, k):
            xf = x.float()
            rot = torch.cat([-xf[..., D // 2:], xf[..., :D // 2]], -1)
            out.append((xf * c2 + rot * s2).half().transpose(0, 1).contiguous())
        return out[0], out[1], v.transpose(0, 1).contiguous()
    return run


SPLIT_ROPE = _op(
    op="split_rope", case_key=_key("split_rope"), make_input=_sr_input,
    reference=_cast(_sr_ref),
    bytes_moved=lambda qkv, c, s, *_: 2 * qkv.nbytes + c.nbytes + s.nbytes,
    variants={"18_split_rope_scalar": sr_scalar, "ablate_18_block128": sr_scalar_128,
              "ablate_19_scalar_v": sr_fma_scalar_v, "19_split_rope_fma": sr_fma, "20_split_rope_vec": sr_vec,
              "27_split_rope_tile": sr_tile},
    default={"float16": "27_split_rope_tile"},
    baselines={"torch eager (split, rope, transpose)": _sr_torch},
    shapes={"vit_64x64": (64, 64, HEADS, HEAD_DIM), "vit_128x128": (128, 128, HEADS, HEAD_DIM)},
    check_cases=[(s, v) for s in [(2, 2, HEADS, HEAD_DIM), (2, 6, HEADS, HEAD_DIM), (10, 14, HEADS, HEAD_DIM),
                                  (32, 32, HEADS, HEAD_DIM), (2, 2, 3, 8), (2, 4, 2, 12), (4, 2, 1, 4), (2, 18, 2, 72)]
                 for v in ("randn", "hostile")],   # 'large': test_gpu_vision, with a tolerance for cancellation
)


# ================================================================================================
# Transpose [H, N, D] -> [N, H D]

def _tr_check(o, out):
    require(o, "o", dtype="float16", ndim=3)
    H, N, D = o.shape
    _size_ok(o.size)
    return out_like(out, o, shape=(N, H * D)), H, N, D


def _tr_alloc(o):
    import cupy
    return cupy.empty((o.shape[1], o.shape[0] * o.shape[2]), cupy.float16)


@variant(dtypes=FP16, alloc_out=_tr_alloc)
def tr_half2(o, out=None):
    out_, H, N, D = _tr_check(o, out)
    if o.size:
        vec = int(D % 2 == 0 and aligned(4, o, out_))
        items = H * N * (-(-D // 2))
        launch(FAMILY, "vision_21_transpose_half2", (-(-items // 256),), (256,), (o, out_, H, N, D, vec))
    return out_


def _tr_wide(name, doc):
    """Steps 22 and 29: 8, 2 or 1 halves per load (as aligned), walked in output or input order."""
    def run(o, out=None):
        out_, H, N, D = _tr_check(o, out)
        if o.size:
            vec = 8 if D % 8 == 0 and aligned(16, o, out_) else 2 if D % 2 == 0 and aligned(4, o, out_) else 1
            items = H * N * (-(-D // vec))
            launch(FAMILY, f"vision_{name}", (-(-items // 256),), (256,), (o, out_, H, N, D, vec))
        return out_
    run.__name__, run.__doc__ = name, doc
    return variant(dtypes=FP16, alloc_out=_tr_alloc)(run)


tr_vec8 = _tr_wide("22_transpose_vec8", "Step 22: 8 halves per load, walked in output order.")
tr_input_order = _tr_wide("29_transpose_input_order",
                          "Step 29: step 22's loads (8, 2 or 1 halves) walked in input order, as the seed draws it.")


def _tr_tile(name, tile=TR_TILE, stage=True, doc=None):
    """Step 28 and its ablations: a block per tile of `tile` tokens, staged through `tile` x H x D
    halves of shared memory (stage=False: none). Falls back to step 22 where D % 8 != 0,
    H x D > 1536 or a base is misaligned."""
    def run(o, out=None):
        out_, H, N, D = _tr_check(o, out)
        if o.size:
            if D % 8 == 0 and H * D <= 1536 and aligned(16, o, out_):
                launch(FAMILY, f"vision_{name}", (-(-N // tile),), (256,), (o, out_, H, N, D),
                       smem=tile * H * D * 2 if stage else 0)
            else:
                tr_vec8(o, out=out_)
        return out_
    run.__name__, run.__doc__ = name, doc
    return variant(dtypes=FP16, alloc_out=_tr_alloc)(run)


tr_tile = _tr_tile("28_transpose_tile", doc="Step 28: token tiles staged in shared memory, 3 loads in flight.")
tr_tile8 = _tr_tile("30_transpose_tile8", tile=8, doc="Step 30: step 28 with 8-token tiles.")


def _tr_cupy(o):
    import cupy
    H, N, D = o.shape
    out = cupy.empty((N, H * D), o.dtype)
    return lambda: cupy.copyto(out.reshape(N, H, D), o.transpose(1, 0, 2))


def _tr_torch(o):
    torch = _torch()
    if torch is None:
        return None
    (to,) = _tt(o)
    H, N, D = o.shape
    out = torch.empty((N, H, D), dtype=to.dtype, device=to.device)
    return lambda: out.copy_(to.transpose(0, 1))


TRANSPOSE = _op(
    op="transpose", case_key=_key("transpose"),
    make_input=lambda shape, dtype="float16", values="randn", seed=0: (_act(shape, values, np.random.default_rng(seed)),),
    reference=_cast(ref_transpose_head_token), bytes_moved=lambda o, *_: 2 * o.nbytes,
    variants={"21_transpose_half2": tr_half2, "22_transpose_vec8": tr_vec8,
              "29_transpose_input_order": tr_input_order, "28_transpose_tile": tr_tile,
              "30_transpose_tile8": tr_tile8},
    default={"float16": "28_transpose_tile"},
    baselines={"cupy copyto (transposed view)": _tr_cupy, "torch copy_ (transpose)": _tr_torch},
    shapes={f"vit_16x{n}x72": (HEADS, n, HEAD_DIM) for n in TOKENS},
    check_cases=[(s, v) for s in [(16, 1, 72), (16, 31, 72), (16, 100, 72), (3, 5, 7), (2, 9, 6), (1, 1, 1),
                                  (4, 33, 16), (0, 3, 8)]
                 for v in ("randn", "hostile")],
)


# ================================================================================================
# Softmax over attention score rows [..., N]

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


LAB01_SOFTMAX = "lab01_best_fp16"     # lab 01's best fp16 step (softmax.BEST["float16"])


def _sx_lab01(x, out=None):
    from . import softmax as sm
    return sm.VARIANTS[sm.BEST["float16"]](x, out=out)


def _sx_torch(x):
    torch = _torch()
    if torch is None:
        return None
    (tx,) = _tt(x)
    return lambda: torch.softmax(tx, dim=-1)


def _sx_input(shape, dtype="float16", values="randn", seed=0):
    from . import softmax as sm
    return sm.make_input(shape, "float16", values, seed)


def _sx_variants():
    from . import softmax as sm
    lab01 = variant(dtypes=FP16)(_sx_lab01)
    best = sm.BEST["float16"]
    lab01.__doc__ = f"lab 01's best fp16 step ({best}): " + (sm.VARIANTS[best].__doc__ or "")
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


# ================================================================================================
# Replace the image placeholder rows of the text embedding, in place

def _rp_check(emb, feats, positions):
    require(emb, "text_emb", dtype="float16", ndim=2)
    require(feats, "image_feats", dtype="float16", ndim=2)
    require(positions, "positions", dtype=("int32", "int64"), ndim=1)
    rows, C = emb.shape
    if feats.shape[1] != C:
        raise ValueError(f"image_feats: expected {C} columns (the hidden size of text_emb), got {feats.shape[1]}")
    if positions.shape[0] != feats.shape[0]:
        raise ValueError(f"positions: expected {feats.shape[0]} entries (one per image_feats row), "
                         f"got {positions.shape[0]}")
    return rows, C


@variant(dtypes=FP16)
def rp_rows(emb, feats, positions, out=None):
    """In place: emb[positions[i]] = feats[i]; returns emb. The kernel skips an out-of-range
    position (never writes out of bounds); replace_image_tokens raises on one first."""
    rows, C = _rp_check(emb, feats, positions)
    if positions.size and C:
        # int64 positions past int32 would wrap onto a valid row: mark them -1 (skipped) before narrowing
        pos = positions if positions.dtype == np.int32 else \
            __import__("cupy").where((positions >= 0) & (positions < rows), positions, -1).astype(np.int32)
        vec = int(C % 8 == 0 and aligned(16, emb, feats))
        launch(FAMILY, "vision_24_replace_image_tokens", (positions.size,), (128,),
               (emb, feats, pos, positions.size, rows, C, vec))
    return emb


def _rp_input(shape, dtype="float16", values="randn", seed=0):
    """shape (rows, n_img, C): text_emb [rows, C], image_feats [n_img, C], n_img distinct sorted
    positions (int32), as a prompt's image-token run would be, scattered."""
    rows, n_img, C = shape
    rng = np.random.default_rng(seed)
    emb = _act((rows, C), "randn", rng)
    feats = _act((n_img, C), values, rng, shift=1)
    pos = np.sort(rng.choice(rows, size=n_img, replace=False)).astype(np.int32)
    return emb, feats, pos


def _rp_cupy(emb, feats, pos):
    def run():
        emb[pos] = feats
        return emb
    return run


REPLACE = _op(
    op="replace", case_key=_key("replace"), make_input=_rp_input,
    reference=_cast(ref_replace_image_tokens),
    bytes_moved=lambda e, f, p, *_: 2 * f.nbytes + p.nbytes,
    variants={"24_replace_image_tokens": rp_rows},
    default={"float16": "24_replace_image_tokens"},
    baselines={"cupy fancy-index assignment": _rp_cupy},
    shapes={"prompt_8192_img_4096x4096": (8192, 4096, 4096)},
    check_cases=[(s, v) for s in [(10, 3, 1152), (100, 64, 1152), (5, 5, 31), (7, 0, 16), (3000, 1024, 4096)]
                 for v in ("randn", "hostile")],
)

# ================================================================================================
# Ablations: the bundled pairs of this lab, one change at a time. Each ablation kernel is
# the "after" step with ONE change undone (same launcher, same inputs, same run): time(ablation) /
# time(after) is what that change is worth given the others. One input signature per Family (the
# harness runs every variant of a family on every case), so the ablations are three families that
# share one record, vision_ablation.csv, told apart by their op (ablate_<op>); their shapes are the
# lab's.

def _op_ablation(op, base, variants, shapes, check_cases, about):
    return Family(name="vision_ablation", kernels=FAMILY, op=f"ablate_{op}", case_key=_key(f"ablate_{op}"),
                  make_input=base.make_input, reference=base.reference, bytes_moved=base.bytes_moved,
                  variants=variants, default={}, baselines={}, shapes=shapes, check_cases=check_cases,
                  record_cases=[(s, "float16") for s in shapes.values()], about=about)


ABLATION_BIAS_GELU = _op_ablation(
    "bias_gelu", BIAS_GELU,
    {"09_bias_gelu_vec8_exp": BIAS_GELU.variants["09_bias_gelu_vec8_exp"],
     "25_ablate_one_vector": _bias_gelu_step("25_ablate_one_vector", 8, 1),
     "25_ablate_signed_index": _bias_gelu_step("25_ablate_signed_index", 8, BG_U),
     "25_bias_gelu_vec8_x2": BIAS_GELU.variants["25_bias_gelu_vec8_x2"]},
    BIAS_GELU.shapes, [(s, v) for s in [(1, 1), (3, 7), (2, 31), (7, 4304), (3, 4301), (0, 8)]
                       for v in ("randn", "hostile")],
    "lab 05: step 09 -> 25, each change alone")
ABLATION_SPLIT_ROPE = _op_ablation(
    "split_rope", SPLIT_ROPE,
    {"20_split_rope_vec": sr_vec,
     "27_ablate_one_in_flight": _sr_tile("27_ablate_one_in_flight"),
     "27_ablate_index64": _sr_tile("27_ablate_index64"),
     "27_ablate_tile8": _sr_tile("27_ablate_tile8", tile=8),
     "27_ablate_one_pass": _sr_tile("27_ablate_one_pass", one_pass=True),
     "27_split_rope_tile": sr_tile},
    SPLIT_ROPE.shapes, [(s, v) for s in [(2, 2, HEADS, HEAD_DIM), (10, 14, HEADS, HEAD_DIM), (2, 2, 3, 8),
                                         (2, 4, 2, 12), (2, 18, 2, 72), (4, 2, 1, 4)] for v in ("randn", "hostile")],
    "lab 05: step 20 -> 27, each change alone")
ABLATION_TRANSPOSE = _op_ablation(
    "transpose", TRANSPOSE,
    {"22_transpose_vec8": tr_vec8,
     "28_ablate_one_in_flight": _tr_tile("28_ablate_one_in_flight"),
     "28_ablate_index64": _tr_tile("28_ablate_index64"),
     "28_ablate_no_smem": _tr_tile("28_ablate_no_smem", stage=False),
     "28_ablate_tile8": _tr_tile("28_ablate_tile8", tile=8),
     "28_transpose_tile": tr_tile},
    TRANSPOSE.shapes, [(s, v) for s in [(16, 1, 72), (16, 31, 72), (16, 100, 72), (3, 5, 7), (4, 33, 16), (0, 3, 8)]
                       for v in ("randn", "hostile")],
    "lab 05: step 22 -> 28, each change alone")
ABLATION = [ABLATION_BIAS_GELU, ABLATION_SPLIT_ROPE, ABLATION_TRANSPOSE]   # one record: vision_ablation

# label -> (the family whose frame holds them, before, after, [(the change, step with it, step without it)]).
# GELU 04 -> 05 needs no ablation kernel: its other change, __fmaf_rn, compiles to the same f32
# arithmetic (fmaf_changes("05_gelu_vec8") is False), so step 04 *is* step 05 with the width undone.
ABLATION_PAIRS = {
    "GELU 04 → 05": (GELU, "04_gelu_half2", "05_gelu_vec8", [
        ("8 halves (16 bytes) per thread", "05_gelu_vec8", "04_gelu_half2")]),
    "bias + GELU 09 → 25": (ABLATION_BIAS_GELU, "09_bias_gelu_vec8_exp", "25_bias_gelu_vec8_x2", [
        ("two vectors in flight per thread", "25_bias_gelu_vec8_x2", "25_ablate_one_vector"),
        ("unsigned 32-bit indices", "25_bias_gelu_vec8_x2", "25_ablate_signed_index")]),
    "split + RoPE 20 → 27": (ABLATION_SPLIT_ROPE, "20_split_rope_vec", "27_split_rope_tile", [
        ("3 items in flight per thread", "27_split_rope_tile", "27_ablate_one_in_flight"),
        ("the 32-bit item decode", "27_split_rope_tile", "27_ablate_index64"),
        ("16-token tiles (not 8)", "27_split_rope_tile", "27_ablate_tile8"),
        ("the loop over the tile (not one pass per thread)", "27_split_rope_tile", "27_ablate_one_pass")]),
    "transpose 22 → 28": (ABLATION_TRANSPOSE, "22_transpose_vec8", "28_transpose_tile", [
        ("3 loads in flight per thread", "28_transpose_tile", "28_ablate_one_in_flight"),
        ("the 32-bit item decode", "28_transpose_tile", "28_ablate_index64"),
        ("staging in shared memory", "28_transpose_tile", "28_ablate_no_smem"),
        ("16-token tiles (not 8)", "28_transpose_tile", "28_ablate_tile8")]),
}
ABLATION_STEPS = {   # name -> what it is, for the lab's tables
    "04_gelu_half2": "step 04 (before: half2 per thread; = step 05 with the width undone, see fmaf_changes)",
    "05_gelu_vec8": "step 05 (after: 8 halves per thread, __fmaf_rn)",
    "09_bias_gelu_vec8_exp": "step 09 (before: one vector per thread, signed int indices)",
    "25_bias_gelu_vec8_x2": "step 25 (after: both changes)",
    "25_ablate_one_vector": "step 25 with one vector per thread",
    "25_ablate_signed_index": "step 25 with signed int indices (rem.s32)",
    "20_split_rope_vec": "step 20 (before: one item per thread, 64-bit decode, 8-token tiles)",
    "27_split_rope_tile": "step 27 (after: all four changes)",
    "27_ablate_one_in_flight": "step 27 with one item in flight per thread",
    "27_ablate_index64": "step 27 with a 64-bit item decode",
    "27_ablate_tile8": "step 27 with 8-token tiles",
    "27_ablate_one_pass": "step 27 with one pass per thread (grid.z blocks per tile)",
    "22_transpose_vec8": "step 22 (before: one item per thread, 64-bit decode, no staging)",
    "28_transpose_tile": "step 28 (after: all four changes)",
    "28_ablate_one_in_flight": "step 28 with one load in flight per thread",
    "28_ablate_index64": "step 28 with a 64-bit item decode",
    "28_ablate_no_smem": "step 28 storing straight to y (no shared memory)",
    "28_ablate_tile8": "step 28 with 8-token tiles",
}

_F32_OP = re.compile(r"^(fma|mul|add|sub|neg|div|rcp|ex2|tanh|abs|min|max)(\.\w+)*\.f32\b")


def f32_ops(step, arch="sm_90", extra=()) -> dict:
    """{opcode: count} of the f32 arithmetic instructions in a step's PTX (fma, mul, add, sub, neg,
    ...; rounding and .ftz suffixes dropped), as built (extra: more NVRTC options, e.g. a -D)."""
    from .core import build
    out: dict = {}
    for ln in build.ptx(FAMILY, step, arch, extra=tuple(extra)):
        if m := _F32_OP.match(ln):
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return dict(sorted(out.items()))


def fmaf_changes(step, arch="sm_90") -> bool:
    """Whether writing `__fmaf_rn` changes a step's f32 arithmetic: its PTX against the same file
    built with -DVL_PLAIN_FMAF, where every __fmaf_rn(a, b, c) is a * b + c (and nvcc contracts as
    it likes). False: the rewrite is no change at all in the instructions."""
    return f32_ops(step, arch) != f32_ops(step, arch, ("-DVL_PLAIN_FMAF",))


FAMILIES = [LAYERNORM, GELU, GELU_ERF, BIAS_GELU, BIAS_RESIDUAL, QKV_BIAS, PATCH_EMBED, POS_INTERP, SPATIAL_MERGE,
            SPLIT_ROPE, TRANSPOSE, SOFTMAX, REPLACE, *ABLATION]


def _best(fam):
    return fam.VARIANTS[fam.BEST["float16"]]


# ================================================================================================
# The public API (what lab 06 builds the ViT block from): the best step of each family.

def layernorm(x, weight, bias, eps=EPS, out=None):
    """LayerNorm with bias over the last axis: x [N, C] fp16, weight/bias [C] fp16 -> [N, C] fp16,
    (x - mean) / sqrt(var + eps) * weight + bias, statistics in fp32 (reference: ref_layernorm).
    Only the tower's eps (1e-6) is compiled into the launchers' calls; another eps is a ValueError."""
    if eps != EPS:
        raise ValueError(f"eps: the vision kernels use the tower's eps = {EPS}, got {eps}")
    return _best(LAYERNORM)(x, weight, bias, out=out)


def gelu(x, out=None):
    """GELU with the tanh approximation (ref_gelu), any fp16 shape (contiguous)."""
    return _best(GELU)(x, out=out)


def gelu_erf(x, out=None):
    """The exact GELU, x Phi(x) (ref_gelu_erf): Qwen3-VL's mergers. Any fp16 shape (contiguous)."""
    return _best(GELU_ERF)(x, out=out)


def bias_gelu(x, bias, out=None):
    """gelu_tanh(x + bias[col]): x [N, C] fp16, bias [C] fp16 (ref_bias_gelu). The sum stays in fp32."""
    return _best(BIAS_GELU)(x, bias, out=out)


def bias_add_residual(x, bias, residual=None, out=None):
    """x + bias[col] (+ residual): x [N, C], bias [C], residual [N, C] or None (the QKV-bias form),
    summed in fp32 as (x + residual) + bias and rounded once to fp16 (ref_bias_add_residual).
    out may be x or residual (element-wise, in place is safe)."""
    return _bias_res_vec8(x, bias, residual, out=out)


def patch_embed(patches, weight, bias, out=None):
    """patches [N, 1536] @ weight[1152, 1536]^T + bias [1152] -> [N, 1152] fp16 (the Conv3d with
    kernel = stride = 2 x 16 x 16 over 3 channels, weight flattened (channel, frame, y, x)),
    fp32 accumulation (ref_patch_embed). The seed's kernel: for speed, cuBLAS (see the lab)."""
    return _best(PATCH_EMBED)(patches, weight, bias, out=out)


@functools.lru_cache(maxsize=16)
def _gpu_interp(grid_h, grid_w, side):
    import cupy
    idx, wts = interp_tables(grid_h, grid_w, side)
    return cupy.asarray(idx), cupy.asarray(wts.astype(np.float32))


def pos_embed_interpolate(pos_table, grid_h, grid_w, out=None):
    """pos_table [S * S, C] fp16 (the learned S x S grid, S = 48 in Qwen3-VL) -> [grid_h * grid_w, C]
    fp16, bilinear (align-corners) in merge-window token order (ref_pos_embed_interpolate). The
    index/weight tables are built once per grid (cached on the GPU)."""
    require(pos_table, "pos_table", dtype="float16", ndim=2)
    side = int(round(np.sqrt(pos_table.shape[0])))
    if side * side != pos_table.shape[0]:
        raise ValueError(f"pos_table: expected a square grid of rows (S * S), got {pos_table.shape[0]} rows")
    gh, gw = _grid_ok(grid_h, grid_w)
    idx, wts = _gpu_interp(gh, gw, side)
    return _best(POS_INTERP)(pos_table, idx, wts, out=out)


def spatial_merge(x, grid_h, grid_w, out=None):
    """The 2 x 2 merge [N, C] -> [N / 4, 4 C] (ref_spatial_merge): merged row m = tokens 4m .. 4m+3.
    N must equal grid_h * grid_w, both even."""
    gh, gw = _grid_ok(grid_h, grid_w)
    require(x, "x", dtype="float16", ndim=2)
    if x.shape[0] != gh * gw:
        raise ValueError(f"x has {x.shape[0]} tokens; expected grid_h * grid_w = {gh} * {gw} = {gh * gw}")
    return _best(SPATIAL_MERGE)(x, out=out)


@functools.lru_cache(maxsize=16)
def _gpu_rope(grid_h, grid_w, head_dim):
    import cupy
    return tuple(cupy.asarray(t) for t in rope_tables(grid_h, grid_w, head_dim))


def split_rope_transpose(qkv, grid_h, grid_w, heads=HEADS, out=None):
    """qkv [N, 3 * heads * head_dim] fp16 (Q heads, K heads, V heads) -> (q, k, v), each
    [heads, N, head_dim] fp16, with the 2-D vision rotary on q and k (ref_split_rope_transpose;
    tables: rope_tables, cached on the GPU per grid). N must equal grid_h * grid_w (both even);
    head_dim = columns / (3 * heads) must be a multiple of 4. out: an optional (q, k, v) tuple."""
    gh, gw = _grid_ok(grid_h, grid_w)
    require(qkv, "qkv", dtype="float16", ndim=2)
    D = _head_dim(qkv.shape[1], heads)
    if qkv.shape[0] != gh * gw:
        raise ValueError(f"qkv has {qkv.shape[0]} tokens; expected grid_h * grid_w = {gh} * {gw} = {gh * gw}")
    cos, sin = _gpu_rope(gh, gw, D)
    return _best(SPLIT_ROPE)(qkv, cos, sin, out=out)


def transpose_head_token(o, out=None):
    """[H, N, D] fp16 -> [N, H * D] fp16 (ref_transpose_head_token)."""
    return _best(TRANSPOSE)(o, out=out)


def softmax(scores, out=None):
    """Softmax over the last axis of fp16 scores [..., N] (the report's half2 + shuffle kernel),
    fp32 max and sum (ref_softmax). No scale: apply 1/sqrt(head_dim) in the QK^T GEMM's alpha."""
    return _best(SOFTMAX)(scores, out=out)


def replace_image_tokens(text_emb, image_feats, positions):
    """In place: text_emb[positions[i], :] = image_feats[i, :]; text_emb [rows, C], image_feats
    [n_img, C] fp16, positions int32/int64 [n_img] each in [0, rows) (checked on the host: one
    small device->host copy). Returns text_emb (ref_replace_image_tokens)."""
    rows, _ = _rp_check(text_emb, image_feats, positions)
    in_range(positions, rows, "positions (text_emb's rows)")
    return rp_rows(text_emb, image_feats, positions)


# ---- numbers the lab quotes, computed ------------------------------------------------------------

def gelu_tanh_vs_erf(lo=-8.0, hi=8.0, n=200001):
    """max |gelu_tanh(x) - gelu_erf(x)| on a fine grid, where it occurs, and the fp16 spacing there."""
    x = np.linspace(lo, hi, n)
    d = np.abs(ref_gelu(x) - ref_gelu_erf(x))
    i = int(np.argmax(d))
    g = float(ref_gelu_erf(x[i:i + 1])[0])
    return {"max_abs_diff": float(d[i]), "at_x": float(x[i]), "gelu_there": g,
            "fp16_spacing_there": float(np.spacing(np.float16(g))) if g else float(np.spacing(np.float16(0)))}


CALLS_PER_FORWARD = {   # the report's table 3.4 (one ViT forward: 27 layers, 1 merger + 3 DeepStack mergers)
    "layernorm_with_bias_fp16_kernel": 27 * 2 + 4, "bias_add_residual_fp16_kernel": 27 * 3 + 4 * 2,
    "bias_gelu_fp16_kernel": 27, "fused_split_rope_transpose_kernel": 27, "vision_softmax_fp16_kernel": 27,
    "transpose_head_token_kernel": 27, "gelu_fp16_kernel": 4, "spatial_merge_fp16_kernel": 4,
    "patch_embed_conv3d_fp16_kernel": 1, "pos_embed_interpolate_fp16_kernel": 1,
}


# ---- sentences and tables the lab computes from the results on screen -----------------------------

def with_tflops(df):
    """Patch-embedding results with a TFLOP/s column (2 N K O flops per call)."""
    df = df.copy()
    if len(df):
        keys = df["case"].str.split(":").str[1].str.split("x")
        df["TFLOP/s"] = [2 * int(k[0]) * int(k[1]) * int(k[2]) / t / 1e6 for k, t in zip(keys, df["median_us"])]
    else:
        df["TFLOP/s"] = []
    return df


