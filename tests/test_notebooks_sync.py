"""Everywhere: notebooks/ is generated from labs_src/ (make notebooks), carries no outputs and a
kernelspec, and every lab's exercises follow the grading pattern (see README, Exercises)."""
import json
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "labs_src").glob("[0-9][0-9]_*.py"))
FIX = "run `make clean-notebooks`: it keeps your edits (the edited file wins) and clears the outputs"


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
            assert not c.get("outputs") and c.get("execution_count") is None, f"{ipynb.name} has outputs: {FIX}"
    assert raw["metadata"].get("kernelspec", {}).get("name") == "python3", \
        f"{ipynb.name} has no python3 kernelspec (JupyterLab would ask for a kernel): {FIX}"
    assert _cells(jupytext.read(src)) == _cells(jupytext.read(ipynb)), \
        f"{ipynb.name} differs from labs_src/{src.name}: {FIX}"


def _exercise_structure(cells):
    """(problems, number of exercises) for a list of (type, source, tags)."""
    problems, n = [], 0
    code = [(i, s, t) for i, (ty, s, t) in enumerate(cells) if ty == "code"]
    for k, (i, s, tags) in enumerate(code):
        if "exercise" in tags:
            n += 1
            if "EXERCISE" not in s or "TODO" not in s:
                problems.append(f"cell {i}: an exercise cell defines EXERCISE, a stub with a TODO")
            rest = code[k + 1:]
            grade = next((j for j, (_, s2, t2) in enumerate(rest)
                          if "grade_exercise(EXERCISE" in s2 and not t2), None)
            sol = next((j for j, (_, s2, t2) in enumerate(rest) if "solution" in t2), None)
            nxt = next((j for j, (_, _, t2) in enumerate(rest) if "exercise" in t2), len(rest))
            if grade is None or grade > nxt:
                problems.append(f"cell {i}: no untagged cell grading EXERCISE after the stub")
            if sol is None or sol > nxt:
                problems.append(f"cell {i}: no solution cell for this exercise")
            elif grade is not None and sol < grade:
                problems.append(f"cell {i}: the solution comes before the grading cell: Run All would grade it")
            if sol is not None and sol <= nxt:
                ssrc = rest[sol][1]
                if "EXERCISE =" in ssrc:
                    problems.append(f"cell {rest[sol][0]}: a solution must not reassign EXERCISE")
                if "strict=True" not in ssrc or "grade_exercise(SOLUTION" not in ssrc:
                    problems.append(f"cell {rest[sol][0]}: a solution grades SOLUTION with strict=True "
                                    "(so nbval catches a solution that rots)")
    for i, (_, s, tags) in enumerate(cells):
        if "solution" in tags and "exercise" in tags:
            problems.append(f"cell {i}: tagged both exercise and solution")
        if "solution" not in tags and "SOLUTION" in s and "grade_exercise" in s:
            problems.append(f"cell {i}: uses SOLUTION outside a solution cell (learner copies drop those)")
    return problems, n


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_exercises_graded_before_solutions(src):
    problems, n = _exercise_structure(_cells(jupytext.read(src)))
    assert n >= 1, f"{src.name} has no exercise (every lab has at least one)"
    assert not problems, f"{src.name}:\n" + "\n".join(problems)


def test_structure_check_can_fail():
    """The structure test above is not vacuous: the old layout (solution right below the stub,
    reassigning EXERCISE) fails it."""
    bad = [("code", 'EXERCISE = r"""TODO"""', ("exercise",)),
           ("code", 'EXERCISE = r"""answer"""', ("solution",)),
           ("code", "kl.check.grade_exercise(EXERCISE, 'k')", ())]
    problems, _ = _exercise_structure(bad)
    assert any("before the grading cell" in p for p in problems)
    assert any("reassign EXERCISE" in p for p in problems)
