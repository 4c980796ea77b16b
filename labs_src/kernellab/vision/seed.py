"""The seed's layout kernels in the seed's own forms, where the course's families use another (issue 34,
item 5): the fused split + RoPE + transpose reading the seed's fp16 [N, D] cos/sin tables (SPLIT_ROPE_F16,
steps 34 -> 35; SPLIT_ROPE's 18 -> 19 read fp32 [N, D/2] tables), and transpose_token_head_kernel, the
transpose from [N, H, D] back to [H, N, D] that the report optimised and then deleted as unused
(TRANSPOSE_TOKEN_HEAD, steps 32 -> 33). Each: launchers, baselines, Family, public call."""
from __future__ import annotations

from ..core.launch import int32_size as _size_ok, out_like, require
from .layout import _qkv_out, _rope_torch, _sr_seed_step, _tr_cupy, _tr_half2, _tr_torch, _tr_wide
from .reference import (HEAD_DIM, HEADS, TOKENS, _cast, _sr16_input, _sr16_ref, _th_input,
                        ref_transpose_token_head)
from .steps import _best, _key, _op, _torch_baseline


# ---- Split + RoPE + transpose with the seed's fp16 [N, D] tables: qkv [N, 3 H D] -> q, k, v [H, N, D] ----

def _sr16_check(qkv, cos, sin, out):
    require(qkv, "qkv", dtype="float16", ndim=2)
    require(cos, "cos", dtype="float16", ndim=2)
    require(sin, "sin", dtype="float16", shape=cos.shape)
    N, D = cos.shape
    if N != qkv.shape[0]:
        raise ValueError(f"cos/sin: expected {qkv.shape[0]} rows (one per token of qkv), got {N}")
    if D == 0 or D % 2 or qkv.shape[1] % (3 * D):
        raise ValueError(f"qkv has {qkv.shape[1]} columns: expected 3 * heads * head_dim with head_dim = "
                         f"cos.shape[1] = {D} (even: the seed's tables are [N, head_dim])")
    return _qkv_out(qkv, out, N, qkv.shape[1] // (3 * D), D)


def _sr16_alloc(qkv, cos, sin):
    import cupy
    N, D = cos.shape
    return tuple(cupy.empty((qkv.shape[1] // (3 * D), N, D), cupy.float16) for _ in range(3))


sr16_scalar = _sr_seed_step("34_split_rope_scalar_f16tab", 64, None,
                            "Step 34: the seed's before with its fp16 [N, D] tables (step 18's kernel otherwise).",
                            check=_sr16_check, alloc=_sr16_alloc)
sr16_fma = _sr_seed_step("35_split_rope_fma_f16tab", 128, True,
                         "Step 35: the seed's after with its fp16 [N, D] tables (step 19's kernel otherwise).",
                         check=_sr16_check, alloc=_sr16_alloc)


@_torch_baseline
def _sr16_torch(torch, tq, tc, ts):
    """torch eager over the same fp16 [N, D] tables: split, rotate-half in float32, transpose to [H, N, D]."""
    return _rope_torch(torch, tq, tc, ts)


SPLIT_ROPE_F16 = _op(
    op="split_rope_f16tab", case_key=_key("split_rope_f16tab"), make_input=_sr16_input,
    reference=_cast(_sr16_ref),
    bytes_moved=lambda qkv, c, s, *_: 2 * qkv.nbytes + c.nbytes + s.nbytes,
    variants={"34_split_rope_scalar_f16tab": sr16_scalar, "35_split_rope_fma_f16tab": sr16_fma},
    default={"float16": "35_split_rope_fma_f16tab"},
    baselines={"torch eager (split, rope, transpose; fp16 tables)": _sr16_torch},
    shapes={"vit_64x64": (64, 64, HEADS, HEAD_DIM), "vit_128x128": (128, 128, HEADS, HEAD_DIM)},
    check_cases=[(s, v) for s in [(2, 2, HEADS, HEAD_DIM), (2, 6, HEADS, HEAD_DIM), (10, 14, HEADS, HEAD_DIM),
                                  (2, 2, 3, 8), (2, 4, 2, 12), (4, 2, 1, 4), (2, 18, 2, 72)]
                 for v in ("randn", "hostile")],
    about="lab 05: the seed's fused_split_rope_transpose_kernel pair over the seed's fp16 [N, D] cos/sin tables",
)


def split_rope_transpose_f16tab(qkv, cos, sin, out=None):
    """The seed's form of split_rope_transpose: qkv [N, 3 * H * D] fp16 and fp16 tables cos, sin [N, D]
    (rope_tables_f16) -> (q, k, v), each [H, N, D] fp16 (reference: _sr16_ref). out: an optional tuple."""
    return _best(SPLIT_ROPE_F16)(qkv, cos, sin, out=out)


# ---- Transpose [N, H, D] -> [H, N, D] (the seed's transpose_token_head_kernel) ----

def _th_check(x, out):
    require(x, "x", dtype="float16", ndim=3)
    N, H, D = x.shape
    _size_ok(x.size)
    return out_like(out, x, shape=(H, N, D)), H, N, D


def _th_alloc(x):
    import cupy
    return cupy.empty((x.shape[1], x.shape[0], x.shape[2]), cupy.float16)


th_half2 = _tr_half2("32_transpose_token_head_half2", "Step 32: the seed's before, one half2 per thread (one half "
                     "where D is odd or a base misaligned).", check=_th_check, alloc=_th_alloc)
th_vec8 = _tr_wide("33_transpose_token_head_vec8", "Step 33: the seed's after, 8 halves per thread where D % 8 == 0 "
                   "and the bases allow, else 2, else 1.", check=_th_check, alloc=_th_alloc)


_th_cupy, _th_torch = _tr_cupy, _tr_torch    # the same baselines: the view with the first two axes swapped


TRANSPOSE_TOKEN_HEAD = _op(
    op="transpose_token_head", case_key=_key("transpose_token_head"),
    limiters=(("33_transpose_token_head_vec8", (16384, 16, 72), r"^vision_33_transpose_token_head_vec8$"),),
    make_input=_th_input,
    reference=_cast(ref_transpose_token_head), bytes_moved=lambda x, *_: 2 * x.nbytes,
    variants={"32_transpose_token_head_half2": th_half2, "33_transpose_token_head_vec8": th_vec8},
    default={"float16": "33_transpose_token_head_vec8"},
    baselines={"cupy copyto (transposed view)": _th_cupy, "torch copy_ (transpose)": _th_torch},
    shapes={f"vit_{n}x16x72": (n, HEADS, HEAD_DIM) for n in TOKENS},
    check_cases=[(s, v) for s in [(1, 16, 72), (31, 16, 72), (100, 16, 72), (5, 3, 7), (9, 2, 6), (1, 1, 1),
                                  (33, 4, 16), (3, 0, 8), (0, 3, 8)]
                 for v in ("randn", "hostile")],
    about="lab 05: the seed's transpose_token_head_kernel ([N, H, D] -> [H, N, D]), deleted by the report as unused",
)


def transpose_token_head(x, out=None):
    """[N, H, D] fp16 (the rows of [N, H * D] split per head: x.reshape(N, H, D)) -> [H, N, D] fp16
    (ref_transpose_token_head): the inverse of transpose_head_token."""
    return _best(TRANSPOSE_TOKEN_HEAD)(x, out=out)

