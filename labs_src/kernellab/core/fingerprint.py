"""What a recorded row timed, as a short hash: the fingerprint of a step (or a baseline, or a
composite such as a decoder's token step) computed from today's code, written beside every
recorded row by `make bench`, and compared with today's code by a CPU test (tests/test_records.py)
and by the one reader (results: a stale row says "recorded with an earlier version of step NN").

A step's fingerprint covers:
  * its kernel source: the marked slice of kernels/<family>.cu that the launcher names, every other
    slice that defines something that slice uses (a helper, a macro, a struct), transitively, the
    file's preamble (before its first marker) and the local headers it includes;
  * the compile options that are not paths (the C++ standard; a -D of an ablation build is part of
    the launcher's code, below);
  * its launcher's code: the function's source, the factory that made it (a closure's enclosing
    function) and the values it closed over, and, to a small depth, the lab-module functions,
    classes and constants it names or imports in its body (so a change of a tile rule or a group
    size counts), and the default steps of every family it names (a public call of another lab:
    a new default there is a new step here).
Functions of core/ (launch, bench) are the harness, not the step: they are not hashed.
A composite row (Family.steps) hashes its engine's code and each of its steps' fingerprints."""
from __future__ import annotations

import ast
import dis
import functools
import hashlib
import importlib.util
import inspect
import io
import re
import sys
import textwrap
import tokenize
import types

from .build import _MARK, KERNELS, STD
from .launch import Variant

_PKG = __name__.rsplit(".", 2)[0]          # 'kernellab'
_CORE = _PKG + ".core"
DEPTH = 4                                  # how far a launcher's named helpers are followed
_SIMPLE = (str, int, float, bool, type(None), bytes)
_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "defined", "__launch_bounds__",
             "static_assert", "decltype", "alignas", "alignof"}
_MACRO = re.compile(r"#define\s+(\w+)")
_PREPROCESSOR = re.compile(r"(?m)^[ \t]*#(?:.*\\\n)*.*$")      # a directive, with its continued lines
_DEFINES = [re.compile(p) for p in (       # read apart from the directives, so a macro's body defines nothing
    r"\b(?:struct|class|union|enum)\s+(\w+)", r"(?:constexpr|__constant__)\s+[\w:<>, *&]*?\b(\w+)\s*[=\[(;{]",
    r"\b(\w+)\s*(?:<[^;{}()]*>)?\s*\([^;{}]*\)\s*(?:const\s*)?\{")]
_INCLUDE = re.compile(r'#include\s+"([^"]+)"')
_WORD = re.compile(r"\b\w+\b")
_RELATIVE = re.compile(r"(?m)^(\s*)from \.{2,}")   # `from ..core` in a lab package reads as `from .core`: a move


def digest(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()[:12]


# ---- kernels: slices and their dependencies ----------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _file(family: str):
    """(preamble + headers text, {marker: slice}, {marker: names it defines}) of kernels/<family>.cu."""
    path = KERNELS / f"{family}.cu"
    src = path.read_text() if path.exists() else ""
    marks = list(_MARK.finditer(src))
    pre = src[:marks[0].start()] if marks else src
    slices = {m.group(1): src[m.start():marks[i + 1].start() if i + 1 < len(marks) else len(src)]
              for i, m in enumerate(marks)}
    defines = {n: _defined(_COMMENT.sub(" ", t)) for n, t in slices.items()}
    return pre + _headers(src), slices, defines


def _defined(code: str) -> set:
    """The names a slice's code defines: its macros, and its types, constants and functions."""
    body = _PREPROCESSOR.sub(" ", code)
    return (set(_MACRO.findall(code)) | {w for d in _DEFINES for w in d.findall(body)}) - _KEYWORDS


def _headers(text: str, seen=None) -> str:
    """The text of the local headers (kernels/*.cuh) that `text` includes, transitively."""
    seen = set() if seen is None else seen
    out = []
    for name in _INCLUDE.findall(text):
        p = KERNELS / name
        if name not in seen and p.exists():
            seen.add(name)
            t = p.read_text()
            out += [t, _headers(t, seen)]
    return "".join(out)


@functools.lru_cache(maxsize=None)
def markers() -> dict:
    """{marker: family} over every kernels/*.cu."""
    return {m: p.stem for p in sorted(KERNELS.glob("*.cu")) for m in _file(p.stem)[1]}


@functools.lru_cache(maxsize=None)
def kernel(family: str, marker: str) -> str:
    """The fingerprint of one marked kernel: its slice, the slices it depends on, the preamble and headers."""
    pre, slices, defines = _file(family)
    want, todo = set(), [marker]
    while todo:
        n = todo.pop()
        if n in want or n not in slices:
            continue
        want.add(n)
        words = set(_WORD.findall(_COMMENT.sub(" ", slices[n])))
        todo += [m for m, d in defines.items() if m not in want and d & words]
    return digest(STD, _code(pre), *(_code(slices[n]) for n in sorted(want)))


def _kernels_named(strings, families) -> list[str]:
    """The markers a launcher's strings name: a marker itself, or a step name under one of `families`."""
    mk = markers()
    out = set()
    for s in strings:
        if s in mk:
            out.add(s)
        for f in families:
            if f"{f}_{s}" in mk:
                out.add(f"{f}_{s}")
    return sorted(out)


# ---- launchers: the code and what it names ------------------------------------------------------------

def _ours(mod: str | None) -> bool:
    return bool(mod) and mod.startswith(_PKG + ".") and not mod.startswith(_CORE)


def _codes(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


class _Walk:
    """Source texts and strings reached from one callable (see the module's docstring)."""

    def __init__(self):
        self.parts, self.strings, self.families, self.seen = [], set(), set(), set()

    def add(self, obj, depth: int = 0) -> None:
        if isinstance(obj, Variant):
            self.strings.add(obj.__name__)
            obj = obj.fn
        if isinstance(obj, functools.partial):
            self.parts += [repr(a) for a in (*obj.args, *obj.keywords.values()) if isinstance(a, _SIMPLE)]
            obj = obj.func
        if inspect.ismethod(obj):
            obj = obj.__func__
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        if inspect.isclass(obj):
            if _ours(obj.__module__):
                self.parts.append(_source(obj))
            return
        if not inspect.isfunction(obj):
            return
        self.parts.append(_source(obj))
        mod = sys.modules.get(obj.__module__)
        fam = getattr(mod, "FAMILY", None)
        if isinstance(fam, str):
            self.families.add(fam)
        outer = obj.__qualname__.split(".<locals>.")[0] if "<locals>" in obj.__qualname__ else None
        if outer and mod is not None and "." not in outer and depth < DEPTH:
            self.add(getattr(mod, outer, None), depth + 1)
        for cell in obj.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if isinstance(v, _SIMPLE) or (isinstance(v, tuple) and all(isinstance(x, _SIMPLE) for x in v)):
                self.parts.append(repr(v))
                self.strings |= {x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, str)}
            elif callable(v) and depth < DEPTH:
                self.add(v, depth + 1)
        names, loaded, mods = set(), set(), []
        for c in _codes(obj.__code__):
            names |= set(c.co_names)
            loaded |= {i.argval for i in dis.get_instructions(c) if i.opname == "LOAD_GLOBAL"}
            self.strings |= {s for s in c.co_consts if isinstance(s, str) and len(s) < 80}
        for n in sorted(loaded):              # a global it reads (not an attribute of the same name: torch.softmax)
            if n not in obj.__globals__:          # a builtin
                continue
            g = obj.__globals__[n]
            if isinstance(g, types.ModuleType):
                if _ours(g.__name__):
                    mods.append(g)
            elif isinstance(g, _SIMPLE) and not n.startswith("__"):
                self.parts.append(f"{n}={g!r}")
            elif isinstance(g, tuple) and all(isinstance(x, _SIMPLE) for x in g):
                self.parts.append(f"{n}={g!r}")
            elif depth < DEPTH and (inspect.isfunction(g) or inspect.isclass(g)) and _ours(getattr(g, "__module__", "")):
                self.add(g, depth + 1)
            else:
                self.family(g, depth)
        mods += _imported(obj)
        for m in mods:                       # V.layernorm, A.decode: a lab module's attribute named here
            fam = getattr(m, "FAMILY", None)
            for n in sorted(names):
                g = m.__dict__.get(n)        # (not getattr: compat's module __getattr__ warns of old names)
                self.family(g, depth)
                ours = isinstance(g, (functools.partial, Variant)) or inspect.ismethod(g) or \
                    ((inspect.isfunction(g) or inspect.isclass(g)) and _ours(g.__module__))
                if ours and depth < DEPTH:
                    if isinstance(fam, str):
                        self.families.add(fam)
                    self.add(g, depth + 1)

    def family(self, fam, depth: int) -> None:
        """A family a launcher names runs its default steps (a public call, `_best(LAYERNORM)`): their
        code counts, so a new default makes the caller's rows stale."""
        from .family import Family
        if isinstance(fam, Family) and id(fam) not in self.seen and depth < DEPTH:
            self.seen.add(id(fam))
            for d in dict.fromkeys(fam.default.values()):
                v = fam.variants.get(d)
                self.parts.append(f"{fam.op or fam.name}.default={d}" + ("" if v is not None else " (missing)"))
                if v is not None:
                    self.add(v, depth + 1)


def _imported(fn) -> list:
    """The lab modules a function imports in its body (`from .. import softmax as sm`, `import kernellab.x as y`)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return []
    pkg = fn.__globals__.get("__package__") or ""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [sys.modules.get(a.name) for a in node.names if a.asname]
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), pkg) if node.level \
                    else node.module
            except (ImportError, ValueError):
                continue
            out += [sys.modules.get(f"{base}.{a.name}") or sys.modules.get(base) for a in node.names]
    return [m for m in out if isinstance(m, types.ModuleType) and _ours(m.__name__)]


def _source(obj) -> str:
    """The code of a function or class without its comments and docstrings, white space folded: prose
    edits and moves leave the fingerprint alone; a change of what runs does not. (Cut from the text,
    not ast.unparse'd, so every Python version gives the same text.)"""
    try:
        src = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return getattr(obj, "__qualname__", repr(obj))
    lines = src.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def at(line, col, in_bytes=False):      # (1-based line, column) -> offset into src
        if in_bytes:
            col = len(lines[line - 1].encode()[:col].decode(errors="ignore"))
        return starts[line - 1] + col
    cut = []
    try:
        cut += [(at(*t.start), at(*t.end)) for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type == tokenize.COMMENT]
        for node in ast.walk(ast.parse(src)):
            body = getattr(node, "body", None)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body and \
                    isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                d = body[0]
                cut.append((at(d.lineno, d.col_offset, True), at(d.end_lineno, d.end_col_offset, True)))
    except (SyntaxError, tokenize.TokenError, IndentationError):   # a lambda cut out of a longer line
        pass
    for a, b in sorted(cut, reverse=True):
        src = src[:a] + " " + src[b:]
    return " ".join(_RELATIVE.sub(r"\1from .", src).split())


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _code(cu: str) -> str:
    """CUDA C without comments and with white space folded (the comments are the lab's prose)."""
    return " ".join(_COMMENT.sub(" ", cu).split())


def of(obj, family: str | None = None) -> str:
    """The fingerprint of a step, a baseline factory, or any launcher: its code (see the module's
    docstring) and the kernels it names (`family`: the .cu file its step names are looked up in)."""
    w = _Walk()
    w.add(obj)
    fams = sorted(w.families | ({family} if family else set()))
    ks = _kernels_named(w.strings, fams)
    return digest(*w.parts, *(f"{k}:{kernel(markers()[k], k)}" for k in ks))


def kernels_of(obj, family: str | None = None) -> list[str]:
    """The marked kernels a launcher names (what its fingerprint hashes besides its code)."""
    w = _Walk()
    w.add(obj)
    return _kernels_named(w.strings, sorted(w.families | ({family} if family else set())))


def composite(engine, steps: dict) -> str:
    """The fingerprint of a row that ran several steps: the engine's code and each step's."""
    return digest(*(of(e) for e in (engine if isinstance(engine, (list, tuple)) else [engine])),
                  *(f"{op}={of(fn)}" for op, fn in sorted(steps.items())))


def step_name(fn) -> str:
    """A launcher's step name (its key in a loaded family's variants), else its function name."""
    from .family import REGISTRY
    for fams in REGISTRY.values():
        for f in fams:
            for name, v in f.variants.items():
                if v is fn:
                    return name
    return getattr(fn, "__name__", type(fn).__name__)


def step_names(steps: dict) -> str:
    """The steps a composite row ran, for its `steps` column: 'op=step; ...'."""
    return "; ".join(f"{op}={step_name(fn)}" for op, fn in sorted(steps.items()))
