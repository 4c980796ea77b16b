"""Input validation before a launch, and comparison against a NumPy reference."""
from __future__ import annotations

import functools
import re

import numpy as np

from .build import ARCHS, CompileError, compile_source, nvrtc_compile
from .device import is_live, need_gpu
from .family import of
from .frame import step_name
from .launch import Variant, kernel_args, require

# (rtol, atol) per output dtype. CuPy's NVRTC path flushes fp32 subnormals to zero
# (-ftz=true), so atol sits above the fp32 subnormal range.
TOLERANCE = {
    np.dtype(np.float64): (1e-10, 1e-300),
    np.dtype(np.float32): (1e-4, 1e-30),
    np.dtype(np.float16): (5e-3, 1e-6),
}


class CheckError(AssertionError):
    """A kernel's output does not match the reference."""


def check(got, want, *, name: str = "result", rtol=None, atol=None, quiet=False) -> dict:
    """Compare `got` with `want`: NaN and ±inf positions exactly, finite values within rtol/atol (TOLERANCE)."""
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


# What a PTX needle of an exercise shows, in the learner's terms (for the NOT YET / NOT CHECKED lines).
PTX_MEANS = {
    "shfl.sync": "a warp shuffle: __shfl_xor_sync, __shfl_down_sync, ...",
    "shfl.sync.bfly": "a butterfly warp shuffle: __shfl_xor_sync",
    "st.shared": "a store to shared memory",
    "ld.shared": "a load from shared memory",
    "bar.sync": "a block barrier: __syncthreads()",
    "ex2.approx": "an exponential: exp2f, expf or __expf",
    "div.rn.": "a floating-point division",
    "ld.global.nc.v4": "a 16-byte read-only load: uint4 or float4 through __ldg or const __restrict__",
    "ld.global.nc.v4.f32": "a 16-byte read-only float4 load: __ldg or const __restrict__",
    "ld.global.nc.v4.u32": "a 16-byte read-only uint4 load: __ldg or const __restrict__",
    "ld.global.v4.f32": "a 16-byte float4 load",
    "st.global.v4": "a 16-byte store: uint4 or float4",
    "st.global.v4.f32": "a 16-byte float4 store",
    "st.global.v4.u32": "a 16-byte uint4 store",
}


def _needles(ptx_must_contain) -> list[tuple[str, ...]]:
    """ptx_must_contain as a list of needles, each a tuple of alternatives (a string: a needle of its own); None
    or empty: none asked for (a GRADE written before the needles were)."""
    if isinstance(ptx_must_contain, (str, tuple)):
        ptx_must_contain = [ptx_must_contain]
    return [(n,) if isinstance(n, str) else tuple(n) for n in ptx_must_contain or () if n]


def _say_needle(alts) -> str:
    words = " or ".join(f"`{n}`" for n in alts)
    means = PTX_MEANS.get(alts[0])
    return f"{words} ({means})" if means else words


_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"|' + r"'(?:\\.|[^'\\\n])*'", re.S)
_TODO = re.compile(r"\bTODO\b")


def code_only(src: str) -> str:
    """CUDA source with its comments and literals blanked out, newlines kept (line numbers match)."""
    return _COMMENT_OR_LITERAL.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), src)


def todo_lines(src: str) -> list[int]:
    """The lines (1-based, as NVRTC counts them) where the code, not a comment, says TODO."""
    code = code_only(src)
    return sorted({code.count("\n", 0, m.start()) + 1 for m in _TODO.finditer(code)})


def _pairs(got, want):
    """A variant may return several outputs (e.g. the fused kernel's (h, y)): pair them up."""
    return zip(got, want) if isinstance(want, tuple) else [(got, want)]


def variants(family, names=None, cases=None, dtype=None) -> None:
    """Check every variant of a family against family.reference on its check_cases, within family.tolerance
    (the worst error then a fraction of what is allowed): a line per variant, raising on the first mismatch;
    compile-only, the NumPy reference runs on the same cases."""
    fam = of(family)
    cases = fam.check_cases if cases is None else cases
    live = is_live()
    todo = {}
    for nm in (list(fam.variants) if names is None else [step_name(fam, n) for n in names]):
        fn = fam.variants[nm]
        if live and not fn.runs_here():
            print(f"{fam.name} {nm:<24}: SKIPPED: needs sm_{fn.min_arch} or newer; this GPU cannot run it "
                  "(it compiles, and its PTX is shown, on any machine)")
            continue
        for dt in ([dtype] if dtype else list(fn.dtypes)):
            todo[nm, dt] = [0, 0.0]
    for i, (shape, values) in enumerate(cases):
        for dt in dict.fromkeys(dt for _, dt in todo):
            runs = [nm for (nm, d) in todo if d == dt and fam.variants[nm].accepts((shape, values))]
            if not runs:
                continue
            host = fam.make_input(shape, dt, values, seed=i)
            want = fam.reference(*host)
            tol = fam.tolerance(*host) if fam.tolerance else {}
            for nm in runs:
                todo[nm, dt][0] += 1
                if not live:
                    continue
                import cupy
                got = fam.variants[nm](*[cupy.asarray(a) for a in host])
                for g, w in _pairs(got, want):
                    st = check(g, w, name=f"{fam.name} {nm} {dt} {shape} {values}", quiet=True, **tol)
                    todo[nm, dt][1] = max(todo[nm, dt][1], _allowed_share(g, w, tol) if tol else st["max_rel"])
    what = "of the allowed error" if fam.tolerance else "max rel err"
    for (nm, dt), (n, worst) in todo.items():
        note = f" ({len(cases) - n} case(s) left out: this step is not overflow-safe)" if n < len(cases) else ""
        if live:
            print(f"{fam.name} {nm:<24} {dt:<11}: {n} cases OK, worst {worst:.2g} {what}{note}")
        else:
            print(f"{fam.name} {nm:<24} {dt:<11}: SKIPPED (compile-only): NumPy reference ran on "
                  f"{n} cases; a GPU would run the kernel on each and compare{note}")


def _allowed_share(got, want, tol) -> float:
    """The largest error as a fraction of what the tolerance allows there."""
    g = (got.get() if hasattr(got, "get") else np.asarray(got)).astype(np.float64)
    w = np.asarray(want, np.float64)
    fin = np.isfinite(w)
    allowed = tol["atol"] + tol["rtol"] * np.abs(w[fin])
    return float(np.max(np.abs(g[fin] - w[fin]) / allowed, initial=0.0))


def run_variant(family, name, *host_args):
    """One variant's output on NumPy inputs, as NumPy (live); compile-only, None and what a GPU would do."""
    family = of(family)
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU this runs {family.name} {name} on inputs of shape "
              f"{[a.shape for a in host_args]}; the NumPy lines above show what to expect.")
        return None
    import cupy
    return family.variants[name](*[cupy.asarray(a) for a in host_args]).get()


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def grade_exercise(src, kernel_name, *, make_input, reference, grid, block,
                   scalars=lambda *inputs: (), ptx_must_contain=(), step=None, strict=False, tolerance=None):
    """Grade a learner's kernel: no TODO left in its code, it compiles for sm_87 + sm_90 with each needle of
    ptx_must_contain in its PTX; on a GPU, its outputs match reference(*inputs) and it is timed against
    step=(label, fn); without one, blocks of it run on the CPU (_on_cpu). Its arguments: the inputs, one
    output per array the reference returns, scalars(*inputs). A failure prints "NOT YET: <reason>" and
    returns None (Run All goes on); strict=True (the solution cell) raises. Returns what was measured."""
    try:
        return _grade(src, kernel_name, make_input, reference, grid, block, scalars,
                      ptx_must_contain, step, tolerance or {})
    except Exception as e:
        if strict:
            raise
        if isinstance(e, (CheckError, CompileError, ValueError, TypeError)):
            print(f"NOT YET: {e}")
        else:    # a crash on the GPU (illegal address, launch failure)
            print(f"NOT YET: the kernel failed to run: {type(e).__name__}: {e}\n"
                  "An illegal memory access leaves the GPU context unusable: restart the kernel "
                  "(Kernel > Restart) after fixing the indexing.")
    return None


# The bit pattern an output holds before the emulated blocks run: a NaN no kernel computes, so an element
# still holding it was not written by those blocks (the rest of the grid did not run).
_UNWRITTEN = {np.dtype(np.float32): np.uint32(0x7FBADBAD), np.dtype(np.float16): np.uint16(0x7DBD)}


def _on_cpu(src, kernel_name, inputs, wants, grid, block, scalars, tol):
    """Without a GPU: the first, second and last blocks run on the CPU (core.emulate), compared with the reference.
    None when they match, else why the emulation could not run; CheckError when the kernel is wrong."""
    from . import emulate
    outs = []
    for w in wants:
        o = np.empty(w.shape, w.dtype)
        bits = _UNWRITTEN.get(w.dtype)
        if bits is None:
            return f"the emulation compares float32 and float16 outputs only, not {w.dtype}"
        o.view(bits.dtype)[...] = bits
        outs.append(o)
    try:
        g, b = _as_tuple(grid(*inputs)), _as_tuple(block)
    except Exception as e:          # a grid sized from the GPU's own facts (lab 00: 4 blocks per SM)
        return f"the launch's grid is sized from the GPU ({type(e).__name__}), so the CPU emulation has none"
    try:
        after, blocks = emulate.run(src, kernel_name, [np.asarray(a) for a in inputs] + outs,
                                    list(scalars(*inputs)), g, b)
    except emulate.Unavailable as e:
        return str(e)
    except emulate.Failed as e:
        raise CheckError(f"run on the CPU (no GPU here, so blocks of your grid run as CPU threads), {e}") from None
    got = after[len(inputs):]
    where = ", ".join(str(x[0]) if len(g) == 1 else str(x[:len(g)]) for x in blocks)
    n, worst = 0, 0.0
    for k, (o, w) in enumerate(zip(got, wants)):
        name = f"output {k} " if len(wants) > 1 else ""
        written = o.view(_UNWRITTEN[w.dtype].dtype) != _UNWRITTEN[w.dtype]
        if not written.any():
            raise CheckError(f"run on the CPU (blocks {where} of your grid of {g}, no GPU here), your kernel wrote "
                             f"nothing to its {name or 'output'}: each block must write its part of the result")
        st = check(o[written], np.asarray(w)[written], quiet=True, **tol,
                   name=f"your {kernel_name} {name}(blocks {where} run on the CPU: no GPU here)")
        n, worst = n + int(written.sum()), max(worst, st["max_rel"])
    print(f"CHECKED ON THE CPU (no GPU here): blocks {where} of your grid of {g} ran as CPU threads "
          f"(__syncthreads and warp shuffles emulated, core/emulate.py) and the {n} values they wrote match "
          f"NumPy (max rel err {worst:.1e}). The other blocks run only on a GPU.")
    return None


def _grade(src, kernel_name, make_input, reference, grid, block, scalars, ptx_must_contain, step, tol):
    needles = _needles(ptx_must_contain)
    todo = todo_lines(src)
    if todo:       # the stubs mark the unfinished code with a `TODO;` statement (it does not compile)
        where = f"line {todo[0]}" if len(todo) == 1 else f"lines {', '.join(map(str, todo[:-1]))} and {todo[-1]}"
        raise CheckError(f"the stub still has its TODO in the code ({where}): write your code there and "
                         "delete the `TODO;` (a TODO in a comment is fine)")
    ptxs = {arch: nvrtc_compile(src, arch, f"{kernel_name}.cu")[0] for arch in ARCHS}
    if f".entry {kernel_name}(" not in ptxs[ARCHS[0]]:
        raise CheckError(f"no kernel named {kernel_name} in the source (is it extern \"C\" __global__?)")
    for arch, ptx in ptxs.items():
        for alts in needles:
            if not any(n in ptx for n in alts):
                raise CheckError(f"the {arch} PTX has no {_say_needle(alts)} yet, so your kernel does not "
                                 "do what the exercise asks (see its text)")
    found = "; ".join(_say_needle(alts) for alts in needles)
    print(f"compiles for {', '.join(ARCHS)}" + (f"; its PTX has {found}" if needles else ""))
    inputs = _as_tuple(make_input())
    wants = _as_tuple(reference(*inputs))
    fn = compile_source(src, kernel_name) if is_live() else None
    if fn is None:
        why = _on_cpu(src, kernel_name, inputs, wants, grid, block, scalars, tol)
        if why is None:
            print("Not timed: timing needs a GPU" + (f"; on one it is timed against {step[0]}." if step else "."))
            return None
        print("NOT CHECKED (no GPU): checked here: no TODO left in the code, it compiles for "
              + " and ".join(ARCHS) + (", and its PTX has the instructions above" if needles else "")
              + f". Not checked: whether it computes the right answer ({why}), so a "
              "wrong kernel that passes these checks gets this same line. On a GPU it runs on inputs of "
              f"shape {[getattr(a, 'shape', ()) for a in inputs]}, is compared with NumPy and timed"
              + (f" against {step[0]}." if step else "."))
        return None
    import cupy
    from .bench import time_fn
    dev_in = [cupy.asarray(a) for a in inputs]
    outs = [cupy.full(w.shape, np.nan, w.dtype) if w.dtype.kind == "f" else cupy.empty(w.shape, w.dtype)
            for w in wants]
    args = kernel_args(dev_in + outs + list(scalars(*inputs)))
    g, b = _as_tuple(grid(*inputs)), _as_tuple(block)
    fn(g, b, args)
    cupy.cuda.Device().synchronize()
    for k, (got, want) in enumerate(zip(outs, wants)):
        check(got, want, name=f"your {kernel_name}" + (f" output {k}" if len(wants) > 1 else ""), **tol)
    mine = time_fn(lambda: fn(g, b, args))
    result = {"your_us": mine.median_us}
    line = f"your kernel {mine.median_us:.1f} µs"
    if step is not None:
        label, step_fn = step
        if isinstance(step_fn, Variant):     # its out allocated here, outside the timing
            step_fn = functools.partial(step_fn, out=step_fn.alloc_out(*dev_in))
        theirs = time_fn(lambda: step_fn(*dev_in))
        result.update(step=label, step_us=theirs.median_us)
        r = theirs.median_us / mine.median_us
        line += (f", {label} {theirs.median_us:.1f} µs: yours is {r:.2f}x "
                 + ("faster" if r > 1 else "slower" if r < 1 else "as fast"))
    print(line + " (GPU time, L2 flushed, medians)")
    return result


def register(family, name: str, src: str, kernel_name: str, *, grid, block,
             scalars=lambda *inputs: (), dtypes=("float32",), overflow_safe=True, alloc_out=None):
    """Add your own kernel to a family as variant `name` (taking the inputs, the output(s) alloc_out(*inputs),
    then scalars(*inputs)), so the harness checks and times it; registered again, it is replaced."""
    family = of(family)
    if not isinstance(name, str) or not name:
        raise ValueError("register: name must be a non-empty string such as '07_mine'")
    if name in family.variants and "check.register" not in (family.variants[name].__doc__ or ""):
        raise ValueError(f"{family.name} already has a step named {name!r}; pick another name")
    fn = compile_source(src, kernel_name)

    def launcher(*inputs, out=None):
        if fn is None:
            need_gpu(f"running {name}")
        for k, a in enumerate(inputs):
            require(a, f"input {k}", dtype=dtypes if k == 0 else None)
        out = v.alloc_out(*inputs) if out is None else out
        outs = list(out) if isinstance(out, tuple) else [out]
        if all(a.size for a in inputs):
            fn(_as_tuple(grid(*inputs)), _as_tuple(block),
               kernel_args(list(inputs) + outs + list(scalars(*inputs))))
        return out

    launcher.__name__ = name
    launcher.__doc__ = f"learner's kernel {kernel_name}, registered with check.register"
    v = Variant(launcher, dtypes=dtypes, overflow_safe=overflow_safe, alloc_out=alloc_out)
    family.variants[name] = v
    print(f"{family.name}: registered {name} ({kernel_name}), compiled for sm_87 and sm_90; "
          f"steps now: {', '.join(family.variants)}")
    return v


def unregister(family, name: str) -> None:
    """Remove a variant added with check.register (the lab's own steps cannot be removed)."""
    family = of(family)
    v = family.variants.get(name)
    if v is None or "check.register" not in (v.__doc__ or ""):
        raise ValueError(f"{family.name} has no registered learner variant {name!r}")
    del family.variants[name]


def error_sweep(family, names, sizes, dtype="float32", rows=4):
    """{name: [max rel err against float64 per row length]} (live), or {} with a note (compile-only)."""
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU this measures each variant's error against float64 "
              f"at row lengths {sizes}.")
        return {}
    import cupy
    family = of(family)
    errs = {}
    for nm in names:
        fn = family.variants[nm]
        out = []
        for c in sizes:
            (x,) = family.make_input((rows, c), dtype, "randn", seed=c)
            want = family.reference(x.astype(np.float64))
            got = fn(cupy.asarray(x)).get().astype(np.float64)
            out.append(float(np.max(np.abs(got - want) / np.abs(want))))
        errs[nm] = out
    return errs
