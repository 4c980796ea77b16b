"""Add family (seed 004): residual adds (fp32, fp16), the bias add (BIAS) and DeepStack's add_into_rows."""
from __future__ import annotations

import numpy as np

from .core.build import define
from .core.device import torch as torch_module
from .core.family import Family, Target
from .core.launch import launch, variant
from .core.launch import aligned, int32_size as _size_ok, out_like, require

NAME = "add"
FAMILY = "add"
BIAS_ROWS = 1              # rows per thread of step 07
DEFINES = define(FAMILY, BIAS_ROWS=BIAS_ROWS)   # -D: add.cu's #ifndef default agrees (tests/test_constants.py)

SHAPES = {
    "decode_residual_4096": (4096,),             # one token's residual add (Qwen3-8B: 72 per token)
    "seed_4096x512": (4096 * 512,),              # the seed's ncu case: 2,097,152 elements
    "64M": (2 ** 26,),                           # 256 MiB of fp32 per operand: the bandwidth target
    "64M_plus_3": (2 ** 26 + 3,),                # and a tail
}
SWEEP = [(2 ** k,) for k in range(12, 27, 2)]
RECORD_CASES = [(s, dt) for dt in ("float32", "float16")
                for s in dict.fromkeys(SWEEP + list(SHAPES.values()))]
CHECK_SIZES = [1, 7, 31, 1023, 1152, 3584, 4097, 3 * 4096 + 5, 512 * 4097]
CHECK_CASES = [((n,), v) for n in CHECK_SIZES for v in ("randn", "large", "hostile")] + [((0,), "randn")]


def case_key(shape, dtype) -> str:
    return f"{'x'.join(map(str, shape))}:{dtype}"


def _values(shape, dtype, values, rng, shift=0):
    """N(0, 1); 'large' near the top of the range; 'hostile' +-inf, NaN, the largest and smallest values."""
    x = rng.standard_normal(shape)
    top = 65504.0 if dtype == "float16" else 3e38
    if values == "large":
        x = np.clip(x * top / 2, -top, top)
    elif values == "hostile" and x.size:
        f = x.reshape(-1)
        picks = [np.inf, -np.inf, np.nan, top, -top, 6e-8 if dtype == "float16" else 1e-40]
        picks = picks[shift:] + picks[:shift]      # the second operand's picks are rotated: inf + -inf
        for k, v in enumerate(picks):
            f[k * 7 % f.size::max(1, f.size // 3)] = v
    return x.astype(dtype)


def make_input(shape, dtype="float32", values="randn", seed=0):
    rng = np.random.default_rng(seed)
    return _values(shape, dtype, values, rng), _values(shape, dtype, values, rng, shift=1)


def reference(a, b):
    """The sum in float64, rounded once to the inputs' dtype (what one fp32/fp16 add does)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.asarray(a, np.float64) + np.asarray(b, np.float64)).astype(a.dtype)


def bytes_moved(a, b, *_):
    return a.nbytes + b.nbytes + a.nbytes


# ---- launchers ----------------------------------------------------------------------------------

def _elementwise(name, dtype, block, per_thread, vec_bytes=0):
    """Launcher for an element-wise step: each thread handles per_thread elements."""
    def run(a, b, out=None):
        require(a, "a", dtype=dtype)
        require(b, "b", dtype=dtype, shape=a.shape)
        out_ = out_like(out, a)
        n = a.size
        _size_ok(n)
        if n:
            extra = (int(aligned(vec_bytes, a, b, out_)),) if vec_bytes else ()
            launch(FAMILY, f"add_{name}", (-(-n // (block * per_thread)),), (block,), (a, b, out_, n, *extra))
        return out_
    run.__name__ = name
    return run


# In place (out=a or out=b, the residual add h += x) is supported: each thread reads an index,
# then writes that same index, so even the __restrict__/__ldg steps see no value they wrote.
# Any other overlap is a ValueError (build.Variant -> check.no_alias).
_ew = dict(inplace=True)
VARIANTS = {
    "01_f32_scalar": variant(**_ew)(_elementwise("01_f32_scalar", "float32", 512, 1)),
    "02_f32_float4": variant(**_ew)(_elementwise("02_f32_float4", "float32", 256, 4, 16)),
    "03_fp16_half2": variant(dtypes=("float16",), **_ew)(_elementwise("03_fp16_half2", "float16", 256, 2, 4)),
    "04_fp16_vec8": variant(dtypes=("float16",), **_ew)(_elementwise("04_fp16_vec8", "float16", 256, 8, 16)),
    # step 04 without __restrict__ / __ldg: the ablation that splits 03 -> 04 (and 08 -> 04) into width and qualifiers
    "04_ablate_plain": variant(dtypes=("float16",), **_ew)(_elementwise("04_ablate_plain", "float16", 256, 8, 16)),
    "08_vec_fp16_scalar": variant(dtypes=("float16",), **_ew)(
        _elementwise("08_vec_fp16_scalar", "float16", 256, 1)),
}
BEST = {"float32": "02_f32_float4", "float16": "04_fp16_vec8"}


def _cupy(a, b):
    """cupy.add into a preallocated output (b may broadcast, as the bias does)."""
    import cupy
    o = cupy.empty_like(a)
    return lambda: cupy.add(a, b, out=o)


def _torch(a, b):
    torch = torch_module()
    if torch is None:
        return None
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    to = torch.empty_like(ta)
    return lambda: torch.add(ta, tb, out=to)


BASELINES = {"cupy +": _cupy, "torch.add": _torch}


# ---- the broadcast bias add: out[r, c] = m[r, c] + bias[c], fp16 -------------------------------

def _bias_input(shape, dtype="float16", values="randn", seed=0):
    rng = np.random.default_rng(seed)
    return _values(shape, dtype, values, rng), _values(shape[-1:], dtype, values, rng, shift=1)


def _bias_bytes(m, bias, *_):
    return 2 * m.nbytes + bias.nbytes


def _bias_step(name, cols_per_thread, two_d):
    def run(m, bias, out=None):
        require(m, "matrix", dtype="float16", ndim=2)
        require(bias, "bias", dtype="float16", shape=m.shape[-1:])
        out_ = out_like(out, m)
        rows, cols = m.shape
        _size_ok(m.size)
        if m.size:
            if not two_d:
                launch(FAMILY, f"add_{name}", (-(-m.size // 256),), (256,), (m, bias, out_, rows, cols))
            else:
                rows_per_block = BIAS_ROWS if cols_per_thread > 1 else 1
                grid = (-(-cols // (256 * cols_per_thread)), min(-(-rows // rows_per_block), 65535))
                extra = (int(cols % 8 == 0 and aligned(16, m, bias, out_)),) if cols_per_thread > 1 else ()
                launch(FAMILY, f"add_{name}", grid, (256,), (m, bias, out_, rows, cols, *extra))
        return out_
    run.__name__ = name
    return run


BIAS_COLS = [1000, 1152, 3584, 4096, 4099, 11008, 151936]     # the modulo sweep: 2**25 elements each
BIAS_SHAPES = {"seed_qkv_bias_512x4096": (512, 4096), "64M_16384x4096": (16384, 4096)}
BIAS_SWEEP = [(2 ** 25 // c, c) for c in BIAS_COLS]
BIAS = Family(
    name="bias_add", kernels=FAMILY, case_key=case_key, make_input=_bias_input, reference=reference,
    bytes_moved=_bias_bytes,
    variants={"05_bias_mod": variant(dtypes=("float16",))(_bias_step("05_bias_mod", 1, False)),
              "06_bias_2d": variant(dtypes=("float16",))(_bias_step("06_bias_2d", 1, True)),
              # step 06 without __restrict__ / __ldg: splits 05 -> 06 into the grid (modulo gone) and the qualifiers
              "06_ablate_plain": variant(dtypes=("float16",))(_bias_step("06_ablate_plain", 1, True)),
              "07_bias_2d_vec8": variant(dtypes=("float16",))(_bias_step("07_bias_2d_vec8", 8, True))},
    default={"float16": "07_bias_2d_vec8"},
    baselines={"cupy + (broadcast)": _cupy, "torch.add (broadcast)": _torch},
    shapes=BIAS_SHAPES,
    record_cases=[(s, "float16") for s in dict.fromkeys(list(BIAS_SHAPES.values()) + BIAS_SWEEP)],
    check_cases=[(s, v) for s in [(1, 1), (3, 31), (1, 1023), (3, 1152), (5, 3584), (64, 4097), (70000, 8),
                                  (512, 1000), (0, 8)]
                 for v in ("randn", "large", "hostile")],
)

# ---- DeepStack: x[row0 : row0 + k, :] += feats, in place ----------------------------------------

def _span(a):
    return a.data.ptr, a.data.ptr + a.nbytes


def add_into_rows(x, feats, row0):
    """Add feats (k, hidden) into rows row0 .. row0 + k - 1 of x, in place, fp16; a bad slice is a ValueError."""
    require(x, "x", dtype="float16", ndim=2)
    require(feats, "feats", dtype="float16", ndim=2)
    if not isinstance(row0, (int, np.integer)) or isinstance(row0, bool):
        raise ValueError(f"row0: expected an int, got {type(row0).__name__}")
    rows, cols = x.shape
    k = feats.shape[0]
    if feats.shape[1] != cols:
        raise ValueError(f"feats: expected {cols} columns (x's hidden size), got {feats.shape[1]}")
    if row0 < 0 or row0 + k > rows:
        raise ValueError(f"rows {row0}..{row0 + k - 1} are outside x's {rows} rows")
    (x0, x1), (f0, f1) = _span(x), _span(feats)
    if feats.size and x0 < f1 and f0 < x1:
        raise ValueError("feats overlaps x: an in-place add needs a separate source buffer")
    n = k * cols
    _size_ok(n)
    if n:
        view = x[row0:row0 + k]
        launch(FAMILY, "add_09_rows_inplace", (-(-n // (256 * 8)),), (256,),
               (view, feats, n, int(aligned(16, view, feats))))
    return x


def rows_reference(x, feats, row0):
    """NumPy: a copy of x with feats added into rows row0 .. row0 + k - 1."""
    out = np.array(x, copy=True)
    out[row0:row0 + len(feats)] = reference(out[row0:row0 + len(feats)], feats)
    return out


def _targets(n=2 ** 26):
    from .core.results import frac_band, ratio_band
    return [t for dt, best in BEST.items() for c in (case_key((n,), dt),) for t in (
        Target(f"{dt} at 2^26: `{best}`, fraction of the copy roof", lambda df, b=best, c=c: frac_band(df, b, c), 0.95),
        Target(f"{dt} at 2^26: `{best}` vs torch.add", lambda df, b=best, c=c: ratio_band(df, b, "torch.add", c), 0.97))]


ADD = Family(
    name=NAME, kernels=FAMILY, variants=VARIANTS, reference=reference, make_input=make_input,
    bytes_moved=bytes_moved, check_cases=CHECK_CASES, baselines=BASELINES, shapes=SHAPES, default=BEST,
    case_key=case_key, record_cases=RECORD_CASES, targets=_targets(),
    about="lab 03: residual adds and broadcast bias")
FAMILIES = [ADD, BIAS]


# Per residual-add step: its load width per operand (one load per operand per thread) and its block
# size. tests/test_compile.py checks each width against the step's PTX.
LOADS = {"01_f32_scalar": (4, 512), "02_f32_float4": (16, 256), "03_fp16_half2": (4, 256),
         "04_fp16_vec8": (16, 256), "08_vec_fp16_scalar": (2, 256)}


def in_flight(step, blocks_per_sm) -> dict:
    """Little's law's input for one step: bytes in flight per thread (2 operands) and per SM."""
    width, block = LOADS[step]
    return {"load bytes per operand": width, "bytes in flight per thread": 2 * width,
            "threads per SM": block * blocks_per_sm, "KiB in flight per SM": 2 * width * block * blocks_per_sm / 1024}


def waves(n, block, per_thread, sms, blocks_per_sm) -> dict:
    """How an element-wise launch of n elements fills the GPU (bench.waves)."""
    from .core.bench import waves as _waves
    return _waves(-(-n // (block * per_thread)), sms, blocks_per_sm)
