"""Lab 06, the tower on the GPU: the block, the merger and the tower as lists of launches over one
workspace (lab 05's kernels and cuBLAS), their CUDA graphs, and the torch eager block of the same math."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .. import vision as V
from ..core import bench
from ..core.cublas import bgemm, gemm
from ..core.device import need_gpu
from ..core.device import torch as _torch
from ..core.launch import require
from .reference import (BLOCK_PLAN, DEEPSTACK, EPS, HEAD_DIM, HEADS, HIDDEN, LAYER_SHAPES, LAYERS, MERGE_IN,
                        MERGE_OUT, MERGER_PLAN, MERGER_SHAPES, MLP, PATCH_DIM, PATCH_PLAN, QKV, SCALE,
                        _check_weights, _merger_form, make_input, make_layer, make_merger, merger_shapes,
                        rope_cos_sin, validate, weights)
from .reference import FAMILY  # noqa: F401  (core.fingerprint reads the kernels' family here)

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
def _gpu_weights(layers, seed, model="report", mergers=None):
    import cupy
    return weights(layers, mergers, seed=seed, xp=cupy, model=model)


class Tower(_Launched):
    """The vision tower: patch embed + position, `layers` blocks (DeepStack mergers after the blocks in
    `deepstack`: Qwen3-VL-8B's 8, 16, 24), the main merger; weights drawn on the GPU (27 layers: ~0.8 GB).
    model: the mergers' drawing (MERGER_MODELS; W, if given, from weights(..., model=...))."""

    def __init__(self, grid_h, grid_w, layers=LAYERS, W=None, patches=None, seed=0, model="report",
                 deepstack=DEEPSTACK):
        need_gpu("the vision tower")
        _merger_form(model, 0)                   # a bad model name: ValueError before any allocation
        import cupy
        validate(np.empty((grid_h * grid_w, PATCH_DIM)) if patches is None else patches, grid_h, grid_w,
                 hidden=PATCH_DIM, name="patches")
        need = 1 + sum(1 for i in deepstack if i < layers)       # the main merger and one per DeepStack block
        W = _gpu_weights(layers, seed, model, need) if W is None else W
        if len(W.mergers) < need or len(W.layers) != layers:
            raise ValueError(f"weights: {len(W.layers)} blocks and {len(W.mergers)} mergers; this tower needs "
                             f"{layers} blocks and {need} mergers (DeepStack after blocks {tuple(deepstack)})")
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
            if i in deepstack:
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

