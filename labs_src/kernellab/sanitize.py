"""python -m kernellab.sanitize [tool ...] (`make sanitize`): every variant of every family (labs.ladders())
under compute-sanitizer's memcheck, racecheck, initcheck and synccheck on a few small, awkward shapes,
requiring 0 errors. Each tool runs one child process (`--child`: it only launches kernels), side by side."""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
MAX_ELEMS = 1 << 16          # awkward, but small: the sanitizer slows each launch a lot
PER_FAMILY = 4               # shapes per variant and dtype


def _env() -> dict:
    """This process's environment, kernellab importable in a child."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}


def executable() -> str | None:
    """compute-sanitizer on PATH, under CUDA_HOME/CUDA_PATH, or in /usr/local/cuda."""
    dirs = (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")
    return shutil.which("compute-sanitizer") or next(
        (p for d in dirs if d and os.path.exists(p := os.path.join(d, "bin", "compute-sanitizer"))), None)


def cases(family) -> list:
    """Up to PER_FAMILY distinct small shapes of the family's check cases, each with its most hostile (last) value set."""
    by_shape: dict = {}
    for shape, values in family.check_cases:
        if 0 < math.prod(shape) <= MAX_ELEMS:
            by_shape.setdefault(tuple(shape), []).append(values)
    shapes = sorted(by_shape, key=math.prod)
    if len(shapes) > PER_FAMILY:    # the smallest, the largest, and two between
        idx = sorted({0, len(shapes) - 1, len(shapes) // 3, 2 * len(shapes) // 3})
        shapes = [shapes[i] for i in idx]
    return [(s, by_shape[s][-1]) for s in shapes]


def child() -> int:
    """Launch every variant of every family on its sanitize cases (run under the sanitizer)."""
    import cupy
    from .labs import ladders
    # No memory pool: each array is its own cudaMalloc, so memcheck sees its exact bounds (a
    # pool hands out pieces of larger blocks, and a read past an array's end lands in the block).
    cupy.cuda.set_allocator(None)
    n = 0
    for fam in ladders():                  # a lab that is not a ladder (vit_block) composes the others
        for nm, v in fam.variants.items():
            if not v.runs_here():
                continue
            for dt in v.dtypes:
                for shape, values in cases(fam):
                    if not v.accepts((shape, values)):
                        values = "randn"
                    args = [cupy.asarray(a) for a in fam.make_input(shape, dt, values)]
                    print(f"  > {fam.name} {nm} {dt} {shape} {values}", flush=True)
                    v(*args)
                    n += 1
        cupy.cuda.Device().synchronize()
        print(f"  {fam.name}: {len(fam.variants)} variants launched", flush=True)
    print(f"CHILD DONE: {n} calls", flush=True)
    return 0


_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
_KIND = re.compile(r"^=+\s+((?:Invalid|Uninitialized|Misaligned|Race|Barrier|Error|Warning|Program hit|"
                   r"Out-of-range|Cuda API error|Malloc|Leaked).*?)(?: of size \d+ bytes?)?\s*$")
_AT = re.compile(r"^=+\s+at (?:0x[0-9a-f]+ in )?([A-Za-z_]\w*)")


def findings(text: str) -> dict:
    """{(what, kernel): count} from a compute-sanitizer log: the distinct problems it reported."""
    lines = text.splitlines()
    return Counter((m.group(1).strip(), next((a.group(1) for a in map(_AT.match, lines[i + 1:i + 4]) if a), "?"))
                   for i, m in enumerate(map(_KIND.match, lines)) if m)


def run(tools=TOOLS, timeout: int = 600) -> dict:
    """Run each tool over the child; returns {tool: (errors, returncode, tail of output)}."""
    exe = executable()
    if exe is None:
        raise FileNotFoundError("compute-sanitizer not found (it ships with the CUDA toolkit: "
                                "put its bin/ on PATH or set CUDA_HOME)")
    procs = {}
    for tool in tools:
        cmd = [exe, "--tool", tool, "--error-exitcode", "99", "--print-limit", "200"]
        cmd += [sys.executable, "-m", "kernellab.sanitize", "--child"]
        procs[tool] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    out = {}
    t0 = time.time()
    for tool, p in procs.items():
        try:
            text, _ = p.communicate(timeout=max(1, timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            text += f"\n(timed out after {timeout} s)"
        errs = sum(int(m) for m in _SUMMARY.findall(text))
        if "CHILD DONE" not in text and not errs:
            errs = -1            # the child did not finish: not a pass
        out[tool] = (errs, p.returncode, text)
    return out


# ---- bad input: every variant, each array argument misaligned in turn, an overlapping out ----------

def _misaligned(a):
    """The same values at an address 1 element past an aligned allocation (cupy)."""
    import cupy
    buf = cupy.empty(a.size + 16, a.dtype)
    v = buf[1:1 + a.size].reshape(a.shape)
    v[...] = a
    return v


def _outcome(fn, want, check_fn) -> str:
    """'ok' (the answer matches), 'refused' (ValueError before any launch) or 'WRONG: ...'."""
    import cupy
    try:
        got = fn()
    except ValueError:
        return "refused"
    cupy.cuda.Device().synchronize()          # a launch that kills the context raises here
    try:
        check_fn(got, want)
    except AssertionError as e:
        return f"WRONG: {str(e)[:200]}"
    return "ok"


def sweep_child(name: str) -> int:
    """Every variant of one family with each input misaligned in turn, a misaligned out, an out overlapping
    input 0 and integers at the edges of their type: the right answer or a ValueError, the context alive."""
    import cupy
    import numpy as np
    from .core.check import check
    from .labs import family_named
    fam = family_named(name)
    bad = 0
    for nm, v in fam.variants.items():
        if not v.runs_here():
            continue
        for dt in v.dtypes:
            shape, _ = max(cases(fam), key=lambda c: math.prod(c[0]))
            host = fam.make_input(shape, dt, "randn", seed=3)
            want = fam.reference(*host)
            tol = fam.tolerance(*host) if fam.tolerance else {}

            def same(got, want_):
                for g, w in (zip(got, want_) if isinstance(want_, tuple) else [(got, want_)]):
                    check(g, w, quiet=True, name=f"{fam.name} {nm}", **tol)
            args = [cupy.asarray(a) for a in host]
            trials = []
            for k, a in enumerate(args):
                if a.size and a.dtype.kind in "fiu":
                    trials.append((f"input {k} misaligned",
                                   lambda k=k: v(*[_misaligned(x) if j == k else x for j, x in enumerate(args)]), want))
            out = v.alloc_out(*args)
            for j, o in enumerate(out if isinstance(out, tuple) else (out,)):
                if o.size:
                    mo = _misaligned(o)
                    full = tuple(mo if i == j else x for i, x in enumerate(out)) if isinstance(out, tuple) else mo
                    trials.append((f"out {j} misaligned", lambda full=full: v(*args, out=full), want))
            first, o0 = args[0], out[0] if isinstance(out, tuple) else out
            if first.size and o0.size and not isinstance(out, tuple):
                raw = cupy.empty(first.nbytes + o0.nbytes + 64, cupy.uint8)
                a_view = raw[:first.nbytes].view(first.dtype).reshape(first.shape)
                a_view[...] = first
                o_view = raw[o0.itemsize:o0.itemsize + o0.nbytes].view(o0.dtype).reshape(o0.shape)
                trials.append(("out overlapping input 0",
                               lambda a_view=a_view, o_view=o_view: v(a_view, *args[1:], out=o_view), None))
            for k, a in enumerate(host):
                if isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.size:
                    edges = {np.iinfo(a.dtype).max, np.iinfo(a.dtype).min}
                    edges |= {2 ** 31} if a.dtype.itemsize == 8 else {-1} if a.dtype.kind == "i" else set()
                    for edge in sorted(edges):
                        h = [x.copy() if isinstance(x, np.ndarray) else x for x in host]
                        h[k].flat[0] = edge
                        try:
                            w = fam.reference(*h)
                        except (IndexError, ValueError):
                            w = None      # the reference refuses it: only a ValueError (or a skip) is right
                        trials.append((f"input {k} = {edge}", lambda h=h: v(*[cupy.asarray(x) for x in h]), w))
            for what, fn, w in trials:
                if w is None:
                    res = _outcome(fn, None, lambda g, w_: None)
                    if res == "ok" and what.startswith("out overlapping"):
                        res = "WRONG: accepted an out that overlaps its input"
                else:
                    res = _outcome(fn, w, same)
                bad += res.startswith("WRONG")
                print(f"  {fam.name} {nm} {dt} {what}: {res}", flush=True)
    cupy.arange(4).sum().get()                # the context is alive
    print(f"SWEEP DONE {fam.name}: {bad} wrong", flush=True)
    return 1 if bad else 0


def sweep(names=None, timeout: int = 300) -> dict:
    """sweep_child per family in its own process (a context-killing launch fails only its family):
    {family: (returncode, output)}."""
    from .labs import key, ladders
    out = {}
    for fam in ladders():
        if names and key(fam) not in names:
            continue
        p = subprocess.run([sys.executable, "-m", "kernellab.sanitize", "--sweep", key(fam)],
                           capture_output=True, text=True, timeout=timeout, env=_env())
        out[key(fam)] = (p.returncode, p.stdout + p.stderr)
    return out


def main(argv) -> int:
    if "--child" in argv:
        return child()
    if argv[:1] == ["--sweep"]:
        return sweep_child(argv[1])
    tools = [a for a in argv if a in TOOLS] or list(TOOLS)
    log = os.environ.get("SANITIZE_LOG")     # a folder: each tool's full output is written there
    try:
        res = run(tools)
    except FileNotFoundError as e:
        print(f"SKIPPED: {e}")
        return 3
    bad = 0
    for tool, (errs, rc, text) in res.items():
        calls = re.search(r"CHILD DONE: (\d+) calls", text)
        state = "OK" if errs == 0 and rc == 0 else "FAILED"
        bad += state != "OK"
        print(f"{tool:<10} {state}: {errs if errs >= 0 else '?'} errors, "
              f"{calls.group(1) if calls else '?'} variant calls (exit {rc})")
        if log:
            os.makedirs(log, exist_ok=True)
            with open(os.path.join(log, f"{tool}.log"), "w") as f:
                f.write(text)
        if state != "OK":
            for (what, kernel), count in sorted(findings(text).items(), key=lambda kv: -kv[1])[:25]:
                print(f"    {count:>6} x {what}  in {kernel}")
            tail = [l for l in text.strip().splitlines() if not l.startswith("=========     ") and
                    "Host Frame" not in l][-12:]
            print("    last lines:\n      " + "\n      ".join(tail))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
