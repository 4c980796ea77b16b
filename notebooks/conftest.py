"""What a learner sees after Run All, checked while nbval runs the notebooks (issue 35): in the labs
with long results sections, no table on screen is longer than MAX_ROWS rows, and no computed sentence
is said once per recorded device (the sentences speak of the device on screen; the other records sit
side by side in the lab's comparison table, results.device_table).

A check that fails fails the cell that showed it, with what it saw. Only outputs are read: nothing
is executed twice, so the check costs nothing beyond nbval's own run."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

MAX_ROWS = 40                              # kernellab.core.prose.MAX_ROWS (one screen)
SCREEN_LABS = ("01_", "04_", "07_", "08_")  # the labs whose results sections were too long (issue 35)
_DEVICE = re.compile(r"\b(?:recorded|live) on ([^,()]+?)(?:,|\))")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


def table_rows(html: str) -> list[int]:
    """The body rows of each HTML table in a display output (a DataFrame's _repr_html_)."""
    out = []
    for t in re.findall(r"<table.*?</table>", html, flags=re.S):
        body = re.search(r"<tbody>(.*?)</tbody>", t, flags=re.S)
        out.append(len(re.findall(r"<tr\b", body.group(1) if body else t)))
    return out


def sentence_key(md: str) -> str:
    """A sentence with its numbers and device names taken out: two sentences with the same key that
    name different devices are one sentence said once per device."""
    s = _DEVICE.sub("on DEVICE", md)
    s = re.sub(r"NVIDIA [\w\- ]+|Orin[\w\- ]*|\b[HA]\d00\b|RTX[\w\- ]*", "DEVICE", s)
    return _NUMBER.sub("#", s).strip()


def devices_named(md: str) -> set[str]:
    return {m.strip() for m in _DEVICE.findall(md)}


def screen_problems(outputs, seen: dict) -> list[str]:
    """Problems in one cell's outputs (nbformat output nodes or dicts); `seen` carries the notebook's
    earlier sentences (key -> devices named)."""
    problems = []
    for o in outputs:
        data = (o.get("data") or {}) if isinstance(o, dict) else {}
        html = data.get("text/html")
        if html:
            html = "".join(html) if isinstance(html, list) else html
            for n in table_rows(html):
                if n > MAX_ROWS:
                    problems.append(f"a table of {n} rows (at most {MAX_ROWS} by default; the full frame is one "
                                    f"call away)")
        md = data.get("text/markdown")
        if md:
            md = "".join(md) if isinstance(md, list) else md
            key, devs = sentence_key(md), devices_named(md)
            if key in seen and devs and seen[key] and devs != seen[key]:
                problems.append(f"a sentence said again for another device ({', '.join(sorted(devs))} after "
                                f"{', '.join(sorted(seen[key]))}): {md[:160]!r}")
            seen.setdefault(key, devs)
    return problems


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    nb = getattr(item, "parent", None)
    if getattr(item, "test_outputs", None) is None or not str(getattr(nb, "name", "")).startswith(SCREEN_LABS) \
            or getattr(getattr(nb, "path", None), "parent", None) != Path(__file__).parent:    # today's labs only
        return result
    seen = nb.__dict__.setdefault("_screen_seen", {})
    problems = screen_problems(item.test_outputs, seen)
    if problems:
        raise AssertionError(f"{nb.name}, cell {getattr(item, 'cell_num', '?')}: " + "; ".join(problems)
                             + "\n" + str(getattr(getattr(item, "cell", None), "source", ""))[:400])
    return result
