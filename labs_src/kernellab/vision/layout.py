"""The attention layout steps: the fused split + 2-D vision RoPE + transpose (qkv [N, 3 H D] ->
q, k, v [H, N, D]) and the transpose back ([H, N, D] -> [N, H D]). Each: launchers, baselines,
Family, public call."""
from __future__ import annotations

import functools

import numpy as np

from ..core.launch import aligned, int32_size as _size_ok, launch, out_like, require, variant
from .reference import (
    FAMILY, HEAD_DIM, HEADS, SR2_TILE, SR2_U, SR_TILE, TOKENS, TR_TILE, _act, _cast, _grid_ok, _head_dim,
    _sr_input, _sr_ref, ref_transpose_head_token, rope_tables)
from .steps import FP16, _best, _key, _op, _torch_baseline


# ---- Fused split + 2-D vision RoPE + transpose: qkv [N, 3 H D] -> q, k, v [H, N, D] ----

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
    return _qkv_out(qkv, out, N, qkv.shape[1] // (3 * D), D)


def _qkv_out(qkv, out, N, H, D):
    """(q, k, v) of [H, N, D] fp16: out checked, or allocated where None; returns (out, N, H, D)."""
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


def _sr_seed_step(kernel, threads, vec, doc=None, check=_sr_check, alloc=_sr_alloc):
    """Steps 18-19 and their ablations (34-35 with seed.py's fp16-table check and alloc): one block of
    `threads` per (head, token). vec: None for step 18's kernel (no vec argument), True for step 19's
    16-byte V copy where D and alignment allow it, False for step 19's kernel copying V by halves."""
    def run(qkv, cos, sin, out=None):
        (q, k, v), N, H, D = check(qkv, cos, sin, out)
        _grid_y(N)
        if N:
            extra = () if vec is None else (int(vec and D % 8 == 0 and aligned(16, qkv, v)),)
            launch(FAMILY, f"vision_{kernel}", (H, N), (threads,), (qkv, cos, sin, q, k, v, N, H, D) + extra)
        return q, k, v
    run.__name__, run.__doc__ = kernel, doc
    return variant(dtypes=FP16, alloc_out=alloc)(run)


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


@_torch_baseline
def _sr_torch(torch, tq, tc, ts):
    """torch eager, HF's apply_rotary_pos_emb_vision style: split, rotate-half in float32,
    transpose to [H, N, D] (several kernels, temporaries)."""
    return _rope_torch(torch, tq, torch.cat([tc, tc], -1), torch.cat([ts, ts], -1))


def _rope_torch(torch, tq, c, s):
    """The torch eager call over qkv [N, 3 H D] and full-width tables c, s [N, D]: split, rotate-half
    in float32, transpose q, k, v to [H, N, D]."""
    N, D = c.shape
    H = tq.shape[1] // (3 * D)
    c2, s2 = c.float()[:, None, :], s.float()[:, None, :]

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
    op="split_rope", case_key=_key("split_rope"),
    limiters=(("27_split_rope_tile", (128, 128, 16, 72), r"^vision_27_split_rope_tile$"),),
    make_input=_sr_input,
    reference=_cast(_sr_ref),
    bytes_moved=lambda qkv, c, s, *_: 2 * qkv.nbytes + c.nbytes + s.nbytes,
    variants={"18_split_rope_scalar": sr_scalar, "18_ablate_block128": sr_scalar_128,
              "19_ablate_scalar_v": sr_fma_scalar_v, "19_split_rope_fma": sr_fma, "20_split_rope_vec": sr_vec,
              "27_split_rope_tile": sr_tile},
    default={"float16": "27_split_rope_tile"},
    baselines={"torch eager (split, rope, transpose)": _sr_torch},
    shapes={"vit_64x64": (64, 64, HEADS, HEAD_DIM), "vit_128x128": (128, 128, HEADS, HEAD_DIM)},
    check_cases=[(s, v) for s in [(2, 2, HEADS, HEAD_DIM), (2, 6, HEADS, HEAD_DIM), (10, 14, HEADS, HEAD_DIM),
                                  (32, 32, HEADS, HEAD_DIM), (2, 2, 3, 8), (2, 4, 2, 12), (4, 2, 1, 4), (2, 18, 2, 72)]
                 for v in ("randn", "hostile")],   # 'large': test_gpu_vision, with a tolerance for cancellation
)


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


# ---- Transpose [H, N, D] -> [N, H D] ----

def _tr_check(o, out):
    require(o, "o", dtype="float16", ndim=3)
    H, N, D = o.shape
    _size_ok(o.size)
    return out_like(out, o, shape=(N, H * D)), H, N, D


def _tr_alloc(o):
    import cupy
    return cupy.empty((o.shape[1], o.shape[0] * o.shape[2]), cupy.float16)


def _tr_half2(name, doc=None, check=_tr_check, alloc=_tr_alloc):
    """Steps 21, 31 and 32: one half2 per thread (one half where D is odd or a base misaligned)."""
    def run(o, out=None):
        out_, H, N, D = check(o, out)
        if o.size:
            vec = int(D % 2 == 0 and aligned(4, o, out_))
            items = H * N * (-(-D // 2))
            launch(FAMILY, f"vision_{name}", (-(-items // 256),), (256,), (o, out_, H, N, D, vec))
        return out_
    run.__name__, run.__doc__ = name, doc
    return variant(dtypes=FP16, alloc_out=alloc)(run)


def _tr_wide(name, doc, check=_tr_check, alloc=_tr_alloc):
    """Steps 22, 29 and 33: 8, 2 or 1 halves per load (as aligned), walked in output or input order."""
    def run(o, out=None):
        out_, H, N, D = check(o, out)
        if o.size:
            vec = 8 if D % 8 == 0 and aligned(16, o, out_) else 2 if D % 2 == 0 and aligned(4, o, out_) else 1
            items = H * N * (-(-D // vec))
            launch(FAMILY, f"vision_{name}", (-(-items // 256),), (256,), (o, out_, H, N, D, vec))
        return out_
    run.__name__, run.__doc__ = name, doc
    return variant(dtypes=FP16, alloc_out=alloc)(run)


tr_half2 = _tr_half2("21_transpose_half2")
tr_input_half2 = _tr_half2("31_transpose_input_half2",
                           "Step 31: the seed's before, one half2 per thread, walked in input order (as step 29).")
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
    """cupy.copyto of the view with the first two axes swapped ([H, N, D] -> [N, H, D], or back)."""
    import cupy
    out = cupy.empty((o.shape[1], o.shape[0], o.shape[2]), o.dtype)
    return lambda: cupy.copyto(out, o.transpose(1, 0, 2))


@_torch_baseline
def _tr_torch(torch, to):
    """torch copy_ of the view with the first two axes swapped, as _tr_cupy."""
    out = torch.empty(to.transpose(0, 1).shape, dtype=to.dtype, device=to.device)
    return lambda: out.copy_(to.transpose(0, 1))


TRANSPOSE = _op(
    op="transpose", case_key=_key("transpose"),
    make_input=lambda shape, dtype="float16", values="randn", seed=0: (_act(shape, values, np.random.default_rng(seed)),),
    reference=_cast(ref_transpose_head_token), bytes_moved=lambda o, *_: 2 * o.nbytes,
    # the seed's pair first (31 -> 29: the width, walked in input order), then the course's (21 -> 22: the width,
    # walked in output order; 29 -> 22 is the walk alone), then beyond the seed
    variants={"31_transpose_input_half2": tr_input_half2, "29_transpose_input_order": tr_input_order,
              "21_transpose_half2": tr_half2, "22_transpose_vec8": tr_vec8, "28_transpose_tile": tr_tile,
              "30_transpose_tile8": tr_tile8},
    default={"float16": "28_transpose_tile"},
    baselines={"cupy copyto (transposed view)": _tr_cupy, "torch copy_ (transpose)": _tr_torch},
    shapes={f"vit_16x{n}x72": (HEADS, n, HEAD_DIM) for n in TOKENS},
    check_cases=[(s, v) for s in [(16, 1, 72), (16, 31, 72), (16, 100, 72), (3, 5, 7), (2, 9, 6), (1, 1, 1),
                                  (4, 33, 16), (0, 3, 8)]
                 for v in ("randn", "hostile")],
)


def transpose_head_token(o, out=None):
    """[H, N, D] fp16 -> [N, H * D] fp16 (ref_transpose_head_token)."""
    return _best(TRANSPOSE)(o, out=out)
