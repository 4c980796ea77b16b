"""Compile kernels/<family>.cu and show what the compiler made of it.

Live mode compiles each family once per process with cupy.RawModule for the GPU at hand.
Both modes can compile with NVRTC for sm_87 (Jetson Orin) and sm_90 (Hopper), with
`-Xptxas -v`, to show registers, spills, shared memory and PTX: that needs no GPU.
"""
from __future__ import annotations

import functools
import operator
import os
import re
from pathlib import Path

from .device import ROOT, is_live, need_gpu

KERNELS = ROOT / "kernels"
ARCHS = ("sm_87", "sm_90")
STD = "-std=c++17"
_MARK = re.compile(r"^// === (\w+) ===\s*$", re.M)


class CompileError(RuntimeError):
    pass


def source(family: str) -> str:
    path = KERNELS / f"{family}.cu"
    if not path.exists():
        raise ValueError(f"no kernel family {family!r}: expected {path}")
    return path.read_text()


def steps(family: str) -> list[str]:
    """The marked steps of a family, in file order."""
    return _MARK.findall(source(family))


def step_source(family: str, step: str) -> str:
    """The slice of the .cu file from the step's marker to the next marker."""
    src = source(family)
    name = step if step.startswith(family + "_") else f"{family}_{step}"
    marks = list(_MARK.finditer(src))
    for i, m in enumerate(marks):
        if m.group(1) == name:
            end = marks[i + 1].start() if i + 1 < len(marks) else len(src)
            return src[m.start():end].rstrip() + "\n"
    raise ValueError(f"{family}.cu has no step {name!r}; steps: {steps(family)}")


@functools.lru_cache(maxsize=None)
def include_dirs() -> tuple[str, ...]:
    """kernels/, CuPy's headers (incl. its bundled CUB/Thrust/libcu++), and the CUDA headers."""
    import cupy
    inc = [str(KERNELS)]
    core = Path(cupy.__file__).parent / "_core" / "include"
    inc.append(str(core))
    for sub in ("libcudacxx", "cub", "thrust"):
        if (core / "cupy" / "_cccl" / sub).is_dir():
            inc.append(str(core / "cupy" / "_cccl" / sub))
    cand = []
    try:
        from cuda import pathfinder
        cand.append(pathfinder.find_nvidia_header_directory("cudart"))
    except Exception:
        pass
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            cand.append(os.path.join(os.environ[env], "include"))
    cand.append("/usr/local/cuda/include")
    for c in cand:
        if c and os.path.exists(os.path.join(c, "cuda_fp16.h")):
            inc.append(c)
            break
    return tuple(inc)


def _options(extra=()) -> tuple[str, ...]:
    return (STD, *[f"-I{d}" for d in include_dirs()], *extra)


# ---- live: RawModule ----------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def module(family: str, extra: tuple = ()):
    """The family's cupy.RawModule, compiled once per process and per `extra` options (e.g. a
    -D of an ablation build; live mode only)."""
    need_gpu(f"compiling {family}.cu into a RawModule")
    import cupy
    return cupy.RawModule(code=source(family), options=_options(extra), name_expressions=None)


_KERNELS: dict = {}     # (family, name) -> RawKernel: one dict lookup per launch


def kernel(family: str, name: str):
    """A compiled kernel by its full name, e.g. kernel('softmax', 'softmax_04_online')."""
    k = _KERNELS.get((family, name))
    if k is None:
        k = _KERNELS[family, name] = module(family).get_function(name)
    return k


# ---- both modes: NVRTC for a named arch -------------------------------------------------------

# What CuPy adds to a RawModule's options before NVRTC compiles it (cupy/cuda/compiler.py:
# _compile_with_cache_cuda adds -ftz=true, _compile_using_nvrtc adds the architecture and
# --device-as-default-execution-space). The teaching compile uses the same flags, so the PTX
# and the ptxas -v numbers shown are those of the binary that is timed.
# tests/test_measure.py asks CuPy itself for its flags and fails if this list falls behind.
CUPY_FLAGS = ("-ftz=true", "--device-as-default-execution-space")


def nvrtc_options(arch: str, extra=()) -> list[str]:
    """NVRTC options of the teaching compile for `arch`: RawModule's own, plus -Xptxas -v
    (register/spill report) and -lineinfo, which change no instruction."""
    return [f"--gpu-architecture={arch}", *_options(), *CUPY_FLAGS, "-Xptxas", "-v", "-lineinfo", *extra]


def nvrtc_compile(src: str, arch: str, name: str = "kernel.cu", extra=()) -> tuple[str, str]:
    """Compile to a cubin for `arch` with the options CuPy's RawModule uses, plus -Xptxas -v
    (and `extra` options, e.g. a -D). Returns (ptx, log). No GPU needed."""
    from cupy_backends.cuda.libs import nvrtc
    prog = nvrtc.createProgram(src, name, [], [])
    opts = nvrtc_options(arch, extra)
    if tuple(nvrtc.getVersion()) >= (12, 9):
        opts.append("--no-cache")   # NVRTC >= 12.9 caches compiles, and a cache hit prints no ptxas info
    try:
        nvrtc.compileProgram(prog, opts)
    except Exception as e:
        raise CompileError(f"{name} failed to compile for {arch}:\n{nvrtc.getProgramLog(prog)}") from e
    ptx = nvrtc.getPTX(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    return ptx, nvrtc.getProgramLog(prog)


@functools.lru_cache(maxsize=None)
def compiled(family: str, arch: str) -> tuple[str, str]:
    return nvrtc_compile(source(family), arch, f"{family}.cu")


def compile_all(family: str) -> None:
    """Compile a family for every teaching arch (and, live, for this GPU). Raises on failure."""
    for arch in ARCHS:
        compiled(family, arch)
    if is_live():
        module(family).get_function(steps(family)[0])  # forces the RawModule's compile


_FN = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def ptxas_info(family: str, archs=ARCHS):
    """Registers, spills, shared memory and barriers per kernel per arch (from ptxas -v)."""
    import pandas as pd
    rows = []
    for arch in archs:
        cur = None
        for line in compiled(family, arch)[1].splitlines():
            if m := _FN.search(line):
                cur = {"kernel": m.group(1), "arch": m.group(2), "registers": 0, "spill_stores": 0,
                       "spill_loads": 0, "stack_bytes": 0, "smem_bytes": 0, "barriers": 0}
                rows.append(cur)
            elif cur and (m := _FRAME.search(line)):
                cur.update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
            elif cur and (m := _USED.search(line)):
                cur.update(registers=int(m.group(1)), barriers=int(m.group(2) or 0),
                           smem_bytes=int(m.group(3) or 0))
        if not any(r["arch"] == arch for r in rows):
            raise CompileError(f"no ptxas -v info for {family}.cu on {arch}; NVRTC log:\n"
                               + compiled(family, arch)[1][:3000])
    return pd.DataFrame(rows)


def ptx(family: str, step: str, arch: str = "sm_90", grep: str | None = None) -> list[str]:
    """The PTX lines of one kernel (its .entry body), optionally only those matching `grep`."""
    name = step if step.startswith(family + "_") else f"{family}_{step}"
    text = compiled(family, arch)[0]
    # the body ends at a closing brace alone on its line that is not an inline-asm block's
    m = re.search(rf"\.entry {name}\(.*?\n}}\n(?![ \t]*// end inline asm)", text, re.S)
    if not m:
        raise ValueError(f"no kernel {name} in the PTX of {family}.cu")
    lines = [l.strip() for l in m.group(0).splitlines()]
    return [l for l in lines if re.search(grep, l)] if grep else lines


def show(family: str, step: str):
    """Display the marked slice of kernels/<family>.cu and compile it in the same cell."""
    from IPython.display import Markdown, display
    compile_all(family)
    name = step if step.startswith(family + "_") else f"{family}_{step}"
    info = ptxas_info(family)
    info = info[info.kernel == name]
    summary = "; ".join(f"{r.arch}: {r.registers} regs, {r.spill_stores} B spill, {r.smem_bytes} B smem"
                        for r in info.itertuples())
    display(Markdown(f"```cuda\n{step_source(family, step)}```\n*compiled: {summary}*"))


def compile_source(src: str, kernel_name: str):
    """Compile an exercise's CUDA source. Live: returns the RawKernel. Both modes compile
    it for sm_87 and sm_90 first, so a syntax error shows up without a GPU too."""
    for arch in ARCHS:
        nvrtc_compile(src, arch, f"{kernel_name}.cu")
    if not is_live():
        return None
    import cupy
    return cupy.RawModule(code=src, options=_options()).get_function(kernel_name)


# ---- launching ---------------------------------------------------------------------------------

_I32, _F32, _F64 = None, None, None
_RECORD: list | None = None     # set by record_launches: launches are noted, not changed


def kernel_args(args) -> tuple:
    """Python ints become int32 and floats float32, as the kernels declare them (CuPy would
    otherwise pass 64-bit values). Arrays and NumPy scalars pass through."""
    global _I32, _F32, _F64
    if _I32 is None:
        import numpy as np
        _I32, _F32, _F64 = np.int32, np.float32, np.float64
    out = []
    for a in args:
        t = type(a)
        if t is int or t is bool:
            a = _I32(a)
        elif t is float or t is _F64:
            a = _F32(a)
        out.append(a)
    return tuple(out)


def _dims(d) -> tuple:
    if type(d) is tuple:
        for x in d:
            if type(x) is not int:
                return tuple(int(x) for x in d)
        return d
    return (int(d),)


def launch(family: str, name: str, grid, block, args, smem: int = 0) -> None:
    """Launch kernel `name` of a family with kernel_args(args). Kept lean: it runs on every
    call of every launcher, and its host cost adds to each kernel's (bench.host_us)."""
    k = _KERNELS.get((family, name)) or kernel(family, name)
    grid, block, args = _dims(grid), _dims(block), kernel_args(args)
    if _RECORD is not None:
        _RECORD.append((k, grid, block, args, smem))
    if smem:
        k(grid, block, args, shared_mem=smem)
    else:
        k(grid, block, args)


class _Records(list):
    result = None


def record_launches(fn, keep_result: bool = False) -> list:
    """Call fn() once and return the launches it made through launch():
    [(RawKernel, grid, block, packed args, shared memory bytes)] (with keep_result, the list's
    .result is fn's return value). Launches inside are noted, never changed; a recording in
    progress (an outer one) gets them too."""
    global _RECORD
    prev, _RECORD = _RECORD, _Records()
    try:
        res = fn()
        recs = _RECORD
        if keep_result:
            recs.result = res
        return recs
    finally:
        mine, _RECORD = _RECORD, prev
        if prev is not None:
            prev.extend(mine)


_ND = None
PLANS_PER_VARIANT = 64
_VARIANTS = None      # a WeakSet of every Variant, for clear_plans


def clear_plans() -> None:
    """Forget every launch plan (build.Variant). Needed only after changing something a
    launcher reads besides its arguments (a module-level knob such as a block size): the next
    call of each step then validates and launches afresh."""
    for v in list(_VARIANTS or ()):
        v._plans.clear()
        v._last = None


_SCALAR = object()     # marks a non-array argument in a plan key


def _plan_key(args, out) -> tuple:
    """What determines a launcher's launches, as one flat tuple: each array's address, shape,
    layout and dtype, and every other argument's value (unhashable ones make the key unusable:
    the dict lookup raises TypeError)."""
    global _ND
    if _ND is None:
        import cupy
        _ND = cupy.ndarray
    parts = []
    add = parts.append
    for a in (*args, *out) if type(out) is tuple else (*args, out):
        if type(a) is _ND:
            add(a.data.ptr)
            add(a.shape)
            add(a._c_contiguous or a.strides)
            add(a.dtype)
        else:
            add(_SCALAR)
            add(a)
    return tuple(parts)


def _plan(records, args, out):
    """The recorded launches as one zero-argument call, every array argument replaced by its
    address (so the plan keeps no array alive); None when a launch used memory outside the
    call's own arrays (a temporary the launcher allocated: a replay would write into freed
    memory) or passed something that is neither an array nor a NumPy scalar."""
    import numpy as np
    flat = (*args, *out) if type(out) is tuple else (*args, out)
    spans = [(a.data.ptr, a.data.ptr + a.nbytes) for a in flat if type(a) is _ND]
    calls = []
    for k, g, b, packed, sm in records:
        new, where = [], []
        for x in packed:
            if type(x) is _ND:
                p = x.data.ptr
                if not any(lo <= p and p + x.nbytes <= hi for lo, hi in spans):
                    return None
                where.append(next((i for i, a in enumerate(flat) if a is x), None))
                x = np.uint64(p)
            elif not isinstance(x, np.generic):
                return None
            else:
                where.append(None)
            new.append(x)
        calls.append(functools.partial(k, g, b, tuple(new), shared_mem=sm) if sm else
                     functools.partial(k, g, b, tuple(new)))
    if len(calls) == 1:
        if not sm:   # for Variant's fast path: the call's own arrays in place of their addresses
            n = len(flat)
            calls[0].with_arrays = (k, g, b, operator.itemgetter(*[i if i is not None else n + j
                                                                  for j, i in enumerate(where)]), tuple(new))
        return calls[0]

    def replay():
        for c in calls:
            c()
    return replay


def _seen(args, out, plan):
    """What the fast path of Variant.__call__ compares the next call against: a weak reference
    to each array passed (so nothing is kept alive, and a freed array never matches), with its
    shape and dtype. None (no fast path) without a plan, or when an argument is not a CuPy
    array (a scalar's value would need comparing: the keyed path does it)."""
    import weakref
    flat = (*args, *out) if type(out) is tuple else (*args, out)
    if plan is None or any(type(a) is not _ND for a in flat):
        return None
    return tuple((weakref.ref(a), a.shape, a.dtype) for a in flat), plan


class Variant:
    """One step of a lab: a launcher plus what the harness needs to know about it.

    inplace=True: the step is safe with out= one of its inputs (exactly the same array:
    an element-wise kernel where each thread reads an index, then writes that index). Any
    other overlap between out and an input is a ValueError before the launch (the kernels
    are __restrict__: a partial overlap would read values this launch already wrote).

    Launch plans: a call with out= given is validated and launched by the launcher once;
    its launches (kernel, grid, block, packed arguments) are kept, keyed by what determines
    them (every array's address, shape, layout and dtype, every other argument's value).
    The next call with the same key replays them as bare RawKernel calls: the same checks
    would pass and the same launches follow, so only the host cost changes (bench.host_us).
    A call with the very same array objects as the previous one (checked by identity through
    weak references, plus shape and dtype) skips even building the key: the common case of a
    decode loop, which calls each layer's kernels with the same buffers every token.
    Only launches made through launch() are replayed: a call that launched nothing, or used
    memory outside its own arrays, keeps no plan. A launcher that does other GPU work besides
    launch() (a CuPy op, cuBLAS, a memset) on every call must say plan=False; after changing a
    module-level knob a launcher reads, call build.clear_plans()."""

    def __init__(self, fn, dtypes=("float32",), overflow_safe=True, alloc_out=None, inplace=False,
                 plan=True):
        self.fn, self.dtypes, self.overflow_safe = fn, tuple(dtypes), overflow_safe
        self._alloc = alloc_out
        self.inplace = inplace
        self.plan = plan
        self._plans: dict = {}
        self._last = None       # (what the previous call passed, its plan): the fast path
        global _VARIANTS
        if _VARIANTS is None:
            import weakref
            _VARIANTS = weakref.WeakSet()
        _VARIANTS.add(self)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, *args, out=None):
        if out is not None and _RECORD is None and self.plan:
            last = self._last
            if last is not None:                  # the fast path: the very same objects as last call
                seen, plan = last
                flat = (*args, *out) if type(out) is tuple else (*args, out)
                if len(seen) == len(flat):
                    for (ref, shape, dtype), a in zip(seen, flat):
                        if ref() is not a or a.dtype is not dtype or a.shape != shape:
                            break
                    else:
                        fast = getattr(plan, "with_arrays", None)
                        if fast is None:
                            plan()
                        else:        # the arrays themselves: CuPy packs them faster than addresses
                            k, g, b, pick, consts = fast
                            k(g, b, pick((*flat, *consts)) if len(consts) > 1 else (pick((*flat, *consts)),))
                        return out
            key = _plan_key(args, out)
            try:
                plan = self._plans.get(key)
            except TypeError:                     # an unhashable argument: no plan for this call
                plan = key = None
            if plan is not None:
                plan()                            # the launches this key always makes
                self._last = _seen(args, out, plan)
                return out
            ret = self._first(args, out, key)
            self._last = _seen(args, out, self._plans.get(key)) if key is not None else None
            return ret
        if out is not None:                       # being recorded (bench.bare, an outer plan), or plan=False
            no_alias(out, args, self.inplace)
        return self.fn(*args, out=out)

    def _first(self, args, out, key):
        """The full path: validate, launch, and keep the launches as this key's plan."""
        no_alias(out, args, self.inplace)
        if key is None:
            return self.fn(*args, out=out)
        records = record_launches(lambda: self.fn(*args, out=out), keep_result=True)
        ret = records.result
        same = ret is out or (type(ret) is tuple and type(out) is tuple and len(ret) == len(out)
                              and all(r is o for r, o in zip(ret, out)))
        plan = _plan(records, args, out) if same and records else None
        if plan is not None:
            if len(self._plans) >= PLANS_PER_VARIANT:
                self._plans.clear()
            self._plans[key] = plan
        return ret

    def alloc_out(self, *args):
        import cupy
        return self._alloc(*args) if self._alloc else cupy.empty_like(args[0])

    def accepts(self, case) -> bool:
        """False for cases this step is known not to survive: values >= 89 ('large', and the 1e4 of
        'hostile') overflow a kernel that does not subtract the max."""
        return self.overflow_safe or case[1] not in ("large", "hostile")


def no_alias(out, inputs, inplace_ok=False):
    """check.no_alias (imported late: check imports build)."""
    from .check import no_alias as _no_alias
    global no_alias
    no_alias = _no_alias
    return _no_alias(out, inputs, inplace_ok)


def variant(**kw):
    """Decorator: @variant(dtypes=("float16",)) turns a launcher into a Variant
    (inplace=True for an element-wise step that may write into one of its inputs; plan=False
    for a launcher that does GPU work other than build.launch on every call)."""
    return lambda fn: Variant(fn, **kw)


# ---- occupancy -----------------------------------------------------------------------------------

# Per-SM limits: registers, threads, blocks, shared memory (bytes).
SM_LIMITS = {"sm_87": (65536, 1536, 16, 164 * 1024), "sm_90": (65536, 2048, 32, 228 * 1024)}


def occupancy(family: str, name: str, threads: int, dyn_smem: int = 0):
    """Blocks per SM for `threads`-thread blocks, per arch from ptxas -v (what limits it),
    and, live, from cudaOccupancyMaxActiveBlocksPerMultiprocessor on this GPU."""
    import pandas as pd
    name = name if name.startswith(family + "_") else f"{family}_{name}"
    info = ptxas_info(family)
    rows = []
    for r in info[info.kernel == name].itertuples():
        regs_sm, thr_sm, blk_sm, smem_sm = SM_LIMITS[r.arch]
        warps = -(-threads // 32)
        regs_per_warp = -(-max(r.registers, 1) * 32 // 256) * 256   # allocated per warp, 256 at a time
        limits = {"registers": regs_sm // (regs_per_warp * warps), "threads": thr_sm // (warps * 32),
                  "blocks": blk_sm}
        if r.smem_bytes + dyn_smem:
            limits["shared memory"] = smem_sm // (r.smem_bytes + dyn_smem + 1024)  # 1 KB reserved per block
        blocks = min(limits.values())
        rows.append({"kernel": name, "arch": r.arch, "threads": threads, "registers": r.registers,
                     "blocks/SM": blocks, "limited by": min(limits, key=limits.get),
                     "occupancy": blocks * warps * 32 / thr_sm, "source": "ptxas -v"})
    if is_live():
        import cupy
        from .device import info as dev
        fn = kernel(family, name)
        n = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, dyn_smem)
        thr_sm = cupy.cuda.Device().attributes["MaxThreadsPerMultiProcessor"]
        rows.append({"kernel": name, "arch": dev()["arch"], "threads": threads, "registers": fn.num_regs,
                     "blocks/SM": n, "limited by": "", "occupancy": n * threads / thr_sm,
                     "source": "occupancy API (this GPU)"})
    return pd.DataFrame(rows)
