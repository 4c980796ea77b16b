"""Everywhere (no GPU needed): the constants a .cu file shares with Python have one source, the Python
side, which passes them to every compile as -D (core.build.define); the .cu keeps an
`#ifndef NAME / #define NAME default / #endif` so it still reads and compiles on its own, and this test
checks that every such default is the value Python passes."""
import re

import pytest

from kernellab import labs
from kernellab.core import build

list(labs.families())          # every lab module loaded: each has declared its defines


def _value(text: str):
    text = text.strip().rstrip("fF")
    return float(text) if re.search(r"[.eE]", text) else int(text, 0)


@pytest.mark.parametrize("family", sorted(build.DEFINES))
def test_every_define_has_the_cu_default(family):
    defaults = build.defaults(family)
    for name, value in build.DEFINES[family].items():
        assert name in defaults, f"{family}.cu: {name} is passed as -D but has no #ifndef {name} default"
        assert _value(defaults[name]) == value, (f"{family}.cu: #define {name} {defaults[name]} but Python passes "
                                                 f"{value}")


def test_the_shared_constants_are_passed():
    """The constants a launcher reads and a kernel is compiled with (block sizes, registers a thread holds,
    tiles, groups) are declared, not mirrored by hand."""
    want = {"softmax": {"ROW_BLOCK", "VEC_PER_THREAD", "H8_PER_THREAD", "RPW_REGS", "RPW_ROWS_F32", "RPW_ROWS_F16",
                        "CL_REGS", "CLH_REGS", "CL11_REGS", "SAFE_V1_MAX_BLOCK"},
            "rmsnorm": {"RMS_BLOCK", "RMS_PER_THREAD"}, "add": {"BIAS_ROWS"},
            "gemv": {"SEED_BLOCK", "INT8_GROUP", "WARP_ROWS"},
            "vision": {"LN_BLOCK", "LN36_VPT", "LN36_THREADS", "SR_TILE", "SR2_TILE", "SR2_U", "TR_TILE", "BG_U", "SM_U"},
            "measure": {"READ_UNROLL", "FMA_CHAINS", "EX2_CHAINS", "ISSUE_REPEAT"}, "decoder": {"FG_WARPS"}}
    for family, names in want.items():
        assert names <= set(build.DEFINES.get(family, {})), (family, names - set(build.DEFINES.get(family, {})))


def test_every_compile_gets_the_defines():
    """The RawModule and NVRTC compiles both pass the family's -D options (a value that differs from the
    .cu default would change what is built, so the Python value is the one that counts)."""
    assert build.defines("softmax") == tuple(f"-D{k}={v}" for k, v in sorted(build.DEFINES["softmax"].items()))
    with pytest.raises(ValueError):
        build.define("softmax", ROW_BLOCK=128)


def test_a_default_changes_with_a_define(tmp_path):
    """A -D value overrides the .cu's default (the #ifndef is honoured): step 02's tree reduction halves
    from ROW_BLOCK / 2."""
    src = build.source("softmax")
    a = build.nvrtc_compile(src, "sm_90", "softmax.cu", ("-DROW_BLOCK=256",))[0]
    b = build.nvrtc_compile(src, "sm_90", "softmax.cu", ("-DROW_BLOCK=128",))[0]
    assert a != b


def test_step_03s_registers_match_step_36s_threshold():
    """vision.cu's LN_VEC (step 03's vectors a lane holds, a plain #define of its preamble) is the LN_VEC the
    step 36 launcher reads to send a row step 03 already holds to step 03."""
    from kernellab.vision.reference import LN_VEC
    assert re.search(r"^#define LN_VEC (\d+)", build.source("vision"), re.M).group(1) == str(LN_VEC)
