"""How the estimate's numbers are rounded for its output (never before they are divided)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def rounded(x: Any, nd: int = 3) -> float | None:
    """x to nd decimals; None for a missing or non-finite value."""
    return (
        None
        if x is None or (isinstance(x, float) and not math.isfinite(x)) or pd.isna(x)
        else round(float(x), nd)
    )


def round_hours(x: float) -> float | None:
    """Hours to 5 significant figures: a small pilot's 0.0689 h and a sweep's 1,234.5 h keep
    the same relative precision (fixed decimals turned the total of 0.0689 h into 0.069)."""
    return None if not math.isfinite(x) else float(f"{x:.5g}")
