"""Input validation before a launch, and comparison against a NumPy reference."""
from __future__ import annotations

import numpy as np

from .device import is_live

# (rtol, atol) per output dtype. CuPy's NVRTC path flushes fp32 subnormals to zero
# (-ftz=true), so atol sits above the fp32 subnormal range.
TOLERANCE = {
    np.dtype(np.float64): (1e-10, 1e-300),
    np.dtype(np.float32): (1e-4, 1e-30),
    np.dtype(np.float16): (5e-3, 1e-6),
}


class CheckError(AssertionError):
    """A kernel's output does not match the reference."""


def require(x, name: str = "x", *, dtype=None, ndim=None, shape=None, contiguous=True,
            align: int | None = None):
    """Raise ValueError naming what was expected, before any launch."""
    import cupy
    if not isinstance(x, cupy.ndarray):
        raise ValueError(f"{name}: expected a cupy.ndarray on the GPU, got {type(x).__name__}")
    if dtype is not None:
        allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, (tuple, list)) else (dtype,))]
        if x.dtype not in allowed:
            raise ValueError(f"{name}: expected dtype {' or '.join(map(str, allowed))}, got {x.dtype}")
    if ndim is not None:
        allowed = ndim if isinstance(ndim, (tuple, list)) else (ndim,)
        if x.ndim not in allowed:
            raise ValueError(f"{name}: expected {' or '.join(map(str, allowed))}-D, got shape {x.shape}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(x.shape)}")
    if contiguous and not x.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array (strides {x.strides}); "
                         "use cupy.ascontiguousarray")
    if align and x.data.ptr % align:
        raise ValueError(f"{name}: expected a {align}-byte aligned base address")
    return x


def aligned(width: int, *arrays) -> bool:
    """True when every array's base address is a multiple of `width` bytes: what a vector
    load (float4, uint4: 16 bytes) needs before the launcher lets a kernel use it."""
    return all(a.data.ptr % width == 0 for a in arrays)


def out_like(out, x, name="out", shape=None, dtype=None):
    """Allocate the output, or validate a caller's `out` (used outside timed regions)."""
    import cupy
    shape = x.shape if shape is None else shape
    dtype = x.dtype if dtype is None else dtype
    if out is None:
        return cupy.empty(shape, dtype)
    require(out, name, dtype=dtype, shape=shape)
    return out


def check(got, want, *, name: str = "result", rtol=None, atol=None, quiet=False) -> dict:
    """Compare `got` with `want`: NaN and ±inf positions must match exactly, finite values
    within rtol/atol for got's dtype. Raises CheckError with the worst element on mismatch,
    prints one deterministic line on success."""
    got_np = got.get() if hasattr(got, "get") else np.asarray(got)
    want_np = np.asarray(want)
    if got_np.shape != want_np.shape:
        raise CheckError(f"{name}: shape {got_np.shape} != expected {want_np.shape}")
    r0, a0 = TOLERANCE.get(got_np.dtype, (1e-4, 1e-30))
    rtol = r0 if rtol is None else rtol
    atol = a0 if atol is None else atol
    g = got_np.astype(np.float64)
    w = want_np.astype(np.float64)
    for what, gm, wm in (("NaN", np.isnan(g), np.isnan(w)),
                         ("+inf", np.isposinf(g), np.isposinf(w)),
                         ("-inf", np.isneginf(g), np.isneginf(w))):
        bad = gm != wm
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise CheckError(f"{name}: {what} mismatch at {int(bad.sum())} of {g.size} elements; "
                             f"first at index {idx}: got {g[idx]!r}, expected {w[idx]!r}")
    fin = np.isfinite(w)
    with np.errstate(invalid="ignore"):
        err = np.where(fin, np.abs(g - w), 0.0)
    rel = np.where(fin, err / np.maximum(np.abs(w), 1e-300), 0.0)
    excess = err - (atol + rtol * np.abs(np.where(fin, w, 0.0)))
    stats = {"max_abs": float(err.max(initial=0.0)), "max_rel": float(np.where(err > atol, rel, 0).max(initial=0.0)),
             "n": int(g.size)}
    if (excess > 0).any():
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), g.shape))
        raise CheckError(f"{name}: {int((excess > 0).sum())} of {g.size} values outside rtol={rtol:g}, "
                         f"atol={atol:g}; max abs err {stats['max_abs']:.3e}, max rel err "
                         f"{stats['max_rel']:.3e}; worst at index {idx}: got {g[idx]!r}, expected {w[idx]!r}")
    if not quiet:
        print(f"{name}: OK  max abs err {stats['max_abs']:.1e}, max rel err {stats['max_rel']:.1e} "
              f"({stats['n']} values, {got_np.dtype})")
    return stats


def _pairs(got, want):
    """A variant may return several outputs (e.g. the fused kernel's (h, y)): pair them up."""
    return zip(got, want) if isinstance(want, tuple) else [(got, want)]


def variants(family, names=None, cases=None, dtype=None) -> None:
    """Check every variant of a family against family.reference on the family's awkward
    CHECK_CASES (irregular shapes x hostile values). One line per variant; raises on the
    first mismatch. Compile-only: runs the NumPy reference on the same cases and says so."""
    cases = family.CHECK_CASES if cases is None else cases
    names = list(family.VARIANTS) if names is None else list(names)
    for nm in names:
        fn = family.VARIANTS[nm]
        for dt in ([dtype] if dtype else list(fn.dtypes)):
            todo = [c for c in cases if fn.accepts(c)]
            skipped = len(cases) - len(todo)
            note = f" ({skipped} case(s) with values >= 89 left out: this step is not overflow-safe)" \
                if skipped else ""
            worst = 0.0
            for shape, values in todo:
                host = family.make_input(shape, dt, values)
                want = family.reference(*host)
                if not is_live():
                    continue
                import cupy
                got = fn(*[cupy.asarray(a) for a in host])
                for g, w in _pairs(got, want):
                    worst = max(worst, check(g, w, name=f"{family.NAME} {nm} {dt} {shape} {values}",
                                             quiet=True)["max_rel"])
            if is_live():
                print(f"{family.NAME} {nm:<18} {dt:<9}: {len(todo)} cases OK, max rel err {worst:.1e}{note}")
            else:
                print(f"{family.NAME} {nm:<18} {dt:<9}: SKIPPED (compile-only): NumPy reference ran on "
                      f"{len(todo)} cases; a GPU would run the kernel on each and compare{note}")


def run_variant(family, name, *host_args):
    """Run one variant on host (NumPy) inputs and return its output as NumPy (live), or
    print what a GPU would do and return None (compile-only)."""
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU this runs {family.NAME} {name} on inputs of shape "
              f"{[a.shape for a in host_args]}; the NumPy lines above show what to expect.")
        return None
    import cupy
    return family.VARIANTS[name](*[cupy.asarray(a) for a in host_args]).get()


def grade_exercise(src, kernel_name, *, ptx_must_contain, make_input, reference, grid, block,
                   scalars=lambda *inputs: ()):
    """Compile an exercise for sm_87 + sm_90, require each string of ptx_must_contain in its PTX,
    and on a GPU run it and compare with the NumPy reference. The kernel's arguments are the
    inputs, then one output per array the reference returns, then scalars(*inputs).
    Raises on any failure."""
    from .build import ARCHS, compile_source, kernel_args, nvrtc_compile
    fn = compile_source(src, kernel_name)
    needles = (ptx_must_contain,) if isinstance(ptx_must_contain, str) else tuple(ptx_must_contain)
    for arch in ARCHS:
        ptx = nvrtc_compile(src, arch, f"{kernel_name}.cu")[0]
        for needle in needles:
            if needle not in ptx:
                raise CheckError(f"exercise: no {needle} in the {arch} PTX; the stub is not done yet")
    print(f"exercise compiles for {', '.join(ARCHS)} and its PTX contains {', '.join(needles)}")
    inputs = make_input()
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    want = reference(*inputs)
    if fn is None:
        print("SKIPPED (compile-only): on a GPU the kernel runs and is compared with NumPy.")
        return
    import cupy
    wants = want if isinstance(want, tuple) else (want,)
    outs = [cupy.empty(w.shape, w.dtype) for w in wants]
    fn(grid(*inputs), block, kernel_args([cupy.asarray(a) for a in inputs] + outs + list(scalars(*inputs))))
    for k, (g, w) in enumerate(zip(outs, wants)):
        check(g, w, name=f"exercise {kernel_name}" + (f" output {k}" if len(wants) > 1 else ""))


def error_sweep(family, names, sizes, dtype="float32", rows=4):
    """Max relative error against the float64 reference for each variant at each row length:
    {name: [err per size]} (live), or {} with a note (compile-only)."""
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU this measures each variant's error against float64 "
              f"at row lengths {sizes}.")
        return {}
    import cupy
    errs = {}
    for nm in names:
        fn = family.VARIANTS[nm]
        out = []
        for c in sizes:
            (x,) = family.make_input((rows, c), dtype, "randn", seed=c)
            want = family.reference(x.astype(np.float64))
            got = fn(cupy.asarray(x)).get().astype(np.float64)
            out.append(float(np.max(np.abs(got - want) / np.abs(want))))
        errs[nm] = out
    return errs
