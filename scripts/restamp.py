"""Re-stamp the record's fingerprints after a change of the fingerprint function alone (not of any
step), without timing anything.

A row is re-stamped only when both hold:
  1. its recorded fingerprint is what the old function (core/fingerprint.py at --old) gives for
     today's code: the row was current before the change;
  2. today's function, run on the code of the commit that timed the row (the last commit that changed
     its timed columns), gives the same value as on today's code: nothing the new function covers
     (and the old one did not) has changed since the row was timed. Without this, a function that
     covers more code would bless rows timed with an older version of what it newly covers.
Every other row is left as it is (a stale row stays stale), and only the fingerprint column of a
file is ever written (the file is rewritten only where its bytes round-trip exactly).

    PYTHONPATH=labs_src .venv/bin/python scripts/restamp.py --old REV [--only 'nvidia-h200/bias_add.csv']"""
import argparse
import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMED = ("median_us", "p10_us", "p90_us", "value", "host_us")   # the columns a timing writes
KEYS = ("case", "name", "quantity", "kind", "dtype", "path", "mode", "context", "layers run", "unit", "section", "N")


def git(*args) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout


def rows_of(text: str):
    """(header, rows) of a CSV text; None where the text does not round-trip byte for byte."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return (rows[0], rows[1:]) if rows and buf.getvalue() == text else None


def key_of(header, row) -> tuple:
    return tuple(row[header.index(k)] for k in KEYS if k in header)


def timed_of(header, row) -> tuple:
    return tuple(row[header.index(k)] for k in TIMED if k in header)


def timing_commits(rel: str, header, rows) -> dict:
    """{row key: the commit that timed it} for the rows of figures/reference/<rel>: the last commit that
    changed its timed columns, or a later one that changed those of a row with the same fingerprint (one
    `make bench` writes a family's rows together; a device fact such as the SM count reads the same)."""
    want = {key_of(header, r): timed_of(header, r) for r in rows}
    out, newer = {}, dict(want)
    revs = git("log", "--format=%H", "--", f"figures/reference/{rel}").split()
    for rev in revs:
        got = rows_of(git("show", f"{rev}^:figures/reference/{rel}") or "x")
        if got and set(got[0]) & {*KEYS, *TIMED} != set(header) & {*KEYS, *TIMED}:
            break        # the columns changed there: older rows cannot be matched, so theirs stay unknown
        older = {key_of(got[0], r): timed_of(got[0], r) for r in got[1]} if got else {}
        for k in want:
            if k not in out and older.get(k) != newer.get(k):
                out[k] = rev
        newer = older
        if len(out) == len(want):
            break
    fi, age = header.index("fingerprint"), {r: i for i, r in enumerate(revs)}
    group = {}
    for r in rows:
        k = key_of(header, r)
        if k in out:
            group[r[fi]] = min(group.get(r[fi], len(revs)), age[out[k]])
    return {key_of(header, r): revs[group[r[fi]]] for r in rows if key_of(header, r) in out}


def expected_all(module=None, names=None) -> dict:
    """{(stem, name): expected fingerprint} of every recorded row (or of `names`: {stem: [names]})."""
    from kernellab import labs
    from kernellab.core import store
    from kernellab.core.device import REFERENCE
    list(labs.families())
    if module is not None:
        store.fp = module
    store.expected.cache_clear()
    if names is None:
        names = {}
        for p in sorted(REFERENCE.glob("*/*.csv")):
            df = store.read_csv(p)
            if "name" in df or "quantity" in df:
                names.setdefault(p.stem, set()).update(store.row_names(df))
    return {(stem, n): store.expected(stem, n)[0] for stem, ns in names.items() for n in sorted(ns)}


def old_module(rev: str):
    from kernellab.core import fingerprint
    src = git("show", f"{rev}:labs_src/kernellab/core/fingerprint.py")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fingerprint_old.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(fingerprint.__package__ + "._fingerprint_old", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return mod


def at_commit(rev: str, names: dict) -> dict:
    """Today's fingerprint function run on the code of `rev`: {(stem, name): value}."""
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(f"git archive {rev} labs_src kernels | tar -x -C {d}", shell=True, cwd=ROOT, check=True)
        (Path(d) / "labs_src/kernellab/core/fingerprint.py").write_text(
            (ROOT / "labs_src/kernellab/core/fingerprint.py").read_text())
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import restamp; "
                "got = restamp.expected_all(names={k: set(v) for k, v in json.loads(sys.argv[2]).items()}); "
                "print('JSON' + json.dumps([[s, n, v] for (s, n), v in got.items()]))")
        env = dict(os.environ, PYTHONPATH=f"{d}/labs_src")
        out = subprocess.run([sys.executable, "-c", code, str(ROOT / "scripts"),
                              json.dumps({k: sorted(v) for k, v in names.items()})],
                             capture_output=True, text=True, cwd=d, env=env)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("JSON")), None)
    if line is None:
        print(f"  {rev[:10]}: could not fingerprint that commit's code ({out.stderr.strip()[-200:]})")
        return {}
    return {(s, n): v for s, n, v in json.loads(line[4:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="the revision whose fingerprint function the records were stamped with")
    ap.add_argument("--verify", action="store_true", help="write nothing: check every current row at the "
                    "commit that timed it (today's function gives today's value there)")
    ap.add_argument("--only", default="*/*.csv", help="the record files, a glob under figures/reference")
    a = ap.parse_args()
    from kernellab.core import fingerprint as new
    from kernellab.core.device import REFERENCE
    from kernellab.core.frame import RENAMED
    after = expected_all(new)
    before = dict(after) if a.verify else expected_all(old_module(a.old))
    todo = {}                                  # rel path -> (header, rows, [(row, stem, name)])
    for p in sorted(REFERENCE.glob(a.only)):
        got = rows_of(p.read_bytes().decode())
        if got is None or "fingerprint" not in got[0]:
            continue
        h, rows = got
        k = h.index("name") if "name" in h else h.index("quantity")
        fi = h.index("fingerprint")
        cand = []
        for r in rows:
            name = RENAMED.get(r[k], r[k]) if h[k] == "name" else r[k]
            was, now = before.get((p.stem, name), ""), after.get((p.stem, name), "")
            if was and r[fi] == was and now and (now != was or a.verify):
                cand.append((r, p.stem, name, r[k]))
        if cand:
            todo[str(p.relative_to(REFERENCE))] = (h, rows, cand)
    by_rev, commits = {}, {}
    for rel, (h, rows, cand) in todo.items():
        commits[rel] = timing_commits(rel, h, rows)
        for r, stem, name, raw in cand:      # (the name the row had then, too: a step renamed since)
            if key_of(h, r) in commits[rel]:
                by_rev.setdefault(commits[rel][key_of(h, r)], {}).setdefault(stem, set()).update({name, raw})
    then = {}
    for rev, names in sorted(by_rev.items()):
        then[rev] = at_commit(rev, names)
    n = kept = 0
    for rel, (h, rows, cand) in todo.items():
        fi = h.index("fingerprint")
        for r, stem, name, raw in cand:
            rev = commits[rel].get(key_of(h, r))
            if rev and after[(stem, name)] in (then[rev].get((stem, name)), then[rev].get((stem, raw))):
                r[fi], n = after[(stem, name)], n + 1
            else:
                kept += 1
                case, at = r[h.index("case")] if "case" in h else "", (rev or "an unknown commit")[:10]
                print(f"  {'differs' if a.verify else 'kept stale'}: {rel} {name} @ {case} (timed at {at}: "
                      f"{then.get(rev, {}).get((stem, name), '?')} there, {after[(stem, name)]} today)")
        if not a.verify:
            buf = io.StringIO(newline="")
            csv.writer(buf, lineterminator="\n").writerows([h, *rows])
            (REFERENCE / rel).write_bytes(buf.getvalue().encode())
    print(f"{'current at their timing commit' if a.verify else 're-stamped'}: {n} rows; {kept} "
          f"{'not' if a.verify else 'left as they were'} (their timing commit's code differs where the new "
          "function looks)")
    if a.verify and kept:
        sys.exit(1)


if __name__ == "__main__":
    main()
