"""The steps at the tower's two ends: the patch embedding (patches [N, 1536] -> [N, 1152]), the
learned position grid resampled in window order, the 2 x 2 spatial merge, and placing the image
rows into the text embedding. Each op: launchers, baselines, Family, public call."""
from __future__ import annotations

import functools

import numpy as np

from ..core.device import torch as _torch
from ..core.launch import aligned, in_range, int32_size as _size_ok, launch, out_like, require, variant
from .reference import (
    FAMILY, HIDDEN, PATCH_DIM, POS_SIDE, SM_U, TOKENS, _act, _cast, _f64, _grid_ok, _pe_input, _pi_input, _pi_ref,
    _rp_input, interp_tables, ref_patch_embed, ref_replace_image_tokens)
from .steps import FP16, _best, _key, _op, _resident, _tt


# ---- Patch embedding: patches [N, K] @ weight [O, K]^T + bias [O] ----

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


def patch_embed(patches, weight, bias, out=None):
    """patches [N, 1536] @ weight[1152, 1536]^T + bias [1152] -> [N, 1152] fp16 (the Conv3d with
    kernel = stride = 2 x 16 x 16 over 3 channels, weight flattened (channel, frame, y, x)),
    fp32 accumulation (ref_patch_embed). The seed's kernel: for speed, cuBLAS (see the lab)."""
    return _best(PATCH_EMBED)(patches, weight, bias, out=out)


# ---- Position embedding: bilinear resampling of the learned 48 x 48 grid, in window order ----

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


def _pi_cupy(table, idx, wts):
    """CuPy composite: gather 4 rows per token, weight, sum (allocates temporaries)."""
    return lambda: (table[idx].astype("float32") * wts[:, :, None]).sum(axis=1).astype("float16")


POS_INTERP = _op(
    op="pos_interp", case_key=_key("pos_interp"),
    limiters=(("15_pos_interp_fma", (128, 128, 48, 1152), r"^vision_15_pos_interp_fma$"),),
    make_input=_pi_input,
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


# ---- Spatial merge: [N, C] -> [N / 4, 4 C] ----

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
              "26_ablate_resident_grid": sm_stream_resident, "26_spatial_merge_stream": sm_stream},
    default={"float16": "26_spatial_merge_stream"},
    baselines={"cupy copy (reshape)": _sm_cupy, "torch copy_ (view)": _sm_torch},
    shapes={f"vit_{n}x1152": (n, HIDDEN) for n in TOKENS},
    check_cases=[(s, v) for s in [(4, 1), (4, 31), (8, 1152), (64, 1152), (12, 4097), (0, 8)]
                 for v in ("randn", "hostile")],
)


def spatial_merge(x, grid_h, grid_w, out=None):
    """The 2 x 2 merge [N, C] -> [N / 4, 4 C] (ref_spatial_merge): merged row m = tokens 4m .. 4m+3.
    N must equal grid_h * grid_w, both even."""
    gh, gw = _grid_ok(grid_h, grid_w)
    require(x, "x", dtype="float16", ndim=2)
    if x.shape[0] != gh * gw:
        raise ValueError(f"x has {x.shape[0]} tokens; expected grid_h * grid_w = {gh} * {gw} = {gh * gw}")
    return _best(SPATIAL_MERGE)(x, out=out)


# ---- Replace the image placeholder rows of the text embedding, in place ----

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


def replace_image_tokens(text_emb, image_feats, positions):
    """In place: text_emb[positions[i], :] = image_feats[i, :]; text_emb [rows, C], image_feats
    [n_img, C] fp16, positions int32/int64 [n_img] each in [0, rows) (checked on the host: one
    small device->host copy). Returns text_emb (ref_replace_image_tokens)."""
    rows, _ = _rp_check(text_emb, image_feats, positions)
    in_range(positions, rows, "positions (text_emb's rows)")
    return rp_rows(text_emb, image_feats, positions)
