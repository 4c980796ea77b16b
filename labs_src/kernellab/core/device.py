"""Device facts, the two modes (live GPU vs compile-only), and recorded results."""
from __future__ import annotations

import datetime as _dt
import json
import functools
import importlib
import os
import platform
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = ROOT / "figures" / "reference"
FIGURES = ROOT / "figures"

# Peak DRAM bandwidth of the Orin boards (GB/s). On Tegra the memory-clock attribute
# is not the LPDDR5 clock, so a bandwidth computed from it is wrong: use this table.
ORIN_PEAK_GBPS = {"agx": 204.8, "nx": 102.4, "nano": 68.0, "nano super": 102.0}
ORIN_SMS = {"agx": 16, "nx": 8, "nano": 8, "nano super": 8}      # datasheets: AGX 64 GB, NX 16 GB, Nano 8 GB


@functools.lru_cache(maxsize=None)
def is_live() -> bool:
    """True when a CUDA GPU is usable. KERNELLAB_MODE=compile-only forces the no-GPU path."""
    if os.environ.get("KERNELLAB_MODE", "").lower() in ("compile", "compile-only", "cpu"):
        return False
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def mode() -> str:
    return "live" if is_live() else "compile-only"


class NoGPU(RuntimeError):
    """Raised when something that needs a GPU is asked for in compile-only mode."""


def need_gpu(what: str) -> None:
    if not is_live():
        raise NoGPU(f"{what} needs a CUDA GPU; this session is compile-only "
                    "(see kernellab.device.banner()).")


def jetson_model() -> str | None:
    """'agx', 'nx', 'nano' or 'nano super' on a Jetson Orin, else None."""
    try:
        model = Path("/proc/device-tree/model").read_text(errors="ignore").lower()
    except OSError:
        return None
    if "orin" not in model:
        return None
    if "nano" in model:
        return "nano super" if "super" in model else "nano"
    return "nx" if "nx" in model else "agx"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@functools.lru_cache(maxsize=None)
def info() -> dict:
    """The facts of device 0."""
    need_gpu("device.info()")
    import cupy
    dev = cupy.cuda.Device(0)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    attrs = dev.attributes
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    jet = jetson_model()
    d = {
        "name": name,
        "cc": f"{props['major']}.{props['minor']}",
        "arch": f"sm_{props['major']}{props['minor']}",
        "sms": attrs.get("MultiProcessorCount"),
        "l2_bytes": attrs.get("L2CacheSize"),
        "integrated": bool(attrs.get("Integrated", 0)),
        "mem_bytes": dev.mem_info[1],
        "jetson": jet,
        "peak_gbps": ORIN_PEAK_GBPS.get(jet) if jet else None,
        "sm_clock_mhz": (attrs.get("ClockRate") or 0) / 1000 or None,
        "slug": slug(name),
    }
    # Peak DRAM bandwidth from the memory clock and bus width, except on Tegra (see above).
    clk, bus = attrs.get("MemoryClockRate"), attrs.get("GlobalMemoryBusWidth")
    if not jet and clk and bus:
        d["peak_gbps"] = round(2 * clk * 1e3 * bus / 8 / 1e9, 1)
    return d


def banner() -> None:
    """One line saying where this notebook runs and what that means."""
    if is_live():
        d = info()
        if d["jetson"] and jetson_clocks().get("warning"):
            print(f"WARNING (Jetson): {jetson_clocks()['warning']}")
        peak = f", datasheet peak {d['peak_gbps']} GB/s" if d["peak_gbps"] else ""
        kind = "integrated (Jetson " + d["jetson"] + ")" if d["jetson"] else (
            "integrated" if d["integrated"] else "discrete")
        print(f"Mode: LIVE on {d['name']} ({d['arch']}, {d['sms']} SMs, "
              f"{d['l2_bytes'] / 2**20:.0f} MiB L2, {kind}{peak})")
    else:
        devs = ", ".join(m["device"] for m in recorded_meta().values()) or "none yet"
        print("Mode: COMPILE-ONLY (no CUDA GPU found). Kernels compile with NVRTC for sm_87 and sm_90; "
              "checks run the NumPy references only; timings are RECORDED results "
              f"(recorded devices: {devs}).")


def facts(df=None) -> dict:
    """SMs, L2, arch and name of the device `df` was measured on (df=None: this GPU, else the first recorded)."""
    if (df is None or (len(df) and (df["source"] == "live").any())) and is_live():
        d = info()
        return {"sms": d["sms"], "l2_bytes": d["l2_bytes"], "arch": d["arch"], "device": d["name"]}
    dev = df["device"].iloc[0] if df is not None and len(df) else None
    for meta in recorded_meta().values():
        if (dev is None or meta.get("device") == dev) and meta.get("sms"):
            return {"sms": meta["sms"], "l2_bytes": meta["l2_bytes"], "arch": meta["arch"], "device": meta["device"]}
    return {}


def live_only(would: str, fn):
    """fn() on a GPU; without one, a loud skip saying what a GPU would show, and None."""
    if is_live():
        return fn()
    print(f"SKIPPED (compile-only): on a GPU this {would}")
    return None


def now() -> str:
    return _dt.date.today().isoformat()


def versions() -> dict:
    v = {"python": platform.python_version()}
    try:
        import cupy
        v["cupy"] = cupy.__version__
        v["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        v["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:
        pass
    return v


# ---- recorded results: their home is core/store.py --------------------------------------------------

TIMING_RULES = 2    # the bench rules a lab's record was timed under, written beside it in meta.json:
#                     2: a reads_back launcher's GPU time is its launches alone (its check is host time)


def recorded_meta() -> dict:
    """{slug: meta.json} of every recorded device."""
    return {meta.parent.name: json.loads(meta.read_text()) for meta in sorted(REFERENCE.glob("*/meta.json"))}


# core/store.py imports this module: store is looked up at call time, so the import graph stays one-way
def save_recorded(lab: str, df, extra_meta: dict | None = None):
    """The old name of store.save_recorded."""
    return importlib.import_module(__package__ + ".store").save_recorded(lab, df, extra_meta)


def load_recorded(lab: str):
    """The old name of store.load_recorded."""
    return importlib.import_module(__package__ + ".store").load_recorded(lab)


def provenance(df) -> str:
    """'live on <device>, <date>' / 'recorded on <device>, <date>' of a results frame."""
    if df is None or len(df) == 0 or "source" not in df:
        return "no data"
    return "; ".join(f"{src} on {dev}, {date}" for src, dev, date in
                     df[["source", "device", "date"]].drop_duplicates().values)


def torch():
    """The torch module (the optional baselines' library), or None where it is not installed."""
    try:
        import torch as t
        return t
    except ImportError:
        return None


def torch_baseline(make):
    """A baseline factory: make(torch, *DLPack views of the arrays) -> a call; None without torch."""
    @functools.wraps(make)
    def baseline(*arrays):
        t = torch()
        return None if t is None else make(t, *(t.from_dlpack(a) for a in arrays))
    return baseline


def release_cached() -> None:
    """Hand CuPy's and torch's cached pool blocks back to the driver, for other processes on the GPU."""
    import sys
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()
    t = sys.modules.get("torch")
    if t is not None and t.cuda.is_initialized():
        t.cuda.empty_cache()


# ---- Jetson: power mode and clocks (a cold clock can fake a 4.5x slowdown) ---------------------

def jetson_clocks(root: str = "/") -> dict:
    """A Jetson's power mode, GPU and EMC clocks (None where unreadable), clocks_fixed (as `sudo jetson_clocks`
    sets them; None when unknown) and a warning; {} off a Jetson. `root`: a fake / (tests)."""
    import glob
    import subprocess

    def read(p) -> str:
        try:
            return Path(p).read_text(errors="ignore").strip().strip("\x00")
        except OSError:
            return ""

    def mhz(p):
        v = read(p)
        return round(int(v) / 1e6) if v.isdigit() else None

    base = Path(root)
    if not ((base / "etc/nv_tegra_release").exists() or "tegra" in read(base / "proc/device-tree/compatible").lower()):
        return {}
    out = {"power_mode": None, "power_mode_id": None}
    try:
        q = subprocess.run(["nvpmodel", "-q"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        q = ""
    if m := re.search(r"NV Power Mode:\s*(\S+)", q):
        out["power_mode"] = m.group(1)
        if n := re.search(r"^\s*(\d+)\s*$", q[m.end():], re.M):
            out["power_mode_id"] = int(n.group(1))
    gpu = next((d for d in sorted(glob.glob(str(base / "sys/class/devfreq/*")))
                if re.search(r"gpu|ga10b|gv11b|gp10b", Path(d).name)), None)
    for key, f in (("gpu_clock_mhz", "cur_freq"), ("gpu_clock_min_mhz", "min_freq"), ("gpu_clock_max_mhz", "max_freq")):
        out[key] = mhz(Path(gpu) / f) if gpu else None
    emc = base / "sys/kernel/debug/bpmp/debug/clk/emc"
    out.update(emc_clock_mhz=mhz(emc / "rate"), emc_clock_max_mhz=mhz(emc / "max_rate"))
    gpu_fixed = None if None in (out["gpu_clock_min_mhz"], out["gpu_clock_max_mhz"]) \
        else out["gpu_clock_min_mhz"] == out["gpu_clock_max_mhz"]
    emc_fixed = None if None in (out["emc_clock_mhz"], out["emc_clock_max_mhz"]) \
        else out["emc_clock_mhz"] >= out["emc_clock_max_mhz"]
    out["clocks_fixed"] = None if gpu_fixed is None and emc_fixed is None else gpu_fixed is not False and emc_fixed is not False
    emc_txt = "" if emc_fixed is None else f", EMC {out['emc_clock_mhz']} of {out['emc_clock_max_mhz']} MHz"
    out["warning"] = {
        False: f"clocks are not fixed (GPU {out['gpu_clock_min_mhz']}-{out['gpu_clock_max_mhz']} MHz{emc_txt}): a cold "
               "clock can make a kernel look several times slower than it is; run `sudo nvpmodel -m 0` (MAXN) and "
               "`sudo jetson_clocks` before measuring",
        None: "clock state unknown (sysfs not readable here): run `sudo jetson_clocks` before measuring",
    }.get(out["clocks_fixed"], "")
    return out
