"""Nsight Compute, where it is installed and allowed: the seeds' counter readings for one launch of
one step, in a child process under `ncu`; without a GPU or ncu, the command to run."""
from __future__ import annotations

from dataclasses import dataclass

from . import build
from .device import is_live
from .family import of

NCU_METRICS = {
    "gpu__time_duration.sum": "duration",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput (% of peak)",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": "L2 throughput (% of peak)",
    "launch__grid_size": "grid size",
    "launch__block_size": "block size",
    "launch__registers_per_thread": "registers per thread",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy (%)",
}

# What limits a launch: the busiest unit against its peak, and why warps wait (stall cycles per issued
# instruction, by reason). Family.limiters names the launches; `make ncu` records them.
LIMITER_METRICS = {
    "gpu__time_duration.sum": "duration (ns)",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe busy (%)",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed": "shared memory busy (%)",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared memory bank conflicts",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": "XU pipe (exp2) busy (%)",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots busy (%)",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput (% of peak)",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy (%)",
    "launch__registers_per_thread": "registers per thread",
    "launch__grid_size": "grid size",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "stall: waiting on memory",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "stall: shared memory / XU",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "stall: MIO queue full",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "stall: math pipe busy",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "stall: __syncthreads",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": "stall: fixed latency",
}


def ncu(family, name: str, shape, dtype: str, kernel: str | None = None, metrics=NCU_METRICS,
        timeout: int = 300):
    """The seed's ncu metrics of one launch of a step (or baseline: give `kernel`, a regex) in a child process;
    where ncu cannot run here, the command to run."""
    import os
    import shutil
    import subprocess
    import sys
    import pandas as pd
    family = of(family)
    if name not in family.variants and (name not in family.baselines or not kernel):
        raise ValueError(f"{family.name}: {name!r} is neither a step nor a baseline with a kernel regex")
    kname = "regex:" + (kernel or f"^{family.kernels}_{name[:2]}_")
    call = f"f.variants[{name!r}](*a)" if name in family.variants else f"f.baselines[{name!r}](*a)()"
    script = (f"import cupy; from kernellab.labs import family_named; f = family_named({(f'{family.name}:{family.op}' if family.op else family.name)!r}); "  # noqa: E501
              f"a = [cupy.asarray(v) for v in f.make_input({tuple(shape)!r}, {dtype!r})]; "
              f"{call}; cupy.cuda.Device().synchronize()")
    exe = shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if os.path.exists(p)), None)
    cmd = [exe or "ncu", "--metrics", ",".join(metrics), "--kernel-name", kname, "--launch-count", "1",
           "--print-units", "base", "--csv", sys.executable, "-c", script]     # base units: ns, bytes, never scaled
    shown = "PYTHONPATH=labs_src " + " ".join(cmd[:10]) + f" {sys.executable} -c \"{script}\""
    if not is_live() or exe is None:
        why = "no GPU here" if not is_live() else "ncu is not installed (it ships with the CUDA toolkit)"
        print(f"SKIPPED ({why}). On a GPU machine with Nsight Compute, run:\n  {shown}")
        return None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(build.ROOT / "labs_src"),
                                                                      os.environ.get("PYTHONPATH")]))}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"ncu did not finish in {timeout} s. Run it by hand:\n  {shown}")
        return None
    rows = [l for l in p.stdout.splitlines() if l.startswith('"')]
    if p.returncode or len(rows) < 2:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-6:])
        print(f"ncu could not profile here (exit {p.returncode}):\n{tail}\n"
              f"Profiling may need admin rights (ERR_NVGPUCTRPERM: see NVIDIA's note on GPU performance "
              f"counters). The command:\n  {shown}")
        return None
    import io
    df = pd.read_csv(io.StringIO("\n".join(rows)))
    df = df[["Kernel Name", "Metric Name", "Metric Unit", "Metric Value"]]
    df.insert(2, "meaning", df["Metric Name"].map(metrics))
    return df.reset_index(drop=True)


# ---- the one rule that reads the counters: a limiter ---------------------------------------------------

# The units a launch can saturate (LIMITER_METRICS' labels, busy as a % of their peak) and their names.
UNITS = {"DRAM throughput (% of peak)": "DRAM", "tensor pipe busy (%)": "the tensor pipe",
         "shared memory busy (%)": "shared memory", "XU pipe (exp2) busy (%)": "the XU pipe (exp2)",
         "issue slots busy (%)": "the issue slots"}
NO_COUNTERS = "*No Nsight Compute readings recorded yet (`make ncu` on a GPU with ncu): no counter-based verdict.*"
SATURATED = 80.0        # % of a unit's peak from which it is read as the limiter (Nsight's "high" band)
# The noise band of one reading where no repeated readings are recorded (`make ncu --repeat N` records
# each launch N times and keeps the lowest and highest, `lo` and `hi` in ncu.csv): +-NOISE_PTS points of a
# busy %, +-NOISE_REL of a stall ratio (the spread of repeated single-launch readings of one kernel).
NOISE_PTS, NOISE_REL = 3.0, 0.10


@dataclass(frozen=True)
class Limiter:
    """What limits one launch: kind 'unit' (`what`, `value` % busy) or 'latency' (the top stall, cycles/instruction)."""
    kind: str
    what: str
    value: float
    busiest: str
    busy: float
    tied: tuple = ()

    @property
    def short(self) -> str:
        """The verdict without the stall: which unit sets the pace, or that latency does."""
        if self.kind == "unit":
            return f"{self.what} is near saturation ({self.value:.0f}% busy): it sets the pace"
        return f"no unit is near saturation (the busiest, {self.busiest}, at {self.busy:.0f}%): it is held by latency"

    def __str__(self):
        if self.kind == "unit":
            return self.short
        also = "".join(f", within the noise of *{t}*" for t in self.tied)
        return (f"{self.short}, its warps waiting most on *{self.what}* ({self.value:.2f} cycles per issued "
                f"instruction{also})")


def _band(readings, lo, hi, key, rel: bool):
    v = float(readings[key])
    if lo is not None and hi is not None and key in lo and key in hi and lo[key] == lo[key]:
        return v, float(lo[key]), float(hi[key])
    d = abs(v) * NOISE_REL if rel else NOISE_PTS
    return v, v - d, v + d


def limiter(readings, lo=None, hi=None) -> Limiter | None:
    """The one rule turning one launch's readings {LIMITER_METRICS label: value} (band: lo, hi, else NOISE_*) into
    a limiter: the busiest unit whose band reaches SATURATED, else the top stall reason (overlapping ones tied)."""
    readings = {k: v for k, v in dict(readings).items() if v == v}
    units = {k: _band(readings, lo, hi, k, False) for k in UNITS if k in readings}
    stalls = {k: _band(readings, lo, hi, k, True) for k in readings if str(k).startswith("stall:")}
    if not units and not stalls:
        return None
    busiest = max(units, key=lambda k: units[k][0]) if units else None
    busy = units[busiest][0] if busiest else float("nan")
    near = [k for k in units if units[k][2] >= SATURATED]
    if near:
        k = max(near, key=lambda k: units[k][0])
        return Limiter("unit", UNITS[k], units[k][0], UNITS[k], units[k][0])
    if not stalls:
        return Limiter("latency", "no stall reading", float("nan"), UNITS.get(busiest, "-"), busy)
    top = max(stalls, key=lambda k: stalls[k][0])
    tied = tuple(k[7:] for k in sorted(stalls, key=lambda k: -stalls[k][0])
                 if k != top and stalls[k][2] >= stalls[top][1])
    return Limiter("latency", top[7:], stalls[top][0], UNITS.get(busiest, "-"), busy, tied)


def limiter_of(lim, col: str) -> Limiter | None:
    """`limiter` of one column of a results.limiters table, with its repeated readings' band (attrs lo / hi)."""
    if lim is None or col not in getattr(lim, "columns", ()):
        return None
    band = [lim.attrs[k][col].to_dict() if col in getattr(lim.attrs.get(k), "columns", ()) else None
            for k in ("lo", "hi")]
    return limiter(lim[col].to_dict(), *band)
