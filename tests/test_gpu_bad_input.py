"""GPU: bad input never kills the context and never gives a silent wrong answer. For every variant
of every family: each array argument misaligned in turn (1 element past an aligned allocation), a
misaligned out, an out overlapping its input, and integer inputs at the edges of their type. Each
must give the reference's answer or a ValueError before any launch (kernellab.sanitize.sweep_child,
one child process per family, so a crash fails only its own family)."""
import pytest

from conftest import gpu
from kernellab.labs import key, ladders

NAMES = [key(f) for f in ladders()]


@gpu
@pytest.mark.parametrize("name", NAMES)
def test_bad_input_is_refused_or_right(name):
    from kernellab import sanitize
    rc, text = sanitize.sweep([name])[name]
    wrong = [l for l in text.splitlines() if "WRONG" in l]
    assert rc == 0 and "SWEEP DONE" in text and not wrong, "\n".join(wrong[:20]) or text[-3000:]
