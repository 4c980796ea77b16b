"""The one reader of results frames (live or recorded), and the one place that turns them into
sentences and verdicts: the face of three modules, so a lab reads every name as results.X.

frame.py    reading: select, one_source, source, pick, cases, fastest, best, devices, timing_rules,
            print_once, the names a recorded row may carry (RENAMED); the live / recorded switch
            (recorded, mark_stale, live_or_recorded) lives with the device record in store.py
verdict.py  Measured with its band, ratio bands, the one verdict rule (its text there), targets, and the
            seed's claims (docs/claims.csv) judged by it
prose.py    tables and sentences: table, brief, ptxas_brief, claims_brief, device_table, host_text, summary, ablation, times,
            compare_text, roof_text, unless_missing, each_device, say"""
from __future__ import annotations

from .frame import (  # noqa: F401
    RENAMED, _SAID, best, cases, devices, fastest, one_source, pick, print_once, renamed, select, source, timing_rules)
from .store import live_or_recorded, mark_stale, recorded  # noqa: F401  (the live / recorded switch)
from .verdict import (  # noqa: F401
    CLAIM_ARCH, CLAIM_ARCH_FALLBACK, CLAIM_MEASURES, HOLD, NAN, OUTCOMES, Measured, _count, _counted, _lab_measure,
    _ncu_reading, band, checked, claim_measure, claim_rows, claims, claims_file, claims_summary, frac_band,
    limiters, quantity_verdict, ratio, ratio_band, speedup, target_outcome, targets, targets_met, verdict,
    within_noise)
from .prose import (  # noqa: F401
    FLOOR_NAMES, HOST_TARGET, LIBRARY_NAMES, MAX_ROWS, MISSING, ablation, brief, compare_text, device_table,
    claims_brief, each_device, host_text, ptxas_brief, roof_text, say, short_device, summary, table, times, unless_missing)
