"""RMSNorm family (seed 003): three data paths, before and after, plus a one-pass step.

A "dtype" here names a data path, as the seed's kernels do:
  float32    fp32 x, fp32 weight -> fp32 y      (row_rmsnorm_f32, Qwen2.5-7B)
  f32_fp16w  fp32 x, fp16 weight -> fp32 y      (row_rmsnorm_f32_fp16w, the AWQ models)
  float16    fp16 x, fp16 weight -> fp16 y      (row_rmsnorm_pure_fp16, the fp16 models)
x is (hidden,) for one decode row (grid 1) or (rows, hidden) for prefill (grid = rows).
"""
from __future__ import annotations

import numpy as np

from .core.build import define, kernel
from .core.bench import MEMCPY, memcpy, roof_values
from .core.device import info, torch_baseline
from .core.family import FLOOR_TARGET, Family, Target
from .core.launch import aligned, launch, out_like, require, variant
from .core.results import frac_band, pick, ratio_band, sweep_best, sweep_table, sweep_worst_frac, worst_ratio

NAME = "rmsnorm"
FAMILY = "rmsnorm"
EPS = 1e-6                 # Qwen's rms_norm_eps
SEED_BLOCK = 128           # steps 01-07 launch exactly this many threads (RMS_BLOCK in rmsnorm.cu)
PER_THREAD = 4             # 16-byte loads each thread of step 08/09 keeps in registers (RMS_PER_THREAD)
DEFINES = define(FAMILY, RMS_BLOCK=SEED_BLOCK, RMS_PER_THREAD=PER_THREAD)   # -D: the .cu's #ifndef defaults agree
PATHS = {"float32": ("float32", "float32"), "f32_fp16w": ("float32", "float16"),
         "float16": ("float16", "float16")}

SHAPES = {
    "decode_1x4096": (1, 4096),
    "batch4_4096": (4, 4096), "batch16_4096": (16, 4096), "batch64_4096": (64, 4096),
    "prefill_512x4096": (512, 4096),
    "prefill_8192x4096": (8192, 4096),          # 64 MiB of fp16: the bandwidth target
    "prefill_512x3584": (512, 3584), "width1152_4096x1152": (4096, 1152),   # a narrow row; the ViT itself uses LayerNorm (lab 05)
}
# Rows of the seed's per-batch table, at hidden 4096.
BATCHES = [1, 4, 16, 64, 512, 8192]
# Every hidden size at prefill (8192 rows): one step must hold the roof from 1024 to 16384.
HIDDEN_SWEEP = [((8192, c), p) for p in ("float16", "float32") for c in (1024, 2048, 4096, 8192, 16384)]
RECORD_CASES = list(dict.fromkeys([((b, 4096), p) for p in PATHS for b in BATCHES] + HIDDEN_SWEEP +
                                  [(SHAPES["prefill_512x3584"], "float16"), (SHAPES["width1152_4096x1152"], "float16")]))

# Awkward hidden sizes (1, 31, not multiples of 8, the models' sizes, 4097) x batches.
CHECK_HIDDEN = [1, 31, 1023, 1152, 3584, 4097]
CHECK_CASES = [((b, c), v) for c in CHECK_HIDDEN for b in (1, 3) for v in ("randn", "large", "hostile")] \
    + [((64, 1152), "randn"), ((512, 4097), "hostile"), ((0, 8), "randn"), ((2, 0), "randn")]


def case_key(shape, dtype) -> str:
    return f"{shape[0]}x{shape[1]}:{dtype}"


def make_input(shape, dtype="float32", values="randn", seed=0):
    """(x, weight) on the host, deterministic; dtype is a data path (PATHS). 'large' overflows x^2 in fp16
    (not in fp32); 'hostile' puts the extremes in row 0, zeros in row 1, a NaN, +inf, -inf in rows 2-4."""
    xdt, wdt = PATHS[dtype]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    w = 1.0 + 0.1 * rng.standard_normal(shape[-1])
    if values == "large":
        x *= 1e4 if xdt == "float16" else 1e15
        x = np.clip(x, -65504, 65504) if xdt == "float16" else x
    elif values == "hostile" and x.size:
        x2 = x.reshape(-1, shape[-1])
        r, c = x2.shape
        big = 65504.0 if xdt == "float16" else 1e15
        x2[0, c // 2] = big
        if c >= 3:
            x2[0, 0], x2[0, 1] = -big, 6e-8
        x2[1:2] = 0.0
        for row, val in ((2, np.nan), (3, np.inf), (4, -np.inf)):
            if r > row:
                x2[row, c // 3] = val
    return x.astype(xdt), w.astype(wdt)


def reference(x, w, eps=EPS):
    """RMSNorm in float64, cast to x's dtype: x / sqrt(mean(x^2) + eps) * w."""
    xd = np.asarray(x, np.float64)
    if xd.size == 0:
        return np.empty_like(x)
    with np.errstate(invalid="ignore", over="ignore"):
        ms = np.mean(xd * xd, axis=-1, keepdims=True)
        return (xd / np.sqrt(ms + eps) * np.asarray(w, np.float64)).astype(x.dtype)


def bytes_moved(x, w, *_):
    return 2 * x.nbytes + w.nbytes     # x read once, y written once, the weight read once


# ---- launchers ----------------------------------------------------------------------------------

def _validate(x, w, path, *more):
    """Validate x (1-D or 2-D), the weight (hidden,) and more inputs shaped like x; returns (rows, hidden)."""
    xdt, wdt = PATHS[path]
    require(x, "x", dtype=xdt, ndim=(1, 2))
    C = x.shape[-1]
    require(w, "weight", dtype=wdt, ndim=1)
    if w.shape[0] != C:
        raise ValueError(f"weight: expected length {C} (the hidden size of x), got {w.shape[0]}")
    for i, m in enumerate(more):
        require(m, "residual" if i == 0 else "input", dtype=xdt, shape=x.shape)
    return (x.size // C if C else 0), C


def _vec_ok(width_bytes, *arrays):
    """Rows of arrays[0] start on width_bytes boundaries, and so does every base."""
    return int((arrays[0].shape[-1] * arrays[0].itemsize) % width_bytes == 0 and aligned(width_bytes, *arrays))


def _seed_step(name, path, width_bytes):
    """A seed-shaped kernel (steps 01-07): one 128-thread block per row."""
    def run(x, w, out=None):
        R, C = _validate(x, w, path)
        out_ = out_like(out, x)
        if R and C:
            launch(FAMILY, f"rmsnorm_{name}", (R,), (SEED_BLOCK,),
                   (x, w, out_, R, C, EPS, _vec_ok(width_bytes, x, w, out_)))
        return out_
    run.__name__ = name
    return run


def onepass_threads(name, C, itemsize, R):
    """Step 08/09's block: PER_THREAD 16-byte loads a thread cover the row (4096 fp16 -> 128); with fewer rows
    than SMs (decode), one load a thread (shorter per-thread chains); capped by the compiled kernel."""
    per = 16 // itemsize
    need = -(-C // per)
    if R >= info()["sms"]:
        need = -(-need // PER_THREAD)
    cap = min(1024, kernel(FAMILY, name).max_threads_per_block)
    return int(min(cap, max(32, -(-need // 32) * 32)))


def _onepass(x, w, out, path):
    R, C = _validate(x, w, path)
    out_ = out_like(out, x)
    if R and C:
        name = "rmsnorm_08_f32_onepass" if path == "float32" else "rmsnorm_08_fp16_onepass"
        launch(FAMILY, name, (R,), (onepass_threads(name, C, x.itemsize, R),),
               (x, w, out_, R, C, EPS, _vec_ok(16, x, w, out_)))
    return out_


f32_cub = variant()(_seed_step("01_f32_cub", "float32", 16))
f32_shfl = variant()(_seed_step("02_f32_shfl", "float32", 16))
f32_fp16w_cub = variant(dtypes=("f32_fp16w",))(_seed_step("03_f32_fp16w_cub", "f32_fp16w", 16))
f32_fp16w_uint2 = variant(dtypes=("f32_fp16w",))(_seed_step("04_f32_fp16w_uint2", "f32_fp16w", 16))
fp16_half2_cub = variant(dtypes=("float16",))(_seed_step("05_fp16_half2_cub", "float16", 4))
fp16_uint4 = variant(dtypes=("float16",))(_seed_step("06_fp16_uint4", "float16", 16))
fp16_restrict_no_ldg = variant(dtypes=("float16",))(_seed_step("07_fp16_restrict_no_ldg", "float16", 16))
fp16_uint4_no_ldg = variant(dtypes=("float16",))(_seed_step("07_fp16_uint4_no_ldg", "float16", 16))


def _path_of(x) -> str:
    """The data path of steps 08/09, from x."""
    return str(require(x, "x", dtype=("float32", "float16")).dtype)


@variant(dtypes=("float32", "float16"))
def onepass(x, w, out=None):
    return _onepass(x, w, out, _path_of(x))


VARIANTS = {
    "01_f32_cub": f32_cub,
    "02_f32_shfl": f32_shfl,
    "03_f32_fp16w_cub": f32_fp16w_cub,
    "04_f32_fp16w_uint2": f32_fp16w_uint2,
    "05_fp16_half2_cub": fp16_half2_cub,
    "06_fp16_uint4": fp16_uint4,
    "07_fp16_restrict_no_ldg": fp16_restrict_no_ldg,
    "07_fp16_uint4_no_ldg": fp16_uint4_no_ldg,
    "08_onepass": onepass,
}
BEST = {"float32": "08_onepass", "f32_fp16w": "04_f32_fp16w_uint2", "float16": "08_onepass"}


# ---- bytes in flight: why a single row takes the time it does ------------------------------------
# Per step: the width of its x loads (bytes) and how many one thread keeps in flight (a stride of
# blockDim.x, unknown to the compiler, gives 1; the compile-time RMS_BLOCK stride with `#pragma unroll 4`
# gives 4; step 08 issues all at once). tests/test_compile.py checks each width against the PTX.
LOADS = {"01_f32_cub": (16, 1), "02_f32_shfl": (16, 4), "03_f32_fp16w_cub": (16, 1),
         "04_f32_fp16w_uint2": (16, 4), "05_fp16_half2_cub": (4, 1), "06_fp16_uint4": (16, 4),
         "07_fp16_restrict_no_ldg": (16, 4), "07_fp16_uint4_no_ldg": (16, 4),
         "08_onepass": (16, PER_THREAD)}


def round_trips(step, C, itemsize, R=1, sms=None) -> dict:
    """The latency model of one row: ceil(loads per thread / loads in flight) DRAM round trips in the first pass."""
    width, unroll = LOADS[step]
    loads = -(-C * itemsize // width)
    if step == "08_onepass":                # the launcher's geometry (onepass_threads), without a GPU
        need = -(-C * itemsize // 16)
        if sms is not None and R >= sms:
            need = -(-need // PER_THREAD)
        threads = int(min(1024, max(32, -(-need // 32) * 32)))
    else:
        threads = SEED_BLOCK
    per_thread = -(-loads // threads)
    inflight = min(unroll, per_thread)
    return {"load bytes": width, "threads per row": threads, "loads per thread": per_thread,
            "loads in flight per thread": inflight, "bytes in flight per row": threads * inflight * width,
            "round trips (first pass)": -(-per_thread // inflight)}


# ---- ablations: each bundled pair of the seed, one change at a time ------------------------------
# Each ablation kernel is the "after" step with ONE change undone (same launcher, inputs and run).
# ABLATION_PAIRS: per data path, (before, after, [(the change, the step with it, the step without it)]).
_FOUR = [   # step 02's four changes, bundled again in 04 and 06: (the change, its ablation's suffix, what that is)
    ("the warp-shuffle reduction", "cub", "with cub::BlockReduce in place of warp shuffles"),
    ("the compile-time stride + unroll", "runtime_stride", "with stride blockDim.x and no unrolling"),
    ("`__ldg`", "no_ldg", "without __ldg (__restrict__ kept)"),
    ("`__restrict__`", "plain", "without __ldg and without __restrict__")]   # undone on top of no_ldg


def _bundle(before, after, width=None, named=None):
    """One data path's ABLATION_PAIRS entry and ABLATION_STEPS rows (width: the change, its ablation, what it is)."""
    s, names = f"step {after[:2]}", {k: f"{after[:2]}_ablate_{k}" for _, k, _ in _FOUR} | (named or {})
    undo = [width[:2]] if width else []
    changes = [(c, after, a) for c, a in undo] + [(c, names["no_ldg"] if k == "plain" else after, names[k])
                                                   for c, k, _ in _FOUR]
    n = {4: "four", 5: "five"}[len(changes)]
    steps = {before: f"step {before[:2]} (before: all {n} changes undone)", after: f"{s} (after: all {n} changes)",
             **({width[1]: f"{s} {width[2]}"} if width else {}), **{names[k]: f"{s} {what}" for _, k, what in _FOUR}}
    return (before, after, changes), steps


_PATHS = {
    "float32": _bundle("01_f32_cub", "02_f32_shfl"),
    "f32_fp16w": _bundle("03_f32_fp16w_cub", "04_f32_fp16w_uint2", width=(
        "the 64-bit `uint2` weight load", "04_ablate_scalar_w",
        "with the weight as four 16-bit loads in place of one uint2")),
    "float16": _bundle("05_fp16_half2_cub", "06_fp16_uint4", width=(
        "the 16-byte `uint4` access", "06_ablate_half2",
        "with half2 (4-byte) loads and stores in place of uint4 (16-byte)"),
        named={"no_ldg": "07_fp16_restrict_no_ldg", "plain": "07_fp16_uint4_no_ldg"}),
}
ABLATION_PAIRS = {path: pair for path, (pair, _) in _PATHS.items()}
ABLATION_STEPS = {k: v for _, steps in _PATHS.values() for k, v in steps.items()}   # name -> what it is
_PAIR_PATH = {k[:2]: p for p, (before, after, _) in ABLATION_PAIRS.items() for k in (before, after)}


def _ablation_variant(name):
    """A step of the ladder, or an ablation kernel through its step's launcher (06_ablate_half2: 4-byte rows)."""
    if name in VARIANTS:
        return VARIANTS[name]
    path = _PAIR_PATH[name[:2]]
    return variant(dtypes=(path,))(_seed_step(name, path, 4 if name == "06_ablate_half2" else 16))


def unroll_pragma_changes(step, arch="sm_90") -> bool:
    """Whether the `#pragma unroll 4` of a step changes its PTX (against -DRMS_NO_UNROLL_PRAGMA)."""
    from .core import build
    return build.define_changes_ptx(FAMILY, step, "RMS_NO_UNROLL_PRAGMA", arch)


ABLATION = Family(
    name="rmsnorm_ablation", kernels=FAMILY, case_key=case_key, make_input=make_input,
    reference=reference, bytes_moved=bytes_moved,
    variants={k: _ablation_variant(k) for k in ABLATION_STEPS},
    default={}, baselines={},
    shapes={k: SHAPES[k] for k in ("decode_1x4096", "batch64_4096", "prefill_8192x4096")},
    check_cases=[c for c in CHECK_CASES if c[0][-1] in (1, 31, 1152, 4097, 8, 0)],
    # each pair at the seed's decode row, a batch of 64 and prefill; fp16 also at 512 rows (claim rmsnorm-031)
    record_cases=[((r, 4096), p) for p, rows in (("float32", (1, 64, 8192)), ("f32_fp16w", (1, 64, 8192)),
                                                  ("float16", (1, 64, 512, 8192))) for r in rows],
)


# ---- baselines ------------------------------------------------------------------------------------

def _composite(x, w):
    import cupy

    def f():
        xf = x.astype(cupy.float32)
        inv = 1.0 / cupy.sqrt((xf * xf).mean(axis=-1, keepdims=True) + EPS)
        return (xf * inv * w.astype(cupy.float32)).astype(x.dtype)
    return f


@torch_baseline
def _torch(torch, t, tw):
    tw = tw.to(t.dtype)        # torch wants one dtype; converted outside the timing
    return lambda: torch.nn.functional.rms_norm(t, (t.shape[-1],), weight=tw, eps=EPS)


BASELINES = {"cupy composite": _composite, "torch rms_norm": _torch, MEMCPY: memcpy}


def memcpy_counts_its_own_bytes(df):
    """A results frame whose memcpy floor counts only x and y, not the weight the kernels also read."""
    df = df.copy()
    if df.empty or "name" not in df:
        return df
    mc = df["name"] == MEMCPY
    if mc.any():
        w = df.loc[mc, "cols"] * df.loc[mc, "dtype"].map(lambda p: np.dtype(PATHS[p][1]).itemsize)
        scale = (df.loc[mc, "bytes"] - w) / df.loc[mc, "bytes"]
        df.loc[mc, "bytes"] = df.loc[mc, "bytes"] - w
        for col in ("gbps", "frac_copy", "frac_read"):
            if col in df:
                df.loc[mc, col] = df.loc[mc, col] * scale
    return df


# ---- the fused residual add + RMSNorm (step 09): its own signature, so its own family ----------

def _fused_input(shape, dtype="float16", values="randn", seed=0):
    """(x, residual, weight): x as make_input, the residual ~ N(0, 1)."""
    x, w = make_input(shape, dtype, values, seed)
    res = np.random.default_rng(seed + 1).standard_normal(shape).astype(x.dtype)
    return x, res, w


def _fused_reference(x, res, w, eps=EPS):
    """(h, y): h = x + res rounded to x's dtype (what the add kernel stores), y = RMSNorm(h)."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = (np.asarray(x, np.float64) + res).astype(x.dtype)
    return h, reference(h, w, eps)


def _pair(out, x):
    """The (h, y) outputs: validated when given, else allocated."""
    h, y = (None, None) if out is None else out
    return out_like(h, x, "out[0] (h)"), out_like(y, x, "out[1] (y)")


@variant(dtypes=("float32", "float16"), alloc_out=lambda x, *_: _pair(None, x))
def separate(x, res, w, out=None):
    """Two launches, the best of each lab: add (lab 03) then one-pass RMSNorm (step 08)."""
    from . import add
    path = _path_of(x)
    _validate(x, w, path, res)
    h, y = _pair(out, x)
    add.ADD.variants[add.ADD.default[path]](x, res, out=h)
    return h, onepass(h, w, out=y)


@variant(dtypes=("float32", "float16"), alloc_out=lambda x, *_: _pair(None, x))
def fused(x, res, w, out=None):
    """One launch: h = x + res and y = RMSNorm(h) * w from the same registers."""
    path = _path_of(x)
    R, C = _validate(x, w, path, res)
    h, y = _pair(out, x)
    if R and C:
        name = f"rmsnorm_09_fused_add_{'f32' if path == 'float32' else 'fp16'}"
        launch(FAMILY, name, (R,), (onepass_threads(name, C, x.itemsize, R),),
               (x, res, w, h, y, R, C, EPS, _vec_ok(16, x, res, w, h, y)))
    return h, y


@torch_baseline
def _torch_separate(torch, t, r, tw):
    th = torch.empty_like(t)

    def f():
        torch.add(t, r, out=th)
        return th, torch.nn.functional.rms_norm(th, (t.shape[-1],), weight=tw, eps=EPS)
    return f


def _fused_bytes(x, res, w, *_):
    return 4 * x.nbytes + w.nbytes     # read x and res, write h and y, the weight once


FUSED = Family(
    name="add_rmsnorm", kernels=FAMILY, case_key=case_key, make_input=_fused_input,
    reference=_fused_reference, bytes_moved=_fused_bytes,
    variants={"01_separate": separate, "02_fused": fused},
    default={"float32": "02_fused", "float16": "02_fused"},
    baselines={"torch add + rms_norm": _torch_separate},
    shapes={k: SHAPES[k] for k in ("decode_1x4096", "batch64_4096", "prefill_512x4096", "prefill_8192x4096")},
    check_cases=[c for c in CHECK_CASES if c[0][-1] in (1, 31, 1152, 4097, 8, 0)],
    record_cases=[(SHAPES[k], dt) for dt in ("float16", "float32")
                  for k in ("decode_1x4096", "batch64_4096", "prefill_512x4096", "prefill_8192x4096")],
)
HIDDEN_KEYS = [case_key(s, p) for s, p in HIDDEN_SWEEP]


def worst_hidden_of_floor(df):
    """The worst time(memcpy floor) / time(fastest step) over HIDDEN_SWEEP, with its band (results.ratio_band):
    the fastest step's fraction of a copy of the same bytes, where it is furthest from it."""
    return worst_ratio(df, sweep_best(df, HIDDEN_KEYS), MEMCPY)


def hidden_table(df):
    """Per hidden size of HIDDEN_SWEEP: the fastest step against the copy roof, torch and the memcpy floor."""
    return sweep_table(df, HIDDEN_KEYS, "torch rms_norm", MEMCPY)


def launch_us(df) -> float:
    """The empty-launch cost of the device df's rows come from (live, or its record)."""
    return roof_values(df).get("launch_us", float("nan"))


def _targets():
    c1, c512, c8k = (case_key((r, 4096), "float16") for r in (1, 512, 8192))
    vs_torch = lambda c: lambda df: ratio_band(df, "08_onepass", "torch rms_norm", c)     # noqa: E731
    return (Target("fastest step, worst fraction of the copy roof at 8192 rows, hidden 1024..16384",
                   lambda df: sweep_worst_frac(df, HIDDEN_KEYS), 0.90, unit="",
                   floor=lambda df: sweep_worst_frac(df, HIDDEN_KEYS, "baseline", [MEMCPY])),
            Target("fastest step, worst fraction of its memcpy floor at 8192 rows, hidden 1024..16384",
                   worst_hidden_of_floor, FLOOR_TARGET),
            Target("fp16 8192 x 4096: step 08, fraction of the copy roof", lambda df: frac_band(df, "08_onepass", c8k)),
            Target("decode 1 x 4096: step 08 vs torch F.rms_norm", vs_torch(c1)),
            Target("prefill 512 x 4096: step 08 vs torch F.rms_norm", vs_torch(c512)),
            Target("decode 1 x 4096: step 08's time in empty launches",
                   lambda df: pick(df, "08_onepass", "median_us", case=c1) / launch_us(df)))


RMSNORM = Family(
    name=NAME, kernels=FAMILY, variants=VARIANTS, reference=reference, make_input=make_input,
    bytes_moved=bytes_moved, check_cases=CHECK_CASES, baselines=BASELINES, shapes=SHAPES, default=BEST,
    case_key=case_key, record_cases=RECORD_CASES, targets=_targets(),
    about="lab 02: RMSNorm, the report's kernels before/after, one pass, fused add")
FAMILIES = [RMSNORM, FUSED, ABLATION]
