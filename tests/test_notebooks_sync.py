"""Everywhere: notebooks/ is generated from labs_src/ (make notebooks) and carries no outputs."""
import json
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "labs_src").glob("[0-9][0-9]_*.py"))


def _cells(nb):
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", []))) for c in nb.cells]


def test_there_are_labs():
    assert len(SOURCES) >= 2


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_notebook_in_sync_and_clean(src):
    ipynb = ROOT / "notebooks" / f"{src.stem}.ipynb"
    assert ipynb.exists(), f"{ipynb.name} missing: run `make notebooks`"
    raw = json.loads(ipynb.read_text())
    for c in raw["cells"]:
        if c["cell_type"] == "code":
            assert not c.get("outputs") and c.get("execution_count") is None, \
                f"{ipynb.name} has outputs: run `make notebooks` (or clear outputs) before committing"
    assert _cells(jupytext.read(src)) == _cells(jupytext.read(ipynb)), \
        f"{ipynb.name} differs from labs_src/{src.name}: run `make notebooks`"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_exercises_have_solutions(src):
    tags = [t for c in jupytext.read(src).cells for t in c.metadata.get("tags", [])]
    assert tags.count("exercise") == tags.count("solution")
