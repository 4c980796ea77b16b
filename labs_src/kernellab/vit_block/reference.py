"""Lab 06, the tower on paper: Qwen3-VL's vision sizes, the call graph as data (BLOCK_PLAN, MERGER_PLAN,
PATCH_PLAN; seed 000), bad-input checks, random weights from a fixed seed, and the float64 references of
the block, the merger and the tower (NumPy, or CuPy float64) with the fp16 error bound."""
from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np

from .. import vision as V
from ..vision.reference import EPS, HEAD_DIM, HEADS, HIDDEN, LAYERS, MLP, PATCH_DIM, POS_SIDE as POS_GRID  # noqa: F401

NAME = "vit_block"
FAMILY = "vision"
QKV = 3 * HIDDEN
MERGE_IN, MERGE_OUT = 4 * HIDDEN, 4096
DEEPSTACK = (8, 16, 24)          # blocks whose outputs also feed a DeepStack merger
SCALE = 1.0 / math.sqrt(HEAD_DIM)
U_FP16 = 2.0 ** -11              # fp16 unit roundoff (round to nearest)

# ---- the call graph, as data (names, what runs, the report's kernel name) ------------------------

BLOCK_PLAN = [
    ("norm1", "kernel", "layernorm_with_bias_fp16_kernel"),
    ("QKV GEMM", "gemm", "cublasHgemm"),
    ("QKV bias", "kernel", "bias_add_residual_fp16_kernel"),
    ("split+RoPE+transpose", "kernel", "fused_split_rope_transpose_kernel"),
    ("QK^T", "gemm", "cublasHgemmStridedBatched"),
    ("softmax", "kernel", "vision_softmax_fp16_kernel"),
    ("P.V", "gemm", "cublasHgemmStridedBatched"),
    ("transpose", "kernel", "transpose_head_token_kernel"),
    ("out-proj GEMM", "gemm", "cublasHgemm"),
    ("out-proj bias+residual", "kernel", "bias_add_residual_fp16_kernel"),
    ("norm2", "kernel", "layernorm_with_bias_fp16_kernel"),
    ("fc1 GEMM", "gemm", "cublasHgemm"),
    ("fc1 bias+GELU", "kernel", "bias_gelu_fp16_kernel"),
    ("fc2 GEMM", "gemm", "cublasHgemm"),
    ("fc2 bias+residual", "kernel", "bias_add_residual_fp16_kernel"),
]
MERGER_PLAN = [
    ("merger LN", "kernel", "layernorm_with_bias_fp16_kernel"),
    ("spatial merge", "kernel", "spatial_merge_fp16_kernel"),
    ("merger fc1 GEMM", "gemm", "cublasHgemm"),
    ("merger fc1 bias", "kernel", "bias_add_residual_fp16_kernel"),
    ("merger GELU", "kernel", "gelu_fp16_kernel"),
    ("merger fc2 GEMM", "gemm", "cublasHgemm"),
    ("merger fc2 bias", "kernel", "bias_add_residual_fp16_kernel"),
]
PATCH_PLAN = [
    ("patch embed GEMM", "gemm", "cublasHgemm"),
    ("position interpolate", "kernel", "pos_embed_interpolate_fp16_kernel"),
    ("patch bias + position", "kernel", "bias_add_residual_fp16_kernel"),
]
# The report's kernel call counts per ViT forward (seed 000, section 3.4), as lab 05 lists them.
REPORT_COUNTS = V.CALLS_PER_FORWARD
# fp16 roundings on a block's longest path: every op stores an fp16 tensor except the transpose (an exact copy).
STAGES = sum(1 for name, _, _ in BLOCK_PLAN if name != "transpose")


def tower_plan(layers: int = LAYERS):
    """(name, kind, kernel) of every launch of the tower, in order: patch embed, the blocks (a
    DeepStack merger after blocks 8, 16, 24 where they exist), the main merger."""
    plan = list(PATCH_PLAN)
    for i in range(layers):
        plan += BLOCK_PLAN
        if i in DEEPSTACK:
            plan += MERGER_PLAN
    return plan + MERGER_PLAN


def call_counts(layers: int = LAYERS):
    """Launches per tower forward by kernel, here and in the report, with the reason for any gap."""
    import pandas as pd
    here = Counter(k for _, _, k in tower_plan(layers))
    notes = {
        "bias_add_residual_fp16_kernel": "+1 here: the patch bias and the position embedding are added by one "
                                         "bias_add_residual (the report's conv3d kernel adds its own bias)",
        "patch_embed_conv3d_fp16_kernel": "here the patch embedding is one cuBLAS GEMM (the report's "
                                          "'patch_embed_conv3d_fp16_kernel -> or cublasHgemm')",
    }
    rows = [{"kernel": k, "report": REPORT_COUNTS.get(k, "-"), "here": here.get(k, 0),
             "note": notes.get(k, "same" if here.get(k, 0) == REPORT_COUNTS.get(k) else "")}
            for k in list(REPORT_COUNTS) + [k for k in here if k not in REPORT_COUNTS]]
    return pd.DataFrame(rows)


# ---- bad input: checked on shapes, before anything is allocated or launched -----------------------

def validate(x, grid_h, grid_w, *, hidden=HIDDEN, name="x"):
    """Raise ValueError naming what was expected: x is [N, hidden], N = grid_h x grid_w, both sides
    even (the merge-window token order of the rotary, the position table and the 2x2 merge)."""
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != 2 or shape[1] != hidden:
        raise ValueError(f"{name}: expected shape [N, {hidden}] (hidden size {hidden}), got {shape}")
    gh, gw = int(grid_h), int(grid_w)
    if gh < 1 or gw < 1:
        raise ValueError(f"grid {gh}x{gw}: grid_h and grid_w must be >= 1")
    if gh % 2 or gw % 2:
        raise ValueError(f"grid {gh}x{gw}: the 2x2 spatial merge (and the merge-window token order the "
                         "rotary and position tables use) needs an even grid_h and grid_w")
    if shape[0] != gh * gw:
        raise ValueError(f"{name}: {shape[0]} tokens, but the grid {gh}x{gw} has {gh * gw}: "
                         "N must equal grid_h x grid_w")
    return gh, gw


def _check_weights(W, shapes, what):
    for k, s in shapes.items():
        if k not in W:
            raise ValueError(f"{what} weights: missing {k!r} (expected shape {s})")
        if tuple(W[k].shape) != s:
            raise ValueError(f"{what} weights: {k} expected shape {s}, got {tuple(W[k].shape)}")


LAYER_SHAPES = {"ln1_w": (HIDDEN,), "ln1_b": (HIDDEN,), "qkv_w": (QKV, HIDDEN), "qkv_b": (QKV,),
                "proj_w": (HIDDEN, HIDDEN), "proj_b": (HIDDEN,), "ln2_w": (HIDDEN,), "ln2_b": (HIDDEN,),
                "fc1_w": (MLP, HIDDEN), "fc1_b": (MLP,), "fc2_w": (HIDDEN, MLP), "fc2_b": (HIDDEN,)}
MERGER_SHAPES = {"ln_w": (HIDDEN,), "ln_b": (HIDDEN,), "fc1_w": (MERGE_IN, MERGE_IN), "fc1_b": (MERGE_IN,),
                 "fc2_w": (MERGE_OUT, MERGE_IN), "fc2_b": (MERGE_OUT,)}


# ---- random weights from a fixed seed ---------------------------------------------------------------

def _normal(xp, seed, shape, scale, shift=0.0):
    """fp16 N(shift, scale^2), drawn in float32 (NumPy on the host, CuPy on the GPU)."""
    if xp is np:
        a = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
    else:
        a = xp.random.RandomState(seed).standard_normal(shape, dtype=xp.float32)
    return (a * scale + shift).astype(xp.float16)


def _draw(shapes, s, xp):
    """Weights for `shapes`, from seeds s + 1, s + 2, ... in their order: matrices N(0, 1/fan_in) so activations
    keep unit scale, LayerNorm weights N(1, 0.1^2) and biases N(0, 0.1^2), other biases N(0, 0.02^2)."""
    def law(k, shp):
        if len(shp) == 2:
            return shp[1] ** -0.5, 0.0
        return (0.1, 1.0 if k.endswith("_w") else 0.0) if k.startswith("ln") else (0.02, 0.0)
    return {k: _normal(xp, s + i, shp, *law(k, shp)) for i, (k, shp) in enumerate(shapes.items(), 1)}


def make_layer(seed=0, xp=np):
    """One block's weights (_draw's laws)."""
    return _draw(LAYER_SHAPES, seed * 100, xp)


def merger_shapes(postshuffle=False):
    """A merger's weight shapes; postshuffle: LN over the merged 4608 (a Qwen3-VL DeepStack merger), else 1152."""
    return {**MERGER_SHAPES, "ln_w": (MERGE_IN,), "ln_b": (MERGE_IN,)} if postshuffle else MERGER_SHAPES


def make_merger(seed=0, xp=np, postshuffle=False):
    """A merger's weights (_draw's laws)."""
    return _draw(merger_shapes(postshuffle), 10_000 + seed * 100, xp)


def make_patch(seed=0, xp=np):
    s = 20_000 + seed * 100
    return {"w": _normal(xp, s + 1, (HIDDEN, PATCH_DIM), PATCH_DIM ** -0.5), "b": _normal(xp, s + 2, (HIDDEN,), 0.02),
            "pos": _normal(xp, s + 3, (POS_GRID * POS_GRID, HIDDEN), 0.5)}


def make_input(grid_h, grid_w, values="randn", seed=0, xp=np, width=HIDDEN):
    """Hidden states [grid_h * grid_w, width], fp16. randn: N(0, 1). hostile: token 0 at the fp16
    extremes (+-60000), tokens 1 and 2 constant (0, 7: variance 0), token 3 tiny (6e-5): LayerNorm must
    survive each. nan: one NaN in token 0 (attention spreads it to every token)."""
    n = grid_h * grid_w
    x = np.random.default_rng(seed).standard_normal((n, width))
    if values == "hostile":
        x[0] = np.where(np.arange(width) % 2, 60000.0, -60000.0)
        if n > 1:
            x[1] = 0.0
        if n > 2:
            x[2] = 7.0
        if n > 3:
            x[3] *= 6e-5
    elif values == "nan":
        x[0, width // 3] = np.nan
    x = x.astype(np.float16)
    return x if xp is np else xp.asarray(x)


# ---- float64 references (NumPy on the host; the same code runs in CuPy float64 on a GPU) ---------

_xp = V._xp
ref_layernorm, ref_gelu, ref_softmax = V.ref_layernorm, V.ref_gelu, V.ref_softmax


def _round16(a):
    return a.astype(_xp(a).float16).astype(_xp(a).float64)


def positions(grid_h, grid_w):
    """(row, col) of each token, [N, 2], in merge-window order (each 2x2 window's four patches consecutive)."""
    return V.window_positions(grid_h, grid_w)


def rope_cos_sin(grid_h, grid_w):
    """Qwen3-VL's 2-D vision rotary, float64 [N, 72] each: lab 05's angles (18 frequencies
    10000^(-2j/36) on the token's row, then 18 on its column) repeated for the two halves."""
    a = V.rope_angles(grid_h, grid_w, HEAD_DIM)
    a = np.concatenate([a, a], axis=1)
    return np.cos(a), np.sin(a)


def ref_rope(t, cos, sin):
    """rotate-half RoPE on [..., N, 72]: out = t*cos + (-t2, t1)*sin."""
    xp = _xp(t)
    half = HEAD_DIM // 2
    rot = xp.concatenate([-t[..., half:], t[..., :half]], axis=-1)
    return t * cos + rot * sin


def merge_index(grid_h, grid_w):
    """[N/4, 4]: the tokens merged into each output row. In merge-window order these are
    tokens 4m .. 4m+3, the 2x2 window m (top-left, top-right, bottom-left, bottom-right)."""
    validate(np.empty((grid_h * grid_w, 1)), grid_h, grid_w, hidden=1)
    return np.arange(grid_h * grid_w).reshape(-1, 4)


def ref_pos_interpolate(pos, grid_h, grid_w):
    """Bilinear (align-corners) interpolation of the learned 48 x 48 position table onto the grid,
    in token order, float64 [N, 1152], from lab 05's tables (vision.interp_tables)."""
    xp = _xp(pos)
    idx, wts = V.interp_tables(grid_h, grid_w, POS_GRID)
    idx, wts = xp.asarray(idx.astype(np.int64)), xp.asarray(wts)
    return (pos[idx] * wts[:, :, None]).sum(1)


def _f64(W, xp):
    return {k: xp.asarray(v).astype(xp.float64) for k, v in W.items()}


def reference_block(x, W, grid_h, grid_w, fp16_storage=False):
    """One ViT block in float64 (x: [N, 1152]; W: make_layer()), in NumPy or CuPy as x is.
    fp16_storage=True rounds every tensor the GPU stores in fp16 (the emulation behind the bound)."""
    validate(x, grid_h, grid_w)
    _check_weights(W, LAYER_SHAPES, "block")
    xp = _xp(x)
    r = _round16 if fp16_storage else (lambda a: a)
    W = _f64(W, xp)
    x = x.astype(xp.float64)
    n = x.shape[0]
    cos, sin = (xp.asarray(a) for a in rope_cos_sin(grid_h, grid_w))
    h = r(ref_layernorm(x, W["ln1_w"], W["ln1_b"]))
    qkv = r(r(h @ W["qkv_w"].T) + W["qkv_b"])
    q, k, v = qkv.reshape(n, 3, HEADS, HEAD_DIM).transpose(1, 2, 0, 3)          # 3 x [16, N, 72]
    q, k = r(ref_rope(q, cos, sin)), r(ref_rope(k, cos, sin))
    s = r(SCALE * (q @ k.transpose(0, 2, 1)))
    p = r(ref_softmax(s))
    o = r(p @ v)
    attn = o.transpose(1, 0, 2).reshape(n, HIDDEN)
    x1 = r(r(attn @ W["proj_w"].T) + W["proj_b"] + x)
    h2 = r(ref_layernorm(x1, W["ln2_w"], W["ln2_b"]))
    m = r(ref_gelu(r(h2 @ W["fc1_w"].T) + W["fc1_b"]))
    return r(r(m @ W["fc2_w"].T) + W["fc2_b"] + x1)


# Two drawings of the mergers. "report": seed 000's, a LayerNorm over 1152 before every 2x2 merge and the tanh
# GELU everywhere (what the GPU tower assembles). "qwen3-vl": transformers' Qwen3-VL vision model: the main merger
# normalises over 1152 before the shuffle, the DeepStack mergers over 4608 after it (use_postshuffle_norm=True of
# Qwen3VLVisionPatchMerger), every merger's GELU is the exact erf form (nn.GELU()); the blocks' MLP keeps tanh.
MERGER_MODELS = ("report", "qwen3-vl")


def _merger_form(model: str, j: int) -> tuple[bool, str]:
    """(postshuffle norm?, GELU form) of merger j (0: the main merger, 1..: DeepStack) in a model."""
    if model not in MERGER_MODELS:
        raise ValueError(f"model must be one of {MERGER_MODELS}, not {model!r}")
    return (model == "qwen3-vl" and j > 0), ("erf" if model == "qwen3-vl" else "tanh")


def reference_merger(x, M, grid_h, grid_w, fp16_storage=False, postshuffle=False, gelu="tanh"):
    """LN -> 2x2 spatial merge -> fc1 -> bias -> GELU -> fc2 -> bias, float64: [N, 1152] ->
    [N/4, 4096]; postshuffle: merge first, then LN over 4608; gelu: "tanh" or "erf"."""
    validate(x, grid_h, grid_w)
    _check_weights(M, merger_shapes(postshuffle), "merger")
    if gelu not in ("tanh", "erf"):
        raise ValueError(f"gelu must be 'tanh' or 'erf', not {gelu!r}")
    xp = _xp(x)
    r = _round16 if fp16_storage else (lambda a: a)
    M = _f64(M, xp)
    idx = xp.asarray(merge_index(grid_h, grid_w))
    x64 = x.astype(xp.float64)
    if postshuffle:
        g = r(ref_layernorm(x64[idx].reshape(-1, MERGE_IN), M["ln_w"], M["ln_b"]))
    else:
        g = r(ref_layernorm(x64, M["ln_w"], M["ln_b"]))[idx].reshape(-1, MERGE_IN)
    act = ref_gelu if gelu == "tanh" else V.ref_gelu_erf
    m = r(act(r(r(g @ M["fc1_w"].T) + M["fc1_b"])))
    return r(r(m @ M["fc2_w"].T) + M["fc2_b"])


def reference_patch(patches, P, grid_h, grid_w):
    """Patch embedding (one GEMM) + bias + interpolated position embedding, float64."""
    validate(patches, grid_h, grid_w, hidden=PATCH_DIM, name="patches")
    xp = _xp(patches)
    P = _f64(P, xp)
    return patches.astype(xp.float64) @ P["w"].T + P["b"] + ref_pos_interpolate(P["pos"], grid_h, grid_w)


def reference_tower(patches, weights, grid_h, grid_w, model="report", deepstack=DEEPSTACK):
    """The tower in float64: (main merger output, [DeepStack outputs]); model: MERGER_MODELS;
    deepstack: the blocks whose outputs feed a DeepStack merger."""
    x = reference_patch(patches, weights.patch, grid_h, grid_w)
    deep = []
    for i, L in enumerate(weights.layers):
        x = reference_block(x, L, grid_h, grid_w)
        if i in deepstack:
            j = 1 + len(deep)
            post, gelu = _merger_form(model, j)
            deep.append(reference_merger(x, weights.mergers[j], grid_h, grid_w, postshuffle=post, gelu=gelu))
    post, gelu = _merger_form(model, 0)
    return reference_merger(x, weights.mergers[0], grid_h, grid_w, postshuffle=post, gelu=gelu), deep


def rel_err(got, want) -> float:
    """Normwise relative error ||got - want||_F / ||want||_F, in float64."""
    xp = _xp(want)
    g = xp.asarray(got).astype(xp.float64)
    w = want.astype(xp.float64)
    return float(xp.linalg.norm(g - w) / xp.linalg.norm(w))


def error_bound(stages: int = STAGES) -> float:
    """First-order bound on the normwise relative error of a block stored in fp16 with fp32 accumulation: each of
    `stages` fp16 stores adds a relative error <= u = 2^-11; the fp32 sums add about sqrt(K) * 2^-24 (K <= 4304:
    ~4e-6, negligible); with LayerNorm-normalised inputs and unit-gain weights each stage carries its error to the
    output with a gain of about 1, so ||y - y64|| / ||y64|| <= stages * u. Two fp16 implementations differ by at
    most twice that."""
    return stages * U_FP16


def weights(layers=1, mergers=None, seed=0, xp=np, model="report"):
    """A tower's weights: SimpleNamespace(layers, mergers (default: 1 + the DeepStack blocks that
    exist), patch); model (MERGER_MODELS) sets the DeepStack mergers' norm width."""
    if mergers is None:
        mergers = 1 + sum(1 for i in DEEPSTACK if i < layers)
    return SimpleNamespace(layers=[make_layer(seed + i, xp) for i in range(layers)],
                           mergers=[make_merger(seed + j, xp, postshuffle=_merger_form(model, j)[0])
                                    for j in range(mergers)],
                           patch=make_patch(seed, xp))
