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

# Names later sessions moved or renamed (found by scanning every committed version of the labs).
from . import attention, decoder, softmax  # noqa: E402
from .core import ncu as _ncu  # noqa: E402

bench.ncu, bench.NCU_METRICS = _ncu.ncu, _ncu.NCU_METRICS
bench.TABLE_COLUMNS = ["case", "name", "median_us", "p10_us", "p90_us", "gbps", "frac_copy", "frac_read",
                       "warm_us", "host_us", "device", "date", "source"]
softmax.device_facts = device.facts
vision.frac = lambda df, name, case, col="frac_copy": results.pick(df, name, col, case=case)
vision.ptx_claims = lambda arch="sm_90": results.claims("05_vision", None, vision.FAMILIES)
decoder.quantised_limits = decoder.gemv_limits
attention.check_variants = lambda fam, names=None, cases=None: check.variants(fam, names, cases)
vit_block.sentence = results.unless_missing
_shares, _plot_breakdown = vit_block.shares, vit_block.plot_breakdown
# lab 06 once passed the graph run too: shares(bd, gr), plot_breakdown(bd, gr); both now read one breakdown run
vit_block.shares = lambda bd, gr=None: _shares(bd)
vit_block.plot_breakdown = lambda bd, name="06_vit_breakdown", *_: _plot_breakdown(
    bd, name if isinstance(name, str) else "06_vit_breakdown")
_graph_table, _tokens_per_s = vit_block.graph_table, vit_block.tokens_per_s


def _old_graph_table(gr, bd=None):
    """graph_table(gr) as lab 06 once called it (no breakdown run): also under its old column names."""
    gt = _graph_table(gr, bd)
    if bd is None and len(gt):
        gt = gt.assign(**{"graph GPU us": gt["GPU us (replay)"], "eager GPU us": gt["eager behind spacer us (graph run)"]})
    return gt


vit_block.graph_table = _old_graph_table
vit_block.tokens_per_s = lambda gt: _tokens_per_s(gt if gt is None or "what" in gt or not len(gt)
                                                  else _graph_table(gt))   # once: the graph run's rows
