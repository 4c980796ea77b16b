"""Softmax (lab 01): the shapes, the sweep, the inputs, the float64 reference and its tolerance."""
from __future__ import annotations

import numpy as np

# Seed-relevant shapes (rows, cols).
SHAPES = {
    "vision_attention_16x1024x1024": (16 * 1024, 1024),   # 16 heads x N x N scores, N = 1024
    "logits_151936": (1, 151936),                          # one Qwen vocabulary row
    "square_4096": (4096, 4096),
    "long_rows_1024x32768": (1024, 32768),
    "short_rows_32768x1024": (32768, 1024),
}
# Row length from 32 to 262144 at a fixed total of 2**25 elements (128 MiB of fp32 in).
SWEEP_TOTAL = 2 ** 25
SWEEP = [(SWEEP_TOTAL // c, c) for c in [2 ** k for k in range(5, 19)]]

# Awkward shapes x hostile values for the checks.
CHECK_SHAPES = [(1, 1), (3, 31), (1, 33), (3, 1023), (5, 4097), (1, 65537), (3, 1024), (2, 0), (0, 5), (5, 262144)]
CHECK_CASES = [(s, v) for s in CHECK_SHAPES for v in ("randn", "large", "hostile")]


def case_key(shape, dtype) -> str:
    return f"{shape[0]}x{shape[1]}:{dtype}"


def make_input(shape, dtype="float32", values="randn", seed=0):
    """Host (NumPy) input, deterministic.
    randn:   N(0, 3)
    large:   randn + 100 (every exponent >= 89 overflows exp in fp32 without max-subtraction)
    hostile: row 0 has one 1e4 (fp16: 65504); row 1 has -inf every 7th; row 2 is all -inf;
             row 3 holds a NaN; row 4 a +inf; in fp16 the extremes ±65504 and 6e-8 too."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3.0
    if values == "large":
        x = x + 100.0
    elif values == "hostile" and x.size:
        big = 65504.0 if dtype == "float16" else 1e4
        r, c = shape
        x[0, c // 2] = big
        if dtype == "float16" and c >= 3:
            x[0, 0], x[0, 1] = -65504.0, 6e-8
        if r > 1:
            x[1, ::7] = -np.inf
        if r > 2:
            x[2, :] = -np.inf
        if r > 3:
            x[3, c // 3] = np.nan
        if r > 4:
            x[4, c - 1] = np.inf
    return (x.astype(dtype),)


def reference(x):
    """Safe softmax in float64 (NaN / +inf rows give NaN, an all -inf row gives NaN), cast back."""
    xd = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if xd.size == 0:
            return np.empty_like(x)
        m = xd.max(axis=-1, keepdims=True)
        e = np.exp(xd - m)
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def tolerance(x, serial: bool = False):
    """The per-dtype tolerance, widened for long rows to 16x the typical error of a float32 sum of
    n terms, sqrt(n) * 2**-24 (a tree or warp reduction's error grows like a random walk; the worst
    case n * 2**-24 would let a broken reduction with 1e-3 errors pass). serial=True: one thread
    adds the n terms in order (step 01), whose error grows with n, not sqrt(n): the running sum
    dwarfs each term, so its rounding is biased (01_naive measured 1.3e-4 at n = 65537, and crossed the
    sqrt(n) bound at n = 262144 in the live suite); its bound is the textbook one for a serial sum, n * 2**-24."""
    from ..core.check import TOLERANCE
    r0, a0 = TOLERANCE[np.dtype(x.dtype)]
    n = x.shape[-1]
    return {"rtol": max(r0, (n if serial else 16 * np.sqrt(n)) * 2.0 ** -24), "atol": a0}


def reference_naive(x):
    """What the naive kernel computes: exp without the max, in float32. x >= 89 gives inf/inf."""
    x32 = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x32)
        return e / e.sum(axis=-1, keepdims=True)


def bytes_moved(x, *_):
    return 2 * x.nbytes   # read the input once, write the output once
