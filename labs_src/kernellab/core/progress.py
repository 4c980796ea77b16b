"""Progress of a long job (make bench, make drift): one bar per lab with what is being timed and
the time left, estimated from the items done so far. On a terminal the bar redraws in place; in a
log (CI, a remote run) it prints a line at most every few seconds and one when the lab is done."""
from __future__ import annotations

import sys
import time

WIDTH = 24
LOG_EVERY_S = 10.0


class Bar:
    def __init__(self, title: str, total: int, stream=None):
        self.title, self.total, self.done = title, max(int(total), 1), 0
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.t0 = self.last = time.perf_counter()

    def line(self, what: str) -> str:
        el = time.perf_counter() - self.t0
        left = el / self.done * (self.total - self.done) if self.done else float("nan")
        k = int(WIDTH * self.done / self.total)
        eta = f"~{left:.0f} s left" if left == left else "estimating"
        return (f"{self.title:<18} [{'#' * k}{'.' * (WIDTH - k)}] {self.done}/{self.total}  {what[:48]:<48} "
                f"{el:.0f} s, {eta}")

    def step(self, what: str) -> None:
        """Say that `what` is being timed now (the previous item is done)."""
        now = time.perf_counter()
        if self.tty:
            self.stream.write("\r" + self.line(what))
            self.stream.flush()
        elif now - self.last >= LOG_EVERY_S or self.done == 0:
            self.stream.write(self.line(what) + "\n")
            self.stream.flush()
            self.last = now
        self.done = min(self.done + 1, self.total)

    def close(self, what: str = "done") -> None:
        self.done = self.total
        self.stream.write(("\r" if self.tty else "") + self.line(what) + "\n")
        self.stream.flush()


_CURRENT: list = []     # the bar a long job opened: bench.compare reports its items to it


def current() -> Bar | None:
    return _CURRENT[-1] if _CURRENT else None


class bar:
    """with progress.bar(title, total) as b: ... b.step(what) ...  (nested calls may report to it)."""

    def __init__(self, title: str, total: int):
        self.b = Bar(title, total)

    def __enter__(self) -> Bar:
        _CURRENT.append(self.b)
        return self.b

    def __exit__(self, *exc):
        _CURRENT.remove(self.b)
        self.b.close("done" if exc[0] is None else f"stopped: {exc[0].__name__}")
        return False
