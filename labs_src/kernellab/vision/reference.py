"""Lab 05's numbers and what a step is checked against: the tower's dimensions and the kernels'
compile-time constants, the merge-window token order and the rotary / interpolation tables (NumPy,
no GPU), a float64 reference per op (NumPy in, float64 out; on CuPy arrays too), the families'
fp16 references, and the inputs each family is checked and timed on."""
from __future__ import annotations

import numpy as np


NAME = "vision"
FAMILY = "vision"
HIDDEN, HEADS, HEAD_DIM, MLP, LAYERS = 1152, 16, 72, 4304, 27
PATCH_DIM = 1536                 # 3 channels x 2 frames x 16 x 16
MERGE = 2                        # spatial merge size: 2 x 2 patches -> one merged token
POS_SIDE = 48                    # learned position table: 48 x 48 = 2304 rows of 1152
EPS = 1e-6                       # the vision tower's LayerNorm eps
THETA = 10000.0                  # vision rotary base
LN_BLOCK = 256                   # LN_BLOCK in vision.cu (steps 01, 02)
LN_VEC = 5                       # LN_VEC in vision.cu (step 03: 16-byte vectors a lane holds; tests/test_constants.py)
LN36_VPT = 4                     # LN36_VPT in vision.cu (step 36: 16-byte vectors a thread holds)
LN36_THREADS = 1024              # LN36_THREADS in vision.cu (step 36: the largest block)
SR_TILE = 8                      # SR_TILE in vision.cu (step 20: tokens per tile)
SR2_TILE = 16                    # SR2_TILE in vision.cu (step 27: tokens per block)
SR2_U = 3                        # SR2_U in vision.cu (step 27: items in flight per thread)
TR_TILE = 16                     # TR_TILE in vision.cu (step 28: tokens per block)
BG_U = 2                         # BG_U in vision.cu (step 25: vectors per thread)
SM_U = 4                         # SM_U in vision.cu (step 26: loads in flight per thread)
TOKENS = (4096, 16384)           # the lab's token counts
LN_CASES = [((n, HIDDEN), "float16") for n in TOKENS]                           # LayerNorm: the tower's rows
LN_SWEEP = [((8192, c), "float16") for c in (1024, 2048, 4096, 8192, 16384)]   # LayerNorm at every hidden size
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
    return _pi_ref(pos_table, *interp_tables(grid_h, grid_w, side))


def ref_spatial_merge(x, grid_h, grid_w):
    """The 2 x 2 merge: [N, C] -> [N / 4, 4 C]; merged row m = tokens 4m .. 4m + 3 concatenated
    (in merge-window order these are the 4 patches of window m)."""
    gh, gw = _grid_ok(grid_h, grid_w)
    if x.shape[0] != gh * gw:
        raise ValueError(f"x has {x.shape[0]} tokens; expected grid_h * grid_w = {gh * gw}")
    return _f64(x).reshape(x.shape[0] // 4, 4 * x.shape[1])


def _rotate(x, cos, sin):
    """Rotate-half on the last axis (x: [N, H, D]) with per-token tables [N, D/2] (one angle per pair) or [N, D]
    (the seed's: out[d] = x[d] cos[d] - x[d + D/2] sin[d], out[d + D/2] = x[d + D/2] cos[d + D/2] + x[d] sin[d + D/2])."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]          # [..., :half] and [..., -half:]: all of a [N, D/2] table
    return np.concatenate([x1 * c[..., :half] - x2 * s[..., :half], x2 * c[..., -half:] + x1 * s[..., -half:]], axis=-1)


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


# ---- the families' references: the float64 reference rounded once to fp16 ---------------------

def _cast(fn):
    """A family reference: the float64 reference rounded once to fp16."""
    def ref(*a):
        with np.errstate(over="ignore", invalid="ignore"):
            r = fn(*a)
            return tuple(x.astype(F16) for x in r) if isinstance(r, tuple) else r.astype(F16)
    ref.__doc__ = fn.__doc__
    return ref


def _pi_ref(table, idx, wts):
    return np.einsum("nk,nkc->nc", _f64(wts), _f64(table)[np.asarray(idx)])


def _sr_ref(qkv, cos, sin):
    D = 2 * cos.shape[1]
    return _split_rope_ref(qkv, _f64(cos), _f64(sin), qkv.shape[1] // (3 * D))


# ---- inputs: fp16 activations, each family's make_input ------------------------------------------

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


def _gelu_input(shape, dtype="float16", values="randn", seed=0):
    """x ~ N(0, 2) (GELU's interesting range is -5..5), 'large'/'hostile' as _act."""
    return (_act(shape, values, np.random.default_rng(seed), scale=2.0),)


def _bias_gelu_input(shape, dtype="float16", values="randn", seed=0):
    rng = np.random.default_rng(seed)
    return _act(shape, values, rng, scale=2.0), _act(shape[-1:], "randn", rng, scale=0.5)


def _bias_res_input(shape, dtype="float16", values="randn", seed=0):
    """x and residual on one scale (see _act), the bias N(0, 0.1) (hostile: with its own extremes)."""
    rng = np.random.default_rng(seed)
    x = _act(shape, values, rng)
    b = _act(shape[-1:], "hostile" if values == "hostile" else "randn", rng, shift=2, scale=0.1)
    r = _act(shape, values, rng, shift=1)
    return x, b, r


def _qkv_input(shape, dtype="float16", values="randn", seed=0):
    return _bias_res_input(shape, dtype, values, seed)[:2]


def _pe_input(shape, dtype="float16", values="randn", seed=0):
    """shape (N, K, O): patches [N, K] (pixel values, N(0, 1)), weight [O, K] N(0, 1/K)
    (a fixed-seed random Conv3d), bias [O] N(0, 0.02)."""
    N, K, O = shape
    rng = np.random.default_rng(seed)
    p = _act((N, K), values, rng)
    w = (rng.standard_normal((O, K)) / np.sqrt(max(K, 1))).astype(F16)
    b = (0.02 * rng.standard_normal(O)).astype(F16)
    return p, w, b


def _pi_input(shape, dtype="float16", values="randn", seed=0):
    """shape (grid_h, grid_w, side, C): the learned table [side^2, C] (N(0, 0.02), 'large'/'hostile'
    as _act), and the interpolation tables (idx int32, weights float32) of interp_tables."""
    gh, gw, side, C = shape
    rng = np.random.default_rng(seed)
    scale = 1.0 if values == "randn" else 0.02
    table = _act((side * side, C), values, rng, scale=scale)
    idx, wts = interp_tables(gh, gw, side)
    return table, idx, wts.astype(np.float32)


def _sr_input(shape, dtype="float16", values="randn", seed=0):
    """shape (grid_h, grid_w, heads, head_dim): qkv [N, 3 * heads * head_dim] (see _act) and the
    float32 rope_tables of the grid."""
    gh, gw, H, D = shape
    rng = np.random.default_rng(seed)
    qkv = _act((gh * gw, 3 * H * D), values, rng)
    cos, sin = rope_tables(gh, gw, D)
    return qkv, cos, sin


def _sx_input(shape, dtype="float16", values="randn", seed=0):
    from .. import softmax as sm
    return sm.make_input(shape, "float16", values, seed)


def _rp_input(shape, dtype="float16", values="randn", seed=0):
    """shape (rows, n_img, C): text_emb [rows, C], image_feats [n_img, C], n_img distinct sorted
    positions (int32), as a prompt's image-token run would be, scattered."""
    rows, n_img, C = shape
    rng = np.random.default_rng(seed)
    emb = _act((rows, C), "randn", rng)
    feats = _act((n_img, C), values, rng, shift=1)
    pos = np.sort(rng.choice(rows, size=n_img, replace=False)).astype(np.int32)
    return emb, feats, pos


# ---- the seed's own forms: fp16 [N, D] rotary tables; the transpose back to [H, N, D] ------------

def rope_tables_f16(grid_h, grid_w, head_dim=HEAD_DIM):
    """(cos, sin): fp16 NumPy [N, head_dim], the tables the seed's fused_split_rope_transpose_kernel
    reads (steps 34, 35): the angles of pairs 0 .. D/2 - 1 written twice (HF's cat(freqs, freqs)),
    so cos[t, d + D/2] == cos[t, d], rounded once to fp16."""
    a = rope_angles(grid_h, grid_w, head_dim)
    a = np.concatenate([a, a], axis=1)
    return np.cos(a).astype(F16), np.sin(a).astype(F16)


def _sr16_ref(qkv, cos, sin):
    """The float64 split + RoPE + transpose of steps 34 / 35: qkv [N, 3 H D], fp16 tables cos, sin
    [N, D] used as they are (their fp16 rounding is part of the input) -> (q, k, v) [H, N, D]."""
    return _split_rope_ref(qkv, _f64(cos), _f64(sin), qkv.shape[1] // (3 * cos.shape[1]))


def _sr16_input(shape, dtype="float16", values="randn", seed=0):
    """shape (grid_h, grid_w, heads, head_dim): qkv [N, 3 * heads * head_dim] (see _act) and the
    fp16 [N, head_dim] rope_tables_f16 of the grid."""
    gh, gw, H, D = shape
    qkv = _act((gh * gw, 3 * H * D), values, np.random.default_rng(seed))
    cos, sin = rope_tables_f16(gh, gw, D)
    return qkv, cos, sin


def ref_transpose_token_head(x):
    """[N, H, D] (the rows of [N, H * D] split per head) -> [H, N, D]: the seed's transpose_token_head_kernel."""
    return np.ascontiguousarray(_f64(x).transpose(1, 0, 2))


def _th_input(shape, dtype="float16", values="randn", seed=0):
    """shape (N, H, D): x [N, H, D] fp16 (see _act)."""
    return (_act(shape, values, np.random.default_rng(seed)),)
