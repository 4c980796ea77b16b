"""Compile kernels/<family>.cu and show what the compiler made of it: live, a cupy.RawModule per family
for the GPU at hand; in both modes, NVRTC for sm_87 (Jetson Orin) and sm_90 (Hopper) with `-Xptxas -v`
(registers, spills, shared memory, PTX), which needs no GPU."""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from .device import ROOT, info, is_live, need_gpu

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


def full_name(family: str, step: str) -> str:
    """full_name('softmax', '04_online') == 'softmax_04_online' (a full name is returned as it is)."""
    return step if step.startswith(family + "_") else f"{family}_{step}"


_SIZED = re.compile(r"_\d+$")


def marker_of(family: str, step: str) -> str:
    """The marker whose slice holds a kernel: its own, or without the size of one stamped per size (_2, _4, _8)."""
    name = full_name(family, step)
    marks = steps(family)
    if name in marks or not _SIZED.search(name):
        return name
    return _SIZED.sub("", name) if _SIZED.sub("", name) in marks else name


def step_source(family: str, step: str) -> str:
    """The slice of the .cu file from the step's marker to the next marker."""
    src = source(family)
    name = marker_of(family, step)
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
    core = Path(cupy.__file__).parent / "_core" / "include"
    inc = [str(KERNELS), str(core)] + [str(core / "cupy" / "_cccl" / sub) for sub in ("libcudacxx", "cub", "thrust")
                                       if (core / "cupy" / "_cccl" / sub).is_dir()]
    cand = []
    try:
        from cuda import pathfinder
        cand.append(pathfinder.find_nvidia_header_directory("cudart"))
    except Exception:
        pass
    cand += [os.path.join(os.environ[e], "include") for e in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(e)]
    cuda = next((c for c in [*cand, "/usr/local/cuda/include"] if c and os.path.exists(os.path.join(c, "cuda_fp16.h"))),
                None)
    return tuple(inc + ([cuda] if cuda else []))


def _options(extra=()) -> tuple[str, ...]:
    return (STD, *[f"-I{d}" for d in include_dirs()], *extra)


# ---- constants shared by a .cu file and Python: one source, the Python side ---------------------

DEFINES: dict = {}      # family -> {NAME: value}: what every compile of kernels/<family>.cu gets as -D


def define(family: str, **values) -> dict:
    """Declare the constants a lab shares with kernels/<family>.cu: every compile gets -DNAME=value (the .cu's
    `#ifndef NAME` defaults keep it compiling alone; tests/test_constants.py checks them). Returns `values`."""
    got = DEFINES.setdefault(family, {})
    for k, v in values.items():
        if got.get(k, v) != v:
            raise ValueError(f"{family}.cu: {k} declared twice, as {got[k]!r} and {v!r}")
        got[k] = v
    return dict(values)


def defines(family: str) -> tuple[str, ...]:
    """The -D options of kernels/<family>.cu (define): ('-DNAME=value', ...), sorted."""
    return tuple(f"-D{k}={v}" for k, v in sorted(DEFINES.get(family, {}).items()))


_DEFAULT = re.compile(r"^[ \t]*#ifndef[ \t]+(\w+)[ \t]*\n[ \t]*#define[ \t]+\1[ \t]+([^\n]*?)[ \t]*(?://[^\n]*)?\n"
                      r"[ \t]*#endif", re.M)


def defaults(family: str) -> dict:
    """{NAME: default text} of every `#ifndef NAME / #define NAME default / #endif` in kernels/<family>.cu."""
    return dict(_DEFAULT.findall(source(family)))


def module(family: str, extra: tuple = ()):
    """The family's cupy.RawModule with its defines and `extra` options, compiled once (live only)."""
    return _module(family, (*defines(family), *extra))


@functools.lru_cache(maxsize=None)
def _module(family: str, options: tuple):
    need_gpu(f"compiling {family}.cu into a RawModule")
    import cupy
    return cupy.RawModule(code=source(family), options=_options(options), name_expressions=None)


_KERNELS: dict = {}     # (family, name) -> RawKernel: one dict lookup per launch


def kernel(family: str, name: str):
    """A compiled kernel by its full name, e.g. kernel('softmax', 'softmax_04_online')."""
    k = _KERNELS.get((family, name))
    if k is None:
        k = _KERNELS[family, name] = module(family).get_function(full_name(family, name))
    return k


# ---- both modes: NVRTC for a named arch -------------------------------------------------------

# What CuPy adds to a RawModule's options before NVRTC compiles it (cupy/cuda/compiler.py:
# _compile_with_cache_cuda adds -ftz=true, _compile_using_nvrtc adds the architecture and
# --device-as-default-execution-space). The teaching compile uses the same flags, so the PTX
# and the ptxas -v numbers shown are those of the binary that is timed.
# tests/test_measure.py asks CuPy itself for its flags and fails if this list falls behind.
CUPY_FLAGS = ("-ftz=true", "--device-as-default-execution-space")


def nvrtc_options(arch: str, extra=()) -> list[str]:
    """RawModule's NVRTC options for `arch`, plus -Xptxas -v and -lineinfo (which change no instruction)."""
    return [f"--gpu-architecture={arch}", *_options(), *CUPY_FLAGS, "-Xptxas", "-v", "-lineinfo", *extra]


def nvrtc_compile(src: str, arch: str, name: str = "kernel.cu", extra=()) -> tuple[str, str]:
    """(ptx, log) of `src` compiled for `arch` with nvrtc_options (no GPU needed)."""
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


def compiled(family: str, arch: str, extra: tuple = ()) -> tuple[str, str]:
    """(ptx, log) of kernels/<family>.cu for `arch` with its defines and `extra` options, compiled once."""
    return _compiled(family, arch, (*defines(family), *extra))


@functools.lru_cache(maxsize=None)
def _compiled(family: str, arch: str, options: tuple) -> tuple[str, str]:
    return nvrtc_compile(source(family), arch, f"{family}.cu", options)


def entries(family: str, arch: str = "sm_90") -> list[str]:
    """Every kernel name kernels/<family>.cu compiles to (.entry names, in order; those stamped per size too)."""
    return re.findall(r"^\.visible \.entry (\w+)\(", compiled(family, arch)[0], re.M)


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


def ptx(family: str, step: str, arch: str = "sm_90", grep: str | None = None, extra: tuple = ()) -> list[str]:
    """The PTX lines of one kernel's .entry body (only those matching `grep`), of the build with `extra`."""
    name = full_name(family, step)
    text = compiled(family, arch, tuple(extra))[0]
    # the body ends at a closing brace alone on its line that is not an inline-asm block's
    m = re.search(rf"\.entry {name}\(.*?\n}}\n(?![ \t]*// end inline asm)", text, re.S)
    if not m:
        raise ValueError(f"no kernel {name} in the PTX of {family}.cu")
    lines = [l.strip() for l in m.group(0).splitlines()]
    return [l for l in lines if re.search(grep, l)] if grep else lines


def define_changes_ptx(family: str, step: str, define: str, arch: str = "sm_90") -> bool:
    """Whether -D<define> changes one step's PTX (line info and remainder loops' `.pragma "nounroll"` ignored)."""
    def body(extra):
        return [ln for ln in ptx(family, step, arch, extra=extra) if ln and not ln.startswith((".loc", '.pragma "nounroll"'))]
    return body(()) != body((f"-D{define}",))


def show(family: str, step: str):
    """Display the marked slice of kernels/<family>.cu and compile it in the same cell."""
    from IPython.display import Markdown, display
    name = full_name(family, step)
    info = ptxas_info(family)                           # compiles for every arch of ARCHS
    if is_live():
        module(family).get_function(steps(family)[0])  # forces the RawModule's compile
    info = info[info.kernel == name] if name in set(info.kernel) else \
        info[[marker_of(family, k) == name for k in info.kernel]]      # a marker of kernels stamped per size
    many = info.kernel.nunique() > 1
    summary = "; ".join(f"{r.kernel + ' ' if many else ''}{r.arch}: {r.registers} regs, {r.spill_stores} B spill, "
                        f"{r.smem_bytes} B smem" for r in info.itertuples())
    display(Markdown(f"```cuda\n{step_source(family, step)}```\n*compiled: {summary}*"))


def show_python(obj) -> None:
    """Display the Python source of a function or class (how a lab assembles its kernels)."""
    import inspect
    from IPython.display import Markdown, display
    display(Markdown(f"```python\n{inspect.getsource(obj)}```"))


def try_compile(src: str, name: str = "listing", arch: str = "sm_87") -> bool:
    """Say whether a report's listing compiles (no GPU needed); on failure print NVRTC's error lines."""
    try:
        nvrtc_compile(src, arch, f"{name}.cu")
    except CompileError as e:
        print(f"{name}: does NOT compile for {arch}:\n" +
              "\n".join(l for l in str(e).splitlines() if "error" in l)[:1500])
        return False
    print(f"{name}: compiles for {arch}")
    return True


def compile_source(src: str, kernel_name: str):
    """Compile an exercise for sm_87 and sm_90 (errors show without a GPU); live, return its RawKernel."""
    for arch in ARCHS:
        nvrtc_compile(src, arch, f"{kernel_name}.cu")
    if not is_live():
        return None
    import cupy
    return cupy.RawModule(code=src, options=_options()).get_function(kernel_name)


# Per-SM limits: registers, threads, blocks, shared memory (bytes).
SM_LIMITS = {"sm_87": (65536, 1536, 16, 164 * 1024), "sm_90": (65536, 2048, 32, 228 * 1024)}


def occupancy(family: str, name: str, threads: int, dyn_smem: int = 0):
    """Blocks per SM for `threads`-thread blocks per arch from ptxas -v (and what limits it), and live, the API's."""
    import pandas as pd
    name = full_name(family, name)
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


def _grid(n4: int, threads=256) -> int:
    return int(min((n4 + threads - 1) // threads, info()["sms"] * 32))


def blocks_per_sm(fn, threads: int, smem: int = 0) -> int:
    """How many blocks of `threads` threads of kernel `fn` one SM holds at once (the occupancy API)."""
    import cupy
    return int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, smem))


def resident_grid(fn, threads: int = 256) -> int:
    """Blocks per SM x SMs: the grid of a grid-stride kernel that keeps every resident thread busy."""
    return max(1, blocks_per_sm(fn, threads)) * info()["sms"]


def resident_clusters(fn, threads: int, cs: int) -> int:
    """Clusters of `cs` blocks of `fn` the GPU holds at once (the driver's count, else an upper bound)."""
    import ctypes
    guess = max(1, blocks_per_sm(fn, threads) * info()["sms"] // cs)
    u, p = ctypes.c_uint, ctypes.c_void_p

    class Config(ctypes.Structure):     # CUlaunchConfig
        _fields_ = [("grid", u * 3), ("block", u * 3), ("smem", u), ("stream", p), ("attrs", p), ("nattrs", u)]
    try:
        n = ctypes.c_int(0)
        cfg = Config((u * 3)(cs * guess, 1, 1), (u * 3)(threads, 1, 1), 0, None, None, 0)
        rc = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters(ctypes.byref(n), p(fn.kernel.ptr),
                                                                       ctypes.byref(cfg))
    except (OSError, AttributeError):
        return guess
    return n.value if rc == 0 and n.value > 0 else guess


def waves(blocks: int, sms: int, blocks_per_sm: int) -> dict:
    """How a grid of `blocks` fills the GPU: blocks per wave, waves, and how full the last wave is."""
    per_wave = sms * blocks_per_sm
    rem = blocks % per_wave
    return {"blocks": blocks, "blocks per wave": per_wave, "waves": round(blocks / per_wave, 2),
            "last wave filled": round(rem / per_wave, 2) if rem else 1.0}
