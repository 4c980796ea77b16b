"""Softmax family: the ladder of seed 001 (naive -> safe -> warp shuffle -> online -> vectorised)."""
from __future__ import annotations

import functools

import numpy as np

from .core.bench import memcpy
from .core.device import facts as facts_of
from .core.device import torch as torch_module
from .core.family import Family, Target
from .core.launch import Variant, launch, variant
from .core.launch import aligned, out_like, require

NAME = "softmax"
FAMILY = "softmax"
ROW_BLOCK = 256   # steps 02-04 are compiled for this block size (ROW_BLOCK in softmax.cu)
VEC_PER_THREAD = 8   # float4 per thread that step 05 keeps in registers (VEC_PER_THREAD in softmax.cu)
H8_PER_THREAD = 4    # 8-half loads per thread that steps 06/07 keep (H8_PER_THREAD in softmax.cu)

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


def tolerance(x):
    """The per-dtype tolerance, widened for long rows to 16x the typical error of a float32 sum of
    n terms, sqrt(n) * 2**-24 (the error of a serial sum grows like a random walk: 01_naive measured
    1.3e-4 at n = 65537, under this 2.4e-4; the worst case n * 2**-24 would let a broken reduction
    with 1e-3 errors pass)."""
    from .core.check import TOLERANCE
    r0, a0 = TOLERANCE[np.dtype(x.dtype)]
    return {"rtol": max(r0, 16 * np.sqrt(x.shape[-1]) * 2.0 ** -24), "atol": a0}


def reference_naive(x):
    """What the naive kernel computes: exp without the max, in float32. x >= 89 gives inf/inf."""
    x32 = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x32)
        return e / e.sum(axis=-1, keepdims=True)


def bytes_moved(x, *_):
    return 2 * x.nbytes   # read the input once, write the output once


# ---- launchers ----------------------------------------------------------------------------------

def _prep(x, out, dtype="float32"):
    require(x, "x", dtype=dtype, ndim=2)
    out = out_like(out, x)
    return out, x.shape[0], x.shape[1]


def _vec_ok(x, out, width):
    """16-byte loads need every row start aligned: C a multiple of the vector width."""
    return int(x.shape[1] % width == 0 and aligned(16, x, out))


def _run(name, x, out, block, *extra, rows_per_block=1):
    out_, R, C = _prep(x, out, x.dtype if name.endswith("fp16_vec8") else "float32")
    if R and C:
        launch(FAMILY, name, ((R + rows_per_block - 1) // rows_per_block,), (block,),
               (x, out_, R, C, *extra))
    return out_


@variant(overflow_safe=False)
def naive(x, out=None):
    return _run("softmax_01_naive", x, out, 256)


@variant()
def safe_smem(x, out=None):
    return _run("softmax_02_safe_smem", x, out, ROW_BLOCK)


@variant()
def safe_interleaved(x, out=None):
    return _run("softmax_02_safe_interleaved", x, out, ROW_BLOCK)


@variant()
def warp_shuffle(x, out=None):
    return _run("softmax_03_warp_shuffle", x, out, ROW_BLOCK)


@variant()
def warp_per_row(x, out=None):
    return _run("softmax_03_warp_per_row", x, out, 128, rows_per_block=4)


@variant()
def online(x, out=None):
    return _run("softmax_04_online", x, out, ROW_BLOCK)


def _threads(name, C, per_thread_elems):
    """Enough threads for the row to fit in registers (rounded to warps), from 32 up to what
    the compiled kernel can launch with (its registers decide: 64 x 1024 fills an SM)."""
    from .core.build import kernel
    cap = min(1024, kernel(FAMILY, name).max_threads_per_block)
    need = -(-C // per_thread_elems)
    return int(min(cap, max(32, -(-need // 32) * 32)))


def _geometry(name, C, width, per_thread):
    """(threads per row, rows per block) of a register-cached kernel: a warp per row (8 rows per
    block) for short rows, else one block per row with enough threads to hold the row."""
    t = _threads(name, C, width * per_thread)
    return t, (8 if t == 32 else 1)


def _row_groups(name, x, out, dtype, width, per_thread, vec_ok=None, threads=None):
    """Launch a register-cached kernel with _geometry's block (or `threads` per row, one row per
    block). vec_ok=0 forces the scalar loads (the ablation's "no 16-byte loads" row)."""
    out_, R, C = _prep(x, out, dtype)
    if R and C:
        t, rows = (threads, 1) if threads else _geometry(name, C, width, per_thread)
        ok = _vec_ok(x, out_, width) if vec_ok is None else vec_ok
        launch(FAMILY, name, (-(-R // rows),), (t, rows), (x, out_, R, C, ok))
    return out_


@variant()
def online_vec4(x, out=None):
    return _row_groups("softmax_05_online_vec4", x, out, "float32", 4, VEC_PER_THREAD)


@variant(dtypes=("float16",))
def fp16_vec8(x, out=None):
    return _row_groups("softmax_06_fp16_vec8", x, out, "float16", 8, H8_PER_THREAD)


@functools.lru_cache(maxsize=None)
def resident_blocks(name, threads) -> int:
    """How many blocks of `threads` threads of kernel `name` fit on the whole GPU at once
    (the occupancy API x SMs): the grid of a kernel that walks rows with a stride."""
    import cupy
    from .core.build import kernel
    from .core.device import info
    fn = kernel(FAMILY, name)
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, 0)
    return max(1, per_sm) * info()["sms"]


def _resident(name, x, out):
    """Step 07's launch (and its ablation's): as many blocks as fit at once, each walking rows. Rows
    it does not cover (not 16-byte aligned, or too long for the registers) go to step 06's kernel."""
    out_, R, C = _prep(x, out, "float16")
    if R and C:
        t, rows = _geometry(name, C, 8, H8_PER_THREAD)
        if not _vec_ok(x, out_, 8) or -(-C // 8) > H8_PER_THREAD * t:
            return fp16_vec8(x, out=out_)
        grid = min(-(-R // rows), resident_blocks("softmax_07_fp16_pipelined", t * rows))   # the ablation: step 07's grid
        launch(FAMILY, name, (grid,), (t, rows), (x, out_, R, C, 1))
    return out_


@variant(dtypes=("float16",))
def fp16_pipelined(x, out=None):
    """Step 07: the resident grid, each block loading the next row before reducing this one."""
    return _resident("softmax_07_fp16_pipelined", x, out)


@variant(dtypes=("float16",))
def ablate_no_prefetch(x, out=None):
    """Step 07 without the prefetch (the resident grid alone): the ablation that splits 06 -> 07."""
    return _resident("softmax_07_ablate_no_prefetch", x, out)


RPW_REGS = 8            # float4 registers per lane in step 09 (RPW_REGS in softmax.cu)
RPW_BLOCK = 128
RPW_ROWS = {"float32": 4, "float16": 8}   # rows a lane group takes in step 09's short-row path (softmax.cu)


def rows_per_warp_geometry(C: int, dtype: str) -> tuple | None:
    """Step 09's dispatch for a row of C elements: (lanes per row, 16-byte loads per lane), or
    None where the row does not fit 32 lanes' registers (then steps 05 / 07 take it). A row gets
    as many lanes as it has 16-byte vectors, rounded up to a power of two, at most 32."""
    width = 8 if dtype == "float16" else 4
    vecs = -(-C // width)
    lpr = min(32, 1 << max(0, vecs - 1).bit_length())
    nv = -(-vecs // lpr)
    # fp16 rows of two or more loads a lane: step 07 (it loads the next row during this one) was
    # chosen from the recorded sweep (softmax.csv, 512 and 1024 halves), so the table sends them there
    return (lpr, nv) if nv <= (1 if dtype == "float16" else RPW_REGS) else None


def dispatch_table(lengths=(32, 64, 128, 256, 512, 1024, 2048)):
    """Step 09's dispatch per row length and dtype: the rows-per-warp geometry, or the step that
    takes rows too long for it."""
    import pandas as pd

    def cell(c, dt):
        g = rows_per_warp_geometry(c, dt)
        if g is None:
            return "step 05" if dt == "float32" else "step 07"
        lpr, nv = g
        if nv <= 2:
            return (f"{32 // lpr * RPW_ROWS[dt]} rows per warp: {lpr} lane(s) a row, {RPW_ROWS[dt]} rows a lane, "
                    f"{nv} load(s) each")
        return f"a warp per row, {nv} 16-byte loads a lane"
    return pd.DataFrame([{"row length": c, **{dt: cell(c, dt) for dt in ("float32", "float16")}} for c in lengths])


@variant(dtypes=("float32", "float16"))
def dispatch(x, out=None):
    """Step 09: rows of at most 1024 elements to the rows-per-warp kernel (rows_per_warp_geometry),
    longer rows to step 05 (fp32) or step 07 (fp16)."""
    half = x.dtype == np.float16
    out_, R, C = _prep(x, out, "float16" if half else "float32")
    g = rows_per_warp_geometry(C, "float16" if half else "float32") if R and C else None
    if g is None:
        return (fp16_pipelined if half else online_vec4)(x, out=out_) if R and C else out_
    lpr, nv = g
    rows_per_block = RPW_BLOCK // lpr * (RPW_ROWS[str(x.dtype)] if nv <= 2 else 1)   # nv <= 2: several rows a lane group
    launch(FAMILY, "softmax_09_rows_per_warp" + ("_fp16" if half else ""), (-(-R // rows_per_block),),
           (RPW_BLOCK,), (x, out_, R, C, _vec_ok(x, out_, 8 if half else 4), lpr, nv))
    return out_


CLUSTER_FROM = 16385    # step 10 sends rows of at least this many elements to a cluster (sm_90)
CLUSTER_ELEMS = {"float32": 32, "float16": 64}   # elements a thread of step 10 holds (CL_REGS / CLH_REGS)


CLUSTER_THREADS = {"float32": (512, 1024), "float16": (256, 512)}   # preferred, then the most the kernel takes


def cluster_geometry(C: int, dtype: str = "float32", caps=CLUSTER_THREADS) -> tuple | None:
    """Step 10's cluster for a row of C elements: (blocks per row, threads per block, elements per
    block), the smallest cluster (2, 4 or 8) whose blocks hold their chunk in registers with at most
    the preferred threads (smaller blocks: more of them an SM, so one block's reduction overlaps
    another's loads; chosen from the recorded sweep, softmax.csv: 512 for fp32, 256 for fp16), else with the most the kernel
    takes; None past 8 such blocks."""
    for cap in caps[dtype]:
        for cs in (2, 4, 8):
            chunk = -(-(-(-C // cs)) // 8) * 8                   # a multiple of 8: 16-byte aligned chunks  # noqa: B002
            threads = -(-chunk // CLUSTER_ELEMS[dtype])
            if threads <= cap:
                return cs, max(32, -(-threads // 32) * 32), chunk
    return None


@variant(dtypes=("float32", "float16"), min_arch=90)
def cluster(x, out=None):
    """Step 10: step 09's dispatch, with rows of CLUSTER_FROM elements or more spread over a
    thread-block cluster (sm_90) that exchanges (m, d) through distributed shared memory."""
    dt = "float16" if x.dtype == np.float16 else "float32"
    out_, R, C = _prep(x, out, dt)
    g = cluster_geometry(C, dt) if R and C >= CLUSTER_FROM else None
    if g is None:
        return dispatch(x, out=out_)
    cs, threads, chunk = g
    launch(FAMILY, f"softmax_10_cluster{'_fp16' if dt == 'float16' else ''}_{cs}", (R * cs,), (threads,),
           (x, out_, C, _vec_ok(x, out_, 8 if dt == "float16" else 4), chunk))
    return out_



CLUSTER11_THREADS = {"float32": (512,), "float16": (256, 512)}   # preferred, then the most it takes (512)


def cluster11_geometry(C: int, dtype: str = "float32") -> tuple | None:
    """Steps 11-13's cluster for a row of C elements: step 10's chunk a thread (CL11_REGS = CL_REGS),
    blocks of at most 512 threads (their kernels' __launch_bounds__)."""
    return cluster_geometry(C, dtype, CLUSTER11_THREADS)


@functools.lru_cache(maxsize=None)
def resident_clusters(name, threads, cs) -> int:
    """Step 11's grid: the clusters of kernel `name` the GPU holds at once (build.resident_clusters)."""
    from .core.build import kernel, resident_clusters as held
    return held(kernel(FAMILY, name), threads, cs)


def _cluster_rows(prefix, x, out):
    """Step 11's launch (and its ablation's): as many clusters as the GPU holds at once
    (build.resident_clusters), each walking rows; rows under CLUSTER_FROM, rows too long for 8 blocks
    and rows that are not 16-byte aligned go to step 10."""
    dt = "float16" if x.dtype == np.float16 else "float32"
    out_, R, C = _prep(x, out, dt)
    g = cluster11_geometry(C, dt) if R and C >= CLUSTER_FROM else None
    if g is None or not _vec_ok(x, out_, 8 if dt == "float16" else 4):
        return cluster(x, out=out_)
    cs, threads, chunk = g
    name = f"softmax_{prefix}{'_fp16' if dt == 'float16' else ''}_{cs}"
    grid = min(R, resident_clusters(name, threads, cs))
    launch(FAMILY, name, (grid * cs,), (threads,), (x, out_, R, C, chunk))
    return out_


@variant(dtypes=("float32", "float16"), min_arch=90)
def cluster_resident(x, out=None):
    """Step 11: step 10 with only the clusters the GPU holds at once, each walking rows (and, in
    fp16, the max taken in fp16)."""
    return _cluster_rows("11_cluster_resident", x, out)


@variant(dtypes=("float16",), min_arch=90)
def ablate_11_fp32_max(x, out=None):
    """Step 11 (fp16) with step 10's fp32 max: the ablation that splits 10 -> 11 in fp16."""
    require(x, "x", dtype="float16", ndim=2)
    return _cluster_rows("11_ablate_fp32_max", x, out)


@variant(dtypes=("float32", "float16"), min_arch=90)
def cluster_prefetch(x, out=None):
    """Step 12: step 11, every block loading its chunk of the next row before this row's work."""
    return _cluster_rows("12_cluster_prefetch", x, out)


@variant(dtypes=("float16",), min_arch=90)
def cluster_one_exp(x, out=None):
    """Step 13 (fp16): step 11 with one exp per element, kept as halves where x was."""
    require(x, "x", dtype="float16", ndim=2)
    return _cluster_rows("13_cluster_one_exp", x, out)

# Steps 10 -> 11 -> 12 and 11 -> 13, taken apart (results.ablation), per dtype.
_PREFETCH = "the next row's loads issued early (the prefetch)"
CLUSTER_PAIRS = [
    ("10 → 11 (float32)", "float32", "10_cluster", "11_cluster_resident", [
        ("the resident clusters walking rows", "11_cluster_resident", "10_cluster")]),
    ("10 → 11 (float16)", "float16", "10_cluster", "11_cluster_resident", [
        ("the max in fp16 (registers)", "11_cluster_resident", "11_ablate_fp32_max"),
        ("the resident clusters walking rows", "11_ablate_fp32_max", "10_cluster")]),
    *((f"11 → 12 ({dt})", dt, "11_cluster_resident", "12_cluster_prefetch", [
        (_PREFETCH, "12_cluster_prefetch", "11_cluster_resident")]) for dt in ("float32", "float16")),
    ("11 → 13 (float16)", "float16", "11_cluster_resident", "13_cluster_one_exp", [
        ("one exp per element, kept as halves where x was", "13_cluster_one_exp", "11_cluster_resident")])]
CLUSTER_STEPS = {"11_ablate_fp32_max": "step 11 (fp16) with step 10's fp32 max: the resident clusters alone"}

SAFE_V1_MAX_BLOCK = 1024   # step 08 holds one element per thread (SAFE_V1_MAX_BLOCK in softmax.cu)


class _RowFitsBlock(Variant):
    """A step that holds a row in one block, one element per thread: it takes rows of at most
    SAFE_V1_MAX_BLOCK elements (its launcher raises ValueError above that), so the checks leave
    longer cases out."""

    def accepts(self, case) -> bool:
        shape = case[0]
        return (len(shape) < 2 or shape[-1] <= SAFE_V1_MAX_BLOCK) and super().accepts(case)


def _safe_v1(x, out=None):
    """Step 08, the tutorial's safe_v1: one block per row, one element per thread, block = C rounded
    up to a power of two (at least 32). Rows longer than SAFE_V1_MAX_BLOCK: ValueError, no launch."""
    out_, R, C = _prep(x, out)
    if C > SAFE_V1_MAX_BLOCK:
        raise ValueError(f"08_safe_v1 keeps one element per thread: C <= block size <= {SAFE_V1_MAX_BLOCK}, "
                         f"got C = {C} (step 02 and the later steps take any C)")
    if R and C:
        launch(FAMILY, "softmax_08_safe_v1", (R,), (max(32, 1 << (C - 1).bit_length()),), (x, out_, R, C))
    return out_


_safe_v1.__name__ = "safe_v1"
safe_v1 = _RowFitsBlock(_safe_v1)

VARIANTS = {
    "01_naive": naive,
    "02_safe_smem": safe_smem,
    "02_safe_interleaved": safe_interleaved,
    "03_warp_shuffle": warp_shuffle,
    "03_warp_per_row": warp_per_row,
    "04_online": online,
    "05_online_vec4": online_vec4,
    "06_fp16_vec8": fp16_vec8,
    "07_fp16_pipelined": fp16_pipelined,
    "ablate_07_no_prefetch": ablate_no_prefetch,
    "09_dispatch": dispatch,
    "10_cluster": cluster,
    "11_cluster_resident": cluster_resident,
    "11_ablate_fp32_max": ablate_11_fp32_max,
    "12_cluster_prefetch": cluster_prefetch,
    "13_cluster_one_exp": cluster_one_exp,
}
BEST = {"float32": "05_online_vec4", "float16": "07_fp16_pipelined"}


# ---- ablation: what each change of steps 04 and 05 is worth on its own --------------------------
# Step 05 changed four things at once; each row below is step 05 with ONE of them undone (or
# step 04 with its first, two-exp update), same inputs, same run. time(row) / time(step 05) is
# what that one change is worth, given the other three.

@variant()
def online_two_exp(x, out=None):
    return _run("softmax_04_ablate_two_exp", x, out, ROW_BLOCK)


def _ablate(label, name="softmax_05_online_vec4", **kw):
    def run(x, out=None):
        return _row_groups(name, x, out, "float32", 4, VEC_PER_THREAD, **kw)
    run.__name__ = label
    return variant()(run)


ABLATION_STEPS = {   # name -> what is undone, for the lab's table
    "04_online": "step 04 (one exp per element)",
    "04_two_exp": "step 04 with its first update: two guarded expf per element",
    "05_online_vec4": "step 05: all four changes",
    "05_no_vec_loads": "step 05 with scalar loads (vec_ok = 0) in place of 16-byte loads",
    "05_no_ex2": "step 05 with expf in place of ex2.approx",
    "05_no_reg_cache": "step 05 streaming the row twice in place of keeping it in registers",
    "05_block_256": "step 05 launched like step 04: 256 threads, one row per block "
                    "(rows over 8192 floats then no longer fit in registers: streamed)",
}
ABLATION = Family(
    name="softmax_ablation", kernels=FAMILY, case_key=case_key, make_input=make_input,
    reference=reference, bytes_moved=bytes_moved, tolerance=tolerance,
    variants={"04_online": online, "04_two_exp": online_two_exp, "05_online_vec4": online_vec4,
              "05_no_vec_loads": _ablate("05_no_vec_loads", vec_ok=0),
              "05_no_ex2": _ablate("05_no_ex2", "softmax_05_ablate_expf"),
              "05_no_reg_cache": _ablate("05_no_reg_cache", "softmax_05_ablate_stream"),
              "05_block_256": _ablate("05_block_256", threads=ROW_BLOCK)},
    default={}, baselines={},
    shapes={k: SHAPES[k] for k in ("square_4096", "long_rows_1024x32768", "short_rows_32768x1024")},
    check_cases=CHECK_CASES,
    record_cases=[(SHAPES[k], "float32") for k in ("square_4096", "long_rows_1024x32768", "short_rows_32768x1024")],
)


# ---- baselines: factories that bind the inputs once, outside any timed region -----------------

def _cupyx(x):
    from cupyx.scipy.special import softmax
    return lambda: softmax(x, axis=-1)


def _composite(x):
    import cupy

    def f():
        e = cupy.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return f


def _torch(x):
    torch = torch_module()
    if torch is None:
        return None
    t = torch.from_dlpack(x)
    return lambda: torch.softmax(t, dim=-1)


BASELINES = {"cupyx.softmax": _cupyx, "cupy composite": _composite, "torch.softmax": _torch,
             "memcpy x -> y (floor)": memcpy}


# ---- rows of at most 1024: the tutorial's safe_v1 (step 08) beside the steps that take any C --------
# Step 08 cannot run the main family's cases (rows up to 151936), so it is timed in a family of its
# own, on the sweep's short rows, beside the steps it is compared with (recorded into softmax_short.csv).
SHORT_SHAPES = [(SWEEP_TOTAL // c, c) for c in (32, 64, 128, 256, 512, 1024)]
SHORT = Family(
    name="softmax_short", kernels=FAMILY, case_key=case_key, make_input=make_input,
    reference=reference, bytes_moved=bytes_moved, tolerance=tolerance,
    variants={"01_naive": naive, "02_safe_smem": safe_smem, "08_safe_v1": safe_v1,
              "03_warp_shuffle": warp_shuffle, "03_warp_per_row": warp_per_row, "05_online_vec4": online_vec4,
              "09_dispatch": dispatch},
    default={}, baselines={"torch.softmax": _torch, "memcpy x -> y (floor)": memcpy},
    shapes={f"short_rows_{r}x{c}": (r, c) for r, c in SHORT_SHAPES},
    check_cases=[(s, v) for s in [(1, 1), (3, 31), (1, 33), (5, 257), (3, 1023), (3, 1024), (2, 0), (0, 5)]
                 for v in ("randn", "large", "hostile")],
    record_cases=[(s, "float32") for s in SHORT_SHAPES],
    about="lab 01: rows of at most 1024, where the tutorial's safe_v1 (one element per thread) runs")


# ---- where do re-reads come from? A model of DRAM passes -----------------------------------------
# Steps 02-03 read each row 3 times and write it once; step 04 reads it twice. A re-read costs DRAM
# bandwidth only if the row has left the caches by then. With one block per row, an SM holds
# `blocks_per_sm` rows at once: they stay in its L1 if they fit; the rows of all SMs stay in L2 if
# they fit there. L1 here is the SM's unified L1/shared-memory array (the most L1 can be).
L1_BYTES = {"sm_70": 128 << 10, "sm_75": 96 << 10, "sm_80": 192 << 10, "sm_86": 128 << 10,
            "sm_87": 192 << 10, "sm_89": 128 << 10, "sm_90": 256 << 10, "sm_100": 256 << 10,
            "sm_120": 128 << 10}


def dram_passes(cols, itemsize, blocks_per_sm, sms, l1_bytes, l2_bytes, reads=3, writes=1) -> dict:
    """The model: where the re-reads of a row are served from, and how many passes over the data
    must cross DRAM (the first read and every write always do). bound = 2 / DRAM passes is the
    largest fraction of the copy roof (1 read + 1 write = 2 passes) such a kernel can reach."""
    row = cols * itemsize
    per_sm, gpu = row * blocks_per_sm, row * blocks_per_sm * sms
    where = "L1" if per_sm < l1_bytes else "L2" if gpu < l2_bytes else "DRAM"   # L1 also holds smem
    passes = (reads if where == "DRAM" else 1) + writes
    return {"row KiB": row / 1024, "rows in flight per SM": blocks_per_sm, "KiB per SM": per_sm / 1024,
            "MiB on the GPU": gpu / 2**20, "re-reads from": where, "passes counted": reads + writes,
            "DRAM passes (model)": passes, "bound (2 / DRAM passes)": 2 / passes}


def passes_table(df, step="03_warp_shuffle", reads=3, threads=ROW_BLOCK):
    """For each row length measured in `df` (fp32): the model's DRAM passes for `step` beside
    the measured fraction of the copy roof, and the passes that fraction implies (2 / fraction).
    Empty when the frame has no rows of `step` or the device is unknown."""
    import pandas as pd
    from .core.build import occupancy
    from .core.results import one_source
    d = one_source(df[(df["name"] == step) & (df["dtype"] == "float32")]) if len(df) else df   # one device
    facts = facts_of(d)
    if d is None or d.empty or not facts:
        return pd.DataFrame()
    occ = occupancy(FAMILY, step, threads)
    arch = facts["arch"] if (occ["arch"] == facts["arch"]).any() else "sm_90"
    blocks = int(occ[(occ["arch"] == arch) & (occ["source"] == "ptxas -v")]["blocks/SM"].iloc[0])
    rows = []
    for r in d.sort_values("cols").itertuples():
        m = dram_passes(int(r.cols), 4, blocks, facts["sms"], L1_BYTES.get(facts["arch"], 128 << 10),
                        facts["l2_bytes"], reads=reads)
        rows.append({"shape": f"{r.rows}x{r.cols}", **m, "measured fraction of copy": r.frac_copy,
                     "passes implied (2 / fraction)": 2 / r.frac_copy})
    out = pd.DataFrame(rows)
    out["device"], out["source"] = facts["device"], d["source"].iloc[0]
    return out


# ---- every shape at speed: the best step per row length, from 32 to 262144 columns (the sweep) -------------

def _sweep_best(df, lo, hi, kind="variant", names=None):
    """Per sweep case with lo <= columns <= hi (fp32 and fp16): the fastest step's row (or the
    fastest of the baselines `names`)."""
    from .core.results import best
    keys = [case_key(s, dt) for s in SWEEP for dt in ("float32", "float16") if lo <= s[1] <= hi]
    b = best(df, kind, names)
    return b[b.index.isin(keys)] if len(b) else b


def worst_frac(lo, hi, floor=False):
    """The worst fraction of the copy roof that the best step reaches over the sweep's rows of lo..hi
    columns (fp32 and fp16); floor=True: that of a memcpy of the same bytes (no kernel can do much
    better); NaN when the frame lacks them."""
    def m(df):
        b = _sweep_best(df, lo, hi, *(("baseline", ["memcpy x -> y (floor)"]) if floor else ()))
        return float(b["frac_copy"].min()) if len(b) else float("nan")
    return m


def worst_vs_torch(df):
    """Worst over the sweep (both dtypes) of time(torch.softmax) / time(best step)."""
    from .core.results import NAN, ratio_band
    b = _sweep_best(df, 32, 2 ** 18)
    r = [m for m in (ratio_band(df, n, "torch.softmax", c) for c, n in zip(b.index, b["name"])) if m.ok]
    return min(r, key=lambda m: m.value) if r else NAN


def kernel_run(step: str, case: str) -> str:
    """The step whose kernel the launcher of `step` actually runs at `case` ('RxC:dtype'): steps 11-13
    hand rows they cannot hold (under CLUSTER_FROM, or fp32 past 8 blocks of 512 threads) to step 10, step 10
    hands rows shorter than CLUSTER_FROM (or too long for its cluster) to step 09's dispatch, and
    step 09 hands rows too long for a warp to step 05 (fp32) or step 07 (fp16). Two launchers that
    map to the same step time the same kernel: a "fastest" between them is a pick within noise."""
    shape, dt = case.split(":")
    C = int(shape.split("x")[-1])
    if step in ("11_cluster_resident", "11_ablate_fp32_max", "12_cluster_prefetch", "13_cluster_one_exp"):
        if C >= CLUSTER_FROM and cluster11_geometry(C, dt) is not None:
            return step
        step = "10_cluster"
    if step == "10_cluster":
        if C >= CLUSTER_FROM and cluster_geometry(C, dt) is not None:
            return step
        step = "09_dispatch"
    if step == "09_dispatch" and rows_per_warp_geometry(C, dt) is None:
        return "07_fp16_pipelined" if dt == "float16" else "05_online_vec4"
    return step


def ran_text(step: str, case: str) -> str:
    """'`step`', or '`step` (which runs `other`'s kernel here)' where the launcher hands the case on."""
    k = kernel_run(step, case)
    return f"`{step}`" if k == step else f"`{step}` (which runs `{k}`'s kernel here)"


def best_per_length(df):
    """The sweep's fastest step per row length and dtype, the step whose kernel that launcher ran
    (kernel_run: step 10 below 16385 columns is step 09's dispatch, step 09 past a warp's row is
    step 05 or 07, so a win between them is a pick within noise between the same kernel), its
    fraction of the copy roof, and time(torch.softmax) / its time (> 1: faster than torch); one
    block of rows per recorded device."""
    import pandas as pd
    from .core.results import devices, ratio
    parts = []
    for part in devices(df):
        b = _sweep_best(part, 32, 2 ** 18)
        if not len(b):
            continue
        out = b.reset_index()[["case", "name"]]
        out["kernel that ran"] = [kernel_run(n, c) for c, n in zip(b.index, b["name"])]
        out[["median_us", "frac_copy"]] = b[["median_us", "frac_copy"]].values
        out["torch / best"] = [ratio(part, n, "torch.softmax", c) for c, n in zip(b.index, b["name"])]
        if "device" in part:
            out["device"] = part["device"].iloc[0]
        parts.append(out)
    return pd.concat(parts, ignore_index=True).round(3) if parts else pd.DataFrame()


TARGETS = (Target("best step / torch.softmax, worst over 32..262144 columns (fp32, fp16)", worst_vs_torch, 1.0),
           *(Target(f"best step, worst fraction of the copy roof, {what} columns", worst_frac(lo, hi), t, unit="",
                    floor=worst_frac(lo, hi, floor=True))
             for what, lo, hi, t in (("1K..32K", 1024, 32768, 0.90), ("64K..256K", 65536, 2 ** 18, 0.85),
                                     ("32..256", 32, 256, 0.75))))

# ---- what limits the long rows: Nsight Compute readings (results.limiters), and their sentence -------------

TORCH_SOFTMAX_KERNELS = "SoftMax|softmax"          # torch's softmax kernels (cunn_SoftMaxForward*, softmax_warp_*)
LIMIT_LONG = (256, 131072)                         # the 64K..256K band's middle: 2^25 elements, as the sweep
LIMITERS = (("10_cluster", LIMIT_LONG, r"^softmax_10_cluster_fp16", "float16"),
            ("10_cluster", LIMIT_LONG, r"^softmax_10_cluster_\d", "float32"),
            ("13_cluster_one_exp", LIMIT_LONG, r"^softmax_13_", "float16"),
            ("torch.softmax", LIMIT_LONG, TORCH_SOFTMAX_KERNELS, "float16"))


def long_limits_text(lim) -> str:
    """What holds step 10 back on long fp16 rows, beside fp32, torch and step 13, from results.limiters(SOFTMAX)."""
    col = lambda name, dt: f"{name} @ {case_key(LIMIT_LONG, dt)}"             # noqa: E731
    a, b, t = col("10_cluster", "float16"), col("10_cluster", "float32"), col("torch.softmax", "float16")
    if lim is None or not {a, b, t} <= set(lim.columns):
        return "*No Nsight Compute readings recorded yet (`make ncu` on a GPU with ncu): no counter-based verdict.*"
    v = lambda row, c: float(lim.loc[row, c])                                 # noqa: E731
    dr, iss, occ, xu = ("DRAM throughput (% of peak)", "issue slots busy (%)", "achieved occupancy (%)",
                        "XU pipe (exp2) busy (%)")
    stalls = [i for i in lim.index if i.startswith("stall:")]
    top, second = lim.loc[stalls, a].sort_values(ascending=False).index[:2]
    s13 = col("13_cluster_one_exp", "float16")
    top13 = lim.loc[stalls, s13].idxmax() if s13 in lim.columns else None
    units = {dr: "DRAM", iss: "the issue slots", xu: "the XU pipe (exp2)"}
    busiest = max(units, key=lambda r: v(r, a))
    held = (f"no unit is saturated (the busiest, {units[busiest]}, at {v(busiest, a):.0f}%): it is held by latency"
            if v(busiest, a) < 80 else f"{units[busiest]} is saturated ({v(busiest, a):.0f}%)")
    dram_bytes = lambda c: v(dr, c) * v("duration (ns)", c)                   # noqa: E731  DRAM busy x time
    return (f"At {LIMIT_LONG[0]} × {LIMIT_LONG[1]}, fp16 `10_cluster` keeps DRAM **{v(dr, a):.0f}%** busy over "
            f"{v('duration (ns)', a) / 1e3:.1f} µs; the same kernel on fp32 rows **{v(dr, b):.0f}%**. In fp16 {held}. "
            f"It runs at **{v(occ, a):.0f}%** occupancy ({v('registers per thread', a):.0f} registers a thread; "
            f"fp32: {v(occ, b):.0f}%, {v('registers per thread', b):.0f} registers; the register table above shows "
            f"step 11's fp16 kernels, the same chunk with the max taken in fp16, at about half), "
            f"issues in {v(iss, a):.0f}% of the cycles, and its warps wait most on *{top[7:]}* ({v(top, a):.2f} "
            f"cycles per issued instruction), then on *{second[7:]}* ({v(second, a):.2f}): few "
            f"warps, each loading its chunk, reducing, exchanging (m, d) with the cluster and storing in turn, leave "
            f"DRAM idle between phases. torch's fp16 kernel keeps DRAM {v(dr, t):.0f}% busy over "
            f"{v('duration (ns)', t) / 1e3:.1f} µs: busier, yet {dram_bytes(t) / dram_bytes(a):.1f}× our DRAM bytes "
            f"(busy × time), since a row this long does not stay on chip between its passes."
            + ("" if s13 not in lim.columns else
               f" Step 13, with steps 11–13's changes, keeps DRAM **{v(dr, s13):.0f}%** busy over "
               f"{v('duration (ns)', s13) / 1e3:.1f} µs at {v(occ, s13):.0f}% occupancy "
               f"({v('registers per thread', s13):.0f} registers a thread) and issues in {v(iss, s13):.0f}% of the "
               f"cycles; its warps wait most on *{top13[7:]}* ({v(top13, s13):.2f}): "
               + ("still no unit saturated, still latency." if max(v(r, s13) for r in units) < 80 else
                  f"{units[max(units, key=lambda r: v(r, s13))]} is now saturated.")))


SOFTMAX = Family(
    name=NAME, kernels=FAMILY, variants=VARIANTS, targets=TARGETS, reference=reference, make_input=make_input,
    bytes_moved=bytes_moved, check_cases=CHECK_CASES, baselines=BASELINES, shapes=SHAPES, default=BEST,
    tolerance=tolerance,
    case_key=case_key, record_cases=[(s, dt) for dt in ("float32", "float16")
                                     for s in dict.fromkeys(SWEEP + list(SHAPES.values()))],
    limiters=LIMITERS, about="lab 01: softmax, naive -> safe -> warp shuffle -> online -> vectorised -> fp16")
FAMILIES = [SOFTMAX, ABLATION, SHORT]


# ---- the seed's correctness claims, checked (docs/claims.csv rows with how `lab:...`) ---------------
# IEEE float32 arithmetic in NumPy: the same expf overflow and the same roundings a GPU has (CuPy's
# -ftz=true flushes subnormals, which only moves underflow, never overflow). The kernels' own checks
# (lab 01's hostile rows) run live on a GPU; these judge the arithmetic the claims are about.

def _naive_f32(x):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(np.float32))
        return e / e.sum(axis=-1, keepdims=True, dtype=np.float32)


def _safe_f32(x):
    x = x.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True, dtype=np.float32)


HOSTILE_ROWS = np.array([[89.0, 0.0, 1.0, 2.0], [1000.0, 999.0, -5.0, 0.0], [88.0, 88.7, 100.0, -1e30],
                         [-1000.0, -1001.0, -2000.0, -1e30], [3e38, 3e38, 0.0, -3e38]], np.float32)


def _exp89(part):
    """001:26: e^89 exceeds the float32 maximum, so x >= 89 gives inf and the naive softmax NaN."""
    with np.errstate(over="ignore"):
        e89 = np.exp(np.float32(89.0))
    nan_rows = int(np.isnan(_naive_f32(HOSTILE_ROWS[:3])).any(axis=-1).sum())
    from .core.results import checked
    return checked(bool(np.isinf(e89)) and nan_rows == 3,
                   f"expf(89) = {e89} in float32; naive softmax: NaN in {nan_rows} of 3 rows with x >= 89 (NumPy)")


def _safe_fixes(part):
    """001:31: subtracting the row max removes the overflow; what underflows to 0 is harmless (the row
    still sums to 1 and its largest entry is exact)."""
    y = _safe_f32(HOSTILE_ROWS)
    ok = bool(np.isfinite(y).all() and np.allclose(y.sum(-1), 1, atol=1e-6) and (y >= 0).all())
    zeros = int((y == 0).sum())
    from .core.results import checked
    return checked(ok, f"safe softmax of {len(y)} hostile rows: all finite, each sums to 1; "
                       f"{zeros} entries underflow to 0 (NumPy float32)")


def _combine_never_overflows(part, n: int = 200_000, seed: int = 0):
    """001:365: combine_stats computes expf(a.m - out.m) with out.m = max(a.m, b.m), so the argument
    is <= 0 and the result <= 1: (m, d) pairs merged over hostile maxima never overflow. Two -inf
    maxima (an all -inf row) give -inf - -inf = NaN, which is not an overflow but is shown."""
    rng = np.random.default_rng(seed)
    pick = np.array([-3e38, -1e4, -89.0, 0.0, 89.0, 1e4, 3e38], np.float32)
    am = np.where(rng.random(n) < 0.5, rng.choice(pick, n), rng.standard_normal(n) * 1e3).astype(np.float32)
    bm = np.where(rng.random(n) < 0.5, rng.choice(pick, n), rng.standard_normal(n) * 1e3).astype(np.float32)
    ad, bd = rng.random(n).astype(np.float32) * 4096, rng.random(n).astype(np.float32) * 4096
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.maximum(am, bm)
        d = ad * np.exp(am - m) + bd * np.exp(bm - m)
        both_inf = np.exp(np.float32(-np.inf) - np.float32(-np.inf))
    from .core.results import checked
    return checked(bool(np.isfinite(d).all() and (d <= ad + bd + 1e-3 * (ad + bd)).all()),
                   f"{n} merges of hostile (m, d) pairs: no inf (NumPy float32); two -inf maxima give {both_inf}")


def _register_claims():
    from .core.results import claim_measure
    claim_measure("softmax-002")(_exp89)
    claim_measure("softmax-003")(_safe_fixes)
    claim_measure("softmax-028")(_combine_never_overflows)


_register_claims()
