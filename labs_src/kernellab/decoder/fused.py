"""Lab 08's fused step (issue 38: the token step's small kernels): Qwen3's per-head q/k RMSNorm, RoPE and the
KV-cache append in one launch (kernels/decoder.cu, decoder_07_qk_norm_rope), in place of step 02's head_norm
followed by lab 07's rope_append. The token step runs it by default; GpuOps(path, {"qk_rope": "separate"}) runs
the two launches it replaces (the Amdahl table's swap, measure.SWAPS), so its gain is measured alone."""
from __future__ import annotations

from ..attention import rope_args
from ..core.build import define
from ..core.launch import host_or_device_index, int32_size, launch, no_alias, require
from .config import FAMILY

SEPARATE, FUSED = "separate", "07_qk_norm_rope"


def qk_norm_rope(q, k, v, wq, wk, k_cache, v_cache, pos, q_out, cos, sin, scratch=None, eps: float = 1e-6):
    """q_out = RoPE(RMSNorm(q) * wq); k_cache[:, pos] = RoPE(RMSNorm(k) * wk); v_cache[:, pos] = v: one launch.
    q [hq, d], k and v [hkv, d], wq and wk [d], caches [hkv, capacity, d], fp16; cos, sin [>= capacity, d / 2]
    fp32; pos a Python int (checked) or an int32 device array of one element (read by the kernel: a CUDA graph
    replays every token; out of range writes nothing). The layouts lab 07's decode kernels take. scratch: unused
    (where the two separate launches keep the normalised heads)."""
    hq, hkv, d, cap, cos, sin = rope_args(q, k, v, k_cache, v_cache, q_out, cos, sin)
    require(wq, "q_norm weight", dtype="float16", shape=(d,))
    require(wk, "k_norm weight", dtype="float16", shape=(d,))
    pptr, phost = host_or_device_index(pos, cap, "pos", "capacity")
    launch(FAMILY, "decoder_07_qk_norm_rope", (hq + hkv,), (d // 2,),
           (q, k, v, wq, wk, cos, sin, q_out, k_cache, v_cache, pptr, phost, cap, hq, hkv, d, float(eps)))
    return q_out


def separate(q, k, v, wq, wk, k_cache, v_cache, pos, q_out, cos, sin, scratch=None, eps: float = 1e-6):
    """The two launches the fused step replaces, with its arguments: step 02's head_norm into `scratch` (the
    decoder's (qn, kn)), then lab 07's rope_append."""
    from ..attention import rope_append
    from .steps import head_norm
    qn, kn = head_norm(q, k, wq, wk, out=scratch)            # (its eps: Qwen3's 1e-6, as the fused step's)
    return rope_append(qn, kn, v, k_cache, v_cache, pos, q_out, cos, sin)


# ---- steps 08-10: the GEMVs that build their own input (kernels/decoder.cu, fused_rows) ------------------------

FG_WARPS = 8                   # warps per block of steps 08-10
DEFINES = define(FAMILY, FG_WARPS=FG_WARPS)    # -D: decoder.cu's #ifndef default agrees (tests/test_constants.py)
FG_KERNELS = {"norm": "decoder_08_norm_gemv", "logits": "decoder_08_norm_logits",
              "residual": "decoder_09_gemv_residual", "silu": "decoder_10_silu_gemv_residual"}
# step 12: the same GEMVs, launched as programmatic dependents (their weights stream before the wait for x)
PDL_KERNELS = {"norm": "decoder_12_pdl_norm_gemv", "logits": "decoder_12_pdl_norm_logits",
               "residual": "decoder_12_pdl_gemv_residual"}


def fused_rows_ok(K: int, M: int) -> bool:
    """Whether steps 08-10 run this weight well: a warp per row needs enough rows to fill the GPU (lab 04's
    step 27 rule, gemv.ROWS_MIN_WARPS_PER_SM warps per SM); a shorter matrix keeps the separate launches."""
    from ..core.device import info
    from ..gemv.steps import ROWS_MIN_WARPS_PER_SM
    return K >= ROWS_MIN_WARPS_PER_SM * info()["sms"] and M % 8 == 0


def _fused_gemv(kind, W, a, b, y, eps, names, pdl=False):
    """One launch of step 08/09/10: y = W . x (or y += W . x) with x built from (a, b) in the kernel's prologue;
    pdl: step 12's kernel, launched as a programmatic dependent of the kernel ahead (sm_90: core.pdl.supported())."""
    require(W, "W", dtype="float16", ndim=2, align=16)
    K, M = W.shape
    if M % 8:
        raise ValueError(f"W: steps 08-10 need a width that is a multiple of 8 (16-byte rows), got {M}; "
                         "use the separate launches (lab 04's GEMV after the producer)")
    int32_size(K * 8), int32_size(M)
    for arr, nm in ((a, names[0]), (b, names[1])):
        require(arr, nm, dtype="float16", shape=(M,), align=16)
    require(y, "out", dtype="float32" if kind == "logits" else "float16", shape=(K,))
    no_alias(y, (W, a, b))
    # lab 04's step 27 rule: two rows per warp on tall matrices; SiLU always (its exp then runs once per 2 rows)
    two = M < 4096 or K >= 16384 or kind == "silu"
    if not K:
        return y
    name = PDL_KERNELS[kind] if pdl else FG_KERNELS[kind]
    launch(FAMILY, name, (-(-K // (FG_WARPS * (1 + two))),), (FG_WARPS * 32,), (W, a, b, y, K, M, float(eps), int(two)),
           pdl=pdl)
    return y


def norm_gemv(W, h, w, out, eps: float = 1e-6, pdl: bool = False):
    """Step 08: out = W . (RMSNorm(h) * w), fp16: W [K, M], h and w [M], out [K] (pdl: step 12)."""
    return _fused_gemv("norm", W, h, w, out, eps, ("h", "norm weight"), pdl)


def norm_logits(W, h, w, out, eps: float = 1e-6, pdl: bool = False):
    """Step 08 for the logits: out = W . (RMSNorm(h) * w) in fp32 (lab 04's logits step's output)."""
    return _fused_gemv("logits", W, h, w, out, eps, ("h", "norm weight"), pdl)


def gemv_residual(W, x, h, pdl: bool = False):
    """Step 09: h += W . x in place (h [K] fp16, the residual stream; x [M]) (pdl: step 12)."""
    return _fused_gemv("residual", W, x, x, h, 0.0, ("x", "x"), pdl)


def silu_gemv_residual(W, gate, up, h):
    """Step 10: h += W . (SiLU(gate) * up) in place (the down projection with its producer and the residual)."""
    return _fused_gemv("silu", W, gate, up, h, 0.0, ("gate", "up"))


PREFETCH_THREADS, PREFETCH_SM_SHARE = 512, 4      # step 11: one 512-thread block per 4 SMs (the rest stay for attention)


def l2_prefetch(W):
    """Step 11: read W's bytes into L2 with an evict-last policy, computing nothing (launched on a second stream
    while attention runs, so the next GEMV finds its weights in L2)."""
    import numpy as np
    from ..core.device import info
    require(W, "W", align=16)
    n16 = W.nbytes // 16
    if n16:
        launch(FAMILY, "decoder_11_l2_prefetch", (max(1, info()["sms"] // PREFETCH_SM_SHARE),), (PREFETCH_THREADS,),
               (W, np.int64(n16)))
    return W
