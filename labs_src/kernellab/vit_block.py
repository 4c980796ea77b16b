"""Lab 06: Qwen3-VL's vision tower from lab 05's kernels and cuBLAS (seed 000's call graph, as
BLOCK_PLAN, MERGER_PLAN and PATCH_PLAN below; seed 002 for the ViT prefill claim): random weights
from a fixed seed, float64 references of the block, the merger and the tower (NumPy, or CuPy
float64), the block in torch eager, the block and tower on the GPU, CUDA graphs, a per-op
breakdown (GPU and host time apart), tokens/s, an Orin model on paper, and record() for make bench."""
from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .core import bench
from . import vision as V
from .core.family import Family, Target
from .core.launch import require
from .core.cublas import bgemm, gemm
from .core.device import ORIN_PEAK_GBPS, is_live, need_gpu
from .core.device import torch as _torch
from .core.results import NAN, Measured, devices, live_or_recorded, one_source, select
from .core.results import ratio as _ratio, ratio_band

NAME = "vit_block"
FAMILY = "vision"
HIDDEN, HEADS, HEAD_DIM, MLP, LAYERS = 1152, 16, 72, 4304, 27
QKV = 3 * HIDDEN
PATCH_DIM = 1536                 # 3 channels x 2 frames x 16 x 16
MERGE_IN, MERGE_OUT = 4 * HIDDEN, 4096
POS_GRID = 48                    # the learned 48 x 48 position table (2304 positions)
DEEPSTACK = (8, 16, 24)          # blocks whose outputs also feed a DeepStack merger
EPS = 1e-6
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


# ---- the block, merger and tower on the GPU ----------------------------------------------------

@dataclass
class Op:
    name: str
    kind: str          # "gemm" (cuBLAS) or "kernel" (the lab's)
    kernel: str        # the report's name for it
    fn: object         # zero-argument launch


def _f16(*shape):
    import cupy
    return cupy.empty(shape, cupy.float16)


class Workspace:
    """Every buffer of a forward, allocated once (never inside a timed region or a graph capture):
    two ping-pong hidden states, the block's intermediates, scores and probabilities, the merger's."""

    def __init__(self, grid_h, grid_w, merger=True):
        n = grid_h * grid_w
        self.grid = (grid_h, grid_w)
        self.n = n
        self.xa, self.xb, self.x1, self.h, self.t, self.attn = (_f16(n, HIDDEN) for _ in range(6))
        self.qkv, self.qkvb = _f16(n, QKV), _f16(n, QKV)
        self.q, self.k, self.v = (_f16(HEADS, n, HEAD_DIM) for _ in range(3))
        self.scores, self.probs = _f16(HEADS, n, n), _f16(HEADS, n, n)
        self.o = _f16(HEADS, n, HEAD_DIM)
        self.m1, self.m2 = _f16(n, MLP), _f16(n, MLP)
        if merger and n % 4 == 0:
            self.mh = _f16(n, HIDDEN)
            self.mg, self.mf, self.mb, self.ma = (_f16(n // 4, MERGE_IN) for _ in range(4))
            self.mt = _f16(n // 4, MERGE_OUT)
        self.pos = _f16(n, HIDDEN)


def _device_weights(W):
    import cupy
    return {k: cupy.asarray(v) for k, v in W.items()}


def block_ops(L, ws, x, y, attention=None):
    """The block as a list of Ops, reading x and writing y ([N, 1152] each), exactly in the
    report's order (BLOCK_PLAN). attention: a fused kernel attention(q, k, v, out=o) on [16, N, 72]
    (lab 07's flash step) in place of QK^T -> softmax -> P.V (the scores never reach memory)."""
    gh, gw = ws.grid
    ln, bar = V.layernorm, V.bias_add_residual
    fns = [
        lambda: ln(x, L["ln1_w"], L["ln1_b"], out=ws.h),
        lambda: gemm(ws.h, L["qkv_w"], ws.qkv),
        lambda: bar(ws.qkv, L["qkv_b"], out=ws.qkvb),
        lambda: V.split_rope_transpose(ws.qkvb, gh, gw, out=(ws.q, ws.k, ws.v)),
        lambda: bgemm(ws.q, ws.k, ws.scores, trans_b=True, alpha=SCALE),
        lambda: V.softmax(ws.scores, out=ws.probs),
        lambda: bgemm(ws.probs, ws.v, ws.o, trans_b=False),
        lambda: V.transpose_head_token(ws.o, out=ws.attn),
        lambda: gemm(ws.attn, L["proj_w"], ws.t),
        lambda: bar(ws.t, L["proj_b"], residual=x, out=ws.x1),
        lambda: ln(ws.x1, L["ln2_w"], L["ln2_b"], out=ws.h),
        lambda: gemm(ws.h, L["fc1_w"], ws.m1),
        lambda: V.bias_gelu(ws.m1, L["fc1_b"], out=ws.m2),
        lambda: gemm(ws.m2, L["fc2_w"], ws.t),
        lambda: bar(ws.t, L["fc2_b"], residual=ws.x1, out=y),
    ]
    ops = [Op(nm, kind, k, f) for (nm, kind, k), f in zip(BLOCK_PLAN, fns, strict=True)]
    if attention is not None:
        ops[4:7] = [Op("attention (fused)", "kernel", "lab 07's flash attention",
                       lambda: attention(ws.q, ws.k, ws.v, out=ws.o))]
    return ops


def merger_ops(M, ws, x, y, postshuffle=False, gelu="tanh"):
    """LN -> 2x2 merge -> fc1 -> bias -> GELU -> fc2 -> bias, [N, 1152] -> y [N/4, 4096]; postshuffle (merge, then
    LN over 4608) and gelu ("tanh" or "erf") as reference_merger takes them."""
    gh, gw = ws.grid
    bar = V.bias_add_residual
    act = {"tanh": V.gelu, "erf": V.gelu_erf}[gelu]
    if postshuffle:
        first = [lambda: V.spatial_merge(x, gh, gw, out=ws.mg),
                 lambda: V.layernorm(ws.mg, M["ln_w"], M["ln_b"], out=ws.mb)]
        plan, fc1_in = [MERGER_PLAN[1], MERGER_PLAN[0], *MERGER_PLAN[2:]], ws.mb
    else:
        first = [lambda: V.layernorm(x, M["ln_w"], M["ln_b"], out=ws.mh),
                 lambda: V.spatial_merge(ws.mh, gh, gw, out=ws.mg)]
        plan, fc1_in = MERGER_PLAN, ws.mg
    fns = first + [
        lambda: gemm(fc1_in, M["fc1_w"], ws.mf),
        lambda: bar(ws.mf, M["fc1_b"], out=ws.mb),
        lambda: act(ws.mb, out=ws.ma),
        lambda: gemm(ws.ma, M["fc2_w"], ws.mt),
        lambda: bar(ws.mt, M["fc2_b"], out=y),
    ]
    return [Op(nm, kind, k, f) for (nm, kind, k), f in zip(plan, fns, strict=True)]


def patch_ops(P, ws, patches, y):
    gh, gw = ws.grid
    fns = [
        lambda: gemm(patches, P["w"], ws.t),
        lambda: V.pos_embed_interpolate(P["pos"], gh, gw, out=ws.pos),
        lambda: V.bias_add_residual(ws.t, P["b"], residual=ws.pos, out=y),
    ]
    return [Op(nm, kind, k, f) for (nm, kind, k), f in zip(PATCH_PLAN, fns, strict=True)]


def run(ops):
    for o in ops:
        o.fn()


class _Launched:
    """A block, merger or tower with everything bound: obj() runs its ops eagerly, returns .output."""

    def __call__(self):
        run(self.ops)
        return self.output


class Block(_Launched):
    """One ViT block on the GPU at a grid: its weights, input and workspace bound once.
    Block(...)() runs it eagerly (15 launches); .output is the result."""

    def __init__(self, grid_h, grid_w, W=None, x=None, seed=0, attention=None):
        need_gpu("the ViT block")
        import cupy
        validate(x if x is not None else np.empty((grid_h * grid_w, HIDDEN)), grid_h, grid_w)
        if x is not None:
            require(x, "x", dtype="float16", ndim=2)
        W = make_layer(seed, cupy) if W is None else W
        _check_weights(W, LAYER_SHAPES, "block")
        self.W = _device_weights(W)
        self.grid = (grid_h, grid_w)
        self.ws = Workspace(grid_h, grid_w, merger=False)
        self.x = make_input(grid_h, grid_w, seed=seed, xp=cupy) if x is None else x
        self.output = _f16(grid_h * grid_w, HIDDEN)
        self.ops = block_ops(self.W, self.ws, self.x, self.output, attention)


class Merger(_Launched):
    def __init__(self, grid_h, grid_w, M=None, x=None, seed=0):
        need_gpu("the merger")
        import cupy
        validate(x if x is not None else np.empty((grid_h * grid_w, HIDDEN)), grid_h, grid_w)
        M = make_merger(seed, cupy) if M is None else M
        _check_weights(M, MERGER_SHAPES, "merger")
        self.M = _device_weights(M)
        self.ws = Workspace(grid_h, grid_w)
        self.x = make_input(grid_h, grid_w, seed=seed, xp=cupy) if x is None else require(x, "x", dtype="float16")
        self.output = _f16(grid_h * grid_w // 4, MERGE_OUT)
        self.ops = merger_ops(self.M, self.ws, self.x, self.output)


@functools.lru_cache(maxsize=1)
def _gpu_weights(layers, seed, model="report"):
    import cupy
    return weights(layers, seed=seed, xp=cupy, model=model)


class Tower(_Launched):
    """The vision tower: patch embed + position, `layers` blocks (DeepStack mergers after 8, 16, 24),
    the main merger; weights drawn on the GPU (27 layers: ~0.8 GB). model: the mergers' drawing
    (MERGER_MODELS; W, if given, from weights(..., model=...))."""

    def __init__(self, grid_h, grid_w, layers=LAYERS, W=None, patches=None, seed=0, model="report"):
        need_gpu("the vision tower")
        _merger_form(model, 0)                   # a bad model name: ValueError before any allocation
        import cupy
        validate(np.empty((grid_h * grid_w, PATCH_DIM)) if patches is None else patches, grid_h, grid_w,
                 hidden=PATCH_DIM, name="patches")
        W = _gpu_weights(layers, seed, model) if W is None else W
        for L in W.layers:
            _check_weights(L, LAYER_SHAPES, "block")
        for j, M in enumerate(W.mergers):        # a DeepStack merger of Qwen3-VL's drawing normalises 4608
            _check_weights(M, merger_shapes(_merger_form(model, j)[0]), "merger")
        self.W = SimpleNamespace(layers=[_device_weights(L) for L in W.layers],
                                 mergers=[_device_weights(M) for M in W.mergers], patch=_device_weights(W.patch))
        self.grid = (grid_h, grid_w)
        n = grid_h * grid_w
        self.ws = ws = Workspace(grid_h, grid_w)
        self.patches = (make_input(grid_h, grid_w, seed=seed, xp=cupy, width=PATCH_DIM) if patches is None
                        else require(patches, "patches", dtype="float16"))
        self.output = _f16(n // 4, MERGE_OUT)
        self.deep = []
        ops = patch_ops(self.W.patch, ws, self.patches, ws.xa)
        cur, nxt = ws.xa, ws.xb
        for i, L in enumerate(self.W.layers):
            ops += block_ops(L, ws, cur, nxt)
            cur, nxt = nxt, cur
            if i in DEEPSTACK:
                self.deep.append(_f16(n // 4, MERGE_OUT))
                post, act = _merger_form(model, len(self.deep))
                ops += merger_ops(self.W.mergers[len(self.deep)], ws, cur, self.deep[-1], post, act)
        ops += merger_ops(self.W.mergers[0], ws, cur, self.output, *_merger_form(model, 0))
        self.ops = ops


# ---- CUDA graphs ------------------------------------------------------------------------------------

def graph(ops):
    """A CUDA graph of a list of Ops (bench.graph; every buffer is in the Workspace: no allocation)."""
    return bench.graph(lambda: run(ops))


# ---- torch eager block of the same math ---------------------------------------------------------

def torch_block(W, x, grid_h, grid_w, sdpa=False):
    """A zero-argument torch eager block of the same math on the same CuPy weights and input (DLPack,
    no copy), or None without torch. sdpa=True: F.scaled_dot_product_attention for QK^T, softmax, .V."""
    torch = _torch()
    if torch is None:
        return None
    import cupy
    import torch.nn.functional as F
    T = {k: torch.from_dlpack(v) for k, v in W.items()}
    xt = torch.from_dlpack(x)
    n = x.shape[0]
    cos, sin = (torch.from_dlpack(cupy.asarray(a, cupy.float32)) for a in rope_cos_sin(grid_h, grid_w))
    half = HEAD_DIM // 2

    def rope(t):                                     # HF's apply_rotary_pos_emb_vision: in fp32
        tf = t.float()
        return (tf * cos + torch.cat([-tf[..., half:], tf[..., :half]], -1) * sin).to(t.dtype)

    def block():
        h = F.layer_norm(xt, (HIDDEN,), T["ln1_w"], T["ln1_b"], EPS)
        q, k, v = F.linear(h, T["qkv_w"], T["qkv_b"]).view(n, 3, HEADS, HEAD_DIM).permute(1, 2, 0, 3)
        q, k = rope(q), rope(k)
        if sdpa:
            o = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0))[0]
        else:
            p = torch.softmax(torch.matmul(q, k.transpose(1, 2)) * SCALE, dim=-1)
            o = torch.matmul(p, v)
        x1 = xt + F.linear(o.transpose(0, 1).reshape(n, HIDDEN), T["proj_w"], T["proj_b"])
        m = F.gelu(F.linear(F.layer_norm(x1, (HIDDEN,), T["ln2_w"], T["ln2_b"], EPS), T["fc1_w"], T["fc1_b"]),
                   approximate="tanh")
        return x1 + F.linear(m, T["fc2_w"], T["fc2_b"])
    return block


# ---- measurements (live) or recorded rows (compile-only) ------------------------------------------

COLUMNS = ["lab", "section", "case", "N", "name", "kind", "median_us", "p10_us", "p90_us", "reps", "host_us",
           "value", "unit", "device", "date", "source"]
GRIDS = {64: (8, 8), 256: (16, 16), 1024: (32, 32), 4096: (64, 64)}


def grid_for(n):
    """A square patch grid for N tokens (N = 64, 256, 1024, 4096, ...)."""
    if n in GRIDS:
        return GRIDS[n]
    s = int(round(math.sqrt(n)))
    if s * s != n:
        raise ValueError(f"N = {n}: give a grid (grid_h, grid_w) with grid_h x grid_w = N")
    return s, s


def _frame(rows):
    """Rows of one section as a frame with every column of the recorded file."""
    import pandas as pd
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df:
            df[c] = np.nan
    df["lab"] = NAME
    return df[[c for c in COLUMNS if c not in ("device", "date", "source")]]


def _row(section, n, name, kind, t=None, **kw):
    return {"section": section, "case": f"N={n}:float16", "N": n, "name": name, "kind": kind, **(t or {}), **kw}


def _live_or_recorded(section, what, measure):
    return live_or_recorded(NAME, what, lambda: _frame(measure()), section=section)


def accuracy(ns=(1024, 4096), seed=0):
    """Normwise relative error against a float64 reference (CuPy float64 on the GPU, the same
    code as the NumPy reference) of our block and of the torch eager block, with the bound."""
    def measure():
        import cupy
        rows = []
        for n in ns:
            gh, gw = grid_for(n)
            b = Block(gh, gw, seed=seed)
            want = reference_block(b.x, b.W, gh, gw)
            rows.append(_row("accuracy", n, "block (lab kernels + cuBLAS)", "variant",
                             value=rel_err(b(), want), unit="rel err vs float64"))
            for nm, sd in (("torch eager block", False), ("torch eager block (SDPA)", True)):
                tb = torch_block(b.W, b.x, gh, gw, sdpa=sd)
                if tb is not None:
                    rows.append(_row("accuracy", n, nm, "baseline", value=rel_err(cupy.asarray(tb()), want),
                                     unit="rel err vs float64"))
            rows.append(_row("accuracy", n, "bound", "bound", value=error_bound(), unit="rel err vs float64"))
            del b, want
        return rows
    return _live_or_recorded("accuracy", "the block's error against float64 at N = " + ", ".join(map(str, ns)), measure)


def block_times(ns=(256, 1024, 4096), seed=0):
    """GPU time (L2 flushed, launches hidden) of our block, the torch eager block, the torch
    block with SDPA, and the attention alone (ours vs F.scaled_dot_product_attention)."""
    def measure():
        rows = []
        for n in ns:
            gh, gw = grid_for(n)
            b = Block(gh, gw, seed=seed)
            b()
            rows.append(_row("block", n, "block (lab kernels + cuBLAS)", "variant", bench.time_fn(lambda: run(b.ops)).row()))  # noqa: F821
            for nm, sd in (("torch eager block", False), ("torch eager block (SDPA)", True)):
                tb = torch_block(b.W, b.x, gh, gw, sdpa=sd)
                if tb is not None:
                    rows.append(_row("block", n, nm, "baseline", bench.time_fn(tb).row()))
            att = b.ops[4:7]                 # QK^T -> softmax -> P.V, as BLOCK_PLAN orders them
            rows.append(_row("block", n, "attention: cuBLAS + softmax kernel", "variant", bench.time_fn(lambda: run(att)).row()))
            torch = _torch()
            if torch is not None:
                import torch.nn.functional as F
                q, k, v = (torch.from_dlpack(t).unsqueeze(0) for t in (b.ws.q, b.ws.k, b.ws.v))
                rows.append(_row("block", n, "torch F.scaled_dot_product_attention", "baseline",
                                 bench.time_fn(lambda: F.scaled_dot_product_attention(q, k, v)).row()))
            del b
        return rows
    return _live_or_recorded("block", "the block's GPU time against torch at N = " + ", ".join(map(str, ns)), measure)


def _block_and_tower(n, layers, seed):
    """('block', a Block) then ('tower (L layers)', a Tower) at N = n, each built when reached."""
    yield "block", Block(*grid_for(n), seed=seed)
    yield f"tower ({layers} layers)", Tower(*grid_for(n), layers, seed=seed)


def breakdown(ns=(256, 1024, 4096), layers=LAYERS, seed=0, reps=5):
    """Per-op GPU µs and host µs of one block and of the whole tower at each N, and the wall time
    of an eager launch (launch gaps included)."""
    def measure():
        rows = []
        for n in ns:
            for what, obj in _block_and_tower(n, layers, seed):
                g, h = bench.split([o.fn for o in obj.ops], reps=reps)
                for o, gu, hu in zip(obj.ops, g, h):
                    rows.append(_row("breakdown", n, o.name, o.kind, {"median_us": gu, "host_us": hu},
                                     value=gu, unit=what))
                w = bench.wall(obj, reps=max(5, reps))
                rows.append(_row("breakdown", n, "eager wall", "wall", w, value=w["median_us"], unit=what))
                g = graph(obj.ops)           # the one GPU time of the sequence: replayed by one launch, so
                t = bench.time_fn(g, reps=max(5, reps)).row()     # the spacer surely hides it
                rows.append(_row("breakdown", n, "GPU time (launches hidden)", "gpu", t, value=t["median_us"], unit=what))
                del obj, g
        return rows
    return _live_or_recorded("breakdown", "the per-op GPU and host time of a block and the tower", measure)


def graphs(ns=(256, 1024, 4096), layers=LAYERS, seed=0, reps=10):
    """Wall time from idle (launches included) of the eager block / tower and of its CUDA-graph
    replay, and the GPU time of each (spacer: launches hidden)."""
    def measure():
        rows = []
        for n in ns:
            for what, obj in _block_and_tower(n, layers, seed):
                g = graph(obj.ops)
                for nm, fn in (("eager", obj), ("graph replay", g)):
                    w = bench.wall(fn, reps=reps)
                    rows.append(_row("graph", n, f"{what}: {nm}", "variant", w, value=w["median_us"], unit="wall us"))
                    t = bench.time_fn(fn, reps=reps).row()
                    rows.append(_row("graph", n, f"{what}: {nm} (GPU time)", "variant", t,
                                     value=t["median_us"], unit="gpu us"))
                del g, obj
        return rows
    return _live_or_recorded("graph", "eager vs CUDA-graph launches of a block and the tower", measure)


def _check(what, x, grid_h, grid_w, run, want, bound, done):
    """Run `what` on x (NumPy fp16) on the GPU against its float64 reference want(): one line with the
    normwise relative error and `bound`, CheckError beyond it; compile-only, what a GPU would do."""
    from .core.check import CheckError
    validate(x, grid_h, grid_w)
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU the {what} runs on these {x.shape[0]} tokens and its output is "
              f"compared with the float64 reference (bound {bound:.1e}).")
        return None
    import cupy
    e = rel_err(run(cupy.asarray(x))().get(), want())
    if not e <= bound:
        raise CheckError(f"{what} at grid {grid_h}x{grid_w}: normwise relative error {e:.2e} > bound {bound:.2e}")
    print(f"{what}, grid {grid_h}x{grid_w} (N = {x.shape[0]}): OK  normwise rel err {e:.1e} <= bound {bound:.1e} {done}")
    return e


def check_block(x, W, grid_h, grid_w, want=None):
    """Our block (its BLOCK_PLAN launches) on x against the float64 reference (want, if given)."""
    return _check("block", x, grid_h, grid_w, lambda xd: Block(grid_h, grid_w, W=W, x=xd),
                  lambda: reference_block(x, W, grid_h, grid_w) if want is None else want, error_bound(),
                  "(lab 05's kernels + cuBLAS vs float64)")


def check_merger(x, M, grid_h, grid_w):
    """The merger against its float64 reference (bound: its 7 fp16 stages)."""
    return _check("merger", x, grid_h, grid_w, lambda xd: Merger(grid_h, grid_w, M=M, x=xd),
                  lambda: reference_merger(x, M, grid_h, grid_w), error_bound(len(MERGER_PLAN)),
                  f"([N, {HIDDEN}] -> [N/4, {MERGE_OUT}])")


def pick(df, n=None, **eq):
    """The rows of one device and source (results.one_source), optionally at N."""
    return one_source(select(df, **({"N": n} if n is not None else {}), **eq))


def ratio(df, fast, slow, n):
    """time(slow) / time(fast) at N (results.ratio)."""
    return _ratio(df, fast, slow, f"N={n}:float16")


def check_graph_replay(grid_h=8, grid_w=8, seed=0) -> float:
    """Replaying the captured block gives the eager block's output (relative difference)."""
    import cupy
    b = Block(grid_h, grid_w, seed=seed)
    want = b().copy()
    b.output.fill(0)
    g = graph(b.ops)
    b.output.fill(0)
    g()
    cupy.cuda.Device().synchronize()
    return rel_err(b.output, want.astype(cupy.float64))


# ---- the tower's work: FLOPs and bytes, and Orin on paper -----------------------------------------

def work(n, layers=LAYERS, mergers=4):
    """FLOPs and DRAM bytes (weights once, activations written and read once, fp16) of the tower at
    N tokens: the model behind the Orin estimate."""
    gemm_block = 2 * n * HIDDEN * (QKV + HIDDEN + 2 * MLP)
    attn = 2 * 2 * HEADS * n * n * HEAD_DIM
    w_block = 2 * (QKV * HIDDEN + HIDDEN * HIDDEN + 2 * MLP * HIDDEN)
    act_block = 2 * n * (HIDDEN * 10 + QKV * 3 + MLP * 4) + 2 * HEADS * n * n * 4   # incl. scores r/w
    m = n // 4
    gemm_merge = 2 * m * MERGE_IN * (MERGE_IN + MERGE_OUT)
    w_merge = 2 * MERGE_IN * (MERGE_IN + MERGE_OUT)
    act_merge = 2 * (n * HIDDEN * 3 + m * MERGE_IN * 8 + m * MERGE_OUT * 3)
    patch = 2 * n * PATCH_DIM * HIDDEN
    flops = layers * (gemm_block + attn) + mergers * gemm_merge + patch
    nbytes = layers * (w_block + act_block) + mergers * (w_merge + act_merge) + 2 * (HIDDEN * PATCH_DIM + n * (PATCH_DIM + 3 * HIDDEN))  # noqa: E501
    return {"flops": flops, "bytes": nbytes}


# AGX Orin 64 GB (datasheet): GPU 170 sparse INT8 TOPS = 85 dense; fp16 dense tensor = half of INT8.
ORIN_FP16_TFLOPS = 42.5
ORIN_SMS = 16


def orin_model(ns=(1024, 4096), board="agx"):
    """Orin on paper (a MODEL, not a measurement): time >= max(FLOPs / fp16 tensor peak,
    bytes / LPDDR5 peak), tokens/s <= N / time."""
    import pandas as pd
    rows = []
    for n in ns:
        w = work(n)
        t_c = w["flops"] / (ORIN_FP16_TFLOPS * 1e12)
        t_m = w["bytes"] / (ORIN_PEAK_GBPS[board] * 1e9)
        rows.append({"N": n, "GFLOP": w["flops"] / 1e9, "GB moved": w["bytes"] / 1e9,
                     "compute-bound ms": 1e3 * t_c, "memory-bound ms": 1e3 * t_m,
                     "bound": "compute" if t_c > t_m else "memory",
                     "model tokens/s (upper bound)": n / max(t_c, t_m),
                     "assumes": f"Orin {board.upper()}: {ORIN_SMS} SMs, {ORIN_FP16_TFLOPS} fp16 TFLOPS, "
                                f"{ORIN_PEAK_GBPS[board]} GB/s"})
    return pd.DataFrame(rows)


def tokens_per_s(gt):
    """Tokens/s of the tower from graph_table(gr, bd): N / wall time of one forward, eager and replay."""
    import pandas as pd
    d = gt[gt["what"].str.startswith("tower")] if gt is not None and len(gt) else pd.DataFrame(columns=["what", "N"])
    return pd.DataFrame([{"N": int(r["N"]), "launch": nm, "ms per forward": r[c] / 1e3, "tokens/s": r["N"] / (r[c] * 1e-6),
                          "merged tokens/s": r["N"] / 4 / (r[c] * 1e-6), "device": r["device"], "source": r["source"]}
                         for _, r in d.iterrows() for nm, c in (("eager", "eager wall us"), ("graph replay", "graph wall us"))])


def _band(g, **eq):             # (median, p10, p90, host µs) of the one row of g matching eq, or None
    for k, v in eq.items():
        g = g[g[k] == v]
    return tuple(float(g[c].iloc[0]) for c in ("median_us", "p10_us", "p90_us", "host_us")) if len(g) else None


def shares(bd):
    """From ONE breakdown run, per (N, what): the GPU time (graph replay behind a spacer) split into cuBLAS GEMMs
    and lab kernels by the per-op events' shares (scaled to it: the events also catch host gaps), the launch gaps
    (eager wall - GPU time, never clamped), the eager wall, the host µs to issue it; `disagree`: GPU band above the wall's."""
    import pandas as pd
    if bd is None or bd.empty:
        return pd.DataFrame(columns=["N", "what", "gemm_us", "kernel_us", "gpu_us", "gap_us", "wall_us", "host_us", "device"])
    rows = []
    for (n, what, dev, src), g in bd.groupby(["N", "unit", "device", "source"], sort=False):
        gem, ker = (g[g["kind"] == k]["median_us"].sum() for k in ("gemm", "kernel"))
        w, t, ev = _band(g, kind="wall"), _band(g, kind="gpu"), gem + ker
        gpu = t[0] if t else ev
        f = gpu / ev if ev > gpu > 0 else 1.0
        rows.append({"N": int(n), "what": what, "gemm_us": gem * f, "kernel_us": ker * f, "gpu_us": gpu, "events_us": ev,
                     "gap_us": w[0] - gpu, "wall_us": w[0], "host_us": w[3], "disagree": bool(t and t[1] > w[2]),
                     "device": dev, "source": src, "date": g["date"].iloc[0]})
    return pd.DataFrame(rows)


def plot_breakdown(bd, name="06_vit_breakdown"):
    """Stacked bars per (what, N): GEMMs, lab kernels and launch gaps as % of the eager wall (they sum to it), the
    times written on each bar; where the GPU time reads above the wall, the gap bar is 0 and the note says so."""
    from .core import plot
    s = shares(bd)
    s = s.assign(gap_bar=s["gap_us"].clip(lower=0)) if len(s) else s
    return plot.stacked_shares(
        s, {"gemm_us": ("cuBLAS GEMMs (GPU time)", "#3a78b5"), "kernel_us": ("lab kernels (GPU time)", "#e3873a"),
            "gap_bar": ("launch gaps (eager wall - GPU time)", "#bbbbbb")},
        [f"{r.what}, N={r.N}" for r in s.itertuples()],
        [f"eager wall {r.wall_us / 1e3:.2f} ms, GPU {r.gpu_us / 1e3:.2f} ms, host {r.host_us / 1e3:.2f} ms"
         + (" (GPU above wall: timings disagree, gap drawn as 0)" if r.gap_us < 0 else "") for r in s.itertuples()],
        "% of the eager launch's wall time (GPU time + launch gaps)", "Where a ViT block's and the tower's time goes", name)


def graph_table(gr, bd=None):
    """Per device and (what, N), ONE reading of each quantity: eager wall from idle, host µs to issue it and GPU time
    (graph replay behind a spacer) from the breakdown run bd, replay wall from the graph run, speed-up with its
    p10-p90 band; then the graph run's second readings and why they differ where they lie outside the bands."""
    import pandas as pd
    rows = []
    for d in (p for p in devices(gr) if p is not None and len(p)):
        dev, src = d["device"].iloc[0], d["source"].iloc[0]
        b = bd[(bd["device"] == dev) & (bd["source"] == src)] if bd is not None and len(bd) else d.iloc[:0]
        for n in sorted(set(d["N"])):
            for what in dict.fromkeys(nm.split(": ")[0] for nm in d["name"]):
                e2, g, ev, g2 = (_band(d, N=n, name=f"{what}: {k}") for k in
                                 ("eager", "graph replay", "eager (GPU time)", "graph replay (GPU time)"))
                e, gpu = _band(b, N=n, unit=what, kind="wall") or e2, _band(b, N=n, unit=what, kind="gpu") or g2
                if not (e and g):
                    continue
                apart, why = lambda a, c: a[1] > c[2] or c[1] > a[2], []   # p10-p90 bands that do not overlap
                if e2 and e2 is not e and apart(e, e2):
                    why.append(f"the graph run's eager wall {e2[0]:.0f} µs lies outside this one's band: its host issued the "
                               f"launches in {e2[3]:.0f} µs, against {e[3]:.0f} (a wall from idle follows the host's pace)")
                if g2 and g2 is not gpu and apart(gpu, g2):
                    wide = (g2[2] - g2[1]) / max(gpu[2] - gpu[1], 1e-9)
                    why.append(f"the graph run's replay GPU time {g2[0]:.0f} µs is {100 * (g2[0] / gpu[0] - 1):+.1f}% off, outside both "  # noqa: E501
                               "bands: the same method on another run" + (f" (its band {wide:.0f}× as wide)" if wide >= 3 else ""))  # noqa: E501
                if ev and e2 and ev[2] >= e2[3] > gpu[0]:
                    why.append(f"the eager launches timed behind a spacer read {ev[0]:.0f} µs, about the host's {e2[3]:.0f} µs "
                               f"to issue them: the spacer did not hide them, so that reading is host time, not GPU time")
                elif ev and ev[1] > gpu[2]:
                    why.append(f"the eager launches timed behind a spacer read {ev[0]:.0f} µs: GPU time + the gaps between eager kernels")  # noqa: E501
                rows.append({"what": what, "N": int(n), "eager wall us": e[0], "host us to issue": e[3], "GPU us (replay)": gpu[0],  # noqa: E501
                             "graph wall us": g[0], "graph speedup (wall)": e[0] / g[0], "speedup p10": e[1] / g[2],
                             "speedup p90": e[2] / g[1], "launch-bound?": "yes" if e[0] > 1.2 * gpu[0] else "no",
                             "eager wall us (graph run)": e2 and e2[0], "eager behind spacer us (graph run)": ev and ev[0],
                             "replay GPU us (graph run)": g2 and g2[0], "why they differ": "; ".join(why) or "-",
                             "device": dev, "source": src, "date": d["date"].iloc[0]})
    return pd.DataFrame(rows)


REPORT_PATCHES = 500_000 // (16 * 16)     # the reports' image: --max-pixel 500000, 16 x 16 patches


def _graph_speedup(df, what="block", n=256):
    gt = graph_table(df[df["section"] == "graph"], df[df["section"] == "breakdown"]) if len(df) else df
    sel = gt[(gt["what"] == what) & (gt["N"] == n)] if len(gt) else gt
    return Measured(*(float(sel[c].iloc[0]) for c in ("graph speedup (wall)", "speedup p10", "speedup p90"))) if len(sel) else NAN


TARGETS = (
    Target("our block >= 1.0x a torch eager block of the same math, N=4096",
           lambda df: ratio_band(df, "block (lab kernels + cuBLAS)", "torch eager block", "N=4096:float16"), 1.0),
    Target("our block >= 1.0x the torch block with SDPA, N=4096",
           lambda df: ratio_band(df, "block (lab kernels + cuBLAS)", "torch eager block (SDPA)", "N=4096:float16"), 1.0),
    Target("CUDA-graph block >= 1.3x the eagerly launched block (wall time), N=256", _graph_speedup, 1.3),
)


# ---- make bench -------------------------------------------------------------------------------------

RECORD_NS = (256, 1024, 4096)


def record():
    """Everything lab 06 shows, measured once (< ~1.5 min on an H200), for vit_block.csv."""
    import pandas as pd
    parts = [accuracy(), block_times(RECORD_NS), breakdown(RECORD_NS, reps=3), graphs(RECORD_NS, reps=5)]
    return pd.concat(parts, ignore_index=True)


# The block is not a ladder: a Family that records itself.
VIT_BLOCK = Family(name=NAME, kernels="vision", record=record, shapes={f"N={n}": (n, HIDDEN) for n in RECORD_NS},
                   targets=TARGETS, about="lab 06: Qwen3-VL's vision tower from lab 05's kernels and cuBLAS")
FAMILIES = [VIT_BLOCK]
