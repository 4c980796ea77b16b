"""The family API: a `Family` is one ladder of steps (or one measured set) and everything the notebooks,
tests and tools need to know about it, built as `Family(...)` with nothing patched in afterwards."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable


def case_key(shape, dtype) -> str:
    """'RxC:dtype' (a 1-D shape is one row): the key of one recorded case."""
    shape = tuple(shape)
    return f"{shape[0] if len(shape) > 1 else 1}x{shape[-1]}:{dtype}"


REGISTRY: dict = {}     # record name -> the families built with it (core.store finds a row's step here)


FLOOR_TARGET = 0.95     # issue 38: a memory-bound kernel at >= 0.95 of its floor (a copy or read of its bytes)


@dataclass(frozen=True)
class Target:
    """A target: `what`, measured by `measure(frame) -> float or Measured`, met at >= threshold (<= with below);
    threshold None: 'no threshold', never missed."""
    what: str
    measure: Callable
    threshold: float | None = None
    below: bool = False
    unit: str = "x"
    floor: Callable | None = None    # the same figure at the floor (a copy or read of the same bytes): out of reach?


@dataclass(eq=False)
class Family:
    """One family of steps; each field is described in docs/design.md ("The family API")."""
    name: str
    kernels: str
    variants: dict = field(default_factory=dict)
    reference: Callable | None = None
    make_input: Callable | None = None
    bytes_moved: Callable | None = None
    check_cases: list = field(default_factory=list)
    record_cases: list = field(default_factory=list)
    baselines: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)
    default: dict = field(default_factory=dict)
    claims: tuple = ()
    targets: tuple = ()
    tolerance: Callable | None = None
    op: str = ""
    roof: str = "copy"
    case_key: Callable = case_key
    record: Callable | None = None
    limiters: tuple = ()
    about: str = ""
    steps: Callable | None = None
    uses: tuple = ()

    def __post_init__(self):
        REGISTRY.setdefault(self.name, []).append(self)

    def __repr__(self):
        return f"Family({self.name!r}: {len(self.variants)} steps, {len(self.baselines)} baselines)"

    def limiter_cases(self) -> list:
        """[(step or baseline, shape, dtype, kernel regex)] of `limiters` (dtype by default the first record case's)."""
        first = (self.record_cases or [(None, "float16")])[0][1]
        return [(name, shape, rest[1] if len(rest) > 1 else first, rest[0]) for name, shape, *rest in self.limiters]


def of(x) -> Family:
    """The Family of `x`: a Family, or a lab module's first family."""
    if isinstance(x, Family):
        return x
    if isinstance(x, ModuleType):
        return x.FAMILIES[0]
    raise TypeError(f"expected a Family or a lab module, got {type(x).__name__}")
