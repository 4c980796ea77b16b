"""Re-stamp the record's fingerprints after a change of the fingerprint function alone (not of any
step): a row whose recorded fingerprint equals what the old function (core/fingerprint.py at --old)
gives for today's code gets what today's function gives. Every other row is left as it is (a row
stale before stays stale). Nothing but the fingerprint column is written.

    PYTHONPATH=labs_src .venv/bin/python scripts/restamp.py --old REV"""
import argparse
import csv
import importlib.util
import io
import subprocess
import sys
from pathlib import Path

from kernellab import labs
from kernellab.core import fingerprint as new
from kernellab.core import store
from kernellab.core.device import REFERENCE


def old_module(rev: str):
    src = subprocess.run(["git", "show", f"{rev}:labs_src/kernellab/core/fingerprint.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path(new.__file__).with_name("_fingerprint_old.py")
    path.write_text(src)
    try:
        spec = importlib.util.spec_from_file_location("kernellab.core._fingerprint_old", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    finally:
        path.unlink()
    return mod


def expected_all(module) -> dict:
    store.fp = module
    store.expected.cache_clear()
    out = {}
    for p in sorted(REFERENCE.glob("*/*.csv")):
        df = store.read_csv(p)
        if "name" in df or "quantity" in df:
            out.update({(p.stem, n): store.expected(p.stem, n)[0] for n in set(store.row_names(df))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True)
    a = ap.parse_args()
    list(labs.families())
    before, after = expected_all(old_module(a.old)), expected_all(new)
    n = 0
    for p in sorted(REFERENCE.glob("*/*.csv")):
        rows = list(csv.reader(io.StringIO(p.read_text())))
        if not rows or store.FP not in rows[0]:
            continue
        i = rows[0].index(store.FP)
        k = rows[0].index("name") if "name" in rows[0] else rows[0].index("quantity")
        for r in rows[1:]:
            was = before.get((p.stem, r[k]), "")
            if was and r[i] == was and after[(p.stem, r[k])] != was:
                r[i], n = after[(p.stem, r[k])], n + 1
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        p.write_text(buf.getvalue())
    print(f"re-stamped {n} rows")


if __name__ == "__main__":
    main()
