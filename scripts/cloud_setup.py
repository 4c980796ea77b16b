#!/usr/bin/env python3
"""The labs on a hosted GPU notebook (Colab, Kaggle, a cloud VM's Jupyter): the first cell.

    !git clone --depth 1 https://github.com/<you>/cuda-kernel-labs kernel-labs
    %run kernel-labs/scripts/cloud_setup.py

(`%run` runs it inside the notebook's own kernel, so the kernel can import kernellab at once; from
a terminal `python3 scripts/cloud_setup.py` installs the same.) What it does:

1. picks the CuPy wheel for this machine the way `make lab` does (`scripts/env.sh --extra`):
   a driver for CUDA 13 (nvidia-smi says "CUDA Version: 13.x") -> cupy-cuda13x, an older driver ->
   cupy-cuda12x, no GPU -> cupy-cuda12x + NVRTC (compile-only); a CuPy that already works on this
   GPU (many hosted images ship one) is kept;
2. installs kernellab from the clone into the kernel's Python (`pip install -e`; no venv: the
   notebook's kernel is the Python that must import it), plus ipywidgets when it is missing;
3. puts labs_src/ on this kernel's sys.path and prints the GPU it found (name, sm_XX), whether
   the labs run live, and which steps need a newer GPU (they are skipped, loudly, on this one).
Then open a lab: notebooks/01_softmax.ipynb (File > Open, or `%cd kernel-labs/notebooks`).

    --dry-run     print the pip command, resolve it (`pip install --dry-run`) and install nothing
    --print       print the pip command only (no network)
"""
from __future__ import annotations

import importlib
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHS_SEEN = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90")   # compiled in the CPU tests


def pick_extra() -> tuple[str, str]:
    """(pyproject extra, why) for this machine, from scripts/env.sh --extra (one rule for both)."""
    p = subprocess.run(["bash", str(ROOT / "scripts" / "env.sh"), "--extra"], capture_output=True, text=True,
                       timeout=60)
    extra, _, why = p.stdout.strip().partition("\t")
    if p.returncode or not extra:
        raise SystemExit(f"cloud_setup: scripts/env.sh --extra failed: {p.stderr.strip()}")
    return extra, why


def working_cupy() -> str | None:
    """'cupy <version> on <GPU>' when the CuPy already installed runs a kernel on a GPU, else None."""
    code = ("import cupy; n = cupy.cuda.runtime.getDeviceCount(); assert n > 0; "
            "assert int(cupy.arange(10).sum()) == 45; "
            "print(cupy.__version__, cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return f"cupy {p.stdout.strip()}" if p.returncode == 0 and p.stdout.strip() else None


def plan() -> tuple[list[str], str]:
    """The pip command for this machine and a sentence on why."""
    extra, why = pick_extra()
    have = working_cupy() if extra != "ci" else None
    if have:
        target, note = str(ROOT), f"{why}; keeping the {have} already installed (it works on this GPU)"
    else:
        target, note = f"{ROOT}[{extra}]", why
    extras = []
    try:
        importlib.import_module("ipywidgets")
    except ImportError:
        extras.append("ipywidgets>=8")
    return [sys.executable, "-m", "pip", "install", "--progress-bar", "off", "-e", target, *extras], note


def _pip(cmd: list[str]) -> int:
    """pip, its output shortened to what is happening (package, size, summary)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail = []
    for line in p.stdout:
        tail = (tail + [line.rstrip()])[-30:]
        s = line.strip()
        if s.startswith(("Collecting", "Downloading", "Successfully installed", "ERROR")):
            print(f"  [{time.time() - t0:4.0f} s] {s.split(' (from ')[0][:150]}", flush=True)
    rc = p.wait()
    if rc:
        print("\n".join(tail))
    return rc


def report() -> None:
    """The GPU found, live or compile-only, and the steps this GPU cannot run (min_arch)."""
    src = str(ROOT / "labs_src")
    if src not in sys.path:
        sys.path.insert(0, src)
    importlib.invalidate_caches()
    import kernellab as kl
    if not kl.is_live():
        print("cloud_setup: no GPU in this runtime: the labs run compile-only (kernels compiled with NVRTC, "
              "recorded results shown, labelled recorded). Pick a GPU runtime and run this cell again to go live.")
        return
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(0)
    arch = f"sm_{props['major']}{props['minor']}"
    name = props["name"].decode()
    print(f"cloud_setup: live on {name} ({arch}), CuPy {cupy.__version__}, "
          f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}.")
    if arch not in ARCHS_SEEN:
        print(f"cloud_setup: {arch} is not one of the architectures the tests compile for ({', '.join(ARCHS_SEEN)}); "
              "the labs should still run, but nobody has checked.")
    newer = []
    try:
        from kernellab import labs
        num = props["major"] * 10 + props["minor"]
        for fam in labs.families():
            for vname, v in (fam.variants or {}).items():
                need = getattr(v, "min_arch", None)
                if need and int(str(need).removeprefix("sm_")) > num:
                    newer.append(f"{fam.name} {vname} (needs {need})")
    except Exception as e:                      # a report, never a reason to fail the set-up cell
        print(f"cloud_setup: could not list arch-gated steps ({type(e).__name__}: {e})")
    if newer:
        print(f"cloud_setup: {len(newer)} step(s) need a newer GPU than {arch} and are skipped with a note: "
              + "; ".join(newer))
    print("cloud_setup: ready. Open notebooks/00_measuring.ipynb (or any lab) in this runtime.")


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cmd, note = plan()
    print(f"cloud_setup: {note}\ncloud_setup: $ {shlex.join(cmd)}", flush=True)
    if "--print" in args:
        return 0
    if "--dry-run" in args:
        return subprocess.call([*cmd[:4], "--dry-run", *cmd[4:]])
    print("cloud_setup: installing (CuPy and its CUDA libraries are the large part: about a minute or two "
          "on a hosted runtime's network)", flush=True)
    rc = _pip(cmd)
    if rc:
        print(f"cloud_setup: pip failed (exit {rc}); the lines above say why")
        return rc
    report()
    return 0


if __name__ == "__main__":
    rc = main()
    if rc and "ipykernel" not in sys.modules:      # under %run, a SystemExit would print a traceback
        sys.exit(rc)
