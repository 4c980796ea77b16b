"""kernellab: the helper package behind every lab. core/ knows no lab (device, build, launch, family, check,
bench, results, cublas, plot); a module or package per lab; labs.py lists the labs and their families;
record, sanitize, explore: tools over all labs."""
import sys as _sys

from .core import device, build, launch, family, check, bench, results, plot  # noqa: F401
from .core.device import mode, is_live, banner  # noqa: F401
from .core.results import say, source as provenance  # noqa: F401  (a sentence's one device)
from .core.check import check as check_close, CheckError  # noqa: F401
from .core.launch import require  # noqa: F401

# The core modules used to live at the package's top level (kernellab.bench, ...): a learner's
# saved notebook that imports them from there keeps working.
for _name in ("device", "build", "launch", "family", "check", "bench", "results", "plot"):
    _sys.modules[f"{__name__}.{_name}"] = _sys.modules[f"{__name__}.core.{_name}"]

__all__ = ["device", "build", "launch", "family", "check", "bench", "results", "plot", "mode", "is_live",
           "banner", "say", "provenance", "require", "CheckError"]

from . import compat as _compat  # noqa: E402,F401  (old names, for saved notebooks)

import pandas as _pd  # noqa: E402

_pd.set_option("display.max_rows", 400)     # results.table keeps tables short itself: no cell hides a quoted number
_pd.set_option("display.max_colwidth", None)
