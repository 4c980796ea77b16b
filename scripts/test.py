#!/usr/bin/env python3
"""make test: pytest over tests/ and nbval over notebooks/, in parallel where it can be.

    scripts/test.py [pytest arguments ...]      (the Makefile passes $(PYTEST_ARGS))

* With pytest-xdist importable (the `test` extra installs it) and more than one core, two passes:
    1. the tests marked `serial` (timing assertions that cannot hold while other workers load the
       GPU and the host), alone;
    2. everything else, on N workers (`-n N --dist loadfile`: a file's tests, and a notebook's
       cells, stay together on one worker, in order). It runs last, so the last pytest summary
       printed is the suite's.
  N = KERNELLAB_TEST_WORKERS, or the usable cores up to 12. KERNELLAB_TEST_WORKERS=1 (or no xdist,
  or one core, or `-n`/`-p no:xdist` among the arguments) runs one ordinary serial pass.
  tests/conftest.py refines loadfile: tests/test_compile.py is split by architecture (six learner
  GPUs: the slowest file by far when whole), and the notebooks and compile groups start first.
* One NVRTC compile per (source, architecture, options) for the whole run: every pytest worker and
  every notebook kernel nbval starts shares a compile cache in a temporary folder made for this run
  and removed after it (KERNELLAB_COMPILE_CACHE; install_compile_cache below). Nothing is kept
  between runs, so a fresh clone on a fresh machine does the same work as any other run.
* The slowest 15 items are listed at the end (pytest --durations; give --durations=N to change it).
* Paths among the arguments (`tests/test_compile.py`, `notebooks/01_softmax.ipynb`,
  `tests/test_x.py::test_y`) replace the default `tests notebooks`.
Exit status: pytest's; a pass that selects nothing (5) does not fail the run when the other ran.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = ["--nbval-lax", "--nbval-cell-timeout=900", "-p", "no:cacheprovider"]   # no cell may hang a run
CACHE_ENV = "KERNELLAB_COMPILE_CACHE"
DEFAULT_PATHS = ["tests", "notebooks"]
MAX_WORKERS = 12        # the live suite on an H100 took 8 min with 12 workers (2026-11-26); more contend for one GPU


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _is_path(arg: str) -> bool:
    return not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists()


def _user_marker(args: list[str]) -> tuple[list[str], str | None]:
    """The arguments without a -m EXPR (returned apart, to be combined with the pass's own)."""
    out, expr, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            expr, i = args[i + 1], i + 2
            continue
        if a.startswith("-m") and len(a) > 2 and not a.startswith("-m="):
            expr = a[2:]
        elif a.startswith("-m="):
            expr = a[3:]
        else:
            out.append(a)
        i += 1
    return out, expr


def workers(args: list[str]) -> tuple[int, str]:
    """How many xdist workers pass 1 gets, and why (one line for the log)."""
    if any(a in ("-n", "--numprocesses") or a.startswith(("-n", "--numprocesses=", "--dist")) for a in args):
        return 1, "xdist options given: passing them through in one run"
    if any(a == "no:xdist" for a in args):
        return 1, "-p no:xdist given: one serial run"
    env = os.environ.get("KERNELLAB_TEST_WORKERS", "").strip()
    if env:
        return max(1, int(env)), f"KERNELLAB_TEST_WORKERS={env}"
    if importlib.util.find_spec("xdist") is None:
        return 1, "pytest-xdist is not installed (pip install pytest-xdist, or the `test` extra): one serial run"
    cores = _cores()
    if cores < 2:
        return 1, "one core: one serial run"
    return min(cores, MAX_WORKERS), f"{cores} cores"


def cached_compile(compile_, folder):
    """`compile_` (build.nvrtc_compile's signature) through a cache folder that several processes
    share: keyed by the source, the file name, the architecture, the full option list and NVRTC's
    version; a compile two processes want at once is done by one while the other waits (a file
    lock), then reads it. A failing compile raises as before and is not cached."""
    import fcntl
    import hashlib
    import json
    from kernellab.core import build
    from cupy_backends.cuda.libs import nvrtc
    version = list(nvrtc.getVersion())
    cache = Path(folder)
    cache.mkdir(parents=True, exist_ok=True)

    def nvrtc_compile(src, arch, name="kernel.cu", extra=()):
        key = json.dumps([src, name, arch, build.nvrtc_options(arch, tuple(extra)), version])
        f = cache / (hashlib.sha256(key.encode()).hexdigest() + ".json")
        if not f.exists():
            with open(f.with_suffix(".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)        # another process compiling it: wait, then read
                if not f.exists():
                    ptx, log = compile_(src, arch, name, extra)
                    tmp = f.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps([ptx, log]))
                    os.replace(tmp, f)
                    return ptx, log
        ptx, log = json.loads(f.read_text())
        return ptx, log

    nvrtc_compile.run_cache = str(cache)
    nvrtc_compile.__doc__ = compile_.__doc__
    return nvrtc_compile


def install_compile_cache(folder: str | None = None) -> bool:
    """Route kernellab's NVRTC compiles (build.nvrtc_compile: the teaching compiles, ptxas -v, the
    exercises) through this run's shared cache (cached_compile). Called by tests/conftest.py in
    each pytest worker and by the IPython start-up file that _run_env gives nbval's kernels.
    Installs only when `folder` or $KERNELLAB_COMPILE_CACHE names one; returns whether it did."""
    folder = folder or os.environ.get(CACHE_ENV)
    if not folder:
        return False
    from kernellab.core import build
    if not getattr(build.nvrtc_compile, "run_cache", None):
        build.nvrtc_compile = cached_compile(build.nvrtc_compile, folder)
    return True


_STARTUP = """# make test (scripts/test.py): this run's shared NVRTC compile cache, in the notebooks' kernels too
import importlib.util as _u, os as _os
if _os.environ.get({env!r}):
    _s = _u.spec_from_file_location("_kernellab_test_run", {path!r})
    _m = _u.module_from_spec(_s)
    _s.loader.exec_module(_m)
    _m.install_compile_cache()
    del _s, _m
del _u, _os
"""


def _run_env(tmp: str) -> dict:
    """The environment of a run: headless explorers, the shared compile cache, and an IPython
    profile for nbval's kernels whose start-up file installs that cache there too."""
    cache = os.path.join(tmp, "nvrtc")
    startup = Path(tmp, "ipython", "profile_default", "startup")
    startup.mkdir(parents=True)
    (startup / "00-kernellab-compile-cache.py").write_text(
        _STARTUP.format(env=CACHE_ENV, path=str(Path(__file__).resolve())))
    return {**os.environ, "KERNELLAB_NO_WIDGETS": "1",     # headless: explorers print their static table
            CACHE_ENV: cache, "IPYTHONDIR": os.path.join(tmp, "ipython")}


COUNTS = {"passed": 0, "failed": 0, "skipped": 0}


def _run(cmd: list[str], label: str, env: dict) -> int:
    """Run one pytest pass; its pass/fail/skip counts (from a JUnit XML report) add to COUNTS."""
    import tempfile
    import xml.etree.ElementTree as ET
    print(f"make test: {label}\n  $ {shlex.join(cmd)}", flush=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "report.xml")
        rc = subprocess.call([*cmd, f"--junit-xml={xml}"], cwd=ROOT, env=env)
        if os.path.exists(xml):
            for suite in ET.parse(xml).getroot().iter("testsuite"):
                n, bad = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
                skip = int(suite.get("skipped", 0))
                COUNTS["passed"] += n - bad - skip
                COUNTS["failed"] += bad
                COUNTS["skipped"] += skip
    why = " (nothing selected in this pass: not a failure)" if rc == 5 else ""
    print(f"make test: {label}: exit {rc}{why} after {time.time() - t0:.0f} s", flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    import shutil
    import tempfile
    tmp = tempfile.mkdtemp(prefix="kernellab-test-")
    t0 = time.time()
    try:
        return _main(argv, _run_env(tmp))
    finally:
        n = len(list(Path(tmp, "nvrtc").glob("*.json")))
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"make test: {time.time() - t0:.0f} s in all; {n} distinct NVRTC compiles, each done once "
              f"for all workers and notebooks", flush=True)


def _main(argv: list[str] | None, env: dict) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    paths = [] if any(_is_path(a) for a in args) else DEFAULT_PATHS
    py = [sys.executable, "-m", "pytest", *paths, *BASE]
    n, why = workers(args)
    durations = [] if any(a.startswith("--durations") for a in args) else ["--durations=15"]
    if n <= 1:
        rc = _run([*py, *args, *durations], f"one serial pass ({why})", env)
        print(f"total: {COUNTS['passed']} passed, {COUNTS['failed']} failed, {COUNTS['skipped']} skipped", flush=True)
        return rc
    rest, expr = _user_marker(args)
    both = (lambda m: f"({expr}) and {m}") if expr else (lambda m: m)
    # the serial timing tests first, on a quiet GPU and host; then everything else in parallel, so the
    # last pytest summary printed is the one that ran the suite (without a GPU the serial pass runs nothing)
    rc1 = _run([*py, *rest, "-m", both("serial")],
               "pass 1 of 2: the tests marked serial (timing that needs a quiet GPU and host), alone", env)
    rc2 = _run([*py, *rest, *durations, "-n", str(n), "--dist", "loadfile", "-m", both("not serial")],
               f"pass 2 of 2: {n} workers ({why}), everything not marked serial", env)
    # the whole run in one closing line
    print(f"total: {COUNTS['passed']} passed, {COUNTS['failed']} failed, {COUNTS['skipped']} skipped", flush=True)
    if rc1 == rc2 == 5:
        return 5
    bad = [rc for rc in (rc1, rc2) if rc not in (0, 5)]
    return bad[0] if bad else 0


if __name__ == "__main__":
    sys.exit(main())
