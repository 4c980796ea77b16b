#!/usr/bin/env python3
"""The notebooks' life cycle, for the Makefile (run from the repository root).

  build [NN ...]            make notebooks / clean-notebooks: notebooks/*.ipynb from labs_src/*.py,
                            no outputs, kernelspec python3, no editor metadata (only the kernelspec,
                            language name, cell tags and jupyter.source_hidden are kept). Which file wins when their cells differ:
                            the one with uncommitted edits (git); if both have them, the newer one.
                            So a notebook edited in JupyterLab keeps its edits (they go into the .py
                            first), and an edited .py regenerates its notebook. Outputs are cleared.
  learner DEST [--force] [--only NN]
                            make lab / make student: solution-free copies (cells tagged `solution`
                            removed with nbconvert's TagRemovePreprocessor, or nbformat when
                            nbconvert is absent), outputs cleared. An existing copy is never
                            overwritten unless --force; new labs are added.
  reset NN [DEST]           make reset LAB=NN: move DEST/NN_*.ipynb aside (DEST/old/, timestamped,
                            a folder JupyterLab lists) and write a fresh learner copy. It refuses
                            (exit 1, one line) while a running JupyterLab has that notebook open in
                            a tab: the tab's next save would write the old notebook back over the
                            fresh copy. Close the tab first; FORCE=1 (make reset LAB=NN FORCE=1)
                            resets anyway.
  solutions DEST [--force]  make solutions: the notebooks with their solutions, outputs cleared.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LINKS = ("kernels", "figures", "docs")       # what a learner's folder shows of the repository
OLD = "old"         # make reset moves a learner's notebook here (visible: JupyterLab hides dot-folders)


def labs(root: Path = ROOT) -> list[Path]:
    return sorted((root / "labs_src").glob("[0-9][0-9]_*.py"))


def _cells(nb):
    """What a cell is, for comparing a notebook with its source: type, source, tags, and whether
    its code is hidden (jupyter.source_hidden, which the .py keeps: jupytext.toml)."""
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", [])),
             bool(c.metadata.get("jupyter", {}).get("source_hidden"))) for c in nb.cells]


def clear_outputs(nb) -> None:
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs = []
            c.execution_count = None
        c.metadata.pop("execution", None)


def strip_editor_metadata(nb) -> None:
    """What JupyterLab and jupytext add on save (collapsed/scrolled/execution, lines_to_next_cell,
    the jupytext header, widget state, the kernel's language_info details) is removed: a notebook
    keeps its kernelspec and language name, its cells their tags and jupyter.source_hidden."""
    keep = {k: nb.metadata[k] for k in ("kernelspec",) if k in nb.metadata}
    if "language_info" in nb.metadata:
        keep["language_info"] = {"name": nb.metadata["language_info"].get("name", "python")}
    nb.metadata = nbformat.NotebookNode(keep)
    for c in nb.cells:
        md = {}
        if c.metadata.get("tags"):
            md["tags"] = list(c.metadata["tags"])
        if c.metadata.get("jupyter", {}).get("source_hidden"):
            md["jupyter"] = {"source_hidden": True}
        c.metadata = nbformat.NotebookNode(md)


def _write_if_changed(nb, path: Path) -> bool:
    text = nbformat.writes(nb) + "\n"
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def _git_modified(path: Path, root: Path):
    """True/False when git knows whether `path` differs from HEAD; None outside a work tree."""
    import subprocess
    try:
        p = subprocess.run(["git", "status", "--porcelain", "--", str(path)], cwd=root,
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return None if p.returncode else bool(p.stdout.strip())


def _newer(ipynb: Path, py: Path, root: Path):
    """Which of the two differing files holds the edit: in a git work tree, the one modified
    since HEAD; when both are (or outside git), the newer file."""
    a, b = _git_modified(ipynb, root), _git_modified(py, root)
    if a is not None and b is not None and a != b:
        return ipynb if a else py
    return ipynb if ipynb.stat().st_mtime > py.stat().st_mtime else py


def _write_py(nb, py: Path) -> None:
    """The percent-format source of a notebook, as jupytext.toml asks (no metadata header)."""
    import copy
    import jupytext
    nb = copy.deepcopy(nb)
    clear_outputs(nb)
    strip_editor_metadata(nb)
    nb.metadata = {"jupytext": {"notebook_metadata_filter": "-all", "cell_metadata_filter": "tags,jupyter,-all"}}
    jupytext.write(nb, py, fmt="py:percent")


def build(root: Path = ROOT, quiet=False, only=()) -> list[str]:
    """notebooks/X.ipynb from labs_src/X.py for every lab (or the labs numbered in `only`);
    returns what it did, one line each."""
    import jupytext
    done = []
    (root / "notebooks").mkdir(exist_ok=True)
    for py in labs(root):
        if only and py.name[:2] not in {f"{int(n):02d}" for n in only}:
            continue
        ipynb = root / "notebooks" / f"{py.stem}.ipynb"
        src = jupytext.read(py)
        if ipynb.exists():
            old = nbformat.read(ipynb, as_version=4)
            if _cells(old) != _cells(src):
                winner = _newer(ipynb, py, root)
                if winner == ipynb:      # edited in JupyterLab after its source: keep the edit
                    _write_py(old, py)
                    done.append(f"{ipynb.relative_to(root)} has edits not in {py.relative_to(root)}: copied them there")
                    src = jupytext.read(py)
            ids = [c.get("id") for c in old.cells]
            old_cells = _cells(old)
        else:
            ids, old_cells = [], []
        nb = jupytext.read(py)
        # Keep the cell ids of unchanged cells, so a rebuild does not churn the diff.
        by_content = {}
        for key, cid in zip(old_cells, ids):
            by_content.setdefault(key, []).append(cid)
        for c, key in zip(nb.cells, _cells(src)):
            if by_content.get(key):
                c["id"] = by_content[key].pop(0)
        # Keep the notebook's metadata (whoever generated it); a kernelspec is what must be there.
        nb.metadata = dict(old.metadata) if ipynb.exists() else {"language_info": {"name": "python"}}
        nb.metadata.setdefault("kernelspec", dict(KERNELSPEC))
        clear_outputs(nb)
        strip_editor_metadata(nb)
        if _write_if_changed(nb, ipynb):
            done.append(f"wrote {ipynb.relative_to(root)} (no outputs)")
    if not quiet:
        print("\n".join(done) or "notebooks/ already in sync with labs_src/, free of outputs and of editor metadata")
    return done


def strip_solutions(nb):
    """The learner's copy: cells tagged `solution` removed (nbconvert when present), no outputs."""
    try:
        from nbconvert.preprocessors import TagRemovePreprocessor
        from traitlets.config import Config
        cfg = Config()
        cfg.TagRemovePreprocessor.remove_cell_tags = ("solution",)
        cfg.TagRemovePreprocessor.enabled = True
        nb, _ = TagRemovePreprocessor(config=cfg).preprocess(nb, {})
    except ImportError:
        nb.cells = [c for c in nb.cells if "solution" not in c.metadata.get("tags", [])]
    clear_outputs(nb)
    nb.metadata.setdefault("kernelspec", dict(KERNELSPEC))
    return nb


def _sources(root: Path, only=None) -> list[Path]:
    nbs = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if only:
        nbs = [p for p in nbs if p.name.startswith(f"{int(only):02d}_")]
        if not nbs:
            raise SystemExit(f"no lab {only}: labs are {', '.join(p.stem for p in sorted((root / 'notebooks').glob('*.ipynb')))}")
    return nbs


def _link_repo(dest: Path, root: Path) -> None:
    """Make the repository's kernels/, figures/ and docs/ reachable from the learner's folder."""
    for name in LINKS:
        link = dest / name
        if not link.exists() and not link.is_symlink() and (root / name).exists():
            link.symlink_to(os.path.relpath(root / name, dest))
    # A learner's copies are plain notebooks: no jupytext pairing here, whatever the repo's config.
    cfg = dest / "jupytext.toml"
    if not cfg.exists():
        cfg.write_text('# a learner\'s own notebooks: plain .ipynb, not paired with labs_src/\nformats = "ipynb"\n')


def _lab_stamp(nb) -> str:
    """A fingerprint of a lab as handed out: its cells' sources (not outputs, ids or metadata)."""
    import hashlib
    return hashlib.sha256("\0".join(c.source for c in nb.cells).encode()).hexdigest()[:16]


def _changed_since(out: Path, nb) -> bool:
    """Whether the lab handed out now differs from the one the learner's copy was made from (copies
    made before the stamp existed: unknown, so False)."""
    try:
        had = nbformat.read(out, as_version=4).metadata.get("kernellab", {}).get("lab_stamp")
    except Exception:
        return False
    return bool(had) and had != _lab_stamp(nb)


def learner(dest: Path, root: Path = ROOT, force=False, only=None, links=True) -> list[str]:
    """Write the solution-free set into dest; never overwrite an existing notebook unless force. A kept
    copy whose lab has changed since it was handed out gets a line saying so (and how to get the new one)."""
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for src in _sources(root, only):
        out = dest / src.name
        nb = strip_solutions(nbformat.read(src, as_version=4))
        if out.exists() and not force:
            done.append(f"kept    {out} (yours: never overwritten; `make reset LAB={src.name[:2]}` restores a fresh one)"
                        if links else f"kept    {out} (exists; FORCE=1 overwrites)")
            if _changed_since(out, nb):
                done.append(f"        lab {src.name[:2]} has changed since your copy was made: your copy keeps running, and "
                            f"`make reset LAB={src.name[:2]}` moves it to {dest.name}/{OLD}/ and gives you the new lab")
            continue
        nb.metadata["kernellab"] = {"lab_stamp": _lab_stamp(nb)}
        out.write_text(nbformat.writes(nb) + "\n")
        done.append(f"wrote   {out} ({sum(1 for c in nb.cells if 'exercise' in c.metadata.get('tags', []))} exercise(s), solutions removed)")  # noqa: E501
    if links:
        _link_repo(dest, root)
    print("\n".join(done))
    return done


class ResetRefused(RuntimeError):
    """make reset would be undone: the notebook is open in a running JupyterLab."""


def _servers() -> list[dict]:
    """The running Jupyter servers' runtime files (jpserver-*.json: url, token, root_dir)."""
    import json
    try:
        from jupyter_core.paths import jupyter_runtime_dir
        rt = Path(jupyter_runtime_dir())
    except ImportError:
        rt = Path(os.environ.get("JUPYTER_RUNTIME_DIR") or Path.home() / ".local/share/jupyter/runtime")
    out = []
    for f in sorted(rt.glob("jpserver-*.json")):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    return out


def _api(server: dict, path: str):
    import json
    import urllib.request
    req = urllib.request.Request(server["url"].rstrip("/") + "/api/" + path,
                                 headers={"Authorization": f"token {server.get('token', '')}"})
    with urllib.request.urlopen(req, timeout=3) as r:
        return json.load(r)


def open_in_jupyterlab(nb: Path) -> str | None:
    """The URL of a running Jupyter server where `nb` is open in a tab (a session on it whose kernel
    has a browser connected), else None. A tab closed with its kernel left running does not count
    (no connection, nothing left to save it); a server that does not answer is ignored."""
    nb = nb.resolve()
    for s in _servers():
        try:
            rel = nb.relative_to(Path(s.get("root_dir") or s.get("notebook_dir") or "/").resolve()).as_posix()
            sessions = _api(s, "sessions")
            kernels = {k["id"]: k for k in _api(s, "kernels")}
        except (ValueError, OSError, KeyError):
            continue
        for ses in sessions:
            if ses.get("path") == rel and ses.get("type", "notebook") == "notebook":
                k = kernels.get((ses.get("kernel") or {}).get("id"), {})
                if k.get("connections", 1) > 0:
                    return s["url"].rstrip("/") + "/lab/tree/" + rel
    return None


def reset(lab: str, dest: Path, root: Path = ROOT, force: bool | None = None) -> Path | None:
    """Move dest/NN_*.ipynb aside (dest/old/NN_x.<timestamp>.ipynb, listed by JupyterLab's file
    browser) and write a fresh copy; prints where the old one went. Raises ResetRefused while a
    running JupyterLab has the notebook open in a tab, unless `force` (default: $FORCE=1)."""
    src = _sources(root, lab)[0]
    cur = dest / src.name
    moved = None
    if force is None:
        force = os.environ.get("FORCE", "") not in ("", "0")
    if cur.exists() and (url := open_in_jupyterlab(cur)):
        if not force:
            raise ResetRefused(f"reset: {src.name} is open in JupyterLab ({url.split('?')[0]}); its next save would undo "
                               f"the reset. Close its tab first (File > Close and Shut Down Notebook), then run "
                               f"`make reset LAB={lab}` again (or `make reset LAB={lab} FORCE=1` to reset anyway).")
        print(f"reset: {src.name} is open in JupyterLab; FORCE=1: resetting anyway (close that tab without saving, "
              f"or File > Reload Notebook from Disk)")
    if cur.exists():
        old = dest / OLD
        old.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        moved = old / f"{src.stem}.{stamp}.ipynb"
        n = 1
        while moved.exists():
            moved, n = old / f"{src.stem}.{stamp}-{n}.ipynb", n + 1
        shutil.move(str(cur), moved)
        print(f"moved   your {src.name} -> {moved}\n        (in JupyterLab: the {OLD}/ folder of the file browser; nothing was deleted)")  # noqa: E501
    learner(dest, root, only=lab)
    return moved


def solutions(dest: Path, root: Path = ROOT, force=False) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for src in _sources(root):
        out = dest / src.name
        if out.exists() and not force:
            print(f"kept    {out} (FORCE=1 overwrites)")
            continue
        nb = nbformat.read(src, as_version=4)
        clear_outputs(nb)
        out.write_text(nbformat.writes(nb) + "\n")
        print(f"wrote   {out} (with solutions)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("build"); p.add_argument("labs", nargs="*", help="lab numbers (default: all)")  # noqa: E702
    p = sub.add_parser("learner"); p.add_argument("dest"); p.add_argument("--force", action="store_true")  # noqa: E702
    p.add_argument("--only"); p.add_argument("--no-links", action="store_true")  # noqa: E702
    p = sub.add_parser("reset"); p.add_argument("lab"); p.add_argument("dest", nargs="?", default="my-labs")  # noqa: E702
    p = sub.add_parser("solutions"); p.add_argument("dest"); p.add_argument("--force", action="store_true")  # noqa: E702
    a = ap.parse_args(argv)
    if a.cmd == "build":
        build(only=a.labs)
    elif a.cmd == "learner":
        learner(Path(a.dest).resolve(), force=a.force, only=a.only, links=not a.no_links)
    elif a.cmd == "reset":
        if not a.lab or not a.lab.isdigit():
            raise SystemExit("usage: make reset LAB=01   (the two-digit number of the lab)")
        try:
            reset(a.lab, Path(a.dest).resolve())
        except ResetRefused as e:
            print(e, file=sys.stderr)
            return 1
    elif a.cmd == "solutions":
        solutions(Path(a.dest).resolve(), force=a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
