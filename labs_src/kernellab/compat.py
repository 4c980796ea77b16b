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

# Labs' own readers and claim lists, replaced by results (and docs/claims.csv).
from . import gemv, vision, vit_block  # noqa: E402

for _mod in (vision, gemv):
    for _n in ("ratio", "compare_text", "roof_text"):
        setattr(_mod, _n, getattr(results, _n))
vision.claims_table = lambda df, rows=None: results.claims("05_vision", df, vision.FAMILIES)
vision.SEED_CLAIMS = gemv.CLAIMS = gemv.BATCHED_CLAIMS = None
gemv.verdicts = lambda claims: claims
vit_block.claims = lambda bt, bd, gr: results.claims("06_vit_block", bt, vit_block.FAMILIES)
