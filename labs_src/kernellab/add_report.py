"""Add (lab 03): the tables and lines under the lab's cells, computed from the frames on screen."""
from __future__ import annotations

import pandas as pd

from . import add, measuring
from .core import build, device, results

BIG = (2 ** 26,)      # the shape the targets and the bytes-in-flight rows are read at


def width_said(part) -> str:
    """Step 04's changes one at a time: the width (from half2, from one half a thread), then `__restrict__` + `__ldg`."""
    return ("The width alone, from `half2`: " + results.summary(part, "04_ablate_plain", "03_fp16_half2", prov=False)
            + " The width alone, from one half a thread: "
            + results.summary(part, "04_ablate_plain", "08_vec_fp16_scalar", prov=False)
            + " `__restrict__` + `__ldg` alone: " + results.summary(part, "04_fp16_vec8", "04_ablate_plain"))


SWEEP, LAW = "lab 00's read sweep (of read roof)", "Little's law, idle latency (of read roof)"


def inflight_table(big, fund):
    """Per add step: its bytes in flight, fraction of the copy roof at 2^26, and lab 00's sweep and Little's law there."""
    arch = device.facts(big).get("arch", "sm_90")
    arch = arch if arch in build.ARCHS else "sm_90"      # ptxas occupancy is computed for the teaching archs
    fd = fund[fund["device"] == big["device"].iloc[0]] if len(big) and len(fund) else fund
    rows = []
    for step, (width, block) in add.LOADS.items():
        dt = add.ADD.variants[step].dtypes[0]
        occ = build.occupancy("add", step, threads=block)
        per_sm = int(occ[(occ.arch == arch) & (occ.source == "ptxas -v")]["blocks/SM"].iloc[0])
        rows.append({"step": step, "dtype": dt, **add.in_flight(step, per_sm),
                     "fraction of copy roof at 64M": results.pick(big, step, "frac_copy", case=add.case_key(BIG, dt)),
                     SWEEP: measuring.sweep_fraction(fd, 2 * width),
                     LAW: measuring.little(fd, 2 * width) / measuring.value(fd, "read roof")})
    return pd.DataFrame(rows).sort_values("bytes in flight per thread")


def say_inflight(big, inflight) -> None:
    """Whether the fp16 adds rise with bytes in flight as lab 00's sweep does, and Little's law explains it."""
    f16 = inflight[inflight.dtype == "float16"]
    fr, sw, law = (list(f16[c]) for c in ("fraction of copy roof at 64M", SWEEP, LAW))
    if any(v != v for v in fr + sw):
        return print("Lab 00 has no sweep on this device, or the add is not timed yet: nothing to set side by side.")
    rises = all(a < b for a, b in zip(fr, fr[1:])) and all(a < b for a, b in zip(sw, sw[1:]))
    results.say(f"fp16: the add {'rises' if rises else 'does not rise'} with the bytes in flight as lab 00's "
                "measured sweep does; Little's law with the idle latency "
                + ("predicts the same at every width, so it does not explain the differences" if min(law) >= 0.99 else
                   "predicts more than the sweep measured at each width" if all(m < l for m, l in zip(sw, law))
                   else "does not order the widths as the sweep does") + f" ({results.source(big)}).")


BIAS_CHANGES = {"modulo removed (05/ablate)": ("06_ablate_plain", "05_bias_mod"),
                "__restrict__ + __ldg (ablate/06)": ("06_bias_2d", "06_ablate_plain"),
                "8-wide loads (06/07)": ("07_bias_2d_vec8", "06_bias_2d")}


def bias_table(sweep):
    """time(before) / time(after) of each of the bias add's changes alone, per case and device."""
    return pd.concat([results.speedup(sweep, *p).rename(what) for what, p in BIAS_CHANGES.items()], axis=1).round(2)


def bias_said(part) -> str:
    """Each of the bias add's changes alone, judged by the noise rule, and which carries the win."""
    mod, _, vec = (results.speedup(part, *p).median() for p in BIAS_CHANGES.values())
    if not (mod == mod and vec == vec):
        return f"The bias add's steps are not all recorded on this device yet ({results.source(part)})."
    return (" ".join(f"{what.split(' (')[0]}: " + results.summary(part, *p, prov=False) for what, p in BIAS_CHANGES.items())
            + f" ({results.source(part)}). " + ("The load width, not the modulo, carries the seed's win here (its median "
                                                "gain is the larger)." if vec > mod else
                                                "The modulo matters more than the load width here."))
