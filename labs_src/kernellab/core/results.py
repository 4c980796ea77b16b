"""The face a lab reads (results.X): frame.py (reading frames), verdict.py (bands, the verdict rule, targets,
claims), prose.py (tables and sentences) and store.py's live / recorded switch."""
from __future__ import annotations

from .frame import (  # noqa: F401
    best, cases, devices, fastest, one_source, pick, print_once, select, source, sweep_best, sweep_worst_frac, timing_rules)
from .store import live_or_recorded, recorded  # noqa: F401  (the live / recorded switch)
from .verdict import (  # noqa: F401
    CLAIM_MEASURES, HOLD, NAN, OUTCOMES, Measured, _ncu_reading, band, checked, claim_measure, claim_rows, claims, claims_file,
    claims_summary, frac_band, limiters, quantity_verdict, ratio, ratio_band, speedup, target_outcome, targets,
    targets_met, verdict, within_noise, worst_ratio)
from .prose import (  # noqa: F401
    HOST_TARGET, MAX_ROWS, MISSING, ablation, brief, compare_text, device_table, claims_brief, each_device,
    host_text, pairs, ptxas_brief, roof_text, say, short_device, summary, sweep_table, table, times, unless_missing)
