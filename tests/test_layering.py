"""Everywhere: the package's architecture, enforced. A core module imports only core modules
(core knows no lab); the package has no import cycle (imports inside functions count too); every
lab module's families are Family objects; no tool special-cases a lab by name."""
import ast
import re
from pathlib import Path

from kernellab.core.family import Family
from kernellab.labs import LABS, families

PKG = Path(__file__).resolve().parents[1] / "labs_src" / "kernellab"


def _module(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts)


def _imports(path: Path, mods: set) -> set:
    """The package modules one file imports, relative or absolute, anywhere in the file."""
    me = _module(path)
    pkg = me.split(".")[:-1] if path.name != "__init__.py" else me.split(".") if me else []
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            elif (node.module or "").startswith("kernellab"):
                base = []
            else:
                continue
            mod = ".".join(base + ([node.module.removeprefix("kernellab.").removeprefix("kernellab")]
                                   if node.module and not node.level else [node.module] if node.module else []))
            mod = mod.strip(".")
            for a in node.names:
                cand = f"{mod}.{a.name}" if mod else a.name
                out.add(cand if cand in mods else mod)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("kernellab."):
                    out.add(a.name.removeprefix("kernellab."))
    return {m for m in out if m in mods and m != me}


def _graph():
    files = {(_module(p)): p for p in PKG.rglob("*.py")}
    mods = set(files)
    return {m: _imports(p, mods) for m, p in files.items()}


def test_core_imports_only_core():
    g = _graph()
    bad = {m: sorted(d for d in deps if not d.startswith("core")) for m, deps in g.items() if m.startswith("core")}
    bad = {m: d for m, d in bad.items() if d}
    assert not bad, f"core modules importing outside core: {bad}"


def test_no_import_cycles():
    g = _graph()
    seen, stack, cycles = {}, [], []

    def visit(m):
        seen[m] = "open"
        stack.append(m)
        for d in g[m]:
            if seen.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in seen:
                visit(d)
        stack.pop()
        seen[m] = "done"
    for m in sorted(g):
        if m not in seen:
            visit(m)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_imports():
    """The graph is not empty by accident: known edges are found."""
    g = _graph()
    assert "core.device" in g["core.build"] and "core.launch" in g["softmax.steps"] and "vision" in g["vit_block"]


def test_every_family_is_a_family():
    fams = list(families())
    assert fams and all(isinstance(f, Family) for f in fams)
    assert len({f.name for f in fams if not f.op}) == len([f for f in fams if not f.op]), "two families, one name"
    for f in fams:
        assert f.record is not None or f.variants, f"{f.name}: neither steps nor a record()"
        assert f.record is not None or f.record_cases, f"{f.name}: nothing to record"


def test_no_lab_is_special_cased_by_name():
    for path in list(PKG.glob("*.py")) + list((PKG / "core").glob("*.py")):
        if path.stem in LABS:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            for lab in LABS:
                assert not re.search(rf"""[=!]=\s*["']{lab}["']|["']{lab}["']\s*[=!]=""", code), \
                    f"{path.name}:{i} special-cases lab {lab!r}: {line.strip()}"


def test_the_tree_is_clean_under_ruff():
    """pyproject.toml's ruff rules hold over labs_src, tests and scripts (the test extra installs ruff)."""
    import shutil
    import subprocess
    import sys
    import pytest
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    root = PKG.parents[1]
    r = subprocess.run([ruff, "check", "labs_src", "tests", "scripts"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0, "ruff check found:\n" + r.stdout[-4000:]


def test_every_package_is_installed():
    """pyproject.toml lists every package of labs_src/kernellab, so a non-editable install has them all."""
    import re
    text = (PKG.parents[1] / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(kernellab[\w.]*)"', text.split("packages =", 1)[1].split("]", 1)[0]))
    have = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert listed == have, f"pyproject.toml packages: add {sorted(have - listed)}, drop {sorted(listed - have)}"
