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
DEFAULT_PATHS = ["tests", "notebooks"]
MAX_WORKERS = 12        # the live suite on an H100 ran in about 3 minutes with 12 workers


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


COUNTS = {"passed": 0, "failed": 0, "skipped": 0}


def _run(cmd: list[str], label: str) -> int:
    """Run one pytest pass; its pass/fail/skip counts (from a JUnit XML report) add to COUNTS."""
    import tempfile
    import xml.etree.ElementTree as ET
    print(f"make test: {label}\n  $ {shlex.join(cmd)}", flush=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "report.xml")
        env = {**os.environ, "KERNELLAB_NO_WIDGETS": "1"}    # headless: explorers print their static table
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
    args = list(sys.argv[1:] if argv is None else argv)
    paths = [] if any(_is_path(a) for a in args) else DEFAULT_PATHS
    py = [sys.executable, "-m", "pytest", *paths, *BASE]
    n, why = workers(args)
    if n <= 1:
        rc = _run([*py, *args], f"one serial pass ({why})")
        print(f"total: {COUNTS['passed']} passed, {COUNTS['failed']} failed, {COUNTS['skipped']} skipped", flush=True)
        return rc
    rest, expr = _user_marker(args)
    both = (lambda m: f"({expr}) and {m}") if expr else (lambda m: m)
    # the serial timing tests first, on a quiet GPU and host; then everything else in parallel, so the
    # last pytest summary printed is the one that ran the suite (without a GPU the serial pass runs nothing)
    rc1 = _run([*py, *rest, "-m", both("serial")],
               "pass 1 of 2: the tests marked serial (timing that needs a quiet GPU and host), alone")
    rc2 = _run([*py, *rest, "-n", str(n), "--dist", "loadfile", "-m", both("not serial")],
               f"pass 2 of 2: {n} workers ({why}), everything not marked serial")
    # the whole run in one closing line
    print(f"total: {COUNTS['passed']} passed, {COUNTS['failed']} failed, {COUNTS['skipped']} skipped", flush=True)
    if rc1 == rc2 == 5:
        return 5
    bad = [rc for rc in (rc1, rc2) if rc not in (0, 5)]
    return bad[0] if bad else 0


if __name__ == "__main__":
    sys.exit(main())
