"""Softmax (lab 01): the launchers of kernels/softmax.cu, the ablation, the baselines, SHORT."""
from __future__ import annotations

import functools

import numpy as np

from ..core.bench import memcpy
from ..core.build import define
from ..core.device import torch as torch_module
from ..core.family import Family
from ..core.launch import Variant, launch, variant
from ..core.launch import aligned, out_like, require
from .reference import CHECK_CASES, SHAPES, SWEEP_TOTAL, bytes_moved, case_key, make_input, reference, tolerance

NAME = "softmax"
FAMILY = "softmax"
# The -D constants softmax.cu is compiled with (its #ifndef defaults are the same: tests/test_constants.py):
ROW_BLOCK = 256        # the block size of steps 02-04
VEC_PER_THREAD = 8     # float4 per thread that step 05 keeps in registers
H8_PER_THREAD = 4      # 8-half loads per thread that steps 06/07 keep
RPW_REGS = 8           # float4 registers per lane in step 09
RPW_ROWS = {"float32": 4, "float16": 8}   # rows a lane group takes in step 09's short-row path
CL_REGS = 8            # float4 registers a thread of steps 10-12 (fp32) holds: 32 elements
CLH_REGS = 8           # 16-byte words of halves a thread of steps 10-13 (fp16) holds: 64 elements
SAFE_V1_MAX_BLOCK = 1024   # step 08 holds one element per thread
DEFINES = define(FAMILY, ROW_BLOCK=ROW_BLOCK, VEC_PER_THREAD=VEC_PER_THREAD, H8_PER_THREAD=H8_PER_THREAD,
                 RPW_REGS=RPW_REGS, RPW_ROWS_F32=RPW_ROWS["float32"], RPW_ROWS_F16=RPW_ROWS["float16"],
                 CL_REGS=CL_REGS, CLH_REGS=CLH_REGS, CL11_REGS=CL_REGS, SAFE_V1_MAX_BLOCK=SAFE_V1_MAX_BLOCK)


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
    """Enough threads for the row to fit in registers (whole warps), at most what the compiled kernel launches with."""
    from ..core.build import kernel
    cap = min(1024, kernel(FAMILY, name).max_threads_per_block)
    need = -(-C // per_thread_elems)
    return int(min(cap, max(32, -(-need // 32) * 32)))


def _geometry(name, C, width, per_thread):
    """(threads per row, rows per block): a warp per row (8 a block) for short rows, else a block per row."""
    t = _threads(name, C, width * per_thread)
    return t, (8 if t == 32 else 1)


def _row_groups(name, x, out, dtype, width, per_thread, vec_ok=None, threads=None):
    """Launch a register-cached kernel with _geometry's block (or `threads`, a row a block); vec_ok=0: scalar loads."""
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
    """The blocks of `threads` threads of kernel `name` the whole GPU holds at once (occupancy API x SMs)."""
    import cupy
    from ..core.build import kernel
    from ..core.device import info
    fn = kernel(FAMILY, name)
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, 0)
    return max(1, per_sm) * info()["sms"]


def _resident(name, x, out):
    """Step 07's launch (and its ablation's): resident blocks walking rows; unaligned or too long rows: step 06."""
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


RPW_BLOCK = 128


def rows_per_warp_geometry(C: int, dtype: str) -> tuple | None:
    """Step 09's (lanes per row, 16-byte loads per lane) for C elements; None past 32 lanes (steps 05 / 07 take it)."""
    width = 8 if dtype == "float16" else 4
    vecs = -(-C // width)
    lpr = min(32, 1 << max(0, vecs - 1).bit_length())
    nv = -(-vecs // lpr)
    # fp16 rows of two or more loads a lane: step 07 (it loads the next row during this one) was
    # chosen from the recorded sweep (softmax.csv, 512 and 1024 halves), so the table sends them there
    return (lpr, nv) if nv <= (1 if dtype == "float16" else RPW_REGS) else None


def dispatch_table(lengths=(32, 64, 128, 256, 512, 1024, 2048)):
    """Step 09's dispatch per row length and dtype: its geometry, or the step that takes the row."""
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
    """Step 09: rows that rows_per_warp_geometry fits to its kernel, longer rows to step 05 (fp32) or 07 (fp16)."""
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
CLUSTER_ELEMS = {"float32": 4 * CL_REGS, "float16": 8 * CLH_REGS}   # elements a thread of step 10 holds
CLUSTER_THREADS = {"float32": (512, 1024), "float16": (256, 512)}   # preferred, then the most the kernel takes


def cluster_geometry(C: int, dtype: str = "float32", caps=CLUSTER_THREADS) -> tuple | None:
    """Step 10's (blocks per row, threads per block, elements per block) for a row of C elements: the smallest
    cluster (2, 4, 8) whose blocks hold their chunk in registers with at most the preferred threads (smaller blocks
    overlap one's reduction with another's loads; softmax.csv chose 512 for fp32, 256 for fp16), else the most the
    kernel takes; None past 8 blocks."""
    for cap in caps[dtype]:
        for cs in (2, 4, 8):
            chunk = -(-(-(-C // cs)) // 8) * 8                   # a multiple of 8: 16-byte aligned chunks  # noqa: B002
            threads = -(-chunk // CLUSTER_ELEMS[dtype])
            if threads <= cap:
                return cs, max(32, -(-threads // 32) * 32), chunk
    return None


@variant(dtypes=("float32", "float16"), min_arch=90)
def cluster(x, out=None):
    """Step 10: step 09, with rows of CLUSTER_FROM or more over a cluster exchanging (m, d) through DSMEM."""
    dt = "float16" if x.dtype == np.float16 else "float32"
    out_, R, C = _prep(x, out, dt)
    g = cluster_geometry(C, dt) if R and C >= CLUSTER_FROM else None
    if g is None:
        return dispatch(x, out=out_)
    cs, threads, chunk = g
    name = "softmax_10_cluster_fp16" if dt == "float16" else "softmax_10_cluster"
    launch(FAMILY, f"{name}_{cs}", (R * cs,), (threads,), (x, out_, C, _vec_ok(x, out_, 8 if dt == "float16" else 4), chunk))
    return out_


CLUSTER11_THREADS = {"float32": (512,), "float16": (256, 512)}   # preferred, then the most it takes (512)


def cluster11_geometry(C: int, dtype: str = "float32") -> tuple | None:
    """Steps 11-13's cluster: step 10's chunk a thread, at most 512 threads a block (their __launch_bounds__)."""
    return cluster_geometry(C, dtype, CLUSTER11_THREADS)


@functools.lru_cache(maxsize=None)
def resident_clusters(name, threads, cs) -> int:
    """Step 11's grid: the clusters of kernel `name` the GPU holds at once (build.resident_clusters)."""
    from ..core.build import kernel, resident_clusters as held
    return held(kernel(FAMILY, name), threads, cs)


def _cluster_rows(f32, f16, x, out):
    """Steps 11-13: resident clusters walking rows; rows step 10 must take (short, too long, unaligned) go there."""
    dt = "float16" if x.dtype == np.float16 else "float32"
    out_, R, C = _prep(x, out, dt)
    g = cluster11_geometry(C, dt) if R and C >= CLUSTER_FROM else None
    if g is None or not _vec_ok(x, out_, 8 if dt == "float16" else 4):
        return cluster(x, out=out_)
    cs, threads, chunk = g
    name = f"{f16 if dt == 'float16' else f32}_{cs}"
    grid = min(R, resident_clusters(name, threads, cs))
    launch(FAMILY, name, (grid * cs,), (threads,), (x, out_, R, C, chunk))
    return out_


@variant(dtypes=("float32", "float16"), min_arch=90)
def cluster_resident(x, out=None):
    """Step 11: step 10 on the resident clusters, each walking rows (in fp16, the max taken in fp16)."""
    return _cluster_rows("softmax_11_cluster_resident", "softmax_11_cluster_resident_fp16", x, out)


@variant(dtypes=("float16",), min_arch=90)
def ablate_11_fp32_max(x, out=None):
    """Step 11 (fp16) with step 10's fp32 max: the ablation that splits 10 -> 11 in fp16."""
    require(x, "x", dtype="float16", ndim=2)
    return _cluster_rows(None, "softmax_11_ablate_fp32_max_fp16", x, out)


@variant(dtypes=("float32", "float16"), min_arch=90)
def cluster_prefetch(x, out=None):
    """Step 12: step 11, every block loading its chunk of the next row before this row's work."""
    return _cluster_rows("softmax_12_cluster_prefetch", "softmax_12_cluster_prefetch_fp16", x, out)


@variant(dtypes=("float16",), min_arch=90)
def cluster_one_exp(x, out=None):
    """Step 13 (fp16): step 11 with one exp per element, kept as halves where x was."""
    require(x, "x", dtype="float16", ndim=2)
    return _cluster_rows(None, "softmax_13_cluster_one_exp_fp16", x, out)

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


class _RowFitsBlock(Variant):
    """A step of one element per thread: rows past SAFE_V1_MAX_BLOCK raise, so the checks leave them out."""

    def accepts(self, case) -> bool:
        shape = case[0]
        return (len(shape) < 2 or shape[-1] <= SAFE_V1_MAX_BLOCK) and super().accepts(case)


def _safe_v1(x, out=None):
    """Step 08, the tutorial's safe_v1: a block per row of C threads (a power of two, at least 32)."""
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
    "07_ablate_no_prefetch": ablate_no_prefetch,
    "09_dispatch": dispatch,
    "10_cluster": cluster,
    "11_cluster_resident": cluster_resident,
    "11_ablate_fp32_max": ablate_11_fp32_max,
    "12_cluster_prefetch": cluster_prefetch,
    "13_cluster_one_exp": cluster_one_exp,
}
BEST = {"float32": "05_online_vec4", "float16": "07_fp16_pipelined"}


# ---- ablation: step 05 with ONE of its four changes undone (or step 04 with its first, two-exp update) ----------

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
    "04_ablate_two_exp": "step 04 with its first update: two guarded expf per element",
    "05_online_vec4": "step 05: all four changes",
    "05_ablate_no_vec_loads": "step 05 with scalar loads (vec_ok = 0) in place of 16-byte loads",
    "05_ablate_no_ex2": "step 05 with expf in place of ex2.approx",
    "05_ablate_no_reg_cache": "step 05 streaming the row twice in place of keeping it in registers",
    "05_ablate_block_256": "step 05 launched like step 04: 256 threads, one row per block "
                    "(rows over 8192 floats then no longer fit in registers: streamed)",
}
ABLATION = Family(
    name="softmax_ablation", kernels=FAMILY, case_key=case_key, make_input=make_input,
    reference=reference, bytes_moved=bytes_moved, tolerance=tolerance,
    variants={"04_online": online, "04_ablate_two_exp": online_two_exp, "05_online_vec4": online_vec4,
              "05_ablate_no_vec_loads": _ablate("05_ablate_no_vec_loads", vec_ok=0),
              "05_ablate_no_ex2": _ablate("05_ablate_no_ex2", "softmax_05_ablate_expf"),
              "05_ablate_no_reg_cache": _ablate("05_ablate_no_reg_cache", "softmax_05_ablate_stream"),
              "05_ablate_block_256": _ablate("05_ablate_block_256", threads=ROW_BLOCK)},
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


# ---- rows of at most 1024, where step 08 (the tutorial's safe_v1) runs, beside the steps that take any C ----------
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
