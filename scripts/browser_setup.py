#!/usr/bin/env python3
"""make test-browser, first step: install what the browser test needs into this Python's venv.

* playwright (pip), when it does not import;
* a Chromium: $CHROMIUM, a system one (chromium, chromium-browser, google-chrome), or Playwright's
  own build downloaded into .venv/ms-playwright (PLAYWRIGHT_BROWSERS_PATH, which the Makefile sets).
  Where that download is blocked, it says how to add a system Chromium and exits 0: the test then
  skips with the same reason (nothing failed).
The lab extra (JupyterLab, ipywidgets) comes from `scripts/env.sh lab`, which the Makefile runs first.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def system_chromium() -> str | None:
    return os.environ.get("CHROMIUM") or next((p for p in map(shutil.which, NAMES) if p), None)


def bundled_chromium() -> bool:
    d = os.environ.get("PLAYWRIGHT_BROWSERS_PATH")
    return bool(d) and any(Path(d).glob("chromium*/*"))


def main() -> int:
    t0 = time.time()
    if importlib.util.find_spec("playwright") is None:
        print(f"test-browser: installing playwright into {sys.prefix} (pip; about 40 MB)", flush=True)
        rc = subprocess.call([sys.executable, "-m", "pip", "install", "-q", "--progress-bar", "off", "playwright"])
        if rc:
            print("test-browser: pip could not install playwright (offline?); the browser test will skip")
            return 0
    if system_chromium():
        print(f"test-browser: Chromium: {system_chromium()}")
    elif bundled_chromium():
        print(f"test-browser: Chromium: Playwright's, in {os.environ['PLAYWRIGHT_BROWSERS_PATH']}")
    else:
        print(f"test-browser: downloading Playwright's Chromium into {os.environ.get('PLAYWRIGHT_BROWSERS_PATH', '~/.cache/ms-playwright')}",  # noqa: E501
              flush=True)
        p = subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"], capture_output=True, text=True)
        if p.returncode or not (bundled_chromium() or not os.environ.get("PLAYWRIGHT_BROWSERS_PATH")):
            why = (p.stderr or p.stdout).strip().splitlines()[:1]
            print("test-browser: Playwright's Chromium download failed" + (f" ({why[0]})" if why else "")
                  + ". Add a system Chromium: `sudo apt-get install chromium` (Debian; Ubuntu's is a snap:"
                    " use Google Chrome), or set CHROMIUM=/path/to/chrome. The browser test will skip.")
            return 0
    print(f"test-browser: ready after {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
