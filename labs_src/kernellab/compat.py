"""Names the labs used before the core existed, kept where a learner's saved notebook looks for
them (kernellab.bench.fundamentals, build.variant, check.require, ...). Nothing new uses these."""
from __future__ import annotations

from . import measuring
from .core import bench, build, check, device, launch, results

MOVED = {
    bench: {**{n: getattr(measuring, n) for n in ("fundamentals", "value", "little", "sweep_fraction",
                                                   "inflight", "INFLIGHT_BYTES", "CHAIN", "CHASE_HOPS")},
            **{n: getattr(results, n) for n in ("select", "pick", "ratio", "speedup")},
            "table": results.table, "claims": results.claim_rows},
    build: {n: getattr(launch, n) for n in ("Variant", "variant", "launch", "kernel_args", "record_launches",
                                            "clear_plans", "no_alias")},
    check: {n: getattr(launch, n) for n in ("require", "no_alias", "aligned", "out_like")},
    device: {"say": results.say},
}
for _mod, _names in MOVED.items():
    for _n, _v in _names.items():
        setattr(_mod, _n, _v)
