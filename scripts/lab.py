#!/usr/bin/env python3
"""Start JupyterLab for `make lab` / `make author`, or say where the running one is.

    scripts/lab.py ROOT [jupyter lab options ...]

* A JupyterLab already serving ROOT (started by an earlier `make lab`): its URL is printed and no
  second server starts (two servers on one folder would both save the same notebooks).
* Otherwise it listens on 127.0.0.1:PORT (KERNELLAB_PORT, default 8888). When that port is taken
  (another Jupyter on another folder, or another program) it says so and names the port it uses.
* The server config it passes: localhost only, a token, no browser opened as root, no news
  pop-up and no update check (the pop-up covers part of every notebook on first open), and the
  settings overrides in scripts/jupyterlab/ (the same switches, as JupyterLab settings).
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETTINGS = HERE / "jupyterlab"          # overrides.json: notification settings for every user


def server_options() -> list[str]:
    """The JupyterLab options `make lab` and `make author` pass (the browser test uses them too)."""
    opts = ["--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            f"--LabApp.app_settings_dir={SETTINGS}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:    # root (a container): no browser to open, say so by not trying
        opts += ["--allow-root", "--ServerApp.open_browser=False"]
    return opts


def _running(root: Path):
    """The running Jupyter servers (jupyter_server's runtime files), as (url with token, root, port)."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return []
    out = []
    for s in list_running_servers():
        url = s.get("url", "").rstrip("/") + "/lab"
        if s.get("token"):
            url += f"?token={s['token']}"
        out.append((url, Path(s.get("root_dir") or s.get("notebook_dir") or "/").resolve(), int(s.get("port", 0))))
    return out


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(__doc__)
        return 2
    root, extra = Path(args[0]).resolve(), args[1:]
    servers = _running(root)
    for url, r, _ in servers:
        if r == root:
            print(f"lab: JupyterLab is already running for {root}:\n\n    {url}\n\n"
                  "lab: open that URL (its terminal has the log; Ctrl+C there stops it). Not starting a second one.")
            return 0
    want = int(os.environ.get("KERNELLAB_PORT", "8888"))
    port = want
    while not _free(port) and port < want + 50:
        port += 1
    if port != want:
        who = next((f"JupyterLab for {r}" for _, r, p in servers if p == want), "another program")
        print(f"lab: port {want} is in use ({who}); this JupyterLab listens on port {port}: "
              f"http://127.0.0.1:{port}/lab (the token is in the URL printed below)")
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={root}", f"--ServerApp.port={port}",
           *server_options(), *extra]
    sys.stdout.flush()
    os.execv(sys.executable, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
