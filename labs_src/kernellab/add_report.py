"""Add (lab 03): the sentences under the lab's tables. Each reads the frames on screen through
results' and measuring's functions (every number and verdict computed, none typed in); a notebook
cell is one call. `*_said(part, ...)` returns one device's Markdown (for results.each_device);
`say_*(frame)` prints."""
from __future__ import annotations

from . import add, measuring
from .core import results

BIG = (2 ** 26,)      # the shape the targets and the bytes-in-flight rows are read at


def width_said(part) -> str:
    """Step 04's changes one at a time: the width (from half2, from one half a thread), then `__restrict__` + `__ldg`."""
    return ("The width alone, from `half2`: " + results.summary(part, "04_ablate_plain", "03_fp16_half2", prov=False)
            + " The width alone, from one half a thread: "
            + results.summary(part, "04_ablate_plain", "08_vec_fp16_scalar", prov=False)
            + " `__restrict__` + `__ldg` alone: " + results.summary(part, "04_fp16_vec8", "04_ablate_plain"))


def inflight_said(part, fd, f16) -> str:
    """One device's add rows (part) and its lab 00 record (fd): each fp16 step's bytes in flight per
    thread (the rows f16 of the in-flight table) → its fraction of the copy roof, beside lab 00's
    measured sweep and Little's law with the idle latency."""
    if fd.empty:
        return f"Lab 00 has no record for {part['device'].iloc[0]}: no sweep to set these fractions against."
    roof = measuring.value(fd, "read roof")
    said, fr, sw_, law = [], [], [], []
    for _, r in f16.iterrows():
        b = int(r["bytes in flight per thread"])
        fr.append(results.pick(part, r["step"], "frac_copy", case=add.case_key(BIG, "float16")))
        sw_.append(measuring.sweep_fraction(fd, b))
        law.append(measuring.little(fd, b) / roof)
        said.append(f"{b} B in flight per thread ({r['step']}) → **{fr[-1]:.2f}** of the copy roof (lab 00's read "
                    f"sweep: {sw_[-1]:.2f} of the read roof; Little's law with the idle latency: {law[-1]:.2f})")
    rises = all(a < b for a, b in zip(fr, fr[1:])) and all(a < b for a, b in zip(sw_, sw_[1:]))
    return ("fp16: " + ", ".join(said) + f" ({results.source(part)}). "
            + ("The add rises with the bytes in flight as lab 00's measured sweep does. "
               if rises else "")
            + (f"Little's law with lab 00's idle latency predicts {law[0]:.2f} at every width, so it does not "
               "explain the differences; the measured sweep follows them (lab 00: under load the latency is longer "
               "than the idle pointer chase)." if min(law) >= 0.99 else
               "Little's law with the idle latency predicts " + ", ".join(f"{v:.2f}" for v in law)
               + " for these widths" + (", above what the sweep measured at each: under load the latency is longer "
                                        "than the idle pointer chase (lab 00)." if all(m < l for m, l in zip(sw_, law))
                                        else ".")))


def say_inflight(big, inflight, fund) -> None:
    """inflight_said for the device on screen (big: the 2^26 timings; inflight: the bytes-in-flight table;
    fund: lab 00's records), then what differs between the steps; nothing until every fraction is there."""
    f16 = inflight[inflight.dtype == "float16"]
    if f16["fraction of copy roof at 64M"].notna().all():
        results.each_device(big, lambda part, fd: inflight_said(part, fd, f16), fund)
        results.say("Same bytes" + (", same number of threads per SM" if f16["threads per SM"].nunique() == 1 else "")
                    + ": what differs is how many bytes each thread has asked for when it waits (and, with it, the "
                    "load instructions per byte).")


def bias_said(part) -> str:
    """The bias add's changes one at a time (modulo, `__restrict__` + `__ldg`, 8-wide loads), and which carries the win."""
    mod, vec = results.speedup(part, "06_ablate_plain", "05_bias_mod"), results.speedup(part, "07_bias_2d_vec8", "06_bias_2d")
    return ("Removing the modulo alone: " + results.summary(part, "06_ablate_plain", "05_bias_mod", prov=False)
            + " `__restrict__` + `__ldg` alone: " + results.summary(part, "06_bias_2d", "06_ablate_plain", prov=False)
            + " 8-wide loads alone: " + results.summary(part, "07_bias_2d_vec8", "06_bias_2d", prov=False)
            + f" ({results.source(part)}). "
            + ("The load width, not the modulo, carries the seed's win here (its median gain is the larger)."
               if vec.median() > mod.median() else "The modulo matters more than the load width here."))


def say_bias(sweep) -> None:
    """bias_said for the device on screen, and a caution for other GPUs; nothing without both pairs."""
    mod = results.speedup(sweep, "06_ablate_plain", "05_bias_mod")
    vec = results.speedup(sweep, "07_bias_2d_vec8", "06_bias_2d")
    if len(mod) and len(vec):
        results.each_device(sweep, bias_said, then="On a GPU with a different balance of integer throughput to "
                            "bandwidth (an Orin), the ratios can differ: read them there before crediting either change.")
