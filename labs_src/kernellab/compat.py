"""Old spellings, in one place. A learner's saved notebook (a `make lab` copy from an earlier version)
keeps working: each old name resolves through its module's `__getattr__` to today's object and warns
once, naming the new spelling and `make reset LAB=NN` (docs/design.md, "Old names"). Nothing new uses
these; tests/test_workflow.py runs the saved copies."""
from __future__ import annotations

from . import add, add_report, attention, decoder, gemv, measuring, measuring_report, rmsnorm_report, softmax, vision, vit_block
from .core import bench, build, check, device, family, frame, launch, ncu, results
from .core.frame import old_name

def _install(mod, names: dict):
    """mod.__getattr__ (PEP 562): an old name -> (new spelling, today's object), warned once."""
    prefix = mod.__name__.replace("kernellab.core.", "").replace("kernellab.", "")

    def __getattr__(name):
        if name in names:
            new, value = names[name]
            old_name(f"{prefix}.{name}", new)
            return value
        raise AttributeError(f"module {mod.__name__!r} has no attribute {name!r}")
    mod.__getattr__ = __getattr__


def _moved(src, prefix, names):
    return {n: (f"{prefix}.{n}", getattr(src, n)) for n in names}


_install(bench, {**_moved(measuring, "measuring", ("fundamentals", "value", "little", "sweep_fraction", "inflight",
                                                    "INFLIGHT_BYTES", "CHAIN", "CHASE_HOPS")),
                 **_moved(results, "results", ("select", "pick", "ratio", "speedup")),
                 "table": ("results.table", results.table), "claims": ("results.claim_rows", results.claim_rows),
                 "ncu": ("core.ncu.ncu", ncu.ncu), "NCU_METRICS": ("core.ncu.NCU_METRICS", ncu.NCU_METRICS),
                 "TABLE_COLUMNS": ("results.frame(...).columns",
                                   ["case", "name", "median_us", "p10_us", "p90_us", "gbps", "frac_copy", "frac_read",
                                    "warm_us", "host_us", "device", "date", "source"])})
_install(build, _moved(launch, "launch", ("Variant", "variant", "launch", "kernel_args", "record_launches",
                                          "clear_plans", "no_alias")))
_install(check, _moved(launch, "launch", ("require", "no_alias", "aligned", "out_like")))
_install(device, {"say": ("results.say", results.say)})
_install(decoder, {"quantised_limits": ("decoder.gemv_limits", decoder.gemv_limits)})
def _best_variant(df, case):
    """(name, median_us) of the fastest step at one case, as attention.best_variant gave it."""
    name = frame.fastest(df, case)
    return name, results.pick(df, name, "median_us", case=case)


_install(attention, {"best_variant": ("results.fastest(df, case) (and results.pick for its time)", _best_variant),
                     "check_variants": ("check.variants(family, names, cases)",
                                        lambda fam, names=None, cases=None: check.variants(fam, names, cases))})
_install(gemv, {**{n: (f"results.{n}", getattr(results, n)) for n in ("ratio", "compare_text", "roof_text")},
                "CLAIMS": ("docs/claims.csv (results.claims)", None), "BATCHED_CLAIMS": ("docs/claims.csv", None),
                "verdicts": ("results.claims", lambda claims: claims),
                "say_w8a16": ("results.summary(part, '37_w8a16_tiles', '29_int8_w8a16') beside the table",
                              lambda w8t, w8: results.each_device(w8, lambda p: results.summary(p, "37_w8a16_tiles",
                                                                                                "29_int8_w8a16")))})
_install(vision, {**{n: (f"results.{n}", getattr(results, n)) for n in ("ratio", "compare_text", "roof_text")},
                  "claims_table": ("results.claims('05_vision', df, vision.FAMILIES)",
                                   lambda df, rows=None: results.claims("05_vision", df, vision.FAMILIES)),
                  "SEED_CLAIMS": ("docs/claims.csv", None),
                  "frac": ("results.pick(df, name, col, case=case)",
                           lambda df, name, case, col="frac_copy": results.pick(df, name, col, case=case)),
                  "ptx_claims": ("results.claims('05_vision', None, vision.FAMILIES)",
                                 lambda arch="sm_90": results.claims("05_vision", None, vision.FAMILIES)),
                  "say_ablation_rule": ("the lab's markdown", lambda: None)})
_install(softmax, {"device_facts": ("core.device.facts", device.facts),
                   "say_ablation": ("results.ablation(abl, softmax.ABLATION_PAIRS, softmax.ABLATION_STEPS)",
                                    lambda abl: results.ablation(abl, softmax.ABLATION_PAIRS, softmax.ABLATION_STEPS)),
                   "worth_text": ("results.ablation", lambda a: results.summary(a, "05_online_vec4", "04_online")),
                   "say_half_bytes": ("results.each_device(res, softmax.half_said)",
                                      lambda res: results.each_device(res, softmax.half_said))})
_install(measuring_report, {**{f"say_{n}": (f"results.each_device(fund, report.{n}_said)",
                                             lambda fund, n=n: results.each_device(fund, getattr(measuring_report, f"{n}_said")))
                               for n in ("warm", "trips", "ceilings")},
                            **{f"{n}_said": ("the table's rows", lambda part: "(today's lab shows these rows of the table)")
                               for n in ("timers", "launch")}})
_install(add_report, {"say_waves": ("the waves table", lambda wv, n: None),
                      "targets_said": ("results.targets(add.ADD.targets, big)",
                                       lambda part: results.targets_met(results.targets(add.ADD.targets, part)))})
_install(rmsnorm_report, {"say_ablation_credit": ("the lab's markdown", lambda: None)})
_install(vit_block, {"graph_sentence": ("the graph and targets tables", lambda p: ""),
                     "say_speed": ("results.summary(bt, 'block (lab kernels + cuBLAS)', against)",
                                   lambda bt, speed=None: [results.say(results.summary(bt, "block (lab kernels + cuBLAS)", b))
                                                           for b in ("torch eager block", "torch eager block (SDPA)")])})

# Family's fields were upper-case module constants once (softmax.VARIANTS, fam.BEST, ...).
_FIELDS = {"NAME": "name", "FAMILY": "kernels", "VARIANTS": "variants", "BASELINES": "baselines", "BEST": "default",
           "SHAPES": "shapes", "CHECK_CASES": "check_cases", "RECORD_CASES": "record_cases", "OP": "op"}


def _family_field(old, new):
    def get(self):
        old_name(f"<family>.{old}", f"<family>.{new}")
        return getattr(self, new)
    return property(get)


for _old, _new in _FIELDS.items():
    setattr(family.Family, _old, _family_field(_old, _new))

# Lab 06's readers once took the graph run as well (shares(bd, gr), plot_breakdown(bd, gr), graph_table(gr),
# tokens_per_s(graph run)): today's functions, taking the old arguments too.
_shares, _plot_breakdown = vit_block.shares, vit_block.plot_breakdown
_graph_table, _tokens_per_s = vit_block.graph_table, vit_block.tokens_per_s
vit_block.sentence = results.unless_missing
vit_block.shares = lambda bd, gr=None: _shares(bd)
vit_block.plot_breakdown = lambda bd, name="06_vit_breakdown", *_: _plot_breakdown(
    bd, name if isinstance(name, str) else "06_vit_breakdown")


def _old_graph_table(gr, bd=None):
    """graph_table(gr) as lab 06 once called it (no breakdown run): also under its old column names."""
    gt = _graph_table(gr, bd)
    if bd is None and len(gt):
        gt = gt.assign(**{"graph GPU us": gt["GPU us (replay)"], "eager GPU us": gt["eager behind spacer us (graph run)"]})
    return gt


vit_block.graph_table = _old_graph_table
vit_block.tokens_per_s = lambda gt: _tokens_per_s(gt if gt is None or "what" in gt or not len(gt)
                                                  else _graph_table(gt))   # once: the graph run's rows
