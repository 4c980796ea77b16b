"""Nsight Compute, where it is installed and allowed: the seeds' counter readings for one launch of
one step, in a child process under `ncu`; without a GPU or ncu, the command to run."""
from __future__ import annotations

from . import build
from .device import is_live
from .family import of

# ---- Nsight Compute, where it is installed and allowed ------------------------------------------

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
    """Collect the seed's Nsight Compute metrics for one launch of one variant, in a child
    process under `ncu`. name: a step, or one of the family's baselines (then give `kernel`).
    kernel: a regex for the kernel to profile (default: the family's kernel with the variant's
    step number, e.g. ^add_07_). Returns a table, or prints the command to run where ncu is
    missing, there is no GPU, or profiling is not permitted."""
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
